"""The one place that touches OpenTelemetry SDK internals or private names.

Keeping them here means an SDK change breaks one small module, not the whole package.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter
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


def attributes_of(span: ReadableSpan) -> Mapping[str, Any]:
    """The span's attributes as the SDK's own plain dict, for fast lookups.

    ``span.attributes`` wraps the SDK's ``BoundedAttributes`` in a new read-only view on every
    access, and every ``get`` then runs Python code (a miss raises and catches KeyError): about
    20 times slower than a dict lookup. The dict is frozen once the span has ended; for an open
    span, callers only look keys up, or copy it (see ``record_from_span``).
    """
    attrs = getattr(span, "_attributes", None)
    inner = getattr(attrs, "_dict", None)
    if isinstance(inner, dict):
        return inner
    value = span.attributes
    return value if value is not None else {}


_HOT = attrgetter("_context", "_parent", "_attributes")


def hot_fields(span: ReadableSpan) -> tuple[Any, Any, Mapping[str, Any]]:
    """``(context, parent, attributes as a plain dict)`` of an SDK span in one C-level call.

    The span hooks run inside the application's ``span.end()``: property calls and the
    attribute view cost more there than the rest of the hook (measured). Spans that are not
    the SDK's fall back to the public properties.
    """
    try:
        ctx, parent, attrs = _HOT(span)
        inner = attrs._dict
    except AttributeError:
        return span.context, span.parent, attributes_of(span)
    return ctx, parent, inner


def record_from_span(span: ReadableSpan) -> SpanRecord:
    """A SpanRecord of a span; attributes of an ended span are not copied."""
    ctx = span.context
    parent = span.parent
    scope = span.instrumentation_scope
    end = span.end_time
    attrs = attributes_of(span)
    if end is None:  # still open: take a snapshot, the application may still set attributes
        attrs = _snapshot(attrs)
    return SpanRecord(
        ctx.trace_id if ctx else 0,
        ctx.span_id if ctx else 0,
        parent.span_id if parent is not None else 0,
        span.name,
        span.start_time or 0,
        end,
        attrs,
        error_of(span) if end is not None else None,
        bool(parent is not None and parent.is_remote),
        scope.name if scope is not None else "",
    )


def _snapshot(attrs: Mapping[str, Any]) -> dict[str, Any]:
    for _ in range(3):
        try:
            return dict(attrs)
        except RuntimeError:  # changed size while copying: another thread is setting one
            continue
    return {}


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
