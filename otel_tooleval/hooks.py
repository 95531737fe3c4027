"""The application-thread hooks of ``ToolEvalSpanProcessor``, at the least cost per span.

The SDK calls ``on_start``, ``_on_ending`` and ``on_end`` inside the application's
``span.start()`` / ``span.end()``, so what they cost is the processor's overhead per span
(``tests/bench/bench_hooks.py`` times them alone). Hence, each choice measured:

- Their bodies (``hook_bodies.py``) read what they need as globals, bound per processor
  (``hook_bodies.bind``), not as a closure's cells, which a call copies into its frame and
  releases, 47 per span; the processor installs them on itself, where they shadow its
  methods: one Python frame per hook, no attribute lookups on the processor but two at a
  plain trace's local root (below).
- ``TraceBuffers``' hot path is inline; it is called into only for what is rare (a new trace
  or local root, a run decision, a drop, a late span).
- They read the SDK span's fields (``_context``, ``_parent``, ``_attributes._dict``, ``_name``,
  ``_instrumentation_scope`` (with a ``conventions:`` mapping),
  ``_end_time``) directly: the one place outside ``_compat`` that touches SDK internals,
  because a specialised attribute load costs half of even a C-level ``attrgetter``. A span of
  another class raises AttributeError, which the hook contains: it is forwarded, untracked.
- The downstream's ``on_start``, ``_on_ending`` and ``on_end`` are looked up when the hooks are
  built (a bound method made per span otherwise), the first two not called at all when they
  are the SDK's no-ops, and ``_on_ending`` then a C function (no Python frame per span); a
  downstream without ``on_end`` fails at each span, contained and reported, as before. The
  SDK's ``BatchSpanProcessor.on_end`` is run inline: its sampled test, then its queue's
  ``emit`` (``_compat.batch_emit``: four Python frames fewer per span).
- A tracked span's bookkeeping (its kind, the call cap, the byte budget, late calls, the kept
  calls and model calls) is deferred when nothing needs it as the span ends (no violation
  marks, guard, ``conventions:`` mapping or named agents): ``on_end`` appends the span to its
  trace's ``ended`` and decides only local roots and run roots; ``TraceBuffers.settle`` does
  the rest before anything reads it (docs/config.md says when the limits apply then).
- In the agent loop the hooks cost what the bytecodes they execute cost, at the SDK's price per
  bytecode (docs/performance-log.md, "Why the hooks cost 4x ..."): what they read and test is
  ordered for the usual span, and the optional work (a guard, a downstream ``on_start``, a
  ``conventions:`` mapping, named agents) sits behind one test each.
- A span of a plain trace is remembered in ``live`` by span id as it starts, and told as it
  ends by taking it out (one ``dict.pop``; while some trace is tracked, checked to be the same
  span: span ids are unique within a trace only), before any trace is looked up; as it starts, the
  trace id is read only when some trace is tracked (``traces`` not empty). The plain
  ``on_start`` returns as soon as it has stored the span unless a downstream ``on_start`` is
  to be called (the guard checks no span it stores: ``no_call`` is true of it). Measured
  (docs/performance-log.md, "Eighth round").
- A plain trace's local root is forwarded inline unless the grading thread holds something
  (``holder``'s queue or current item) or more than ``LIVE_SWEPT_PAST`` plain spans are open
  (a sweep is due); only then is ``hand_over_plain`` called. With a grading process, every
  plain root is handed to it (the hooks do not look into what the process holds).

Every hook contains every failure (ARCHITECTURE: never raise into the application) and still
forwards the span. The buffers' dicts are bound when the hooks are built: the processor
rebuilds them after a fork (which replaces the dicts), when ``downstream`` is set, and at
shutdown (forwarding only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from opentelemetry.context import Context

from . import grading_queue, hook_bodies
from ._compat import batch_emit, start_and_ending_hooks
from .assembly import EndedRoot, RunJob, TraceBuffers, TraceState
from .live_guard import GuardEntry, GuardStart, LiveGuard

__all__ = ["SpanHooks", "forwarding_hooks", "span_hooks"]


class StartHook(Protocol):
    def __call__(self, span: Any, parent_context: Context | None = None) -> None: ...


class PlainOrder(Protocol):
    """What the grading thread holds, which a plain root is forwarded in order with
    (``GradingQueue``'s state): its queue, the item it took from it (None: none), and its
    grading process (None: none)."""

    _queue: Any
    _current: Any
    _offload: Any


class _EveryRoot:
    """``holder`` when every plain root is ``hand_over_plain``'s (no grading thread to keep
    order with, or a grading process, which the hooks do not look into): a queue never empty."""

    _queue = (None,)
    _current = None


_EVERY_ROOT: Any = _EveryRoot()


class SpanHooks(NamedTuple):
    on_start: StartHook
    on_ending: Callable[[Any], object]
    on_end: Callable[[Any], None]


def span_hooks(buffers: TraceBuffers, downstream: Any,
               hand_over: Callable[[RunJob | EndedRoot], bool],
               report: Callable[[str], None], guard: LiveGuard | None = None,
               hand_over_plain: Callable[[Any], bool] | None = None,
               settle_soon: Callable[[TraceState], None] | None = None,
               holder: PlainOrder | None = None) -> SpanHooks:
    """Hooks that track every span in ``buffers`` and forward it to ``downstream``.

    ``hand_over`` takes an ended run root or local root; True when it holds the span (it is
    forwarded later, with its verdicts), False to forward it now. ``report`` logs a contained
    failure, by where it happened. ``guard``: the live guard, handed every tool span as it
    starts and ends (without one, the hooks do nothing more than a None check).
    ``hand_over_plain`` takes the ended local root of a plain trace (no state: see
    ``TraceBuffers._promote``), True when it holds it (forwarded later, in order with the
    roots handed over before it), False to forward it now. ``settle_soon`` takes a trace with
    more than ``SETTLE_EVERY`` deferred spans (``defer`` below; without it, they are settled
    on the application thread, at once). ``holder``: what ``hand_over_plain`` reads to tell
    whether the grading thread holds anything (its queue and current item): when it holds
    nothing and no more than ``grading_queue.LIVE_SWEPT_PAST`` plain spans are open, the hooks
    forward a plain root without calling it (a call per plain trace saved); without a holder,
    or with a grading process, every plain root is handed to it.
    """
    if hand_over_plain is None:
        hand_over_plain = _refuse
    if holder is None or holder._offload is not None:
        holder = _EVERY_ROOT   # every plain root is hand_over_plain's to forward or queue
    swept_past = grading_queue.LIVE_SWEPT_PAST   # read as the hooks are built, as the rest
    traces = buffers._traces
    traces_get = traces.get
    max_spans, max_calls, max_bytes = buffers._max_spans, buffers._max_calls, buffers._max_bytes
    named = buffers._named_agents
    # The config's ``conventions:`` mapping, if any: classified here, before named agents.
    mapped = (buffers.policy.conventions.classifier()
              if buffers.policy.conventions is not None else None)
    reclassify = mapped is not None or named
    start_root, drop = buffers._start_root, buffers._drop
    # Plain traffic: a span of a trace without state is only remembered in one dict, by span
    # id, until it ends (TraceBuffers._promote). With a guard, a span that may be a tool call
    # (``LiveGuard.no_call``: its keys are among ``KIND_KEYS``) is tracked from its start, so
    # the guard checks it then as before; with a guard that may read any span (a
    # ``conventions:`` mapping), every trace is tracked from its first span.
    plain = buffers.plain and (guard is None or guard.by_keys)
    live = buffers._live
    live_pop = live.pop
    promote, adopt_started = buffers._promote, buffers._adopt_started
    root_auto = buffers.policy.root == "auto"
    # No key span_kind reads, so no kind (without a mapping or named agents, which read more)
    unmarked = hook_bodies.kind_keys_absent if not reclassify else _never
    forward_start, on_ending = _forwarders(downstream, report)
    # Bound once (a bound method made per span otherwise); hooks rebuilt when it is set.
    forward_end = _end_forwarder(downstream)
    # What a span the hooks forward goes to: with the SDK's BatchSpanProcessor (the usual
    # downstream), its on_end inline: the sampled test (``ctx[3] & 1``), then its queue's emit
    # (_compat.batch_emit); else the downstream's on_end, for every span (``every``, read after
    # the flags: a sampled span, the usual one, needs no more).
    emit = batch_emit(downstream)
    forward, every = (forward_end, True) if emit is None else (emit, False)
    guard_start, guard_end, no_call = _guard_hooks(guard, traces_get)
    start_extras = guard_start is not None or forward_start is not None
    hold = buffers.hold_tools   # violation marks: tool spans wait for their run's verdict
    # Deferred bookkeeping: without violation marks, a guard, a mapping or named agents, what
    # a tracked span leaves when it ends is not needed before its run is taken, so on_end only
    # appends it to its trace's ``ended`` and decides what is decided now (a local root, a run
    # root); the grading thread does the rest (``TraceBuffers.settle``).
    defer = not hold and guard_end is None and not reclassify
    if settle_soon is None:
        settle_soon = buffers.settle

    # The bodies (hook_bodies.py) bound to this processor's values: the locals above, by the
    # names the bodies declare (``hook_bodies.BOUND``).
    bodies = hook_bodies.bind(locals())
    return SpanHooks(bodies["on_start"], on_ending, bodies["on_end"])


def _guard_hooks(guard: LiveGuard | None, traces_get: Callable[[int], TraceState | None]
                 ) -> tuple[GuardStart | None,
                            Callable[[TraceState, Any, GuardEntry | None], Any] | None,
                            Callable[[Any], bool]]:
    """The guard's start hook (a span that may be a tool call, with its attributes: checked if
    it is one), its end hook (tool spans not checked whole at their start: the check put off,
    or a copy to forward) and the test that rules a span out as a tool call by its attributes
    (``LiveGuard.no_call``), or (None, None, a test that rules out every span) without a
    guard."""
    if guard is None:
        return None, None, _ignore_attrs
    return guard.start_hook(traces_get), guard.ended, guard.no_call


def forwarding_hooks(downstream: Any, report: Callable[[str], None]) -> SpanHooks:
    """Hooks that only forward to ``downstream`` (after shutdown: nothing is tracked)."""
    forward_start, on_ending = _forwarders(downstream, report)

    def on_start(span: Any, parent_context: Context | None = None) -> None:
        if forward_start is not None:
            forward_start(span, parent_context)   # contained (_forwarders)

    def on_end(span: Any) -> None:
        if downstream is not None:
            try:
                downstream.on_end(span)
            except Exception:
                report("downstream.on_end")

    return SpanHooks(on_start, on_ending, on_end)


def _end_forwarder(downstream: Any) -> Callable[[Any], Any]:
    """The downstream's bound ``on_end``; for one without it, a call that looks it up at every
    span (and fails there, contained by the hook, as an unbound lookup would); with no
    downstream, a C function that does nothing (``_ignore``)."""
    if downstream is None:
        return _ignore
    try:
        bound: Callable[[Any], Any] = downstream.on_end
    except AttributeError:
        return lambda span: downstream.on_end(span)
    return bound


def _forwarders(downstream: Any, report: Callable[[str], None]
                ) -> tuple[StartHook | None, Callable[[Any], object]]:
    """The downstream's ``on_start``, its failures contained and reported (None when there is
    nothing to call), and our ``_on_ending`` hook (forwarding to the downstream's, or doing
    nothing)."""
    bound_start, forward_ending = start_and_ending_hooks(downstream)
    forward_start: StartHook | None = None
    if bound_start is not None:
        def forward_start(span: Any, parent_context: Context | None = None) -> None:
            try:
                bound_start(span, parent_context=parent_context)
            except Exception:
                report("downstream.on_start")

    if forward_ending is None:
        return forward_start, _ignore

    def on_ending(span: Any) -> None:
        try:
            forward_ending(span)
        except Exception:
            report("downstream._on_ending")

    return forward_start, on_ending


# ``_on_ending`` when the downstream has none: the SDK calls it for every span, and a function
# of C (``id``: one argument, no effect) costs no Python frame there.
_ignore: Callable[[Any], object] = id


#: ``no_call`` without a guard: rules out every span, in one C call (``frozenset.isdisjoint``).
_ignore_attrs: Callable[[Any], bool] = frozenset().isdisjoint

#: A test that rules out no span, in one C call (``tuple.__contains__``: no frame).
_never: Callable[[Any], bool] = ().__contains__


def _refuse(span: Any) -> bool:
    return False
