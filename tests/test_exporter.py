"""``ToolEvalSpanExporter`` on a real TracerProvider: verdicts, exactly-once, waits and faults."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import ConfigError, RunReport, ToolEvalSpanExporter, ToolEvalSpanProcessor
from otel_tooleval.demo.agent import SCRIPTS, default_config_text, run_scripted_agent
from tests.support.harness import VerdictSinks
from tests.support.otlp_receiver import OtlpReceiver

AGENT = {"gen_ai.operation.name": "invoke_agent"}
CONFIG = {
    "graders": [
        {"name": "uses-search", "type": "tool-calls", "config": {"required": ["^search$"]}},
        {"name": "no-delete", "type": "tool-calls", "config": {"disallowed": ["^delete$"]}},
    ]
}
# Tool spans pass straight through (not held for their violation marks).
PASS_THROUGH = {**CONFIG, "emit": {"violation_marks": False}}


class Setup(VerdictSinks):
    """TracerProvider → span processor → ToolEvalSpanExporter → wrapped exporter."""

    def __init__(self, config: Any = CONFIG, wrapped: SpanExporter | None = None, *,
                 batch: bool = False, decision_wait: float = 0.05, **options: Any) -> None:
        super().__init__()
        self.memory = InMemorySpanExporter()
        self.wrapped = wrapped if wrapped is not None else self.memory
        self.exporter = ToolEvalSpanExporter(
            self.wrapped, config, decision_wait=decision_wait, **self.front_door_options(options))
        self.processor: SpanProcessor = (BatchSpanProcessor(self.exporter, schedule_delay_millis=50)
                                         if batch else SimpleSpanProcessor(self.exporter))
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("tests")
        self.started = 0

    def flush(self) -> bool:
        self.provider.force_flush(10_000)
        return self.exporter.force_flush(10_000)

    def finished(self) -> list[ReadableSpan]:
        return list(self.memory.get_finished_spans())

    def roots(self) -> list[ReadableSpan]:
        return [s for s in self.finished() if "tooleval.passed" in (s.attributes or {})]

    def span(self, name: str, attributes: dict[str, Any], **kw: Any) -> Any:
        self.started += 1
        return self.tracer.start_as_current_span(name, attributes=attributes, **kw)

    @contextmanager
    def agent(self, agent: str = "agent") -> Iterator[trace.Span]:
        with self.span(f"invoke_agent {agent}", {**AGENT, "gen_ai.agent.name": agent}) as span:
            yield span

    def tool(self, name: str) -> None:
        with self.span("chat m", {"gen_ai.operation.name": "chat"}):
            pass
        with self.span(f"execute_tool {name}",
                       {"gen_ai.tool.name": name, "gen_ai.tool.call.arguments": "{}",
                        "gen_ai.tool.call.result": json.dumps("ok")}):
            pass

    def agent_run(self, calls: list[str], agent: str = "agent") -> None:
        with self.agent(agent):
            for name in calls:
                self.tool(name)

    def metric_points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        return [p for rm in (data.resource_metrics if data else ()) for sm in rm.scope_metrics
                for m in sm.metrics if m.name == name for p in m.data.data_points]

    def close(self) -> None:
        self.provider.shutdown()
        self.logger_provider.shutdown()
        self.meter_provider.shutdown()


@pytest.fixture
def s() -> Iterator[Setup]:
    setup = Setup()
    yield setup
    setup.close()


def assert_exactly_once(spans: Sequence[ReadableSpan], expected: int) -> None:
    ids = [span.context.span_id for span in spans]
    assert len(ids) == len(set(ids)) == expected


# -- verdicts and exactly-once ------------------------------------------------------------------

def test_root_reaches_the_wrapped_exporter_as_a_copy_with_verdicts(s: Setup) -> None:
    s.agent_run(["search", "delete"], agent="planner")
    assert s.flush()
    assert_exactly_once(s.finished(), s.started)
    (root,) = s.roots()
    attrs = dict(root.attributes or {})
    assert attrs["tooleval.passed"] is False
    assert attrs["tooleval.failed"] == ("no-delete",)
    assert attrs["tooleval.tool_calls"] == 2
    assert attrs["gen_ai.agent.name"] == "planner"
    events = [e for e in root.events if e.name == "gen_ai.evaluation.result"]
    assert [e.attributes["gen_ai.evaluation.name"] for e in events] == ["uses-search", "no-delete"]
    assert [e.attributes["gen_ai.evaluation.score.label"] for e in events] == ["pass", "fail"]
    assert all(e.timestamp == root.end_time for e in events)
    for span in s.finished():
        if span is root:
            continue
        marks = {k: v for k, v in (span.attributes or {}).items() if k.startswith("tooleval.")}
        if span.name == "execute_tool delete":     # the call no-delete names
            assert marks == {"tooleval.violation": True, "tooleval.violation.graders": ("no-delete",)}
        else:
            assert marks == {}
    # log events in the root's context, metrics by agent
    logs = [d.log_record for d in s.logs.get_finished_logs()]
    assert [r.event_name for r in logs] == ["gen_ai.evaluation.result"] * 2
    assert {(r.trace_id, r.span_id) for r in logs} == {(root.context.trace_id,
                                                        root.context.span_id)}
    runs = {(p.attributes["gen_ai.agent.name"], p.attributes["tooleval.passed"]): p.value
            for p in s.metric_points("tooleval.runs")}
    assert runs == {("planner", False): 1}


def test_children_go_on_at_once_and_the_root_after_the_decision_wait() -> None:
    s = Setup(PASS_THROUGH, decision_wait=1.0)
    try:
        s.agent_run(["search"])
        names = [span.name for span in s.finished()]
        assert names == ["chat m", "execute_tool search"]      # root held, children forwarded
        deadline = time.monotonic() + 5
        while not s.roots() and time.monotonic() < deadline:
            time.sleep(0.02)
        (root,) = s.roots()                                     # no flush: the grading thread
        assert root.attributes["tooleval.passed"] is True
        assert_exactly_once(s.finished(), 3)
    finally:
        s.close()


def test_batch_processor_every_span_once_and_shutdown_decides_everything() -> None:
    s = Setup(batch=True, decision_wait=30.0)   # only shutdown can decide in time
    for calls in (["search"], ["delete"], ["search", "search"]):
        s.agent_run(calls)
    open_root = s.tracer.start_span("invoke_agent open", attributes=AGENT)   # never ends
    s.started += 1
    with s.tracer.start_as_current_span("execute_tool search", context=trace.set_span_in_context(
            open_root), attributes={"gen_ai.tool.name": "search"}):
        s.started += 1
    s.provider.shutdown()   # BatchSpanProcessor → exporter.shutdown(timeout_millis=...)
    spans = s.finished()
    assert_exactly_once(spans, s.started - 1)     # everything that ended
    assert sorted(bool((r.attributes or {})["tooleval.passed"]) for r in s.roots()) == [
        False, True, True]
    assert len(s.reports) == 3   # a lone tool span whose root never ended is no run
    assert s.exporter.stats()["open_traces"] == 0
    s.logger_provider.shutdown()
    s.meter_provider.shutdown()


def test_late_child_within_the_wait_counts_as_pending_and_after_it_as_late() -> None:
    s = Setup(decision_wait=0.6)
    try:
        root = s.tracer.start_span("invoke_agent a", attributes=AGENT)
        ctx = trace.set_span_in_context(root)
        s.tracer.start_span("execute_tool search", context=ctx,
                            attributes={"gen_ai.tool.name": "search"}).end()
        slow = s.tracer.start_span("execute_tool delete", context=ctx,
                                   attributes={"gen_ai.tool.name": "delete"})
        root.end()
        slow.end()              # after its root, within the wait
        assert s.flush()
        (report,) = s.reports
        assert [(c.name, c.pending) for c in report.run.calls] == [("search", False),
                                                                 ("delete", True)]
        assert report.run.pending_calls == 1
        assert not report.passed
        later = s.tracer.start_span("execute_tool search", context=ctx,
                                    attributes={"gen_ai.tool.name": "search"})
        later.end()             # after the decision: forwarded as it is, counted
        assert s.flush()
        assert len(s.reports) == 1
        assert s.exporter.stats()["late_spans"] == 1
        assert_exactly_once(s.finished(), 4)
        dropped = {p.attributes["reason"]: p.value
                   for p in s.metric_points("tooleval.runs.dropped")}
        assert dropped == {"late_span": 1}
    finally:
        s.close()


def test_runs_of_one_trace_and_of_separate_traces_are_graded_once_each(s: Setup) -> None:
    with s.span("request", {}):         # a plain root with two sibling agent runs
        s.agent_run(["search"], agent="a")
        s.agent_run(["delete"], agent="b")
    s.agent_run(["search"], agent="c")  # another trace
    assert s.flush()
    assert s.flush()                    # a second flush grades nothing again
    assert sorted(r.run.agent or "" for r in s.reports) == ["a", "b", "c"]
    assert sorted(str((r.attributes or {})["gen_ai.agent.name"]) for r in s.roots()) == [
        "a", "b", "c"]
    assert_exactly_once(s.finished(), s.started)
    assert s.exporter.stats()["runs"] == 3


@pytest.mark.parametrize("channel", ["span_events", "root_attributes"])
def test_span_channels_can_be_switched_off(channel: str) -> None:
    s = Setup({**CONFIG, "emit": {channel: False}})
    try:
        s.agent_run(["search"])
        assert s.flush()
        (root,) = [x for x in s.finished() if x.name.startswith("invoke_agent")]
        has_events = any(e.name == "gen_ai.evaluation.result" for e in root.events)
        has_attrs = "tooleval.passed" in (root.attributes or {})
        assert (has_events, has_attrs) == ((False, True) if channel == "span_events"
                                           else (True, False))
    finally:
        s.close()


def test_config_errors_raise_at_construction() -> None:
    with pytest.raises(ConfigError):
        ToolEvalSpanExporter(InMemorySpanExporter(),
                             {"graders": [{"type": "tool-calls", "config": {}}]})


# -- flush, shutdown, faults --------------------------------------------------------------------

class Recording(SpanExporter):
    """Records what it gets and whether instrumentation was suppressed while it exported."""

    def __init__(self) -> None:
        self.batches: list[list[ReadableSpan]] = []
        self.suppressed: list[bool] = []
        self.flushes = 0
        self.shutdowns = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY

        self.suppressed.append(bool(otel_context.get_value(_SUPPRESS_INSTRUMENTATION_KEY)))
        self.batches.append(list(spans))
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        self.flushes += 1
        return True

    def shutdown(self) -> None:
        self.shutdowns += 1


def test_force_flush_and_shutdown_semantics() -> None:
    wrapped = Recording()
    s = Setup(PASS_THROUGH, wrapped=wrapped, decision_wait=30.0)
    s.agent_run(["search"])
    assert len(wrapped.batches) == 2                # the children, one by one
    assert s.exporter.force_flush(5_000) is True    # skips the rest of the wait
    assert wrapped.flushes == 1
    assert [sp.name for sp in wrapped.batches[-1]] == ["invoke_agent agent"]
    assert all(wrapped.suppressed), "exports from the grading thread must not be traced"
    assert s.exporter.shutdown() is True
    assert s.exporter.shutdown() is True            # idempotent
    assert wrapped.shutdowns == 1
    assert s.exporter.export(wrapped.batches[0]) is SpanExportResult.FAILURE
    assert s.exporter.force_flush(100) is True
    assert len(wrapped.batches) == 3
    s.close()


class Raising(Recording):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        super().export(spans)
        raise RuntimeError("export")

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        raise RuntimeError("flush")

    def shutdown(self) -> None:
        super().shutdown()
        raise RuntimeError("shutdown")


def test_wrapped_exporter_that_raises_never_reaches_the_caller(
        caplog: pytest.LogCaptureFixture) -> None:
    wrapped = Raising()
    s = Setup(PASS_THROUGH, wrapped=wrapped, decision_wait=0.0)
    s.agent_run(["search"])        # SimpleSpanProcessor: export runs on this thread
    assert s.exporter.force_flush(5_000) is False
    assert len(s.reports) == 1     # graded all the same
    assert s.exporter.export([]) is SpanExportResult.SUCCESS
    assert s.exporter.shutdown(1_000) is False          # reported, never raised
    assert wrapped.shutdowns == 1
    assert len(wrapped.batches) == 3                    # every span was offered once
    messages = [r.getMessage() for r in caplog.records if r.name == "otel_tooleval.exporter"]
    assert sum("exporter.export failed" in m for m in messages) == 1   # logged once
    s.close()


class Hanging(Recording):
    """``export`` blocks until released (or shut down), like a stuck network call."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        super().export(spans)
        self.entered.set()
        self.release.wait(30)
        return SpanExportResult.SUCCESS


