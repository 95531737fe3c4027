"""``otel-tooleval serve``: an OTLP trace receiver that grades agent runs and forwards the traces.

It listens for OTLP/gRPC and OTLP/HTTP (protobuf and JSON) trace exports, rebuilds agent runs
from the spans as they arrive (``tail.TailGrader``: a trace is decided ``decision_wait``
seconds after its local root arrives, as the collector's tail-sampling processor waits), grades
them, and forwards every span to the next OTLP endpoint: spans that cannot be a run root at
once, roots after the decision, with their verdicts. Its own log events and metrics go to the
same endpoint.

Contract with the senders (the OTLP exporters, a collector's ``otlp`` or ``loadbalancing``
exporter):

- a request is answered only after its spans are buffered or queued for forwarding, and what
  is accepted is not lost: SIGTERM (``ToolEvalServer.stop``) decides every open trace, grades
  it, and drains the forwarding queue before the process ends;
- memory is bounded (spans buffered, bytes buffered, bytes queued for forwarding); when a
  bound is reached a request is refused with the OTLP "retry later" answer (gRPC
  ``RESOURCE_EXHAUSTED`` with ``RetryInfo``, HTTP 429 with ``Retry-After``), never dropped;
- a payload that does not parse is refused with gRPC ``INVALID_ARGUMENT`` / HTTP 400 and a
  reason; a body over ``max_body_bytes`` (after decompression too) with HTTP 413 (gRPC:
  ``RESOURCE_EXHAUSTED`` from the message size limit);
- spans with invalid ids are rejected one by one (``partial_success``), the rest accepted;
- ``GET /healthz`` on the HTTP port: 200 while accepting, 503 while starting or draining;
  the body counts runs graded, passed and failed, and drops by reason.

Each graded run is logged once at INFO on the ``otel_tooleval.serve`` logger (agent, trace id,
root span id, PASS/FAIL and the failed graders). An address that cannot be bound raises
``ListenError`` naming it (docs/serve.md).
"""

from __future__ import annotations

import base64
import errno
import http.client
import json
import logging
import math
import os
import socket
import sys
import threading
import time
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from .config import ToolEvalConfig, load_config
from .emit import root_attributes, span_events
from .model import RunReport, SpanRecord
from .otlp_protocol import otlp_traces_protocol
from .readers.otlp_proto import record_from_proto
from .tail import TailGrader

__all__ = ["ListenError", "ServeOptions", "ToolEvalServer", "parse_address"]

_log = logging.getLogger(__name__)

_EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"
_RETRY_AFTER_SECONDS = 1
_FORWARD_BACKOFF_MAX = 5.0
_INFLATE_CHUNK = 64 * 1024
_DROP_REASONS = ("late_span", "max_spans_per_trace", "max_open_runs", "shutdown")   # tail's


