"""Pathological regexes on large values must not stall grading, nor the application.

Three bounds (otel_tooleval/graders/matching.py): values are regex-searched in at most
``limits.max_match_chars`` characters; patterns that backtrack exponentially are refused when the
config loads; the graders of one run share ``limits.grading_budget_ms`` of CPU time, past which
they give ``error.type = budget_exceeded``. The time bounds asserted here are "did not hang"
bounds: seconds, against minutes to years without the bounds.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import ToolEvalSpanProcessor
from otel_tooleval.config import ConfigError, ConfiguredGrader, config_from_mapping, load_config
from otel_tooleval.graders.matching import (
    DEFAULT_MAX_MATCH_CHARS,
    grading_limits,
    max_match_chars,
    search,
    unsafe_reason,
)
from otel_tooleval.grading import BUDGET_EXCEEDED, grade_run
from otel_tooleval.model import AgentRun, GradeResult
from tests.support.runs import call, run_of

MB = 1024 * 1024
CATASTROPHIC = r"(a+)+$"


# -- exponential patterns are refused where they are configured ---------------------------------

@pytest.mark.parametrize(("config", "where"), [
    ({"graders": [{"type": "tool-calls", "config": {"disallowed": [
        {"name": "fetch", "result": CATASTROPHIC}]}}]},
     "graders[0].config.disallowed[0].result"),
    ({"graders": [{"type": "tool-calls", "config": {"required": [
        {"name": "bash", "command": r"^(\w+\s?)*$"}]}}]},
     "graders[0].config.required[0].command"),
    ({"graders": [{"type": "tool-calls", "config": {"required": [
        {"name": "fetch", "args": {"url": "(.*,)+x"}}]}}]},
     "graders[0].config.required[0].args"),
    ({"graders": [{"kind": "tool", "function": "regex_match", "extractor": "tool_output",
                   "extractor_config": {"tool_name": "fetch"}, "ground_truth": CATASTROPHIC}]},
     "graders[0].ground_truth"),
    ({"graders": [{"kind": "tool", "function": "contains", "extractor": "pattern",
                   "extractor_config": {"pattern": "(a|aa)+b"}, "ground_truth": "x"}]},
     "graders[0].extractor_config.pattern"),
    ({"runs": {"ignore_tools": ["ok", "(x+x+)+y"]}}, "runs.ignore_tools[1]"),
])
def test_exponential_patterns_are_config_errors_naming_the_field(config: dict[str, Any],
                                                                 where: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(config)
    message = str(err.value)
    assert f"{where}" in message
    assert "unsafe regular expression" in message and "exponential" in message


@pytest.mark.parametrize("pattern", [
    r"(a+)+$", r"(a*)*", r"(\w+\s?)*$", r"(.*,)+", r"(a|aa)+", r"(x+x+)+y", r"(\d+,?)+$",
    r"^(([a-z])+.)+[A-Z]([a-z])+$", r"(a+|b)+", r"(a{1,3})+", r"((ab)*)+", r"(?i)(A+a)+",
])
def test_nested_repetition_is_unsafe(pattern: str) -> None:
    assert unsafe_reason(pattern) is not None


@pytest.mark.parametrize("pattern", [
    r"(/[\w.-]+)+", r"(\s*,\s*\w+)*", r"(a|ab)+", r"(a|b)*c", r"\s+$", r"\w+@", r"(ab+)+",
    r"^report_result$", r"\.env$", "npm test", r"(a{2})+", r"([a-z]+\.)+com", r"(\w+\s)+",
    r"(a+){3}", r"(?i)(a+B)+", r"([a-z]+[A-Z])+", r"(?i)BUILD SUCCEEDED", r"^(?:mcp__)?fetch$",
])
def test_ordinary_patterns_are_accepted(pattern: str) -> None:
    assert unsafe_reason(pattern) is None
    load_config({"graders": [{"type": "tool-calls", "config": {"required": [
        {"name": "t", "result": pattern}]}}]})


@pytest.mark.skipif(not hasattr(re, "NOFLAG"), reason="atomic groups need Python 3.11")
def test_possessive_and_atomic_rewrites_are_accepted() -> None:
    assert unsafe_reason(r"(a++)+$") is None
    assert unsafe_reason(r"(?>a+)+$") is None


def test_a_catastrophic_ground_truth_from_the_run_fails_without_running() -> None:
    cfg = load_config({"graders": [{"kind": "tool", "function": "regex_match",
                                    "extractor": "tool_output",
                                    "extractor_config": {"tool_name": "fetch"}}]})
    run = run_of([call("fetch", {"url": "u"}, "a" * MB + "b")],
                 root_attrs={"tooleval.ground_truth": CATASTROPHIC})
    started = time.monotonic()
    report = grade_run(run, cfg)
    assert time.monotonic() - started < 5
    assert report is not None
    (result,) = report.results
    assert result.label == "fail" and result.score == 0.0
    assert "not run" in result.explanation and "exponential" in result.explanation
    assert result.details["unsafe_pattern"] is True


# -- truncation: polynomial patterns on 1 MB values ---------------------------------------------

SLOW_SHAPES = [
    # (pattern, text): each quadratic in the text's length for CPython's re
    (r"\s+$", " " * MB + "x"),
    (r"(a|b)*c", "ab" * (MB // 2)),
    (r"\w+@", "a" * MB),
    (r"[a-z]+[0-9]+!", "a" * MB),
]


@pytest.mark.parametrize(("pattern", "text"), SLOW_SHAPES, ids=[p for p, _ in SLOW_SHAPES])
def test_slow_patterns_on_a_megabyte_finish_in_seconds(pattern: str, text: str) -> None:
    """Every family that regex-searches values, on one 1 MB argument, result and output."""
    cfg = load_config({
        "graders": [
            {"name": "result", "type": "tool-calls",
             "config": {"disallowed": [{"name": "fetch", "result": pattern}]}},
            {"name": "command", "type": "tool-calls",
             "config": {"required": [{"name": "fetch", "command": pattern}]}},
            {"name": "args", "type": "tool-calls",
             "config": {"required": [{"name": "fetch", "args": {"url": pattern}}]}},
            {"name": "regex", "kind": "tool", "function": "regex_match",
             "extractor": "tool_output", "extractor_config": {"tool_name": "fetch"},
             "ground_truth": pattern},
            {"name": "extract", "kind": "tool", "function": "contains",
             "extractor": "pattern", "extractor_config": {"pattern": pattern},
             "ground_truth": "zzz"},
        ],
        "limits": {"grading_budget_ms": 0},       # no budget: truncation alone bounds this
    })
    run = run_of([call("fetch", {"command": text, "url": text}, text)],
                 root_attrs={"final_result": text})
    started = time.monotonic()
    report = grade_run(run, cfg)
    elapsed = time.monotonic() - started
    # Unbounded, the first of these searches alone takes hours on 1 MB.
    assert elapsed < 30, elapsed
    assert report is not None
    assert [r.label for r in report.results] != []
    assert all(r.error is None for r in report.results), [r.explanation for r in report.results]


def test_truncation_searches_the_head_and_the_tail() -> None:
    middle = "x" * (10 * DEFAULT_MAX_MATCH_CHARS)
    text = "HEAD " + middle + " MIDDLE " + middle + " TAIL"
    with grading_limits(DEFAULT_MAX_MATCH_CHARS):
        assert search(re.compile("HEAD"), text)
        assert search(re.compile("TAIL$"), text)
        assert search(re.compile("MIDDLE"), text) is None          # documented: not searched
        assert search(re.compile("^x"), text) is None              # "^" only at the real start
    assert search(re.compile("MIDDLE"), text) is None             # the default applies outside
    with grading_limits(len(text)):
        assert search(re.compile("MIDDLE"), text)


def test_max_match_chars_comes_from_the_config() -> None:
    text = "a" * 5000 + "NEEDLE" + "a" * 5000
    config = {"graders": [{"type": "tool-calls", "config": {"required": [
        {"name": "fetch", "result": "NEEDLE"}]}}]}
    run = run_of([call("fetch", {}, text)])
    small = grade_run(run, load_config({**config, "limits": {"max_match_chars": 1000}}))
    large = grade_run(run_of([call("fetch", {}, text)]),
                      load_config({**config, "limits": {"max_match_chars": 20_000}}))
    assert small is not None and large is not None
    assert not small.passed and large.passed


# -- the per-run budget --------------------------------------------------------------------------

class _Spin:
    """A grader that burns CPU for a while; records that it ran."""

    type = "spin"

    def __init__(self, name: str, seconds: float) -> None:
        self.name, self.seconds, self.ran = name, seconds, 0

    def grade(self, run: AgentRun) -> GradeResult:
        self.ran += 1
        end = time.thread_time() + self.seconds
        while time.thread_time() < end:
            pass
        return GradeResult(self.name, self.type, 1.0, True, "pass", "spun", {})


def _with(config: Any, *graders: Any) -> Any:
    cfg = config_from_mapping(config, allow_no_graders=True)   # the graders come below
    extra = tuple(ConfiguredGrader(g.name, g.type, None, g) for g in graders)
    return dataclasses.replace(cfg, graders=cfg.graders + extra)


def test_budget_skips_the_graders_after_it_is_spent() -> None:
    spin, after = _Spin("spin", 0.3), _Spin("after", 0.0)
    cfg = _with({"graders": [{"name": "first", "type": "tool-calls",
                              "config": {"required": ["fetch"]}}],
                 "limits": {"grading_budget_ms": 100}}, spin, after)
    report = grade_run(run_of([call("fetch", {}, "ok")]), cfg)
    assert report is not None
    first, spun, skipped = report.results
    assert first.passed and spun.passed          # a grader that never matches runs to its end
    assert after.ran == 0
    assert skipped.label == "error" and skipped.error == BUDGET_EXCEEDED
    assert not skipped.passed and skipped.score == 0.0
    assert "grading budget (100 ms" in skipped.explanation
    assert "before it started" in skipped.explanation
    assert not report.passed


def test_budget_stops_a_grader_between_two_matches() -> None:
    # 400 calls, each result 8 kB of "ab": every search of "(a|b)*c" takes a while.
    text = "ab" * 4096
    calls = [call("fetch", {}, text) for _ in range(400)]
    cfg = load_config({
        "graders": [
            {"name": "slow", "type": "tool-calls",
             "config": {"required": [{"name": "fetch", "result": "(a|b)*c", "min_count": 400}]}},
            {"name": "next", "type": "tool-calls", "config": {"required": ["fetch"]}},
        ],
        "limits": {"grading_budget_ms": 200},
    })
    started = time.monotonic()
    report = grade_run(run_of(calls), cfg)
    assert time.monotonic() - started < 20
    assert report is not None
    slow, following = report.results
    assert slow.error == BUDGET_EXCEEDED and "before it finished" in slow.explanation
    assert following.error == BUDGET_EXCEEDED and "before it started" in following.explanation


def test_budget_zero_switches_it_off() -> None:
    spin, after = _Spin("spin", 0.15), _Spin("after", 0.0)
    cfg = _with({"limits": {"grading_budget_ms": 0}}, spin, after)
    report = grade_run(run_of([call("fetch")]), cfg)
    assert report is not None and report.passed and after.ran == 1


def test_each_run_gets_a_fresh_budget() -> None:
    spin = _Spin("spin", 0.08)
    cfg = _with({"limits": {"grading_budget_ms": 100}}, spin)
    for _ in range(4):
        report = grade_run(run_of([call("fetch")]), cfg)
        assert report is not None and report.passed


def test_limits_in_the_schema_and_their_bounds() -> None:
    from otel_tooleval.schema import config_schema

    limits = config_schema()["properties"]["limits"]["properties"]
    assert limits["max_match_chars"]["default"] == DEFAULT_MAX_MATCH_CHARS
    assert limits["grading_budget_ms"]["default"] == 1000
    for bad, where in (({"max_match_chars": 0}, "limits.max_match_chars"),
                       ({"grading_budget_ms": -1}, "limits.grading_budget_ms"),
                       ({"grading_budget_ms": "soon"}, "limits.grading_budget_ms")):
        with pytest.raises(ConfigError, match=re.escape(where)):
            load_config({"limits": bad})


# -- the live processor: grading is busy, the application is not held up ------------------------

def test_processor_grades_slow_patterns_off_the_application_thread() -> None:
    exporter = InMemorySpanExporter()
    reports: list[Any] = []
    graded = threading.Event()

    def on_report(report: Any) -> None:
        reports.append(report)
        graded.set()

    processor = ToolEvalSpanProcessor(
        {"graders": [
            {"name": "slow", "type": "tool-calls",
             "config": {"disallowed": [{"name": "fetch", "result": "(a|b)*c"}]}},
            {"name": "after", "type": "tool-calls", "config": {"required": ["fetch"]}},
        ], "limits": {"max_match_chars": 2048}},
        SimpleSpanProcessor(exporter), on_report=on_report)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    text = "ab" * 50_000                     # 100 kB per result, 100 calls: 10 MB per run

    def agent_run(n_calls: int, result: str = text) -> list[float]:
        ends = []
        with tracer.start_as_current_span(
                "invoke_agent slow", attributes={"gen_ai.operation.name": "invoke_agent",
                                                 "gen_ai.agent.name": "slow"}):
            for _ in range(n_calls):
                span = tracer.start_span("execute_tool fetch", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch",
                    "gen_ai.tool.call.arguments": "{}", "gen_ai.tool.call.result": result})
                t = time.monotonic()
                span.end()
                ends.append(time.monotonic() - t)
            t = time.monotonic()
        ends.append(time.monotonic() - t)      # the root's end(), which hands the run over
        return ends

    try:
        agent_run(100)
        # The grading thread is now busy with ~2 matches per call for about its 1 s budget;
        # the application goes on making spans, and no end() waits for it.
        busy_ends: list[float] = []
        started = time.monotonic()
        while not graded.is_set() and time.monotonic() - started < 30:
            busy_ends.extend(agent_run(3, "ok"))
            time.sleep(0.005)
        assert graded.is_set(), "grading did not finish"
        assert busy_ends, "grading finished before the application made another span"
        assert max(busy_ends) < 1.0, max(busy_ends)
        assert processor.force_flush(30_000)
    finally:
        provider.shutdown()
    first = reports[0]
    assert first.run.agent == "slow" and len(first.run.calls) == 100
    slow, after = first.results
    assert slow.error == BUDGET_EXCEEDED or slow.passed
    assert after.error == BUDGET_EXCEEDED or after.passed
    # The root's copy carries the budget verdicts as events like any other.
    roots = [s for s in exporter.get_finished_spans()
             if s.context.span_id == first.run.root_span_id]
    assert len(roots) == 1
    events = [dict(e.attributes or {}) for e in roots[0].events]
    assert {e["gen_ai.evaluation.name"] for e in events} == {"slow", "after"}
    for event, result in zip(events, first.results):
        assert event.get("error.type") == result.error



def test_limits_apply_inside_only_and_are_restored_after_an_exception() -> None:
    assert max_match_chars() == DEFAULT_MAX_MATCH_CHARS
    with grading_limits(100) as outer:
        assert max_match_chars() == 100 and not outer.exceeded()
        with pytest.raises(RuntimeError), grading_limits(10):
            assert max_match_chars() == 10
            raise RuntimeError
        assert max_match_chars() == 100
    assert max_match_chars() == DEFAULT_MAX_MATCH_CHARS