def test_hanging_wrapped_exporter_flush_and_shutdown_are_bounded() -> None:
    wrapped = Hanging()
    exporter = ToolEvalSpanExporter(wrapped, PASS_THROUGH, decision_wait=0.0)
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests")
    with tracer.start_as_current_span("invoke_agent a", attributes=AGENT), \
            tracer.start_as_current_span("execute_tool search",
                                         attributes={"gen_ai.tool.name": "search"}):
        pass
    with tracer.start_as_current_span("invoke_agent b", attributes=AGENT), \
            tracer.start_as_current_span("GET /weather"), \
            tracer.start_as_current_span("connect"):
        pass
    child, root, http, connect = memory.get_finished_spans()[:4]
    stuck = threading.Thread(target=exporter.export, args=([child],), daemon=True)
    stuck.start()                                  # holds the lock inside the wrapped export
    assert wrapped.entered.wait(5)
    assert exporter.export([root]) is SpanExportResult.SUCCESS   # held; forwarded later
    results: list[SpanExportResult] = []           # two spans passing through wait behind it
    waiting = threading.Thread(target=lambda: results.append(exporter.export([connect, http])),
                               daemon=True)
    waiting.start()
    started = time.monotonic()
    assert exporter.force_flush(300) is False
    assert exporter.shutdown(timeout_millis=500) is False
    assert time.monotonic() - started < 2.5
    assert wrapped.shutdowns == 1                  # called even though export is stuck
    waiting.join(5)
    assert results == [SpanExportResult.FAILURE]   # given up at the deadline, and counted
    until = time.monotonic() + 2     # the grading thread gives up at the deadline, too
    while exporter.stats().get("dropped.shutdown", 0) < 2 and time.monotonic() < until:
        time.sleep(0.02)
    stats = exporter.stats()
    # per run: the held root of a (it could not go on) and b, whose root never arrived
    assert stats["dropped.shutdown"] == 2
    assert stats["dropped.export_deadline"] == 2   # the spans passing through, one each
    wrapped.release.set()
    stuck.join(5)
    provider.shutdown()


