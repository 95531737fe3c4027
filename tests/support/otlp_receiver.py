"""In-process OTLP receiver (gRPC + HTTP/protobuf) for tests.

Start one, point real OTLP exporters at :attr:`OtlpReceiver.grpc_endpoint` or
:attr:`OtlpReceiver.http_endpoint`, then inspect what arrived with
:meth:`OtlpReceiver.spans`, :meth:`OtlpReceiver.logs` and
:meth:`OtlpReceiver.metrics`::

    with OtlpReceiver() as rx:
        exporter = OTLPSpanExporter(endpoint=rx.grpc_endpoint, insecure=True)
        ...
        assert rx.wait_for(lambda: rx.spans())

Both servers bind to 127.0.0.1 only, on ports chosen by the OS. With ``tls_cert`` and
``tls_key`` (PEM files) both speak TLS (``http_endpoint`` is then ``https://…``); with
``client_ca`` too, clients must present a certificate that CA signed. The headers (HTTP) and
metadata (gRPC) of every request are kept in :attr:`OtlpReceiver.headers_seen`.
"""

from __future__ import annotations

import gzip
import ssl
import threading
import time
import zlib
from collections.abc import Callable
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

import grpc
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2

__all__ = ["OtlpReceiver", "decode_any_value", "decode_attributes"]

_HOST = "127.0.0.1"
_MAX_MESSAGE_BYTES = 64 * 1024 * 1024

_TRACES = "traces"
_LOGS = "logs"
_METRICS = "metrics"

# signal -> (request type, response type), shared by the HTTP paths and storage.
_SIGNALS: dict[str, tuple[type[Message], type[Message]]] = {
    _TRACES: (
        trace_service_pb2.ExportTraceServiceRequest,
        trace_service_pb2.ExportTraceServiceResponse,
    ),
    _LOGS: (
        logs_service_pb2.ExportLogsServiceRequest,
        logs_service_pb2.ExportLogsServiceResponse,
    ),
    _METRICS: (
        metrics_service_pb2.ExportMetricsServiceRequest,
        metrics_service_pb2.ExportMetricsServiceResponse,
    ),
}

# --------------------------------------------------------------------------- decoding


def decode_any_value(value: common_pb2.AnyValue) -> Any:
    """Convert an OTLP ``AnyValue`` to a plain Python value (``None`` if unset)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [decode_any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return decode_attributes(value.kvlist_value.values)
    # string_value, bool_value, int_value, double_value, bytes_value and
    # string_value_strindex (left as the raw index: it needs a profiles dictionary).
    return getattr(value, kind)


def decode_attributes(pairs: Any) -> dict[str, Any]:
    """Convert a repeated ``KeyValue`` field to a ``{key: python value}`` dict."""
    return {kv.key: decode_any_value(kv.value) for kv in pairs}


def _hex_id(raw: bytes) -> str | None:
    """Hex-encode a trace/span id; empty or all-zero ids become ``None``."""
    if not raw or not any(raw):
        return None
    return raw.hex()


def _number(point: Any) -> int | float | None:
    """Value of a ``NumberDataPoint`` (int or double, whichever is set)."""
    kind = point.WhichOneof("value")
    return None if kind is None else getattr(point, kind)


# --------------------------------------------------------------------------- gRPC side


class _TraceServicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(
        self, request: Message, context: grpc.ServicerContext
    ) -> Message:
        self._receiver._record(_TRACES, request, dict(context.invocation_metadata()))
        return trace_service_pb2.ExportTraceServiceResponse()


class _LogsServicer(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(
        self, request: Message, context: grpc.ServicerContext
    ) -> Message:
        self._receiver._record(_LOGS, request)
        return logs_service_pb2.ExportLogsServiceResponse()


class _MetricsServicer(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(
        self, request: Message, context: grpc.ServicerContext
    ) -> Message:
        self._receiver._record(_METRICS, request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


# --------------------------------------------------------------------------- HTTP side


class _HttpServer(ThreadingHTTPServer):
    """Threading HTTP server that knows which receiver to report to."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, receiver: OtlpReceiver, context: ssl.SSLContext | None = None) -> None:
        self.receiver = receiver
        super().__init__((_HOST, 0), _OtlpHttpHandler)
        if context is not None:   # the handshake happens in the request's thread
            self.socket = context.wrap_socket(self.socket, server_side=True,
                                              do_handshake_on_connect=False)

    def finish_request(self, request: Any, client_address: Any) -> None:
        if isinstance(request, ssl.SSLSocket):
            try:
                request.do_handshake()
            except (ssl.SSLError, OSError):
                return   # e.g. no client certificate under mTLS: nothing to record
        super().finish_request(request, client_address)


