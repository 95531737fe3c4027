"""The one place that touches OpenTelemetry SDK internals or private names.

Keeping them here means an SDK change breaks one small module, not the whole package.
"""

from __future__ import annotations

import inspect
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from operator import attrgetter, itemgetter
from types import FunctionType, MappingProxyType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import StatusCode

from .emit.span import root_attributes, span_events
from .model import RunReport, SpanEvent, SpanRecord

__all__ = ["annotated_copy", "batch_emit", "co_registered", "copy_with", "events_of", "record_from_span", "sdk_configure",
           "sdk_initialize_wrapping", "suppress_instrumentation", "wrap_export_processors"]

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


# The span hooks (hooks.py) read the SDK span's fields ``_context``, ``_parent``,
# ``_attributes._dict`` and ``_end_time`` themselves: there, a property call or the attribute
# view costs more than the rest of the hook, and even one C-level attrgetter call costs twice
# the specialised attribute loads (measured). Spans of another class raise AttributeError,
# which the hooks contain.
# SpanContext is a tuple (trace_id, span_id, is_remote, ...); its id properties are Python code.
span_ids = itemgetter(0, 1)


# The SDK's processor hooks that do nothing. A wrapper need not forward to them: each call is a
# Python frame inside the application's span.start() / span.end().
_NOOP_HOOKS = tuple(
    vars(cls)[name] for cls in (SpanProcessor, BatchSpanProcessor, SimpleSpanProcessor)
    for name in ("on_start", "_on_ending") if name in vars(cls))


def start_and_ending_hooks(processor: Any) -> tuple[Callable[..., None] | None,
                                                   Callable[[Any], None] | None]:
    """A processor's bound ``on_start`` and ``_on_ending``, each None when it has none or when it
    is one of the SDK's no-ops (``SpanProcessor``'s, ``BatchSpanProcessor``'s ...)."""
    return _unless_noop(getattr(processor, "on_start", None)), _unless_noop(
        getattr(processor, "_on_ending", None))


# What ``BatchSpanProcessor.on_end`` reads, in the SDK releases this package supports: the span's
# sampled flag, then its ``_batch_processor.emit``. ``batch_emit`` checks it at run time, so an
# SDK whose ``on_end`` does anything else is called as it is.
_BATCH_ON_END_NAMES = ("context", "trace_flags", "sampled", "_batch_processor", "emit")


def batch_emit(processor: Any) -> Callable[[Any], None] | None:
    """What the SDK's ``BatchSpanProcessor.on_end`` calls for a sampled span (its queue's
    ``emit``), when ``processor`` is exactly that processor with the ``on_end`` this package
    knows: the span hooks then test the sampled flag (``span._context[3] & 1``, what
    ``span.context.trace_flags.sampled`` reads) and call it, four Python frames fewer per span
    (docs/performance-log.md). None for any other processor, a subclass, an ``on_end`` set on
    the instance, a wrapped ``on_end`` (an instrumentation's), or an SDK whose ``on_end`` reads
    other names: its ``on_end`` is called. Bound when the hooks are built, as ``on_end`` is."""
    if type(processor) is not BatchSpanProcessor or "on_end" in getattr(processor, "__dict__", ()):
        return None
    on_end = vars(BatchSpanProcessor).get("on_end")
    # A plain function (a wrapper such as wrapt's passes __code__ through, not its type) whose
    # code reads what the SDK's reads.
    if type(on_end) is not FunctionType or on_end.__code__.co_names != _BATCH_ON_END_NAMES:
        return None
    emit = getattr(getattr(processor, "_batch_processor", None), "emit", None)
    return emit if callable(emit) else None


