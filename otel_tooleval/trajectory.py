"""From spans to agent runs: which spans are run roots, and the ordered calls of each run.

Pure functions over ``SpanRecord``s. The live processor takes the same decisions incrementally
(see ``assembly.py``); ``find_runs`` takes them over a complete set of spans (files, tests).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from .conventions import (
    AGENT,
    MODEL,
    TOOL,
    agent_name_of,
    assistant_text_of,
    final_output_of,
    is_agent_span,
    is_framework_span,
    span_kind,
    tool_name_of,
)
from .conventions.calls import tool_call
from .conventions.inputs import first_user_message
from .conventions.registry import AGENT_SPAN_PREFIXES, NOT_MODELS
from .conventions.user import UserConventions
from .model import AgentRun, SpanRecord, ToolCall
from .reconcile import reconcile
from .user_regex import UserRegex

__all__ = ["AGENT_NAME_KEYS", "RunPolicy", "build_run", "find_runs", "group_by_trace", "run_from"]

_MCP_NAME = re.compile(r"^mcp__(?P<server>.+?)__(?P<tool>.+)$")


@dataclass(frozen=True, slots=True)
class RunPolicy:
    """How runs are cut out of traces; built from the ``runs:`` section of the config.

    ``root`` is ``auto``, ``local_root``, ``agent`` or ``pattern``; with ``pattern``,
    ``root_pattern`` is matched (search) against a span's name and its agent name.
    ``conventions``: the config's own mappings (``conventions:``), tried before the built-in
    conventions; None without any (then ``kind`` is the conventions' ``span_kind``).
    """

    root: str = "auto"
    root_pattern: UserRegex | None = None
    nested_agents: str = "merge"
    agent_span_names: tuple[UserRegex, ...] = ()
    ignore_tools: tuple[UserRegex, ...] = ()
    server_attributes: tuple[str, ...] = ("mcp.server.name", "gen_ai.tool.server.name",
                                          "server.address")
    max_calls_per_run: int = 10_000
    conventions: UserConventions | None = None
    #: ``runs.unwrap``: take generic envelopes off calls' values (``values.unwrap_result``).
    unwrap: bool = True
    #: ``runs.calls_from``: auto, executed or requested (``otel_tooleval.reconcile``).
    calls_from: str = "auto"

    def kind(self, attrs: Mapping[str, Any], name: str, scope: str) -> int:
        """TOOL, AGENT and MODEL bits of a span: the config's mapping's, else the conventions'."""
        if self.conventions is None:
            return span_kind(attrs)
        return self.conventions.kind(attrs, name, scope, span_kind(attrs))

    def record_kind(self, record: SpanRecord) -> int:
        return self.kind(record.attributes, record.name, record.scope)

    def is_agent(self, attrs: Mapping[str, Any], name: str, scope: str = "") -> bool:
        """Agent-marked by a convention or the config's mapping, or by name / agent name
        through the config."""
        if self.root_pattern is not None:
            return _matches_name(self.root_pattern, attrs, name)
        if (is_agent_span(attrs) if self.conventions is None
                else self.kind(attrs, name, scope) & AGENT):
            return True
        return self.named_agent(attrs, name)

    def named_agent(self, attrs: Mapping[str, Any], name: str) -> bool:
        """Named an agent by the config: ``root_pattern`` if set, else ``agent_span_names``."""
        if self.root_pattern is not None:
            return _matches_name(self.root_pattern, attrs, name)
        return any(_matches_name(p, attrs, name) for p in self.agent_span_names)

    def tool_name(self, record: SpanRecord) -> str | None:
        """The tool name of a tool span (None: no tool call), the config's mapping first."""
        if self.conventions is not None and self.conventions.matches(record) is not None:
            return self.conventions.tool_name(record)
        return tool_name_of(record.attributes, record.name)

    def local_root_is_run(self, attrs: Mapping[str, Any], name: str, scope: str, *,
                          had_agent_runs: bool, has_tool_calls: bool) -> bool:
        """Decide, when a local root ends, whether it is itself a run root."""
        if self.root == "local_root":
            return True
        agent = self.is_agent(attrs, name, scope)
        if self.root != "auto":
            return agent
        if agent or is_framework_span(attrs, scope):
            return True
        # Neither framework nor agent spans: the local root is the run, but only when there
        # is something to grade, so plain HTTP traces without tool calls are left alone.
        return not had_agent_runs and has_tool_calls

    def ignores(self, tool_name: str) -> bool:
        return any(p.fullmatch(tool_name) for p in self.ignore_tools)


#: The attributes named agents are matched on besides the span name, the first set one
#: (``_matches_name``).
_AGENT_NAME_ORDER = ("gen_ai.agent.name", "agent.name")
AGENT_NAME_KEYS = frozenset(_AGENT_NAME_ORDER)


def _matches_name(pattern: UserRegex, attrs: Mapping[str, Any], name: str) -> bool:
    if pattern.test(name):
        return True
    first, second = _AGENT_NAME_ORDER
    agent = attrs.get(first) or attrs.get(second)
    return bool(agent) and pattern.test(str(agent))


def _sort_key(record: SpanRecord) -> tuple[int, float, int]:
    end = float("inf") if record.end_ns is None else record.end_ns
    return (record.start_ns, end, record.span_id)


_END = attrgetter("end_ns")
_START_END_ID = attrgetter("start_ns", "end_ns", "span_id")


def _sort_records(records: list[SpanRecord]) -> None:
    """Sort by ``_sort_key``; with every span ended, by the same fields read in C."""
    if None in map(_END, records):
        records.sort(key=_sort_key)
    else:
        records.sort(key=_START_END_ID)


def build_run(
    root: SpanRecord,
    members: Iterable[SpanRecord],
    policy: RunPolicy,
    *,
    late_spans: int = 0,
    dropped_calls: int = 0,
) -> AgentRun:
    """The AgentRun of ``root`` from the records below it (the root itself may be included)."""
    tools: list[SpanRecord] = []
    models: list[SpanRecord] = []
    for record in members:
        if record.span_id == root.span_id:
            continue
        kind = policy.record_kind(record)
        if kind & TOOL:
            tools.append(record)
        elif kind & (MODEL | AGENT):
            models.append(record)   # agent spans too: run_from tells them apart
        elif AGENT_SPAN_PREFIXES and record.name.startswith(AGENT_SPAN_PREFIXES):
            models.append(record)   # an agent span marked by its name only (ADK 1.x)
    return run_from(root, tools, models, policy, late_spans=late_spans,
                    dropped_calls=dropped_calls)


def run_from(
    root: SpanRecord,
    tools: list[SpanRecord],
    models: list[SpanRecord],
    policy: RunPolicy,
    *,
    late_spans: int = 0,
    dropped_calls: int = 0,
) -> AgentRun:
    """The AgentRun of ``root`` from its tool spans and model-call spans, in any order.

    ``models`` may hold agent spans below the root too (they name the agent when the root is
    no agent span). A model span inside another model span, or named as a framework's
    request preparation (``Convention.not_models``), is no model response of its own: each
    response is one step. A tool span still open, or ended after the root ended, is a pending
    call.
    """
    models, agents, nested = _responses(models, root.span_id, policy)
    if policy.ignore_tools:
        tools = [t for t in tools if not policy.ignores(policy.tool_name(t) or "")]
    _sort_records(tools)
    _sort_records(models)
    if len(tools) > policy.max_calls_per_run:
        dropped_calls += len(tools) - policy.max_calls_per_run
        del tools[policy.max_calls_per_run:]
    model_starts = [m.start_ns for m in models]
    root_end = root.end_ns
    server_keys = tuple(policy.server_attributes)
    mapped = policy.conventions
    calls: list[ToolCall] = []
    pending = 0
    for record in tools:
        end = record.end_ns
        is_pending = end is None or (root_end is not None and end > root_end)
        step = bisect_left(model_starts, record.start_ns)   # the turn: models started before
        row = None
        if mapped is not None and (entry := mapped.matches(record)) is not None:
            if entry.tool is None:
                continue   # mapped as no tool: a built-in row must not read it
            row = entry.tool
        call = tool_call(record, len(calls), step - 1 if step else 0, is_pending, server_keys,
                         row, policy.unwrap)
        if call is None:
            continue
        if call.server is None and call.name.startswith("mcp__"):
            match = _MCP_NAME.match(call.name)
            if match:
                call.server = match.group("server")
        pending += is_pending
        calls.append(call)
    # The second witness: the calls the model responses requested (grading side only).
    calls, reading = reconcile(calls, models, calls_from=policy.calls_from,
                               ignores=policy.ignores if policy.ignore_tools else None,
                               max_calls=policy.max_calls_per_run, nested=nested)
    if reading.recorded and policy.calls_from != "executed":
        pending = sum(1 for c in calls if c.pending)
    return AgentRun(
        trace_id=root.trace_id,
        root_span_id=root.span_id,
        agent=(mapped.agent_name(root) if mapped is not None else None) or agent_name_of(
            root, agents, policy.is_agent(root.attributes, root.name, root.scope)),
        calls=tuple(calls),
        root_name=root.name,
        start_ns=root.start_ns,
        end_ns=root.end_ns,
        pending_calls=pending,
        late_spans=late_spans,
        dropped_calls=dropped_calls,
        steps=max(len(models), 1),
        root_attributes=root.attributes,
        outputs=SpanOutputs(root, models, nested),
        reading=reading,
    )


def _responses(records: list[SpanRecord], root_id: int, policy: RunPolicy
               ) -> tuple[list[SpanRecord], list[SpanRecord], dict[int, list[SpanRecord]]]:
    """(model responses, agent spans, nested) of a run's kept model and agent spans.

    A model span inside another model span is no step of its own: ``nested`` maps each
    outermost model span's id to the model spans below it (through model spans only), in start
    order. Rule (a shape, not a framework): where the outer span records no response itself, its
    response is the nested spans' (a framework's step span marked as the model turn whose model
    call is a child, Haystack's ``haystack.agent.step`` / ``.llm``; a wrapper's LLM span around
    a client instrumentation's). The set of steps never changes with it.
    """
    models: list[SpanRecord] = []
    agents: list[SpanRecord] = []
    for record in records:
        if record.span_id == root_id:
            continue
        if policy.record_kind(record) & MODEL:
            if not (NOT_MODELS and record.name.endswith(NOT_MODELS)):
                models.append(record)
        else:
            agents.append(record)
    nested: dict[int, list[SpanRecord]] = {}
    if len(models) > 1:
        by_id = {m.span_id: m for m in models}
        outer: list[SpanRecord] = []
        for m in models:
            parent = m.parent_id
            if parent not in by_id:
                outer.append(m)
                continue
            for _ in range(len(by_id)):   # up to the outermost model span (no cycle runs on)
                above = by_id[parent].parent_id
                if above not in by_id:
                    break
                parent = above
            nested.setdefault(parent, []).append(m)
        models = outer
        for inner in nested.values():
            _sort_records(inner)
    _sort_records(agents)
    return models, agents, nested


class SpanOutputs:
    """A run's final output and assistant texts, read from its spans once, when first asked."""

    __slots__ = ("_asked", "_final", "_models", "_nested", "_root", "_texts")

    def __init__(self, root: SpanRecord, models: list[SpanRecord],
                 nested: Mapping[int, list[SpanRecord]] | None = None) -> None:
        self._root = root
        self._models = models
        self._nested = nested or {}
        self._final: str | None | object = _UNREAD
        self._texts: tuple[str, ...] | None = None
        self._asked: str | None | object = _UNREAD

    def first_user_message(self) -> str | None:
        """What the run was asked: the root's input, else its first model call's input
        (``conventions.inputs``). A model span that records none is read through the model
        spans nested in it (a wrapper's span around the client's, as for its response)."""
        if self._asked is _UNREAD:
            asked = first_user_message(self._root.attributes, self._root.events)
            for record in self._models:
                if asked is not None:
                    break
                asked = first_user_message(record.attributes, record.events)
                for inner in self._nested.get(record.span_id, ()):
                    if asked is not None:
                        break
                    asked = first_user_message(inner.attributes, inner.events)
            self._asked = asked
        return self._asked  # type: ignore[return-value]

    def final_output(self) -> str | None:
        if self._final is _UNREAD:
            self._final = final_output_of(self._root, self._models)
        return self._final  # type: ignore[return-value]

    def assistant_texts(self) -> tuple[str, ...]:
        if self._texts is None:
            self._texts = tuple(t for t in map(assistant_text_of, self._models) if t)
        return self._texts


_UNREAD = object()


def group_by_trace(records: Iterable[SpanRecord]) -> dict[int, list[SpanRecord]]:
    traces: dict[int, list[SpanRecord]] = defaultdict(list)
    for record in records:
        traces[record.trace_id].append(record)
    return traces


def find_runs(records: Iterable[SpanRecord], policy: RunPolicy, *,
              on_detached: Callable[[list[SpanRecord]], None] | None = None,
              ) -> list[tuple[SpanRecord, list[SpanRecord]]]:
    """Cut complete traces into runs: ``(root, members)`` pairs, in root start order.

    Takes the same decisions as the live processor: outermost agent spans, a framework local
    root as one run, nested agents merged (or, with ``nested_agents: separate``, graded too).

    Spans that no local root reaches (their parent links form a cycle, or a span names itself
    as its parent) belong to no run; ``on_detached`` receives them, one call per trace.
    """
    out: list[tuple[SpanRecord, list[SpanRecord]]] = []
    for trace in group_by_trace(records).values():
        # One record per span id: exporters retry, so a file may hold a span twice; an ended
        # record wins over an open one.
        by_id: dict[int, SpanRecord] = {}
        for s in trace:
            seen = by_id.get(s.span_id)
            if seen is None or (seen.end_ns is None and s.end_ns is not None):
                by_id[s.span_id] = s
        spans = list(by_id.values())
        children: dict[int, list[SpanRecord]] = defaultdict(list)
        local_roots = []
        for s in spans:
            if s.is_local_root or s.parent_id not in by_id:
                local_roots.append(s)
            else:
                children[s.parent_id].append(s)

        reached = 0
        for local in local_roots:
            tree = _subtree(local, children)
            reached += len(tree)
            roots = _run_roots(local, tree, children, policy)
            for root in roots:
                out.append((root, tree if root is local else _subtree(root, children)))
        if reached < len(spans) and on_detached is not None:
            found = {s.span_id for local in local_roots for s in _subtree(local, children)}
            on_detached([s for s in spans if s.span_id not in found])
    out.sort(key=lambda pair: (pair[0].start_ns, pair[0].span_id))
    return out


def _subtree(top: SpanRecord, children: Mapping[int, list[SpanRecord]]) -> list[SpanRecord]:
    stack, seen = [top], []
    while stack:
        node = stack.pop()
        seen.append(node)
        stack.extend(children.get(node.span_id, ()))
    return seen


def _run_roots(local: SpanRecord, tree: list[SpanRecord],
               children: Mapping[int, list[SpanRecord]], policy: RunPolicy) -> list[SpanRecord]:
    """The run roots of one local tree (see ``assembly.TraceBuffers._place`` for the live twin).

    Below a local root that is neither agent nor framework span, a run is the outermost agent
    span, or the outermost framework span that has an agent span below it.
    """
    def is_agent(node: SpanRecord) -> bool:
        return policy.is_agent(node.attributes, node.name, node.scope)

    def framework(node: SpanRecord) -> bool:
        return policy.root == "auto" and is_framework_span(node.attributes, node.scope)

    def has_agent_below(node: SpanRecord) -> bool:
        stack = list(children.get(node.span_id, ()))
        while stack:
            n = stack.pop()
            if is_agent(n):
                return True
            stack.extend(children.get(n.span_id, ()))
        return False

    local_is_run_root = policy.root != "local_root" and (is_agent(local) or framework(local))
    if (policy.root == "local_root" or local_is_run_root) and policy.nested_agents != "separate":
        return [local]   # nested agents merge into this run: no need to walk the tree
    outer: list[SpanRecord] = []
    nested: list[SpanRecord] = []
    # Walk down; the first run root on each path is outermost, agent spans below it are nested.
    stack: list[tuple[SpanRecord, bool]] = [(c, local_is_run_root or policy.root == "local_root")
                                            for c in children.get(local.span_id, ())]
    while stack:
        node, inside = stack.pop()
        root_here = False
        if is_agent(node):
            (nested if inside else outer).append(node)
            root_here = True
        elif not inside and framework(node) and has_agent_below(node):
            outer.append(node)
            root_here = True
        stack.extend((c, inside or root_here) for c in children.get(node.span_id, ()))
    separate = nested if policy.nested_agents == "separate" else []
    if policy.root == "local_root" or local_is_run_root:
        return [local, *separate]
    if outer:
        return outer + separate
    has_tools = any(policy.tool_name(s) is not None for s in tree if s is not local)
    if policy.local_root_is_run(local.attributes, local.name, local.scope,
                                had_agent_runs=False, has_tool_calls=has_tools):
        return [local]
    return []
