"""Record one Google ADK run of the scripted weather script into traces.jsonl.

ADK's native OpenTelemetry tracing (its spans go to the global TracerProvider, as ADK's docs
show for any OTel backend), an LlmAgent named weather_agent on LiteLlm('openai/scripted') pointed
at the scripted server on 127.0.0.1, run once through an InMemoryRunner.
"""

import asyncio
import os
import sys
from pathlib import Path

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # no model-price download from GitHub
# ADK 2's default telemetry schema (v2, GenAI semconv aligned) puts message and tool content on
# spans only in the span-bearing capture modes; "true" would mean EVENT_ONLY (log records).
os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
os.environ.pop("OTEL_SDK_DISABLED", None)
for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "GOOGLE_CLOUD_AGENT_ENGINE_ID"):
    os.environ.pop(var, None)  # nothing leaves the machine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # scripted_openai

import scripted_openai as so
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_tooleval import OTLPJsonFileExporter

OUT = Path("traces.jsonl")


async def run(base_url: str) -> str:
    from google.adk.agents import LlmAgent
    from google.adk.models.lite_llm import LiteLlm
    from google.adk.runners import InMemoryRunner
    from google.adk.tools import FunctionTool
    from google.genai import types

    agent = LlmAgent(
        name="weather_agent",
        model=LiteLlm(model="openai/scripted", api_base=base_url, api_key="scripted"),
        instruction="Answer weather questions with the tools.",
        tools=[FunctionTool(so.lookup_city), FunctionTool(so.get_weather),
               FunctionTool(so.convert_temp)],
    )
    runner = InMemoryRunner(agent=agent, app_name="weather_app")
    session = await runner.session_service.create_session(app_name="weather_app", user_id="u1")
    answer = ""
    async for event in runner.run_async(
            user_id="u1", session_id=session.id,
            new_message=types.Content(role="user", parts=[types.Part(text=so.PROMPT)])):
        if event.is_final_response() and event.content and event.content.parts:
            answer = "".join(p.text or "" for p in event.content.parts)
    await runner.close()
    return answer


def main() -> None:
    OUT.unlink(missing_ok=True)
    provider = TracerProvider(resource=Resource.create({"service.name": "adk-weather"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileExporter(OUT)))
    trace.set_tracer_provider(provider)

    with so.serve() as (base_url, requests):
        answer = asyncio.run(run(base_url)).strip()
    provider.force_flush()
    provider.shutdown()

    assert answer == so.FINAL_ANSWER, answer
    assert len(requests) == 4, f"{len(requests)} model requests"
    assert OUT.exists() and OUT.stat().st_size > 0, OUT
    print(f"ok: {answer!r}, {len(requests)} model requests, {OUT.resolve()}")


if __name__ == "__main__":
    main()
