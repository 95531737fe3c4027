"""Record one CrewAI crew run (one agent, one task), traced by OpenInference, into traces.jsonl."""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
os.chdir(HERE)
# No phoning home: CrewAI's anonymous telemetry and its cloud tracing off. OTEL_SDK_DISABLED
# must stay unset (CrewAI reads it too, but it would turn off our provider as well).
os.environ.update(CREWAI_DISABLE_TELEMETRY="true", CREWAI_DISABLE_TRACKING="true",
                  CREWAI_TRACING_ENABLED="false", DO_NOT_TRACK="1")
os.environ.pop("OTEL_SDK_DISABLED", None)
os.environ.pop("OPENAI_API_KEY", None)

import scripted_openai as s
from crewai import LLM, Agent, Crew, Task
from crewai.tools import tool
from openinference.instrumentation.crewai import CrewAIInstrumentor
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_tooleval import OTLPJsonFileExporter

TRACES = HERE / "traces.jsonl"
TRACES.unlink(missing_ok=True)
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileExporter(TRACES)))
# OpenInference records message and tool content by default (no OPENINFERENCE_HIDE_* set).
# CrewAI's native OpenAI provider calls the openai SDK, so its model calls are traced by the
# OpenAI instrumentor (CrewAI 1.x only goes through LiteLLM when a model is not native).
CrewAIInstrumentor().instrument(tracer_provider=provider)
OpenAIInstrumentor().instrument(tracer_provider=provider)

lookup_city = tool(s.lookup_city)
get_weather = tool(s.get_weather)
convert_temp = tool(s.convert_temp)

with s.serve() as (base_url, requests):
    llm = LLM(model="openai/scripted", base_url=base_url, api_key="scripted")
    agent = Agent(role="weather_agent", goal="Answer weather questions with the weather tools.",
                  backstory="You answer weather questions using the tools.",
                  tools=[lookup_city, get_weather, convert_temp], llm=llm, verbose=False)
    task = Task(description=s.PROMPT, expected_output="The weather in both cities.", agent=agent)
    crew = Crew(agents=[agent], tasks=[task], verbose=False)
    answer = crew.kickoff().raw
provider.force_flush()
provider.shutdown()

print("answer:", answer)
print("model requests:", len(requests))
assert answer == s.FINAL_ANSWER, answer
assert len(requests) == 4, len(requests)
assert TRACES.exists() and TRACES.stat().st_size > 0
print("wrote", TRACES.name, "with", len(TRACES.read_text().splitlines()), "lines")
