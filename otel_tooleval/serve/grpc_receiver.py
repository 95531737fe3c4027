"""The OTLP/gRPC receiver (grpcio): ``TraceService/Export`` on a thread pool, with TLS and
bearer tokens when they are set (security.py).

No thread waits for a request's message without a deadline: grpcio's unary handlers wait for
the message on a worker thread with none on the server side (the client's deadline, if it
sets one, is all there is), so ``--workers`` senders that sent headers and nothing more held
every worker. Here ``Export`` is a stream handler that reads the one message itself, under
``--read-timeout`` kept by ``_ReceiveDeadlines``, on threads that only wait for messages
(as many as exports may be in progress); ``--workers`` of them at a time decode and ingest.
Refusals (no token, too busy) are answered from the metadata without reading the message,
on threads of their own.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import sys
import threading
import time
from concurrent import futures
from typing import Any

from .decoding import _PROTOBUF, _RETRY_AFTER_SECONDS, Refused, _one_line, _response
from .receiver_app import ReceiverApp
from .security import grpc_auth_interceptor
from .settings import ListenError, ServeOptions, _check_free
from .throttle import refusal_of

_log = logging.getLogger("otel_tooleval.serve")   # one logger for the whole service

_DEADLINE_EXCEEDED = 4   # grpc_status_code GRPC_STATUS_DEADLINE_EXCEEDED


def quiet_grpc_core(level: int) -> bool:
    """Set grpc core's own log level (``GRPC_VERBOSITY``) for a serve logging at ``level``;
    call it before grpc is first imported (grpc core reads the variable once, then). Returns
    False when it could not: grpc already imported, or the variable already set (the
    operator's choice is kept).

    grpc core writes its lines from C to file descriptor 2, past Python's logging, its level
    and its throttle; left alone it writes every line, down to INFO, among them one per failed
    TLS handshake ("Handshake failed with error SSL_ERROR_SSL"): a sender could fill the log
    at one line per connection. So below ``--log-level debug`` grpc core writes only its
    errors (ERROR, the level gRPC's documentation advises for production; no peer's failed
    handshake is one), and at debug its INFO lines too.
    """
    if "GRPC_VERBOSITY" in os.environ or "grpc" in sys.modules:
        return False
    os.environ["GRPC_VERBOSITY"] = "INFO" if level <= logging.DEBUG else "ERROR"
    return True


def start_grpc(app: ReceiverApp, host: str, port: int) -> tuple[Any, int]:
    """A started grpcio server for ``app`` on ``host:port`` and the port it bound. Stop it
    with ``stop_grpc``.

    Raises:
        ListenError: the address cannot be bound.
    """
    import grpc

    if port:
        _check_free(host, port, "--grpc")
    gate = _concurrency_gate(app)
    limit, workers = app.options.max_concurrent_rpcs, app.options.workers
    # A thread for each export in progress (the gate admits --max-concurrent-rpcs, a few more
    # may be racing it): it waits for the message, under the receive deadline, and then for
    # one of the --workers turns to decode and ingest.
    pool = futures.ThreadPoolExecutor(max_workers=limit + workers,
                                      thread_name_prefix="otel-tooleval-grpc")
    deadlines = _ReceiveDeadlines(app.options.read_timeout)
    ingest = threading.BoundedSemaphore(workers)
    # The token is checked first: a sender without one learns nothing, not even how busy
    # serve is, and its refusal waits for no message either (the gate's threads).
    interceptors = ([grpc_auth_interceptor(app.tokens, pool=gate.pool,
                                           count=lambda: app._count("refused_unauthenticated"))]
                    if app.tokens is not None else [])
    server = grpc.server(
        pool,
        # grpcio sets SO_REUSEPORT by default: a second gRPC server on the port (another
        # serve, Phoenix) would bind too and the two would share the connections.
        options=[("grpc.max_receive_message_length", app.options.max_body_bytes),
                 ("grpc.so_reuseport", 0), *_limits(app.options)],
        # grpcio's own limit, the backstop: beyond it an RPC is refused RESOURCE_EXHAUSTED
        # without RetryInfo. The gate refuses (with RetryInfo) from --max-concurrent-rpcs on,
        # and its refusals count as RPCs in progress until answered (at once: they read no
        # body and have threads of their own): the backstop leaves room for as many
        # refusals at once as exports.
        maximum_concurrent_rpcs=2 * limit + workers,
        interceptors=[*interceptors, gate],
    )
    gate.server_state = getattr(server, "_state", None)
    server.otel_tooleval_pools = (pool, gate.pool)
    server.otel_tooleval_deadlines = deadlines

    def export(requests: Any, context: Any) -> bytes:
        body = _receive(deadlines, requests, context)
        with ingest:
            return _grpc_export(app, body, context)

    handler = grpc.method_handlers_generic_handler(
        "opentelemetry.proto.collector.trace.v1.TraceService",
        {"Export": grpc.stream_unary_rpc_method_handler(export)},
    )
    server.add_generic_rpc_handlers((handler,))
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = (server.add_secure_port(where, app.certificates.grpc_credentials())
                 if app.certificates is not None else server.add_insecure_port(where))
    except RuntimeError:   # newer grpcio raises "Failed to bind", older ones return 0
        bound = 0
    if not bound:
        stop_grpc(server, None)
        raise ListenError(host, port, "--grpc", "the gRPC server could not bind it; "
                          "GRPC_VERBOSITY=debug tells why")
    server.start()
    return server, bound


def stop_grpc(server: Any, grace: float | None) -> None:
    """Stop a server of ``start_grpc``: RPCs in flight get ``grace`` seconds; then its
    worker threads are let go (grpcio does not shut its pools down)."""
    server.stop(grace).wait(None if grace is None else grace + 1)
    for pool in getattr(server, "otel_tooleval_pools", ()):
        pool.shutdown(wait=False, cancel_futures=True)
    deadlines = getattr(server, "otel_tooleval_deadlines", None)
    if deadlines is not None:
        deadlines.stop()


def _receive(deadlines: _ReceiveDeadlines, requests: Any, context: Any) -> bytes:
    """The message of an export call, received within ``--read-timeout`` of the call's start;
    a call without it in time is cancelled (DEADLINE_EXCEEDED for the sender, which retries)
    and nothing of it is kept."""
    import grpc

    watch = deadlines.watch(context)
    body: bytes | None = None
    try:
        body = next(requests, None)
    finally:
        in_time = deadlines.received(watch)
    if not in_time:   # cancelled already: the abort only ends the handler
        context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, deadlines.reason)
    if body is None:   # the sender closed its side without a message
        message = "no request message"
        _log.warning("otel-tooleval serve: gRPC request from %s refused: INVALID_ARGUMENT "
                     "%s", context.peer(), message, extra=refusal_of("grpc-invalid"))
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
    return body  # type: ignore[return-value]


class _ReceiveDeadlines:
    """The server-side receive deadline of gRPC calls: ``watch`` a call when its handler
    starts, tell ``received`` once its message is in (or not); a call still waiting
    ``seconds`` after it started is cancelled, on one thread for all calls, with one
    throttled WARNING line naming the sender.

    grpc core has no server-side deadline for a call (only the client's ``grpc-timeout``),
    and grpcio waits for a message with no timeout, so the cancel is what wakes the handler:
    ``next()`` on its request iterator then ends. Whether a call was received in time or
    cancelled is decided once, under the lock, so a message that arrives as the deadline
    passes is either kept and answered or dropped and cancelled, never kept and cancelled
    (the sender would send it again).
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.reason = f"request message not received within --read-timeout {seconds:g}s"
        self._lock = threading.Condition(threading.Lock())
        self._heap: list[list[Any]] = []   # [deadline, sequence, context or None when decided]
        self._sequence = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def watch(self, context: Any) -> list[Any]:
        entry = [time.monotonic() + self.seconds, next(self._sequence), context]
        with self._lock:
            heapq.heappush(self._heap, entry)
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="otel-tooleval-grpc-deadlines")
                self._thread.start()
        return entry

    def received(self, entry: list[Any]) -> bool:
        """True when the call was still in time (it is no longer watched); False when it
        was cancelled for its deadline."""
        with self._lock:
            in_time, entry[2] = entry[2] is not None, None
            self._forget()
        return in_time

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._lock.notify()

    def _forget(self) -> None:
        """Let the oldest calls that are decided go (with the lock held). Deadlines come in
        the order of the calls, so what is left is the calls still waiting, and those that
        came in after the oldest of them."""
        while self._heap and self._heap[0][2] is None:
            heapq.heappop(self._heap)

    def _run(self) -> None:
        # No call wakes this thread (a wake-up per call costs more than the deadline): a call
        # watched while it sleeps has its deadline ``seconds`` away at least, and it never
        # sleeps longer than that, nor past the oldest deadline.
        while True:
            with self._lock:
                context = None
                while context is None and not self._stopped:
                    self._forget()
                    wait = (self._heap[0][0] - time.monotonic() if self._heap
                            else self.seconds)
                    if wait > 0:
                        self._lock.wait(wait)
                        continue
                    entry = heapq.heappop(self._heap)
                    context, entry[2] = entry[2], None
                if self._stopped:
                    return
            try:
                self._expire(context)
            except Exception:   # noqa: BLE001 - the thread must keep the other deadlines
                _log.exception("otel-tooleval serve: a gRPC call could not be cancelled")

    def _expire(self, context: Any) -> None:
        _log.warning("otel-tooleval serve: gRPC request from %s dropped: %s; call cancelled "
                     "(DEADLINE_EXCEEDED)", context.peer(), self.reason,
                     extra=refusal_of("grpc-slow"))
        call = getattr(getattr(context, "_rpc_event", None), "call", None)
        try:
            # grpcio's call object takes a status and a reason for the sender; the context's
            # cancel() (CANCELLED, no reason) where a release lacks it.
            call.cancel(_DEADLINE_EXCEEDED, self.reason)  # type: ignore[union-attr]
        except Exception:   # noqa: BLE001 - any failure of the private path: the public one
            context.cancel()


def _concurrency_gate(app: ReceiverApp) -> Any:
    """A gRPC server interceptor that refuses an export when ``--max-concurrent-rpcs`` are
    already in progress: RESOURCE_EXHAUSTED with ``RetryInfo`` (``_retry_metadata``), which
    every OTLP exporter retries, the collector's included (its Go exporter retries
    RESOURCE_EXHAUSTED only when the status carries RetryInfo, which grpcio's own refusal
    does not). Counted as ``refused_busy``.

    The count is grpcio's: the server's ``_state.active_rpc_count`` (queued and running RPCs,
    kept by grpcio itself, and read here on its polling thread under its lock, where the
    interceptors run). A count of our own could not be kept: an RPC cancelled while queued
    never runs its handler, so a decrement in the handler would be missed. grpcio keeps that
    attribute private; where a release lacks it (``server_state`` None or without it), the
    gate lets everything through and grpcio's own limit refuses, as before.
    """
    import grpc

    limit = app.options.max_concurrent_rpcs
    pool = futures.ThreadPoolExecutor(max_workers=app.options.workers,
                                      thread_name_prefix="otel-tooleval-grpc-refuse")

    def refuse_call(requests: Any, context: Any) -> bytes:
        app._count("refused_busy")
        message = f"{limit} exports in progress (--max-concurrent-rpcs); retry later"
        context.set_trailing_metadata(_retry_metadata(message))
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, message)
        raise AssertionError("not reached: abort raises")

    # A refusal answers without waiting for the request's body (a stream handler that does
    # not read it: a unary handler runs only once the whole body is in, so a sender that
    # sends none would hold a thread), on threads of its own: grpcio runs every RPC in one
    # first-come pool, where a refusal would wait behind the exports admitted before it.
    # ``experimental_thread_pool`` is grpcio's hook for that (1.60 and later).
    refuse_call.experimental_thread_pool = pool  # type: ignore[attr-defined]
    refusal = grpc.stream_unary_rpc_method_handler(refuse_call)

    class ConcurrencyGate(grpc.ServerInterceptor):  # type: ignore[misc]
        server_state: Any = None
        pool: Any = None

        def intercept_service(self, continuation: Any, details: Any) -> Any:
            active = getattr(self.server_state, "active_rpc_count", None)
            if active is not None and active >= limit:
                return refusal
            return continuation(details)

    gate = ConcurrencyGate()
    gate.pool = pool
    return gate


