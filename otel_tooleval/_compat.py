"""The one place that touches OpenTelemetry SDK internals or private names.

Keeping them here means an SDK change breaks one small module, not the whole package.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import StatusCode

from .model import SpanRecord

__all__ = ["copy_with", "record_from_span", "suppress_instrumentation"]

try:  # the key instrumentations check before they trace anything
    from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY as _SUPPRESS_KEY
except ImportError:  # pragma: no cover - older API
    _SUPPRESS_KEY = "suppress_instrumentation"


def error_of(span: ReadableSpan) -> str | None:
    status = span.status
    if status is None or status.status_code is not StatusCode.ERROR:
        return None
    if status.description:
        return status.description
    for event in span.events or ():
        if event.name == "exception":
            attrs = event.attributes or {}
            message = attrs.get("exception.message") or attrs.get("exception.type")
            if message:
                return str(message)
    return "error"


def record_from_span(span: ReadableSpan) -> SpanRecord:
    """A SpanRecord viewing a span (open or ended); attributes are not copied."""
    ctx = span.context
    parent = span.parent
    scope = span.instrumentation_scope
    return SpanRecord(
        trace_id=ctx.trace_id if ctx else 0,
        span_id=ctx.span_id if ctx else 0,
        parent_id=parent.span_id if parent is not None else 0,
        name=span.name,
        start_ns=span.start_time or 0,
        end_ns=span.end_time,
        attributes=span.attributes if span.attributes is not None else {},
        error=error_of(span) if span.end_time is not None else None,
        parent_remote=bool(parent is not None and parent.is_remote),
        scope=scope.name if scope is not None else "",
    )


def copy_with(span: ReadableSpan, attributes: Mapping[str, Any],
              events: Sequence[tuple[str, Mapping[str, Any], int]]) -> ReadableSpan:
    """A copy of a finished span with extra attributes and events (the original is frozen)."""
    merged = dict(span.attributes or {})
    merged.update(attributes)
    bounded = BoundedAttributes(attributes=merged, immutable=True)
    bounded.dropped = span.dropped_attributes          # keep the original's drop counts
    all_events: BoundedList[Event] = BoundedList(None)
    all_events.extend(span.events or ())
    all_events.extend([Event(name, BoundedAttributes(attributes=attrs, immutable=True), ts)
                       for name, attrs, ts in events])
    all_events.dropped = span.dropped_events
    links: BoundedList[Any] = BoundedList(None)
    links.extend(span.links or ())
    links.dropped = span.dropped_links
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=bounded,
        events=all_events,
        links=links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def suppress_instrumentation() -> object:
    """Attach a context in which instrumentations stay silent; returns the detach token."""
    return otel_context.attach(otel_context.set_value(_SUPPRESS_KEY, True))


def detach(token: object) -> None:
    otel_context.detach(token)  # type: ignore[arg-type]
