"""The outputs of ``otel-tooleval diff``: table, JSON, Markdown (a pull-request comment) and
JUnit XML (one testsuite per case, a testcase per grader)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable

from ..diff import CaseDiff, DiffReport, Row
from .json_doc import json_text
from .text import one_line, readable, shorten

__all__ = ["RENDERERS", "render_diff_json", "render_diff_junit", "render_diff_markdown",
           "render_diff_table"]

SUITE = "otel-tooleval diff"
_MESSAGE_CHARS = 300


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _delta(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def _status_change(case: CaseDiff) -> str:
    return f"status {case.baseline_status or '-'} -> {case.candidate_status or '-'}"


def _headline(report: DiffReport) -> str:
    s = report.summary()
    how = "case id" if report.matched_by == "case" else "run"
    verdict = "FAIL" if report.failed else "PASS"
    mean = "" if s["mean_delta"] is None else f", mean delta {s['mean_delta']:+.4f}"
    return (f"{verdict}: {s['regressed']} regressed, {s['improved']} improved, {s['same']} "
            f"same of {s['cases']} case(s) matched by {how}; {s['only_baseline']} only in the "
            f"baseline, {s['only_candidate']} only in the candidate{mean} (threshold "
            f"{report.threshold:g}, fail on {report.fail_on})")


def _status_only(case: CaseDiff) -> bool:
    """A case whose status got worse with no row regressing (it went missing, say): the
    status is then the regression to show; otherwise the rows say it."""
    return case.status_regressed and all(row.outcome != "regressed" for row in case.rows)


def _changed_rows(report: DiffReport) -> list[tuple[CaseDiff, Row | None]]:
    """Each regressed or improved case's status change (row None) and changed rows."""
    found: list[tuple[CaseDiff, Row | None]] = []
    for case in (*report.regressed, *report.improved):
        if _status_only(case):
            found.append((case, None))
        found += [(case, row) for row in case.rows if row.outcome in ("regressed", "improved")]
    return found


def render_diff_table(report: DiffReport) -> str:
    """The changed rows, regressions first, the one-sided cases and the summary line."""
    lines = [f"otel-tooleval diff {one_line(report.baseline)} -> {one_line(report.candidate)}"]
    for case, row in _changed_rows(report):
        if row is None:
            lines.append(f"  REGRESSED  {one_line(case.id)}  {_status_change(case)}")
        else:
            lines.append(f"  {row.outcome.upper():<9}  {one_line(case.id)}  "
                         f"{one_line(row.grader)}  {_score(row.baseline)} -> "
                         f"{_score(row.candidate)}  ({_delta(row.delta)})")
    for label, keys in (("ONLY BASE", report.only_baseline),
                        ("ONLY CAND", report.only_candidate)):
        lines += [f"  {label}  {one_line(key)}" for key in keys]
    lines += [f"  note: {one_line(note)}" for note in report.notes]
    lines.append(_headline(report))
    return "\n".join(lines) + "\n"


def render_diff_json(report: DiffReport) -> str:
    """``DiffReport.to_dict()`` as one JSON document (docs/diff.md)."""
    return json_text(report.to_dict()) + "\n"


def _cell(text: object) -> str:
    # A pipe ends a cell and a backtick opens code in GitHub's tables: both escaped.
    return one_line(text).replace("|", "\\|").replace("`", "\\`")


def render_diff_markdown(report: DiffReport) -> str:
    """A pull-request comment: the verdict, a table of the changed rows, the one-sided cases."""
    out = ["### otel-tooleval diff", "", f"**{_cell(_headline(report))}**", ""]
    changed = _changed_rows(report)
    if changed:
        out += ["| case | grader | baseline | candidate | delta | outcome |",
                "|---|---|---:|---:|---:|---|"]
        for case, row in changed:
            if row is None:
                out.append(f"| {_cell(case.id)} | status | {_cell(case.baseline_status or '-')} "
                           f"| {_cell(case.candidate_status or '-')} | | regressed |")
            else:
                out.append(f"| {_cell(case.id)} | {_cell(row.grader)} | {_score(row.baseline)} "
                           f"| {_score(row.candidate)} | {_delta(row.delta)} | {row.outcome} |")
        out.append("")
    for title, keys in (("Only in the baseline", report.only_baseline),
                        ("Only in the candidate", report.only_candidate)):
        if keys:
            out += [f"{title}: " + ", ".join(_cell(k) for k in keys), ""]
    out += [f"_{_cell(note)}_" for note in report.notes]
    return "\n".join(out).rstrip("\n") + "\n"


def render_diff_junit(report: DiffReport) -> str:
    """One ``testsuite`` per compared case, a ``testcase`` per grader (classname the case id),
    a ``failure`` on a regressed row or status; one-sided cases are skipped test cases."""
    root = ET.Element("testsuites", name=SUITE)
    totals = [0, 0, 0]                                  # tests, failures, skipped
    for case in report.cases:
        suite = ET.SubElement(root, "testsuite", name=one_line(case.id))
        counts = [0, 0, 0]
        if _status_only(case):
            element = ET.SubElement(suite, "testcase", classname=one_line(case.id),
                                    name="status")
            _failure(element, _status_change(case))
            counts[0] += 1
            counts[1] += 1
        for row in case.rows:
            element = ET.SubElement(suite, "testcase", classname=one_line(case.id),
                                    name=one_line(row.grader))
            counts[0] += 1
            if row.outcome == "regressed":
                counts[1] += 1
                _failure(element, f"score {_score(row.baseline)} -> {_score(row.candidate)} "
                                  f"(delta {_delta(row.delta)}, threshold "
                                  f"{report.threshold:g})")
            elif row.outcome in ("added", "removed"):
                counts[2] += 1
                ET.SubElement(element, "skipped", message=f"grader {row.outcome}")
        _counts(suite, counts)
        totals = [a + b for a, b in zip(totals, counts, strict=True)]
    for side, keys in (("baseline", report.only_baseline), ("candidate", report.only_candidate)):
        for key in keys:
            suite = ET.SubElement(root, "testsuite", name=one_line(key))
            element = ET.SubElement(suite, "testcase", classname=one_line(key), name="case")
            ET.SubElement(element, "skipped", message=f"only in the {side}")
            _counts(suite, [1, 0, 1])
            totals = [totals[0] + 1, totals[1], totals[2] + 1]
    if report.fail_on == "mean" and report.failed:
        suite = ET.SubElement(root, "testsuite", name="mean")
        element = ET.SubElement(suite, "testcase", classname="summary", name="mean delta")
        _failure(element, f"mean delta {_delta(report.mean_delta())} below "
                          f"-{report.threshold:g}")
        _counts(suite, [1, 1, 0])
        totals = [totals[0] + 1, totals[1] + 1, totals[2]]
    _counts(root, totals)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _failure(element: ET.Element, text: str) -> None:
    ET.SubElement(element, "failure", message=shorten(one_line(text), _MESSAGE_CHARS),
                  type="regression").text = readable(text)


def _counts(element: ET.Element, counts: list[int]) -> None:
    element.attrib.update({"tests": str(counts[0]), "failures": str(counts[1]), "errors": "0",
                           "skipped": str(counts[2])})


#: ``diff --format`` -> renderer.
RENDERERS: dict[str, Callable[[DiffReport], str]] = {
    "table": render_diff_table, "json": render_diff_json,
    "markdown": render_diff_markdown, "junit": render_diff_junit,
}
