"""Span recognition: which span is an agent, a model call or a tool call, under each convention.

Each convention is one row of a table; adding a convention means adding a row, not a branch.
Nothing here parses JSON on the hot path: the ``is_*`` predicates are a few dict lookups, and
values are decoded only when a run is graded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .model import SpanRecord, ToolCall
from .values import as_text, decode_value

__all__ = [
    "MARKER_KEYS",
    "TOOL_CONVENTIONS",
    "ToolConvention",
    "agent_name_of",
    "assistant_text_of",
    "decode_value",
    "final_output_of",
    "is_agent_span",
    "is_framework_span",
    "is_model_span",
    "tool_call_from",
    "tool_name_of",
]

# Span-kind markers: (attribute, values that mark an agent, values that mark a model call).
_KIND_MARKERS: tuple[tuple[str, frozenset[str], frozenset[str]], ...] = (
    ("gen_ai.operation.name", frozenset({"invoke_agent", "invoke_workflow"}),
     frozenset({"chat", "text_completion", "generate_content"})),
    ("openinference.span.kind", frozenset({"AGENT"}), frozenset({"LLM"})),
    ("traceloop.span.kind", frozenset({"agent", "workflow"}), frozenset({"llm", "chat"})),
)
MARKER_KEYS: tuple[str, ...] = tuple(k for k, _, _ in _KIND_MARKERS)

# Instrumentation scopes whose spans are framework spans even before their kind attribute is
# set (OpenInference and some others set every attribute only when the span ends).
_FRAMEWORK_SCOPE_PREFIXES: tuple[str, ...] = (
    "openinference.instrumentation",
    "pydantic-ai",
    "pydantic_ai",
    "opentelemetry.instrumentation.langchain",
    "opentelemetry.instrumentation.crewai",
    "opentelemetry.instrumentation.openai_agents",
    "traceloop",
    "strands",
    "gcp.vertex.agent",
    "smolagents",
)


@dataclass(frozen=True, slots=True)
class ToolConvention:
    """Where one convention keeps a tool call's name, arguments, result and id.

    ``when`` restricts the row to spans whose attribute equals a value (Traceloop marks tool
    spans by kind and keeps the name in a generic entity attribute).
    """

    convention: str
    name: str
    arguments: tuple[str, ...]
    result: tuple[str, ...]
    call_id: tuple[str, ...] = ()
    when: tuple[str, str] | None = None


TOOL_CONVENTIONS: tuple[ToolConvention, ...] = (
    # OTel GenAI semconv (pydantic-ai, Strands, ADK, OpenLLMetry); pydantic-ai's older
    # tool_arguments / tool_response.
    ToolConvention(
        "gen_ai", "gen_ai.tool.name",
        ("gen_ai.tool.call.arguments", "tool_arguments", "input.value"),
        ("gen_ai.tool.call.result", "tool_response", "output.value"),
        ("gen_ai.tool.call.id",),
    ),
    # OpenInference (LangChain/LangGraph, OpenAI Agents, smolagents, CrewAI) and the UiPath SDK.
    ToolConvention(
        "openinference", "tool.name",
        ("input.value", "gen_ai.tool.call.arguments", "tool_arguments"),
        ("output.value", "gen_ai.tool.call.result", "tool_response"),
        ("tool.id", "tool_call.id", "gen_ai.tool.call.id"),
    ),
    # Traceloop / OpenLLMetry entity spans.
    ToolConvention(
        "traceloop", "traceloop.entity.name",
        ("traceloop.entity.input",), ("traceloop.entity.output",),
        when=("traceloop.span.kind", "tool"),
    ),
)

_SYNTHESIZED = "tool.synthesized"


TOOL, AGENT, MODEL = 1, 2, 4
_KIND_BITS: dict[str, dict[str, int]] = {
    key: {**{v: AGENT for v in agents}, **{v: MODEL for v in models}}
    for key, agents, models in _KIND_MARKERS
}
_OP, _OI, _TL = MARKER_KEYS
_OP_BITS, _OI_BITS, _TL_BITS = _KIND_BITS[_OP], _KIND_BITS[_OI], _KIND_BITS[_TL]


def span_kind(attrs: Mapping[str, Any]) -> int:
    """TOOL, AGENT and MODEL bits of a span, in a handful of dict lookups (the hot path).

    Equivalent to ``tool_name_of`` / ``is_agent_span`` / ``is_model_span`` together.
    """
    kind = 0
    get = attrs.get
    op, oi, tl = get(_OP), get(_OI), get(_TL)
    # Marker values are strings; a file may hold anything there (an OTLP kvlist is a dict,
    # which cannot even be looked up), and anything else marks nothing.
    if op is not None and op.__class__ is str:
        kind = _OP_BITS.get(op, 0)
    if oi is not None and oi.__class__ is str:
        kind |= _OI_BITS.get(oi, 0)
    if tl is not None and tl.__class__ is str:
        kind |= _TL_BITS.get(tl, 0)
    if (get("gen_ai.tool.name") is not None or get("tool.name") is not None or (
            tl == "tool" and get("traceloop.entity.name") is not None)) and (
            get(_SYNTHESIZED) is not True):
        kind |= TOOL
    return kind


def is_agent_span(attrs: Mapping[str, Any]) -> bool:
    """True for a span marked as an agent (or workflow) invocation under any convention."""
    return bool(span_kind(attrs) & AGENT)


def is_model_span(attrs: Mapping[str, Any]) -> bool:
    """True for a model-call span (one agent turn = one model response)."""
    return bool(span_kind(attrs) & MODEL)


def is_framework_span(attrs: Mapping[str, Any], scope: str = "") -> bool:
    """True for a span carrying any convention's kind marker, or made by a known framework."""
    for key in MARKER_KEYS:
        if key in attrs:
            return True
    return bool(scope) and scope.startswith(_FRAMEWORK_SCOPE_PREFIXES)


