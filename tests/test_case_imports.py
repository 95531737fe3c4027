"""Importing other tools' eval sets as cases (otel_tooleval/case_imports.py).

One fixture per format under tests/data/cases/, written in the shape its tool documents and
writes; every imported grader entry is also built by the real config loader, so a mapping
that produces an entry our family would refuse fails here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval.case_imports import (
    CaseImportError,
    convert,
    detect_format,
    import_cases,
    read_case_file,
)
from otel_tooleval.config import load_config

DATA = Path(__file__).parent / "data" / "cases"
FIXTURES = {
    "adk": DATA / "adk" / "travel.evalset.json",
    "agentv": DATA / "agentv.eval.yaml",
    "deepeval": DATA / "deepeval_goldens.json",
    "ragas": DATA / "ragas_samples.jsonl",
    "uipath": DATA / "uipath.eval-set.json",
}


def _by_id(cases: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {case["id"]: case for case in cases}


def _write(tmp_path: Path, name: str, content: Any) -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content),
                    encoding="utf-8")
    return path


def _error(path: Path, **kwargs: Any) -> CaseImportError:
    with pytest.raises(CaseImportError) as info:
        import_cases(path, **kwargs)
    return info.value


# --- every format ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", sorted(FIXTURES))
def test_each_fixture_is_recognised_and_its_graders_load(fmt: str) -> None:
    path = FIXTURES[fmt]
    assert detect_format(path, read_case_file(path)) == fmt
    cases = import_cases(path)
    assert cases
    for case in cases:
        assert set(case) == {"id", "match", "graders"}
        assert len(case["match"]) == 1
        if case["graders"]:   # the real families accept what the import wrote
            config = load_config({"graders": case["graders"]})
            assert [g.name for g in config.graders] == [g["name"] for g in case["graders"]]


# --- Google ADK ------------------------------------------------------------------------------


def test_adk_eval_set_maps_tool_uses_user_content_and_test_config() -> None:
    cases = _by_id(import_cases(FIXTURES["adk"]))
    assert list(cases) == ["weather-paris", "book-lisbon#1", "book-lisbon#2", "small-talk"]
    weather = cases["weather-paris"]
    assert weather["match"] == {"first_user_message": "What is the weather in Paris?"}
    (grader,) = weather["graders"]
    assert grader == {
        "name": "tool_trajectory_avg_score", "type": "tool_trajectory_avg_score",
        "expected_tool_use": [{"name": "get_weather", "args": {"city": "Paris"}}],
        # test_config.json beside the eval set, this criterion only (as AgentEvaluator reads it)
        "criteria": {"tool_trajectory_avg_score": {"threshold": 1.0, "match_type": "IN_ORDER"}}}
    # several invocations: one case each, the calls of invocation_events read too
    assert cases["book-lisbon#2"]["match"] == {"first_user_message": "Book it for 2 nights"}
    assert cases["book-lisbon#2"]["graders"][0]["expected_tool_use"] == [
        {"name": "create_booking", "args": {"hotel": "Alfama", "nights": 2}}]
    assert cases["small-talk"]["graders"][0]["expected_tool_use"] == []


def test_adk_without_test_config_leaves_adk_default_criteria(tmp_path: Path) -> None:
    path = tmp_path / "travel.evalset.json"
    shutil.copy(FIXTURES["adk"], path)
    (grader,) = _by_id(import_cases(path))["weather-paris"]["graders"]
    assert "criteria" not in grader


def test_adk_camel_case_keys_as_adk_web_writes_them(tmp_path: Path) -> None:
    path = _write(tmp_path, "x.evalset.json", {"evalSetId": "s", "evalCases": [{
        "evalId": "c1", "conversation": [{
            "userContent": {"parts": [{"text": "Hi"}, {"text": "there"}], "role": "user"},
            "intermediateData": {"toolUses": [{"name": "greet", "args": {"loud": True}}]}}]}]})
    (case,) = import_cases(path)
    assert case["id"] == "c1"
    assert case["match"] == {"first_user_message": "Hi\nthere"}
    assert case["graders"][0]["expected_tool_use"] == [{"name": "greet", "args": {"loud": True}}]


def test_adk_older_test_file_format_is_refused_with_the_migration(tmp_path: Path) -> None:
    path = _write(tmp_path, "old.test.json", [{"query": "hi", "expected_tool_use": []}])
    error = _error(path)
    assert "migrate_eval_data_to_new_schema" in str(error)
    assert str(path) in str(error) and "ADK" in str(error)


def test_adk_conversation_scenario_case_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, "s.evalset.json", {"eval_set_id": "s", "eval_cases": [
        {"eval_id": "sim", "conversation_scenario": {"starting_prompt": "hi"}}]})
    error = _error(path)
    assert error.field == "eval_cases[0].conversation"
    assert "conversation_scenario" in error.problem


def test_adk_user_content_without_text_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.evalset.json", {"eval_set_id": "s", "eval_cases": [
        {"eval_id": "a", "conversation": [{"user_content": {"parts": [{"inline_data": {}}]}}]}]})
    error = _error(path)
    assert error.field == "eval_cases[0].conversation[0].user_content.parts"
    assert str(error).startswith(f"cannot read cases from {path} as an ADK eval set: "
                                 "eval_cases[0].conversation[0].user_content.parts: ")


def test_adk_tool_use_without_name_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.evalset.json", {"eval_set_id": "s", "eval_cases": [
        {"eval_id": "a", "conversation": [{"user_content": {"parts": [{"text": "x"}]},
                                           "intermediate_data": {"tool_uses": [{"args": {}}]}}]}]})
    assert _error(path).field == "eval_cases[0].conversation[0].intermediate_data.tool_uses[0].name"


# --- agentv ----------------------------------------------------------------------------------


def test_agentv_tests_take_shared_and_own_trajectory_evaluators() -> None:
    cases = _by_id(import_cases(FIXTURES["agentv"]))
    assert list(cases) == ["weather-paris", "book-lisbon", "greet"]
    shared = {"name": "no-stray-tools", "type": "tool_trajectory", "mode": "any_order",
              "minimums": {"lookup_policy": 1}}
    weather = cases["weather-paris"]
    assert weather["match"] == {"first_user_message": "What is the weather in Paris?"}
    # the rubric is not a tool-call grader; agentv's weight has no meaning here
    assert weather["graders"] == [shared, {
        "name": "weather-call", "type": "tool_trajectory", "mode": "in_order",
        "expected": [{"tool": "get_weather", "args": {"city": "Paris"}}]}]
    book = cases["book-lisbon"]
    # the first user message, from content blocks, after the system message
    assert book["match"] == {"first_user_message": "Book a hotel in Lisbon for 2 nights"}
    assert book["graders"][1]["name"] == "tool_trajectory"   # unnamed in agentv
    assert book["graders"][1]["expected"][1] == {"tool": "create_booking", "args": {"nights": 2},
                                                 "max_duration_ms": 500}
    assert cases["greet"]["graders"] == [shared]


def test_agentv_older_evalcases_shape(tmp_path: Path) -> None:
    path = _write(tmp_path, "old.yaml", """
