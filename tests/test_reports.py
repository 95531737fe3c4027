"""The output formats of ``otel-tooleval grade`` on reports made by the real grading core."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval import load_config
from otel_tooleval.aggregate import aggregate
from otel_tooleval.grading import grade_records, grade_run
from otel_tooleval.model import GradeResult, RunReport, SpanRecord
from otel_tooleval.outputs import (
    html_report,
    render_html,
    render_json,
    render_junit,
    render_table,
)
from otel_tooleval.outputs.marks import BROKE, PARTIAL, SATISFIED, call_marks
from otel_tooleval.outputs.text import fmt_duration, one_line, readable
from otel_tooleval.outputs.timeline import Axis
from otel_tooleval.trajectory import build_run
from tests.support.runs import ROOT, call, records, run_of

CONFIG: dict[str, Any] = {"graders": [
    {"name": "runs-tests", "type": "tool-calls",
     "config": {"required": [{"name": "search"}], "disallowed": [{"name": "delete_file"}],
                "sequence": ["search", "fetch"]}},
    {"name": "workflow", "type": "tool_trajectory", "mode": "in_order",
     "expected": [{"tool": "search"}, {"tool": "fetch", "max_duration_ms": 300},
                  {"tool": "report"}]},
    {"name": "selection", "type": "equal_function_sets",
     "classes": [{"name": "search", "members": ["search", "web_search"]},
                 {"name": "fetch", "members": ["fetch"]},
                 {"name": "report", "members": ["report"]}],
     "expect": [{"tool_selection.f1": {">=": 80}}]},
    {"name": "order", "type": "tool-call-order", "tool_calls_order": ["search", "fetch", "report"]},
]}

TRACES = (0x0AF7651916CD43DD8448EB211C80319C, 0x5B8AA5A2D2C872E8321CF37308D69DF2,
          0x3C1F0E9A2B7D4C5E8F9A0B1C2D3E4F50)
HOSTILE = "<script>alert(1)</script>"
PROBLEMS = ["trace.jsonl:12: not valid JSON", "trace.jsonl:40: span without traceId"]
RUN_KEYS = ["trace_id", "root_span_id", "agent", "tool_calls", "pending_calls", "late_spans",
            "reading", "passed", "results"]
RESULT_KEYS = ["name", "type", "score", "passed", "label", "explanation", "details", "error"]


def graded(calls: Sequence[dict[str, Any]], config: Any = None, *, agent: str = "researcher",
           trace: int = TRACES[0], attrs: dict[str, Any] | None = None) -> RunReport:
    """A run through the real span -> run -> grade path, with a root ending 40 ms after its last
    finished span (``records`` gives the root a far-away end), so the timeline is realistic."""
    cfg = load_config(config or CONFIG)
    recs = [r._replace(trace_id=trace) for r in records(calls, agent=agent, root_attrs=attrs)]
    ends = [r.end_ns for r in recs[1:] if r.end_ns is not None]
    root = recs[0]._replace(end_ns=max(ends, default=0) + 40_000_000)
    report = grade_run(build_run(root, recs[1:], cfg.policy), cfg)
    assert report is not None
    return report


def sample_reports(config: Any = None) -> list[RunReport]:
    """Three runs: one that passes everything, one that breaks checks of every family (a
    disallowed call with an error, a slow call, a hostile tool name, a pending call), and one
    out of order."""
    return [
        graded([call("search", {"q": "x"}, "r", duration_ms=180),
                call("fetch", {}, "ok", step=1, duration_ms=240),
                call("report", {}, "done", step=2, duration_ms=90)], config, trace=TRACES[0],
               attrs={"case": "a"}),
        graded([call("web_search", {}, "r", duration_ms=350),
                call("fetch", {}, "x", step=1, duration_ms=620),
                call("delete_file", {"path": "/tmp"}, None, step=1, duration_ms=40,
                     error="PermissionError"),
                call(HOSTILE, {}, "x", step=2, duration_ms=75),
                call("report", {}, None, step=2, pending=True)],
               config, agent="planner <b>", trace=TRACES[1], attrs={"case": "a"}),
        graded([call("fetch", {}, "x", duration_ms=120),
                call("search", {}, "x", step=1, duration_ms=90)], config, trace=TRACES[2],
               attrs={"case": "b"}),
    ]


def sample() -> tuple[list[RunReport], dict[str, Any]]:
    reports = sample_reports()
    return reports, aggregate(reports, load_config(CONFIG))


# -- JSON -------------------------------------------------------------------------------------

def test_json_is_the_documented_document() -> None:
    reports, agg = sample()
    doc = json.loads(render_json(reports, agg))
    assert list(doc) == ["runs", "aggregate"]
    assert [run["trace_id"] for run in doc["runs"]] == [f"{t:032x}" for t in TRACES]
    for run, report in zip(doc["runs"], reports):
        assert list(run) == RUN_KEYS
        assert run == json.loads(json.dumps(report.to_dict()))
        assert all(list(r) == RESULT_KEYS for r in run["results"])
    second = doc["runs"][1]
    assert (second["agent"], second["tool_calls"], second["pending_calls"]) == ("planner <b>", 5, 1)
    assert second["passed"] is False
    assert doc["aggregate"] == agg
    assert list(doc["aggregate"]) == ["runs", "passed", "failed", "graders"]
    assert (doc["aggregate"]["runs"], doc["aggregate"]["passed"]) == (3, 1)
    assert doc["aggregate"]["graders"]["selection"]["tool_selection"] == {
        "precision": 80, "recall": 88, "f1": 84}
    assert "tool_selection" not in doc["aggregate"]["graders"]["runs-tests"]
    # one run per line, for line tools
    lines = render_json(reports, agg).splitlines()
    assert [json.loads(line.rstrip(","))["trace_id"] for line in lines[1:4]] == [
        f"{t:032x}" for t in TRACES]


def test_json_keeps_text_unescaped_and_survives_lone_surrogates_and_nan() -> None:
    report = graded([call("search"), call("su\udc80rr")], agent="agent-ü")
    odd = RunReport(report.run, (*report.results,
                                 GradeResult("nan", "custom", float("nan"), False, "fail", "?")))
    text = render_json([odd], {"runs": 1, "passed": 0, "failed": 1, "graders": {}})
    text.encode("utf-8")                       # would raise on a raw lone surrogate
    assert '"agent": "agent-ü"' in text
    doc = json.loads(text)
    assert doc["runs"][0]["results"][-1]["score"] is None
    workflow = doc["runs"][0]["results"][1]
    assert workflow["name"] == "workflow"
    assert render_json([], {"runs": 0}).endswith("}\n")


# -- JUnit ------------------------------------------------------------------------------------

def junit(reports: Sequence[RunReport], agg: dict[str, Any], **kw: Any) -> ET.Element:
    text = render_junit(reports, agg, **kw)
    assert text.startswith("<?xml")
    return ET.fromstring(text.encode("utf-8"))


def test_junit_two_runs_of_one_trace_are_distinct_cases() -> None:
    # Two sibling agent runs under one HTTP request span: one trace, two roots, one passing
    # and one failing. Each run x grader must be its own test case, told apart by the root.
    cfg = load_config(CONFIG)
    http = SpanRecord(TRACES[0], 0xA, 0, "POST /ask", 0, 10**9, {"http.method": "POST"})
    first = [r._replace(trace_id=TRACES[0], span_id=r.span_id + 0x1000,
                        parent_id=(0xA if r.parent_id == 0 else r.parent_id + 0x1000))
             for r in records([call("search"), call("fetch", step=1), call("report", step=2)],
                              agent="researcher")]
    second = [r._replace(trace_id=TRACES[0], span_id=r.span_id + 0x2000,
                         parent_id=(0xA if r.parent_id == 0 else r.parent_id + 0x2000))
              for r in records([call("report")], agent="researcher")]
    reports = grade_records([http, *first, *second], cfg)
    assert [r.run.root_span_id for r in reports] == [0x1001, 0x2001]
    root = junit(reports, aggregate(reports, cfg))
    cases = [c for c in root.iter("testcase") if c.get("classname") != "aggregate"]
    keys = [(c.get("classname"), c.get("name")) for c in cases]
    assert len(keys) == 2 * len(cfg.graders) == len(set(keys))
    assert {c.get("classname") for c in cases} == {
        f"researcher {TRACES[0]:032x} {0x1001:016x}", f"researcher {TRACES[0]:032x} {0x2001:016x}"}
    failed = {c.get("classname") for c in cases if c.find("failure") is not None}
    assert failed == {f"researcher {TRACES[0]:032x} {0x2001:016x}"}


def test_junit_one_case_per_run_and_grader_with_failures() -> None:
    reports, agg = sample()
    root = junit(reports, agg)
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "otel-tooleval"
    cases = suite.findall("testcase")
    run_cases = [c for c in cases if c.get("classname") != "aggregate"]
    assert len(run_cases) == 3 * 4
    assert [c.get("classname") for c in run_cases[::4]] == [
        f"researcher {TRACES[0]:032x} {ROOT:016x}", f"planner <b> {TRACES[1]:032x} {ROOT:016x}",
        f"researcher {TRACES[2]:032x} {ROOT:016x}"]
    assert [c.get("name") for c in run_cases[:4]] == ["runs-tests", "workflow", "selection",
                                                      "order"]
    failing = [(r.name, r.type, r.explanation) for rep in reports for r in rep.results
               if not r.passed]
    failures = [(c, f) for c in run_cases if (f := c.find("failure")) is not None]
    assert [(c.get("name"), f.get("type")) for c, f in failures] == [
        (name, type_) for name, type_, _ in failing]
    failure = failures[0][1]
    assert failure.get("message") == f"fail: {failing[0][2]}"
    body = failure.text or ""
    assert body.startswith(failing[0][2])
    details = json.loads(body[body.index("details: ") + len("details: "):])
    assert details["checks"][1]["check"] == "disallowed"
    # the aggregate gate of the equal-function-set grader is a case of its own
    (gate,) = [c for c in cases if c.get("classname") == "aggregate"]
    assert gate.get("name") == "selection" and gate.find("failure") is None
    for element in (root, suite):
        assert element.get("tests") == str(len(cases)) == "13"
        assert element.get("failures") == str(len(failing)) == "7"
        assert element.get("errors") == "0"


def test_junit_errors_failed_gates_groups_and_problems(tmp_path: Path) -> None:
    raising = tmp_path / "raising.py"       # by path: nothing registered at import time
    raising.write_text("from otel_tooleval.graders.custom import grader\n\n"
                       "@grader(name='reports_raises')\n"
                       "def grade(run, submission):\n    raise RuntimeError('boom')\n")
    config = {"graders": [
        CONFIG["graders"][2] | {"expect": [{"tool_selection.f1": {">": 90}}]},
        {"name": "custom", "kind": "tool", "function": f"{raising}:grade"},
    ]}
    reports = sample_reports(config)
    agg = aggregate(reports, load_config(config), group_by="case")
    root = junit(reports, agg, problems=PROBLEMS)
    suite = root.find("testsuite")
    assert suite is not None
    errors = suite.findall("testcase/error")
    assert len(errors) == 3 and root.get("errors") == "3"
    assert errors[0].get("type") == "RuntimeError"
    assert "raised RuntimeError" in (errors[0].get("message") or "")
    assert not suite.findall("testcase[error]/failure")    # an error is not also a failure
    gates = [c for c in suite.findall("testcase") if c.get("classname") == "aggregate"]
    assert [g.get("name") for g in gates] == ["selection [case=a]", "selection [case=b]"]
    assert all(g.find("failure") is not None for g in gates)
    assert "F1" in (gates[0].find("failure").get("message") or "")  # type: ignore[union-attr]
    assert root.get("failures") == str(len(suite.findall("testcase/failure")))
    assert "trace.jsonl:12: not valid JSON" in (suite.findtext("system-err") or "")


def test_junit_stays_well_formed_with_control_characters() -> None:
    report = graded([call("bad\x01name\x1b[31m"), call("search")], agent="a\x00b")
    root = junit([report], {"runs": 1, "passed": 0, "failed": 1, "graders": {}})
    case = root.find("testsuite/testcase")
    assert case is not None and case.get("classname", "").startswith("a\\x00b ")
    assert "\\x01" in ET.tostring(root, encoding="unicode")


# -- table ------------------------------------------------------------------------------------

def test_table_plain_has_runs_graders_aggregate_and_problems() -> None:
    reports, agg = sample()
    text = render_table(reports, agg, color=False, problems=PROBLEMS)
    assert "\x1b" not in text
    lines = text.splitlines()
    assert lines[0] == (f"run 1  PASS  agent=researcher  trace={TRACES[0]:032x}  calls=3  "
                        "score=1.00")
    assert lines[1] == "    tools: search → fetch → report"
    assert any(line.startswith("run 2  FAIL  agent=planner <b>") and "(1 pending)" in line
               for line in lines)
    assert "delete_file[error]" in text and "report[pending]" in text
    assert re.search(r"^    FAIL  workflow +0\.50  2 of 3 expected calls", text, re.MULTILINE)
    assert re.search(r"selection +passed 2/3 +mean 0\.85 +precision 80 +recall 88 +F1 84 +"
                     r"aggregate PASS", text)
    assert "    trace.jsonl:40: span without traceId" in lines
    assert lines[-1] == "FAIL: 1 of 3 runs passed."
    assert all(len(line) <= 110 for line in lines if not line.startswith("run "))


def test_table_colour_only_on_request_and_never_from_spans() -> None:
    reports, agg = sample()
    colored = render_table(reports, agg, color=True)
    assert "\x1b[32;1mPASS\x1b[0m" in colored and "\x1b[31;1mFAIL\x1b[0m" in colored
    assert re.sub(r"\x1b\[[0-9;]*m", "", colored) == render_table(reports, agg, color=False)
    hostile = graded([call("x\x1b[2J\x1b]0;pwned\x07"), call("search")])
    for color in (False, True):
        text = render_table([hostile], aggregate([hostile], load_config(CONFIG)), color=color)
        assert "\x1b[2J" not in text and "\x07" not in text
        assert "x\\x1b[2J\\x1b]0;pwned\\x07" in text


def test_table_wraps_long_words_and_explanations() -> None:
    long_name = "y" * 250
    report = graded([call(long_name), call("search")])
    text = render_table([report], aggregate([report], load_config(CONFIG)), color=False)
    lines = text.splitlines()
    assert all(len(line) <= 100 for line in lines[1:])
    assert "".join(line.strip() for line in lines[1:5]).count("y") >= 250


def test_table_grouped_and_gate_failures() -> None:
    config = {"graders": [CONFIG["graders"][2] | {"expect": [{"tool_selection.f1": {">": 90}}]}]}
    reports = sample_reports(config)
    agg = aggregate(reports, load_config(config), group_by="case")
    text = render_table(reports, agg, color=False)
    assert "groups by case:" in text
    assert re.search(r"^    a: 1 of 2 runs passed$", text, re.MULTILINE)
    assert text.rstrip().endswith("FAIL: 1 of 3 runs passed, 2 aggregate gate(s) failed.")


# -- HTML -------------------------------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class Checker(HTMLParser):
    """Tags balanced, ids unique, and every reference to something outside the page noted."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.ids: list[str] = []
        self.external: list[str] = []
        self.tags: dict[str, int] = {}
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for name, value in attrs:
            if name == "id" and value:
                self.ids.append(value)
            if name in ("src", "href", "action", "srcset", "poster") and value is not None \
                    and not value.startswith("#"):
                self.external.append(f"{tag} {name}={value}")
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self.stack and self.stack[-1] not in ("script", "style"):
            self.text.append(data)


