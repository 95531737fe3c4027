"""Strands Agents (native OpenTelemetry, scope ``strands.telemetry.tracer``).

With ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`` a tool's result is recorded
as content blocks, ``[{"text": "<the return value as JSON>"}]``. (Its default telemetry keeps
arguments and results only in span events, which otel-tooleval does not read yet.)
"""

from __future__ import annotations

from .envelopes import content_blocks
from .spec import Convention, ToolConvention

__all__ = ["CONVENTION"]

CONVENTION = Convention(
    name="strands",
    tools=(ToolConvention(
        "strands", "gen_ai.tool.name", ("gen_ai.tool.call.arguments",),
        ("gen_ai.tool.call.result",), ("gen_ai.tool.call.id",), scope="strands",
        result_from=content_blocks),),
)