def test_held_tool_spans_the_hanging_exporter_cannot_take_are_counted() -> None:
    """Violation marks hold tool spans with their root; when the wrapped exporter hangs past
    the shutdown deadline, each held span is counted, none silently lost."""
    wrapped = Hanging()
    exporter = ToolEvalSpanExporter(wrapped, CONFIG, decision_wait=0.0)
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests")
    with tracer.start_as_current_span("invoke_agent a", attributes=AGENT):
        for tool in ("search", "delete"):
            with tracer.start_as_current_span(f"execute_tool {tool}",
                                              attributes={"gen_ai.tool.name": tool}):
                pass
    with tracer.start_as_current_span("invoke_agent b", attributes=AGENT), \
            tracer.start_as_current_span("connect"):
        pass
    search, delete, root, connect = memory.get_finished_spans()[:4]
    stuck = threading.Thread(target=exporter.export, args=([connect],), daemon=True)
    stuck.start()                                  # passes through; hangs holding the lock
    assert wrapped.entered.wait(5)
    for span in (search, delete, root):            # held: tool spans wait for the verdict
        assert exporter.export([span]) is SpanExportResult.SUCCESS
    assert exporter.shutdown(timeout_millis=500) is False
    until = time.monotonic() + 3
    while ((exporter.stats().get("dropped.export_deadline", 0) < 2
            or exporter.stats().get("dropped.shutdown", 0) < 1) and time.monotonic() < until):
        time.sleep(0.02)
    time.sleep(0.2)                                # nothing more is counted later
    stats = exporter.stats()
    assert stats["dropped.export_deadline"] == 2   # the two held tool spans, one each
    assert stats["dropped.shutdown"] == 1          # a's held root (b held nothing: its one
    assert stats["marked_spans"] == 1              # span went straight on, and hangs there)
    assert [[s.name for s in batch] for batch in wrapped.batches] == [["connect"]]
    wrapped.release.set()
    stuck.join(5)
    provider.shutdown()


