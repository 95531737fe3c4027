"""Record an agent loop traced with Logfire (no agent framework) against the scripted model.

Logfire's own set-up: ``logfire.configure(send_to_logfire=False, additional_span_processors=...)``
with our file exporter, ``logfire.instrument_openai()`` for the model calls (its default span
format, version 2: gen_ai.* attributes, message content always recorded), a ``logfire.span``
around the agent loop and ``@logfire.instrument(record_return=True)`` on each tool.
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
os.environ.pop("LOGFIRE_TOKEN", None)

import logfire
import openai
import scripted_openai
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_tooleval import OTLPJsonFileExporter

OUT = HERE / "traces.jsonl"
OUT.unlink(missing_ok=True)

logfire.configure(
    service_name="weather-agent",
    send_to_logfire=False,
    console=False,
    additional_span_processors=[SimpleSpanProcessor(OTLPJsonFileExporter(OUT))],
)
logfire.instrument_openai()

# The tools: the scripted functions, each traced with its arguments and its return value.
TOOLS = {fn.__name__: logfire.instrument(record_return=True)(fn)
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


def weather_agent(client: openai.OpenAI, prompt: str) -> str:
    """The agent loop: ask the model, run the tools it calls, until it answers."""
    with logfire.span("agent run {agent_name}", agent_name="weather_agent", prompt=prompt) as span:
        messages: list[dict] = [{"role": "user", "content": prompt}]
        while True:
            response = client.chat.completions.create(model="scripted", messages=messages,
                                                      tools=TOOL_SCHEMAS)
            message = response.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                span.set_attribute("output", message.content)
                return message.content or ""
            for call in message.tool_calls:
                result = TOOLS[call.function.name](**json.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": json.dumps(result)})


with scripted_openai.serve() as (base_url, requests):
    client = openai.OpenAI(base_url=base_url, api_key="scripted")
    answer = weather_agent(client, scripted_openai.PROMPT)
    logfire.force_flush()
    logfire.shutdown()

assert answer == scripted_openai.FINAL_ANSWER, answer
assert len(requests) == 4, f"{len(requests)} model requests"
assert OUT.exists() and OUT.stat().st_size, OUT
print(f"answer: {answer!r}; {len(requests)} model requests; wrote {OUT.name}")
