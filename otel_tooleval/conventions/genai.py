"""The OpenTelemetry GenAI semantic conventions (pydantic-ai, Strands, ADK, OpenLLMetry's
GenAI spans and hand-written agents): ``gen_ai.operation.name`` marks runs and model calls,
``gen_ai.tool.*`` holds the call, ``gen_ai.output.messages`` the model's answer (an attribute,
or in a root's ``gen_ai.client.inference.operation.details`` event)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..values import decode_value
from .envelopes import mcp_call_result
from .spec import Convention, KindMarker, ToolConvention

__all__ = ["CONVENTION", "indexed_texts", "texts_from_messages"]

CONVENTION = Convention(
    name="gen_ai",
    markers=(KindMarker("gen_ai.operation.name",
                        agents=frozenset({"invoke_agent", "invoke_workflow"}),
                        models=frozenset({"chat", "text_completion", "generate_content"}),
                        setups=frozenset({"create_agent", "embeddings"})),),
    tools=(
        # pydantic-ai's older tool_arguments / tool_response too.
        ToolConvention(
            "gen_ai", "gen_ai.tool.name",
            ("gen_ai.tool.call.arguments", "tool_arguments", "input.value"),
            ("gen_ai.tool.call.result", "tool_response", "output.value"),
            ("gen_ai.tool.call.id",), result_from=mcp_call_result,
        ),
    ),
    scopes=("pydantic-ai", "pydantic_ai", "strands", "gcp.vertex.agent"),
    agent_names=("gen_ai.agent.name", "gen_ai.workflow.name"),
    # The semconv's event for content kept out of the span's attributes (Strands' latest).
    output_events=(("gen_ai.client.inference.operation.details", "gen_ai.output.messages"),),
)


def texts_from_messages(value: Any) -> list[str]:
    """Assistant texts from ``gen_ai.output.messages`` (semconv parts or plain content)."""
    messages = decode_value(value)
    if isinstance(messages, dict):
        messages = [messages]
    texts: list[str] = []
    if not isinstance(messages, list):
        return texts
    for message in messages:
        if not isinstance(message, dict) or message.get("role", "assistant") != "assistant":
            continue
        parts = message.get("parts")
        if isinstance(parts, list):
            chunk = [
                str(p.get("content"))
                for p in parts
                if isinstance(p, dict) and p.get("type") == "text" and p.get("content")
            ]
            if chunk:
                texts.append("".join(chunk))
        elif isinstance(message.get("content"), str) and message["content"]:
            texts.append(message["content"])
    return texts


def indexed_texts(attrs: Mapping[str, Any], prefix: str, role_key: str,
                  content_key: str) -> list[str]:
    """Assistant texts from flattened message lists (``prefix.0.role``, ``prefix.0.content``)."""
    texts: list[str] = []
    i = 0
    while True:
        role = attrs.get(f"{prefix}.{i}.{role_key}")
        content = attrs.get(f"{prefix}.{i}.{content_key}")
        if role is None and content is None:
            return texts
        if role in (None, "assistant", "ai") and isinstance(content, str) and content:
            texts.append(content)
        i += 1
