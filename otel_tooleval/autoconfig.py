"""Zero-code set-up: grading an unmodified program run under ``opentelemetry-instrument``.

Two routes, both reading the grader config from ``TOOLEVAL_CONFIG`` (a YAML or JSON file):

- **Exporter** (entry points in ``opentelemetry_traces_exporter``)::

      OTEL_TRACES_EXPORTER=tooleval_otlp TOOLEVAL_CONFIG=graders.yaml opentelemetry-instrument python app.py

  ``tooleval_otlp_proto_grpc`` and ``tooleval_otlp_proto_http`` wrap the OTLP exporter of that
  protocol in a ``ToolEvalSpanExporter``; ``tooleval_otlp`` picks the protocol as every
  otel-tooleval front door does (``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else
  ``OTEL_EXPORTER_OTLP_PROTOCOL``, else http/protobuf, the OTel spec's default; the SDK's own
  ``otlp`` defaults to gRPC). ``TOOLEVAL_DECISION_WAIT`` (seconds, default 1) is how long a trace stays open
  after its root arrived.
- **Configurator** (``OTEL_PYTHON_CONFIGURATOR=tooleval``): the SDK's own environment
  configuration, with every exporting span processor it builds wrapped in a
  ``ToolEvalSpanProcessor`` (live grading, no decision wait).

Verdict metrics and log events go to the global meter and logger providers (set up by the same
configurator from ``OTEL_METRICS_EXPORTER``/``OTEL_LOGS_EXPORTER``, after the exporter exists:
the API's proxies hand them over). A missing or invalid config never stops the program: the
error is logged (naming the variable, the file and the bad field) and spans go on ungraded.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import TYPE_CHECKING, Any, ClassVar

from ._exit import register_drain
from .config import ConfigError, ToolEvalConfig, load_config
from .exporter import UNGRADED, ToolEvalSpanExporter
from .otlp_protocol import otlp_traces_protocol

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = [
    "CONFIGURATOR_NAME",
    "ENV_CONFIG",
    "ENV_DECISION_WAIT",
    "ToolEvalConfigurator",
    "ToolEvalOTLPGrpcSpanExporter",
    "ToolEvalOTLPHttpSpanExporter",
    "ToolEvalOTLPSpanExporter",
    "config_from_env",
    "decision_wait_from_env",
]

_log = logging.getLogger(__name__)

ENV_CONFIG = "TOOLEVAL_CONFIG"
ENV_DECISION_WAIT = "TOOLEVAL_DECISION_WAIT"
CONFIGURATOR_NAME = "tooleval"
DEFAULT_DECISION_WAIT = 1.0


def config_from_env() -> ToolEvalConfig | None:
    """The config named by ``TOOLEVAL_CONFIG``; None (with the reason logged) if unusable."""
    source = os.environ.get(ENV_CONFIG, "").strip()
    if not source:
        _log.error("otel-tooleval: %s is not set; spans are exported ungraded "
                   "(set it to your graders.yaml)", ENV_CONFIG)
        return None
    try:
        return load_config(source)
    except ConfigError as exc:
        _log.error("otel-tooleval: %s=%s is not usable, spans are exported ungraded: %s",
                   ENV_CONFIG, source, exc)
    except Exception as exc:  # noqa: BLE001 - never stop the host program
        _log.error("otel-tooleval: %s=%s could not be loaded, spans are exported ungraded: "
                   "%s: %s", ENV_CONFIG, source, type(exc).__name__, exc)
    return None


def decision_wait_from_env() -> float:
    """``TOOLEVAL_DECISION_WAIT`` in seconds (default 1); a bad value is logged and ignored."""
    raw = os.environ.get(ENV_DECISION_WAIT, "").strip()
    if not raw:
        return DEFAULT_DECISION_WAIT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        _log.error("otel-tooleval: %s=%r is not a number of seconds >= 0; using %s",
                   ENV_DECISION_WAIT, raw, DEFAULT_DECISION_WAIT)
        return DEFAULT_DECISION_WAIT
    return value


def _otlp_span_exporter(protocol: str) -> SpanExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[assignment]
        OTLPSpanExporter,
    )
    return OTLPSpanExporter()


# -- route 1: exporters built with no arguments by the SDK's configurator ------------------------

class ToolEvalOTLPSpanExporter(ToolEvalSpanExporter):
    """``OTEL_TRACES_EXPORTER=tooleval_otlp``: OTLP over ``otlp_traces_protocol()``
    (http/protobuf unless ``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL`` says grpc).

    Built with no arguments; reads ``TOOLEVAL_CONFIG`` and ``TOOLEVAL_DECISION_WAIT``, and the
    ``OTEL_EXPORTER_OTLP_*`` variables through the OTLP exporter itself.
    """

    protocol: ClassVar[str | None] = None

    def __init__(self) -> None:
        exporter = _otlp_span_exporter(self.protocol or otlp_traces_protocol())
        config = config_from_env()
        wait = decision_wait_from_env()
        try:
            super().__init__(exporter, UNGRADED if config is None else config,
                             decision_wait=wait)
        except Exception:  # noqa: BLE001 - never stop the host program
            _log.exception("otel-tooleval: could not set grading up; spans are exported "
                           "ungraded")
            super().__init__(exporter, UNGRADED)


class ToolEvalOTLPGrpcSpanExporter(ToolEvalOTLPSpanExporter):
    """``OTEL_TRACES_EXPORTER=tooleval_otlp_proto_grpc``."""

    protocol = "grpc"


class ToolEvalOTLPHttpSpanExporter(ToolEvalOTLPSpanExporter):
    """``OTEL_TRACES_EXPORTER=tooleval_otlp_proto_http``."""

    protocol = "http/protobuf"


# -- route 2: the configurator -------------------------------------------------------------------

def _annotations_only(config: ToolEvalConfig) -> ToolEvalConfig:
    """The config for a second exporter's processor: verdicts on its spans, no second copy of
    the log events and metrics."""
    emit = config.emit.model_copy(update={"log_events": False, "metrics": False})
    return dataclasses.replace(config, emit=emit)


class ToolEvalConfigurator:
    """``opentelemetry_configurator`` entry point ``tooleval``.

    Selected with ``OTEL_PYTHON_CONFIGURATOR=tooleval``: sets the SDK up from the ``OTEL_*``
    variables as the SDK's configurator does, and registers each exporting span processor
    (``BatchSpanProcessor(exporter)`` per ``OTEL_TRACES_EXPORTER`` entry) inside a
    ``ToolEvalSpanProcessor`` with the config from ``TOOLEVAL_CONFIG``. The first one also
    emits the log events and metrics; the others only annotate their root copies.

    ``opentelemetry-instrument`` loads the first configurator it finds when
    ``OTEL_PYTHON_CONFIGURATOR`` is unset; then (and whenever ``OTEL_CONFIG_FILE`` selects the
    SDK's declarative configuration) this one does exactly what the SDK's own does, no grading.
    """

    def configure(self, **kwargs: Any) -> None:
        from ._compat import sdk_configure

        selected = os.environ.get("OTEL_PYTHON_CONFIGURATOR", "").strip()
        if selected != CONFIGURATOR_NAME:
            sdk_configure(**kwargs)
            return
        if os.environ.get("OTEL_CONFIG_FILE"):
            _log.warning("otel-tooleval: OTEL_CONFIG_FILE is set, so the SDK's declarative "
                         "configuration is used as it is; add the ToolEvalSpanProcessor there "
                         "(or a ToolEvalSpanExporter) to grade")
            sdk_configure(**kwargs)
            return
        config = config_from_env()
        if config is None:
            sdk_configure(**kwargs)
            return
        self._configure_grading(config, **kwargs)

    @staticmethod
    def _configure_grading(config: ToolEvalConfig, **kwargs: Any) -> None:
        from opentelemetry import trace

        from ._compat import sdk_initialize_wrapping
        from .processor import ToolEvalSpanProcessor

        processors: list[ToolEvalSpanProcessor] = []
        grading_exporters: list[Any] = []

        def wrap(export_processor: SpanProcessor) -> SpanProcessor:
            exporter = getattr(export_processor, "span_exporter", None)
            if isinstance(exporter, ToolEvalSpanExporter) and exporter.grading:
                grading_exporters.append(exporter)
                return export_processor   # it grades already; grading twice would double up
            first = not processors
            processor = ToolEvalSpanProcessor(config if first else _annotations_only(config),
                                              downstream=export_processor)
            processors.append(processor)
            return processor

        sdk_initialize_wrapping(wrap, **kwargs)
        if grading_exporters:
            _log.warning("otel-tooleval: OTEL_TRACES_EXPORTER names a tooleval exporter; its "
                         "spans are graded there, not again by the tooleval configurator")
        elif not processors:
            # No trace exporter configured: grade anyway, for the log events and metrics.
            provider = trace.get_tracer_provider()
            add = getattr(provider, "add_span_processor", None)
            if callable(add):
                ungraded = ToolEvalSpanProcessor(config)
                ungraded.expect_downstream = False   # on purpose: no trace exporter
                add(ungraded)
        register_drain()
