"""The ``tool_correctness`` grader: DeepEval's ``ToolCorrectnessMetric``, its deterministic part
(PEER-GRADERS.md section 3).

Each call has a type, ``MCP`` when a server was found for it (the rule equal-function sets use)
and ``FUNCTION`` otherwise; an expected tool pairs only with calls of its name and type. By
default each expected tool is paired with a distinct call so that the total of pair scores is
the largest possible (an assignment, never first-come); ``should_consider_ordering`` takes the
order-preserving pairing with the highest total (a weighted LCS); ``should_exact_match``
compares position by position. A pair scores 1, times the arguments' similarity with
``INPUT_PARAMETERS``, times 0 when ``OUTPUT`` is asked and the outputs differ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    field_validator,
)

from ..model import AgentRun, GradeResult, ToolCall
from ..values import json_values
from ..violations import violation
from .pairing import assign_classes, class_candidates, value_key, weighted_lcs
from .registry import GraderFamily, params_of, register
from .tool_call_checks import same_value

__all__ = ["ExpectedTool", "ToolCorrectnessGrader", "ToolCorrectnessParams", "args_similarity",
           "call_type"]

TYPE = "tool_correctness"
ALIASES = ("ToolCorrectnessMetric", "tool-correctness")

ToolName = Annotated[StrictStr, Field(min_length=1)]
UnitInterval = Annotated[float, Field(strict=True, ge=0, le=1, allow_inf_nan=False)]
CallType = Literal["FUNCTION", "MCP"]
EvaluationParam = Literal["INPUT_PARAMETERS", "OUTPUT"]




def _enum_name(prefix: str) -> Any:
    """Accept DeepEval's enum members as Python writes them (``ToolCallParams.OUTPUT``)."""

    def strip(value: Any) -> Any:
        if isinstance(value, str) and value.startswith(prefix + "."):
            return value[len(prefix) + 1:]
        return value

    return strip


class ExpectedTool(BaseModel):
    """One of DeepEval's ``expected_tools`` (a ``ToolCall``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: ToolName
    type: CallType = Field(default="FUNCTION", description="FUNCTION (default) or MCP")
    input_parameters: dict[StrictStr, Any] | None = Field(
        default=None, validation_alias=AliasChoices("input_parameters", "inputParameters"),
        description="the expected arguments; left out: {}")
    output: Any = Field(default=None, description="the expected result (with OUTPUT); "
                                                  "left out: null")
    description: StrictStr | None = Field(default=None, description="kept, not graded")
    reasoning: StrictStr | None = Field(default=None, description="kept, not graded")

    _type = field_validator("type", mode="before")(_enum_name("ToolCallType"))

    @field_validator("input_parameters", "output")
    @classmethod
    def _json(cls, value: Any) -> Any:
        return json_values(value)


class ToolCorrectnessParams(BaseModel):
    """One ``tool_correctness`` entry: ``ToolCorrectnessMetric``'s arguments and the test
    case's ``expected_tools``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    expected_tools: list[ExpectedTool] = Field(description="the tools the run should call")
    threshold: UnitInterval = Field(default=0.5, description="passes when score >= threshold")
    evaluation_params: list[EvaluationParam] = Field(
        default_factory=list, description="INPUT_PARAMETERS and/or OUTPUT; default: names only")
    should_exact_match: StrictBool = False
    should_consider_ordering: StrictBool = False
    strict_mode: StrictBool = Field(default=False, description="threshold 1, lower scores 0")
    include_reason: StrictBool | None = Field(default=None, description="accepted, ignored")
    async_mode: StrictBool | None = Field(default=None, description="accepted, ignored")
    verbose_mode: StrictBool | None = Field(default=None, description="accepted, ignored")

    _params = field_validator("evaluation_params", mode="before")(
        lambda value: [_enum_name("ToolCallParams")(v) for v in value]
        if isinstance(value, list) else value)


_LLM = ("needs an LLM (DeepEval asks a model to judge it); only the deterministic part of "
        "ToolCorrectnessMetric is graded here: remove it")
_HINTS = {key: _LLM for key in ("available_tools", "model", "system_one_model", "eval_mode",
                                "evaluation_template")}
_HINTS["tools_called"] = "unknown key: the run's calls are the tools called"
_HINTS["expected_tool_calls"] = "unknown key (did you mean 'expected_tools'?)"


def call_type(call: ToolCall) -> str:
    """DeepEval's ``ToolCallType`` of a call: MCP when a server was found for it."""
    return "MCP" if call.server else "FUNCTION"