def batch_backlog(processor: Any) -> Callable[[], bool] | None:
    """For the SDK's ``BatchSpanProcessor`` (as ``batch_emit`` accepts it): a test whether its
    queue is more than half full, its export thread behind (the grading thread then gives the
    interpreter lock away between two items, so that the export thread gets it before the
    queue drops spans). None for any other processor."""
    if batch_emit(processor) is None:
        return None
    batch = processor._batch_processor
    queue = getattr(batch, "_queue", None)
    size = getattr(batch, "_max_queue_size", None)
    if not isinstance(queue, deque) or type(size) is not int:
        return None
    half = size // 2

    def behind() -> bool:
        return len(queue) > half

    return behind


def _unless_noop(hook: Any) -> Any:
    if hook is None or getattr(hook, "__func__", None) in _NOOP_HOOKS:
        return None
    return hook


# Every field a record needs in one C-level call, down to the attribute dict, the status code,
# the scope's name and the events (their public properties are Python code, and this runs once
# per span of every graded run). Any other span class, or one without a status or scope, raises
# AttributeError and takes the public properties instead.
_RECORD = attrgetter("_context", "_parent", "_name", "_start_time", "_end_time",
                     "_attributes._dict", "_status._status_code", "_instrumentation_scope._name",
                     "_events")
_ERROR = StatusCode.ERROR
# SpanRecord._make without its Python-level frame and length check (the tuple is ours).
_new_record: Callable[[type[SpanRecord], tuple[Any, ...]], SpanRecord] = tuple.__new__


def record_from_span(span: ReadableSpan) -> SpanRecord:
    """A SpanRecord of a span; attributes of an ended span (its events' too) are not copied."""
    try:
        ctx, parent, name, start, end, attrs, code, scope, events = _RECORD(span)
    except AttributeError:  # not the SDK's span class: the public properties
        return _record_from_properties(span)
    error = None
    if end is None:  # still open: take a snapshot, the application may still set attributes
        attrs = _snapshot(attrs)
    elif code is _ERROR:
        error = error_of(span)
    if parent is None:
        parent_id, remote = 0, False
    else:
        parent_id, remote = parent[1], parent[2]
    trace_id, span_id = span_ids(ctx) if ctx else (0, 0)
    if events.__class__ is BoundedList:   # a live span's: its deque's length is C code
        events = events._dq   # type: ignore[attr-defined]
    return _new_record(SpanRecord, (trace_id, span_id, parent_id, name, start or 0, end, attrs,
                                    error, remote, scope, events_of(events) if events else ()))


def events_of(events: Iterable[Any]) -> tuple[SpanEvent, ...]:
    """``(name, attributes)`` of SDK events; the attributes are the event's own dict.

    An SDK event's ``BoundedAttributes`` are immutable from the start (``add_event`` freezes
    them), so their dict is referenced, not copied: a plain dict is cheap to look up and goes
    to the grading process as marshal data. ``tuple(events)`` first: one C-level copy of the
    SDK's deque, which another thread may append to while the span is open. The fields are
    read directly (the ``name`` and ``attributes`` properties are Python code; a loop of
    specialised attribute loads costs two thirds of a dotted ``attrgetter`` mapped over them,
    measured); an event made otherwise (attributes None or a plain mapping) takes the
    properties.
    """
    items = tuple(events)
    out = []
    try:
        for event in items:
            out.append((event._name, event._attributes._dict))
    except AttributeError:
        return tuple([(event.name, _event_mapping(event.attributes)) for event in items])
    return tuple(out)


def _event_mapping(attrs: Any) -> Mapping[str, Any]:
    inner = getattr(attrs, "_dict", None)
    if inner.__class__ is dict:
        return inner
    if attrs is None:
        return {}
    return attrs  # type: ignore[no-any-return]