def test_spans_it_cannot_read_are_forwarded_as_they_are(s: Setup) -> None:
    class Odd:
        name = "odd"

        @property
        def context(self) -> Any:
            raise ValueError("no context")

    odd = Odd()
    recording = Recording()
    exporter = ToolEvalSpanExporter(recording, CONFIG)
    assert exporter.export([odd]) is SpanExportResult.SUCCESS  # type: ignore[list-item]
    assert recording.batches == [[odd]]  # type: ignore[comparison-overlap]
    exporter.shutdown()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_child_has_its_own_lock_and_buffers() -> None:
    recording = Recording()
    exporter = ToolEvalSpanExporter(recording, CONFIG, decision_wait=30.0)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    open_root = tracer.start_span("invoke_agent a", attributes=AGENT)
    with tracer.start_as_current_span("execute_tool search", attributes={
            "gen_ai.tool.name": "search"}, context=trace.set_span_in_context(open_root)):
        pass
    held = tracer.start_span("invoke_agent held", attributes=AGENT)
    held.end()                                     # held in the parent's buffers
    read, write = os.pipe()
    with exporter._lock:                           # another thread would hold it at the fork
        pid = os.fork()
        if pid == 0:  # child
            try:
                os.close(read)
                buffered = exporter.stats()["open_traces"]
                with tracer.start_as_current_span("invoke_agent c", attributes=AGENT), \
                        tracer.start_as_current_span("execute_tool search", attributes={
                            "gen_ai.tool.name": "search"}):
                    pass
                flushed = exporter.force_flush(5_000)
                roots = [sp for b in recording.batches for sp in b
                         if "tooleval.passed" in (sp.attributes or {})]
                os.write(write, f"{buffered} {flushed} {len(roots)}".encode())
            finally:
                os._exit(0)
    os.close(write)
    got = os.read(read, 100).decode()
    os.waitpid(pid, 0)
    assert got == "0 True 1"
    assert exporter.stats()["open_traces"] == 2     # the parent keeps its own
    open_root.end()
    provider.shutdown()


