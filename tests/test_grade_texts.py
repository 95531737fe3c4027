"""What a user reads in each grade, word for word: score, label, explanation and details.

tests/data/grades/families.yaml holds several graders of every family (passing, failing, and
listing past their "... and N more" limits); they grade the runs of the recorded golden trace
tests/data/files/traces.otlp.json, and each run's results are kept in
tests/data/grades/traces.otlp.grades.json; with ``emit: {include_values: true}`` (the values of
arguments, results and submissions shown) in traces.otlp.grades.values.json. The explanations and the keys of details are part of
the grade JSON users and dashboards read, so a change to one should be a decision: after an
intended change, rewrite the kept results with
``OTEL_TOOLEVAL_WRITE_GOLDEN=1 pytest tests/test_grade_texts.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval.cli import main

DATA = Path(__file__).resolve().parent / "data"
CONFIG = DATA / "grades" / "families.yaml"
TRACE = DATA / "files" / "traces.otlp.json"
KEPT = {False: DATA / "grades" / "traces.otlp.grades.json",
        True: DATA / "grades" / "traces.otlp.grades.values.json"}
WRITE = os.environ.get("OTEL_TOOLEVAL_WRITE_GOLDEN") == "1"
AGENTS = ["orchestrator", "planner", "researcher", "support"]     # the trace's agent runs


def _grade(values: bool, folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Each test grades the trace itself (no shared fixture): what it reads is what it ran."""
    config = folder / "graders.yaml"
    config.write_text(CONFIG.read_text() + f"emit: {{include_values: {str(values).lower()}}}\n")
    out = folder / "grades.json"
    assert main(["grade", str(TRACE), "-c", str(config), "-f", "json", "-o", str(out),
                 "--allow-input-problems"]) == 1          # some graders fail, by design
    doc = json.loads(out.read_text())
    runs = {run["agent"]: run["results"] for run in doc["runs"]}
    if WRITE:
        KEPT[values].write_text(
            json.dumps(runs, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    return runs


def _kept(values: bool = False) -> dict[str, list[dict[str, Any]]]:
    return json.loads(KEPT[values].read_text())


@pytest.mark.parametrize("values", [False, True], ids=["no-values", "include-values"])
def test_each_grade_reads_as_kept(values: bool, tmp_path: Path) -> None:
    runs = _grade(values, tmp_path)
    assert sorted(runs) == sorted(_kept(values)) == AGENTS
    for agent in AGENTS:
        kept = {r["name"]: r for r in _kept(values)[agent]}
        got = {r["name"]: r for r in runs[agent]}
        assert sorted(got) == sorted(kept)
        for name, result in got.items():
            want = kept[name]
            for key in ("type", "score", "passed", "label", "error"):
                assert result[key] == want[key], (agent, name, key)
            assert result["explanation"] == want["explanation"], (agent, name)
            assert result["details"] == want["details"], (agent, name)


def test_values_are_shown_only_when_asked() -> None:
    """include_values adds what was compared (arguments, results, submissions), never less."""
    plain, shown = _kept(False), _kept(True)
    for agent in AGENTS:
        for a, b in zip(plain[agent], shown[agent], strict=True):
            assert (a["name"], a["score"], a["label"]) == (b["name"], b["score"], b["label"])
            assert set(a["details"]) <= set(b["details"]), (agent, a["name"])
    assert "Submission: 'ok'" in json.dumps(shown) and "Submission: " not in json.dumps(plain)


def test_every_family_is_graded() -> None:
    from otel_tooleval.graders.registry import families

    types = {r["type"] for results in _kept().values() for r in results}
    assert sorted(types) == sorted(f.type for f in families())
