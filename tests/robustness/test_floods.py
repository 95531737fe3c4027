"""Floods (issue 6): roots that never end and tool spans without roots, far past every cap.

Each flood overflows the live processor's caps many times over (small caps, so that it does so
in CI time: ``max_open_runs=1000``, ``queue_size=64``) and checks, from the outside:

- memory: the processor's own bounded structures (open traces, spans and calls buffered per
  trace, tombstones, the grading queue) stay within the caps at every tenth of the flood, and
  the growth of the process's RSS over the flood stays under a generous bound derived from the
  caps (an open run or queued run at most ``PER_RUN_BYTES``, a tombstone ``PER_TOMBSTONE_BYTES``,
  plus ``SLACK_BYTES``): a leak of the evicted runs (some KiB each) or of a hundred bytes per
  rootless span would exceed it, and smaller per-trace leaks show in the structures;
- accounting: every eviction is counted, in ``stats()`` and in the ``tooleval.runs.dropped``
  counter read from a real ``MeterProvider`` + ``InMemoryMetricReader``, per reason, equal to
  what the flood must have evicted;
- liveness: after the flood a normal agent run on the real ``TracerProvider`` gets its verdict.

How the spans are made. The 100,000 never-ending roots and their tool children go through the
real ``TracerProvider`` (``tracer.start_span``): 200,000 SDK spans. The 1,000,000 rootless tool
spans would take about 40 us each through the tracer on this machine (40 s before the processor
does anything, more than this file's budget with it), so they are built more cheaply: each is an SDK ``ReadableSpan`` (the class the
SDK hands to ``on_end``), made from its own ``SpanContext``, its parent ``SpanContext``, start
and end times and one shared SDK ``BoundedAttributes``, and passed to the processor's
``on_start`` then ``on_end`` as the SDK's ``Span.start``/``Span.end`` do. On these paths the
processor reads only the context, the parent, the attributes and the end time, which the SDK
span carries the same way. The runs before and after that flood go through the TracerProvider.
"""

from __future__ import annotations

import gc
import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.trace import SpanContext, TraceFlags

from otel_tooleval import RunReport, ToolEvalSpanProcessor

ROOTS = 100_000            # agent roots that never end, each with a tool child that ends
ROOTLESS = 1_000_000       # tool spans without a root
GROUP = 20                 # of which, in every twenty: 1 under a remote parent, 1 late child of
ORPHANS = 9                # it, and 2 orphan traces of 9 spans each
LIMITS = {"max_open_runs": 1000, "queue_size": 64, "max_calls_per_run": 100,
          "max_spans_per_trace": 1000}
CONFIG: dict[str, Any] = {
    "graders": [
        {"name": "uses-search", "type": "tool-calls", "config": {"required": ["^search$"]}},
        {"name": "no-delete", "type": "tool-calls", "config": {"disallowed": ["^delete$"]}},
    ],
    "limits": LIMITS,
}
AGENT = {"gen_ai.operation.name": "invoke_agent"}
TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
        "gen_ai.tool.call.arguments": '{"query": "flood"}', "gen_ai.tool.call.result": '"ok"'}
SAMPLED = TraceFlags(TraceFlags.SAMPLED)

PER_RUN_BYTES = 32 * 1024        # an open or queued run here: its state and up to 9 spans
                                 # (bench_memory.py: ~1.3 KB per open run, ~2.9 KB per call)
PER_TOMBSTONE_BYTES = 256
SLACK_BYTES = 48 * 1024 * 1024   # allocator arenas, metric streams, first-use caches


def _rss() -> int | None:
    status = Path("/proc/self/status")
    if not status.exists():
        return None
    for line in status.read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


def memory_bound() -> int:
    caps = LIMITS["max_open_runs"] + LIMITS["queue_size"]
    return caps * PER_RUN_BYTES + LIMITS["max_open_runs"] * PER_TOMBSTONE_BYTES + SLACK_BYTES