def check_html(text: str) -> Checker:
    checker = Checker()
    checker.feed(text)
    checker.close()
    assert checker.problems == []
    assert checker.stack == []
    assert len(checker.ids) == len(set(checker.ids))
    return checker


def test_html_is_one_self_contained_well_formed_page() -> None:
    reports, agg = sample()
    text = render_html(reports, agg, problems=PROBLEMS)
    assert text.startswith("<!DOCTYPE html>")
    checker = check_html(text)
    assert checker.external == []
    assert "http://" not in text and "https://" not in text and "@import" not in text
    assert checker.tags["script"] == 1 and checker.tags["style"] == 1
    assert "<link" not in text
    assert "default-src 'none'" in text            # the CSP forbids fetching anything
    page = "".join(checker.text)
    for i, trace in enumerate(TRACES):
        assert f'id="run-{i + 1}"' in text
        assert f"{trace:032x}" in page
    assert HOSTILE in page                          # shown as text ...
    assert HOSTILE not in text                      # ... never as markup
    assert "planner &lt;b&gt;" in text
    for problem in PROBLEMS:
        assert problem in page
    assert "1 run(s)" not in page and "3 run(s), 2 failed" in page


def rows_of(text: str, run: int) -> list[str]:
    """The timeline rows (one per call) of the n-th run, as HTML snippets."""
    part = text.split(f'id="run-{run}"')[1].split('class="verdicts"')[0]
    return re.findall(r'<div class="tl-row" role="row".*?</div><div class="track".*?</div>'
                      r'(?:<span class="m[^"]*"[^>]*>[^<]*</span>)*</div>', part)


