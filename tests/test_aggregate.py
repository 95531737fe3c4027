"""Verdicts across runs: per-grader summaries and the equal-function-set micro-average gate."""

from __future__ import annotations

from otel_tooleval import load_config
from otel_tooleval.aggregate import aggregate, aggregate_passed
from otel_tooleval.grading import grade_run
from tests.support.runs import call, run_of

CONFIG = {"graders": [
    {"name": "calls", "type": "tool-calls", "config": {"required": ["^search$"]}},
    {"name": "selection", "type": "equal_function_sets",
     "classes": [{"name": "search", "members": ["search"]},
                 {"name": "fetch", "members": ["fetch"]}],
     "expect": [{"tool_selection.f1": {">=": 70}}]},
]}


def reports_for(*runs: list[str], case: list[str] | None = None) -> list:
    cfg = load_config(CONFIG)
    out = []
    for i, names in enumerate(runs):
        attrs = {"test.case": case[i]} if case else {}
        report = grade_run(run_of([call(n, {}) for n in names], cfg.policy, root_attrs=attrs), cfg)
        out.append(report)
    return out


def test_summary_counts_and_micro_average() -> None:
    cfg = load_config(CONFIG)
    # run 1: search+fetch -> TP 2; run 2: search+other -> TP 1, FP 1, FN 1
    reports = reports_for(["search", "fetch"], ["search", "other"])
    doc = aggregate(reports, cfg)
    assert (doc["runs"], doc["passed"], doc["failed"]) == (2, 1, 1)
    assert doc["graders"]["calls"] == {"runs": 2, "passed": 2, "mean_score": 1.0}
    sel = doc["graders"]["selection"]
    # micro: TP 3, FP 1, FN 1 -> P floor(300/4)=75, R 75, F1 floor(600/8)=75
    assert sel["tool_selection"] == {"precision": 75, "recall": 75, "f1": 75}
    assert sel["passed_aggregate"] is True
    assert not aggregate_passed(doc)          # one run failed its own gate


def test_aggregate_gate_can_fail_while_every_run_passes_its_own() -> None:
    strict = {"graders": [{**CONFIG["graders"][1], "expect": [{"tool_selection.f1": {">=": 50}}]}]}
    cfg = load_config(strict)
    runs = [run_of([call("search", {})], cfg.policy), run_of([call("fetch", {})], cfg.policy)]
    reports = [grade_run(r, cfg) for r in runs]
    assert all(r.passed for r in reports)     # each F1 = 66 >= 50
    doc = aggregate(reports, cfg)
    assert doc["graders"]["selection"]["tool_selection"]["f1"] == 66
    assert aggregate_passed(doc)
    tighter = load_config({"graders": [{**strict["graders"][0],
                                        "expect": [{"tool_selection.f1": {">": 66}}]}]})
    doc = aggregate([grade_run(r, tighter) for r in runs], tighter)
    assert doc["graders"]["selection"]["passed_aggregate"] is False
    assert not aggregate_passed(doc)


def test_group_by_a_root_attribute() -> None:
    cfg = load_config(CONFIG)
    reports = reports_for(["search", "fetch"], ["search", "fetch"], ["other"],
                          case=["a", "a", "b"])
    doc = aggregate(reports, cfg, group_by="test.case")
    assert doc["group_by"] == "test.case"
    assert set(doc["groups"]) == {"a", "b"}
    assert doc["groups"]["a"]["graders"]["selection"]["passed_aggregate"] is True
    assert doc["groups"]["b"]["graders"]["selection"]["passed_aggregate"] is False


def test_a_grader_limited_to_one_agent_summarises_only_the_runs_it_graded() -> None:
    cfg = load_config({"graders": [
        {"name": "researched", "type": "tool-calls", "agents": ["researcher"],
         "config": {"required": ["^search$"]}},
        {"name": "any", "type": "tool-calls", "config": {"required": ["^search$"]}},
    ]})
    runs = [run_of([call("search", {})], cfg.policy, agent="researcher"),
            run_of([call("other", {})], cfg.policy, agent="writer"),
            run_of([call("other", {})], cfg.policy, agent="writer")]
    doc = aggregate([grade_run(r, cfg) for r in runs], cfg)
    assert doc["runs"] == 3
    # the writer's two runs are not the researcher grader's: its mean is over its one run
    assert doc["graders"]["researched"] == {"runs": 1, "passed": 1, "mean_score": 1.0}
    assert doc["graders"]["any"]["runs"] == 3
    assert doc["graders"]["any"]["mean_score"] == 1 / 3
