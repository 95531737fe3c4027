"""``tail``: ended spans in, decided traces out (the core of the exporter and of ``serve``)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import load_config
from otel_tooleval._compat import record_from_span
from otel_tooleval.grading import grade_records
from otel_tooleval.model import RunReport, SpanRecord
from otel_tooleval.tail import TailBuffers, TailGrader

TRACE = 0xABC
AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}
CONFIG = load_config({"graders": [{"name": "calls", "type": "tool-calls",
                                   "config": {"required": [{"name": "search"}]}}]})


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def tool(span_id: int, parent: int, name: str = "search", trace: int = TRACE) -> SpanRecord:
    return SpanRecord(trace, span_id, parent, f"execute_tool {name}", span_id, span_id + 1,
                      {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name})


def span(span_id: int, parent: int, attrs: dict[str, Any] | None = None, *,
         trace: int = TRACE, name: str = "s") -> SpanRecord:
    return SpanRecord(trace, span_id, parent, name, span_id, 1000, attrs or {})


def buffers(clock: Clock, config: Any = CONFIG, **kw: Any) -> TailBuffers[str]:
    return TailBuffers(config, kw.pop("decision_wait", 5.0), clock=clock, **kw)


def feed(b: TailBuffers[str], *records: SpanRecord) -> list[str]:
    forward, evicted = b.add((r, f"{r.trace_id:x}/{r.span_id:x}", 10) for r in records)
    assert not evicted
    return forward


def test_only_possible_roots_are_held_and_a_trace_is_due_a_wait_after_its_local_root() -> None:
    clock = Clock()
    b = buffers(clock)
    now = feed(b, tool(3, 2), span(4, 2, {"gen_ai.operation.name": "chat"}), span(2, 1, AGENT))
    assert now == ["abc/3", "abc/4"]          # tool and model spans go on at once
    assert b.take_due() == [] and b.next_due() is None
    assert feed(b, span(1, 0, name="HTTP GET")) == []   # the local root: held, due in 5 s
    clock.now += 4.9
    assert b.take_due() == []
    clock.now += 0.2
    (decision,) = b.take_due()
    assert decision.reason == "root"
    assert [item for _, item in decision.held] == ["abc/2", "abc/1"]
    assert len(decision.records) == 4 and b.spans == 0 and b.bytes == 0
    report, = grade_records(decision.records, CONFIG)
    assert report.run.root_span_id == 2 and [c.name for c in report.run.calls] == ["search"]


def test_a_framework_span_is_held_only_with_an_agent_below_it() -> None:
    clock = Clock()
    b = buffers(clock)
    chain = {"openinference.span.kind": "CHAIN"}
    # A chain without an agent below is no run root: it goes on at once.
    assert feed(b, span(5, 4, chain)) == ["abc/5"]
    # A chain above an agent span (through a plain span) may be the run root: held.
    assert feed(b, span(3, 2, AGENT), span(2, 6), span(6, 1, chain)) == ["abc/2"]


def test_late_spans_of_a_decided_trace_go_on_and_are_counted() -> None:
    clock = Clock()
    drops: list[tuple[str, int]] = []
    b = buffers(clock, on_drop=lambda reason, n: drops.append((reason, n)))
    feed(b, span(1, 0, AGENT))
    clock.now += 6
    assert len(b.take_due()) == 1
    assert feed(b, tool(9, 1)) == ["abc/9"]
    assert b.counts["late_spans"] == 1 and drops == [("late_span", 1)]
    clock.now += CONFIG.limits.tombstone_seconds + 1
    b.take_due()                              # the tombstone expires
    assert feed(b, tool(10, 1)) == ["abc/a"]  # now a new (rootless) trace
    assert len(b) == 1


def test_rootless_traces_are_decided_after_the_ttl_with_what_arrived() -> None:
    clock = Clock()
    b = buffers(clock)
    feed(b, tool(3, 2), span(2, 1, AGENT))    # the agent's parent never comes
    clock.now += CONFIG.limits.run_ttl_seconds - 1
    assert b.take_due() == []
    clock.now += 2
    (decision,) = b.take_due()
    assert decision.reason == "ttl"
    (report,) = grade_records(decision.records, CONFIG)
    assert report.run.root_span_id == 2 and report.passed


def test_caps_evict_the_oldest_trace_and_forward_past_the_span_cap() -> None:
    config = load_config({"graders": [{"type": "tool-call-order", "tool_calls_order": ["a"]}],
                          "limits": {"max_open_runs": 2, "max_spans_per_trace": 2}})
    clock = Clock()
    drops: list[str] = []
    b: TailBuffers[str] = TailBuffers(config, 5.0, clock=clock,
                                      on_drop=lambda reason, n: drops.append(reason))
    b.add([(span(1, 0, AGENT, trace=1), "t1", 1)])
    b.add([(span(1, 0, AGENT, trace=2), "t2", 1)])
    forward, evicted = b.add([(span(1, 0, AGENT, trace=3), "t3", 1)])
    assert forward == [] and [d.reason for d in evicted] == ["max_open_runs"]
    assert [item for _, item in evicted[0].held] == ["t1"] and not evicted[0].graded
    forward, _ = b.add([(tool(2, 1, trace=3), "x", 1), (tool(3, 1, trace=3), "y", 1)])
    assert forward == ["x", "y"]
    assert drops == ["max_open_runs", "max_spans_per_trace"]
    assert b.spans == 3   # t2: its root; t3: its root and one tool


def test_full_reports_the_span_and_byte_bounds() -> None:
    clock = Clock()
    b = buffers(clock, max_spans=3, max_bytes=25)
    feed(b, tool(3, 2), tool(4, 2))
    assert not b.full()
    feed(b, tool(5, 2))           # 3 spans, 30 bytes
    assert b.full()
    b.take_due(everything="shutdown")
    assert not b.full() and b.spans == 0


def _spans(run: Any) -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    run(provider)
    provider.shutdown()
    return list(memory.get_finished_spans())


def _graded_by_tail(spans: list[ReadableSpan], config: Any) -> list[RunReport]:
    reports: list[RunReport] = []
    forwarded: list[ReadableSpan] = []
    grader: TailGrader[ReadableSpan] = TailGrader(
        config, forward=forwarded.extend, annotate=lambda item, record, report: item,
        decision_wait=0.0, on_report=reports.append)
    forwarded.extend(grader.accept((record_from_span(s), s, 0) for s in spans))
    assert grader.flush(10)
    assert grader.shutdown(10)
    assert sorted(id(s) for s in forwarded) == sorted(id(s) for s in spans)
    return reports


@pytest.mark.frameworks
@pytest.mark.parametrize("framework", ["pydantic-ai", "langgraph", "langgraph-agent-root"])
def test_tail_cuts_and_grades_real_framework_traces_as_the_offline_grader_does(
        framework: str) -> None:
    from tests.support.agents import run_langgraph_weather, run_pydantic_ai_weather

    run = {
        "pydantic-ai": lambda p: run_pydantic_ai_weather(p),
        "langgraph": lambda p: run_langgraph_weather(p),
        "langgraph-agent-root": lambda p: run_langgraph_weather(p, graph_name="weather_agent"),
    }[framework]
    config = load_config({"graders": [
        {"name": "weather", "type": "tool-calls",
         "config": {"required": [{"name": "get_weather"}]}},
        {"name": "order", "type": "tool-call-order", "tool_calls_order": ["get_weather"]}]})
    spans = _spans(run)
    live = _graded_by_tail(spans, config)
    offline = grade_records([record_from_span(s) for s in spans], config)
    assert offline and [r.to_dict() for r in live] == [r.to_dict() for r in offline]


def test_grader_thread_decides_due_traces_and_shutdown_decides_the_rest() -> None:
    reports: list[RunReport] = []
    forwarded: list[str] = []
    grader: TailGrader[str] = TailGrader(
        CONFIG, forward=forwarded.extend, annotate=lambda item, record, report: item + "*",
        decision_wait=0.05, on_report=reports.append)
    assert grader.accept([(tool(2, 1), "tool", 0), (span(1, 0, AGENT), "root", 0)]) == ["tool"]
    deadline = time.monotonic() + 5
    while not forwarded and time.monotonic() < deadline:
        time.sleep(0.01)
    assert forwarded == ["root*"] and reports[0].passed
    # A rootless trace waits for its TTL; shutdown decides it now, graded with what arrived.
    grader.accept([(span(7, 6, AGENT, trace=2), "orphan-agent", 0)])
    assert grader.shutdown(5)
    assert forwarded == ["root*", "orphan-agent*"]
    assert grader.accept([(tool(2, 1, trace=3), "after", 0)]) == ["after"]
    assert grader.stats()["runs"] == 2


def test_a_failing_forward_is_contained_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    def broken(items: list[str]) -> None:
        raise RuntimeError("exporter down")

    grader: TailGrader[str] = TailGrader(CONFIG, forward=broken,
                                         annotate=lambda i, r, rep: i, decision_wait=0.0)
    for trace in (1, 2):
        grader.accept([(span(1, 0, AGENT, trace=trace), "root", 0)])
        assert grader.flush(5)
    assert grader.shutdown(5)
    assert sum("forwarding failed" in r.getMessage() for r in caplog.records) == 1
