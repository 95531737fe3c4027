"""Pathological regexes on large values must not stall grading, nor the application.

Three bounds (otel_tooleval/graders/matching.py): values are regex-searched in at most
``limits.max_match_chars`` characters; every user pattern runs on RE2, a linear-time engine, and
what RE2 cannot run (backreferences, lookaround) is refused when the config loads; the graders of
one run share ``limits.grading_budget_ms`` of CPU time, past which they give
``error.type = budget_exceeded``. The time bounds asserted here are "did not hang"
bounds: seconds, against minutes to years without the bounds.
"""

from __future__ import annotations

import dataclasses
import random
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
    compile_user,
    grading_limits,
    max_match_chars,
    search,
    unsupported_reason,
)
from otel_tooleval.grading import BUDGET_EXCEEDED, grade_run
from otel_tooleval.model import AgentRun, GradeResult
from tests.support.runs import call, run_of

MB = 1024 * 1024


# -- patterns RE2 cannot run are refused where they are configured -----------------------------

LOOKAHEAD = r"(?=(a+))+b"
BACKREF = r"(a+)\1$"


@pytest.mark.parametrize(("config", "where", "why"), [
    ({"graders": [{"type": "tool-calls", "config": {"disallowed": [
        {"name": "fetch", "result": LOOKAHEAD}]}}]},
     "graders[0].config.disallowed[0].result", "lookaround"),
    ({"graders": [{"type": "tool-calls", "config": {"required": [
        {"name": "bash", "command": r"^(?!rm )"}]}}]},
     "graders[0].config.required[0].command", "lookaround"),
    ({"graders": [{"type": "tool-calls", "config": {"required": [
        {"name": "fetch", "args": {"url": r"(?<=https://)evil"}}]}}]},
     "graders[0].config.required[0].args", "lookaround"),
    ({"graders": [{"type": "tool-calls", "config": {"required": [{"name": r"(\w)\1"}]}}]},
     "graders[0].config.required[0].name", "backreference"),
    ({"graders": [{"kind": "tool", "function": "regex_match", "extractor": "tool_output",
                   "extractor_config": {"tool_name": "fetch"}, "ground_truth": BACKREF}]},
     "graders[0].ground_truth", "backreference"),
    ({"graders": [{"kind": "tool", "function": "contains", "extractor": "pattern",
                   "extractor_config": {"pattern": r"(?P<q>['\"]).*(?P=q)"},
                   "ground_truth": "x"}]},
     "graders[0].extractor_config.pattern", "backreference"),
    ({"runs": {"ignore_tools": ["ok", LOOKAHEAD]}}, "runs.ignore_tools[1]", "lookaround"),
    ({"runs": {"agent_span_names": [BACKREF]}}, "runs.agent_span_names[0]", "backreference"),
    ({"runs": {"root": r"^(?!internal)"}}, "runs.root", "lookaround"),
    ({"conventions": [{"span_name": LOOKAHEAD, "model": True}]}, "conventions[0].span_name",
     "lookaround"),
])
def test_patterns_re2_cannot_run_are_config_errors_naming_the_field_and_why(
        config: dict[str, Any], where: str, why: str) -> None:
    config.setdefault("graders", [{"type": "tool-calls", "config": {"required": ["x"]}}])
    with pytest.raises(ConfigError) as err:
        load_config(config)
    message = str(err.value)
    assert where in message
    assert "unsupported regular expression" in message and why in message
    assert "RE2" in message and "linear-time" in message


@pytest.mark.parametrize(("pattern", "why"), [
    (r"(a++)+$", "possessive"), (r"(?>a+)+$", "atomic"), (r"a\Z", r"\z"),
    (r"a{1,1001}", "1000"), (r"(a{1,1000}){1,1000}", "1000"), (r"(?P<x>a)(?P=x)", "backref"),
    (r"(?<!a)b", "lookaround"), (r"(", "RE2"),
])
def test_unsupported_reason_says_why(pattern: str, why: str) -> None:
    reason = unsupported_reason(pattern)
    assert reason is not None and why in reason
    with pytest.raises(ValueError, match=re.escape(why)):
        compile_user(pattern)


