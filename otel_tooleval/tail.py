"""Grading spans that arrive already ended: the core of ``ToolEvalSpanExporter`` and ``serve``.

The span processor sees every span start and end, so it knows a run's root the moment it ends.
An exporter and an OTLP receiver only get finished spans, in batches, in the order they ended,
and a trace's spans may arrive in several batches. They work like the collector's tail-sampling
processor:

- every span of an open trace is kept as a ``SpanRecord`` (spans that can be neither a run nor
  its root keep no attributes);
- spans that may be a run's root (local roots, agent spans, framework spans with an agent span
  below them) are *held*; so are tool spans when the front door marks offending calls
  (``emit.violation_marks`` and a grader that can list violations); every other span is handed
  back to be forwarded at once;
- when a local root of the trace arrives (no parent, or a parent in another process), the trace
  becomes due ``decision_wait`` seconds later, so children that end just after their root
  still count (as pending calls, as in the processor). Another local root arriving before then
  moves the decision back;
- at the decision the trace is cut into runs exactly as ``otel-tooleval grade`` cuts a finished
  trace (``trajectory.find_runs``), every run is graded, the held roots are forwarded with their
  verdicts, the held tool spans that a failing grader lists under ``details.violations`` with
  their marks (``otel_tooleval.violations``), and the other held spans as they are;
- spans of a decided trace that arrive later (within ``limits.tombstone_seconds``) are late:
  forwarded at once and counted as ``late_span``;
- a trace whose local root never arrives is decided ``limits.run_ttl_seconds`` after its last
  span: what arrived is graded (spans whose parent is missing count as local roots).

Bounds: ``limits.max_open_runs`` traces (the oldest is forwarded ungraded, counted as
``max_open_runs``), ``limits.max_spans_per_trace`` records per trace (further spans are
forwarded at once, counted as ``max_spans_per_trace``), and optionally a total of spans and
bytes across traces that the caller checks with ``full()`` before accepting more (``serve``
answers "retry later"). The bytes are what the caller says each span costs (a ``SpanSize``:
its record, the part of that its attributes are, and the item when it is held), counted for
what is actually kept; with ``refuse_over`` a batch whose cost would take non-empty buffers
past the byte bound is refused whole (``BuffersFull``) before anything of it is kept. Nothing
is ever silently lost: every span handed in is either handed back at once or forwarded later
by the ``forward`` callback, graded or not.
"""

from __future__ import annotations

import heapq
import logging
import os
import threading
import time
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, NamedTuple, TypeVar

from ._compat import detach, suppress_instrumentation
from ._version import __version__
from .config import ToolEvalConfig
from .conventions import AGENT, MODEL, TOOL, is_framework_span
from .emit import LogEvents, VerdictMetrics
from .grading import grade_run
from .model import RunReport, SpanRecord
from .sessions.live import LiveSessions
from .sessions.model import SessionReport
from .sinks.fanout import SinkSet
from .trajectory import build_run, find_runs
from .violations import flagged_spans, names_calls

__all__ = ["BuffersFull", "Decision", "SpanSize", "TailBuffers", "TailGrader"]

H = TypeVar("H")
_log = logging.getLogger(__name__)
_NO_ATTRIBUTES: Mapping[str, Any] = MappingProxyType({})
_SWEEP_SECONDS = 1.0   # how often idle sessions are looked for


class SpanSize(NamedTuple):
    """What keeping one span costs, in bytes of memory (estimated by the caller).

    ``record`` is its ``SpanRecord`` with everything decoded; ``attributes`` the part of that
    which goes when a span that can be neither a run nor a part of one is kept without its
    attributes; ``held`` what the caller's item adds when the span is held. A plain ``int``
    given instead stands for ``SpanSize(n, 0, 0)``.
    """

    record: int
    attributes: int = 0
    held: int = 0

    @property
    def most(self) -> int:
        """The cost when the span is held, the most it can be."""
        return self.record + self.held


class BuffersFull(Exception):
    """A batch is refused whole: its cost would take the buffers past their byte bound."""


