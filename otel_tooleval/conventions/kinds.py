"""Which spans are tool calls, agent runs and model calls: the hot path.

``span_kind`` runs inside the application's ``span.end()`` for every span, so it is a handful
of dictionary lookups over tables built once from the conventions, and parses nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..values import as_text
from .registry import FRAME_KEYS, FRAMEWORK_SCOPES, MARKERS, TOOL_CONVENTIONS
from .spec import AGENT, MODEL, TOOL

__all__ = ["AGENT", "AGENT_OPERATIONS", "KIND_KEYS", "MODEL", "OPERATION_KEY", "OTHER_AGENT_KEYS",
           "SYNTHESIZED", "TOOL", "agent_kind", "is_agent_span", "is_framework_span", "is_model_span",
           "span_kind", "tool_name_of"]


#: A span marked ``tool.synthesized = true`` carries a tool name but is no call.
SYNTHESIZED = "tool.synthesized"

#: Keys of the conventions most spans carry (OpenTelemetry's GenAI semantic conventions, which
#: OpenLLMetry and most SDKs emit, and OpenInference): ``span_kind`` tests the GenAI keys one by
#: one, the OpenInference keys when one key-set test finds a key of any other convention on the
#: span, and the keys of all the others when a second one finds one of theirs.
COMMON_PREFIXES = ("gen_ai.", "openinference.")
FIRST_PREFIX = COMMON_PREFIXES[0]

_SETUPS: dict[str, frozenset[str]] = {m.key: m.setups for m in MARKERS if m.setups}


def _text(value: Any) -> str | None:
    """A non-``str`` marker value: a str subclass's characters, anything else nothing."""
    return str.__str__(value) if isinstance(value, str) else None


def _compile_span_kind() -> Callable[[Mapping[str, Any]], int]:
    """``span_kind`` written out from the conventions' tables: one ``in`` test per marker key
    and tool-name key, no loop (a loop over the tables costs twice as much per span).

    Marker values map to bits, including a row that marks tool spans by a value of a marker
    key (``mlflow.spanType = "TOOL"``); then presence markers; then the tool-name rows. Most
    keys tested are absent from a span, so each is tested with ``in`` (no call) before it is
    read, and written as a literal (a constant loads faster than a global). The GenAI keys
    (``FIRST_PREFIX``) are tested one by one; every other key, ``tool.synthesized`` included,
    only when one key-set test in C (``OTHER.isdisjoint(attrs)``) finds one of them on the
    span: then the OpenInference keys one by one, and the keys of the other conventions when a
    second set test (``RARE``) finds one of theirs. A GenAI span, the usual one, runs the GenAI
    tests and one set test (bytecodes per span: ``bench_hooks.py --opcodes``). The bits are
    ORed; the tool-name rows add the tool bit only to a span that no marker value made a model
    call, and a model bit from a marker value tested after them takes it back (a model span is
    never a call), so the order of the tests does not change the result. Presence markers
    add their bits last and take nothing back.
    """
    bits: dict[str, dict[str, int]] = {}
    for m in MARKERS:
        table = bits.setdefault(m.key, {})
        for value in m.agents:
            table[value] = table.get(value, 0) | AGENT
        for value in m.models:
            table[value] = table.get(value, 0) | MODEL
    named: list[tuple[str, tuple[str, str] | None]] = []
    for row in TOOL_CONVENTIONS:
        if row.name is None and row.when is not None:
            table = bits.setdefault(row.when[0], {})
            table[row.when[1]] = table.get(row.when[1], 0) | TOOL
        elif row.name is not None and (row.name, row.when) not in named:
            named.append((row.name, row.when))
    read = {key for key, table in bits.items() if table}
    read.update(m.key for m in MARKERS if m.present)
    read.update(key for key, _ in named)
    read.update(when[0] for _, when in named if when is not None)
    rare = frozenset(k for k in read if not k.startswith(COMMON_PREFIXES))
    other = frozenset({*(k for k in read if not k.startswith(FIRST_PREFIX)), SYNTHESIZED})
    env: dict[str, Any] = {"_text": _text, "RARE": rare, "OTHER": other,
                           "KEYS": frozenset({*read, SYNTHESIZED})}
    # Each test goes in the group of its keys: GenAI only (first), OpenInference among them
    # (second, under the OTHER test), or a key of another convention (under the RARE test too).
    groups: tuple[list[str], list[str], list[str]] = ([], [], [])

    def group_of(keys: Iterable[str]) -> int:
        keys = list(keys)
        if rare.intersection(keys):
            return 2
        return 0 if all(k.startswith(FIRST_PREFIX) for k in keys) else 1

    def add(keys: Iterable[str], block: list[str]) -> None:
        group = group_of(keys)
        groups[group].extend("    " * group + line for line in block)

    for i, (key, table) in enumerate((k, t) for k, t in bits.items() if t):
        env[f"B{i}"] = table
        add([key], [f"    if {key!r} in attrs:", f"        v = attrs[{key!r}]",
                    "        if v.__class__ is not str:", "            v = _text(v)",
                    f"        kind |= B{i}.get(v, 0)"])
    # Presence markers go to ``marked``, ORed in at the end: a framework attribute that may be
    # copied onto every span of the framework (ADK's ``gcp.vertex.agent.llm_request`` is on
    # its tool spans too) marks a model call, but does not make a tool span a model span.
    for m in MARKERS:
        if m.present:
            add([m.key], [f"    if {m.key!r} in attrs:", f"        marked |= {m.present}"])
    tests: dict[int, list[str]] = {}
    for key, when in named:
        test = f"{key!r} in attrs and attrs[{key!r}] is not None"
        keys = [key]
        if when is not None:
            test += f" and {when[0]!r} in attrs and attrs[{when[0]!r}] == {when[1]!r}"
            keys.append(when[0])
        tests.setdefault(group_of(keys), []).append(f"({test})")
    for group, alternatives in sorted(tests.items()):
        groups[group].extend("    " * group + line for line in [
            f"    if not kind & {TOOL | MODEL} and ({' or '.join(alternatives)}):",
            f"        kind |= {TOOL}"])
    first, second, third = groups
    syn = repr(SYNTHESIZED)
    lines = ["def span_kind(attrs):", "    kind = 0", "    marked = 0", *first,
             "    if not OTHER.isdisjoint(attrs):", *second]
    if third:
        lines += ["        if not RARE.isdisjoint(attrs):", *third]
    # A model span is never a call, whatever tool keys it carries (an instrumentation may copy
    # the requested calls onto the chat span): the tool-name tests skip a span already known
    # as a model call, and a model bit found after them (another convention's marker) takes
    # the tool bit back, as ``tool.synthesized`` does.
    lines += [(f"        if kind & {TOOL} and (kind & {MODEL} or {syn} in attrs"
               f" and attrs[{syn}] is True):"),
              f"            kind ^= {TOOL}", "    return kind | marked"]
    exec("\n".join(lines), env)   # noqa: S102 - our own tables, made once at import
    fn: Callable[[Mapping[str, Any]], int] = env["span_kind"]
    fn.__doc__ = _SPAN_KIND_DOC
    fn.__module__ = __name__
    fn.keys = env["KEYS"]  # type: ignore[attr-defined]
    return fn


