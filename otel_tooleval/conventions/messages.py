"""What a model span says the model asked for, and what it was handed back: message formats.

The second witness of a run's calls (the first is the tool spans, read by the conventions'
span shapes): a model (chat) span records the response it got, whose tool calls are the calls
the model requested, in the order it issued them, with their call ids; and the input messages
it sent, where each earlier call's result comes back under its call id. This module reads both
from ONE span's attributes (and, for the instrumentations that keep content there, its
events), in every message format we know, by shape rather than by framework:

- GenAI semconv ``gen_ai.output.messages`` / ``gen_ai.input.messages`` (parts ``tool_call``
  and ``tool_call_response``), also inside the ``gen_ai.client.inference.operation.details``
  event, and the event-era ``gen_ai.choice`` / ``gen_ai.tool.message`` events;
- OpenInference's flattened ``llm.output_messages.N.message.tool_calls.M.tool_call.*`` and
  ``llm.input_messages.N.message.*``; OpenLLMetry's older ``gen_ai.completion.N.tool_calls.M.*``
  and ``gen_ai.prompt.N.*``;
- JSON documents in output / input attributes: OpenAI chat completions (``choices[].message.
  tool_calls``) and Responses (``function_call`` / ``function_call_output`` items), Anthropic
  ``tool_use`` / ``tool_result`` blocks, Gemini ``function_call`` / ``function_response``
  parts, Bedrock ``toolUse`` / ``toolResult``, the Vercel AI SDK's ``ai.response.toolCalls`` and
  ``tool-result`` parts, LangChain's generations and messages, Haystack's chat messages.

Pure functions on the grading side: nothing here runs on the application thread. Each JSON
attribute is parsed once per call; walks are bounded (``MAX_ITEMS`` items, ``MAX_DEPTH``
levels) and malformed input gives None or what could be read, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..model import SpanEvent
from ..values import as_text, decode_value
from .envelopes import content_blocks, mcp_call_result, only_result

__all__ = [
    "INPUT_KEYS",
    "OUTPUT_KEYS",
    "Requested",
    "records_messages",
    "requested_calls",
    "returned_results",
]


@dataclass(frozen=True, slots=True)
class Requested:
    """One tool call a model response asked for.

    Attributes:
        name: the tool's name as the model wrote it.
        arguments: the arguments, decoded as ``values.decode_value`` decodes a tool span's
            (JSON text parsed), or the raw text when it is no JSON.
        call_id: the id the response gave the call (None when the format has none).
        position: the call's index among the calls of this response (0-based).
    """

    name: str
    arguments: Any
    call_id: str | None
    position: int


#: The most messages, parts or calls one walk looks at, and how deep it descends: a span's
#: attribute is the application's data, of any size (the rest is left unread, never an error).
MAX_ITEMS = 10_000
MAX_DEPTH = 8

#: Attributes holding a model's response as one JSON document, in the order they are tried.
OUTPUT_KEYS = (
    "gen_ai.output.messages",        # GenAI semconv
    "ai.response.toolCalls",         # Vercel AI SDK
    "gen_ai.completion",             # a JSON completion under the older GenAI prefix
    "output.value",                  # OpenInference
    "ai.response",
    "llm_response",
    "gcp.vertex.agent.llm_response",  # Google ADK 1.x
    "langfuse.observation.output",   # Langfuse
    "mlflow.spanOutputs",            # MLflow
    "haystack.agent.step.llm.output",  # Haystack's agent
    "traceloop.entity.output",
)

#: Attributes holding a model's input messages as one JSON document, in the order tried.
INPUT_KEYS = (
    "gen_ai.input.messages",
    "ai.prompt.messages",            # Vercel AI SDK
    "gen_ai.prompt",
    "input.value",
    "ai.prompt",
    "llm_request",
    "gcp.vertex.agent.llm_request",
    "langfuse.observation.input",
    "mlflow.spanInputs",
    "haystack.agent.step.llm.input",
    "traceloop.entity.input",
)

#: Attributes holding only a response's text: a response recorded without tool calls.
_TEXT_OUTPUT_KEYS = ("ai.response.text",)

#: Flattened message lists: (prefix, message infix) of OpenInference and OpenLLMetry.
_OI_OUT = "llm.output_messages"
_OI_IN = "llm.input_messages"
_OLD_OUT = "gen_ai.completion"
_OLD_IN = "gen_ai.prompt"

#: The semconv's event holding the content an instrumentation kept off the attributes.
_DETAILS_EVENT = "gen_ai.client.inference.operation.details"

# Substrings without which a document holds no tool result: the first model span of a run
# (and every span of a run without tools) skips parsing its whole input history.
_RESULT_MARKERS = ("tool", "function", "Result", "result")


# --- the public functions ------------------------------------------------------------------


def requested_calls(attributes: Mapping[str, Any],
                    events: Sequence[SpanEvent] = ()) -> list[Requested] | None:
    """The tool calls the model requested in the response a model span records.

    Args:
        attributes: the model span's attributes.
        events: its events, for the instrumentations that keep the response there (the
            semconv's operation-details event, the event-era ``gen_ai.choice``).

    Returns:
        The calls in the order the response lists them; [] when the span records a response
        that asked for no call; None when it records no response in a format we know
        (content capture off), so nothing can be said.
    """
    try:
        found = _flattened_calls(attributes, _OI_OUT, "message.", "tool_call.")
        if found is None:
            found = _flattened_calls(attributes, _OLD_OUT, "", "")
        if found is None:
            for key in OUTPUT_KEYS:
                if key in attributes:
                    found = _document_calls(attributes[key])
                    if found is not None:
                        break
        if found is None and "events" in attributes:   # event-era events as one attribute
            found = _event_calls(_attribute_events(attributes["events"]))
        if found is None and events:
            found = _event_calls(events)
        if found is None and any(key in attributes for key in _TEXT_OUTPUT_KEYS):
            found = []   # the response was recorded, and it holds text only
        if found is None:
            found = _other_output_calls(attributes)
    except Exception:   # noqa: BLE001 - the application's data: never an error of ours
        return None
    if found is None:
        return None
    return [Requested(name, arguments, call_id, i)
            for i, (name, arguments, call_id) in enumerate(found)]


def returned_results(attributes: Mapping[str, Any],
                     events: Sequence[SpanEvent] = ()) -> dict[str, Any]:
    """The tool results handed back to the model in a model span's input messages.

    Returns:
        call id -> the result, decoded and unwrapped as a tool span's result is (JSON text
        parsed, ``{"result": x}`` taken off, content blocks joined). Results without a call id
        are left out: they cannot be told apart.
    """
    results: dict[str, Any] = {}
    try:
        if not _flattened_results(attributes, _OI_IN, "message.", results):
            _flattened_results(attributes, _OLD_IN, "", results)
        if not results:
            for key in INPUT_KEYS:
                if key in attributes:
                    raw = attributes[key]
                    if raw.__class__ is str and not any(m in raw for m in _RESULT_MARKERS):
                        continue
                    _document_results(decode_value(raw), results, 0)
                    if results:
                        break
        if not results and "events" in attributes:
            _event_results(_attribute_events(attributes["events"]), results)
        if not results and events:
            _event_results(events, results)
        if not results:
            _other_input_results(attributes, results)
    except Exception:   # noqa: BLE001 - the application's data: never an error of ours
        return results
    return results


def records_messages(attributes: Mapping[str, Any], events: Sequence[SpanEvent] = ()) -> bool:
    """Whether a model span records message content at all (content capture on): a cheap
    test of which keys are present, nothing parsed."""
    for key in OUTPUT_KEYS:
        if key in attributes:
            return True
    for key in INPUT_KEYS:
        if key in attributes:
            return True
    for key in _TEXT_OUTPUT_KEYS:
        if key in attributes:
            return True
    if "events" in attributes or (f"{_OI_OUT}.0.message.role" in attributes or f"{_OLD_OUT}.0.role" in attributes
            or f"{_OI_IN}.0.message.role" in attributes or f"{_OLD_IN}.0.role" in attributes):
        return True
    for name, _ in events:
        if name == _DETAILS_EVENT or name == "gen_ai.choice":
            return True
    return False


# --- flattened attributes ------------------------------------------------------------------

_Call = tuple[str, Any, "str | None"]


def _flattened_calls(attrs: Mapping[str, Any], prefix: str, msg: str,
                     call: str) -> list[_Call] | None:
    """Calls of flattened output messages: ``{prefix}.N.{msg}tool_calls.M.{call}`` with
    ``id``, ``function.name`` / ``name`` and ``function.arguments`` / ``arguments``.
    None when the span has no such messages."""
    found: list[_Call] | None = None
    for i in range(MAX_ITEMS):
        base = f"{prefix}.{i}.{msg}"
        tool_base = f"{base}tool_calls.0.{call}"
        if (f"{base}role" not in attrs and f"{base}content" not in attrs
                and f"{tool_base}id" not in attrs and f"{tool_base}function.name" not in attrs
                and f"{tool_base}name" not in attrs):
            return found
        if found is None:
            found = []
        for j in range(MAX_ITEMS):
            one = f"{base}tool_calls.{j}.{call}"
            name = attrs.get(f"{one}function.name", attrs.get(f"{one}name"))
            call_id = attrs.get(f"{one}id")
            if name is None and call_id is None:
                break
            arguments = attrs.get(f"{one}function.arguments", attrs.get(f"{one}arguments"))
            found.append((as_text(name) if name is not None else "",
                          _arguments(arguments),
                          as_text(call_id) if call_id is not None else None))
    return found


def _flattened_results(attrs: Mapping[str, Any], prefix: str, msg: str,
                       results: dict[str, Any]) -> bool:
    """Results of flattened input messages (role ``tool`` with ``tool_call_id``) into
    ``results``; whether the span has such messages at all."""
    seen = False
    for i in range(MAX_ITEMS):
        base = f"{prefix}.{i}.{msg}"
        role = attrs.get(f"{base}role")
        if role is None and f"{base}content" not in attrs:
            return seen
        seen = True
        call_id = attrs.get(f"{base}tool_call_id")
        if call_id is None or role not in ("tool", "function", "ipython", None):
            continue
        content = attrs.get(f"{base}content")
        if content is None:
            content = "".join(
                as_text(attrs[key]) for j in range(MAX_ITEMS)
                if (key := f"{base}contents.{j}.message_content.text") in attrs) or None
            if content is None:
                continue
        results[as_text(call_id)] = _result(content)
    return seen


# --- JSON documents ------------------------------------------------------------------------


def _document_calls(raw: Any) -> list[_Call] | None:
    """The calls of a response held as one JSON document, or None when it is none we know."""
    doc = decode_value(raw)
    if doc.__class__ is str or doc is None:
        return None
    return _response_calls(doc, 0)


def _response_calls(doc: Any, depth: int) -> list[_Call] | None:
    """Calls of a response by its shape: a list of messages or of calls, an OpenAI chat
    completion or Responses object, a Gemini response, LangChain generations, Haystack
    replies, or one message."""
    if depth > MAX_DEPTH:
        return None
    if isinstance(doc, list):
        found: list[_Call] | None = None
        for item in doc[:MAX_ITEMS]:
            one = _call_item(item)
            if one is not None:
                found = [] if found is None else found
                found.append(one)
                continue
            calls = _message_calls(item, depth + 1)
            if calls is not None:
                found = [] if found is None else found
                found.extend(calls)
        return found
    if not isinstance(doc, dict):
        return None
    for key in ("choices", "candidates", "replies", "output"):
        items = doc.get(key)
        if isinstance(items, list):
            if key == "choices":
                items = [c.get("message") or c.get("delta") for c in items if isinstance(c, dict)]
            elif key == "candidates":
                items = [c.get("content") for c in items if isinstance(c, dict)]
            return _response_calls(items, depth + 1) or []
    generations = doc.get("generations")
    if isinstance(generations, list):
        messages = [g.get("message") for row in generations[:MAX_ITEMS]
                    for g in (row if isinstance(row, list) else [row])[:MAX_ITEMS]
                    if isinstance(g, dict)]
        return _response_calls(messages, depth + 1) or []
    return _message_calls(doc, depth + 1)


def _message_calls(message: Any, depth: int) -> list[_Call] | None:
    """Calls of one message (any format), or None when ``message`` is no message."""
    if not isinstance(message, dict) or depth > MAX_DEPTH:
        return None
    if message.get("lc") and isinstance(message.get("kwargs"), dict):   # LangChain serialised
        message = message["kwargs"]
    elif message.get("type") in ("ai", "AIMessage", "AIMessageChunk") and isinstance(
            message.get("data"), dict):
        message = message["data"]
    role = message.get("role", message.get("type"))
    if role in ("user", "system", "tool", "developer", "human", "function"):
        return []
    found: list[_Call] = []
    is_message = role is not None
    # The first list that holds calls wins: LangChain keeps Anthropic's ``tool_use`` blocks in
    # ``content`` and the same calls in ``tool_calls``, which must not count twice.
    for key in ("tool_calls", "parts", "content", "toolCalls"):
        if key not in message:
            continue
        is_message = True
        items = message[key]
        if isinstance(items, dict) and key == "content":   # a Gemini Content inside
            found = _message_calls(items, depth + 1) or []
        elif isinstance(items, list):
            found = [c for item in items[:MAX_ITEMS] if (c := _call_item(item)) is not None]
        if found:
            break
    if not found:
        extra = message.get("additional_kwargs")
        if isinstance(extra, dict) and isinstance(extra.get("tool_calls"), list):
            found.extend(c for item in extra["tool_calls"][:MAX_ITEMS]
                         if (c := _call_item(item)) is not None)
        legacy = message.get("function_call")
        if isinstance(legacy, dict) and "name" in legacy:   # OpenAI's pre-tools function call
            found.append((as_text(legacy["name"]), _arguments(legacy.get("arguments")), None))
    if not found and not is_message:
        return None
    return found


def _call_item(item: Any) -> _Call | None:
    """One requested call in any format we know, or None when ``item`` is none."""
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind == "tool_call" and "name" in item:   # GenAI semconv part; LangChain tool call
        return _call(item["name"], item.get("arguments", item.get("args")), item.get("id"))
    if kind == "function_call" and "name" in item:   # OpenAI Responses output item
        return _call(item["name"], item.get("arguments"), item.get("call_id", item.get("id")))
    if kind == "tool_use" and "name" in item:   # Anthropic content block
        return _call(item["name"], item.get("input"), item.get("id"))
    if "toolName" in item:   # Vercel AI SDK (args before v5, input since)
        return _call(item["toolName"], item.get("input", item.get("args")),
                     item.get("toolCallId"))
    function = item.get("function")
    if isinstance(function, dict) and "name" in function:   # OpenAI chat tool_calls
        return _call(function["name"], function.get("arguments"), item.get("id"))
    for key in ("function_call", "functionCall"):   # Gemini part
        inner = item.get(key)
        if isinstance(inner, dict) and "name" in inner:
            return _call(inner["name"], inner.get("args", inner.get("arguments")),
                         inner.get("id"))
    inner = item.get("toolUse")   # Bedrock Converse / Strands
    if isinstance(inner, dict) and "name" in inner:
        return _call(inner["name"], inner.get("input"), inner.get("toolUseId"))
    inner = item.get("tool_call")   # Haystack ChatMessage content
    if isinstance(inner, dict) and "tool_name" in inner:
        return _call(inner["tool_name"], inner.get("arguments"), inner.get("id"))
    if kind is None and "name" in item and "args" in item and "id" in item:   # LangChain
        return _call(item["name"], item["args"], item["id"])
    return None


def _call(name: Any, arguments: Any, call_id: Any) -> _Call:
    return (as_text(name), _arguments(arguments),
            as_text(call_id) if call_id is not None and call_id != "" else None)


def _arguments(raw: Any) -> Any:
    """Arguments as a tool span's are decoded: JSON text parsed, values as they are."""
    return decode_value(raw)


