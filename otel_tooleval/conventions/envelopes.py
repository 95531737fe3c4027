"""The envelopes frameworks put around a tool's arguments and results, taken off.

Each function receives the decoded value (``values.decode_value``) and returns what is inside
the envelope it knows, or the value as it was when the value is not in that envelope, so that
a tool that really returns such a shape is never cut.

Two layers. A convention row names its framework's own envelopes (``ToolConvention``
``arguments_from`` / ``result_from``: the functions below). Then, whatever the framework, the
generic envelopes are taken off by their shape (``unwrap_arguments`` / ``unwrap_result``,
kept in ``values.py`` so that ``ToolCall`` can apply them), repeatedly, innermost last:

- results: a lone ``{"result" | "output" | "response" | "content": x}``; a function-response
  part ``{"id", "name", "response": x}`` (only those keys, Gemini's few others allowed); a
  tool message object with ``content`` (``type`` / ``role`` ``tool``, ``tool_result`` ...,
  or a ``tool_call_id`` / ``tool_use_id`` key: a LangChain ``ToolMessage`` serialised, an
  OpenAI tool message, an Anthropic ``tool_result`` block); a Responses
  ``function_call_output``'s ``output``; such a message printed as text
  (``content='Paris' name='lookup_city' tool_call_id='call_1'`` or its ``ToolMessage(...)``
  repr: a string literal after ``content=`` and a ``tool_call_id=`` field after it); any
  LangChain message in its serialised constructor form (``{"lc": 1, "type": "constructor",
  "id": [..., "ToolMessage"], "kwargs": {...}}``): its kwargs, to which the message rule
  applies;
- arguments: a lone ``{"input" | "kwargs": {...}}`` whose value is an object, and
  ``{"input": {...}, "options": o}`` with ``o`` null, empty or holding ``toolCallId``.

Where the line is: an envelope is recognised only when it has nothing but its own keys. An
object with any other key beside a wrapper key (``{"result": 1, "status": "ok"}``,
``{"output": "x", "exit_code": 0}``) is the tool's own value and stays whole; so does
``{"input": "paris"}`` (a text, not an object: a tool whose one parameter is ``input``), and
text that merely contains ``content=`` without a tool call id. A result wrapper is never
taken off arguments, nor an arguments wrapper off a result. What remains ambiguous (a tool
whose whole result is a lone ``{"output": x}``, or whose one parameter ``input`` takes an
object) is read as an envelope; ``runs.unwrap: off`` keeps every generic envelope on (the
rows' own still apply) for an agent whose tools return such shapes.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from ..values import decode_value, lc_message, unwrap_arguments, unwrap_result

__all__ = [
    "ANSWERS",
    "content_blocks",
    "conversation_answer",
    "crew_output",
    "dspy_prediction",
    "genai_content_parts",
    "haystack_agent_result",
    "langchain_callback_inputs",
    "langchain_tool_message",
    "llamaindex_tool_output",
    "only_kwargs",
    "only_result",
    "unwrap_arguments",
    "unwrap_result",
]


def only_kwargs(value: Any) -> Any:
    """``{"kwargs": {...}}`` alone (LlamaIndex, DSPy through OpenInference): the kwargs."""
    if value.__class__ is dict and len(value) == 1 and isinstance(value.get("kwargs"), dict):
        return value["kwargs"]
    return value


def only_result(value: Any) -> Any:
    """``{"result": x}`` alone (Google ADK wraps every non-dict return value): x."""
    if value.__class__ is dict and len(value) == 1 and "result" in value:
        return value["result"]
    return value


def llamaindex_tool_output(value: Any) -> Any:
    """A serialised LlamaIndex ``ToolOutput``: its ``raw_output``, the tool's return value."""
    if value.__class__ is dict and "raw_output" in value and "tool_name" in value:
        return value["raw_output"]
    return value


def langchain_callback_inputs(value: Any) -> Any:
    """OpenLLMetry's LangChain callback envelope (``input_str``, ``inputs``, ``tags`` ...):
    the tool's ``inputs``, else its ``input_str`` (a Python repr) decoded."""
    if value.__class__ is dict and "input_str" in value:
        inputs = value.get("inputs")
        if isinstance(inputs, dict) and inputs:
            return inputs
        return decode_value(value["input_str"])
    return value


def langchain_tool_message(value: Any) -> Any:
    """A serialised LangChain ``ToolMessage`` (``{"output": {"lc": 1, ..., "kwargs":
    {"content": ...}}}``, OpenLLMetry): its content, decoded."""
    if value.__class__ is dict and "output" in value:
        output = value["output"]
        if isinstance(output, dict) and output.get("lc") and isinstance(output.get("kwargs"),
                                                                          dict):
            content = output["kwargs"].get("content")
            return decode_value(content) if isinstance(content, str) else content
        if isinstance(output, str):
            return decode_value(output)
    return value


def content_blocks(value: Any) -> Any:
    """Content blocks ``[{"text": "..."}]`` (Strands; MCP's ``CallToolResult`` content with
    ``type: text``): the text, its JSON decoded; several text blocks joined."""
    blocks = value.get("content") if value.__class__ is dict and "isError" in value else value
    if isinstance(blocks, list) and blocks and all(
            isinstance(b, dict) and isinstance(b.get("text"), str)
            and set(b) <= {"text", "type"} for b in blocks):
        return decode_value("".join(b["text"] for b in blocks))
    return value


