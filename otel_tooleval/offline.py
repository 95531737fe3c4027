"""Grading exported trace files: the pipeline behind ``otel-tooleval grade``.

Files are read as streams (``files.read_records``), cut into traces as each one completes
(``files.iter_traces``), and every trace is graded on its own, so memory grows with the number
of traces open at once, not with the size of the files. With ``on_report`` each run's report is
handed over as it is graded and not kept (the aggregate is kept as sums), so memory does not
grow with the number of runs either (``outputs.stream``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from .aggregate import RunningAggregate, aggregate
from .cases import CaseTally
from .config import ToolEvalConfig
from .files import DEFAULT_MAX_LINE_BYTES, InputError, InputProblem, iter_traces, read_records
from .grading import grade_records
from .model import RunReport, SpanRecord
from .outputs.stream import run_key
from .sessions.grading import grade_session
from .sessions.keys import session_key
from .sessions.model import SessionReport
from .sessions.tracker import OpenSessions

__all__ = ["GradeOutcome", "detached_message", "grade_files"]


@dataclass
class GradeOutcome:
    """What grading some files produced (``reports`` stays empty when they were handed over
    to ``on_report``; ``runs`` counts them either way)."""

    reports: list[RunReport] = field(default_factory=list)
    problems: list[InputProblem] = field(default_factory=list)
    spans: int = 0
    runs: int = 0
    aggregate: dict[str, Any] = field(default_factory=dict)
    #: The graded sessions (``sessions:`` in the config), in run order of their first runs.
    sessions: list[SessionReport] = field(default_factory=list)
    #: The ``cases`` list of the report (``CaseTally.result``); None without ``cases:``.
    cases: list[dict[str, Any]] | None = None


class _Progress:
    """A one-line span counter on a terminal's stderr, redrawn at most a few times a second."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream if stream is not None and stream.isatty() else None
        self.next_draw = 0.0

    def update(self, spans: int, runs: int, *, final: bool = False) -> None:
        if self.stream is None:
            return
        now = time.monotonic()
        if final or now >= self.next_draw:
            self.next_draw = now + 0.2
            end = "\n" if final else ""
            self.stream.write(f"\rotel-tooleval: {spans:,} spans, {runs:,} runs graded{end}")
            self.stream.flush()


def _counted(records: Iterable[SpanRecord], outcome: GradeOutcome, progress: _Progress,
             ) -> Iterator[SpanRecord]:
    for record in records:
        outcome.spans += 1
        if not outcome.spans & 0x3FFF:
            progress.update(outcome.spans, outcome.runs)
        yield record


def detached_message(spans: Sequence[SpanRecord]) -> str:
    """The input problem for spans no root reaches: what is wrong with their parent links."""
    selfish = sorted(s.span_id for s in spans if s.parent_id == s.span_id)
    cyclic = sorted(s.span_id for s in spans if s.parent_id != s.span_id)
    parts = []
    if selfish:
        parts.append(f"{_ids(selfish)} {'names' if len(selfish) == 1 else 'each name'} "
                     "itself as parent")
    if cyclic:
        parts.append(f"{_ids(cyclic)} lead{'s' if len(cyclic) == 1 else ''} "
                     "into a cycle of parent links")
    return (f"trace {spans[0].trace_id:032x}: {len(spans)} span(s) not graded, no root reaches "
            f"them: {'; '.join(parts)}")


def _ids(ids: Sequence[int], most: int = 5) -> str:
    shown = ", ".join(f"{i:016x}" for i in ids[:most])
    more = f" and {len(ids) - most} more" if len(ids) > most else ""
    return f"span{'s' if len(ids) > 1 else ''} {shown}{more}"


