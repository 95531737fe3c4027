"""Equal-function sets: every example of seeds/tool-selection-f1.txt and SEMANTICS 3's rules."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import otel_tooleval.graders.function_sets  # noqa: F401  (registers the family)
from otel_tooleval import ConfigError, load_config
from otel_tooleval.emit.metrics import VerdictMetrics
from otel_tooleval.graders import function_sets
from otel_tooleval.graders.function_sets import (
    SelectionScore,
    aggregate_by,
    micro_average,
)
from otel_tooleval.grading import grade_run
from otel_tooleval.model import GradeResult, RunReport
from otel_tooleval.schema import config_schema
from tests.support.runs import call, grade, run_of


def on(server: str, tool: str, **kwargs: Any) -> dict[str, Any]:
    """A call of ``tool`` on MCP server ``server`` (the mcptest trace's {name, server})."""
    return call(tool, attrs={"mcp.server.name": server}, **kwargs)


def sets(classes: list[dict[str, Any]], expect: Any = None,
         **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "equal_function_sets", "classes": classes, **extra}
    if expect is not None:
        entry["expect"] = expect
    return {"graders": [entry]}


SEARCH = {"name": "search", "members": ["brave.web_search", "google.search"]}
FETCH = {"name": "fetch", "members": ["http.get"]}


def counts(r: GradeResult) -> tuple[int, int, int]:
    c = r.details["tool_selection_counts"]
    return c["tp"], c["fp"], c["fn"]


def percents(r: GradeResult) -> tuple[int, int, int]:
    p = r.details["tool_selection"]
    return p["precision"], p["recall"], p["f1"]


# -- the page's worked example, pasted as mcptest writes it ---------------------------------------

PAGE_TEST = """
graders:
- name: research-agent picks search then fetch
  type: agent
  agent: researcher
  runs: 1
  equal_function_sets:
    classes:
    - name: search
      members:
      - brave.web_search
      - google.search
    - name: fetch
      members:
      - http.get
    expect:
    - tool_selection.f1: { ">=": 80 }
"""

FIRST_RUN = [on("brave", "web_search"), on("http", "get")]
SECOND_RUN = [on("google", "search"), on("shell", "exec")]


def test_worked_example_first_run_two_true_positives() -> None:
    r = grade(PAGE_TEST, FIRST_RUN, agent="researcher")
    assert r.type == "equal_function_sets"
    assert r.name == "research-agent picks search then fetch"
    assert counts(r) == (2, 0, 0)
    assert percents(r) == (100, 100, 100)
    assert (r.score, r.passed, r.label) == (1.0, True, "pass")
    assert [(c["name"], c["matched_by"], c["call"]) for c in r.details["classes"]] == [
        ("search", "brave.web_search", 0), ("fetch", "http.get", 1)]
    assert r.details["missed_classes"] == [] and r.details["unexpected_tools"] == []
    assert r.details["expectations"] == [{"target": "tool_selection.f1", "op": ">=",
                                          "value": 80, "actual": 100, "passed": True}]


def test_worked_example_second_run_misses_fetch_and_calls_shell() -> None:
    r = grade(PAGE_TEST, SECOND_RUN, agent="researcher")
    assert counts(r) == (1, 1, 1)
    assert percents(r) == (50, 50, 50)
    assert (r.score, r.passed, r.label) == (0.5, False, "fail")
    assert r.details["missed_classes"] == ["fetch"]
    assert r.details["unexpected_tools"] == ["shell.exec"]
    assert r.details["unexpected_calls"] == [1]
    assert r.details["classes"][0]["matched_by"] == "google.search"
    # The report names the missed class, the unexpected tool with its position, and the rule.
    assert "'fetch' never satisfied" in r.explanation
    assert "shell.exec at #1" in r.explanation
    assert "tool_selection.f1 >= 80" in r.explanation


def test_worked_example_micro_averages_the_two_runs() -> None:
    cfg = load_config(PAGE_TEST)
    grader = cfg.graders[0].grader
    results = [grader.grade(run_of(FIRST_RUN, agent="researcher")),
               grader.grade(run_of(SECOND_RUN, agent="researcher"))]
    agg = grader.aggregate(results)  # type: ignore[attr-defined]
    # TP 3, FP 1, FN 1: 3/4 = 75 each, F1 = 6/8 = 75 < 80.
    assert agg["counts"] == {"tp": 3, "fp": 1, "fn": 1}
    assert agg["tool_selection"] == {"precision": 75, "recall": 75, "f1": 75}
    assert agg["runs"] == 2 and agg["errors"] == 0
    assert agg["passed"] is False
    assert agg["expectations"][0]["actual"] == 75
    # The sums are order-independent.
    assert grader.aggregate(results[::-1]) == agg  # type: ignore[attr-defined]
    json.dumps(agg)


def test_pasted_entry_grades_only_its_agent() -> None:
    cfg = load_config(PAGE_TEST)
    assert cfg.graders[0].agents == frozenset({"researcher"})
    other = grade_run(run_of(FIRST_RUN, agent="writer"), cfg)
    assert other is not None and other.results == ()


def test_pasted_entry_with_our_own_type_id() -> None:
    config = {"graders": [{"type": "equal_function_sets",
                           "equal_function_sets": {"classes": [SEARCH]}}]}
    assert grade(config, [on("brave", "web_search")]).passed


# -- the default gate and explicit floors ------------------------------------------------------

SMALLEST = """
graders:
- type: agent
  equal_function_sets:
    classes:
    - name: search
      members: [brave.web_search, google.search]
"""


def test_smallest_form_gates_f1_at_50() -> None:
    r = grade(SMALLEST, [on("google", "search")])
    assert (percents(r), r.passed) == ((100, 100, 100), True)
    assert r.details["expectations"] == [{"target": "tool_selection.f1", "op": ">=",
                                          "value": 50, "actual": 100, "passed": True}]
    # One hit and one stray call: F1 = 2/3 -> 66, passes.
    assert grade(SMALLEST, [on("google", "search"), on("shell", "exec")]).passed
    # One hit, three stray calls: F1 = 2/5 -> 40, fails.
    r = grade(SMALLEST, [on("google", "search")] + [on("shell", "exec")] * 3)
    assert (percents(r)[2], r.passed) == (40, False)
    assert "tool_selection.f1 >= 50" in r.explanation


def test_default_gate_boundary_50_passes() -> None:
    r = grade(sets([SEARCH, FETCH]), SECOND_RUN)
    assert (percents(r)[2], r.passed) == (50, True)


@pytest.mark.parametrize("expect", [None, []])
def test_missing_or_empty_expect_is_the_default(expect: list[Any] | None) -> None:
    config = sets([SEARCH], expect)
    assert grade(config, [on("brave", "web_search"), on("x", "a")]).passed       # F1 66
    assert not grade(config, [on("brave", "web_search")] + [on("x", "a")] * 4).passed  # F1 33


PRECISION_FLOOR = sets([SEARCH, FETCH], [{"tool_selection.precision": {">=": 90}},
                                         {"tool_selection.f1": {">=": 70}}])


def test_precision_and_f1_floors_both_hold() -> None:
    r = grade(PRECISION_FLOOR, FIRST_RUN)
    assert r.passed
    assert [c["passed"] for c in r.details["expectations"]] == [True, True]


def test_precision_floor_fails_on_a_stray_call() -> None:
    # TP 2, FP 1, FN 0: precision 2/3 -> 66, recall 100, F1 4/5 -> 80.
    r = grade(PRECISION_FLOOR, FIRST_RUN + [on("shell", "exec")])
    assert percents(r) == (66, 100, 80)
    assert r.passed is False and r.score == 0.8
    assert [c["passed"] for c in r.details["expectations"]] == [False, True]
    assert "fails tool_selection.precision >= 90:" in r.explanation


def test_f1_floor_fails_on_a_missed_class() -> None:
    # TP 1, FP 0, FN 1: precision 100, recall 50, F1 2/3 -> 66.
    r = grade(PRECISION_FLOOR, [on("brave", "web_search")])
    assert percents(r) == (100, 50, 66)
    assert [c["passed"] for c in r.details["expectations"]] == [True, False]


@pytest.mark.parametrize(("op", "value", "holds"), [
    (">=", 50, True), (">=", 51, False),
    (">", 49, True), (">", 50, False),
    ("<=", 50, True), ("<=", 49, False),
    ("<", 51, True), ("<", 50, False),
    ("==", 50, True), ("==", 49, False),
    ("!=", 49, True), ("!=", 50, False),
])
def test_every_operator(op: str, value: int, holds: bool) -> None:
    for target in ("tool_selection.precision", "tool_selection.recall", "tool_selection.f1"):
        r = grade(sets([SEARCH, FETCH], [{target: {op: value}}]), SECOND_RUN)  # 50 / 50 / 50
        assert r.passed is holds, (target, op, value)


def test_one_matcher_may_carry_several_operators() -> None:
    config = sets([SEARCH, FETCH], [{"tool_selection.recall": {">=": 40, "<": 60}}])
    assert grade(config, SECOND_RUN).passed                  # recall 50
    assert not grade(config, FIRST_RUN).passed               # recall 100


def test_each_target_reads_its_own_metric() -> None:
    # precision 66, recall 100, F1 80
    calls = FIRST_RUN + [on("shell", "exec")]
    assert grade(sets([SEARCH, FETCH], [{"tool_selection.recall": {"==": 100}}]), calls).passed
    assert grade(sets([SEARCH, FETCH], [{"tool_selection.precision": {"==": 66}}]), calls).passed
    assert grade(sets([SEARCH, FETCH], [{"tool_selection.f1": {"==": 80}}]), calls).passed


# -- the counting rule --------------------------------------------------------------------------

def test_repeated_interchangeable_members_neither_inflate_nor_penalise() -> None:
    r = grade(sets([SEARCH]), [on("brave", "web_search"), on("google", "search"),
                               on("brave", "web_search")])
    assert counts(r) == (1, 0, 0)
    assert r.details["classes"][0] == {"name": "search", "matched": True,
                                       "matched_by": "brave.web_search", "call": 0, "calls": 3}


def test_every_stray_call_is_a_false_positive() -> None:
    r = grade(sets([SEARCH]), [on("shell", "exec"), on("brave", "web_search"),
                               on("shell", "exec")])
    assert counts(r) == (1, 2, 0)
    assert r.details["unexpected_tools"] == ["shell.exec"]
    assert r.details["unexpected_calls"] == [0, 2]
    assert "shell.exec at #0, #2." in r.explanation
    many = grade(sets([SEARCH]), [on("shell", "exec")] * 5 + [on("a", "x")])
    assert "shell.exec at #0, #1, #2 (+2 more), a.x at #5." in many.explanation


def test_qualified_member_keeps_same_named_tools_on_other_servers_apart() -> None:
    config = sets([{"name": "search", "members": ["brave.web_search"]}])
    r = grade(config, [on("duck", "web_search")])
    assert counts(r) == (0, 1, 1)
    assert r.details["unexpected_tools"] == ["duck.web_search"]


def test_bare_member_matches_the_tool_on_any_server() -> None:
    config = sets([{"name": "search", "members": ["web_search"]}])
    r = grade(config, [on("brave", "web_search"), on("duck", "web_search"), call("web_search")])
    assert counts(r) == (1, 0, 0)
    assert r.details["classes"][0]["calls"] == 3
    assert counts(grade(config, [on("brave", "web_search_v2")])) == (0, 1, 1)


def test_mcp_client_names_split_into_server_and_tool() -> None:
    qualified = sets([{"name": "search", "members": ["brave.web_search"]}])
    r = grade(qualified, [call("mcp__brave__web_search")])
    assert counts(r) == (1, 0, 0)
    assert r.details["classes"][0]["matched_by"] == "brave.web_search"
    assert counts(grade(qualified, [call("mcp__duck__web_search")])) == (0, 1, 1)
    bare = sets([{"name": "search", "members": ["web_search"]}])
    assert counts(grade(bare, [call("mcp__duck__web_search")])) == (1, 0, 0)


def test_server_comes_from_the_configured_attributes() -> None:
    config = sets([{"name": "search", "members": ["brave.web_search"]}])
    config["runs"] = {"server_attributes": ["my.server"]}
    assert counts(grade(config, [call("web_search", attrs={"my.server": "brave"})])) == (1, 0, 0)
    # the default attribute is no longer read
    assert counts(grade(config, [on("brave", "web_search")])) == (0, 1, 1)


def test_default_server_attributes_first_present_wins() -> None:
    # SEMANTICS 1 "Server": the first present of mcp.server.name, gen_ai.tool.server.name,
    # server.address (the default list).
    config = sets([{"name": "search", "members": ["brave.web_search"]}])
    for attrs in ({"gen_ai.tool.server.name": "brave"}, {"server.address": "brave"},
                  {"mcp.server.name": "brave", "gen_ai.tool.server.name": "duck"},
                  {"gen_ai.tool.server.name": "brave", "server.address": "duck"}):
        assert counts(grade(config, [call("web_search", attrs=attrs)])) == (1, 0, 0), attrs
    r = grade(config, [call("web_search", attrs={"mcp.server.name": "duck",
                                                 "server.address": "brave"})])
    assert counts(r) == (0, 1, 1) and r.details["unexpected_tools"] == ["duck.web_search"]


def test_a_call_without_a_server_matches_a_qualified_member_only_by_its_whole_name() -> None:
    config = sets([{"name": "search", "members": ["brave.web_search"]}])
    assert counts(grade(config, [call("web_search")])) == (0, 1, 1)
    assert counts(grade(config, [call("brave.web_search")])) == (1, 0, 0)


def test_a_tool_in_two_classes_satisfies_both() -> None:
    config = sets([{"name": "search", "members": ["kit.search_and_fetch", "brave.web_search"]},
                   {"name": "fetch", "members": ["kit.search_and_fetch", "http.get"]}])
    r = grade(config, [on("kit", "search_and_fetch")])
    assert counts(r) == (2, 0, 0)


def test_pending_calls_count_as_selections() -> None:
    r = grade(sets([SEARCH, FETCH]), [on("brave", "web_search", pending=True),
                                      on("shell", "exec", pending=True)])
    assert counts(r) == (1, 1, 1)


def test_failed_calls_count_as_selections() -> None:
    r = grade(sets([SEARCH]), [on("brave", "web_search", error="timeout")])
    assert counts(r) == (1, 0, 0)


# -- percents and edge cases ------------------------------------------------------------------

def test_f1_is_floored_from_the_raw_counts() -> None:
    # TP 1, FP 2, FN 0: precision 33, recall 100; from the floored percents F1 would be
    # 2*33*100/133 = 49.6 -> 49 (failing the default gate), from the counts 2/4 = 50.
    r = grade(sets([SEARCH]), [on("brave", "web_search"), on("a", "x"), on("b", "y")])
    assert percents(r) == (33, 100, 50)
    assert r.passed and r.score == 0.5


def test_percents_are_floored_not_rounded() -> None:
    # TP 2, FP 1: 200/3 = 66.7 -> 66.
    assert percents(grade(sets([SEARCH, FETCH]), FIRST_RUN + [on("a", "x")]))[0] == 66


def test_no_classes_and_no_calls_is_vacuously_perfect() -> None:
    r = grade(sets([]), [])
    assert counts(r) == (0, 0, 0)
    assert percents(r) == (100, 100, 100)
    assert (r.score, r.passed) == (1.0, True)
    assert "no classes were declared and no tool was called" in r.explanation


def test_no_classes_but_calls_scores_zero() -> None:
    r = grade(sets([]), [on("a", "x")])
    assert (counts(r), percents(r), r.passed) == ((0, 1, 0), (0, 0, 0), False)


def test_classes_but_no_calls_scores_zero() -> None:
    r = grade(sets([SEARCH]), [])
    assert (counts(r), percents(r), r.passed) == ((0, 0, 1), (0, 0, 0), False)
    assert "'search' never satisfied" in r.explanation


def test_selection_score_edge_cases() -> None:
    assert SelectionScore(0, 0, 0).percents() == {"precision": 100, "recall": 100, "f1": 100}
    assert SelectionScore(0, 0, 3).percents() == {"precision": 0, "recall": 0, "f1": 0}
    assert SelectionScore(0, 3, 0).percents() == {"precision": 0, "recall": 0, "f1": 0}
    assert SelectionScore(2, 0, 1).percents() == {"precision": 100, "recall": 66, "f1": 80}


# -- across runs ------------------------------------------------------------------------------

def test_micro_average_sums_before_dividing() -> None:
    runs = [{"tp": 1, "fp": 0, "fn": 0}, {"tp": 0, "fp": 3, "fn": 1}]
    total = micro_average(runs)
    assert total.counts() == {"tp": 1, "fp": 3, "fn": 1}
    # micro: 1/4 -> 25, 1/2 -> 50, 2/6 -> 33; the mean of the per-run F1s would be 50.
    assert total.percents() == {"precision": 25, "recall": 50, "f1": 33}
    assert micro_average([SelectionScore(1, 0, 0), SelectionScore(0, 3, 1)]) == total
    assert micro_average([]).percents() == {"precision": 100, "recall": 100, "f1": 100}


def test_aggregate_checks_the_expectations_on_the_sums() -> None:
    cfg = load_config(sets([SEARCH, FETCH], [{"tool_selection.precision": {">=": 50}}]))
    grader = cfg.graders[0].grader
    half = [grader.grade(run_of([on("brave", "web_search"), on("a", "x")])),   # precision 50
            grader.grade(run_of([on("http", "get"), on("a", "x")]))]           # precision 50
    idle = grader.grade(run_of([]))       # no calls: precision 0 (zero denominator)
    stray = grader.grade(run_of([on("a", "y")]))                              # precision 0
    assert [r.passed for r in (*half, idle, stray)] == [True, True, False, False]
    # The idle run adds only false negatives, so the summed precision still holds ...
    agg = grader.aggregate([*half, idle])  # type: ignore[attr-defined]
    assert agg["counts"] == {"tp": 2, "fp": 2, "fn": 4}
    assert agg["tool_selection"] == {"precision": 50, "recall": 33, "f1": 40}
    assert agg["passed"] is True
    # ... the stray call does not: 2 / 5 -> 40.
    agg = grader.aggregate([*half, stray])  # type: ignore[attr-defined]
    assert agg["counts"] == {"tp": 2, "fp": 3, "fn": 4}
    assert agg["tool_selection"]["precision"] == 40 and agg["passed"] is False


def test_aggregate_never_passes_over_a_run_that_errored() -> None:
    grader = load_config(sets([SEARCH])).graders[0].grader
    ok = grader.grade(run_of([on("brave", "web_search")]))
    broken = GradeResult.failure("equal_function_sets", "equal_function_sets", "KeyError", "x")
    agg = grader.aggregate([ok, broken])  # type: ignore[attr-defined]
    assert (agg["runs"], agg["errors"], agg["passed"]) == (2, 1, False)
    assert agg["counts"] == {"tp": 1, "fp": 0, "fn": 0}
    assert grader.aggregate([ok])["passed"] is True  # type: ignore[attr-defined]


def test_aggregate_by_groups_runs_by_a_root_attribute() -> None:
    cfg = load_config(PAGE_TEST)
    case = "test.case.id"
    runs = [
        run_of(FIRST_RUN, agent="researcher", root_attrs={case: "a"}),
        run_of(SECOND_RUN, agent="researcher", root_attrs={case: "b"}),
        run_of(FIRST_RUN, agent="researcher", root_attrs={case: "a"}),
        run_of(FIRST_RUN, agent="researcher", root_attrs={case: "b"}),
        run_of(FIRST_RUN, agent="writer", root_attrs={case: "c"}),   # not graded by it
    ]
    reports = [r for r in (grade_run(run, cfg) for run in runs) if r is not None]
    groups = aggregate_by(reports, "research-agent picks search then fetch",
                          lambda run: run.root_attributes.get(case))
    assert list(groups) == ["a", "b"]
    assert groups["a"]["counts"] == {"tp": 4, "fp": 0, "fn": 0} and groups["a"]["passed"]
    # b: TP 3, FP 1, FN 1 -> F1 75, below the entry's own floor of 80
    assert groups["b"]["tool_selection"]["f1"] == 75
    assert groups["b"]["passed"] is False and groups["b"]["runs"] == 2
    assert groups["b"]["expectations"][0]["value"] == 80
    assert aggregate_by(reports, "no such grader", lambda run: 1) == {}


def test_counts_reach_the_metrics_emitter() -> None:
    reader = InMemoryMetricReader()
    metrics = VerdictMetrics(MeterProvider(metric_readers=[reader]), "test")
    cfg = load_config(PAGE_TEST)
    for calls in (FIRST_RUN, SECOND_RUN):
        report = grade_run(run_of(calls, agent="researcher"), cfg)
        assert isinstance(report, RunReport)
        metrics.record(report)
    data = reader.get_metrics_data()
    assert data is not None
    totals: dict[str, int] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name.startswith("tooleval.tool_selection."):
                    points: Any = m.data.data_points
                    totals[m.name] = sum(p.value for p in points)
    assert totals["tooleval.tool_selection.true_positives"] == 3
    assert totals["tooleval.tool_selection.false_positives"] == 1
    assert totals["tooleval.tool_selection.false_negatives"] == 1


# -- values stay out of the verdict -------------------------------------------------------------

@pytest.mark.parametrize("include_values", [False, True])
def test_arguments_and_results_never_appear(include_values: bool) -> None:
    config = sets([SEARCH, FETCH])
    config["emit"] = {"include_values": include_values}
    r = grade(config, [on("brave", "web_search", args={"q": "hunter2-secret"},
                          result="token-XYZ"),
                       on("shell", "exec", args={"cmd": "cat hunter2-secret"})])
    text = r.explanation + json.dumps(r.to_dict())
    assert "hunter2" not in text and "token-XYZ" not in text


# -- load-time errors --------------------------------------------------------------------------

def pasted(block: Any, **extra: Any) -> dict[str, Any]:
    return {"graders": [{"name": "t", "type": "agent", "agent": "researcher", "runs": 1,
                         "equal_function_sets": block, **extra}]}


@pytest.mark.parametrize(("config", "where", "words"), [
    (pasted({"expect": []}), "graders[0].equal_function_sets.classes", "required key is missing"),
    (sets([{"members": ["a.b"]}]), "graders[0].classes[0].name", "required key is missing"),
    (sets([{"name": "", "members": ["a.b"]}]), "graders[0].classes[0].name", "at least 1"),
    (sets([{"name": "s"}]), "graders[0].classes[0].members", "required key is missing"),
    (sets([{"name": "s", "members": []}]), "graders[0].classes[0].members",
     "a class needs at least one member"),
    (sets([{"name": "s", "members": "a.b"}]), "graders[0].classes[0].members", "valid list"),
    (sets([{"name": "s", "members": [3]}]), "graders[0].classes[0].members[0]", "valid string"),
    (sets([{"name": "s", "members": ["brave."]}]), "graders[0].classes[0].members",
     "'server.tool' or a bare 'tool'"),
    (sets([{"name": "s", "members": ["a.b"], "tools": ["c"]}]), "graders[0].classes[0].tools",
     "unknown key"),
    (sets([SEARCH, {"name": "search", "members": ["x.y"]}]), "graders[0].classes[1].name",
     "duplicate class name 'search' (also classes[0])"),
    (pasted({"classes": [SEARCH, {"name": "search", "members": ["x.y"]}]}),
     "graders[0].equal_function_sets.classes[1].name", "duplicate class name"),
    (sets([SEARCH], [{"tool_selection.accuracy": {">=": 1}}]),
     "graders[0].expect[0].tool_selection.accuracy", "unknown target; use one of"),
    (sets([SEARCH], [{"f1": {">=": 1}}]), "graders[0].expect[0].f1", "unknown target"),
    (sets([SEARCH], [{"tool_selection.f1": {"=>": 1}}]),
     "graders[0].expect[0].tool_selection.f1.=>", "unknown operator; use one of >="),
    (sets([SEARCH], [{"tool_selection.f1": {"=": 1}}]),
     "graders[0].expect[0].tool_selection.f1.=", "unknown operator"),
    (sets([SEARCH], [{"tool_selection.f1": 80}]), "graders[0].expect[0].tool_selection.f1",
     "must be a matcher such as {'>=': 80}"),
    (sets([SEARCH], [{"tool_selection.f1": {}}]), "graders[0].expect[0].tool_selection.f1",
     "at least 1"),
    (sets([SEARCH], [{}]), "graders[0].expect[0]", "at least 1"),
    (sets([SEARCH], [{"tool_selection.f1": {">=": "80"}}]),
     "graders[0].expect[0].tool_selection.f1.>=", "valid integer"),
    (sets([SEARCH], [{"tool_selection.f1": {">=": 80.5}}]),
     "graders[0].expect[0].tool_selection.f1.>=", "valid integer"),
    (sets([SEARCH], [{"tool_selection.f1": {">=": True}}]),
     "graders[0].expect[0].tool_selection.f1.>=", "valid integer"),
    (sets([SEARCH], [{"tool_selection.f1": {">=": 101}}]),
     "graders[0].expect[0].tool_selection.f1.>=", "less than or equal to 100"),
    (sets([SEARCH], [{"tool_selection.f1": {">=": -1}}]),
     "graders[0].expect[0].tool_selection.f1.>=", "greater than or equal to 0"),
    (pasted({"classes": [SEARCH], "expect": [{"tool_selection.f1": {">": 200}}]}),
     "graders[0].equal_function_sets.expect[0].tool_selection.f1.>", "less than or equal"),
    (sets([SEARCH], {"tool_selection.f1": {">=": 80}}), "graders[0].expect", "valid list"),
    (pasted({"classes": [SEARCH]}, runs=0), "graders[0].runs", "greater than or equal to 1"),
    (pasted({"classes": [SEARCH]}, runs="1"), "graders[0].runs", "valid integer"),
    (pasted({"classes": [SEARCH]}, prompt="find x"), "graders[0].prompt", "unknown key"),
    (pasted({"classes": [SEARCH]}, classes=[SEARCH]), "graders[0].classes",
     "belongs inside the equal_function_sets: block"),
    (pasted({"classes": [SEARCH], "threshold": 0.5}),
     "graders[0].equal_function_sets.threshold", "not by a threshold"),
    (pasted(None), "graders[0].equal_function_sets", "valid dictionary"),
    ({"graders": [{"type": "tool-calls", "equal_function_sets": {"classes": [SEARCH]}}]},
     "graders[0].type", "'agent', 'equal_function_sets'"),
    (sets([SEARCH], runs=2), "graders[0].runs",
     "runs is accepted only beside an equal_function_sets: block"),
    (sets([SEARCH], agent="researcher"), "graders[0].agent", "use agents: [name]"),
    (sets([SEARCH], threshold=0.5), "graders[0].threshold", "not by a threshold"),
])
def test_load_time_errors_name_the_field(config: Any, where: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(config)
    message = str(info.value)
    assert f"{where}: " in message, message
    assert words in message, message


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(pasted({"classes": [{"name": "s", "members": []}],
                            "expect": [{"tool_selection.x": {">=": 1}}]}, runs=0))
    assert len(info.value.problems) == 3


@pytest.mark.parametrize("type_id", ["equal_function_sets", "tool_selection",
                                     "equal-function-sets"])
def test_type_ids(type_id: str) -> None:
    config = {"graders": [{"type": type_id, "classes": [SEARCH]}]}
    r = grade(config, [on("brave", "web_search")])
    assert r.passed and r.type == "equal_function_sets"


def test_runs_is_accepted_and_every_run_is_graded() -> None:
    cfg = load_config(pasted({"classes": [SEARCH]}, runs=3))
    reports = [grade_run(run_of([on("brave", "web_search")], agent="researcher"), cfg)
               for _ in range(5)]
    assert all(r is not None and len(r.results) == 1 and r.results[0].passed for r in reports)


# -- the JSON Schema agrees with load_config ----------------------------------------------------

def test_schema_accepts_both_shapes_and_rejects_typos() -> None:
    schema = config_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    good = [yaml.safe_load(PAGE_TEST), yaml.safe_load(SMALLEST),
            sets([SEARCH, FETCH], [{"tool_selection.precision": {">=": 90}}], name="x",
                 agents=["a"])]
    for doc in good:
        load_config(doc)
        validator.validate(doc)
    bad = [sets([SEARCH], [{"tool_selection.f1": {"=>": 80}}]),
           sets([{"name": "s", "members": []}]),
           pasted({"classes": [SEARCH]}, runs=0),
           pasted({"classes": [SEARCH]}, prompt="x")]
    for doc in bad:
        assert list(validator.iter_errors(doc)), doc
        with pytest.raises(ConfigError):
            load_config(doc)


def test_long_lists_are_shortened_in_the_explanation() -> None:
    classes = [{"name": f"c{i}", "members": [f"s.t{i}"]} for i in range(7)]
    r = grade(sets(classes), [])
    assert "classes 'c0', 'c1', 'c2', 'c3', 'c4' and 2 more never satisfied." in r.explanation
    assert len(r.details["missed_classes"]) == 7


def test_the_reference_page_examples_load_and_grade() -> None:
    page = Path(__file__).resolve().parents[1] / "docs/graders/equal_function_sets.md"
    blocks = re.findall(r"```yaml\n(.*?)```", page.read_text(), re.DOTALL)
    assert len(blocks) == 2
    for block in blocks:
        r = grade(block, FIRST_RUN, agent="researcher")
        assert r.passed and r.details["tool_selection_counts"] == {"tp": 2, "fp": 0, "fn": 0}


@pytest.mark.parametrize("room", [1024, 1], ids=["remembered", "table full"])
def test_tools_are_classified_by_server_and_name_across_runs(
        room: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(function_sets, "_MAX_REMEMBERED_TOOLS", room)
    grader = load_config(sets([SEARCH, FETCH])).graders[0].grader
    brave = run_of([on("brave", "web_search"), on("http", "get")])
    other = run_of([on("bing", "web_search"), on("http", "get"), call("mcp__google__search")])
    for _ in range(2):
        assert counts(grader.grade(brave)) == (2, 0, 0)
        assert counts(grader.grade(other)) == (2, 1, 0)
        assert grader.grade(other).details["unexpected_tools"] == ["bing.web_search"]
    assert len(grader._known) == min(room, 4)


def test_unexpected_calls_list_three_positions_then_how_many_more() -> None:
    """A tool called three times outside every class lists all three; a fourth call is '+1 more'."""
    calls = [on("brave", "web_search"), *(call("lookup") for _ in range(3)),
             *(call("scrape") for _ in range(4))]
    r = grade(sets([{"name": "search", "members": ["web_search"]}]), calls)
    assert r.explanation == (
        "Tool selection fails tool_selection.f1 >= 50: F1 22, precision 12, recall 100 "
        "(TP 1, FP 7, FN 0); calls matching no class: lookup at #1, #2, #3, "
        "scrape at #4, #5, #6 (+1 more).")
