"""``tool-call-count``, ``tool-call-args`` and ``tool-call-output`` (the UiPath SDK's other
tool-call evaluators; SEMANTICS 3)."""

from __future__ import annotations

import itertools
import json
import random
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import otel_tooleval.graders.tool_call_checks  # noqa: F401  (registers the family)
from otel_tooleval import grade_run, load_config
from otel_tooleval.graders.registry import REGISTRY
from otel_tooleval.graders.tool_call_checks import max_matching, output_text, same_value
from otel_tooleval.model import ToolCall
from tests.support.errors import assert_config_error, assert_schema_agrees
from tests.support.runs import call, grade, run_of


def count(criteria: dict[str, Any], **options: Any) -> dict[str, Any]:
    return {"graders": [{"type": "tool-call-count", "tool_calls_count": criteria, **options}]}


def args(expected: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    return {"graders": [{"type": "tool-call-args", "tool_calls": expected, **options}]}


def outputs(expected: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    return {"graders": [{"type": "tool-call-output", "tool_outputs": expected, **options}]}


def with_values(config: dict[str, Any]) -> dict[str, Any]:
    return {**config, "emit": {"include_values": True}}


# -- count ------------------------------------------------------------------------------------------

def test_uipath_flaw_count_equal_zero_on_an_empty_trace_holds() -> None:
    r = grade(count({"delete_records": ["==", 0]}), [])
    assert (r.score, r.passed, r.label) == (1.0, True, "pass")
    assert r.details["checks"] == [{"tool": "delete_records", "operator": "==", "expected": 0,
                                    "actual": 0, "passed": True}]


@pytest.mark.parametrize(("op", "n", "holds"), [
    (">", 1, True), (">", 2, False), ("<", 3, True), ("<", 2, False),
    (">=", 2, True), (">=", 3, False), ("<=", 2, True), ("<=", 1, False),
    ("=", 2, True), ("=", 1, False), ("==", 2, True), ("==", 3, False),
    ("!=", 1, True), ("!=", 2, False),
])
def test_every_operator(op: str, n: int, holds: bool) -> None:
    r = grade(count({"search": [op, n]}), [call("search", {}), call("other", {}),
                                            call("search", {})])
    assert r.score == (1.0 if holds else 0.0)
    assert r.details["checks"][0]["actual"] == 2


def test_count_scores_the_fraction_of_entries_and_names_the_failures() -> None:
    config = count({"get_temperature": ["=", 1], "get_weather_condition": ["=", 1],
                    "send_email": [">=", 1]})
    r = grade(config, [call("get_temperature", {}), call("get_weather_condition", {}),
                       call("get_weather_condition", {})])
    assert r.score == pytest.approx(1 / 3)
    assert (r.passed, r.label) == (False, "fail")
    assert "1 of 3 count checks hold" in r.explanation
    assert "'get_weather_condition' was called 2 times, expected = 1" in r.explanation
    assert "'send_email' was called 0 times, expected >= 1" in r.explanation
    assert r.details["actual_tool_calls"] == {"get_temperature": 1, "get_weather_condition": 2}


def test_count_strict_is_all_or_nothing() -> None:
    criteria = {"a": ["==", 1], "b": ["==", 1]}
    assert grade(count(criteria, strict=True), [call("a", {})]).score == 0.0
    assert grade(count(criteria, strict=True), [call("a", {}), call("b", {})]).score == 1.0
    assert grade(count(criteria), [call("a", {})]).score == 0.5


def test_count_includes_pending_calls_and_matches_names_exactly() -> None:
    calls = [call("search", {}), call("search", {}, pending=True), call("Search", {})]
    assert grade(count({"search": ["==", 2]}), calls).score == 1.0


def test_count_nested_sdk_form_and_threshold() -> None:
    config = {"graders": [{"type": "ToolCallCountEvaluator",
                           "config": {"name": "ToolCallCountEvaluator", "strict": False,
                                      "threshold": 0.5},
                           "evaluation_criteria": {"tool_calls_count": {
                               "a": ["==", 1], "b": [">", 0]}}}]}
    r = grade(config, [call("a", {})])
    assert (r.type, r.score, r.passed) == ("tool-call-count", 0.5, True)
    assert r.details["evaluator_name"] == "ToolCallCountEvaluator"


def test_count_star_caps_every_call_of_the_run_beside_per_tool_caps() -> None:
    """Issue 28, item 2: ``{"*": ["<=", 3]}`` counts every call (it was a tool never called,
    so it held on any run); per-tool entries beside it count their own tool."""
    config = count({"*": ["<=", 3], "search": ["<=", 1]})
    calls = [call("search", {}), call("book", {}), call("delete_file", {}),
             call("search", {}, pending=True)]
    r = grade(config, calls)
    assert (r.score, r.passed) == (0.0, False)
    assert [c["actual"] for c in r.details["checks"]] == [4, 2]
    assert "the run's tools ('*') were called 4 times, expected <= 3" in r.explanation
    assert [(v["call"], v["tool"], v["reason"]) for v in r.details["violations"]] == [
        (3, "search", "over the count: '*' <= 3"), (3, "search", "over the count: 'search' <= 1")]
    assert grade(config, calls[1:3]).passed
    assert grade(count({"*": [">=", 1]}), []).score == 0.0


@pytest.mark.parametrize("key", ["get_*", "*search", "**"])
def test_count_refuses_a_pattern_for_a_tool_name_with_the_fix(key: str) -> None:
    assert_config_error(count({key: ["<=", 1]}), f"graders[0].tool_calls_count.{key}",
                        "'*' alone counts every call of the run")


# -- args ---------------------------------------------------------------------------------------------

def test_uipath_flaw_args_pairing_is_maximal_not_greedy() -> None:
    """Expected [t{}, t{x:1}] vs calls [t{x:1}, t{x:2}]: greedy pairs t{} with the first call
    and leaves t{x:1} without one (0.5); the best pairing matches both."""
    config = args([{"name": "t", "args": {}}, {"name": "t", "args": {"x": 1}}], subset=True)
    r = grade(config, [call("t", {"x": 1}), call("t", {"x": 2})])
    assert (r.score, r.passed) == (1.0, True)
    assert [e["call"] for e in r.details["expected"]] == [1, 0]


def test_args_exact_mode_needs_equal_arguments() -> None:
    config = args([{"name": "get_weather", "args": {"city": "Paris"}}])
    assert grade(config, [call("get_weather", {"city": "Paris"})]).score == 1.0
    r = grade(config, [call("get_weather", {"city": "Paris", "units": "C"})])
    assert r.score == 0.0
    assert "'get_weather' (entry 0): none of its calls (#0) has equal arguments" in r.explanation


def test_args_subset_mode_checks_only_the_given_keys() -> None:
    config = args([{"name": "get_weather", "args": {"city": "Paris"}}], subset=True)
    assert grade(config, [call("get_weather", {"city": "Paris", "units": "C"})]).score == 1.0
    assert grade(config, [call("get_weather", {"units": "C"})]).score == 0.0
    assert grade(config, [call("get_weather", {"city": "Rome"})]).score == 0.0


def test_args_values_compare_without_coercion() -> None:
    assert grade(args([{"name": "t", "args": {"n": 10}}]), [call("t", {"n": "10"})]).score == 0
    assert grade(args([{"name": "t", "args": {"n": 1}}]), [call("t", {"n": True})]).score == 0
    assert grade(args([{"name": "t", "args": {"n": 1}}]), [call("t", {"n": 1.0})]).score == 1
    nested = args([{"name": "t", "args": {"o": {"a": [1, {"b": None}]}}}])
    assert grade(nested, [call("t", {"o": {"a": [1, {"b": None}]}})]).score == 1
    assert grade(nested, [call("t", {"o": {"a": [1, {"b": None}], "c": 2}})]).score == 0
    assert grade(nested, [call("t", {"o": {"a": [1]}})]).score == 0


def test_same_value_rules() -> None:
    assert same_value(1, 1.0) and same_value(True, True) and same_value(None, None)
    assert not same_value(True, 1) and not same_value(0, False) and not same_value("1", 1)
    assert not same_value([1], (1, 2)) and not same_value({"a": 1}, [("a", 1)])
    assert not same_value(None, {}) and not same_value("", None)


def test_args_score_is_matched_over_expected_and_strict_is_all_or_nothing() -> None:
    expected = [{"name": "a", "args": {"q": 1}}, {"name": "b", "args": {}},
                {"name": "c", "args": {}}]
    calls = [call("a", {"q": 1}), call("b", {"z": 1}), call("a", {"q": 1})]
    r = grade(args(expected), calls)
    assert r.score == pytest.approx(1 / 3)
    assert "1 of 3 expected calls were matched" in r.explanation
    assert "'c' (entry 2) was never called" in r.explanation
    assert grade(args(expected, strict=True), calls).score == 0.0
    assert grade(args(expected[:1], strict=True), calls).score == 1.0


def test_args_each_call_pairs_with_one_entry() -> None:
    expected = [{"name": "a", "args": {"q": 1}}, {"name": "a", "args": {"q": 1}}]
    r = grade(args(expected), [call("a", {"q": 1})])
    assert r.score == 0.5
    assert "its calls with equal arguments (#0) are paired with other entries" in r.explanation
    assert grade(args(expected), [call("a", {"q": 1}), call("a", {"q": 1})]).score == 1.0


def test_args_count_pending_calls() -> None:
    r = grade(args([{"name": "a", "args": {"q": 1}}]), [call("a", {"q": 1}, pending=True)])
    assert r.score == 1.0


def test_args_missing_arguments_are_empty_and_text_arguments_match_nothing() -> None:
    assert grade(args([{"name": "now", "args": {}}]), [call("now")]).score == 1.0
    assert grade(args([{"name": "t", "args": {}}], subset=True),
                 [call("t", "plain text, not JSON")]).score == 0.0


def test_args_from_uipath_python_literal_input() -> None:
    uipath = call("lookup", attrs={"tool.name": "lookup",
                                   "input.value": "{'id': 7, 'deep': True, 'tags': ('a',)}"})
    r = grade(args([{"name": "lookup", "args": {"id": 7, "deep": True, "tags": ["a"]}}]),
              [uipath])
    assert r.score == 1.0


def test_args_explanation_and_details_never_hold_values_unless_asked() -> None:
    config = args([{"name": "login", "args": {"password": "hunter2-expected"}}])
    calls = [call("login", {"password": "hunter2-actual"})]
    r = grade(config, calls)
    text = r.explanation + json.dumps(r.to_dict())
    assert "hunter2" not in text
    shown = grade(with_values(config), calls)
    row = shown.details["expected"][0]
    assert row["args"] == {"password": "hunter2-expected"}
    assert row["calls"] == [{"call": 0, "args": {"password": "hunter2-actual"}}]
    assert "hunter2" not in shown.explanation


def test_args_nested_sdk_form_with_subset_in_config() -> None:
    config = {"graders": [{"type": "ToolCallArgsEvaluator", "id": "args-1",
                           "config": {"name": "ToolCallArgsEvaluator", "strict": False,
                                      "subset": True},
                           "evaluation_criteria": {"tool_calls": [
                               {"name": "t", "args": {"x": 1}}]}}]}
    r = grade(config, [call("t", {"x": 1, "y": 2})])
    assert (r.type, r.score, r.details["subset"]) == ("tool-call-args", 1.0, True)
    assert r.details["evaluator_id"] == "args-1"


# -- output -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("result", "expected"), [
    ({"content": "Sunny, 21C", "status": "ok"}, "Sunny, 21C"),          # a content field
    ({"content": {"t": 21}}, '{"t":21}'),                               # content, not text
    ({"temperature": 21, "unit": "C"}, '{"temperature":21,"unit":"C"}'),  # compact JSON
    ('{"a": 1,  "b": [1, 2]}', '{"a":1,"b":[1,2]}'),                    # JSON text, re-written
    ('"quoted text"', "quoted text"),                                   # a JSON string value
    ("plain text, not JSON", "plain text, not JSON"),                   # as is
    ("  spaced  ", "  spaced  "),                                       # as is, not trimmed
    ("1.50", "1.50"),                                                   # a scalar stays text
    ([1, 2], "[1,2]"),
])
def test_output_as_text(result: Any, expected: str) -> None:
    r = grade(outputs([{"name": "t", "output": expected}]), [call("t", {}, result)])
    assert r.score == 1.0, r.explanation


