"""Record one OpenAI Agents SDK (Python) run of the scripted weather script into traces.jsonl.

The SDK's own tracing (its trace/span processors) exported over OpenTelemetry by OpenInference's
OpenAIAgentsInstrumentor (an exclusive processor: nothing goes to OpenAI's trace backend), into
an SDK TracerProvider with our file exporter. The agent's model is the SDK's
OpenAIChatCompletionsModel on an AsyncOpenAI client pointed at the scripted server on 127.0.0.1.
"""

import asyncio
import os
import sys
from pathlib import Path

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.pop("OTEL_SDK_DISABLED", None)
os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)  # nothing leaves the machine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # scripted_openai

import scripted_openai as so
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
from openai import AsyncOpenAI
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_tooleval import OTLPJsonFileExporter

OUT = Path("traces.jsonl")


async def run(base_url: str) -> str:
    client = AsyncOpenAI(api_key="scripted", base_url=base_url)
    agent = Agent(
        name="weather_agent",
        instructions="Answer with the tools.",
        model=OpenAIChatCompletionsModel(model="scripted", openai_client=client),
        tools=[function_tool(so.lookup_city), function_tool(so.get_weather),
               function_tool(so.convert_temp)],
    )
    result = await Runner.run(agent, so.PROMPT)
    return str(result.final_output).strip()


def main() -> None:
    OUT.unlink(missing_ok=True)
    provider = TracerProvider(resource=Resource.create({"service.name": "openai-agents-weather"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileExporter(OUT)))
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)

    with so.serve() as (base_url, requests):
        answer = asyncio.run(run(base_url))
    provider.force_flush()
    provider.shutdown()

    assert answer == so.FINAL_ANSWER, answer
    assert len(requests) == 4, f"{len(requests)} model requests"
    assert OUT.exists() and OUT.stat().st_size > 0, OUT
    print(f"ok: {answer!r}, {len(requests)} model requests, {OUT.resolve()}")


if __name__ == "__main__":
    main()
