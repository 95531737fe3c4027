"""Run the configured graders over runs: the one grading core every front door uses."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .cases import Ambiguous
from .graders.matching import BudgetExceeded, grading_limits
from .guard import GuardRules
from .guard_result import GUARD_RESULT, guard_result
from .model import AgentRun, GradeResult, RunReport, SpanRecord
from .trajectory import build_run, find_runs

if TYPE_CHECKING:
    from .config import ConfiguredGrader, ToolEvalConfig

__all__ = ["BUDGET_EXCEEDED", "grade_records", "grade_run", "grade_spans", "grade_with"]

#: ``error`` of the results of graders that the run's grading budget left no time for.
BUDGET_EXCEEDED = "budget_exceeded"


def grade_run(run: AgentRun, config: ToolEvalConfig, *, case: str | None = None,
              pause: Callable[[], object] | None = None) -> RunReport | None:
    """Grade one run with every grader that applies, and the guard's rules when the config has
    a ``guard:`` section (a result named ``guard``, ``guard_result``); None when the run is not
    graded at all.

    A grader that raises yields a result labelled ``error``; the others still run. The
    graders of one run share a budget of CPU time (``limits.grading_budget_ms``): a grader
    running when it is spent stops at its next regex match, and it and every grader after it
    yield an ``error`` result with ``error`` = ``budget_exceeded``. With ``cases:``, a run
    that matches a case is graded by that case's graders (``RunReport.case``); one that
    matches two or more by the shared graders, their ids in ``RunReport.ambiguous``. Regex matches on argument,
    result and message values see at most ``limits.max_match_chars`` characters of each
    (``otel_tooleval.graders.matching``); one match already running cannot be interrupted.
    ``case``, the id of one of ``config``'s cases, grades the run by that case without
    matching (the pytest plugin's ``case=``; ``grade_records`` checks that it exists).
    ``pause``, when given, is called between two graders (the live processor's grading
    thread gives the interpreter lock back to the application there).
    """
    agents = config.runs.agents
    if agents is not None and run.agent not in agents:
        return None
    strict = config.runs.strict_reading and not run.reading.agrees
    graders = config.graders
    ambiguous: tuple[str, ...] = ()
    if case is not None:   # named by the caller: no match rule asked
        graders = config.case_graders[case]
    elif config.cases is not None:
        # A case's graders: the shared ones with its parameters, then its own (docs/cases.md).
        found = config.cases.match(run)
        if isinstance(found, Ambiguous):
            ambiguous = found.ids
        elif found is not None:
            case, graders = found.id, config.case_graders[found.id]
    results = (grade_with(graders, run.agent, lambda entry: entry.grader.grade(run), config,
                          pause) if graders else [])   # none: no budget clock to start
    if config.guard_rules is not None:
        results.append(_guarded(run, config.guard_rules))
    if strict:
        results.append(reading_failure(run))
    return RunReport(run, tuple(results), case, ambiguous)


def _guarded(run: AgentRun, rules: GuardRules) -> GradeResult:
    """The run's ``guard`` result; a failure inside is a failing result, never an exception
    (as for a grader that raises)."""
    try:
        return guard_result(run.calls, rules)
    except (Exception, SystemExit) as exc:
        return GradeResult.failure(GUARD_RESULT, GUARD_RESULT, type(exc).__name__,
                                   f"the guard raised {type(exc).__name__} while checking "
                                   "this run's calls")


#: The result ``runs.strict_reading`` adds to a run whose two witnesses disagree.
READING_RESULT = "tooleval.reading"


def reading_failure(run: AgentRun) -> GradeResult:
    """A failing result saying how a run's requests and executions disagree."""
    return GradeResult.failure(
        READING_RESULT, "reading", "reading_disagreement",
        "the model's requests and the tool spans disagree: " + "; ".join(
            run.reading.problems()))


def grade_with(entries: Iterable[ConfiguredGrader], agent: str | None,
               grade_one: Callable[[ConfiguredGrader], GradeResult],
               config: ToolEvalConfig, pause: Callable[[], object] | None = None
               ) -> list[GradeResult]:
    """``grade_one`` for every entry that applies to ``agent``, within one grading budget;
    a grader that raises yields an ``error`` result (``grade_run``; sessions use it too).
    ``pause`` is called before every grader but the first that runs."""
    limits = config.limits
    results: list[GradeResult] = []
    with grading_limits(limits.max_match_chars, limits.grading_budget_ms) as clock:
        for entry in entries:
            if not entry.applies_to(agent):
                continue
            if clock.exceeded():
                results.append(_over_budget(entry.name, entry.type, limits.grading_budget_ms,
                                            started=False))
                continue
            if pause is not None and results:
                pause()
            try:
                result = grade_one(entry)
            except BudgetExceeded:
                result = _over_budget(entry.name, entry.type, limits.grading_budget_ms,
                                      started=True)
            # SystemExit too: a grader calling sys.exit() would otherwise end the grading thread.
            except (Exception, SystemExit) as exc:  # a grader bug must never cost the others
                result = GradeResult.failure(
                    entry.name, entry.type, type(exc).__name__,
                    f"grader {entry.name!r} raised {type(exc).__name__} while grading this run",
                )
            results.append(result)
    return results


def _over_budget(name: str, type_: str, budget_ms: float, *, started: bool) -> GradeResult:
    when = "before it finished" if started else "before it started"
    return GradeResult.failure(
        name, type_, BUDGET_EXCEEDED,
        f"Not graded: this run's grading budget ({budget_ms:g} ms of CPU time, "
        f"limits.grading_budget_ms) was used up {when}; raise the budget or lower "
        "limits.max_match_chars, or simplify slow patterns.")


def grade_records(records: Iterable[SpanRecord], config: ToolEvalConfig, *,
                  on_detached: Callable[[list[SpanRecord]], None] | None = None,
                  on_run: Callable[[RunReport, Sequence[SpanRecord]], None] | None = None,
                  case: str | None = None) -> list[RunReport]:
    """Cut complete traces into runs and grade each one.

    ``on_detached`` receives the spans of a trace that no root reaches (parent cycles);
    ``on_run`` each graded run's report with the run's spans (sessions read their keys);
    ``case`` grades every run by that case of ``config`` (``grade_run``).

    Raises:
        ValueError: ``case`` names no case of ``config``.
    """
    if case is not None and case not in config.case_graders:
        raise ValueError(f"no case {case!r} among the config's cases")
    reports = []
    for root, members in find_runs(records, config.policy, on_detached=on_detached):
        report = grade_run(build_run(root, members, config.policy), config, case=case)
        if report is not None:
            reports.append(report)
            if on_run is not None:
                on_run(report, members)
    return reports


def grade_spans(spans: Iterable[Any], config: Any, *,
                case: str | None = None) -> list[RunReport]:
    """Grade finished ``ReadableSpan``s (e.g. from an ``InMemorySpanExporter``); ``case``
    grades every run by that case of the config, matched or not (ValueError when it has no
    such case).

    Spans without a span context (built by hand, as the UiPath SDK's docs build an execution's
    ``agent_trace``) belong to no trace: together they are one run, in their list order, under
    a root standing for the whole list (from the first start to the last end).
    """
    from ._compat import record_from_span
    from .config import load_config

    cfg = load_config(config)
    traced: list[SpanRecord] = []
    loose: list[SpanRecord] = []
    for span in spans:
        record = record_from_span(span)
        # A valid span id is never 0: record_from_span gives 0 to a span without a context.
        (loose if record.span_id == 0 else traced).append(record)
    reports = grade_records(traced, cfg, case=case)
    if loose:
        ends = [r.end_ns for r in loose if r.end_ns is not None]
        root = SpanRecord(0, 1, 0, "agent_trace", min(r.start_ns for r in loose),
                          max(ends) if ends else None, {})
        report = grade_run(build_run(root, loose, cfg.policy), cfg, case=case)
        if report is not None:
            reports.append(report)
    return reports
