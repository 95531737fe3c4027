"""Faults the live front doors must contain: graders, downstream processors and exporters that
raise or hang, a full grading queue, shutdown with runs open, and ``fork`` with runs open.

The rules (ARCHITECTURE, "Rules every front door keeps"): nothing raises into the application;
the application never waits on a grader; ``force_flush``/``shutdown`` return a bool within their
deadline; every drop is counted; every span reaches the exporting side exactly once.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import RunReport, ToolEvalSpanExporter, ToolEvalSpanProcessor
from otel_tooleval.graders.tool_calls import ToolCallsGrader
from tests.robustness import support
from tests.robustness.support import (
    AGENT,
    CONFIG,
    ENTERED,
    GATED,
    HangingExporter,
    Key,
    RaisingExporter,
    RecordingProcessor,
    assert_each_span_once,
    check_calls,
    check_report,
    dropped_by_reason,
    expected_calls,
    metric_points,
    new_meter_provider,
    roots_of,
    run_agent,
    run_agents,
    run_threads,
    spans_per_run,
    wait_child,
    wait_until,
)

SLACK = 2.0     # seconds a bounded call may overrun its own timeout on a loaded machine


def graded(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in roots_of(spans) if "tooleval.passed" in (s.attributes or {})]


def ungraded(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in roots_of(spans) if "tooleval.passed" not in (s.attributes or {})]


def key_of_root(span: ReadableSpan) -> Key:
    return support.key_of(span.name.removeprefix("invoke_agent "))


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def in_thread(target: Callable[[], None], seconds: float = 60.0) -> None:
    """Run ``target`` as the application would and insist that it finishes (never blocked)."""
    run_threads(1, lambda _: target(), deadline=seconds)


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """The slow grader ``rb_gated`` (config ``GATED``) blocks until this is set."""
    support.GATE = threading.Event()
    ENTERED.clear()
    yield support.GATE
    support.GATE.set()


# -- graders that raise -----------------------------------------------------------------------

RAISING = {"graders": [
    {"name": "custom-raises", "kind": "tool",
     "function": "tests.robustness.support:rb_custom_raises"},
    {"name": "builtin-raises", "type": "tool-calls", "config": {"required": ["^tool_"]}},
    {"name": "exits", "kind": "tool", "function": "tests.robustness.support:rb_custom_exits"},
    {"name": "counts", "kind": "tool", "function": "tests.robustness.support:rb_custom_counts"},
    {"name": "bad-at-most-once", "type": "tool-call-count",
     "tool_calls_count": {"bad": ["<=", 1]}},
]}
RAISING_RESULTS = [("custom-raises", "error", "RuntimeError"),
                   ("builtin-raises", "error", "KeyError"),
                   ("exits", "error", "SystemExit"),
                   ("counts", "pass", None),
                   ("bad-at-most-once", "pass", None)]
ERRORED = tuple(name for name, label, _ in RAISING_RESULTS if label == "error")


class FrontDoor:
    """A TracerProvider feeding the processor or the exporter, into one in-memory exporter."""

    def __init__(self, kind: str, config: Any, **options: Any) -> None:
        self.kind = kind
        self.memory = InMemorySpanExporter()
        self.meter_provider, self.reader = new_meter_provider()
        self.logs = InMemoryLogRecordExporter()
        self.logger_provider = LoggerProvider()
        self.logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.logs))
        self.reports: list[RunReport] = []
        options.setdefault("on_report", self.reports.append)
        options.update(meter_provider=self.meter_provider, logger_provider=self.logger_provider)
        self.provider = TracerProvider()
        self.front: ToolEvalSpanProcessor | ToolEvalSpanExporter
        if kind == "processor":
            self.front = ToolEvalSpanProcessor(
                config, BatchSpanProcessor(self.memory, schedule_delay_millis=50), **options)
            self.provider.add_span_processor(self.front)
        else:
            self.front = ToolEvalSpanExporter(self.memory, config, decision_wait=0.05, **options)
            self.provider.add_span_processor(
                BatchSpanProcessor(self.front, schedule_delay_millis=50))
        self.tracer = self.provider.get_tracer("robustness")

    def flush(self) -> bool:
        self.provider.force_flush(10_000)
        return self.front.force_flush(10_000)

    def spans(self) -> list[ReadableSpan]:
        return list(self.memory.get_finished_spans())

    def close(self) -> None:
        self.provider.shutdown()
        self.logger_provider.shutdown()
        self.meter_provider.shutdown()


@pytest.mark.parametrize("kind", ["processor", "exporter"])
def test_raising_graders_are_error_results_and_the_root_still_goes_once(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A custom grader that raises, one that calls ``sys.exit``, a built-in whose ``grade``
    raises: each is an ``error`` result with ``error.type``; the other graders still run, on
    every run, and every root is exported once, with its verdicts."""
    def broken(self: ToolCallsGrader, run: Any) -> Any:
        raise KeyError("built-in grader bug")

    monkeypatch.setattr(ToolCallsGrader, "grade", broken)
    door = FrontDoor(kind, RAISING)
    try:
        keys = [(t, i) for t in range(3) for i in range(1, 5)]
        run_threads(3, lambda t: run_agents(door.tracer, [(t, i) for i in range(1, 5)]))
        assert door.flush() is True
        assert sorted(check_calls(r) for r in door.reports) == sorted(keys)
        for report in door.reports:
            assert [(r.name, r.label, r.error) for r in report.results] == RAISING_RESULTS
            assert "custom grader bug" not in str(report.to_dict())   # values stay out
        spans = door.spans()
        assert_each_span_once(spans, sum(spans_per_run(k) for k in keys))
        roots = graded(spans)
        assert len(roots) == len(keys)
        for root in roots:
            attrs = dict(root.attributes or {})
            assert attrs["tooleval.passed"] is False
            assert attrs["tooleval.failed"] == ERRORED
            events = [dict(e.attributes or {}) for e in root.events
                      if e.name == "gen_ai.evaluation.result"]
            assert [(e["gen_ai.evaluation.name"], e["gen_ai.evaluation.score.label"],
                     e.get("error.type")) for e in events] == RAISING_RESULTS
        logs = [d.log_record.attributes or {} for d in door.logs.get_finished_logs()]
        assert Counter((a["gen_ai.evaluation.name"], a.get("error.type")) for a in logs) == {
            (name, error): len(keys) for name, _, error in RAISING_RESULTS}
        labels: Counter[tuple[str, str]] = Counter()
        for point in metric_points(door.reader, "gen_ai.evaluation.score"):
            labels[(point.attributes["gen_ai.evaluation.name"],
                    point.attributes["gen_ai.evaluation.score.label"])] += point.count
        assert labels == {(name, label): len(keys) for name, label, _ in RAISING_RESULTS}
    finally:
        door.close()