def marks_in(row: str) -> list[str]:
    return re.findall(r'<span class="m ?([a-z-]*)" data-g="\d"', row)


def test_html_marks_the_calls_that_satisfied_or_broke_each_check() -> None:
    reports, agg = sample()
    text = render_html(reports, agg)
    first = rows_of(text, 1)
    assert len(first) == 3
    assert all(marks_in(row) == ["m-satisfied"] * 3 + ["m-satisfied"] for row in first[:2])
    second = rows_of(text, 2)
    assert len(second) == 5
    # columns: runs-tests, workflow, selection, order
    assert marks_in(second[1]) == ["m-satisfied", "m-broke", "m-satisfied", "m-satisfied"]
    assert marks_in(second[2]) == ["m-broke", "", "m-broke", ""]       # disallowed, unexpected
    assert 'class="bar bar-broke err"' in second[2]
    assert "over the 300 ms limit" in second[1]
    assert 'class="bar bar-broke' in second[1]
    assert "f-pending" in second[4] and "bar-satisfied open" in second[4]
    assert marks_in(rows_of(text, 3)[1])[0] == "m-partial"           # sequence broken after it
    third_runs = text.split('id="run-3"')[1]
    assert '<span class="badge b-fail">FAIL</span><span class="vname">runs-tests' in third_runs


