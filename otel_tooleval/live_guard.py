"""The guard in the live processor: tool calls checked as their spans start, and ``check_call``.

``ToolEvalSpanProcessor`` builds a ``LiveGuard`` when the config has a ``guard:`` section; its
hooks (``hooks.py``) hand it every tool span as it starts and ends, on the application thread.

What the guard sees when a tool span starts is what the framework set by then: the tool name
(when the span is recognisable as a tool call at all) and, for some frameworks only, the
arguments. Arguments known at start: every rule is checked then. Not known: the name rules
(``disallowed`` entries without conditions, ``allowed``, ``max_calls``,
``max_calls_per_tool``) are checked at start, the argument rules (``disallowed`` entries with
conditions, ``max_repeats``) when the span ends, and a violation found then is carried by the
copy of the span that is forwarded. A span recognisable as a tool call only at its end is
checked whole at its end. Calls are counted per run: the outermost agent span above the call
that was open when it started (else the trace's local tree).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import trace

from ._compat import attributes_of, copy_with, record_from_span
from .assembly import TraceBuffers, TraceState
from .conventions.calls import TOOL_KEYS, CallReader, CallText, call_reader, call_text
from .guard import UNKNOWN, GuardRules, GuardRun, GuardViolation
from .model import SpanEvent

__all__ = ["EVENT", "RULE", "VIOLATION", "GuardEntry", "GuardStart", "GuardTrace", "LiveGuard",
           "check_call"]

_log = logging.getLogger(__name__)

VIOLATION = "tooleval.guard.violation"
RULE = "tooleval.guard.rule"
EVENT = "tooleval.guard.violation"
EXPLANATION = "tooleval.guard.explanation"

# Bounds per trace: parent spans whose run is remembered, runs counted.
_MAX_REMEMBERED_PARENTS = 4096
_MAX_RUNS_PER_TRACE = 1024
# Bounds per guard: scopes whose convention rows are picked by compiled code, tool names
# whose ``runs.ignore_tools`` outcome is remembered.
_MAX_REMEMBERED_SCOPES = 256
_MAX_REMEMBERED_NAMES = 1024

#: Every live guard, for ``check_call``.
_GUARDS: weakref.WeakSet[LiveGuard] = weakref.WeakSet()


#: What a tool span's start left for its end and ``check_call``: (its run's counts, name,
#: arguments put off, violation found at start).
GuardEntry = tuple[GuardRun, str, bool, "GuardViolation | None"]

#: ``LiveGuard.start_hook``'s function: ``(span, attributes, context, parent, trace state)``.
GuardStart = Callable[[Any, dict[str, Any], Any, Any, "TraceState | None"], None]

#: The entry of every tool span checked whole at its start without a violation (the usual
#: case): its end and ``check_call`` need nothing else from it, so nothing is allocated.
_CHECKED: GuardEntry = (GuardRun(), "", False, None)


class GuardTrace:
    """The guard's part of one trace's state (``TraceState.guard``)."""

    __slots__ = ("run_of", "runs", "seen")

    def __init__(self) -> None:
        self.runs: dict[int, GuardRun] = {}      # run key (agent span id, 0) -> counts
        self.run_of: dict[int, GuardRun] = {}    # parent span id -> its run's counts
        # Open tool spans checked at start: span id -> what the check left (``GuardEntry``);
        # taken out by the processor's end hook.
        self.seen: dict[int, GuardEntry] = {}


class LiveGuard:
    """Checks the tool spans of a processor's traces against ``rules``."""

    def __init__(self, rules: GuardRules, buffers: TraceBuffers, *,
                 count: Callable[[GuardViolation], None] | None,
                 on_violation: Callable[[GuardViolation], None] | None,
                 report: Callable[[str], None]) -> None:
        self.rules = rules
        self.buffers = buffers
        self._count = count
        self._on_violation = on_violation
        self._report = report
        self._lock = threading.Lock()   # a trace's guard state made once
        self._acquire, self._release = self._lock.acquire, self._lock.release
        self.violations = 0
        policy = buffers.policy
        self._mapped = policy.conventions
        self._ignoring = bool(policy.ignore_tools)
        #: Instrumentation scope name -> the reader of its spans' calls (``reader``).
        self.readers: dict[str, CallReader] = {}
        self._ignores: dict[str, bool] = {}   # tool name -> in ``runs.ignore_tools``
        #: ``(attributes) -> True`` for a span that cannot be a tool call: none of the keys the
        #: conventions test (one C call); never, with a ``conventions:`` mapping (its entries
        #: may match any span). The hooks call ``start_hook``'s function for the others only.
        self.no_call: Callable[[Mapping[str, Any]], bool] = (
            TOOL_KEYS.isdisjoint if TOOL_KEYS is not None and self._mapped is None else _never)
        #: Whether ``no_call`` tests attribute keys (then a span it rules out may stay
        #: untracked, as plain traffic: hooks.py).
        self.by_keys = self.no_call is not _never
        _GUARDS.add(self)

    def close(self) -> None:
        """Stop answering ``check_call`` (the processor shut down)."""
        _GUARDS.discard(self)

    # -- application thread (hooks.py) ---------------------------------------------------------

    def start_hook(self, traces_get: Callable[[int], TraceState | None]) -> GuardStart:
        """The processor's start hook for the guard (``traces_get``: its traces by id), for a
        span that ``no_call`` does not rule out, with what the processor's own start hook read
        (``attrs``: its attributes' dict; its context, parent, and its trace's state before
        that hook, which is the trace's state unless it was None or closed): its call
        read straight off it (a compiled row picker per instrumentation scope: no kind bits, no
        SpanRecord, no ToolCall, nothing decoded); a tool call checked and its span marked
        when it breaks a rule. One frame besides the reader (and the rules, for a name with
        more than ``max_calls`` to check). The caller contains its failures."""
        readers_get, reader = self.readers.get, self.reader
        rules = self.rules
        check, for_name = rules.start_check, rules.for_name
        counted_only, call_limit, over_calls = rules.counted_only, rules.call_limit, rules.over_calls
        first_run, flag = self._first_run, self._flag
        checked = _CHECKED

        def started(span: Any, attrs: dict[str, Any], ctx: Any, parent: Any,
                    state: TraceState | None) -> None:
            scope = span._instrumentation_scope
            scope_name = scope._name if scope is not None else ""
            read = readers_get(scope_name)
            if read is None:
                read = reader(scope_name)
            call = read(attrs, span._name, ())
            if call is None:
                return
            if state is None or state.closed:   # a new trace or local root: a new state
                state = traces_get(ctx[0])
                if state is None or state.closed:
                    return
            parent_id = parent[1] if parent is not None else 0
            guard = state.guard
            if guard is None or (run := guard.run_of.get(parent_id)) is None:
                guard, run = first_run(state, parent_id)
            name, raw, unwrap = call
            found: GuardViolation | None
            if name in counted_only:
                # Only ``max_calls`` applies: counted here, no call into the rules.
                calls = next(run.counter)
                if calls <= call_limit:
                    guard.seen[ctx[1]] = checked
                    return
                found = over_calls(name, calls)
            else:
                found = check(run, name, raw, unwrap)
            if found is not None:
                flag(span, guard, run, name, found, ctx[0], ctx[1])
            elif raw is None and for_name(name).reads:
                guard.seen[ctx[1]] = (run, name, True, None)   # argument rules put off
            else:
                guard.seen[ctx[1]] = checked

        return started

    def _flag(self, span: Any, guard: GuardTrace, run: GuardRun, name: str,
              found: GuardViolation, trace_id: int, span_id: int) -> None:
        """Mark a tool span whose start broke a rule, and notify."""
        found = dataclasses.replace(found, trace_id=trace_id, span_id=span_id)
        guard.seen[span_id] = (run, name, False, found)
        span.set_attributes({VIOLATION: True, RULE: found.rule})
        span.add_event(EVENT, _event_attributes(found))
        self._notify(found)

    def ended(self, state: TraceState, span: Any, entry: GuardEntry | None) -> Any:
        """A tool span ended that was not checked whole at its start (``entry``: what its
        start left in ``GuardTrace.seen``, which the caller took out; None when it was not
        recognisable as a tool call then): the rules put off, or all of them. A copy of the
        span that carries the violation, or None to forward the span as it is."""
        if entry is not None and not entry[2]:
            return None   # checked whole at start
        record = record_from_span(span)
        reader = self.readers.get(record.scope) or self.reader(record.scope)
        read = reader(record.attributes, record.name, record.events)
        if read is None:
            return None
        name, raw, unwrap = read
        rules = self.rules
        if entry is None:
            run = self._first_run(state, record.parent_id)[1]
            found = rules.check(run, name, UNKNOWN if raw is None else raw, unwrap)
        elif raw is None:
            return None   # never recorded: the argument rules cannot apply
        else:
            found = rules.check_arguments(entry[0], name, raw, unwrap)
        if found is None:
            return None
        found = dataclasses.replace(found, trace_id=record.trace_id, span_id=record.span_id,
                                    at="end")
        self._notify(found)
        end = record.end_ns or 0
        return copy_with(span, {VIOLATION: True, RULE: found.rule},
                         [(EVENT, _event_attributes(found), end)])

    # -- check_call ------------------------------------------------------------------------------

    def query(self, trace_id: int, span_id: int, name: str,
              arguments: Any) -> GuardViolation | None:
        """The violation of a call ``name(arguments)`` made now from the span ``span_id``,
        without counting it. From inside the call's own tool span: what its start found."""
        rules = self.rules
        args = UNKNOWN if arguments is None else arguments
        state = self.buffers._traces.get(trace_id)
        guard = state.guard if state is not None and not state.closed else None
        entry = guard.seen.get(span_id) if guard is not None else None
        found: GuardViolation | None
        if entry is not None:
            run, _, put_off, found = entry
            if found is not None or not put_off or args is UNKNOWN:
                return found
            found = rules.check_arguments(run, name, args, record=False)
        else:
            run = GuardRun()
            if state is not None and guard is not None:
                run = guard.run_of.get(span_id) or guard.runs.get(
                    self._run_key(state, guard, span_id), run)
            found = rules.check(run, name, args, record=False)
        if found is None:
            return None
        return dataclasses.replace(found, trace_id=trace_id, at="check")

    # -- helpers ---------------------------------------------------------------------------------

    def reader(self, scope: str) -> CallReader:
        """What reads the call of a span of the instrumentation scope ``scope``, as grading
        reads it: ``(attributes, span name, events)`` -> ``(tool name, raw arguments,
        unwrap)``, or None for no call or a tool of ``runs.ignore_tools``. The conventions'
        rows for that scope compiled (``call_reader``), after the config's ``conventions:``
        mapping if it has one. Remembered in ``readers`` (up to 256 scopes)."""
        read = call_reader(scope)
        mapped, ignored = self._mapped, self._ignored if self._ignoring else None
        if mapped is not None or ignored is not None:
            builtin = read

            def read(attrs: Mapping[str, Any], span_name: str,
                     events: tuple[SpanEvent, ...]) -> CallText | None:
                found: CallText | None
                if mapped is not None and (
                        entry := mapped.entry(attrs, span_name, scope)) is not None:
                    if entry.tool is None:
                        return None
                    found = call_text(entry.tool, attrs, span_name, events)
                else:
                    found = builtin(attrs, span_name, events)
                if found is None or (ignored is not None and ignored(found[0])):
                    return None
                return found

        if len(self.readers) < _MAX_REMEMBERED_SCOPES:
            self.readers[scope] = read
        return read

    def _ignored(self, name: str) -> bool:
        known = self._ignores.get(name)
        if known is None:
            known = self.buffers.policy.ignores(name)
            if len(self._ignores) < _MAX_REMEMBERED_NAMES:
                self._ignores[name] = known
        return known

    def _first_run(self, state: TraceState, parent_id: int) -> tuple[GuardTrace, GuardRun]:
        """The trace's guard state and the counts of the run a call below ``parent_id``
        counts in, when one of them is new (the first call of a trace, or below a new parent):
        the run's counts are then remembered per parent (up to 4,096 parents per trace). One
        frame besides ``_run_key``: this is most of what a run's first call costs."""
        guard: GuardTrace | None = state.guard
        if guard is None:
            self._acquire()
            try:
                guard = state.guard
                if guard is None:
                    guard = state.guard = GuardTrace()
            finally:
                self._release()
        run = guard.run_of.get(parent_id)
        if run is None:
            key = self._run_key(state, guard, parent_id)
            runs = guard.runs
            run = runs.get(key)
            if run is None:
                if len(runs) >= _MAX_RUNS_PER_TRACE:
                    runs.pop(next(iter(runs)), None)   # the oldest run of a long-lived trace
                run = runs.setdefault(key, GuardRun())
            if len(guard.run_of) < _MAX_REMEMBERED_PARENTS:
                guard.run_of[parent_id] = run
        return guard, run

    def _run_key(self, state: TraceState, guard: GuardTrace, parent_id: int) -> int:
        """The run a call below ``parent_id`` counts in: the outermost agent span open above
        it (the nearest with ``runs.nested_agents: separate``), else 0 (the local tree)."""
        policy = self.buffers.policy
        nearest = policy.nested_agents == "separate"
        key = 0
        pid = parent_id
        while pid:
            ancestor = state.open.get(pid)
            if ancestor is None:
                break
            scope = ancestor.instrumentation_scope
            if policy.is_agent(attributes_of(ancestor), ancestor.name,
                               scope.name if scope is not None else ""):
                key = pid
                if nearest:
                    break
            pid = state.parents.get(pid, 0)
        return key

    def _notify(self, found: GuardViolation) -> None:
        self.violations += 1
        if self._count is not None:
            try:
                self._count(found)
            except Exception:
                self._report("metrics")
        if self._on_violation is not None:
            try:
                self._on_violation(found)
            except Exception:
                self._report("on_violation callback")


