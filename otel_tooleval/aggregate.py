"""Verdicts across runs: counts, mean scores, and the gates that only exist over many runs.

Equal-function-set graders gate on their micro-average (counts summed over the runs, then the
percents); ``aggregate`` asks every grader that can combine its results (``AggregatingGrader``)
for that, over all runs or per group of runs sharing a root-span attribute.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .config import ToolEvalConfig
from .graders.registry import AggregatingGrader
from .model import GradeResult, RunReport

__all__ = ["aggregate", "aggregate_passed"]


def _summary(reports: Sequence[RunReport], config: ToolEvalConfig) -> dict[str, Any]:
    by_grader: dict[str, list[GradeResult]] = {g.name: [] for g in config.graders}
    for report in reports:
        for result in report.results:
            by_grader.setdefault(result.name, []).append(result)
    passed = sum(1 for r in reports if r.passed)
    graders: dict[str, Any] = {}
    for entry in config.graders:
        results = by_grader.get(entry.name, [])
        summary: dict[str, Any] = {
            "runs": len(results),
            "passed": sum(1 for r in results if r.passed),
            "mean_score": (math.fsum(r.score for r in results) / len(results)) if results else None,
        }
        if isinstance(entry.grader, AggregatingGrader) and results:
            combined = dict(entry.grader.aggregate(results))
            if "tool_selection" in combined:
                summary["tool_selection"] = combined["tool_selection"]
            summary["passed_aggregate"] = bool(combined.get("passed", False))
        graders[entry.name] = summary
    return {"runs": len(reports), "passed": passed, "failed": len(reports) - passed,
            "graders": graders}


def aggregate(reports: Sequence[RunReport], config: ToolEvalConfig, *,
              group_by: str | None = None) -> dict[str, Any]:
    """The ``aggregate`` object of ``grade --format json`` (ARCHITECTURE.md).

    With ``group_by``, ``groups`` maps each value of that root-span attribute (as text; runs
    without it fall in the group ``null``) to the same summary over that group's runs, and the
    aggregate gates are checked per group.
    """
    out = _summary(reports, config)
    if group_by is not None:
        groups: dict[str, list[RunReport]] = {}
        for report in reports:
            value = report.run.root_attributes.get(group_by)
            groups.setdefault("null" if value is None else str(value), []).append(report)
        out["group_by"] = group_by
        out["groups"] = {key: _summary(members, config) for key, members in groups.items()}
    return out


def aggregate_passed(doc: Mapping[str, Any]) -> bool:
    """Every run passed, and every aggregate gate (overall, or in every group) holds."""
    if doc.get("failed"):
        return False
    scopes = list(doc.get("groups", {}).values()) if "groups" in doc else [doc]
    for scope in scopes:
        for summary in scope.get("graders", {}).values():
            if summary.get("passed_aggregate") is False:
                return False
    return True
