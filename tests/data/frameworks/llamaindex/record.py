"""Record one LlamaIndex FunctionAgent run, traced by OpenInference, into traces.jsonl."""

import asyncio
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
os.chdir(HERE)
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.pop("OTEL_SDK_DISABLED", None)
os.environ.pop("OPENAI_API_KEY", None)

import scripted_openai as s
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai_like import OpenAILike
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_tooleval import OTLPJsonFileExporter

TRACES = HERE / "traces.jsonl"
TRACES.unlink(missing_ok=True)
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileExporter(TRACES)))
# OpenInference records message and tool content by default (no OPENINFERENCE_HIDE_* set).
LlamaIndexInstrumentor().instrument(tracer_provider=provider)


async def main(base_url: str) -> str:
    llm = OpenAILike(model="scripted", api_base=base_url, api_key="scripted",
                     is_chat_model=True, is_function_calling_model=True, context_window=8192)
    agent = FunctionAgent(
        name="weather_agent",
        description="Answers weather questions with the weather tools.",
        system_prompt="You answer weather questions using the tools.",
        tools=[FunctionTool.from_defaults(fn=f)
               for f in (s.lookup_city, s.get_weather, s.convert_temp)],
        llm=llm,
    )
    result = await agent.run(user_msg=s.PROMPT)
    return str(result)


with s.serve() as (base_url, requests):
    answer = asyncio.run(main(base_url))
provider.force_flush()
provider.shutdown()

print("answer:", answer)
print("model requests:", len(requests))
assert answer == s.FINAL_ANSWER, answer
assert len(requests) == 4, len(requests)
assert TRACES.exists() and TRACES.stat().st_size > 0
print("wrote", TRACES.name, "with", len(TRACES.read_text().splitlines()), "lines")
