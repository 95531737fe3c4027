"""The ``tool_call_accuracy`` grader: Ragas' ``ToolCallAccuracy`` (PEER-GRADERS.md section 4).

Reference calls are paired with the run's calls of the same name: with ``strict_order`` along
the longest common subsequence of the two name sequences (among those, the pairing with the
highest total), without it by a maximum-total assignment. A pair scores the fraction of the
reference's argument keys whose values are equal in the call; the score is the total over
max(reference calls, calls), so every missing or extra call costs, and a wrong name costs only
its own pair.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, field_validator

from ..model import AgentRun, GradeResult, ToolCall
from ..values import json_values
from ..violations import violation
from .pairing import assign, class_candidates, longest_then_best, value_key
from .registry import GraderFamily, params_of, register
from .tool_call_checks import same_value

__all__ = ["RAGAS_HINTS", "ReferenceCall", "ToolCallAccuracyGrader", "ToolCallAccuracyParams",
           "arguments_of", "reference_score", "span_hex"]

TYPE = "tool_call_accuracy"
ALIASES = ("ToolCallAccuracy", "tool-call-accuracy")

ToolName = Annotated[StrictStr, Field(min_length=1)]
UnitInterval = Annotated[float, Field(strict=True, ge=0, le=1, allow_inf_nan=False)]


class ReferenceCall(BaseModel):
    """One of Ragas' ``reference_tool_calls`` (a ``ragas.messages.ToolCall``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: ToolName
    args: dict[StrictStr, Any] = Field(default_factory=dict,
                                       description="the expected arguments; left out: {}")

    @field_validator("args")
    @classmethod
    def _json(cls, value: Any) -> Any:
        return json_values(value)


class ToolCallAccuracyParams(BaseModel):
    """One ``tool_call_accuracy`` entry: ``ToolCallAccuracy``'s option and the sample's
    ``reference_tool_calls``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reference_tool_calls: list[ReferenceCall] = Field(description="the expected calls")
    strict_order: StrictBool = Field(default=True, description="pair along the order (Ragas' "
                                                               "default)")
    threshold: UnitInterval = Field(default=1.0, description="passes when score >= threshold")


RAGAS_HINTS = {
    "user_input": "unknown key: the run's calls are the user_input",
    "reference": "unknown key (did you mean 'reference_tool_calls'?)",
    "tool_calls": "unknown key (did you mean 'reference_tool_calls'?)",
}
_HINTS = {**RAGAS_HINTS, "arg_comparison_metric": (
    "only Ragas' default argument comparison (exact match, of values here) is supported; "
    "other comparison metrics may need an LLM: remove it")}


def arguments_of(call: ToolCall) -> Any:
    """A call's arguments; a span without recorded arguments stands for a call without any."""
    args = call.arguments
    return {} if args is None else args


def reference_score(reference: Mapping[str, Any], args: Any) -> float:
    """The fraction of the reference's argument keys whose values are equal in the call (extra
    call keys are free); both empty 1.0, reference empty but call args not 0.0."""
    if not reference:
        return 1.0 if isinstance(args, Mapping) and not args else 0.0
    if not isinstance(args, Mapping):
        return 0.0
    hits = sum(1 for k, v in reference.items() if k in args and same_value(v, args[k]))
    return hits / len(reference)


def span_hex(call: ToolCall) -> str:
    return format(call.span_id, "016x")


def call_key(call: ToolCall) -> Any:
    """Calls with equal keys have equal arguments (the recorded text, else the value)."""
    raw = call.raw_arguments
    return (raw, id(call.envelope)) if raw.__class__ is str else value_key(arguments_of(call))


