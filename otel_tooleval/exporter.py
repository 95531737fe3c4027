"""``ToolEvalSpanExporter``: the same grading for set-ups that configure exporters only.

It wraps any ``SpanExporter`` (``OTEL_TRACES_EXPORTER``, declarative configuration,
``opentelemetry-instrument``). An exporter sees spans only once they have ended, in batches, so
it grades like the collector's tail sampler (see ``tail.TailGrader``): spans that can be a run's
root are held until their trace is decided (``decision_wait`` seconds after its local root
arrived, so children that end just after their root still count, as pending calls); every other
span goes straight on to the wrapped exporter in the same ``export`` call. The roots reach the
wrapped exporter later, from the grading thread, as copies that carry the verdicts.

Tool spans are held with their root (``emit.violation_marks``, on by default, when a configured
grader can list violations): a tool span that a failing grader lists under
``details.violations`` goes on as a copy carrying ``tooleval.violation=true`` and
``tooleval.violation.graders``, the others as they are. Held tool spans are bounded as the
roots are (``limits.max_spans_per_trace``, ``limits.max_open_runs``); they reach the wrapped
exporter with the run's root instead of as they end.

Every span handed to ``export`` reaches the wrapped exporter exactly once. Calls into the
wrapped exporter are serialised by one lock (the batch processor's thread and the grading
thread both export), except ``shutdown``, which may interrupt an export that hangs, as the SDK's
own batch processor does. Nothing raises into the caller.

``force_flush`` and ``shutdown`` return by their ``timeout_millis`` (plus a few milliseconds)
whatever hangs: a busy grading thread is waited for until the deadline only, and the calls they
make into the wrapped exporter (``force_flush``, ``shutdown``, and once shutting down
``export``) run on a short-lived helper thread that is waited for until the deadline, since a
wrapped exporter may ignore its own timeout or take none. A call still running at the deadline
makes the result False; it finishes, or not, in the background.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from . import _exit
from ._compat import annotated_copy, copy_with, detach, record_from_span, suppress_instrumentation
from .config import ToolEvalConfig, config_from_mapping, load_config
from .conventions import TOOL
from .model import RunReport, SpanRecord
from .sessions.model import SessionReport
from .tail import TailGrader
from .violations import mark_attributes

__all__ = ["ToolEvalSpanExporter"]

_log = logging.getLogger(__name__)
_LOCK_SLICE = 0.1          # seconds between checks of the shutdown deadline while waiting
_MIN_WAIT = 0.02           # seconds a wrapped call is waited for even past the deadline
_FAILED: Any = object()    # a wrapped call that raised (reported)
UNGRADED: Any = object()   # config sentinel: forward everything as it is (zero-code fallback)


class ToolEvalSpanExporter(SpanExporter):
    """Grades agent runs in the spans it exports and forwards the verdicts with the trace.

    Args:
        exporter: the exporter that sends the spans on, e.g. ``OTLPSpanExporter()``.
        config: a ``ToolEvalConfig``, a path, YAML text or a mapping (see ``load_config``);
            ``None`` reads ``TOOLEVAL_CONFIG``. Errors raise ``ConfigError`` here.
        meter_provider: where the metrics go (default: the global one, resolved when used).
        logger_provider: where the log-based events go (default: the global one, likewise).
        on_report: called on the grading thread with each ``RunReport`` (errors are logged).
        decision_wait: seconds a trace stays open after its local root arrived, for children
            that end after their root. ``force_flush`` skips the rest of the wait.
        on_session: called on the grading thread with each graded ``SessionReport``
            (``sessions:`` in the config; errors are logged).
        id_generator: makes the ids of the session spans (default: random ids).

    The SDK's span processors do not pass ``TracerProvider.force_flush()`` on to their
    exporter: call this exporter's ``force_flush()`` (after the provider's) to have every run
    whose root has ended graded and exported now.

    With ``sessions:`` graders, runs are filed under their session across every trace this
    exporter sees; a session ends after ``sessions.idle_seconds`` without a new run, by
    :meth:`end_session`, at ``force_flush`` and at ``shutdown`` (within their deadlines), and
    its span is exported through the wrapped exporter (docs/sessions.md).
    """

    def __init__(self, exporter: SpanExporter, config: Any = None, *,
                 meter_provider: Any = None, logger_provider: Any = None,
                 on_report: Callable[[RunReport], None] | None = None,
                 decision_wait: float = 1.0,
                 on_session: Callable[[SessionReport], None] | None = None,
                 id_generator: Any = None) -> None:
        self.exporter = exporter
        self._reported: set[str] = set()
        self._shut_down = False
        self._deadline: float | None = None   # set by shutdown: no wait for the lock outlasts it
        self._lock = threading.Lock()
        self._grader: TailGrader[ReadableSpan] | None = None
        if config is UNGRADED:
            self.config: ToolEvalConfig = config_from_mapping({}, allow_no_graders=True)
        else:
            self.config = load_config(config)
            self._grader = TailGrader(
                self.config, forward=self._forward_held, annotate=self._annotate,
                decision_wait=decision_wait, meter_provider=meter_provider,
                logger_provider=logger_provider, on_report=on_report,
                forward_session=self._forward_session, resource_of=_resource_of,
                on_session=on_session, id_generator=id_generator,
                name="otel-tooleval-exporter", mark=self._mark)
        shutdown = getattr(exporter, "shutdown", None)
        try:
            self._shutdown_takes_timeout = (
                shutdown is not None
                and "timeout_millis" in inspect.signature(shutdown).parameters)
        except (TypeError, ValueError):
            self._shutdown_takes_timeout = False
        if hasattr(os, "register_at_fork"):
            ref = weakref.WeakMethod(self._after_fork_in_child)
            os.register_at_fork(after_in_child=lambda: (m := ref()) and m())
        _exit.track(self)

    def _after_fork_in_child(self) -> None:
        # Another thread may have held the lock at the fork; the grader resets itself.
        self._lock = threading.Lock()

    @property
    def grading(self) -> bool:
        """False when the exporter only forwards (the zero-code fallback on a bad config)."""
        return self._grader is not None

    # -- SpanExporter ----------------------------------------------------------------------------

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Hold the spans that may be run roots; export the rest now. Never raises."""
        if self._shut_down:
            return SpanExportResult.FAILURE
        grader = self._grader
        if grader is None:
            now = list(spans)
        else:
            try:
                now = self._accept(grader, spans)
            except Exception:  # noqa: BLE001 - forward rather than lose them
                self._report("accepting spans")
                now = list(spans)
        if not now:
            return SpanExportResult.SUCCESS
        return self._export_wrapped(now)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Decide every trace whose root has arrived, forward it, flush the wrapped exporter."""
        if self._shut_down:
            return True
        deadline = time.monotonic() + timeout_millis / 1000
        try:
            ok = True
            if self._grader is not None:
                ok = self._grader.flush(max(deadline - time.monotonic(), 0.0))
            if not self._acquire(deadline):
                return False
            remaining = max(int((deadline - time.monotonic()) * 1000), 0)
            finished, flushed = self._call_wrapped(
                "exporter.force_flush", lambda: self.exporter.force_flush(remaining), deadline,
                release=True)
            return ok and finished and flushed is not False and flushed is not _FAILED
        except Exception:  # noqa: BLE001
            self._report("force_flush")
            return False

    def shutdown(self, timeout_millis: int = 30_000) -> bool:  # type: ignore[override]
        """Decide every open trace (graded with what arrived), forward, shut the wrapped down.

        Bounded by ``timeout_millis`` even when the wrapped exporter hangs: held spans that
        cannot be handed to it in time are counted (``reason=shutdown`` for held run roots,
        ``export_deadline`` for spans passing through) and logged, and the answer is False
        (also when the grading thread counted them just before the deadline and still
        answered in time).
        """
        if self._shut_down:
            return True
        self._shut_down = True
        deadline = time.monotonic() + timeout_millis / 1000
        self._deadline = deadline
        ok = True
        lost_before = self._lost()
        if self._grader is not None:
            try:
                ok = self._grader.shutdown(max(deadline - time.monotonic(), 0.0))
            except Exception:  # noqa: BLE001
                self._report("shutdown")
                ok = False
        # Not under the lock: shutting the wrapped exporter down is what ends a hung export.
        remaining = max(int((deadline - time.monotonic()) * 1000), 0)

        def shut_wrapped() -> None:
            if self._shutdown_takes_timeout:
                self.exporter.shutdown(timeout_millis=remaining)  # type: ignore[call-arg]
            else:
                self.exporter.shutdown()

        finished, result = self._call_wrapped("exporter.shutdown", shut_wrapped, deadline)
        return ok and finished and result is not _FAILED and self._lost() == lost_before

    def _lost(self) -> int:
        """Spans counted as not handed to the wrapped exporter at a deadline, so far."""
        grader = self._grader
        if grader is None:
            return 0
        counts = grader.buffers.counts
        return counts["dropped.shutdown"] + counts["dropped.export_deadline"]

    def end_session(self, key: str) -> None:
        """End the session whose key is ``key`` (the value of its session attribute).

        It is graded ``decision_wait`` seconds later, after the traces whose roots reached
        this exporter by now; a root still in the batch processor's queue has not: flush the
        ``TracerProvider`` first. An unknown key is ignored. Never raises."""
        if self._grader is not None and not self._shut_down:
            self._grader.end_session(key)

    # -- internals -------------------------------------------------------------------------------

    def _forward_session(self, span: ReadableSpan) -> None:
        """A graded session's span, exported through the wrapped exporter."""
        self._export_wrapped([span], held=True)

    def _accept(self, grader: TailGrader[ReadableSpan], spans: Sequence[ReadableSpan]
                ) -> list[ReadableSpan]:
        now: list[ReadableSpan] = []
        items: list[tuple[SpanRecord, ReadableSpan, int]] = []
        for span in spans:
            try:
                items.append((record_from_span(span), span, 0))
            except Exception:  # noqa: BLE001 - a span we cannot read is forwarded as it is
                self._report("reading a span")
                now.append(span)
        now.extend(grader.accept(items))
        return now

    def _annotate(self, span: ReadableSpan, record: SpanRecord, report: RunReport
                  ) -> ReadableSpan:
        emit = self.config.emit
        return annotated_copy(span, report, events=emit.span_events,
                              attributes=emit.root_attributes)

    def _mark(self, span: ReadableSpan, record: SpanRecord, graders: Sequence[str]
              ) -> ReadableSpan:
        return copy_with(span, mark_attributes(graders), ())

    def _forward_held(self, spans: list[ReadableSpan]) -> None:
        """The grader's ``forward``: held spans (roots with verdicts) after a decision."""
        self._export_wrapped(spans, held=True)

    def _acquire(self, deadline: float | None = None) -> bool:
        """Take the lock; give up at ``deadline`` or at the shutdown deadline."""
        lock = self._lock
        while not lock.acquire(timeout=_LOCK_SLICE):
            limit = self._deadline
            if deadline is not None:
                limit = deadline if limit is None else min(limit, deadline)
            if limit is not None and time.monotonic() >= limit:
                return False
        return True

    def _call_wrapped(self, what: str, call: Callable[[], Any], deadline: float, *,
                      release: bool = False) -> tuple[bool, Any]:
        """Run a call into the wrapped exporter on a helper thread and wait for it until
        ``deadline``: (finished in time, its result or ``_FAILED`` if it raised, reported).

        ``release``: the caller holds the lock; the helper releases it when the call returns,
        so a call that outlives the deadline keeps other exports out until it ends.
        """
        box: list[Any] = []
        done = threading.Event()

        def run() -> None:
            token = suppress_instrumentation()
            try:
                box.append(call())
            except Exception:  # noqa: BLE001 - reported, never raised into the caller
                self._report(what)
                box.append(_FAILED)
            finally:
                detach(token)
                if release:
                    self._lock.release()
                done.set()

        try:
            threading.Thread(target=run, name=f"otel-tooleval {what}", daemon=True).start()
        except RuntimeError:     # no new threads (interpreter shutting down): call it here
            run()
        if not done.wait(max(deadline - time.monotonic(), _MIN_WAIT)):
            if what + " deadline" not in self._reported:
                self._reported.add(what + " deadline")
                _log.warning("otel-tooleval: the wrapped %s did not return within the timeout; "
                             "it is left running in the background", what)
            return False, None
        return True, box[0]

    def _export_wrapped(self, spans: list[ReadableSpan], held: bool = False) -> SpanExportResult:
        if not self._acquire():
            self._dropped(spans, held)
            return SpanExportResult.FAILURE
        deadline = self._deadline
        if deadline is not None:
            # Shutting down: not even an export that hangs may hold shutdown past its deadline.
            finished, result = self._call_wrapped(
                "exporter.export", lambda: self.exporter.export(spans), deadline, release=True)
            if not finished:
                self._dropped(spans, held)
                return SpanExportResult.FAILURE
            if result is _FAILED:
                return SpanExportResult.FAILURE
            return result if isinstance(result, SpanExportResult) else SpanExportResult.SUCCESS
        token = suppress_instrumentation()
        try:
            result = self.exporter.export(spans)
        except Exception:  # noqa: BLE001
            self._report("exporter.export")
            return SpanExportResult.FAILURE
        finally:
            detach(token)
            self._lock.release()
        return result if isinstance(result, SpanExportResult) else SpanExportResult.SUCCESS

    def _dropped(self, spans: list[ReadableSpan], held: bool) -> None:
        """Spans the wrapped exporter could not take before the shutdown deadline: held run
        roots count as ``shutdown`` (one per run, as the processor counts), spans passing
        through and held tool spans (``emit.violation_marks``) as ``export_deadline`` (one
        per span)."""
        n = len(spans)
        grader = self._grader
        if grader is not None:
            if not held:
                grader._drop_count(n, "export_deadline")
            else:
                tools = self._tool_spans(spans) if grader.buffers.hold_tools else 0
                grader._drop_count(n - tools, "shutdown")
                grader._drop_count(tools, "export_deadline")
        if "deadline" not in self._reported:
            self._reported.add("deadline")
            _log.warning("otel-tooleval: the wrapped exporter was still busy at the shutdown "
                         "deadline; %d span(s) were not exported", n)

    def _tool_spans(self, spans: list[ReadableSpan]) -> int:
        """How many of ``spans`` are tool spans (read again: this runs on drops only)."""
        kind = self.config.policy.record_kind
        count = 0
        for span in spans:
            try:
                record = record_from_span(span)
            except Exception:  # noqa: BLE001 - unreadable: counted as a root, as before
                record = None
            if record is not None and kind(record) & TOOL and not record.is_local_root:
                count += 1
        return count

    def _report(self, where: str) -> None:
        # Log each kind of failure once, with its traceback; never raise into the caller.
        if where not in self._reported:
            self._reported.add(where)
            _log.exception("otel-tooleval: %s failed; continuing without it", where)

    def stats(self) -> dict[str, int]:
        """Counters for tests and health checks: runs graded, drops by reason, open traces,
        and with ``sessions:`` the sessions graded, failed, open and dropped."""
        return self._grader.stats() if self._grader is not None else {}


def _resource_of(span: ReadableSpan) -> Any:
    return span.resource
