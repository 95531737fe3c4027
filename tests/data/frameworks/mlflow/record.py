"""Record an agent loop traced with MLflow Tracing against the scripted model.

MLflow's own set-up: ``mlflow.openai.autolog()`` for the model calls, the tools wrapped in
``@mlflow.trace(span_type=SpanType.TOOL)``, the loop an ``@mlflow.trace(span_type=SpanType.AGENT,
name="weather_agent")`` function. MLflow exports over OTLP when
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (its docs' "OpenTelemetry export"; OTLP only, no
tracking server): here to ``otlp_receiver.py``, which writes each OTLP/HTTP request as one
OTLP/JSON line, so ``traces.jsonl`` is exactly what MLflow sends.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
os.environ.pop("OTEL_SDK_DISABLED", None)
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
os.environ["DO_NOT_TRACK"] = "true"
os.environ["OTEL_SERVICE_NAME"] = "weather-agent"
os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"

import scripted_openai
from otlp_receiver import receive

OUT = HERE / "traces.jsonl"
OUT.unlink(missing_ok=True)

TOOL_SCHEMAS = [
    {"type": "function", "function": {"name": "lookup_city", "description": scripted_openai.TOOLS["lookup_city"],
     "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
    {"type": "function", "function": {"name": "get_weather", "description": scripted_openai.TOOLS["get_weather"],
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "convert_temp", "description": scripted_openai.TOOLS["convert_temp"],
     "parameters": {"type": "object", "properties": {"celsius": {"type": "number"}}, "required": ["celsius"]}}},
]

with receive(OUT) as (endpoint, receiver), scripted_openai.serve() as (base_url, requests):
    os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = endpoint  # before MLflow's first trace

    import mlflow
    import openai
    from mlflow.entities import SpanType

    mlflow.openai.autolog()

    # The tools: the scripted functions as MLflow TOOL spans.
    TOOLS = {fn.__name__: mlflow.trace(span_type=SpanType.TOOL)(fn)
             for fn in (scripted_openai.lookup_city, scripted_openai.get_weather,
                        scripted_openai.convert_temp)}

    @mlflow.trace(span_type=SpanType.AGENT, name="weather_agent")
    def weather_agent(prompt: str) -> str:
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

    client = openai.OpenAI(base_url=base_url, api_key="scripted")
    answer = weather_agent(scripted_openai.PROMPT)
    mlflow.tracing.disable()  # retires MLflow's batch processor: flushes it, then shuts it down
    exports = receiver.requests

assert answer == scripted_openai.FINAL_ANSWER, answer
assert len(requests) == 4, f"{len(requests)} model requests"
assert OUT.exists() and OUT.stat().st_size, OUT
print(f"answer: {answer!r}; {len(requests)} model requests; {exports} OTLP export(s) "
      f"received; wrote {OUT.name}")
