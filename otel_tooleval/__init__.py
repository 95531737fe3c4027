"""otel-tooleval: grade what AI agents do with their tools, live, inside OpenTelemetry.

The public names are imported on first use (PEP 562), so importing the package, or its pytest
plugin in every pytest session of a project that has it installed, costs almost nothing until
something is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

_EXPORTS = {
    "AgentRun": ".model",
    "ConfigError": ".config",
    "GradeResult": ".model",
    "GuardViolation": ".guard",
    "OTLPJsonFileExporter": ".file_exporter",
    "RunReport": ".model",
    "SessionReport": ".sessions.model",
    "ToolCall": ".model",
    "ToolEvalConfig": ".config",
    "ToolEvalSpanExporter": ".exporter",
    "ToolEvalSpanProcessor": ".processor",
    "check_call": ".live_guard",
    "grade_run": ".grading",
    "grade_spans": ".grading",
    "grader": ".graders.custom",
    "install": ".providers",
    "load_config": ".config",
}

__all__ = [
    "AgentRun",
    "ConfigError",
    "GradeResult",
    "GuardViolation",
    "OTLPJsonFileExporter",
    "RunReport",
    "SessionReport",
    "ToolCall",
    "ToolEvalConfig",
    "ToolEvalSpanExporter",
    "ToolEvalSpanProcessor",
    "__version__",
    "check_call",
    "grade_run",
    "grade_spans",
    "grader",
    "install",
    "load_config",
]

if TYPE_CHECKING:
    from .config import ConfigError, ToolEvalConfig, load_config
    from .exporter import ToolEvalSpanExporter
    from .file_exporter import OTLPJsonFileExporter
    from .graders.custom import grader
    from .grading import grade_run, grade_spans
    from .guard import GuardViolation
    from .live_guard import check_call
    from .model import AgentRun, GradeResult, RunReport, ToolCall
    from .processor import ToolEvalSpanProcessor
    from .providers import install
    from .sessions.model import SessionReport


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'otel_tooleval' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
