"""``grade --format html``: one self-contained page, the summary first, then every run with the
timeline of its tool calls and its verdicts.

Inline CSS and JS only (``report.css``, ``report.js`` beside this module), no external asset and
a Content-Security-Policy that forbids fetching any, so the file opens offline, as a CI artifact.
Every value from spans is escaped; argument and result values are never shown.
"""

from __future__ import annotations

import heapq
import io
import math
from collections.abc import Mapping, Sequence
from html import escape
from importlib import resources
from typing import Any, TextIO

from .._version import __version__
from ..model import GradeResult, RunReport
from ..sessions.model import SessionReport
from .gates import aggregate_gates
from .spool import DEFAULT_SPOOL_BYTES
from .stream import ReportWriter
from .text import fmt_duration, one_line, readable
from .timeline import render_timeline

__all__ = ["HtmlWriter", "render_html"]

_OPEN_ALL_UP_TO = 12     # with more runs than this, only failing runs start expanded
# A page is for reading: past these, failing runs are kept first (every run is in JSON/JUnit).
MAX_RUN_SECTIONS = 500
MAX_INDEX_ROWS = 5_000
_MAX_PROBLEMS = 200
_CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
        "img-src data:; base-uri 'none'; form-action 'none'")


def _h(value: object) -> str:
    return escape(one_line(value), quote=True)


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _badge(label: str) -> str:
    kind = label if label in ("pass", "fail", "error") else (
        "fail" if label == "missing" else "other")
    return f'<span class="badge b-{kind}">{_h(label.upper())}</span>'


def render_html(reports: Sequence[RunReport], aggregate: Mapping[str, Any], *,
                problems: Sequence[str] = (), title: str = "otel-tooleval report",
                cases: list[dict[str, Any]] | None = None) -> str:
    """The whole report as one HTML document; with ``cases`` (``CaseTally.result``), its runs
    grouped by case (``HtmlWriter``)."""
    if cases is not None:
        writer = HtmlWriter(title=title)
        writer.expect_cases()
        try:
            for report in reports:
                writer.add(report)
            writer.add_cases(cases)
            out = io.StringIO()
            writer.write(out, aggregate, problems=problems)
        finally:
            writer.close()
        return out.getvalue()
    failed_runs = sum(1 for r in reports if not r.passed)
    shown = _pick(reports, MAX_RUN_SECTIONS)
    types = {r.name: r.type for report in reports for r in report.results}
    open_all = len(reports) <= _OPEN_ALL_UP_TO
    sections = [_run(i, reports[i].passed, _run_rest(reports[i]), open_all)
                for i in sorted(shown)]
    index = _run_index(reports, shown)
    return _page(len(reports), failed_runs, aggregate, types, problems, title, index, sections)


