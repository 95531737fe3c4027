"""Replay a recorded trace file through a live ``ToolEvalSpanProcessor``.

The recording's spans are made again by a real SDK ``TracerProvider``, with their recorded ids
(an id generator that hands them out), parents, instrumentation scopes, times, attributes and
events, and started and ended in the order of their recorded times, so the processor's hooks
see what they saw in the framework's process. What ``grade`` reads from the file and what the
processor grades live can then be compared run by run.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from otel_tooleval import ToolEvalSpanProcessor, load_config
from otel_tooleval.model import RunReport

__all__ = ["replay_file", "replay_spans", "spans_of"]


class _Recorded(IdGenerator):
    """Hands out the ids of the span being made again."""

    def __init__(self) -> None:
        self.trace_id = 0
        self.span_id = 0

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        return self.span_id


class _Null(SpanProcessor):
    pass


def _value(v: dict[str, Any]) -> Any:
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in v:
            return v[key]
    if "intValue" in v:
        return int(v["intValue"])
    if "arrayValue" in v:
        return tuple(_value(x) for x in v["arrayValue"].get("values", []))
    return None   # kvlist and bytes: not an SDK attribute value


def _attributes(items: Iterable[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for kv in items:
        value = _value(kv.get("value") or {})
        if value is not None:
            out[kv["key"]] = value
    return out


def spans_of(path: Path) -> list[dict[str, Any]]:
    """The spans of an OTLP/JSON-lines file, each with its ``scope`` name added."""
    import json

    spans = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        for rs in json.loads(line).get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                scope = (ss.get("scope") or {}).get("name", "")
                for s in ss.get("spans", []):
                    spans.append({**s, "scope": scope})
    return spans


def replay_spans(spans: Sequence[dict[str, Any]], processor: SpanProcessor) -> None:
    """Make the spans again, in recorded time order, with ``processor`` watching."""
    ids = _Recorded()
    provider = TracerProvider(id_generator=ids)
    provider.add_span_processor(processor)
    live: dict[int, Span] = {}
    events: list[tuple[int, int, int, dict[str, Any]]] = []
    for n, s in enumerate(spans):
        events.append((int(s["startTimeUnixNano"]), 0, n, s))
        events.append((int(s["endTimeUnixNano"]), 1, n, s))
    heapq.heapify(events)
    by_id = {(s["traceId"], s["spanId"]): s for s in spans}
    started: set[tuple[str, str]] = set()

    def start(s: dict[str, Any]) -> None:
        # A parent recorded in the file starts before its children, whatever the clocks say
        # (the AI SDK records starts in whole milliseconds, ends in nanoseconds).
        key = (s["traceId"], s["spanId"])
        if key in started:
            return
        started.add(key)
        parent = by_id.get((s["traceId"], s.get("parentSpanId") or ""))
        if parent is not None:
            start(parent)
        _start(s)

    def _start(s: dict[str, Any]) -> None:
        span_id = int(s["spanId"], 16)
        trace_id = int(s["traceId"], 16)
        parent_id = int(s["parentSpanId"], 16) if s.get("parentSpanId") else 0
        if parent_id in live:
            context = trace.set_span_in_context(live[parent_id])
        elif parent_id:
            context = trace.set_span_in_context(NonRecordingSpan(SpanContext(
                trace_id, parent_id, is_remote=True, trace_flags=TraceFlags(1))))
        else:
            context = None
        ids.trace_id, ids.span_id = trace_id, span_id
        tracer = provider.get_tracer(s["scope"])
        span = tracer.start_span(s["name"], context=context, kind=trace.SpanKind(
            max(int(s.get("kind", 1)) - 1, 0)), start_time=int(s["startTimeUnixNano"]),
            attributes=_attributes(s.get("attributes", [])))
        live[span_id] = span  # type: ignore[assignment]

    while events:
        _, is_end, _, s = heapq.heappop(events)
        if not is_end:
            start(s)
            continue
        span = live.pop(int(s["spanId"], 16), None)
        if span is not None:
            _finish(span, s)
    provider.shutdown()


def _finish(span: Span, s: dict[str, Any]) -> None:
    # Attributes were given at the start (as native OTel frameworks give the markers); the
    # events come as the span runs.
    for event in s.get("events", []):
        span.add_event(event["name"], _attributes(event.get("attributes", [])),
                       timestamp=int(event["timeUnixNano"]))
    status = s.get("status") or {}
    if status.get("code") == 2:
        span.set_status(trace.Status(trace.StatusCode.ERROR, status.get("message")))
    span.end(end_time=int(s["endTimeUnixNano"]))


def replay_file(path: Path, config: Any) -> list[RunReport]:
    """The RunReports a live ``ToolEvalSpanProcessor`` grades from a recorded file."""
    reports: list[RunReport] = []
    processor = ToolEvalSpanProcessor(load_config(config), downstream=_Null(),
                                      on_report=reports.append)
    replay_spans(spans_of(path), processor)
    return sorted(reports, key=lambda r: (r.run.start_ns, r.run.root_span_id))
