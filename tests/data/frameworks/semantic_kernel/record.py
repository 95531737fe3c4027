"""Records one Semantic Kernel ChatCompletionAgent run (SK's native OpenTelemetry) into traces.jsonl."""

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
# SK's own GenAI telemetry, with prompts, completions, tool arguments and results (read at import).
os.environ.update(SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS="true",
                  SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS_SENSITIVE="true",
                  AZURE_TELEMETRY_DISABLED="true", DO_NOT_TRACK="1")

outside = []  # connections anywhere but 127.0.0.1


def _audit(event, args):
    if event == "socket.connect" and isinstance(args[1], tuple) and args[1][0] not in ("127.0.0.1", "::1"):
        outside.append(args[1])


sys.addaudithook(_audit)

import scripted_openai
from openai import AsyncOpenAI
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from scripted_openai import FINAL_ANSWER, PROMPT, TOOLS, serve
from semantic_kernel.agents import ChatCompletionAgent
from semantic_kernel.connectors.ai import FunctionChoiceBehavior
from semantic_kernel.connectors.ai.open_ai import OpenAIChatCompletion
from semantic_kernel.functions import kernel_function

from otel_tooleval import OTLPJsonFileExporter

out = HERE / "traces.jsonl"
out.unlink(missing_ok=True)
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileExporter(str(out))))
trace.set_tracer_provider(provider)  # SK traces through the global provider


class WeatherPlugin:
    """The three tools as kernel functions (the shared functions, their docstrings as descriptions)."""

    @kernel_function(name="lookup_city", description=TOOLS["lookup_city"])
    def lookup_city(self, query: str) -> str:
        return scripted_openai.lookup_city(query)

    @kernel_function(name="get_weather", description=TOOLS["get_weather"])
    def get_weather(self, city: str) -> dict[str, Any]:
        return scripted_openai.get_weather(city)

    @kernel_function(name="convert_temp", description=TOOLS["convert_temp"])
    def convert_temp(self, celsius: float) -> float:
        return scripted_openai.convert_temp(celsius)


async def main() -> tuple[str, int]:
    with serve() as (base_url, requests):
        service = OpenAIChatCompletion(ai_model_id="scripted",
                                       async_client=AsyncOpenAI(base_url=base_url, api_key="scripted"))
        weather_agent = ChatCompletionAgent(
            service=service, name="weather_agent", instructions="Answer weather questions with the tools.",
            plugins=[WeatherPlugin()], function_choice_behavior=FunctionChoiceBehavior.Auto())
        response = await weather_agent.get_response(messages=PROMPT)
        return str(response.content), len(requests)


answer, n_requests = asyncio.run(main())
provider.force_flush()
provider.shutdown()

print("answer:", answer)
print("model requests:", n_requests)
assert answer == FINAL_ANSWER, answer
assert n_requests == 4, n_requests
assert out.exists() and out.stat().st_size > 0
assert not outside, f"connections outside 127.0.0.1: {outside}"
