"""The application-thread hooks of ``ToolEvalSpanProcessor``, at the least cost per span.

The SDK calls ``on_start``, ``_on_ending`` and ``on_end`` inside the application's
``span.start()`` / ``span.end()``, so what they cost is the processor's overhead per span
(``tests/bench/bench_hooks.py`` times them alone). Hence, each choice measured:

- They are closures over what they read, which the processor installs on itself, where they
  shadow its methods: one Python frame per hook, no attribute lookups on the processor.
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

Every hook contains every failure (ARCHITECTURE: never raise into the application) and still
forwards the span. The buffers' dicts are bound when the hooks are built: the processor
rebuilds them after a fork (which replaces the dicts), when ``downstream`` is set, and at
shutdown (forwarding only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from opentelemetry.context import Context

from ._compat import batch_emit, start_and_ending_hooks
from .assembly import SETTLE_EVERY, EndedRoot, RunJob, TraceBuffers, TraceState
from .conventions import AGENT, MODEL, TOOL, is_framework_span, span_kind
from .conventions.kinds import (
    AGENT_OPERATIONS,
    KIND_KEYS,
    OPERATION_KEY,
    OTHER_AGENT_KEYS,
    agent_kind,
)
from .conventions.registry import AGENT_SPAN_PREFIXES, FRAME_KEYS, FRAMEWORK_SCOPES
from .live_guard import GuardEntry, GuardStart, LiveGuard

__all__ = ["SpanHooks", "forwarding_hooks", "span_hooks"]


class StartHook(Protocol):
    def __call__(self, span: Any, parent_context: Context | None = None) -> None: ...


class SpanHooks(NamedTuple):
    on_start: StartHook
    on_ending: Callable[[Any], object]
    on_end: Callable[[Any], None]


def span_hooks(buffers: TraceBuffers, downstream: Any,
               hand_over: Callable[[RunJob | EndedRoot], bool],
               report: Callable[[str], None], guard: LiveGuard | None = None,
               hand_over_plain: Callable[[Any], bool] | None = None,
               settle_soon: Callable[[TraceState], None] | None = None) -> SpanHooks:
    """Hooks that track every span in ``buffers`` and forward it to ``downstream``.

    ``hand_over`` takes an ended run root or local root; True when it holds the span (it is
    forwarded later, with its verdicts), False to forward it now. ``report`` logs a contained
    failure, by where it happened. ``guard``: the live guard, handed every tool span as it
    starts and ends (without one, the hooks do nothing more than a None check).
    ``hand_over_plain`` takes the ended local root of a plain trace (no state: see
    ``TraceBuffers._promote``), True when it holds it (forwarded later, in order with the
    roots handed over before it), False to forward it now. ``settle_soon`` takes a trace with
    more than ``SETTLE_EVERY`` deferred spans (``defer`` below; without it, they are settled
    on the application thread, at once).
    """
    if hand_over_plain is None:
        hand_over_plain = _refuse
    traces = buffers._traces
    traces_get = traces.get
    max_spans, max_calls, max_bytes = buffers._max_spans, buffers._max_calls, buffers._max_bytes
    named = buffers._named_agents
    agent_prefixes = AGENT_SPAN_PREFIXES
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
    promote, adopt_started = buffers._promote, buffers._adopt_started
    root_auto = buffers.policy.root == "auto"
    # No key span_kind reads, so no kind (without a mapping or named agents, which read more)
    kind_keys_absent = KIND_KEYS.isdisjoint
    unmarked = kind_keys_absent if not reclassify else _never
    frame_keys_absent = frozenset(FRAME_KEYS).isdisjoint
    framework_scopes = FRAMEWORK_SCOPES
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
    settle_at = SETTLE_EVERY
    operation_key, agent_operations = OPERATION_KEY, AGENT_OPERATIONS
    other_agent_keys_absent = OTHER_AGENT_KEYS.isdisjoint
    if settle_soon is None:
        settle_soon = buffers.settle

    def named_kind(span: Any, attrs: Any) -> int:
        """A span's kind under a ``conventions:`` mapping or named agents (as on_end reads it);
        ``span_kind`` is not run for a span with none of the keys it reads (its kind is 0)."""
        kind = 0 if kind_keys_absent(attrs) else span_kind(attrs)
        if mapped is not None:
            kind = mapped(attrs, span._name, span._instrumentation_scope, kind)
        if named:
            kind = buffers._named_kind(attrs, span, kind)
        return kind

    def _plain(span: Any, ended: bool) -> bool:
        """Whether a span of a plain trace leaves it plain: no agent, model nor tool span (as
        on_end reads them), nor, once ended, a local root that is a run without any (a
        framework span: TraceBuffers.decide). The hooks test the usual span inline first."""
        attrs = span._attributes._dict
        kind = named_kind(span, attrs) if reclassify else span_kind(attrs)
        if kind or span._name.startswith(agent_prefixes):
            return False
        parent = span._parent
        if ended and (parent is None or parent[2]):
            scope = span._instrumentation_scope
            return not (root_auto and is_framework_span(attrs, scope.name if scope else ""))
        return True


    def plain_end(span: Any, tid: int, parent: Any) -> Any:
        """A span of a plain trace that on_end did not find plain at a glance (marked by a kind
        key or its name, or a local root that may be a run: a framework span), as it ends:
        forwarded, or queued (a root: ``hand_over_plain``), while the trace stays plain
        (``_DONE``); else the trace's first agent, model or tool span, or a run's local root:
        the trace's new state (``promote``; None when it is not tracked)."""
        if _plain(span, True):
            if (parent is None or parent[2]) and hand_over_plain(span):
                return _DONE   # no run: forwarded in order by the grading thread
            try:
                if span._context[3] & 1 or every:   # sampled, or not ours to decide
                    forward(span)
            except Exception:
                report("downstream.on_end")
            return _DONE
        return promote(span, tid)

    def on_start(span: Any, parent_context: Context | None = None) -> None:
        try:
            ctx = span._context   # ctx[0], ctx[1]: trace id, span id
            tid = ctx[0]
            if tid not in traces and plain:   # a plain trace so far: one dict store
                # Marked by its attributes as it starts (or a call the guard checks now):
                # tracked from now on (a span marked by its name only, or later, is promoted
                # as it ends: TraceBuffers._promote).
                if unmarked(span._attributes._dict) or (
                        _plain(span, False) and no_call(span._attributes._dict)):
                    live[ctx[1]] = span
                    if tid in traces:   # promoted meanwhile, elsewhere
                        adopt_started(tid, ctx[1])
                else:
                    promote(span, tid)
                    parent, state = span._parent, None   # for the guard: it looks it up
            else:
                state = traces_get(tid)
                if (parent := span._parent) is None or state is None or parent[2] \
                        or state.closed:   # [2]: is_remote
                    start_root(span, tid, ctx[1], parent, state)
                elif len(state.parents) < max_spans:
                    sid = ctx[1]
                    state.parents[sid] = parent[1]
                    state.open[sid] = span
                else:
                    drop("max_spans_per_trace")
        except Exception:
            report("on_start")
        if start_extras:   # a guard, or a downstream on_start that does something
            if guard_start is not None:
                try:
                    attrs = span._attributes._dict
                    if not no_call(attrs):   # most spans: one C call, the guard's only cost
                        # With what the tracking read: the span's context, parent, and its
                        # trace's state as it was before (None or closed: the guard looks it
                        # up again).
                        guard_start(span, attrs, ctx, parent, state)
                except Exception:
                    report("guard")
            if forward_start is not None:
                try:
                    forward_start(span, parent_context=parent_context)
                except Exception:
                    report("downstream.on_start")

    def on_end(span: Any) -> None:
        # Records the ended span (SEMANTICS 1) and, when it ends a run root or a local root,
        # hands that over; one frame: the tracking is inline, not a call. What it reads and
        # tests is in the order of what most spans need (docs/performance-log.md: in the agent
        # loop the hooks cost what the bytecodes they execute cost).
        try:
            ctx = span._context
            tid = ctx[0]
            if tid in traces:
                state = traces_get(tid)
            else:
                try:
                    del live[ctx[1]]
                except KeyError:   # never stored as plain (without ``plain``, none is), or
                    state = traces_get(tid)   # adopted by a promotion meanwhile: as tracked
                else:   # a span of a plain trace
                    parent = span._parent
                    if unmarked(span._attributes._dict) and not span._name.startswith(agent_prefixes):
                        if parent is not None and not parent[2]:
                            try:   # the usual one: of no kind, not a local root
                                if ctx[3] & 1 or every:   # sampled, or not ours to decide
                                    forward(span)
                            except Exception:
                                report("downstream.on_end")
                            return
                        if not root_auto or frame_keys_absent(span._attributes._dict) and (
                                (scope := span._instrumentation_scope) is None
                                or not scope._name.startswith(framework_scopes)):
                            # A local root that is no run: forwarded, or queued behind what the
                            # grading thread holds (forwarded in order there). Its own forward:
                            # one shared with the branch above costs every span a second parent
                            # test (5 bytecodes per span on web traffic, measured).
                            if hand_over_plain(span):
                                return
                            try:
                                if ctx[3] & 1 or every:   # sampled, or not ours to decide
                                    forward(span)
                            except Exception:
                                report("downstream.on_end")
                            return
                    state = plain_end(span, tid, parent)
                    if state is _DONE:
                        return
        except Exception:
            report("on_end")
            try:
                forward_end(span)
            except Exception:
                report("downstream.on_end")
            return
        out = span   # what is forwarded: the guard may put a marked copy of a tool span here
        try:
            sid = ctx[1]
            # A closed trace keeps its open spans: still open when the grading thread takes
            # the run, they are its pending calls, as they were when the root ended.
            if state is None or state.closed or state.open.pop(sid, None) is None:
                # Untracked (late, or past a cap), unless a promotion on another thread had
                # taken it from ``_live``: ``_end_untracked`` waits for it, and the span is then
                # open in its trace's state, ended as tracked (once: it is open no more).
                if buffers._end_untracked(state, ctx[0], span._attributes._dict, span):
                    return on_end(span)
            elif defer:
                ended = state.ended
                ended.append(span)   # before a hand-over: settled before it is read
                if len(ended) > settle_at:   # settled soon, so that the byte budget and the
                    settle_soon(state)       # memory they hold bound a long run as it goes
                parent = span._parent
                if parent is None or parent[2]:
                    state.open_roots -= 1   # a local root, as below
                    if state.open_roots <= 0:
                        state.closed = True
                    if hand_over((state, span)):
                        return
                # An agent span (``agent_kind``; a GenAI span whose operation is no agent's,
                # with no other convention's agent key, the usual one, told inline), or a
                # framework span to grade as a run.
                elif ((op := (attrs := span._attributes._dict).get(operation_key)).__class__
                      is not str or op in agent_operations or not other_agent_keys_absent(attrs)
                      ) and agent_kind(attrs) or (state.run_roots and sid in state.run_roots):
                    job = buffers._decide(state, span, sid)
                    if job is not None and hand_over(job):
                        return
                elif state.closed:   # closed since the test above (another thread's root, an
                    buffers.settle(state)   # eviction) and maybe settled: nothing else would
                try:   # its own forward: the one below tests the guard's copy first
                    if ctx[3] & 1 or every:   # sampled, or not ours to decide
                        forward(span)
                except Exception:
                    report("downstream.on_end")
                return
            else:
                held = None  # with violation marks, the list a tool span waits in for its verdict
                attrs = span._attributes._dict
                parent = span._parent
                kind = span_kind(attrs)
                if reclassify:   # a conventions: mapping or named agents
                    if mapped is not None:
                        kind = mapped(attrs, span._name, span._instrumentation_scope, kind)
                    if named:
                        kind = buffers._named_kind(attrs, span, kind)
                if kind or named:
                    end = span._end_time
                    if end:
                        state.touched = end
                    kept = None
                    if kind & TOOL:
                        if state.done and buffers._under(state, sid, state.done):
                            buffers._late_span()   # its run was already taken for grading
                        elif state.tool_calls >= max_calls:
                            state.dropped_calls += 1
                            drop("max_calls_per_run")
                        else:
                            state.tool_calls += 1
                            kept = state.tools
                    elif kind & MODEL:
                        kept = state.models
                    elif kind & AGENT and parent is not None and not parent[2]:
                        # An agent span below a local root names the run's agent when the
                        # run's root is no agent span (run_from tells it from the model
                        # calls); its values are not kept for grading, so not counted.
                        state.models.append(span)
                    elif not kind and span._name.startswith(agent_prefixes) \
                            and parent is not None and not parent[2]:
                        state.models.append(span)   # as below, with named agents
                    if kept is not None:
                        size = 0   # assembly._value_bytes, inline
                        for value in attrs.values():
                            if value.__class__ is str:
                                size += len(value)
                        state.bytes += size
                        if state.bytes <= max_bytes:
                            kept.append(span)
                            if hold and kind & TOOL:
                                # Held for the verdict, unless it is a root of its own (a
                                # local root or run root: the grading thread forwards those).
                                held = state.held
                        else:   # past the byte budget: its values are not kept, nor is it
                            kept.append(buffers._stripped(state, span, attrs, size, kind))
                    if guard_end is not None and kind & TOOL:
                        # A span checked whole at its start (most are) needs nothing more.
                        checked = state.guard
                        entry = checked.seen.pop(sid, None) if checked is not None else None
                        if entry is None or entry[2]:
                            try:
                                marked = guard_end(state, span, entry)
                                if marked is not None:
                                    out = marked
                            except Exception:
                                report("guard")
                elif span._name.startswith(agent_prefixes) and parent is not None \
                        and not parent[2]:
                    # An agent span marked by its name only (ADK 1.x's agent_run [name]):
                    # it names the run's agent, as a marked agent span below does.
                    state.models.append(span)
                if parent is None or parent[2]:
                    # A local root: only marked closed here (see EndedRoot, TraceBuffers._close).
                    state.open_roots -= 1
                    if state.open_roots <= 0:
                        state.closed = True
                    if hand_over((state, span)):
                        return   # held: the grading thread forwards the root
                elif kind & AGENT or (state.run_roots and sid in state.run_roots):
                    job = buffers._decide(state, span, sid)
                    if job is not None and hand_over(job):
                        return   # held: the grading thread forwards it, with its verdicts
                elif held is not None:
                    held.append(out)   # forwarded with its run's verdict, marked if it broke
                    return             # a rule (the grading thread)
        except Exception:
            report("on_end")
        try:
            if out is not span:   # the guard's marked copy
                forward_end(out)
            elif ctx[3] & 1 or every:   # sampled, or not ours to decide
                forward(span)
        except Exception:
            report("downstream.on_end")

    return SpanHooks(on_start, on_ending, on_end)


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
            try:
                forward_start(span, parent_context=parent_context)
            except Exception:
                report("downstream.on_start")

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
    """The downstream's ``on_start`` (None when there is nothing to call) and our ``_on_ending``
    hook (forwarding to the downstream's, or doing nothing)."""
    forward_start, forward_ending = start_and_ending_hooks(downstream)
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

#: ``plain_end``'s answer for a span it forwarded or queued.
_DONE = object()


#: A test that rules out no span, in one C call (``tuple.__contains__``: no frame).
_never: Callable[[Any], bool] = ().__contains__


def _refuse(span: Any) -> bool:
    return False
