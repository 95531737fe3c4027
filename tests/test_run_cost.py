"""What the cheaper bookkeeping of a run (issue 19, item 3) must keep: the row each tool span is
read with, and what a processor without graders still sends."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from otel_tooleval.config import config_from_mapping
from otel_tooleval.conventions import calls
from otel_tooleval.conventions.calls import tool_row
from otel_tooleval.conventions.registry import TOOL_CONVENTIONS
from otel_tooleval.conventions.spec import ToolConvention
from otel_tooleval.model import SpanRecord
from tests.support.harness import Harness


def reference_row(attrs: Mapping[str, Any], scope: str) -> ToolConvention | None:
    """The first row whose name, condition and scope fit, by a loop over every row."""
    for conv in TOOL_CONVENTIONS:
        if conv.name is not None and attrs.get(conv.name) is None:
            continue
        if conv.when is not None and attrs.get(conv.when[0]) != conv.when[1]:
            continue
        if conv.scope is None or scope.startswith(conv.scope):
            return conv
    return None


def row_attributes(conv: ToolConvention) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    if conv.name is not None:
        attrs[conv.name] = "lookup"
    if conv.when is not None:
        attrs[conv.when[0]] = conv.when[1]
    return attrs


SCOPES = sorted({"", "bench", "my.app", *(c.scope for c in TOOL_CONVENTIONS if c.scope),
                 *(c.scope + ".sub" for c in TOOL_CONVENTIONS if c.scope)})


def cases() -> Iterator[dict[str, Any]]:
    rows = [row_attributes(c) for c in TOOL_CONVENTIONS]
    yield {}
    yield {"gen_ai.tool.name": None}                      # a name key without a value
    yield {"openinference.span.kind": "LLM", "tool.name": None}
    yield {"mlflow.spanType": "TOOL"}                     # the row wants the JSON text
    for attrs in rows:
        yield attrs
        for other in rows:                                # two rows fit: the first wins
            yield {**other, **attrs}


@pytest.mark.parametrize("scope", SCOPES)
def test_tool_row_is_the_first_row_that_fits(scope: str) -> None:
    checked = 0
    for attrs in cases():
        record = SpanRecord(1, 2, 1, "execute_tool x", 0, 1, attrs, scope=scope)
        assert tool_row(record) is reference_row(attrs, scope), (scope, attrs)
        checked += 1
    assert checked > len(TOOL_CONVENTIONS) ** 2


def test_tool_row_cache_stays_bounded() -> None:
    gen_ai = next(c for c in TOOL_CONVENTIONS if c.name == "gen_ai.tool.name" and c.scope is None)
    attrs = {"gen_ai.tool.name": "search"}
    for i in range(calls._MAX_PICKERS * 2 + 3):
        record = SpanRecord(1, 2, 1, "s", 0, 1, attrs, scope=f"scope.{i}")
        assert tool_row(record) is gen_ai
        assert len(calls._PICKERS) <= calls._MAX_PICKERS
    strands = {"gen_ai.tool.name": "search"}
    row = tool_row(SpanRecord(1, 2, 1, "s", 0, 1, strands, scope="strands.agent"))
    assert row is not None and row.scope == "strands"


# -- a processor without graders: runs collected and summarised, nothing graded --------------

@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness(config_from_mapping({}, allow_no_graders=True))
    yield harness
    harness.close()


def test_without_graders_the_root_copy_carries_the_summary_only(h: Harness) -> None:
    h.agent_run(["search", "read", "search"], agent="planner")
    assert h.flush()
    (root,) = h.by_name("invoke_agent planner")
    attrs = dict(root.attributes or {})
    assert attrs["tooleval.passed"] is True
    assert attrs["tooleval.tool_calls"] == 3
    assert "tooleval.failed" not in attrs
    assert not [e for e in root.events if e.name == "gen_ai.evaluation.result"]
    assert h.logs.get_finished_logs() == ()
    runs = {(p.attributes["gen_ai.agent.name"], p.attributes["tooleval.passed"]): p.value
            for p in h.metric_points("tooleval.runs")}
    assert runs == {("planner", True): 1}
    assert h.processor.stats()["runs"] == 1
