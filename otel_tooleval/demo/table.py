"""A plain-text table of runs and verdicts for terminals."""

from __future__ import annotations

from collections.abc import Sequence

from ..model import RunReport

__all__ = ["render_reports"]


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render_reports(reports: Sequence[RunReport], notes: Sequence[str] = ()) -> str:
    """One block per run: header line, then one line per grader with its verdict."""
    lines: list[str] = []
    passed = sum(r.passed for r in reports)
    for i, report in enumerate(reports):
        run = report.run
        note = f"  ({notes[i]})" if i < len(notes) and notes[i] else ""
        verdict = "PASS" if report.passed else "FAIL"
        lines.append(f"run {i + 1}  {verdict}  agent={run.agent}  trace={run.trace_id_hex}  "
                     f"calls={len(run.calls)}  score={report.score:.2f}{note}")
        lines.append("    tools: " + _cut(" → ".join(c.name for c in run.calls) or "(none)", 100))
        width = max((len(r.name) for r in report.results), default=0)
        for result in report.results:
            lines.append(f"    {result.label.upper():5} {result.name:<{width}}  "
                         f"{result.score:.2f}  {_cut(result.explanation, 110)}")
        lines.append("")
    lines.append(f"{passed} of {len(reports)} runs passed.")
    return "\n".join(lines) + "\n"