class _OtlpHttpHandler(BaseHTTPRequestHandler):
    """Handles ``POST /v1/{traces,logs,metrics}`` with protobuf bodies."""

    server: _HttpServer
    server_version = "otel-tooleval-test-receiver"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?", 1)[0].rstrip("/")
        signal = path.rsplit("/", 1)[-1] if path.startswith("/v1/") else ""
        if signal not in _SIGNALS or path != f"/v1/{signal}":
            self._reply(404, b"unknown OTLP path", "text/plain")
            return

        content_type = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip()
        if content_type.lower() != "application/x-protobuf":
            self._reply(415, b"only application/x-protobuf is supported", "text/plain")
            return

        try:
            body = _decompress(body, self.headers.get("Content-Encoding"))
        except (OSError, EOFError, zlib.error, ValueError) as exc:
            self._reply(400, f"bad body encoding: {exc}".encode(), "text/plain")
            return

        request_type, response_type = _SIGNALS[signal]
        request = request_type()
        try:
            request.ParseFromString(body)
        except DecodeError as exc:
            self._reply(400, f"bad protobuf: {exc}".encode(), "text/plain")
            return

        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.receiver._record(signal, request, headers)
        self._reply(200, response_type().SerializeToString(), "application/x-protobuf")

    def _reply(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""


def _decompress(body: bytes, encoding: str | None) -> bytes:
    """Undo a ``Content-Encoding`` of gzip/deflate; identity passes through."""
    encoding = (encoding or "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding in ("gzip", "x-gzip"):
        return gzip.decompress(body)
    if encoding == "deflate":
        return zlib.decompress(body)
    raise ValueError(f"unsupported Content-Encoding {encoding!r}")


# --------------------------------------------------------------------------- receiver


class OtlpReceiver:
    """A real OTLP endpoint (gRPC and HTTP/protobuf) that records what it receives."""

    def __init__(self, *, grpc_port: int = 0, tls_cert: str | None = None,
                 tls_key: str | None = None, client_ca: str | None = None) -> None:
        self._want_grpc_port = grpc_port   # 0: chosen by the OS
        self._tls = (tls_cert, tls_key, client_ca) if tls_cert and tls_key else None
        self.headers_seen: list[dict[str, str]] = []   # per trace request, keys lower-case
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._requests: dict[str, list[Message]] = {signal: [] for signal in _SIGNALS}
        self._grpc_server: grpc.Server | None = None
        self._grpc_port: int | None = None
        self._http_server: _HttpServer | None = None
        self._http_thread: threading.Thread | None = None

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> OtlpReceiver:
        """Bind both servers on 127.0.0.1 (OS-chosen ports) and start serving."""
        if self._grpc_server is not None:
            raise RuntimeError("OtlpReceiver already started")
        try:
            self._start_grpc()
            self._start_http()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_grpc(self) -> None:
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="otlp-rx-grpc"),
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
            ],
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceServicer(self), server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_LogsServicer(self), server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(
            _MetricsServicer(self), server
        )
        self._grpc_server = server
        address = f"{_HOST}:{self._want_grpc_port}"
        if self._tls is not None:
            cert, key, client_ca = self._tls
            with open(cert, "rb") as c, open(key, "rb") as k:
                pair = (k.read(), c.read())
            roots = None
            if client_ca:
                with open(client_ca, "rb") as ca:
                    roots = ca.read()
            credentials = grpc.ssl_server_credentials(
                [pair], root_certificates=roots, require_client_auth=roots is not None)
            port = server.add_secure_port(address, credentials)
        else:
            port = server.add_insecure_port(address)
        if not port:
            raise RuntimeError("could not bind the OTLP gRPC server")
        server.start()
        self._grpc_port = port

    def _start_http(self) -> None:
        context = None
        if self._tls is not None:
            cert, key, client_ca = self._tls
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, key)
            if client_ca:
                context.load_verify_locations(cafile=client_ca)
                context.verify_mode = ssl.CERT_REQUIRED
        self._http_server = _HttpServer(self, context)
        self._http_thread = threading.Thread(
            target=self._http_server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="otlp-rx-http",
            daemon=True,
        )
        self._http_thread.start()

    def stop(self) -> None:
        """Shut both servers down promptly; safe to call more than once."""
        grpc_server, self._grpc_server = self._grpc_server, None
        http_server, self._http_server = self._http_server, None
        http_thread, self._http_thread = self._http_thread, None
        self._grpc_port = None
        if grpc_server is not None:
            grpc_server.stop(grace=0).wait(timeout=5)
        if http_server is not None:
            if http_thread is not None and http_thread.is_alive():
                http_server.shutdown()
            http_server.server_close()
        if http_thread is not None:
            http_thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- endpoints

    @property
    def grpc_endpoint(self) -> str:
        """``"127.0.0.1:PORT"``, for gRPC exporters (use ``insecure=True``)."""
        if self._grpc_port is None:
            raise RuntimeError("OtlpReceiver is not running")
        return f"{_HOST}:{self._grpc_port}"

    @property
    def http_endpoint(self) -> str:
        """``"http://127.0.0.1:PORT"``; HTTP exporters need ``+ "/v1/<signal>"``."""
        if self._http_server is None:
            raise RuntimeError("OtlpReceiver is not running")
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://{_HOST}:{self._http_server.server_address[1]}"

    # ----------------------------------------------------------------- raw storage

    def _record(self, signal: str, request: Message,
                headers: dict[str, str] | None = None) -> None:
        with self._arrived:
            if signal == _TRACES:
                self.headers_seen.append(headers or {})
            self._requests[signal].append(request)
            self._arrived.notify_all()

    def _snapshot(self, signal: str) -> list[Any]:
        with self._lock:
            return list(self._requests[signal])

    @property
    def trace_requests(self) -> list[trace_service_pb2.ExportTraceServiceRequest]:
        """Copy of every ``ExportTraceServiceRequest`` received, in arrival order."""
        return self._snapshot(_TRACES)

    @property
    def log_requests(self) -> list[logs_service_pb2.ExportLogsServiceRequest]:
        """Copy of every ``ExportLogsServiceRequest`` received, in arrival order."""
        return self._snapshot(_LOGS)

    @property
    def metric_requests(self) -> list[metrics_service_pb2.ExportMetricsServiceRequest]:
        """Copy of every ``ExportMetricsServiceRequest`` received, in arrival order."""
        return self._snapshot(_METRICS)

    def clear(self) -> None:
        """Forget everything received so far."""
        with self._lock:
            for requests in self._requests.values():
                requests.clear()
            self.headers_seen.clear()

    # ----------------------------------------------------------------- decoded views

    def spans(self) -> list[dict[str, Any]]:
        """Every received span as a plain dict, in arrival order."""
        out: list[dict[str, Any]] = []
        for request in self.trace_requests:
            for resource_spans in request.resource_spans:
                resource = decode_attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        out.append(
                            {
                                "name": span.name,
                                "trace_id": span.trace_id.hex(),
                                "span_id": span.span_id.hex(),
                                "parent_span_id": _hex_id(span.parent_span_id),
                                "attributes": decode_attributes(span.attributes),
                                "events": [
                                    {
                                        "name": event.name,
                                        "attributes": decode_attributes(event.attributes),
                                    }
                                    for event in span.events
                                ],
                                "resource": resource,
                                "scope": scope_spans.scope.name,
                            }
                        )
        return out

    def logs(self) -> list[dict[str, Any]]:
        """Every received log record as a plain dict, in arrival order.

        ``event_name`` is ``""`` when the record had none (proto3 string default);
        ``trace_id``/``span_id`` are ``None`` when the record had no span context.
        """
        out: list[dict[str, Any]] = []
        for request in self.log_requests:
            for resource_logs in request.resource_logs:
                for scope_logs in resource_logs.scope_logs:
                    for record in scope_logs.log_records:
                        out.append(
                            {
                                "event_name": record.event_name,
                                "body": decode_any_value(record.body),
                                "attributes": decode_attributes(record.attributes),
                                "trace_id": _hex_id(record.trace_id),
                                "span_id": _hex_id(record.span_id),
                            }
                        )
        return out

    def metrics(self) -> list[dict[str, Any]]:
        """Every received metric as a plain dict, one entry per metric per export.

        ``kind`` is ``"sum"``, ``"gauge"`` or ``"histogram"`` (also
        ``"exponential_histogram"``/``"summary"``). Sum and gauge points carry
        ``value``; histogram-like points carry ``count`` and ``sum``.
        """
        out: list[dict[str, Any]] = []
        for request in self.metric_requests:
            for resource_metrics in request.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        kind = metric.WhichOneof("data")
                        out.append(
                            {
                                "name": metric.name,
                                "unit": metric.unit,
                                "kind": kind,
                                "points": _points(metric, kind),
                            }
                        )
        return out

    # ----------------------------------------------------------------- waiting

    def wait_for(
        self, predicate: Callable[[], Any], timeout: float = 10, interval: float = 0.02
    ) -> bool:
        """Poll ``predicate()`` until truthy or ``timeout`` seconds pass; return the outcome.

        The predicate runs without any receiver lock held, so it may call
        :meth:`spans` etc. Exceptions it raises propagate.
        """
        deadline = time.monotonic() + timeout
        while True:
            if predicate():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with self._arrived:
                # Woken early by new data; otherwise re-check every ``interval``.
                self._arrived.wait(timeout=min(interval, remaining))


def _points(metric: Any, kind: str | None) -> list[dict[str, Any]]:
    """Decode the data points of one ``Metric`` message."""
    if kind in ("sum", "gauge"):
        return [
            {"attributes": decode_attributes(p.attributes), "value": _number(p)}
            for p in getattr(metric, kind).data_points
        ]
    if kind in ("histogram", "exponential_histogram", "summary"):
        return [
            {"attributes": decode_attributes(p.attributes), "count": p.count, "sum": p.sum}
            for p in getattr(metric, kind).data_points
        ]
    return []
