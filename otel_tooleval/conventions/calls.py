"""A tool span as a ``ToolCall``, and a run root's agent name (off the hot path)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..model import SpanEvent, SpanRecord, ToolCall, Verbatim
from ..values import as_text
from .kinds import SYNTHESIZED
from .openinference import tool_message_call_id
from .registry import (
    AGENT_NAME_KEYS,
    AGENT_SPAN_NAMES,
    NESTED_AGENT_NAME_KEYS,
    TOOL_CONVENTIONS,
)
from .spec import ToolConvention

__all__ = ["TOOL_KEYS", "CallReader", "CallText", "agent_name_of", "call_reader", "call_text",
           "tool_call", "tool_call_from", "tool_row"]

#: ``call_text``'s answer: the tool name, the raw arguments (None: not recorded) and what
#: unwraps their decoded value (``ToolConvention.arguments_from``).
CallText = tuple[str, Any, Callable[[Any], Any] | None]

#: The attribute keys the conventions' rows test (each row's name key or condition key): a span
#: with none of them is no tool call in any scope, which ``frozenset.isdisjoint`` on its
#: attributes tells cheaply (the live guard's first test at every span's start). None if a row
#: tested no key (it would read any span of its scope).
TOOL_KEYS: frozenset[str] | None = (
    None if any(conv.name is None and (conv.when is None or conv.when[1] is None)
                for conv in TOOL_CONVENTIONS)
    else frozenset(key for conv in TOOL_CONVENTIONS
                   for key in (conv.name, conv.when[0] if conv.when else None) if key))


def tool_call_from(
    record: SpanRecord,
    *,
    index: int,
    step: int,
    pending: bool,
    server_keys: Iterable[str] = (),
) -> ToolCall | None:
    """Build the ToolCall of a tool span (None if the span is no tool call)."""
    return tool_call(record, index, step, pending, tuple(server_keys))


def tool_call(record: SpanRecord, index: int, step: int, pending: bool,
              server_keys: tuple[str, ...], row: ToolConvention | None = None,
              unwrap: bool = True) -> ToolCall | None:
    """``tool_call_from`` with positional arguments (``run_from`` calls it once per call).

    ``row``: the row that reads the span (a user mapping's), in place of the conventions'.
    ``unwrap`` False (``runs.unwrap: off``): the generic envelopes stay on the call's values
    (``model.Verbatim``); the row's own unwrapping still applies.

    Lookups are ``key in attrs`` then ``attrs[key]``: two specialised bytecodes, cheaper than a
    ``get`` method call when, as here, most keys looked up are absent.
    """
    attrs = record.attributes
    conv = row if row is not None else tool_row(record)
    if conv is None:
        return None
    name = record.name if conv.name is None else attrs[conv.name]
    if conv.name_from is not None:
        name = conv.name_from(as_text(name))
    if SYNTHESIZED in attrs and attrs[SYNTHESIZED] is True or (
            conv.not_tools and name in conv.not_tools):
        return None
    if name.__class__ is not str:
        name = as_text(name)
    arguments: Any = None
    if conv.argument_attributes:
        arguments = {key: attrs[key] for key in conv.argument_attributes if key in attrs}
    for key in conv.arguments:
        if key in attrs:
            arguments = attrs[key]
            break
    else:
        if conv.argument_events and record.events:
            arguments = _from_events(record, conv.argument_events)[0]
    has_result = False
    result: Any = None
    error = record.error
    if not pending:
        for key in conv.result:
            if key in attrs:
                result, has_result = attrs[key], True
                break
        else:
            if conv.result_events and record.events:
                result, has_result = _from_events(record, conv.result_events)
        if not has_result and error is not None:
            result, has_result = error, True
    call_id = None
    for key in conv.call_id:
        if key in attrs and (value := attrs[key]) is not None:
            call_id = as_text(value)
            break
    if call_id is None and has_result:
        call_id = tool_message_call_id(attrs, conv.result)
    server = None
    if conv.server_sep is not None and conv.server_sep in name:
        server, name = name.split(conv.server_sep, 1)
    for key in server_keys:
        if key in attrs and (value := attrs[key]):
            server = as_text(value)
            break
    # Values stay raw here; ToolCall decodes them on first use.
    call = ToolCall(name, index, arguments, result, has_result, call_id, record.span_id,
                    record.start_ns, None if pending else record.end_ns, step, pending, error,
                    server)
    if not unwrap:
        call.envelope = _verbatim(conv)
    elif conv.arguments_from is not None or conv.result_from is not None:
        call.envelope = conv
    return call


#: ``Verbatim`` envelopes by the row functions they keep: one object per row, so that calls
#: read by one row share their envelope (``AgentRun.argument_classes`` groups by it).
_VERBATIM: dict[tuple[Any, Any], Verbatim] = {}


def _verbatim(conv: ToolConvention) -> Verbatim:
    key = (conv.arguments_from, conv.result_from)
    envelope = _VERBATIM.get(key)
    if envelope is None:
        if len(_VERBATIM) >= _MAX_PICKERS:
            _VERBATIM.clear()
        envelope = _VERBATIM[key] = Verbatim(*key)
    return envelope


def _from_events(record: SpanRecord, sources: tuple[tuple[str, str], ...]) -> tuple[Any, bool]:
    """The value of the first ``(event name, attribute)`` of ``sources`` the span's events
    hold, and whether one did (an attribute value is never None)."""
    for name, key in sources:
        value = record.event_value(name, key)
        if value is not None:
            return value, True
    return None, False


def tool_row(record: SpanRecord) -> ToolConvention | None:
    """The convention row that reads a tool span: the first whose name, condition and scope
    fit (None for a span that is no tool call)."""
    pick = _PICKERS.get(record.scope)
    if pick is None:
        pick = _row_picker(record.scope)
    return pick(record.attributes)


#: ``tool_row``'s pickers by instrumentation scope (a process sees a handful of scopes; past
#: ``_MAX_PICKERS`` the cache starts again rather than grow).
_PICKERS: dict[str, Callable[[Mapping[str, Any]], ToolConvention | None]] = {}
_MAX_PICKERS = 256


def _row_picker(scope: str) -> Callable[[Mapping[str, Any]], ToolConvention | None]:
    """``tool_row`` for the spans of one scope, written out as code (``run_from`` asks it
    once per tool span): the rows that scope can use, in order, one lookup per key they test,
    no loop and no scope test."""
    env: dict[str, Any] = {}
    lines = ["def pick(attrs):", "    get = attrs.get"]
    for i, conv in enumerate(c for c in TOOL_CONVENTIONS
                             if c.scope is None or scope.startswith(c.scope)):
        env[f"R{i}"] = conv
        tests = []
        if conv.name is not None:
            env[f"N{i}"] = conv.name
            tests.append(f"get(N{i}) is not None")
        if conv.when is not None:
            env[f"W{i}"], env[f"V{i}"] = conv.when
            tests.append(f"get(W{i}) == V{i}")
        lines += [f"    if {' and '.join(tests) or 'True'}:", f"        return R{i}"]
    lines.append("    return None")
    exec("\n".join(lines), env)   # noqa: S102 - our own tables
    pick: Callable[[Mapping[str, Any]], ToolConvention | None] = env["pick"]
    if len(_PICKERS) >= _MAX_PICKERS:
        _PICKERS.clear()
    _PICKERS[scope] = pick
    return pick


#: Reads a tool span's call: ``(attrs, span name, events)`` -> ``CallText`` or None.
CallReader = Callable[[Mapping[str, Any], str, tuple[SpanEvent, ...]], CallText | None]


def call_reader(scope: str) -> CallReader:
    """``call_text`` of the row ``tool_row`` picks, for the spans of one instrumentation
    scope, written out as code: the rows that scope can use, in order, one lookup per key
    they test and no loop; a plain row (its name in an attribute, arguments in attributes)
    is read inline, the others through ``call_text``. The live guard reads every span's call
    as the span starts, on the application thread."""
    env: dict[str, Any] = {"call_text": call_text}

    def _literal(value: Any) -> str:
        # Keys and condition values written as literals: a constant loads faster than a global.
        if value is None or value.__class__ in (str, int, bool):
            return repr(value)
        env[f"K{len(env)}"] = value
        return f"K{len(env) - 1}"

    lines = ["def read(attrs, span_name, events):"]
    for i, conv in enumerate(c for c in TOOL_CONVENTIONS
                             if c.scope is None or scope.startswith(c.scope)):
        env[f"R{i}"], env[f"U{i}"] = conv, conv.arguments_from
        tests = []   # ``key in attrs`` first: most keys tested are absent
        if conv.name is not None:
            name = _literal(conv.name)
            tests.append(f"{name} in attrs and (v := attrs[{name}]) is not None")
        if conv.when is not None:
            key, value = _literal(conv.when[0]), _literal(conv.when[1])
            tests.append(f"attrs.get({key}) == {value}" if conv.when[1] is None
                         else f"{key} in attrs and attrs[{key}] == {value}")
        lines.append(f"    if {' and '.join(tests)}:")
        plain = (conv.name is not None and conv.name_from is None and not conv.not_tools
                 and conv.server_sep is None and not conv.argument_attributes
                 and not conv.argument_events)
        if not plain:
            lines.append(f"        return call_text(R{i}, attrs, span_name, events)")
            continue
        lines += [f"        if v.__class__ is not str or {_literal(SYNTHESIZED)} in attrs:",
                  f"            return call_text(R{i}, attrs, span_name, events)"]
        for j, key in enumerate(conv.arguments):
            lines += [f"        {'if' if j == 0 else 'elif'} {_literal(key)} in attrs:",
                      f"            return v, attrs[{_literal(key)}], U{i}"]
        lines.append(f"        return v, None, U{i}")
    lines.append("    return None")
    exec("\n".join(lines), env)   # noqa: S102 - our own tables
    read: CallReader = env["read"]
    return read


def call_text(conv: ToolConvention, attrs: Mapping[str, Any], span_name: str,
              events: tuple[SpanEvent, ...] = ()) -> CallText | None:
    """The tool name and raw arguments ``tool_call`` reads with the row ``conv``, and nothing
    else (no result, id or ``ToolCall``): what the live guard needs as a tool span starts.
    None when the span is no call (synthesized, or a name of ``conv.not_tools``)."""
    name = span_name if conv.name is None else attrs[conv.name]
    if conv.name_from is not None:
        name = conv.name_from(as_text(name))
    if SYNTHESIZED in attrs and attrs[SYNTHESIZED] is True or (
            conv.not_tools and name in conv.not_tools):
        return None
    if name.__class__ is not str:
        name = as_text(name)
    if conv.server_sep is not None and conv.server_sep in name:
        name = name.split(conv.server_sep, 1)[1]
    arguments: Any = None
    if conv.argument_attributes:
        arguments = {key: attrs[key] for key in conv.argument_attributes if key in attrs}
    for key in conv.arguments:
        if key in attrs:
            arguments = attrs[key]
            break
    else:
        if conv.argument_events and events:
            arguments = _event_value(events, conv.argument_events)
    return name, arguments, conv.arguments_from


def _event_value(events: tuple[SpanEvent, ...], sources: tuple[tuple[str, str], ...]) -> Any:
    """``_from_events`` on a span's events (the first source present wins)."""
    for source, key in sources:
        for event_name, event_attrs in events:
            if event_name == source and key in event_attrs:
                return event_attrs[key]
    return None


def agent_name_of(record: SpanRecord, agents: Sequence[SpanRecord] = (),
                  root_is_agent: bool = True) -> str | None:
    """A run's agent name: the root's agent-name attribute; when the root is no agent span (a
    framework's chain or crew, ADK 1.x's ``invocation``), the first agent span below it that
    is named by an attribute, else by its span name (``Convention.agent_span_names``: ADK
    1.x's ``agent_run [weather_agent]``); when the root is an agent span named only by a span
    name that names no agent in a known form (a framework's trace or workflow span: the
    OpenAI Agents SDK's ``Agent workflow``) and the agent spans below it name exactly one
    distinct agent, that agent (an orchestrator above several agents keeps its own name);
    else the root's span name without the instance UUIDs some frameworks put there
    (``Crew_<uuid>.kickoff``), so that one agent keeps one name across runs."""
    attrs = record.attributes
    for key in AGENT_NAME_KEYS:
        value = attrs.get(key)
        if value:
            return as_text(value)
    if not root_is_agent:
        for agent in agents:
            for key in NESTED_AGENT_NAME_KEYS:
                value = agent.attributes.get(key)
                if value:
                    return as_text(value)
        for agent in agents:
            name = agent_of_span_name(agent.name)
            if name:
                return name
    elif agents and not _names_its_agent(record.name):
        # Shape: a generic agent root (named by its span name alone) above one named agent.
        names = {name for agent in agents if (name := _agent_named(agent)) is not None}
        if len(names) == 1:
            return names.pop()
    return _UUID.sub("", record.name) or None


def _agent_named(agent: SpanRecord) -> str | None:
    """The agent an agent span below a run's root names: by an attribute, else by its span
    name (``agent_of_span_name``); None when it names none."""
    for key in NESTED_AGENT_NAME_KEYS:
        value = agent.attributes.get(key)
        if value:
            return as_text(value)
    return agent_of_span_name(agent.name)


#: Span names that name their own agent: the GenAI semconv's ``invoke_agent {agent name}``
#: and ``invoke_workflow {workflow name}`` (with the name left off when it is not known).
_SELF_NAMING = ("invoke_agent ", "invoke_workflow ")


def _names_its_agent(span_name: str) -> bool:
    """Whether an agent span's name names its own agent in a known form (``_SELF_NAMING``,
    ``Convention.agent_span_names``), rather than being a framework's generic word."""
    if span_name.startswith(_SELF_NAMING) and span_name.partition(" ")[2].strip():
        return True
    return agent_of_span_name(span_name) is not None


def agent_of_span_name(span_name: str) -> str | None:
    """The agent a span's name names (``agent_run [weather_agent]``: ``weather_agent``) by a
    convention's ``agent_span_names``, or None."""
    for prefix, suffix in AGENT_SPAN_NAMES:
        if span_name.startswith(prefix) and span_name.endswith(suffix) and (
                len(span_name) > len(prefix) + len(suffix)):
            return span_name[len(prefix):len(span_name) - len(suffix)]
    return None


_UUID = re.compile(r"[_.:-]?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
                   re.IGNORECASE)
