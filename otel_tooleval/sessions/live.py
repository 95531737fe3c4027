"""Sessions in the live processor: filed on the grading thread, graded when they end, and
sent on as one span per session (a new trace linked to every run's root), log events and
metrics. Nothing here runs on the application thread."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, TraceFlags

from .._compat import new_span
from .._version import __version__
from ..emit.session import session_attributes, session_events, session_span_name
from ..model import AgentRun, SpanRecord
from .grading import grade_session
from .keys import session_key
from .model import Session, SessionReport
from .tracker import OpenSessions

if TYPE_CHECKING:
    from ..config import ToolEvalConfig
    from ..emit import LogEvents, VerdictMetrics

__all__ = ["LiveSessions"]

_SCOPE = InstrumentationScope("otel_tooleval", __version__)
#: Families whose graders read a run's texts or root attributes, not only its calls.
_OUTPUT_FAMILIES = frozenset({"tool", "custom"})


class LiveSessions:
    """The open sessions of one processor and what happens when one ends.

    Args:
        config: the loaded config (``sessions:`` and its graders).
        forward: sends a finished span on (the processor's downstream).
        logs, metrics: the processor's channels (None when switched off).
        report: logs a contained failure once, by where it happened.
        on_session: called with each ``SessionReport`` (errors are reported).
        id_generator: ids of the session spans (default: random).
    """

    def __init__(self, config: ToolEvalConfig, forward: Callable[[Any], None], *,
                 logs: LogEvents | None, metrics: VerdictMetrics | None,
                 report: Callable[[str], None],
                 on_session: Callable[[SessionReport], None] | None = None,
                 id_generator: IdGenerator | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.keys = tuple(config.sessions.keys)
        outputs = any(g.type in _OUTPUT_FAMILIES or g.type.startswith("custom")
                      for g in config.session_graders)
        self.open = OpenSessions(config.sessions, outputs=outputs, clock=clock)
        self._forward = forward
        self._logs = logs
        self._metrics = metrics
        self._report = report
        self._on_session = on_session
        self._ids = id_generator or RandomIdGenerator()
        self.graded = 0
        self.failed = 0

    def key_of(self, root: SpanRecord, tools: Sequence[SpanRecord],
               models: Sequence[SpanRecord]) -> Any:
        """The run's session key, from its root, else its tool and model spans."""
        return session_key(root.attributes,
                           (r.attributes for part in (tools, models) for r in part), self.keys)

    def add(self, key: Any, run: AgentRun, resource: Any) -> None:
        """File a graded run (grading thread); sessions this evicts are graded now."""
        counts = self.open.counts
        calls, runs = counts["dropped.max_session_calls"], counts["dropped.max_session_runs"]
        evicted = self.open.add(key, run, resource)
        for reason, before in (("max_session_calls", calls), ("max_session_runs", runs)):
            over = counts["dropped." + reason] - before
            if over:
                self._drop(reason, over)
        if evicted:
            self._drop("max_open_sessions", len(evicted))
        for session in evicted:
            self.finish(session)

    def end(self, value: str) -> None:
        session = self.open.end(value)
        if session is not None:
            self.finish(session)

    def sweep(self) -> None:
        for session in self.open.idle():
            self.finish(session)

    def end_all(self, reason: str) -> None:
        for session in self.open.take_all(reason):
            self.finish(session)

    def drop_all(self, reason: str) -> None:
        """Out of time at shutdown: the open sessions are counted, not graded."""
        lost = self.open.take_all(reason)
        if lost:
            self.open.counts["dropped." + reason] += len(lost)
            self._drop(reason, len(lost))

    def finish(self, session: Session) -> None:
        """Grade an ended session and send its span, log events and metrics."""
        report = grade_session(session, self.config)
        if report is None:
            return
        self.graded += 1
        self.failed += not report.passed
        span = self._span(report, session.resource)
        try:
            self._forward(span)
        except Exception:
            self._report("session span")
        if self._logs is not None:
            try:
                self._logs.emit(report, span.context, span.end_time or time.time_ns(),
                                extra={report.key.attribute: report.key.value,
                                       "tooleval.session.key": report.key.attribute})
            except Exception:
                self._report("session log events")
        if self._metrics is not None:
            try:
                self._metrics.record_session(report, report.key.attribute)
            except Exception:
                self._report("session metrics")
        if self._on_session is not None:
            try:
                self._on_session(report)
            except Exception:
                self._report("on_session callback")

    def _span(self, report: SessionReport, resource: Any) -> Any:
        runs = report.runs
        start = runs[0].start_ns
        ends = [r.end_ns for r in runs if r.end_ns is not None]
        end = max(ends) if ends else time.time_ns()
        context = SpanContext(self._ids.generate_trace_id(), self._ids.generate_span_id(),
                              is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        emit = self.config.emit
        links = [(r.trace_id, r.root_span_id, {"tooleval.session.run": k})
                 for k, r in enumerate(runs)]
        return new_span(
            session_span_name(report), context,
            resource=resource if resource is not None else Resource.get_empty(),
            attributes=session_attributes(report),
            events=session_events(report, end) if emit.span_events else [],
            links=links, start_time=start, end_time=end, scope=_SCOPE)

    def _drop(self, reason: str, n: int) -> None:
        if self._metrics is not None:
            try:
                self._metrics.drop_sessions(reason, n)
            except Exception:
                self._report("metrics")

    def stats(self) -> dict[str, int]:
        out = {"sessions": self.graded, "sessions.failed": self.failed,
               "open_sessions": len(self.open)}
        out.update({f"sessions.{k}": v for k, v in self.open.counts.items()})
        return out
