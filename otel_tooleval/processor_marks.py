"""The live processor's violation marks (``emit.violation_marks``): a run's tool spans are
held on its trace (one list append on the application thread, ``hooks.py``) and forwarded by
the grading thread just before the run's root, each one a failing result lists as a marked
copy (``tooleval.violation``, ``tooleval.violation.graders``). Kept apart from
``processor.py`` as a mixin of ``ToolEvalSpanProcessor``; docs/violations.md says what it
costs."""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from ._compat import copy_with
from .assembly import RunJob, TraceBuffers
from .model import GradeResult, SpanRecord
from .violations import flagged_spans, mark_attributes

__all__ = ["ViolationMarks"]


class ViolationMarks:
    """The grading thread's side of holding tool spans for their run's verdict. The
    processor provides the state and the three methods declared here."""

    _hold: bool
    _buffers: TraceBuffers
    _recheck: deque[list[Any]]
    _worker: threading.Thread | None
    _shutdown: bool
    graded: Counter[str]

    def _report(self, where: str) -> None:   # ToolEvalSpanProcessor's
        raise NotImplementedError

    def _forward(self, span: ReadableSpan) -> None:   # ToolEvalSpanProcessor's
        raise NotImplementedError

    def _ensure_worker(self) -> None:   # ToolEvalSpanProcessor's
        raise NotImplementedError

    def _take_held(self, job: RunJob, tools: list[SpanRecord]) -> None:
        """Take the held tool spans of a run about to be graded (an outermost run's: a nested
        run's calls are its outer run's too, forwarded with that one)."""
        if self._hold and job.outermost:
            job.held = self._buffers.take_held(job.trace.held, {t.span_id for t in tools})

    def _forward_held(self, job: RunJob, results: Sequence[GradeResult]) -> None:
        """Forward a run's held tool spans, each one a failing result lists as a marked copy.
        A nested run's marks wait on its trace for the outer run that forwards its calls."""
        try:
            state = job.trace
            flagged = flagged_spans(results) if results else {}
            if not job.outermost:
                if flagged:
                    marks = state.marks if state.marks is not None else {}
                    for sid, graders in flagged.items():
                        known = marks.setdefault(sid, [])
                        known += [g for g in graders if g not in known]
                    state.marks = marks
                return
            if state.marks:
                for sid, graders in state.marks.items():
                    known = flagged.setdefault(sid, [])
                    known[:0] = [g for g in graders if g not in known]
            held, job.held = job.held, None
        except Exception:
            self._report("violation marks")
            held, job.held = job.held, None
            flagged = {}
        if held:
            self._forward_spans(held, flagged)

    def _forward_spans(self, spans: list[Any], flagged: dict[int, list[str]]) -> None:
        marked = 0
        for span in spans:
            graders = flagged.get(span.context.span_id) if flagged else None
            if graders:
                try:
                    span = copy_with(span, mark_attributes(graders), ())
                    marked += 1
                except Exception:
                    self._report("violation marks")
            self._forward(span)
        if marked:
            self.graded["marked_spans"] += marked

    def _finish_trace(self, state: Any) -> None:
        """A trace whose last local root was forwarded: its held tool spans that no run took
        go on now (marked where a nested run's grader listed them)."""
        if self._hold and state.closed:
            self._flush_held(state.held, state.marks)

    def _retire(self, state: Any) -> None:
        """A trace given up on (evicted, past its TTL, cleared at shutdown, or its root
        forwarded ungraded for a full queue): its held tool spans go on now, unmarked, on the
        thread that gave it up (the application's, for an eviction: the calls into the
        downstream it would have made as the spans ended, without violation marks)."""
        self._flush_held(state.held, None)
        if self._worker is None and not self._shutdown:   # to look at the lists again
            try:
                self._ensure_worker()
            except RuntimeError:
                self._report("grading thread start")

    def _flush_held(self, held: list[Any], marks: dict[int, list[str]] | None) -> None:
        try:
            spans = self._buffers.take_held(held)
            self._recheck.append(held)
            if spans:
                self._forward_spans(spans, marks or {})
        except Exception:
            self._report("violation marks")

    def _flush_retired(self) -> None:
        """Forward what was appended to finished traces' held lists since they were emptied
        (a span whose end raced its trace's end), unmarked."""
        recheck = self._recheck
        for _ in range(len(recheck)):
            try:
                held = recheck.popleft()
            except IndexError:
                break
            if held:
                try:
                    self._forward_spans(self._buffers.take_held(held), {})
                except Exception:
                    self._report("violation marks")