def test_html_bars_follow_start_time_and_duration() -> None:
    reports, agg = sample()
    rows = rows_of(render_html(reports[:1], agg), 1)
    geometry = [tuple(map(float, re.findall(r"left:([\d.]+)%;width:([\d.]+)%", row)[0]))
                for row in rows]
    # search 180 ms, fetch after it for 240 ms, report 90 ms; the axis ends with the last call
    # (the root ends 40 ms later, which only matters when a call is still open)
    assert geometry[0][0] == pytest.approx(0.0, abs=0.01)
    assert geometry[0][1] == pytest.approx(180 / 510 * 100, abs=0.1)
    assert geometry[1][0] == pytest.approx(geometry[0][0] + geometry[0][1], abs=0.1)
    assert geometry[2][0] + geometry[2][1] == pytest.approx(100.0)
    assert geometry[2][1] == pytest.approx(90 / 510 * 100, abs=0.1)
    assert "180 ms" in rows[0] and "240 ms" in rows[1]


def test_html_large_runs_are_capped_and_passing_runs_collapse() -> None:
    many = graded([call(f"t{i}") for i in range(320)], {"graders": [CONFIG["graders"][0]]})
    text = render_html([many] * 13, {"runs": 13, "passed": 0, "failed": 13, "graders": {}})
    check_html(text)
    assert "… and 20 more calls not drawn" in text
    passing = graded([call("search"), call("fetch")], {"graders": [CONFIG["graders"][0]]})
    text = render_html([passing] * 13, {"runs": 13, "passed": 13, "failed": 0, "graders": {}})
    assert ' open><summary>' not in text and text.count('<details class="run r-pass"') == 13
    assert "No agent runs were found" in render_html([], {"runs": 0})


