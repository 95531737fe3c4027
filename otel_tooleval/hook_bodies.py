"""The bodies of ``ToolEvalSpanProcessor``'s span hooks (``hooks.span_hooks`` binds them).

What the hooks read is bound per processor (its buffers' dicts, its downstream, its config's
switches: the names declared below without a value), but not as a closure's cells: the SDK
calls ``on_start`` and ``on_end`` for every span, and a Python function copies every cell it
reads into its frame as it is called and releases each as it returns (47 of them per span),
which costs what a global read does not. ``bind`` makes each processor its own copy of these
functions, with its own globals: this module's, with the declared names bound to that
processor's values; each copy gets its own code object, so the interpreter's inline caches of
one processor's hooks are not another's. Measured (docs/performance-log.md, "Seventh round").

The functions here are templates: called as they are, they fail at the first declared name (no
value). ``hooks.py`` says what each hook does and why it reads what it reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import FunctionType
from typing import Any

from opentelemetry.context import Context

from .assembly import SETTLE_EVERY, EndedRoot, RunJob, TraceBuffers, TraceState
from .conventions import AGENT, MODEL, TOOL, is_framework_span, span_kind
from .conventions.kinds import (
    AGENT_OPERATIONS,
    KIND_KEYS,
    OPERATION_KEY,
    OTHER_AGENT_KEYS,
    agent_kind,
)
from .conventions.registry import AGENT_SPAN_PREFIXES, FRAMEWORK_SCOPES
from .live_guard import GuardEntry, GuardStart

__all__ = ["BOUND", "DONE", "bind", "kind_keys_absent"]


# -- the same for every processor ------------------------------------------------------------
agent_prefixes = AGENT_SPAN_PREFIXES
framework_scopes = FRAMEWORK_SCOPES
operation_key, agent_operations = OPERATION_KEY, AGENT_OPERATIONS
other_agent_keys_absent = OTHER_AGENT_KEYS.isdisjoint
#: No key span_kind reads, so no kind (one C call: ``frozenset.isdisjoint``).
kind_keys_absent = KIND_KEYS.isdisjoint
settle_at = SETTLE_EVERY
#: ``plain_end``'s answer for a span it forwarded or queued.
DONE = object()

# -- bound per processor (``bind``; ``hooks.span_hooks`` says what each is) --------------------
traces: dict[int, TraceState]
traces_get: Callable[[int], TraceState | None]
buffers: TraceBuffers
live: dict[int, Any]
live_pop: Callable[[int, None], Any]
promote: Callable[[Any, int], TraceState | None]
adopt_started: Callable[[int, int], None]
start_root: Callable[[Any, int, int, Any, TraceState | None], Any]
drop: Callable[[str], None]
max_spans: int
max_calls: int
max_bytes: int
named: bool
mapped: Callable[[Any, str, Any, int], int] | None
reclassify: bool
plain: bool
root_auto: bool
unmarked: Callable[[Any], bool]
forward: Callable[[Any], Any]
every: bool
forward_end: Callable[[Any], Any]
forward_start: Callable[..., Any] | None
guard_start: GuardStart | None
guard_end: Callable[[TraceState, Any, GuardEntry | None], Any] | None
no_call: Callable[[Any], bool]
start_extras: bool
hold: bool
defer: bool
settle_soon: Callable[[TraceState], None]
hand_over: Callable[[RunJob | EndedRoot], bool]
hand_over_plain: Callable[[Any], bool]
report: Callable[[str], None]
holder: Any
swept_past: int


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
    (``DONE``); else the trace's first agent, model or tool span, or a run's local root:
    the trace's new state (``promote``; None when it is not tracked)."""
    if _plain(span, True):
        if (parent is None or parent[2]) and hand_over_plain(span):
            return DONE   # no run: forwarded in order by the grading thread
        try:
            if span._context[3] & 1 or every:   # sampled, or not ours to decide
                forward(span)
        except Exception:
            report("downstream.on_end")
        return DONE
    return promote(span, tid)


