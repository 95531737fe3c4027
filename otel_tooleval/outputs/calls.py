"""One tool call as plain data: the ``calls`` of ``grade --include-calls`` and of ``inspect``."""

from __future__ import annotations

from typing import Any

from ..model import ToolCall

__all__ = ["call_status", "call_to_dict"]


def call_status(call: ToolCall) -> str:
    """``pending`` (its span had not ended when the root did), ``error`` or ``ok``."""
    if call.pending:
        return "pending"
    return "error" if call.error is not None else "ok"


def call_to_dict(call: ToolCall) -> dict[str, Any]:
    """``step``, ``name``, ``arguments``, ``result``, ``status``, ``error``, ``duration_ms``
    and ``span_id`` (16 hex) of one call.

    Arguments and results are decoded as graders see them (JSON text parsed), and complete:
    this is for looking at what a run did, so nothing is cut. ``result`` is null when the call
    has none (pending, or its span recorded none).
    """
    return {
        "step": call.step,
        "name": call.name,
        "arguments": call.arguments,
        "result": call.result if call.has_result else None,
        "status": call_status(call),
        "error": call.error,
        "duration_ms": call.duration_ms,
        "span_id": format(call.span_id, "016x"),
    }
