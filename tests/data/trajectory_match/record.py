"""Record ``traces.otlp.jsonl``: two runs of a booking agent, from real SDK spans.

    python tests/data/trajectory_match/record.py [OUT]   # default: beside this script

Run 1 searches hotels and looks up the city in one model response (parallel calls), then
books: it matches ``booking.yaml``. Run 2 never books. GenAI semantic conventions: a chat span
per model response, an ``execute_tool`` span per call with JSON arguments.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_tooleval import OTLPJsonFileExporter

Step = list[tuple[str, dict[str, Any]]]

RUNS: list[list[Step]] = [
    [[("search", {"query": "hotels", "filter": {"city": "Lyon", "stars": 4}}),
      ("lookup", {"city": "lyon"})],
     [("fetch", {"url": "https://example.invalid/h/17"})],
     [("book", {"hotel_id": 17, "nights": 2})]],
    [[("search", {"query": "hotels", "filter": {"city": "Lyon"}})],
     [("lookup", {"city": "Paris"})]],
]


def record(out: Path) -> None:
    out.unlink(missing_ok=True)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileExporter(out)))
    tracer = provider.get_tracer("booking-agent")
    for steps in RUNS:
        with tracer.start_as_current_span("invoke_agent booking", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "booking"}):
            for step in steps:
                with tracer.start_as_current_span("chat model", attributes={
                        "gen_ai.operation.name": "chat"}):
                    pass
                for name, args in step:
                    with tracer.start_as_current_span(f"execute_tool {name}", attributes={
                            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                            "gen_ai.tool.call.arguments": json.dumps(args),
                            "gen_ai.tool.call.result": json.dumps({"ok": True})}):
                        pass
    provider.shutdown()


if __name__ == "__main__":
    record(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name(
        "traces.otlp.jsonl"))
