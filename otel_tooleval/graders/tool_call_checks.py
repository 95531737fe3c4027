"""The ``tool-call-count``, ``tool-call-args`` and ``tool-call-output`` graders
(seeds/tool-call-order.txt, the UiPath SDK's other tool-call evaluators).

count: each ``{tool: [op, n]}`` entry holds or not; a tool never called has count 0; the key
``*`` counts every call of the run (a cap on the run's calls).
args / output: expected entries are paired with distinct calls so that the number paired is
the largest possible (maximum bipartite matching, not first-come greedy); score = paired /
expected. ``strict`` makes each of them all or nothing. Entry shapes: see ``tool_call_order``.
Candidates are found by lookup among classes of equal calls and the matching runs on classes
of equal entries (``call_pairing``).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictStr

from ..model import AgentRun, GradeResult, ToolCall, text_of
from ..violations import violation
from .call_pairing import ArgsIndex, json_key, max_matching
from .registry import ConfigProblems, GraderFamily, Problem, params_of, register
from .tool_call_order import (
    NOT_EMPTY,
    SdkConfig,
    SdkEntry,
    Spec,
    ToolName,
    build_spec,
    calls_text,
    entry_schema,
    key_hints,
    non_empty,
    verdict,
)

__all__ = [
    "ALL_CALLS",
    "ArgsCriteria",
    "CountCriteria",
    "ExpectedCall",
    "ExpectedOutput",
    "OutputCriteria",
    "ToolCallArgsGrader",
    "ToolCallCountGrader",
    "ToolCallOutputGrader",
    "max_matching",
    "output_text",
    "same_value",
]

COUNT, ARGS, OUTPUT = "tool-call-count", "tool-call-args", "tool-call-output"

# -- count ----------------------------------------------------------------------------------------

Op = Literal[">", "<", ">=", "<=", "=", "==", "!="]
_OPS: dict[str, Callable[[int, int], bool]] = {
    ">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le,
    "=": operator.eq, "==": operator.eq, "!=": operator.ne,
}
Count = Annotated[int, Field(ge=0, strict=True)]

#: The ``tool_calls_count`` key that counts every call of the run, whatever its tool: a cap on
#: the run's calls (``{"*": ["<=", 3]}``), beside the per-tool entries.
ALL_CALLS = "*"


def _count_key(name: str) -> str:
    """A tool name, or ``*``; a name holding ``*`` otherwise would be compared exactly and, as
    no tool is called that, hold silently (``<=``) or fail for nothing (``>=``)."""
    if ALL_CALLS in name and name != ALL_CALLS:
        raise ValueError(
            f"{name!r}: tool names are compared exactly, not as patterns; '*' alone counts "
            "every call of the run (a cap on the run's calls); name each tool to count it")
    return name


CountKey = Annotated[ToolName, AfterValidator(_count_key)]
Counts = Annotated[dict[CountKey, tuple[Op, Count]],
                   AfterValidator(non_empty("tool with its [operator, count]")),
                   Field(json_schema_extra={"minProperties": 1,
                                            "propertyNames": {"pattern": r"^(\*|[^*]+)$"}})]


class CountCriteria(BaseModel):
    """``evaluation_criteria`` of tool-call-count."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool_calls_count: Counts = Field(
        description="tool name -> [operator, count]; '*': every call of the run")


class CountEntry(SdkEntry[CountCriteria]):
    """One tool-call-count entry, flat or in the SDK's nested form."""

    tool_calls_count: Counts | None = Field(
        default=None, description="tool name -> [operator, count]; '*': every call of the run")