@dataclass(slots=True)
class _Trace(Generic[H]):
    records: list[SpanRecord] = field(default_factory=list)
    held: list[tuple[SpanRecord, H]] = field(default_factory=list)
    agent_below: set[int] = field(default_factory=set)   # span ids with an agent span below
    due: float | None = None       # decision time once a local root has arrived
    touched: float = 0.0           # last arrival (monotonic), for the TTL
    bytes: int = 0


@dataclass(slots=True)
class Decision(Generic[H]):
    """A trace taken out of the buffers: what to grade and what to forward afterwards.

    ``reason`` is ``root`` (its local root arrived and the wait passed), ``ttl`` (no local root
    came), ``flush``/``shutdown`` (decided early on request), or ``max_open_runs`` (evicted: its
    held spans are forwarded ungraded).
    """

    trace_id: int
    records: list[SpanRecord]
    held: list[tuple[SpanRecord, H]]
    reason: str
    claimed: bool = False   # its held spans were forwarded (graded or not): never twice

    @property
    def graded(self) -> bool:
        return self.reason != "max_open_runs"


class TailBuffers(Generic[H]):
    """Open traces of ended spans, with their decision times. Thread-safe; one lock."""

    def __init__(self, config: ToolEvalConfig, decision_wait: float, *,
                 max_spans: int | None = None, max_bytes: int | None = None,
                 on_drop: Callable[[str, int], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, hold_tools: bool = False,
                 trace_bytes: int = 0) -> None:
        if decision_wait < 0:
            raise ValueError("decision_wait must not be negative")
        self.policy = config.policy
        self.limits = config.limits
        self._by_name = (bool(self.policy.agent_span_names) or self.policy.root_pattern is not None
                         or self.policy.conventions is not None)
        self.decision_wait = decision_wait
        self.max_spans = max_spans
        self.max_bytes = max_bytes
        self.trace_bytes = trace_bytes   # what an open trace costs besides its spans
        self.hold_tools = hold_tools   # tool spans wait for their run's verdict too
        self._on_drop = on_drop
        self._clock = clock
        self._lock = threading.Lock()
        self._traces: OrderedDict[int, _Trace[H]] = OrderedDict()   # least recently active first
        self._due: list[tuple[float, int]] = []                     # heap; stale entries skipped
        self._tombstones: OrderedDict[int, float] = OrderedDict()   # trace id -> expiry
        self.spans = 0            # records held across all open traces
        self.bytes = 0
        self.counts: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._traces)

    def _drop(self, reason: str, n: int = 1) -> None:
        self.counts["dropped." + reason] += n
        if self._on_drop is not None:
            self._on_drop(reason, n)

    def full(self) -> bool:
        """True while the buffers hold as many spans or bytes as they were allowed."""
        return ((self.max_spans is not None and self.spans >= self.max_spans)
                or (self.max_bytes is not None and self.bytes >= self.max_bytes))

    def _agent(self, record: SpanRecord, kind: int) -> bool:
        if self._by_name:   # agent span names or a root pattern in the config
            return self.policy.is_agent(record.attributes, record.name, record.scope)
        return bool(kind & AGENT)

    def _is_root(self, record: SpanRecord, kind: int, trace: _Trace[H]) -> bool:
        # Spans end (and arrive) after their children, so whether an agent span lies below a
        # span is known when it arrives: agent spans mark their parent, marked spans theirs.
        agent = self._agent(record, kind)
        below = record.span_id in trace.agent_below
        if agent or below:
            trace.agent_below.add(record.parent_id)
        if agent or record.is_local_root:
            return True
        return (below and self.policy.root == "auto"
                and is_framework_span(record.attributes, record.scope))

    def add(self, items: Iterable[tuple[SpanRecord, H, int | SpanSize]],
            hold: Callable[[H], H] | None = None, *, refuse_over: bool = False
            ) -> tuple[list[H], list[Decision[H]]]:
        """Take ``(record, item, size)`` triples of ended spans (size: a ``SpanSize`` or
        bytes).

        Returns the items to forward now (spans that cannot be a run root, late spans, spans
        past a cap) and the traces evicted to make room (to be forwarded ungraded). ``hold``,
        when given, turns the item of a span that is held into what is kept (called with the
        lock held: keep it short).

        Raises:
            BuffersFull: with ``refuse_over``, when the buffers hold something and the
                batch, counted as if every span were held, would take them past
                ``max_bytes``; nothing of the batch is kept. (Non-empty: a batch larger
                than the bound alone is let in, or it could never be.)
        """
        now = self._clock()
        forward: list[H] = []
        evicted: list[Decision[H]] = []
        max_spans = self.limits.max_spans_per_trace
        policy_kind = self.policy.record_kind
        hold_tools = self.hold_tools
        if refuse_over:
            items = list(items)
        with self._lock:
            if refuse_over and self.max_bytes is not None and self.bytes:
                most = (sum(s.most if isinstance(s, SpanSize) else s for _, _, s in items)
                        + self.trace_bytes * len({r.trace_id for r, _, _ in items}))
                if self.bytes + most > self.max_bytes:
                    raise BuffersFull(f"{self.bytes} bytes buffered; {most} more would go "
                                      f"past the bound of {self.max_bytes}")
            traces = self._traces
            for record, item, size in items:
                trace_id = record.trace_id
                trace = traces.get(trace_id)
                if trace is None:
                    expiry = self._tombstones.get(trace_id)
                    if expiry is not None and expiry > now:
                        self.counts["late_spans"] += 1
                        self._drop("late_span")
                        forward.append(item)
                        continue
                    while len(traces) >= self.limits.max_open_runs:
                        old_id, old = traces.popitem(last=False)
                        evicted.append(self._take(old_id, old, "max_open_runs"))
                    trace = traces[trace_id] = _Trace(bytes=self.trace_bytes)
                    self.bytes += self.trace_bytes
                else:
                    traces.move_to_end(trace_id)
                trace.touched = now
                kind = policy_kind(record)
                root = self._is_root(record, kind, trace)
                cost = 0
                if len(trace.records) >= max_spans:
                    self._drop("max_spans_per_trace")
                    if not root:
                        forward.append(item)
                        continue
                    if isinstance(size, SpanSize):   # no record kept, but the held pair's
                        cost = size.record
                else:
                    keep = root or kind & (TOOL | MODEL | AGENT)
                    trace.records.append(
                        record if keep else record._replace(attributes=_NO_ATTRIBUTES))
                    cost = (size if not isinstance(size, SpanSize)
                            else size.record if keep else size.record - size.attributes)
                    self.spans += 1
                if root or (hold_tools and kind & TOOL):
                    trace.held.append((record, item if hold is None else hold(item)))
                    if isinstance(size, SpanSize):   # the held item, counted with its trace
                        cost += size.held
                    if root and record.is_local_root:
                        trace.due = now + self.decision_wait
                        heapq.heappush(self._due, (trace.due, trace_id))
                else:
                    forward.append(item)
                trace.bytes += cost
                self.bytes += cost
        for decision in evicted:
            self._drop("max_open_runs")
        return forward, evicted

    def _take(self, trace_id: int, trace: _Trace[H], reason: str) -> Decision[H]:
        """Remove a trace (the lock is held) and leave a tombstone for its late spans."""
        self.spans -= len(trace.records)
        self.bytes -= trace.bytes
        if self.limits.tombstone_seconds > 0:
            self._tombstones[trace_id] = self._clock() + self.limits.tombstone_seconds
            self._tombstones.move_to_end(trace_id)
            while len(self._tombstones) > self.limits.max_open_runs:
                self._tombstones.popitem(last=False)
        return Decision(trace_id, trace.records, trace.held, reason)

    def take_due(self, *, everything: str | None = None, rooted: str | None = None
                 ) -> list[Decision[H]]:
        """The traces whose decision time or TTL has passed.

        ``rooted="flush"`` also takes every trace whose local root has arrived, whatever its
        wait; ``everything="shutdown"`` takes every open trace.
        """
        now = self._clock()
        out: list[Decision[H]] = []
        with self._lock:
            traces = self._traces
            if everything is not None:
                for trace_id, trace in list(traces.items()):
                    out.append(self._take(trace_id, trace, everything))
                traces.clear()
                self._due.clear()
                return out
            due = self._due
            while due and (rooted is not None or due[0][0] <= now):
                when, trace_id = heapq.heappop(due)
                found = traces.get(trace_id)
                if found is None or found.due != when:
                    continue   # decided already, or moved back by a later local root
                del traces[trace_id]
                out.append(self._take(trace_id, found, rooted or "root"))
            stale = now - self.limits.run_ttl_seconds
            while traces:
                trace_id, trace = next(iter(traces.items()))
                if trace.touched > stale:
                    break
                del traces[trace_id]
                out.append(self._take(trace_id, trace, "ttl"))
            for trace_id, expiry in list(self._tombstones.items()):
                if expiry > now:
                    break
                del self._tombstones[trace_id]
        return out

    def next_due(self) -> float | None:
        """The earliest decision time pending (monotonic clock), if any."""
        with self._lock:
            return self._due[0][0] if self._due else None

    def reset_after_fork(self) -> None:
        self._lock = threading.Lock()
        self._traces = OrderedDict()
        self._due = []
        self._tombstones = OrderedDict()
        self.spans = self.bytes = 0


