"""The OTLP protocol of the traces otel-tooleval sends, chosen the same way by every front door
(``install()`` and ``demo``, the ``tooleval_otlp`` exporter, ``serve``'s forwarder).

``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else ``OTEL_EXPORTER_OTLP_PROTOCOL``, else
``http/protobuf``: the default of the OpenTelemetry specification. (The Python SDK's own
``otlp`` exporter name defaults to gRPC; ``tooleval_otlp`` did too, up to 0.6.1.)
"""

from __future__ import annotations

import logging
import os

__all__ = ["DEFAULT_PROTOCOL", "ENV_PROTOCOL", "ENV_TRACES_PROTOCOL", "otlp_traces_protocol"]

_log = logging.getLogger(__name__)

ENV_TRACES_PROTOCOL = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
ENV_PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
DEFAULT_PROTOCOL = "http/protobuf"
_PROTOCOLS = {"grpc": "grpc", "http/protobuf": "http/protobuf", "http": "http/protobuf"}


def otlp_traces_protocol(*, strict: bool = False) -> str:
    """``grpc`` or ``http/protobuf``, from the first of the two variables that is set.

    ``http`` is taken for ``http/protobuf``. An unsupported value (``http/json`` included) is
    logged as an error and the default used, so that a program is never stopped by it.

    Args:
        strict: raise instead of logging (for the command line, which exits on it).

    Raises:
        ValueError: with ``strict``, an unsupported value; the message names the variable.
    """
    for name in (ENV_TRACES_PROTOCOL, ENV_PROTOCOL):
        raw = os.environ.get(name, "").strip()
        if not raw:
            continue
        protocol = _PROTOCOLS.get(raw.lower())
        if protocol is not None:
            return protocol
        message = f"{name}={raw!r} is not a supported OTLP protocol (grpc or http/protobuf)"
        if strict:
            raise ValueError(message)
        _log.error("otel-tooleval: %s; using %s", message, DEFAULT_PROTOCOL)
        return DEFAULT_PROTOCOL
    return DEFAULT_PROTOCOL