class ToolCallCountGrader:
    """Checks how many times each named tool was called (pending calls included); the key
    ``*`` counts every call of the run.

    A count over its bound (``<``, ``<=``, ``==``) lists the calls past the bound, in run
    order, as violations: with ``<= 2``, the third call and every one after it.
    """

    type = COUNT
    names_calls = True

    def __init__(self, name: str, spec: Spec[CountCriteria]) -> None:
        self.name = name
        self.spec = spec

    def grade(self, run: AgentRun) -> GradeResult:
        # Calls per tool, in order of first call (as a Counter of the names would give).
        counts = {name: len(calls) for name, calls in run.calls_by_name().items()}
        checks = []
        for tool, (op, n) in self.spec.criteria.tool_calls_count.items():
            actual = len(run.calls) if tool == ALL_CALLS else counts.get(tool, 0)
            checks.append({"tool": tool, "operator": op, "expected": n, "actual": actual,
                           "passed": _OPS[op](actual, n)})
        held = sum(1 for c in checks if c["passed"])
        failed = [c for c in checks if not c["passed"]]
        if self.spec.strict:
            score = 1.0 if not failed else 0.0
        else:
            score = held / len(checks)
        if not failed:
            text = (f"All {len(checks)} count checks hold." if len(checks) > 1
                    else "The count check holds.")
        else:
            why = "; ".join(f"{_counted(str(c['tool']))} {c['actual']} "
                            f"time{'' if c['actual'] == 1 else 's'}, expected "
                            f"{c['operator']} {c['expected']}" for c in failed[:3])
            more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
            text = f"{held} of {len(checks)} count checks hold: {why}{more}."
        details: dict[str, Any] = {"checks": checks, "actual_tool_calls": counts}
        offending = _over_counts(failed, run)
        if offending:
            details["violations"] = offending
        return verdict(self.name, COUNT, self.spec, score, text, details)


def _counted(tool: str) -> str:
    """The subject of a count in an explanation."""
    return ("the run's tools ('*') were called" if tool == ALL_CALLS
            else f"{tool!r} was called")


def _over_counts(failed: Sequence[Mapping[str, Any]], run: AgentRun) -> list[dict[str, Any]]:
    """The calls past an upper bound of the failed count checks, in run order."""
    groups = run.calls_by_name()
    out: list[dict[str, Any]] = []
    for check in failed:
        op, n = check["operator"], check["expected"]
        if op == "<":
            allowed = n - 1
        elif op in ("<=", "==", "="):
            allowed = n
        else:
            continue   # too few calls (>, >=) or exactly the count refused (!=): no call is over
        reason = f"over the count: {check['tool']!r} {op} {n}"
        calls = run.calls if check["tool"] == ALL_CALLS else groups.get(check["tool"], ())
        out.extend(violation(c, reason) for c in calls[max(allowed, 0):])
    out.sort(key=lambda v: int(v["call"]))
    return out


# -- pairing --------------------------------------------------------------------------------------

def _pairing_text(kind: str, what: str, expected: Sequence[tuple[str, Sequence[int]]],
                  paired: Sequence[int | None], by_name: Mapping[str, list[int]],
                  absent: str = "was never called") -> str:
    done = sorted(p for p in paired if p is not None)
    if len(done) == len(expected):
        if len(done) == 1:
            return f"The expected {kind[:-1]} was matched (call #{done[0]})."
        return f"All {len(expected)} expected {kind} were matched (calls {calls_text(done)})."
    reasons: list[str] = []     # the first three, of len(expected) - len(done)
    for i, (tool, cands) in enumerate(expected):
        if paired[i] is not None:
            continue
        if len(reasons) == 3:
            break
        calls = by_name.get(tool, [])
        if not calls:
            reasons.append(f"{tool!r} (entry {i}) {absent}")
        elif not cands:
            reasons.append(f"{tool!r} (entry {i}): none of its calls ({calls_text(calls)}) "
                           f"has {what}")
        else:
            reasons.append(f"{tool!r} (entry {i}): its calls with {what} "
                           f"({calls_text(cands)}) are paired with other entries")
    unpaired = len(expected) - len(done)
    more = f" and {unpaired - 3} more" if unpaired > 3 else ""
    return (f"{len(done)} of {len(expected)} expected {kind} were matched; "
            + "; ".join(reasons) + more + ".")


def _pairing_details(expected_names: Sequence[str], paired: Sequence[int | None],
                     candidates: Sequence[Sequence[int]]) -> list[dict[str, Any]]:
    # One copy per candidate list, shared by the rows of the entries that share the list: a
    # run's repeated calls would otherwise be listed anew in every row that names them.
    copies: dict[int, list[int]] = {}
    rows = []
    for i, tool in enumerate(expected_names):
        mine = candidates[i]
        listed = copies.get(id(mine))
        if listed is None:
            listed = copies[id(mine)] = list(mine)
        rows.append({"entry": i, "tool": tool, "call": paired[i], "matching_calls": listed})
    return rows


