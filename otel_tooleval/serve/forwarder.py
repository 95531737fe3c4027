"""The forwarder: serialized OTLP requests to the next hop, in order, with retries."""

from __future__ import annotations

import http.client
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from urllib.parse import urlsplit

from .decoding import _PROTOBUF
from .options import ServeOptions

_log = logging.getLogger("otel_tooleval.serve")   # one logger for the whole service

_EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_FORWARD_BACKOFF_MAX = 5.0


class _Forwarder:
    """Sends serialized ExportTraceServiceRequests to the next hop, in order, with retries.

    ``put`` never blocks; the queue's bytes count towards the server's backpressure bound.
    Retryable failures (connection errors, HTTP 429/502/503/504, gRPC UNAVAILABLE and the
    like) are retried with backoff for as long as the server runs; others are logged and the
    request counted in ``stats["forward_failed_spans"]``.
    """

    def __init__(self, options: ServeOptions) -> None:
        self.target = options.forward
        self.protocol = options.forward_protocol
        self.headers = dict(options.forward_headers)
        self.timeout = options.forward_timeout
        self.max_bytes = options.max_queued_bytes
        self._queue: deque[tuple[bytes, int]] = deque()
        self._cond = threading.Condition()
        self.queued_bytes = 0
        self._busy = False
        self._stop = False
        self.counts: Counter[str] = Counter()
        self._send = self._sender()
        self._thread = threading.Thread(target=self._run, name="otel-tooleval-forward",
                                        daemon=True)
        self._thread.start()

    def _sender(self) -> Callable[[bytes], tuple[bool, bool, str]]:
        """A function that sends one body: (ok, retryable, reason)."""
        if self.target == "none":
            return lambda body: (True, False, "")
        if self.protocol == "grpc":
            return self._grpc_sender()
        return self._http_sender()

    def _http_sender(self) -> Callable[[bytes], tuple[bool, bool, str]]:
        url = urlsplit(self.target if "://" in self.target else f"http://{self.target}")
        path = url.path if url.path not in ("", "/") else "/v1/traces"
        host = url.hostname or "127.0.0.1"
        port = url.port or (443 if url.scheme == "https" else 80)
        conn_class = (http.client.HTTPSConnection if url.scheme == "https"
                      else http.client.HTTPConnection)
        headers = {"Content-Type": _PROTOBUF, **self.headers}
        local = threading.local()

        def send(body: bytes) -> tuple[bool, bool, str]:
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = conn_class(host, port, timeout=self.timeout)
            try:
                conn.request("POST", path, body=body, headers=headers)
                response = conn.getresponse()
                response.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                local.conn = None
                return False, True, f"{type(exc).__name__}: {exc}"
            if 200 <= response.status < 300:
                return True, False, ""
            retry = response.status in (429, 502, 503, 504)
            return False, retry, f"HTTP {response.status} {response.reason}"

        return send

    def _grpc_sender(self) -> Callable[[bytes], tuple[bool, bool, str]]:
        import grpc

        url = urlsplit(self.target if "://" in self.target else f"http://{self.target}")
        address = f"{url.hostname or '127.0.0.1'}:{url.port or 4317}"
        channel = (grpc.secure_channel(address, grpc.ssl_channel_credentials())
                   if url.scheme == "https" else grpc.insecure_channel(address))
        call = channel.unary_unary(_EXPORT_METHOD)   # bytes in, bytes out
        metadata = tuple((k.lower(), v) for k, v in self.headers.items())
        retryable = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
                     grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED,
                     grpc.StatusCode.CANCELLED, grpc.StatusCode.OUT_OF_RANGE,
                     grpc.StatusCode.DATA_LOSS}

        def send(body: bytes) -> tuple[bool, bool, str]:
            try:
                call(body, timeout=self.timeout, metadata=metadata)
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                return False, code in retryable, f"gRPC {code}"
            return True, False, ""

        return send

    def put(self, body: bytes, spans: int) -> None:
        if not spans:
            return
        with self._cond:
            self._queue.append((body, spans))
            self.queued_bytes += len(body)
            self._cond.notify()

    def full(self) -> bool:
        return self.queued_bytes >= self.max_bytes

    def _run(self) -> None:
        backoff = 0.1
        while True:
            with self._cond:
                while not self._queue and not self._stop:
                    self._cond.wait()
                if not self._queue:
                    return
                body, spans = self._queue[0]
                self._busy = True
            ok, retry, reason = self._attempt(body)
            with self._cond:
                self._busy = False
                if ok or not retry or self._stop:
                    self._queue.popleft()
                    self.queued_bytes -= len(body)
                    if ok:
                        self.counts["forwarded_spans"] += spans
                        self.counts["forwarded_requests"] += 1
                    else:
                        self.counts["forward_failed_spans"] += spans
                        _log.error("otel-tooleval serve: forwarding %d spans to %s failed: %s",
                                   spans, self.target, reason)
                    self._cond.notify_all()
                    backoff = 0.1
                    continue
                self.counts["forward_retries"] += 1
                self._cond.wait(backoff)
                backoff = min(backoff * 2, _FORWARD_BACKOFF_MAX)

    def _attempt(self, body: bytes) -> tuple[bool, bool, str]:
        try:
            return self._send(body)
        except Exception as exc:  # noqa: BLE001 - a sender bug must not stop forwarding
            return False, True, f"{type(exc).__name__}: {exc}"

    def drain(self, deadline: float) -> bool:
        """Wait until the queue is empty or the deadline; then stop the thread."""
        with self._cond:
            while (self._queue or self._busy) and time.monotonic() < deadline:
                self._cond.wait(min(0.05, max(deadline - time.monotonic(), 0.0)))
            drained = not self._queue
            if not drained:
                self.counts["forward_failed_spans"] += sum(n for _, n in self._queue)
            self._stop = True
            self._cond.notify_all()
        self._thread.join(max(deadline - time.monotonic(), 0.0) + 1.0)
        return drained


