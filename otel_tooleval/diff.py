"""``otel-tooleval diff``: per-case regressions between two ``grade --format json`` documents.

Each document is read into entries, one per case (its top-level ``cases`` list) or, in a
document without cases, one per run key (``run_key``); the entries of the two sides are paired
by key and each (entry, grader) pair of scores is compared against a threshold. Reading
checks the shape and names the file and field of the first thing wrong (:class:`DiffInputError`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["EPSILON", "CaseDiff", "DiffInputError", "DiffReport", "Entry", "Row", "Side",
           "compare", "diff_files", "load_side", "read_side", "run_key"]

#: Scores closer than this are equal: the same grade computed twice may differ in the last bit.
EPSILON = 1e-9

Outcome = Literal["regressed", "improved", "same", "added", "removed"]
FailOn = Literal["case", "mean"]

#: The statuses of a case in grade's JSON (``matched`` says nothing of the verdict).
_STATUSES = ("pass", "fail", "matched", "missing")


class DiffInputError(Exception):
    """A file that is not a readable grade JSON document; the message is one line naming it."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One case (or one run key) of a document: its status and each grader's score and label.

    ``score`` None is a grader that could not grade (``label`` "error", or no score).
    """

    key: str
    status: str | None
    scores: Mapping[str, tuple[float | None, str | None]]


@dataclass(frozen=True, slots=True)
class Side:
    """A document read: ``by_case`` when it has a ``cases`` list, its entries by key."""

    path: str
    by_case: bool
    entries: Mapping[str, Entry]
    runs: int
    runs_without_case: int = 0


@dataclass(frozen=True, slots=True)
class Row:
    """One grader of one case on both sides."""

    grader: str
    baseline: float | None
    candidate: float | None
    delta: float | None
    outcome: Outcome
    baseline_label: str | None = None
    candidate_label: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"grader": self.grader, "baseline": self.baseline, "candidate": self.candidate,
                "delta": self.delta, "outcome": self.outcome,
                "baseline_label": self.baseline_label, "candidate_label": self.candidate_label}


@dataclass(frozen=True, slots=True)
class CaseDiff:
    """A case found on both sides: its outcome, statuses and rows (in the baseline's order,
    then graders only the candidate has)."""

    id: str
    outcome: Literal["regressed", "improved", "same"]
    baseline_status: str | None
    candidate_status: str | None
    status_regressed: bool
    rows: tuple[Row, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "outcome": self.outcome,
                "baseline_status": self.baseline_status,
                "candidate_status": self.candidate_status,
                "status_regressed": self.status_regressed,
                "results": [row.to_dict() for row in self.rows]}


@dataclass(frozen=True, slots=True)
class DiffReport:
    """The comparison of two documents and the verdict of the gate."""

    baseline: str
    candidate: str
    matched_by: Literal["case", "run"]
    threshold: float
    fail_on: FailOn
    cases: tuple[CaseDiff, ...]
    only_baseline: tuple[str, ...]
    only_candidate: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def regressed(self) -> tuple[CaseDiff, ...]:
        return tuple(c for c in self.cases if c.outcome == "regressed")

    @property
    def improved(self) -> tuple[CaseDiff, ...]:
        return tuple(c for c in self.cases if c.outcome == "improved")

    def mean_delta(self) -> float | None:
        """The mean of the deltas of every row scored on both sides; None when there is none."""
        deltas = [row.delta for case in self.cases for row in case.rows if row.delta is not None]
        return sum(deltas) / len(deltas) if deltas else None

    @property
    def failed(self) -> bool:
        """The gate: a regressed case (``fail_on`` case) or a mean delta below ``-threshold``."""
        if self.fail_on == "mean":
            mean = self.mean_delta()
            return mean is not None and mean < -self.threshold - EPSILON
        return bool(self.regressed)

    def summary(self) -> dict[str, Any]:
        graders: dict[str, dict[str, Any]] = {}
        base_scores: list[float] = []
        cand_scores: list[float] = []
        for case in self.cases:
            for row in case.rows:
                g = graders.setdefault(row.grader, {"results": 0, "regressed": 0,
                                                    "improved": 0, "deltas": []})
                g["results"] += 1
                g["regressed"] += row.outcome == "regressed"
                g["improved"] += row.outcome == "improved"
                if row.delta is not None:
                    g["deltas"].append(row.delta)
                    base_scores.append(row.baseline or 0.0)
                    cand_scores.append(row.candidate or 0.0)
        for g in graders.values():
            deltas = g.pop("deltas")
            g["mean_delta"] = _round(sum(deltas) / len(deltas)) if deltas else None
        mean = self.mean_delta()
        return {
            "cases": len(self.cases), "regressed": len(self.regressed),
            "improved": len(self.improved),
            "same": len(self.cases) - len(self.regressed) - len(self.improved),
            "only_baseline": len(self.only_baseline),
            "only_candidate": len(self.only_candidate),
            "mean_baseline": _round(sum(base_scores) / len(base_scores)) if base_scores else None,
            "mean_candidate": (_round(sum(cand_scores) / len(cand_scores)) if cand_scores
                               else None),
            "mean_delta": None if mean is None else _round(mean),
            "graders": graders, "failed": self.failed,
        }

    def to_dict(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "candidate": self.candidate,
                "matched_by": self.matched_by, "threshold": self.threshold,
                "fail_on": self.fail_on, "cases": [c.to_dict() for c in self.cases],
                "only_baseline": list(self.only_baseline),
                "only_candidate": list(self.only_candidate),
                "notes": list(self.notes), "summary": self.summary()}


def _round(value: float) -> float:
    return round(value, 6)


def diff_files(baseline: str, candidate: str, *, threshold: float = 0.0,
               fail_on: FailOn = "case") -> DiffReport:
    """Read both files (:func:`load_side`) and :func:`compare` them."""
    return compare(load_side(baseline), load_side(candidate), threshold=threshold,
                   fail_on=fail_on)


def load_side(path: str) -> Side:
    """A grade JSON file read; :class:`DiffInputError` names the file when it is not one."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise DiffInputError(f"{path}: cannot read: {reason}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DiffInputError(f"{path}: not JSON (line {exc.lineno} column {exc.colno}: "
                             f"{exc.msg}); diff reads grade --format json files") from None
    return read_side(path, doc)


