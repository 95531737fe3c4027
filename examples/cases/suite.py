"""An eval suite of ten cases run by a scripted travel-desk agent, as two versions of the agent.

    python examples/cases/suite.py                       # writes v1.jsonl and v2.jsonl here
    otel-tooleval diff v1.jsonl v2.jsonl -c examples/cases/graders.yaml \\
        --cases examples/cases/cases.yaml                # exit 1: two cases regressed

The agent is traced with the OpenTelemetry SDK in the GenAI semantic conventions (an
``invoke_agent`` span, a ``chat`` span per model response with the conversation in
``gen_ai.input.messages``, an ``execute_tool`` span per call) and its spans are written as
OTLP/JSON lines, as the Collector's file exporter writes them. Its "model" is a script: for
each question of the suite, the calls to make. Version v2 changes two of them: it books Lisbon
for 3 nights where 2 were asked (a wrong argument) and refunds order A-17 without looking it up
first (a missing call). ``--version v1 -o FILE`` writes one version only.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_tooleval.file_exporter import OTLPJsonFileExporter

Call = tuple[str, dict[str, Any]]

TOOLS: dict[str, Callable[..., Any]] = {
    "get_weather": lambda city: {"city": city, "temp_c": 21},
    "search_hotels": lambda city: [{"Lisbon": "Hotel Tejo", "Madrid": "Hotel Sol"}.get(
        city, f"Hotel {city}")],
    "create_booking": lambda hotel, nights: {"booking_id": "BK-1042", "nights": nights},
    "convert_currency": lambda amount, source, target: {"amount": round(amount * 1.08, 2)},
    "lookup_order": lambda order_id: {"order_id": order_id, "status": "delivered"},
    "refund_order": lambda order_id: {"refunded": order_id},
    "get_flight_status": lambda flight: {"flight": flight, "status": "on time"},
    "cancel_booking": lambda booking_id: {"cancelled": booking_id},
}

SYSTEM = "You are a travel desk assistant. Use the tools; never delete anything."

# (dataset item id, question, the model's turns: the calls of each response).
SUITE: list[tuple[str, str, list[list[Call]]]] = [
    ("item-1", "What is the weather in Paris?", [[("get_weather", {"city": "Paris"})]]),
    ("item-2", "Compare the weather in Oslo and Rome.",
     [[("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"})]]),
    ("item-3", "Book a hotel in Lisbon for 2 nights.",
     [[("search_hotels", {"city": "Lisbon"})],
      [("create_booking", {"hotel": "Hotel Tejo", "nights": 2})]]),
    ("item-4", "Find hotels in Porto.", [[("search_hotels", {"city": "Porto"})]]),
    ("item-5", "How much is 100 EUR in USD?",
     [[("convert_currency", {"amount": 100, "source": "EUR", "target": "USD"})]]),
    ("item-6", "Refund order A-17.",
     [[("lookup_order", {"order_id": "A-17"})], [("refund_order", {"order_id": "A-17"})]]),
    ("item-7", "Where is my order B-22?", [[("lookup_order", {"order_id": "B-22"})]]),
    ("item-8", "Is flight TP123 on time?", [[("get_flight_status", {"flight": "TP123"})]]),
    ("item-9", "Please cancel my booking BK-9, plans changed.",
     [[("cancel_booking", {"booking_id": "BK-9"})]]),
    ("item-10", "Plan a weekend in Madrid: the weather, and a hotel for 2 nights.",
     [[("get_weather", {"city": "Madrid"}), ("search_hotels", {"city": "Madrid"})],
      [("create_booking", {"hotel": "Hotel Sol", "nights": 2})]]),
]

# What v2 of the agent does differently: the two regressions.
V2_CHANGES: dict[str, list[list[Call]]] = {
    "item-3": [[("search_hotels", {"city": "Lisbon"})],
               [("create_booking", {"hotel": "Hotel Tejo", "nights": 3})]],   # wrong nights
    "item-6": [[("refund_order", {"order_id": "A-17"})]],                     # no lookup first
}

VERSIONS = ("v1", "v2")


def _message(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def run_case(tracer: trace.Tracer, item_id: str, question: str, turns: list[list[Call]],
             model: str = "scripted-1") -> None:
    """One agent run: a model response per turn and its tool calls, then the answer."""
    messages: list[dict[str, Any]] = [_message("system", SYSTEM), _message("user", question)]
    with tracer.start_as_current_span(
            "invoke_agent travel_desk",
            attributes={"gen_ai.operation.name": "invoke_agent",
                        "gen_ai.agent.name": "travel_desk", "gen_ai.request.model": model,
                        "dataset.item_id": item_id}):
        for i, calls in enumerate([*turns, []]):
            parts: list[dict[str, Any]] = (
                [{"type": "tool_call", "id": f"call_{i}_{j}", "name": name, "arguments": args}
                 for j, (name, args) in enumerate(calls)]
                or [{"type": "text", "content": "Done."}])
            with tracer.start_as_current_span(
                    f"chat {model}", kind=trace.SpanKind.CLIENT,
                    attributes={"gen_ai.operation.name": "chat",
                                "gen_ai.request.model": model,
                                "gen_ai.input.messages": json.dumps(messages),
                                "gen_ai.output.messages": json.dumps(
                                    [{"role": "assistant", "parts": parts}])}):
                pass
            messages.append({"role": "assistant", "parts": parts})
            for j, (name, args) in enumerate(calls):
                with tracer.start_as_current_span(
                        f"execute_tool {name}",
                        attributes={"gen_ai.operation.name": "execute_tool",
                                    "gen_ai.tool.name": name,
                                    "gen_ai.tool.call.id": f"call_{i}_{j}",
                                    "gen_ai.tool.call.arguments": json.dumps(args)}) as span:
                    result = json.dumps(TOOLS[name](**args))
                    span.set_attribute("gen_ai.tool.call.result", result)
                messages.append({"role": "tool", "parts": [
                    {"type": "tool_call_response", "id": f"call_{i}_{j}", "response": result}]})


def run_suite(version: str, path: Path) -> None:
    """Every case of the suite run by ``version`` of the agent, its spans written to ``path``."""
    provider = TracerProvider(resource=Resource.create({"service.name": "travel-desk",
                                                        "service.version": version}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileExporter(path)))
    tracer = provider.get_tracer("travel-desk")
    changes = V2_CHANGES if version == "v2" else {}
    for item_id, question, turns in SUITE:
        run_case(tracer, item_id, question, changes.get(item_id, turns))
    provider.shutdown()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", choices=VERSIONS,
                        help="run one version only (default: both, to v1.jsonl and v2.jsonl)")
    parser.add_argument("--output", "-o", type=Path,
                        help="with --version: the trace file (default <version>.jsonl); "
                             "without: the folder for both (default: here)")
    args = parser.parse_args(argv)
    if args.version:
        targets = [(args.version, args.output or Path(f"{args.version}.jsonl"))]
    else:
        folder = args.output or Path()
        folder.mkdir(parents=True, exist_ok=True)
        targets = [(version, folder / f"{version}.jsonl") for version in VERSIONS]
    for version, path in targets:
        path.unlink(missing_ok=True)            # the exporter appends
        run_suite(version, path)
        print(f"{version}: {len(SUITE)} runs written to {path}")


if __name__ == "__main__":
    main()
