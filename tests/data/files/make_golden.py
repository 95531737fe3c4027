"""Write the golden trace files of tests/test_files.py from real SDK spans.

    python tests/data/files/make_golden.py [OUT_DIR]   # default: this script's folder

A real ``TracerProvider`` with fixed ids and explicit timestamps (whole microseconds, so the
Jaeger file, which keeps microseconds, loses nothing) records five traces:

1. ``researcher``: an agent with model calls and four tool calls, one failing with a status
   description, attributes of every type (arrays, double, bool, int) and, added to the encoded
   request because the SDK cannot record them, a key-value list and a bytes attribute.
2. ``orchestrator`` with a nested ``coder`` agent under its ``delegate`` call, and a ``notify``
   call that ends after the root did (pending when read from a file).
3. ``support``: its root (an HTTP server span) is never exported; the agent span is the top.
   Its ``refund`` call fails with an exception event and no status description.
4. ``planner``: its parent is remote (another process), so OTLP flags it (0x300).
5. a plain HTTP trace without tool calls (not an agent run).

The spans are exported in the order they ended, interleaved across traces, in batches of four
(as the collector writes them: roots come last), then written as:

- ``traces.otlp.jsonl``: OTLP/JSON lines as the collector's file exporter writes them (hex ids,
  enums as numbers), with malformed lines: a truncated line, a blank line, a span whose
  trace id is not an id, and a metrics document;
- ``traces.otlp.jsonl.gz``: the same, gzip-compressed;
- ``traces.otlp.json``: one request with every span, pretty-printed, enums by name;
- ``traces.otlp.pb``: the file exporter's ``format: proto`` (4-byte big-endian sizes), with a
  message that does not parse between the batches;
- ``traces.otlp.varint.pb``: the same batches as a varint-delimited protobuf stream;
- ``traces.jaeger.json``: Jaeger's query API / "Download JSON" shape, pretty-printed, with a
  span whose spanID is not an id.

``expected_records()`` gives what every reader must read: the SDK's own records of the
exported spans, plus the two attributes added to the request.
"""

from __future__ import annotations

import base64
import gzip
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    KeyValue,
    KeyValueList,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from otel_tooleval._compat import record_from_span
from otel_tooleval.model import SpanRecord

HERE = Path(__file__).resolve().parent
MS = 1_000_000
BASE = 1_760_000_000_000_000_000  # 2025-10-09, in ns (whole microseconds)
BATCH = 4
# Attributes the SDK cannot record (key-value lists, bytes), added to the encoded request.
EXTRA_SPAN = "execute_tool fetch_page"
EXTRA_ATTRIBUTES: dict[str, Any] = {
    "app.fetch.context": {"region": "eu-west-1", "attempt": 2, "tags": ("a", "b")},
    "app.fetch.digest": b"\x00\x01\xfe\xff",
}
REMOTE_PARENT = SpanContext(0x7D1C7A6B5E4F40318E2A9C0B1D2E3F40, 0x0BADC0FFEE0DDF00,
                            is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))


class FixedIds(IdGenerator):
    """Sequential ids, so every run of this script writes the same files."""

    def __init__(self) -> None:
        self.traces = 0
        self.spans = 0

    def generate_trace_id(self) -> int:
        self.traces += 1
        return 0x4BF92F3577B34DA6A3CE929D0E0E4700 + self.traces

    def generate_span_id(self) -> int:
        self.spans += 1
        return 0x00F067AA0BA90200 + self.spans


def _args(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


class _Recorder:
    def __init__(self, provider: TracerProvider) -> None:
        self.agents = provider.get_tracer("example.agent", "1.2.0")
        self.tools = provider.get_tracer("example.tools")
        self.dropped: set[int] = set()

    def span(self, tracer: trace.Tracer, name: str, start: int, end: int, parent: Any = None,
             attrs: dict[str, Any] | None = None, *, kind: SpanKind = SpanKind.INTERNAL,
             error: str | None = None, exception: str | None = None) -> trace.Span:
        ctx = trace.set_span_in_context(parent) if parent is not None else None
        span = tracer.start_span(name, context=ctx, kind=kind, attributes=attrs,
                                 start_time=start)
        if exception is not None:
            span.add_event("exception", {"exception.type": "PaymentError",
                                         "exception.message": exception}, timestamp=end)
        if error is not None or exception is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=end)
        return span

    def agent(self, name: str, start: int, end: int, parent: Any = None,
              attrs: dict[str, Any] | None = None) -> trace.Span:
        """An agent span, ended later by the caller (its children need it open)."""
        ctx = trace.set_span_in_context(parent) if parent is not None else None
        return self.agents.start_span(
            f"invoke_agent {name}", context=ctx, start_time=start,
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name,
                        **(attrs or {})})

    def chat(self, parent: trace.Span, start: int) -> None:
        self.span(self.agents, "chat gpt-4o", start, start + 2 * MS, parent,
                  {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                   "gen_ai.usage.input_tokens": 812})

    def tool(self, parent: trace.Span, name: str, start: int, end: int, args: Any,
             result: Any = None, attrs: dict[str, Any] | None = None, **kw: Any) -> None:
        base: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                                "gen_ai.tool.call.arguments": _args(args)}
        if result is not None:
            base["gen_ai.tool.call.result"] = _args(result)
        self.span(self.tools, f"execute_tool {name}", start, end, parent, {**base, **(attrs or {})},
                  **kw)