def test_html_keeps_failing_runs_first_past_its_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(html_report, "MAX_RUN_SECTIONS", 2)
    monkeypatch.setattr(html_report, "MAX_INDEX_ROWS", 3)
    good, bad, worse = sample_reports()
    text = render_html([good, good, bad, good, worse], {"runs": 5})
    check_html(text)
    assert re.findall(r'<details class="run r-\w+" id="(run-\d)"', text) == ["run-3", "run-5"]
    assert "Timelines of 2 of 5 runs, failing runs first" in text
    index = text.split('<table class="index">')[1].split("</table>")[0]
    assert "Runs: 3 of 5 listed, failing runs first" in index
    assert re.findall(r"<tr class=\"r-\w+\"><td class=num>(.*?)</td>", index) == [
        "1", '<a href="#run-3">3</a>', '<a href="#run-5">5</a>']


# -- marks, axis and text -----------------------------------------------------------------------

def result_of(name: str, report: RunReport) -> GradeResult:
    return next(r for r in report.results if r.name == name)


def verdicts(result: GradeResult, n: int) -> dict[int, str]:
    return {i: m.verdict for i, m in call_marks(result, n).items()}


def test_marks_per_family() -> None:
    reports = sample_reports()
    second = reports[1]
    assert verdicts(result_of("runs-tests", second), 5) == {0: SATISFIED, 1: SATISFIED,
                                                            2: BROKE}
    assert verdicts(result_of("workflow", second), 5) == {1: BROKE, 4: SATISFIED}
    # a class's "calls" is a count, not positions: only first matches and unexpected calls
    assert verdicts(result_of("selection", second), 5) == {0: SATISFIED, 1: SATISFIED,
                                                           2: BROKE, 3: BROKE, 4: SATISFIED}
    assert verdicts(result_of("order", second), 5) == {1: SATISFIED, 4: SATISFIED}
    mark = call_marks(result_of("runs-tests", reports[2]), 2)[1]
    assert mark.verdict == PARTIAL
    assert [v for v, _ in mark.reasons] == [SATISFIED, PARTIAL]


