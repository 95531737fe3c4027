"""Verdicts as log-based events, in the root span's context."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry._logs import LoggerProvider, LogRecord, get_logger_provider
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, set_span_in_context

from ..model import Verdicts
from .span import EVENT_NAME, result_attributes

__all__ = ["LogEvents"]


class LogEvents:
    """Emits one ``gen_ai.evaluation.result`` LogRecord per grader and run."""

    def __init__(self, logger_provider: LoggerProvider | None, version: str) -> None:
        provider = logger_provider if logger_provider is not None else get_logger_provider()
        self._logger = provider.get_logger("otel_tooleval", version)
        # ``Logger.enabled`` (newer APIs; 1.39 has none): False from the no-op logger (no
        # LoggerProvider set, the common case) and from an SDK logger none of whose processors
        # would take the record. Building the records is most of this class's cost, so it is
        # asked first.
        self._enabled: Callable[..., Any] | None = getattr(self._logger, "enabled", None)

    def emit(self, report: Verdicts, root_context: SpanContext, timestamp: int, *,
             extra: Mapping[str, Any] | None = None) -> None:
        """One record per result, in ``root_context``; ``extra`` attributes on each (a
        session's key)."""
        if not report.results:   # no grader applied: nothing to emit, no context to build
            return
        context = set_span_in_context(NonRecordingSpan(root_context))
        if not self._wanted(context):
            return
        agent = report.agent
        for result in report.results:
            attrs: dict[str, Any] = result_attributes(result)
            if agent:
                attrs["gen_ai.agent.name"] = agent
            if extra:
                attrs.update(extra)
            self._logger.emit(LogRecord(
                timestamp=timestamp,
                context=context,
                event_name=EVENT_NAME,
                attributes=attrs,
            ))

    def _wanted(self, context: Context) -> bool:
        """Whether the logger would emit the records (asked each time: a provider set later
        replaces the no-op logger behind the global proxy)."""
        if self._enabled is None:
            return True
        try:
            return bool(self._enabled(context=context, event_name=EVENT_NAME))
        except Exception:  # noqa: BLE001 - enabled() failing: emit, as without the check
            return True
