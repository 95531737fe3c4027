"""Spans held until their trace is decided, re-encoded for forwarding, with verdicts added,
and what keeping a span costs.

Held are the spans that may be a run's root and, with ``emit.violation_marks``, the tool spans,
so that the calls a failing grader lists under ``details.violations`` go on marked. A held span
is kept as its protobuf encoding (bytes), not as a message: a upb message of many small
attributes takes about four times its encoded size (48 bytes a node), and bytes are exactly
what they are counted.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..config import ToolEvalConfig
from ..emit import root_attributes, span_events
from ..model import RunReport, SpanRecord
from ..tail import SpanSize
from ..violations import mark_attributes

# What a span's SpanRecord costs in memory beyond the text and bytes of its values (each value
# is at most as long in memory as in its protobuf encoding, so the span's encoded size bounds
# them). Measured with RSS on CPython 3.11 / protobuf 7 (upb), over 200,000 of each
# (tests/robustness/scripts/memory_calibrate.py), rounded up:
_RECORD_BYTES = 600      # the record tuple, its ids and times, name, an empty attribute map,
                         # its place in its trace's lists
_ATTRIBUTE_BYTES = 200   # a key and value in a map (span, event or kvlist): key and value
                         # objects and the map's slot (measured 140 to 205)
_ELEMENT_BYTES = 64      # an array element: its object and slot (measured 9 to 57)
_EVENT_BYTES = 200       # an event: its (name, attributes) pair and empty map (measured 143)
_HELD_BYTES = 300        # a held span's _Held, its bytes object and its place in the trace
TRACE_BYTES = 800        # an open trace in the buffers, besides its spans (measured 700)


def _set_any(target: Any, value: Any) -> None:
    if isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        target.int_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, (list, tuple)):
        array = target.array_value
        array.SetInParent()
        for item in value:
            _set_any(array.values.add(), item)
    else:
        target.string_value = str(value)


def _put_attributes(repeated: Any, values: Mapping[str, Any],
                    present: Mapping[str, Any] | None = None) -> None:
    """Set attributes on a repeated KeyValue field, replacing keys that are already there.

    ``present``: the decoded attributes of the field, when they are known to have exactly its
    keys; then a walk of the field is needed only to replace a key (a span of a million
    attributes took seconds to annotate at shutdown).
    """
    if present is not None and not any(key in present for key in values):
        for key, value in values.items():
            kv = repeated.add()
            kv.key = key
            _set_any(kv.value, value)
        return
    index = {kv.key: kv for kv in repeated}
    for key, value in values.items():
        kv = index.get(key)
        if kv is None:
            kv = repeated.add()
            kv.key = key
        else:
            kv.value.Clear()
        _set_any(kv.value, value)


def _nested(values: Iterable[Any]) -> int:
    """What the arrays and maps among decoded attribute values add, at any depth (protobuf
    bounds the depth at 100)."""
    cost = 0
    for value in values:
        kind = value.__class__
        if kind is tuple:
            cost += len(value) * _ELEMENT_BYTES + _nested(value)
        elif kind is dict:
            cost += len(value) * _ATTRIBUTE_BYTES + _nested(value.values())
    return cost


def span_size(span: Any, record: SpanRecord, headers: int = 0) -> SpanSize:
    """What keeping ``span`` (a protobuf Span) and its ``record`` costs, in bytes of memory;
    ``headers``: the encoded size of its resource and scope, kept with it when it is held
    (counted with each held span, though the spans of one request share them).

    The text and bytes of all values are at most the span's encoded size: counted once in the
    record (with its attributes when they are the only values: a record kept without its
    attributes keeps its events), and once more in the held encoding. Every attribute, array
    element and event adds its constant above. C code and ``len``, but for a walk of the
    events and of the arrays and maps among the values (decoding the record walked them all
    already, several times more slowly).
    """
    encoded = span.ByteSize()
    attributes = record.attributes
    own = (len(attributes) * _ATTRIBUTE_BYTES + _nested(attributes.values())
           if attributes else 0)
    events = 0
    for _, values in record.events:
        events += _EVENT_BYTES
        if values:
            events += len(values) * _ATTRIBUTE_BYTES + _nested(values.values())
    return SpanSize(_RECORD_BYTES + own + events + encoded,
                    own + (0 if record.events else encoded),
                    _HELD_BYTES + encoded + headers)


class _Held:
    """A span held until its trace is decided, with what is needed to forward it alone: the
    protobuf encodings of its ResourceSpans (resource and schema URL, no scope spans), of
    its ScopeSpans (scope and schema URL, no spans), and of itself."""

    __slots__ = ("resource", "scope", "span")

    def __init__(self, resource: bytes, scope: bytes, span: bytes) -> None:
        self.resource = resource
        self.scope = scope
        self.span = span

    def message(self) -> Any:
        """The held span as a protobuf ``Span`` (a new message)."""
        from opentelemetry.proto.trace.v1 import trace_pb2

        span = trace_pb2.Span()
        span.ParseFromString(self.span)
        return span


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, payload: bytes) -> list[bytes]:
    """A length-delimited field, as the parts of its encoding."""
    return [_varint(number << 3 | 2), _varint(len(payload)), payload]


def _encode_held(items: Iterable[_Held]) -> tuple[bytes, int]:
    """One ExportTraceServiceRequest of held spans, grouped by resource and scope.

    Written as protobuf's wire format from the held encodings, without decoding them: a
    message followed by more fields of it is the message with those fields added, and the
    spans of a ScopeSpans and the scope spans of a ResourceSpans are field 2 of each.
    """
    by_resource: dict[bytes, dict[bytes, list[bytes]]] = {}
    count = 0
    for item in items:
        by_resource.setdefault(item.resource, {}).setdefault(item.scope, []).append(item.span)
        count += 1
    parts: list[bytes] = []
    for resource, scopes in by_resource.items():
        inner: list[bytes] = [resource]
        for scope, spans in scopes.items():
            body = [scope]
            for span in spans:
                body += _field(2, span)
            inner += _field(2, b"".join(body))
        parts += _field(1, b"".join(inner))
    return b"".join(parts), count


def _annotate(item: _Held, record: SpanRecord, report: RunReport, config: ToolEvalConfig) -> _Held:
    emit = config.emit
    if not (emit.root_attributes or emit.span_events):
        return item
    span = item.message()
    if emit.root_attributes:
        # The record's attributes have the span's keys when there are as many: none was
        # without a value, nor there twice.
        attributes = record.attributes
        _put_attributes(span.attributes, root_attributes(report),
                        attributes if len(attributes) == len(span.attributes) else None)
    if emit.span_events:
        end = record.end_ns or time.time_ns()
        for name, attrs, ts in span_events(report, end):
            event = span.events.add()
            event.name = name
            event.time_unix_nano = ts
            _put_attributes(event.attributes, attrs)
    item.span = span.SerializeToString()
    return item


def _resource_of(item: _Held) -> Any:
    """The SDK ``Resource`` of a held span's resource (the session span is sent under it)."""
    from opentelemetry.proto.trace.v1 import trace_pb2
    from opentelemetry.sdk.resources import Resource

    from ..readers.otlp_proto import _attributes

    resource = trace_pb2.ResourceSpans()
    resource.ParseFromString(item.resource)
    return Resource(_attributes(resource.resource.attributes), resource.schema_url or None)


def _encode_session(span: Any) -> bytes:
    """One ExportTraceServiceRequest holding a session's span (an SDK ``ReadableSpan``)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return bytes(encode_spans([span]).SerializeToString())


def _mark(item: _Held, graders: Sequence[str]) -> _Held:
    """A held tool span that failing graders list: ``tooleval.violation`` and the graders."""
    span = item.message()
    _put_attributes(span.attributes, mark_attributes(graders))
    item.span = span.SerializeToString()
    return item
