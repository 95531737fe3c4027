"""Jaeger's JSON (the UI's "Download JSON", the query API's ``/api/traces``) to SpanRecords.

Jaeger keeps what OTLP has in fields as tags the OTLP-to-Jaeger translation adds
(``otel.scope.name``, ``otel.status_code``, ``span.kind``, ``error`` ...): they are read into
the record's fields and left out of its attributes. Jaeger has no array or map tags (the
translation writes them as JSON text), times are in microseconds, and it keeps no remote-parent
flag: a parent in the same trace but another process counts as remote.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..model import SpanEvent, SpanRecord
from .problems import BAD_SHAPE, describe

__all__ = ["jaeger_records"]

_make = SpanRecord._make
# Tags the OTLP-to-Jaeger translation makes out of span fields, not span attributes.
_FIELD_TAGS = frozenset({
    "otel.scope.name", "otel.scope.version", "otel.library.name", "otel.library.version",
    "otel.status_code", "otel.status_description", "span.kind", "w3c.tracestate",
})


def _tag_value(tag: Mapping[str, Any]) -> Any:
    value = tag.get("value", "")
    kind = str(tag.get("type") or "").lower()
    if not kind:
        return value
    if kind == "string":
        return value if value.__class__ is str else str(value)
    if kind == "bool":
        return value if value.__class__ is bool else str(value).lower() == "true"
    if kind == "int64":
        return int(value)
    if kind == "float64":
        return float(value)
    if kind == "binary":
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, TypeError, ValueError):
            return value
    return value


def _tags(items: Iterable[Mapping[str, Any]] | None) -> dict[str, Any]:
    return {tag["key"]: _tag_value(tag) for tag in items or ()}


def _id(text: Any, what: str) -> int:
    try:
        value = int(text, 16) if text.__class__ is str and len(text) <= 32 else 0
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{what} {text!r} is not a hex id")
    return value


def _parent(span: Mapping[str, Any], trace_id: int) -> int:
    for ref in span.get("references") or ():
        if str(ref.get("refType", "")).upper() == "CHILD_OF":
            ref_trace = ref.get("traceID")
            if not ref_trace or _id(ref_trace, "reference traceID") == trace_id:
                return _id(ref.get("spanID"), "reference spanID")
    parent = span.get("parentSpanID")
    return _id(parent, "parentSpanID") if parent and parent != "0" else 0


def _exception_text(logs: Iterable[Mapping[str, Any]] | None) -> str | None:
    for log in logs or ():
        fields = _tags(log.get("fields"))
        if fields.get("event") == "exception":
            message = fields.get("exception.message") or fields.get("exception.type")
            if message:
                return str(message)
    return None


def _events(logs: Iterable[Mapping[str, Any]]) -> tuple[SpanEvent, ...]:
    """Jaeger logs as span events: the OTLP-to-Jaeger translation writes an event's name as
    the field ``event`` and its attributes as the other fields."""
    out = []
    for log in logs:
        fields = _tags(log.get("fields"))
        name = fields.pop("event", "")
        out.append((name if name.__class__ is str else str(name), fields))
    return tuple(out)


def _process(span: Mapping[str, Any]) -> Any:
    """Which process a span ran in: its processID, or the service of an embedded process."""
    process = span.get("processID")
    if process is None and isinstance(span.get("process"), Mapping):
        process = span["process"].get("serviceName")
    return process


def _record(span: Mapping[str, Any], trace_hint: Any, process_of: Mapping[int, Any]
            ) -> SpanRecord:
    trace_id = _id(span.get("traceID") or trace_hint, "traceID")
    span_id = _id(span["spanID"], "spanID")
    parent_id = _parent(span, trace_id)
    attrs = _tags(span.get("tags"))
    scope = attrs.get("otel.scope.name") or attrs.get("otel.library.name") or ""
    error = None
    logs = span.get("logs")
    status = attrs.get("otel.status_code")
    flagged = attrs.get("error")
    if str(status).upper() == "ERROR" or flagged is True or flagged == "true":
        error = (attrs.get("otel.status_description") or _exception_text(logs)
                 or attrs.get("error.message") or "error")
        if flagged is True or flagged == "true":
            del attrs["error"]  # the translation's marker, not an attribute of the span
    for key in _FIELD_TAGS.intersection(attrs):
        del attrs[key]
    start_us = int(span["startTime"])
    duration = span.get("duration")
    end_ns = (start_us + int(duration)) * 1000 if duration is not None else None
    parent_process = process_of.get(parent_id) if parent_id else None
    remote = parent_process is not None and parent_process != _process(span)
    name = span.get("operationName") or ""
    if name.__class__ is not str:
        raise ValueError("operationName is not a string")
    return _make((trace_id, span_id, parent_id, name,
                  start_us * 1000, end_ns, attrs, error, remote, str(scope),
                  _events(logs) if logs else ()))


def _trace_records(trace: Mapping[str, Any], where: str, report: Callable[[str], None],
                   out: list[SpanRecord]) -> None:
    spans = trace["spans"]
    if not isinstance(spans, list):
        raise TypeError("spans is not a list")
    process_of: dict[int, Any] = {}
    for span in spans:
        try:
            process_of[int(span["spanID"], 16)] = _process(span)
        except BAD_SHAPE:
            continue  # reported below, when the span itself is read
    hint = trace.get("traceID")
    prefix = f"{where}." if where else ""
    for si, span in enumerate(spans):
        try:
            out.append(_record(span, hint, process_of))
        except BAD_SHAPE as exc:
            report(f"{prefix}spans[{si}]: {describe(exc)}; span skipped")


def jaeger_records(doc: Any, report: Callable[[str], None]) -> list[SpanRecord]:
    """The spans of a Jaeger JSON document: ``{"data": [trace...]}``, one trace object
    (``{"traceID", "spans", "processes"}``) or a list of traces. A malformed trace or span is
    reported (with its JSON path) and skipped."""
    out: list[SpanRecord] = []
    if isinstance(doc, Mapping) and "data" in doc:
        traces, prefix = doc["data"], "data"
    elif isinstance(doc, list):
        traces, prefix = doc, ""
    else:
        traces, prefix = [doc], None
    if not isinstance(traces, list):
        report("data is not a list")
        return out
    for ti, trace in enumerate(traces):
        where = "" if prefix is None else f"{prefix}[{ti}]"
        try:
            _trace_records(trace, where, report, out)
        except BAD_SHAPE as exc:
            report(f"{where or 'trace'}: {describe(exc)}; trace skipped")
    return out