@pytest.mark.parametrize("pattern", [
    r"(/[\w.-]+)+", r"(\s*,\s*\w+)*", r"(a|ab)+", r"(a|b)*c", r"\s+$", r"\w+@", r"(ab+)+",
    r"^report_result$", r"\.env$", "npm test", r"(a{2})+", r"([a-z]+\.)+com", r"(\w+\s)+",
    r"(a+){3}", r"(?i)(a+B)+", r"([a-z]+[A-Z])+", r"(?i)BUILD SUCCEEDED", r"^(?:mcp__)?fetch$",
    # nested repetition, once refused as exponential, now linear on RE2
    r"(a+)+$", r"(a*)*", r"(\w+\s?)*$", r"(.*,)+", r"(a|aa)+", r"(x+x+)+y", r"(\d+,?)+$",
    r"(a|a)+$", r"(.*a){20}", r"(a{1,10}){1,10}$",
])
def test_ordinary_and_nested_patterns_are_accepted(pattern: str) -> None:
    assert unsupported_reason(pattern) is None
    load_config({"graders": [{"type": "tool-calls", "config": {"required": [
        {"name": "t", "result": pattern}]}}]})


# The review's attack patterns: each froze CPython's re on a 41-character argument.
ATTACKS = [r"(a|a)+$", r"(?=(a+))+b", r"(.*a){20}", r"(a{1,10}){1,10}$", r"(a+)+$",
           r"(\w+\s?)*$"]


def _attack_config(pattern: str) -> dict[str, Any]:
    return {
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
        "runs": {"ignore_tools": [pattern], "agent_span_names": [pattern]},
        "conventions": [{"span_name": pattern, "model": True}],
        "limits": {"grading_budget_ms": 0},     # the budget could not stop one match
    }


@pytest.mark.parametrize("pattern", ATTACKS)
@pytest.mark.parametrize("size", [41, MB])
def test_attack_patterns_are_refused_or_graded_in_linear_time(pattern: str, size: int) -> None:
    try:
        cfg = load_config(_attack_config(pattern))
    except ConfigError as err:
        assert pattern == r"(?=(a+))+b"          # lookaround: refused, and told why
        assert "lookaround" in str(err) and "graders[0].config.disallowed[0].result" in str(err)
        return
    text = "a" * (size - 1) + "!"               # almost matches: the worst case for backtracking
    started = time.monotonic()
    run = run_of([call("fetch", {"command": text, "url": text}, text)], cfg.policy,
                 root_attrs={"final_result": text})
    report = grade_run(run, cfg)
    elapsed = time.monotonic() - started
    assert elapsed < 1.0, elapsed
    assert report is not None and len(report.results) == 5
    assert all(r.error is None for r in report.results), [r.explanation for r in report.results]


@pytest.mark.parametrize("pattern", [p for p in ATTACKS if "(?=" not in p])
def test_attack_patterns_on_a_whole_megabyte_take_milliseconds(pattern: str) -> None:
    """Without truncation: the engine alone bounds the time (yes/no searches of 1 MB)."""
    cfg = load_config({
        "graders": [g for g in _attack_config(pattern)["graders"] if g["name"] != "extract"],
        "limits": {"grading_budget_ms": 0, "max_match_chars": 4 * MB}})
    text = "a" * (MB - 1) + "!"
    run = run_of([call("fetch", {"command": text, "url": text}, text)], cfg.policy)
    started = time.monotonic()
    report = grade_run(run, cfg)
    elapsed = time.monotonic() - started
    assert elapsed < 0.5, elapsed
    assert report is not None and all(r.error is None for r in report.results)


def test_a_ground_truth_from_the_run_that_re2_cannot_run_fails_without_running() -> None:
    cfg = load_config({"graders": [{"kind": "tool", "function": "regex_match",
                                    "extractor": "tool_output",
                                    "extractor_config": {"tool_name": "fetch"}}]})
    run = run_of([call("fetch", {"url": "u"}, "a" * MB + "b")],
                 root_attrs={"tooleval.ground_truth": LOOKAHEAD})
    report = grade_run(run, cfg)
    assert report is not None
    (result,) = report.results
    assert result.label == "fail" and result.score == 0.0
    assert "not run" in result.explanation and "lookaround" in result.explanation
    assert result.details["unsupported_pattern"] is True


