"""Span events: read into ``SpanRecord.events`` by every reader and the live path, sent to the
grading process, and read by the conventions that keep a call's data there (Strands' default
telemetry: arguments in ``gen_ai.tool.message``, result in ``gen_ai.choice``, the answer in the
root's ``gen_ai.choice``)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import load_config
from otel_tooleval._compat import record_from_span
from otel_tooleval.conventions import final_output_of, tool_call_from
from otel_tooleval.files import read_records
from otel_tooleval.model import SpanRecord
from otel_tooleval.readers.otlp_proto import record_from_proto
from otel_tooleval.worker import encode, grade_job, read_frame

STRANDS = "strands.telemetry.tracer"
ARGS = '{"city": "Paris"}'
RESULT = '[{"text": "{\\"city\\": \\"Paris\\", \\"temp_c\\": 21.0}"}]'
# Event values of every attribute type the SDK records (Jaeger has no arrays: see below).
SCALARS: dict[str, Any] = {"id": "call_1_0", "n": 3, "ok": True, "ratio": 0.5}


@pytest.fixture(scope="module")
def spans() -> Iterator[list[ReadableSpan]]:
    """A Strands-shaped run from a real TracerProvider: the root's answer and the tool call's
    arguments and result only in events."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer(STRANDS)
    with tracer.start_as_current_span("invoke_agent weather_agent", attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "weather_agent"}) as root:
        root.add_event("gen_ai.user.message", {"content": '[{"text": "Weather?"}]'})
        with tracer.start_as_current_span("execute_tool get_weather", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.call.id": "call_1_0"}) as tool:
            tool.add_event("gen_ai.tool.message",
                           {"role": "tool", "content": ARGS, **SCALARS,
                            "tags": ("a", "b")})
            tool.add_event("gen_ai.choice", {"message": RESULT, "id": "call_1_0"})
        root.add_event("gen_ai.choice", {"message": "Paris 21C\n", "finish_reason": "end_turn"})
    provider.shutdown()
    yield sorted(exporter.get_finished_spans(), key=lambda s: s.context.span_id)


def _live(spans: list[ReadableSpan]) -> list[SpanRecord]:
    return sorted((record_from_span(s) for s in spans), key=lambda r: r.span_id)


def _read(data: bytes) -> list[SpanRecord]:
    return sorted(read_records(io.BytesIO(data)), key=lambda r: r.span_id)


def _plain_events(records: list[SpanRecord]) -> list[list[tuple[str, dict[str, Any]]]]:
    return [[(name, dict(attrs)) for name, attrs in r.events] for r in records]


def test_live_records_reference_the_sdk_event_attributes(spans: list[ReadableSpan]) -> None:
    tool = next(s for s in spans if s.name.startswith("execute_tool"))
    record = record_from_span(tool)
    assert [name for name, _ in record.events] == ["gen_ai.tool.message", "gen_ai.choice"]
    assert record.events[0][1] == {"role": "tool", "content": ARGS, **SCALARS,
                                   "tags": ("a", "b")}
    # Not copied: the SDK event's own (frozen) dict.
    assert record.events[0][1] is tool.events[0].attributes._dict  # type: ignore[union-attr]
    assert record.event_value("gen_ai.choice", "message") == RESULT
    assert record.event_value("gen_ai.choice", "absent") is None


def test_an_open_span_and_another_span_class_keep_their_events() -> None:
    provider = TracerProvider()
    span = provider.get_tracer(STRANDS).start_span("execute_tool t")
    span.add_event("gen_ai.tool.message", {"content": ARGS})
    record = record_from_span(span)   # type: ignore[arg-type]
    span.add_event("later", {})
    assert record.events == (("gen_ai.tool.message", {"content": ARGS}),)
    span.end()
    copy = ReadableSpan(name="x", context=span.get_span_context(), events=(
        Event("e", {"k": 1}), Event("no attributes")))
    assert record_from_span(copy).events == (("e", {"k": 1}), ("no attributes", {}))
    assert record_from_span(ReadableSpan(name="y")).events == ()


def test_otlp_protobuf_and_json_read_the_events_as_the_live_path(
        spans: list[ReadableSpan]) -> None:
    live = _live(spans)
    assert sum(len(r.events) for r in live) == 4
    request = encode_spans(spans)
    body = request.SerializeToString()
    from_proto = _read(len(body).to_bytes(4, "big") + body)
    from_json = _read(json.dumps(MessageToDict(request)).encode())
    for records in (from_proto, from_json):
        assert _plain_events(records) == _plain_events(live)
        assert [r._replace(attributes=dict(r.attributes), events=()) for r in records] == [
            r._replace(attributes=dict(r.attributes), events=()) for r in live]
    # serve decodes each protobuf span with the same function.
    span = request.resource_spans[0].scope_spans[0].spans[0]
    assert record_from_proto(span, STRANDS).events == from_proto[0].events


def test_jaeger_logs_are_read_as_events(spans: list[ReadableSpan]) -> None:
    tool = next(s for s in spans if s.name.startswith("execute_tool"))
    doc = {"data": [{"traceID": f"{tool.context.trace_id:032x}", "spans": [{
        "traceID": f"{tool.context.trace_id:032x}", "spanID": f"{tool.context.span_id:016x}",
        "operationName": tool.name, "startTime": 1, "duration": 2,
        "tags": [{"key": "gen_ai.tool.name", "type": "string", "value": "get_weather"}],
        "logs": [
            {"timestamp": 1, "fields": [
                {"key": "event", "type": "string", "value": "gen_ai.tool.message"},
                {"key": "content", "type": "string", "value": ARGS},
                {"key": "n", "type": "int64", "value": 3},
                {"key": "ok", "type": "bool", "value": True},
                {"key": "ratio", "type": "float64", "value": 0.5}]},
            {"timestamp": 2, "fields": [{"key": "message", "type": "string", "value": "x"}]},
        ]}]}]}
    (record,) = _read(json.dumps(doc).encode())
    assert record.events == (
        ("gen_ai.tool.message", {"content": ARGS, "n": 3, "ok": True, "ratio": 0.5}),
        ("", {"message": "x"}))


def test_the_tool_call_and_the_answer_are_read_from_events(spans: list[ReadableSpan]) -> None:
    root, tool = (next(r for r in _live(spans) if r.name.startswith(p))
                  for p in ("invoke_agent", "execute_tool"))
    call = tool_call_from(tool, index=0, step=0, pending=False)
    assert call is not None
    assert (call.name, call.arguments, call.result, call.call_id) == (
        "get_weather", {"city": "Paris"}, {"city": "Paris", "temp_c": 21.0}, "call_1_0")
    # A pending call has no result; the attributes win over the events.
    assert tool_call_from(tool, index=0, step=0, pending=True).has_result is False  # type: ignore[union-attr]
    both = tool._replace(attributes={**tool.attributes, "gen_ai.tool.call.arguments": "{}"})
    assert tool_call_from(both, index=0, step=0, pending=False).arguments == {}  # type: ignore[union-attr]
    # Other conventions' spans do not read Strands' events.
    other = tool._replace(scope="my.app")
    assert tool_call_from(other, index=0, step=0, pending=False).arguments is None  # type: ignore[union-attr]
    # The answer as recorded, less the trailing line break.
    assert final_output_of(root, []) == "Paris 21C"
    latest = root._replace(events=(("gen_ai.client.inference.operation.details", {
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
            {"type": "text", "content": "  Paris 21C (69.8F)\n"}]}])}),))
    assert final_output_of(latest, []) == "  Paris 21C (69.8F)"
    blocks = root._replace(events=(("gen_ai.choice", {"message": '[{"text": "Lyon"}]'}),))
    assert final_output_of(blocks, []) == "Lyon"


def test_events_go_to_the_grading_process_as_marshal_data(spans: list[ReadableSpan]) -> None:
    config = load_config({"graders": [
        {"name": "args", "type": "tool_trajectory", "mode": "in_order",
         "expected": [{"tool": "get_weather", "args": {"city": "Paris"}}]},
        {"name": "answer", "kind": "tool", "function": "contains",
         "extractor": "last_assistant", "ground_truth": "Paris 21C"}]})
    root, tool = (next(r for r in _live(spans) if r.name.startswith(p))
                  for p in ("invoke_agent", "execute_tool"))
    frame = encode(("runs", [(1, tuple(root), [tuple(tool)], [], 0)]), plain_only=True)
    assert frame[4:5] == b"M"   # marshal: the events' dicts are the SDK's plain dicts
    _, [job] = read_frame(io.BytesIO(frame))
    report = grade_job(job, config)
    assert report.run.calls[0].arguments == {"city": "Paris"}
    assert report.run.final_output == "Paris 21C"
    assert [(r.name, r.passed) for r in report.results] == [("args", True), ("answer", True)]