def args_similarity(expected: Any, actual: Any) -> float:
    """DeepEval's ``_compare_dicts`` under value equality: 1.0 when equal; for two objects,
    the keys present on both sides with equal values (1 each) or both objects (their
    similarity), over the number of keys in the union; anything else 0. Lists are all or
    nothing."""
    if same_value(expected, actual):
        return 1.0
    if not isinstance(expected, Mapping) or not isinstance(actual, Mapping):
        return 0.0
    union = len(expected.keys() | actual.keys())
    total = 0.0
    for key in expected.keys() & actual.keys():
        a, b = expected[key], actual[key]
        if same_value(a, b):
            total += 1 / union
        elif isinstance(a, Mapping) and isinstance(b, Mapping):
            total += args_similarity(a, b) / union
    return total


def _arguments(call: ToolCall) -> Any:
    args = call.arguments
    return {} if args is None else args      # no recorded arguments: called without any


def _output(call: ToolCall) -> Any:
    return call.result if call.has_result else None


_PENDING: Any = object()   # a pending call has no output yet: it equals no expected output


class ToolCorrectnessGrader:
    """Grades the run's calls against DeepEval's ``expected_tools``.

    Violations: a paired call scoring below 1 (its arguments or output differ); in
    ``exact_match`` mode every call that is not the expected one at its position, and the
    calls beyond the expected ones; with no expected tools, every call. Other unpaired calls
    cost nothing in DeepEval's score, so they are not listed.
    """

    type = TYPE
    names_calls = True

    def __init__(self, name: str, params: ToolCorrectnessParams, include_values: bool) -> None:
        self.name = name
        self.params = params
        self.include_values = include_values
        self.use_args = "INPUT_PARAMETERS" in params.evaluation_params
        self.use_output = "OUTPUT" in params.evaluation_params
        self.threshold = 1.0 if params.strict_mode else params.threshold
        self.mode = ("exact_match" if params.should_exact_match else
                     "ordering" if params.should_consider_ordering else "assignment")
        tools = params.expected_tools
        self.args = [t.input_parameters or {} for t in tools]
        self.keys = [(value_key(a) if self.use_args else None,
                      value_key(t.output) if self.use_output else None)
                     for a, t in zip(self.args, tools)]
        self.blocks: dict[tuple[str, str], list[int]] = {}
        for i, t in enumerate(tools):
            self.blocks.setdefault((t.name, t.type), []).append(i)
        # Per block, its expected tools in classes of equal keys (in order of first index).
        self.row_classes: dict[tuple[str, str], list[list[int]]] = {}
        for block, entries in self.blocks.items():
            by_key: dict[Any, list[int]] = {}
            for i in entries:
                by_key.setdefault(self.keys[i], []).append(i)
            self.row_classes[block] = list(by_key.values())
        self.names = frozenset(t.name for t in tools)

    # -- pair scores ------------------------------------------------------------------------------

    def pair_score(self, i: int, call: ToolCall) -> float:
        """Expected tool ``i`` against a call of its name and type."""
        score = 1.0
        if self.use_args:
            score = args_similarity(self.args[i], _arguments(call))
        if self.use_output and score > 0 and (
                call.pending or not same_value(self.params.expected_tools[i].output,
                                               _output(call))):
            score = 0.0
        return score

    @staticmethod
    def _output_key(call: ToolCall) -> Any:
        """Calls of one argument class with equal keys score alike against every tool."""
        raw = call.raw_result
        return _PENDING if call.pending else (
            (raw, id(call.envelope), call.error) if raw.__class__ is str
            else value_key(_output(call)))

    def _same(self, i: int, call: ToolCall) -> bool:
        tool = self.params.expected_tools[i]
        if call.name != tool.name or call_type(call) != tool.type:
            return False
        if self.use_args and not same_value(self.args[i], _arguments(call)):
            return False
        return not self.use_output or (not call.pending and same_value(tool.output,
                                                                       _output(call)))

    # -- grading ------------------------------------------------------------------------------------

    def grade(self, run: AgentRun) -> GradeResult:
        calls = run.calls
        n = len(self.params.expected_tools)
        exact = True
        pairs: list[tuple[int, int, float]] = []
        if self.mode == "exact_match":
            same = len(calls) == n and all(self._same(i, c) for i, c in enumerate(calls))
            score = 1.0 if same else 0.0
            if same:
                pairs = [(i, i, 1.0) for i in range(n)]
        else:
            if self.mode == "ordering":
                pairs = self._ordered(run)
            else:
                pairs, exact = self._assigned(run)
            total = sum(s for _, _, s in pairs)
            score = (1.0 if not calls else 0.0) if n == 0 else total / n
        if self.params.strict_mode and score < 1.0:
            score = 0.0
        passed = score >= self.threshold
        details = self._details(calls, pairs, exact)
        offending = self._violations(calls, pairs)
        if offending:
            details["violations"] = offending
        return GradeResult(self.name, TYPE, score, passed, "pass" if passed else "fail",
                           self._explain(calls, pairs, score, exact), details)

    def _violations(self, calls: Sequence[ToolCall], pairs: Sequence[tuple[int, int, float]]
                    ) -> list[dict[str, Any]]:
        tools = self.params.expected_tools
        n = len(tools)
        if n == 0:
            return [violation(c, "no tools were expected") for c in calls]
        what = "arguments" if self.use_args else ""
        if self.use_output:
            what = f"{what} or output" if what else "output"
        if self.mode == "exact_match":
            out = [violation(c, f"not the expected {tools[c.index].name!r} (entry {c.index})")
                   for c in calls[:n] if not self._same(c.index, c)]
            out += [violation(c, f"extra call beyond the {n} expected") for c in calls[n:]]
            return out
        if not what:
            return []    # names (and types) alone: every call of an expected tool pairs
        found = [(j, f"{what} differ from expected {tools[i].name!r} (entry {i})")
                 for i, j, s in pairs if s < 1]
        # A call of an expected tool left unpaired while an entry of its name and type is
        # missing: its arguments (or output) matched too little to pair at all.
        paired = {i for i, _, _ in pairs}
        used = {j for _, j, _ in pairs}
        missing: dict[tuple[str, str], list[int]] = {}
        for i, t in enumerate(tools):
            if i not in paired:
                missing.setdefault((t.name, t.type), []).append(i)
        for c in calls:
            entries = missing.get((c.name, call_type(c))) if c.index not in used else None
            if entries:
                which = f"entry {entries[0]}" if len(entries) == 1 else \
                    "entries " + ", ".join(map(str, entries))
                found.append((c.index, f"{what} differ from expected {c.name!r} ({which})"))
        found.sort()
        return [violation(calls[j], why) for j, why in found]

    def _assigned(self, run: AgentRun) -> tuple[list[tuple[int, int, float]], bool]:
        calls = run.calls
        pairs: list[tuple[int, int, float]] = []
        exact = True
        for block, classes in self._column_classes(run).items():
            found = assign_classes(self.row_classes[block], classes,
                                   lambda i, j: self.pair_score(i, calls[j]))
            exact = exact and found.exact
            pairs.extend(found.pairs)
        pairs.sort()
        return pairs, exact

    def _ordered(self, run: AgentRun) -> list[tuple[int, int, float]]:
        calls = run.calls
        classes = self._column_classes(run)
        empty: list[Sequence[int]] = []
        tools = self.params.expected_tools
        blocks = [classes.get((t.name, t.type), empty) for t in tools]
        candidates = class_candidates(self.keys, blocks.__getitem__,
                                      lambda i, j: self.pair_score(i, calls[j]))
        _, pairs = weighted_lcs(len(tools), len(calls), candidates)
        return pairs

    def _column_classes(self, run: AgentRun) -> dict[tuple[str, str], list[Sequence[int]]]:
        """Per (name, type) block, the run's calls in classes that score alike against every
        expected tool, each in call order, classes in order of their first call: the run's
        argument classes merged by what is graded (arguments equal as recorded, else as values;
        none when arguments are not graded), split by output when OUTPUT is."""
        by_args = run.argument_classes()
        calls = run.calls
        out: dict[tuple[str, str], list[Sequence[int]]] = {}
        for name, type_ in self.blocks:
            found = by_args.get(name)
            if not found:
                continue
            mcp = type_ == "MCP"
            merged: dict[Any, list[Sequence[int]]] = {}
            for (raw, envelope, server), members in found.items():
                if bool(server) != mcp:
                    continue
                key: Any = None
                if self.use_args:
                    key = (raw, envelope) if raw.__class__ is str else value_key(
                        _arguments(calls[members[0]]))
                merged.setdefault(key, []).append(members)
            classes: list[Sequence[int]] = [
                parts[0] if len(parts) == 1 else sorted(chain.from_iterable(parts))
                for parts in merged.values()]
            if self.use_output:
                split: list[Sequence[int]] = []
                for members in classes:
                    by_output: dict[Any, list[int]] = {}
                    for j in members:
                        by_output.setdefault(self._output_key(calls[j]), []).append(j)
                    split.extend(by_output.values())
                classes = split
            if classes:
                classes.sort(key=lambda m: m[0])
                out[(name, type_)] = classes
        return out

    # -- reporting ----------------------------------------------------------------------------------

    def _details(self, calls: Sequence[ToolCall], pairs: Sequence[tuple[int, int, float]],
                 exact: bool) -> dict[str, Any]:
        tools = self.params.expected_tools
        rows = []
        for i, j, s in pairs:
            row: dict[str, Any] = {"expected": i, "tool": tools[i].name, "type": tools[i].type,
                                   "call": j, "span_id": format(calls[j].span_id, "016x"),
                                   "score": s}
            if self.include_values:
                row["expected_input_parameters"] = self.args[i]
                row["input_parameters"] = _arguments(calls[j])
            rows.append(row)
        paired = {i for i, _, _ in pairs}
        used = {j for _, j, _ in pairs}
        return {
            "mode": self.mode, "threshold": self.threshold,
            "strict_mode": self.params.strict_mode,
            "evaluation_params": list(self.params.evaluation_params),
            "pairs": rows,
            "missing": [{"expected": i, "tool": t.name, "type": t.type}
                        for i, t in enumerate(tools) if i not in paired],
            "unpaired_calls": sorted(set(range(len(calls))).difference(used)),
            "assignment": "exact" if exact else "greedy",
        }

    def _explain(self, calls: Sequence[ToolCall], pairs: Sequence[tuple[int, int, float]],
                 score: float, exact: bool) -> str:
        tools = self.params.expected_tools
        n = len(tools)
        if n == 0:
            return ("No tools were expected and none was called." if not calls else
                    f"No tools were expected, but the run made {len(calls)} call(s).")
        if self.mode == "exact_match":
            if score == 1.0:
                return ("The one call matches the expected tool exactly." if n == 1 else
                        f"The {n} calls match the expected tools exactly, position by position.")
            return self._exact_text(calls)
        paired = {i: (j, s) for i, j, s in pairs}
        missed = [f"{tools[i].name!r} (entry {i})" for i in range(n) if i not in paired]
        partial = [f"{tools[i].name!r} (entry {i}) at call #{paired[i][0]} scores "
                   f"{paired[i][1]:.2f}" for i in range(n) if i in paired and paired[i][1] < 1]
        how = "in order" if self.mode == "ordering" else "each with a distinct call"
        if not missed and not partial:
            text = f"All {n} expected tools were matched {how}."
        else:
            problems = []
            if missed:
                problems.append(("not matched: " if self.mode == "ordering" else "missing: ")
                                + _listing(missed))
            if partial:
                problems.append("partial: " + _listing(partial))
            text = (f"{len(pairs)} of {n} expected tools were matched {how}, score "
                    f"{score:.2f}; " + "; ".join(problems) + ".")
        if not exact:
            text += " (Paired greedily: too many distinct calls of one tool for the exact " \
                    "assignment.)"
        if self.params.strict_mode and score < 1.0:
            text += " strict_mode: any score below 1 is 0."
        return text

    def _exact_text(self, calls: Sequence[ToolCall]) -> str:
        tools = self.params.expected_tools
        if len(calls) != len(tools):
            return (f"Not an exact match: {len(tools)} tools were expected, the run made "
                    f"{len(calls)} call(s).")
        for i, call in enumerate(calls):
            if not self._same(i, call):
                tool = tools[i]
                if call.name != tool.name:
                    why = f"is {call.name!r}"
                elif call_type(call) != tool.type:
                    why = f"is of type {call_type(call)}, not {tool.type}"
                else:
                    why = "differs in the evaluated params"
                return (f"Not an exact match: call #{i} {why} where {tool.name!r} (entry {i}) "
                        "was expected.")
        return "Not an exact match."


def _listing(items: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _build(entry: Mapping[str, Any], name: str, include_values: bool) -> ToolCorrectnessGrader:
    return ToolCorrectnessGrader(name, params_of(ToolCorrectnessParams, entry, _HINTS),
                                 include_values)


def _schema() -> dict[str, Any]:
    schema = ToolCorrectnessParams.model_json_schema()
    schema["title"] = TYPE
    schema["properties"]["type"] = {"enum": [TYPE, *ALIASES]}
    schema["required"] = ["type", *schema.get("required", [])]
    return schema


register(GraderFamily(TYPE, ALIASES, _build, schema=_schema))
