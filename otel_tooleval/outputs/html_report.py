"""``grade --format html``: one self-contained page, the summary first, then every run with the
timeline of its tool calls and its verdicts.

Inline CSS and JS only (``report.css``, ``report.js`` beside this module), no external asset and
a Content-Security-Policy that forbids fetching any, so the file opens offline, as a CI artifact.
Every value from spans is escaped; argument and result values are never shown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from importlib import resources
from typing import Any

from .._version import __version__
from ..model import GradeResult, RunReport
from .gates import aggregate_gates
from .text import fmt_duration, one_line, readable
from .timeline import render_timeline

__all__ = ["render_html"]

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
    kind = label if label in ("pass", "fail", "error") else "other"
    return f'<span class="badge b-{kind}">{_h(label.upper())}</span>'


def render_html(reports: Sequence[RunReport], aggregate: Mapping[str, Any], *,
                problems: Sequence[str] = (), title: str = "otel-tooleval report") -> str:
    """The whole report as one HTML document."""
    gates = aggregate_gates(aggregate)
    failed_runs = sum(1 for r in reports if not r.passed)
    failed_gates = sum(1 for g in gates if not g.passed)
    passed = not failed_runs and not failed_gates
    # No run graded is not a pass: the badge says so (``grade`` exits 2 on it by default).
    verdict = "no runs" if not reports else "pass" if passed else "fail"
    shown = _pick(reports, MAX_RUN_SECTIONS)
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_h(title)}: {verdict.upper()}</title>",
        f"<style>{_asset('report.css')}</style></head>",
        f'<body class="overall-{verdict.replace(" ", "-")}"><header class="top">',
        f'<h1>{_h(title)}</h1>{_badge(verdict)}',
        (f'<p class="sub">{len(reports)} run(s), {failed_runs} failed'
        f'{f", {failed_gates} aggregate gate(s) failed" if failed_gates else ""}</p></header>'),
        '<main>',
        _summary(reports, aggregate, gates),
        _problems(problems),
        _run_index(reports, shown),
        ('<div class="controls"><button type="button" data-action="failing" aria-pressed="false">'
        'Failing runs only</button><button type="button" data-action="expand">Expand all'
        '</button><button type="button" data-action="collapse">Collapse all</button>'
        f'{_legend()}</div>'),
        '<section class="runs" aria-label="runs">',
    ]
    open_all = len(reports) <= _OPEN_ALL_UP_TO
    if len(shown) < len(reports):
        parts.append(f'<p class="more">Timelines of {len(shown)} of {len(reports)} runs, failing '
                     "runs first; the JSON and JUnit outputs hold every run.</p>")
    for i in sorted(shown):
        parts.append(_run(i, reports[i], open_all or not reports[i].passed))
    parts.append("</section></main>")
    parts.append(f'<footer>otel-tooleval {escape(__version__)}</footer>')
    parts.append(f"<script>{_asset('report.js')}</script></body></html>\n")
    return "".join(parts)


def _summary(reports: Sequence[RunReport], aggregate: Mapping[str, Any],
             gates: Sequence[Any]) -> str:
    runs = aggregate.get("runs", len(reports))
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
    types = {r.name: r.type for report in reports for r in report.results}
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
    if not reports:
        return '<p class="empty">No agent runs were found in the input.</p>'
    rows = []
    listed = _pick(reports, MAX_INDEX_ROWS)
    for i in sorted(listed):
        report = reports[i]
        run = report.run
        failed = ", ".join(one_line(n) for n in report.failed)
        number = f'<a href="#run-{i + 1}">{i + 1}</a>' if i in shown else str(i + 1)
        rows.append(
            f'<tr class="r-{"pass" if report.passed else "fail"}"><td class=num>{number}</td>'
            f"<td>{_badge('pass' if report.passed else 'fail')}</td><td>{_h(_agent(report))}</td>"
            f"<td class=mono>{run.trace_id_hex}</td><td class=num>{len(run.calls)}</td>"
            f"<td class=num>{_meter(report.score)}</td><td>{escape(failed)}</td></tr>")
    head = "".join(f"<th scope=col{' class=num' if num else ''}>{name}</th>" for name, num in (
        ("#", True), ("verdict", False), ("agent", False), ("trace id", False), ("calls", True),
        ("score", True), ("failed graders", False)))
    caption = "Runs" if len(listed) == len(reports) else (
        f"Runs: {len(listed)} of {len(reports)} listed, failing runs first")
    return (f'<table class="index"><caption>{caption}</caption><thead><tr>{head}</tr></thead>'
            "<tbody>" + "".join(rows) + "</tbody></table>")


def _legend() -> str:
    return ('<p class="legend"><span class="m m-satisfied">✓</span> satisfied a check '
            '<span class="m m-partial">◐</span> counted, but the check failed '
            '<span class="m m-extra">+</span> extra, allowed by a passing grader '
            '<span class="m m-broke">✗</span> broke a check '
            '<span class="lg-bar bar-plain late"></span> pending</p>')


def _run(i: int, report: RunReport, expanded: bool) -> str:
    run = report.run
    state = "pass" if report.passed else "fail"
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
    return (
        f'<details class="run r-{state}" id="run-{i + 1}"{" open" if expanded else ""}>'
        f'<summary>{_badge(state)}<span class="rn">Run {i + 1}</span>'
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
