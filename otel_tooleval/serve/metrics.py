"""``serve``'s own metrics, and ``serve --metrics HOST:PORT``: a Prometheus scrape endpoint.

The instruments read ``ToolEvalServer.stats()`` at each collection (observable counters and
gauges): nothing is recorded on the request path. The endpoint is the OpenTelemetry Prometheus
exporter (``opentelemetry-exporter-prometheus``, the ``prometheus`` extra) with a registry of
its own per server, served by ``prometheus_client``'s HTTP server; the names it writes follow
the same translation as a collector's ``prometheus`` exporter (docs/prometheus.md).
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["MISSING_PROMETHEUS", "MetricsEndpoint", "prometheus_available", "serve_instruments"]

MISSING_PROMETHEUS = ("needs the OpenTelemetry Prometheus exporter: "
                      "pip install 'otel-tooleval[prometheus]'")

#: ``stats()`` keys counted as refused requests, by the ``reason`` attribute they get.
REFUSALS = {"refused_full": "full", "refused_busy": "busy", "refused_inflight": "inflight",
            "refused_unauthenticated": "unauthenticated", "refused_malformed": "malformed"}


def sink_counts(stats: dict[str, Any]) -> list[tuple[str, str, int]]:
    """``(sink, count, n)`` of each ``sinks.<sink>.<count>`` key of ``stats`` (``SinkSet``)."""
    out = []
    for key, n in stats.items():
        if key.startswith("sinks.") and isinstance(n, int):
            sink, _, what = key.removeprefix("sinks.").partition(".")
            if what:
                out.append((sink, what, n))
    return out


def prometheus_available() -> bool:
    return importlib.util.find_spec("opentelemetry.exporter.prometheus") is not None


def serve_instruments(meter_provider: Any, stats: Callable[[], dict[str, Any]],
                      limits: dict[str, int], version: str) -> None:
    """Register serve's observable instruments on ``meter_provider``; ``stats`` is read at
    each collection, ``limits`` are the buffer bounds (``buffered_bytes``, ``queued_bytes``)."""
    from opentelemetry.metrics import CallbackOptions, Observation

    meter = meter_provider.get_meter("otel_tooleval.serve", version)

    def counter(key: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def read(options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(int(stats().get(key, 0)))]
        return read

    def refused(options: CallbackOptions) -> Iterable[Observation]:
        now = stats()
        return [Observation(int(now.get(key, 0)), {"reason": reason})
                for key, reason in REFUSALS.items()]

    def usage(options: CallbackOptions) -> Iterable[Observation]:
        now = stats()
        return [Observation(int(now.get(key, 0)), {"buffer": name})
                for name, key in (("grading", "buffered_bytes"), ("forwarding", "queued_bytes"))]

    def limit(options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(limits["buffered_bytes"], {"buffer": "grading"}),
                Observation(limits["queued_bytes"], {"buffer": "forwarding"})]

    def delivered(options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(n, {"sink": sink}) for sink, what, n in sink_counts(stats())
                if what == "sent"]

    def undelivered(options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(n, {"sink": sink, "reason": what.removeprefix("dropped.")})
                for sink, what, n in sink_counts(stats()) if what.startswith("dropped.")]

    meter.create_observable_counter(
        "tooleval.sinks.sent", [delivered], unit="{payload}",
        description="Annotations or scores a sink (emit.phoenix, emit.langfuse) delivered")
    meter.create_observable_counter(
        "tooleval.sinks.dropped", [undelivered], unit="{payload}",
        description="Annotations or scores a sink gave up on, by reason (queue_full, "
                    "http_<status>, timeout, unreachable, shutdown, ...)")
    meter.create_observable_counter(
        "tooleval.serve.requests.refused", [refused], unit="{request}",
        description="Export requests serve refused (429/503, RESOURCE_EXHAUSTED, 401, 400), "
                    "by reason")
    for key, name, what in (("accepted_spans", "accepted", "accepted"),
                            ("forwarded_spans", "forwarded", "forwarded to the next hop"),
                            ("forward_failed_spans", "forward_failed",
                             "given up on by the forwarder")):
        meter.create_observable_counter(f"tooleval.serve.spans.{name}", [counter(key)],
                                        unit="{span}", description=f"Spans {what}")
    meter.create_observable_gauge(
        "tooleval.serve.buffer.size", [usage], unit="By",
        description="Bytes held: spans waiting to be graded (grading), requests waiting to be "
                    "forwarded (forwarding)")
    meter.create_observable_gauge(
        "tooleval.serve.buffer.limit", [limit], unit="By",
        description="The bound of each buffer (--max-buffered-bytes, the forward queue's)")
    meter.create_observable_gauge(
        "tooleval.serve.open_traces", [counter("open_traces")], unit="{trace}",
        description="Traces held, waiting for their root or decision wait")


class MetricsEndpoint:
    """A ``PrometheusMetricReader`` on a registry of its own and the HTTP server for it."""

    def __init__(self) -> None:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry

        self.registry: Any = CollectorRegistry(auto_describe=True)
        if "registry" in inspect.signature(PrometheusMetricReader).parameters:
            self.reader = PrometheusMetricReader(registry=self.registry)
        else:   # older releases register on prometheus_client's global registry
            self.reader = PrometheusMetricReader()
            self.registry = None
        self._server: Any = None
        self.port: int | None = None

    def listen(self, host: str, port: int) -> None:
        """Serve ``/metrics`` on ``host:port`` (port 0: any; ``port`` tells which).

        Raises:
            OSError: the address cannot be bound.
        """
        from prometheus_client import start_http_server

        kwargs: dict[str, Any] = {} if self.registry is None else {"registry": self.registry}
        started = start_http_server(port, addr=host, **kwargs)
        # prometheus_client >= 0.17 returns (server, thread); before, nothing to stop it with.
        self._server = started[0] if isinstance(started, tuple) else None
        self.port = self._server.server_address[1] if self._server is not None else port

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
