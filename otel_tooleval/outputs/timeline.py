"""The timeline of one run in the HTML report: one row per tool call, bars placed by start time
and duration, and one column per grader marking the calls that satisfied or broke its checks.

A call that failing graders list under ``details.violations`` gets a ``violation`` flag naming
them and a red edge (``data-violation`` on its row): the mark its exported span carries as
``tooleval.violation``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from ..model import AgentRun, GradeResult, ToolCall
from ..violations import flagged_calls
from .marks import BROKE, EXTRA, PARTIAL, SATISFIED, Mark, call_marks
from .text import fmt_duration, one_line

__all__ = ["MAX_ROWS", "Axis", "render_timeline"]

MAX_ROWS = 300          # calls drawn per run; the verdicts below still cover every call
_GLYPHS = {SATISFIED: "✓", EXTRA: "+", PARTIAL: "◐", BROKE: "✗"}
_WORDS = {SATISFIED: "satisfied", EXTRA: "extra, allowed (the grader passed)",
          PARTIAL: "counted, but the check failed", BROKE: "broke"}
# A row's bar takes its worst mark; an allowed extra call is neutral, below a satisfied check.
_RANK = {None: 0, EXTRA: 1, SATISFIED: 2, PARTIAL: 3, BROKE: 4}


def _h(value: object) -> str:
    return escape(one_line(value), quote=True)


@dataclass(frozen=True, slots=True)
class Axis:
    """The run's time span in nanoseconds, mapped to percents of the track's width."""

    start: int
    end: int

    @classmethod
    def of(cls, run: AgentRun, calls: Sequence[ToolCall]) -> Axis:
        """From the root's start to the last call's end; a call still open when the trace was
        read stretches the axis to the root's end, where it was cut off."""
        starts = [c.start_ns for c in calls]
        start = min([run.start_ns, *starts]) if starts else run.start_ns
        ends = [c.end_ns for c in calls if c.end_ns is not None]
        ends.extend(starts)
        if run.end_ns is not None and (not ends or any(c.end_ns is None for c in calls)):
            ends.append(run.end_ns)
        end = max(ends, default=start)
        return cls(start, max(end, start + 1))

    @property
    def span(self) -> int:
        return self.end - self.start

    def pct(self, ns: int) -> float:
        return min(max((ns - self.start) / self.span * 100.0, 0.0), 100.0)

    def ticks(self, target: int = 6) -> list[tuple[float, str]]:
        """Round steps (1, 2 or 5 times a power of ten) from 0 to the end of the axis."""
        raw = self.span / target
        magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
        step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
        count = int(self.span // step)
        return [(i * step / self.span * 100.0, "0" if i == 0 else fmt_duration(i * step))
                for i in range(count + 1)]


def render_timeline(run: AgentRun, results: Sequence[GradeResult]) -> str:
    """The timeline grid of ``run`` with a mark column per result."""
    calls = run.calls[:MAX_ROWS]
    axis = Axis.of(run, calls)
    marks = [call_marks(r, len(run.calls)) for r in results]
    flagged = flagged_calls(results)
    out = [(f'<div class="tl" style="--g:{len(results)}" role="table" '
           f'aria-label="tool calls of this run">')]
    out.append('<div class="tl-row tl-head" role="row"><div class="lab" role="columnheader">'
               'tool call</div><div class="axis" role="columnheader">')
    out.extend(f'<span class="tick{" end" if p > 94 else ""}" style="left:{p:.3f}%">'
               f"{escape(label)}</span>" for p, label in axis.ticks())
    out.append("</div>")
    for g, result in enumerate(results):
        out.append(f'<div class="gh" data-g="{g}" role="columnheader" title="{_h(result.name)}">'
                   f"<span>{_h(result.name)}</span></div>")
    out.append('</div><div class="tl-body">')
    out.append(_grid(run, axis, calls))
    if not calls:
        out.append('<p class="empty">No tool calls in this run.</p>')
    for call in calls:
        out.append(_row(call, axis, results, marks, flagged.get(call.index, ())))
    if len(run.calls) > len(calls):
        out.append(f'<p class="more">… and {len(run.calls) - len(calls)} more calls not drawn '
                   f"(the verdicts below cover all {len(run.calls)}).</p>")
    out.append("</div></div>")
    return "".join(out)


def _grid(run: AgentRun, axis: Axis, calls: Sequence[ToolCall]) -> str:
    lines = [f'<span class="gl" style="left:{p:.3f}%"></span>' for p, _ in axis.ticks()]
    if run.end_ns is not None and any(c.pending for c in calls):
        lines.append(f'<span class="gl root-end" style="left:{axis.pct(run.end_ns):.3f}%" '
                     f'title="the root span ended here"></span>')
    return f'<div class="tl-grid" aria-hidden="true">{"".join(lines)}</div>'


def _row(call: ToolCall, axis: Axis, results: Sequence[GradeResult],
         marks: Sequence[dict[int, Mark]], violation: Sequence[str] = ()) -> str:
    worst: str | None = None
    cells = []
    marked = []
    for g, (result, by_call) in enumerate(zip(results, marks)):
        mark = by_call.get(call.index)
        if mark is None:
            cells.append(f'<span class="m" data-g="{g}" role="cell"></span>')
            continue
        marked.append(str(g))
        if _RANK[mark.verdict] > _RANK[worst]:
            worst = mark.verdict
        why = "\n".join(f"{_GLYPHS[v]} {_WORDS[v]}: {one_line(r)}" for v, r in mark.reasons)
        cells.append(f'<span class="m m-{mark.verdict}" data-g="{g}" role="cell" '
                     f'title="{_h(result.name)}\n{escape(why, quote=True)}">'
                     f"{_GLYPHS[mark.verdict]}</span>")
    left = axis.pct(call.start_ns)
    end = axis.end if call.end_ns is None else call.end_ns
    width = max(axis.pct(end) - left, 0.0)
    classes = ["bar", f"bar-{worst or 'plain'}"]
    facts = [f"#{call.index} {one_line(call.name)}", f"step {call.step}",
             f"starts at {fmt_duration(call.start_ns - axis.start)}"]
    if call.end_ns is None:
        classes.append("open")
        duration = "still open"
        facts.append("pending: still open when the trace was read")
    else:
        duration = fmt_duration(call.end_ns - call.start_ns)
        facts.append(f"took {duration}")
        if call.pending:
            classes.append("late")
            facts.append("pending: ended after its root span ended")
    if call.error is not None:
        classes.append("err")
        facts.append("ended with an error")
    flags = ""
    if call.pending:
        flags += '<span class="flag f-pending">pending</span>'
    if call.error is not None:
        flags += '<span class="flag f-error">error</span>'
    row_data = ""
    if violation:
        names = ", ".join(violation)
        flags += (f'<span class="flag f-violation" title="{_h("named by " + names)}">'
                  "violation</span>")
        row_data = f' data-violation="{_h(names)}"'
    side = (f'left:calc({left + width:.3f}% + 6px)' if left + width < 82
            else f'right:calc({100 - left:.3f}% + 6px)')
    return (
        f'<div class="tl-row" role="row" data-marks="{" ".join(marked)}"{row_data}>'
        f'<div class="lab" role="cell"><span class="idx">#{call.index}</span>'
        f'<span class="tool" title="{_h(call.name)}">{_h(call.name)}</span>'
        f'<span class="step">s{call.step}</span>{flags}</div>'
        f'<div class="track" role="cell"><span class="{" ".join(classes)}" '
        f'style="left:{left:.3f}%;width:{width:.3f}%" title="{_h(" · ".join(facts))}"></span>'
        f'<span class="dur" style="{side}">{escape(duration)}</span></div>'
        + "".join(cells) + "</div>")
