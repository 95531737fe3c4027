"""At most a few log lines a minute per kind of refused request: a sender, broken or hostile,
that opens connection after connection cannot turn serve's log into a flood.

Every refusal of a request is one WARNING line naming the sender (a token missing, a body that
does not parse, a request not received in time, bytes that are not HTTP). Those lines carry
``extra=refusal_of(KIND)``; ``RefusalThrottle``, a ``logging.Filter`` that ``otel-tooleval serve``
puts on its stderr handler, lets ``burst`` lines of each kind through per ``window`` seconds,
counts the rest, and says how many were left out in the next line of that kind it lets
through, and in a last line at shutdown (``summary``). The counters of ``/healthz`` and
``stats()`` count every refusal, logged or not. A program that runs ``ToolEvalServer`` with
logging of its own can add the same filter to its handler.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

#: The attribute of a log record that names its kind of refusal.
KIND = "otel_tooleval_refusal"


def refusal_of(kind: str) -> dict[str, Any]:
    """The ``extra`` of a refusal's log line."""
    return {KIND: kind}


class RefusalThrottle(logging.Filter):
    """Lets ``burst`` refusal lines of each kind through per ``window`` seconds; other records
    pass untouched."""

    def __init__(self, burst: int = 10, window: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst, self.window, self._clock = burst, window, clock
        self._lock = threading.Lock()
        # kind -> [window start, lines let through in it, lines left out since the last one]
        self._kinds: dict[str, list[Any]] = {}
        self.left_out = 0

    def filter(self, record: logging.LogRecord) -> bool:
        kind = getattr(record, KIND, None)
        if kind is None:
            return True
        with self._lock:
            now = self._clock()
            state = self._kinds.setdefault(kind, [now, 0, 0])
            if now - state[0] >= self.window:
                state[0], state[1] = now, 0
            if state[1] >= self.burst:
                state[2] += 1
                self.left_out += 1
                return False
            state[1] += 1
            skipped, state[2] = state[2], 0
        if skipped:
            record.msg = f"{record.getMessage()} ({skipped} more like it not logged)"
            record.args = None
        return True

    def summary(self) -> str | None:
        """The line that says how many refusal lines were left out in all, or None."""
        if not self.left_out:
            return None
        return (f"otel-tooleval serve: {self.left_out} refusal line(s) not logged (at most "
                f"{self.burst} of each kind per {self.window:g} s; /healthz counts them all)")


class PeerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """uvicorn's per-connection logger (``uvicorn.error``) for one connection: its lines name
    the sender, as serve's own refusal lines do. Its warnings (bytes that are not an HTTP
    request, an upgrade serve does not do) are throttled with the refusals (kind
    ``http-protocol``); its errors (an exception in the receiver) are not refusals, and pass
    whole."""

    def __init__(self, logger: logging.Logger, client: Any) -> None:
        super().__init__(logger, {})
        self.client = client[0] if client else "?"

    @property
    def level(self) -> int:   # uvicorn reads logger.level for its TRACE checks
        return int(self.logger.level)

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        if logging.WARNING <= level < logging.ERROR:   # not uvicorn's TRACE or DEBUG lines
            kwargs["extra"] = {**(kwargs.get("extra") or {}), **refusal_of("http-protocol")}
        # The record names uvicorn's line that logged, not this frame.
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
        self.logger.log(level, f"otel-tooleval serve: request from {self.client}: {msg}",
                        *args, **kwargs)