def _score(spec: Spec[Any], matched: int, expected: int) -> float:
    if spec.strict:
        return 1.0 if matched == expected else 0.0
    return matched / expected


# -- args -----------------------------------------------------------------------------------------

class ExpectedCall(BaseModel):
    """An expected call: the tool's exact name and its arguments."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: ToolName
    args: dict[StrictStr, Any]


ExpectedCalls = Annotated[list[ExpectedCall], AfterValidator(non_empty("expected call")),
                          NOT_EMPTY]


class ArgsCriteria(BaseModel):
    """``evaluation_criteria`` of tool-call-args."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool_calls: ExpectedCalls = Field(description="expected calls: [{name, args}]")


class ArgsConfig(SdkConfig[ArgsCriteria]):
    subset: StrictBool | None = None


class ArgsEntry(SdkEntry[ArgsCriteria]):
    """One tool-call-args entry, flat or in the SDK's nested form."""

    subset: StrictBool | None = Field(
        default=None, description="check only the given argument keys; default false")
    config: ArgsConfig | None = None
    tool_calls: ExpectedCalls | None = Field(
        default=None, description="expected calls: [{name, args}]")


_SCALARS = (str, int, float)

#: tool-call-args compares each distinct expected call with each call of its tool while that
#: makes at most this many comparisons per call and expected call; past it, it looks them up
#: (``call_pairing.ArgsIndex``), whose set-up costs about as much per item.
COMPARED_PER_ITEM = 2


def same_value(a: Any, b: Any) -> bool:
    """JSON equality without coercion: ``"10" != 10``, ``true != 1``, but ``1 == 1.0``."""
    ta, tb = type(a), type(b)
    if ta is tb and ta in _SCALARS:        # the common case, without the ABC checks below
        return bool(a == b)
    if ta is dict and tb is dict:
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, (Mapping, list, tuple)) or isinstance(b, (Mapping, list, tuple)):
        return False
    return type(a) is type(b) and bool(a == b)


def _args_match(expected: Mapping[str, Any], actual: Any, subset: bool) -> bool:
    """Whether a call's arguments (``{}`` when it recorded none) match an expected entry's."""
    if actual.__class__ is not dict and not isinstance(actual, Mapping):
        return False
    if subset:
        for k, v in expected.items():
            if k not in actual or not same_value(v, actual[k]):
                return False
        return True
    return same_value(expected, actual)


