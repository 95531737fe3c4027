"""Record one Microsoft Agent Framework run against the scripted model: traces.jsonl.

The framework's own OpenTelemetry instrumentation (agent_framework.observability), turned on
with ``enable_instrumentation(enable_sensitive_data=True)`` over our own global tracer
provider, as its docs say for an application that sets up its providers itself. The agent is
``Agent`` (ChatAgent before 1.0) named ``weather_agent`` on ``OpenAIChatCompletionClient``:
in 1.x ``OpenAIChatClient`` speaks the Responses API, the chat-completions client is this one.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ["AGENT_FRAMEWORK_USER_AGENT_DISABLED"] = "true"  # no telemetry in the User-Agent
os.environ.pop("OTEL_SDK_DISABLED", None)
for name in ("ENABLE_INSTRUMENTATION", "ENABLE_SENSITIVE_DATA", "OTEL_SEMCONV_STABILITY_OPT_IN",
             "OPENAI_API_KEY", "OPENAI_BASE_URL"):
    os.environ.pop(name, None)

from agent_framework import Agent
from agent_framework.observability import enable_instrumentation
from agent_framework.openai import OpenAIChatCompletionClient
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from scripted_openai import FINAL_ANSWER, PROMPT, convert_temp, get_weather, lookup_city, serve

from otel_tooleval import OTLPJsonFileExporter

OUT = HERE / "traces.jsonl"


async def run(base_url: str) -> str:
    client = OpenAIChatCompletionClient(model="scripted", base_url=base_url, api_key="scripted")
    agent = Agent(
        client=client,
        name="weather_agent",
        instructions="You answer weather questions with the tools.",
        tools=[lookup_city, get_weather, convert_temp],
    )
    response = await agent.run(PROMPT)
    return response.text


def main() -> None:
    OUT.unlink(missing_ok=True)
    provider = TracerProvider(resource=Resource.create({"service.name": "maf-weather"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileExporter(OUT)))
    trace.set_tracer_provider(provider)
    enable_instrumentation(enable_sensitive_data=True)
    with serve() as (base_url, requests):
        answer = asyncio.run(run(base_url))
    provider.shutdown()
    assert answer == FINAL_ANSWER, answer
    assert len(requests) == 4, f"{len(requests)} model requests"
    assert OUT.is_file() and OUT.stat().st_size, OUT
    print(f"wrote {OUT.name}: answer {answer!r}, {len(requests)} model requests")


if __name__ == "__main__":
    main()
