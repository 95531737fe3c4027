"""Span recognition: which span is an agent run, a model call or a tool call, under each
convention, and where a call's data lives.

One module per convention family (``genai``, ``openinference``, ``traceloop``), each declaring
a ``Convention`` (``spec``); ``registry`` orders them and derives the tables; ``kinds`` is the
hot-path classification, ``calls`` and ``texts`` read calls and answers when a run is graded.
"""

from __future__ import annotations

from ..values import decode_value
from .calls import agent_name_of, tool_call_from
from .kinds import (
    AGENT,
    MODEL,
    TOOL,
    is_agent_span,
    is_framework_span,
    is_model_span,
    span_kind,
    tool_name_of,
)
from .registry import CONVENTIONS, MARKER_KEYS, TOOL_CONVENTIONS
from .spec import Convention, KindMarker, ToolConvention
from .texts import assistant_text_of, final_output_of

__all__ = [
    "AGENT",
    "CONVENTIONS",
    "MARKER_KEYS",
    "MODEL",
    "TOOL",
    "TOOL_CONVENTIONS",
    "Convention",
    "KindMarker",
    "ToolConvention",
    "agent_name_of",
    "assistant_text_of",
    "decode_value",
    "final_output_of",
    "is_agent_span",
    "is_framework_span",
    "is_model_span",
    "span_kind",
    "tool_call_from",
    "tool_name_of",
]
