"""What one convention family declares: which spans are runs, model calls and tool calls, and
where a tool call's name, arguments, result and id live.

A convention module holds one ``Convention``; ``registry`` puts them in order and derives the
lookup tables of the hot path from them, so adding a framework is adding a module and a line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AGENT", "MODEL", "TOOL", "Convention", "KindMarker", "ToolConvention"]

#: The kind bits of a span (``kinds.span_kind``).
TOOL, AGENT, MODEL = 1, 2, 4


@dataclass(frozen=True, slots=True)
class KindMarker:
    """An attribute whose value marks a span as an agent run or a model call.

    ``setups``: values of operations that are no run and no framework span (an agent being
    created, a client set up): a trace made of such a span alone is not graded.
    ``present``: AGENT or MODEL bits for any value (frameworks that mark a span by carrying
    a key rather than by a value, e.g. Haystack's ``haystack.agent.step``).
    ``frames``: whether carrying the key at all makes a framework span (a local root that is
    one is a run). False for keys every component of a framework carries, agent or not.
    """

    key: str
    agents: frozenset[str] = frozenset()
    models: frozenset[str] = frozenset()
    setups: frozenset[str] = frozenset()
    present: int = 0
    frames: bool = True


@dataclass(frozen=True, slots=True)
class ToolConvention:
    """Where one convention keeps a tool call's name, arguments, result and id.

    ``when`` restricts the row to spans whose attribute equals a value (Traceloop marks tool
    spans by kind and keeps the name in a generic entity attribute). ``name`` None: the span's
    own name is the tool's (MLflow, Langfuse), and ``when`` alone marks the span. ``scope``
    restricts the row to spans of instrumentation scopes starting with it (a framework that
    writes the GenAI keys with values of its own). Keys are tried in order; the first present
    wins. ``arguments_from`` / ``result_from`` take the decoded value out of the envelope the
    framework puts around it. ``name_from`` turns the recorded name into the tool's
    (``lookup_city.__call__`` -> ``lookup_city``); ``server_sep`` splits a qualified name
    into the server (plugin) and the tool: ``WeatherPlugin-get_weather`` with ``-``.
    ``not_tools``: names of spans the row would read that are no call (bookkeeping, or a
    framework's own end-of-run tool). ``argument_attributes``: the arguments are an object
    of these attributes, one per parameter (a user mapping's ``arguments_from_attributes``),
    in place of ``arguments``. ``argument_events`` / ``result_events``: span events that hold
    the arguments / result, as ``(event name, event attribute)`` pairs, tried in order after
    the attribute keys (Strands' default telemetry keeps them only there); the envelopes apply
    to them as to the attributes.
    """

    convention: str
    name: str | None
    arguments: tuple[str, ...]
    result: tuple[str, ...]
    call_id: tuple[str, ...] = ()
    when: tuple[str, str] | None = None
    scope: str | None = None
    arguments_from: Callable[[Any], Any] | None = None
    result_from: Callable[[Any], Any] | None = None
    name_from: Callable[[str], str] | None = None
    server_sep: str | None = None
    not_tools: frozenset[str] = frozenset()
    argument_attributes: tuple[str, ...] = ()
    argument_events: tuple[tuple[str, str], ...] = ()
    result_events: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Convention:
    """One convention family (a semantic convention, or one framework's own way).

    ``scopes``: instrumentation-scope prefixes whose spans are framework spans even before
    their kind attribute is set (some instrumentations set every attribute at the end).
    ``agent_names``: attributes that hold a run's agent name, in order.
    ``agent_node_names``: attributes that name an agent span below a run's root (graph node
    ids), read when the root itself is no agent span.
    ``agent_span_names``: ``(prefix, suffix)`` of the names of spans that are a framework's
    agent invocations and carry the agent's name only there (ADK 1.x ``agent_run
    [weather_agent]``): below a root that is no agent span, they name the run's agent.
    ``not_models``: span-name suffixes of model-marked spans that are no model response (a
    framework's request preparation). ``outputs``: attributes of a run's root that hold its
    final answer (after the general ones: ``final_result``, ``output.value`` ...).
    ``model_texts``: ``(attribute, reader)`` pairs: where a model span of the framework keeps
    its answer, and how to take the text out of the decoded value.
    ``output_events``: events of a run's root that hold its final answer, as ``(event name,
    event attribute)`` pairs, tried after every attribute (``texts.final_output_of``).
    """

    name: str
    markers: tuple[KindMarker, ...] = ()
    tools: tuple[ToolConvention, ...] = ()
    scopes: tuple[str, ...] = ()
    agent_names: tuple[str, ...] = field(default=())
    agent_node_names: tuple[str, ...] = ()
    agent_span_names: tuple[tuple[str, str], ...] = ()
    not_models: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    output_events: tuple[tuple[str, str], ...] = ()
    model_texts: tuple[tuple[str, Callable[[Any], str | None]], ...] = ()