def _document_results(doc: Any, results: dict[str, Any], depth: int) -> None:
    """Tool results of an input document (a message list, a request body with ``messages``,
    ``contents`` or ``input``, one message) into ``results``."""
    if depth > MAX_DEPTH:
        return
    if doc.__class__ is list:
        for item in doc[:MAX_ITEMS]:
            if item.__class__ is dict:
                if not _result_item(item, results):
                    _document_results(item, results, depth + 1)
            elif item.__class__ is list:   # LangChain's batches: a list of message lists
                _document_results(item, results, depth + 1)
        return
    if doc.__class__ is not dict:
        return
    if "lc" in doc and isinstance(doc.get("kwargs"), dict):   # LangChain serialised
        doc = doc["kwargs"]
        if _result_item(doc, results):
            return
    if doc.get("role") in _NO_RESULTS:   # what the model said: no result is handed back there
        return
    for key in _RESULT_HOLDERS:
        if key in doc:
            inner = doc[key]
            if inner.__class__ is list or inner.__class__ is dict:
                _document_results(inner, results, depth + 1)


#: The roles of messages that never hand a result back (the model's own, the system's).
_NO_RESULTS = frozenset({"assistant", "system", "model", "developer", "ai"})
#: The keys under which a document holds messages, parts or content blocks.
_RESULT_HOLDERS = ("messages", "contents", "input", "prompt", "parts", "content", "data",
                   "inputs")
