"""``grade --format junit``: one test case per run and grader, for CI systems.

Built with ElementTree, so escaping is never hand-made; text is passed through
:func:`text.readable` first because XML 1.0 has no escape for most control characters.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TextIO

from ..model import GradeResult, RunReport
from ..sessions.model import SessionReport
from .gates import Gate, aggregate_gates
from .spool import DEFAULT_SPOOL_BYTES
from .stream import ReportWriter
from .text import one_line, readable, shorten

__all__ = ["SUITE", "JunitWriter", "render_junit"]

SUITE = "otel-tooleval"
_MESSAGE_CHARS = 300
_CASE_LEVEL = 2                 # testsuites > testsuite > testcase
_BETWEEN_CASES = "\n" + "  " * _CASE_LEVEL
_RUNS_MARK = "otel-tooleval-runs"   # stands for the runs' test cases until they are written


def render_junit(reports: Sequence[RunReport], aggregate: Mapping[str, Any], *,
                 problems: Sequence[str] = ()) -> str:
    """A ``testsuites`` document with one ``testsuite`` named ``otel-tooleval``.

    Each run and grader is a test case: ``classname`` is the agent name, the trace id and the
    run's root span id (unique per run, even for sibling runs of one trace), ``name`` is the
    grader's name.

    A result labelled ``error`` (the grader raised or could not grade) gets an ``error``
    element; any other result that did not pass gets a ``failure`` element. Each aggregate gate
    of an equal-function-set grader is a test case of classname ``aggregate`` (one per group
    when the aggregate is grouped, since then the groups are what gate). Input problems go to
    the suite's ``system-err``.
    """
    root = ET.Element("testsuites", name=SUITE)
    suite = ET.SubElement(root, "testsuite", name=SUITE)
    tests = failures = errors = 0
    for report in reports:
        for case, problem in _run_cases(report):
            suite.append(case)
            tests += 1
            errors += problem == "error"
            failures += problem == "failure"
    tests, failures = _close_suite(root, suite, aggregate, problems, tests, failures, errors)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _run_cases(report: RunReport) -> Iterator[tuple[ET.Element, str | None]]:
    """A run's test cases, each with the tag of its problem element (None: it passed)."""
    run = report.run
    # The root span id too: two runs of one trace (sibling agents) are two test cases.
    classname = one_line(f"{run.agent or run.root_name or 'run'} {run.trace_id_hex} "
                         f"{run.root_span_id_hex}")
    return _cases(classname, report.results)


def _session_cases(report: SessionReport) -> Iterator[tuple[ET.Element, str | None]]:
    """A session's test cases: classname = agent, ``session``, the key's attribute and value."""
    classname = one_line(f"{report.agent or 'session'} session "
                         f"{report.key.attribute}={report.key.value}")
    return _cases(classname, report.results)


def _cases(classname: str, results: Iterable[GradeResult]
           ) -> Iterator[tuple[ET.Element, str | None]]:
    for result in results:
        case = ET.Element("testcase", classname=classname, name=one_line(result.name))
        if result.label == "error":
            _problem(case, "error", result, result.error or result.type)
            yield case, "error"
        elif not result.passed:
            _problem(case, "failure", result, result.type)
            yield case, "failure"
        else:
            yield case, None


def _close_suite(root: ET.Element, suite: ET.Element, aggregate: Mapping[str, Any],
                 problems: Sequence[str], tests: int, failures: int, errors: int
                 ) -> tuple[int, int]:
    """The aggregate gates' cases, the input problems and the counts, after the runs' cases."""
    for gate in aggregate_gates(aggregate):
        name = gate.grader if gate.group is None else f"{gate.grader} [{gate.group}]"
        case = ET.SubElement(suite, "testcase", classname="aggregate", name=one_line(name))
        tests += 1
        if not gate.passed:
            failures += 1
            text = _gate_text(gate)
            ET.SubElement(case, "failure", message=shorten(one_line(text), _MESSAGE_CHARS),
                          type="aggregate").text = readable(text)
    if problems:
        err = ET.SubElement(suite, "system-err")
        err.text = readable("input problems:\n" + "\n".join(problems) + "\n")
    counts = {"tests": str(tests), "failures": str(failures), "errors": str(errors)}
    for element in (root, suite):
        element.attrib.update(counts)
    suite.set("skipped", "0")
    return tests, failures