class Downstream(SpanProcessor):
    """Counts what is forwarded and keeps only root copies that carry a verdict."""

    def __init__(self) -> None:
        self.ended = 0
        self.verdicts: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.ended += 1
        if span.name.startswith("invoke_agent") and "tooleval.passed" in (span.attributes or {}):
            self.verdicts.append(span)               # not the flood's one-call runs


class Setup:
    """The processor on a real TracerProvider, with a real MeterProvider + in-memory reader."""

    def __init__(self, limits: dict[str, Any] | None = None) -> None:
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.downstream = Downstream()
        self.reports: list[RunReport] = []
        self.graded = 0
        config = {**CONFIG, "limits": {**LIMITS, **(limits or {})}}
        self.processor = ToolEvalSpanProcessor(config, self.downstream,
                                               meter_provider=self.meter_provider,
                                               on_report=self._on_report)
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("floods")
        self.limits = self.processor.config.limits
        self.peak: Counter[str] = Counter()

    def _on_report(self, report: RunReport) -> None:
        self.graded += 1
        if report.run.agent and report.run.agent.startswith("check-"):
            self.reports.append(report)     # only the normal runs: flood reports are not kept

    def close(self) -> None:
        self.provider.shutdown()
        self.meter_provider.shutdown()

    # -- a normal run, through the TracerProvider -----------------------------------------------

    def agent_run(self, agent: str, calls: list[str]) -> None:
        with self.tracer.start_as_current_span(
                f"invoke_agent {agent}", attributes={**AGENT, "gen_ai.agent.name": agent}):
            for name in calls:
                with self.tracer.start_as_current_span(
                        f"execute_tool {name}", attributes={**TOOL, "gen_ai.tool.name": name}):
                    pass

    def held(self) -> int:
        """Tool spans held in open traces for their runs' verdicts (violation marks)."""
        return sum(len(s.held) for s in self.processor._buffers.open_traces())

    def assert_all_forwarded_at_shutdown(self, flood: int) -> None:
        """After ``assert_still_grades``: shutdown forwards the held tool spans of the traces
        still open, so every span of the flood and of the two normal runs went on once."""
        assert self.processor.shutdown(30_000)
        assert self.downstream.ended == flood + 2 + 3

    def assert_still_grades(self) -> None:
        """Two normal runs after the flood: each gets its own verdict, on its root copy too."""
        self.agent_run("check-pass", ["search"])
        self.agent_run("check-fail", ["search", "delete"])
        assert self.processor.force_flush(60_000)
        verdicts = {r.run.agent: (r.passed, [c.name for c in r.run.calls],
                                  [g.name for g in r.results if not g.passed])
                    for r in self.reports}
        assert verdicts == {"check-pass": (True, ["search"], []),
                            "check-fail": (False, ["search", "delete"], ["no-delete"])}
        roots = {s.name: dict(s.attributes or {}) for s in self.downstream.verdicts}
        assert roots["invoke_agent check-pass"]["tooleval.passed"] is True
        assert roots["invoke_agent check-fail"]["tooleval.passed"] is False
        assert roots["invoke_agent check-fail"]["tooleval.failed"] == ("no-delete",)

    # -- the processor's own bounded structures ---------------------------------------------------

    def check_bounded(self) -> None:
        buffers = self.processor._buffers
        limits = self.limits
        states = buffers.open_traces()
        sizes = {
            "open_traces": len(states),
            "tombstones": len(buffers._tombstones),
            "queue": len(self.processor._queue),
            "spans_per_trace": max((len(s.parents) for s in states), default=0),
            "open_spans_per_trace": max((len(s.open) for s in states), default=0),
            "calls_per_trace": max((len(s.tools) for s in states), default=0),
            "models_per_trace": max((len(s.models) for s in states), default=0),
            "done_per_trace": max((len(s.done) + len(s.graded) for s in states), default=0),
        }
        for key, value in sizes.items():
            self.peak[key] = max(self.peak[key], value)
        assert sizes["open_traces"] <= limits.max_open_runs, sizes
        assert sizes["tombstones"] <= limits.max_open_runs, sizes
        assert sizes["queue"] <= limits.queue_size + 1, sizes     # one application thread
        assert sizes["spans_per_trace"] <= limits.max_spans_per_trace, sizes
        assert sizes["calls_per_trace"] <= limits.max_calls_per_run, sizes

    def flood(self, total: int, one: Callable[[int], None]) -> dict[str, int]:
        """Call ``one(i)`` for every i, checking the bounds and the RSS at every tenth."""
        gc.collect()
        start = _rss()
        tenth = total // 10
        series: list[int] = []
        for part in range(10):
            for i in range(part * tenth, total if part == 9 else (part + 1) * tenth):
                one(i)
            gc.collect()
            self.check_bounded()
            rss = _rss()
            if rss is not None:
                series.append(rss)
        if start is None or not series:
            return {}       # no /proc: the structures above are the check
        growth = max(series) - start
        assert growth <= memory_bound(), (
            f"RSS grew by {growth / 2**20:.1f} MiB over the flood (bound "
            f"{memory_bound() / 2**20:.1f} MiB): {[round(r / 2**20) for r in series]} MiB")
        return {"rss_start": start, "rss_end": series[-1], "rss_growth": growth}

    # -- accounting ---------------------------------------------------------------------------

    def dropped_metric(self) -> dict[str, int]:
        data = self.reader.get_metrics_data()
        out: Counter[str] = Counter()
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == "tooleval.runs.dropped":
                        points: Any = m.data.data_points     # a Sum: NumberDataPoints
                        for p in points:
                            out[p.attributes["reason"]] += p.value
        return dict(out)

    def dropped_stats(self) -> dict[str, int]:
        return {k.removeprefix("dropped."): v for k, v in self.processor.stats().items()
                if k.startswith("dropped.") and v}

    def assert_drops(self, expected: dict[str, int]) -> None:
        """stats() and the metric agree, reason by reason, with what had to be dropped."""
        assert self.dropped_stats() == expected
        assert self.dropped_metric() == expected