@pytest.mark.parametrize("kind", ["processor", "exporter"])
def test_sys_exit_in_the_report_callback_does_not_end_the_grading_thread(kind: str) -> None:
    """User code on the grading thread that calls ``sys.exit()`` ends neither grading nor
    forwarding: had it ended the thread, every later root would be held, ungraded, until
    shutdown."""
    reports: list[RunReport] = []

    def on_report(report: RunReport) -> None:
        reports.append(report)
        if len(reports) == 1:
            raise SystemExit(1)

    door = FrontDoor(kind, CONFIG, on_report=on_report)
    try:
        keys = [(0, i) for i in range(1, 7)]
        for key in keys[:3]:
            run_agent(door.tracer, key)
            assert door.flush() is True     # one decision at a time for the exporter
        run_threads(3, lambda t: run_agent(door.tracer, keys[3 + t]))
        assert door.flush() is True
        assert sorted(check_report(r) for r in reports) == keys
        spans = door.spans()
        assert_each_span_once(spans, sum(spans_per_run(k) for k in keys))
        with_verdict = {key_of_root(r) for r in graded(spans)}
        # The processor forwards the copy before it calls back; the exporter's decision of
        # that one trace is cut short and its root goes on ungraded.
        assert with_verdict >= set(keys[1:])
        assert len(roots_of(spans)) == len(keys)
    finally:
        door.close()


