"""Record one AutoGen AgentChat run against the scripted model: traces.jsonl.

AutoGen's own OpenTelemetry tracing (autogen-core's GenAI spans), which uses the global
tracer provider; no instrumentor. The AssistantAgent ``weather_agent`` is run directly with
``agent.run(task=...)`` (no team, so no agent-runtime messaging spans).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.pop("OTEL_SDK_DISABLED", None)
os.environ.pop("AUTOGEN_DISABLE_RUNTIME_TRACING", None)

from autogen_agentchat.agents import AssistantAgent
from autogen_ext.models.openai import OpenAIChatCompletionClient
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from scripted_openai import FINAL_ANSWER, PROMPT, convert_temp, get_weather, lookup_city, serve

from otel_tooleval import OTLPJsonFileExporter

OUT = HERE / "traces.jsonl"


async def run(base_url: str) -> str:
    client = OpenAIChatCompletionClient(
        model="scripted",
        base_url=base_url,
        api_key="scripted",
        model_info={"vision": False, "function_calling": True, "json_output": False,
                    "family": "unknown", "structured_output": False,
                    "multiple_system_messages": True},
    )
    agent = AssistantAgent(
        "weather_agent",
        model_client=client,
        tools=[lookup_city, get_weather, convert_temp],
        system_message="You answer weather questions with the tools.",
        max_tool_iterations=4,  # three tool-call turns, then the answer
        reflect_on_tool_use=True,
    )
    result = await agent.run(task=PROMPT)
    await client.close()
    return str(result.messages[-1].content)


def main() -> None:
    OUT.unlink(missing_ok=True)
    provider = TracerProvider(resource=Resource.create({"service.name": "autogen-weather"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileExporter(OUT)))
    trace.set_tracer_provider(provider)
    with serve() as (base_url, requests):
        answer = asyncio.run(run(base_url))
    provider.shutdown()
    assert answer == FINAL_ANSWER, answer
    assert len(requests) == 4, f"{len(requests)} model requests"
    assert OUT.is_file() and OUT.stat().st_size, OUT
    print(f"wrote {OUT.name}: answer {answer!r}, {len(requests)} model requests")


if __name__ == "__main__":
    main()
