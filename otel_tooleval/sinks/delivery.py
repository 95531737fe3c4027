"""The delivery engine of the HTTP sinks: a bounded queue, one worker thread, batched JSON POSTs.

Both HTTP sinks (Phoenix annotations, Langfuse scores) hand their payloads to a ``Delivery``
and nothing else: ``put`` never blocks and never raises (a full queue is a counted drop); one
daemon thread takes up to ``batch_size`` payloads for one path, waits at most
``flush_interval_s`` for a batch to fill, and POSTs it with the standard library's
``urllib.request`` (no new dependency), each request bounded by ``timeout_s``. Connection
errors, timeouts, 429 and 5xx are retried with capped exponential backoff and full jitter
(``Retry-After`` honoured, within the cap) until ``max_attempts`` or ``retry_deadline_s``;
any other status is final. Whatever is not sent is counted under ``dropped.<reason>``.
``shutdown(timeout_s)`` sends what it can within its deadline and counts the rest as
``dropped.shutdown``. Request headers (the sinks' credentials) are never logged.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

__all__ = ["Delivery", "DeliverySettings"]

_log = logging.getLogger("otel_tooleval.sinks")

#: A batch's payloads for one path -> the JSON body POSTed for them.
BatchBody = Callable[[str, Sequence[Any]], Any]
#: A successful answer (status, body, payloads in the batch) -> how many of the batch the server
#: says it refused (a partial acceptance, e.g. HTTP 207), and its first reason for the log.
Refused = Callable[[int, bytes, int], tuple[int, str | None]]
#: The most of an answer's body that is read (a server's list of refusals; the rest is ignored).
MAX_ANSWER_BYTES = 1 << 20


def none_refused(status: int, body: bytes, size: int) -> tuple[int, str | None]:
    """The default: a 2xx answer accepts the whole batch."""
    return 0, None


def data_envelope(path: str, payloads: Sequence[Any]) -> Any:
    """The default body: ``{"data": [payload, ...]}`` (Phoenix's bulk endpoints)."""
    return {"data": list(payloads)}


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    """How a ``Delivery`` queues, batches, times out and retries (the sinks' config fields)."""

    max_queue: int = 10_000
    batch_size: int = 100
    flush_interval_s: float = 1.0
    timeout_s: float = 5.0
    max_attempts: int = 5
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 10.0
    retry_deadline_s: float = 60.0


class _Failure(Exception):
    """One failed POST: the drop reason it would be counted under, and whether to retry."""

    def __init__(self, reason: str, retry: bool, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry = retry
        self.retry_after = retry_after


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), else None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _is_timeout(error: BaseException | str | None) -> bool:
    return isinstance(error, TimeoutError) or "timed out" in str(error)


class Delivery:
    """A bounded, batched, retrying JSON POST queue run by one daemon thread.

    Args:
        name: the sink's name, for log lines and the thread's name.
        endpoint: the base URL; a payload's path is appended to it.
        headers: extra request headers (authorization); never logged.
        settings: queue, batch, timeout and retry settings.
        body: a batch's JSON body from its path and payloads; ``{"data": [...]}`` by default.
            A backend that takes one object per request sets ``batch_size`` to 1 and returns
            the payload itself.
        refused: how many of a batch a successful answer refused (``Refused``): those are
            counted as ``dropped.rejected``, not ``sent``, and the first reason is logged once.
    """

    def __init__(self, name: str, endpoint: str, headers: Mapping[str, str] | None = None,
                 settings: DeliverySettings | None = None, body: BatchBody = data_envelope,
                 refused: Refused = none_refused) -> None:
        self.name = name
        self.endpoint = endpoint.rstrip("/")
        self.settings = settings or DeliverySettings()
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        self._body = body
        self._refused = refused
        self._counts: dict[str, int] = {"sent": 0}
        self._logged: set[str] = set()
        self._init_state()
        ref = weakref.ref(self)

        def after_fork() -> None:          # the worker thread does not survive a fork
            engine = ref()
            if engine is not None:
                engine._init_state()
        os.register_at_fork(after_in_child=after_fork)

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: deque[tuple[str, Any]] = deque()
        self._closing = False
        self._deadline: float | None = None
        self._worker: threading.Thread | None = None
        self._stop = threading.Event()      # set at shutdown's deadline: cut backoff waits short
        self._inflight = 0                  # payloads of the batch being POSTed
        self._abandoned = False             # shutdown counted the in-flight batch already

    # -- the application side -------------------------------------------------------------

    def put(self, path: str, payload: Any) -> bool:
        """Queue one payload for ``path``; False (a counted drop) when full or shut down."""
        return self.put_many(path, (payload,)) == 1

    def put_many(self, path: str, payloads: Sequence[Any]) -> int:
        """Queue payloads for ``path``; those that do not fit are counted drops. Never raises."""
        if not payloads:
            return 0
        with self._lock:
            if self._closing:
                self._count_locked("dropped.shutdown", len(payloads))
                return 0
            room = max(0, self.settings.max_queue - len(self._queue))
            taken = payloads[:room]
            self._queue.extend((path, p) for p in taken)
            if len(taken) < len(payloads):
                self._count_locked("dropped.queue_full", len(payloads) - len(taken))
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, daemon=True,
                                                name=f"otel-tooleval-{self.name}-delivery")
                self._worker.start()
            self._wake.notify()
        if len(taken) < len(payloads):
            self._log_once("queue_full", "%s: delivery queue full (%d); payloads dropped",
                           self.name, self.settings.max_queue)
        return len(taken)

    def count(self, key: str, n: int = 1) -> None:
        """Add ``n`` to the counter ``key`` (a sink's own drops, e.g. ``dropped.build``)."""
        with self._lock:
            self._count_locked(key, n)

    def stats(self) -> dict[str, int]:
        """``sent`` and ``dropped.<reason>`` (payloads), ``retries``, ``queued`` (now)."""
        with self._lock:
            out = dict(self._counts)
            out["queued"] = len(self._queue)
        return out

    def shutdown(self, timeout_s: float) -> bool:
        """Send what is queued within ``timeout_s``, then stop; what is left (queued, or in
        a request still open at the deadline) is counted as ``dropped.shutdown``. True when
        nothing was lost to the deadline and the worker ended within it. A request open at
        the deadline was started before shutdown began (later ones are given only what is
        left of the deadline); the daemon worker ends when its ``timeout_s`` does."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._lock:
            before = self._counts.get("dropped.shutdown", 0)
            self._closing = True
            self._deadline = deadline
            worker = self._worker
            self._wake.notify_all()
        if worker is not None:
            worker.join(max(0.0, deadline - time.monotonic()))
        self._stop.set()
        with self._lock:
            left = len(self._queue) + self._inflight
            self._queue.clear()
            if self._inflight:
                self._abandoned = True
                self._inflight = 0
            if left:
                self._count_locked("dropped.shutdown", left)
            lost = self._counts.get("dropped.shutdown", 0) - before
        if left:
            self._log_once("shutdown", "%s: %d payloads not sent by shutdown's deadline",
                           self.name, left)
        return lost == 0 and (worker is None or not worker.is_alive())

    # -- the worker -----------------------------------------------------------------------

    def _count_locked(self, key: str, n: int) -> None:
        self._counts[key] = self._counts.get(key, 0) + n

    def _log_once(self, reason: str, message: str, *args: Any) -> None:
        if reason not in self._logged:
            self._logged.add(reason)
            _log.warning(message, *args)

    def _next_batch(self) -> tuple[str, list[Any]] | None:
        """Up to ``batch_size`` payloads for the oldest payload's path; None when closing and
        empty. Waits up to ``flush_interval_s`` for a batch to fill unless closing."""
        settings = self.settings
        with self._lock:
            while not self._queue:
                if self._closing:
                    return None
                self._wake.wait()
            if not self._closing and len(self._queue) < settings.batch_size:
                fill_by = time.monotonic() + settings.flush_interval_s
                while (not self._closing and len(self._queue) < settings.batch_size
                       and (left := fill_by - time.monotonic()) > 0):
                    self._wake.wait(left)
            path = self._queue[0][0]
            batch: list[Any] = []
            kept: list[tuple[str, Any]] = []
            while self._queue and len(batch) < settings.batch_size:
                item = self._queue.popleft()
                if item[0] == path:
                    batch.append(item[1])
                else:
                    kept.append(item)
            self._queue.extendleft(reversed(kept))
            return path, batch

    def _run(self) -> None:
        while True:
            try:
                batch = self._next_batch()
                if batch is None:
                    return
                self._deliver(*batch)
            except Exception:  # noqa: BLE001 -- the worker must not die: log and go on
                _log.exception("%s: delivery worker error", self.name)

    def _deliver(self, path: str, payloads: list[Any]) -> None:
        settings = self.settings
        try:
            data = json.dumps(self._body(path, payloads), separators=(",", ":"),
                              default=str).encode()
        except (TypeError, ValueError):
            self.count("dropped.encode", len(payloads))
            self._log_once("encode", "%s: a batch could not be written as JSON", self.name)
            return
        with self._lock:
            self._inflight = len(payloads)
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            timeout = settings.timeout_s
            deadline = self._deadline
            if deadline is not None:
                timeout = min(timeout, deadline - time.monotonic())
                if timeout <= 0:
                    self._settle("dropped.shutdown")
                    return
            try:
                status, answer = self._post(path, data, timeout)
            except _Failure as failure:
                wait = self._backoff(attempt, failure.retry_after)
                elapsed = time.monotonic() - started
                last = (not failure.retry or attempt >= settings.max_attempts
                        or elapsed + wait > settings.retry_deadline_s)
                if not last and self._deadline is not None \
                        and time.monotonic() + wait >= self._deadline:
                    self._settle("dropped.shutdown")
                    return
                if last:
                    self._settle(f"dropped.{failure.reason}")
                    self._log_once(failure.reason, "%s: POST %s failed (%s); dropped",
                                   self.name, path, failure.reason)
                    return
                self.count("retries")
                if self._stop.wait(wait):
                    self._settle("dropped.shutdown")
                    return
                continue
            self._accepted(path, status, answer, len(payloads))
            return

    def _accepted(self, path: str, status: int, answer: bytes, size: int) -> None:
        """A 2xx answer: the batch is sent, less what the answer says was refused."""
        try:
            refused, reason = self._refused(status, answer, size)
        except Exception:  # noqa: BLE001 -- an answer we cannot read: counted, logged once
            refused, reason = size, f"an HTTP {status} answer that could not be read"
        refused = min(max(refused, 0), size)
        if refused:
            with self._lock:
                if not self._abandoned:
                    self._count_locked("dropped.rejected", refused)
                    self._inflight -= refused
            self._log_once("rejected", "%s: POST %s: the server refused %d of %d (%s); "
                           "counted as dropped.rejected", self.name, path, refused, size,
                           reason or "no reason given")
        self._settle("sent")

    def _settle(self, key: str) -> None:
        """Count the in-flight batch under ``key``, unless shutdown counted it already."""
        with self._lock:
            if not self._abandoned:
                self._count_locked(key, self._inflight)
            self._inflight = 0

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        settings = self.settings
        if retry_after is not None:
            return min(retry_after, settings.backoff_max_s)
        cap = min(settings.backoff_max_s, settings.backoff_initial_s * 2 ** (attempt - 1))
        return random.uniform(0, cap)

    def _post(self, path: str, data: bytes, timeout: float) -> tuple[int, bytes]:
        """POST ``data``: the answer's status and (up to ``MAX_ANSWER_BYTES`` of) its body."""
        request = urllib.request.Request(self.endpoint + path, data=data, method="POST",
                                         headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return int(response.status), response.read(MAX_ANSWER_BYTES)
        except urllib.error.HTTPError as error:
            status = error.code
            retry_after = _retry_after(error.headers.get("Retry-After") if error.headers
                                       else None)
            error.close()
            raise _Failure(f"http_{status}", status == 429 or status >= 500,
                           retry_after) from None
        except urllib.error.URLError as error:
            timed_out = _is_timeout(error.reason)
            raise _Failure("timeout" if timed_out else "unreachable", True) from None
        except (TimeoutError, OSError) as error:
            raise _Failure("timeout" if _is_timeout(error) else "unreachable", True) from None