class HtmlWriter(ReportWriter):
    """:func:`render_html`, written as the runs come (``outputs.stream``).

    The page lists at most ``MAX_INDEX_ROWS`` runs and draws at most ``MAX_RUN_SECTIONS``, so
    it is built in memory; each run's index row is spooled, and the sections are rendered only
    for the runs that can still be among the first ``MAX_RUN_SECTIONS`` failing or passing
    runs (two bounded heaps).
    """

    def __init__(self, *, title: str = "otel-tooleval report",
                 memory_bytes: int = DEFAULT_SPOOL_BYTES) -> None:
        super().__init__(memory_bytes=memory_bytes)
        self.title = title
        self.types: dict[str, str] = {}
        # the first MAX_RUN_SECTIONS runs by key, failing and passing: (reversed key, section)
        self.failing: list[tuple[_Reversed, str]] = []
        self.passing: list[tuple[_Reversed, str]] = []
        # with cases: each run's case id by its key (None: no case)
        self.case_of: dict[tuple[Any, ...], str | None] = {}

    def part(self, report: RunReport, key: tuple[Any, ...]) -> str:
        if self.cases is not None:
            self.case_of[key] = report.case
        for result in report.results:
            self.types[result.name] = result.type
        heap = self.passing if report.passed else self.failing
        if len(heap) < MAX_RUN_SECTIONS:
            heapq.heappush(heap, (_Reversed(key), _run_rest(report)))
        elif key < heap[0][0].key:
            heapq.heapreplace(heap, (_Reversed(key), _run_rest(report)))
        return ("1" if report.passed else "0") + _index_rest(report)

    def write(self, out: TextIO, aggregate: Mapping[str, Any], *,
              problems: Sequence[str] = ()) -> None:
        total, failed = self.runs, self.failed
        failing = sorted((k.key, text) for k, text in self.failing)
        passing = sorted((k.key, text) for k, text in self.passing)
        drawn_failing = min(failed, MAX_RUN_SECTIONS)
        drawn = dict(failing[:drawn_failing] + passing[:MAX_RUN_SECTIONS - drawn_failing])
        listed_failing = min(failed, MAX_INDEX_ROWS)
        seen_failing = seen_passing = 0
        rows: list[str] = []
        sections: list[str] = []
        # with cases: each case's index rows and sections (None: the runs with no case)
        rows_by: dict[str | None, list[str]] = {}
        sections_by: dict[str | None, list[str]] = {}
        open_all = total <= _OPEN_ALL_UP_TO
        for i, (key, text) in enumerate(self.spool):
            passed = text[0] == "1"
            if passed:
                seen_passing += 1
                listed = seen_passing <= MAX_INDEX_ROWS - listed_failing
            else:
                seen_failing += 1
                listed = seen_failing <= MAX_INDEX_ROWS
            section = drawn.get(key)
            case = self.case_of.get(key)
            if section is not None:
                sections_by.setdefault(case, sections).append(_run(i, passed, section, open_all))
            if listed:
                rows_by.setdefault(case, rows).append(
                    _index_row(i, passed, text[1:], section is not None))
            if self.cases is not None:    # each case its own lists, made as its first run comes
                rows, sections = [], []
        drawn_count = len(drawn)
        if self.cases is not None:
            index = _case_table(self.cases, rows_by)
            sections = _case_sections(self.cases, rows_by, sections_by, total)
        else:
            index = _index_table(total, rows)
        if self.sessions is not None:
            index = _session_table(self.sessions) + index
        out.write(_page(total, failed, aggregate, self.types, problems, self.title, index,
                        sections, drawn_count))


class _Reversed:
    """A key that sorts the other way: the heaps above keep their largest key on top."""

    __slots__ = ("key",)

    def __init__(self, key: tuple[Any, ...]) -> None:
        self.key = key

    def __lt__(self, other: _Reversed) -> bool:
        return bool(other.key < self.key)


def _page(total: int, failed_runs: int, aggregate: Mapping[str, Any], types: Mapping[str, str],
          problems: Sequence[str], title: str, index: str, sections: Sequence[str],
          drawn: int | None = None) -> str:
    gates = aggregate_gates(aggregate)
    failed_gates = sum(1 for g in gates if not g.passed)
    passed = not failed_runs and not failed_gates
    # No run graded is not a pass: the badge says so (``grade`` exits 2 on it by default).
    verdict = "no runs" if not total else "pass" if passed else "fail"
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_h(title)}: {verdict.upper()}</title>",
        f"<style>{_asset('report.css')}</style></head>",
        f'<body class="overall-{verdict.replace(" ", "-")}"><header class="top">',
        f'<h1>{_h(title)}</h1>{_badge(verdict)}',
        (f'<p class="sub">{total} run(s), {failed_runs} failed'
        f'{f", {failed_gates} aggregate gate(s) failed" if failed_gates else ""}</p></header>'),
        '<main>',
        _summary(total, types, aggregate, gates),
        _problems(problems),
        index,
        ('<div class="controls"><button type="button" data-action="failing" aria-pressed="false">'
        'Failing runs only</button><button type="button" data-action="expand">Expand all'
        '</button><button type="button" data-action="collapse">Collapse all</button>'
        f'{_legend()}</div>'),
        '<section class="runs" aria-label="runs">',
    ]
    drawn = len(sections) if drawn is None else drawn
    if drawn < total:
        parts.append(f'<p class="more">Timelines of {drawn} of {total} runs, failing '
                     "runs first; the JSON and JUnit outputs hold every run.</p>")
    parts.extend(sections)
    parts.append("</section></main>")
    parts.append(f'<footer>otel-tooleval {escape(__version__)}</footer>')
    parts.append(f"<script>{_asset('report.js')}</script></body></html>\n")
    return "".join(parts)