def _record_from_properties(span: ReadableSpan) -> SpanRecord:
    ctx, parent, name, start, end = (span.context, span.parent, span.name, span.start_time,
                                     span.end_time)
    attrs, status, scope = attributes_of(span), span.status, span.instrumentation_scope
    if end is None:
        attrs = _snapshot(attrs)
    error = None
    if end is not None and status is not None and status.status_code is StatusCode.ERROR:
        error = error_of(span)
    trace_id, span_id = span_ids(ctx) if ctx else (0, 0)
    events = span.events
    return SpanRecord(
        trace_id,
        span_id,
        parent[1] if parent is not None else 0,
        name,
        start or 0,
        end,
        attrs,
        error,
        parent is not None and parent[2],
        scope.name if scope is not None else "",
        events_of(events) if events else (),
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
    """A copy of a finished span with extra attributes and events (the original is frozen).

    The events and links are tuples unless the original dropped some: ``ReadableSpan`` reads a
    drop count from a ``BoundedList`` only, and exposes both as tuples either way.
    """
    merged = dict(attributes_of(span))
    merged.update(attributes)
    added = [Event(name, _event_attributes(attrs), ts) for name, attrs, ts in events]
    all_events: Sequence[Event]
    if span.dropped_events:
        all_events = BoundedList(None)
        all_events.extend(span.events or ())
        all_events.extend(added)
        all_events.dropped = span.dropped_events
    else:
        all_events = (*(span.events or ()), *added)
    links: Sequence[Any] = span.links or ()
    if span.dropped_links:
        bounded_links: BoundedList[Any] = BoundedList(None)
        bounded_links.extend(links)
        bounded_links.dropped = span.dropped_links
        links = bounded_links
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=_frozen_attributes(merged, span.dropped_attributes),
        events=all_events,
        links=links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


_PLAIN_TYPES = frozenset({str, bool, int, float, tuple})


def _plain(values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of attribute values that are already valid, lists made tuples (as the SDK's
    validation would), without re-validating them."""
    if _PLAIN_TYPES.issuperset(map(type, values.values())):
        return dict(values)   # nothing to convert (the verdicts' events): one C copy
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


def _event_attributes(values: Mapping[str, Any]) -> Mapping[str, Any]:
    """An added event's attributes: a read-only view of a private copy.

    The SDK gives its own events ``BoundedAttributes``, which cost a lock each; an event of
    ours has nothing dropped, so the exporters (which read ``items()`` and
    ``dropped_attributes``, 0 for any other mapping) see the same, at a fifth of the cost.
    """
    return MappingProxyType(_plain(values))


def _frozen_attributes(values: Mapping[str, Any], dropped: int = 0) -> BoundedAttributes:
    """Immutable SDK attributes around values that are already valid, without re-validating.

    ``BoundedAttributes(attributes=...)`` cleans every value again (the original span's were
    cleaned when they were set, ours are plain str/bool/int/float or tuples of str); skipping
    that is most of the cost of the root-span copy. The original's drop count is kept.
    """
    bounded = BoundedAttributes(immutable=False)
    bounded._dict = _plain(values)
    bounded.dropped = dropped
    bounded._immutable = True
    return bounded


def suppress_instrumentation() -> object:
    """Attach a context in which instrumentations stay silent; returns the detach token."""
    return otel_context.attach(otel_context.set_value(_SUPPRESS_KEY, True))


def detach(token: object) -> None:
    otel_context.detach(token)  # type: ignore[arg-type]


def annotated_copy(span: ReadableSpan, report: RunReport, *, events: bool = True,
                   attributes: bool = True) -> ReadableSpan:
    """The copy of a run's root that carries its verdicts (what every front door exports).

    ``events`` and ``attributes`` follow ``emit.span_events`` and ``emit.root_attributes``;
    with both off the span itself is returned.
    """
    if not (events or attributes):
        return span
    end = span.end_time or time.time_ns()
    return copy_with(span, root_attributes(report) if attributes else {},
                     span_events(report, end) if events else [])


# -- the SDK's environment configurator (zero-code set-up) --------------------------------------
# ``opentelemetry-instrument`` runs a configurator; the SDK's own one builds the providers from
# the OTEL_* variables in ``opentelemetry.sdk._configuration`` (private). Imported lazily: only
# the zero-code route needs it.

def sdk_configure(**kwargs: Any) -> None:
    """Set the SDK up from the environment exactly as its own configurator does."""
    from opentelemetry.sdk._configuration import _OTelSDKConfigurator

    _OTelSDKConfigurator().configure(**kwargs)  # type: ignore[no-untyped-call]


def sdk_initialize_wrapping(wrap: Callable[[SpanProcessor], SpanProcessor],
                            **kwargs: Any) -> None:
    """The SDK's ``_initialize_components`` with every exporting span processor it builds
    (one ``BatchSpanProcessor`` per ``OTEL_TRACES_EXPORTER`` entry) replaced by ``wrap(it)``.

    SDK 1.40+ takes an ``export_span_processor`` factory; older ones always register a
    ``BatchSpanProcessor`` per exporter, which are swapped on the provider afterwards.
    """
    from opentelemetry.sdk._configuration import _initialize_components
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if "export_span_processor" in inspect.signature(_initialize_components).parameters:
        inner = kwargs.pop("export_span_processor", None) or BatchSpanProcessor

        def export_span_processor(span_exporter: Any, *args: Any, **options: Any
                                  ) -> SpanProcessor:
            return wrap(inner(span_exporter, *args, **options))

        _initialize_components(export_span_processor=export_span_processor, **kwargs)
        return
    _initialize_components(**kwargs)  # pragma: no cover - SDK 1.39
    wrap_export_processors(otel_trace.get_tracer_provider(), wrap)  # pragma: no cover


def wrap_export_processors(provider: Any, wrap: Callable[[SpanProcessor], SpanProcessor]
                           ) -> int:
    """Replace each ``BatchSpanProcessor`` registered on an SDK TracerProvider by ``wrap(it)``,
    in place (for SDKs whose configurator cannot be told which processor to use).
    Returns how many were wrapped."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    multi = getattr(provider, "_active_span_processor", None)
    current = getattr(multi, "_span_processors", None)
    if multi is None or not isinstance(current, tuple):
        return 0
    lock = getattr(multi, "_lock", None)
    with lock if lock is not None else nullcontext():
        wrapped = tuple(wrap(p) if isinstance(p, BatchSpanProcessor) else p
                        for p in multi._span_processors)
        count = sum(a is not b for a, b in zip(wrapped, multi._span_processors))
        multi._span_processors = wrapped
    return count


def new_span(name: str, context: Any, *, resource: Any, attributes: Mapping[str, Any],
             events: Sequence[tuple[str, Mapping[str, Any], int]],
             links: Sequence[tuple[int, int, Mapping[str, Any]]], start_time: int,
             end_time: int, scope: Any = None) -> ReadableSpan:
    """A finished span of our own (a session's span): a new root, linked to ``links``
    (trace id, span id, attributes), never passed through a tracer."""
    from opentelemetry.trace import Link, SpanContext, TraceFlags

    return ReadableSpan(
        name=name,
        context=context,
        parent=None,
        resource=resource,
        attributes=_frozen_attributes(attributes),
        events=tuple(Event(n, _event_attributes(a), ts) for n, a, ts in events),
        links=tuple(Link(SpanContext(tid, sid, is_remote=True,
                                     trace_flags=TraceFlags(TraceFlags.SAMPLED)), dict(a))
                    for tid, sid, a in links),
        start_time=start_time,
        end_time=end_time,
        instrumentation_scope=scope,
    )


def co_registered(span: Any) -> tuple[Any, ...]:
    """The span processors of the provider that started ``span`` (the SDK's multi-processor
    keeps them in ``_span_processors``); () where that cannot be told."""
    multi = getattr(span, "_span_processor", None)
    found = getattr(multi, "_span_processors", ())
    return tuple(found) if isinstance(found, (tuple, list)) else ()