class TailGrader(Generic[H]):
    """Buffers, a grading thread and the verdict channels, for a front door of ended spans.

    The caller hands ended spans to :meth:`accept` and forwards what it gets back at once;
    the grading thread decides traces as they become due, grades their runs, and calls
    ``forward(items)`` with the held spans of each trace, a run root replaced by
    ``annotate(item, record, report)``. ``forward`` runs on the grading thread (or, at
    shutdown, on the caller's); its exceptions are logged once and never reach the caller.

    With ``sessions:`` graders in the config, every graded run that carries a session key is
    filed under its session (``sessions.live.LiveSessions``, as in the processor); a session
    ends after ``sessions.idle_seconds`` without a new run, by :meth:`end_session`, at
    :meth:`flush` and at :meth:`shutdown`, and its span goes to ``forward_session`` (a
    ``ReadableSpan``), on the grading thread. ``resource_of(item)`` gives the resource of a
    held root's spans, for the session span.

    With ``mark``, tool spans are held too (when ``emit.violation_marks`` is on and a
    configured grader can list violations), and each one a failing grader lists is replaced
    by ``mark(item, record, grader names)``.
    """

    def __init__(self, config: ToolEvalConfig, *,
                 forward: Callable[[list[H]], None],
                 annotate: Callable[[H, SpanRecord, RunReport], H],
                 decision_wait: float,
                 max_spans: int | None = None, max_bytes: int | None = None,
                 meter_provider: Any = None, logger_provider: Any = None,
                 on_report: Callable[[RunReport], None] | None = None,
                 forward_session: Callable[[Any], None] | None = None,
                 resource_of: Callable[[H], Any] | None = None,
                 on_session: Callable[[SessionReport], None] | None = None,
                 id_generator: Any = None,
                 name: str = "otel-tooleval-tail",
                 mark: Callable[[H, SpanRecord, Sequence[str]], H] | None = None,
                 trace_bytes: int = 0) -> None:
        self.config = config
        emit = config.emit
        self.sinks = SinkSet.from_emit(emit)   # fed the reports the log events are built from
        if self.sinks is not None:
            on_report = self.sinks.chain(on_report)
            on_session = self.sinks.chain(on_session, session=True)
        self._metrics = VerdictMetrics(meter_provider, __version__) if emit.metrics else None
        self._logs = LogEvents(logger_provider, __version__) if emit.log_events else None
        self._forward_items = forward
        self._annotate = annotate
        # The guard's result lists its offending calls as a grader's violations.
        self._mark = mark if mark is not None and emit.violation_marks and (
            config.guard_rules is not None
            or names_calls(entry.grader for entry in config.graders)) else None
        self._on_report = on_report
        self._name = name
        self.buffers: TailBuffers[H] = TailBuffers(config, decision_wait, max_spans=max_spans,
                                                   max_bytes=max_bytes, on_drop=self._count_drop,
                                                   hold_tools=self._mark is not None,
                                                   trace_bytes=trace_bytes)
        self.graded: Counter[str] = Counter()
        self._reported: set[str] = set()
        self._closed = False
        self._resource_of = resource_of
        self.sessions: LiveSessions | None = None
        if config.session_graders:
            self.sessions = LiveSessions(
                config, forward_session or (lambda span: None), logs=self._logs,
                metrics=self._metrics, report=self._report, on_session=on_session,
                id_generator=id_generator)
        self._init_thread_state()
        if hasattr(os, "register_at_fork"):
            ref = weakref.WeakMethod(self._after_fork_in_child)
            os.register_at_fork(after_in_child=lambda: (m := ref()) and m())

    def _init_thread_state(self) -> None:
        self._wake = threading.Condition()
        self._requests: list[tuple[str, threading.Event]] = []
        self._worker: threading.Thread | None = None
        self._worker_lock = threading.Lock()
        # The traces the grading thread has taken and not forwarded yet: a shutdown out of
        # time forwards them ungraded (claiming each, under the lock, as the thread does).
        self._claim_lock = threading.Lock()
        self._in_hand: list[Decision[H]] = []
        # Sessions ended by key, each once the traces whose root had arrived are decided:
        # (due time, key), in call order.
        self._session_ends: list[tuple[float, str]] = []
        self._next_sweep = 0.0

    def _after_fork_in_child(self) -> None:
        self.buffers.reset_after_fork()
        if self.sessions is not None:
            self.sessions.open.reset()
        self._init_thread_state()

    # -- intake (caller's thread) -----------------------------------------------------------

    def accept(self, items: Iterable[tuple[SpanRecord, H, int | SpanSize]],
               hold: Callable[[H], H] | None = None, *, refuse_over: bool = False
               ) -> list[H]:
        """Buffer ended spans; returns those to forward right away (see ``TailBuffers.add``,
        which raises ``BuffersFull`` with ``refuse_over``)."""
        if self._closed:
            return [item for _, item, _ in items]
        forward, evicted = self.buffers.add(items, hold, refuse_over=refuse_over)
        if self._worker is None:
            self._ensure_worker()
        for decision in evicted:
            forward.extend(item for _, item in decision.held)
        return forward

    def full(self) -> bool:
        return self.buffers.full()

    def _ensure_worker(self) -> None:
        with self._worker_lock:
            if self._worker is None:
                worker = threading.Thread(target=self._work, name=self._name, daemon=True)
                worker.start()
                self._worker = worker

    # -- grading thread ---------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._wake:
                request = self._requests.pop(0) if self._requests else None
                if request is None:
                    next_due = self.buffers.next_due()
                    if self._session_ends:
                        first = self._session_ends[0][0]
                        next_due = first if next_due is None else min(next_due, first)
                    wait = 0.25 if next_due is None else next_due - time.monotonic()
                    if wait > 0:
                        self._wake.wait(min(wait, 0.25))
                        request = self._requests.pop(0) if self._requests else None
            if request is not None:
                kind, done = request
                self._decide_all(self._take_in_hand(
                    everything=kind if kind == "shutdown" else None,
                    rooted=kind if kind == "flush" else None))
                self._end_sessions(kind)
                done.set()
                if kind == "shutdown":
                    return
                continue
            # Ends by key due by ``now`` come after every trace due by then (taken below).
            now = time.monotonic()
            self._decide_all(self._take_in_hand())
            self._end_sessions(None, now)

    def _end_sessions(self, kind: str | None, now: float | None = None) -> None:
        """Sessions whose end is due (grading thread): every open one at a flush or shutdown,
        those ended by key once their wait passed, the idle ones about once a second."""
        sessions = self.sessions
        if sessions is None:
            return
        token = suppress_instrumentation()
        try:
            if now is None:
                now = time.monotonic()
            with self._wake:
                due = [e for e in self._session_ends if kind is not None or e[0] <= now]
                self._session_ends = [e for e in self._session_ends if e not in due]
            for _, value in due:
                sessions.end(value)
            if kind is not None:
                sessions.end_all(kind)
            elif time.monotonic() >= self._next_sweep:
                self._next_sweep = time.monotonic() + _SWEEP_SECONDS
                sessions.sweep()
        except BaseException:  # noqa: BLE001 - the grading thread must live on
            self._report("sessions")
        finally:
            detach(token)

    def end_session(self, key: str) -> None:
        """End the session whose key is ``key``: graded on the grading thread once every
        trace whose local root has arrived by now is decided (``decision_wait`` from now).
        Unknown keys are ignored; never raises."""
        if self.sessions is None or self._closed:
            return
        try:
            with self._wake:
                self._session_ends.append((time.monotonic() + self.buffers.decision_wait,
                                           str(key)))
                self._wake.notify()
            if self._worker is None:
                self._ensure_worker()
        except Exception:  # noqa: BLE001
            self._report("end_session")

    def _take_in_hand(self, **which: Any) -> list[Decision[H]]:
        with self._claim_lock:
            self._in_hand = self.buffers.take_due(**which)
            return self._in_hand

    def _decide_all(self, decisions: list[Decision[H]]) -> None:
        for decision in decisions:
            emits: list[tuple[RunReport, SpanRecord | None]] = []
            # BaseException: not even sys.exit() in user code may end the grading thread.
            try:
                items = self._decide(decision, emits)
            except BaseException:  # noqa: BLE001 - a bug here must not lose the spans
                self._report("grading")
                items = [item for _, item in decision.held]
            with self._claim_lock:
                if decision.claimed:
                    continue   # forwarded ungraded by a shutdown out of time
                decision.claimed = True
            try:
                for report, root in emits:
                    self._emit(report, root)
            except BaseException:  # noqa: BLE001 - sys.exit() in the report callback
                self._report("grading")
            if items:
                try:
                    self._forward_items(items)
                except BaseException:  # noqa: BLE001
                    self._report("forwarding")
        self._in_hand = []   # every one forwarded: let their spans go

    def _decide(self, decision: Decision[H],
                emits: list[tuple[RunReport, SpanRecord | None]]) -> list[H]:
        if not decision.graded or not decision.records:
            return [item for _, item in decision.held]
        config = self.config
        policy = config.policy
        reports: dict[int, RunReport] = {}
        token = suppress_instrumentation()
        try:
            for root, members in find_runs(decision.records, policy):
                run = build_run(root, members, policy)
                if self.sessions is not None:
                    self._file_session_run(decision, root, members, run)
                report = grade_run(run, config)
                if report is not None:
                    reports[root.span_id] = report
        finally:
            detach(token)
        marks: dict[int, list[str]] = {}
        if self._mark is not None:
            for report in reports.values():
                # A call of a nested agent's run (nested_agents: separate) is also its outer
                # run's: both runs' graders name it.
                for span_id, graders in flagged_spans(report.results).items():
                    known = marks.setdefault(span_id, [])
                    known += [g for g in graders if g not in known]
        items: list[H] = []
        for record, item in decision.held:
            report = reports.pop(record.span_id, None)
            if report is not None:
                item = self._annotate(item, record, report)
                emits.append((report, record))
            flagged = marks.get(record.span_id) if marks else None
            if flagged and self._mark is not None:
                item = self._mark(item, record, flagged)
                self.graded["marked_spans"] += 1
            items.append(item)
        for report in reports.values():   # a run whose root was not held (its parent was lost)
            self.graded["unannotated_runs"] += 1
            emits.append((report, None))
        self.graded["traces"] += 1
        return items

    def _file_session_run(self, decision: Decision[H], root: SpanRecord,
                          members: list[SpanRecord], run: Any) -> None:
        """File a run under its session, if it has a key (runs of ``runs.agents`` only)."""
        sessions = self.sessions
        if sessions is None:
            return
        try:
            kinds = self.buffers.policy.record_kind
            parts = [m for m in members if m.span_id != root.span_id
                     and kinds(m) & (TOOL | MODEL | AGENT)]
            key = sessions.key_of(root, parts, ())
            if key is None:
                return
            agents = self.config.runs.agents
            if agents is not None and run.agent not in agents:
                return
            resource = None
            if self._resource_of is not None:
                for record, item in decision.held:
                    if record.span_id == root.span_id:
                        resource = self._resource_of(item)
                        break
            sessions.add(key, run, resource)
        except Exception:  # noqa: BLE001
            self._report("sessions")

    def _emit(self, report: RunReport, root: SpanRecord | None) -> None:
        self.graded["runs"] += 1
        if self._logs is not None:
            try:
                from opentelemetry.trace import SpanContext, TraceFlags

                run = report.run
                context = SpanContext(run.trace_id, run.root_span_id, is_remote=False,
                                      trace_flags=TraceFlags(TraceFlags.SAMPLED))
                end = (root.end_ns if root is not None else None) or run.end_ns or time.time_ns()
                self._logs.emit(report, context, end)
            except Exception:  # noqa: BLE001
                self._report("log events")
        if self._metrics is not None:
            try:
                self._metrics.record(report)
            except Exception:  # noqa: BLE001
                self._report("metrics")
        if self._on_report is not None:
            try:
                self._on_report(report)
            except Exception:  # noqa: BLE001
                self._report("on_report callback")

    def _count_drop(self, reason: str, n: int) -> None:
        if self._metrics is not None:
            try:
                self._metrics.drop(reason, n)
            except Exception:  # noqa: BLE001
                self._report("metrics")

    def _report(self, where: str) -> None:
        if where not in self._reported:
            self._reported.add(where)
            _log.exception("otel-tooleval: %s failed; continuing without it", where)

    # -- flush and shutdown -----------------------------------------------------------------

    def _request(self, kind: str, deadline: float) -> bool:
        worker = self._worker
        if worker is None or not worker.is_alive():
            if not len(self.buffers) and not (self.sessions is not None
                                              and len(self.sessions.open)):
                return True     # nothing was ever accepted, or after fork: nothing to decide
            # Traces but no thread (it ended): start one rather than grade and forward here,
            # where neither could be bounded by the deadline.
            with self._worker_lock:
                if self._worker is worker:
                    self._worker = None
            self._ensure_worker()
        done = threading.Event()
        with self._wake:
            self._requests.append((kind, done))
            self._wake.notify()
        return done.wait(max(deadline - time.monotonic(), 0.0))

    def flush(self, timeout_seconds: float = 30.0) -> bool:
        """Decide now every trace whose local root has arrived (skipping the rest of its wait)."""
        if self._closed:
            return True
        return self._request("flush", time.monotonic() + timeout_seconds)

    def shutdown(self, timeout_seconds: float = 30.0) -> bool:
        """Decide every open trace now (graded with what arrived), forward, stop the thread.

        If grading does not finish in time, what is still buffered is forwarded ungraded here.
        """
        if self._closed:
            return True
        self._closed = True
        deadline = time.monotonic() + timeout_seconds
        ok = self._request("shutdown", deadline)
        sinks_closed = self.sinks.closing(deadline) if self.sinks is not None else None
        if not ok:
            with self._claim_lock:   # what the grading thread holds and has not forwarded
                left = [d for d in self._in_hand if not d.claimed]
                for decision in left:
                    decision.claimed = True
            left += self.buffers.take_due(everything="shutdown")
            items = [item for d in left for _, item in d.held]
            self._drop_count(len(left))
            if items:
                try:
                    self._forward_items(items)
                except Exception:  # noqa: BLE001
                    self._report("forwarding")
            if self.sessions is not None:
                # Not graded in time: counted, never graded here (unbounded).
                self.sessions.drop_all("shutdown")
        if sinks_closed is not None:
            ok = sinks_closed() and ok
        return ok

    def _drop_count(self, n: int, reason: str = "shutdown") -> None:
        if n:
            self.buffers.counts["dropped." + reason] += n
            self._count_drop(reason, n)

    def stats(self) -> dict[str, int]:
        out = dict(self.graded)
        out.update(self.buffers.counts)
        out["open_traces"] = len(self.buffers)
        out["buffered_spans"] = self.buffers.spans
        out["buffered_bytes"] = self.buffers.bytes
        if self.sessions is not None:
            out.update(self.sessions.stats())
        if self.sinks is not None:
            out.update(self.sinks.stats())
        return out
