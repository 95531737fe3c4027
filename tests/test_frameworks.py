"""End to end: real pydantic-ai and LangGraph runs, graded live by ``ToolEvalSpanProcessor``.

Every test drives a real framework offline (scripted models, see ``tests.support.agents``) into
a real ``TracerProvider`` with the processor under test wrapping
``SimpleSpanProcessor(InMemorySpanExporter())``. A second, unwrapped exporter on the same
provider (the control) records the spans exactly as the framework ended them, so a test can tell
what the processor changed (only the run roots, and only by adding verdicts) from what it must
leave alone.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from otel_tooleval import RunReport, ToolEvalSpanProcessor
from tests.support.agents import (
    DEFAULT_SCRIPT,
    FINAL_ANSWER,
    run_langgraph_weather,
    run_pydantic_ai_weather,
)

pytestmark = pytest.mark.frameworks

EVENT = "gen_ai.evaluation.result"
TOOLS_IN_ORDER = ["lookup_city", "get_weather", "get_weather", "convert_temp"]
STEPS = [0, 1, 2, 2]  # get_weather(Lyon) and convert_temp come from one model response
RESULTS = [
    "Paris",
    {"city": "Paris", "temp_c": 21.0, "conditions": "sunny"},
    {"city": "Lyon", "temp_c": 18.0, "conditions": "cloudy"},
    "69.8",   # a scalar result stays the text the span recorded
]
# pydantic-ai records every argument object as JSON.
PYDANTIC_ARGS = [{"query": "paris"}, {"city": "Paris"}, {"city": "Lyon"}, {"celsius": 21.0}]
# OpenInference records a tool's lone string argument bare (input.mime_type text/plain); the
# model's request ({"query": "paris"}) stands for it (reconcile rule 5, a lesser form).
LANGGRAPH_ARGS = PYDANTIC_ARGS

LYON_ONLY_SCRIPT = [[("get_weather", {"city": "Lyon"})], "Lyon 18C"]
# Skips convert_temp and asks for a city the weather tool does not know.
BAD_SCRIPT = [
    [("lookup_city", {"query": "paris"})],
    [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "London"})],
    "Paris 21C, London unknown",
]

# Checks that hold on the default script under both frameworks (no argument filters, since
# LangGraph's single-string arguments are not objects).
SHARED_CHECKS: dict[str, Any] = {
    "required": [
        {"name": "^lookup_city$", "at_step": 0, "result": "^Paris$"},
        {"name": "^get_weather$", "min_count": 2, "before_step": 3},
        {"name": "^get_weather$", "at_step": 2, "result": r'"temp_c":18\.0'},
        {"name": "^convert_temp$", "final": True, "result": r"^69\.8$"},
    ],
    "disallowed": ["^delete_", {"name": "^get_weather$", "result": "unknown"}],
    "sequence": ["lookup_city", "get_weather", "get_weather", "convert_temp"],
}
# Argument filters for pydantic-ai, whose arguments are JSON objects.
PYDANTIC_ARG_CHECKS: dict[str, Any] = {
    "required": [
        {"name": "^lookup_city$", "args": {"query": "^paris$"}, "at_step": 0},
        {"name": "^get_weather$", "args": {"city": "^Lyon$"}, "before_step": 3},
    ],
    "disallowed": [{"name": "^get_weather$", "args": {"city": "(?i)london"}}],
    # Replaces the shared sequence: the same four calls, told apart by their arguments.
    "sequence": [{"name": "^lookup_city$", "args": {"query": "paris"}},
                 {"name": "^get_weather$", "args": {"city": "^Paris$"}},
                 {"name": "^get_weather$", "args": {"city": "^Lyon$"}},
                 "^convert_temp$"],
}

# Five checks on the default pydantic-ai script, four of which fail.
BROKEN_FLOW: dict[str, Any] = {
    "name": "broken-flow",
    "type": "tool-calls",
    "config": {
        "required": [
            {"name": "^convert_temp$", "at_step": 1},        # it ran in step 2
            {"name": "^get_weather$", "final": True},        # the last call is convert_temp
            "lookup_city",                                   # holds
        ],
        "disallowed": [{"name": "^get_weather$", "args": {"city": "^Lyon$"}}],  # call #2
        "sequence": ["convert_temp", "lookup_city"],         # nothing after #3
    },
}

WEATHER_POLICY: dict[str, Any] = {
    "name": "weather-policy",
    "type": "tool-calls",
    "config": {
        "required": [{"name": "^convert_temp$", "final": True}],
        "disallowed": [{"name": "^get_weather$", "result": '"conditions":"unknown"'}],
        "sequence": ["lookup_city", "get_weather", "convert_temp"],
    },
}


def _tool_calls(name: str, *parts: Mapping[str, Any]) -> dict[str, Any]:
    """A tool-calls grader; required/disallowed entries add up, a later sequence replaces."""
    merged: dict[str, list[Any]] = {}
    for part in parts:
        for key, entries in part.items():
            if key == "sequence":
                merged[key] = list(entries)
            else:
                merged.setdefault(key, []).extend(entries)
    return {"name": name, "type": "tool-calls", "config": merged}


# --------------------------------------------------------------------------- harness


@dataclass
class Graded:
    """One provider whose spans are graded live, and what came out of it."""

    processor: ToolEvalSpanProcessor
    provider: TracerProvider
    exported: InMemorySpanExporter       # behind the processor
    control: InMemorySpanExporter        # the same spans, straight from the SDK
    reports: list[RunReport] = field(default_factory=list)

    def flush(self) -> None:
        assert self.processor.force_flush(10_000)
        self.reports.sort(key=lambda r: r.run.start_ns)

    def exported_by_id(self) -> dict[int, ReadableSpan]:
        spans = self.exported.get_finished_spans()
        counts = Counter(s.context.span_id for s in spans)
        assert all(n == 1 for n in counts.values()), "a span was exported more than once"
        return {s.context.span_id: s for s in spans}

    def control_by_id(self) -> dict[int, ReadableSpan]:
        return {s.context.span_id: s for s in self.control.get_finished_spans()}


@contextmanager
def graded(config: Mapping[str, Any]) -> Iterator[Graded]:
    exported, control = InMemorySpanExporter(), InMemorySpanExporter()
    reports: list[RunReport] = []
    processor = ToolEvalSpanProcessor(
        dict(config),
        SimpleSpanProcessor(exported),
        meter_provider=MeterProvider(),
        logger_provider=LoggerProvider(),
        on_report=reports.append,
    )
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(control))
    provider.add_span_processor(processor)
    harness = Graded(processor, provider, exported, control, reports)
    try:
        yield harness
    finally:
        provider.shutdown()


def _need_pydantic_ai() -> None:
    pytest.importorskip("pydantic_ai")


def _need_langgraph() -> None:
    pytest.importorskip("langgraph")
    pytest.importorskip("openinference.instrumentation.langchain")


def _run_pydantic(provider: TracerProvider, script: Any = None) -> str:
    _need_pydantic_ai()
    return run_pydantic_ai_weather(provider, script=script)


def _run_langgraph(provider: TracerProvider, script: Any = None) -> str:
    _need_langgraph()
    return run_langgraph_weather(provider, script=script)


def _run_langgraph_agent_root(provider: TracerProvider, script: Any = None) -> str:
    _need_langgraph()
    return run_langgraph_weather(provider, script=script, graph_name="weather_agent")


@pytest.fixture
def _pydantic_ai() -> None:
    _need_pydantic_ai()


@pytest.fixture
def _langgraph() -> None:
    _need_langgraph()


needs_pydantic_ai = pytest.mark.usefixtures("_pydantic_ai")
needs_langgraph = pytest.mark.usefixtures("_langgraph")

FRAMEWORKS = [
    pytest.param(_run_pydantic, id="pydantic-ai"),
    pytest.param(_run_langgraph, id="langgraph"),
    pytest.param(_run_langgraph_agent_root, id="langgraph-agent-root"),
]


def _checks(report: RunReport, grader: str) -> list[dict[str, Any]]:
    (result,) = [r for r in report.results if r.name == grader]
    return list(result.details["checks"])


def _assert_root_copy(copy: ReadableSpan, original: ReadableSpan, report: RunReport) -> None:
    """The exported root is the original plus the verdicts, and nothing else changed."""
    assert copy is not original
    extra = {k: v for k, v in copy.attributes.items() if k not in original.attributes}
    assert {k: copy.attributes[k] for k in original.attributes} == dict(original.attributes)
    expected = {
        "tooleval.passed": report.passed,
        "tooleval.score": pytest.approx(report.score),
        "tooleval.tool_calls": len(report.run.calls),
        **{f"tooleval.reading.{k}": v for k, v in report.run.reading.to_dict().items()},
    }
    if report.failed:
        expected["tooleval.failed"] = list(report.failed)
    assert {k: list(v) if isinstance(v, tuple) else v for k, v in extra.items()} == expected

    old_events = list(original.events)
    assert list(copy.events[: len(old_events)]) == old_events
    new_events = copy.events[len(old_events):]
    assert [e.name for e in new_events] == [EVENT] * len(report.results)
    for event, result in zip(new_events, report.results):
        assert event.timestamp == original.end_time
        assert event.attributes["gen_ai.evaluation.name"] == result.name
        assert event.attributes["gen_ai.evaluation.score.value"] == pytest.approx(result.score)
        assert event.attributes["gen_ai.evaluation.score.label"] == result.label
        assert event.attributes["gen_ai.evaluation.explanation"] == result.explanation

    def rest(span: ReadableSpan) -> dict[str, Any]:
        doc = json.loads(span.to_json())
        doc.pop("attributes")
        doc.pop("events")
        return doc

    assert rest(copy) == rest(original)


def _assert_only_roots_changed(g: Graded) -> dict[int, ReadableSpan]:
    """Every span exported exactly once; non-roots untouched; each root carries its verdicts."""
    exported, control = g.exported_by_id(), g.control_by_id()
    assert exported.keys() == control.keys()
    roots = {r.run.root_span_id: r for r in g.reports}
    assert len(roots) == len(g.reports)
    failing = {name for r in g.reports for name in r.failed}
    for span_id, span in exported.items():
        if span_id in roots:
            _assert_root_copy(span, control[span_id], roots[span_id])
        else:
            # Untouched, but for the marks a failing grader puts on a call it names
            # (emit.violation_marks, on by default: docs/violations.md).
            got = json.loads(span.to_json())
            marked = got["attributes"].pop("tooleval.violation", None)
            graders = got["attributes"].pop("tooleval.violation.graders", None)
            assert got == json.loads(control[span_id].to_json()), span.name
            if marked is not None:
                assert marked is True and graders and set(graders) <= failing, (span.name,
                                                                                 graders)
            assert not any(e.name == EVENT for e in span.events), span.name
    return exported


def _calls(report: RunReport) -> list[tuple[str, Any, Any, int]]:
    return [(c.name, c.arguments, c.result, c.step) for c in report.run.calls]


# --------------------------------------------------------------------------- pydantic-ai


@needs_pydantic_ai
def test_pydantic_ai_run_is_graded_live_with_every_tool_calls_check_passing() -> None:
    config = {"graders": [_tool_calls("weather-flow", SHARED_CHECKS, PYDANTIC_ARG_CHECKS)]}
    with graded(config) as g:
        assert run_pydantic_ai_weather(g.provider) == FINAL_ANSWER
        g.flush()

        (report,) = g.reports
        run = report.run
        assert run.agent == "weather_agent"
        assert run.root_name == "invoke_agent weather_agent"
        assert _calls(report) == list(zip(TOOLS_IN_ORDER, PYDANTIC_ARGS, RESULTS, STEPS))
        assert [c.index for c in run.calls] == [0, 1, 2, 3]
        assert [c.call_id for c in run.calls] == ["call_0_0", "call_1_0", "call_2_0", "call_2_1"]
        assert all(c.completed and c.has_result and c.error is None for c in run.calls)
        assert run.steps == len(DEFAULT_SCRIPT)
        assert run.pending_calls == 0 and run.late_spans == 0
        assert run.final_output == FINAL_ANSWER

        (result,) = report.results
        checks = _checks(report, "weather-flow")
        assert (result.passed, result.label, result.score) == (True, "pass", 1.0), checks
        assert all(c["passed"] for c in checks)
        assert Counter(c["check"] for c in checks) == {"required": 6, "disallowed": 3,
                                                       "sequence": 1}
        required = [c["calls"] for c in checks if c["check"] == "required"]
        assert required == [[0], [1, 2], [2], [3], [0], [2]]
        assert [c["calls"] for c in checks if c["check"] == "disallowed"] == [[], [], []]
        (sequence,) = [c for c in checks if c["check"] == "sequence"]
        assert sequence["calls"] == [0, 1, 2, 3]

        exported = _assert_only_roots_changed(g)
        root = exported[run.root_span_id]
        assert root.attributes["tooleval.passed"] is True
        assert root.attributes["tooleval.tool_calls"] == 4
        assert "tooleval.failed" not in root.attributes
        assert g.processor.stats()["runs"] == 1


@needs_pydantic_ai
def test_pydantic_ai_failing_config_names_the_failed_checks_and_call_positions() -> None:
    config = {"graders": [_tool_calls("weather-flow", SHARED_CHECKS), BROKEN_FLOW]}
    with graded(config) as g:
        assert run_pydantic_ai_weather(g.provider) == FINAL_ANSWER
        g.flush()

        (report,) = g.reports
        good, broken = report.results
        assert (good.name, good.passed) == ("weather-flow", True)
        assert (broken.passed, broken.label) == (False, "fail")
        assert broken.score == pytest.approx(1 / 5)
        assert report.failed == ("broken-flow",)
        assert report.score == pytest.approx((1.0 + 0.2) / 2)

        checks = _checks(report, "broken-flow")
        summary = [(c["check"], c.get("index"), c["passed"], c["calls"]) for c in checks]
        assert summary == [
            ("required", 0, False, []),          # convert_temp exists, but not in step 1
            ("required", 1, False, [1, 2]),      # get_weather matched, neither is last
            ("required", 2, True, [0]),
            ("disallowed", 0, False, [2]),       # get_weather(city=Lyon) is call #2
            ("sequence", None, False, [3]),      # convert_temp #3, then no lookup_city
        ]
        assert checks[-1]["matched_entries"] == 1 and checks[-1]["entries"] == 2

        text = broken.explanation
        assert text.startswith("4 of 5 checks failed")
        assert "'^convert_temp$' needs a completed call in step 1, found 0" in text
        assert "the final call is #3 (convert_temp)" in text
        assert "called at #2 (get_weather)" in text
        assert "sequence broken at entry 1 ('lookup_city')" in text
        # Values never leak into explanations (the args pattern is not echoed either).
        assert "Lyon" not in text and "paris" not in text.lower()

        exported = _assert_only_roots_changed(g)
        root = exported[report.run.root_span_id]
        assert root.attributes["tooleval.passed"] is False
        assert list(root.attributes["tooleval.failed"]) == ["broken-flow"]
        assert root.attributes["tooleval.score"] == pytest.approx(0.6)
        labels = {e.attributes["gen_ai.evaluation.name"]:
                  e.attributes["gen_ai.evaluation.score.label"]
                  for e in root.events if e.name == EVENT}
        assert labels == {"weather-flow": "pass", "broken-flow": "fail"}


# --------------------------------------------------------------------------- LangGraph


@needs_langgraph
@pytest.mark.parametrize(("graph_name", "root_kind"), [("LangGraph", "CHAIN"),
                                                       ("weather_agent", "AGENT")])
def test_langgraph_graph_is_one_run_with_nested_agent_nodes_merged(graph_name: str,
                                                                   root_kind: str) -> None:
    config = {"graders": [_tool_calls("weather-flow", SHARED_CHECKS)]}
    with graded(config) as g:
        assert run_langgraph_weather(g.provider, graph_name=graph_name) == FINAL_ANSWER
        g.flush()

        control = g.control_by_id()
        agent_nodes = [s for s in control.values()
                       if s.attributes.get("openinference.span.kind") == "AGENT"
                       and s.name == "agent"]
        assert len(agent_nodes) == len(DEFAULT_SCRIPT)   # nested agents exist ...
        (report,) = g.reports                            # ... and are merged into one run
        run = report.run
        root = control[run.root_span_id]
        assert root.parent is None and root.name == graph_name
        assert root.attributes["openinference.span.kind"] == root_kind
        assert run.agent == graph_name

        assert [c.name for c in run.calls] == TOOLS_IN_ORDER
        assert [c.arguments for c in run.calls] == LANGGRAPH_ARGS
        # The span recorded a bare "paris"; the request's {"query": "paris"} stands.
        assert control[run.calls[0].span_id].attributes["input.value"] == "paris"
        assert [c.result for c in run.calls] == RESULTS  # ToolMessage envelopes unwrapped
        # Steps come from the LLM spans (ScriptedChatModel), not from the AGENT node spans.
        assert [c.step for c in run.calls] == STEPS
        assert run.steps == len(DEFAULT_SCRIPT)
        assert run.pending_calls == 0
        assert run.final_output == FINAL_ANSWER

        (result,) = report.results
        assert (result.passed, result.score) == (True, 1.0), result.explanation
        _assert_only_roots_changed(g)
        assert g.processor.stats()["runs"] == 1


@needs_langgraph
def test_langgraph_bare_string_arguments_take_the_requests_names_for_args_filters() -> None:
    # The single string argument has no name in the tool span; the model's request names it
    # (reconcile rule 5), so args filters see {"query": "paris"}.
    config = {"graders": [_tool_calls("args", {"required": [
        {"name": "^lookup_city$", "args": {"query": "paris"}},
        {"name": "^convert_temp$", "args": {"celsius": "21"}},   # numeric: never matchable
    ]})]}
    with graded(config) as g:
        run_langgraph_weather(g.provider)
        g.flush()
        (report,) = g.reports
        assert report.run.calls[0].arguments == {"query": "paris"}
        assert [c["passed"] for c in _checks(report, "args")] == [True, False]


# --------------------------------------------------------------------------- outer HTTP span


def _under_http_span(g: Graded, agent: Callable[..., str]) -> tuple[str, str, Any]:
    """Two agent runs, the default script then LYON_ONLY_SCRIPT, inside one HTTP server span."""
    tracer = g.provider.get_tracer("tests.http.server")
    with tracer.start_as_current_span(
        "GET /weather", kind=SpanKind.SERVER,
        attributes={"http.request.method": "GET", "url.path": "/weather"},
    ) as http:
        first = agent(g.provider)
        second = agent(g.provider, LYON_ONLY_SCRIPT)
    return first, second, http


def _assert_two_sibling_runs(g: Graded, http_span: Any, arguments: Sequence[Any]) -> None:
    g.flush()
    assert len(g.reports) == 2, [(r.run.root_name, len(r.run.calls)) for r in g.reports]
    full, lyon = g.reports
    http_id = http_span.get_span_context().span_id
    control = g.control_by_id()
    for report in (full, lyon):
        root = control[report.run.root_span_id]
        assert root.parent is not None and root.parent.span_id == http_id
        assert report.run.trace_id == http_span.get_span_context().trace_id

    assert [(c.name, c.arguments, c.step) for c in full.run.calls] == list(
        zip(TOOLS_IN_ORDER, arguments, STEPS))
    assert full.run.final_output == FINAL_ANSWER
    assert full.passed, full.results[0].explanation

    # The second run sees its one call only: lookup_city, a second get_weather and
    # convert_temp are missing, and so is the sequence; only the disallowed check holds.
    (call,) = lyon.run.calls
    assert (call.name, call.step, call.index) == ("get_weather", 0, 0)
    assert lyon.run.final_output == "Lyon 18C"
    (result,) = lyon.results
    assert not result.passed
    failed = [(c["check"], c.get("index")) for c in result.details["checks"] if not c["passed"]]
    assert failed == [("required", 0), ("required", 1), ("required", 2), ("sequence", None)]
    assert result.explanation.startswith("4 of 5 checks failed")
    assert result.score == pytest.approx(1 / 5)

    exported = _assert_only_roots_changed(g)
    http = exported[http_id]
    assert http.to_json() == control[http_id].to_json()
    assert not any(k.startswith("tooleval.") for k in http.attributes)
    assert exported[full.run.root_span_id].attributes["tooleval.tool_calls"] == 4
    assert exported[lyon.run.root_span_id].attributes["tooleval.tool_calls"] == 1
    assert g.processor.stats()["runs"] == 2
    assert g.processor.stats()["open_traces"] == 0


HTTP_CONFIG = {"graders": [_tool_calls("weather-flow", {
    "required": [
        {"name": "^lookup_city$", "at_step": 0},
        {"name": "^get_weather$", "min_count": 2},
        {"name": "^convert_temp$", "final": True},
    ],
    "disallowed": ["^delete_"],
    "sequence": ["lookup_city", "get_weather"],
})]}


@needs_pydantic_ai
def test_pydantic_ai_twice_under_an_http_span_gives_two_runs() -> None:
    with graded(HTTP_CONFIG) as g:
        first, second, http = _under_http_span(g, _run_pydantic)
        assert (first, second) == (FINAL_ANSWER, "Lyon 18C")
        _assert_two_sibling_runs(g, http, PYDANTIC_ARGS)
        assert {r.run.agent for r in g.reports} == {"weather_agent"}


@needs_langgraph
def test_langgraph_agent_roots_twice_under_an_http_span_give_two_runs() -> None:
    with graded(HTTP_CONFIG) as g:
        _, _, http = _under_http_span(g, _run_langgraph_agent_root)
        _assert_two_sibling_runs(g, http, LANGGRAPH_ARGS)
        assert {r.run.agent for r in g.reports} == {"weather_agent"}


@needs_langgraph
def test_langgraph_chain_roots_twice_under_an_http_span_give_two_runs() -> None:
    # The graph's CHAIN root (not each AGENT node inside it) is the run, even when it is not
    # the local root; the nested "agent" nodes are merged into it.
    with graded(HTTP_CONFIG) as g:
        _, _, http = _under_http_span(g, _run_langgraph)
        _assert_two_sibling_runs(g, http, LANGGRAPH_ARGS)
        assert {r.run.agent for r in g.reports} == {"LangGraph"}


# --------------------------------------------------------------------------- failing script


@pytest.mark.parametrize("agent", FRAMEWORKS)
def test_script_that_skips_convert_temp_and_asks_an_unknown_city_fails(
        agent: Callable[..., str]) -> None:
    with graded({"graders": [WEATHER_POLICY]}) as g:
        assert agent(g.provider, BAD_SCRIPT) == "Paris 21C, London unknown"
        g.flush()

        (report,) = g.reports
        assert [(c.name, c.step) for c in report.run.calls] == [
            ("lookup_city", 0), ("get_weather", 1), ("get_weather", 1)]
        (result,) = report.results
        assert (result.passed, result.label, result.score) == (False, "fail", 0.0)
        summary = [(c["check"], c["passed"], c["calls"]) for c in result.details["checks"]]
        assert summary == [
            ("required", False, []),
            ("disallowed", False, [2]),
            ("sequence", False, [0, 1]),
        ]
        text = result.explanation
        assert text.startswith("3 of 3 checks failed")
        assert "required '^convert_temp$' needs a completed call as the final call, found 0" in text
        assert "disallowed '^get_weather$ (with result)' called at #2 (get_weather)" in text
        assert "sequence broken at entry 2 ('convert_temp')" in text
        assert "London" not in text and "unknown" not in text

        exported = _assert_only_roots_changed(g)
        root = exported[report.run.root_span_id]
        assert root.attributes["tooleval.passed"] is False
        assert list(root.attributes["tooleval.failed"]) == ["weather-policy"]
        assert root.attributes["tooleval.score"] == 0.0
