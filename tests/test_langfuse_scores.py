"""The Langfuse scores of a graded run and session (``otel_tooleval.sinks.langfuse_scores``).

Runs are real spans from a real ``TracerProvider``, graded by ``grade_spans``; the scores'
shape against the langfuse package's own request models is ``test_langfuse_sink.py``'s.
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_tooleval
from otel_tooleval.model import GradeResult, RunReport
from otel_tooleval.sessions.model import SessionKey, SessionReport, compact_run
from otel_tooleval.sinks.langfuse_scores import (
    RUN_SCORE,
    SCORE_SCORE,
    VIOLATION_SCORE,
    details_summary,
    run_scores,
    score_id,
    session_scores,
)

CONFIG: dict[str, Any] = {"graders": [
    {"name": "no-secrets", "type": "tool-calls",
     "config": {"disallowed": [{"name": "view", "path": r"\.env$"}]}},
    {"name": "searched", "type": "tool-calls", "config": {"required": ["search"]}},
]}


def graded(*tools: tuple[str, str]) -> RunReport:
    """One agent run calling ``tools`` ((name, path) pairs), graded by CONFIG."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("invoke_agent", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"}):
        for name, path in tools:
            with tracer.start_as_current_span(f"execute_tool {name}", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                    "gen_ai.tool.call.arguments": f'{{"path": "{path}"}}'}):
                pass
    provider.shutdown()
    (report,) = otel_tooleval.grade_spans(exporter.get_finished_spans(), CONFIG)
    return report


