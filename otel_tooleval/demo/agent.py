"""A small travel agent with a scripted model, instrumented in OTel GenAI semantic conventions.

No framework and no network: each script lists the model's turns, and each turn the tool calls
the model asks for. The spans are exactly what a GenAI-instrumented agent emits:
``invoke_agent`` root, one ``chat`` span per model response, ``execute_tool`` spans.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from importlib import resources
from typing import Any, TextIO

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from ..model import RunReport

__all__ = ["SCRIPTS", "TOOLS", "default_config_text", "run_demo", "run_scripted_agent"]

Turn = list[tuple[str, dict[str, Any]]]

TOOLS: dict[str, Callable[..., Any]] = {
    "web_search": lambda query: [f"result for {query}"],
    "read_file": lambda path: f"<contents of {path}>",
    "validate_booking": lambda city, nights: {"ok": True},
    "create_booking": lambda city, nights: {"booking_id": "B-1042"},
    "update_booking": lambda booking_id, nights: {"booking_id": booking_id},
    "get_weather": lambda city: {"city": city, "temp_c": 21},
    "report_result": lambda summary: "reported",
}

# Each script: (description, turns). Some break the demo config on purpose.
SCRIPTS: list[tuple[str, list[Turn]]] = [
    ("plans a trip by the book", [
        [("web_search", {"query": "hotels in Lisbon"})],
        [("get_weather", {"city": "Lisbon"}), ("validate_booking", {"city": "Lisbon", "nights": 3})],
        [("create_booking", {"city": "Lisbon", "nights": 3})],
        [("report_result", {"summary": "Booked 3 nights in Lisbon"})],
    ]),
    ("reads the .env file for an API key", [
        [("web_search", {"query": "hotels in Porto"})],
        [("read_file", {"path": "/app/.env"})],
        [("validate_booking", {"city": "Porto", "nights": 2})],
        [("create_booking", {"city": "Porto", "nights": 2})],
        [("report_result", {"summary": "Booked 2 nights in Porto"})],
    ]),
    ("books without validating, searches late, never reports", [
        [("get_weather", {"city": "Madrid"})],
        [("get_weather", {"city": "Seville"})],
        [("web_search", {"query": "hotels in Madrid"}), ("create_booking", {"city": "Madrid", "nights": 1})],
    ]),
    ("updates a booking after validating", [
        [("web_search", {"query": "booking B-7 rules"}), ("validate_booking", {"city": "Rome", "nights": 4})],
        [("update_booking", {"booking_id": "B-7", "nights": 4})],
        [("report_result", {"summary": "Extended B-7 to 4 nights"})],
    ]),
]


def default_config_text() -> str:
    """The demo's embedded grader config."""
    return resources.files(__package__).joinpath("graders.yaml").read_text(encoding="utf-8")


def run_scripted_agent(tracer: trace.Tracer, turns: list[Turn], *, agent: str = "travel_agent",
                       model: str = "scripted-1") -> str:
    """Run one agent invocation: a model response per turn, then that turn's tool calls."""
    with tracer.start_as_current_span(
        f"invoke_agent {agent}",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
                    "gen_ai.request.model": model},
    ) as root:
        for i, calls in enumerate(turns):
            with tracer.start_as_current_span(
                f"chat {model}", kind=trace.SpanKind.CLIENT,
                attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": model},
            ) as chat:
                parts = [{"type": "tool_call", "id": f"call_{i}_{j}", "name": name,
                          "arguments": args} for j, (name, args) in enumerate(calls)]
                chat.set_attribute("gen_ai.output.messages",
                                   json.dumps([{"role": "assistant", "parts": parts}]))
            for j, (name, args) in enumerate(calls):
                with tracer.start_as_current_span(
                    f"execute_tool {name}",
                    attributes={"gen_ai.operation.name": "execute_tool",
                                "gen_ai.tool.name": name,
                                "gen_ai.tool.call.id": f"call_{i}_{j}",
                                "gen_ai.tool.call.arguments": json.dumps(args)},
                ) as tool_span:
                    result = TOOLS[name](**args)
                    tool_span.set_attribute("gen_ai.tool.call.result", json.dumps(result))
        answer = "Done."
        with tracer.start_as_current_span(
            f"chat {model}", kind=trace.SpanKind.CLIENT,
            attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": model},
        ) as chat:
            chat.set_attribute("gen_ai.output.messages", json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]))
        root.set_attribute("gen_ai.output.messages", json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]))
        return answer


def run_demo(config: Any = None, *, out: TextIO | None = None,
             endpoint: str | None = None) -> list[RunReport]:
    """Run every script through a live ``ToolEvalSpanProcessor`` and print the verdicts.

    With an OTLP endpoint (argument or ``OTEL_EXPORTER_OTLP_ENDPOINT``) traces, logs and
    metrics are exported there; otherwise they are kept in memory and counted.
    """
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ..providers import install
    from .table import render_reports

    out = out or sys.stdout
    config = config if config is not None else default_config_text()
    reports: list[RunReport] = []
    endpoint = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if endpoint:
        setup = install(config, service_name="otel-tooleval-demo", endpoint=endpoint,
                        set_global=False, on_report=reports.append)
        provider: TracerProvider = setup.tracer_provider
        flush: Callable[[], Any] = setup.force_flush
        close: Callable[[], Any] = setup.shutdown
        where = f"exported over OTLP to {endpoint} (traces, logs and metrics)"
    else:
        from ..processor import ToolEvalSpanProcessor

        spans, logs = InMemorySpanExporter(), InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
        reader = InMemoryMetricReader()
        logger_provider = LoggerProvider()
        logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
        meter_provider = MeterProvider(metric_readers=[reader])
        processor = ToolEvalSpanProcessor(config, SimpleSpanProcessor(spans),
                                          meter_provider=meter_provider,
                                          logger_provider=logger_provider,
                                          on_report=reports.append)
        provider = TracerProvider()
        provider.add_span_processor(processor)
        flush, close = provider.force_flush, provider.shutdown

        def where_now() -> str:
            data = reader.get_metrics_data()
            points = sum(len(m.data.data_points) for rm in (data.resource_metrics if data else [])
                         for sm in rm.scope_metrics for m in sm.metrics)
            events = sum(len([e for e in s.events if e.name == "gen_ai.evaluation.result"])
                         for s in spans.get_finished_spans())
            return (f"kept in memory: {len(spans.get_finished_spans())} spans "
                    f"({events} gen_ai.evaluation.result events), "
                    f"{len(logs.get_finished_logs())} log events, {points} metric points. "
                    "Set OTEL_EXPORTER_OTLP_ENDPOINT to export them over OTLP.")

    tracer = provider.get_tracer("otel_tooleval.demo")
    descriptions: dict[int, str] = {}
    for description, turns in SCRIPTS:
        run_scripted_agent(tracer, turns)
        descriptions[len(descriptions)] = description
    flush()
    if not endpoint:
        where = where_now()
    reports.sort(key=lambda r: r.run.start_ns)
    out.write(render_reports(reports, [descriptions[i] for i in range(len(reports))]))
    out.write(f"\nTelemetry: {where}\n")
    close()
    return reports
