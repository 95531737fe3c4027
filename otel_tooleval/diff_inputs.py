"""``otel-tooleval diff`` over trace files: each side graded as ``grade`` would, then compared.

A side is either a ``grade --format json`` document or a trace file, told apart by content
(:func:`input_kind`): a JSON object whose first key is one of the grade document's own is a
grade document; anything else is traces, graded with the config (and its cases) by the
pipeline behind ``grade`` (``offline.grade_files``) into the same JSON document, which
``diff.read_side`` then reads. The two sides may be of either kind.
"""

from __future__ import annotations

import io
import json
import re
from typing import TYPE_CHECKING, Literal

from .diff import DiffInputError, DiffReport, FailOn, Side, compare, load_side, read_side
from .readers.sniff import trace_kind

if TYPE_CHECKING:
    from .config import ToolEvalConfig
    from .model import RunReport

__all__ = ["diff_inputs", "grade_side", "input_kind", "side_of"]

#: The first key of a grade JSON document: ``runs`` as grade writes it, or another of its
#: top-level keys when a tool rewrote it with sorted keys (``jq -S``).
_GRADE_DOC = re.compile(r'\A\s*\{\s*"(runs|aggregate|cases|sessions)"\s*:')
_HEAD_BYTES = 64 * 1024


def input_kind(path: str) -> Literal["grade", "traces", "unknown"]:
    """``grade`` for a grade JSON document, ``traces`` for what looks like a trace file
    (OTLP/JSON, Jaeger JSON, gzip, OTLP protobuf: not text), ``unknown`` otherwise (an
    unreadable file included: whoever reads it names the problem)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD_BYTES)
    except OSError:
        return "unknown"
    if head.startswith(b"\x1f\x8b") or trace_kind(head) is not None:
        return "traces"
    try:
        text = head.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:
            return "traces"                     # binary: OTLP protobuf
        text = head[:exc.start].decode("utf-8-sig")   # a character cut at the head's end
    if _GRADE_DOC.match(text):
        return "grade"
    return "unknown"


def side_of(path: str, config: ToolEvalConfig | None) -> Side:
    """One side of a diff: the grade document at ``path``, or with ``config`` the trace file
    at ``path`` graded. Without ``config`` a file that is not a grade document is an input
    problem, named with what it looks like."""
    kind = input_kind(path)
    if kind == "grade" or (kind == "unknown" and config is None):
        return load_side(path)
    if config is None:
        raise DiffInputError(f"{path}: looks like traces, not a grade --format json document: "
                             "give --config FILE (and --cases FILE) to grade it, or diff the "
                             "outputs of grade --format json")
    return grade_side(path, config)


def grade_side(path: str, config: ToolEvalConfig) -> Side:
    """The trace file at ``path`` graded with ``config`` as ``grade --format json`` would,
    read as a :class:`Side`.

    Raises :class:`DiffInputError` where ``grade`` would exit 2: the file unreadable, input
    problems (a malformed span, a run matching two cases), no agent run, a grader that met a
    configuration problem.
    """
    from .files import InputError
    from .graders.registry import CONFIGURATION_ERROR
    from .offline import grade_files
    from .outputs.json_doc import JsonWriter

    writer = JsonWriter()
    if config.cases is not None:
        writer.expect_cases()
    broken: list[str] = []

    def graded(report: RunReport, key: tuple[int, int, int]) -> None:
        writer.add(report, key)
        broken.extend(f"{r.name}: {r.explanation}" for r in report.results
                      if r.error == CONFIGURATION_ERROR)

    try:
        try:
            outcome = grade_files([path], config, on_report=graded,
                                  progress=io.StringIO())
        except InputError as exc:
            raise DiffInputError(str(exc)) from None
        if outcome.problems:
            raise DiffInputError(f"{outcome.problems[0]} ({len(outcome.problems)} input "
                                 "problem(s) in all; grade it to see them)")
        if outcome.runs == 0:
            raise DiffInputError(f"{path}: read {outcome.spans} span(s), none was an agent "
                                 "run: nothing to compare")
        if broken:
            raise DiffInputError(f"{path}: config problem found while grading: {broken[0]}")
        if outcome.cases is not None:
            writer.add_cases(outcome.cases)
        text = io.StringIO()
        writer.write(text, outcome.aggregate)
    finally:
        writer.close()
    return read_side(path, json.loads(text.getvalue()))


def diff_inputs(baseline: str, candidate: str, config: ToolEvalConfig | None = None, *,
                threshold: float = 0.0, fail_on: FailOn = "case") -> DiffReport:
    """:func:`diff.diff_files` where either side may also be a trace file, graded with
    ``config`` (:func:`side_of`)."""
    return compare(side_of(baseline, config), side_of(candidate, config),
                   threshold=threshold, fail_on=fail_on)