class ToolCallArgsGrader:
    """Pairs expected ``{name, args}`` entries with calls whose arguments match.

    When an entry stays unpaired although its tool was called, the calls of that tool that no
    entry took are listed as violations: they are the calls whose arguments differ.
    """

    type = ARGS
    names_calls = True

    def __init__(self, name: str, spec: Spec[ArgsCriteria], include_values: bool) -> None:
        self.name = name
        self.spec = spec
        self.subset = bool(spec.options["subset"])
        self.include_values = include_values
        seen: dict[str, int] = {}
        self.keys = [seen.setdefault(json.dumps([e.name, e.args], sort_keys=True), len(seen))
                     for e in spec.criteria.tool_calls]
        # Per distinct expected call: its tool, arguments and their key for the lookup.
        self.distinct: list[tuple[str, dict[str, Any], Hashable | None]] = []
        for e, key in zip(spec.criteria.tool_calls, self.keys):
            if key == len(self.distinct):
                self.distinct.append((e.name, e.args, json_key(e.args)))
        self.names = tuple(dict.fromkeys(e.name for e in spec.criteria.tool_calls))

    def grade(self, run: AgentRun) -> GradeResult:
        expected = self.spec.criteria.tool_calls
        groups = run.calls_by_name()
        # Call positions of the expected tools (the only ones the texts and details name).
        by_name = {name: [c.index for c in groups[name]] for name in self.names
                   if name in groups}
        # Entries repeating the same expected call share one candidate list, found by lookup
        # among the classes of calls with equal arguments.
        shared = self._candidates(run, groups)
        candidates = [shared[key] for key in self.keys]
        paired = max_matching(candidates)
        matched = sum(1 for p in paired if p is not None)
        entries = _pairing_details([e.name for e in expected], paired, candidates)
        if self.include_values:
            for row, e in zip(entries, expected):
                row["args"] = e.args
                row["calls"] = [{"call": j, "args": run.calls[j].arguments}
                                for j in by_name.get(e.name, [])[:5]]
        what = "the expected arguments" if self.subset else "equal arguments"
        text = _pairing_text("calls", what,
                             [(e.name, c) for e, c in zip(expected, candidates)], paired,
                             by_name)
        details: dict[str, Any] = {"expected": entries, "matched": matched,
                                   "subset": self.subset}
        offending = self._mismatches(run, paired)
        if offending:
            details["violations"] = offending
        return verdict(self.name, ARGS, self.spec, _score(self.spec, matched, len(expected)),
                       text, details)

    def _candidates(self, run: AgentRun, groups: Mapping[str, Sequence[ToolCall]]
                    ) -> list[Sequence[int]]:
        """Per distinct expected call, the positions of the calls it matches."""
        pairs = sum(len(groups.get(name, ())) for name, _, _ in self.distinct)
        calls = sum(len(groups.get(name, ())) for name in self.names)
        if pairs > COMPARED_PER_ITEM * (calls + len(self.distinct)):
            index = ArgsIndex(run, self.names, self.subset, self._matches)
            return [index.candidates(*d) for d in self.distinct]
        # Few pairs to compare (a short run or list): comparing costs less than indexing.
        return [[c.index for c in groups.get(name, ())
                 if self._matches(args, {} if c.arguments is None else c.arguments)]
                for name, args, _ in self.distinct]

    def _matches(self, expected: Mapping[str, Any], actual: Any) -> bool:
        return _args_match(expected, actual, self.subset)

    def _mismatches(self, run: AgentRun, paired: Sequence[int | None]) -> list[dict[str, Any]]:
        expected = self.spec.criteria.tool_calls
        used = {p for p in paired if p is not None}
        groups = run.calls_by_name()
        entries: dict[str, list[int]] = {}      # tool -> its unpaired entries
        for i, (e, p) in enumerate(zip(expected, paired)):
            if p is None and e.name in groups:
                entries.setdefault(e.name, []).append(i)
        out: list[dict[str, Any]] = []
        for tool, unpaired in entries.items():
            which = (f"entry {unpaired[0]}" if len(unpaired) == 1
                     else "entries " + ", ".join(map(str, unpaired)))
            reason = f"arguments differ from expected {tool!r} ({which})"
            out.extend(violation(c, reason) for c in groups[tool] if c.index not in used)
        out.sort(key=lambda v: int(v["call"]))
        return out


# -- output ---------------------------------------------------------------------------------------

class ExpectedOutput(BaseModel):
    """An expected output: the tool's exact name and its result as text."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: ToolName
    output: StrictStr


ExpectedOutputs = Annotated[list[ExpectedOutput],
                            AfterValidator(non_empty("expected output")), NOT_EMPTY]


class OutputCriteria(BaseModel):
    """``evaluation_criteria`` of tool-call-output."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool_outputs: ExpectedOutputs = Field(description="expected outputs: [{name, output}]")


class OutputEntry(SdkEntry[OutputCriteria]):
    """One tool-call-output entry, flat or in the SDK's nested form."""

    tool_outputs: ExpectedOutputs | None = Field(
        default=None, description="expected outputs: [{name, output}]")


def output_text(call: ToolCall) -> str | None:
    """A completed call's output as text (SEMANTICS 3); None when pending or without result.

    A JSON object with a ``content`` field gives that field; any other parsed JSON value is
    written as compact JSON; a JSON string gives its content; other text is used as is.
    """
    if call.pending or not call.has_result:
        return None
    value = call.result
    if isinstance(value, Mapping) and "content" in value:
        value = value["content"]
    return text_of(value)