def _summary(total: int, types: Mapping[str, str], aggregate: Mapping[str, Any],
             gates: Sequence[Any]) -> str:
    runs = aggregate.get("runs", total)
    good = aggregate.get("passed", 0)
    bad = aggregate.get("failed", 0)
    held = sum(1 for g in gates if g.passed)
    tiles = [("Runs", runs, ""), ("Passed", good, "t-pass"),
             ("Failed", bad, "t-fail" if bad else "")]
    if gates:
        tiles.append(("Aggregate gates", f"{held} / {len(gates)}",
                      "t-pass" if held == len(gates) else "t-fail"))
    out = ['<section class="summary" aria-label="summary"><div class="tiles">']
    out.extend(f'<div class="tile {cls}"><span class="n">{_h(value)}</span>'
               f'<span class="k">{label}</span></div>' for label, value, cls in tiles)
    out.append("</div>")
    graders = aggregate.get("graders")
    if isinstance(graders, Mapping) and graders:
        out.append(_grader_table("Graders", graders, types))
    groups = aggregate.get("groups")
    if isinstance(groups, Mapping):
        by = aggregate.get("group_by", "group")
        for key, scope in groups.items():
            if isinstance(scope, Mapping) and isinstance(scope.get("graders"), Mapping):
                caption = (f"Group {one_line(by)} = {one_line(key)}: {scope.get('passed', 0)} of "
                           f"{scope.get('runs', 0)} runs passed")
                out.append(_grader_table(caption, scope["graders"], types))
    out.append("</section>")
    return "".join(out)