def test_output_must_be_equal_text() -> None:
    config = outputs([{"name": "t", "output": "Sunny"}])
    assert grade(config, [call("t", {}, "sunny")]).score == 0.0
    assert grade(config, [call("t", {}, "Sunny ")]).score == 0.0
    assert grade(config, [call("t", {})]).score == 0.0          # no result recorded


def test_output_ignores_pending_calls() -> None:
    config = outputs([{"name": "t", "output": "done"}])
    r = grade(config, [call("t", {}, pending=True)])
    assert (r.score, r.passed) == (0.0, False)
    assert r.explanation == ("0 of 1 expected outputs were matched; 't' (entry 0) has no "
                             "completed call (1 pending call ignored).")
    assert r.details["pending_ignored"] == 1
    r = grade(config, [call("t", {}, "busy"), call("t", {}, pending=True)])
    assert "none of its calls (#0) has an equal output" in r.explanation
    assert r.details["expected"][0]["matching_calls"] == []


def test_output_text_of_a_pending_call_is_none_even_with_a_result() -> None:
    done = ToolCall("t", 0, raw_result='{"content": "ok"}', has_result=True)
    assert output_text(done) == "ok"
    assert output_text(ToolCall("t", 0, raw_result="ok", has_result=True, pending=True)) is None
    assert output_text(ToolCall("t", 0)) is None


