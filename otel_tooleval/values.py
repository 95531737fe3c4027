"""Decoding attribute values: JSON text, Python literals, and the envelopes frameworks add."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from typing import Any

__all__ = ["decode_value", "lc_message", "unwrap_arguments", "unwrap_result"]

_DECODER = json.JSONDecoder()
# The decoder's scanner, called directly: ``raw_decode`` is a Python-level wrapper that only
# turns the scanner's StopIteration into a ValueError (this runs once per decoded value).
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]
_OPENERS = frozenset('{["(')


def decode_value(value: Any) -> Any:
    """Decode an attribute value: JSON text parsed, Python-literal dicts parsed safely.

    smolagents' and Traceloop's ``{"args": [], "kwargs": {...}}`` envelope is unwrapped to the
    keyword arguments, and a LangChain ``ToolMessage`` (``{"type": "tool", "data": {...}}``) to
    its content. Anything unparsable stays as it is.
    """
    if value.__class__ is not str:
        if isinstance(value, (tuple, list)):
            return [decode_value(v) for v in value]
        return value
    if not value:
        return value
    text = value
    if text[0] not in _OPENERS:
        if not text[0].isspace():
            # Only objects, arrays and JSON strings are decoded: "1.50", "true" or "007" stay
            # the text the span recorded, so result regexes see what the tool returned.
            return value
        text = value.strip()
        if not text or text[0] not in _OPENERS:
            return value
    elif text[-1].isspace():
        text = text.rstrip()
    parsed: Any
    try:
        # The scanner on stripped text: json.loads without its three wrapper calls and two
        # whitespace scans (this runs once per decoded argument or result).
        parsed, end = _SCAN(text, 0)
        if end != len(text):
            raise ValueError("trailing data")
    except (StopIteration, ValueError, RecursionError):
        if text[0] not in "{[(" or len(text) > 1_000_000:
            return value
        try:
            # Literal syntax only: ast.literal_eval never calls or imports anything.
            parsed = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return value
        if not isinstance(parsed, (dict, list, tuple)):
            return value
        parsed = _json_like(parsed)
    else:
        if parsed.__class__ is not dict or ("kwargs" not in parsed and "type" not in parsed):
            return parsed   # the usual case, without the call: no envelope to unwrap
    return _unwrap(parsed)


def as_text(value: Any) -> str:
    """An attribute value as text. A subclass of str (an application's ``str`` enum, which
    the SDK keeps as it is) is its characters, as an OTLP exporter sends it, not its
    ``__str__`` (``Tool.SEARCH``)."""
    if value.__class__ is str:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    return str(value)


def _json_like(value: Any) -> Any:
    """Python literals as the JSON shapes graders compare against: tuples and sets as lists."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): _json_like(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_like(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return [_json_like(v) for v in sorted(value, key=repr)]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


# smolagents (through OpenInference) binds Tool.__call__'s signature with its defaults applied,
# so the envelope also carries sanitize_inputs_outputs.
_ENVELOPE = frozenset({"args", "kwargs"})
_ENVELOPE_MAX = frozenset({"args", "kwargs", "sanitize_inputs_outputs"})


def _unwrap(parsed: Any) -> Any:
    if parsed.__class__ is dict and ("kwargs" in parsed or "type" in parsed):
        if (_ENVELOPE <= parsed.keys() <= _ENVELOPE_MAX and isinstance(parsed["kwargs"], dict)
                and not parsed["args"]):
            return parsed["kwargs"]
        if parsed.get("type") == "tool" and isinstance(parsed.get("data"), dict) and (
            "content" in parsed["data"]
        ):
            content = parsed["data"]["content"]
            return decode_value(content) if isinstance(content, str) else content
    return parsed


def json_values(value: Any) -> Any:
    """``value`` when it holds JSON values only; a config validator's check for expected
    arguments (a YAML date or a NaN could never equal a decoded call argument).

    Raises:
        ValueError: the value holds something JSON cannot (the message says what to do).
    """
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        raise ValueError("must hold JSON values only (a YAML date or timestamp? quote it; "
                         "keys must be strings)") from None
    return value


# -- generic envelopes, by shape (``conventions/envelopes.py`` documents where the line is) ----

#: Keys whose value, alone in an object, is the tool's result, not a result of its own.
RESULT_WRAPPERS = frozenset({"result", "output", "response", "content"})
#: Keys whose object value, alone in an object, is the call's arguments.
ARGUMENT_WRAPPERS = frozenset({"input", "kwargs"})
#: The fields of a function-response part (Gemini's ``FunctionResponse``, ADK's merged list).
_FUNCTION_RESPONSE = frozenset({"id", "name", "response", "will_continue", "scheduling",
                                "parts"})
#: Message types / roles that say an object with ``content`` is a tool's answer to the model.
_TOOL_MESSAGE_TYPES = frozenset({"tool", "tool_result", "function", "function_result",
                                 "ToolMessage", "FunctionMessage"})
#: A tool message printed as text: pydantic's ``str()`` (``content='Paris' name=...``) or
#: ``repr()`` (``ToolMessage(content='Paris', ...)``): the content as a string literal, then
#: more ``field=`` items, among them ``tool_call_id``.
_MESSAGE_TEXT = re.compile(
    r"\s*(?:[A-Za-z_]\w*\()?content=(?P<content>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
    r"(?P<rest>(?:,?\s+[A-Za-z_]\w*=.*)?)\)?\s*", re.DOTALL)