def build_spans() -> list[ReadableSpan]:
    """The exported spans, in the order they ended."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        id_generator=FixedIds(),
        resource=Resource({"service.name": "agents", "service.version": "1.0"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rec = _Recorder(provider)
    t = BASE

    # 1. researcher: every attribute type, a failing call.
    root = rec.agent("researcher", t, t + 40 * MS,
                     attrs={"app.request.tags": ("eval", "nightly"), "app.priority": 3})
    rec.chat(root, t + 1 * MS)
    rec.tool(root, "search", t + 4 * MS, t + 9 * MS, {"query": "otel genai"},
             ["https://opentelemetry.io/docs/specs/semconv/gen-ai/"],
             {"app.retry.counts": (0, 1, 2), "app.score": 0.75, "app.cached": False,
              "app.weights": (0.5, 1.5), "app.flags": (True, False)})
    rec.tool(root, EXTRA_SPAN.split()[-1], t + 10 * MS, t + 14 * MS,
             {"url": "https://opentelemetry.io/"}, {"status": 200})
    rec.chat(root, t + 15 * MS)
    rec.tool(root, "fetch_page", t + 18 * MS, t + 20 * MS, {"url": "https://example.invalid/"},
             error="connection refused")
    rec.tool(root, "write_report", t + 22 * MS, t + 30 * MS, {"title": "GenAI semconv"}, "ok")
    rec.chat(root, t + 32 * MS)
    root.end(end_time=t + 40 * MS)

    # 2. orchestrator with a nested coder agent and a call that ends after the root.
    t = BASE + 5 * MS
    orch = rec.agent("orchestrator", t, t + 50 * MS)
    rec.chat(orch, t + 1 * MS)
    delegate = rec.tools.start_span(
        "execute_tool delegate", context=trace.set_span_in_context(orch), start_time=t + 4 * MS,
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "delegate",
                    "gen_ai.tool.call.arguments": _args({"to": "coder"})})
    coder = rec.agent("coder", t + 5 * MS, t + 30 * MS, parent=delegate)
    rec.chat(coder, t + 6 * MS)
    rec.tool(coder, "read_file", t + 9 * MS, t + 11 * MS, {"path": "src/app.py"}, "x = 1\n")
    rec.tool(coder, "run_tests", t + 12 * MS, t + 28 * MS, {"selector": "tests/"},
             {"passed": 12, "failed": 0})
    coder.end(end_time=t + 30 * MS)
    delegate.end(end_time=t + 31 * MS)
    rec.tool(orch, "report", t + 33 * MS, t + 36 * MS, {"summary": "done"}, "sent")
    rec.tool(orch, "notify", t + 45 * MS, t + 58 * MS, {"channel": "#ci"})
    orch.end(end_time=t + 50 * MS)

    # 3. support: the HTTP root above the agent is never exported.
    t = BASE + 12 * MS
    http = rec.agents.start_span("POST /v1/chat", kind=SpanKind.SERVER, start_time=t,
                                 attributes={"http.request.method": "POST"})
    rec.dropped.add(http.get_span_context().span_id)
    support = rec.agent("support", t + 1 * MS, t + 20 * MS, parent=http)
    rec.chat(support, t + 2 * MS)
    rec.tool(support, "lookup_order", t + 5 * MS, t + 7 * MS, {"order": "A-1"}, {"total": 12.5})
    rec.tool(support, "refund", t + 8 * MS, t + 12 * MS, {"order": "A-1"},
             exception="card declined")
    support.end(end_time=t + 20 * MS)
    http.end(end_time=t + 21 * MS)

    # 4. planner: a remote parent.
    t = BASE + 20 * MS
    planner = rec.agent("planner", t, t + 15 * MS, parent=NonRecordingSpan(REMOTE_PARENT))
    rec.tool(planner, "plan_step", t + 2 * MS, t + 5 * MS, {"step": 1}, "ok")
    rec.tool(planner, "plan_step", t + 6 * MS, t + 9 * MS, {"step": 2}, "ok")
    planner.end(end_time=t + 15 * MS)

    # 5. no agent, no tool calls.
    t = BASE + 25 * MS
    health = rec.agents.start_span("GET /health", kind=SpanKind.SERVER, start_time=t)
    rec.span(rec.agents, "SELECT 1", t + 1 * MS, t + 2 * MS, health,
             {"db.system": "postgresql"}, kind=SpanKind.CLIENT)
    health.end(end_time=t + 3 * MS)

    provider.shutdown()
    spans = [s for s in exporter.get_finished_spans()
             if s.context is not None and s.context.span_id not in rec.dropped]
    spans.sort(key=lambda s: (s.end_time or 0, s.context.span_id if s.context else 0))
    return spans


def expected_records() -> list[SpanRecord]:
    """What every reader must read from the golden files, sorted by (trace id, span id)."""
    out = []
    for span in build_spans():
        record = record_from_span(span)
        if record.name == EXTRA_SPAN and record.error is None:
            record = record._replace(attributes={**record.attributes, **EXTRA_ATTRIBUTES})
        else:
            record = record._replace(attributes=dict(record.attributes))
        out.append(record)
    return sorted(out, key=lambda r: (r.trace_id, r.span_id))


# -- encodings ----------------------------------------------------------------------------------

def _any(value: Any) -> AnyValue:
    if isinstance(value, dict):
        return AnyValue(kvlist_value=KeyValueList(
            values=[KeyValue(key=k, value=_any(v)) for k, v in value.items()]))
    if isinstance(value, tuple):
        return AnyValue(array_value=ArrayValue(values=[_any(v) for v in value]))
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value))


def encode(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    """One ExportTraceServiceRequest, with the attributes the SDK cannot record added."""
    request = encode_spans(spans)
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                if span.name == EXTRA_SPAN and span.status.code != 2:
                    span.attributes.extend(KeyValue(key=k, value=_any(v))
                                           for k, v in EXTRA_ATTRIBUTES.items())
    return request


def batches(spans: Sequence[ReadableSpan]) -> Iterator[ExportTraceServiceRequest]:
    for i in range(0, len(spans), BATCH):
        yield encode(spans[i:i + BATCH])


def _hex(text: str) -> str:
    return base64.b64decode(text).hex()


def otlp_dict(request: ExportTraceServiceRequest, *, enums_as_numbers: bool) -> dict[str, Any]:
    """OTLP/JSON as the collector writes it: protobuf's JSON mapping, ids in hex."""
    doc: dict[str, Any] = MessageToDict(request, use_integers_for_enums=enums_as_numbers)
    for rs in doc.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for span in ss.get("spans", ()):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = _hex(span[key])
                for link in span.get("links", ()):
                    link["traceId"], link["spanId"] = _hex(link["traceId"]), _hex(link["spanId"])
    return doc


