"""Strands Agents (native OpenTelemetry, scope ``strands.telemetry.tracer``).

Its default telemetry keeps a tool call's arguments and result only in span events: the
arguments as JSON text in ``gen_ai.tool.message`` (``content``), the result as content blocks
in ``gen_ai.choice`` (``message``), and the run's answer in the root's ``gen_ai.choice``
(``message``, with a trailing newline). With ``OTEL_SEMCONV_STABILITY_OPT_IN=
gen_ai_latest_experimental`` the call is in the GenAI attributes, its result as the same content
blocks, ``[{"text": "<the return value as JSON>"}]``, and the answer in the GenAI convention's
``gen_ai.client.inference.operation.details`` event (``genai``).
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
        result_from=content_blocks,
        argument_events=(("gen_ai.tool.message", "content"),),
        result_events=(("gen_ai.choice", "message"),)),),
    output_events=(("gen_ai.choice", "message"),),
)
