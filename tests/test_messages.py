"""The model's own requests: ``conventions.messages`` on recorded and written model spans."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval.conventions.messages import (
    Requested,
    records_messages,
    requested_calls,
    returned_results,
)

DATA = Path(__file__).parent / "data" / "messages"

#: Model spans copied from the recordings in tests/data/frameworks (see each file's ``source``):
#: the response with the two parallel calls, and the last response (text, every result handed
#: back in its input).
RECORDED = sorted(p.stem for p in DATA.glob("*.json"))


def _span(name: str, which: str) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    doc = json.loads((DATA / f"{name}.json").read_text())[which]
    return doc["attributes"], [(event[0], event[1]) for event in doc["events"]]


def test_recorded_formats_are_all_there() -> None:
    assert len(RECORDED) >= 10


@pytest.mark.parametrize("name", RECORDED)
def test_parallel_calls_in_the_order_issued(name: str) -> None:
    attrs, events = _span(name, "parallel")
    assert requested_calls(attrs, events) == [
        Requested("get_weather", {"city": "Lyon"}, "call_2_0", 0),
        Requested("convert_temp", {"celsius": 21}, "call_2_1", 1),
    ]
    assert records_messages(attrs, events)


@pytest.mark.parametrize("name", RECORDED)
def test_final_answer_requests_nothing_and_hands_back_every_result(name: str) -> None:
    attrs, events = _span(name, "last")
    assert requested_calls(attrs, events) == []
    results = returned_results(attrs, events)
    assert set(results) == {"call_0_0", "call_1_0", "call_2_0", "call_2_1"}
    assert results["call_0_0"] == "Paris"
    assert results["call_1_0"] == {"city": "Paris", "temp_c": 21.0}
    assert results["call_2_0"] == {"city": "Lyon", "temp_c": 18.0}
    # As the framework handed it back: the text "69.8", or the number.
    assert float(results["call_2_1"]) == 69.8


@pytest.mark.parametrize("name", RECORDED)
def test_results_of_the_parallel_response_are_the_earlier_ones(name: str) -> None:
    attrs, events = _span(name, "parallel")
    results = returned_results(attrs, events)
    assert set(results) == {"call_0_0", "call_1_0"}


def test_no_content_recorded_is_none() -> None:
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
    assert requested_calls(attrs) is None
    assert returned_results(attrs) == {}
    assert not records_messages(attrs)


# --- formats no recording here uses: written from each format's documented shape -------------

_LYON_CONVERT = [("get_weather", {"city": "Lyon"}), ("convert_temp", {"celsius": 21})]


def _pairs(calls: list[Requested] | None) -> list[tuple[str, Any]]:
    assert calls is not None
    assert [c.position for c in calls] == list(range(len(calls)))
    return [(c.name, c.arguments) for c in calls]


def test_openllmetry_flattened_completion_and_prompt() -> None:
    attrs = {
        "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "weather?",
        "gen_ai.prompt.1.role": "assistant",
        "gen_ai.prompt.1.tool_calls.0.id": "call_a", "gen_ai.prompt.1.tool_calls.0.name": "x",
        "gen_ai.prompt.2.role": "tool", "gen_ai.prompt.2.content": '{"city": "Paris"}',
        "gen_ai.prompt.2.tool_call_id": "call_a",
        "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.finish_reason": "tool_calls",
        "gen_ai.completion.0.tool_calls.0.id": "call_b",
        "gen_ai.completion.0.tool_calls.0.name": "get_weather",
        "gen_ai.completion.0.tool_calls.0.arguments": '{"city": "Lyon"}',
        "gen_ai.completion.0.tool_calls.1.id": "call_c",
        "gen_ai.completion.0.tool_calls.1.name": "convert_temp",
        "gen_ai.completion.0.tool_calls.1.arguments": '{"celsius": 21}',
    }
    calls = requested_calls(attrs)
    assert _pairs(calls) == _LYON_CONVERT
    assert calls is not None and [c.call_id for c in calls] == ["call_b", "call_c"]
    assert returned_results(attrs) == {"call_a": {"city": "Paris"}}
    assert records_messages(attrs)
    text_only = {"gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "Hi"}
    assert requested_calls(text_only) == []


def test_openai_responses_function_call_items() -> None:
    output = {"id": "resp_1", "object": "response", "output": [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "id": "fc_1", "call_id": "call_b", "name": "get_weather",
         "arguments": '{"city":"Lyon"}', "status": "completed"},
        {"type": "function_call", "id": "fc_2", "call_id": "call_c", "name": "convert_temp",
         "arguments": '{"celsius":21}', "status": "completed"},
    ]}
    request = {"model": "gpt-4.1", "input": [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "call_a", "name": "lookup_city",
         "arguments": '{"query":"paris"}'},
        {"type": "function_call_output", "call_id": "call_a", "output": "Paris"},
    ]}
    attrs = {"output.value": json.dumps(output), "input.value": json.dumps(request)}
    calls = requested_calls(attrs)
    assert _pairs(calls) == _LYON_CONVERT
    assert calls is not None and [c.call_id for c in calls] == ["call_b", "call_c"]  # not fc_
    assert returned_results(attrs) == {"call_a": "Paris"}
    answer = {"output": [{"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": "Sunny"}]}]}
    assert requested_calls({"output.value": json.dumps(answer)}) == []


def test_openai_chat_completion_and_the_legacy_function_call() -> None:
    completion = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [
            {"id": "call_b", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}},
            {"id": "call_c", "type": "function",
             "function": {"name": "convert_temp", "arguments": '{"celsius": 21}'}}]}}]}
    assert _pairs(requested_calls({"gen_ai.completion": json.dumps(completion)})) == _LYON_CONVERT
    legacy = {"choices": [{"message": {"role": "assistant", "content": None, "function_call": {
        "name": "get_weather", "arguments": '{"city": "Lyon"}'}}}]}
    assert requested_calls({"output.value": json.dumps(legacy)}) == [
        Requested("get_weather", {"city": "Lyon"}, None, 0)]
    request = {"messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "tool_calls": completion["choices"][0]["message"]["tool_calls"]},
        {"role": "tool", "tool_call_id": "call_b", "content": '{"city": "Lyon", "temp_c": 18}'},
        {"role": "tool", "tool_call_id": "call_c", "content": "69.8"},
    ]}
    assert returned_results({"input.value": json.dumps(request)}) == {
        "call_b": {"city": "Lyon", "temp_c": 18}, "call_c": "69.8"}


def test_anthropic_tool_use_and_tool_result_blocks() -> None:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "stop_reason": "tool_use",
               "content": [
                   {"type": "text", "text": "Let me look."},
                   {"type": "tool_use", "id": "toolu_b", "name": "get_weather",
                    "input": {"city": "Lyon"}},
                   {"type": "tool_use", "id": "toolu_c", "name": "convert_temp",
                    "input": {"celsius": 21}}]}
    calls = requested_calls({"output.value": json.dumps(message)})
    assert _pairs(calls) == _LYON_CONVERT
    assert calls is not None and calls[0].call_id == "toolu_b"
    request = {"model": "claude", "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_b",
         "content": [{"type": "text", "text": '{"city": "Lyon", "temp_c": 18}'}]},
        {"type": "tool_result", "tool_use_id": "toolu_c", "content": "69.8"}]}]}
    assert returned_results({"input.value": json.dumps(request)}) == {
        "toolu_b": {"city": "Lyon", "temp_c": 18}, "toolu_c": "69.8"}


def test_gemini_function_call_parts_both_spellings() -> None:
    response = {"candidates": [{"finish_reason": "STOP", "content": {"role": "model", "parts": [
        {"function_call": {"id": "fc-b", "name": "get_weather", "args": {"city": "Lyon"}}},
        {"functionCall": {"name": "convert_temp", "args": {"celsius": 21}}}]}}]}
    calls = requested_calls({"output.value": json.dumps(response)})
    assert _pairs(calls) == _LYON_CONVERT
    assert calls is not None and [c.call_id for c in calls] == ["fc-b", None]
    request = {"contents": [{"role": "user", "parts": [
        {"function_response": {"id": "fc-b", "name": "get_weather",
                               "response": {"result": "sunny"}}},
        {"functionResponse": {"name": "convert_temp", "response": {"result": 69.8}}}]}]}
    # A response without an id cannot be told apart from another: left out.
    assert returned_results({"input.value": json.dumps(request)}) == {"fc-b": "sunny"}


def test_vercel_ai_sdk_tool_calls_v4_and_v5() -> None:
    v4 = [{"toolCallType": "function", "toolCallId": "call_b", "toolName": "get_weather",
           "args": '{"city":"Lyon"}'},
          {"toolCallType": "function", "toolCallId": "call_c", "toolName": "convert_temp",
           "args": '{"celsius":21}'}]
    v5 = [{"type": "tool-call", "toolCallId": "call_b", "toolName": "get_weather",
           "input": {"city": "Lyon"}},
          {"type": "tool-call", "toolCallId": "call_c", "toolName": "convert_temp",
           "input": {"celsius": 21}}]
    for calls in (v4, v5):
        found = requested_calls({"ai.response.toolCalls": json.dumps(calls)})
        assert _pairs(found) == _LYON_CONVERT
        assert found is not None and found[1].call_id == "call_c"
    # Text only: the SDK leaves toolCalls out, the response was still recorded.
    assert requested_calls({"ai.response.text": "Sunny", "ai.response.finishReason": "stop"}) == []
    assert requested_calls({"ai.response.finishReason": "stop"}) is None
    prompt = [{"role": "user", "content": [{"type": "text", "text": "weather?"}]},
              {"role": "tool", "content": [
                  {"type": "tool-result", "toolCallId": "call_a", "toolName": "lookup_city",
                   "result": "Paris"},
                  {"type": "tool-result", "toolCallId": "call_b", "toolName": "get_weather",
                   "output": {"type": "json", "value": {"city": "Lyon"}}}]}]
    assert returned_results({"ai.prompt.messages": json.dumps(prompt)}) == {
        "call_a": "Paris", "call_b": {"city": "Lyon"}}


def _lc(kind: str, **kwargs: Any) -> dict[str, Any]:
    return {"lc": 1, "type": "constructor",
            "id": ["langchain", "schema", "messages", kind], "kwargs": kwargs}


def test_langchain_generations_and_tool_messages() -> None:
    tool_calls = [{"name": "get_weather", "args": {"city": "Lyon"}, "id": "call_b",
                   "type": "tool_call"},
                  {"name": "convert_temp", "args": {"celsius": 21}, "id": "call_c",
                   "type": "tool_call"}]
    # Anthropic through LangChain: the same calls as content blocks and as tool_calls.
    blocks = [{"type": "tool_use", "id": "call_b", "name": "get_weather",
               "input": {"city": "Lyon"}},
              {"type": "tool_use", "id": "call_c", "name": "convert_temp",
               "input": {"celsius": 21}}]
    message = _lc("AIMessage", content=blocks, type="ai", tool_calls=tool_calls,
                  additional_kwargs={})
    output = {"generations": [[{"text": "", "type": "ChatGeneration", "message": message}]],
              "llm_output": None}
    calls = requested_calls({"output.value": json.dumps(output)})
    assert _pairs(calls) == _LYON_CONVERT   # each once
    request = {"messages": [[
        _lc("HumanMessage", content="weather?", type="human"),
        _lc("AIMessage", content="", type="ai", tool_calls=tool_calls[:1]),
        _lc("ToolMessage", content='{"city": "Lyon", "temp_c": 18}', type="tool",
            tool_call_id="call_b", status="success"),
    ]]}
    assert returned_results({"input.value": json.dumps(request)}) == {
        "call_b": {"city": "Lyon", "temp_c": 18}}


def test_event_era_choice_events_and_tool_message_events() -> None:
    message = {"role": "assistant", "tool_calls": [
        {"id": "call_b", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}},
        {"id": "call_c", "type": "function",
         "function": {"name": "convert_temp", "arguments": '{"celsius": 21}'}}]}
    events = [("gen_ai.user.message", {"content": "weather?"}),
              ("gen_ai.tool.message", {"role": "tool", "id": "call_a", "content": "Paris"}),
              ("gen_ai.choice", {"index": 0, "finish_reason": "tool_calls",
                                 "message": json.dumps(message)})]
    assert _pairs(requested_calls({}, events)) == _LYON_CONVERT
    assert returned_results({}, events) == {"call_a": "Paris"}
    assert records_messages({}, events)
    text = [("gen_ai.choice", {"index": 0, "message": '{"role": "assistant", "content": "Hi"}'})]
    assert requested_calls({}, text) == []


def test_event_era_events_kept_as_one_attribute() -> None:
    # pydantic-ai's event_mode="attributes": the events as one JSON list under ``events``.
    events = [
        {"event.name": "gen_ai.user.message", "role": "user", "content": "weather?"},
        {"event.name": "gen_ai.tool.message", "role": "tool", "id": "call_a",
         "name": "lookup_city", "content": "Paris"},
        {"event.name": "gen_ai.choice", "index": 0, "message": {
            "role": "assistant", "tool_calls": [
                {"id": "call_b", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}},
                {"id": "call_c", "type": "function",
                 "function": {"name": "convert_temp", "arguments": '{"celsius": 21}'}}]}},
    ]
    attrs = {"events": json.dumps(events)}
    assert _pairs(requested_calls(attrs)) == _LYON_CONVERT
    assert returned_results(attrs) == {"call_a": "Paris"}


# --- what is not read, and bad input -------------------------------------------------------


def test_system_instructions_and_text_parts_are_no_calls() -> None:
    attrs = {
        "gen_ai.system_instructions": json.dumps([{"type": "text", "content": (
            'answer with {"type": "tool_call", "name": "x"}')}]),
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
            {"type": "text", "content": "a tool_call_response please"}]}]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
            {"type": "text", "content": "Sunny"}], "finish_reason": "stop"}]),
    }
    assert requested_calls(attrs) == []
    assert returned_results(attrs) == {}


def test_a_result_that_is_a_dict_is_kept_whole() -> None:
    real = {"result": "Paris", "source": "db"}
    attrs = {"gen_ai.input.messages": json.dumps([{"role": "tool", "parts": [
        {"type": "tool_call_response", "id": "c1", "response": real},
        {"type": "tool_call_response", "id": "c2", "response": {"result": "Lyon"}}]}])}
    assert returned_results(attrs) == {"c1": real, "c2": "Lyon"}


@pytest.mark.parametrize("value", [
    "not json", "{", "[1, 2", "[]", "{}", "null", "42", '"text"', "[[[[[[[[[[[[]]]]]]]]]]]]",
    json.dumps([{"role": "assistant", "parts": "nope"}]),
    json.dumps([{"role": "assistant", "parts": [None, 3, {"type": "tool_call"}]}]),
    json.dumps({"choices": [None, {"message": None}]}),
    "[" * 100_000 + "]" * 100_000,
])
def test_malformed_output_never_raises(value: str) -> None:
    for key in ("gen_ai.output.messages", "output.value", "ai.response.toolCalls"):
        calls = requested_calls({key: value})
        assert calls is None or all(isinstance(c, Requested) for c in calls)
        assert isinstance(returned_results({key.replace("output", "input"): value}), dict)
        assert isinstance(returned_results({"input.value": value}), dict)


def test_unknown_output_is_none_not_empty() -> None:
    assert requested_calls({"output.value": "Sunny"}) is None
    assert requested_calls({"output.value": json.dumps({"weather": "sunny"})}) is None
    assert requested_calls({"output.value": json.dumps(["a", "b"])}) is None


def test_walks_are_bounded() -> None:
    from otel_tooleval.conventions import messages

    parts = [{"type": "tool_call", "id": f"c{i}", "name": "t", "arguments": {}}
             for i in range(messages.MAX_ITEMS + 5)]
    attrs = {"gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": parts}])}
    calls = requested_calls(attrs)
    assert calls is not None and len(calls) == messages.MAX_ITEMS
    nested: Any = {"role": "assistant", "tool_calls": []}
    for _ in range(50):
        nested = {"content": nested}
    assert requested_calls({"output.value": json.dumps(nested)}) == []


def test_attributes_no_convention_names_are_read_by_shape() -> None:
    calls = [{"id": "call_b", "type": "function",
              "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}},
             {"id": "call_c", "type": "function",
              "function": {"name": "convert_temp", "arguments": '{"celsius": 21}'}}]
    history = [{"role": "user", "content": "weather?"},
               {"role": "tool", "tool_call_id": "call_a", "content": "Paris"}]
    attrs = {"myagent.llm.response": json.dumps({"role": "assistant", "tool_calls": calls}),
             "myagent.llm.request_messages": json.dumps(history)}
    assert _pairs(requested_calls(attrs)) == _LYON_CONVERT
    assert returned_results(attrs) == {"call_a": "Paris"}
    # A tool span's keys copied onto a model span are no request, nor is an unrelated output.
    copied = {"gen_ai.tool.name": "get_weather, convert_temp",
              "gen_ai.tool.call.arguments": json.dumps({"tool_calls": calls}),
              "myagent.output": json.dumps({"status": "ok"})}
    assert requested_calls(copied) is None
    assert not records_messages(copied)


# --- variants each format allows (issue 33: each key and spelling read, pinned) -------------


def test_a_single_assistant_message_with_the_legacy_function_call() -> None:
    # A response recorded as the one message (not inside ``choices``): OpenAI's pre-tools
    # ``function_call``, no call id.
    message = {"role": "assistant", "content": None,
               "function_call": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}}
    assert requested_calls({"output.value": json.dumps(message)}) == [
        Requested("get_weather", {"city": "Lyon"}, None, 0)]


def test_choice_event_reads_its_tool_calls_before_its_message() -> None:
    # An event-era ``gen_ai.choice`` whose body was flattened: the calls under ``tool_calls``,
    # the message (text only) beside them; the calls are what the model asked for.
    calls = [{"id": "call_b", "type": "function",
              "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}}]
    event = ("gen_ai.choice", {"tool_calls": json.dumps(calls),
                               "message": json.dumps({"role": "assistant", "content": "ok"})})
    assert requested_calls({}, [event]) == [Requested("get_weather", {"city": "Lyon"}, "call_b", 0)]


def test_tool_message_event_with_its_id_under_tool_call_id() -> None:
    event = ("gen_ai.tool.message", {"tool_call_id": "call_b", "content": '{"temp_c": 18}'})
    assert returned_results({}, [event]) == {"call_b": {"temp_c": 18}}


def test_semconv_tool_call_response_part_with_result_and_a_function_role_message() -> None:
    # The GenAI part's value under ``result`` (instead of ``response``), and a message of role
    # ``function`` answering by call id (OpenAI-compatible clients that kept the old role).
    messages = [{"role": "tool", "parts": [
        {"type": "tool_call_response", "id": "call_b", "result": {"temp_c": 18}}]},
        {"role": "function", "tool_call_id": "call_c", "content": "69.8"}]
    assert returned_results({"gen_ai.input.messages": json.dumps(messages)}) == {
        "call_b": {"temp_c": 18}, "call_c": "69.8"}


_CALL_PART = json.dumps([{"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {}}])


def test_keys_no_convention_names_read_only_when_they_say_output() -> None:
    # A key that says neither output nor input, and one that says both (a request's calls),
    # are no response; a key that says output is.
    assert requested_calls({"myllm.payload": _CALL_PART}) is None
    assert requested_calls({"myllm.request.tool_calls": _CALL_PART}) is None
    assert requested_calls({"myllm.output": _CALL_PART}) == [Requested("lookup", {}, "c1", 0)]


def test_keys_no_convention_names_are_looked_at_among_the_first_256() -> None:
    filler = {f"app.attr_{i:03d}": "x" for i in range(255)}
    assert requested_calls({**filler, "myllm.output": _CALL_PART}) == [
        Requested("lookup", {}, "c1", 0)]
    filler["app.attr_255"] = "x"
    assert requested_calls({**filler, "myllm.output": _CALL_PART}) is None


def test_a_responses_function_call_without_call_id_keeps_its_item_id() -> None:
    item = {"type": "function_call", "id": "fc_1", "name": "lookup", "arguments": "{}"}
    assert requested_calls({"output.value": json.dumps({"output": [item]})}) == [
        Requested("lookup", {}, "fc_1", 0)]


def test_a_conversation_as_output_asks_only_through_the_assistant() -> None:
    # A developer message quoting a call (an example in the instructions) asks for nothing.
    example = {"type": "tool_call", "id": "ex", "name": "lookup", "arguments": {}}
    asked = {"type": "tool_call", "id": "c1", "name": "convert", "arguments": {}}
    conversation = [{"role": "developer", "content": [example]},
                    {"role": "assistant", "content": [asked]}]
    assert requested_calls({"gen_ai.output.messages": json.dumps(conversation)}) == [
        Requested("convert", {}, "c1", 0)]


def test_keys_no_convention_names_skip_values_that_are_no_text() -> None:
    assert requested_calls({"myllm.output_tokens": 3, "myllm.output": _CALL_PART}) == [
        Requested("lookup", {}, "c1", 0)]


def test_more_call_shapes_flattened_without_id_langchain_dump_additional_kwargs() -> None:
    flat = {"gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.tool_calls.0.name": "lookup",
            "gen_ai.completion.0.tool_calls.0.arguments": "{}"}
    assert requested_calls(flat) == [Requested("lookup", {}, None, 0)]
    dump = {"generations": [[{"message": {"type": "ai", "data": {"content": "", "tool_calls": [
        {"name": "lookup", "args": {}, "id": "c1", "type": "tool_call"}]}}}]]}
    assert requested_calls({"output.value": json.dumps(dump)}) == [Requested("lookup", {}, "c1", 0)]
    older = {"role": "assistant", "content": "", "additional_kwargs": {"tool_calls": [
        {"id": "c2", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]}}
    assert requested_calls({"output.value": json.dumps(older)}) == [
        Requested("lookup", {}, "c2", 0)]


def test_results_of_input_messages_held_as_a_value_not_text() -> None:
    # A file's attribute may hold the messages as a list (an OTLP array), not JSON text.
    messages = [{"role": "tool", "tool_call_id": "c1", "content": "Paris"}]
    assert returned_results({"gen_ai.input.messages": messages}) == {"c1": "Paris"}