def test_output_of_a_failed_call_is_its_error() -> None:
    r = grade(outputs([{"name": "t", "output": "timeout"}]), [call("t", {}, error="timeout")])
    assert r.score == 1.0


def test_output_pairing_is_maximal() -> None:
    expected = [{"name": "t", "output": "a"}, {"name": "t", "output": "b"},
                {"name": "u", "output": "a"}]
    calls = [call("t", {}, "b"), call("t", {}, "a"), call("u", {}, "c")]
    r = grade(outputs(expected), calls)
    assert r.score == pytest.approx(2 / 3)
    assert [e["call"] for e in r.details["expected"]] == [1, 0, None]
    assert "'u' (entry 2): none of its calls (#2) has an equal output" in r.explanation
    assert grade(outputs(expected, strict=True), calls).score == 0.0
    assert grade(outputs(expected[:2], strict=True), calls).score == 1.0


def test_output_values_only_with_include_values() -> None:
    config = outputs([{"name": "t", "output": "secret-expected"}])
    calls = [call("t", {}, "secret-actual")]
    r = grade(config, calls)
    assert "secret" not in r.explanation + json.dumps(r.to_dict())
    shown = grade(with_values(config), calls)
    assert shown.details["expected"][0]["calls"] == [{"call": 0, "output": "secret-actual"}]
    assert "secret" not in shown.explanation


