"""A real TracerProvider with in-memory span, log and metric exporters around the processor."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import RunReport, ToolEvalSpanProcessor

AGENT = {"gen_ai.operation.name": "invoke_agent"}


class VerdictSinks:
    """In-memory log and metric providers for a front door, and the RunReports it makes."""

    def __init__(self) -> None:
        self.logs = InMemoryLogRecordExporter()
        self.reader = InMemoryMetricReader()
        self.logger_provider = LoggerProvider()
        self.logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.logs))
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.reports: list[RunReport] = []

    def front_door_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` with these providers and ``on_report`` collecting into ``reports``."""
        options.setdefault("on_report", self.reports.append)
        return {"meter_provider": self.meter_provider,
                "logger_provider": self.logger_provider, **options}


class Harness(VerdictSinks):
    """Processor + providers; ``reports`` collects every RunReport in grading order."""

    def __init__(self, config: Any, downstream: SpanProcessor | None = None, **options: Any
                 ) -> None:
        super().__init__()
        self.spans = InMemorySpanExporter()
        self.processor = ToolEvalSpanProcessor(
            config, downstream if downstream is not None else SimpleSpanProcessor(self.spans),
            **self.front_door_options(options))
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("tests")

    def flush(self) -> bool:
        return self.processor.force_flush(10_000)

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def by_name(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.name == name]

    def metric_points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        out = []
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == name:
                        out.extend(m.data.data_points)
        return out

    def agent_run(self, calls: list[str], *, agent: str = "agent",
                  args: dict[str, Any] | None = None) -> None:
        """One agent run in GenAI semconv: a chat span per call, then the call."""
        with self.agent(agent):
            for name in calls:
                self.tool(name, args or {})

    @contextmanager
    def agent(self, agent: str = "agent", **attrs: Any) -> Iterator[trace.Span]:
        with self.tracer.start_as_current_span(
                f"invoke_agent {agent}",
                attributes={**AGENT, "gen_ai.agent.name": agent, **attrs}) as span:
            yield span

    def tool(self, name: str, args: dict[str, Any] | None = None, result: Any = "ok") -> None:
        with self.tracer.start_as_current_span("chat m", attributes={"gen_ai.operation.name": "chat"}):
            pass
        with self.tracer.start_as_current_span(
                f"execute_tool {name}",
                attributes={"gen_ai.tool.name": name,
                            "gen_ai.tool.call.arguments": json.dumps(args or {}),
                            "gen_ai.tool.call.result": json.dumps(result)}):
            pass

    def close(self) -> None:
        self.provider.shutdown()
        self.logger_provider.shutdown()
        self.meter_provider.shutdown()