#: Keys that mark a result in one of the formats ``_result_item`` reads.
_RESULT_TYPES = frozenset({"tool_call_response", "function_call_output", "tool_result",
                           "tool-result", "tool", "function"})
_RESULT_KEYS = ("tool_call_id", "function_response", "functionResponse", "toolResult",
                "tool_call_result")


def _result_item(item: dict[str, Any], results: dict[str, Any]) -> bool:
    """A tool result in any format we know into ``results``; whether ``item`` was one."""
    kind = item.get("type")
    if kind not in _RESULT_TYPES and not any(key in item for key in _RESULT_KEYS):
        return False   # the usual case: a text part, a message, a call
    if kind == "tool_call_response" and "id" in item:   # GenAI semconv part
        return _put(results, item["id"], item.get("response", item.get("result")))
    if kind == "function_call_output" and "call_id" in item:   # OpenAI Responses input item
        return _put(results, item["call_id"], item.get("output"))
    if kind == "tool_result" and "tool_use_id" in item:   # Anthropic content block
        return _put(results, item["tool_use_id"], item.get("content"))
    if kind == "tool-result" and "toolCallId" in item:   # Vercel AI SDK (result, or output)
        output = item.get("output", item.get("result"))
        if isinstance(output, dict) and "value" in output and "type" in output:
            output = output["value"]   # AI SDK 5's typed output
        return _put(results, item["toolCallId"], output)
    if "tool_call_id" in item and item.get("role", kind) in ("tool", "function"):
        return _put(results, item["tool_call_id"], item.get("content"))   # OpenAI, LangChain
    for key in ("function_response", "functionResponse"):   # Gemini part
        inner = item.get(key)
        if isinstance(inner, dict) and inner.get("id"):
            return _put(results, inner["id"], inner.get("response"))
    inner = item.get("toolResult")   # Bedrock Converse / Strands
    if isinstance(inner, dict) and "toolUseId" in inner:
        return _put(results, inner["toolUseId"], inner.get("content"))
    inner = item.get("tool_call_result")   # Haystack ChatMessage content
    if isinstance(inner, dict) and isinstance(inner.get("origin"), dict):
        return _put(results, inner["origin"].get("id"), inner.get("result"))
    return False