def test_output_nested_sdk_form_with_default_criteria() -> None:
    config = {"graders": [{"type": "uipath-tool-call-output",
                           "config": {"default_evaluation_criteria": {
                               "tool_outputs": [{"name": "t", "output": "ok"}]}}}]}
    r = grade(config, [call("t", {}, "ok")])
    assert (r.type, r.score) == ("tool-call-output", 1.0)


# -- matching ------------------------------------------------------------------------------------

def brute_force_matching(candidates: list[list[int]]) -> int:
    best = 0
    options = [[None, *c] for c in candidates]
    for choice in itertools.product(*options):
        used = [c for c in choice if c is not None]
        if len(used) == len(set(used)):
            best = max(best, len(used))
    return best


def test_max_matching_is_maximum_on_random_graphs() -> None:
    rng = random.Random(5)
    for _ in range(300):
        entries, calls = rng.randint(0, 5), rng.randint(0, 6)
        candidates = [sorted(rng.sample(range(calls), rng.randint(0, calls)))
                      for _ in range(entries)]
        paired = max_matching(candidates)
        used = [p for p in paired if p is not None]
        assert len(used) == len(set(used))
        assert all(p is None or p in candidates[i] for i, p in enumerate(paired))
        assert len(used) == brute_force_matching(candidates)



def test_max_matching_with_shared_candidate_lists_pairs_as_with_copies() -> None:
    # Entries sharing a list are not searched again once one failed: same pairing, exactly.
    rng = random.Random(9)
    for _ in range(300):
        calls = rng.randint(0, 6)
        lists = [sorted(rng.sample(range(calls), rng.randint(0, calls))) for _ in range(3)]
        shared = [rng.choice(lists) for _ in range(rng.randint(0, 9))]
        copies = [list(c) for c in shared]
        assert max_matching(shared) == max_matching(copies)
        if len(copies) <= 5:
            assert sum(p is not None for p in max_matching(shared)) == brute_force_matching(
                copies)


class CountingList(list[int]):
    iterations = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        CountingList.iterations += 1
        return super().__iter__()