@pytest.fixture
def setup() -> Iterator[Setup]:
    s = Setup()
    yield s
    s.close()


# -- the floods -------------------------------------------------------------------------------------

def test_100k_roots_that_never_end(setup: Setup) -> None:
    """100,000 agent roots started and never ended, each with a tool child that ends: each is
    its own trace, so the open-run cap evicts the oldest 99,000 (counted), memory stays at
    the cap, and the next runs are graded."""
    tracer = setup.tracer
    cap = setup.limits.max_open_runs

    def root_that_never_ends(i: int) -> None:
        root = tracer.start_span("invoke_agent flood", attributes={
            **AGENT, "gen_ai.agent.name": "flood"})
        tracer.start_span("execute_tool search", context=trace.set_span_in_context(root),
                          attributes=TOOL).end()
        # ``root`` goes out of scope unended, as in an agent that hangs or crashes

    memory = setup.flood(ROOTS, root_that_never_ends)

    stats = setup.processor.stats()
    assert stats["open_traces"] == cap
    assert stats.get("runs", 0) == 0 and setup.graded == 0        # no root ever ended
    setup.assert_drops({"max_open_runs": ROOTS - cap})
    # every tool child forwarded, but those of the open runs, held for their verdicts
    # (violation marks): an evicted run's go on, unmarked, as it is evicted
    assert setup.downstream.ended == ROOTS - cap == ROOTS - setup.held()
    state = setup.processor._buffers.open_traces()[-1]
    assert (len(state.parents), len(state.open), len(state.tools), len(state.held)) == (2, 1, 1, 1)

    setup.assert_still_grades()
    # the first normal run's trace evicted one more never-ending root; it then closed, which
    # left room for the second, unless the second started before the grading thread (already
    # running: it forwards the held spans of evicted traces) removed the first's trace
    evicted = setup.processor.stats()["dropped.max_open_runs"]
    assert evicted - (ROOTS - cap) in (1, 2)
    setup.assert_drops({"max_open_runs": evicted})
    assert setup.processor.stats()["open_traces"] == cap - (evicted - (ROOTS - cap))
    setup.assert_all_forwarded_at_shutdown(ROOTS)
    print(f"\n100k never-ending roots: peak {dict(setup.peak)}; {memory}")


