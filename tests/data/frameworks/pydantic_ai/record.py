"""Record pydantic-ai's weather run against the scripted model (see ../README.md)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from pydantic_ai import Agent
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from scripted_openai import (
    FINAL_ANSWER,
    PROMPT,
    convert_temp,
    get_weather,
    lookup_city,
    serve,
)

from otel_tooleval import OTLPJsonFileExporter

OUT = HERE / "traces.jsonl"


def main() -> None:
    OUT.unlink(missing_ok=True)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileExporter(str(OUT))))
    with serve() as (url, requests):
        model = OpenAIChatModel("scripted", provider=OpenAIProvider(base_url=url,
                                                                   api_key="scripted"))
        agent = Agent(model, name="weather_agent", tools=[lookup_city, get_weather, convert_temp],
                      capabilities=[Instrumentation(settings=InstrumentationSettings(
                          tracer_provider=provider, include_content=True))])
        answer = agent.run_sync(PROMPT).output
    provider.shutdown()
    assert answer == FINAL_ANSWER, answer
    assert len(requests) == 4, len(requests)
    print(f"recorded {OUT.name}: {len(OUT.read_text().splitlines())} export(s)")


if __name__ == "__main__":
    main()