def otlp_json_lines(spans: Sequence[ReadableSpan]) -> bytes:
    lines = [json.dumps(otlp_dict(b, enums_as_numbers=True), separators=(",", ":"))
             for b in batches(spans)]
    # A span whose trace id is not an id, in a line with good spans (reported, the rest read).
    bad = json.loads(lines[1])
    good = bad["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    bad["resourceSpans"][0]["scopeSpans"][0]["spans"].append(
        {**good, "traceId": "not-a-trace-id", "spanId": "00f067aa0ba90fff"})
    lines[1] = json.dumps(bad, separators=(",", ":"))
    lines.insert(3, '{"resourceSpans":[{"resource":{},"scopeSpans":[{"scope":{"name":"x"')
    lines.insert(5, "")
    lines.insert(7, '{"resourceMetrics":[]}')
    return ("\n".join(lines) + "\n").encode()


def otlp_proto(spans: Sequence[ReadableSpan], *, varint: bool = False) -> bytes:
    frames = [b.SerializeToString() for b in batches(spans)]
    out = bytearray()
    for i, frame in enumerate(frames):
        if varint:
            out += _varint(len(frame))
        else:
            if i == 2:  # a message that does not parse, between good ones
                out += (3).to_bytes(4, "big") + b"\xff\xff\xff"
            out += len(frame).to_bytes(4, "big")
        out += frame
    return bytes(out)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