_SPAN_KIND_DOC = """TOOL, AGENT and MODEL bits of a span, in a handful of dict lookups (hot path).

Equivalent to ``tool_name_of`` / ``is_agent_span`` / ``is_model_span`` together. A marker
value that is a ``str`` subclass (an application's str enum, kept as is by the SDK) counts by
its characters, as its OTLP export would; any other non-string marks nothing (a file may hold
anything there: an OTLP kvlist is a dict, which cannot even be looked up).
"""

span_kind = _compile_span_kind()


def _compile_agent_kind() -> Callable[[Mapping[str, Any]], int]:
    """``agent_kind`` written out as ``span_kind`` is, from the marker values that make an
    agent span only: the GenAI keys one by one, the others behind one key-set test."""
    agents: dict[str, set[str]] = {}
    present: list[str] = []
    for m in MARKERS:
        if m.agents:
            agents.setdefault(m.key, set()).update(m.agents)
        if m.present & AGENT:
            present.append(m.key)
    env: dict[str, Any] = {"_text": _text}
    first: list[str] = []
    other: list[str] = []
    for i, (key, values) in enumerate(agents.items()):
        env[f"A{i}"] = frozenset(values)
        (first if key.startswith(FIRST_PREFIX) else other).extend([
            f"    if {key!r} in attrs:", f"        v = attrs[{key!r}]",
            "        if v.__class__ is not str:", "            v = _text(v)",
            f"        if v in A{i}:", f"            return {AGENT}"])
    for key in present:
        (first if key.startswith(FIRST_PREFIX) else other).extend([
            f"    if {key!r} in attrs:", f"        return {AGENT}"])
    env["OTHER"] = frozenset(k for k in (*agents, *present) if not k.startswith(FIRST_PREFIX))
    lines = ["def agent_kind(attrs):", *first, "    if OTHER.isdisjoint(attrs):",
             "        return 0", *other, "    return 0"]
    exec("\n".join(lines), env)   # noqa: S102 - our own tables, made once at import
    fn: Callable[[Mapping[str, Any]], int] = env["agent_kind"]
    fn.__doc__ = """``span_kind(attrs) & AGENT``, reading only what makes an agent span (the
    live hooks' test of every span that ends in a tracked trace, hooks.py: ``defer``)."""
    fn.__module__ = __name__
    fn.keys = frozenset({*agents, *present})  # type: ignore[attr-defined]
    return fn


agent_kind = _compile_agent_kind()
#: The GenAI key that names a span's operation, and its values that make an agent span: with
#: ``OTHER_AGENT_KEYS`` (every other key ``agent_kind`` reads) absent, a span whose operation
#: is a ``str`` outside ``AGENT_OPERATIONS`` is no agent span (the hooks' inline test).
OPERATION_KEY = "gen_ai.operation.name"
AGENT_OPERATIONS: frozenset[str] = frozenset(
    v for m in MARKERS if m.key == OPERATION_KEY for v in m.agents)
OTHER_AGENT_KEYS: frozenset[str] = agent_kind.keys - {OPERATION_KEY}  # type: ignore[attr-defined]
#: Every attribute key ``span_kind`` reads: a span with none of them is of no kind (0), which
#: ``KIND_KEYS.isdisjoint(attrs)`` tells in one C call (the live hooks' plain-traffic test).
KIND_KEYS: frozenset[str] = span_kind.keys  # type: ignore[attr-defined]


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
    spans have no name here). A model span is no tool call, whatever tool keys it carries.
    """
    if span_kind(attrs) & MODEL:
        return None
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
