"""Grader families. Each module registers itself; adding a family is one new module and one
import line here."""

from __future__ import annotations

from . import tool_calls  # noqa: F401  (registers "tool-calls")
from . import tool_trajectory  # noqa: F401  (registers "tool_trajectory")
from .registry import REGISTRY, Grader, GraderFamily, GradingConfigError, register

__all__ = ["REGISTRY", "Grader", "GraderFamily", "GradingConfigError", "register"]
