"""Many agent runs at once, on threads and on asyncio tasks, through both live front doors.

Each run's agent name, tool names and arguments encode which thread or task made it, so a call
graded in another run's verdict, a run graded twice or never, or a root exported twice or
without its verdict fails the test (see ``support.check_runs``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import RunReport, ToolEvalSpanExporter, ToolEvalSpanProcessor
from tests.robustness.support import (
    CONFIG,
    GRADERS,
    Key,
    check_runs,
    dropped_by_reason,
    drops,
    new_meter_provider,
    roots_of,
    run_agent,
    run_agent_async,
    run_threads,
    runs_counted,
)

# Room for every run at once: these tests are about lost or crossed verdicts, not about the
# queue bound (tests/robustness/test_faults.py fills the queue on purpose).
LIVE = {**CONFIG, "limits": {"queue_size": 100_000}}
THREADS, RUNS_PER_THREAD = 32, 200
TASKS = 1_000


def batch(exporter: Any) -> BatchSpanProcessor:
    # A queue large enough that the SDK itself never drops a span in these tests.
    return BatchSpanProcessor(exporter, max_queue_size=500_000, schedule_delay_millis=50)


class Live:
    """TracerProvider → ToolEvalSpanProcessor → BatchSpanProcessor → InMemorySpanExporter, with
    real metric and log providers."""

    def __init__(self) -> None:
        self.memory = InMemorySpanExporter()
        self.meter_provider, self.reader = new_meter_provider()
        self.logs = InMemoryLogRecordExporter()
        self.logger_provider = LoggerProvider()
        self.logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.logs))
        self.reports: list[RunReport] = []
        self.processor = ToolEvalSpanProcessor(
            LIVE, downstream=batch(self.memory), meter_provider=self.meter_provider,
            logger_provider=self.logger_provider, on_report=self.reports.append)
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("robustness")

    def spans(self) -> list[ReadableSpan]:
        return list(self.memory.get_finished_spans())

    def check(self, keys: list[Key]) -> None:
        assert self.processor.force_flush(60_000) is True
        spans = self.spans()
        check_runs(keys, self.reports, spans)
        stats = self.processor.stats()
        assert stats["runs"] == len(keys)
        assert drops(stats) == {}, "nothing may be dropped"
        assert stats["open_traces"] == 0
        assert runs_counted(self.reader) == len(keys)
        assert dropped_by_reason(self.reader) == {}
        # log events: one per grader and run, in the context of that run's root
        roots = {(r.context.trace_id, r.context.span_id) for r in roots_of(spans)}
        logs = [d.log_record for d in self.logs.get_finished_logs()]
        assert len(logs) == len(GRADERS) * len(keys)
        assert {(r.trace_id, r.span_id) for r in logs} == roots

    def close(self) -> None:
        self.provider.shutdown()
        self.logger_provider.shutdown()
        self.meter_provider.shutdown()


@pytest.fixture
def live() -> Iterator[Live]:
    setup = Live()
    yield setup
    setup.close()


def max_overlap(spans: list[ReadableSpan]) -> int:
    """The largest number of runs that were open at the same moment."""
    edges = sorted([(s.start_time or 0, 1) for s in spans] + [(s.end_time or 0, -1) for s in spans])
    most = open_now = 0
    for _, step in edges:
        open_now += step
        most = max(most, open_now)
    return most


def test_threads_each_run_graded_once_with_its_own_calls(live: Live) -> None:
    """32 application threads × 200 runs through the processor and a batch processor."""
    def thread(t: int) -> None:
        for i in range(RUNS_PER_THREAD):
            run_agent(live.tracer, (t, i))

    run_threads(THREADS, thread)
    keys = [(t, i) for t in range(THREADS) for i in range(RUNS_PER_THREAD)]
    live.check(keys)
    assert max_overlap(roots_of(live.spans())) >= 2, "the threads never overlapped"


def test_asyncio_tasks_each_run_graded_once_with_its_own_calls(live: Live) -> None:
    """1,000 interleaved runs on one event loop; each task's context carries its own root."""
    keys = [(n // 50, n % 50) for n in range(TASKS)]

    async def main() -> None:
        await asyncio.gather(*(run_agent_async(live.tracer, key) for key in keys))

    asyncio.run(main())
    live.check(keys)
    # the runs really interleaved: most of them were open at the same moment
    assert max_overlap(roots_of(live.spans())) >= TASKS // 2


def test_threads_and_tasks_together(live: Live) -> None:
    """Event loops on several threads at once, each with interleaved tasks."""
    loops, per_loop = 8, 100

    def thread(t: int) -> None:
        async def main() -> None:
            await asyncio.gather(*(run_agent_async(live.tracer, (t, i)) for i in range(per_loop)))
        asyncio.run(main())

    run_threads(loops, thread)
    live.check([(t, i) for t in range(loops) for i in range(per_loop)])


@pytest.mark.parametrize("span_processor", ["simple", "batch"])
def test_exporter_each_run_graded_once_with_its_own_calls(span_processor: str) -> None:
    """ToolEvalSpanExporter behind a simple processor (``export`` called from every
    application thread at once) and behind a batch processor (its thread and the grading
    thread both export)."""
    threads, runs = 16, 60
    memory = InMemorySpanExporter()
    meter_provider, reader = new_meter_provider()
    reports: list[RunReport] = []
    exporter = ToolEvalSpanExporter(memory, CONFIG, meter_provider=meter_provider,
                                    on_report=reports.append, decision_wait=0.05)
    processor: SpanProcessor = (SimpleSpanProcessor(exporter) if span_processor == "simple"
                                else batch(exporter))
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("robustness")
    try:
        def thread(t: int) -> None:
            for i in range(runs):
                run_agent(tracer, (t, i))

        run_threads(threads, thread)
        keys = [(t, i) for t in range(threads) for i in range(runs)]
        assert provider.force_flush(60_000) is True
        assert exporter.force_flush(60_000) is True
        check_runs(keys, reports, list(memory.get_finished_spans()))
        stats = exporter.stats()
        assert stats["runs"] == len(keys)
        assert drops(stats) == {}
        assert stats["open_traces"] == 0 and stats["buffered_spans"] == 0
        assert runs_counted(reader) == len(keys)
        assert dropped_by_reason(reader) == {}
    finally:
        provider.shutdown()
        meter_provider.shutdown()