def _grader_table(caption: str, graders: Mapping[str, Any], types: Mapping[str, str]) -> str:
    rows = []
    for name, s in graders.items():
        if not isinstance(s, Mapping):
            continue
        runs, good = s.get("runs", 0), s.get("passed", 0)
        mean = s.get("mean_score")
        sel = s.get("tool_selection")
        sel = sel if isinstance(sel, Mapping) else {}
        gate = ""
        if "passed_aggregate" in s:
            gate = _badge("pass" if s["passed_aggregate"] is True else "fail")
        state = "pass" if good == runs else "fail"
        rows.append(
            f"<tr><th scope=row>{_h(name)}</th><td class=muted>{_h(types.get(name, ''))}</td>"
            f'<td class="num c-{state}">{_h(good)} / {_h(runs)}</td>'
            f'<td class="num">{_meter(mean)}</td>'
            + "".join(f'<td class="num">{_h(sel.get(k, ""))}</td>'
                      for k in ("precision", "recall", "f1"))
            + f"<td>{gate}</td></tr>")
    head = "".join(f"<th scope=col{' class=num' if num else ''}>{name}</th>" for name, num in (
        ("grader", False), ("type", False), ("runs passed", True), ("mean score", True),
        ("precision", True), ("recall", True), ("F1", True), ("aggregate gate", False)))
    return (f'<table class="graders"><caption>{_h(caption)}</caption><thead><tr>{head}'
            "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def _meter(score: object) -> str:
    if not isinstance(score, (int, float)) or isinstance(score, bool) or math.isnan(score):
        return '<span class="muted">–</span>'
    width = min(max(float(score), 0.0), 1.0) * 100
    return (f'<span class="meter" aria-hidden="true"><span style="width:{width:.1f}%"></span>'
            f"</span>{float(score):.2f}")


def _problems(problems: Sequence[str]) -> str:
    if not problems:
        return ""
    items = "".join(f"<li>{escape(readable(p))}</li>" for p in problems[:_MAX_PROBLEMS])
    more = (f"<li>… and {len(problems) - _MAX_PROBLEMS} more</li>"
            if len(problems) > _MAX_PROBLEMS else "")
    return (f'<section class="problems" aria-label="input problems"><h2>Input problems '
            f"({len(problems)})</h2><p>These parts of the input could not be read; the rest was "
            f"graded.</p><ul>{items}{more}</ul></section>")


def _agent(report: RunReport) -> str:
    run = report.run
    return run.agent if run.agent is not None else (run.root_name or "(unnamed)")


def _pick(reports: Sequence[RunReport], limit: int) -> set[int]:
    """Positions of at most ``limit`` runs, failing runs first, each group in input order."""
    if len(reports) <= limit:
        return set(range(len(reports)))
    failing = [i for i, r in enumerate(reports) if not r.passed]
    passing = [i for i, r in enumerate(reports) if r.passed]
    return set((failing + passing)[:limit])


def _run_index(reports: Sequence[RunReport], shown: set[int]) -> str:
    listed = _pick(reports, MAX_INDEX_ROWS)
    rows = [_index_row(i, reports[i].passed, _index_rest(reports[i]), i in shown)
            for i in sorted(listed)]
    return _index_table(len(reports), rows)


def _index_row(i: int, passed: bool, rest: str, linked: bool) -> str:
    number = f'<a href="#run-{i + 1}">{i + 1}</a>' if linked else str(i + 1)
    return f'<tr class="r-{"pass" if passed else "fail"}"><td class=num>{number}</td>{rest}'


def _index_rest(report: RunReport) -> str:
    """A run's row of the index after its number (known only once runs are sorted)."""
    run = report.run
    failed = ", ".join(one_line(n) for n in report.failed)
    return (f"<td>{_badge('pass' if report.passed else 'fail')}</td><td>{_h(_agent(report))}</td>"
            f"<td class=mono>{run.trace_id_hex}</td><td class=num>{len(run.calls)}</td>"
            f"<td class=num>{_meter(report.score)}</td><td>{escape(failed)}</td></tr>")


def _index_table(total: int, rows: Sequence[str]) -> str:
    if not total:
        return '<p class="empty">No agent runs were found in the input.</p>'
    head = "".join(f"<th scope=col{' class=num' if num else ''}>{name}</th>" for name, num in (
        ("#", True), ("verdict", False), ("agent", False), ("trace id", False), ("calls", True),
        ("score", True), ("failed graders", False)))
    caption = "Runs" if len(rows) == total else (
        f"Runs: {len(rows)} of {total} listed, failing runs first")
    return (f'<table class="index"><caption>{caption}</caption><thead><tr>{head}</tr></thead>'
            "<tbody>" + "".join(rows) + "</tbody></table>")


def _case_table(cases: Sequence[Mapping[str, Any]],
                rows_by: Mapping[str | None, Sequence[str]]) -> str:
    """The cases, one row each: status, id (a link to its section), match, runs, each grader's
    worst verdict over the case's runs; then the runs with no case."""
    head = "".join(f"<th scope=col{' class=num' if num else ''}>{name}</th>" for name, num in (
        ("status", False), ("case", False), ("match", False), ("runs", True),
        ("graders (worst run)", False)))
    rows = []
    for n, entry in enumerate(cases[:MAX_INDEX_ROWS], 1):
        status = str(entry.get("status", ""))
        verdicts = "".join(f"<li>{_badge(str(r.get('label', '')))} {_h(r.get('name'))} "
                           f"{_meter(r.get('score'))}</li>" for r in entry.get("results", ()))
        rows.append(f'<tr class="r-{"pass" if status == "pass" else "fail"}">'
                    f"<td>{_badge(status)}</td><td><a href=\"#case-{n}\">{_h(entry['id'])}</a>"
                    f"</td><td class=muted>{_h(entry.get('match', ''))}</td>"
                    f"<td class=num>{len(entry.get('runs', ()))}</td>"
                    f"<td><ul>{verdicts}</ul></td></tr>")
    loose = len(rows_by.get(None, ()))
    if loose:
        rows.append(f'<tr class="r-other"><td>{_badge("no case")}</td><td><a href="#case-none">'
                    f"runs with no case</a></td><td class=muted>matched no case: the shared "
                    f"graders only</td><td class=num>{loose}</td><td></td></tr>")
    caption = "Cases" if len(cases) <= MAX_INDEX_ROWS else (
        f"Cases: {MAX_INDEX_ROWS} of {len(cases)} listed")
    return (f'<table class="index cases"><caption>{caption}</caption><thead><tr>{head}</tr>'
            "</thead><tbody>" + "".join(rows) + "</tbody></table>")


def _case_sections(cases: Sequence[Mapping[str, Any]],
                   rows_by: Mapping[str | None, Sequence[str]],
                   sections_by: Mapping[str | None, Sequence[str]], total: int) -> list[str]:
    """A section per case (its status, match, per-grader verdicts, its runs), then one for the
    runs with no case."""
    out = []
    for n, entry in enumerate(cases, 1):
        ident, status = entry["id"], str(entry.get("status", ""))
        results = entry.get("results", ())
        verdicts = "".join(
            f'<li class="v v-{_h(r.get("label", ""))}">{_badge(str(r.get("label", "")))}'
            f'<span class="vname">{_h(r.get("name"))}</span>'
            f'<span class="vscore">{_meter(r.get("score"))}</span></li>' for r in results)
        body = (f'<ol class="verdicts">{verdicts}</ol>' if verdicts else "")
        if status == "missing":
            body = '<p class="empty">No run matched this case.</p>'
        runs = rows_by.get(ident, ())
        out.append(f'<section class="case c-{_h(status)}" id="case-{n}" aria-label="case">'
                   f"<h2>{_badge(status)} Case {_h(ident)}</h2>"
                   f'<p class="muted">match: {_h(entry.get("match", ""))}; '
                   f"{len(entry.get('runs', ()))} run(s)</p>{body}"
                   + (_index_table(len(runs), runs) if runs else "")
                   + "".join(sections_by.get(ident, ())) + "</section>")
    loose = rows_by.get(None, ())
    if loose or sections_by.get(None):
        out.append('<section class="case c-none" id="case-none" aria-label="case">'
                   f"<h2>{_badge('no case')} Runs with no case</h2>"
                   '<p class="muted">These runs matched no case: the shared graders graded '
                   "them.</p>" + _index_table(len(loose), loose)
                   + "".join(sections_by.get(None, ())) + "</section>")
    return out


def _session_table(sessions: Sequence[SessionReport]) -> str:
    """The sessions, one row each, with every session grader's verdict and explanation."""
    if not sessions:
        return '<p class="empty">No sessions were found in the input.</p>'
    head = "".join(f"<th scope=col>{name}</th>" for name in (
        "verdict", "session", "agent", "runs", "calls", "score", "graders"))
    rows = []
    for report in sessions[:MAX_INDEX_ROWS]:
        verdicts = "".join(
            f"<li>{_badge(r.label)} {_h(r.name)}: {_h(r.explanation)}</li>" for r in report.results)
        rows.append(
            f'<tr class="r-{"pass" if report.passed else "fail"}">'
            f"<td>{_badge('pass' if report.passed else 'fail')}</td>"
            f"<td class=mono>{_h(report.key.attribute)}={_h(report.key.value)}</td>"
            f"<td>{_h(report.agent or '(unnamed)')}</td><td class=num>{len(report.runs)}</td>"
            f"<td class=num>{report.tool_calls}</td><td class=num>{_meter(report.score)}</td>"
            f"<td><ul>{verdicts}</ul></td></tr>")
    caption = "Sessions" if len(sessions) <= MAX_INDEX_ROWS else (
        f"Sessions: {MAX_INDEX_ROWS} of {len(sessions)} listed")
    return (f'<table class="index sessions"><caption>{caption}</caption><thead><tr>{head}'
            "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def _legend() -> str:
    return ('<p class="legend"><span class="m m-satisfied">✓</span> satisfied a check '
            '<span class="m m-partial">◐</span> counted, but the check failed '
            '<span class="m m-extra">+</span> extra, allowed by a passing grader '
            '<span class="m m-broke">✗</span> broke a check '
            '<span class="flag f-violation">violation</span> a call a failing grader names '
            '(tooleval.violation) '
            '<span class="lg-bar bar-plain late"></span> pending</p>')


def _run(i: int, passed: bool, rest: str, open_all: bool) -> str:
    state = "pass" if passed else "fail"
    return (f'<details class="run r-{state}" id="run-{i + 1}"'
            f'{" open" if open_all or not passed else ""}>'
            f'<summary>{_badge(state)}<span class="rn">Run {i + 1}</span>{rest}')


def _run_rest(report: RunReport) -> str:
    """A run's section after its number (known only once runs are sorted)."""
    run = report.run
    chips = [f"{len(run.calls)} call{'s' if len(run.calls) != 1 else ''}"]
    if run.pending_calls:
        chips.append(f"{run.pending_calls} pending")
    if run.late_spans:
        chips.append(f"{run.late_spans} late span(s)")
    if run.dropped_calls:
        chips.append(f"{run.dropped_calls} dropped")
    if run.end_ns is not None:
        chips.append(fmt_duration(run.end_ns - run.start_ns))
    chips.append(f"score {report.score:.2f}")
    reading = run.reading
    chips.append(f"read from {reading.source}: requested {reading.requested}, executed "
                 f"{reading.executed}, matched {reading.matched}")
    if reading.unrequested:
        chips.append(f"{len(reading.unrequested)} unrequested: "
                     + ", ".join(n.name for n in reading.unrequested[:5]))
    if reading.unexecuted:
        chips.append(f"{len(reading.unexecuted)} unexecuted: "
                     + ", ".join(n.name for n in reading.unexecuted[:5]))
    return (
        f'<span class="agent">{_h(_agent(report))}</span>'
        f'<span class="mono trace" title="trace id / root span id">{run.trace_id_hex}'
        f'<span class="muted"> / {run.root_span_id_hex}</span></span>'
        + "".join(f'<span class="chip">{escape(c)}</span>' for c in chips)
        + "</summary>"
        + render_timeline(run, report.results)
        + _verdicts(report.results)
        + "</details>")


def _verdicts(results: Sequence[GradeResult]) -> str:
    if not results:
        return '<p class="empty">No grader applies to this agent.</p>'
    items = []
    for g, r in enumerate(results):
        items.append(
            f'<li class="v v-{_h(r.label)}" data-g="{g}">{_badge(r.label)}'
            f'<span class="vname">{_h(r.name)}</span><span class="vtype">{_h(r.type)}</span>'
            f'<span class="vscore">{_meter(r.score)}</span>'
            f'<p class="expl">{escape(readable(r.explanation))}</p>{_checks(r)}</li>')
    return f'<ol class="verdicts">{"".join(items)}</ol>'


def _checks(result: GradeResult) -> str:
    """The per-check lines some families report: ``checks[].message`` and function-set
    ``expectations``, each with its own verdict."""
    details = result.details if isinstance(result.details, Mapping) else {}
    lines: list[tuple[bool, str]] = []
    checks = details.get("checks")
    if isinstance(checks, list):
        lines.extend((c["passed"], c["message"]) for c in checks
                     if isinstance(c, Mapping) and isinstance(c.get("passed"), bool)
                     and isinstance(c.get("message"), str))
    expectations = details.get("expectations")
    if isinstance(expectations, list):
        lines.extend((e["passed"], (f"{e.get('target')} {e.get('op')} {e.get('value')} "
                                   f"(actual {e.get('actual')})"))
                     for e in expectations
                     if isinstance(e, Mapping) and isinstance(e.get("passed"), bool))
    if len(lines) < 2:      # one check says no more than the explanation
        return ""
    return '<ul class="checks">' + "".join(
        f'<li class="{"ok" if ok else "ko"}"><span aria-hidden="true">{"✓" if ok else "✗"}'
        f"</span> {escape(readable(text))}</li>" for ok, text in lines) + "</ul>"
