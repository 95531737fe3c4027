"""Which spans are tool calls, agent runs and model calls: the hot path.

``span_kind`` runs inside the application's ``span.end()`` for every span, so it is a handful
of dictionary lookups over tables built once from the conventions, and parses nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..values import as_text
from .registry import FRAMEWORK_SCOPES, MARKER_KEYS, MARKERS, TOOL_CONVENTIONS

__all__ = ["AGENT", "MODEL", "SYNTHESIZED", "TOOL", "is_agent_span", "is_framework_span",
           "is_model_span", "span_kind", "tool_name_of"]

TOOL, AGENT, MODEL = 1, 2, 4

#: A span marked ``tool.synthesized = true`` carries a tool name but is no call.
SYNTHESIZED = "tool.synthesized"

# (marker key, value -> bits); (tool-name key, None or the (key, value) the row needs).
_MARKER_BITS: tuple[tuple[str, dict[str, int]], ...] = tuple(
    (m.key, {**{v: AGENT for v in m.agents}, **{v: MODEL for v in m.models}}) for m in MARKERS)
_TOOL_NAMES: tuple[tuple[str, tuple[str, str] | None], ...] = tuple(
    (t.name, t.when) for t in TOOL_CONVENTIONS)


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
    for key, when in _TOOL_NAMES:
        if get(key) is not None and (when is None or get(when[0]) == when[1]):
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
    for key in MARKER_KEYS:
        if key in attrs:
            return True
    return bool(scope) and scope.startswith(FRAMEWORK_SCOPES)


def tool_name_of(attrs: Mapping[str, Any]) -> str | None:
    """The tool name of a tool-call span, or None when the span is no tool call."""
    for conv in TOOL_CONVENTIONS:
        name = attrs.get(conv.name)
        if name is None:
            continue
        if conv.when is not None and attrs.get(conv.when[0]) != conv.when[1]:
            continue
        if attrs.get(SYNTHESIZED) is True:
            return None
        return as_text(name)
    return None
