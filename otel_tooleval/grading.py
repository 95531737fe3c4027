"""Run the configured graders over runs: the one grading core every front door uses."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .model import AgentRun, GradeResult, RunReport, SpanRecord
from .trajectory import build_run, find_runs

if TYPE_CHECKING:
    from .config import ToolEvalConfig

__all__ = ["grade_records", "grade_run", "grade_spans"]


def grade_run(run: AgentRun, config: ToolEvalConfig) -> RunReport | None:
    """Grade one run with every grader that applies; None when the run is not graded at all.

    A grader that raises yields a result labelled ``error``; the others still run.
    """
    agents = config.runs.agents
    if agents is not None and run.agent not in agents:
        return None
    results: list[GradeResult] = []
    for entry in config.graders:
        if not entry.applies_to(run.agent):
            continue
        try:
            result = entry.grader.grade(run)
        except Exception as exc:  # a grader bug must never cost the other verdicts
            result = GradeResult.failure(
                entry.name, entry.type, type(exc).__name__,
                f"grader {entry.name!r} raised {type(exc).__name__} while grading this run",
            )
        results.append(result)
    return RunReport(run, tuple(results))


def grade_records(records: Iterable[SpanRecord], config: ToolEvalConfig) -> list[RunReport]:
    """Cut complete traces into runs and grade each one."""
    reports = []
    for root, members in find_runs(records, config.policy):
        report = grade_run(build_run(root, members, config.policy), config)
        if report is not None:
            reports.append(report)
    return reports


def grade_spans(spans: Iterable[Any], config: Any) -> list[RunReport]:
    """Grade finished ``ReadableSpan``s (e.g. from an ``InMemorySpanExporter``)."""
    from ._compat import record_from_span
    from .config import load_config

    return grade_records((record_from_span(s) for s in spans), load_config(config))
