"""An OpenAI Agents SDK weather agent on a scripted model, graded live by otel-tooleval.

    python examples/openai_agents/agent.py            # offline; one verdict line per run
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 python examples/openai_agents/agent.py

The SDK's traces are turned into OpenTelemetry spans by OpenInference's
``OpenAIAgentsInstrumentor``: the workflow is the root ``AGENT`` span, each model call an ``LLM``
span and each function tool a ``TOOL`` span with ``tool.name``. The model is an
``agents.models.interface.Model`` that replays a script, so no API key is needed and nothing
leaves the machine:

* the instrumentor's default ``exclusive_processor=True`` *replaces* the SDK's own trace
  processor (the one that uploads traces to OpenAI), so nothing is sent there. Do not call
  ``set_tracing_disabled(True)`` or set ``OPENAI_AGENTS_DISABLE_TRACING``: that turns the SDK's
  tracing off altogether, and OpenInference would see nothing either;
* ``RunConfig(model=...)`` gives every agent the scripted model, so no OpenAI client is made.

Two runs are played: one that looks up two cities and computes the difference (PASS) and one
that e-mails the user instead of answering (FAIL: ``no-unapproved-email`` and ``trajectory``).

With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, ``otel_tooleval.install()`` exports traces (the root
spans carry the verdicts), log events and metrics over OTLP; without it the spans stay in memory.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import Agent, ModelResponse, RunConfig, Runner, Usage, function_tool
from agents.models.chatcmpl_converter import Converter
from agents.models.interface import Model, ModelTracing
from agents.tracing import generation_span
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_tooleval

HERE = Path(__file__).resolve().parent
WORKFLOW = "weather_agent"  # the root span's name, which is the run's agent name
PROMPT = "How much warmer is Paris than Lyon today?"

# One model turn per entry: a list of (tool, arguments) calls, or the final answer.
SCENARIOS: dict[str, list[Any]] = {
    "answers-in-chat": [
        [("get_weather", {"city": "Paris"})],
        [("get_weather", {"city": "Lyon"})],
        [("calculator", {"expression": "21 - 18"})],
        "Paris (21C, sunny) is 3C warmer than Lyon (18C, cloudy).",
    ],
    "emails-the-user": [
        [("get_weather", {"city": "Paris"})],
        [("get_weather", {"city": "Lyon"})],
        [("send_email", {"to": "user@example.com", "subject": "Weather",
                         "body": "Paris is 3C warmer than Lyon."})],
        "I have e-mailed you the answer.",
    ],
}

_WEATHER = {"Paris": (21, "sunny"), "Lyon": (18, "cloudy")}


@function_tool
def get_weather(city: str) -> str:
    """Current weather of a city."""
    temp, conditions = _WEATHER.get(city, (None, "unknown"))
    return f"{city}: {temp}C, {conditions}"


@function_tool
def calculator(expression: str) -> str:
    """Evaluate 'a - b' or 'a + b' for two integers."""
    left, op, right = expression.split()
    return str(int(left) - int(right) if op == "-" else int(left) + int(right))


@function_tool
def send_email(to: str, subject: str, body: str) -> str:
    """Send an e-mail (this example only pretends to)."""
    return f"queued for {to}"


class ScriptedModel(Model):
    """A ``Model`` that plays ``turns`` in order, traced like the SDK's chat-completions models.

    It counts its own calls, so each run gets a fresh instance.
    """

    def __init__(self, turns: list[Any]) -> None:
        self.turns = turns
        self.index = 0

    async def get_response(self, system_instructions: str | None, input: Any,
                           model_settings: Any, tools: Any, output_schema: Any, handoffs: Any,
                           tracing: ModelTracing, **kwargs: Any) -> ModelResponse:
        turn, index = self.turns[self.index], self.index
        self.index += 1
        # A generation span becomes an OpenInference LLM span: one model step per turn.
        with generation_span(model="scripted", disabled=tracing.is_disabled()) as span:
            if isinstance(turn, str):
                output: list[Any] = [ResponseOutputMessage(
                    id=f"msg_{index}", type="message", role="assistant", status="completed",
                    content=[ResponseOutputText(type="output_text", text=turn, annotations=[])])]
                message: dict[str, Any] = {"role": "assistant", "content": turn}
            else:
                output = [ResponseFunctionToolCall(
                    id=f"fc_{index}_{i}", call_id=f"call_{index}_{i}", type="function_call",
                    name=name, arguments=json.dumps(args)) for i, (name, args) in enumerate(turn)]
                message = {"role": "assistant", "tool_calls": [
                    {"id": o.call_id, "type": "function",
                     "function": {"name": o.name, "arguments": o.arguments}} for o in output]}
            if tracing.include_data():  # chat-completions messages, as OpenInference reads them
                messages: list[Any] = Converter.items_to_messages(input)
                if system_instructions:
                    messages.insert(0, {"role": "system", "content": system_instructions})
                span.span_data.input = messages
                span.span_data.output = [message]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("this example runs without streaming")


def start_tooleval(reports: list[otel_tooleval.RunReport]) -> Any:
    """Set up a global tracer provider that grades live; return it (or the OTLP installation).

    Either has ``force_flush()`` (grades every finished run) and ``shutdown()``.
    """
    config = HERE / "graders.yaml"
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        # Traces, metrics and logs over OTLP, configured by the OTEL_EXPORTER_OTLP_* variables.
        return otel_tooleval.install(config, service_name="openai-agents-weather",
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
    # OpenInference, into the global tracer provider; replaces the SDK's upload to OpenAI.
    OpenAIAgentsInstrumentor().instrument()
    agent = Agent(name="weather_agent", instructions="Answer with the tools.",
                  tools=[get_weather, calculator, send_email])
    for scenario, turns in SCENARIOS.items():
        done = len(reports)
        Runner.run_sync(agent, PROMPT, run_config=RunConfig(
            model=ScriptedModel(turns), workflow_name=WORKFLOW))
        telemetry.force_flush()  # grades the finished run (grading runs off this thread)
        for report in reports[done:]:
            failed = ", ".join(report.failed) or "-"
            print(f"{report.run.trace_id_hex}  {'PASS' if report.passed else 'FAIL'}  "
                  f"{scenario}  failed: {failed}")
    # No uninstrument() here: it would put the SDK's upload-to-OpenAI processor back.
    telemetry.shutdown()


if __name__ == "__main__":
    main()
