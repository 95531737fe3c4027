"""Verdicts as Langfuse scores: the request bodies of ``POST /api/public/scores``, pure data.

What goes where (Langfuse scores a trace, an observation or a session):

- the run's overall verdict on its trace: ``tooleval`` (BOOLEAN, 1 passed / 0 failed; the
  comment names the failing graders) and ``tooleval.score`` (NUMERIC, the graders' mean);
- each grader's verdict on the run's root observation: the grader's name (NUMERIC, its score;
  the comment is its explanation, the metadata its label, type, error and a summary of its
  details);
- each call a failing grader lists under ``details.violations`` on that tool call's
  observation: ``tooleval.violation`` (CATEGORICAL, the grader's name; the comment its
  reasons);
- a session's verdicts on the Langfuse session named by the session key's value: the same
  ``tooleval`` / ``tooleval.score`` / per-grader scores.

Ids. Langfuse's OTLP ingestion keeps an OpenTelemetry trace id as the Langfuse trace id and a
span id as the observation id, both as lowercase hex (``OtelIngestionProcessor.parseId`` in
langfuse/langfuse ``packages/shared/src/server/otel/OtelIngestionProcessor.ts``: a string id as
it came, bytes as ``Buffer.toString("hex")``; the observation's ``id`` is
``parseId(span.spanId)``), so ``trace_id_hex`` and the 16-digit span id address what our spans
became there. Each score's own ``id`` is a UUID derived from what it scores and its name, and
its ``timestamp`` is the run's (or session's) end: Langfuse updates a score sent again with
the same id and timestamp instead of adding one (the ``timestamp`` field of the langfuse
package's ``CreateScoreRequest``), so a second delivery of a run replaces its scores.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from ..model import GradeResult, RunReport
from ..sessions.model import SessionReport
from ..violations import violations_of
from .base import details_summary

__all__ = ["RUN_SCORE", "SCORE_SCORE", "VIOLATION_SCORE", "details_summary", "run_scores",
           "score_id", "session_scores"]

#: The run's (or session's) overall verdict: BOOLEAN.
RUN_SCORE = "tooleval"
#: The graders' mean score of the run (or session): NUMERIC.
SCORE_SCORE = "tooleval.score"
#: One call a failing grader names: CATEGORICAL, the grader's name.
VIOLATION_SCORE = "tooleval.violation"

_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "otel-tooleval:langfuse-score")
#: Text fields are cut to this many characters (a comment is for reading, not storage).
_MAX_TEXT = 2000


def score_id(*parts: str) -> str:
    """A score's id: the same parts (what it scores, its name) give the same id."""
    return str(uuid.uuid5(_NAMESPACE, "\x1f".join(parts)))


