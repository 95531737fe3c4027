"""Verdicts and drops as metrics. Attributes never carry trace ids or argument values."""

from __future__ import annotations

from typing import Any

from opentelemetry.metrics import MeterProvider, get_meter_provider

from ..model import Verdicts

__all__ = ["VerdictMetrics"]

# Scores live in [0, 1]; the SDK's default buckets (0, 5, 10, ...) would put them all in one.
_SCORE_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)


class VerdictMetrics:
    """The instruments named in ARCHITECTURE.md."""

    def __init__(self, meter_provider: MeterProvider | None, version: str) -> None:
        provider = meter_provider if meter_provider is not None else get_meter_provider()
        meter = provider.get_meter("otel_tooleval", version)
        self.score = meter.create_histogram(
            "gen_ai.evaluation.score", unit="1", description="Score of each grader per agent run",
            explicit_bucket_boundaries_advisory=_SCORE_BUCKETS)
        self.runs = meter.create_counter(
            "tooleval.runs", unit="{run}", description="Agent runs graded")
        self.dropped = meter.create_counter(
            "tooleval.runs.dropped", unit="{event}",
            description="Runs, calls or spans not graded, by reason")
        self.sessions = meter.create_counter(
            "tooleval.sessions", unit="{session}", description="Sessions graded")
        self.sessions_dropped = meter.create_counter(
            "tooleval.sessions.dropped", unit="{event}",
            description="Sessions ended early or lost, and session calls not kept, by reason")
        self.true_positives = meter.create_counter(
            "tooleval.tool_selection.true_positives", unit="{call}")
        self.false_positives = meter.create_counter(
            "tooleval.tool_selection.false_positives", unit="{call}")
        self.false_negatives = meter.create_counter(
            "tooleval.tool_selection.false_negatives", unit="{call}")
        self.guard_violations = meter.create_counter(
            "tooleval.guard.violations", unit="{call}",
            description="Tool calls that broke a guard rule, by rule and tool")

    def record_session(self, report: Verdicts, key_attribute: str) -> None:
        """A session's verdicts: the score histogram and ``tooleval.sessions``, with the
        attribute the session key came from (never the key's value: one series per
        conversation would be unbounded)."""
        agent = report.agent
        base: dict[str, Any] = {"gen_ai.agent.name": agent} if agent else {}
        base["tooleval.session.key"] = key_attribute
        for result in report.results:
            self.score.record(result.score, {
                **base,
                "gen_ai.evaluation.name": result.name,
                "gen_ai.evaluation.score.label": result.label,
            })
        self.sessions.add(1, {**base, "tooleval.passed": report.passed})

    def drop_sessions(self, reason: str, n: int = 1) -> None:
        self.sessions_dropped.add(n, {"reason": reason})

    def record(self, report: Verdicts) -> None:
        agent = report.agent
        base: dict[str, Any] = {"gen_ai.agent.name": agent} if agent else {}
        for result in report.results:
            attrs = {**base, "gen_ai.evaluation.name": result.name,
                     "gen_ai.evaluation.score.label": result.label}
            if result.error is not None:   # a grading error's kind: budget_exceeded, ...
                attrs["error.type"] = result.error
            self.score.record(result.score, attrs)
            counts = result.details.get("tool_selection_counts") if result.details else None
            if isinstance(counts, dict):
                self._selection(counts, {**base, "gen_ai.evaluation.name": result.name})
        self.runs.add(1, {**base, "tooleval.passed": report.passed})

    def _selection(self, counts: dict[str, Any], attrs: dict[str, Any]) -> None:
        """TP/FP/FN of an equal-function-set verdict, for a fleet-wide micro-average."""
        self.true_positives.add(int(counts.get("tp", 0)), attrs)
        self.false_positives.add(int(counts.get("fp", 0)), attrs)
        self.false_negatives.add(int(counts.get("fn", 0)), attrs)

    def drop(self, reason: str, n: int = 1) -> None:
        self.dropped.add(n, {"reason": reason})

    def guard(self, rule: str, tool: str) -> None:
        """A tool call that broke the guard's ``rule`` (``tooleval.guard.rule``)."""
        self.guard_violations.add(1, {"tooleval.guard.rule": rule, "gen_ai.tool.name": tool})
