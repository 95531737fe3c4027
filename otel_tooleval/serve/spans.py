"""Spans held until their trace is decided, re-encoded for forwarding, with verdicts added.

Held are the spans that may be a run's root and, with ``emit.violation_marks``, the tool spans,
so that the calls a failing grader lists under ``details.violations`` go on marked.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..config import ToolEvalConfig
from ..emit import root_attributes, span_events
from ..model import RunReport, SpanRecord
from ..violations import mark_attributes
from .decoding import _pb


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


def _put_attributes(repeated: Any, values: Mapping[str, Any]) -> None:
    """Set attributes on a repeated KeyValue field, replacing keys that are already there."""
    index = {kv.key: kv for kv in repeated}
    for key, value in values.items():
        kv = index.get(key)
        if kv is None:
            kv = repeated.add()
            kv.key = key
        else:
            kv.value.Clear()
        _set_any(kv.value, value)


class _Held:
    """A span held until its trace is decided, with what is needed to forward it alone."""

    __slots__ = ("resource", "scope", "span")

    def __init__(self, resource: Any, scope: Any, span: Any) -> None:
        self.resource = resource   # ResourceSpans without scope_spans (resource + schema_url)
        self.scope = scope         # ScopeSpans without spans (scope + schema_url)
        self.span = span           # a standalone copy


def _encode_held(items: Iterable[_Held]) -> tuple[bytes, int]:
    """One ExportTraceServiceRequest of held spans, grouped by resource and scope."""
    request = _pb().ExportTraceServiceRequest()
    by_resource: dict[int, tuple[Any, dict[int, Any]]] = {}
    count = 0
    for item in items:
        entry = by_resource.get(id(item.resource))
        if entry is None:
            rs = request.resource_spans.add()
            rs.CopyFrom(item.resource)
            entry = by_resource[id(item.resource)] = (rs, {})
        rs, scopes = entry
        ss = scopes.get(id(item.scope))
        if ss is None:
            ss = scopes[id(item.scope)] = rs.scope_spans.add()
            ss.CopyFrom(item.scope)
        ss.spans.append(item.span)
        count += 1
    return request.SerializeToString(), count


def _annotate(item: _Held, record: SpanRecord, report: RunReport, config: ToolEvalConfig) -> _Held:
    emit = config.emit
    span = item.span
    if emit.root_attributes:
        _put_attributes(span.attributes, root_attributes(report))
    if emit.span_events:
        end = record.end_ns or time.time_ns()
        for name, attrs, ts in span_events(report, end):
            event = span.events.add()
            event.name = name
            event.time_unix_nano = ts
            _put_attributes(event.attributes, attrs)
    return item


def _resource_of(item: _Held) -> Any:
    """The SDK ``Resource`` of a held span's resource (the session span is sent under it)."""
    from opentelemetry.sdk.resources import Resource

    from ..readers.otlp_proto import _attributes

    resource = item.resource
    return Resource(_attributes(resource.resource.attributes), resource.schema_url or None)


def _encode_session(span: Any) -> bytes:
    """One ExportTraceServiceRequest holding a session's span (an SDK ``ReadableSpan``)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return bytes(encode_spans([span]).SerializeToString())


def _mark(item: _Held, graders: Sequence[str]) -> _Held:
    """A held tool span that failing graders list: ``tooleval.violation`` and the graders."""
    _put_attributes(item.span.attributes, mark_attributes(graders))
    return item
