"""The ``tool_call_f1`` grader: Ragas' ``ToolCallF1`` (PEER-GRADERS.md section 4).

The reference calls and the run's calls are multisets of (name, arguments) under value
equality: a true positive is a reference call and a call that are equal, each used once
(duplicates count); precision and recall are 0 when their denominator is 0, F1 = 2PR/(P+R)
or 0, rounded to 4 decimals. No calls on either side: 1.0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..model import AgentRun, GradeResult, ToolCall
from ..violations import violation
from .pairing import value_key
from .registry import GraderFamily, params_of, register
from .tool_call_accuracy import RAGAS_HINTS, ReferenceCall, UnitInterval, arguments_of, span_hex

__all__ = ["ToolCallF1Grader", "ToolCallF1Params"]

TYPE = "tool_call_f1"
ALIASES = ("ToolCallF1", "tool-call-f1")


class ToolCallF1Params(BaseModel):
    """One ``tool_call_f1`` entry: the sample's ``reference_tool_calls``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reference_tool_calls: list[ReferenceCall] = Field(description="the expected calls")
    threshold: UnitInterval = Field(default=1.0, description="passes when score >= threshold")


class ToolCallF1Grader:
    """F1 of the run's (name, arguments) multiset against the reference calls."""

    type = TYPE
    names_calls = True   # false positives: violations

    def __init__(self, name: str, params: ToolCallF1Params, include_values: bool) -> None:
        self.name = name
        self.params = params
        self.include_values = include_values
        self.wanted: dict[Any, list[int]] = {}
        for i, r in enumerate(params.reference_tool_calls):
            self.wanted.setdefault((r.name, value_key(r.args)), []).append(i)
        self.names = frozenset(r.name for r in params.reference_tool_calls)

    def grade(self, run: AgentRun) -> GradeResult:
        refs = self.params.reference_tool_calls
        calls = run.calls
        # Each call takes the first unused equal reference call, in call order: per (name,
        # value key), the k-th such call pairs with the k-th reference. Decoded and keyed once
        # per argument class.
        found: dict[Any, list[Sequence[int]]] = {}
        for name, classes in run.argument_classes().items():
            if name not in self.names:
                continue
            for members in classes.values():
                key = (name, value_key(arguments_of(calls[members[0]])))
                if key in self.wanted:
                    found.setdefault(key, []).append(members)
        pairs: list[tuple[int, ToolCall]] = []
        for key, parts in found.items():
            members = parts[0] if len(parts) == 1 else sorted(chain.from_iterable(parts))
            pairs.extend((i, calls[j]) for i, j in zip(self.wanted[key], members))
        tp = len(pairs)
        fp, fn = len(calls) - tp, len(refs) - tp
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        if not refs and not calls:
            f1 = 1.0
        else:
            f1 = round(2 * precision * recall / (precision + recall), 4) if precision + recall \
                else 0.0
        passed = f1 >= self.params.threshold
        pairs.sort(key=lambda p: p[0])
        rows = []
        for i, call in pairs:
            row: dict[str, Any] = {"reference": i, "tool": refs[i].name, "call": call.index,
                                   "span_id": span_hex(call)}
            if self.include_values:
                row["args"] = refs[i].args
            rows.append(row)
        paired = {i for i, _ in pairs}
        used = {call.index for _, call in pairs}
        details: dict[str, Any] = {
            "true_positives": tp, "false_positives": fp, "false_negatives": fn,
            "precision": precision, "recall": recall, "threshold": self.params.threshold,
            "pairs": rows,
            "unmatched_reference": [i for i in range(len(refs)) if i not in paired],
            "unexpected_calls": sorted(set(range(len(calls))).difference(used)),
        }
        if fp:
            details["violations"] = [violation(c, "not in the reference (a false positive)")
                                     for c in calls if c.index not in used]
        return GradeResult(self.name, TYPE, f1, passed, "pass" if passed else "fail",
                           _explain(refs, calls, details, f1), details)


def _explain(refs: Sequence[ReferenceCall], calls: Sequence[ToolCall],
             details: Mapping[str, Any], f1: float) -> str:
    if not refs and not calls:
        return "No calls were expected and none was made."
    tp, fp, fn = (details[k] for k in ("true_positives", "false_positives", "false_negatives"))
    text = f"F1 {f1:.4f}: {tp} of {len(refs)} reference calls made with equal arguments"
    problems = []
    if fn:
        missed = [f"{refs[i].name!r} (reference {i})" for i in details["unmatched_reference"]]
        problems.append("missing: " + _listing(missed))
    if fp:
        extra = [f"#{j} {calls[j].name!r}" for j in details["unexpected_calls"][:3]]
        problems.append(f"{fp} call(s) not in the reference: " + _listing(extra, total=fp))
    return text + ("; " + "; ".join(problems) if problems else "") + "."


def _listing(items: Sequence[str], limit: int = 3, total: int | None = None) -> str:
    """The first ``limit`` items, and how many more of ``total`` (default: all items)."""
    total = len(items) if total is None else total
    shown = ", ".join(items[:limit])
    return shown + (f" and {total - limit} more" if total > limit else "")


def _build(entry: Mapping[str, Any], name: str, include_values: bool) -> ToolCallF1Grader:
    return ToolCallF1Grader(name, params_of(ToolCallF1Params, entry, RAGAS_HINTS),
                            include_values)


def _schema() -> dict[str, Any]:
    schema = ToolCallF1Params.model_json_schema()
    schema["title"] = TYPE
    schema["properties"]["type"] = {"enum": [TYPE, *ALIASES]}
    schema["required"] = ["type", *schema.get("required", [])]
    return schema


register(GraderFamily(TYPE, ALIASES, _build, schema=_schema))
