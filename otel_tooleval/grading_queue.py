"""The live processor's grading queue, as the grading thread takes from it: a deque that the
application thread appends ended roots to (``ToolEvalSpanProcessor._hand_over``, one C-level
append) and the grading thread polls, the plain roots kept in order with it, and, apart, the
traces whose deferred spans it settles (``_settle_soon``). Kept apart
from ``processor.py`` as a mixin of ``ToolEvalSpanProcessor``.

The grading thread polls every ``_POLL_SECONDS`` while runs keep coming, every
``_BUSY_POLL_SECONDS`` for the first ``_BUSY_SECONDS`` after an item: a run that ends while runs
keep coming is graded within milliseconds, so its spans are freed young (held for a 50 ms poll
they outlived two collections of the youngest generations, and the application thread paid for
full collections of the heap: docs/performance.md, "Grading beside the application"). Idle
for ``_SWEEP_SECONDS``, it sleeps until woken (``_sleeping``: the next root sets ``_wake``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from .assembly import SETTLE_EVERY, TraceBuffers, TraceState

__all__ = ["LIVE_SWEPT_PAST", "GradingQueue"]

_SWEEP_SECONDS = 1.0
_POLL_SECONDS = 0.05
_BUSY_SECONDS = 0.05
_BUSY_POLL_SECONDS = 0.002
#: Open plain spans (``TraceBuffers._live``) past which plain traffic starts the grading
#: thread, whose sweep forgets those that never end (``_start_sweeping``).
LIVE_SWEPT_PAST = 1024
#: The grading thread's current item while it pops the next (``_pop``).
_TAKING = object()


class GradingQueue:
    """The queue's side of ``ToolEvalSpanProcessor``, which provides this state and
    ``_wake_worker``."""

    _queue: deque[Any]
    _queue_limit: int
    _wake: threading.Event
    _sleeping: bool
    _idle_since: float
    _claim_lock: threading.Lock
    _current: Any
    _offload: Any
    _worker: threading.Thread | None
    _buffers: TraceBuffers
    _settles: deque[TraceState]

    def _wake_worker(self) -> None:   # ToolEvalSpanProcessor's
        raise NotImplementedError

    def _report(self, where: str) -> None:   # ToolEvalSpanProcessor's
        raise NotImplementedError

    def _hand_over_plain(self, root: ReadableSpan) -> bool:
        """Queue a plain trace's ended local root (no run) for the grading thread, which
        forwards it in order with the roots queued before it. False (forward it now) when the
        thread holds nothing to keep order with, without a grading thread, or with the queue
        full."""
        queue_ = self._queue
        if not queue_ and self._current is None and self._offload is None:
            if len(self._buffers._live) > LIVE_SWEPT_PAST and self._worker is None:
                self._start_sweeping()
            return False   # nothing before it to keep order with: forwarded now
        if self._worker is not None and len(queue_) < self._queue_limit:
            queue_.append(root)
            if self._sleeping:
                self._wake_worker()
            return True
        return False

    def _start_sweeping(self) -> None:
        """Plain traffic alone starts no grading thread, and only that thread sweeps: with
        more than ``LIVE_SWEPT_PAST`` open plain spans (spans the application never ends pile
        up there), it is started, to forget them at the run TTL (``TraceBuffers.sweep``)."""
        try:
            self._wake_worker()
        except RuntimeError:   # no new thread (interpreter shutdown): tried at the next root
            self._report("grading thread start")

    def _settle_soon(self, state: TraceState) -> None:
        """A trace with more than ``SETTLE_EVERY`` deferred spans: queued once for the grading
        thread to settle (``TraceBuffers.settle``), in ``_settles``, apart from the runs (it
        takes no room of ``limits.queue_size``; one entry a trace at most); settled here when
        the grading thread has not got to it by ``2 * SETTLE_EVERY`` (a slow grader ahead of
        it), so that no trace holds more."""
        if len(state.ended) > 2 * SETTLE_EVERY:
            self._buffers.settle(state)
            return
        if state.settle_queued:
            return
        state.settle_queued = True
        self._settles.append(state)
        if self._sleeping or self._worker is None:
            try:
                self._wake_worker()
            except RuntimeError:   # no new thread: it stays queued, for the next wake-up or
                self._report("grading thread start")   # shutdown (which settles every trace)

    def _next(self) -> Any:
        """The next queued item, or None after a wait with nothing queued."""
        queue_, wake = self._queue, self._wake
        if queue_:
            return self._pop()
        now = time.monotonic()
        if not self._idle_since:
            self._idle_since = now
        wake.clear()
        idle = now - self._idle_since
        long_idle = idle >= _SWEEP_SECONDS
        if long_idle:
            self._sleeping = True
        if not queue_:   # after clear(): an item appended since is seen, or sets the event
            wake.wait(_SWEEP_SECONDS if long_idle else
                      _POLL_SECONDS if idle >= _BUSY_SECONDS else _BUSY_POLL_SECONDS)
        self._sleeping = False
        return self._pop() if queue_ else None

    def _pop(self) -> Any:
        """The next queued item, made current (None: shutdown emptied the queue meanwhile).

        An item found, before or after a wait, resets the idle clock: while runs keep coming
        the thread polls and does not sleep (no wake-ups for the application to pay)."""
        with self._claim_lock:
            # Current from before the pop: an application thread that finds the queue empty
            # then finds this (``_hand_over_plain``), not a moment with neither.
            self._current = _TAKING
            try:
                item = self._queue.popleft()
            except IndexError:
                self._current = None
                return None
            self._current = item
        self._idle_since = 0.0
        return item
