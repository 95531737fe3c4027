"""Verdicts as log-based events, in the root span's context."""

from __future__ import annotations

from typing import Any

from opentelemetry._logs import LoggerProvider, LogRecord, get_logger_provider
from opentelemetry.trace import NonRecordingSpan, SpanContext, set_span_in_context

from ..model import RunReport
from .span import EVENT_NAME, result_attributes

__all__ = ["LogEvents"]


class LogEvents:
    """Emits one ``gen_ai.evaluation.result`` LogRecord per grader and run."""

    def __init__(self, logger_provider: LoggerProvider | None, version: str) -> None:
        provider = logger_provider if logger_provider is not None else get_logger_provider()
        self._logger = provider.get_logger("otel_tooleval", version)

    def emit(self, report: RunReport, root_context: SpanContext, timestamp: int) -> None:
        context = set_span_in_context(NonRecordingSpan(root_context))
        agent = report.run.agent
        for result in report.results:
            attrs: dict[str, Any] = result_attributes(result)
            if agent:
                attrs["gen_ai.agent.name"] = agent
            self._logger.emit(LogRecord(
                timestamp=timestamp,
                context=context,
                event_name=EVENT_NAME,
                attributes=attrs,
            ))