class ToolCallAccuracyGrader:
    """Grades the run's calls against Ragas' ``reference_tool_calls``."""

    type = TYPE
    names_calls = True   # extra calls and calls whose arguments differ: violations

    def __init__(self, name: str, params: ToolCallAccuracyParams, include_values: bool) -> None:
        self.name = name
        self.params = params
        self.include_values = include_values
        refs = params.reference_tool_calls
        self.keys = [value_key(r.args) for r in refs]
        # Pair scores are multiples of 1 / this: the strict-order DP counts in integers.
        self.scale = math.lcm(*(len(r.args) or 1 for r in refs)) if refs else 1
        self.blocks: dict[str, list[int]] = {}
        for i, r in enumerate(refs):
            self.blocks.setdefault(r.name, []).append(i)

    def grade(self, run: AgentRun) -> GradeResult:
        refs = self.params.reference_tool_calls
        calls = run.calls
        if self.params.strict_order:
            by_args = run.argument_classes()
            classes = {name: list(by_args[name].values()) for name in self.blocks
                       if name in by_args}
            empty: list[list[int]] = []
            blocks = [classes.get(r.name, empty) for r in refs]
            pairs = longest_then_best(len(refs), len(calls), class_candidates(
                self.keys, blocks.__getitem__,
                lambda i, j: reference_score(refs[i].args, arguments_of(calls[j]))), self.scale)
        else:
            pairs = self._assigned(run)
        denominator = max(len(refs), len(calls))
        score = 1.0 if denominator == 0 else sum(s for _, _, s in pairs) / denominator
        score = min(score, 1.0)
        passed = score >= self.params.threshold
        rows = []
        for i, j, s in pairs:
            row: dict[str, Any] = {"reference": i, "tool": refs[i].name, "call": j,
                                   "span_id": span_hex(calls[j]), "score": s}
            if self.include_values:
                row["reference_args"] = refs[i].args
                row["args"] = arguments_of(calls[j])
            rows.append(row)
        paired = {i for i, _, _ in pairs}
        used = {j for _, j, _ in pairs}
        details: dict[str, Any] = {
            "strict_order": self.params.strict_order, "threshold": self.params.threshold,
            "pairs": rows, "denominator": denominator,
            "unmatched_reference": [i for i in range(len(refs)) if i not in paired],
            "unpaired_calls": sorted(set(range(len(calls))).difference(used)),
        }
        offending = [(j, f"arguments differ from reference {i} ({refs[i].name!r})")
                     for i, j, s in pairs if s < 1]
        offending += [(c.index, "extra call: not paired with a reference call")
                      for c in calls if c.index not in used]
        if offending:
            offending.sort()
            details["violations"] = [violation(calls[j], why) for j, why in offending]
        return GradeResult(self.name, TYPE, score, passed, "pass" if passed else "fail",
                           self._explain(calls, pairs, details, score), details)

    def _assigned(self, run: AgentRun) -> list[tuple[int, int, float]]:
        refs = self.params.reference_tool_calls
        groups = run.calls_by_name()
        pairs: list[tuple[int, int, float]] = []
        for tool, entries in self.blocks.items():
            calls = groups.get(tool)
            if not calls:
                continue

            def weight(r: int, c: int, e: list[int] = entries,
                       cs: Sequence[ToolCall] = calls) -> float:
                return reference_score(refs[e[r]].args, arguments_of(cs[c]))

            found = assign([self.keys[i] for i in entries], [call_key(c) for c in calls],
                           weight)
            pairs.extend((entries[r], calls[c].index, s) for r, c, s in found.pairs)
        pairs.sort()
        return pairs

    def _explain(self, calls: Sequence[ToolCall], pairs: Sequence[tuple[int, int, float]],
                 details: Mapping[str, Any], score: float) -> str:
        refs = self.params.reference_tool_calls
        if not refs:
            return ("No calls were expected and none was made." if not calls else
                    f"No reference calls, but the run made {len(calls)} call(s).")
        if not calls:
            return f"The run made no tool calls; {len(refs)} were expected."
        how = "in order" if self.params.strict_order else "in any order"
        problems = []
        missed = [f"{refs[i].name!r} (reference {i})" for i in details["unmatched_reference"]]
        if missed:
            problems.append("not paired: " + _listing(missed))
        partial = [f"{refs[i].name!r} (reference {i}) at call #{j} scores {s:.2f}"
                   for i, j, s in pairs if s < 1]
        if partial:
            problems.append("arguments differ: " + _listing(partial))
        extra = details["unpaired_calls"]
        if extra:
            problems.append(f"{len(extra)} extra call(s) at "
                            + _listing([f"#{j}" for j in extra[:3]], total=len(extra)))
        if not problems:
            return f"All {len(refs)} reference calls were matched {how} with equal arguments."
        return (f"Score {score:.2f} ({len(pairs)} of {len(refs)} reference calls paired "
                f"{how}, over {details['denominator']}); " + "; ".join(problems) + ".")


def _listing(items: Sequence[str], limit: int = 3, total: int | None = None) -> str:
    """The first ``limit`` items, and how many more of ``total`` (default: all items)."""
    total = len(items) if total is None else total
    shown = ", ".join(items[:limit])
    return shown + (f" and {total - limit} more" if total > limit else "")


def _build(entry: Mapping[str, Any], name: str, include_values: bool
           ) -> ToolCallAccuracyGrader:
    return ToolCallAccuracyGrader(name, params_of(ToolCallAccuracyParams, entry, _HINTS),
                                  include_values)


def _schema() -> dict[str, Any]:
    schema = ToolCallAccuracyParams.model_json_schema()
    schema["title"] = TYPE
    schema["properties"]["type"] = {"enum": [TYPE, *ALIASES]}
    schema["required"] = ["type", *schema.get("required", [])]
    return schema


register(GraderFamily(TYPE, ALIASES, _build, schema=_schema))
