"""A pydantic-ai weather agent on a scripted model, graded live by otel-tooleval.

    python examples/pydantic_ai/agent.py            # offline; one verdict line per run
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 python examples/pydantic_ai/agent.py

The agent is traced by pydantic-ai's own OpenTelemetry instrumentation (``Agent.instrument_all()``,
GenAI semantic conventions: ``invoke_agent`` / ``chat`` / ``execute_tool`` spans). The model is a
``FunctionModel`` that replays a script, so nothing leaves the machine and no API key is needed.
Two runs are played: one by the book (PASS) and one that calls ``get_weather`` twice and never
converts the temperature (FAIL: ``trajectory`` and ``no-weather-spam``, see graders.yaml).

With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, ``otel_tooleval.install()`` exports traces (the root
spans carry the verdicts), log events and metrics over OTLP; without it the spans stay in memory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import otel_tooleval

HERE = Path(__file__).resolve().parent
PROMPT = "What's the weather in paris? In Fahrenheit, please."

# One model turn per entry: a list of (tool, arguments) calls, or the final answer.
SCENARIOS: dict[str, list[Any]] = {
    "by-the-book": [
        [("search_city", {"query": "paris"})],
        [("get_weather", {"city": "Paris"})],
        [("convert_temp", {"celsius": 21.0})],
        "Paris: sunny, 21C (69.8F).",
    ],
    "asks-twice": [
        [("search_city", {"query": "paris"})],
        [("get_weather", {"city": "Paris"})],
        [("get_weather", {"city": "Paris"})],
        "Paris: sunny, 21C.",
    ],
}

_WEATHER = {"Paris": {"temp_c": 21.0, "conditions": "sunny"}}


def search_city(query: str) -> str:
    """Resolve a free-text place name to a canonical city name."""
    return query.strip().title()


def get_weather(city: str) -> dict[str, Any]:
    """Current weather of a city, temperature in Celsius."""
    return {"city": city, **_WEATHER.get(city, {"temp_c": None, "conditions": "unknown"})}


def convert_temp(celsius: float) -> float:
    """Convert Celsius to Fahrenheit."""
    return round(celsius * 9 / 5 + 32, 1)


def scripted_model(turns: list[Any]) -> FunctionModel:
    """A model that plays ``turns`` in order (the turn index = model responses so far)."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        index = sum(isinstance(m, ModelResponse) for m in messages)
        turn = turns[index]
        if isinstance(turn, str):
            return ModelResponse(parts=[TextPart(turn)])
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"call_{index}_{i}")
                                    for i, (name, args) in enumerate(turn)])

    return FunctionModel(respond, model_name="scripted")


def start_tooleval(reports: list[otel_tooleval.RunReport]) -> Any:
    """Set up a global tracer provider that grades live; return it (or the OTLP installation).

    Either has ``force_flush()`` (grades every finished run) and ``shutdown()``.
    """
    config = HERE / "graders.yaml"
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        # Traces, metrics and logs over OTLP, configured by the OTEL_EXPORTER_OTLP_* variables.
        return otel_tooleval.install(config, service_name="pydantic-ai-weather",
                                     on_report=reports.append)
    # Offline: the ten lines of docs/python-api.md, with an in-memory exporter instead of OTLP.
    provider = TracerProvider()
    provider.add_span_processor(otel_tooleval.ToolEvalSpanProcessor(
        config, downstream=SimpleSpanProcessor(InMemorySpanExporter()), on_report=reports.append))
    trace.set_tracer_provider(provider)
    return provider


def main() -> None:
    reports: list[otel_tooleval.RunReport] = []
    telemetry = start_tooleval(reports)
    Agent.instrument_all()  # pydantic-ai's OTel instrumentation, into the global tracer provider
    agent = Agent(name="weather_agent", instructions="Answer with the tools.",
                  tools=[search_city, get_weather, convert_temp])
    for scenario, turns in SCENARIOS.items():
        done = len(reports)
        agent.run_sync(PROMPT, model=scripted_model(turns))
        telemetry.force_flush()  # grades the finished run (grading runs off this thread)
        for report in reports[done:]:
            failed = ", ".join(report.failed) or "-"
            print(f"{report.run.trace_id_hex}  {'PASS' if report.passed else 'FAIL'}  "
                  f"{scenario}  failed: {failed}")
    telemetry.shutdown()


if __name__ == "__main__":
    main()