def read_side(path: str, doc: Any) -> Side:
    """A parsed grade JSON document as a :class:`Side`."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("runs"), list):
        raise DiffInputError(f"{path}: not an otel-tooleval grade --format json document "
                             "(no top-level runs list)")
    runs: list[Any] = doc["runs"]
    cases = doc.get("cases")
    if cases is not None:
        if not isinstance(cases, list):
            raise DiffInputError(f"{path}: cases: not a list")
        entries: dict[str, Entry] = {}
        for i, case in enumerate(cases):
            where = f"cases[{i}]"
            if not isinstance(case, Mapping):
                raise DiffInputError(f"{path}: {where}: not an object")
            case_id = case.get("id")
            if not isinstance(case_id, str) or not case_id:
                raise DiffInputError(f"{path}: {where}.id: not a non-empty string")
            if case_id in entries:
                raise DiffInputError(f"{path}: {where}.id: {case_id!r} appears twice")
            entries[case_id] = Entry(case_id, _status(path, where, case),
                                     _scores(path, where, case.get("results")))
        unmatched = sum(1 for run in runs if isinstance(run, Mapping) and run.get("case") is None)
        return Side(path, True, entries, len(runs), unmatched)
    merged: dict[str, dict[str, tuple[float | None, str | None]]] = {}
    statuses: dict[str, str] = {}
    ordinals: dict[str, int] = {}
    for i, run in enumerate(runs):
        where = f"runs[{i}]"
        if not isinstance(run, Mapping):
            raise DiffInputError(f"{path}: {where}: not an object")
        key = run_key(run, ordinals)
        scores = _scores(path, where, run.get("results"))
        into = merged.setdefault(key, {})
        for name, pair in scores.items():
            into[name] = _worse(into[name], pair) if name in into else pair
        passed = run.get("passed")
        if isinstance(passed, bool):
            status = "pass" if passed else "fail"
            statuses[key] = "fail" if statuses.get(key) == "fail" else status
    entries = {key: Entry(key, statuses.get(key), scores) for key, scores in merged.items()}
    return Side(path, False, entries, len(runs))


def run_key(run: Mapping[str, Any], ordinals: dict[str, int]) -> str:
    """The key that pairs a run of a document without cases with the other side's.

    The run's ``case`` when it names one; else its agent and first user message (``agent:
    message``) when the run carries ``first_user_message``; else its agent and its position
    among that agent's runs without a message (``agent #3``), which pairs the n-th run of an
    agent on each side: right only when both sides ran the same inputs in the same order.
    ``ordinals`` counts those positions across the calls for one document.
    """
    case = run.get("case")
    if isinstance(case, str) and case:
        return case
    agent = run.get("agent")
    agent = agent if isinstance(agent, str) and agent else "(no agent)"
    message = run.get("first_user_message")
    if isinstance(message, str) and message.strip():
        return f"{agent}: {message.strip()}"
    n = ordinals[agent] = ordinals.get(agent, 0) + 1
    return f"{agent} #{n}"


def _status(path: str, where: str, case: Mapping[str, Any]) -> str | None:
    status = case.get("status")
    if status is not None and status not in _STATUSES:
        raise DiffInputError(f"{path}: {where}.status: {status!r} is not one of "
                             f"{', '.join(_STATUSES)}")
    passed = case.get("passed")
    if status != "missing" and isinstance(passed, bool):
        return "pass" if passed else "fail"     # "matched" says nothing of the verdict
    return status if isinstance(status, str) else None


def _scores(path: str, where: str, results: Any
            ) -> dict[str, tuple[float | None, str | None]]:
    """A results list as grader name -> (score, label); a name twice keeps the worse."""
    if results is None:
        return {}
    if not isinstance(results, list):
        raise DiffInputError(f"{path}: {where}.results: not a list")
    scores: dict[str, tuple[float | None, str | None]] = {}
    for j, result in enumerate(results):
        at = f"{where}.results[{j}]"
        if not isinstance(result, Mapping):
            raise DiffInputError(f"{path}: {at}: not an object")
        name = result.get("name")
        if not isinstance(name, str) or not name:
            raise DiffInputError(f"{path}: {at}.name: not a non-empty string")
        score = result.get("score")
        if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))
                                  or not math.isfinite(score)):
            raise DiffInputError(f"{path}: {at}.score: {score!r} is not a number or null")
        label = result.get("label")
        pair = (None if score is None else float(score),
                label if isinstance(label, str) else None)
        scores[name] = _worse(scores[name], pair) if name in scores else pair
    return scores


def _worse(a: tuple[float | None, str | None], b: tuple[float | None, str | None]
           ) -> tuple[float | None, str | None]:
    """The lower score of two (no score, an error, is the lowest)."""
    if a[0] is None:
        return a
    if b[0] is None:
        return b
    return b if b[0] < a[0] else a


def compare(baseline: Side, candidate: Side, *, threshold: float = 0.0,
            fail_on: FailOn = "case") -> DiffReport:
    """Pair the two sides' entries by key and compare each grader's score.

    A row regresses when its score fell by more than ``threshold``, or when the candidate has
    no score (an error) where the baseline had one; it improves on the reverse. A grader on
    one side only is ``added`` or ``removed``, neither a regression. A case regresses when a
    row does or it went missing (it had a run in the baseline, none in the candidate); it
    improves when a row does and none regresses. A verdict flipped from pass to fail is judged
    by its score, so that drops within the threshold stay noise.

    Raises :class:`DiffInputError` when one side has cases and the other not, or when both
    have entries and none pairs: two unrelated files are a usage error, not a clean diff.
    """
    if threshold < 0 or not math.isfinite(threshold):
        raise DiffInputError(f"--threshold: {threshold!r} is not a number >= 0")
    if baseline.by_case != candidate.by_case:
        with_cases, without = ((baseline, candidate) if baseline.by_case
                               else (candidate, baseline))
        raise DiffInputError(f"{without.path}: has no cases list while {with_cases.path} has "
                             "one: grade both with the same cases")
    cases: list[CaseDiff] = []
    for key, base in baseline.entries.items():
        cand = candidate.entries.get(key)
        if cand is not None:
            cases.append(_case_diff(base, cand, threshold))
    if not cases and baseline.entries and candidate.entries:
        raise DiffInputError(f"{baseline.path} and {candidate.path}: no case in common "
                             f"({len(baseline.entries)} and {len(candidate.entries)}): not two "
                             "runs of one suite?")
    notes: list[str] = []
    if not baseline.by_case:
        notes.append("no cases in the documents: runs paired by case, else agent and first "
                     "user message, else agent and position (docs/diff.md)")
    for side in (baseline, candidate):
        if side.runs_without_case:
            notes.append(f"{side.path}: {side.runs_without_case} run(s) matched no case and "
                         "are not compared")
    return DiffReport(
        baseline=baseline.path, candidate=candidate.path,
        matched_by="case" if baseline.by_case else "run", threshold=threshold, fail_on=fail_on,
        cases=tuple(cases),
        only_baseline=tuple(k for k in baseline.entries if k not in candidate.entries),
        only_candidate=tuple(k for k in candidate.entries if k not in baseline.entries),
        notes=tuple(notes))


def _case_diff(base: Entry, cand: Entry, threshold: float) -> CaseDiff:
    rows = [_row(name, base.scores[name], cand.scores.get(name), threshold)
            for name in base.scores]
    rows += [_row(name, None, cand.scores[name], threshold)
             for name in cand.scores if name not in base.scores]
    # A verdict that flipped with its score is judged by the score and the threshold (noise
    # within it is not a regression); a case that lost its run has no score to judge.
    status_regressed = cand.status == "missing" and base.status not in (None, "missing")
    outcomes = {row.outcome for row in rows}
    outcome: Literal["regressed", "improved", "same"] = (
        "regressed" if status_regressed or "regressed" in outcomes
        else "improved" if "improved" in outcomes else "same")
    return CaseDiff(base.key, outcome, base.status, cand.status, status_regressed, tuple(rows))


def _row(name: str, base: tuple[float | None, str | None] | None,
         cand: tuple[float | None, str | None] | None, threshold: float) -> Row:
    if base is None or cand is None:
        pair = cand if base is None else base
        assert pair is not None
        return Row(name, None if base is None else base[0], None if cand is None else cand[0],
                   None, "added" if base is None else "removed",
                   None if base is None else base[1], None if cand is None else cand[1])
    b, c = base[0], cand[0]
    delta: float | None = None
    outcome: Outcome
    if b is None or c is None:
        outcome = "same" if b is None and c is None else "regressed" if c is None else "improved"
    else:
        delta = _round(c - b)
        outcome = ("regressed" if delta < -threshold - EPSILON
                   else "improved" if delta > threshold + EPSILON else "same")
    return Row(name, b, c, delta, outcome, base[1], cand[1])

