"""otel-tooleval: grade what AI agents do with their tools, live, inside OpenTelemetry."""

from __future__ import annotations

__version__ = "0.3.0"

from .config import ConfigError, ToolEvalConfig, load_config
from .grading import grade_run, grade_spans
from .model import AgentRun, GradeResult, RunReport, ToolCall
from .processor import ToolEvalSpanProcessor
from .providers import install

__all__ = [
    "AgentRun",
    "ConfigError",
    "GradeResult",
    "RunReport",
    "ToolCall",
    "ToolEvalConfig",
    "ToolEvalSpanProcessor",
    "__version__",
    "grade_run",
    "grade_spans",
    "grader",
    "install",
    "load_config",
]