class ToolCallOutputGrader:
    """Pairs expected ``{name, output}`` entries with completed calls whose output is equal."""

    type = OUTPUT

    def __init__(self, name: str, spec: Spec[OutputCriteria], include_values: bool) -> None:
        self.name = name
        self.spec = spec
        self.include_values = include_values
        self.names = tuple(dict.fromkeys(e.name for e in spec.criteria.tool_outputs))

    def grade(self, run: AgentRun) -> GradeResult:
        expected = self.spec.criteria.tool_outputs
        groups = run.calls_by_name()
        # The expected tools' completed calls (positions, output texts) and pending ones.
        by_name: dict[str, list[int]] = {}
        texts: dict[int, str | None] = {}
        pending = 0
        for name in self.names:
            positions = []
            for c in groups.get(name, ()):
                if c.pending:
                    pending += 1
                else:
                    positions.append(c.index)
                    texts[c.index] = output_text(c)
            if positions:
                by_name[name] = positions
        # The completed calls of each tool by output text: an entry finds its equal outputs by
        # lookup, and entries expecting the same output share one candidate list.
        by_text: dict[str, dict[str | None, list[int]]] = {}
        for name, positions in by_name.items():
            found = by_text[name] = {}
            for j in positions:
                text = texts[j]
                same = found.get(text)
                if same is None:
                    found[text] = [j]
                else:
                    same.append(j)
        nothing: list[int] = []
        candidates = [by_text.get(e.name, {}).get(e.output, nothing) for e in expected]
        paired = max_matching(candidates)
        matched = sum(1 for p in paired if p is not None)
        entries = _pairing_details([e.name for e in expected], paired, candidates)
        if self.include_values:
            for row, e in zip(entries, expected):
                row["output"] = e.output
                row["calls"] = [{"call": j, "output": texts.get(j)}
                                for j in by_name.get(e.name, [])[:5]]
        text = _pairing_text("outputs", "an equal output",
                             [(e.name, c) for e, c in zip(expected, candidates)], paired,
                             by_name, "has no completed call")
        if pending and matched < len(expected):
            text = text[:-1] + f" ({pending} pending call{'s' if pending > 1 else ''} ignored)."
        return verdict(self.name, OUTPUT, self.spec, _score(self.spec, matched, len(expected)),
                       text, {"expected": entries, "matched": matched, "pending_ignored": pending})


# -- registration ---------------------------------------------------------------------------------

def _build_count(entry: Mapping[str, Any], name: str, include_values: bool,
                 ) -> ToolCallCountGrader:
    parsed = params_of(CountEntry, entry, key_hints(COUNT))
    return ToolCallCountGrader(name, build_spec(parsed, "tool_calls_count", CountCriteria))


def _build_args(entry: Mapping[str, Any], name: str, include_values: bool) -> ToolCallArgsGrader:
    parsed = params_of(ArgsEntry, entry, key_hints(ARGS))
    spec = build_spec(parsed, "tool_calls", ArgsCriteria, {"subset": False})
    for i, expected in enumerate(spec.criteria.tool_calls):
        try:
            json.dumps(expected.args, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError):
            raise ConfigProblems([Problem(
                ("tool_calls", i, "args"),
                "must hold JSON values only (a YAML date or timestamp? quote it; keys must be "
                "strings)")]) from None
    return ToolCallArgsGrader(name, spec, include_values)


def _build_output(entry: Mapping[str, Any], name: str, include_values: bool,
                  ) -> ToolCallOutputGrader:
    parsed = params_of(OutputEntry, entry, key_hints(OUTPUT))
    return ToolCallOutputGrader(name, build_spec(parsed, "tool_outputs", OutputCriteria),
                                include_values)


def _family(type_: str, evaluator: str, build: Callable[[Mapping[str, Any], str, bool], Any],
            model: type[BaseModel], criteria_key: str) -> GraderFamily:
    aliases = (evaluator, f"uipath-{type_}", type_.replace("-", "_"))
    return GraderFamily(type_, aliases, build,
                        schema=lambda: entry_schema(model, type_, aliases, criteria_key))


register(_family(COUNT, "ToolCallCountEvaluator", _build_count, CountEntry, "tool_calls_count"))
register(_family(ARGS, "ToolCallArgsEvaluator", _build_args, ArgsEntry, "tool_calls"))
register(_family(OUTPUT, "ToolCallOutputEvaluator", _build_output, OutputEntry, "tool_outputs"))
