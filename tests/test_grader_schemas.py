"""Each grader family's entry schema, word for word, as `otel-tooleval schema` prints it.

The schema is what an editor shows a user writing a config: its property names, descriptions,
titles, enums and defaults are user-facing text, so a change to any of them should be a decision,
not an accident. Each family's schema is kept in tests/data/schemas/<type>.json; after an
intended change, rewrite them with ``OTEL_TOOLEVAL_WRITE_GOLDEN=1 pytest tests/test_grader_schemas.py``
and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval.cli import main
from otel_tooleval.graders.registry import families

DATA = Path(__file__).resolve().parent / "data" / "schemas"
WRITE = os.environ.get("OTEL_TOOLEVAL_WRITE_GOLDEN") == "1"


def _family_schema(kind: str) -> dict[str, Any]:
    family = next(f for f in families() if f.type == kind)
    assert family.schema is not None
    return family.schema()


@pytest.mark.parametrize("kind", sorted(f.type for f in families()))
def test_family_schema_word_for_word(kind: str) -> None:
    path = DATA / f"{kind}.json"
    got = _family_schema(kind)
    if WRITE:
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert got == json.loads(path.read_text()), (
        f"{kind}'s schema changed; if intended, rewrite with OTEL_TOOLEVAL_WRITE_GOLDEN=1")


def test_every_family_has_a_kept_schema() -> None:
    kept = sorted(p.stem for p in DATA.glob("*.json"))
    assert kept == sorted(f.type for f in families())


def test_cli_schema_carries_each_family_word_for_word(capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI's full schema lists every family's entry under graders:, descriptions intact."""
    assert main(["schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    text = json.dumps(printed)
    for path in DATA.glob("*.json"):
        kept = json.loads(path.read_text())
        for description in _descriptions(kept):
            assert json.dumps(description) in text, (path.stem, description)


def _descriptions(node: Any) -> list[str]:
    if isinstance(node, dict):
        out = [node["description"]] if isinstance(node.get("description"), str) else []
        return out + [d for v in node.values() for d in _descriptions(v)]
    if isinstance(node, list):
        return [d for v in node for d in _descriptions(v)]
    return []
