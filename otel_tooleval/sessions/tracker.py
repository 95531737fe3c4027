"""Open sessions, bounded: the runs of each one, kept compact, until the session ends.

A session ends when it has been idle for ``idle_seconds`` (:meth:`OpenSessions.idle`), when
it is ended by its key (:meth:`OpenSessions.end`), when everything is taken
(:meth:`OpenSessions.take_all`: flush, shutdown, the end of ``grade``'s input), or when
``max_open_sessions`` are open and a new one starts: then the least recently active one ends
early (``ended = "evicted"``). A session keeps at most ``max_session_calls`` calls; a run's
calls past that are dropped and counted in its ``dropped_calls``, and at most
``max_session_runs`` runs: a later run of the session is not kept (counted in its
``dropped_runs``; it still counts as activity for the idle end).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from ..model import AgentRun
from .model import Session, SessionKey, compact_run
from .settings import SessionsConfig

__all__ = ["OpenSessions"]


class OpenSessions:
    """Sessions still open, least recently active first. Thread-safe (one lock, no calls out).

    Args:
        settings: the ``sessions:`` section.
        outputs: keep each run's final output, assistant texts and root attributes (a session
            grader reads them).
        clock: seconds, for idle ends (monotonic).
    """

    def __init__(self, settings: SessionsConfig, *, outputs: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.outputs = outputs
        self._clock = clock
        self._lock = threading.Lock()
        self._open: dict[str, Session] = {}
        self.counts: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._open)

    def add(self, key: SessionKey, run: AgentRun, resource: Any = None) -> list[Session]:
        """File ``run`` under its session; returns the sessions this ended early (evicted)."""
        evicted: list[Session] = []
        over = 0
        with self._lock:
            session = self._open.pop(key.value, None)   # re-inserted last: most recent
            if session is None:
                while len(self._open) >= self.settings.max_open_sessions:
                    old = self._open.pop(next(iter(self._open)))
                    old.ended = "evicted"
                    evicted.append(old)
                session = Session(key)
            self._open[key.value] = session
            session.last_seen = self._clock()
            if resource is not None:
                session.resource = resource
            full = len(session.runs) >= self.settings.max_session_runs
            if full:
                session.dropped_runs += 1
            else:
                kept = compact_run(run, outputs=self.outputs,
                                   max_calls=self.settings.max_session_calls - session.calls)
                session.runs.append(kept)
                session.calls += len(kept.calls)
                over = len(run.calls) - len(kept.calls)
        if full:
            self.counts["dropped.max_session_runs"] += 1
        if over:
            self.counts["dropped.max_session_calls"] += over
        if evicted:
            self.counts["dropped.max_open_sessions"] += len(evicted)
        return evicted

    def end(self, value: str, reason: str = "end_session") -> Session | None:
        """End the session whose key is ``value`` (None: no such session is open)."""
        with self._lock:
            session = self._open.pop(value, None)
        if session is not None:
            session.ended = reason
        return session

    def idle(self) -> list[Session]:
        """End and return the sessions idle for ``idle_seconds`` or more."""
        cutoff = self._clock() - self.settings.idle_seconds
        out: list[Session] = []
        with self._lock:
            for value, session in list(self._open.items()):
                if session.last_seen > cutoff:
                    break     # least recently active first: the rest are newer
                del self._open[value]
                session.ended = "idle"
                out.append(session)
        return out

    def take_all(self, reason: str) -> list[Session]:
        """End and return every open session."""
        with self._lock:
            out = list(self._open.values())
            self._open.clear()
        for session in out:
            session.ended = reason
        return out

    def reset(self) -> None:
        """Forget everything (the child after a fork starts clean)."""
        self._lock = threading.Lock()
        self._open = {}
