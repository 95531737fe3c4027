"""``grade --format table``: the default, readable in a terminal and in a CI log.

The layout of ``demo/table.py`` extended: per run a header line, the tool sequence and one line
per grader (explanations wrapped, not cut: in a CI log they are the reason a gate failed); then
the aggregate, the input problems and a one-line result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from ..model import GradeResult, RunReport
from ..sessions.model import SessionReport
from .gates import aggregate_gates
from .spool import DEFAULT_SPOOL_BYTES
from .stream import ReportWriter
from .text import one_line, shorten

__all__ = ["TableWriter", "render_table"]

_WIDTH = 100
_INDENT = "    "
_MAX_TOOLS = 40
_MAX_PROBLEMS = 50
_STYLES = {"pass": "32;1", "fail": "31;1", "error": "35;1", "bold": "1", "dim": "2",
           "warn": "33"}


class _Paint:
    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, text: str, style: str) -> str:
        if not self.color or not text:
            return text
        return f"\x1b[{_STYLES[style]}m{text}\x1b[0m"

    def verdict(self, passed: bool) -> str:
        return self("PASS", "pass") if passed else self("FAIL", "fail")

    def label(self, label: str, width: int) -> str:
        text = f"{one_line(label).upper():{width}}"
        return self(text, label if label in ("pass", "fail", "error") else "warn")


def render_table(reports: Sequence[RunReport], aggregate: Mapping[str, Any], *, color: bool,
                 problems: Sequence[str] = ()) -> str:
    """The runs, the aggregate and the input problems as plain text (ANSI colour on request).

    Text from spans is escaped (:func:`text.one_line`), so no span can move the cursor or
    recolour the terminal, with or without ``color``.
    """
    paint = _Paint(color)
    runs = "".join(f"{_run_number(i, paint)}{_run_text(report, paint)}\n\n"
                   for i, report in enumerate(reports))
    failed = sum(1 for r in reports if not r.passed)
    return runs + _closing(len(reports), failed, aggregate, problems, paint)


class TableWriter(ReportWriter):
    """:func:`render_table`, written as the runs come (``outputs.stream``)."""

    def __init__(self, *, color: bool, memory_bytes: int = DEFAULT_SPOOL_BYTES) -> None:
        super().__init__(memory_bytes=memory_bytes)
        self.paint = _Paint(color)

    def part(self, report: RunReport, key: tuple[Any, ...]) -> str:
        return _run_text(report, self.paint)

    def write(self, out: TextIO, aggregate: Mapping[str, Any], *,
              problems: Sequence[str] = ()) -> None:
        out.writelines(f"{_run_number(i, self.paint)}{text}\n\n"
                       for i, (_key, text) in enumerate(self.spool))
        out.writelines(f"{self.paint(f'session {i + 1}', 'bold')}"
                       f"{_session_text(session, self.paint)}\n\n"
                       for i, session in enumerate(self.sessions or ()))
        out.writelines(_case_line(entry, self.paint) for entry in self.cases or ())
        out.write(_closing(self.runs, self.failed, aggregate, problems, self.paint))


def _closing(runs: int, failed: int, aggregate: Mapping[str, Any], problems: Sequence[str],
             paint: _Paint) -> str:
    """What follows the runs: the aggregate, the input problems and the result line."""
    lines = _aggregate_lines(aggregate, paint)
    if problems:
        lines.append("")
        lines.append(paint(f"input problems ({len(problems)}):", "warn"))
        lines.extend(f"{_INDENT}{one_line(p)}" for p in problems[:_MAX_PROBLEMS])
        if len(problems) > _MAX_PROBLEMS:
            lines.append(f"{_INDENT}… and {len(problems) - _MAX_PROBLEMS} more")
    lines.append("")
    lines.append(_result_line(runs, failed, aggregate, paint))
    return "\n".join(lines) + "\n"


def _case_line(entry: Mapping[str, Any], paint: _Paint) -> str:
    """One eval case: its status, its runs and each grader's worst score."""
    status = entry["status"]
    shown = (paint.verdict(status == "pass") if status != "missing"
             else paint("MISSING", "fail"))
    scores = "  ".join(f"{one_line(r['name'])}={r['score']:.2f}" for r in entry["results"])
    return (f"{paint('case ' + one_line(entry['id']), 'bold')}  {shown}  "
            f"runs={len(entry['runs'])}  {scores}".rstrip() + "\n")


def _run_number(i: int, paint: _Paint) -> str:
    return paint(f"run {i + 1}", "bold")


def _run_text(report: RunReport, paint: _Paint) -> str:
    """A run's lines, its header without the run's number (known only once runs are sorted)."""
    run = report.run
    calls = f"calls={len(run.calls)}"
    if run.pending_calls:
        calls += f" ({run.pending_calls} pending)"
    late = f"  late={run.late_spans}" if run.late_spans else ""
    agent = one_line(run.agent) if run.agent is not None else "(unnamed)"
    header = (f"  {paint.verdict(report.passed)}  "
              f"agent={paint(agent, 'bold')}  trace={run.trace_id_hex}  {calls}{late}  "
              f"score={report.score:.2f}")
    lines = [header]
    names = [one_line(c.name) + ("[pending]" if c.pending else "[error]" if c.error else "")
             for c in run.calls[:_MAX_TOOLS]]
    more = f" → … (+{len(run.calls) - _MAX_TOOLS} more)" if len(run.calls) > _MAX_TOOLS else ""
    tools = " → ".join(names) + more if names else "(no tool calls)"
    lines.extend(_wrapped(f"tools: {tools}", _INDENT, _INDENT + "       ",
                          lambda t: paint(t, "dim")))
    if not report.results:
        lines.append(f"{_INDENT}(no grader applies to this agent)")
    lines.extend(_result_lines(report.results, paint))
    return "\n".join(lines)


