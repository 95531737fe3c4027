"""Record an agent loop traced with the Langfuse Python SDK against the scripted model.

Langfuse's own set-up: ``Langfuse(...)`` builds and registers the OpenTelemetry TracerProvider
(its exporter points at a dead 127.0.0.1 port: that export fails, which is fine); our file
exporter is added to that provider. The model calls go through ``langfuse.openai`` (the
drop-in OpenAI client, a ``generation`` observation per call), the loop is an
``@observe(as_type="agent")`` function named ``weather_agent`` and each tool an
``@observe(as_type="tool")`` function. Input/output capture is Langfuse's default (on).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.pop("OTEL_SDK_DISABLED", None)
# No Langfuse server: the SDK's own exporter talks to a closed port and gives up quickly.
os.environ["LANGFUSE_PUBLIC_KEY"] = "pk-lf-scripted"
os.environ["LANGFUSE_SECRET_KEY"] = "sk-lf-scripted"
os.environ["LANGFUSE_BASE_URL"] = "http://127.0.0.1:9"
os.environ["LANGFUSE_TIMEOUT"] = "1"

import scripted_openai
from langfuse import Langfuse, observe
from langfuse.openai import OpenAI
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_tooleval import OTLPJsonFileExporter

OUT = HERE / "traces.jsonl"
OUT.unlink(missing_ok=True)

langfuse = Langfuse()
provider = trace.get_tracer_provider()  # the SDK TracerProvider Langfuse built and registered
provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileExporter(OUT)))

# The tools: the scripted functions as Langfuse tool observations (input and output captured).
TOOLS = {fn.__name__: observe(as_type="tool")(fn)
         for fn in (scripted_openai.lookup_city, scripted_openai.get_weather,
                    scripted_openai.convert_temp)}
TOOL_SCHEMAS = [
    {"type": "function", "function": {"name": "lookup_city", "description": scripted_openai.TOOLS["lookup_city"],
     "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
    {"type": "function", "function": {"name": "get_weather", "description": scripted_openai.TOOLS["get_weather"],
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "convert_temp", "description": scripted_openai.TOOLS["convert_temp"],
     "parameters": {"type": "object", "properties": {"celsius": {"type": "number"}}, "required": ["celsius"]}}},
]


@observe(as_type="agent")
def weather_agent(client: OpenAI, prompt: str) -> str:
    """The agent loop: ask the model, run the tools it calls, until it answers."""
    messages: list[dict] = [{"role": "user", "content": prompt}]
    while True:
        response = client.chat.completions.create(model="scripted", messages=messages,
                                                  tools=TOOL_SCHEMAS)
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or ""
        for call in message.tool_calls:
            result = TOOLS[call.function.name](**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": json.dumps(result)})


with scripted_openai.serve() as (base_url, requests):
    client = OpenAI(base_url=base_url, api_key="scripted")
    answer = weather_agent(client, scripted_openai.PROMPT)
    langfuse.flush()
    langfuse.shutdown()

assert answer == scripted_openai.FINAL_ANSWER, answer
assert len(requests) == 4, f"{len(requests)} model requests"
assert OUT.exists() and OUT.stat().st_size, OUT
print(f"answer: {answer!r}; {len(requests)} model requests; wrote {OUT.name}")