# -- the same verdicts as the processor ---------------------------------------------------------

def both_front_doors(config: Any) -> tuple[TracerProvider, list[RunReport], list[RunReport],
                                           ToolEvalSpanProcessor, ToolEvalSpanExporter]:
    """One provider feeding the processor and the exporter the very same spans."""
    by_processor: list[RunReport] = []
    by_exporter: list[RunReport] = []
    processor = ToolEvalSpanProcessor(config, SimpleSpanProcessor(InMemorySpanExporter()),
                                      on_report=by_processor.append)
    exporter = ToolEvalSpanExporter(InMemorySpanExporter(), config, on_report=by_exporter.append,
                                    decision_wait=0.05)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
    return provider, by_processor, by_exporter, processor, exporter


def as_dicts(reports: list[RunReport]) -> list[dict[str, Any]]:
    return sorted((r.to_dict() for r in reports), key=lambda d: d["root_span_id"])


def test_same_reports_as_the_processor_on_the_demo_scripts() -> None:
    config = default_config_text()
    provider, by_processor, by_exporter, _, exporter = both_front_doors(config)
    tracer = provider.get_tracer("demo")
    for _, turns in SCRIPTS:
        run_scripted_agent(tracer, turns)
    provider.force_flush()
    exporter.force_flush()
    assert len(by_processor) == len(SCRIPTS)
    assert as_dicts(by_exporter) == as_dicts(by_processor)
    assert [d["passed"] for d in as_dicts(by_exporter)].count(False) == 2
    provider.shutdown()


@pytest.mark.frameworks
def test_same_reports_as_the_processor_on_a_pydantic_ai_run() -> None:
    pytest.importorskip("pydantic_ai")
    from tests.support.agents import run_pydantic_ai_weather

    config = {"graders": [
        {"name": "weather", "type": "tool-calls",
         "config": {"required": ["^get_weather$"], "disallowed": ["^convert_temp$"]}},
        {"name": "order", "type": "tool-call-order", "strict": False,
         "tool_calls_order": ["lookup_city", "get_weather"]},
    ]}
    provider, by_processor, by_exporter, _, exporter = both_front_doors(config)
    run_pydantic_ai_weather(provider)
    provider.force_flush()
    exporter.force_flush()
    assert len(by_processor) == 1
    (report,) = as_dicts(by_exporter)
    assert report == as_dicts(by_processor)[0]
    assert report["tool_calls"] == 4 and report["passed"] is False
    provider.shutdown()


# -- real OTLP exporters into a loopback receiver ------------------------------------------------

