"""The demo travel agent with plain OpenTelemetry tracing and no grading in the process.

In the fleet the `otel-tooleval serve` instances grade, so the agent only exports its spans:
    OTEL_EXPORTER_OTLP_ENDPOINT=http://tier1:4318 python ungraded_agent.py
"""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_tooleval.demo.agent import SCRIPTS, run_scripted_agent


def main() -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "travel-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracer = provider.get_tracer("travel-agent")
    for description, turns in SCRIPTS:
        run_scripted_agent(tracer, turns)
        print("sent:", description)
    provider.shutdown()


if __name__ == "__main__":
    main()
