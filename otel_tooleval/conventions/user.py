"""The user's own mappings (the config's ``conventions:`` section), compiled once per config.

A mapping says which spans of a framework no built-in convention knows are agent runs, model
calls or tool calls, and where a tool call's name, arguments, result and id live. It belongs
to one config (one processor, one ``grade`` run), never to the module-level tables of
``kinds``: a process without a mapping classifies spans exactly as before, at the same cost.

An entry matches a span by instrumentation scope (prefix), span name (regex search) and
attributes (equal values, keys present), all given conditions together; the first entry
that matches says what the span is, in place of what the built-in conventions say. Whether
an entry can match depends on the scope and name alone, and both repeat (span names are
templates), so the entries that can are looked up in a small per-config cache: a span no
entry fits costs one dict lookup more than without a mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..model import SpanRecord
from ..user_regex import UserRegex
from ..values import as_text
from .spec import ToolConvention

__all__ = ["SPAN_NAME", "UserConvention", "UserConventions"]

#: The value of ``name`` / ``agent_name`` that reads the span's name (or the ``name`` group
#: of the entry's ``span_name`` regex) rather than an attribute.
SPAN_NAME = "span_name"

#: Distinct (scope, span name) pairs remembered; past it the cache starts over (span names
#: with ids in them must not grow it without bound).
_CACHE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class UserConvention:
    """One compiled entry: how it matches, and what a matching span is.

    ``kind`` is AGENT (a run), MODEL or TOOL. ``tool`` reads a tool span (a ``ToolConvention``
    whose ``name`` is None when the tool's name is the span's). ``agent_name``: the attribute
    that names a run's agent, or ``SPAN_NAME``. ``required``: keys the span must carry (the
    tool-name attribute among them, so that a matched tool span always has a name).
    """

    label: str
    kind: int
    scope: str | None = None
    span_name: UserRegex | None = None
    equals: tuple[tuple[str, Any], ...] = ()
    required: tuple[str, ...] = ()
    tool: ToolConvention | None = None
    agent_name: str | None = None

    def fits_name(self, scope: str, name: str) -> bool:
        return (self.scope is None or scope.startswith(self.scope)) and (
            self.span_name is None or self.span_name.test(name))

    def fits_attributes(self, attrs: Mapping[str, Any]) -> bool:
        for key in self.required:
            if attrs.get(key) is None:
                return False
        for key, value in self.equals:
            if key not in attrs or not _equal(attrs[key], value):
                return False
        return True

    def name_group(self, span_name: str) -> str:
        """The span's name, or the ``name`` group of the entry's regex when it has one."""
        if self.span_name is not None and "name" in self.span_name.groupindex:
            match = self.span_name.search(span_name)
            name = match.group("name") if match is not None else None
            if name:
                return name
        return span_name


def _equal(actual: Any, expected: Any) -> bool:
    """Equal values, where ``true`` is no ``1`` and a str subclass counts by its characters."""
    if isinstance(actual, bool) or isinstance(expected, bool):
        return actual is expected
    if isinstance(actual, str):
        actual = str.__str__(actual)
    return bool(actual == expected)


class UserConventions:
    """The compiled ``conventions:`` section of one config."""

    __slots__ = ("_cache", "entries")

    def __init__(self, entries: tuple[UserConvention, ...]) -> None:
        self.entries = entries
        self._cache: dict[tuple[str, str], tuple[UserConvention, ...]] = {}

    def _candidates(self, scope: str, name: str) -> tuple[UserConvention, ...]:
        found = self._cache.get((scope, name))
        return self._fill(scope, name) if found is None else found

    def _fill(self, scope: str, name: str) -> tuple[UserConvention, ...]:
        found = tuple(e for e in self.entries if e.fits_name(scope, name))
        if len(self._cache) >= _CACHE_SIZE:
            self._cache.clear()
        self._cache[(scope, name)] = found
        return found

    def classifier(self) -> Callable[[Mapping[str, Any], str, Any, int], int]:
        """``kind`` for the live hooks: ``(attrs, span name, instrumentation scope object or
        None, builtin kind)``; a span no entry can match costs a tuple and a dict lookup."""
        get, fill = self._cache.get, self._fill

        def kind(attrs: Mapping[str, Any], name: str, scope: Any, builtin: int) -> int:
            scope_name = scope.name if scope is not None else ""
            found = get((scope_name, name))
            if found is None:
                found = fill(scope_name, name)
            for entry in found:
                if entry.fits_attributes(attrs):
                    return entry.kind
            return builtin

        return kind

    def entry(self, attrs: Mapping[str, Any], name: str, scope: str) -> UserConvention | None:
        """The first entry that matches a span, or None."""
        for entry in self._candidates(scope, name):
            if entry.fits_attributes(attrs):
                return entry
        return None

    def kind(self, attrs: Mapping[str, Any], name: str, scope: str, builtin: int) -> int:
        """A span's kind bits: the matching entry's, else ``builtin`` (the conventions')."""
        for entry in self._candidates(scope, name):
            if entry.fits_attributes(attrs):
                return entry.kind
        return builtin

    def matches(self, record: SpanRecord) -> UserConvention | None:
        return self.entry(record.attributes, record.name, record.scope)

    def tool_row(self, record: SpanRecord) -> ToolConvention | None:
        """The row that reads a mapped tool span; None when no tool entry matches it."""
        entry = self.matches(record)
        return entry.tool if entry is not None else None

    def tool_name(self, record: SpanRecord) -> str | None:
        """The tool name of a mapped tool span (None: not one)."""
        entry = self.matches(record)
        if entry is None or entry.tool is None:
            return None
        row = entry.tool
        if row.name is None:
            return row.name_from(record.name) if row.name_from else record.name
        return as_text(record.attributes[row.name])

    def agent_name(self, record: SpanRecord) -> str | None:
        """The agent name a run entry reads off a root it matches (None: none)."""
        entry = self.matches(record)
        if entry is None or entry.agent_name is None:
            return None
        if entry.agent_name == SPAN_NAME:
            return entry.name_group(record.name) or None
        value = record.attributes.get(entry.agent_name)
        return as_text(value) if value else None
