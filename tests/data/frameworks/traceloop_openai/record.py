"""Record one OpenLLMetry (traceloop-sdk 0.47.5) run of the scripted weather script into traces.jsonl.

An agent written by hand the way OpenLLMetry's docs show it: a plain OpenAI chat-completions
loop (openai 1.99.9, pointed at the scripted server on 127.0.0.1) inside a function decorated
with ``@agent(name="weather_agent")``, each tool a function decorated with ``@tool``.
``Traceloop.init`` with our file exporter (``disable_batch=True``: a SimpleSpanProcessor), no
telemetry to Traceloop, no metrics or logs; its OpenAI instrumentation of that time records
the messages as flattened ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*`` attributes.
"""

import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ["TRACELOOP_TELEMETRY"] = "false"
os.environ["TRACELOOP_METRICS_ENABLED"] = "false"
os.environ["TRACELOOP_LOGGING_ENABLED"] = "false"
os.environ.pop("OTEL_SDK_DISABLED", None)
os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)  # nothing leaves the machine
os.environ.pop("TRACELOOP_API_KEY", None)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # scripted_openai

import scripted_openai as so
from openai import OpenAI
from traceloop.sdk import Traceloop
from traceloop.sdk.decorators import agent, tool

from otel_tooleval import OTLPJsonFileExporter

OUT = Path("traces.jsonl")

TOOLS = {name: tool(name=name)(getattr(so, name)) for name in so.TOOLS}
SCHEMAS = [
    {"type": "function", "function": {"name": "lookup_city", "description": so.TOOLS["lookup_city"],
     "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                    "required": ["query"]}}},
    {"type": "function", "function": {"name": "get_weather", "description": so.TOOLS["get_weather"],
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]}}},
    {"type": "function", "function": {"name": "convert_temp", "description": so.TOOLS["convert_temp"],
     "parameters": {"type": "object", "properties": {"celsius": {"type": "number"}},
                    "required": ["celsius"]}}},
]


@agent(name="weather_agent")
def weather_agent(client: OpenAI, prompt: str) -> str:
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    for _ in range(8):
        response = client.chat.completions.create(model="scripted", messages=messages,
                                                  tools=SCHEMAS)
        message = response.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = TOOLS[call.function.name](**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": result if isinstance(result, str) else json.dumps(result)})
    raise RuntimeError("no final answer")


def main() -> None:
    OUT.unlink(missing_ok=True)
    Traceloop.init(app_name="traceloop-weather", exporter=OTLPJsonFileExporter(OUT),
                   disable_batch=True, telemetry_enabled=False)
    with so.serve() as (base_url, requests):
        answer = weather_agent(OpenAI(api_key="scripted", base_url=base_url), so.PROMPT).strip()
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    provider.force_flush()  # type: ignore[attr-defined]
    provider.shutdown()  # type: ignore[attr-defined]

    assert answer == so.FINAL_ANSWER, answer
    assert len(requests) == 4, f"{len(requests)} model requests"
    assert OUT.exists() and OUT.stat().st_size > 0, OUT
    print(f"ok: {answer!r}, {len(requests)} model requests, {OUT.resolve()}")


if __name__ == "__main__":
    main()
