"""A tool span as a ``ToolCall``, and a run root's agent name (off the hot path)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..model import SpanRecord, ToolCall
from ..values import as_text
from .kinds import SYNTHESIZED
from .openinference import tool_message_call_id
from .registry import AGENT_NAME_KEYS, TOOL_CONVENTIONS

__all__ = ["agent_name_of", "tool_call_from"]


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
              server_keys: tuple[str, ...]) -> ToolCall | None:
    """``tool_call_from`` with positional arguments (``run_from`` calls it once per call).

    Lookups are ``key in attrs`` then ``attrs[key]``: two specialised bytecodes, cheaper than a
    ``get`` method call when, as here, most keys looked up are absent.
    """
    attrs = record.attributes
    for conv in TOOL_CONVENTIONS:
        key = conv.name
        if key in attrs and (name := attrs[key]) is not None and (
                conv.when is None or attrs.get(conv.when[0]) == conv.when[1]):
            break
    else:
        return None
    if SYNTHESIZED in attrs and attrs[SYNTHESIZED] is True:
        return None
    if name.__class__ is not str:
        name = as_text(name)
    arguments: Any = None
    for key in conv.arguments:
        if key in attrs:
            arguments = attrs[key]
            break
    has_result = False
    result: Any = None
    error = record.error
    if not pending:
        for key in conv.result:
            if key in attrs:
                result, has_result = attrs[key], True
                break
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
    for key in server_keys:
        if key in attrs and (value := attrs[key]):
            server = as_text(value)
            break
    # Values stay raw here; ToolCall decodes them on first use.
    return ToolCall(name, index, arguments, result, has_result, call_id, record.span_id,
                    record.start_ns, None if pending else record.end_ns, step, pending, error,
                    server)


def agent_name_of(record: SpanRecord) -> str | None:
    """The first agent-name attribute the conventions know, else the span's name."""
    attrs = record.attributes
    for key in AGENT_NAME_KEYS:
        value = attrs.get(key)
        if value:
            return as_text(value)
    return record.name or None