def _put(results: dict[str, Any], call_id: Any, value: Any) -> bool:
    if call_id is None or call_id == "":
        return True
    results[as_text(call_id)] = _result(value)
    return True


#: How a returned result is unwrapped, in order (each returns the value as it was when the
#: value is not in its envelope): the envelopes a tool span's result is taken out of.
RESULT_UNWRAPS: tuple[Callable[[Any], Any], ...] = (only_result, mcp_call_result, content_blocks)


def _result(raw: Any) -> Any:
    value = decode_value(raw)
    for unwrap in RESULT_UNWRAPS:
        value = unwrap(value)
    return value


# --- attributes no convention names -------------------------------------------------------

#: Words in an attribute's key that say it holds a response, or the messages sent: an
#: instrumentation never named here is read by these, its JSON by shape as above.
_OUTPUT_WORDS = ("output", "response", "completion", "tool_calls", "choices")
_INPUT_WORDS = ("input", "request", "prompt", "messages", "history")
#: Keys left alone: a tool span's own keys (an instrumentation may copy them onto the model
#: span, SEMANTICS: a model span is never a call) and the system instructions.
_NOT_MESSAGES = ("gen_ai.tool.", "tool.", "gen_ai.system_instructions", "llm.tools.",
                 "gen_ai.tool_definitions", "gen_ai.request.tools")