def otlp_exporter(protocol: str, rx: OtlpReceiver) -> SpanExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        return OTLPSpanExporter(endpoint=rx.grpc_endpoint, insecure=True, timeout=5)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HTTPSpanExporter,
    )
    return HTTPSpanExporter(endpoint=f"{rx.http_endpoint}/v1/traces", timeout=5)


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_verdicts_arrive_over_otlp(receiver: OtlpReceiver, protocol: str) -> None:
    exporter = ToolEvalSpanExporter(otlp_exporter(protocol, receiver), default_config_text(),
                                    decision_wait=0.2)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
    tracer = provider.get_tracer("demo")
    for _, turns in SCRIPTS:
        run_scripted_agent(tracer, turns)
    provider.shutdown()
    spans = receiver.spans()
    assert len(spans) == len({sp["span_id"] for sp in spans}) == 41
    roots = sorted((sp for sp in spans if sp["name"] == "invoke_agent travel_agent"),
                   key=lambda sp: sp["attributes"]["tooleval.score"])
    assert [r["attributes"]["tooleval.passed"] for r in roots].count(False) == 2
    for root in roots:
        events = [e for e in root["events"] if e["name"] == "gen_ai.evaluation.result"]
        assert len(events) == 4
        assert root["parent_span_id"] is None


# -- deadlines: force_flush and shutdown return by timeout_millis, whatever hangs ------------------
#
# Each call must return within its timeout plus generous slack (SLACK_S: these are not timing
# tests, only "it returned"), and say False when it could not finish. A hang that outlasts the
# bound (HANG_S) is released by the test at the end.

SLACK_S = 5.0
HANG_S = 60.0


class Stuck(Recording):
    """A wrapped exporter whose chosen calls block until released (or HANG_S)."""

    def __init__(self, *, export: bool = False, flush: bool = False, shutdown: bool = False,
                 shutdown_takes_timeout: bool = False) -> None:
        super().__init__()
        self.hang = {"export": export, "flush": flush, "shutdown": shutdown}
        self.entered: dict[str, threading.Event] = {k: threading.Event() for k in self.hang}
        self.release = threading.Event()
        if shutdown_takes_timeout:
            self.shutdown = self._shutdown_with_timeout  # type: ignore[method-assign]

    def _block(self, what: str) -> None:
        self.entered[what].set()
        if self.hang[what]:
            self.release.wait(HANG_S)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        super().export(spans)
        self._block("export")
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        super().force_flush(timeout_millis)
        self._block("flush")
        return True

    def shutdown(self) -> None:
        super().shutdown()
        self._block("shutdown")

    def _shutdown_with_timeout(self, timeout_millis: int = 30_000) -> None:
        super().shutdown()
        self._block("shutdown")   # ignores its timeout, as a buggy exporter may


def _returns_within(call: Callable[[], Any], timeout_ms: int) -> Any:
    """The call's result, asserting it came back within its timeout plus SLACK_S."""
    started = time.monotonic()
    result = call()
    assert time.monotonic() - started < timeout_ms / 1000 + SLACK_S, "did not honour its timeout"
    return result


def _one_run(tracer: trace.Tracer, agent: str = "a") -> None:
    with tracer.start_as_current_span(f"invoke_agent {agent}", attributes=AGENT), \
            tracer.start_as_current_span("execute_tool search",
                                         attributes={"gen_ai.tool.name": "search"}):
        pass


@pytest.fixture
def stuck_setups() -> Iterator[list[tuple[Stuck, Setup]]]:
    made: list[tuple[Stuck, Setup]] = []
    yield made
    for wrapped, setup in made:
        wrapped.release.set()
        setup.close()


def _setup(made: list[tuple[Stuck, Setup]], wrapped: Stuck, **options: Any) -> Setup:
    s = Setup(wrapped=wrapped, **options)
    made.append((wrapped, s))
    return s


def test_force_flush_returns_false_when_the_wrapped_force_flush_hangs(
        stuck_setups: list[tuple[Stuck, Setup]]) -> None:
    wrapped = Stuck(flush=True)
    s = _setup(stuck_setups, wrapped, decision_wait=30.0)
    s.agent_run(["search"])
    assert _returns_within(lambda: s.exporter.force_flush(300), 300) is False
    assert wrapped.entered["flush"].is_set()
    assert len(s.reports) == 1           # graded and forwarded before the wrapped flush
    # The lock is back once the wrapped flush returns: exports go on.
    wrapped.release.set()
    deadline = time.monotonic() + SLACK_S
    while s.exporter._lock.locked() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s.exporter.export([]) is SpanExportResult.SUCCESS
    assert s.exporter.force_flush(5_000) is True


