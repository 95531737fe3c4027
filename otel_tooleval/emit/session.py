"""A graded session as a span of its own: a new trace, linked to every run's root."""

from __future__ import annotations

from typing import Any

from ..sessions.model import SessionReport
from .span import EVENT_NAME, result_attributes

__all__ = ["session_attributes", "session_events", "session_span_name"]


def session_span_name(report: SessionReport) -> str:
    """``session <agent>``: one operation per agent in a tracing backend's search."""
    return f"session {report.agent}" if report.agent else "session"


def session_attributes(report: SessionReport) -> dict[str, Any]:
    """The session key under the attribute it came from, and the ``tooleval.session.*``
    summary (``tooleval.session.passed=false`` finds failing conversations)."""
    key = report.key
    attrs: dict[str, Any] = {
        key.attribute: key.value,
        "tooleval.session.key": key.attribute,
        "tooleval.session.passed": report.passed,
        "tooleval.session.score": float(report.score),
        "tooleval.session.runs": len(report.runs),
        "tooleval.session.tool_calls": report.tool_calls,
        "tooleval.session.ended": report.ended or "unknown",
    }
    if report.agent:
        attrs["gen_ai.agent.name"] = report.agent
    failed = report.failed
    if failed:
        attrs["tooleval.session.failed"] = list(failed)
    if report.dropped_calls:
        attrs["tooleval.session.dropped_calls"] = report.dropped_calls
    if report.dropped_runs:
        attrs["tooleval.session.dropped_runs"] = report.dropped_runs
    return attrs


def session_events(report: SessionReport, timestamp: int,
                   ) -> list[tuple[str, dict[str, Any], int]]:
    """One ``gen_ai.evaluation.result`` event per session grader."""
    return [(EVENT_NAME, result_attributes(r), timestamp) for r in report.results]
