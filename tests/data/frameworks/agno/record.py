"""Record one Agno agent run of the scripted weather script into traces.jsonl.

OpenInference's AgnoInstrumentor on an SDK TracerProvider with our file exporter; the agent's
model is Agno's OpenAIChat pointed at the scripted server on 127.0.0.1, the tools the plain
functions of scripted_openai. Agno's own telemetry to its API is off (telemetry=False and
AGNO_TELEMETRY=false).
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ["AGNO_TELEMETRY"] = "false"
os.environ.pop("OTEL_SDK_DISABLED", None)
os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)  # nothing leaves the machine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # scripted_openai

import scripted_openai as so
from agno.agent import Agent
from agno.models.openai import OpenAIChat
from openinference.instrumentation.agno import AgnoInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_tooleval import OTLPJsonFileExporter

OUT = Path("traces.jsonl")


def main() -> None:
    OUT.unlink(missing_ok=True)
    provider = TracerProvider(resource=Resource.create({"service.name": "agno-weather"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileExporter(OUT)))
    AgnoInstrumentor().instrument(tracer_provider=provider)

    with so.serve() as (base_url, requests):
        agent = Agent(
            name="weather_agent",
            model=OpenAIChat(id="scripted", api_key="scripted", base_url=base_url),
            tools=[so.lookup_city, so.get_weather, so.convert_temp],
            telemetry=False,
        )
        result = agent.run(so.PROMPT)
        answer = str(result.content).strip()
    provider.force_flush()
    provider.shutdown()

    assert answer == so.FINAL_ANSWER, answer
    assert len(requests) == 4, f"{len(requests)} model requests"
    assert OUT.exists() and OUT.stat().st_size > 0, OUT
    print(f"ok: {answer!r}, {len(requests)} model requests, {OUT.resolve()}")


if __name__ == "__main__":
    main()
