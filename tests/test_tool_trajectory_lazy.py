"""``tool_trajectory``'s sequence-mode details: the per-entry rows and the violations are
written out when first read (``_Details``), and read like the plain dict they stand for."""

from __future__ import annotations

import dataclasses
import json
import pickle
from typing import Any

import pytest

from otel_tooleval import load_config
from otel_tooleval.graders.tool_trajectory import ToolTrajectoryGrader
from otel_tooleval.outputs.marks import call_marks
from otel_tooleval.violations import flagged_calls
from tests.support.runs import call, run_of

SCRIPT = [call("read", {"path": "a"}, duration_ms=5), call("read", {"path": "b"}, duration_ms=50),
          call("write", {"path": "b"}, duration_ms=5), call("test", {}, pending=True),
          call("bash", {"command": "ls"}, duration_ms=5)]
EXPECTED = [{"tool": "read", "args": {"path": "a"}, "max_duration_ms": 10},
            {"tool": "write", "args": {"path": "b"}},
            {"tool": "read", "args": {"path": "b"}, "max_duration_ms": 10},
            {"tool": "test", "max_duration_ms": 10}]


def grader_of(mode: str, include_values: bool = False) -> ToolTrajectoryGrader:
    config: dict[str, Any] = {"graders": [{"type": "tool_trajectory", "mode": mode,
                                           "expected": EXPECTED}]}
    if include_values:
        config["emit"] = {"include_values": True}
    grader = load_config(config).graders[0].grader
    assert isinstance(grader, ToolTrajectoryGrader)
    return grader


def counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[str]:
    built: list[str] = []
    real = getattr(ToolTrajectoryGrader, name)

    def wrapper(self: ToolTrajectoryGrader, *args: Any) -> Any:
        built.append(name)
        return real(self, *args)

    monkeypatch.setattr(ToolTrajectoryGrader, name, wrapper)
    return built


@pytest.mark.parametrize("mode", ["exact", "in_order"])
def test_rows_and_violations_are_built_on_first_read_only(
        monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    rows = counting(monkeypatch, f"_{mode}_rows")
    marks = counting(monkeypatch, f"_{mode}_violations")
    result = grader_of(mode).grade(run_of(SCRIPT))
    assert not result.passed
    # What the live processor reads: the explanation, the metrics' counts, the violations.
    assert result.explanation and result.details.get("tool_selection_counts") is None
    assert "entries" in result.details and "violations" in result.details
    assert rows == [] and marks == []
    assert flagged_calls([result])
    assert rows == [] and marks == [f"_{mode}_violations"]
    entries = result.details["entries"]
    assert entries is result.details["entries"] and len(entries) == len(EXPECTED)
    assert rows == [f"_{mode}_rows"]
    result.to_dict()
    assert rows == [f"_{mode}_rows"] and len(marks) == 1


def test_exact_rows_and_violations() -> None:
    details = grader_of("exact").grade(run_of(SCRIPT)).details
    assert details["entries"] == [
        {"index": 0, "tool": "read", "args_checked": True, "call": 0, "actual_tool": "read",
         "max_duration_ms": 10, "duration_ms": 5.0, "latency": "hit"},
        {"index": 1, "tool": "write", "args_checked": True, "call": None, "actual_tool": "read"},
        {"index": 2, "tool": "read", "args_checked": True, "call": None, "actual_tool": "write",
         "max_duration_ms": 10, "duration_ms": None, "latency": "miss"},
        {"index": 3, "tool": "test", "args_checked": False, "call": 3, "actual_tool": "test",
         "max_duration_ms": 10, "duration_ms": None, "latency": "neutral"},
    ]
    assert [(v["call"], v["tool"], v["reason"]) for v in details["violations"]] == [
        (1, "read", "another tool than entry 1 ('write')"),
        (2, "write", "another tool than entry 2 ('read')"),
        (4, "bash", "extra call beyond the 4 expected"),
    ]
    assert details["extra_calls"] == [4]


def test_in_order_rows_and_violations() -> None:
    result = grader_of("in_order", include_values=True).grade(run_of(SCRIPT))
    rows = result.details["entries"]
    # Two largest matchings score alike; the earlier calls win: read b (call 1, slow).
    assert [row["call"] for row in rows] == [0, None, 1, 3]
    assert [row.get("latency") for row in rows] == ["hit", None, "miss", "neutral"]
    assert rows[2]["duration_ms"] == 50.0
    assert rows[2]["arguments"] == {"path": "b"} and rows[2]["expected_args"] == {"path": "b"}
    assert [(v["call"], v["tool"], v["reason"]) for v in result.details["violations"]] == [
        (1, "read", "over the 10 ms limit of entry 2 ('read')")]
    fast = grader_of("in_order").grade(run_of([
        call("read", {"path": "a"}, duration_ms=5), call("write", {"path": "b"})]))
    assert "violations" not in fast.details and fast.details["hits"] == 2


@pytest.mark.parametrize("mode", ["exact", "in_order"])
def test_the_details_read_as_the_plain_dict(mode: str) -> None:
    result = grader_of(mode, include_values=True).grade(run_of(SCRIPT))
    copy = pickle.loads(pickle.dumps(result.details))
    assert type(copy) is dict
    assert copy == dict(result.details) == result.details
    assert list(copy) == list(result.details) == [
        "mode", "threshold", "hits", "expected", "actual", "aspects", "latency", "entries",
        *(["extra_calls"] if mode == "exact" else []), "violations"]
    assert repr(result.details) == repr(copy)
    assert len(result.details) == len(copy)
    fresh = grader_of(mode, include_values=True).grade(run_of(SCRIPT))
    plain = dataclasses.replace(fresh, details=copy)
    assert json.dumps(fresh.to_dict()) == json.dumps(plain.to_dict())
    # The report's marks per call read the mapping as they read a dict.
    again = grader_of(mode).grade(run_of(SCRIPT))
    assert call_marks(again, len(SCRIPT)) == call_marks(
        dataclasses.replace(again, details=dict(again.details)), len(SCRIPT)) != {}
    with pytest.raises(TypeError):
        result.details["hits"] = 0  # type: ignore[index]
