"""Which spans are tool calls, agent runs and model calls: the hot path.

``span_kind`` runs inside the application's ``span.end()`` for every span, so it is a handful
of dictionary lookups over tables built once from the conventions, and parses nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..values import as_text
from .registry import FRAME_KEYS, FRAMEWORK_SCOPES, MARKERS, TOOL_CONVENTIONS
from .spec import AGENT, MODEL, TOOL

__all__ = ["AGENT", "MODEL", "SYNTHESIZED", "TOOL", "is_agent_span", "is_framework_span",
           "is_model_span", "span_kind", "tool_name_of"]


#: A span marked ``tool.synthesized = true`` carries a tool name but is no call.
SYNTHESIZED = "tool.synthesized"

# (marker key, value -> bits); (key, bits for any value); (tool-name key or None for the span's
# name, None or the (key, value) the row needs).
_MARKER_BITS: tuple[tuple[str, dict[str, int]], ...] = tuple(
    (m.key, {**{v: AGENT for v in m.agents}, **{v: MODEL for v in m.models}})
    for m in MARKERS if m.agents or m.models)
_PRESENT: tuple[tuple[str, int], ...] = tuple((m.key, m.present) for m in MARKERS if m.present)
_SETUPS: dict[str, frozenset[str]] = {m.key: m.setups for m in MARKERS if m.setups}
_TOOL_NAMES: tuple[tuple[str | None, tuple[str, str] | None], ...] = tuple(dict.fromkeys(
    (t.name, t.when) for t in TOOL_CONVENTIONS))


def span_kind(attrs: Mapping[str, Any]) -> int:
    """TOOL, AGENT and MODEL bits of a span, in a handful of dict lookups (the hot path).

    Equivalent to ``tool_name_of`` / ``is_agent_span`` / ``is_model_span`` together. A marker
    value that is a ``str`` subclass (an application's str enum, kept as is by the SDK) counts
    by its characters, as its OTLP export would; any other non-string marks nothing (a file may
    hold anything there: an OTLP kvlist is a dict, which cannot even be looked up).
    """
    kind = 0
    get = attrs.get
    for key, bits in _MARKER_BITS:
        value = get(key)
        if value is not None:
            if value.__class__ is not str:
                if not isinstance(value, str):
                    continue
                value = str.__str__(value)
            kind |= bits.get(value, 0)
    for key, present in _PRESENT:
        if key in attrs:
            kind |= present
    for name_key, when in _TOOL_NAMES:
        if (name_key is None or get(name_key) is not None) and (
                when is None or get(when[0]) == when[1]):
            if get(SYNTHESIZED) is not True:
                kind |= TOOL
            break
    return kind


def is_agent_span(attrs: Mapping[str, Any]) -> bool:
    """True for a span marked as an agent (or workflow) invocation under any convention."""
    return bool(span_kind(attrs) & AGENT)


def is_model_span(attrs: Mapping[str, Any]) -> bool:
    """True for a model-call span (one agent turn = one model response)."""
    return bool(span_kind(attrs) & MODEL)


def is_framework_span(attrs: Mapping[str, Any], scope: str = "") -> bool:
    """True for a span carrying any convention's kind marker, or made by a known framework."""
    for key in FRAME_KEYS:
        if key in attrs:
            setups = _SETUPS.get(key)
            # An operation that is no run (an agent being created) makes no framework span.
            return not (setups and as_text(attrs[key]) in setups)
    return bool(scope) and scope.startswith(FRAMEWORK_SCOPES)


def tool_name_of(attrs: Mapping[str, Any], span_name: str | None = None) -> str | None:
    """The tool name of a tool-call span, or None when the span is no tool call.

    ``span_name``: for conventions that name the tool by the span's name (without it, such
    spans have no name here).
    """
    for conv in TOOL_CONVENTIONS:
        name = attrs.get(conv.name) if conv.name is not None else span_name
        if name is None:
            continue
        if conv.when is not None and attrs.get(conv.when[0]) != conv.when[1]:
            continue
        if attrs.get(SYNTHESIZED) is True:
            return None
        return as_text(name)
    return None