def mcp_call_result(value: Any) -> Any:
    """An MCP ``CallToolResult`` (``content`` blocks with ``isError`` / ``structuredContent``),
    as an MCP client's tool span records it: the structured content when there is one, else the
    text of the content blocks (its JSON decoded). Any other value as it is."""
    if value.__class__ is dict and isinstance(value.get("content"), list) and (
            "isError" in value or "structuredContent" in value):
        structured = value.get("structuredContent")
        if isinstance(structured, dict) and not value.get("isError"):
            return structured
        return content_blocks(value["content"])
    return value


def crew_output(value: Any) -> str | None:
    """A serialised CrewAI ``CrewOutput`` (``raw``, ``tasks_output`` ...): its ``raw`` answer."""
    if value.__class__ is dict and isinstance(value.get("raw"), str) and "tasks_output" in value:
        return str(value["raw"])
    return None


def dspy_prediction(value: Any) -> str | None:
    """A DSPy ``ReAct`` prediction (``trajectory``, ``reasoning``, ``answer``): the answer."""
    if value.__class__ is dict and isinstance(value.get("answer"), str) and "trajectory" in value:
        return str(value["answer"])
    return None


def haystack_agent_result(value: Any) -> str | None:
    """A Haystack agent's result (``messages``, ``last_message`` ...): the last message's text."""
    last = value.get("last_message") if value.__class__ is dict and "messages" in value else None
    if isinstance(last, dict) and isinstance(last.get("content"), list):
        texts = [b["text"] for b in last["content"] if isinstance(b, dict)
                 and isinstance(b.get("text"), str)]
        if texts:
            return "".join(texts)
    return None


_TEXT_BLOCK = re.compile(
    r"TextBlock\(block_type='text', text=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")")


def llamaindex_stop_event(value: Any) -> str | None:
    """A LlamaIndex workflow's ``StopEvent(result=AgentOutput(...))`` repr (the only form its
    OpenInference spans record the run's result in): the last text block of the response."""
    if not (isinstance(value, str) and value.startswith("StopEvent(")):
        return None
    found = _TEXT_BLOCK.findall(value)
    if not found:
        return None
    try:
        text = ast.literal_eval(found[-1])   # a Python string literal, nothing else
    except (ValueError, SyntaxError):
        return None
    return text if isinstance(text, str) else None


def genai_content_parts(value: Any) -> str | None:
    """A Gemini-style response (``{"content": {"parts": [{"text": ...}]}}``, ADK 1.x's
    ``gcp.vertex.agent.llm_response``): its text parts joined."""
    content = value.get("content") if value.__class__ is dict else None
    parts = content.get("parts") if isinstance(content, dict) else None
    if isinstance(parts, list):
        texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
        if texts:
            return "".join(texts)
    return None


#: Message roles / types of the model's own messages (OpenAI, GenAI semconv, Gemini,
#: LangChain's ``type`` and class names).
_ASSISTANT = frozenset({"assistant", "model", "ai", "AIMessage", "AIMessageChunk"})


def _message(value: Any) -> dict[str, Any] | None:
    """A chat message in any of the common shapes, as a dict of its fields: an object with a
    ``role`` (OpenAI, GenAI semconv, Gemini) or a LangChain ``type`` and ``content``,
    LangChain's ``{"type": ..., "data": {...}}`` and its constructor form
    (``values.lc_message``); None for anything else."""
    if value.__class__ is not dict:
        return None
    if value.get("type") == "constructor":
        return lc_message(value)
    if isinstance(value.get("data"), dict) and isinstance(value.get("type"), str) and (
            "content" in value["data"]):
        return {**value["data"], "type": value["type"]}
    if isinstance(value.get("role"), str) and (
            "content" in value or "parts" in value or "tool_calls" in value):
        return value
    if isinstance(value.get("type"), str) and "content" in value:
        return value
    return None


def _message_text(message: dict[str, Any]) -> str | None:
    """A message's text: its content as text, or its text blocks / parts joined."""
    for key in ("content", "parts"):
        content = message.get(key)
        if isinstance(content, str):
            return content or None
        if isinstance(content, list):
            texts = [p.get("text", p.get("content")) for p in content if isinstance(p, dict)
                     and p.get("type", "text") in ("text", "output_text")]
            text = "".join(t for t in texts if isinstance(t, str))
            if text:
                return text
    return None


def conversation_answer(value: Any) -> str | None:
    """A final output that is a conversation (a list of messages, or an object holding
    only such a list, such as a LangGraph state ``{"messages": [...]}``): its last assistant
    message's text; None for anything else, or when no assistant message has text."""
    if value.__class__ is dict and len(value) == 1:
        (value,) = value.values()
    if value.__class__ is not list or not value:
        return None
    messages: list[dict[str, Any]] = []
    for item in value:
        message = _message(item)
        if message is None:
            return None
        messages.append(message)
    for message in reversed(messages):
        if message.get("role", message.get("type")) in _ASSISTANT:
            text = _message_text(message)
            if text:
                return text
    return None


#: The run outputs that are a framework's result object, and how to take its answer out.
ANSWERS = (crew_output, dspy_prediction, haystack_agent_result, llamaindex_stop_event,
           conversation_answer)
