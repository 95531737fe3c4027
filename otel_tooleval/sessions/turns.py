"""Session graders that grade each run of a session against its own expectation.

``turns:`` (any family) gives one grader per run: run k of the session is graded by the k-th;
ADK's ``expected_invocations`` (``tool_trajectory_avg_score``) is the same with ADK's pass
rule. The session's score is the mean of the runs' scores. It passes when every run passed
(``turns:``) or when the mean reaches the threshold (``pass_threshold``, ADK). A session with a
number of runs other than the number of turns gets label ``error`` naming both counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..model import AgentRun, GradeResult

if TYPE_CHECKING:
    from ..graders.registry import Grader

__all__ = ["RUN_COUNT_MISMATCH", "SessionGrader", "TurnsGrader"]

#: ``error`` of a turn-aware result whose session has another number of runs than turns.
RUN_COUNT_MISMATCH = "run_count_mismatch"


@runtime_checkable
class SessionGrader(Protocol):
    """A grader that sees a session's runs one by one (not only its calls as one run)."""

    name: str
    type: str

    def grade_session(self, runs: Sequence[AgentRun]) -> GradeResult: ...


class TurnsGrader:
    """One grader per run of the session, in run order.

    Args:
        name: the session grader's name.
        type_: the family of the per-run graders.
        turns: the per-run graders (run k is graded by ``turns[k]``).
        what: what a turn is called in explanations ("turn", "invocation").
        pass_threshold: None: passes when every run passed; else when the mean score reaches it.
    """

    def __init__(self, name: str, type_: str, turns: Sequence[Grader], *, what: str = "turn",
                 pass_threshold: float | None = None) -> None:
        self.name = name
        self.type = type_
        self.turns = tuple(turns)
        self.what = what
        self.pass_threshold = pass_threshold
        # What ``check`` prints: each turn's resolved entry.
        self.params = {"turns": [getattr(t, "params", None) or getattr(t, "spec", None)
                                 for t in self.turns],
                       "pass_threshold": pass_threshold}

    def grade(self, run: AgentRun) -> GradeResult:
        """A single run graded alone: a session of one run."""
        return self.grade_session([run])

    def grade_session(self, runs: Sequence[AgentRun]) -> GradeResult:
        n, expected = len(runs), len(self.turns)
        if n != expected:
            return GradeResult.failure(
                self.name, self.type, RUN_COUNT_MISMATCH,
                f"The session has {n} run{_s(n)} but {expected} {self.what}{_s(expected)} "
                f"{'is' if expected == 1 else 'are'} expected; each run is graded against the "
                f"{self.what} at its position, so the counts must agree.")
        results = [grader.grade(run) for grader, run in zip(self.turns, runs)]
        score = math.fsum(r.score for r in results) / n if n else 1.0
        if self.pass_threshold is None:
            passed = all(r.passed for r in results)
            rule = f"every {self.what} must pass"
        else:
            passed = score >= self.pass_threshold
            rule = f"mean {'>=' if passed else '<'} threshold {self.pass_threshold:g}"
        failing = [k for k, r in enumerate(results) if not r.passed]
        if failing:
            shown = ", ".join(f"#{k}" for k in failing[:5]) + (" …" if len(failing) > 5 else "")
            first = results[failing[0]]
            text = (f"{len(failing)} of {n} {self.what}s failed ({shown}); {self.what} "
                    f"#{failing[0]}: {first.explanation}")
        else:
            text = f"All {n} {self.what}{_s(n)} passed."
        text += f" Mean score {score:.2f} ({rule})."
        errors = {r.error for r in results if r.error is not None}
        label = "pass" if passed else "error" if errors and not passed else "fail"
        details: dict[str, Any] = {
            "turns": [{"run": k, "score": r.score, "passed": r.passed, "label": r.label,
                       "explanation": r.explanation, "details": dict(r.details)}
                      for k, r in enumerate(results)],
            "mean_score": score,
        }
        if self.pass_threshold is not None:
            details["threshold"] = self.pass_threshold
        return GradeResult(self.name, self.type, score, passed, label, text, details,
                           next(iter(sorted(errors))) if label == "error" else None)


def _s(n: int) -> str:
    return "" if n == 1 else "s"
