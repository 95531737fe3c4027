"""Where verdicts go: the root-span copy, log-based events and metrics."""

from __future__ import annotations

from .logs import LogEvents
from .metrics import VerdictMetrics
from .span import EVENT_NAME, result_attributes, root_attributes, span_events

__all__ = [
    "EVENT_NAME",
    "LogEvents",
    "VerdictMetrics",
    "result_attributes",
    "root_attributes",
    "span_events",
]