def test_max_matching_searches_once_for_duplicates_beyond_the_calls() -> None:
    CountingList.iterations = 0
    reads = CountingList(range(10))
    paired = max_matching([reads] * 200)
    assert paired[:10] == list(range(10)) and paired[10:] == [None] * 190
    # 10 direct pairs, then one failed search (one pass per entry it reaches); without the
    # skip, each of the 190 duplicates would walk all ten paired entries again (about 2,000).
    assert CountingList.iterations < 30

def test_type_ids_and_evaluator_names() -> None:
    for type_, body, family in [
        ("ToolCallCountEvaluator", {"tool_calls_count": {"a": ["==", 1]}}, "tool-call-count"),
        ("uipath-tool-call-count", {"tool_calls_count": {"a": ["==", 1]}}, "tool-call-count"),
        ("tool_call_args", {"tool_calls": [{"name": "a", "args": {}}]}, "tool-call-args"),
        ("ToolCallOutputEvaluator", {"tool_outputs": [{"name": "a", "output": "o"}]},
         "tool-call-output"),
    ]:
        r = grade({"graders": [{"type": type_, **body}]}, [call("a", {}, "o")])
        assert (r.type, r.score) == (family, 1.0)


def test_schemas_accept_both_shapes_and_agree_with_load_config() -> None:
    cases = {
        "tool-call-count": {"tool_calls_count": {"a": ["==", 0]}},
        "tool-call-args": {"tool_calls": [{"name": "a", "args": {"x": 1}}]},
        "tool-call-output": {"tool_outputs": [{"name": "a", "output": "o"}]},
    }
    for type_, criteria in cases.items():
        schema = REGISTRY[type_].schema
        assert schema is not None
        document = schema()
        empty = {key: type(value)() for key, value in criteria.items()}
        good = [{"type": type_, "strict": True, **criteria},
                {"type": type_, "config": {"strict": True}, "evaluation_criteria": criteria}]
        bad = [{"type": type_, **criteria, "bogus": 1}, {"type": type_, **empty},
               {"type": type_, "config": {"strict": True}}]
        assert_schema_agrees(document, good, bad)
    count_schema = REGISTRY["tool-call-count"].schema
    assert count_schema is not None
    assert_schema_agrees(count_schema(), [{"type": "tool-call-count",
                                           "tool_calls_count": {"*": ["<=", 3], "a": ["<", 1]}}],
                         [{"type": "tool-call-count", "tool_calls_count": {"get_*": ["<=", 3]}}])
    args_schema = REGISTRY["tool-call-args"].schema
    assert args_schema is not None
    jsonschema.validate({"type": "tool-call-args", "subset": True, "config": {"subset": True},
                         **cases["tool-call-args"]}, args_schema())


# -- load-time errors ---------------------------------------------------------------------------

def nested(type_: str, config: dict[str, Any], criteria: dict[str, Any]) -> dict[str, Any]:
    return {"graders": [{"type": type_, "config": config, "evaluation_criteria": criteria}]}