evalcases:
  - id: auth-flow
    expected_outcome: Agent follows auth sequence
    input_messages:
      - role: user
        content: Authenticate user
    execution:
      evaluators:
        - type: tool_trajectory
          mode: exact
          expected: [{tool: checkCredentials}]
        - type: tool_trajectory
          mode: any_order
          minimums: {auditLog: 1}
""")
    (case,) = import_cases(path)
    assert case["match"] == {"first_user_message": "Authenticate user"}
    # two unnamed evaluators get distinct names: ours are unique per case
    assert [g["name"] for g in case["graders"]] == ["tool_trajectory", "tool_trajectory-2"]


def test_agentv_test_without_id_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, "e.yaml", "tests:\n  - input: hi\n")
    error = _error(path)
    assert (error.fmt, error.field) == ("agentv", "tests[0].id")


def test_agentv_test_without_user_message_needs_match_attribute(tmp_path: Path) -> None:
    path = _write(tmp_path, "e.yaml", "tests:\n  - id: a\n    input: [{role: system, "
                                      "content: be brief}]\n")
    assert "match_attribute" in _error(path).problem
    (case,) = import_cases(path, match_attribute=True)
    assert case["match"] == {"attribute": {"key": "tooleval.case.id", "value": "a"}}


def test_yaml_aliases_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "e.yaml", "x: &a [1, 2]\ntests:\n  - id: a\n    input: *a\n")
    error = _error(path)
    assert "alias" in error.problem and "line 4" in error.problem


# --- DeepEval --------------------------------------------------------------------------------


def test_deepeval_goldens_map_expected_tools() -> None:
    cases = import_cases(FIXTURES["deepeval"])
    assert [c["id"] for c in cases] == ["deepeval_goldens-1", "deepeval_goldens-2",
                                        "deepeval_goldens-3"]
    assert cases[0]["match"] == {"first_user_message": "What is the weather in Paris?"}
    # null fields of DeepEval's ToolCall are left out
    assert cases[0]["graders"] == [{"name": "tool_correctness", "type": "tool_correctness",
                                    "expected_tools": [{"name": "get_weather",
                                                        "input_parameters": {"city": "Paris"}}]}]
    assert [t["name"] for t in cases[1]["graders"][0]["expected_tools"]] == [
        "search_hotels", "create_booking"]
    assert cases[2]["graders"] == []   # a golden without expected_tools: shared graders only


def test_deepeval_goldens_object_names_and_bare_tool_names(tmp_path: Path) -> None:
    path = _write(tmp_path, "d.json", {"goldens": [
        {"name": "refund", "input": "Refund me", "expectedTools": [
            "WebSearch", {"name": "refund", "inputParameters": {"id": 7}}]}]})
    (case,) = import_cases(path)
    assert case["id"] == "refund"
    assert case["graders"][0]["expected_tools"] == [
        {"name": "WebSearch"}, {"name": "refund", "input_parameters": {"id": 7}}]


def test_deepeval_golden_without_input_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, "d.json", [{"input": "a"}, {"expected_tools": []}])
    error = _error(path)
    assert (error.fmt, error.field) == ("deepeval", "[1].input")


# --- Ragas -----------------------------------------------------------------------------------


def test_ragas_samples_map_reference_tool_calls() -> None:
    cases = import_cases(FIXTURES["ragas"])
    # ids are the line numbers (the blank second line counts)
    assert [c["id"] for c in cases] == ["ragas_samples-1", "ragas_samples-2", "ragas_samples-3"]
    assert cases[0]["match"] == {"first_user_message": "What is the weather in Paris?"}
    assert cases[0]["graders"] == [{"name": "tool_call_accuracy", "type": "tool_call_accuracy",
                                    "reference_tool_calls": [{"name": "get_weather",
                                                              "args": {"city": "Paris"}}]}]
    assert len(cases[1]["graders"][0]["reference_tool_calls"]) == 2
    # a single-turn sample: user_input is the text itself, no reference calls
    assert cases[2]["match"] == {"first_user_message": "Tell me a joke"}
    assert cases[2]["graders"] == []


def test_ragas_bad_line_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, "r.jsonl", '{"user_input": "a"}\n{"user_input": \n')
    error = _error(path)
    assert "line 2: not valid JSON" in str(error) and str(path) in str(error)


def test_ragas_sample_without_human_message_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, "r.jsonl", json.dumps(
        {"user_input": [{"type": "ai", "content": "hello"}]}) + "\n")
    error = _error(path)
    assert (error.fmt, error.field) == ("ragas", "line 1: user_input")


# --- UiPath ----------------------------------------------------------------------------------


def test_uipath_evaluation_set_maps_criteria_to_families() -> None:
    cases = _by_id(import_cases(FIXTURES["uipath"]))
    weather = cases["weather-paris"]
    # one input text is the user's message
    assert weather["match"] == {"first_user_message": "What is the weather in Paris?"}
    # camelCase criteria keys in snake case; null (default criteria) and output evaluators skipped
    assert weather["graders"] == [
        {"name": "order-check", "type": "tool-call-order", "tool_calls_order": ["get_weather"]},
        {"name": "args-check", "type": "tool-call-args",
         "tool_calls": [{"name": "get_weather", "args": {"city": "Paris"}}]}]
    book = cases["book-lisbon"]
    # several inputs are no single message: matched by the case id attribute
    assert book["match"] == {"attribute": {"key": "tooleval.case.id", "value": "book-lisbon"}}
    assert [g["type"] for g in book["graders"]] == ["tool-call-count", "tool-call-output"]


def test_uipath_mixed_criteria_are_named(tmp_path: Path) -> None:
    path = _write(tmp_path, "u.json", {"version": "1.0", "id": "s", "name": "s", "evaluations": [
        {"id": "a", "name": "a", "inputs": {"q": "x"}, "evaluationCriterias": {
            "both": {"toolCallsOrder": ["t"], "toolCalls": []}}}]})
    error = _error(path)
    assert (error.fmt, error.field) == ("uipath", "evaluations[0].evaluationCriterias.both")


def test_uipath_evaluations_not_a_list_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, "u.json", {"version": "1.0", "evaluations": {"id": "a"}})
    error = _error(path)
    assert (error.field, error.problem) == ("evaluations", "must be a list, got an object")


# --- shared behaviour ------------------------------------------------------------------------


def test_match_attribute_matches_every_case_by_its_id() -> None:
    for path in FIXTURES.values():
        for case in import_cases(path, match_attribute="dataset.item_id"):
            assert case["match"] == {"attribute": {"key": "dataset.item_id",
                                                   "value": case["id"]}}


def test_duplicate_ids_are_named(tmp_path: Path) -> None:
    path = _write(tmp_path, "e.yaml", "tests:\n  - {id: a, input: x}\n  - {id: a, input: y}\n")
    error = _error(path)
    assert error.field == "tests[1]" and "tests[0]" in error.problem


def test_native_cases_pass_through_for_cases_py(tmp_path: Path) -> None:
    native = [{"id": "a", "match": {"first_user_message": "hi"}}]
    for name, content in (("n.json", native), ("m.yaml", {"cases": native})):
        path = _write(tmp_path, name, json.dumps(content))
        assert detect_format(path, read_case_file(path)) == "native"
        assert import_cases(path) == native


def test_unknown_shape_lists_the_formats(tmp_path: Path) -> None:
    path = _write(tmp_path, "x.json", {"items": []})
    error = _error(path)
    assert error.fmt is None
    for word in ("eval_cases", "tests", "goldens", "user_input", "evaluations", "match"):
        assert word in error.problem
    with pytest.raises(CaseImportError, match="unknown format 'promptfoo'"):
        convert("promptfoo", {}, path)


@pytest.mark.parametrize(("name", "content", "words"), [
    ("missing.json", None, "no such file"),
    ("bad.json", "{", "not valid JSON"),
    ("bad.yaml", "tests: [", "not valid YAML"),
    ("latin.yaml", b"caf\xe9", "not UTF-8"),
])
def test_unreadable_files_are_one_clear_error(tmp_path: Path, name: str, content: Any,
                                              words: str) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    error = _error(path)
    assert str(error).startswith(f"cannot read cases from {path}: ")
    assert words in str(error)