def on_start(span: Any, parent_context: Context | None = None) -> None:
    try:
        ctx = span._context   # ctx[0], ctx[1]: trace id, span id
        # A plain trace so far (one store, by span id; with no trace tracked, as on plain
        # traffic between runs, no trace id is read: an empty dict is false).
        if (not traces or ctx[0] not in traces) and plain:
            # Marked by its attributes as it starts (or a call the guard checks now):
            # tracked from now on (a span marked by its name only, or later, is promoted
            # as it ends: TraceBuffers._promote).
            if unmarked(span._attributes._dict) or (
                    _plain(span, False) and no_call(span._attributes._dict)):
                live[ctx[1]] = span
                if traces and ctx[0] in traces:   # promoted meanwhile, elsewhere
                    adopt_started(ctx[0], ctx[1])
                elif forward_start is None:   # no more to do: the guard checks no such
                    return                    # span (``no_call``, true of it here)
            else:
                promote(span, ctx[0])
                parent, state = span._parent, None   # for the guard: it looks it up
        else:
            tid = ctx[0]
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
        if forward_start is not None:   # its failures contained (hooks._forwarders)
            forward_start(span, parent_context)


def on_end(span: Any) -> None:
    # Records the ended span (SEMANTICS 1) and, when it ends a run root or a local root,
    # hands that over; one frame: the tracking is inline, not a call. What it reads and
    # tests is in the order of what most spans need (docs/performance-log.md: in the agent
    # loop the hooks cost what the bytecodes they execute cost).
    try:
        ctx = span._context
        # A span of a plain trace, stored as it started: what ``live`` holds under its span id,
        # unless that is another trace's (span ids are unique within a trace only: while some
        # trace is tracked, the one stored must be this span, by its context, which the SDK's
        # copy for ``on_end`` shares, or else by its trace id).
        if (stored := live_pop(ctx[1], None)) is not None and (
                not traces or stored._context is ctx or stored._context[0] == ctx[0]):
            parent = span._parent
            if unmarked(span._attributes._dict) and not span._name.startswith(agent_prefixes):
                if parent is not None and not parent[2]:
                    try:   # the usual one: of no kind, not a local root
                        if ctx[3] & 1 or every:   # sampled, or not ours to decide
                            forward(span)
                    except Exception:
                        report("downstream.on_end")
                    return
                # A framework span by its scope (by its attributes it is not: the keys
                # that mark one, FRAME_KEYS, are among the kind keys just ruled out;
                # test_plain_traffic.py checks that they stay so).
                if not root_auto or (scope := span._instrumentation_scope) is None \
                        or not scope._name.startswith(framework_scopes):
                    # A local root that is no run: forwarded, or queued behind what the
                    # grading thread holds (forwarded in order there: what it holds is
                    # in its ``_queue`` or ``_current``, read in that order, as ``_pop``
                    # sets them), or when the plain spans left open call for their
                    # sweep: the processor's ``_hand_over_plain``, called only then (a
                    # call per plain trace saved). Its own forward: one shared with the
                    # branch above costs every span a second parent test (5 bytecodes
                    # per span on web traffic, measured).
                    if (holder._queue or holder._current is not None
                            or len(live) > swept_past) and hand_over_plain(span):
                        return
                    try:
                        if ctx[3] & 1 or every:   # sampled, or not ours to decide
                            forward(span)
                    except Exception:
                        report("downstream.on_end")
                    return
            state = plain_end(span, ctx[0], parent)
            if state is DONE:
                return
        else:   # tracked, or never stored as plain (without ``plain``, none is), or taken
            # by a promotion meanwhile (then open in its state)
            if stored is not None:   # another trace's open plain span: put back
                live[ctx[1]] = stored
            state = traces_get(ctx[0])
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


#: The names ``bind`` takes from each processor: those declared above without a value.
BOUND: frozenset[str] = frozenset(name for name in __annotations__ if name not in globals())
_BODIES = (named_kind, _plain, plain_end, on_start, on_end)


def bind(values: Mapping[str, Any]) -> dict[str, Any]:
    """This module's globals with every name in ``BOUND`` taken from ``values`` (the rest of
    ``values`` is ignored), and with a copy of each hook body whose globals they are: one
    processor's hooks, by name. A name of ``BOUND`` missing from ``values`` is a TypeError
    here, not a NameError inside a hook (which contains it: the span would go untracked)."""
    missing = BOUND - values.keys()
    if missing:
        raise TypeError(f"the hook bodies need {sorted(missing)}")
    env = dict(globals())
    env.update((name, values[name]) for name in BOUND)
    for body in _BODIES:
        # Its own code object (``replace``): the inline caches are per processor.
        bound = FunctionType(body.__code__.replace(), env, body.__name__, body.__defaults__)
        bound.__qualname__, bound.__doc__ = body.__qualname__, body.__doc__
        env[body.__name__] = bound
    return env
