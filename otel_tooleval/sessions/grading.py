"""Grading a session with the ``sessions:`` graders."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..grading import grade_with
from ..model import AgentRun, GradeResult
from .model import Session, SessionReport
from .turns import SessionGrader

if TYPE_CHECKING:
    from ..config import ConfiguredGrader, ToolEvalConfig

__all__ = ["grade_session"]


def grade_session(session: Session, config: ToolEvalConfig) -> SessionReport | None:
    """The session's verdicts; None when it has no run or no session grader applies to its
    agent (the agent of its first run)."""
    runs = session.ordered_runs()
    if not runs:
        return None
    agent = runs[0].agent
    entries = [e for e in config.session_graders if e.applies_to(agent)]
    if not entries:
        return None
    view: list[AgentRun] = []
    singles: list[AgentRun] = []

    def grade_one(entry: ConfiguredGrader) -> GradeResult:
        grader = entry.grader
        if isinstance(grader, SessionGrader):
            if not singles:
                singles.extend(r.as_run() for r in runs)
            return grader.grade_session(singles)
        if not view:
            view.append(session.as_run())
        return grader.grade(view[0])

    results = grade_with(entries, agent, grade_one, config)
    return SessionReport(session.key, agent, tuple(runs), tuple(results),
                         sum(r.dropped_calls for r in runs), session.ended,
                         session.dropped_runs)
