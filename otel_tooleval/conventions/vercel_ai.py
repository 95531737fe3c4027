"""The Vercel AI SDK's ``ai.*`` spans (AI SDK 6 and before; ``LegacyOpenTelemetry`` in 7).

``ai.operationId`` marks the call (``ai.generateText``, ``ai.streamText`` ...: the run), each
model request (``.doGenerate`` / ``.doStream``) and each tool call (``ai.toolCall``, with
``ai.toolCall.name`` / ``.args`` / ``.result`` / ``.id``); the agent is the call's
``ai.telemetry.functionId``. (The SDK's GenAI spans are read by the ``gen_ai`` convention.)
"""

from __future__ import annotations

from .spec import Convention, KindMarker, ToolConvention

__all__ = ["CONVENTION"]

_CALLS = ("generateText", "streamText", "generateObject", "streamObject")

CONVENTION = Convention(
    name="vercel_ai",
    markers=(KindMarker(
        "ai.operationId", agents=frozenset(f"ai.{c}" for c in _CALLS),
        models=frozenset(f"ai.{c}.{d}" for c in _CALLS for d in ("doGenerate", "doStream"))),),
    tools=(ToolConvention("vercel_ai", "ai.toolCall.name", ("ai.toolCall.args",),
                          ("ai.toolCall.result",), ("ai.toolCall.id",)),),
    agent_names=("ai.telemetry.functionId",),
    outputs=("ai.response.text",),
)
