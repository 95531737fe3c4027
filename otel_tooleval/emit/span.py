"""Verdicts as span events and root-span attributes (the copy of the root carries them)."""

from __future__ import annotations

from typing import Any

from ..model import GradeResult, RunReport

__all__ = ["EVENT_NAME", "result_attributes", "root_attributes", "span_events"]

EVENT_NAME = "gen_ai.evaluation.result"


def result_attributes(result: GradeResult) -> dict[str, Any]:
    """The ``gen_ai.evaluation.*`` attributes of one verdict (events and log records)."""
    attrs: dict[str, Any] = {
        "gen_ai.evaluation.name": result.name,
        "gen_ai.evaluation.score.value": float(result.score),
        "gen_ai.evaluation.score.label": result.label,
        "gen_ai.evaluation.explanation": result.explanation,
        "tooleval.grader.type": result.type,
    }
    if result.error is not None:
        attrs["error.type"] = result.error
    return attrs


def root_attributes(report: RunReport) -> dict[str, Any]:
    """``tooleval.*`` attributes summarising the run on its root span."""
    attrs: dict[str, Any] = {
        "tooleval.passed": report.passed,
        "tooleval.score": float(report.score),
        "tooleval.tool_calls": len(report.run.calls),
    }
    failed = report.failed
    if failed:
        attrs["tooleval.failed"] = list(failed)
    if report.run.pending_calls:
        attrs["tooleval.pending_calls"] = report.run.pending_calls
    if report.run.dropped_calls:
        attrs["tooleval.dropped_calls"] = report.run.dropped_calls
    if report.case is not None:   # the run's case (cases:), whichever way it was matched
        attrs["tooleval.case.id"] = report.case
    reading = report.run.reading
    attrs["tooleval.reading.requested"] = reading.requested
    attrs["tooleval.reading.executed"] = reading.executed
    attrs["tooleval.reading.matched"] = reading.matched
    attrs["tooleval.reading.unrequested"] = len(reading.unrequested)
    attrs["tooleval.reading.unexecuted"] = len(reading.unexecuted)
    attrs["tooleval.reading.source"] = reading.source
    return attrs


def span_events(report: RunReport, timestamp: int) -> list[tuple[str, dict[str, Any], int]]:
    """One ``gen_ai.evaluation.result`` event per grader, stamped at the root's end."""
    return [(EVENT_NAME, result_attributes(r), timestamp) for r in report.results]
