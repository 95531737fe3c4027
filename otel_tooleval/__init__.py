"""otel-tooleval: grade what AI agents do with their tools, live, inside OpenTelemetry."""

from __future__ import annotations

__version__ = "0.1.0"

from .config import ConfigError, ToolEvalConfig, load_config  # noqa: E402
from .grading import grade_run, grade_spans  # noqa: E402
from .install import install  # noqa: E402
from .model import AgentRun, GradeResult, RunReport, ToolCall  # noqa: E402
from .processor import ToolEvalSpanProcessor  # noqa: E402

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
    "install",
    "load_config",
]
