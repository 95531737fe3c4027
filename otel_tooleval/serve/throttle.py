"""At most a few log lines a minute per kind of refused request or failed forward: a sender,
broken or hostile, that opens connection after connection, or a next hop that fails every
request, cannot turn serve's log into a flood.

Every refusal of a request is one WARNING line naming the sender (a token missing, a body that
does not parse, a request not received in time, bytes that are not HTTP). Those lines carry
``extra=refusal_of(KIND)``; ``RefusalThrottle``, a ``logging.Filter`` that ``otel-tooleval serve``
puts on its stderr handler, lets ``burst`` lines of each kind through per ``window`` seconds,
counts the rest, and says how many were left out in the next line of that kind it lets
through, and in a last line at shutdown (``summary``). The counters of ``/healthz`` and
``stats()`` count every refusal, logged or not. A program that runs ``ToolEvalServer`` with
logging of its own can add the same filter to its handler.

The forwarder's lines about requests the next hop did not take go the same way
(``throttled(kind, "forwarding failure")``, a kind per HTTP status, gRPC code or exception
type); ``forward_failed_spans`` counts every span of them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

#: The attribute of a log record that names its kind of refusal (or other throttled line).
KIND = "otel_tooleval_refusal"
#: The attribute that names what the throttled lines of the kind are, in the summary.
GROUP = "otel_tooleval_throttle_group"
_REFUSAL = "refusal"


def refusal_of(kind: str) -> dict[str, Any]:
    """The ``extra`` of a refusal's log line."""
    return {KIND: kind}


def throttled(kind: str, group: str) -> dict[str, Any]:
    """The ``extra`` of another line to throttle: ``kind`` as for refusals, ``group`` what
    the summary calls such lines (``"forwarding failure"``)."""
    return {KIND: kind, GROUP: group}


class RefusalThrottle(logging.Filter):
    """Lets ``burst`` refusal (or other throttled) lines of each kind through per ``window``
    seconds; other records pass untouched."""

    def __init__(self, burst: int = 10, window: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst, self.window, self._clock = burst, window, clock
        self._lock = threading.Lock()
        # kind -> [window start, lines let through in it, lines left out since the last one]
        self._kinds: dict[str, list[Any]] = {}
        self.left_out = 0
        self._left_out_by_group: dict[str, int] = {}

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
                group = getattr(record, GROUP, _REFUSAL)
                self._left_out_by_group[group] = self._left_out_by_group.get(group, 0) + 1
                return False
            state[1] += 1
            skipped, state[2] = state[2], 0
        if skipped:
            record.msg = f"{record.getMessage()} ({skipped} more like it not logged)"
            record.args = None
        return True

    def summary(self) -> str | None:
        """The line that says how many refusal lines were left out in all (and one more line
        per other group that had lines left out), or None."""
        with self._lock:
            groups = sorted(self._left_out_by_group.items(), key=lambda g: g[0] != _REFUSAL)
        if not groups:
            return None
        return "\n".join(
            f"otel-tooleval serve: {n} {group} line(s) not logged (at most {self.burst} of "
            f"each kind per {self.window:g} s; /healthz counts them all)" for group, n in groups)


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
