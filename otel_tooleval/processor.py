"""``ToolEvalSpanProcessor``: live grading inside the instrumented agent.

It wraps the exporting processor. Non-root spans pass straight through; a run root is held,
graded on the grading thread, and forwarded as a copy that carries the verdicts. With
violation marks (``emit.violation_marks``, on by default, when a configured grader can list
violations) the tool spans of a run are held too, by one list append on the application
thread, and forwarded by the grading thread just before their run's root: those a failing
grader lists under ``details.violations`` as copies carrying ``tooleval.violation`` and
``tooleval.violation.graders`` (docs/violations.md). The application never sees an exception
from here, never waits on a grader, and memory stays within the configured limits (every drop
is counted in ``tooleval.runs.dropped``).
"""

from __future__ import annotations

import contextvars
import logging
import os
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from ._compat import (
    annotated_copy,
    batch_backlog,
    batch_emit,
    copy_with,
    detach,
    record_from_span,
    suppress_instrumentation,
)
from ._version import __version__
from .assembly import EndedRoot, RunJob, TraceBuffers, TraceState
from .config import ToolEvalConfig, load_config
from .emit import LogEvents, VerdictMetrics
from .grading import grade_run
from .grading_queue import _SWEEP_SECONDS, GradingQueue
from .guard import GuardRules, GuardViolation
from .hooks import forwarding_hooks, span_hooks
from .live_guard import LiveGuard
from .model import AgentRun, GradeResult, RunReport, SpanRecord, Verdicts
from .offload import GradingProcess, InFlight
from .processor_marks import ViolationMarks
from .registration import NO_SPANS, first_span_warnings, warn
from .sessions.live import LiveSessions
from .sessions.model import SessionReport
from .sinks.fanout import SinkSet
from .trajectory import run_from
from .violations import names_calls
from .worker import Verdict

__all__ = ["ToolEvalSpanProcessor"]

_log = logging.getLogger(__name__)
_STOP = object()
_TICK_SECONDS = 0.02


