"""The guard as part of a run's verdict: its rules tried on a finished run's calls.

The live processor checks each tool call as its span starts (``live_guard``); that marks the
call while it happens. A run's verdict is given by ``grading.grade_run``, the one core every
front door uses (the processor, ``ToolEvalSpanExporter``, ``serve``, ``grade``, the pytest
plugin), and it tries the same rules (``guard.GuardRules``) on the run's calls, in call order,
each call counted as the live guard counts it. A run with a call that breaks a rule fails: its
result named ``guard`` lists each offending call under ``details["violations"]``
(``otel_tooleval.violations``), so every front door marks and shows it as a grader's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .guard import RULES, UNKNOWN, GuardRules, GuardRun
from .model import GradeResult, ToolCall
from .violations import violation

__all__ = ["GUARD_RESULT", "guard_result"]

#: The ``name`` and ``type`` of the guard's result in a run's results.
GUARD_RESULT = "guard"

#: Offending calls named in the explanation (all of them are in ``details``).
_SHOWN = 3


def _unwrap_of(call: ToolCall) -> Callable[[Any], Any] | None:
    """The framework's own argument envelope of ``call`` (its convention row's), if any."""
    envelope = call.envelope
    return None if envelope is None else envelope.arguments_from


def guard_result(calls: Sequence[ToolCall],
                 rules: GuardRules) -> GradeResult:
    """The guard's verdict on a run's calls: passed when no call breaks a rule.

    Each call is checked as the live guard checks it (the first broken rule, in ``RULES``
    order, is its violation; every call counts towards the limits, offending ones included);
    a call whose arguments were never recorded is checked by the name rules only. Score 1.0 or
    0.0. ``details``: ``violations`` (one entry per offending call, its reason the rule and the
    guard's explanation: tool names and limits, never argument values) and ``rules`` (rule ->
    offending calls).
    """
    run = GuardRun()
    offending: list[dict[str, Any]] = []
    explained: list[str] = []
    per_rule: dict[str, int] = {}
    for call in calls:
        raw = call.raw_arguments
        found = rules.check(run, call.name, UNKNOWN if raw is None else raw, _unwrap_of(call))
        if found is None:
            continue
        offending.append(violation(call, f"guard.{found.rule}: {found.explanation}"))
        per_rule[found.rule] = per_rule.get(found.rule, 0) + 1
        if len(explained) < _SHOWN:
            explained.append(f"call #{call.index} {found.explanation}")
    details: dict[str, Any] = {"rules": {r: per_rule[r] for r in RULES if r in per_rule}}
    if not offending:
        checked = len(calls)
        return GradeResult(GUARD_RESULT, GUARD_RESULT, 1.0, True, "pass",
                           f"No call of the run breaks a guard rule ({checked} "
                           f"call{'' if checked == 1 else 's'} checked).", details)
    details["violations"] = offending
    more = len(offending) - len(explained)
    text = (f"{len(offending)} call{'' if len(offending) == 1 else 's'} "
            f"break{'s' if len(offending) == 1 else ''} a guard rule: " + "; ".join(explained)
            + (f"; and {more} more" if more else "") + ".")
    return GradeResult(GUARD_RESULT, GUARD_RESULT, 0.0, False, "fail", text, details)
