"""``options_from_args``: the ``serve`` flags checked and turned into a ``ServeOptions``.

``ServeOptions``, ``parse_address``, ``ListenError`` live in ``settings.py`` (the leaf that the
receivers, the forwarder and the security module read) and are re-exported here.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from ..config import ToolEvalConfig, load_config
from ..otlp_protocol import otlp_traces_protocol
from .settings import ListenError, ServeOptions, _check_free, parse_address

__all__ = ["ListenError", "ServeOptions", "_check_free", "options_from_args", "parse_address"]


def options_from_args(config_source: str | ToolEvalConfig, *, grpc: str | None, http: str | None,
                      forward: str | None, forward_protocol: str | None,
                      decision_wait: float, **extra: Any) -> ServeOptions:
    """ServeOptions from CLI values; the forward target defaults to the OTLP env variables.

    With neither ``forward`` nor ``OTEL_EXPORTER_OTLP_ENDPOINT`` the target is ``none``: a
    first try grades and logs its verdicts, and the start line says it forwards nowhere.

    Raises:
        ValueError: an unknown protocol or a bad value (message names the flag).
    """
    if forward_protocol is None:
        protocol = otlp_traces_protocol(strict=True)   # the message names the variable
    elif forward_protocol in ("grpc", "http/protobuf", "http"):
        protocol = "grpc" if forward_protocol == "grpc" else "http/protobuf"
    else:
        raise ValueError(f"--forward-protocol: {forward_protocol!r} is not grpc or http/protobuf")
    target = forward or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "none"
    if decision_wait < 0:
        raise ValueError("--decision-wait: must not be negative")
    for name in ("read_timeout", "idle_timeout"):
        if extra.get(name, 1.0) <= 0:
            raise ValueError(f"--{name.replace('_', '-')}: must be more than 0 seconds")
    for name in ("max_connections", "backlog", "max_inflight_bytes", "max_concurrent_rpcs",
                 "workers", "max_buffered_bytes"):
        if extra.get(name, 1) < 1:
            raise ValueError(f"--{name.replace('_', '-')}: must be at least 1")
    per_peer = extra.get("max_connections_per_peer")
    if per_peer is not None and per_peer < 1:
        raise ValueError("--max-connections-per-peer: must be at least 1")
    if extra.get("max_connection_age", 0.0) < 0:
        raise ValueError("--max-connection-age: must not be negative (0: no limit)")
    if http and importlib.util.find_spec("uvicorn") is None:
        from .http_receiver import MISSING_UVICORN

        raise ValueError(f"--http: {MISSING_UVICORN}")
    metrics = extra.get("metrics")
    if metrics is not None:
        from .metrics import MISSING_PROMETHEUS, prometheus_available

        if not prometheus_available():
            raise ValueError(f"--metrics: {MISSING_PROMETHEUS}")
    for flag, value in (("--grpc", grpc), ("--http", http), ("--metrics", metrics)):
        if value:
            try:
                parse_address(value, 0)
            except ValueError as exc:
                raise ValueError(f"{flag}: {exc}") from None
    options = ServeOptions(load_config(config_source), grpc=grpc, http=http, forward=target,
                           forward_protocol=protocol, decision_wait=decision_wait, **extra)
    _check_security(options)
    return options


def _check_security(options: ServeOptions) -> None:
    """TLS files, the token file and the next hop's settings, read and loaded once at
    startup; an address beyond loopback needs TLS and authentication.

    Raises:
        ValueError: the message names the flag or variable, and the file.
    """
    from .next_hop import next_hop
    from .security import TokenStore, check_exposure, is_loopback, load_tls

    if options.forward_timeout is not None and not options.forward_timeout > 0:
        raise ValueError("--forward-timeout: must be more than 0 seconds")
    if options.forward_workers < 1:
        raise ValueError("--forward-workers: must be at least 1")
    tls = load_tls(options.tls_cert, options.tls_key, options.tls_client_ca)
    if options.bearer_token_file is not None:
        TokenStore(options.bearer_token_file)
    check_exposure({"--grpc": options.grpc, "--http": options.http}, tls=tls,
                   tokens=options.bearer_token_file is not None,
                   insecure_bind=options.insecure_bind)
    # The scrape endpoint speaks neither TLS nor tokens: beyond loopback only when asked.
    if options.metrics and not options.insecure_bind and not is_loopback(
            parse_address(options.metrics, 9464)[0]):
        raise ValueError(f"--metrics {options.metrics}: the metrics endpoint has no TLS or "
                         "authentication; pass --insecure-bind to listen beyond loopback "
                         "(on a network you trust)")
    next_hop(options)