def parse_address(text: str, default_port: int) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``HOST`` → (host, port); IPv6 hosts in brackets.

    Raises:
        ValueError: the port is not a number in 0..65535.
    """
    host, sep, port = text.rpartition(":") if not text.endswith("]") else (text, "", "")
    if not sep:
        host, port = text, str(default_port)
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"invalid address {text!r}: the port must be a number from 0 to 65535")
    return host, int(port)


@dataclass
class ServeOptions:
    """Settings of one ``serve`` instance (the CLI flags of ``otel-tooleval serve``).

    ``forward`` is the next OTLP endpoint (``http://host:4318`` for ``http/protobuf``, the
    signal path ``/v1/traces`` is appended unless the URL has a path; ``host:4317`` or
    ``http://host:4317`` for ``grpc``); ``"none"`` discards what would be forwarded (grading
    only, for tests and dry runs).
    """

    config: ToolEvalConfig
    grpc: str | None = "127.0.0.1:4317"
    http: str | None = "127.0.0.1:4318"
    forward: str = "none"
    forward_protocol: str = "http/protobuf"
    forward_headers: Mapping[str, str] = field(default_factory=dict)
    decision_wait: float = 5.0
    max_buffered_spans: int = 500_000
    max_buffered_bytes: int = 512 * 1024 * 1024
    max_queued_bytes: int = 256 * 1024 * 1024
    max_body_bytes: int = 20 * 1024 * 1024
    forward_timeout: float = 10.0
    shutdown_timeout: float = 30.0
    read_timeout: float = 30.0   # HTTP: a request's headers and body, idle keep-alive included
    workers: int = 8
    emit_telemetry: bool = True   # log events and metrics to the forward endpoint


# -- protobuf helpers --------------------------------------------------------------------------

def _pb() -> Any:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    return trace_service_pb2


def _set_any(target: Any, value: Any) -> None:
    if isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        target.int_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, (list, tuple)):
        array = target.array_value
        array.SetInParent()
        for item in value:
            _set_any(array.values.add(), item)
    else:
        target.string_value = str(value)


def _put_attributes(repeated: Any, values: Mapping[str, Any]) -> None:
    """Set attributes on a repeated KeyValue field, replacing keys that are already there."""
    index = {kv.key: kv for kv in repeated}
    for key, value in values.items():
        kv = index.get(key)
        if kv is None:
            kv = repeated.add()
            kv.key = key
        else:
            kv.value.Clear()
        _set_any(kv.value, value)


class _Held:
    """A span held until its trace is decided, with what is needed to forward it alone."""

    __slots__ = ("resource", "scope", "span")

    def __init__(self, resource: Any, scope: Any, span: Any) -> None:
        self.resource = resource   # ResourceSpans without scope_spans (resource + schema_url)
        self.scope = scope         # ScopeSpans without spans (scope + schema_url)
        self.span = span           # a standalone copy


def _encode_held(items: Iterable[_Held]) -> tuple[bytes, int]:
    """One ExportTraceServiceRequest of held spans, grouped by resource and scope."""
    request = _pb().ExportTraceServiceRequest()
    by_resource: dict[int, tuple[Any, dict[int, Any]]] = {}
    count = 0
    for item in items:
        entry = by_resource.get(id(item.resource))
        if entry is None:
            rs = request.resource_spans.add()
            rs.CopyFrom(item.resource)
            entry = by_resource[id(item.resource)] = (rs, {})
        rs, scopes = entry
        ss = scopes.get(id(item.scope))
        if ss is None:
            ss = scopes[id(item.scope)] = rs.scope_spans.add()
            ss.CopyFrom(item.scope)
        ss.spans.append(item.span)
        count += 1
    return request.SerializeToString(), count


def _annotate(item: _Held, record: SpanRecord, report: RunReport, config: ToolEvalConfig) -> _Held:
    emit = config.emit
    span = item.span
    if emit.root_attributes:
        _put_attributes(span.attributes, root_attributes(report))
    if emit.span_events:
        end = record.end_ns or time.time_ns()
        for name, attrs, ts in span_events(report, end):
            event = span.events.add()
            event.name = name
            event.time_unix_nano = ts
            _put_attributes(event.attributes, attrs)
    return item


_ID_FIELDS = {"traceId": 16, "spanId": 8, "parentSpanId": 8}


def _json_ids(node: Any, path: str) -> None:
    """OTLP/JSON carries ids as hex; protobuf's JSON mapping wants base64. Converted in place."""
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}" if path else key
            size = _ID_FIELDS.get(key)
            if size is not None and isinstance(value, str):
                if value == "":
                    continue
                try:
                    raw = bytes.fromhex(value)
                except ValueError:
                    raise ValueError(f"{where}: {value!r} is not hex") from None
                node[key] = base64.b64encode(raw).decode()
            elif isinstance(value, (dict, list)):
                _json_ids(value, where)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _json_ids(value, f"{path}[{i}]")


def parse_request(body: bytes, content_type: str) -> Any:
    """An ExportTraceServiceRequest from an OTLP/HTTP body.

    Raises:
        ValueError: the body does not parse; the message names the field or position.
    """
    request = _pb().ExportTraceServiceRequest()
    if content_type == _JSON:
        from google.protobuf import json_format

        try:
            doc = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not JSON: {exc}") from None
        except RecursionError:   # the parser recurses per level: [[[[… 100k deep
            raise ValueError("JSON nested too deeply") from None
        if not isinstance(doc, dict):
            raise ValueError("the JSON body must be an object with resourceSpans")
        try:
            _json_ids(doc, "")
            json_format.ParseDict(doc, request, ignore_unknown_fields=True)
        except RecursionError:
            raise ValueError("JSON nested too deeply for an ExportTraceServiceRequest") from None
        except (json_format.ParseError, TypeError, AttributeError) as exc:
            raise ValueError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                             ) from None
        return request
    from google.protobuf.message import DecodeError

    try:
        request.ParseFromString(body)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise ValueError(f"not an ExportTraceServiceRequest: {exc}") from None
    return request


