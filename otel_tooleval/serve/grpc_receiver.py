"""The OTLP/gRPC receiver (grpcio): ``TraceService/Export`` on a thread pool, with TLS and
bearer tokens when they are set (security.py)."""

from __future__ import annotations

import logging
from concurrent import futures
from typing import TYPE_CHECKING, Any

from .decoding import _PROTOBUF, _RETRY_AFTER_SECONDS, Refused, _one_line, _response
from .options import ListenError, ServeOptions, _check_free
from .security import grpc_auth_interceptor, grpc_server_credentials

if TYPE_CHECKING:
    from .server import ToolEvalServer

_log = logging.getLogger("otel_tooleval.serve")   # one logger for the whole service


def start_grpc(app: ToolEvalServer, host: str, port: int) -> tuple[Any, int]:
    """A started grpcio server for ``app`` on ``host:port`` and the port it bound.

    Raises:
        ListenError: the address cannot be bound.
    """
    import grpc

    if port:
        _check_free(host, port, "--grpc")
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=app.options.workers,
                                   thread_name_prefix="otel-tooleval-grpc"),
        # grpcio sets SO_REUSEPORT by default: a second gRPC server on the port (another
        # serve, Phoenix) would bind too and the two would share the connections.
        options=[("grpc.max_receive_message_length", app.options.max_body_bytes),
                 ("grpc.so_reuseport", 0), *_limits(app.options)],
        maximum_concurrent_rpcs=app.options.max_concurrent_rpcs,   # beyond: RESOURCE_EXHAUSTED
        interceptors=[grpc_auth_interceptor(app.tokens)] if app.tokens is not None else None,
    )

    def export(body: bytes, context: Any) -> bytes:
        return _grpc_export(app, body, context)

    handler = grpc.method_handlers_generic_handler(
        "opentelemetry.proto.collector.trace.v1.TraceService",
        {"Export": grpc.unary_unary_rpc_method_handler(export)},
    )
    server.add_generic_rpc_handlers((handler,))
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = (server.add_secure_port(where, grpc_server_credentials(app.tls))
                 if app.tls is not None else server.add_insecure_port(where))
    except RuntimeError:   # newer grpcio raises "Failed to bind", older ones return 0
        bound = 0
    if not bound:
        server.stop(None)
        raise ListenError(host, port, "--grpc", "the gRPC server could not bind it; "
                          "GRPC_VERBOSITY=debug tells why")
    server.start()
    return server, bound


def _limits(options: ServeOptions) -> list[tuple[str, int]]:
    """grpcio channel arguments for the connection limits (docs/serve.md, "Limits")."""
    limits = [
        ("grpc.max_connection_idle_ms", int(options.idle_timeout * 1000)),
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


def _grpc_export(app: ToolEvalServer, body: bytes, context: Any) -> bytes:
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
                     "%s", context.peer(), message)
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
