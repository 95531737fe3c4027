"""``install()``: one call that sets up tracing, metrics and logs with live grading.

Exporters follow the standard ``OTEL_EXPORTER_OTLP_*`` variables (endpoint, headers, timeouts),
read by the OTLP exporters themselves. The ``protocol`` option, else
``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else ``OTEL_EXPORTER_OTLP_PROTOCOL`` picks ``grpc`` or
``http/protobuf`` (the default, as the OTel spec says) for traces, metrics and logs alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from opentelemetry import _logs, metrics, trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from .otlp_protocol import otlp_traces_protocol
from .processor import ToolEvalSpanProcessor

__all__ = ["Installation", "install", "otlp_exporters"]


@dataclass
class Installation:
    """What ``install()`` set up; ``shutdown()`` flushes and stops all of it."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    logger_provider: LoggerProvider
    processor: ToolEvalSpanProcessor

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Flush traces (grading included), then logs, then metrics, within one deadline."""
        deadline = time.monotonic() + timeout_millis / 1000

        def left() -> int:
            return max(int((deadline - time.monotonic()) * 1000), 0)

        ok = self.tracer_provider.force_flush(left())
        ok = self.logger_provider.force_flush(left()) and ok
        return bool(self.meter_provider.force_flush(left())) and ok

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.logger_provider.shutdown()
        self.meter_provider.shutdown()


def otlp_exporters(protocol: str | None = None, endpoint: str | None = None
                   ) -> tuple[SpanExporter, MetricExporter, LogRecordExporter]:
    """OTLP exporters for traces, metrics and logs over ``grpc`` or ``http/protobuf``.

    ``protocol`` None: ``otlp_traces_protocol()`` (``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else
    ``OTEL_EXPORTER_OTLP_PROTOCOL``, else http/protobuf; an unsupported value in them is logged
    and the default used), for all three signals. ``endpoint`` overrides
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` (for HTTP the signal paths ``/v1/traces``, ``/v1/metrics``,
    ``/v1/logs`` are appended, as the variable's rules say).

    Raises:
        ValueError: an unsupported ``protocol`` argument.
    """
    protocol = protocol or otlp_traces_protocol()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc import _log_exporter as logs
        from opentelemetry.exporter.otlp.proto.grpc import metric_exporter as metrics_
        from opentelemetry.exporter.otlp.proto.grpc import trace_exporter as traces
    elif protocol in ("http/protobuf", "http"):
        from opentelemetry.exporter.otlp.proto.http import (  # type: ignore[no-redef]
            _log_exporter as logs,
        )
        from opentelemetry.exporter.otlp.proto.http import (  # type: ignore[no-redef]
            metric_exporter as metrics_,
        )
        from opentelemetry.exporter.otlp.proto.http import (  # type: ignore[no-redef]
            trace_exporter as traces,
        )
    else:
        raise ValueError(f"unsupported OTLP protocol {protocol!r} (use grpc or http/protobuf)")
    if endpoint is None:
        return traces.OTLPSpanExporter(), metrics_.OTLPMetricExporter(), logs.OTLPLogExporter()
    if protocol == "grpc":
        return (traces.OTLPSpanExporter(endpoint=endpoint),
                metrics_.OTLPMetricExporter(endpoint=endpoint),
                logs.OTLPLogExporter(endpoint=endpoint))
    base = endpoint.rstrip("/")
    return (traces.OTLPSpanExporter(endpoint=f"{base}/v1/traces"),
            metrics_.OTLPMetricExporter(endpoint=f"{base}/v1/metrics"),
            logs.OTLPLogExporter(endpoint=f"{base}/v1/logs"))


def install(config: Any = None, *, service_name: str | None = None,
            protocol: str | None = None, endpoint: str | None = None,
            span_exporter: SpanExporter | None = None,
            metric_exporter: MetricExporter | None = None,
            log_exporter: LogRecordExporter | None = None,
            set_global: bool = True, **processor_options: Any) -> Installation:
    """Set up tracer, meter and logger providers exporting over OTLP, with live grading.

    Args:
        config: grader config (path, YAML text, mapping); None reads ``TOOLEVAL_CONFIG``.
        service_name: ``service.name`` of the resource (default from ``OTEL_SERVICE_NAME``).
        protocol: ``grpc`` or ``http/protobuf``; default ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``,
            else ``OTEL_EXPORTER_OTLP_PROTOCOL``, else ``http/protobuf``.
        endpoint: OTLP endpoint; default ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the exporters' own).
        span_exporter, metric_exporter, log_exporter: use these instead of OTLP.
        set_global: also make the providers the global ones (the usual case).
        processor_options: passed on to ``ToolEvalSpanProcessor`` (e.g. ``on_report``).
    """
    attrs = {"service.name": service_name} if service_name else {}
    resource = Resource.create(attrs)
    if span_exporter is None or metric_exporter is None or log_exporter is None:
        otlp_span, otlp_metric, otlp_log = otlp_exporters(protocol, endpoint)
        span_exporter = span_exporter or otlp_span
        metric_exporter = metric_exporter or otlp_metric
        log_exporter = log_exporter or otlp_log
    meter_provider = MeterProvider(resource=resource,
                                   metric_readers=[PeriodicExportingMetricReader(metric_exporter)])
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter))
    processor = ToolEvalSpanProcessor(config, BatchSpanProcessor(span_exporter),
                                      meter_provider=meter_provider,
                                      logger_provider=logger_provider, **processor_options)
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(processor)
    if set_global:
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
        _logs.set_logger_provider(logger_provider)
    return Installation(tracer_provider, meter_provider, logger_provider, processor)