# -- forwarding ----------------------------------------------------------------------------------

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


# -- the server ---------------------------------------------------------------------------------

class Refused(Exception):
    """A request is not accepted: ``retry`` tells "try again later" from "bad request"."""

    def __init__(self, message: str, *, retry: bool = False, status: int = 400) -> None:
        super().__init__(message)
        self.retry = retry
        self.status = status


class ListenError(OSError):
    """An OTLP listen address cannot be bound; the message names it and the flag to change."""

    def __init__(self, host: str, port: int, flag: str, reason: str | OSError) -> None:
        if isinstance(reason, OSError):
            reason = ("address already in use; is another collector or Phoenix running?"
                      if reason.errno == errno.EADDRINUSE
                      else (reason.strerror or str(reason)).lower())
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        sep = "" if reason.endswith("?") else ";"
        super().__init__(f"cannot listen on {where} ({reason}{sep} use {flag} HOST:PORT)")
        self.address = where


def _check_free(host: str, port: int, flag: str) -> None:
    """Bind ``host:port`` as a listener would and let go, so a busy port is named before
    grpcio tries (it only says "Failed to bind", and logs its own line on stderr).

    Every address the host resolves to must be free: gRPC binds what it can, so a port taken
    on one of them would otherwise be shared silently.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ListenError(host, port, flag, exc) from None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as servers do
            try:
                probe.bind(address)
            except OSError as exc:
                raise ListenError(host, port, flag, exc) from None


class ToolEvalServer:
    """The ``serve`` service: receivers, grading and forwarding, in this process.

    ``start()`` binds the ports (``grpc_port``/``http_port`` tell which, for port 0), or
    raises ``ListenError`` after stopping what it had started; ``stop()`` drains as SIGTERM
    does. Usable as a context manager. ``on_report`` is called with every graded run, on the
    grading thread, after the run's log line.
    """

    def __init__(self, options: ServeOptions, *, meter_provider: Any = None,
                 logger_provider: Any = None,
                 on_report: Callable[[RunReport], None] | None = None) -> None:
        self.options = options
        self.config = options.config
        self._providers: list[Any] = []
        if options.emit_telemetry and options.forward != "none" and (
                meter_provider is None or logger_provider is None):
            meter_provider, logger_provider = self._telemetry(meter_provider, logger_provider)
        self.counts: Counter[str] = Counter()
        self._count_lock = threading.Lock()
        self._on_report_callback = on_report
        self.forwarder = _Forwarder(options)
        self.tail: TailGrader[Any] = TailGrader(   # items: (rs, ss, i, span), held: _Held
            self.config,
            forward=self._forward_held,
            annotate=self._annotate,
            decision_wait=options.decision_wait,
            max_spans=options.max_buffered_spans,
            max_bytes=options.max_buffered_bytes,
            meter_provider=meter_provider,
            logger_provider=logger_provider,
            on_report=self._on_report,
            name="otel-tooleval-serve-grader",
        )
        self.ready = False
        self.draining = False
        self._grpc_server: Any = None
        self._http_server: _HttpServer | None = None
        self._http_thread: threading.Thread | None = None
        self.grpc_port: int | None = None
        self.http_port: int | None = None
        self._stopped = threading.Event()

    def _telemetry(self, meter_provider: Any, logger_provider: Any) -> tuple[Any, Any]:
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource

        from .providers import otlp_exporters

        target = self.options.forward
        endpoint = target if "://" in target else f"http://{target}"
        _, metric_exporter, log_exporter = otlp_exporters(self.options.forward_protocol,
                                                          endpoint)
        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME")
                                    or "otel-tooleval-serve"})
        if meter_provider is None:
            meter_provider = MeterProvider(
                resource=resource, metric_readers=[PeriodicExportingMetricReader(
                    metric_exporter, export_interval_millis=10_000)])
            self._providers.append(meter_provider)
        if logger_provider is None:
            logger_provider = LoggerProvider(resource=resource)
            logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter))
            self._providers.append(logger_provider)
        return meter_provider, logger_provider

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> ToolEvalServer:
        try:
            if self.options.grpc:
                self._start_grpc(*parse_address(self.options.grpc, 4317))
            if self.options.http:
                self._start_http(*parse_address(self.options.http, 4318))
        except BaseException:
            self.stop(timeout=1.0)   # nothing was accepted: only threads to end
            raise
        self.ready = True
        return self

    def __enter__(self) -> ToolEvalServer:  # noqa: PYI034 - start() returns self
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _start_grpc(self, host: str, port: int) -> None:
        import grpc

        if port:
            _check_free(host, port, "--grpc")
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.options.workers,
                                       thread_name_prefix="otel-tooleval-grpc"),
            # grpcio sets SO_REUSEPORT by default: a second gRPC server on the port (another
            # serve, Phoenix) would bind too and the two would share the connections.
            options=[("grpc.max_receive_message_length", self.options.max_body_bytes),
                     ("grpc.so_reuseport", 0)],
        )
        handler = grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService",
            {"Export": grpc.unary_unary_rpc_method_handler(self._grpc_export)},
        )
        server.add_generic_rpc_handlers((handler,))
        try:
            bound = server.add_insecure_port(f"[{host}]:{port}" if ":" in host
                                             else f"{host}:{port}")
        except RuntimeError:   # newer grpcio raises "Failed to bind", older ones return 0
            bound = 0
        if not bound:
            server.stop(None)
            raise ListenError(host, port, "--grpc", "the gRPC server could not bind it; "
                              "GRPC_VERBOSITY=debug tells why")
        server.start()
        self._grpc_server = server
        self.grpc_port = bound

    def _start_http(self, host: str, port: int) -> None:
        try:
            server = _HttpServer((host, port), _Handler, self)
        except OSError as exc:   # the server closed its socket
            raise ListenError(host, port, "--http", exc) from None
        thread = threading.Thread(target=server.serve_forever, name="otel-tooleval-http",
                                  kwargs={"poll_interval": 0.2}, daemon=True)
        thread.start()
        self._http_server = server
        self._http_thread = thread
        self.http_port = server.server_address[1]

    def _close_listeners(self, grace: float = 5.0) -> None:
        if self._grpc_server is not None:
            self._grpc_server.stop(grace).wait(grace + 1)
            self._grpc_server = None
        if self._http_server is not None:
            self._http_server.shutdown()
            # Connections waiting for a request (idle keep-alive, a request half sent) are
            # closed: nothing of theirs was accepted. Requests being answered finish.
            self._http_server.close_waiting()
            self._http_server.server_close()   # joins the request threads (block_on_close)
            self._http_server = None

    def stop(self, timeout: float | None = None) -> bool:
        """Stop accepting, decide and grade every open trace, forward everything, stop.

        Returns True when everything accepted was forwarded within ``timeout`` (default
        ``options.shutdown_timeout``).
        """
        if self._stopped.is_set():
            return True
        deadline = time.monotonic() + (self.options.shutdown_timeout if timeout is None
                                       else timeout)
        self.draining = True
        self._close_listeners(grace=min(5.0, max(deadline - time.monotonic(), 0.0)))
        graded = self.tail.shutdown(max(deadline - time.monotonic(), 0.0))
        forwarded = self.forwarder.drain(deadline)
        for provider in self._providers:
            try:
                provider.shutdown()
            except Exception:  # noqa: BLE001
                _log.exception("otel-tooleval serve: telemetry shutdown failed")
        self.ready = False
        self._stopped.set()
        return graded and forwarded

    def wait(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    # -- intake -------------------------------------------------------------------------------

    def full(self) -> bool:
        return self.tail.full() or self.forwarder.full()

    def _count(self, key: str, n: int = 1) -> None:
        with self._count_lock:
            self.counts[key] += n

    def ingest(self, request: Any, body: bytes | None) -> tuple[int, str]:
        """Take one ExportTraceServiceRequest; returns (rejected spans, error message).

        ``body`` is the request's own protobuf encoding, forwarded as it is when no span of
        it is held back. Held spans (possible run roots) are copied out of the request with
        their resource and scope, and the rest of the request is forwarded at once.
        """
        triples: list[tuple[SpanRecord, Any, int]] = []
        held: list[tuple[Any, int]] = []
        rejected: list[tuple[Any, int]] = []
        message = ""
        total = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
        size = (len(body) // total) if body and total else 256
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                scope_name = ss.scope.name
                for i, span in enumerate(ss.spans):
                    try:
                        record = record_from_proto(span, scope_name)
                    except (ValueError, TypeError) as exc:
                        rejected.append((ss, i))
                        message = message or f"span {span.name!r}: {exc}"
                        continue
                    triples.append((record, (rs, ss, i, span), size))
        copies: dict[int, Any] = {}

        def hold(item: Any) -> _Held:
            rs, ss, i, span = item
            held.append((ss, i))
            resource = copies.get(id(rs))
            if resource is None:
                resource = copies[id(rs)] = type(rs)()
                resource.resource.CopyFrom(rs.resource)
                resource.schema_url = rs.schema_url
            scope = copies.get(id(ss))
            if scope is None:
                scope = copies[id(ss)] = type(ss)()
                scope.scope.CopyFrom(ss.scope)
                scope.schema_url = ss.schema_url
            copy = type(span)()
            copy.CopyFrom(span)
            return _Held(resource, scope, copy)

        accepted = len(triples)
        forward_now = self.tail.accept(triples, hold)
        removed = held + rejected
        if removed:
            by_scope: dict[int, tuple[Any, list[int]]] = {}
            for ss, i in removed:
                by_scope.setdefault(id(ss), (ss, []))[1].append(i)
            for ss, drop in by_scope.values():
                for i in sorted(drop, reverse=True):
                    del ss.spans[i]
            body = None
        passing = accepted - len(held)
        if passing:
            self.forwarder.put(body if body is not None else request.SerializeToString(),
                               passing)
        evicted = [item for item in forward_now if isinstance(item, _Held)]
        if evicted:
            self.forwarder.put(*_encode_held(evicted))
        self._count("accepted_spans", accepted)
        self._count("accepted_requests")
        if rejected:
            self._count("rejected_spans", len(rejected))
        return len(rejected), message

    def _on_report(self, report: RunReport) -> None:
        """Count and log one graded run (grading thread), then the caller's ``on_report``."""
        passed = report.passed
        with self._count_lock:   # graded == passed + failed in every stats() read
            self.counts["runs_graded"] += 1
            self.counts["runs_passed" if passed else "runs_failed"] += 1
        run = report.run
        _log.info("otel-tooleval serve: run agent=%s trace=%s root=%s %s",
                  _agent_text(run.agent), run.trace_id_hex, run.root_span_id_hex,
                  "PASS" if passed else f"FAIL (failed: {', '.join(report.failed)})")
        if self._on_report_callback is not None:
            self._on_report_callback(report)

    def _forward_held(self, items: list[Any]) -> None:
        self.forwarder.put(*_encode_held(items))

    def _annotate(self, item: Any, record: SpanRecord, report: RunReport) -> Any:
        return _annotate(item, record, report, self.config)

    def export(self, body: bytes, content_type: str) -> tuple[int, str]:
        """Check, parse and ingest one request body (the receivers' common path).

        Raises:
            Refused: draining, full (retry), or a body that does not parse (bad request).
        """
        if self.draining or not self.ready:
            raise Refused("the server is shutting down", retry=True, status=503)
        if self.full():
            self._count("refused_full")
            raise Refused("buffers are full; retry later", retry=True, status=429)
        try:
            request = parse_request(body, content_type)
        except ValueError as exc:
            self._count("refused_malformed")
            raise Refused(f"malformed ExportTraceServiceRequest: {exc}") from None
        return self.ingest(request, body if content_type != _JSON else None)

    def _grpc_export(self, body: bytes, context: Any) -> bytes:
        import grpc

        try:
            rejected, message = self.export(body, _PROTOBUF)
        except Refused as refused:
            if refused.retry:
                context.set_trailing_metadata(_retry_metadata(str(refused)))
                code = (grpc.StatusCode.RESOURCE_EXHAUSTED if refused.status == 429
                        else grpc.StatusCode.UNAVAILABLE)
                context.abort(code, str(refused))
            message = _one_line(str(refused))
            _log.warning("otel-tooleval serve: gRPC request from %s refused: INVALID_ARGUMENT "
                         "%s", context.peer(), message)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
            raise   # not reached: abort raises
        except Exception as exc:
            _log.exception("otel-tooleval serve: export failed")
            context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
            raise
        return _response(rejected, message).SerializeToString()  # type: ignore[no-any-return]

    def stats(self) -> dict[str, Any]:
        """Counters (flat); ``runs_graded``/``runs_passed``/``runs_failed`` always present."""
        with self._count_lock:
            out: dict[str, Any] = {"runs_graded": 0, "runs_passed": 0, "runs_failed": 0,
                                   **self.counts}
        out.update(self.tail.stats())
        out.update(self.forwarder.counts)
        out["queued_bytes"] = self.forwarder.queued_bytes
        out["ready"] = self.ready and not self.draining
        return out