#: Rounds of unwrapping at most (an envelope in an envelope: a function response around
#: ``{"result": x}``, a tool message whose content is ``{"output": x}``).
_MAX_ROUNDS = 8


def unwrap_result(value: Any) -> Any:
    """A decoded tool result taken out of the envelopes agents and instrumentations put
    around it, recognised by their shape (whatever the framework), the innermost first found:

    - a lone ``{"result" | "output" | "response" | "content": x}``: x;
    - a function-response part ``{"id", "name", "response": x}`` (Gemini, ADK): x;
    - a tool message object with a ``content`` field (a LangChain ``ToolMessage`` serialised,
      ``{"content": ..., "type": "tool", "tool_call_id": ...}``; an OpenAI ``role: tool``
      message; an Anthropic ``tool_result`` block; an OpenAI Responses
      ``function_call_output`` item's ``output``): the content;
    - the same message printed as text (``content='Paris' name='lookup_city'
      tool_call_id='call_1'``, or its ``ToolMessage(...)`` repr): the content literal;
    - any LangChain message in its serialised constructor form (``{"lc": 1, "type":
      "constructor", "id": [..., "ToolMessage"], "kwargs": {...}}``, ``lc_message``): its
      kwargs, to which the message rule above applies;

    JSON text found inside is decoded (``decode_value``), text content blocks
    (``[{"type": "text", "text": ...}]``) joined. An object with any other key beside the
    wrapper's (``{"result": 1, "status": "ok"}``) is the tool's own value and stays whole.
    """
    for _ in range(_MAX_ROUNDS):
        inner = _result_inside(value)
        if inner is _NOT_WRAPPED:
            return value
        value = _text_blocks(decode_value(inner) if inner.__class__ is str else inner)
    return value


def unwrap_arguments(value: Any) -> Any:
    """Decoded call arguments taken out of an envelope, by its shape: a lone
    ``{"input" | "kwargs": {...}}`` (an object inside), and ``{"input": {...}, "options":
    o}`` (a JavaScript tool's ``execute(input, options)``), where ``o`` is null, empty or
    the call's options (holding ``toolCallId``): the object inside. Anything else, a lone
    ``{"input": "text"}`` among them (a tool whose one parameter is called ``input``), as it
    is. Returns ``value`` itself when there is no envelope (the graders rely on it)."""
    for _ in range(_MAX_ROUNDS):
        if value.__class__ is not dict or len(value) > 2:
            return value
        if len(value) == 1:
            for key, inner in value.items():
                if key not in ARGUMENT_WRAPPERS or inner.__class__ is not dict:
                    return value
                value = inner
        elif "input" in value and "options" in value and value["input"].__class__ is dict:
            options = value["options"]
            if options is None or options == {} or options == [] or (
                    options.__class__ is dict and "toolCallId" in options):
                value = value["input"]
            else:
                return value
        else:
            return value
    return value


_NOT_WRAPPED: Any = object()


def _result_inside(value: Any) -> Any:
    """What one envelope of ``unwrap_result`` holds, or ``_NOT_WRAPPED``."""
    if value.__class__ is str:
        if "content=" not in value or "tool_call_id=" not in value:
            return _NOT_WRAPPED
        match = _MESSAGE_TEXT.fullmatch(value)
        if match is None or "tool_call_id=" not in match["rest"]:
            return _NOT_WRAPPED
        try:
            # A Python string literal, nothing else: literal_eval never runs code.
            return ast.literal_eval(match["content"])
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return _NOT_WRAPPED
    if value.__class__ is not dict:
        return _NOT_WRAPPED
    if len(value) == 1:
        for key, inner in value.items():
            return inner if key in RESULT_WRAPPERS else _NOT_WRAPPED
    if "response" in value and "name" in value and value.keys() <= _FUNCTION_RESPONSE:
        return value["response"]
    if "content" in value and (
            value.get("type") in _TOOL_MESSAGE_TYPES or value.get("role") in _TOOL_MESSAGE_TYPES
            or "tool_call_id" in value or "tool_use_id" in value):
        return value["content"]
    if value.get("type") == "function_call_output" and "output" in value:
        return value["output"]
    if value.get("type") == "constructor" and (message := lc_message(value)) is not None:
        return message   # shape: a LangChain message's constructor form -> its fields
    return _NOT_WRAPPED


def lc_message(value: Any) -> dict[str, Any] | None:
    """A LangChain message in its serialised constructor form (``{"lc": 1, "type":
    "constructor", "id": [..., "ToolMessage"], "kwargs": {...}}``, as ``dumpd`` in Python and
    ``toJSON`` in JavaScript write every message): its fields (the kwargs), with the class
    name as ``type`` where the kwargs carry none; None for anything else (a constructor of
    a class that is no message, such as a ``Document``, is no message)."""
    if value.__class__ is not dict or value.get("type") != "constructor" or "lc" not in value:
        return None
    ids = value.get("id")
    kwargs = value.get("kwargs")
    if ids.__class__ is not list or not ids or kwargs.__class__ is not dict:
        return None
    cls = ids[-1]
    if cls.__class__ is not str or not cls.endswith(("Message", "MessageChunk")):
        return None
    return kwargs if "type" in kwargs else {**kwargs, "type": cls}


def _text_blocks(value: Any) -> Any:
    """Text content blocks (``[{"type": "text", "text": ...}]``): their text joined, its
    JSON decoded; anything else as it is."""
    if value.__class__ is list and value and all(
            b.__class__ is dict and b.get("text").__class__ is str
            and b.get("type", "text") == "text" for b in value):
        return decode_value("".join(b["text"] for b in value))
    return value