class ToolEvalSpanProcessor(GradingQueue, ViolationMarks, SpanProcessor):
    """Grades agent runs as their root spans end and forwards the verdicts with the trace.

    Args:
        config: a ``ToolEvalConfig``, a path, YAML text or a mapping (see ``load_config``).
        downstream: the processor that exports, e.g. ``BatchSpanProcessor(OTLPSpanExporter())``.
            Every hook is forwarded to it; the roots of graded runs reach it as copies. Its
            ``on_start``, ``_on_ending`` and ``on_end`` are looked up when it is set (the first
            two not called at all when they are the SDK's no-ops).
        meter_provider: where the metrics go (default: the global one).
        logger_provider: where the log-based events go (default: the global one).
        on_report: called on the grading thread with each ``RunReport`` (errors are logged).
        on_violation: called with each ``GuardViolation`` of the config's ``guard:`` rules, on
            the application thread, inside the tool span's start (or end, see docs/guard.md):
            keep it quick. Its exceptions are caught and logged once.
        on_session: called on the grading thread with each graded ``SessionReport``
            (``sessions:`` in the config; errors are logged).
        id_generator: makes the ids of the session spans (default: random ids).
    """

    def __init__(self, config: Any = None, downstream: SpanProcessor | None = None, *,
                 meter_provider: Any = None, logger_provider: Any = None,
                 on_report: Callable[[RunReport], None] | None = None,
                 on_violation: Callable[[GuardViolation], None] | None = None,
                 on_session: Callable[[SessionReport], None] | None = None,
                 id_generator: Any = None) -> None:
        self.config: ToolEvalConfig = load_config(config)
        self._downstream = downstream
        emit = self.config.emit
        # registration.py: checked at the first span, then out of the hot path
        self.expect_downstream = on_report is None
        self.sinks = SinkSet.from_emit(emit)   # fed the reports the log events are built from
        if self.sinks is not None:
            on_report = self.sinks.chain(on_report)
            on_session = self.sinks.chain(on_session, session=True)
        self._on_report = on_report
        self._metrics = VerdictMetrics(meter_provider, __version__) if emit.metrics else None
        self._logs = LogEvents(logger_provider, __version__) if emit.log_events else None
        # Violation marks: tool spans wait for their run's verdict (TraceState.held).
        self._hold = emit.violation_marks and names_calls(
            entry.grader for entry in self.config.graders)
        # Held lists of finished traces, looked at once more at the next sweep: a tool span
        # whose end raced its trace's end may have been appended after they were emptied.
        self._recheck: deque[list[Any]] = deque()
        self._buffers = TraceBuffers(self.config.policy, self.config.limits, self._count_drop,
                                     hold_tools=self._hold, on_retire=self._retire,
                                     report=self._report)
        self._guard = self._live_guard(on_violation)
        self._sessions: LiveSessions | None = None
        if self.config.session_graders:
            self._sessions = LiveSessions(self.config, self._forward, logs=self._logs,
                                          metrics=self._metrics, report=self._report,
                                          on_session=on_session, id_generator=id_generator)
        self._shutdown = False
        self._seen_span = False
        self._reported: dict[str, object] = {}
        self.graded: Counter[str] = Counter()
        self._offload: GradingProcess | None = None
        if self.config.grading.mode == "process":
            self._offload = GradingProcess(
                self.config, finish=self._finish_verdict, regrade=self._regrade,
                drop=self._drop_in_flight, report=self._report,
                full_details=on_report is not None)
        self._init_worker_state()
        self._install_hooks()   # after _offload: span_hooks reads it (``holder``)
        if hasattr(os, "register_at_fork"):
            ref = weakref.WeakMethod(self._after_fork_in_child)
            os.register_at_fork(after_in_child=lambda: (m := ref()) and m())

    # -- worker lifecycle ----------------------------------------------------------------------

    def _init_worker_state(self) -> None:
        # A deque the grading thread polls: handing it a root is one C-level append, with no
        # lock and no wake-up system call on the application thread (waking a waiting thread
        # cost more than the rest of the root's end() at 500 calls, measured). The grading
        # thread polls every _POLL_SECONDS while runs keep coming (every _BUSY_POLL_SECONDS
        # for the first _BUSY_SECONDS after one); idle for a second, it
        # sleeps until woken (``_sleeping``: the next root sets ``_wake``). The bound is checked
        # with len(); concurrent roots may overshoot it by the number of application threads.
        self._queue: deque[Any] = deque()
        self._queue_limit = self.config.limits.queue_size
        self._settles: deque[TraceState] = deque()   # _settle_soon's, one entry a trace at most
        self._wake = threading.Event()
        self._sleeping = False
        self._idle_since = 0.0
        self._worker: threading.Thread | None = None
        self._worker_lock = threading.Lock()
        self._claim_lock = threading.Lock()
        # What the grading thread took from the queue and has not finished: a RunJob, or an
        # ended local root it is deciding on. Taken and set under _claim_lock (_pop,
        # _forward_ungraded), so that an item is always in the queue or here.
        self._current: Any = None

    def _after_fork_in_child(self) -> None:
        # The child starts clean: no open runs, no thread; the parent keeps its own.
        self._buffers.reset_after_fork()
        if self._sessions is not None:
            self._sessions.open.reset()
        self._init_worker_state()
        self._install_hooks()   # the hooks hold the buffers' dicts of before the fork
        if self._offload is not None:
            self._offload.after_fork_in_child()

    def _wake_worker(self) -> None:
        self._sleeping = False
        if self._worker is None:
            self._ensure_worker()
        self._wake.set()

    def _ensure_worker(self) -> None:
        if self._worker is not None:
            return
        with self._worker_lock:
            if self._worker is None:
                worker = threading.Thread(target=self._work, name="otel-tooleval-grader",
                                          daemon=True)
                worker.start()
                self._worker = worker

    # -- SpanProcessor hooks (application thread) ------------------------------------------------
    # The SDK calls the hooks the instance holds: hook_bodies.py's, bound to this processor
    # (hooks.span_hooks), one Python frame each.
    # The methods below are what they shadow, reached by a subclass's super() call.

    @property
    def downstream(self) -> SpanProcessor | None:
        """The processor every span is forwarded to. Setting it rebuilds the hooks: its
        ``on_start``, ``_on_ending`` and ``on_end`` are looked up then (the first two skipped
        if the SDK's no-ops)."""
        return self._downstream

    @downstream.setter
    def downstream(self, downstream: SpanProcessor | None) -> None:
        self._downstream = downstream
        self._install_hooks()

    def _install_hooks(self) -> None:
        """Build the hooks for the current downstream and buffers (after shutdown: forwarding
        only) and put them on the instance, except where a subclass overrides the method."""
        if self._shutdown:
            hooks = forwarding_hooks(self._downstream, self._report)
        else:
            hooks = span_hooks(self._buffers, self._downstream, self._hand_over, self._report,
                               self._guard, self._hand_over_plain, self._settle_soon, self)
        self._hooks = hooks
        self._backlog = batch_backlog(self._downstream)
        # With the downstream it belongs to, read as one: a setter half-way through (the new
        # downstream set, this not yet rebuilt) must not send the new one's spans to the old.
        self._to_queue = (self._downstream, batch_emit(self._downstream))
        own = type(self)
        for name, hook in (("on_start", hooks.on_start), ("_on_ending", hooks.on_ending),
                           ("on_end", hooks.on_end)):
            if getattr(own, name) is getattr(ToolEvalSpanProcessor, name):
                setattr(self, name, hook)
        if not self._seen_span and not self._shutdown and own.on_start is (
                ToolEvalSpanProcessor.on_start):
            self.on_start = self._first_start  # type: ignore[method-assign]

    def _first_start(self, span: Span, parent_context: Context | None = None) -> None:
        """The first span's start: check the registration once, then the usual hook."""
        self._seen_span = True
        hook = self._hooks.on_start
        self.on_start = hook  # type: ignore[method-assign]
        try:
            for message in first_span_warnings(self._downstream, span,
                                               expect_downstream=self.expect_downstream):
                warn(message)
        except Exception:
            self._report("registration check")
        hook(span, parent_context)

    def _live_guard(self, on_violation: Callable[[GuardViolation], None] | None
                    ) -> LiveGuard | None:
        """The guard of the config's ``guard:`` rules (None without rules)."""
        guard = self.config.guard
        if guard is None or not guard.active:
            return None
        metrics = self._metrics
        return LiveGuard(GuardRules(guard, unwrap=self.config.runs.unwrap == "auto"),
                         self._buffers,
                         count=(lambda v: metrics.guard(v.rule, v.tool)) if metrics else None,
                         on_violation=on_violation, report=self._report)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._hooks.on_start(span, parent_context)

    def _on_ending(self, span: Span) -> None:
        self._hooks.on_ending(span)

    def on_end(self, span: ReadableSpan) -> None:
        self._hooks.on_end(span)

    def _hand_over(self, item: RunJob | EndedRoot) -> bool:
        """Queue an ended run root or local root for the grading thread: True when it is held
        there (forwarded later, with its verdicts), False to forward it now."""
        # _submit's usual case inline (the root's end() is timed against the SDK's)
        queue_ = self._queue
        if len(queue_) < self._queue_limit and self._worker is not None:
            queue_.append(item)
            if self._sleeping:
                self._wake_worker()
            return True
        return self._submit(item)

    def _forward(self, span: ReadableSpan) -> None:
        """Forward a span from the grading thread (a held root or tool span, a queued plain
        root): with the SDK's ``BatchSpanProcessor`` downstream, a ``ReadableSpan`` as the hooks
        forward one (its sampled test, then its queue's ``emit``: four frames fewer per span,
        the grading thread's time not the application's to lose), when that queue is the
        downstream's read here (not one being replaced); else the downstream's ``on_end``."""
        downstream = self.downstream
        if downstream is None:
            return
        bound, emit = self._to_queue
        try:
            if emit is None or bound is not downstream or span.__class__ is not ReadableSpan:
                downstream.on_end(span)
            elif span._context[3] & 1:   # type: ignore[index]   # sampled (the SDK's test)
                emit(span)
        except Exception:
            self._report("downstream.on_end")

    def _submit(self, item: RunJob | EndedRoot) -> bool:
        """Queue a run, or an ended local root to decide on, for the grading thread.

        False (forward the root at once) when the queue is full: a local root is then decided
        here, and counted as dropped only when it is a run.
        """
        queue_ = self._queue
        if len(queue_) < self._queue_limit:
            queue_.append(item)
            if self._sleeping or self._worker is None:
                try:
                    self._wake_worker()
                except RuntimeError:   # no new thread: it stays queued (held), for the next
                    self._report("grading thread start")   # root's start, or shutdown
            return True
        job = item if isinstance(item, RunJob) else self._buffers.decide(*item)
        if job is not None:
            self._buffers.counts["dropped.queue_full"] += 1
            self._count_drop("queue_full", 1)
        if self._hold and item.__class__ is tuple and item[0].closed:
            self._retire(item[0])   # its trace is done: its held tool spans go on unmarked
        return False

    # -- grading thread ----------------------------------------------------------------------

    def _work(self) -> None:
        next_sweep = time.monotonic() + _SWEEP_SECONDS
        self._idle_since = 0.0
        offload = self._offload
        while True:
            # Nothing more to batch with: send the runs, then let the next ones gather for a
            # tick (every wake-up of this thread takes the GIL from the application).
            if offload is not None and not self._queue and offload.flush():
                time.sleep(_TICK_SECONDS)
            settles = self._settles
            while settles:   # traces whose deferred spans pile up (hooks.py): settled first
                self._buffers.settle(settles.popleft())
            job = self._next()
            if job is _STOP:
                return
            if isinstance(job, threading.Event):   # a flush marker: all before it is done
                if offload is not None:
                    offload.after_in_flight(job)   # ... once the grading process answered
                else:
                    job.set()
            elif job.__class__ is tuple:           # an ended local root: is it a run?
                job = self._decided_current(job)
            elif isinstance(job, ReadableSpan):    # a plain trace's root: forwarded
                self._forward(job)
                job = None
            elif job.__class__ is _EndSessions:
                self._end_sessions(job)
                job = None
            if job is not None and job.__class__ is RunJob:
                try:
                    self._grade_and_forward(job)
                except BaseException:   # even sys.exit() in a callback: the thread must live on
                    self._report("grading")
                    self._forward_root(job, job.root)
            self._current = None
            backlog = self._backlog
            if backlog is not None and backlog():
                # The downstream's export thread is behind (its queue more than half full): the
                # interpreter lock to it, so that its queue does not drop spans (without this a
                # busy loop of agent runs lost up to 3.6% of them: docs/performance-log.md).
                _give_way()
            if time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + _SWEEP_SECONDS
                self._sweep()
                if offload is not None:
                    offload.check()

    def _decided(self, ended: EndedRoot) -> RunJob | None:
        """The run of an ended local root; a root that is no run is forwarded as it is."""
        job = self._decide(ended)
        if job is None:
            self._forward(ended[1])
            self._finish_trace(ended[0])
        return job

    def _decide(self, ended: EndedRoot) -> RunJob | None:
        try:
            return self._buffers.decide(*ended)
        except Exception:
            self._report("run decision")
            return None

    def _decided_current(self, ended: EndedRoot) -> RunJob | None:
        """``_decided`` for the grading thread's current item, unless a shutdown out of time
        took it meanwhile: shutdown forwarded its root as it was, so here it is only counted
        (when it is a run) and its run marked forwarded."""
        job = self._decide(ended)
        with self._claim_lock:
            taken = self._current is not ended
            if not taken:
                self._current = job
            elif job is not None:
                job.claimed = True
        if taken:
            if job is not None:
                self._buffers.counts["dropped.shutdown"] += 1
                self._count_drop("shutdown", 1)
            return None
        if job is None:
            self._forward(ended[1])
            self._finish_trace(ended[0])
        return job

    def _forward_root(self, job: RunJob, span: ReadableSpan,
                      results: Sequence[GradeResult] = ()) -> bool:
        """Forward a run's root (its copy, or itself ungraded) unless that already happened;
        with violation marks, its held tool spans first, marked from ``results``."""
        with self._claim_lock:
            if job.claimed:
                return False
            job.claimed = True
        if self._hold:
            self._forward_held(job, results)
        self._forward(span)
        if self._hold:
            root = job.root
            if root.parent is None or root.parent.is_remote:
                self._finish_trace(job.trace)
        return True

    def _sweep(self) -> None:
        try:
            self._buffers.sweep()
        except Exception:
            self._report("sweep")
        self._flush_retired()
        if self._sessions is not None:
            try:
                self._sessions.sweep()
            except Exception:
                self._report("sessions")

    # -- sessions (grading thread) -------------------------------------------------------------

    def end_session(self, key: str) -> None:
        """End the session whose key is ``key`` (the value of its session attribute): it is
        graded on the grading thread after every run whose root has already ended. A key
        with no open session is ignored. Never raises."""
        if self._sessions is None or self._shutdown:
            return
        try:
            self._submit_marker(_EndSessions(str(key), "end_session"))
        except Exception:
            self._report("end_session")

    def _submit_marker(self, marker: _EndSessions) -> None:
        # Markers are never refused for a full queue: they are few, and one lost would leave
        # a session open until it idles out.
        self._queue.append(marker)
        self._wake_worker()

    def _end_sessions(self, marker: _EndSessions) -> None:
        sessions = self._sessions
        if sessions is None:
            return
        token = suppress_instrumentation()
        try:
            if marker.value is None:
                sessions.end_all(marker.reason)
            else:
                sessions.end(marker.value)
        except Exception:
            self._report("sessions")
        finally:
            detach(token)

    def _session_run(self, root: ReadableSpan, record: SpanRecord, tools: list[SpanRecord],
                     models: list[SpanRecord], dropped: int) -> AgentRun | None:
        """File the run under its session, if it has one; the run built for it (None when
        the run has no session key)."""
        sessions = self._sessions
        if sessions is None:
            return None
        try:
            key = sessions.key_of(record, tools, models)
            if key is None:
                return None
            run = run_from(record, tools, models, self.config.policy, dropped_calls=dropped)
            agents = self.config.runs.agents
            if agents is None or run.agent in agents:
                sessions.add(key, run, root.resource)
            return run
        except Exception:
            self._report("sessions")
            return None

    def _grade_and_forward(self, job: RunJob) -> None:
        token = suppress_instrumentation()
        try:
            tools, models, dropped = self._buffers.members(job)
            root = job.root
            record = record_from_span(root)
            run = self._session_run(root, record, tools, models, dropped)
            self._take_held(job, tools)
            offload = self._offload
            if offload is not None and offload.available() and offload.submit(
                    job, record, tools, models, dropped):
                self._buffers.release(job, tools, models)
                return   # the grading process answers on the verdict thread
            report = (self._grade(record, tools, models, dropped) if run is None
                      else grade_run(run, self.config, pause=self._pause))
            self._buffers.release(job, tools, models)
        finally:
            detach(token)
        self._finish_report(job, report)

    def _grade(self, root: SpanRecord, tools: list[SpanRecord], models: list[SpanRecord],
               dropped: int) -> RunReport | None:
        run = run_from(root, tools, models, self.config.policy, dropped_calls=dropped)
        return grade_run(run, self.config, pause=self._pause)

    def _pause(self) -> None:
        """Between two graders: the lock to the application (docs/performance.md, "Grading
        beside the application"), unless half the queue waits (grading then keeps up)."""
        if len(self._queue) * 2 < self._queue_limit:
            _give_way()

    def _finish_report(self, job: RunJob, report: RunReport | None) -> None:
        root = job.root
        if report is None:
            self._forward_root(job, root)
            return
        if self._forward_root(job, self._annotated(root, report), report.results):
            self._count_graded(report.passed)
            self._emit(report, root)

    # -- grading process (grading.mode: process); called on its verdict thread --------------------

    def _regrade(self, entry: InFlight) -> None:
        """A run the grading process did not answer (it exited): graded here instead."""
        token = suppress_instrumentation()
        try:
            report = self._grade(entry.root, entry.tools, entry.models, entry.dropped)
        finally:
            detach(token)
        self._finish_report(entry.job, report)

    def _drop_in_flight(self, entry: InFlight, reason: str) -> None:
        if self._forward_root(entry.job, entry.job.root):
            self._buffers.counts["dropped." + reason] += 1
            self._count_drop(reason, 1)

    def _finish_verdict(self, entry: InFlight, verdict: Verdict | None) -> None:
        """Forward the root copy with the verdicts the grading process sent, and emit them."""
        job = entry.job
        root = job.root
        if verdict is None:   # no grader applies to this run
            self._forward_root(job, root)
            return
        attributes, events, agent, results, passed, case, ambiguous = verdict
        span = root
        if attributes is not None or events is not None:
            end = root.end_time or time.time_ns()
            span = copy_with(root, attributes or {},
                             [(name, attrs, end) for name, attrs in events or ()])
        graded = tuple(GradeResult(*r) for r in results)
        if not self._forward_root(job, span, graded):
            return
        self._count_graded(passed)
        if self._logs is None and self._metrics is None and self._on_report is None:
            return
        verdicts: Verdicts
        if self._on_report is not None:   # the callback gets the whole run: built here
            run = run_from(entry.root, entry.tools, entry.models, self.config.policy,
                           dropped_calls=entry.dropped)
            verdicts = RunReport(run, graded, case, tuple(ambiguous))
        else:
            verdicts = _Verdicts(agent, graded, passed)
        self._emit(verdicts, root)

    def _annotated(self, root: ReadableSpan, report: RunReport) -> ReadableSpan:
        emit = self.config.emit
        return annotated_copy(root, report, events=emit.span_events,
                              attributes=emit.root_attributes)

    def _emit(self, report: Verdicts, root: ReadableSpan) -> None:
        if self._logs is not None:
            try:
                self._logs.emit(report, root.context, root.end_time or time.time_ns())
            except Exception:
                self._report("log events")
        if self._metrics is not None:
            try:
                self._metrics.record(report)
            except Exception:
                self._report("metrics")
        if self._on_report is not None and isinstance(report, RunReport):
            try:
                self._on_report(report)
            except Exception:
                self._report("on_report callback")

    def _count_graded(self, passed: bool) -> None:
        self.graded["runs"] += 1
        if not passed:
            self.graded["runs.failed"] += 1

    def _count_drop(self, reason: str, n: int) -> None:
        if self._metrics is not None:
            try:
                self._metrics.drop(reason, n)
            except Exception:
                self._report("metrics")

    def _report(self, where: str) -> None:
        # Log each kind of failure once, with its traceback; never raise into the app.
        # setdefault is atomic: of two threads failing at once, only one gets its token back.
        token = object()
        if self._reported.setdefault(where, token) is token:
            _log.exception("otel-tooleval: %s failed; continuing without it", where)

    # -- flush and shutdown -------------------------------------------------------------------

    def _drain(self, deadline: float) -> bool:
        """Wait until every run queued so far is graded and forwarded, or the deadline."""
        if self._worker is None or not self._worker.is_alive():
            return not self._queue
        marker = threading.Event()
        self._queue.append(marker)
        self._wake_worker()
        return marker.wait(max(deadline - time.monotonic(), 0.0))

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Grade and forward every run whose root has ended, then flush the downstream."""
        deadline = time.monotonic() + timeout_millis / 1000
        try:
            if self._sessions is not None:
                # Always: the runs queued before this flush are filed under their sessions
                # only when the grading thread reaches them, so an empty ``open`` here
                # proves nothing.
                self._submit_marker(_EndSessions(None, "flush"))
            drained = self._drain(deadline)
            self._buffers.settle_all()   # the deferred spans' drops reach the metrics now
            self._flush_retired()
        except Exception:
            self._report("force_flush")
            drained = False
        downstream = self.downstream
        if downstream is None:
            return drained
        flushed = self._within(deadline, "downstream.force_flush",
                               lambda: downstream.force_flush(_millis_left(deadline)))
        return drained and flushed

    def shutdown(self, timeout_millis: int = 30_000) -> bool:  # type: ignore[override]
        """Stop tracking, grade what is queued within one deadline, shut the downstream down.

        Runs still open are counted as dropped (``reason=shutdown``). Roots whose grading does
        not finish in time are forwarded ungraded (counted the same way), so no span is lost.
        """
        if self._shutdown:
            return True
        deadline = time.monotonic() + timeout_millis / 1000
        self._shutdown = True
        if not self._seen_span:
            warn(NO_SPANS)
        self._install_hooks()   # forwarding only from now on
        if self._guard is not None:
            self._guard.close()
        ok = False
        try:
            cleared = self._buffers.clear("shutdown")
            if self._sessions is not None and self._worker is not None:
                self._queue.append(_EndSessions(None, "shutdown"))
            ok = self._drain(deadline)
            if not ok:
                self._forward_ungraded()
            if self._sessions is not None:
                # Not graded in time (or no grading thread): counted, never graded here.
                self._sessions.drop_all("shutdown")
            if self._worker is not None:
                # After _forward_ungraded, which empties the queue: the worker ends once what
                # it is doing returns, however late that is.
                self._queue.append(_STOP)
                self._wake_worker()
                if ok:
                    self._worker.join(max(deadline - time.monotonic(), 0.0))
            if self._offload is not None:
                ok = self._offload.close(deadline) and ok
            if self._hold:   # what no graded run took, unmarked; and stragglers
                for state in cleared:
                    self._retire(state)
                self._flush_retired()
        except Exception:
            self._report("shutdown")
        # What the grading queued for the sinks is sent while the downstream shuts down.
        sinks_closed = self.sinks.closing(deadline) if self.sinks is not None else None
        downstream = self.downstream
        if downstream is not None:
            # Shut down even when the flush failed or ran out of time: shutting the exporter
            # down is what ends an export that hangs.
            flushed = self._within(deadline, "downstream.force_flush",
                                   lambda: downstream.force_flush(_millis_left(deadline)))
            closed = self._within(deadline, "downstream.shutdown", downstream.shutdown)
            ok = ok and flushed and closed
        if sinks_closed is not None:
            ok = sinks_closed() and ok
        return ok

    def _within(self, deadline: float, where: str, call: Callable[[], Any]) -> bool:
        """Call into the downstream, waiting for it no later than ``deadline``.

        The SDK's ``BatchSpanProcessor`` does not honour deadlines: its ``force_flush`` exports
        on the caller's thread behind an export that may hang, and its ``shutdown`` waits up to
        30 s for its thread. The call runs on a helper thread (in the caller's context) and
        is left to finish in the background past the deadline. False when it raised, returned
        False, or did not finish in time.
        """
        outcome: list[bool] = []

        def run() -> None:
            try:
                outcome.append(call() is not False)
            except Exception:
                self._report(where)
                outcome.append(False)

        helper = threading.Thread(target=contextvars.copy_context().run, args=(run,),
                                  name="otel-tooleval-downstream", daemon=True)
        try:
            helper.start()
        except RuntimeError:   # no new threads at interpreter exit: call it here, unbounded
            run()
            return outcome[0]
        helper.join(max(deadline - time.monotonic(), 0.0))
        return bool(outcome) and outcome[0]

    def _forward_ungraded(self) -> None:
        """Out of time: forward the root being graded and every queued root as they are."""
        with self._claim_lock:   # the grading thread's current item and the queue, at once
            current, self._current = self._current, None
            pending: list[Any] = list(self._queue)
            self._queue.clear()
        if current.__class__ is tuple:
            # An ended local root the grading thread is still deciding on: forwarded as it
            # is; the grading thread counts it when it turns out to be a run.
            self._forward(current[1])
            self._finish_trace(current[0])
        else:
            pending.append(current)
        if self._offload is not None:   # sent to the grading process, not answered yet
            pending.extend(entry.job for entry in self._offload.take_all())
        for job in pending:
            if job.__class__ is tuple:   # an ended local root not decided yet: decide now
                job = self._decided(job)
            if isinstance(job, ReadableSpan):   # a plain trace's root
                self._forward(job)
            elif isinstance(job, RunJob) and self._forward_root(job, job.root):
                self._buffers.counts["dropped.shutdown"] += 1
                self._count_drop("shutdown", 1)

    def stats(self) -> dict[str, int]:
        """Counters for tests and health checks: ``runs`` graded (``runs.failed`` of them did
        not pass), ``dropped.<reason>``, ``late_spans``, ``open_traces``, ``closed_traces``
        (finished traces remembered for late spans: at most ``limits.max_open_runs``)."""
        self._buffers.settle_all()   # spans whose bookkeeping waits (hooks.py: defer)
        out = dict(self.graded)
        out.update(self._buffers.counts)
        out["open_traces"] = len(self._buffers)
        out["closed_traces"] = self._buffers.closed()
        if self._sessions is not None:
            out.update(self._sessions.stats())
        return out


class _EndSessions:
    """A queue item for the grading thread: end one session (``value``) or all (None)."""

    __slots__ = ("reason", "value")

    def __init__(self, value: str | None, reason: str) -> None:
        self.value = value
        self.reason = reason


class _Verdicts:
    """A run's verdicts from the grading process, for the log events and metrics."""

    __slots__ = ("agent", "passed", "results")

    def __init__(self, agent: str | None, results: tuple[GradeResult, ...],
                 passed: bool) -> None:
        self.agent = agent
        self.results = results
        self.passed = passed


def _give_way() -> None:
    # sleep(0) releases the interpreter lock: a thread waiting for it gets it now, not at the
    # end of the 5 ms switch interval; with none waiting it costs one system call.
    time.sleep(0)


def _millis_left(deadline: float) -> int:
    return max(int((deadline - time.monotonic()) * 1000), 0)
