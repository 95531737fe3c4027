"""A run's calls from its two witnesses: what the model requested and what the tools executed.

The model spans record the calls each response requested (``conventions.messages``: name,
arguments, call id, position in the response) and, in their input messages, the results
handed back; the tool spans record the executions (``conventions.calls``). ``reconcile``
matches the two on the grading side (``trajectory.run_from``), never in the span hooks:

1. by call id; else by name and equal arguments; else by name, in order, within the step;
2. the calls of one response are ordered as the response lists them (parallel calls that
   started in the same millisecond keep the model's order);
3. an execution that matches no request, after a response that recorded its requests, is
   ``unrequested``: reported and left out of the trajectory; after a response that recorded
   nothing (content capture off, a sub-agent instrumented otherwise), or before any
   response, it stays a call;
4. a request that no execution matches is ``unexecuted``: a pending call (called, not
   completed), or a completed call when its result was handed back to the model (the call
   ran where no instrumentation saw it);
5. arguments and results the execution span lacks are taken from the request and from the
   result handed back; so are arguments it recorded in a lesser form: not an object (a bare
   value, text or a list) where the request's are an object with the same values in the same
   order (OpenInference JS records a one-field input as ``paris`` for ``{"query": "paris"}``).

Where no model span of the run records its response, or none of the recorded responses asks
for a call in a structured form (an agent that reads its tool calls from the model's text,
such as DSPy's ReAct), the tool spans are read as before.
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .conventions.messages import Requested, requested_calls, returned_results
from .model import Reading, ReadingNote, SpanRecord, ToolCall, text_of

__all__ = ["CALLS_FROM", "reconcile"]

#: The values of ``runs.calls_from``.
CALLS_FROM = ("auto", "executed", "requested")

_Request = tuple[int, int, Requested, int]   # (step, position, request, model span id)


def reconcile(
    calls: list[ToolCall],
    models: Sequence[SpanRecord],
    *,
    calls_from: str = "auto",
    ignores: Callable[[str], bool] | None = None,
    max_calls: int | None = None,
    nested: Mapping[int, Sequence[SpanRecord]] | None = None,
) -> tuple[list[ToolCall], Reading]:
    """The run's calls and how they were read.

    ``calls``: the executions read from the tool spans, in start order, their ``step`` the
    model response before them; ``models``: the run's model responses in start order (step
    ``i`` is ``models[i]``). ``ignores``: ``runs.ignore_tools``, applied to requests too.
    With ``calls_from: executed`` the calls are returned as they are, with the counts.
    ``nested``: model span id -> the model spans nested in it (no steps of their own), which
    hold its response where it records none itself (``trajectory._responses``).
    """
    requests: list[_Request] = []
    recorded: set[int] = set()
    asked = False
    for step, model in enumerate(models):
        offset = 0
        for witness in _witnesses(model, nested):
            try:
                found = requested_calls(witness.attributes, witness.events)
            except Exception:   # noqa: BLE001 - a response we cannot read is one not recorded
                found = None
            if found is None:
                continue
            recorded.add(step)
            asked = asked or bool(found)
            for req in found:
                if ignores is not None and ignores(req.name):
                    continue
                # Several nested responses in one step: positions follow on, in start order;
                # each response's calls keep their own span (ordered within it, _order).
                requests.append((step, offset + req.position, req, witness.span_id))
            offset += len(found)
            if witness is model:
                break   # the step's own response: the nested spans are not read
    if not asked:
        # No response recorded, or none asked for a call in the structured form: content
        # capture is off, or the agent drives its tools from the model's text (ReAct).
        if calls_from != "requested":
            return calls, Reading(calls_from, False, 0, len(calls), 0)
        return [], Reading(calls_from, False, 0, len(calls), 0, tuple(
            ReadingNote(c.name, c.span_id, c.call_id, c.step) for c in calls))
    requests.sort(key=_STEP_POSITION)
    match = _match(calls, requests)
    if calls_from == "executed":
        unrequested = _unrequested(calls, match, models, recorded, strict=False)
        return calls, _reading(calls_from, requests, calls, match, unrequested)

    starts = [m.start_ns for m in models]
    unrequested = _unrequested(calls, match, models, recorded,
                                           strict=calls_from == "requested", starts=starts)
    gone = {id(c) for c in unrequested}
    kept = [c for c in calls if id(c) not in gone]
    by_request: dict[int, ToolCall] = {match[id(c)]: c for c in kept if id(c) in match}
    needed = [i for i, c in by_request.items() if not c.has_result and not c.pending]
    unexecuted_ids = [i for i in range(len(requests)) if i not in by_request]
    results: dict[str, Any] = {}
    if needed or unexecuted_ids:
        ids = [requests[i][2].call_id or by_request[i].call_id for i in needed]
        ids += [requests[i][2].call_id for i in unexecuted_ids]
        results = _results([w for m in models for w in _witnesses(m, nested)],
                           {i for i in ids if i})
    for i, call in by_request.items():
        _complete(call, requests[i], results)
    order = _order(kept, by_request, requests, unexecuted_ids)
    out: list[ToolCall] = []
    for entry in order:
        if isinstance(entry, int):
            step, _, req, _ = requests[entry]
            call = ToolCall(req.name, 0, req.arguments, None, False, req.call_id, 0, 0, None,
                            step, True)
            call.decoded_arguments = req.arguments
            if req.call_id in results:   # handed back: it ran, unseen by any tool span
                value = results[req.call_id]
                call.raw_result = call.decoded_result = value
                call.has_result, call.pending = True, False
            out.append(call)
        else:
            out.append(entry)
    if max_calls is not None and len(out) > max_calls:
        del out[max_calls:]
    for i, call in enumerate(out):
        call.index = i
    return out, _reading(calls_from, requests, calls, match, unrequested)


def _witnesses(model: SpanRecord, nested: Mapping[int, Sequence[SpanRecord]] | None
               ) -> Sequence[SpanRecord]:
    """The spans that may record a step's messages: its model span, then the model spans
    nested in it in start order (their responses are read only where the model span records
    none, ``reconcile``; their inputs for the results handed back, by call id)."""
    inner = nested.get(model.span_id) if nested else None
    if not inner:
        return (model,)
    return (model, *inner)


def _step_position(request: _Request) -> tuple[int, int]:
    return request[0], request[1]


_STEP_POSITION = _step_position


def _key(value: Any) -> str | None:
    """Arguments as comparable text (object keys sorted), None for no arguments."""
    if value is None:
        return None
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return repr(value)


def _values_key(value: Any) -> str | None:
    """Call arguments as their values alone, comparable text: an object's values in order, a
    list as it is, anything else as one value; scalars as text (``21`` and ``"21"`` alike).
    The key under which a lesser form (``paris``) meets its request (``{"query": "paris"}``)."""
    if value.__class__ is dict:
        items = list(value.values())
    elif value.__class__ is list:
        items = value
    else:
        items = [value]
    return _key([v if v.__class__ is dict or v.__class__ is list else text_of(v) for v in items])


def _lesser_form(executed: Any, requested: Any) -> bool:
    """Whether the execution recorded the request's arguments in a lesser form: not an
    object (a bare value, text or a list of values) where the request's are a non-empty
    object, holding the same values in the same order (rule 5: the request's stand)."""
    return (requested.__class__ is dict and bool(requested) and executed is not None
            and executed.__class__ is not dict
            and _values_key(executed) == _values_key(requested))


def _match(calls: Sequence[ToolCall], requests: Sequence[_Request]) -> dict[int, int]:
    """``id(execution)`` -> request index: by call id, then by name and equal arguments (or
    arguments recorded in a lesser form: the request's values without their names), then
    by name in order within the step."""
    match: dict[int, int] = {}
    taken: set[int] = set()

    def first(candidates: list[int] | None, name: str | None = None) -> int | None:
        """The first request of ``candidates`` not yet taken (named ``name``), taken out."""
        if not candidates:
            return None
        for k, i in enumerate(candidates):
            if i not in taken and (name is None or requests[i][2].name == name):
                del candidates[k]
                taken.add(i)
                return i
        return None

    by_id: dict[str, list[int]] = {}
    for i, (_, _, req, _) in enumerate(requests):
        if req.call_id:
            by_id.setdefault(req.call_id, []).append(i)
    if by_id:
        for call in calls:
            if call.call_id and (j := first(by_id.get(call.call_id), call.name)) is not None:
                match[id(call)] = j
    if len(match) == len(calls):
        return match
    by_args: dict[tuple[str, str | None], list[int]] = {}
    by_step: dict[tuple[int, str], list[int]] = {}
    by_values: dict[tuple[str, str | None], list[int]] | None = None
    for i, (step, _, req, _) in enumerate(requests):
        if i in taken:
            continue
        by_args.setdefault((req.name, _key(req.arguments)), []).append(i)
        by_step.setdefault((step, req.name), []).append(i)
    rest = [c for c in calls if id(c) not in match]
    for call in rest:
        if call.raw_arguments is None:
            continue
        arguments = call.arguments
        found = first(by_args.get((call.name, _key(arguments))))
        if found is None and arguments.__class__ is not dict:
            if by_values is None:   # built once, for the first execution in a lesser form
                by_values = {}
                for i, (_, _, req, _) in enumerate(requests):
                    if req.arguments.__class__ is dict and req.arguments:
                        by_values.setdefault((req.name, _values_key(req.arguments)),
                                             []).append(i)
            found = first(by_values.get((call.name, _values_key(arguments))))
        if found is not None:
            match[id(call)] = found
    for call in rest:
        if id(call) in match:
            continue
        found = first(by_step.get((call.step, call.name)))
        if found is not None:
            match[id(call)] = found
    return match


def _unrequested(calls: Sequence[ToolCall], match: Mapping[int, int],
                 models: Sequence[SpanRecord], recorded: set[int], *, strict: bool,
                 starts: list[int] | None = None) -> list[ToolCall]:
    """The executions no request matches that are unrequested: those after a model response
    that recorded its requests (all of them with ``strict``, ``calls_from: requested``); one
    before any response, or after one that recorded nothing, stays a call of its own."""
    if starts is None:
        starts = [m.start_ns for m in models]
    out: list[ToolCall] = []
    for call in calls:
        if id(call) in match:
            continue
        governing = bisect_left(starts, call.start_ns) - 1   # as run_from counts steps
        if strict or (governing >= 0 and governing in recorded):
            out.append(call)
    return out


def _results(models: Sequence[SpanRecord], wanted: set[str]) -> dict[str, Any]:
    """The results handed back for the call ids ``wanted``, from the latest model input
    back (a model's input usually repeats the whole conversation, so the last one or two
    hold every result)."""
    found: dict[str, Any] = {}
    for model in reversed(models):
        if not wanted:
            break
        try:
            returned = returned_results(model.attributes, model.events)
        except Exception:   # noqa: BLE001, S112 - an input we cannot read hands nothing back
            continue
        for call_id in list(wanted):
            if call_id in returned:
                found[call_id] = returned[call_id]
                wanted.discard(call_id)
    return found


def _complete(call: ToolCall, request: _Request, results: Mapping[str, Any]) -> None:
    """Fill in what the execution span lacks from its request and the result handed back."""
    step, _, req, _ = request
    call.step = step
    if call.call_id is None and req.call_id:
        call.call_id = req.call_id
    if req.arguments is not None and (call.raw_arguments is None
                                      or _lesser_form(call.arguments, req.arguments)):
        # Missing, or recorded in a lesser form (rule 5): the request's arguments stand.
        call.raw_arguments = call.decoded_arguments = req.arguments
    if not call.has_result and not call.pending and call.call_id in results:
        call.raw_result = call.decoded_result = results[call.call_id]  # type: ignore[index]
        call.has_result = True


def _order(kept: list[ToolCall], by_request: Mapping[int, ToolCall],
           requests: Sequence[_Request], unexecuted: Sequence[int]) -> list[ToolCall | int]:
    """The trajectory: executions in start order, but the calls of one response in the order
    it lists them (they take each other's places), and each unexecuted request (as its index)
    next to its response's calls, else after the last call of an earlier step."""
    slot_of: dict[int, int] = {id(c): k for k, c in enumerate(kept)}
    groups: dict[int, list[int]] = {}
    for i in sorted(by_request):
        groups.setdefault(requests[i][3], []).append(i)
    placed: list[ToolCall | int] = list(kept)
    for members in groups.values():
        if len(members) < 2:
            continue
        slots = sorted(slot_of[id(by_request[i])] for i in members)
        for slot, i in zip(slots, members):   # members are in (step, position) order
            placed[slot] = by_request[i]
    if not unexecuted:
        return placed
    keys: list[tuple[int, int, int]] = [(k, 0, 0) for k in range(len(placed))]
    slot_now = {id(c): k for k, c in enumerate(placed)}
    steps = [c.step for c in placed if not isinstance(c, int)]
    extra: list[tuple[tuple[int, int, int], int]] = []
    for i in unexecuted:
        step, position, _, model_id = requests[i]
        siblings = groups.get(model_id, ())
        before = [j for j in siblings if requests[j][1] < position]
        after = [j for j in siblings if requests[j][1] > position]
        if before:
            key = (slot_now[id(by_request[before[-1]])], 1, position)
        elif after:
            key = (slot_now[id(by_request[after[0]])], -1, position)
        else:
            key = (bisect_right(steps, step) - 1, 1, position)
        extra.append((key, i))
    merged: list[tuple[tuple[int, int, int], ToolCall | int]] = [
        *zip(keys, placed), *extra]
    merged.sort(key=lambda pair: pair[0])
    return [entry for _, entry in merged]


def _reading(calls_from: str, requests: Sequence[_Request], calls: Sequence[ToolCall],
             match: Mapping[int, int], unrequested: Sequence[ToolCall]) -> Reading:
    taken = set(match.values())
    return Reading(
        calls_from, True, len(requests), len(calls), len(match),
        tuple(ReadingNote(c.name, c.span_id, c.call_id, c.step) for c in unrequested),
        tuple(ReadingNote(req.name, model_id, req.call_id, step)
              for i, (step, _, req, model_id) in enumerate(requests) if i not in taken))