#: The most attributes looked at by key (a span has a few dozen).
_MAX_OTHER = 256
_KNOWN = frozenset(OUTPUT_KEYS + INPUT_KEYS + _TEXT_OUTPUT_KEYS + ("events",))


def _other_keys(attributes: Mapping[str, Any], words: tuple[str, ...],
                unless: tuple[str, ...]) -> Iterator[Any]:
    """The JSON values of the attributes whose key holds one of ``words`` (and none of
    ``unless``) and no convention names, in the span's order."""
    for i, (key, value) in enumerate(attributes.items()):
        if i >= _MAX_OTHER:
            return
        if key in _KNOWN or key.startswith(_NOT_MESSAGES) or value.__class__ is not str:
            continue
        lowered = key.lower()
        if not any(w in lowered for w in words) or any(w in lowered for w in unless):
            continue
        text = value.lstrip()
        if text[:1] in ("{", "[") and ("tool" in text or "unction" in text):
            yield value


def _other_output_calls(attributes: Mapping[str, Any]) -> list[_Call] | None:
    """Calls in an output attribute no convention names: the first that holds any (one that
    holds none proves nothing: it may be no response at all)."""
    for value in _other_keys(attributes, _OUTPUT_WORDS, _INPUT_WORDS):
        calls = _document_calls(value)
        if calls:
            return calls
    return None