def _limits(options: ServeOptions) -> list[tuple[str, int]]:
    """grpcio channel arguments for the connection limits (docs/serve.md, "Limits")."""
    limits = [
        ("grpc.max_connection_idle_ms", int(options.idle_timeout * 1000)),
        # A connection must finish its handshake (TLS, and the HTTP/2 preface) within
        # --read-timeout, as an HTTP request must arrive (grpc core's default: 120 s).
        ("grpc.server_handshake_timeout_ms", int(options.read_timeout * 1000)),
        # Keepalive enforcement: a client may ping an idle connection every 10 s at most
        # (more often: GOAWAY after 2 strikes); serve pings idle clients every 60 s and drops
        # those that do not answer within 20 s.
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
        ("grpc.http2.max_ping_strikes", 2),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.keepalive_time_ms", 60_000),
        ("grpc.keepalive_timeout_ms", 20_000),
    ]
    if options.max_connection_age:
        limits += [("grpc.max_connection_age_ms", int(options.max_connection_age * 1000)),
                   ("grpc.max_connection_age_grace_ms", int(options.read_timeout * 1000))]
    return limits


def _grpc_export(app: ReceiverApp, body: bytes, context: Any) -> bytes:
    import grpc

    try:
        rejected, message = app.export(body, _PROTOBUF)
    except Refused as refused:
        if refused.retry:
            context.set_trailing_metadata(_retry_metadata(str(refused)))
            code = (grpc.StatusCode.RESOURCE_EXHAUSTED if refused.status == 429
                    else grpc.StatusCode.UNAVAILABLE)
            context.abort(code, str(refused))
        message = _one_line(str(refused))
        _log.warning("otel-tooleval serve: gRPC request from %s refused: INVALID_ARGUMENT "
                     "%s", context.peer(), message, extra=refusal_of("grpc-invalid"))
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
        raise   # not reached: abort raises
    except Exception as exc:
        _log.exception("otel-tooleval serve: export failed")
        context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
        raise
    return _response(rejected, message).SerializeToString()  # type: ignore[no-any-return]


def _retry_metadata(message: str) -> tuple[tuple[str, bytes], ...]:
    """gRPC trailers that say when to retry: the standard ``grpc-status-details-bin``
    (google.rpc.Status with RetryInfo) and the key the Python OTLP exporter reads."""
    from google.protobuf.any_pb2 import Any as AnyMessage
    from google.rpc import code_pb2, error_details_pb2, status_pb2

    info = error_details_pb2.RetryInfo()
    info.retry_delay.seconds = _RETRY_AFTER_SECONDS
    detail = AnyMessage()
    detail.Pack(info)
    status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message=message,
                               details=[detail])
    return (("grpc-status-details-bin", status.SerializeToString()),
            ("google.rpc.retryinfo-bin", info.SerializeToString()))
