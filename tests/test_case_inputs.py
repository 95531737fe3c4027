"""Where a run's first user message is read (``conventions.inputs``, docs/cases.md): the rules
by which frameworks never seen are read too, and the recordings that carry no user message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_tooleval.cases import first_user_message_of
from otel_tooleval.cli import main
from otel_tooleval.config import load_config
from otel_tooleval.conventions.inputs import first_user_message
from otel_tooleval.grading import grade_records
from otel_tooleval.model import SpanRecord

FRAMEWORKS = Path(__file__).parent / "data" / "frameworks"
ASKED = "What's the weather in Paris and Lyon? Give Paris in Fahrenheit too."
MESSAGES = json.dumps({"model": "m", "messages": [
    {"role": "system", "content": "You answer weather questions."},
    {"role": "user", "content": [{"text": "weather in Paris?"}]}]})


@pytest.mark.parametrize("key", [
    "acme.step.input",          # a last segment that is an input
    "acme.llm_request",         # ... or ends in request
    "acme.pipeline.input_data",
    "acme.prompt.messages",     # messages under an input-named segment
    "acme.input.value",
])
def test_an_input_named_attribute_holding_json_messages_is_read(key: str) -> None:
    assert first_user_message({key: MESSAGES}) == "weather in Paris?"


@pytest.mark.parametrize("attributes", [
    {"acme.step.output": MESSAGES},                 # an output, even holding the history
    {"acme.llm_response": MESSAGES},
    {"acme.input_result": MESSAGES},
    {"acme.completion.prompt": MESSAGES},
    {"acme.messages": MESSAGES},                    # no input in the name
    {"acme.request": "weather in Paris?"},          # plain text under a generic name
    {"gen_ai.request.model": "weather in Paris?"},  # a request's model, not its input
    {"acme.input": json.dumps([{"role": "system", "content": "You answer weather."}])},
])
def test_outputs_plain_text_and_other_names_are_not_read(attributes: dict[str, Any]) -> None:
    assert first_user_message(attributes) is None


def test_a_named_convention_is_read_before_an_input_named_attribute() -> None:
    assert first_user_message({"acme.input": MESSAGES,
                               "input.value": "What is the weather?"}) == "What is the weather?"


@pytest.mark.parametrize(("content", "asked"), [
    ('[{"text": "weather in Paris?"}]', "weather in Paris?"),   # content blocks
    (' weather in Paris? ', "weather in Paris?"),               # text
    ('{"content": "weather in Paris?", "role": "user"}', "weather in Paris?"),
])
def test_the_user_message_event_holds_the_message_itself(content: str, asked: str) -> None:
    assert first_user_message({}, [("gen_ai.user.message", {"content": content})]) == asked


def _record(span_id: int, parent: int, name: str, attrs: dict[str, Any]) -> SpanRecord:
    return SpanRecord(1, span_id, parent, name, 1_000 + span_id, 9_000 - span_id, attrs)


def test_a_model_span_without_input_is_read_through_the_model_span_nested_in_it() -> None:
    config = load_config({"graders": [{"name": "t", "type": "tool_trajectory", "mode": "in_order",
                                       "expected": [{"tool": "get_weather"}]}]})
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}
    records = [
        _record(1, 0, "invoke_agent agent", {"gen_ai.operation.name": "invoke_agent",
                                             "gen_ai.agent.name": "agent"}),
        _record(2, 1, "chat m", chat),                      # the wrapper: no input
        _record(3, 2, "chat m", {**chat, "gen_ai.input.messages": json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": "weather in Paris?"}]}])}),
        _record(4, 1, "execute_tool get_weather", {"gen_ai.operation.name": "execute_tool",
                                                  "gen_ai.tool.name": "get_weather"}),
    ]
    [report] = grade_records(records, config)
    assert report.run.steps == 1                     # the nested span is no step of its own
    assert first_user_message_of(report.run) == "weather in Paris?"


@pytest.mark.parametrize("framework", [
    "semantic_kernel",   # gen_ai.input.messages '[]' on the agent span; chat spans without input
    "autogen",           # no model span, and the agent span records no input
])
def test_a_recording_without_a_user_message_reports_no_case(
        framework: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"graders": [
        {"name": "trajectory", "type": "tool_trajectory", "mode": "in_order",
         "expected": [{"tool": "get_weather"}]}],
        "cases": [{"id": "weather", "match": {"first_user_message": ASKED}},
                  {"id": "anything", "match": {"first_user_message_regex": "."}}]}))
    code = main(["grade", str(FRAMEWORKS / framework / "traces.jsonl"), "-c", str(config),
                 "-f", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert [run["case"] for run in doc["runs"]] == [None]
    assert [(c["id"], c["status"]) for c in doc["cases"]] == [("weather", "missing"),
                                                              ("anything", "missing")]
    assert code == 1