def _other_input_results(attributes: Mapping[str, Any], results: dict[str, Any]) -> None:
    for value in _other_keys(attributes, _INPUT_WORDS, ("output", "response", "completion")):
        _document_results(decode_value(value), results, 0)
        if results:
            return


# --- events --------------------------------------------------------------------------------


def _event_calls(events: Sequence[SpanEvent]) -> list[_Call] | None:
    """Calls in the span's events: the operation-details event's output messages, else the
    event-era ``gen_ai.choice`` events (``message`` / ``tool_calls``)."""
    found: list[_Call] | None = None
    for name, attrs in _bounded(events):
        if name == _DETAILS_EVENT and "gen_ai.output.messages" in attrs:
            calls = _document_calls(attrs["gen_ai.output.messages"])
        elif name == "gen_ai.choice":
            calls = None
            for key in ("tool_calls", "message"):
                if key in attrs:
                    calls = _document_calls(attrs[key])
                    if calls is not None:
                        break
            if calls is None:
                calls = []   # a choice was recorded: it asked for no call we can read
        else:
            continue
        if calls is not None:
            found = calls if found is None else found + calls
    return found


def _event_results(events: Sequence[SpanEvent], results: dict[str, Any]) -> None:
    for name, attrs in _bounded(events):
        if name == _DETAILS_EVENT and "gen_ai.input.messages" in attrs:
            _document_results(decode_value(attrs["gen_ai.input.messages"]), results, 0)
        elif name == "gen_ai.tool.message":
            call_id = attrs.get("id", attrs.get("tool_call_id"))
            content = attrs.get("content")
            if call_id is not None and content is not None:   # the semconv's event body
                _put(results, call_id, content)
            elif content is not None:   # Strands: the result blocks, each with its id
                _document_results(decode_value(content), results, 0)


def _attribute_events(raw: Any) -> list[SpanEvent]:
    """Events kept as one JSON attribute (``events``: pydantic-ai's ``event_mode=
    "attributes"``, each ``{"event.name": ..., <body>}``) as ``(name, attributes)`` pairs."""
    doc = decode_value(raw)
    if not isinstance(doc, list):
        return []
    return [(item["event.name"], item) for item in doc[:MAX_ITEMS]
            if isinstance(item, dict) and isinstance(item.get("event.name"), str)]


def _bounded(events: Sequence[SpanEvent]) -> Iterator[SpanEvent]:
    for i, event in enumerate(events):
        if i >= MAX_ITEMS:
            return
        yield event