# -- Jaeger -------------------------------------------------------------------------------------

def _py(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_py(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _py(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def _jaeger_tag(key: str, value: AnyValue) -> dict[str, Any]:
    """As the OTLP-to-Jaeger translation writes it: arrays and maps as JSON text."""
    kind = value.WhichOneof("value")
    if kind == "bool_value":
        return {"key": key, "type": "bool", "value": value.bool_value}
    if kind == "int_value":
        return {"key": key, "type": "int64", "value": value.int_value}
    if kind == "double_value":
        return {"key": key, "type": "float64", "value": value.double_value}
    if kind == "bytes_value":
        return {"key": key, "type": "binary",
                "value": base64.b64encode(value.bytes_value).decode()}
    if kind in ("array_value", "kvlist_value"):
        return {"key": key, "type": "string",
                "value": json.dumps(_py(value), separators=(",", ":"))}
    return {"key": key, "type": "string", "value": value.string_value}


_KINDS = {2: "server", 3: "client", 4: "producer", 5: "consumer"}


def jaeger_document(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    request = encode(spans)
    traces: dict[str, dict[str, Any]] = {}
    for rs in request.resource_spans:
        attrs = {kv.key: kv.value for kv in rs.resource.attributes}
        process = {"serviceName": attrs.pop("service.name").string_value,
                   "tags": [_jaeger_tag(k, v) for k, v in attrs.items()]}
        for ss in rs.scope_spans:
            for span in ss.spans:
                trace_id = span.trace_id.hex()
                entry = traces.setdefault(trace_id, {"traceID": trace_id, "spans": [],
                                                     "processes": {"p1": process},
                                                     "warnings": None})
                tags = [_jaeger_tag(kv.key, kv.value) for kv in span.attributes]
                tags.append({"key": "otel.scope.name", "type": "string", "value": ss.scope.name})
                if ss.scope.version:
                    tags.append({"key": "otel.scope.version", "type": "string",
                                 "value": ss.scope.version})
                if span.kind in _KINDS:
                    tags.append({"key": "span.kind", "type": "string", "value": _KINDS[span.kind]})
                if span.status.code == 2:
                    tags.append({"key": "otel.status_code", "type": "string", "value": "ERROR"})
                    tags.append({"key": "error", "type": "bool", "value": True})
                    if span.status.message:
                        tags.append({"key": "otel.status_description", "type": "string",
                                     "value": span.status.message})
                refs = []
                if span.parent_span_id:
                    refs.append({"refType": "CHILD_OF", "traceID": trace_id,
                                 "spanID": span.parent_span_id.hex()})
                logs = [{"timestamp": e.time_unix_nano // 1000,
                         "fields": [{"key": "event", "type": "string", "value": e.name},
                                    *(_jaeger_tag(kv.key, kv.value) for kv in e.attributes)]}
                        for e in span.events]
                entry["spans"].append({
                    "traceID": trace_id, "spanID": span.span_id.hex(), "flags": 1,
                    "operationName": span.name, "references": refs,
                    "startTime": span.start_time_unix_nano // 1000,
                    "duration": (span.end_time_unix_nano - span.start_time_unix_nano) // 1000,
                    "tags": tags, "logs": logs, "processID": "p1", "warnings": None})
    data = list(traces.values())
    bad = dict(data[0]["spans"][0], spanID="zz")
    data[0]["spans"].append(bad)
    return {"data": data, "total": 0, "limit": 0, "offset": 0, "errors": None}


def write_all(out_dir: Path) -> list[Path]:
    spans = build_spans()
    files = {
        "traces.otlp.jsonl": otlp_json_lines(spans),
        "traces.otlp.json": (json.dumps(otlp_dict(encode(spans), enums_as_numbers=False),
                                        indent=2) + "\n").encode(),
        "traces.otlp.pb": otlp_proto(spans),
        "traces.otlp.varint.pb": otlp_proto(spans, varint=True),
        "traces.jaeger.json": (json.dumps(jaeger_document(spans), indent=2) + "\n").encode(),
    }
    files["traces.otlp.jsonl.gz"] = gzip.compress(files["traces.otlp.jsonl"], mtime=0)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in files.items():
        path = out_dir / name
        path.write_bytes(data)
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write_all(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(path)
