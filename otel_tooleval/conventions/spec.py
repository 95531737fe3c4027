"""What one convention family declares: which spans are runs, model calls and tool calls, and
where a tool call's name, arguments, result and id live.

A convention module holds one ``Convention``; ``registry`` puts them in order and derives the
lookup tables of the hot path from them, so adding a framework is adding a module and a line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Convention", "KindMarker", "ToolConvention"]


@dataclass(frozen=True, slots=True)
class KindMarker:
    """An attribute whose value marks a span as an agent run or a model call."""

    key: str
    agents: frozenset[str] = frozenset()
    models: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ToolConvention:
    """Where one convention keeps a tool call's name, arguments, result and id.

    ``when`` restricts the row to spans whose attribute equals a value (Traceloop marks tool
    spans by kind and keeps the name in a generic entity attribute). Keys are tried in order;
    the first present wins.
    """

    convention: str
    name: str
    arguments: tuple[str, ...]
    result: tuple[str, ...]
    call_id: tuple[str, ...] = ()
    when: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Convention:
    """One convention family (a semantic convention, or one framework's own way).

    ``scopes``: instrumentation-scope prefixes whose spans are framework spans even before
    their kind attribute is set (some instrumentations set every attribute at the end).
    ``agent_names``: attributes that hold a run's agent name, in order.
    """

    name: str
    markers: tuple[KindMarker, ...] = ()
    tools: tuple[ToolConvention, ...] = ()
    scopes: tuple[str, ...] = ()
    agent_names: tuple[str, ...] = field(default=())