def _timestamp(ns: int | None) -> str | None:
    if not ns:
        return None
    return datetime.fromtimestamp(ns // 1000 / 1e6, tz=timezone.utc).isoformat()


def _cut(text: str, limit: int = _MAX_TEXT) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _score(identity: Sequence[str], name: str, value: float | str, data_type: str,
           comment: str | None, metadata: dict[str, Any], timestamp: str | None,
           environment: str | None, **target: str) -> dict[str, Any]:
    body: dict[str, Any] = {"id": score_id(*identity, name), **target, "name": name,
                            "value": value, "dataType": data_type}
    if comment:
        body["comment"] = _cut(comment)
    body["metadata"] = metadata
    if timestamp is not None:
        body["timestamp"] = timestamp
    if environment:
        body["environment"] = environment
    return body


def _verdict_scores(identity: Sequence[str], results: Sequence[GradeResult], passed: bool,
                    mean: float, failed: Sequence[str], context: dict[str, Any],
                    timestamp: str | None, environment: str | None,
                    overall: Mapping[str, str], graders: Mapping[str, str],
                    ) -> list[dict[str, Any]]:
    """The overall ``tooleval`` / ``tooleval.score`` pair on ``overall`` and one score per
    grader on ``graders`` (the same target for a session, the root observation for a run)."""
    comment = "passed" if passed else "failed: " + ", ".join(failed)
    summary = {**context, "passed": passed, "score": mean, "failed": list(failed),
               "graders": len(results)}
    scores = [
        _score((*identity, "overall"), RUN_SCORE, 1.0 if passed else 0.0, "BOOLEAN", comment, summary,
               timestamp, environment, **overall),
        _score((*identity, "overall"), SCORE_SCORE, float(mean), "NUMERIC", comment, summary, timestamp,
               environment, **overall),
    ]
    for result in results:
        metadata: dict[str, Any] = {**context, "label": result.label, "passed": result.passed,
                                    "grader_type": result.type,
                                    "details": details_summary(result.details)}
        if result.error is not None:
            metadata["error"] = result.error
        scores.append(_score((*identity, "grader"), result.name, float(result.score), "NUMERIC",
                             result.explanation, metadata, timestamp, environment, **graders))
    return scores


def _violation_scores(trace: str, results: Iterable[GradeResult], timestamp: str | None,
                      environment: str | None) -> list[dict[str, Any]]:
    """One ``tooleval.violation`` per (tool call, failing grader): a grader that names a call
    twice gives one score whose comment holds both reasons."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for result in results:
        for entry in violations_of(result):
            span = entry.get("span_id")
            if not isinstance(span, str) or len(span) != 16:
                continue        # a call read from a span without an id: nowhere to put it
            reason = str(entry.get("reason", ""))
            seen = found.get((span, result.name))
            if seen is not None:
                if reason and reason not in seen["reasons"]:
                    seen["reasons"].append(reason)
                continue
            found[(span, result.name)] = {"result": result, "entry": entry,
                                          "reasons": [reason] if reason else []}
    scores = []
    for (span, grader), item in found.items():
        entry = item["entry"]
        metadata = {"grader": grader, "grader_type": item["result"].type,
                    "tool": entry.get("tool"), "call": entry.get("call"),
                    "reasons": item["reasons"]}
        scores.append(_score((trace, span, "violation", grader), VIOLATION_SCORE, grader, "CATEGORICAL",
                             "; ".join(item["reasons"]) or None, metadata, timestamp,
                             environment, traceId=trace, observationId=span))
    return scores


def run_scores(report: RunReport, environment: str | None = None) -> list[dict[str, Any]]:
    """The scores of one graded run (none when no grader applied)."""
    if not report.results:
        return []
    run = report.run
    trace, root = run.trace_id_hex, run.root_span_id_hex
    context: dict[str, Any] = {"source": "otel-tooleval", "agent": run.agent,
                               "tool_calls": len(run.calls)}
    if report.case is not None:
        context["case"] = report.case
    timestamp = _timestamp(run.end_ns or run.start_ns)
    scores = _verdict_scores((trace, root), report.results, report.passed, report.score,
                             report.failed, context, timestamp, environment,
                             {"traceId": trace}, {"traceId": trace, "observationId": root})
    scores.extend(_violation_scores(trace, report.results, timestamp, environment))
    return scores


def session_scores(report: SessionReport, environment: str | None = None,
                   ) -> list[dict[str, Any]]:
    """The scores of one graded session, on the Langfuse session the key's value names."""
    if not report.results:
        return []
    key = report.key
    ends = [r.end_ns or r.start_ns for r in report.runs]
    context: dict[str, Any] = {"source": "otel-tooleval", "agent": report.agent,
                               "session_key": key.attribute, "runs": len(report.runs),
                               "tool_calls": report.tool_calls,
                               "ended": report.ended or "unknown"}
    target = {"sessionId": key.value}
    return _verdict_scores(("session", key.attribute, key.value), report.results,
                           report.passed, report.score, report.failed, context,
                           _timestamp(max(ends) if ends else None), environment, target,
                           target)
