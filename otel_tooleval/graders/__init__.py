"""Grader families. Each module registers itself; adding a family is one new module and one
name in the import below."""

from __future__ import annotations

from . import (  # noqa: F401  (importing a family registers it)
    function_sets,
    tool_call_accuracy,
    tool_call_checks,
    tool_call_f1,
    tool_call_order,
    tool_calls,
    tool_correctness,
    tool_graders,
    tool_trajectory,
    tool_trajectory_avg_score,
    trajectory_match,
)
from .registry import REGISTRY, Grader, GraderFamily, GradingConfigError, register

__all__ = ["REGISTRY", "Grader", "GraderFamily", "GradingConfigError", "register"]
