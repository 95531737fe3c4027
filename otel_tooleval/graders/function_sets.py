"""Equal-function sets (seeds/tool-selection-f1.txt): tool-selection precision, recall and F1.

Interchangeable tools are grouped into named classes. A class is a true positive when some call
names one of its members, a false negative when none does; a call that names no member of any
class is a false positive. Percents are floored integers taken from the raw counts, and the run
passes when every ``expect`` assertion holds (default ``tool_selection.f1 >= 50``). Across runs
the counts are summed before the percents are taken (micro-average).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, field_validator

from ..model import AgentRun, GradeResult, RunReport, ToolCall
from ..violations import violation
from .registry import ConfigProblems, GraderFamily, Problem, params_of, register

__all__ = [
    "Expectation",
    "FunctionClass",
    "FunctionSetsGrader",
    "FunctionSetsParams",
    "SelectionScore",
    "SelectionTally",
    "aggregate_by",
    "micro_average",
]

TYPE = "equal_function_sets"
ALIASES = ("tool_selection", "equal-function-sets")
BLOCK = "equal_function_sets"

Target = Literal["tool_selection.precision", "tool_selection.recall", "tool_selection.f1"]
Op = Literal[">=", ">", "<=", "<", "==", "!="]
TARGETS: tuple[str, ...] = get_args(Target)
OPS: tuple[str, ...] = get_args(Op)

Percent = Annotated[StrictInt, Field(ge=0, le=100)]
Matcher = Annotated[dict[Op, Percent], Field(min_length=1)]
ExpectItem = Annotated[dict[Target, Matcher], Field(min_length=1)]
Member = Annotated[StrictStr, Field(min_length=1)]

_MCP_NAME = re.compile(r"^mcp__(?P<server>.+?)__(?P<tool>.+)$")  # as the core splits it


class FunctionClass(BaseModel):
    """One equal-function set: tools that do the same job; calling any of them satisfies it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[StrictStr, Field(min_length=1)]
    members: Annotated[list[Member], Field(min_length=1)]

    @field_validator("members")
    @classmethod
    def _member_ids(cls, members: list[str]) -> list[str]:
        for member in members:
            if member.startswith(".") or member.endswith("."):
                raise ValueError(f"member {member!r} must be 'server.tool' or a bare 'tool'")
        return members


class FunctionSetsParams(BaseModel):
    """mcptest's ``equal_function_sets:`` block: ``classes`` and optional ``expect``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    classes: list[FunctionClass]
    expect: list[ExpectItem] | None = None


class _PastedEntry(BaseModel):
    """mcptest's test entry, as pasted: ``type: agent`` and ``runs`` beside the block."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["agent", "equal_function_sets", "tool_selection", "equal-function-sets"] | None = (
        None)
    kind: Literal["agent", "equal_function_sets", "tool_selection", "equal-function-sets"] | None = (
        None)
    runs: Annotated[StrictInt, Field(ge=1)] | None = None
    equal_function_sets: FunctionSetsParams


_FLAT_EXTRA = {
    "runs": "unknown key; runs is accepted only beside an equal_function_sets: block "
            "(mcptest's test entry), and every run is graded anyway",
    "agent": "unknown key; use agents: [name] (agent: is accepted only beside an "
             "equal_function_sets: block)",
    "threshold": "unknown key; equal-function sets pass by their expect: list "
                 "(default tool_selection.f1 >= 50), not by a threshold",
}
_PASTED_EXTRA = {
    "classes": "unknown key; classes belongs inside the equal_function_sets: block",
    "expect": "unknown key; expect belongs inside the equal_function_sets: block",
    "threshold": _FLAT_EXTRA["threshold"],
}


@dataclass(frozen=True, slots=True)
class Expectation:
    """One assertion, e.g. ``tool_selection.f1 >= 80``."""

    target: str
    op: str
    value: int

    def holds(self, score: SelectionScore) -> bool:
        return self._compare(score.percent(self.target))

    def _compare(self, actual: int) -> bool:
        op = self.op
        if op == ">=":
            return actual >= self.value
        if op == ">":
            return actual > self.value
        if op == "<=":
            return actual <= self.value
        if op == "<":
            return actual < self.value
        if op == "==":
            return actual == self.value
        return actual != self.value

    def __str__(self) -> str:
        return f"{self.target} {self.op} {self.value}"

    def check(self, score: SelectionScore) -> dict[str, Any]:
        actual = score.percent(self.target)
        return {"target": self.target, "op": self.op, "value": self.value,
                "actual": actual, "passed": self._compare(actual)}