@pytest.mark.parametrize(("config", "where", "words"), [
    (count({}), "graders[0].tool_calls_count", "must not be empty"),
    (nested("tool-call-count", {}, {"tool_calls_count": {}}),
     "graders[0].evaluation_criteria.tool_calls_count", "must not be empty"),
    (count({"a": ["=<", 1]}), "graders[0].tool_calls_count.a[0]", "Input should be '>'"),
    (count({"a": ["==", -1]}), "graders[0].tool_calls_count.a[1]", "greater than or equal to 0"),
    (count({"a": ["==", "1"]}), "graders[0].tool_calls_count.a[1]", "valid integer"),
    (count({"a": ["==", True]}), "graders[0].tool_calls_count.a[1]", "valid integer"),
    (count({"a": ["==", 1, 2]}), "graders[0].tool_calls_count.a", "at most 2 items"),
    (count({"a": "==1"}), "graders[0].tool_calls_count.a", "valid tuple"),
    (count({"a": ["==", 1]}, strict="no"), "graders[0].strict", "valid boolean"),
    (count({"a": ["==", 1]}, subset=True), "graders[0].subset", "unknown key"),
    ({"graders": [{"type": "tool-call-count"}]}, "graders[0].tool_calls_count",
     "required key is missing"),
    (args([]), "graders[0].tool_calls", "must not be empty"),
    (args([{"name": "a"}]), "graders[0].tool_calls[0].args", "required key is missing"),
    (args([{"args": {}}]), "graders[0].tool_calls[0].name", "required key is missing"),
    (args([{"name": "a", "args": [1]}]), "graders[0].tool_calls[0].args", "valid dictionary"),
    (args([{"name": "a", "args": {}, "result": "x"}]), "graders[0].tool_calls[0].result",
     "unknown key"),
    (args([{"name": "a", "args": {}}], subset="yes"), "graders[0].subset", "valid boolean"),
    (nested("tool-call-args", {"subset": 1}, {"tool_calls": [{"name": "a", "args": {}}]}),
     "graders[0].config.subset", "valid boolean"),
    ({"graders": [{"type": "tool-call-args", "subset": True,
                   "config": {"subset": False},
                   "evaluation_criteria": {"tool_calls": [{"name": "a", "args": {}}]}}]},
     "graders[0].subset", "given twice"),
    (args([{"name": "a", "args": {}}], tool_outputs=[]), "graders[0].tool_outputs",
     "belongs to tool-call-output"),
    (outputs([]), "graders[0].tool_outputs", "must not be empty"),
    (outputs([{"name": "a", "output": {"x": 1}}]), "graders[0].tool_outputs[0].output",
     "valid string"),
    (outputs([{"name": "a"}]), "graders[0].tool_outputs[0].output", "required key is missing"),
    (outputs([{"name": "", "output": "x"}]), "graders[0].tool_outputs[0].name",
     "at least 1 character"),
    (outputs([{"name": "a", "output": "x"}], threshold=-0.1), "graders[0].threshold",
     "greater than or equal to 0"),
    (nested("tool-call-output", {"name": "n"}, {}),
     "graders[0].evaluation_criteria.tool_outputs", "required key is missing"),
    ({"graders": [{"type": "tool-call-output", "config": {"strict": True}}]},
     "graders[0].evaluation_criteria", "required key is missing"),
    ({"graders": [{"type": "tool-call-output", "toolOutputs": []}]},
     "graders[0].toolOutputs", "write tool_outputs"),
])
def test_load_time_errors_name_the_field(config: object, where: str, words: str) -> None:
    assert_config_error(config, where, words)


# -- the reference page ----------------------------------------------------------------------------

DOC = Path(__file__).resolve().parents[1] / "docs/graders/tool_call_evaluators.md"


def doc_yaml_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)


def test_every_yaml_example_of_the_reference_page_loads() -> None:
    blocks = doc_yaml_blocks()
    assert len(blocks) == 2
    for block in blocks:
        assert load_config(block).graders


def test_the_flat_example_passes_on_the_run_it_describes() -> None:
    calls = [call("validate_user", {"user": "u"}),
             call("check_inventory", {"sku": "A-17"}, {"content": "in stock"}),
             call("create_order", {"sku": "A-17", "quantity": 2, "note": "gift"},
                  {"order_id": "o-1", "status": "created"})]
    cfg = load_config(doc_yaml_blocks()[0])
    report = grade_run(run_of(calls, cfg.policy), cfg)
    assert report is not None
    assert [(r.name, r.score, r.passed) for r in report.results] == [
        ("checkout-order", 1.0, True), ("checkout-counts", 1.0, True),
        ("checkout-args", 1.0, True), ("checkout-output", 1.0, True)]


def test_arguments_given_as_another_mapping_are_compared_as_objects() -> None:
    from types import MappingProxyType

    from otel_tooleval.model import AgentRun

    calls = (ToolCall("t", 0, raw_arguments=MappingProxyType({"a": 1, "b": "x"})),
             ToolCall("t", 1, raw_arguments=("a", 1)))
    run = AgentRun(1, 1, "agent", calls)
    for subset, args in ((True, {"a": 1}), (False, {"a": 1, "b": "x"})):
        config = load_config({"graders": [{"type": "tool-call-args", "subset": subset,
                                           "tool_calls": [{"name": "t", "args": args}] * 2}]})
        report = grade_run(run, config)
        assert report is not None
        (result,) = report.results
        assert [e["matching_calls"] for e in result.details["expected"]] == [[0], [0]]
        assert result.score == 0.5


@pytest.mark.parametrize(("counts", "text"), [
    ({"a": [">=", 1]}, "The count check holds."),
    ({"a": [">=", 1], "b": ["==", 0]}, "All 2 count checks hold."),
])
def test_holding_count_checks_explained_word_for_word(counts: dict[str, Any], text: str) -> None:
    r = grade({"graders": [{"type": "tool-call-count", "tool_calls_count": counts}]}, [call("a")])
    assert (r.passed, r.explanation) == (True, text)
