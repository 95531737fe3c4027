"""Per-trace buffers of the live processor: bounded, thread-safe, with late-span tombstones.

The application thread fills them from inside ``span.start()`` / ``span.end()``, through the
processor's hooks (``hooks.py``, which hold this module's hot path inline). They do a few dict
lookups and an append on the span's trace state; the lock covers only creating, evicting and
removing trace states (single dict and list operations are atomic under the GIL).
All decoding, run building and grading happen later, on the grading thread, from a ``RunJob``.

Run roots are decided as spans end (SEMANTICS 1), the same way ``trajectory.find_runs``
decides them over finished traces:
- an agent span below an agent span is nested (merged into the outer run);
- an agent span below a framework span is part of the outermost framework span's run;
- any other agent span is a run root, graded as soon as it ends;
- a local root is a run when ``RunPolicy.local_root_is_run`` says so.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ._compat import attributes_of, record_from_span
from .config import LimitsConfig
from .conventions import AGENT, MODEL, TOOL, TOOL_CONVENTIONS, is_framework_span, span_kind
from .conventions.registry import AGENT_SPAN_PREFIXES
from .model import SpanRecord
from .trajectory import AGENT_NAME_KEYS, RunPolicy

__all__ = ["SETTLE_EVERY", "EndedRoot", "RunJob", "TraceBuffers", "TraceState"]

# Attributes counted against limits.max_run_bytes: a tool call's arguments and result under
# every convention, and a model call's messages.
_VALUE_KEYS = tuple(dict.fromkeys(k for c in TOOL_CONVENTIONS for k in (*c.arguments, *c.result)))
_MODEL_KEYS = ("gen_ai.input.messages", "gen_ai.output.messages", "input.value", "output.value",
               "pydantic_ai.all_messages")
# Graded runs a trace remembers, newest first, so that their late children are known late; the
# older are forgotten (a trace whose root never ends would otherwise grow with every run).
_RUNS_REMEMBERED = 1024
#: Deferred spans of one trace (``TraceState.ended``) past which the hooks have them settled
#: without waiting for a run decision (``ToolEvalSpanProcessor._settle_soon``).
SETTLE_EVERY = 256
# Span names whose match against named agents is remembered (``TraceBuffers._named``); past
# it, names are matched each time (a service whose span names carry ids, say).
_NAMES_REMEMBERED = 4096


class TraceState:
    """What is kept of one trace while it is open. Plain attributes, no methods on the hot path."""

    __slots__ = (
        "bytes",
        "closed",
        "done",
        "dropped_calls",
        "ended",
        "graded",
        "guard",
        "had_runs",
        "held",
        "marks",
        "models",
        "open",
        "open_roots",
        "parents",
        "roots_seen",
        "run_roots",
        "settle_queued",
        "tool_calls",
        "tools",
        "touched",
        "trace_id",
    )

    def __init__(self, trace_id: int) -> None:
        self.trace_id = trace_id
        self.parents: dict[int, int] = {}      # span id -> local parent id (0: local root)
        self.open: dict[int, Any] = {}         # span id -> live span, until it ends
        self.tools: list[Any] = []             # ended tool spans (or SpanRecords past a cap)
        self.ended: list[Any] = []             # ended spans whose bookkeeping waits for
                                               # ``TraceBuffers.settle`` (deferred hooks)
        self.settle_queued = False             # a settle of it is queued for the grading thread
        self.models: list[Any] = []            # ended model-call spans
        self.touched = time.time_ns()          # last tool/model/agent span end, ns (TTL)
        self.done: dict[int, None] = {}        # run roots whose calls were taken for grading
                                               # (insertion ordered: the oldest forgotten)
        self.dropped_calls = 0                 # calls over max_calls_per_run, not yet reported
        self.tool_calls = 0
        self.bytes = 0
        self.open_roots = 0
        self.roots_seen = 0
        self.had_runs = False
        self.graded: set[int] = set()          # run roots already handed to the grader
        self.run_roots: set[int] = set()       # framework spans to grade as runs when they end
        self.closed = False
        self.guard: Any = None                 # live_guard.GuardTrace, with a guard: section
        self.held: list[Any] = []              # ended tool spans waiting for their run's
                                               # verdict (violation marks), to forward then
        self.marks: dict[int, list[str]] | None = None   # span id -> graders, from runs
                                               # graded before the one that forwards the span


@dataclass(slots=True)
class RunJob:
    """A run root that ended, with the trace state its calls are read from."""

    trace: TraceState
    root: Any                     # the ended ReadableSpan of the run root
    outermost: bool = True        # its records may be released once graded
    claimed: bool = False         # its root was forwarded (graded or not): never twice
    held: list[Any] | None = None  # its held tool spans, taken for grading (violation marks)


# A local root that ended: ``(trace state, span)``. Whether it is a run is decided on the
# grading thread (``TraceBuffers.decide``), so that the application thread does no more at the
# root's end than at any other span's: the decision's code is cold by the time a long run ends,
# and cold code is what made the root's ``end()`` slow (measured: 40 us at 500 calls).
EndedRoot = tuple["TraceState", Any]


class TraceBuffers:
    """All open traces of one processor."""

    def __init__(self, policy: RunPolicy, limits: LimitsConfig,
                 on_drop: Callable[[str, int], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, hold_tools: bool = False,
                 on_retire: Callable[[TraceState], None] | None = None,
                 report: Callable[[str], None] | None = None) -> None:
        self.policy = policy
        self._report = report   # a contained failure, by where (the processor's log)
        self.limits = limits
        self._on_drop = on_drop
        self._clock = clock
        self._lock = threading.Lock()
        self._settle_lock = threading.Lock()   # one settler at a time (``settle``)
        # One promotion at a time (``_promote``); reentrant: a span may end on the promoting
        # thread inside it (a finalizer the collector runs), and its hook must not wait for it.
        self._promote_lock = threading.RLock()
        self._promoting = 0   # the thread id of the promotion running (0: none)
        self._ended_meanwhile: list[Any] = []   # spans that ended on that thread inside it
        self._traces: dict[int, TraceState] = {}
        # Plain traffic (``plain``): the open spans of traces that have no state, by span id.
        # A trace gets a state only when one of its spans turns out to be an agent, model or
        # tool span (``_promote``), which adopts the trace's open spans from here.
        self._live: dict[int, Any] = {}
        self.plain = policy.root != "local_root"
        self._tombstones: dict[int, float] = {}   # trace id -> expiry (insertion ordered)
        # Plain attributes: the hooks read these once, when they are built (hooks.py).
        self._max_spans = limits.max_spans_per_trace
        self._max_calls = limits.max_calls_per_run
        self._max_bytes = limits.max_run_bytes
        self._named_agents = bool(policy.agent_span_names) or policy.root_pattern is not None
        # Span name -> named as an agent (``_named``), for spans that carry no agent name.
        self._named_names: dict[str, bool] = {}
        self._tombstone_s = limits.tombstone_seconds
        self._max_open = limits.max_open_runs
        # Tool spans wait in ``TraceState.held`` for their run's verdict (violation marks);
        # a trace given up on (evicted, past its TTL, cleared) that holds some is handed to
        # ``on_retire``, outside the lock, to forward them.
        self.hold_tools = hold_tools
        self._on_retire = on_retire
        self.counts: Counter[str] = Counter()

    # -- bookkeeping -------------------------------------------------------------------------

    def _drop(self, reason: str, n: int = 1) -> None:
        self.counts["dropped." + reason] += n
        if self._on_drop is not None:
            self._on_drop(reason, n)

    def __len__(self) -> int:
        """Open traces: those whose last local root has not ended (a closed one waits only for
        the grading thread to take its root)."""
        return sum(not state.closed for state in list(self._traces.values()))

    def closed(self) -> int:
        """Finished traces remembered for late spans (tombstones): at most ``max_open_runs``,
        each for ``tombstone_seconds``."""
        return len(self._tombstones)

    def open_traces(self) -> list[TraceState]:
        with self._lock:
            return list(self._traces.values())

    def _new_trace(self, trace_id: int, local_root: bool,
                   evicted: list[TraceState] | None = None) -> TraceState | None:
        """The open state of a trace, new unless it has one; None for a late child of a
        finished trace. The traces it evicts (``max_open_runs``) are handed to ``_evicted``
        here, or appended to ``evicted`` for the caller to (``_promote``: outside its lock)."""
        released: list[TraceState] = [] if evicted is None else evicted
        with self._lock:
            state = self._traces.get(trace_id)
            if state is not None and not state.closed:
                return state   # (a closed one is replaced: its last local root has ended)
            if not local_root and trace_id in self._tombstones:
                return None   # a late child of a finished trace, not a new run
            self._tombstones.pop(trace_id, None)
            while len(self._traces) >= self._max_open:
                old = self._traces.pop(next(iter(self._traces)))
                if old.closed:   # its root is queued, not an eviction: closed here instead
                    self._bury(old.trace_id)
                else:
                    released.append(old)
            state = TraceState(trace_id)
            self._traces[trace_id] = state
        if evicted is None:
            for old in released:
                self._evicted(old, "max_open_runs")
        return state

    def _evicted(self, state: TraceState, reason: str) -> None:
        state.closed = True
        self.settle(state)   # its deferred spans still counted (late, over a cap)
        self._drop(reason)
        self._retire(state)

    def _retire(self, state: TraceState) -> None:
        if state.held and self._on_retire is not None:
            self._on_retire(state)

    def _close(self, state: TraceState) -> None:
        """Forget a trace whose last local root ended, leaving a tombstone for late spans.

        As that root ends, the application thread only marks the state ``closed`` (from then
        on a span of it that ends is late, however soon the grading thread gets to the root,
        and a new local root of the trace id starts a new state); ``decide`` closes it on the
        grading thread, which keeps the lock and the tombstone out of the root's ``end()``.
        """
        tid = state.trace_id
        with self._lock:
            if self._traces.get(tid) is state:
                del self._traces[tid]
            state.closed = True
            self._bury(tid)

    def _bury(self, tid: int) -> None:
        """Leave a tombstone for a closed trace (under the lock)."""
        if self._tombstone_s > 0:
            tombstones = self._tombstones
            tombstones[tid] = self._clock() + self._tombstone_s
            if len(tombstones) > self._max_open:
                tombstones.pop(next(iter(tombstones)))

    def sweep(self) -> None:
        """Evict traces past their TTL and forget expired tombstones (grading thread)."""
        now = self._clock()
        stale = time.time_ns() - int(self.limits.run_ttl_seconds * 1e9)   # span clocks: ns
        expired: list[TraceState] = []
        self.settle_all()   # ``touched`` as the traces' ended spans left it
        with self._lock:
            for tid, state in list(self._traces.items()):
                # One with spans ended since the settle above may have been touched: next time
                if state.touched < stale and not state.ended:
                    expired.append(self._traces.pop(tid))
                    state.closed = True
            for tid, expiry in list(self._tombstones.items()):
                if expiry > now:
                    break
                del self._tombstones[tid]
            if expired:   # counted with the removal, in one metric update, so a reader of
                self._drop("ttl", len(expired))   # stats() never sees one without the other
        live = self._live
        for sid, span in list(live.items()):   # plain spans that never ended: forgotten
            if (span.start_time or 0) < stale:
                live.pop(sid, None)
        self.settle_all(expired)   # what ended in the meantime, counted
        for state in expired:
            self._retire(state)

    def clear(self, reason: str) -> list[TraceState]:
        """Forget every open trace (shutdown), counting each as dropped; the traces forgotten
        (their held tool spans are the caller's to forward, once queued runs are graded)."""
        self.settle_all()   # late spans counted
        with self._lock:
            states = list(self._traces.values())
            self._traces.clear()
            self._tombstones.clear()
            self._live.clear()
        self.settle_all(states)   # and what ended since the settle above
        for state in states:
            if not state.closed:   # a closed one's root is queued: counted where it is handled
                state.closed = True
                self._drop(reason)
        return states

    def reset_after_fork(self) -> None:
        """Start empty in a forked child (the hooks hold ``_traces``: rebuild them after)."""
        self._lock = threading.Lock()
        self._settle_lock = threading.Lock()
        self._promote_lock = threading.RLock()
        self._promoting = 0
        self._ended_meanwhile = []
        self._traces = {}
        self._tombstones = {}
        self._live = {}

    # -- slow paths of the application-thread hooks (hooks.py) --------------------------------
    # The hooks track the usual span inline; what is rare, they hand to these.

    def _start_root(self, span: Any, trace_id: int, sid: int, parent: Any,
                    state: TraceState | None) -> None:
        """A local root, the first span seen of a trace, or a span of a closed trace."""
        local_root = parent is None or parent.is_remote
        if state is not None and state.closed:
            if not local_root:
                return   # starts after its trace's last local root ended: late, untracked
            state = None  # a new local root of the trace id: a new state
        if state is None:
            state = self._new_trace(trace_id, local_root)
            if state is None:
                return
        if len(state.parents) >= self._max_spans:
            self._drop("max_spans_per_trace")
            return
        state.parents[sid] = 0 if local_root else parent.span_id
        state.open[sid] = span
        if local_root:
            state.open_roots += 1
            state.roots_seen += 1

    def _promote(self, span: Any, trace_id: int) -> TraceState | None:
        """A span of a trace without state (plain so far) ends and is an agent, model or tool
        span, or a local root that may be a run: the trace gets its state now, with the
        trace's open spans (``_live``) adopted as if tracked since their start, the ending span
        among them (its end then goes the usual way). None when the trace is not tracked (a
        late span of a finished trace, as ``_new_trace`` says).

        What the trace's earlier spans would have left is not needed: the ended ones were no
        agent, model or tool spans and are no ancestors of a span still to end (a span ends
        after its children), and every open one, the local root and the framework spans a run
        is placed under (``_place``) included, is adopted. One scan of the open plain spans of
        every trace, once per agent trace (two: see below).

        Under ``_promote_lock``, one promotion at a time, so that another thread's hooks can
        wait for it: a span this one took from ``_live`` that ends meanwhile finds itself
        neither plain nor open; its ``on_end`` waits here (``_end_untracked``), then finds it
        adopted, open, and ends it as tracked. A span stored in ``_live`` after the first scan
        by a hook that looked for the state before it was there is taken by the second scan.
        """
        evicted: list[TraceState] = []
        with self._promote_lock:
            outer, self._promoting = self._promoting, threading.get_ident()
            try:
                ours = [span]
                if self._live:
                    self._take_live(trace_id, ours)
                local_root = False
                for one in ours:
                    parent = one._parent
                    if parent is None or parent[2]:
                        local_root = True
                state = self._new_trace(trace_id, local_root, evicted)
                if state is not None:
                    if self._live:   # stored meanwhile by a hook that did not see the state
                        self._take_live(trace_id, ours)
                    for one in ours:
                        self._adopt(state, one)
                    if self._ended_meanwhile:
                        self._drop_ended_meanwhile(state)
            finally:
                self._promoting = outer
                if not outer:   # none is left to adopt them (a trace not tracked, or done)
                    self._ended_meanwhile.clear()
        for old in evicted:
            self._evicted(old, "max_open_runs")
        return state

    def _drop_ended_meanwhile(self, state: TraceState) -> None:
        """Spans of ``state``'s trace that ended on the promoting thread inside the promotion
        (their hooks ran untracked, ``_end_untracked``): not left open once adopted."""
        kept = []
        for span in self._ended_meanwhile:
            if span._context[0] != state.trace_id:
                kept.append(span)   # another trace's, of an outer promotion
            elif state.open.pop(span._context[1], None) is not None:
                parent = span._parent
                if parent is None or parent[2]:
                    state.open_roots -= 1
        self._ended_meanwhile[:] = kept

    def _take_live(self, trace_id: int, into: list[Any]) -> None:
        """Take the open plain spans of a trace out of ``_live``, into ``into``."""
        live = self._live
        for sid, other in list(live.items()):
            if other._context[0] == trace_id and (other := live.pop(sid, None)) is not None:
                into.append(other)

    def _adopt(self, state: TraceState, span: Any) -> None:
        """Track an open span of a trace that was plain when it started (``_start_root``'s
        bookkeeping, after the fact)."""
        parent = span._parent
        self._start_root(span, state.trace_id, span._context[1], parent, state)

    def _adopt_started(self, trace_id: int, sid: int) -> None:
        """A plain span whose trace got a state while it started (another thread's
        ``_promote``): adopted unless that promotion took it."""
        span = self._live.pop(sid, None)
        state = self._traces.get(trace_id)
        if span is not None:
            if state is not None:
                self._adopt(state, span)
            else:   # its trace's state is gone again: plain, as it started
                self._live[sid] = span

    def _end_untracked(self, state: TraceState | None, trace_id: int,
                       attrs: Mapping[str, Any], span: Any = None) -> bool:
        """A span that ends untracked: counted when it is a tool call of a finished trace.

        With plain traces, it may be one that another thread's promotion took from ``_live``
        and has not adopted yet: once that promotion is done (``_promote_lock``), it is open in
        its trace's state; True then, for the hook to end it as tracked (nothing counted here).
        Inside a promotion on this thread (a finalizer), it is not waited for: it ends
        untracked, and the promotion does not leave it open (``_drop_ended_meanwhile``).
        Only spans the hooks found neither plain nor open get here.
        """
        if span is not None and self.plain:
            if self._promoting == threading.get_ident():   # inside a promotion, on its thread
                self._ended_meanwhile.append(span)
                return False
            with self._promote_lock:
                pass
            now = self._traces.get(trace_id)
            if now is not None and not now.closed and span._context[1] in now.open:
                return True
        if (state.closed if state is not None else trace_id in self._tombstones) and (
                self._kind(attrs, span) & TOOL):
            self._late_span()
        return False

    def _kind(self, attrs: Mapping[str, Any], span: Any) -> int:
        """A span's kind under the config's ``conventions:`` mapping, if any."""
        if self.policy.conventions is None or span is None:
            return span_kind(attrs)
        return self.policy.kind(attrs, span.name, _scope(span))

    def _late_span(self) -> None:
        self.counts["late_spans"] += 1
        self._drop("late_span")

    def _named_kind(self, attrs: Mapping[str, Any], span: Any, kind: int) -> int:
        """The kind of a span under named agents (``agent_span_names`` or ``root_pattern``);
        ``kind`` is the conventions' and the config's mapping's."""
        if self.policy.root_pattern is not None:
            kind &= ~AGENT   # with a root pattern, only the pattern makes a run root
        if not kind & AGENT and self._named(attrs, span._name):
            kind |= AGENT
        return kind

    def _named(self, attrs: Mapping[str, Any], name: str) -> bool:
        """``RunPolicy.named_agent``, remembered by span name for a span that carries no agent
        name (then only its name is matched: every plain span of a service is tested, and
        their names repeat), up to ``_NAMES_REMEMBERED`` names."""
        if not AGENT_NAME_KEYS.isdisjoint(attrs):
            return self.policy.named_agent(attrs, name)
        known = self._named_names.get(name)
        if known is None:
            known = self.policy.named_agent(attrs, name)
            if len(self._named_names) < _NAMES_REMEMBERED:
                self._named_names[name] = known
        return known

    def _stripped(self, state: TraceState, span: Any, attrs: Mapping[str, Any], size: int,
                  kind: int) -> SpanRecord:
        """Over the run's byte budget: keep the span, drop its argument/result/message values
        (a tool call's arguments and result, a model call's messages) and its events (where
        some frameworks keep those values; not counted in the budget: on_end does not look at
        them)."""
        state.bytes -= size
        self._drop("max_run_bytes")
        drop = set(_VALUE_KEYS if kind & TOOL else _MODEL_KEYS)
        return record_from_span(span)._replace(
            attributes={k: v for k, v in attrs.items() if k not in drop}, events=())

    # -- deferred bookkeeping (the hooks' ``defer`` mode) -------------------------------------

    def settle(self, state: TraceState) -> None:
        """The bookkeeping of the spans the hooks only appended to ``state.ended``, in the
        order they ended: what the tracked path of ``on_end`` does inline when it cannot defer
        it (violation marks, a guard, a ``conventions:`` mapping or named agents). Called
        before anything reads it: a run decision, a run taken or released, a sweep, a stats
        read, a shutdown. One settler at a time (the order of the kept spans is the order they
        ended); the application thread may append meanwhile: its appends land past the first
        n items, which one ``del`` removes atomically."""
        with self._settle_lock:   # taken even when ``ended`` is empty: another settler may
            self._settle(state)   # have taken its spans and not kept them yet

    def settle_all(self, states: Iterable[TraceState] | None = None) -> None:
        """``settle`` every open trace (or ``states``), under one taking of the lock."""
        with self._settle_lock:
            for state in list(self._traces.values()) if states is None else states:
                self._settle(state)

    def _settle(self, state: TraceState) -> None:
        state.settle_queued = False
        ended = state.ended
        if not ended:
            return
        n = len(ended)
        spans = ended[:n]
        del ended[:n]
        for span in spans:
            try:
                self._settle_one(state, span)
            except Exception:   # a span unlike the SDK's: already forwarded, not kept
                if self._report is not None:
                    self._report("deferred bookkeeping")

    def _settle_one(self, state: TraceState, span: Any) -> None:
        """One ended span's bookkeeping (SEMANTICS 1): a tool span kept for its run (late
        when its run was taken, dropped over the run's call cap), a model call kept, an agent
        span below a local root kept to name the run's agent; values over the run's byte
        budget stripped."""
        attrs = span._attributes._dict
        kind = span_kind(attrs)
        if kind and span._end_time:
            state.touched = span._end_time
        if not kind & (TOOL | MODEL):
            # An agent span, or one marked by its name only (ADK 1.x's agent_run [name]),
            # names the run's agent below a local root; its values are not kept for grading.
            parent = span._parent
            if parent is not None and not parent[2] and (
                    kind or span._name.startswith(AGENT_SPAN_PREFIXES)):
                state.models.append(span)
            return
        if kind & TOOL:
            if state.done and self._under(state, span._context[1], state.done):
                self._late_span()   # its run was already taken for grading
                return
            if state.tool_calls >= self._max_calls:
                state.dropped_calls += 1
                self._drop("max_calls_per_run")
                return
            state.tool_calls += 1
            kept = state.tools
        else:
            kept = state.models
        size = _value_bytes(attrs)
        state.bytes += size
        if state.bytes <= self._max_bytes:
            kept.append(span)
        else:   # past the byte budget: its values are not kept
            kept.append(self._stripped(state, span, attrs, size, kind))

    # -- run decisions (only when an agent span, a local root or a marked span ends) ----------

    def _decide(self, state: TraceState, span: Any, sid: int) -> RunJob | None:
        if sid in state.run_roots:
            return self._run(state, span, outermost=True)
        return self._place(state, span, state.parents.get(sid, 0))

    def _place(self, state: TraceState, span: Any, parent_id: int) -> RunJob | None:
        """Walk up from an ended agent span: nested in an outer run, or a run of its own.

        The outer run is the nearest agent ancestor, else the outermost framework ancestor
        (a LangGraph graph whose root is a CHAIN span is one run, under an HTTP span too).
        Framework spans are known by kind marker or instrumentation scope, so OpenInference
        spans, whose kind is set only when they end, are recognised while still open.
        """
        policy = self.policy
        if policy.root == "local_root":
            return self._nested(state, span)   # every agent span is inside the local root's run
        outer_framework = 0
        pid = parent_id
        while pid:
            ancestor = state.open.get(pid)
            if ancestor is None:
                break       # the chain leaves what we saw start: treat it as the top
            attrs = attributes_of(ancestor)
            if policy.is_agent(attrs, ancestor.name, _scope(ancestor)):
                return self._nested(state, span)
            if policy.root == "auto" and is_framework_span(attrs, _scope(ancestor)):
                outer_framework = pid
            pid = state.parents.get(pid, 0)
        if outer_framework:
            if state.parents.get(outer_framework, 0) != 0:
                state.run_roots.add(outer_framework)   # graded when it ends
            return self._nested(state, span)
        return self._run(state, span, outermost=True)

    def _nested(self, state: TraceState, span: Any) -> RunJob | None:
        if self.policy.nested_agents == "separate":
            return self._run(state, span, outermost=False)
        return None

    def _run(self, state: TraceState, span: Any, *, outermost: bool) -> RunJob | None:
        state.had_runs = True
        if outermost:
            state.graded.add(span.context.span_id)
        return RunJob(state, span, outermost=outermost)

    def decide(self, state: TraceState, span: Any) -> RunJob | None:
        """Whether an ended local root is a run (grading thread, or a full queue's fallback);
        closes its trace when it was the trace's last open local root."""
        self.settle(state)   # ``tool_calls``, ``had_runs``
        if state.closed and self._traces.get(state.trace_id) is state:
            self._close(state)
        if self.policy.local_root_is_run(attributes_of(span), span.name, _scope(span),
                                         had_agent_runs=state.had_runs,
                                         has_tool_calls=state.tool_calls > 0):
            return self._run(state, span, outermost=True)
        return None

    # -- grading-thread side -----------------------------------------------------------------

    @staticmethod
    def _forget_subtree(state: TraceState, root_id: int) -> None:
        """Shrink the parent map after a run under a long-lived root was graded.

        Ended spans below the run root are forgotten; spans still open are re-pointed at the
        run root, so a late child is still recognised as late.
        """
        parents = state.parents
        snapshot = list(parents.items())        # one C-level copy; the app may be inserting
        open_ids = set(state.open.copy())
        # Ended but not settled yet (``settle``): kept too, so that it is still known late.
        open_ids.update(_sid(span) for span in state.ended[:])
        below = _descends_from(dict(snapshot), root_id)
        for sid, _ in snapshot:
            if sid != root_id and below(sid):
                if sid in open_ids:
                    parents[sid] = root_id
                else:
                    parents.pop(sid, None)

    @staticmethod
    def _under(state: TraceState, sid: int, roots: Container[int]) -> bool:
        parents = state.parents
        pid = parents.get(sid, 0)
        while pid:
            if pid in roots:
                return True
            pid = parents.get(pid, 0)
        return False

    def members(self, job: RunJob) -> tuple[list[SpanRecord], list[SpanRecord], int]:
        """Take a run for grading: its tool and model-call records, still-open tool spans
        included, and the number of its calls dropped over the cap.

        The run is marked taken first, so a tool span of it that ends from then on is late
        (counted, passed through) and every other one is in the snapshot.
        """
        state = job.trace
        self.settle(state)   # what ended before the run is taken: the run's, or late
        root_id = job.root.context.span_id
        if job.outermost:
            state.done[root_id] = None
        dropped, state.dropped_calls = state.dropped_calls, 0
        below = _descends_from(state.parents, root_id)

        # The usual case: the run is the trace's only local root and its only run, so every
        # record is below it and no ancestor walk is needed.
        whole_trace = (job.root.parent is None or job.root.parent.is_remote) and (
            state.roots_seen == 1 and state.graded <= {root_id})

        def collect(items: list[Any]) -> list[SpanRecord]:
            records = [item if isinstance(item, SpanRecord) else record_from_span(item)
                       for item in items]
            if whole_trace:
                return [r for r in records if r.span_id != root_id]
            return [r for r in records if r.span_id != root_id and below(r.parent_id)]

        tools = collect(list(state.tools))
        for span in list(state.open.copy().values()):
            if self._kind(attributes_of(span), span) & TOOL:
                record = record_from_span(span)
                if whole_trace or below(record.parent_id):
                    tools.append(record)
        return tools, collect(list(state.models)), dropped

    def release(self, job: RunJob, tools: list[SpanRecord],
                models: Iterable[SpanRecord]) -> None:
        """Free the records of a graded outermost run (late children hit the tombstone)."""
        if not job.outermost or job.trace.closed:
            return   # a closed trace is dropped whole once its jobs are done
        gone = {m.span_id for m in tools}
        gone.update(m.span_id for m in models)
        state = job.trace
        root_id = job.root.context.span_id
        gone.add(root_id)   # an agent root is kept with the agent spans (hooks.py)
        with self._settle_lock:   # no other settler between the two: what ended late is
            self._settle(state)   # known late by the parent map, kept for what is not settled
            self._forget_subtree(state, root_id)
        with self._lock:
            for items in (state.tools, state.models):
                # In place: the application thread may append while this runs, and appends
                # land past the first n items, which one slice assignment replaces atomically.
                n = len(items)
                items[:n] = [r for r in items[:n] if _sid(r) not in gone]
            # Caps are per run: what this run used is free again (approximate under races).
            state.tool_calls = max(state.tool_calls - len(tools), 0)
            state.bytes = max(state.bytes - sum(_value_bytes(t.attributes) for t in tools), 0)
            # The run's root (ended) is forgotten too, or a trace whose root never ends would
            # keep one entry per graded run until max_spans_per_trace, then drop every span.
            # Its open children point at it directly and it stays in ``done`` while among the
            # newest runs, so a child that ends late is still known late.
            state.parents.pop(root_id, None)
            state.graded.discard(root_id)
            state.run_roots.discard(root_id)   # a framework span graded as a run
            done = state.done
            while len(done) > _RUNS_REMEMBERED:
                del done[next(iter(done))]


    def take_held(self, held: list[Any], ids: Container[int] | None = None) -> list[Any]:
        """Take the held tool spans of a trace (``TraceState.held``) whose span ids are in
        ``ids`` (None: all of them), in the order they ended. The application thread may
        append meanwhile: its appends land past the first n items, which one slice
        assignment replaces atomically; two takers never take the same span (the lock)."""
        if not held:
            return []
        with self._lock:
            n = len(held)
            if ids is None:
                mine = held[:n]
                del held[:n]
            else:
                mine = [s for s in held[:n] if _sid(s) in ids]
                if mine:
                    held[:n] = [s for s in held[:n] if _sid(s) not in ids]
        return mine


def _descends_from(parents: Mapping[int, int], root_id: int) -> Callable[[int], bool]:
    """A test "is this span id the root or below it", walking parent links with a memo."""
    memo: dict[int, bool] = {root_id: True, 0: False}

    def below(sid: int) -> bool:
        path = []
        while sid not in memo:
            path.append(sid)
            sid = parents.get(sid, 0)
        verdict = memo[sid]
        for p in path:
            memo[p] = verdict
        return verdict

    return below


def _value_bytes(attrs: Mapping[str, Any]) -> int:
    """Characters of a span's string attribute values: what the run byte cap counts (the
    hooks count them inline, the same way)."""
    size = 0
    for value in attrs.values():
        if value.__class__ is str:
            size += len(value)
    return size


def _sid(item: Any) -> int:
    return item.span_id if isinstance(item, SpanRecord) else item.context.span_id


def _scope(span: Any) -> str:
    scope = getattr(span, "instrumentation_scope", None)
    return scope.name if scope is not None else ""