def test_1m_tool_spans_without_roots(setup: Setup) -> None:
    """1,000,000 tool spans without a root, in groups of twenty in three new traces (see the
    module docstring for how these spans are made):

    - a tool span whose parent is a remote SpanContext: a local root, so a one-call run,
      graded or (queue full) forwarded ungraded and counted; its trace then closes and leaves
      a tombstone (50,000 traces);
    - a child of that tool span that starts and ends after its trace closed: late, counted,
      passed through;
    - two bursts of nine orphans (children of a local parent never seen, in a trace never
      seen; 100,000 traces): each trace stays open (its root is elsewhere) with its nine
      calls until the open-run cap evicts it, counted.
    """
    processor = setup.processor
    cap = setup.limits.max_open_runs
    resource = setup.provider.resource
    attrs = BoundedAttributes(attributes=TOOL, immutable=True)
    now = itertools.count(time.time_ns(), 1000)
    base = 1 << 127      # trace ids that cannot collide with the tracer's random ones

    def one(i: int) -> None:
        group, kind = divmod(i, GROUP)
        trace_id = base + 3 * group + (kind + ORPHANS - 2) // ORPHANS
        if kind == 0:      # under a remote parent
            parent = SpanContext(trace_id, 0xF00D, is_remote=True, trace_flags=SAMPLED)
        elif kind == 1:    # late child of the span before (span id i), whose trace is finished
            parent = SpanContext(trace_id, i, is_remote=False, trace_flags=SAMPLED)
        else:              # orphan: parent never seen
            parent = SpanContext(trace_id, 0xBEEF, is_remote=False, trace_flags=SAMPLED)
        start = next(now)
        span = ReadableSpan("execute_tool search",
                            SpanContext(trace_id, i + 1, is_remote=False, trace_flags=SAMPLED),
                            parent, resource, attrs, start_time=start, end_time=start + 500)
        processor.on_start(span, None)    # type: ignore[arg-type]  # see the module docstring
        processor.on_end(span)

    memory = setup.flood(ROOTLESS, one)
    assert processor.force_flush(120_000)

    remote = late = ROOTLESS // GROUP
    orphans = 2 * ROOTLESS // GROUP                     # orphan traces
    stats = processor.stats()
    # The newest orphan traces. The cap counts, for as long as the grading thread has not taken
    # their roots, traces whose root has ended too, so fewer than the cap may be left.
    assert 0 < stats["open_traces"] <= cap
    assert setup.peak["calls_per_trace"] == ORPHANS
    assert stats["late_spans"] == late
    queue_full = stats.get("dropped.queue_full", 0)
    assert stats.get("runs", 0) + queue_full == remote  # each remote-parented span: one run
    assert setup.graded == stats.get("runs", 0)
    setup.assert_drops({k: v for k, v in {
        "max_open_runs": orphans - stats["open_traces"], "late_span": late, "queue_full": queue_full}.items() if v})
    # every span forwarded exactly once, but the tool spans of the open traces, held for their
    # runs' verdicts (violation marks)
    assert setup.downstream.ended == ROOTLESS - setup.held()
    assert len(processor._buffers._tombstones) <= cap

    setup.assert_still_grades()
    setup.assert_all_forwarded_at_shutdown(ROOTLESS)
    print(f"\n1M rootless tool spans: {stats.get('runs', 0)} one-call runs graded, "
          f"{queue_full} forwarded ungraded; peak {dict(setup.peak)}; {memory}")


