"""The forwarder: serialized OTLP requests to the next hop, on worker threads, with retries."""

from __future__ import annotations

import gzip
import http.client
import logging
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from .decoding import _PROTOBUF
from .next_hop import NextHop, next_hop, split_target
from .settings import ServeOptions
from .throttle import throttled

_log = logging.getLogger("otel_tooleval.serve")   # one logger for the whole service

_EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_FORWARD_BACKOFF_MAX = 5.0
#: The kind of a failure, for the log throttle: the status, not the next hop's own words.
_KIND = re.compile(r"HTTP \d+|gRPC \S+|\w+")


class _Forwarder:
    """Sends serialized ExportTraceServiceRequests to the next hop, with retries, on
    ``options.forward_workers`` threads, each with its own connection (HTTP) or channel (gRPC).

    ``put`` never blocks; the bytes queued and in flight count towards the server's
    backpressure bound. A worker takes the oldest request and keeps it until it is sent:
    retryable failures (connection errors, HTTP 429/502/503/504, gRPC UNAVAILABLE and the
    like) are retried by that worker with backoff for as long as the server runs, while the
    others go on; other failures are logged and the request's spans counted in
    ``counts["forward_failed_spans"]``. With one worker requests leave in arrival order; with
    several, in the order they are taken. Connection settings (headers, TLS, compression,
    timeout) come from ``next_hop`` (the ``OTEL_EXPORTER_OTLP_*`` variables).
    """

    def __init__(self, options: ServeOptions, hop: NextHop | None = None) -> None:
        self.target = options.forward
        self.protocol = options.forward_protocol
        self.hop = hop if hop is not None else next_hop(options)
        self.headers = dict(self.hop.headers)
        self.timeout = self.hop.timeout
        self.max_bytes = options.max_queued_bytes
        self._queue: deque[tuple[bytes, int]] = deque()
        self._cond = threading.Condition()
        self.queued_bytes = 0   # queued and in flight
        self._in_flight = 0
        self._in_flight_spans = 0
        self._stop = False
        self._given_up = False   # drain() reached its deadline: it counted what is left
        #: Spans not delivered when ``drain`` gave up: queued, or sent and not answered.
        self.undelivered = {"queued": 0, "in_flight": 0}
        self.counts: Counter[str] = Counter()
        self._send = self._sender()
        self._threads = [threading.Thread(target=self._run, name=f"otel-tooleval-forward-{i}",
                                          daemon=True)
                         for i in range(max(1, options.forward_workers))]
        for thread in self._threads:
            thread.start()

    def _sender(self) -> Callable[[bytes], tuple[bool, bool, str]]:
        """A function that sends one body: (ok, retryable, reason); each calling thread gets
        its own connection or channel."""
        if self.target == "none":
            return lambda body: (True, False, "")
        if self.protocol == "grpc":
            return self._grpc_sender()
        return self._http_sender()

    def _http_sender(self) -> Callable[[bytes], tuple[bool, bool, str]]:
        url = split_target(self.target)
        path = url.path if url.path not in ("", "/") else "/v1/traces"
        host = url.hostname or "127.0.0.1"
        port = url.port or (443 if url.scheme == "https" else 80)
        context = self.hop.ssl_context() if url.scheme == "https" else None
        headers = {"Content-Type": _PROTOBUF, **self.headers}
        if self.hop.gzip:
            headers["Content-Encoding"] = "gzip"
        local = threading.local()

        def connect() -> http.client.HTTPConnection:
            if context is not None:
                return http.client.HTTPSConnection(host, port, timeout=self.timeout,
                                                   context=context)
            return http.client.HTTPConnection(host, port, timeout=self.timeout)

        def send(body: bytes) -> tuple[bool, bool, str]:
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = connect()
            if self.hop.gzip:
                body = gzip.compress(body, compresslevel=6)
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

        url = split_target(self.target)
        address = f"{url.hostname or '127.0.0.1'}:{url.port or 4317}"
        credentials = self.hop.grpc_credentials() if self.hop.grpc_tls(self.target) else None
        compression = grpc.Compression.Gzip if self.hop.gzip else None
        metadata = tuple((k.lower(), v) for k, v in self.headers.items())
        retryable = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
                     grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED,
                     grpc.StatusCode.CANCELLED, grpc.StatusCode.OUT_OF_RANGE,
                     grpc.StatusCode.DATA_LOSS}
        local = threading.local()

        def call() -> Any:
            method = getattr(local, "call", None)
            if method is None:
                # A channel of its own per worker: grpcio shares a subchannel between channels
                # of the same target and arguments unless told not to.
                options = [("grpc.use_local_subchannel_pool", 1)]
                channel = (grpc.secure_channel(address, credentials, options=options,
                                               compression=compression)
                           if credentials is not None else
                           grpc.insecure_channel(address, options=options,
                                                 compression=compression))
                method = local.call = channel.unary_unary(_EXPORT_METHOD)   # bytes in and out
            return method

        def send(body: bytes) -> tuple[bool, bool, str]:
            try:
                call()(body, timeout=self.timeout, metadata=metadata)
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
        while True:
            with self._cond:
                while not self._queue and not self._stop:
                    self._cond.wait()
                if not self._queue:
                    return
                body, spans = self._queue.popleft()
                self._in_flight += 1
                self._in_flight_spans += spans
            self._deliver(body, spans)

    def _deliver(self, body: bytes, spans: int) -> None:
        """Send one request until it is sent, refused for good, or the server stops (after
        one more try, unless ``drain`` gave up on it first)."""
        backoff = 0.1
        while True:
            ok, retry, reason = self._attempt(body)
            with self._cond:
                if self._given_up:   # drain() counted this request as not delivered
                    return
                if retry and not ok and not self._stop:
                    self.counts["forward_retries"] += 1
                    self._cond.wait(backoff)
                    backoff = min(backoff * 2, _FORWARD_BACKOFF_MAX)
                    continue
                self._in_flight -= 1
                self._in_flight_spans -= spans
                self.queued_bytes -= len(body)
                if ok:
                    self.counts["forwarded_spans"] += spans
                    self.counts["forwarded_requests"] += 1
                else:
                    self.counts["forward_failed_spans"] += spans
                self._cond.notify_all()
            if not ok:   # outside the lock: a slow stderr must not hold up the other workers
                kind = _KIND.match(reason)
                _log.error("otel-tooleval serve: forwarding %d spans to %s failed: %s",
                           spans, self.target, reason,
                           extra=throttled(f"forward {kind.group() if kind else '?'}",
                                           "forwarding failure"))
            return

    def _attempt(self, body: bytes) -> tuple[bool, bool, str]:
        try:
            return self._send(body)
        except Exception as exc:  # noqa: BLE001 - a sender bug must not stop forwarding
            return False, True, f"{type(exc).__name__}: {exc}"

    def drain(self, deadline: float) -> bool:
        """Wait until nothing is queued or in flight, or the deadline; then stop the workers.

        Returns by the deadline. What is still queued then, and what is in flight (sent, not
        answered: a next hop that never answers holds a worker for the forward timeout), is
        counted in ``forward_failed_spans`` and in ``undelivered``; the workers, daemon
        threads, are not waited for (a late answer is not counted again).
        """
        with self._cond:
            while (self._queue or self._in_flight) and time.monotonic() < deadline:
                self._cond.wait(min(0.05, max(deadline - time.monotonic(), 0.0)))
            drained = not self._queue and not self._in_flight
            if not drained:
                queued = sum(n for _, n in self._queue)
                self.undelivered = {"queued": queued, "in_flight": self._in_flight_spans}
                self.counts["forward_failed_spans"] += queued + self._in_flight_spans
                self._queue.clear()
                self._in_flight = self._in_flight_spans = 0
                self.queued_bytes = 0
                self._given_up = True
            self._stop = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0.0))
        return drained