def test_marks_of_other_families_and_counts_are_not_positions() -> None:
    config = {"graders": [
        {"name": "args", "type": "tool-call-args",
         "tool_calls": [{"name": "search", "args": {"q": "a"}}, {"name": "fetch", "args": {}}]},
        {"name": "exact", "type": "tool_trajectory", "mode": "exact",
         "expected": [{"tool": "search"}]},
        {"name": "mins", "type": "tool_trajectory", "mode": "any_order",
         "minimums": {"search": 2}},
    ]}
    report = grade_run(run_of([call("search", {"q": "a"}), call("other"), call("search")]),
                       load_config(config))
    assert report is not None
    args, exact, mins = report.results
    assert args.details["matched"] == 1                  # a count: never read as call #1
    assert verdicts(args, 3) == {0: SATISFIED}
    assert verdicts(exact, 3) == {0: SATISFIED, 1: BROKE, 2: BROKE}   # extra calls
    assert verdicts(mins, 3) == {0: SATISFIED, 2: SATISFIED}


def test_marks_read_custom_details_generically_and_ignore_nonsense() -> None:
    details = {"steps": [{"passed": False, "calls": [0, 1]}, {"ok": True, "calls": [2]}],
               "violating_calls": [3], "call": 99, "calls": [True, 1], "count": 2,
               "deep": [[[[[[[[[[{"call": 0}]]]]]]]]]]}
    result = GradeResult("c", "custom", 0.5, False, "fail", "", details)
    assert verdicts(result, 4) == {0: PARTIAL, 1: PARTIAL, 2: SATISFIED, 3: BROKE}
    assert call_marks(GradeResult.failure("c", "custom", "E", "x"), 4) == {}


def test_axis_ticks_are_round_steps() -> None:
    run = run_of([])
    axis = Axis(0, 1_100_000_000)
    assert [label for _, label in axis.ticks()] == ["0", "200 ms", "400 ms", "600 ms",
                                                    "800 ms", "1.0 s"]
    assert Axis.of(run, ()).span >= 1
    assert [fmt_duration(n) for n in (850_000, 1_500_000, 12_000_000, 3_400_000_000,
                                      125_000_000_000)] == ["850 µs", "1.5 ms", "12 ms",
                                                            "3.4 s", "2 min 5 s"]


def test_text_helpers_escape_what_a_reader_must_not_get_raw() -> None:
    assert one_line("a\nb\x1b[1m\u202ec\ud800") == "a\\x0ab\\x1b[1m\\u202ec\\ud800"
    assert readable("a\nb\tc\x00") == "a\nb\tc\\x00"
