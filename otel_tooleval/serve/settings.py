"""The settings of one ``serve`` instance and its listen addresses.

The leaf of ``serve/``: every other module of the service reads these, and this one imports
none of them (``options.py`` checks the CLI flags and builds a ``ServeOptions``).
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..config import ToolEvalConfig


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
    forward_timeout: float | None = None   # None: OTEL_EXPORTER_OTLP_(TRACES_)TIMEOUT, else 10 s
    shutdown_timeout: float = 30.0
    read_timeout: float = 30.0   # HTTP: a request's headers and body, from its first byte
    workers: int = 8
    emit_telemetry: bool = True   # log events and metrics to the forward endpoint
    # HOST:PORT of a Prometheus scrape endpoint for serve's and the grading metrics (metrics.py)
    metrics: str | None = None
    # TLS and authentication of both receivers (security.py, docs/serve.md)
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None   # mTLS: clients need a certificate this CA signed
    bearer_token_file: str | None = None
    insecure_bind: bool = False   # listen beyond loopback without TLS and authentication
    forward_workers: int = 2   # sender threads, each with its own connection
    # Connection limits (docs/serve.md, "Limits").
    idle_timeout: float = 60.0   # an idle keep-alive HTTP connection; an idle gRPC connection
    max_connections: int = 1024   # HTTP: beyond, each request is answered 503 + Retry-After
    # HTTP connections of one client address (IPv6: its /64), TLS handshakes included; beyond,
    # closed at once. None: a quarter of max_connections (see peer_share).
    max_connections_per_peer: int | None = None
    backlog: int = 2048   # listen backlog of the HTTP socket
    max_inflight_bytes: int = 64 * 1024 * 1024   # HTTP bodies being read and decoded at once
    max_concurrent_rpcs: int = 128   # gRPC: beyond, RESOURCE_EXHAUSTED with RetryInfo
    max_connection_age: float = 0.0   # gRPC: a connection is asked to go after this; 0: never

    def peer_share(self) -> int:
        """``max_connections_per_peer``, or its default: a quarter of ``max_connections``."""
        if self.max_connections_per_peer is not None:
            return self.max_connections_per_peer
        return max(1, self.max_connections // 4)


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
