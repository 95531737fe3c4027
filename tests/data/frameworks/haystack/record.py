"""Record a Haystack Agent traced by Haystack's own tracing, exported through OpenTelemetry.

The Agent (haystack.components.agents.Agent) uses OpenAIChatGenerator pointed at the scripted
model on 127.0.0.1 and the three functions as Haystack Tools. A Haystack Agent has no name of its
own: a component is named when it is added to a Pipeline, so the agent runs as the single
component "weather_agent" of a Pipeline. Tracing: haystack.tracing.enable_tracing with the
OpenTelemetryTracer (haystack 3 ships it in the opentelemetry-haystack integration package),
content tracing on (HAYSTACK_CONTENT_TRACING_ENABLED=true). Writes traces.jsonl beside this file.
"""

import os
import sys
from pathlib import Path

# No telemetry that leaves the machine; content tracing on.
os.environ["HAYSTACK_TELEMETRY_ENABLED"] = "False"
os.environ["HAYSTACK_CONTENT_TRACING_ENABLED"] = "true"
os.environ["DO_NOT_TRACK"] = "1"
os.environ.pop("OTEL_SDK_DISABLED", None)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import scripted_openai
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from scripted_openai import FINAL_ANSWER, PROMPT, serve

from otel_tooleval import OTLPJsonFileExporter

OUT = HERE / "traces.jsonl"
OUT.unlink(missing_ok=True)
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileExporter(OUT)))
trace.set_tracer_provider(provider)

from haystack import Pipeline, tracing
from haystack.components.agents import Agent
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.dataclasses import ChatMessage
from haystack.tools import create_tool_from_function
from haystack.utils import Secret
from haystack_integrations.tracing.opentelemetry import OpenTelemetryTracer

# As the docs show; the scope name is the application's choice ("haystack" is what the
# OpenTelemetryConnector component of the same package uses).
tracing.enable_tracing(OpenTelemetryTracer(trace.get_tracer("haystack")))

tools = [create_tool_from_function(f) for f in
         (scripted_openai.lookup_city, scripted_openai.get_weather, scripted_openai.convert_temp)]

with serve() as (base_url, requests):
    generator = OpenAIChatGenerator(api_base_url=base_url, api_key=Secret.from_token("scripted"),
                                    model="scripted")
    pipeline = Pipeline()
    pipeline.add_component("weather_agent", Agent(chat_generator=generator, tools=tools))
    result = pipeline.run({"weather_agent": {"messages": [ChatMessage.from_user(PROMPT)]}})
    answer = result["weather_agent"]["last_message"].text

provider.force_flush()
provider.shutdown()

assert answer == FINAL_ANSWER, answer
assert len(requests) == 4, f"{len(requests)} model requests"
assert OUT.exists() and OUT.stat().st_size, OUT
print(f"ok: {answer!r}, {len(requests)} model requests, {OUT.name} written")
