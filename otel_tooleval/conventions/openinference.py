"""OpenInference (LangChain/LangGraph, OpenAI Agents, smolagents, CrewAI, LlamaIndex) and the
UiPath SDK: ``openinference.span.kind`` marks runs and model calls, ``tool.name`` the call,
``input.value`` / ``output.value`` hold its arguments and result."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..values import decode_value
from .envelopes import mcp_call_result
from .spec import Convention, KindMarker, ToolConvention

__all__ = ["CONVENTION", "langchain_text", "tool_message_call_id"]

CONVENTION = Convention(
    name="openinference",
    markers=(KindMarker("openinference.span.kind", agents=frozenset({"AGENT"}),
                        models=frozenset({"LLM"})),),
    tools=(
        ToolConvention(
            "openinference", "tool.name",
            ("input.value", "gen_ai.tool.call.arguments", "tool_arguments"),
            ("output.value", "gen_ai.tool.call.result", "tool_response"),
            ("tool.id", "tool_call.id", "gen_ai.tool.call.id"), result_from=mcp_call_result,
        ),
    ),
    scopes=("openinference.instrumentation", "smolagents"),
    agent_names=("agent.name",),
    agent_node_names=("graph.node.id",),
)


def tool_message_call_id(attrs: Mapping[str, Any], result_keys: tuple[str, ...]) -> str | None:
    """LangChain keeps the call id only in the ToolMessage it records as the output."""
    for key in result_keys:
        if key not in attrs:
            continue
        raw = attrs[key]
        if isinstance(raw, str) and '"tool_call_id"' in raw:
            try:
                doc = json.loads(raw)
            except ValueError:
                return None
            data = doc.get("data") if isinstance(doc, dict) else None
            if isinstance(data, dict) and data.get("tool_call_id"):
                return str(data["tool_call_id"])
            return None
    return None


def langchain_text(value: Any) -> str | None:
    """The last AI text of a LangChain ``{"messages": [...]}`` or ``{"generations": ...}``."""
    doc = decode_value(value)
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("generations"), list):
        for gen_list in reversed(doc["generations"]):
            items = gen_list if isinstance(gen_list, list) else [gen_list]
            for gen in reversed(items):
                if isinstance(gen, dict) and isinstance(gen.get("text"), str) and gen["text"]:
                    return str(gen["text"])
        return None
    messages = doc.get("messages")
    if not isinstance(messages, list):
        return None
    for msg in reversed(messages):
        if not isinstance(msg, dict):
            continue
        kind = msg.get("type")
        data: dict[str, Any] = msg["data"] if isinstance(msg.get("data"), dict) else msg
        if kind in ("ai", "AIMessage", "assistant") or data.get("type") == "ai":
            content = data.get("content")
            if isinstance(content, str) and content:
                return content
    return None