def by_name(scores: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for score in scores:
        out.setdefault(score["name"], []).append(score)
    return out


def test_a_passing_run_is_one_true_verdict_on_its_trace_and_each_grader_on_its_root() -> None:
    report = graded(("search", "q"))
    run = report.run
    scores = by_name(run_scores(report))
    assert set(scores) == {RUN_SCORE, SCORE_SCORE, "no-secrets", "searched"}
    (overall,) = scores[RUN_SCORE]
    assert overall["traceId"] == run.trace_id_hex and "observationId" not in overall
    assert (overall["dataType"], overall["value"], overall["comment"]) == ("BOOLEAN", 1.0,
                                                                           "passed")
    (mean,) = scores[SCORE_SCORE]
    assert (mean["dataType"], mean["value"]) == ("NUMERIC", 1.0)
    (grader,) = scores["searched"]
    assert grader["traceId"] == run.trace_id_hex
    assert grader["observationId"] == run.root_span_id_hex
    assert len(grader["observationId"]) == 16 and len(grader["traceId"]) == 32
    assert (grader["dataType"], grader["value"]) == ("NUMERIC", 1.0)
    assert grader["metadata"]["label"] == "pass"
    assert grader["metadata"]["grader_type"] == "tool-calls"
    assert grader["metadata"]["agent"] == "helper"
    assert VIOLATION_SCORE not in scores


def test_a_failing_run_scores_false_names_its_graders_and_marks_the_offending_call() -> None:
    report = graded(("view", "app/.env"), ("view", "README"))
    run = report.run
    offending = run.calls[0]
    scores = by_name(run_scores(report, environment="staging"))
    (overall,) = scores[RUN_SCORE]
    assert (overall["value"], overall["comment"]) == (0.0, "failed: no-secrets, searched")
    assert overall["metadata"]["failed"] == ["no-secrets", "searched"]
    assert scores[SCORE_SCORE][0]["value"] == 0.0
    (secret,) = scores["no-secrets"]
    assert (secret["value"], secret["metadata"]["label"]) == (0.0, "fail")
    assert secret["comment"] == report.results[0].explanation
    assert secret["metadata"]["details"]["violations"] == 1
    (violation,) = scores[VIOLATION_SCORE]
    assert violation["observationId"] == format(offending.span_id, "016x")
    assert violation["traceId"] == run.trace_id_hex
    assert (violation["dataType"], violation["value"]) == ("CATEGORICAL", "no-secrets")
    assert "disallowed" in violation["comment"]
    assert violation["metadata"]["tool"] == "view"
    assert violation["metadata"]["call"] == 0
    assert {s["environment"] for s in run_scores(report, "staging")} == {"staging"}
    assert all("environment" not in s for s in run_scores(report))


def test_ids_and_timestamps_repeat_so_a_second_delivery_updates() -> None:
    report = graded(("view", "app/.env"))
    first, again = run_scores(report), run_scores(report)
    assert [s["id"] for s in first] == [s["id"] for s in again]
    assert [s["timestamp"] for s in first] == [s["timestamp"] for s in again]
    assert len({s["id"] for s in first}) == len(first)
    assert first[0]["timestamp"].endswith("+00:00")
    other = run_scores(graded(("view", "app/.env")))
    assert not {s["id"] for s in first} & {s["id"] for s in other}


def test_a_grader_named_like_the_overall_score_does_not_overwrite_it() -> None:
    assert score_id("t", "r", "overall", RUN_SCORE) != score_id("t", "r", "grader", RUN_SCORE)


def test_a_grader_naming_one_call_twice_gives_one_violation_with_both_reasons() -> None:
    report = graded(("view", "app/.env"))
    span = format(report.run.calls[0].span_id, "016x")
    entry = {"call": 0, "span_id": span, "tool": "view"}
    twice = GradeResult("g", "custom", 0.0, False, "fail", "no", {"violations": [
        {**entry, "reason": "one"}, {**entry, "reason": "two"}, {**entry, "reason": "one"},
        {"call": 1, "span_id": None, "tool": "x", "reason": "no span"}, "junk"]})
    (violation,) = by_name(run_scores(RunReport(report.run, (twice,))))[VIOLATION_SCORE]
    assert violation["comment"] == "one; two"
    passing = GradeResult("g", "custom", 1.0, True, "pass", "ok",
                          {"violations": [{**entry, "reason": "tolerated"}]})
    assert VIOLATION_SCORE not in by_name(run_scores(RunReport(report.run, (passing,))))


def test_an_errored_grader_carries_its_error_and_a_run_without_graders_no_score() -> None:
    report = graded(("search", "q"))
    failure = GradeResult.failure("broken", "custom", "ValueError", "it raised")
    (score,) = by_name(run_scores(RunReport(report.run, (failure,))))["broken"]
    assert score["metadata"]["label"] == "error" and score["metadata"]["error"] == "ValueError"
    assert run_scores(RunReport(report.run, ())) == []


def test_details_summary_keeps_scalars_and_counts_the_rest() -> None:
    long = "x" * 500
    summary = details_summary({"missing": ["a", "b"], "n": 3, "ok": True, "why": long,
                               "map": {"a": 1}, "none": None, "obj": object()})
    assert summary["missing"] == 2 and summary["map"] == 1 and summary["n"] == 3
    assert summary["ok"] is True and summary["none"] is None and "obj" not in summary
    assert len(summary["why"]) == 200
    assert len(details_summary({str(i): i for i in range(50)})) == 20


def test_a_long_explanation_is_cut() -> None:
    report = graded(("search", "q"))
    wordy = GradeResult("w", "custom", 1.0, True, "pass", "y" * 5000)
    (score,) = by_name(run_scores(RunReport(report.run, (wordy,))))["w"]
    assert len(score["comment"]) == 2000


def session_report(passed: bool) -> SessionReport:
    runs = tuple(compact_run(graded(("search", "q")).run, outputs=False) for _ in range(2))
    result = GradeResult("turns", "custom", 1.0 if passed else 0.25, passed,
                         "pass" if passed else "fail", "two turns")
    return SessionReport(SessionKey("conv-7", "session.id"), "helper", runs, (result,),
                         ended="idle")


@pytest.mark.parametrize("passed", [True, False])
def test_a_session_is_scored_on_its_langfuse_session(passed: bool) -> None:
    report = session_report(passed)
    scores = by_name(session_scores(report))
    assert set(scores) == {RUN_SCORE, SCORE_SCORE, "turns"}
    for (score,) in scores.values():
        assert score["sessionId"] == "conv-7"
        assert "traceId" not in score and "observationId" not in score
        assert score["metadata"]["session_key"] == "session.id"
    assert scores[RUN_SCORE][0]["value"] == (1.0 if passed else 0.0)
    assert scores["turns"][0]["value"] == (1.0 if passed else 0.25)
    ends = max(r.end_ns or 0 for r in report.runs)
    assert scores[RUN_SCORE][0]["timestamp"] == session_scores(report)[0]["timestamp"]
    assert ends and session_scores(report)[0]["id"] == session_scores(report)[0]["id"]