class JunitWriter(ReportWriter):
    """:func:`render_junit`, written as the runs come (``outputs.stream``).

    Each run's test cases are serialised by ElementTree as the run is added, indented as they
    sit in the document; the suite's counts, known only at the end, go in the document built
    around them then, where a placeholder element marks the place of the runs' cases.
    """

    def __init__(self, *, memory_bytes: int = DEFAULT_SPOOL_BYTES) -> None:
        super().__init__(memory_bytes=memory_bytes)
        self.tests = self.failures = self.errors = 0

    def part(self, report: RunReport, key: tuple[Any, ...]) -> str:
        # The run's cases under a stand-in suite, indented as the real one's are, and written
        # in one call (ElementTree's set-up per call costs more than a small case).
        holder = ET.Element("s")
        for case, problem in _run_cases(report):
            holder.append(case)
            self.tests += 1
            self.errors += problem == "error"
            self.failures += problem == "failure"
        if not len(holder):
            return ""
        ET.indent(holder, level=_CASE_LEVEL - 1)
        text = ET.tostring(holder, encoding="unicode")
        return text[len("<s>" + _BETWEEN_CASES):-len(_BETWEEN_CASES[:-2] + "</s>")]

    def write(self, out: TextIO, aggregate: Mapping[str, Any], *,
              problems: Sequence[str] = ()) -> None:
        root = ET.Element("testsuites", name=SUITE)
        suite = ET.SubElement(root, "testsuite", name=SUITE)
        has_cases = self.tests > 0
        if has_cases:
            ET.SubElement(suite, _RUNS_MARK)
        for session in self.sessions or ():
            for case, problem in _session_cases(session):
                suite.append(case)
                self.tests += 1
                self.errors += problem == "error"
                self.failures += problem == "failure"
        _close_suite(root, suite, aggregate, problems, self.tests, self.failures, self.errors)
        _case_suites(root, self.cases or ())
        ET.indent(root)
        text = ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
        if not has_cases:
            out.write(text)
            return
        head, _, tail = text.partition(f"<{_RUNS_MARK} />")
        out.write(head)
        separator = ""
        for _key, cases in self.spool:
            if cases:
                out.write(separator)
                out.write(cases)
                separator = _BETWEEN_CASES
        out.write(tail)


def _case_suites(root: ET.Element, cases: Sequence[Mapping[str, Any]]) -> None:
    """One ``testsuite`` per eval case (``cases:``) after the runs' suite, a ``testcase`` per
    grader (the case's worst run), or one ``missing`` testcase failing when no run matched."""
    tests, failures = int(root.get("tests", "0")), int(root.get("failures", "0"))
    for entry in cases:
        name = one_line(f"case {entry['id']}")
        suite = ET.SubElement(root, "testsuite", name=name)
        results = entry["results"] if entry["status"] != "missing" else [None]
        failed = 0
        for result in results:
            case = ET.SubElement(suite, "testcase", classname=name,
                                 name=one_line(result["name"]) if result else "missing")
            if result is None:
                text = f"no run matched this case ({entry.get('match', '')})"
                ET.SubElement(case, "failure", message=shorten(one_line(text), _MESSAGE_CHARS),
                              type="missing").text = readable(text)
                failed += 1
            elif not result["passed"]:
                text = f"{result['label']}: score {result['score']:g} (lowest over " \
                       f"{len(entry['runs'])} run(s))"
                ET.SubElement(case, "failure", message=shorten(one_line(text), _MESSAGE_CHARS),
                              type=one_line(result["label"])).text = readable(text)
                failed += 1
        suite.attrib.update({"tests": str(len(results)), "failures": str(failed),
                             "errors": "0", "skipped": "0"})
        tests, failures = tests + len(results), failures + failed
    root.attrib.update({"tests": str(tests), "failures": str(failures)})


def _problem(case: ET.Element, tag: str, result: GradeResult, type_: str) -> None:
    message = f"{result.label}: {result.explanation}"
    body = [result.explanation, f"score: {result.score:g}"]
    if result.details:
        # compact: indentation would take json's pure-Python encoder, several times slower
        body.append("details: " + json.dumps(result.to_dict()["details"], ensure_ascii=False,
                                             default=str))
    element = ET.SubElement(case, tag, message=shorten(one_line(message), _MESSAGE_CHARS),
                            type=one_line(type_))
    element.text = readable("\n".join(body))


def _gate_text(gate: Gate) -> str:
    selection = gate.selection
    figures = ""
    if selection:
        figures = (f": precision {selection.get('precision')}, recall {selection.get('recall')}, "
                   f"F1 {selection.get('f1')} over {gate.summary.get('runs')} run(s)")
    return f"aggregate gate failed{figures}"
