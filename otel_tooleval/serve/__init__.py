"""``otel-tooleval serve``: an OTLP trace receiver that grades agent runs and forwards the traces.

The package's parts: ``options`` (settings, listen addresses), ``decoding`` (bodies, their
limits and parsing), ``spans`` (held spans and the verdicts written on them), ``forwarder``
(the next hop), ``http_receiver`` and ``grpc_receiver`` (the two OTLP receivers), ``server``
(``ToolEvalServer``: intake, grading, lifecycle) and ``process`` (the command: signals and
the lines it prints).

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

from .decoding import Refused, parse_request
from .options import ListenError, ServeOptions, options_from_args, parse_address
from .server import ToolEvalServer

__all__ = ["ListenError", "Refused", "ServeOptions", "ToolEvalServer", "options_from_args",
           "parse_address", "parse_request"]
