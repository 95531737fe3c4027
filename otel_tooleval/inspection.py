"""``otel-tooleval inspect``: what was read from trace files, for when a verdict surprises.

Files are read and cut into runs exactly as ``grade`` reads them (``offline.grade_files``):
the same readers, the same ``find_runs`` / ``build_run`` decisions under the config's
``runs:`` section. Nothing is graded. Besides the runs and their calls, every span that was
not used (not a run root, nor a tool, model or agent span inside a run) is counted by its
instrumentation scope and by the attribute keys that look like tool, agent or model markers,
so that spans of a framework no convention knows show up by name.

The convention of a call is worked out here from its span's attributes, after the fact, so
the hot path (``conventions._tool_call``) stays as it is.
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .case_inspection import MAX_NEAREST, CaseFinding, explain_case
from .config import ToolEvalConfig, config_from_mapping
from .conventions import MARKER_KEYS, TOOL_CONVENTIONS, span_kind
from .conventions.calls import tool_row
from .files import DEFAULT_MAX_LINE_BYTES, InputError, InputProblem, iter_traces, read_records
from .model import AgentRun, SpanRecord
from .sessions.keys import session_key
from .suggestion import SpanShapes, suggest_conventions
from .trajectory import build_run, find_runs

__all__ = ["CANDIDATE_PATTERNS", "InspectedRun", "Inspection", "KeyCensus", "Unrecognised",
           "convention_of", "default_config", "hints", "inspect_files", "session_of",
           "suggested_conventions"]

#: Attribute keys (matched case-insensitively) that look like a tool, agent or model marker.
CANDIDATE_PATTERNS: tuple[str, ...] = (
    "*tool*name*", "*tool*input*", "*tool*output*", "*tool*arg*", "*tool*result*",
    "*tool*call*", "*agent*", "*.model*", "*operation.name", "*span.kind",
)
_CANDIDATE = re.compile("|".join(fnmatch.translate(p) for p in CANDIDATE_PATTERNS),
                        re.IGNORECASE)
# Keys that match a pattern by accident: HTTP's user agent is no agent.
_NOT_CANDIDATE = re.compile(r".*user[._-]?agent.*", re.IGNORECASE)
#: Keys some convention reads: on a span that was not used, they point at the run cutting
#: (or at marker values no convention knows), not at a missing convention.
READ_KEYS: frozenset[str] = frozenset(
    {*MARKER_KEYS, "gen_ai.agent.name", "agent.name", "tool.synthesized"}
    | {key for conv in TOOL_CONVENTIONS
       for key in (conv.name, *conv.arguments, *conv.result, *conv.call_id) if key})
SESSION_KEYS: tuple[str, ...] = ("gen_ai.conversation.id", "session.id")
#: Distinct candidate keys tracked; more are only counted (``Unrecognised.more_keys``).
MAX_KEYS = 1000
_SAMPLE_CHARS = 200


def default_config() -> ToolEvalConfig:
    """The config ``inspect`` uses without ``--config``: default ``runs:``, no graders."""
    return config_from_mapping({}, allow_no_graders=True)


def convention_of(record: SpanRecord, config: ToolEvalConfig | None = None) -> str | None:
    """The ``ToolConvention.convention`` of the row that reads a span as a tool call (as
    grading picks it: the config's mapping first, ``conventions[i]``); None for none."""
    mapped = config.policy.conventions if config is not None else None
    if mapped is not None and (entry := mapped.matches(record)) is not None:
        return None if entry.tool is None else entry.tool.convention
    row = tool_row(record)
    return None if row is None else row.convention


def session_of(attributes: Mapping[str, Any]) -> str | None:
    """The first of ``gen_ai.conversation.id``, ``session.id`` a root span carries."""
    for key in SESSION_KEYS:
        value = attributes.get(key)
        if value is not None and value != "":
            return str(value)
    return None


@dataclass(slots=True)
class InspectedRun:
    """A run as ``grade`` would cut it, with the convention of each call.

    ``excluded`` runs were found but are not graded: their agent is not in ``runs.agents``.
    """

    run: AgentRun
    conventions: tuple[str | None, ...]
    session: str | None
    excluded: bool = False
    #: The attribute the session key was read from (``sessions.keys``).
    session_attribute: str | None = None
    #: Which case the run matched and why (``case_inspection``); None without cases, or for
    #: a run that is not graded.
    case: CaseFinding | None = None


@dataclass(slots=True)
class KeyCensus:
    """One candidate attribute key among the spans that were not used."""

    spans: int = 0
    outside_runs: int = 0
    sample: Any = None
    scopes: Counter[str] = field(default_factory=Counter)


@dataclass(slots=True)
class Unrecognised:
    """The spans not used: counts by scope and by candidate attribute key."""

    spans: int = 0
    in_runs: int = 0
    scopes: Counter[str] = field(default_factory=Counter)
    keys: dict[str, KeyCensus] = field(default_factory=dict)
    more_keys: int = 0
    #: Keys of the spans no convention marked, by scope and name: what a mapping is
    #: suggested from (``suggested_conventions``).
    shapes: SpanShapes = field(default_factory=SpanShapes)

    def add(self, record: SpanRecord, *, in_run: bool) -> None:
        self.spans += 1
        self.in_runs += in_run
        scope = record.scope or "(no scope)"
        self.scopes[scope] += 1
        if not span_kind(record.attributes):
            self.shapes.add(record.scope, record.name, record.attributes)
        for key, value in record.attributes.items():
            if not _CANDIDATE.fullmatch(key) or _NOT_CANDIDATE.fullmatch(key):
                continue
            entry = self.keys.get(key)
            if entry is None:
                if len(self.keys) >= MAX_KEYS:
                    self.more_keys += 1
                    continue
                entry = self.keys[key] = KeyCensus(sample=_sample(value))
            entry.spans += 1
            entry.outside_runs += not in_run
            entry.scopes[scope] += 1


@dataclass(slots=True)
class Inspection:
    """What ``inspect_files`` read."""

    files: list[str] = field(default_factory=list)
    spans: int = 0
    traces: int = 0
    traces_without_runs: int = 0
    runs: list[InspectedRun] = field(default_factory=list)
    unrecognised: Unrecognised = field(default_factory=Unrecognised)
    problems: list[InputProblem] = field(default_factory=list)
    #: The ids of the config's cases, in order (None: no ``cases:``, no ``--cases``).
    case_ids: list[str] | None = None

    @property
    def graded_runs(self) -> list[InspectedRun]:
        return [r for r in self.runs if not r.excluded]

    def sessions(self) -> list[dict[str, Any]]:
        """The sessions the graded runs form (``sessions.keys``), in order of first run:
        ``session``, ``attribute``, ``agent`` (of the first run), ``runs``, ``tool_calls``."""
        out: dict[str, dict[str, Any]] = {}
        for item in self.graded_runs:
            if item.session is None:
                continue
            entry = out.setdefault(item.session, {
                "session": item.session, "attribute": item.session_attribute,
                "agent": item.run.agent, "runs": 0, "tool_calls": 0})
            entry["runs"] += 1
            entry["tool_calls"] += len(item.run.calls)
        return list(out.values())

    def cases(self) -> list[dict[str, Any]] | None:
        """Per case, in the order of the case set: ``id``, ``status`` (``matched`` or
        ``missing``) and ``runs`` (each run's number in ``runs``, from 1, with its ids);
        None without cases."""
        if self.case_ids is None:
            return None
        runs: dict[str, list[dict[str, Any]]] = {}
        for n, item in enumerate(self.runs, 1):
            if item.case is not None and item.case.case is not None:
                runs.setdefault(item.case.case, []).append(
                    {"run": n, "trace_id": item.run.trace_id_hex,
                     "root_span_id": item.run.root_span_id_hex})
        return [{"id": ident, "status": "matched" if ident in runs else "missing",
                 "runs": runs.get(ident, [])} for ident in self.case_ids]


def _sample(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        value = value.hex()
    elif isinstance(value, (tuple, list)):
        value = list(value)
        text = repr(value)
        return value if len(text) <= _SAMPLE_CHARS else text[:_SAMPLE_CHARS - 1] + "…"
    elif not isinstance(value, (str, int, float, bool)) and value is not None:
        value = str(value)
    if isinstance(value, str) and len(value) > _SAMPLE_CHARS:
        return value[:_SAMPLE_CHARS - 1] + "…"
    return value


def inspect_trace(records: Sequence[SpanRecord], config: ToolEvalConfig, out: Inspection
                  ) -> None:
    """Cut one trace into runs as ``grade`` does; count what was not used."""
    policy, agents = config.policy, config.runs.agents
    used: set[int] = set()
    in_run: set[int] = set()
    found = find_runs(records, policy)
    for root, members in found:
        run = build_run(root, members, policy)
        by_id = {m.span_id: m for m in members}
        conventions = tuple(convention_of(by_id[c.span_id], config) if c.span_id in by_id
                            else None for c in run.calls)
        key = session_key(root.attributes, (m.attributes for m in members),
                          tuple(config.sessions.keys))
        out.runs.append(InspectedRun(run, conventions, key.value if key is not None else None,
                                     excluded=agents is not None and run.agent not in agents,
                                     session_attribute=key.attribute if key else None))
        used.add(root.span_id)
        used.update(c.span_id for c in run.calls)
        for member in members:
            in_run.add(member.span_id)
            if policy.record_kind(member):
                used.add(member.span_id)   # model calls, nested agents, ignored tools
    out.traces_without_runs += not found
    seen: set[int] = set()
    for record in records:
        if record.span_id in seen:
            continue     # the same span twice in the input (exporter retries) counts once
        seen.add(record.span_id)
        if record.span_id not in used:
            out.unrecognised.add(record, in_run=record.span_id in in_run)


def inspect_files(paths: Iterable[str], config: ToolEvalConfig | None = None, *,
                  input_format: str | None = None,
                  on_problem: Callable[[InputProblem], None] | None = None,
                  max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Inspection:
    """Read every file (``-`` is standard input) as ``grade`` does, and inspect each trace.

    Raises:
        files.InputError: a file cannot be read at all, has a JSON line or document longer
            than ``max_line_bytes``, or gave problems and not one span.
    """
    config = config if config is not None else default_config()
    out = Inspection()
    trace_ids: set[int] = set()

    def problem(p: InputProblem) -> None:
        out.problems.append(p)
        if on_problem is not None:
            on_problem(p)

    def counted(records: Iterable[SpanRecord]) -> Iterable[SpanRecord]:
        for record in records:
            out.spans += 1
            yield record

    for path in paths:
        out.files.append(path)
        spans_before, problems_before = out.spans, len(out.problems)
        records = read_records(path, input_format=input_format, on_problem=problem,
                               max_line_bytes=max_line_bytes)
        for trace in iter_traces(counted(records)):
            trace_ids.add(trace[0].trace_id)
            inspect_trace(trace, config, out)
        if out.spans == spans_before and len(out.problems) > problems_before:
            raise InputError(f"{path}: no span could be read "
                             f"({len(out.problems) - problems_before} problems)")
    out.traces = len(trace_ids)
    out.runs.sort(key=lambda r: (r.run.start_ns, r.run.trace_id, r.run.root_span_id))
    if config.cases is not None:
        _find_cases(config, out)
    return out


def _find_cases(config: ToolEvalConfig, out: Inspection) -> None:
    """Each graded run's case with why; the nearest case for the first ``MAX_NEAREST``
    runs with none."""
    cases = config.cases
    assert cases is not None
    out.case_ids = [c.id for c in cases.cases]
    nearest_left = MAX_NEAREST
    for item in out.graded_runs:
        item.case = explain_case(cases, item.run, nearest=nearest_left > 0)
        if item.case.status == "no case":
            nearest_left -= 1


_PATTERNS = tuple(re.compile(fnmatch.translate(p), re.IGNORECASE) for p in CANDIDATE_PATTERNS)


def _priority(key: str) -> tuple[int, str]:
    """Tool names first, then tool inputs and outputs, then agent and model keys."""
    rank = next((i for i, p in enumerate(_PATTERNS) if p.fullmatch(key)), len(_PATTERNS))
    return rank, key


def suggested_conventions(unrecognised: Unrecognised) -> list[dict[str, Any]]:
    """A ``conventions:`` mapping for the spans not used (``suggestion``); empty for none."""
    return suggest_conventions(unrecognised.shapes)


def hints(unrecognised: Unrecognised) -> list[str]:
    """What the candidate keys of the spans not used suggest, one sentence each.

    Keys no convention reads are grouped by scope; a ``conventions:`` mapping reads them.
    """
    out: list[str] = []
    suggested = {entry.get("scope", "") for entry in suggested_conventions(unrecognised)}
    unknown_by_scope: dict[str, list[str]] = {}
    for key, entry in sorted(unrecognised.keys.items(), key=lambda kv: (-kv[1].spans, kv[0])):
        if key not in READ_KEYS:
            for scope in entry.scopes:
                unknown_by_scope.setdefault(scope, []).append(key)
        elif entry.outside_runs:
            out.append(f"`{key}` is read by otel-tooleval, but {entry.outside_runs} span(s) "
                       "carrying it are in no run: no agent or framework span was found above "
                       "them (see `runs.root`, `runs.agent_span_names`).")
        else:
            out.append(f"`{key}` is read by otel-tooleval, yet {entry.spans} span(s) inside "
                       f"runs carrying it were not taken as an agent, model or tool call "
                       f"(sample: {entry.sample!r}): a kind marker counts only with the values "
                       "a convention knows, a tool span needs its name attribute, and one "
                       "marked `tool.synthesized` is no call.")
    for scope, count in unrecognised.scopes.most_common():
        keys = sorted(unknown_by_scope.get(scope, ()), key=_priority)
        if not keys:
            continue
        shown = ", ".join(f"`{k}`" for k in keys[:6]) + (
            f" and {len(keys) - 6} more" if len(keys) > 6 else "")
        out.append(f"spans of scope `{scope}` ({count}) carry {shown}: no built-in convention "
                   "reads these keys (docs/conventions.md). A `conventions:` mapping in the "
                   "config maps them (docs/config.md)" + (
                       ": see the suggested mapping, to review." if scope in suggested
                       else "."))
    if unrecognised.more_keys:
        out.append(f"{unrecognised.more_keys} more candidate attribute value(s), of keys past "
                   f"the first {MAX_KEYS} distinct ones, were seen but not tracked.")
    return out