def test_roots_that_never_end_are_swept_by_the_ttl() -> None:
    """Below the open-run cap, never-ending roots are evicted by the TTL sweep, counted."""
    # A TTL far below any real one, but above a scheduling stall of this busy machine: a root
    # evicted between its start and its child's would make that child an orphan trace, evicted
    # on its own (counted too, but not the n expected here).
    s = Setup({"max_open_runs": 10_000, "run_ttl_seconds": 2.0})
    try:
        s.agent_run("warm", ["search"])          # starts the grading thread, which sweeps
        assert s.processor.force_flush(10_000)
        n = 5_000
        for _ in range(n):
            root = s.tracer.start_span("invoke_agent stuck", attributes=AGENT)
            s.tracer.start_span("execute_tool search", context=trace.set_span_in_context(root),
                                attributes=TOOL).end()
        deadline = time.monotonic() + 60        # liveness deadline, not a speed assertion
        while s.processor.stats()["open_traces"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert s.processor.stats()["open_traces"] == 0
        s.assert_drops({"ttl": n})
        s.assert_still_grades()
    finally:
        s.close()


def test_runs_under_a_root_that_never_ends_are_freed_once_graded() -> None:
    """5,000 agent runs below one local root that never ends (a session or stream span), five
    times the per-trace span cap: a graded run's spans are freed, its root included, so the
    trace's structures stay small, nothing is dropped, and every run is graded. (Before the
    fix, each graded run left its root's entry behind: after 999 runs every span of the trace
    was dropped, max_spans_per_trace, and no run was graded any more.)"""
    s = Setup({"max_spans_per_trace": 1000, "queue_size": 1024})
    try:
        n = 5_000
        session = s.tracer.start_span("session")
        with trace.use_span(session, end_on_exit=False):
            for i in range(n):
                s.agent_run("nested", ["search"])
                if i % 100 == 99:
                    assert s.processor.force_flush(60_000)   # at most 100 runs in flight
                    s.check_bounded()
        assert s.processor.force_flush(60_000)
        (state,) = s.processor._buffers.open_traces()
        assert set(state.parents) == {session.get_span_context().span_id}   # runs all freed
        assert not state.tools and not state.models
        assert s.peak["spans_per_trace"] <= 2 * 100 + 1      # at most 100 runs in flight
        assert len(state.done) <= 1024 and not state.graded   # the newest runs, for late spans
        assert s.graded == n
        s.assert_drops({})
        session.end()
        s.reports.clear()
        s.downstream.verdicts.clear()
        s.assert_still_grades()
    finally:
        s.close()


def test_late_children_of_a_freed_run_under_a_root_that_never_ends_are_still_late() -> None:
    """Freeing a graded run's root (above) keeps its late children late: one still open when
    the run was graded, and one that starts only after that."""
    s = Setup()
    try:
        session = s.tracer.start_span("session")
        ctx = trace.set_span_in_context(session)
        root = s.tracer.start_span("invoke_agent check-pass", context=ctx,
                                   attributes={**AGENT, "gen_ai.agent.name": "check-pass"})
        in_run = trace.set_span_in_context(root)
        s.tracer.start_span("execute_tool search", context=in_run, attributes=TOOL).end()
        slow = s.tracer.start_span("execute_tool search", context=in_run, attributes=TOOL)
        root.end()
        assert s.processor.force_flush(10_000)
        (state,) = s.processor._buffers.open_traces()
        assert root.get_span_context().span_id not in state.parents     # freed
        slow.end()
        later = s.tracer.start_span("execute_tool search", context=in_run, attributes=TOOL)
        later.end()
        for _ in range(3):                     # later runs of the session are graded as usual
            with trace.use_span(session, end_on_exit=False):
                s.agent_run("nested", ["search"])
        assert s.processor.force_flush(10_000)
        assert s.processor.stats()["late_spans"] == 2
        s.assert_drops({"late_span": 2})
        assert s.graded == 4 and [len(r.run.calls) for r in s.reports] == [2]
        # the later runs left nothing; the late spans' own entries stay (counted, and bounded
        # by max_spans_per_trace)
        assert set(state.parents) == {session.get_span_context().span_id,
                                      slow.get_span_context().span_id,
                                      later.get_span_context().span_id}
        session.end()
    finally:
        s.close()
