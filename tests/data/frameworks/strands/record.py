"""Record one Strands Agents run of the scripted weather script into traces.jsonl.

Strands' own telemetry set-up (StrandsTelemetry, its native OpenTelemetry tracing) with our file
exporter added to its provider; OpenAIModel pointed at the scripted server on 127.0.0.1.
The strands_latest recording runs this same script with
OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental set before strands is imported.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.pop("OTEL_SDK_DISABLED", None)
os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)  # nothing leaves the machine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # scripted_openai

import scripted_openai as so
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from strands import Agent, tool
from strands.models.openai import OpenAIModel
from strands.telemetry import StrandsTelemetry

from otel_tooleval import OTLPJsonFileExporter

OUT = Path("traces.jsonl")


def main() -> None:
    OUT.unlink(missing_ok=True)
    telemetry = StrandsTelemetry()  # sets the global TracerProvider, as Strands' docs show
    telemetry.tracer_provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileExporter(OUT)))

    with so.serve() as (base_url, requests):
        model = OpenAIModel(client_args={"api_key": "scripted", "base_url": base_url},
                            model_id="scripted")
        agent = Agent(name="weather_agent", model=model,
                      tools=[tool(so.lookup_city), tool(so.get_weather), tool(so.convert_temp)],
                      callback_handler=None)
        result = agent(so.PROMPT)
        answer = str(result).strip()
    telemetry.tracer_provider.force_flush()
    telemetry.tracer_provider.shutdown()

    assert answer == so.FINAL_ANSWER, answer
    assert len(requests) == 4, f"{len(requests)} model requests"
    assert OUT.exists() and OUT.stat().st_size > 0, OUT
    print(f"ok: {answer!r}, {len(requests)} model requests, {OUT.resolve()}")


if __name__ == "__main__":
    main()