# -- downstream processors that raise or hang (processor) -------------------------------------

class RaisingProcessor(RecordingProcessor):
    """Records every span it is handed, then raises from every hook."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        super().on_start(span, parent_context)
        raise RuntimeError("downstream on_start")

    def on_end(self, span: ReadableSpan) -> None:
        super().on_end(span)
        raise RuntimeError("downstream on_end")

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        super().force_flush(timeout_millis)
        raise RuntimeError("downstream force_flush")

    def shutdown(self) -> None:
        super().shutdown()
        raise RuntimeError("downstream shutdown")


def test_downstream_raising_from_every_hook_under_many_threads(
        caplog: pytest.LogCaptureFixture) -> None:
    downstream = RaisingProcessor()
    reports: list[RunReport] = []
    processor = ToolEvalSpanProcessor(CONFIG, downstream, on_report=reports.append)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("robustness")
    keys = [(t, i) for t in range(4) for i in range(1, 26)]
    with caplog.at_level(logging.ERROR, logger="otel_tooleval.processor"):
        # run_threads re-raises anything that reached an application thread
        run_threads(4, lambda t: run_agents(tracer, [(t, i) for i in range(1, 26)]))
        assert processor.force_flush(10_000) is False     # the downstream's flush failed
        assert sorted(check_report(r) for r in reports) == sorted(keys)
        spans = downstream.spans()
        assert_each_span_once(spans, sum(spans_per_run(k) for k in keys))
        assert len(graded(spans)) == len(keys)             # the copies, from the grading thread
        assert downstream.started == len(spans)
        assert processor.shutdown(5_000) is False
        assert downstream.shutdowns == 1
    messages = Counter(r.getMessage().split(" failed")[0] for r in caplog.records
                       if r.name == "otel_tooleval.processor")
    assert set(messages.values()) == {1}, f"each failure is logged once: {messages}"
    assert {"otel-tooleval: downstream.on_start", "otel-tooleval: downstream.on_end"} <= set(
        messages)
    provider.shutdown()


class StuckOnCopies(RecordingProcessor):
    """``on_end`` blocks on the graded root copies, which only the grading thread forwards: the
    grading thread is stuck in the downstream while the application keeps ending spans."""

    def __init__(self) -> None:
        super().__init__()
        self.stuck = threading.Event()
        self.release = threading.Event()

    def on_end(self, span: ReadableSpan) -> None:
        if "tooleval.passed" in (span.attributes or {}):
            self.stuck.set()
            self.release.wait(60)
        super().on_end(span)


def test_grading_thread_stuck_in_the_downstream_never_blocks_the_application() -> None:
    downstream = StuckOnCopies()
    meter_provider, reader = new_meter_provider()
    processor = ToolEvalSpanProcessor(CONFIG, downstream, meter_provider=meter_provider)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("robustness")
    try:
        run_agent(tracer, (0, 1))
        assert downstream.stuck.wait(10)
        keys = [(0, i) for i in range(1, 31)]
        in_thread(lambda: run_agents(tracer, keys[1:]))   # never waits
        ok, took = timed(lambda: processor.force_flush(300))
        assert ok is False and took < 0.3 + SLACK
        ok, took = timed(lambda: processor.shutdown(500))
        assert ok is False and took < 0.5 + SLACK
        # the queued roots went on ungraded, counted; the one being forwarded is left to finish
        assert processor.stats()["dropped.shutdown"] == len(keys) - 1
        assert dropped_by_reason(reader) == {"shutdown": len(keys) - 1}
        downstream.release.set()
        assert wait_until(lambda: not processor._worker.is_alive()), (  # type: ignore[union-attr]
            "the grading thread must end once the downstream lets it go")
        spans = downstream.spans()
        assert_each_span_once(spans, sum(spans_per_run(k) for k in keys))
        assert [key_of_root(r) for r in graded(spans)] == [(0, 1)]
        assert sorted(key_of_root(r) for r in ungraded(spans)) == keys[1:]
    finally:
        downstream.release.set()
        meter_provider.shutdown()


# -- exporters that hang or raise behind a batch processor ------------------------------------

def test_hanging_exporter_behind_the_batch_processor_flush_and_shutdown_are_bounded() -> None:
    """The SDK's batch processor exports on the caller's thread in ``force_flush`` (ignoring
    its timeout) and waits 30 s in ``shutdown``; ours still return within their own deadline."""
    exporter = HangingExporter()
    reports: list[RunReport] = []
    processor = ToolEvalSpanProcessor(
        CONFIG, BatchSpanProcessor(exporter, schedule_delay_millis=10),
        on_report=reports.append)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("robustness")
    try:
        run_agent(tracer, (0, 1))
        assert exporter.entered.wait(10)                  # the batch thread is stuck
        keys = [(0, i) for i in range(1, 21)]
        in_thread(lambda: run_agents(tracer, keys[1:]))   # never waits
        assert wait_until(lambda: len(reports) == len(keys)), "grading must not wait either"
        ok, took = timed(lambda: processor.force_flush(300))
        assert ok is False and took < 0.3 + SLACK
        ok, took = timed(lambda: processor.shutdown(500))
        assert ok is False and took < 0.5 + SLACK
        exporter.release.set()                            # the export comes back at last
        total = sum(spans_per_run(k) for k in keys)
        assert wait_until(lambda: len(exporter.spans()) >= total and exporter.shutdowns == 1)
        spans = exporter.spans()
        assert_each_span_once(spans, total)
        assert sorted(key_of_root(r) for r in graded(spans)) == keys
    finally:
        exporter.release.set()


@pytest.mark.parametrize("kind", ["processor", "exporter"])
def test_raising_exporter_behind_the_batch_processor(kind: str) -> None:
    exporter = RaisingExporter()
    reports: list[RunReport] = []
    front: ToolEvalSpanProcessor | ToolEvalSpanExporter
    provider = TracerProvider()
    if kind == "processor":
        front = ToolEvalSpanProcessor(CONFIG, BatchSpanProcessor(exporter, schedule_delay_millis=10),
                                      on_report=reports.append)
        provider.add_span_processor(front)
    else:
        front = ToolEvalSpanExporter(exporter, CONFIG, on_report=reports.append,
                                     decision_wait=0.05)
        provider.add_span_processor(BatchSpanProcessor(front, schedule_delay_millis=10))
    tracer = provider.get_tracer("robustness")
    keys = [(t, i) for t in range(2) for i in range(1, 6)]
    run_threads(2, lambda t: run_agents(tracer, [(t, i) for i in range(1, 6)]))
    provider.force_flush(10_000)
    flushed = front.force_flush(10_000)
    # The batch processor swallows export errors and reports a successful flush; our exporter
    # calls the wrapped exporter's force_flush, which raises.
    assert flushed is (kind == "processor")
    assert sorted(check_report(r) for r in reports) == sorted(keys)
    spans = exporter.spans()
    assert_each_span_once(spans, sum(spans_per_run(k) for k in keys))   # offered once each
    assert sorted(key_of_root(r) for r in graded(spans)) == sorted(keys)
    ok, took = timed(lambda: front.shutdown(2_000))
    assert ok is False and took < 2.0 + SLACK        # the exporter's shutdown raised
    assert exporter.shutdowns == 1
    provider.shutdown()


def test_hanging_exporter_behind_the_tooleval_exporter_and_a_batch_processor() -> None:
    """The batch thread is stuck in the wrapped export, and the grading thread behind it, waiting
    to forward a graded root. The application never waits, flush and shutdown keep their
    deadlines, and the root that could not go on is counted, never sent twice or lost unseen."""
    wrapped = HangingExporter()
    reports: list[RunReport] = []
    # Tool spans pass straight through (no violation marks), so that the batch thread is the
    # one stuck in the wrapped export.
    exporter = ToolEvalSpanExporter(wrapped, {**CONFIG, "emit": {"violation_marks": False}},
                                    on_report=reports.append, decision_wait=0.05)
    # Exports exactly when three spans are queued: the first batch is the whole first run.
    batch = BatchSpanProcessor(exporter, schedule_delay_millis=60_000, max_export_batch_size=3)
    provider = TracerProvider()
    provider.add_span_processor(batch)
    tracer = provider.get_tracer("robustness")
    first = (0, 1)
    assert spans_per_run(first) == 3
    try:
        run_agent(tracer, first)
        assert wrapped.entered.wait(10)                   # the batch thread is stuck in it
        in_thread(lambda: run_agents(tracer, [(0, i) for i in range(2, 21)]))   # never waits
        # graded all the same; its root is held and its forward waits behind the stuck export
        assert wait_until(lambda: len(reports) == 1)
        assert check_report(reports[0]) == first
        ok, took = timed(lambda: exporter.force_flush(300))
        assert ok is False and took < 0.3 + SLACK
        ok, took = timed(lambda: exporter.shutdown(500))
        assert ok is False and took < 0.5 + SLACK
        assert wrapped.shutdowns == 1
        # at the shutdown deadline the grading thread gives up on the root, and counts it
        assert wait_until(lambda: exporter.stats().get("dropped.shutdown") == 1)
        grading_thread = exporter._grader._worker  # type: ignore[union-attr]
        assert grading_thread is not None
        assert wait_until(lambda: not grading_thread.is_alive())
        wrapped.release.set()                             # the stuck export returns at last
        assert wait_until(lambda: len(wrapped.spans()) == 2)
        spans = wrapped.spans()
        assert_each_span_once(spans, 2)
        assert roots_of(spans) == []                      # the children; the root was counted
    finally:
        wrapped.release.set()
        provider.shutdown()


def test_exporter_shutdown_out_of_time_while_a_trace_is_graded(gate: threading.Event) -> None:
    """The exporter's grading thread is in a slow grader when ``shutdown`` runs out of time:
    the trace being graded is forwarded ungraded by shutdown and counted, and the grading
    thread, done at last, forwards nothing more. (Before, shutdown did not see that trace:
    its root went to the wrapped exporter after the wrapped exporter's shutdown, and was
    lost, uncounted; its verdicts were still emitted.)"""
    memory = InMemorySpanExporter()
    reports: list[RunReport] = []
    exporter = ToolEvalSpanExporter(memory, GATED, on_report=reports.append,
                                    decision_wait=0.0)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("robustness")
    key = (0, 1)
    try:
        run_agent(tracer, key)
        assert ENTERED.wait(10)                       # the trace is in the grader, stuck
        ok, took = timed(lambda: exporter.shutdown(300))
        assert ok is False and took < 0.3 + SLACK
        assert exporter.stats()["dropped.shutdown"] == 1
        gate.set()
        grading_thread = exporter._grader._worker  # type: ignore[union-attr]
        assert grading_thread is not None
        assert wait_until(lambda: not grading_thread.is_alive())
        spans = list(memory.get_finished_spans())
        assert_each_span_once(spans, spans_per_run(key))
        assert graded(spans) == [] and reports == []  # too late is ungraded, never twice
        assert exporter.stats().get("runs", 0) == 0
    finally:
        gate.set()
        provider.shutdown()


# -- a full grading queue ---------------------------------------------------------------------

def test_full_queue_under_many_threads_forwards_ungraded_and_counts(
        gate: threading.Event) -> None:
    threads, runs, queue_size = 8, 25, 4
    downstream = RecordingProcessor()
    meter_provider, reader = new_meter_provider()
    reports: list[RunReport] = []
    processor = ToolEvalSpanProcessor({**GATED, "limits": {"queue_size": queue_size}},
                                      downstream, meter_provider=meter_provider,
                                      on_report=reports.append)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("robustness")
    try:
        keys = [(t, i) for t in range(threads) for i in range(1, runs + 1)]
        # the grader is stuck: the application must not be
        run_threads(threads, lambda t: run_agents(tracer, [(t, i) for i in range(1, runs + 1)]))
        full = processor.stats()["dropped.queue_full"]
        # at most queue_size queued (overshot by one per application thread) and one grading
        assert len(keys) - full <= queue_size + threads + 1
        assert dropped_by_reason(reader) == {"queue_full": full}
        assert len(ungraded(downstream.spans())) == full   # forwarded at once, as they are
        gate.set()
        assert processor.force_flush(10_000) is True
        spans = downstream.spans()
        assert_each_span_once(spans, sum(spans_per_run(k) for k in keys))
        graded_keys = sorted(check_calls(r) for r in reports)
        assert graded_keys == sorted(key_of_root(r) for r in graded(spans))
        assert len(graded_keys) == len(keys) - full
        assert sorted(graded_keys + [key_of_root(r) for r in ungraded(spans)]) == sorted(keys)
        assert processor.stats()["runs"] == len(keys) - full
    finally:
        gate.set()
        provider.shutdown()
        meter_provider.shutdown()


# -- shutdown with runs open --------------------------------------------------------------------

def open_run(tracer: trace.Tracer, key: Key, *, ended: int) -> list[Any]:
    """Start run ``key`` and end its first ``ended`` calls; returns the spans still open,
    innermost first (end them in that order to finish the run)."""
    name = support.agent_name(key)
    root = tracer.start_span(f"invoke_agent {name}",
                             attributes={**AGENT, "gen_ai.agent.name": name})
    ctx = trace.set_span_in_context(root)
    still_open = []
    for n, (tool, args) in enumerate(expected_calls(key)):
        span = tracer.start_span(f"execute_tool {tool}", context=ctx, attributes={
            "gen_ai.tool.name": tool, "gen_ai.tool.call.arguments": json.dumps(args),
            "gen_ai.tool.call.result": json.dumps(f"ok {args['t']}-{args['i']}")})
        if n < ended:
            span.end()
        else:
            still_open.append(span)
    return [*still_open, root]


def test_shutdown_with_runs_open_queued_and_grading(gate: threading.Event) -> None:
    downstream = RecordingProcessor()
    meter_provider, reader = new_meter_provider()
    reports: list[RunReport] = []
    processor = ToolEvalSpanProcessor(GATED, downstream, meter_provider=meter_provider,
                                      on_report=reports.append)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("robustness")
    try:
        done = [(0, 1), (0, 2), (0, 3)]
        run_agent(tracer, done[0])
        assert ENTERED.wait(10)                       # one run in the grader, stuck
        for key in done[1:]:
            run_agent(tracer, key)                    # two queued behind it
        opened = [(1, i) for i in range(1, 5)]        # four runs still open, most with calls open
        still_open = [span for key in opened for span in open_run(tracer, key, ended=1)]
        ok, took = timed(lambda: processor.shutdown(300))
        assert ok is False and took < 0.3 + SLACK
        stats = processor.stats()
        assert stats["open_traces"] == 0
        # four open runs, plus the three roots forwarded ungraded because time ran out
        assert stats["dropped.shutdown"] == len(opened) + len(done)
        assert dropped_by_reason(reader) == {"shutdown": len(opened) + len(done)}
        for span in still_open:                       # the application goes on: no exception
            span.end()
        run_agent(tracer, (2, 1))                     # and after shutdown: passed through
        gate.set()
        assert wait_until(lambda: not processor._worker.is_alive())  # type: ignore[union-attr]
        keys = [*done, *opened, (2, 1)]
        spans = downstream.spans()
        assert_each_span_once(spans, sum(spans_per_run(k) for k in keys))
        assert graded(spans) == [] and reports == []   # too late is ungraded, never twice
        assert len(roots_of(spans)) == len(keys)
    finally:
        gate.set()
        provider.shutdown()
        meter_provider.shutdown()


def test_shutdown_out_of_time_while_a_root_is_being_decided() -> None:
    """The grading thread has taken an ended root from the queue and is deciding whether it
    is a run when shutdown runs out of time: the root reaches the downstream before its
    shutdown, once, and is counted once it turns out to be a run."""
    class AtShutdown(RecordingProcessor):
        def shutdown(self) -> None:
            self.before_shutdown = self.spans()
            super().shutdown()

    downstream = AtShutdown()
    meter_provider, reader = new_meter_provider()
    processor = ToolEvalSpanProcessor(CONFIG, downstream, meter_provider=meter_provider)
    deciding, release = threading.Event(), threading.Event()
    decide = processor._buffers.decide

    def slow_decide(*ended: Any) -> Any:
        deciding.set()
        release.wait(10)
        return decide(*ended)

    processor._buffers.decide = slow_decide  # type: ignore[method-assign]
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("robustness")
    key = (0, 1)
    try:
        run_agent(tracer, key)
        assert deciding.wait(10)                      # the grading thread holds the root
        ok, took = timed(lambda: processor.shutdown(300))
        assert ok is False and took < 0.3 + SLACK
        assert len(roots_of(downstream.before_shutdown)) == 1   # forwarded, as it was
        release.set()
        assert wait_until(lambda: processor.stats().get("dropped.shutdown") == 1)
        assert wait_until(lambda: not processor._worker.is_alive())  # type: ignore[union-attr]
        spans = downstream.spans()
        assert_each_span_once(spans, spans_per_run(key))
        assert graded(spans) == []
        assert dropped_by_reason(reader) == {"shutdown": 1}
    finally:
        release.set()
        provider.shutdown()
        meter_provider.shutdown()


# -- fork with runs open --------------------------------------------------------------------------

@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_with_open_runs_and_a_busy_grading_thread(gate: threading.Event) -> None:
    """At the fork the parent has runs open, a run in the grader and one queued. The child
    starts clean: no open runs, none of the parent's queued work, a grading thread of its own.
    The parent finishes its runs afterwards, each graded once."""
    memory = InMemorySpanExporter()
    reports: list[RunReport] = []
    # A batch processor that exports only when flushed: no export in flight at the fork.
    batch = BatchSpanProcessor(memory, schedule_delay_millis=60_000)
    processor = ToolEvalSpanProcessor(GATED, batch, on_report=reports.append)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("robustness")
    try:
        run_agent(tracer, (0, 1))
        assert ENTERED.wait(10)                        # in the grader, stuck
        run_agent(tracer, (0, 2))                      # queued
        opened = [(1, 1), (1, 2), (1, 3)]
        still_open = {key: open_run(tracer, key, ended=1) for key in opened}
        assert processor.stats()["open_traces"] == len(opened)
        assert batch.force_flush(10_000)               # children so far: exported in the parent
        parent_spans = len(memory.get_finished_spans())
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:   # child: report through the pipe, never return into pytest
            code = 1
            try:
                os.close(read)
                support.GATE = threading.Event()
                support.GATE.set()                     # the child's grader does not wait
                open_traces = processor.stats()["open_traces"]
                known = len(reports)
                child_keys = [(2, 1), (2, 2)]
                for key in child_keys:
                    run_agent(tracer, key)
                flushed = processor.force_flush(10_000)
                new = [check_calls(r) for r in reports[known:]]
                spans = list(memory.get_finished_spans())[parent_spans:]
                assert_each_span_once(spans, sum(spans_per_run(k) for k in child_keys))
                verdicts = sorted(key_of_root(r) for r in graded(spans))
                shut = processor.shutdown(5_000)
                os.write(write, json.dumps([open_traces, flushed, new, verdicts, shut]).encode())
                code = 0
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                os.write(write, json.dumps(repr(exc)).encode())
            finally:
                os._exit(code)
        os.close(write)
        code = wait_child(pid)
        with os.fdopen(read) as pipe:
            got = json.loads(pipe.read())
        assert code == 0, got
        assert got == [0, True, [[2, 1], [2, 2]], [[2, 1], [2, 2]], True]
        # the parent: its open runs survived the fork; finish them now
        assert processor.stats()["open_traces"] == len(opened)
        for open_spans in still_open.values():
            for span in open_spans:
                span.end()
        gate.set()
        assert processor.force_flush(10_000) is True
        keys = [(0, 1), (0, 2), *opened]
        assert sorted(check_calls(r) for r in reports) == sorted(keys)
        spans = list(memory.get_finished_spans())
        assert_each_span_once(spans, sum(spans_per_run(k) for k in keys))
        assert sorted(key_of_root(r) for r in graded(spans)) == sorted(keys)
    finally:
        gate.set()
        provider.shutdown()
