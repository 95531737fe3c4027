"""What a run was asked: the first user message of a span, in every convention the project reads.

A case is matched to its run by that message (``otel_tooleval.cases``). The span's own keys
are read in this order, the first that holds a user message winning:

- ``gen_ai.input.messages`` (GenAI semconv: ``parts`` of type ``text``, or plain ``content``),
  and the same list in a ``gen_ai.client.inference.operation.details`` event;
- OpenInference's flattened ``llm.input_messages.N.message.role|content`` (or its
  ``message.contents.M.message_content.text`` blocks);
- OpenLLMetry's flattened ``gen_ai.prompt.N.role|content``;
- an agent's input as the frameworks record it: ``input.value`` (OpenInference),
  ``traceloop.entity.input``, ``haystack.agent.input``, ``mlflow.spanInputs``: plain text is
  the message itself; JSON is searched for the first message whose role is the user's
  (``user``, ``human``, LangChain's ``HumanMessage``, ``["user", "text"]`` pairs, Gemini's
  ``contents``);
- a ``gen_ai.user.message`` event (the role is the event's): its ``content`` is the message,
  as text or as a list of content blocks (``[{"text": ...}]``);
- last, any other attribute whose name says it holds an input or a request and whose value is
  JSON (rule, not a list of frameworks: a last dotted segment ending in ``input``,
  ``inputs``, ``input_data``, ``request`` or ``prompt``, or ``value`` / ``messages`` under
  one, and no ``output`` / ``response`` / ``completion`` / ``result`` anywhere in the name:
  ``haystack.component.input``, ``langfuse.observation.input``,
  ``gcp.vertex.agent.llm_request``, ``ai.prompt``), searched as above; plain text there is
  not taken (``gen_ai.prompt.0.content`` may be a system prompt), so a message needs a
  user's role or a framework's prompt key (``query``, ``prompt``, ``input``...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from ..model import SpanEvent
from ..values import decode_value

__all__ = ["first_user_message"]

_USER_ROLES = frozenset({"user", "human"})
_INPUT_KEYS = ("input.value", "traceloop.entity.input", "haystack.agent.input",
               "mlflow.spanInputs")
_EVENTS = (("gen_ai.client.inference.operation.details", "gen_ai.input.messages"),
           ("gen_ai.user.message", "content"))
#: Keys under which a framework's input object holds its messages or its prompt.
_NESTED = ("messages", "inputs", "input", "contents", "kwargs", "data", "query", "prompt",
           "message", "user_input", "question")
_MAX_DEPTH = 8


def first_user_message(attributes: Mapping[str, Any],
                       events: Sequence[SpanEvent] = ()) -> str | None:
    """The first user message a span records (module docstring), stripped; None when none."""
    if "gen_ai.input.messages" in attributes:
        text = _user_text(decode_value(attributes["gen_ai.input.messages"]), 0)
        if text:
            return text
    for prefix, role_key, content_key in (
            ("llm.input_messages", "message.role", "message.content"),
            ("gen_ai.prompt", "role", "content")):
        text = _indexed(attributes, prefix, role_key, content_key)
        if text:
            return text
    for key in _INPUT_KEYS:
        raw = attributes.get(key)
        if raw is None:
            continue
        value = decode_value(raw) if isinstance(raw, str) else raw
        text = value.strip() if isinstance(value, str) else _user_text(value, 0)
        if text:
            return text
    for event_name, event_attrs in events:
        for name, key in _EVENTS:
            if event_name == name and key in event_attrs:
                value = decode_value(event_attrs[key])
                # The user's event holds the message itself (its role is the event's name):
                # text, or content blocks; the inference event holds a list of messages.
                if isinstance(value, str):
                    text = value.strip()
                else:
                    text = (_content_text(value) if name == "gen_ai.user.message" else None) \
                        or _user_text(value, 0)
                if text:
                    return text
    for key, raw in attributes.items():
        if isinstance(raw, str) and raw and _names_input(key):
            value = decode_value(raw)
            if isinstance(value, (Mapping, list)):
                text = _user_text(value, 0)
                if text:
                    return text
    return None


_INPUT_ENDINGS = ("input", "inputs", "input_data", "request", "prompt")
_OUTPUT_WORDS = ("output", "response", "completion", "result")


@lru_cache(maxsize=4096)
def _names_input(key: str) -> bool:
    """Whether an attribute's name says it holds an input (module docstring's last rule)."""
    if key in _INPUT_KEYS or key == "gen_ai.input.messages":
        return False          # read above, by their own rules
    low = key.lower()
    if any(word in low for word in _OUTPUT_WORDS):
        return False
    segments = low.split(".")
    last = segments[-1]
    if last in ("value", "messages") and len(segments) > 1:
        last = segments[-2]
    return last.endswith(_INPUT_ENDINGS)


def _indexed(attrs: Mapping[str, Any], prefix: str, role_key: str,
             content_key: str) -> str | None:
    for i in range(10_000):
        role = attrs.get(f"{prefix}.{i}.{role_key}")
        content = attrs.get(f"{prefix}.{i}.{content_key}")
        block = attrs.get(f"{prefix}.{i}.message.contents.0.message_content.text")
        if role is None and content is None and block is None:
            return None
        if role in _USER_ROLES:
            if isinstance(content, str) and content.strip():
                return content.strip()
            if isinstance(block, str) and block.strip():
                return block.strip()
    return None


def _content_text(content: Any) -> str | None:
    """The text of a message's content: a string, or text blocks/parts joined."""
    if isinstance(content, str):
        return content.strip() or None
    if isinstance(content, list):
        chunks = []
        for part in content:
            if isinstance(part, str):
                chunks.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") in ("text", "input_text"):
                text = part.get("content", part.get("text"))
                if isinstance(text, str):
                    chunks.append(text)
        joined = "".join(chunks).strip()
        return joined or None
    return None


def _is_user(message: Mapping[str, Any]) -> bool:
    role = message.get("role", message.get("type"))
    if isinstance(role, str) and role.lower() in _USER_ROLES:
        return True
    ident = message.get("id")
    return isinstance(ident, list) and bool(ident) and ident[-1] == "HumanMessage"


def _user_text(value: Any, depth: int) -> str | None:
    """The first user message in a decoded input value (module docstring)."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(value, list):
        if (len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], str)
                and value[0].lower() in _USER_ROLES):
            return value[1].strip() or None      # LangChain's ("user", "text") pair
        for item in value:
            text = _user_text(item, depth + 1)
            if text:
                return text
        return None
    if not isinstance(value, Mapping):
        return None
    if _is_user(value):
        for key in ("content", "parts", "text"):
            text = _content_text(value.get(key))
            if text:
                return text
        kwargs = value.get("kwargs")
        if isinstance(kwargs, Mapping):      # LangChain's serialized HumanMessage
            return _content_text(kwargs.get("content"))
        data = value.get("data")
        if isinstance(data, Mapping):
            return _content_text(data.get("content"))
    for key in _NESTED:
        inner = value.get(key)
        if inner is None:
            continue
        if isinstance(inner, str) and key in ("query", "prompt", "user_input", "question",
                                              "input", "message"):
            inner = decode_value(inner)
            if isinstance(inner, str):
                return inner.strip() or None
        text = _user_text(inner, depth + 1)
        if text:
            return text
    return None