DEFAULT_EXPECT = (Expectation("tool_selection.f1", ">=", 50),)


def _floor_percent(num: int, den: int) -> int:
    return (100 * num) // den if den else 0


@dataclass(frozen=True, slots=True)
class SelectionScore:
    """True/false positive and false negative counts, and the floored percents they give.

    With no counts at all (no classes and no calls) every percent is 100; any other zero
    denominator gives 0.
    """

    tp: int = 0
    fp: int = 0
    fn: int = 0

    @property
    def vacuous(self) -> bool:
        return self.tp == 0 and self.fp == 0 and self.fn == 0

    @property
    def precision(self) -> int:
        return 100 if self.vacuous else _floor_percent(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> int:
        return 100 if self.vacuous else _floor_percent(self.tp, self.tp + self.fn)

    @property
    def f1(self) -> int:
        # From the raw counts, never from the floored precision and recall.
        return 100 if self.vacuous else _floor_percent(2 * self.tp,
                                                       2 * self.tp + self.fp + self.fn)

    def percent(self, target: str) -> int:
        metric = target.rpartition(".")[2]
        if metric == "precision":
            return self.precision
        if metric == "recall":
            return self.recall
        return self.f1

    def counts(self) -> dict[str, int]:
        return {"tp": self.tp, "fp": self.fp, "fn": self.fn}

    def percents(self) -> dict[str, int]:
        return {"precision": self.precision, "recall": self.recall, "f1": self.f1}


def micro_average(counts: Iterable[Mapping[str, int] | SelectionScore]) -> SelectionScore:
    """Sum TP/FP/FN over runs (mappings with ``tp``/``fp``/``fn``, or scores); the percents of
    the result are the micro-average. Order-independent."""
    tp = fp = fn = 0
    for c in counts:
        if isinstance(c, SelectionScore):
            tp, fp, fn = tp + c.tp, fp + c.fp, fn + c.fn
        else:
            tp, fp, fn = tp + int(c["tp"]), fp + int(c["fp"]), fn + int(c["fn"])
    return SelectionScore(tp, fp, fn)


def _tool_id(call: ToolCall) -> tuple[str, str]:
    """(qualified id, bare tool name) of a call: ``server.tool`` when the server is known."""
    match = _MCP_NAME.match(call.name)
    tool = match.group("tool") if match else call.name
    return (f"{call.server}.{tool}" if call.server else call.name), tool


#: (server, tool name) pairs whose classes a grader remembers at most.
_MAX_REMEMBERED_TOOLS = 1024


class FunctionSetsGrader:
    """Grades a run's tool selection against equal-function sets."""

    type = TYPE
    names_calls = True   # calls of no class: violations

    def __init__(self, name: str, params: FunctionSetsParams, include_values: bool = False
                 ) -> None:
        self.name = name
        self.params = params
        self.include_values = include_values   # nothing here ever shows a value
        self.class_names = [c.name for c in params.classes]
        self.expectations = tuple(
            Expectation(target, op, value)
            for item in params.expect or ()
            for target, matcher in item.items()
            for op, value in matcher.items()
        ) or DEFAULT_EXPECT
        # A member with a dot is compared with the whole ``server.tool`` id; a bare member
        # with the tool name, whatever the server.
        self._qualified: dict[str, list[int]] = {}
        self._bare: dict[str, list[int]] = {}
        for i, cls in enumerate(params.classes):
            for member in cls.members:
                table = self._qualified if "." in member else self._bare
                owners = table.setdefault(member, [])
                if i not in owners:
                    owners.append(i)
        self._known: dict[tuple[str | None, str], tuple[str, tuple[int, ...]]] = {}

    def _classes_of(self, qualified: str, tool: str, raw_name: str) -> list[int]:
        found = list(self._qualified.get(qualified, ()))
        for key in (tool, raw_name) if raw_name != tool else (tool,):
            for i in self._bare.get(key, ()):
                if i not in found:
                    found.append(i)
        return found

    def _classify(self, call: ToolCall) -> tuple[str, tuple[int, ...]]:
        """A call's tool id and the classes it satisfies, remembered per (server, name) for
        every run while the table has room (an agent uses a handful of tools)."""
        qualified, tool = _tool_id(call)
        found = qualified, tuple(self._classes_of(qualified, tool, call.name))
        if len(self._known) < _MAX_REMEMBERED_TOOLS:
            self._known[(call.server, call.name)] = found
        return found

    def grade(self, run: AgentRun) -> GradeResult:
        n_classes = len(self.class_names)
        first: list[tuple[int, str] | None] = [None] * n_classes
        hits = [0] * n_classes
        unexpected: dict[str, list[int]] = {}
        known = self._known
        # Pending calls count: only the choice of tool matters here (SEMANTICS 1).
        for call in run.calls:
            found = known.get((call.server, call.name))
            if found is None:
                found = self._classify(call)
            tool_id, owners = found
            if not owners:
                unexpected.setdefault(tool_id, []).append(call.index)
                continue
            for i in owners:
                hits[i] += 1
                if first[i] is None:
                    first[i] = (call.index, tool_id)
        tp = sum(1 for f in first if f is not None)
        score = SelectionScore(tp, sum(len(v) for v in unexpected.values()), n_classes - tp)
        checks = [e.check(score) for e in self.expectations]
        passed = all(c["passed"] for c in checks)
        missed = [n for n, f in zip(self.class_names, first, strict=True) if f is None]
        classes = [
            {"name": n, "matched": f is not None, "matched_by": f[1] if f else None,
             "call": f[0] if f else None, "calls": h}
            for n, f, h in zip(self.class_names, first, hits, strict=True)
        ]
        return GradeResult(
            name=self.name,
            type=TYPE,
            score=score.f1 / 100,
            passed=passed,
            label="pass" if passed else "fail",
            explanation=_explain(score, self.expectations, checks, missed, unexpected),
            details={
                "tool_selection": score.percents(),
                "tool_selection_counts": score.counts(),
                "classes": classes,
                "missed_classes": missed,
                "unexpected_tools": list(unexpected),
                "unexpected_calls": sorted(i for v in unexpected.values() for i in v),
                "expectations": checks,
                **_unexpected(run, unexpected),
            },
        )

    def aggregate(self, results: Sequence[GradeResult]) -> Mapping[str, Any]:
        """Micro-average this grader's results over a group of runs and check ``expect`` on it."""
        return _aggregate(results, self.expectations)

    def tally(self) -> SelectionTally:
        """An empty running :meth:`aggregate`: results added one at a time, none kept."""
        return SelectionTally(self.expectations)


def _unexpected(run: AgentRun, unexpected: Mapping[str, Sequence[int]]) -> dict[str, Any]:
    """``violations``: every call of a tool in no class."""
    if not unexpected:
        return {}
    found = sorted(i for v in unexpected.values() for i in v)
    return {"violations": [violation(run.calls[i], "unexpected tool: in no expected class")
                           for i in found]}


class SelectionTally:
    """The micro-average of results added one at a time: the sums, not the results."""

    def __init__(self, expectations: Sequence[Expectation]) -> None:
        self.expectations = expectations
        self.runs = self.errors = 0
        self.tp = self.fp = self.fn = 0

    def add(self, result: GradeResult) -> None:
        self.runs += 1
        counts = (result.details or {}).get("tool_selection_counts")
        if isinstance(counts, Mapping):
            self.tp += int(counts["tp"])
            self.fp += int(counts["fp"])
            self.fn += int(counts["fn"])
        else:
            self.errors += 1

    def combined(self) -> dict[str, Any]:
        """What ``aggregate`` gives over the results added."""
        score = SelectionScore(self.tp, self.fp, self.fn)
        checks = [e.check(score) for e in self.expectations]
        return {
            # A run that could not be graded leaves a hole in the sums: never pass over it.
            "passed": self.errors == 0 and all(c["passed"] for c in checks),
            "tool_selection": score.percents(),
            "counts": score.counts(),
            "runs": self.runs,
            "errors": self.errors,
            "expectations": checks,
        }


def _aggregate(results: Sequence[GradeResult], expectations: Sequence[Expectation]
               ) -> dict[str, Any]:
    tally = SelectionTally(expectations)
    for result in results:
        tally.add(result)
    return tally.combined()


def _expectations_of(results: Iterable[GradeResult]) -> tuple[Expectation, ...]:
    for r in results:
        checks = (r.details or {}).get("expectations")
        if isinstance(checks, list) and checks:
            return tuple(Expectation(c["target"], c["op"], c["value"]) for c in checks)
    return DEFAULT_EXPECT


def aggregate_by(reports: Iterable[RunReport], grader_name: str,
                 key_fn: Callable[[AgentRun], Hashable]) -> dict[Hashable, dict[str, Any]]:
    """Micro-average the results of the grader named ``grader_name``, grouped by ``key_fn(run)``
    (e.g. ``lambda run: run.root_attributes.get("test.case.id")``).

    Groups keep the order in which their keys first appear. Runs the grader did not grade are
    left out. The expectations checked on each group are the ones its results were graded with.
    """
    groups: dict[Hashable, list[GradeResult]] = {}
    for report in reports:
        for result in report.results:
            if result.name == grader_name:
                groups.setdefault(key_fn(report.run), []).append(result)
    return {key: _aggregate(results, _expectations_of(results))
            for key, results in groups.items()}


def _listing(items: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _explain(score: SelectionScore, expectations: Sequence[Expectation],
             checks: Sequence[Mapping[str, Any]], missed: Sequence[str],
             unexpected: Mapping[str, Sequence[int]]) -> str:
    figures = (f"F1 {score.f1}, precision {score.precision}, recall {score.recall} "
               f"(TP {score.tp}, FP {score.fp}, FN {score.fn})")
    failed = [str(e) for e, c in zip(expectations, checks, strict=True) if not c["passed"]]
    head = (f"Tool selection fails {', '.join(failed)}: {figures}" if failed
            else f"Tool selection holds: {figures}")
    issues = []
    if missed:
        issues.append(f"class{'es' if len(missed) > 1 else ''} "
                      f"{_listing([repr(m) for m in missed])} never satisfied")
    if unexpected:
        tools = [f"{tool} at {', '.join(f'#{i}' for i in calls[:3])}"
                 f"{f' (+{len(calls) - 3} more)' if len(calls) > 3 else ''}"
                 for tool, calls in unexpected.items()]
        issues.append(f"calls matching no class: {_listing(tools)}")
    if not issues:
        if not score.vacuous:
            issues.append("every class was satisfied and every call matched a class")
        else:
            issues.append("no classes were declared and no tool was called")
    return f"{head}; {'; '.join(issues)}."


def _build(entry: Mapping[str, Any], name: str, include_values: bool) -> FunctionSetsGrader:
    prefix: tuple[str, ...] = ()
    if BLOCK in entry:
        pasted = params_of(_PastedEntry, entry, _PASTED_EXTRA)
        params, prefix = pasted.equal_function_sets, (BLOCK,)
    else:
        params = params_of(FunctionSetsParams, entry, _FLAT_EXTRA)
    problems = []
    seen: dict[str, int] = {}
    for i, cls in enumerate(params.classes):
        if cls.name in seen:
            problems.append(Problem(prefix + ("classes", i, "name"),
                                    f"duplicate class name {cls.name!r} "
                                    f"(also classes[{seen[cls.name]}])"))
        seen.setdefault(cls.name, i)
    if problems:
        raise ConfigProblems(problems)
    return FunctionSetsGrader(name, params, include_values)


def _build_located(entry: Mapping[str, Any], name: str, include_values: bool
                   ) -> FunctionSetsGrader:
    try:
        return _build(entry, name, include_values)
    except ConfigProblems as exc:
        raise ConfigProblems([_readable(p) for p in exc.problems]) from None


def _readable(problem: Problem) -> Problem:
    """Messages for this family's shapes; a bad dict key (``Problem.key``) is an unknown
    target or operator."""
    loc = problem.loc
    if loc and loc[-1] == "members" and problem.message.startswith("List should have at least"):
        return Problem(loc, "a class needs at least one member")
    if len(loc) >= 3 and loc[-3] == "expect" and problem.message.startswith("Input should be a"):
        return Problem(loc, "must be a matcher such as {'>=': 80}")
    if not loc or not problem.key:
        return problem
    if len(loc) >= 3 and loc[-3] == "expect":
        return Problem(loc, f"unknown target; use one of {', '.join(TARGETS)}")
    return Problem(loc, f"unknown operator; use one of {', '.join(OPS)}")


_SHARED = {
    "name": {"type": "string", "minLength": 1},
    "agents": {"type": "array", "items": {"type": "string"}},
}


def _schema() -> dict[str, Any]:
    flat = FunctionSetsParams.model_json_schema()
    pasted = _PastedEntry.model_json_schema()
    defs = {**flat.pop("$defs", {}), **pasted.pop("$defs", {})}
    flat["properties"] = {"type": {"enum": [TYPE, *ALIASES]}, **flat["properties"], **_SHARED}
    flat["required"] = ["type", *flat.get("required", [])]
    flat["title"] = "equal_function_sets (flat)"
    pasted["properties"].update(_SHARED, agent={"type": "string"})
    pasted["title"] = "equal_function_sets (mcptest test entry)"
    return {"anyOf": [flat, pasted], "$defs": defs}


register(GraderFamily(TYPE, ALIASES, _build_located, keys=(BLOCK,), schema=_schema))