def _session_text(report: SessionReport, paint: _Paint) -> str:
    """A session's lines: its key, agent, runs and each session grader's verdict."""
    agent = one_line(report.agent) if report.agent is not None else "(unnamed)"
    dropped = f" ({report.dropped_calls} dropped)" if report.dropped_calls else ""
    if report.dropped_runs:
        dropped += f" ({report.dropped_runs} run(s) not kept)"
    header = (f"  {paint.verdict(report.passed)}  "
              f"{one_line(report.key.attribute)}={paint(one_line(report.key.value), 'bold')}  "
              f"agent={agent}  runs={len(report.runs)}  calls={report.tool_calls}{dropped}  "
              f"score={report.score:.2f}")
    return "\n".join([header, *_result_lines(report.results, paint)])


def _result_lines(results: Sequence[GradeResult], paint: _Paint) -> list[str]:
    lines: list[str] = []
    width = min(max((len(one_line(r.name)) for r in results), default=0), 30)
    for result in results:
        head = (f"{_INDENT}{paint.label(result.label, 5)} "
                f"{shorten(one_line(result.name), 30):<{width}}  {result.score:.2f}  ")
        hang = _INDENT + " " * (5 + 1 + width + 2 + 4 + 2)
        text = one_line(result.explanation) or "(no explanation)"
        body = _wrap(text, max(_WIDTH - len(hang), 40))
        lines.append(head + body[0])
        lines.extend(hang + part for part in body[1:])
    return lines


def _wrapped(text: str, first: str, rest: str, style: Callable[[str], str]) -> list[str]:
    parts = _wrap(text, _WIDTH - max(len(first), len(rest)))
    return [(first if n == 0 else rest) + style(part) for n, part in enumerate(parts)]


def _wrap(text: str, width: int) -> list[str]:
    """Greedy wrap at spaces (a word longer than a line is cut); a tenth of textwrap's cost,
    which shows with a hundred thousand runs."""
    lines = []
    while len(text) > width:
        cut = text.rfind(" ", 0, width + 1)
        if cut <= 0:
            cut = width
        lines.append(text[:cut].rstrip(" "))
        text = text[cut:].lstrip(" ")
    if text or not lines:
        lines.append(text)
    return lines


def _aggregate_lines(aggregate: Mapping[str, Any], paint: _Paint) -> list[str]:
    runs, passed = aggregate.get("runs", 0), aggregate.get("passed", 0)
    lines = [paint("aggregate", "bold") + f": {passed} of {runs} runs passed"]
    lines.extend(_grader_lines(aggregate.get("graders"), _INDENT, paint))
    groups = aggregate.get("groups")
    if isinstance(groups, Mapping) and groups:
        lines.append(paint(f"groups by {one_line(aggregate.get('group_by', '?'))}", "bold") + ":")
        for key, scope in groups.items():
            if not isinstance(scope, Mapping):
                continue
            lines.append(f"{_INDENT}{one_line(key)}: {scope.get('passed', 0)} of "
                         f"{scope.get('runs', 0)} runs passed")
            lines.extend(_grader_lines(scope.get("graders"), _INDENT * 2, paint))
    return lines


def _grader_lines(graders: Any, indent: str, paint: _Paint) -> list[str]:
    if not isinstance(graders, Mapping):
        return []
    width = min(max((len(one_line(n)) for n in graders), default=0), 30)
    lines = []
    for name, s in graders.items():
        if not isinstance(s, Mapping):
            continue
        mean = s.get("mean_score")
        mean_text = f"{mean:.2f}" if isinstance(mean, (int, float)) else "-"
        line = (f"{indent}{shorten(one_line(name), 30):<{width}}  passed {s.get('passed', 0)}"
                f"/{s.get('runs', 0)}  mean {mean_text}")
        selection = s.get("tool_selection")
        if isinstance(selection, Mapping):
            line += (f"  precision {selection.get('precision')}  recall "
                     f"{selection.get('recall')}  F1 {selection.get('f1')}")
        if "passed_aggregate" in s:
            line += "  aggregate " + paint.verdict(s.get("passed_aggregate") is True)
        lines.append(line)
    return lines


def _result_line(runs: int, failed_runs: int, aggregate: Mapping[str, Any],
                 paint: _Paint) -> str:
    if not runs:
        # Nothing graded is not a pass (``grade`` exits 2 on it unless --allow-empty).
        return f"{paint('NO RUNS', 'bold')}: no agent run was found; nothing was graded."
    failed_gates = sum(1 for gate in aggregate_gates(aggregate) if not gate.passed)
    parts = [f"{runs - failed_runs} of {runs} runs passed"]
    sessions = aggregate.get("sessions")
    failed_sessions = 0
    if isinstance(sessions, Mapping):
        failed_sessions = int(sessions.get("failed", 0))
        parts.append(f"{sessions.get('passed', 0)} of {sessions.get('sessions', 0)} "
                     "sessions passed")
    cases = aggregate.get("cases")
    failed_cases = 0
    if isinstance(cases, Mapping):
        missing = int(cases.get("missing", 0))
        failed_cases = int(cases.get("failed", 0)) + missing
        parts.append(f"{cases.get('passed', 0)} of {cases.get('cases', 0)} cases passed"
                     + (f" ({missing} missing)" if missing else ""))
    if failed_gates:
        parts.append(f"{failed_gates} aggregate gate(s) failed")
    ok = not failed_runs and not failed_gates and not failed_sessions and not failed_cases
    return f"{paint.verdict(ok)}: " + ", ".join(parts) + "."