@pytest.mark.parametrize("takes_timeout", [False, True])
def test_shutdown_returns_false_when_the_wrapped_shutdown_hangs(
        stuck_setups: list[tuple[Stuck, Setup]], takes_timeout: bool) -> None:
    wrapped = Stuck(shutdown=True, shutdown_takes_timeout=takes_timeout)
    s = _setup(stuck_setups, wrapped, decision_wait=30.0)
    s.agent_run(["search"])
    assert _returns_within(lambda: s.exporter.shutdown(timeout_millis=300), 300) is False
    assert wrapped.entered["shutdown"].is_set() and wrapped.shutdowns == 1
    assert len(s.reports) == 1           # the open trace was decided first


def test_shutdown_returns_when_the_grading_thread_is_busy_and_export_hangs(
        stuck_setups: list[tuple[Stuck, Setup]]) -> None:
    """The grading thread is stuck in a report callback; the run it has not reached yet is
    forwarded ungraded by shutdown itself, into a wrapped export that hangs."""
    busy = threading.Event()
    free = threading.Event()

    def on_report(report: RunReport) -> None:
        busy.set()
        free.wait(HANG_S)

    wrapped = Stuck()
    s = _setup(stuck_setups, wrapped, decision_wait=0.0, on_report=on_report)
    s.agent_run(["search"], agent="first")
    assert busy.wait(SLACK_S)            # the grading thread is inside on_report
    s.agent_run(["search"], agent="second")
    wrapped.hang["export"] = True        # from now on the wrapped export hangs
    try:
        assert _returns_within(lambda: s.exporter.shutdown(timeout_millis=300), 300) is False
        assert _returns_within(lambda: s.exporter.force_flush(300), 300) is True  # shut down
    finally:
        free.set()
    assert s.exporter.stats()["dropped.shutdown"] >= 1


def test_force_flush_returns_false_while_the_grading_thread_is_busy(
        stuck_setups: list[tuple[Stuck, Setup]]) -> None:
    busy = threading.Event()
    free = threading.Event()
    reports: list[RunReport] = []

    def on_report(report: RunReport) -> None:
        reports.append(report)
        busy.set()
        free.wait(HANG_S)

    s = _setup(stuck_setups, Stuck(), decision_wait=0.0, on_report=on_report)
    try:
        s.agent_run(["search"], agent="first")
        assert busy.wait(SLACK_S)
        s.agent_run(["search"], agent="second")
        assert _returns_within(lambda: s.exporter.force_flush(300), 300) is False
    finally:
        free.set()
    assert s.exporter.force_flush(10_000) is True
    assert len(reports) == 2


def test_force_flush_and_shutdown_return_when_the_wrapped_exporter_hangs_everywhere(
        stuck_setups: list[tuple[Stuck, Setup]]) -> None:
    """Export (holding the lock), force_flush and shutdown all hang at once."""
    wrapped = Stuck(flush=True, shutdown=True)
    s = _setup(stuck_setups, wrapped, decision_wait=0.0)
    wrapped.hang["export"] = True
    worker = threading.Thread(target=s.agent_run, args=(["search"],), daemon=True)
    worker.start()                       # SimpleSpanProcessor: the first child's export hangs
    assert wrapped.entered["export"].wait(SLACK_S)
    assert _returns_within(lambda: s.exporter.force_flush(300), 300) is False
    assert _returns_within(lambda: s.exporter.shutdown(timeout_millis=300), 300) is False
    wrapped.release.set()
    worker.join(SLACK_S)


def test_shutdown_answers_false_when_the_grading_thread_counted_a_loss_in_time() -> None:
    """The grading thread gave up on a held root at the shutdown deadline (counted
    ``dropped.shutdown``) and still answered the shutdown request just in time: the exporter
    did not hand everything to the wrapped exporter, so its shutdown is no success."""
    exporter = ToolEvalSpanExporter(InMemorySpanExporter(), CONFIG, decision_wait=0.0)
    grader = exporter._grader
    assert grader is not None
    shut = grader.shutdown

    def counted_then_answered(timeout_seconds: float = 30.0) -> bool:
        grader.buffers.counts["dropped.shutdown"] += 1   # as the grading thread counts it
        return shut(timeout_seconds)

    grader.shutdown = counted_then_answered   # type: ignore[method-assign]
    assert exporter.shutdown(2_000) is False
    assert exporter.stats()["dropped.shutdown"] == 1
