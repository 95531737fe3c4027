"""Generic envelopes taken off tool arguments and results by their shape (issue 27), where
the line is drawn (a tool's own dict stays whole), ``runs.unwrap: off``, and the run's agent
name under a framework's generic root (ADK 1.x ``invocation``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval.config import load_config
from otel_tooleval.conventions.calls import agent_of_span_name
from otel_tooleval.conventions.envelopes import (
    conversation_answer,
    haystack_agent_result,
    mcp_call_result,
    only_result,
)
from otel_tooleval.conventions.messages import _result
from otel_tooleval.files import iter_traces, read_records
from otel_tooleval.graders.trajectory_entries import _args_text
from otel_tooleval.grading import grade_records
from otel_tooleval.model import SpanRecord
from otel_tooleval.trajectory import RunPolicy, build_run
from otel_tooleval.values import decode_value, lc_message, unwrap_arguments, unwrap_result
from tests.support.replay import replay_file
from tests.test_framework_fixtures import SHARED

ROOT = SpanRecord(1, 1, 0, "invoke_agent a", 0, 100, {"gen_ai.operation.name": "invoke_agent"})


def _call(arguments: Any = None, result: Any = None, *, policy: RunPolicy | None = None,
          extra: dict[str, Any] | None = None) -> Any:
    attrs: dict[str, Any] = {"gen_ai.tool.name": "lookup_city", **(extra or {})}
    if arguments is not None:
        attrs["gen_ai.tool.call.arguments"] = arguments
    if result is not None:
        attrs["gen_ai.tool.call.result"] = result
    tool = SpanRecord(1, 2, 1, "execute_tool lookup_city", 10, 20, attrs)
    (call,) = build_run(ROOT, [tool], policy or RunPolicy()).calls
    return call


# -- results --------------------------------------------------------------------------------

RESULT_ENVELOPES = {
    "function response": json.dumps({"id": "call_1", "name": "lookup_city",
                                     "response": {"result": "Paris"}}),
    "message printed (str)": "content='Paris' name='lookup_city' tool_call_id='call_1'",
    "message printed (repr)": "ToolMessage(content='Paris', name='lookup_city', "
                              "tool_call_id='call_1')",
    "message printed, double quotes": "content=\"Paris\" name='lookup_city' "
                                      "tool_call_id='call_1' artifact=None status='success'",
    "ToolMessage serialised": json.dumps({
        "content": "Paris", "additional_kwargs": {}, "response_metadata": {}, "type": "tool",
        "name": "lookup_city", "id": None, "tool_call_id": "call_1", "artifact": None,
        "status": "success"}),
    "OpenAI tool message": json.dumps({"role": "tool", "tool_call_id": "call_1",
                                       "content": "Paris"}),
    "Anthropic tool_result": json.dumps({"type": "tool_result", "tool_use_id": "toolu_1",
                                         "content": [{"type": "text", "text": "Paris"}]}),
    "Responses function_call_output": json.dumps({"type": "function_call_output",
                                                  "call_id": "call_1", "output": "Paris"}),
    "lone result": json.dumps({"result": "Paris"}),
    "lone output": json.dumps({"output": "Paris"}),
    "lone response": json.dumps({"response": "Paris"}),
    "lone content": json.dumps({"content": "Paris"}),
    "lone content, text blocks": json.dumps({"content": [{"type": "text", "text": "Paris"}]}),
    "wrapper in a message": json.dumps({"role": "tool", "tool_call_id": "c",
                                        "content": json.dumps({"output": "Paris"})}),
    # LangChain's serialised constructor form of a message (LangChain.js through OpenInference
    # JS), in a lone output wrapper and alone: its kwargs, then the message rule.
    "ToolMessage constructor form": json.dumps({"output": {
        "lc": 1, "type": "constructor", "id": ["langchain_core", "messages", "ToolMessage"],
        "kwargs": {"status": "success", "content": "Paris", "tool_call_id": "call_0_0",
                   "name": "lookup_city", "additional_kwargs": {}, "response_metadata": {}}}}),
    "ToolMessage constructor form, alone": json.dumps({
        "lc": 1, "type": "constructor", "id": ["langchain_core", "messages", "ToolMessage"],
        "kwargs": {"content": [{"type": "text", "text": "Paris"}], "tool_call_id": "c"}}),
}


@pytest.mark.parametrize("raw", RESULT_ENVELOPES.values(), ids=RESULT_ENVELOPES.keys())
def test_a_result_envelope_is_taken_off_by_its_shape(raw: str) -> None:
    assert unwrap_result(decode_value(raw)) == "Paris"
    assert _call(result=raw).result == "Paris"


def test_json_inside_a_result_envelope_is_decoded() -> None:
    inner = {"city": "Paris", "temp_c": 21}
    constructor = {"output": {"lc": 1, "type": "constructor",
                              "id": ["langchain_core", "messages", "ToolMessage"],
                              "kwargs": {"content": json.dumps(inner), "tool_call_id": "c"}}}
    assert _call(result=json.dumps(constructor)).result == inner
    assert _call(result=json.dumps({"output": json.dumps(inner)})).result == inner
    message = f"content='{json.dumps(inner)}' name='get_weather' tool_call_id='call_2'"
    assert _call(result=message).result == inner
    response = {"id": "c", "name": "get_weather", "response": inner}
    assert _call(result=json.dumps(response)).result == inner


KEPT_RESULTS = {
    "wrapper key beside others": {"result": 1, "status": "ok"},
    "output beside others": {"output": "x", "exit_code": 0},
    "content without a message's marks": {"content": "x", "title": "t"},
    "response without a name": {"id": "1", "response": "x"},
    "name and response beside other keys": {"name": "n", "response": "r", "status": 200},
    "a plain object": {"city": "Paris", "temp_c": 21},
    "a list": [{"result": 1}],
    # The constructor form of a LangChain class that is no message (a Document) is a value.
    "a constructor of no message": {"lc": 1, "type": "constructor",
                                    "id": ["langchain_core", "documents", "Document"],
                                    "kwargs": {"page_content": "Paris", "metadata": {}}},
}


@pytest.mark.parametrize("value", KEPT_RESULTS.values(), ids=KEPT_RESULTS.keys())
def test_a_tools_own_dict_stays_whole(value: Any) -> None:
    assert unwrap_result(value) is value
    assert _call(result=json.dumps(value)).result == value


@pytest.mark.parametrize("text", [
    "content='Paris'",                                    # no tool_call_id: any text
    "the content='Paris' tool_call_id='c'",               # not a message's text
    "content=Paris name='x' tool_call_id='c'",            # no literal
])
def test_text_that_only_looks_like_a_message_stays_text(text: str) -> None:
    assert unwrap_result(text) == text
    assert _call(result=text).result == text


def test_scalars_inside_envelopes_stay_what_was_recorded() -> None:
    # "69.8" stays the text (result regexes see it as recorded); 69.8 stays the number.
    assert _call(result='{"result": "69.8"}').result == "69.8"
    assert _call(result='{"result": 69.8}').result == 69.8


# -- arguments ------------------------------------------------------------------------------

ARGUMENT_ENVELOPES = {
    "input and null options": {"input": {"country": "France"}, "options": None},
    "input and empty options": {"input": {"country": "France"}, "options": {}},
    "input and call options": {"input": {"country": "France"},
                               "options": {"toolCallId": "call_1", "messages": []}},
    "lone input": {"input": {"country": "France"}},
    "lone kwargs": {"kwargs": {"country": "France"}},
    "kwargs in input": {"input": {"kwargs": {"country": "France"}}},
}


@pytest.mark.parametrize("value", ARGUMENT_ENVELOPES.values(), ids=ARGUMENT_ENVELOPES.keys())
def test_an_arguments_envelope_is_taken_off_by_its_shape(value: Any) -> None:
    assert unwrap_arguments(value) == {"country": "France"}
    assert _call(arguments=json.dumps(value)).arguments == {"country": "France"}


KEPT_ARGUMENTS = {
    "lone input text": {"input": "paris"},
    "input with other options": {"input": {"q": "x"}, "options": {"limit": 3}},
    "input beside another parameter": {"input": {"q": "x"}, "mode": "fast"},
    "lone result (no arguments wrapper)": {"result": {"q": "x"}},
    "lone content": {"content": "file text"},
    "plain": {"country": "France"},
}


@pytest.mark.parametrize("value", KEPT_ARGUMENTS.values(), ids=KEPT_ARGUMENTS.keys())
def test_arguments_that_are_no_envelope_stay_whole(value: Any) -> None:
    assert unwrap_arguments(value) is value
    assert _call(arguments=json.dumps(value)).arguments == value


def test_a_result_wrapper_is_no_arguments_wrapper_and_the_reverse() -> None:
    assert _call(arguments='{"output": {"a": 1}}').arguments == {"output": {"a": 1}}
    assert _call(result='{"input": {"a": 1}}').result == {"input": {"a": 1}}


# -- a framework's own envelope first, then the generic ones ----------------------------------

def test_generic_envelopes_apply_after_a_frameworks_own() -> None:
    # ADK's row takes {"result": x} off; a function response inside an MCP-style result under
    # the GenAI row (its own envelope: mcp_call_result) is taken off after it.
    mcp = {"content": [{"type": "text", "text": json.dumps({"output": "Paris"})}],
           "isError": False}
    assert _call(result=json.dumps(mcp)).result == "Paris"


# -- turning it off -------------------------------------------------------------------------

def test_unwrap_off_keeps_every_generic_envelope() -> None:
    off = RunPolicy(unwrap=False)
    for raw in RESULT_ENVELOPES.values():
        assert _call(result=raw, policy=off).result == decode_value(raw)
    for value in ARGUMENT_ENVELOPES.values():
        assert _call(arguments=json.dumps(value), policy=off).arguments == value


def test_unwrap_off_keeps_a_frameworks_own_envelope() -> None:
    adk = SpanRecord(1, 2, 1, "execute_tool lookup_city", 10, 20, {
        "gen_ai.tool.name": "lookup_city",
        "gcp.vertex.agent.tool_response": json.dumps({"result": "Paris"})},
        scope="gcp.vertex.agent")
    (call,) = build_run(ROOT, [adk], RunPolicy(unwrap=False)).calls
    assert call.result == "Paris"


def test_runs_unwrap_config_key(tmp_path: Any) -> None:
    graders = "graders: [{type: tool-calls, config: {required: [lookup_city]}}]\n"
    path = tmp_path / "c.yaml"
    path.write_text(graders)
    assert load_config(path).policy.unwrap is True
    for value in ("off", '"off"'):    # YAML 1.1 reads a bare off as false
        path.write_text(graders + f"runs: {{unwrap: {value}}}\n")
        assert load_config(path).policy.unwrap is False
    path.write_text(graders + "runs: {unwrap: auto}\n")
    assert load_config(path).policy.unwrap is True
    path.write_text(graders + "runs: {unwrap: sometimes}\n")
    with pytest.raises(ValueError, match="unwrap"):
        load_config(path)


# -- the graders' text shortcut agrees with the decoded arguments ---------------------------

def test_expected_args_in_an_envelope_shape_get_no_text_shortcut() -> None:
    # The shortcut says "equal text, equal arguments"; a call's {"input": {...}} is read as
    # the object inside, so an entry expecting the envelope itself must be compared decoded.
    assert _args_text({"input": {"country": "France"}}) is None
    assert _args_text({"country": "France"}) == '{"country": "France"}'
    assert _args_text({"input": "paris"}) == '{"input": "paris"}'


# -- a run's agent named by an agent span's name (ADK 1.x) ----------------------------------

_ADK = Path(__file__).parent / "data" / "frameworks" / "adk_legacy" / "traces.jsonl"


def _adk_1x(tmp_path: Path, agent_span: str = "agent_run [weather_agent]") -> Path:
    """The ADK legacy-schema recording as ADK 1.x wrote it: the agent span named
    ``agent_run [weather_agent]`` with no attribute, and no ``gen_ai.agent.name`` anywhere."""
    lines = []
    for line in _ADK.read_text().splitlines():
        doc = json.loads(line)
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    if span["name"].startswith("invoke_agent"):
                        span["name"], span["attributes"] = agent_span, []
                    span["attributes"] = [a for a in span.get("attributes", [])
                                          if a["key"] != "gen_ai.agent.name"]
        lines.append(json.dumps(doc))
    path = tmp_path / "traces.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _graded(path: Path) -> tuple[list[Any], list[Any]]:
    offline = [r for trace in iter_traces(read_records(str(path)))
               for r in grade_records(trace, load_config(SHARED))]
    live = replay_file(path, SHARED)
    assert [r.passed for r in offline] == [r.passed for r in live] == [True]
    return offline, live


def test_a_generic_root_takes_the_name_of_the_agent_span_below_it(tmp_path: Path) -> None:
    offline, live = _graded(_adk_1x(tmp_path))
    assert [r.run.root_name for r in offline] == ["invocation"]
    assert [r.run.agent for r in offline] == ["weather_agent"]
    assert [r.run.agent for r in live] == ["weather_agent"]
    assert [c.name for c in offline[0].run.calls] == [
        "lookup_city", "get_weather", "get_weather", "convert_temp"]
    assert offline[0].run.calls[0].result == "Paris"


def test_a_span_name_that_only_starts_like_an_agent_span_names_no_agent(tmp_path: Path) -> None:
    offline, live = _graded(_adk_1x(tmp_path, "agent_run [weather_agent"))
    assert [r.run.agent for r in offline] == [r.run.agent for r in live] == ["invocation"]
    assert agent_of_span_name("agent_run []") is None
    assert agent_of_span_name("agent_run [a b]") == "a b"


def test_an_agent_attribute_below_wins_over_an_agent_span_name() -> None:
    root = SpanRecord(1, 1, 0, "invocation", 0, 100, {}, scope="gcp.vertex.agent")
    by_name = SpanRecord(1, 2, 1, "agent_run [outer]", 1, 99, {}, scope="gcp.vertex.agent")
    by_attr = SpanRecord(1, 3, 2, "invoke_agent inner", 2, 98,
                         {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "inner"})
    assert build_run(root, [by_name, by_attr], RunPolicy()).agent == "inner"
    assert build_run(root, [by_name], RunPolicy()).agent == "outer"
    # A root that is an agent span keeps its own name.
    agent_root = SpanRecord(1, 1, 0, "invoke_agent a", 0, 100,
                            {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"})
    assert build_run(agent_root, [by_name], RunPolicy()).agent == "a"


def test_adks_result_wrapper_is_taken_off_only_when_alone() -> None:
    assert only_result({"result": 1}) == 1
    kept = {"result": 1, "status": "ok"}
    assert only_result(kept) is kept
    assert _result(json.dumps(kept)) == kept    # a message's tool result, the same rule


def test_lc_message_reads_only_a_messages_constructor() -> None:
    def ctor(ids: Any, kwargs: Any) -> dict[str, Any]:
        return {"lc": 1, "type": "constructor", "id": ids, "kwargs": kwargs}

    assert lc_message(ctor(["x", "ToolMessage"], {"content": "c"})) == {
        "content": "c", "type": "ToolMessage"}
    assert lc_message(ctor(["x", "AIMessageChunk"], {"content": "c"}))["type"] == "AIMessageChunk"
    kept = {"content": "c", "type": "tool"}
    assert lc_message(ctor(["x", "ToolMessage"], kept)) is kept      # its own type wins
    for ids, kwargs in (([], {"content": "c"}), ("ToolMessage", {"content": "c"}),
                        (["x", "ToolMessage"], "c"), (["x", "Document"], {"content": "c"}),
                        (["x", 7], {"content": "c"})):
        assert lc_message(ctor(ids, kwargs)) is None, (ids, kwargs)


def test_a_content_object_typed_as_a_tool_message_is_its_content() -> None:
    assert unwrap_result({"type": "tool", "content": "x"}) == "x"
    assert unwrap_result({"type": "ToolMessage", "content": "x"}) == "x"
    assert unwrap_result({"role": "tool", "content": "x"}) == "x"


def test_an_mcp_call_result_is_read_only_with_its_marks() -> None:
    blocks = [{"type": "text", "text": '{"a": 1}'}]
    assert mcp_call_result({"content": blocks, "structuredContent": {"b": 2}}) == {"b": 2}
    assert mcp_call_result({"content": blocks, "isError": False}) == {"a": 1}
    assert mcp_call_result({"content": blocks, "isError": True,
                            "structuredContent": {"b": 2}}) == {"a": 1}
    plain = {"content": blocks}
    assert mcp_call_result(plain) is plain


def test_a_haystack_agent_result_is_its_last_messages_text_joined() -> None:
    last = {"content": [{"text": "Par"}, {"text": "is"}, {"image": "x"}]}
    assert haystack_agent_result({"messages": [], "last_message": last}) == "Paris"
    assert haystack_agent_result({"last_message": last}) is None     # no messages: no agent's
    assert haystack_agent_result({"messages": [], "last_message": {"content": []}}) is None


def test_a_conversations_answer_joins_its_text_blocks_as_they_are() -> None:
    message = {"role": "assistant", "content": [{"type": "text", "text": "Par"},
                                                 {"type": "output_text", "text": "is"}]}
    assert conversation_answer([message]) == "Paris"
