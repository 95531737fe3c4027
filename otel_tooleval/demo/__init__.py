"""The demo: a scripted agent traced with the plain OpenTelemetry API, graded live."""

from __future__ import annotations

from .agent import SCRIPTS, run_demo, run_scripted_agent

__all__ = ["SCRIPTS", "run_demo", "run_scripted_agent"]
