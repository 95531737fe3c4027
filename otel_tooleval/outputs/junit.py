"""``grade --format junit``: one test case per run and grader, for CI systems.

Built with ElementTree, so escaping is never hand-made; text is passed through
:func:`text.readable` first because XML 1.0 has no escape for most control characters.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any

from ..model import GradeResult, RunReport
from .gates import Gate, aggregate_gates
from .text import one_line, readable, shorten

__all__ = ["SUITE", "render_junit"]

SUITE = "otel-tooleval"
_MESSAGE_CHARS = 300


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
        run = report.run
        # The root span id too: two runs of one trace (sibling agents) are two test cases.
        classname = one_line(f"{run.agent or run.root_name or 'run'} {run.trace_id_hex} "
                             f"{run.root_span_id_hex}")
        for result in report.results:
            case = ET.SubElement(suite, "testcase", classname=classname,
                                 name=one_line(result.name))
            tests += 1
            if result.label == "error":
                errors += 1
                _problem(case, "error", result, result.error or result.type)
            elif not result.passed:
                failures += 1
                _problem(case, "failure", result, result.type)
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
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


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