def tool_name_of(attrs: Mapping[str, Any]) -> str | None:
    """The tool name of a tool-call span, or None when the span is no tool call."""
    for conv in TOOL_CONVENTIONS:
        name = attrs.get(conv.name)
        if name is None:
            continue
        if conv.when is not None and attrs.get(conv.when[0]) != conv.when[1]:
            continue
        if attrs.get(_SYNTHESIZED) is True:
            return None
        return as_text(name)
    return None


def tool_call_from(
    record: SpanRecord,
    *,
    index: int,
    step: int,
    pending: bool,
    server_keys: Iterable[str] = (),
) -> ToolCall | None:
    """Build the ToolCall of a tool span (None if the span is no tool call)."""
    return _tool_call(record, index, step, pending, tuple(server_keys))


def _tool_call(record: SpanRecord, index: int, step: int, pending: bool,
               server_keys: tuple[str, ...]) -> ToolCall | None:
    """``tool_call_from`` with positional arguments (``run_from`` calls it once per call).

    Lookups are ``key in attrs`` then ``attrs[key]``: two specialised bytecodes, cheaper than a
    ``get`` method call when, as here, most keys looked up are absent.
    """
    attrs = record.attributes
    for conv in TOOL_CONVENTIONS:
        key = conv.name
        if key in attrs and (name := attrs[key]) is not None and (
                conv.when is None or attrs.get(conv.when[0]) == conv.when[1]):
            break
    else:
        return None
    if _SYNTHESIZED in attrs and attrs[_SYNTHESIZED] is True:
        return None
    if name.__class__ is not str:
        name = as_text(name)
    arguments: Any = None
    for key in conv.arguments:
        if key in attrs:
            arguments = attrs[key]
            break
    has_result = False
    result: Any = None
    error = record.error
    if not pending:
        for key in conv.result:
            if key in attrs:
                result, has_result = attrs[key], True
                break
        if not has_result and error is not None:
            result, has_result = error, True
    call_id = None
    for key in conv.call_id:
        if key in attrs and (value := attrs[key]) is not None:
            call_id = as_text(value)
            break
    if call_id is None and has_result:
        call_id = _tool_message_call_id(attrs, conv.result)
    server = None
    for key in server_keys:
        if key in attrs and (value := attrs[key]):
            server = as_text(value)
            break
    # Values stay raw here; ToolCall decodes them on first use.
    return ToolCall(name, index, arguments, result, has_result, call_id, record.span_id,
                    record.start_ns, None if pending else record.end_ns, step, pending, error,
                    server)


def _tool_message_call_id(attrs: Mapping[str, Any], result_keys: tuple[str, ...]) -> str | None:
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


def agent_name_of(record: SpanRecord) -> str | None:
    """``gen_ai.agent.name``, else ``agent.name``, else the span's name."""
    attrs = record.attributes
    for key in ("gen_ai.agent.name", "agent.name"):
        value = attrs.get(key)
        if value:
            return as_text(value)
    return record.name or None


def _texts_from_genai_messages(value: Any) -> list[str]:
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


def _text_from_langchain(value: Any) -> str | None:
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


def _indexed_messages(attrs: Mapping[str, Any], prefix: str, role_key: str,
                      content_key: str) -> list[str]:
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


def assistant_text_of(record: SpanRecord) -> str | None:
    """The assistant text a model-call span produced, under whichever convention it used."""
    attrs = record.attributes
    if "gen_ai.output.messages" in attrs:
        texts = _texts_from_genai_messages(attrs["gen_ai.output.messages"])
        if texts:
            return "\n".join(texts)
    for prefix, role_key, content_key in (
        ("llm.output_messages", "message.role", "message.content"),
        ("gen_ai.completion", "role", "content"),
    ):
        texts = _indexed_messages(attrs, prefix, role_key, content_key)
        if texts:
            return "\n".join(texts)
    if "output.value" in attrs:
        return _text_from_langchain(attrs["output.value"])
    return None


def final_output_of(root: SpanRecord, model_records: list[SpanRecord]) -> str | None:
    """The run's final output (SEMANTICS 1): root attributes first, then the last model call."""
    attrs = root.attributes
    if attrs.get("final_result") is not None:
        value = decode_value(attrs["final_result"])
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    for key in ("output.value", "traceloop.entity.output"):
        if attrs.get(key) is not None:
            raw = attrs[key]
            text = _text_from_langchain(raw)
            if text is not None:
                return text
            return raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
    if attrs.get("gen_ai.output.messages") is not None:
        texts = _texts_from_genai_messages(attrs["gen_ai.output.messages"])
        if texts:
            return texts[-1]
    for record in reversed(model_records):
        text = assistant_text_of(record)
        if text:
            return text
    return None