def test_a_catastrophic_ground_truth_from_the_run_runs_in_linear_time() -> None:
    cfg = load_config({"graders": [{"kind": "tool", "function": "regex_match",
                                    "extractor": "tool_output",
                                    "extractor_config": {"tool_name": "fetch"}}],
                       "limits": {"max_match_chars": 4 * MB, "grading_budget_ms": 0}})
    for truth, passed in ((r"(a|a)+$", False), (r"(a|a)+b$", True)):
        run = run_of([call("fetch", {"url": "u"}, "a" * MB + "b")],
                     root_attrs={"tooleval.ground_truth": truth})
        started = time.monotonic()
        report = grade_run(run, cfg)
        assert time.monotonic() - started < 1.0
        assert report is not None and report.results[0].passed is passed


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
        "graders": _attack_config(pattern)["graders"],   # the same graders as the attacks
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
        assert search(compile_user("HEAD"), text)
        assert search(compile_user("TAIL$"), text)
        assert search(compile_user("MIDDLE"), text) is None        # documented: not searched
        assert search(compile_user("^x"), text) is None            # "^" only at the real start
    assert search(compile_user("MIDDLE"), text) is None           # the default applies outside
    with grading_limits(len(text)):
        assert search(compile_user("MIDDLE"), text)


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


# RE2's slowest case: a pattern whose DFA would need 2**100 states, on random "a"/"b" text,
# makes it fall back to its NFA (linear still, but ~0.3 us a character).
SLOW_FOR_RE2 = "(?:a|b)*a(?:a|b){100}c"


def _random_ab(n: int, seed: int = 0) -> str:
    bits = random.Random(seed).getrandbits(n)
    return format(bits, f"0{n}b").translate(str.maketrans("01", "ab"))


def test_budget_stops_a_grader_between_two_matches() -> None:
    # 400 calls, each result 8 kB of random "a"/"b": every search takes a while.
    # (a text of its own per call: RE2 would answer a text it has seen from its DFA cache)
    calls = [call("fetch", {}, _random_ab(8192, seed)) for seed in range(400)]
    cfg = load_config({
        "graders": [
            {"name": "slow", "type": "tool-calls",
             "config": {"required": [{"name": "fetch", "result": SLOW_FOR_RE2,
                                      "min_count": 400}]}},
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
             "config": {"disallowed": [{"name": "fetch", "result": SLOW_FOR_RE2}]}},
            {"name": "after", "type": "tool-calls", "config": {"required": ["fetch"]}},
        ], "limits": {"max_match_chars": 65536}},
        SimpleSpanProcessor(exporter), on_report=on_report)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    # 100 kB per result, 100 calls: 10 MB per run

    def agent_run(n_calls: int, result: str | None = None) -> list[float]:
        ends = []
        with tracer.start_as_current_span(
                "invoke_agent slow", attributes={"gen_ai.operation.name": "invoke_agent",
                                                 "gen_ai.agent.name": "slow"}):
            for _ in range(n_calls):
                span = tracer.start_span("execute_tool fetch", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch",
                    "gen_ai.tool.call.arguments": "{}",
                    "gen_ai.tool.call.result": result or _random_ab(100_000, seed=len(ends))})
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


def test_a_lone_surrogate_in_a_value_is_matched_not_raised() -> None:
    """RE2 reads UTF-8, which has no lone surrogates (a broken "\\ud800" in a span's JSON): the
    adapter matches them as U+FFFD instead of letting UnicodeEncodeError end the grader. (A
    guard for the RE2 change itself: Python's re never raised here.)"""
    cfg = load_config({"graders": [
        {"name": "result", "type": "tool-calls",
         "config": {"required": [{"name": "fetch", "result": "^ok .* done$"}]}},
        {"name": "regex", "kind": "tool", "function": "regex_match", "extractor": "tool_output",
         "extractor_config": {"tool_name": "fetch"}, "ground_truth": "(o)k"}]})
    text = "ok \ud800 done"
    report = grade_run(run_of([call("fetch", {"url": text}, text)], cfg.policy), cfg)
    assert report is not None
    assert [(r.passed, r.error) for r in report.results] == [(True, None), (True, None)]
    long_text = "x" * (2 * DEFAULT_MAX_MATCH_CHARS) + text    # the truncated path as well
    with grading_limits(DEFAULT_MAX_MATCH_CHARS):
        assert search(compile_user("\ufffd done$"), long_text) is not None