def _never(attrs: Mapping[str, Any]) -> bool:
    return False


def _event_attributes(found: GuardViolation) -> dict[str, Any]:
    attrs: dict[str, Any] = {RULE: found.rule, "gen_ai.tool.name": found.tool,
                             EXPLANATION: found.explanation}
    if found.entry is not None:
        attrs["tooleval.guard.entry"] = found.entry
    if found.limit is not None:
        attrs["tooleval.guard.limit"] = found.limit
        attrs["tooleval.guard.count"] = found.count
    return attrs


def check_call(name: str, arguments: Any = None) -> GuardViolation | None:
    """The guard rule a tool call ``name(arguments)`` would break in the run in the current
    context, or None: for a framework's before-tool hook, which can then refuse the call.

    ``arguments``: a mapping, JSON text, or None (only the rules that need no arguments are
    checked). The run is the one of the current span (an agent span, a model-call span, or the
    call's own tool span: then the answer is what the guard found when that span started).
    Nothing is counted or marked here: the call is, when its tool span starts. With no guard
    configured, no current span, or a failure inside the guard, the answer is None (the guard
    never breaks the application).
    """
    try:
        context = trace.get_current_span().get_span_context()
        if not context.is_valid:
            return None
        for guard in list(_GUARDS):
            found = guard.query(context.trace_id, context.span_id, name, arguments)
            if found is not None:
                return found
    except Exception:
        _log.debug("otel-tooleval: check_call failed", exc_info=True)
    return None