class _Sessions:
    """The sessions of ``grade``: every run with a session key filed under it, compacted,
    and each session graded once the input has ended (runs come in file order, not time
    order). Past ``sessions.max_open_sessions`` the least recently filed session is graded
    early, and that is reported as an input problem."""

    def __init__(self, config: ToolEvalConfig) -> None:
        self.config = config
        self.keys = tuple(config.sessions.keys)
        self.open = OpenSessions(config.sessions,
                                 outputs=any(g.type == "tool" for g in config.session_graders))
        self.early: list[SessionReport] = []

    def add(self, report: RunReport, members: Sequence[SpanRecord]) -> None:
        run = report.run
        key = session_key(run.root_attributes, (m.attributes for m in members), self.keys)
        if key is None:
            return
        for session in self.open.add(key, run):
            graded = grade_session(session, self.config)
            if graded is not None:
                self.early.append(graded)

    def finish(self, problem: Callable[[InputProblem], None]) -> list[SessionReport]:
        limit = self.config.sessions.max_open_sessions
        for report in self.early:
            problem(InputProblem("sessions", None, (
                f"session {report.key.value!r} was graded before the input ended: more than "
                f"sessions.max_open_sessions ({limit}) were open; a later run of it was "
                "graded as another session")))
        for limit_name, what in (("max_session_calls", "tool call(s)"),
                                 ("max_session_runs", "run(s)")):
            over = self.open.counts["dropped." + limit_name]
            if over:
                problem(InputProblem("sessions", None, (
                    f"{over} {what} not kept in their sessions: more than "
                    f"sessions.{limit_name} ({getattr(self.config.sessions, limit_name)}) "
                    "in one session")))
        out = list(self.early)
        for session in self.open.take_all("input_end"):
            graded = grade_session(session, self.config)
            if graded is not None:
                out.append(graded)
        out.sort(key=SessionReport.sort_key)
        return out


def _file_case(report: RunReport, tally: CaseTally, path: str,
               problem: Callable[[InputProblem], None]) -> None:
    run = report.run
    tally.add(report.case, run.trace_id_hex, run.root_span_id_hex, report.results)
    if report.ambiguous:
        problem(InputProblem(path, None, (
            f"trace {run.trace_id_hex} root {run.root_span_id_hex}: the run matches "
            f"{len(report.ambiguous)} cases ({', '.join(report.ambiguous)}); a run belongs to "
            "one case: make their matches exclusive")))


def grade_files(paths: Sequence[str], config: ToolEvalConfig, *,
                input_format: str | None = None, group_by: str | None = None,
                progress: TextIO | None = None,
                on_problem: Callable[[InputProblem], None] | None = None,
                on_report: Callable[[RunReport, tuple[int, int, int]], None] | None = None,
                max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> GradeOutcome:
    """Read, cut and grade every file (``-`` is standard input); then aggregate.

    The reports are ``outcome.reports``, sorted by ``outputs.stream.run_key``; or, with
    ``on_report``, each is passed to it with that key as soon as it is graded, in the order
    graded, and not kept.

    Raises:
        files.InputError: a file cannot be read at all, has a JSON line or document longer
            than ``max_line_bytes``, or gave problems and not one span
            (malformed lines among good ones are only reported).
    """
    outcome = GradeOutcome()
    meter = _Progress(progress if progress is not None else sys.stderr)
    sessions = _Sessions(config) if config.session_graders else None
    running = RunningAggregate(config, group_by=group_by) if on_report is not None else None
    tally = CaseTally(config.cases) if config.cases is not None else None

    def problem(p: InputProblem) -> None:
        outcome.problems.append(p)
        if on_problem is not None:
            on_problem(p)

    for path in paths:
        spans_before, problems_before = outcome.spans, len(outcome.problems)
        records = read_records(path, input_format=input_format, on_problem=problem,
                               max_line_bytes=max_line_bytes)

        def detached(spans: list[SpanRecord], path: str = path) -> None:
            problem(InputProblem(path, None, detached_message(spans)))

        for trace in iter_traces(_counted(records, outcome, meter)):
            reports = grade_records(trace, config, on_detached=detached,
                                    on_run=sessions.add if sessions is not None else None)
            outcome.runs += len(reports)
            if tally is not None:
                for report in reports:
                    _file_case(report, tally, path, problem)
            if running is None or on_report is None:
                outcome.reports.extend(reports)
                continue
            for report in reports:
                key = run_key(report)
                running.add(report, key)
                on_report(report, key)
        if outcome.spans == spans_before and len(outcome.problems) > problems_before:
            # Nothing but problems: this is not a trace file we can read.
            raise InputError(f"{path}: no span could be read "
                             f"({len(outcome.problems) - problems_before} problems)")
    meter.update(outcome.spans, outcome.runs, final=outcome.spans > 0x3FFF)
    if sessions is not None:
        outcome.sessions = sessions.finish(problem)
    if running is not None:
        outcome.aggregate = running.result()
    else:
        outcome.reports.sort(key=run_key)
        outcome.aggregate = aggregate(outcome.reports, config, group_by=group_by)
    if tally is not None:
        outcome.cases = tally.result()
        outcome.aggregate["cases"] = tally.summary()
    if sessions is not None:
        passed = sum(1 for r in outcome.sessions if r.passed)
        outcome.aggregate["sessions"] = {"sessions": len(outcome.sessions), "passed": passed,
                                         "failed": len(outcome.sessions) - passed}
    return outcome
