"""What a run answered: a model call's assistant text, and a run's final output."""

from __future__ import annotations

import json
from typing import Any

from ..model import SpanRecord
from ..values import decode_value
from .envelopes import ANSWERS, content_blocks
from .genai import indexed_texts, texts_from_messages
from .openinference import langchain_text
from .registry import MODEL_TEXTS, ROOT_OUTPUT_EVENTS, ROOT_OUTPUTS

__all__ = ["assistant_text_of", "final_output_of"]

# Flattened message lists: (prefix, role key, content key) of OpenInference and OpenLLMetry.
_INDEXED = (
    ("llm.output_messages", "message.role", "message.content"),
    ("gen_ai.completion", "role", "content"),
)


def assistant_text_of(record: SpanRecord) -> str | None:
    """The assistant text a model-call span produced, under whichever convention it used."""
    attrs = record.attributes
    if "gen_ai.output.messages" in attrs:
        texts = texts_from_messages(attrs["gen_ai.output.messages"])
        if texts:
            return "\n".join(texts)
    for prefix, role_key, content_key in _INDEXED:
        texts = indexed_texts(attrs, prefix, role_key, content_key)
        if texts:
            return "\n".join(texts)
    if "output.value" in attrs:
        return langchain_text(attrs["output.value"])
    for key, reader in MODEL_TEXTS:   # the frameworks' own keys
        if key in attrs:
            text = reader(decode_value(attrs[key]))
            if text:
                return text
    return None


def final_output_of(root: SpanRecord, model_records: list[SpanRecord]) -> str | None:
    """The run's final output (SEMANTICS 1): root attributes first, then the root's output
    events (``Convention.output_events``), then the last model call."""
    attrs = root.attributes
    if attrs.get("final_result") is not None:
        value = decode_value(attrs["final_result"])
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    for key in ("output.value", "traceloop.entity.output"):
        if attrs.get(key) is not None:
            raw = attrs[key]
            text = langchain_text(raw)
            if text is not None:
                return text
            value = decode_value(raw)
            text = _answer_in(value)
            if text is not None:
                return text
            if isinstance(value, str):
                # A final output recorded as JSON text is decoded as a tool result is: a
                # JSON string literal (``"\"Paris 21C\""``, a return value JSON-encoded) is
                # its text.
                return value
            return raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
    if attrs.get("gen_ai.output.messages") is not None:
        texts = texts_from_messages(attrs["gen_ai.output.messages"])
        if texts:
            return texts[-1]
    for key in ROOT_OUTPUTS:   # the frameworks' own keys
        if attrs.get(key) is not None:
            value = decode_value(attrs[key])
            text = _answer_in(value)
            if text is not None:
                return text
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if root.events:
        for name, key in ROOT_OUTPUT_EVENTS:
            value = root.event_value(name, key)
            if value is not None:
                text = _event_text(value)
                if text is not None:
                    return text
    for record in reversed(model_records):
        text = assistant_text_of(record)
        if text:
            return text
    return None


def _answer_in(value: Any) -> str | None:
    """The answer inside a framework's result object (``envelopes.ANSWERS``), or None."""
    for answer in ANSWERS:
        text = answer(value)
        if text is not None:
            return text
    return None


def _event_text(value: Any) -> str | None:
    """A root output event's answer: text as recorded, the last assistant text of a message
    list, or the text of content blocks; trailing line breaks removed (Strands ends its answer
    with one that is no part of what the model said; leading and inner whitespace is kept)."""
    decoded = decode_value(value)
    if isinstance(decoded, (list, dict)):
        texts = texts_from_messages(decoded)
        if texts:
            decoded = texts[-1]
        else:
            decoded = content_blocks(decoded)
    if decoded is None:
        return None
    text = decoded if isinstance(decoded, str) else json.dumps(decoded, ensure_ascii=False)
    return text.rstrip("\r\n")