def _agent_text(agent: str | None) -> str:
    """The agent name for a ``key=value`` log line: ``-`` when unknown, quoted when it has
    spaces, quotes or ``=``."""
    if not agent:
        return "-"
    if any(c.isspace() or c in "\"'=" for c in agent):
        return json.dumps(agent)
    return agent


def _response(rejected: int, message: str) -> Any:
    response = _pb().ExportTraceServiceResponse()
    if rejected:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    return response


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


def _one_line(text: str, limit: int = 300) -> str:
    """``text`` for a log line or an error answer: one line, at most ``limit`` characters
    (parser messages can quote the body)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


class _HttpServer(ThreadingHTTPServer):
    """``http.server`` with a deadline per request on every connection.

    A connection waiting for the client (for the next request on a keep-alive connection,
    for the rest of its headers or body) is shut down ``read_timeout`` seconds after the wait
    began, however slowly bytes trickle in, so no client holds a thread longer; the check runs
    in ``serve_forever``'s loop. ``close_waiting`` shuts down every waiting connection at once
    (shutdown). A connection whose request is being answered is not cut.
    """

    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 app: ToolEvalServer) -> None:
        self.app = app
        self.read_timeout = app.options.read_timeout
        self._waiting: dict[socket.socket, float] = {}   # connection -> deadline
        self._waiting_lock = threading.Lock()
        self._closing = False
        super().__init__(address, handler)

    def wait_for_client(self, conn: socket.socket) -> bool:
        """``conn`` now waits for its client; False when the server is closing."""
        with self._waiting_lock:
            if self._closing:
                return False
            self._waiting[conn] = time.monotonic() + self.read_timeout
            return True

    def take_request(self, conn: socket.socket) -> bool:
        """``conn`` has a whole request to answer; False when it was cut before."""
        with self._waiting_lock:
            return self._waiting.pop(conn, None) is not None

    def forget(self, conn: socket.socket) -> None:
        with self._waiting_lock:
            self._waiting.pop(conn, None)

    def service_actions(self) -> None:
        self._cut(time.monotonic())

    def close_waiting(self) -> None:
        with self._waiting_lock:
            self._closing = True
        self._cut(math.inf)

    def _cut(self, now: float) -> None:
        # Under the lock, so that a request is either taken or cut, never both.
        with self._waiting_lock:
            for conn in [c for c, deadline in self._waiting.items() if deadline <= now]:
                del self._waiting[conn]
                try:
                    conn.shutdown(socket.SHUT_RDWR)   # the reading thread sees the end
                except OSError:
                    pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):   # a client gone or too slow to read its answer
            _log.debug("otel-tooleval serve: connection from %s: %s", client_address[0],
                       _one_line(str(exc) or type(exc).__name__))
        else:
            _log.exception("otel-tooleval serve: request from %s failed", client_address[0])


class _Handler(BaseHTTPRequestHandler):
    server: _HttpServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.read_timeout)   # each operation, writes too

    def finish(self) -> None:
        self.server.forget(self.connection)
        super().finish()

    def handle_one_request(self) -> None:
        if not self.server.wait_for_client(self.connection):
            self.close_connection = True
            return
        super().handle_one_request()

    def do_GET(self) -> None:
        if not self.server.take_request(self.connection):
            self.close_connection = True
            return
        if self.path.split("?")[0] not in ("/healthz", "/readyz", "/"):
            self._reply(404, b'{"error": "not found"}', _JSON)
            return
        app = self.server.app
        ready = app.ready and not app.draining
        stats = app.stats()
        dropped = dict.fromkeys(_DROP_REASONS, 0)
        dropped.update({k.removeprefix("dropped."): v for k, v in stats.items()
                        if k.startswith("dropped.")})
        doc = {"status": "ready" if ready else ("draining" if app.draining else "starting"),
               **{k: v for k, v in stats.items() if isinstance(v, (int, float))},
               "dropped": dropped}
        self._reply(200 if ready else 503, json.dumps(doc).encode(), _JSON)

    def do_POST(self) -> None:
        app = self.server.app
        if self.path.split("?")[0] != "/v1/traces":
            self._discard_body()
            self._reply(404, b'{"error": "serve receives traces only, at /v1/traces"}', _JSON)
            return
        content_type = (self.headers.get("Content-Type") or _PROTOBUF).split(";")[0].strip()
        if content_type not in (_PROTOBUF, _JSON):
            self._discard_body()
            self._error(415, f"unsupported Content-Type {content_type!r}: use {_PROTOBUF} "
                             f"or {_JSON}", _JSON)
            return
        length_text = self.headers.get("Content-Length")
        if length_text is None or not length_text.isdigit():
            self.close_connection = True
            self._error(411, "a Content-Length header is required", content_type)
            return
        length = int(length_text)
        limit = app.options.max_body_bytes
        if length > limit:
            self.close_connection = True   # the body is not read
            self._error(413, f"body of {length} bytes is over the limit of {limit}",
                        content_type)
            return
        try:
            body = self.rfile.read(length)
        except OSError as exc:   # the socket timeout (TimeoutError) among them
            body, reason = b"", str(exc) or type(exc).__name__
        else:
            reason = f"{len(body)} of {length} bytes"
        if len(body) < length or not self.server.take_request(self.connection):
            self.close_connection = True   # not answered: the sender retries
            _log.warning("otel-tooleval serve: request from %s dropped: body not received "
                         "within --read-timeout %gs (%s)", self.client_address[0],
                         self.server.read_timeout, _one_line(reason))
            return
        try:
            body = _decompress(body, self.headers.get("Content-Encoding"), limit)
        except Refused as refused:
            self._error(refused.status, str(refused), content_type)
            return
        try:
            rejected, message = app.export(body, content_type)
        except Refused as refused:
            self._error(refused.status, str(refused), content_type,
                        retry_after=refused.retry)
            return
        except Exception as exc:  # noqa: BLE001 - answer, never crash the server
            _log.exception("otel-tooleval serve: export failed")
            self._error(500, f"{type(exc).__name__}: {exc}", content_type)
            return
        response = _response(rejected, message)
        if content_type == _JSON:
            from google.protobuf import json_format

            self._reply(200, json.dumps(json_format.MessageToDict(response)).encode(), _JSON)
        else:
            self._reply(200, response.SerializeToString(), _PROTOBUF)

    def _discard_body(self) -> None:
        length = self.headers.get("Content-Length")
        if length and length.isdigit() and int(length) <= self.server.app.options.max_body_bytes:
            self.rfile.read(int(length))
        else:
            self.close_connection = True

    def _error(self, status: int, message: str, content_type: str, *,
               retry_after: bool = False) -> None:
        """An error answer as OTLP/HTTP specifies: a google.rpc.Status in the request's
        encoding."""
        from google.rpc import status_pb2

        message = _one_line(message)
        if not retry_after:   # one line per rejected request; 429/503 are counted in stats
            _log.warning("otel-tooleval serve: request from %s refused: %d %s",
                         self.client_address[0], status, message)
        code = {400: 3, 413: 8, 429: 8, 503: 14}.get(status, 2)
        if content_type == _JSON:
            payload = json.dumps({"code": code, "message": message}).encode()
        else:
            payload = status_pb2.Status(code=code, message=message).SerializeToString()
        headers = {"Retry-After": str(_RETRY_AFTER_SECONDS)} if retry_after else {}
        self._reply(status, payload, content_type, headers)

    def _reply(self, status: int, payload: bytes, content_type: str,
               headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        return   # no access log on stderr

    def log_error(self, format: str, *args: Any) -> None:
        # http.server's own rejections (a bad request line, a header timeout): one line.
        _log.info("otel-tooleval serve: connection from %s: %s", self.client_address[0],
                  _one_line(format % args))


def _decompress(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The body as sent, inflated: every gzip member (RFC 1952 allows several, and senders
    that concatenate compressed chunks produce them), never more than ``limit`` bytes out.

    Raises:
        Refused: 415 for an unknown encoding; 400 for data that does not inflate, a stream
            that did not end (a cut-off body must not be answered 200 for what it lost) or
            bytes after the end; 413 past ``limit``.
    """
    encoding = (encoding or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding not in ("gzip", "deflate"):
        raise Refused(f"unsupported Content-Encoding {encoding!r}", status=415)
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    out = bytearray()
    inflater = zlib.decompressobj(wbits)
    pos = 0
    chunk = b""
    # Input goes in by chunks so that what is left after a member is never a copy of the
    # whole rest of the body (many tiny members would make that quadratic).
    while True:
        if not chunk:
            if pos >= len(body):
                break
            chunk = body[pos:pos + _INFLATE_CHUNK]
            pos += len(chunk)
        if inflater.eof:   # another member follows
            if encoding == "deflate":
                raise Refused("bytes after the end of the deflate stream")
            chunk = chunk.lstrip(b"\0")   # zero padding between members, as gzip(1) allows
            if not chunk:
                continue
            inflater = zlib.decompressobj(wbits)
        try:
            out += inflater.decompress(chunk, limit - len(out) + 1)
        except zlib.error as exc:
            raise Refused(f"body is not valid {encoding}: {exc}") from None
        if len(out) > limit:
            raise Refused(f"decompressed body is over the limit of {limit} bytes", status=413)
        chunk = inflater.unused_data if inflater.eof else b""
    if not inflater.eof:
        raise Refused(f"the {encoding} stream does not end: the body is cut off")
    return bytes(out)


def options_from_args(config_source: str | ToolEvalConfig, *, grpc: str | None, http: str | None,
                      forward: str | None, forward_protocol: str | None,
                      decision_wait: float, **extra: Any) -> ServeOptions:
    """ServeOptions from CLI values; the forward target defaults to the OTLP env variables.

    Raises:
        ValueError: no forward target, or an unknown protocol (message names the flag).
    """
    if forward_protocol is None:
        protocol = otlp_traces_protocol(strict=True)   # the message names the variable
    elif forward_protocol in ("grpc", "http/protobuf", "http"):
        protocol = "grpc" if forward_protocol == "grpc" else "http/protobuf"
    else:
        raise ValueError(f"--forward-protocol: {forward_protocol!r} is not grpc or http/protobuf")
    target = forward or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not target:
        raise ValueError("--forward: no next hop; pass --forward URL (or 'none' to discard) "
                         "or set OTEL_EXPORTER_OTLP_ENDPOINT")
    if decision_wait < 0:
        raise ValueError("--decision-wait: must not be negative")
    if extra.get("read_timeout", 1.0) <= 0:
        raise ValueError("--read-timeout: must be more than 0 seconds")
    for flag, value in (("--grpc", grpc), ("--http", http)):
        if value:
            parse_address(value, 0)   # raises ValueError naming the address
    return ServeOptions(load_config(config_source), grpc=grpc, http=http, forward=target,
                        forward_protocol=protocol, decision_wait=decision_wait, **extra)
