"""Verdicts across runs: counts, mean scores, and the gates that only exist over many runs.

Equal-function-set graders gate on their micro-average (counts summed over the runs, then the
percents); ``aggregate`` asks every grader that can combine its results (``AggregatingGrader``)
for that, over all runs or per group of runs sharing a root-span attribute.

:class:`RunningAggregate` computes the same object from runs added one at a time, keeping sums
rather than runs (``grade`` over files of any number of runs); :func:`aggregate` is it over a
list.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .config import ToolEvalConfig
from .graders.registry import AggregateTally, AggregatingGrader, TallyingGrader
from .guard_result import GUARD_RESULT
from .model import GradeResult, RunReport

__all__ = ["RunningAggregate", "aggregate", "aggregate_passed"]


class _ExactSum:
    """``math.fsum`` of numbers added one at a time: Shewchuk's partials, whose exact sum is
    the sum of the numbers, so that ``math.fsum`` of them rounds as it would over them all."""

    __slots__ = ("partials", "specials")

    def __init__(self) -> None:
        self.partials: list[float] = []
        self.specials: list[float] = []    # one of each non-finite value seen, for fsum

    def add(self, x: float) -> None:
        x = float(x)
        if not math.isfinite(x):
            if not any(s is x or (math.isnan(s) and math.isnan(x)) or s == x
                       for s in self.specials):
                self.specials.append(x)
            return
        i = 0
        for y in self.partials:
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo:
                self.partials[i] = lo
                i += 1
            x = hi
        self.partials[i:] = [x]

    def value(self) -> float:
        return math.fsum([*self.partials, *self.specials])


class _ListTally:
    """The tally of an aggregating grader that has no ``tally()``: its results, kept."""

    def __init__(self, grader: AggregatingGrader) -> None:
        self.grader = grader
        self.results: list[GradeResult] = []

    def add(self, result: GradeResult) -> None:
        self.results.append(result)

    def combined(self) -> Mapping[str, Any]:
        return self.grader.aggregate(self.results)


class _Scope:
    """One summary object: over all runs, or over one group."""

    def __init__(self, config: ToolEvalConfig) -> None:
        self.config = config
        self.runs = self.passed = 0
        # per grader name: runs, passed, sum of scores (as _summary counted them by name)
        self.counts: dict[str, list[Any]] = {}
        self.tallies: dict[str, list[tuple[str, AggregateTally]]] = {}
        for entry in config.graders:
            grader = entry.grader
            if isinstance(grader, AggregatingGrader):
                tally = (grader.tally() if isinstance(grader, TallyingGrader)
                         else _ListTally(grader))
                self.tallies.setdefault(entry.name, []).append((entry.name, tally))

    def add(self, report: RunReport) -> None:
        self.runs += 1
        passed = True
        for result in report.results:
            counts = self.counts.get(result.name)
            if counts is None:
                counts = self.counts[result.name] = [0, 0, _ExactSum()]
            counts[0] += 1
            if result.passed:
                counts[1] += 1
            else:
                passed = False
            counts[2].add(result.score)
            for _name, tally in self.tallies.get(result.name, ()):
                tally.add(result)
        self.passed += passed

    def summary(self) -> dict[str, Any]:
        graders: dict[str, Any] = {}
        tallies = {name: iter(t for _, t in pairs) for name, pairs in self.tallies.items()}
        for entry in self.config.graders:
            runs, passed, scores = self.counts.get(entry.name, (0, 0, None))
            summary: dict[str, Any] = {
                "runs": runs,
                "passed": passed,
                "mean_score": scores.value() / runs if runs and scores is not None else None,
            }
            if isinstance(entry.grader, AggregatingGrader):
                tally = next(tallies[entry.name])
                if runs:
                    combined = dict(tally.combined())
                    if "tool_selection" in combined:
                        summary["tool_selection"] = combined["tool_selection"]
                    summary["passed_aggregate"] = bool(combined.get("passed", False))
            graders[entry.name] = summary
        if self.config.guard_rules is not None:   # the guard's result, as a grader's
            runs, passed, scores = self.counts.get(GUARD_RESULT, (0, 0, None))
            graders[GUARD_RESULT] = {
                "runs": runs, "passed": passed,
                "mean_score": scores.value() / runs if runs and scores is not None else None}
        return {"runs": self.runs, "passed": self.passed, "failed": self.runs - self.passed,
                "graders": graders}


class RunningAggregate:
    """The ``aggregate`` object of runs added one at a time, in any order.

    ``key`` orders the runs as the report lists them; it only matters with ``group_by``,
    where groups are listed in the order of their first run by that key (as :func:`aggregate`
    lists them in the order of the list it is given).
    """

    def __init__(self, config: ToolEvalConfig, *, group_by: str | None = None) -> None:
        self.config = config
        self.group_by = group_by
        self.all = _Scope(config)
        self.groups: dict[str, tuple[Any, _Scope]] = {}

    def add(self, report: RunReport, key: Any = 0) -> None:
        self.all.add(report)
        if self.group_by is None:
            return
        value = report.run.root_attributes.get(self.group_by)
        name = "null" if value is None else str(value)
        first = self.groups.get(name)
        if first is None:
            first = self.groups[name] = (key, _Scope(self.config))
        elif key < first[0]:
            first = self.groups[name] = (key, first[1])
        first[1].add(report)

    def result(self) -> dict[str, Any]:
        out = self.all.summary()
        if self.group_by is not None:
            ordered = sorted(self.groups.items(), key=lambda item: item[1][0])
            out["group_by"] = self.group_by
            out["groups"] = {name: scope.summary() for name, (_, scope) in ordered}
        return out


def aggregate(reports: Sequence[RunReport], config: ToolEvalConfig, *,
              group_by: str | None = None) -> dict[str, Any]:
    """The ``aggregate`` object of ``grade --format json`` (ARCHITECTURE.md).

    With ``group_by``, ``groups`` maps each value of that root-span attribute (as text; runs
    without it fall in the group ``null``) to the same summary over that group's runs, and the
    aggregate gates are checked per group.
    """
    running = RunningAggregate(config, group_by=group_by)
    for position, report in enumerate(reports):
        running.add(report, position)
    return running.result()


def aggregate_passed(doc: Mapping[str, Any]) -> bool:
    """Every run, every session and every case passed (no case missing), and every aggregate gate (overall, or in every
    group) holds."""
    if doc.get("failed"):
        return False
    for part in ("sessions", "cases"):   # a failing session; a failing or missing case
        counts = doc.get(part)
        if isinstance(counts, Mapping) and (counts.get("failed") or counts.get("missing")):
            return False
    scopes = list(doc.get("groups", {}).values()) if "groups" in doc else [doc]
    for scope in scopes:
        for summary in scope.get("graders", {}).values():
            if summary.get("passed_aggregate") is False:
                return False
    return True
