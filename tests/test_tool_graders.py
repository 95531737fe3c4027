"""The ``tool`` grader family: every example of seeds/tool-graders.txt, SEMANTICS 3 "tool
graders", the extractors, custom graders and plugins, and the letta-evals flaws we avoid."""

from __future__ import annotations

import json
import logging
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import otel_tooleval.graders.tool_graders  # noqa: F401  (registers the family)
from otel_tooleval import ConfigError, GradeResult, load_config
from otel_tooleval.graders import custom
from otel_tooleval.graders.custom import grader
from otel_tooleval.graders.registry import ConfigProblems
from otel_tooleval.graders.tool_graders import _schema, build_in_context, build_tool_grader
from otel_tooleval.model import AgentRun
from tests.support.runs import call, grade, run_of

GT = "tooleval.ground_truth"


def tool(**entry: Any) -> dict[str, Any]:
    return {"graders": [{"kind": "tool", **entry}]}


def truth(value: Any) -> dict[str, Any]:
    return {"root_attrs": {GT: value}}


def said(*texts: str) -> dict[str, Any]:
    return {"outputs": list(texts)}


def verdict(r: GradeResult) -> tuple[float, bool, str]:
    return (r.score, r.passed, r.label)


PASS = (1.0, True, "pass")
FAIL = (0.0, False, "fail")


# -- the page's examples -------------------------------------------------------------------------

def test_page_basic_shape_in_yaml() -> None:
    config = textwrap.dedent("""
        graders:
          - name: my_metric
            kind: tool
            function: exact_match # Function name
            extractor: last_assistant # What to extract from trajectory
    """)
    (entry,) = load_config(config).graders
    assert (entry.name, entry.type) == ("my_metric", "tool")
    r = grade(config, [], **said("4"), **truth("4"))
    assert verdict(r) == PASS and r.name == "my_metric"


@pytest.mark.parametrize(("submission", "expected"), [
    ("4", PASS), ("four", FAIL), ("  4\n", PASS), ("4.", FAIL),
])
def test_page_exact_match_what_is_2_plus_2(submission: str, expected: tuple[Any, ...]) -> None:
    config = tool(name="accuracy", function="exact_match", extractor="last_assistant")
    r = grade(config, [], **said(submission), **truth("4"))
    assert verdict(r) == expected
    assert r.details["matched"] is (expected == PASS)
    assert r.details["ground_truth_from"] == "attribute"


def test_exact_match_is_case_sensitive_and_trims_both_sides() -> None:
    config = tool(function="exact_match")
    assert verdict(grade(config, [], **said("paris"), **truth("Paris"))) == FAIL
    assert verdict(grade(config, [], **said("Paris "), **truth(" Paris\n"))) == PASS


@pytest.mark.parametrize(("submission", "expected"), [
    ("The capital is Paris", PASS), ("The capital is paris", PASS), ("The capital is Lyon", FAIL),
])
def test_page_contains_capital_of_france(submission: str, expected: tuple[Any, ...]) -> None:
    config = tool(name="keyword_check", function="contains", extractor="last_assistant")
    assert verdict(grade(config, [], **said(submission), **truth("Paris"))) == expected


UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


@pytest.mark.parametrize(("pattern", "submission", "expected"), [
    (UUID, "550e8400-e29b-41d4-a716-446655440000", PASS),
    (UUID, "not-a-uuid", FAIL),
    ("\\d+", "The number is 42.", PASS),
    ("\\d+", "no number here", FAIL),
])
def test_page_regex_match(pattern: str, submission: str, expected: tuple[Any, ...]) -> None:
    config = tool(name="pattern_check", function="regex_match", extractor="last_assistant")
    assert verdict(grade(config, [], **said(submission), **truth(pattern))) == expected


def test_regex_match_searches_unanchored() -> None:
    config = tool(function="regex_match", ground_truth="b+c")
    assert verdict(grade(config, [], **said("aaabbbcdd"))) == PASS


@pytest.mark.parametrize(("submission", "expected"), [
    ("Hello, World!\n", PASS), ("Hello 🌍", FAIL), ("line one\r\nline two", PASS),
    ("tab\there", FAIL), ("caf\u00e9", FAIL), ("~ and space", PASS),
])
def test_page_ascii_printable_only(submission: str, expected: tuple[Any, ...]) -> None:
    config = tool(name="ascii_check", function="ascii_printable_only", extractor="last_assistant")
    r = grade(config, [], **said(submission))     # no ground truth needed
    assert verdict(r) == expected


def test_ascii_explanation_counts_and_locates_without_the_characters() -> None:
    r = grade(tool(function="ascii_printable_only"), [], **said("Hello 🌍 and 🌍"))
    assert r.details["non_printable"] == 2 and r.details["offsets"] == [6, 12]
    assert "2 character(s) outside printable ASCII (first at offset 6)" in r.explanation
    assert "🌍" not in r.explanation


@grader
def my_custom_grader(run: AgentRun, submission: str | None) -> GradeResult:
    """The page's custom grader, with our signature: the run instead of letta's Sample."""
    ok = submission is not None and "done" in submission
    return GradeResult("", "", 1.0 if ok else 0.0, ok, "pass" if ok else "fail",
                       "Explanation of the score", {"extra": "info"})


def test_page_custom_grader_referenced_by_its_registered_name() -> None:
    config = tool(name="custom", function="my_custom_grader", extractor="last_assistant")
    r = grade(config, [], **said("all done"))
    assert verdict(r) == PASS
    assert (r.name, r.type, r.explanation) == ("custom", "tool", "Explanation of the score")
    assert r.details["extra"] == "info" and r.details["function"] == "my_custom_grader"
    assert verdict(grade(config, [], **said("not yet"))) == FAIL


def test_page_common_patterns_correct_answer_and_mentions_topic() -> None:
    exact = tool(name="correct_answer", function="exact_match", extractor="last_assistant")
    assert verdict(grade(exact, [], **said("42"), **truth("42"))) == PASS
    topic = tool(name="mentions_topic", function="contains", extractor="last_assistant")
    assert verdict(grade(topic, [], **said("Pandas are bears"), **truth("pandas"))) == PASS


def test_page_valid_email_from_the_dataset() -> None:
    config = tool(name="valid_email", function="regex_match", extractor="last_assistant")
    email = "[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}"
    assert verdict(grade(config, [], **said("Write to ana@example.org"), **truth(email))) == PASS
    assert verdict(grade(config, [], **said("Write to ana at example"), **truth(email))) == FAIL


def test_page_used_search_checks_the_search_arguments() -> None:
    config = tool(name="used_search", function="contains", extractor="tool_arguments",
                  extractor_config={"tool_name": "search"})
    r = grade(config, [call("search", {"query": "pandas diet"}, "...")], **truth("pandas"))
    assert verdict(r) == PASS
    assert r.details["calls"] == [0]
    assert "arguments of call #0 (search)" in r.explanation
    r = grade(config, [call("search", {"query": "koalas"}, "...")], **truth("pandas"))
    assert verdict(r) == FAIL


@grader
def valid_json_with_field(run: AgentRun, submission: str | None,
                          ground_truth: str | None) -> GradeResult:
    """The page's JSON custom grader; the ground truth arrives as a third parameter."""
    try:
        data = json.loads(submission or "")
    except json.JSONDecodeError:
        return GradeResult("", "", 0.0, False, "fail", "Invalid JSON")
    if ground_truth in data:
        return GradeResult("", "", 1.0, True, "pass", "Valid JSON with the required field")
    return GradeResult("", "", 0.0, False, "fail", "Missing the required field")


def test_page_custom_valid_json_with_field() -> None:
    config = tool(function="valid_json_with_field")
    r = grade(config, [], **said('{"name": "Ada", "age": 36}'), **truth("age"))
    assert verdict(r) == PASS and r.explanation == "Valid JSON with the required field"
    r = grade(config, [], **said('{"name": "Ada"}'), **truth("age"))
    assert verdict(r) == FAIL and r.explanation == "Missing the required field"
    assert verdict(grade(config, [], **said("not json"), **truth("age"))) == FAIL


def test_page_correct_tool_compares_calculator_arguments() -> None:
    config = tool(name="correct_tool", function="exact_match", extractor="tool_arguments",
                  extractor_config={"tool_name": "calculator"})
    run = [call("calculator", {"a": 2, "op": "+", "b": 2}, "4")]
    assert verdict(grade(config, run, **truth('{"a":2,"op":"+","b":2}'))) == PASS
    assert verdict(grade(config, run, **truth('{"a":2,"op":"*","b":2}'))) == FAIL


def test_page_memory_block_is_refused_and_points_to_span_attribute() -> None:
    config = tool(name="memory_correct", function="contains", extractor="memory_block",
                  extractor_config={"block_label": "human"})
    with pytest.raises(ConfigError) as info:
        load_config(config)
    message = str(info.value)
    assert "graders[0].extractor: unknown extractor 'memory_block'" in message
    assert "span_attribute" in message
    # What to do instead: record the block on the root span and read it from there.
    fixed = tool(name="memory_correct", function="contains", extractor="span_attribute",
                 extractor_config={"attribute": "letta.memory.human"})
    r = grade(fixed, [], root_attrs={"letta.memory.human": "Name: Ada. Likes tea.", GT: "ada"})
    assert verdict(r) == PASS


def test_page_extracted_correctly_with_a_pattern_group() -> None:
    config = tool(name="extracted_correctly", function="exact_match", extractor="pattern",
                  extractor_config={"pattern": "ANSWER: (.*)", "group": 1})
    r = grade(config, [], **said("Let me think.\nANSWER: 42"), **truth("42"))
    assert verdict(r) == PASS
    assert verdict(grade(config, [], **said("ANSWER: 41"), **truth("42"))) == FAIL


# -- ground truth -------------------------------------------------------------------------------

def test_run_attribute_wins_over_the_static_ground_truth() -> None:
    config = tool(function="exact_match", ground_truth="Paris")
    r = grade(config, [], **said("Lyon"), **truth("Lyon"))
    assert verdict(r) == PASS and r.details["ground_truth_from"] == "attribute"
    assert "from run attribute 'tooleval.ground_truth'" in r.explanation
    r = grade(config, [], **said("Paris"))
    assert verdict(r) == PASS and r.details["ground_truth_from"] == "config"
    assert "from the config" in r.explanation


def test_ground_truth_attribute_name_is_configurable() -> None:
    config = tool(function="exact_match", ground_truth_attribute="dataset.expected")
    r = grade(config, [], **said("4"), root_attrs={"dataset.expected": "4", GT: "5"})
    assert verdict(r) == PASS
    assert r.details["ground_truth_attribute"] == "dataset.expected"


def test_the_entry_key_wins_over_the_config_wide_attribute_name() -> None:
    # build_tool_grader takes the config-wide runs.ground_truth_attribute once config.py
    # passes it; the entry's own key wins over it.
    wide = build_tool_grader({"function": "exact_match"}, "g", False, "wide.attr")
    assert wide.ground_truth_attribute == "wide.attr"
    own = build_tool_grader({"function": "exact_match", "ground_truth_attribute": "own.attr"},
                            "g", False, "wide.attr")
    assert own.ground_truth_attribute == "own.attr"
    run = run_of([], outputs=["4"], root_attrs={"own.attr": "4", "wide.attr": "5"})
    assert verdict(own.grade(run)) == PASS and verdict(wide.grade(run)) == FAIL


def test_non_string_attribute_is_read_as_text() -> None:
    config = tool(function="exact_match")
    assert verdict(grade(config, [], **said("4"), **truth(4))) == PASS
    assert verdict(grade(config, [], **said("true"), **truth(True))) == PASS
    assert verdict(grade(config, [], **said('["a","b"]'), **truth(("a", "b")))) == PASS


def test_blank_attribute_falls_back_to_the_static_value() -> None:
    config = tool(function="contains", ground_truth="Paris")
    assert verdict(grade(config, [], **said("Paris"), **truth("  "))) == PASS
    assert verdict(grade(config, [], **said("Lyon"), **truth(""))) == FAIL


def test_missing_ground_truth_is_an_error_checked_before_the_submission() -> None:
    config = tool(function="contains")
    for kwargs in ({}, said("Paris")):      # an empty run as well: the error still wins
        r = grade(config, [], **kwargs)
        assert (r.score, r.passed, r.label, r.error) == (0.0, False, "error",
                                                         "ConfigurationError")
        assert "No ground truth for this run" in r.explanation
        assert "'tooleval.ground_truth'" in r.explanation


def test_invalid_regex_from_the_run_fails_with_an_explanation() -> None:
    config = tool(function="regex_match", ground_truth="fine")
    r = grade(config, [], **said("anything (["), **truth("(["))
    assert verdict(r) == FAIL and r.error is None
    assert "not a valid regular expression" in r.explanation
    assert "'tooleval.ground_truth'" in r.explanation
    assert r.details["invalid_pattern"] is True


def test_static_regex_is_compiled_once_at_load() -> None:
    grader_ = load_config(tool(function="regex_match", ground_truth="^a+$")).graders[0].grader
    assert grader_.static_pattern is not None  # type: ignore[attr-defined]
    assert grader_.static_pattern.pattern == "^a+$"  # type: ignore[attr-defined]


# -- extractors ---------------------------------------------------------------------------------

def test_last_assistant_is_the_final_output_of_the_run() -> None:
    config = tool(function="exact_match", ground_truth="final")
    assert verdict(grade(config, [], **said("first", "final"))) == PASS
    # The root span's own output wins (SEMANTICS 1).
    r = grade(config, [], root_attrs={"output.value": "final"}, **said("first", "other"))
    assert verdict(r) == PASS


def test_first_assistant() -> None:
    config = tool(function="exact_match", extractor="first_assistant", ground_truth="first")
    assert verdict(grade(config, [], **said("first", "second"))) == PASS
    # With no model text, the final output is the only assistant text.
    assert verdict(grade(config, [], root_attrs={"final_result": "first"})) == PASS


def test_all_assistant_with_default_and_custom_separator() -> None:
    config = tool(function="exact_match", extractor="all_assistant", ground_truth="a\nb\nc")
    assert verdict(grade(config, [], **said("a", "b", "c"))) == PASS
    config = tool(function="exact_match", extractor="all_assistant", ground_truth="a | b",
                  extractor_config={"separator": " | "})
    r = grade(config, [], **said("a", "b"))
    assert verdict(r) == PASS and r.details["source"] == "all 2 assistant texts"


def test_all_assistant_ends_with_a_final_output_that_no_model_call_said() -> None:
    config = tool(function="exact_match", extractor="all_assistant", ground_truth="a\nDONE")
    assert verdict(grade(config, [], root_attrs={"final_result": "DONE"}, **said("a"))) == PASS
    # ... but not twice when it is the last model text.
    assert verdict(grade(config, [], root_attrs={"final_result": "DONE"},
                         **said("a", "DONE"))) == PASS


def test_after_marker_takes_the_last_text_holding_it_trimmed() -> None:
    config = tool(function="exact_match", extractor="after_marker",
                  extractor_config={"marker": "Final:"}, ground_truth="42")
    r = grade(config, [], **said("Final: 7", "Final:  42 \n", "thanks, bye"))
    assert verdict(r) == PASS and "assistant text 2 of 3" in r.details["source"]
    # The first occurrence in that text counts; the marker is a literal string.
    assert verdict(grade(config, [], **said("Final: 42 Final: 9"))) == FAIL
    trimmed = tool(function="regex_match", extractor="after_marker",
                   extractor_config={"marker": "Final:"}, ground_truth="^42$")
    assert verdict(grade(trimmed, [], **said("Final:  42 \n"))) == PASS
    literal = tool(function="exact_match", extractor="after_marker",
                   extractor_config={"marker": "a.c"}, ground_truth="x")
    assert verdict(grade(literal, [], **said("abc x"))) == FAIL
    assert verdict(grade(literal, [], **said("a.c x"))) == PASS


def test_after_marker_reads_the_final_output_as_the_last_text() -> None:
    config = tool(function="exact_match", extractor="after_marker",
                  extractor_config={"marker": "ANSWER:"}, ground_truth="yes")
    assert verdict(grade(config, [], root_attrs={"final_result": "ANSWER: yes"},
                         **said("ANSWER: no"))) == PASS


def test_after_marker_absent_extracts_nothing() -> None:
    config = tool(function="contains", extractor="after_marker",
                  extractor_config={"marker": "ANSWER:"}, ground_truth="x")
    r = grade(config, [], **said("no marker"))
    assert verdict(r) == FAIL and "holds the marker" in r.explanation
    assert r.details["submission_chars"] is None


def test_tool_arguments_occurrence_first_last_all() -> None:
    calls = [call("search", {"q": "one"}), call("other", {"q": "x"}),
             call("search", {"q": "two", "n": 2})]

    def with_(occurrence: str, expected: str) -> GradeResult:
        cfg = tool(function="exact_match", extractor="tool_arguments", ground_truth=expected,
                   extractor_config={"tool_name": "search", "occurrence": occurrence})
        return grade(cfg, calls)

    first = with_("first", '{"q":"one"}')
    assert verdict(first) == PASS and first.details["calls"] == [0]
    last = with_("last", '{"q":"two","n":2}')
    assert verdict(last) == PASS and last.details["calls"] == [2]
    every = with_("all", '[{"q":"one"},{"q":"two","n":2}]')
    assert verdict(every) == PASS and every.details["calls"] == [0, 2]
    assert "all 2 search calls" in every.explanation
    compact = tool(function="regex_match", extractor="tool_arguments",
                   ground_truth='^\\[\\{"q":"one"\\},\\{"q":"two","n":2\\}\\]$',
                   extractor_config={"tool_name": "search", "occurrence": "all"})
    assert verdict(grade(compact, calls)) == PASS


def test_tool_arguments_are_compact_json_for_contains_and_regex() -> None:
    cfg = tool(function="regex_match", extractor="tool_arguments",
               extractor_config={"tool_name": "search"}, ground_truth='^\\{"q":"a b","n":1\\}$')
    assert verdict(grade(cfg, [call("search", '{ "q" : "a b",  "n" : 1 }')])) == PASS


def test_tool_arguments_counts_pending_calls() -> None:
    cfg = tool(function="contains", extractor="tool_arguments",
               extractor_config={"tool_name": "deploy"}, ground_truth="prod")
    assert verdict(grade(cfg, [call("deploy", {"env": "prod"}, pending=True)])) == PASS


def test_tool_arguments_match_the_name_exactly() -> None:
    cfg = tool(function="contains", extractor="tool_arguments",
               extractor_config={"tool_name": "search"}, ground_truth="x")
    r = grade(cfg, [call("web_search", {"q": "x"}), call("Search", {"q": "x"})])
    assert verdict(r) == FAIL and r.explanation == "Nothing to grade: search was never called."


def test_tool_output_first_last_all_and_pending_excluded() -> None:
    calls = [call("fetch", {}, "alpha"), call("fetch", {}, {"ok": True}),
             call("fetch", {}, pending=True)]

    def with_(occurrence: str, expected: str) -> GradeResult:
        cfg = tool(function="exact_match", extractor="tool_output", ground_truth=expected,
                   extractor_config={"tool_name": "fetch", "occurrence": occurrence})
        return grade(cfg, calls)

    assert verdict(with_("first", "alpha")) == PASS
    last = with_("last", '{"ok":true}')      # the last completed call; compact JSON
    assert verdict(last) == PASS and last.details["calls"] == [1]
    every = with_("all", 'alpha\n{"ok":true}')
    assert verdict(every) == PASS and every.details["calls"] == [0, 1]


def test_tool_output_of_only_pending_calls_is_nothing() -> None:
    cfg = tool(function="contains", extractor="tool_output",
               extractor_config={"tool_name": "fetch"}, ground_truth="a")
    r = grade(cfg, [call("fetch", {}, pending=True)])
    assert verdict(r) == FAIL
    assert "no fetch call completed (1 still pending)" in r.explanation


def test_tool_output_error_status_is_the_result() -> None:
    cfg = tool(function="contains", extractor="tool_output",
               extractor_config={"tool_name": "fetch"}, ground_truth="timed out")
    assert verdict(grade(cfg, [call("fetch", {}, error="Timed out after 5 s")])) == PASS


def test_pattern_searches_from_the_last_text_backwards() -> None:
    cfg = tool(function="exact_match", extractor="pattern", ground_truth="B",
               extractor_config={"pattern": "grade=(?P<g>[A-F])", "group": "g"})
    r = grade(cfg, [], **said("grade=A", "grade=B", "no grade"))
    assert verdict(r) == PASS and "assistant text 2 of 3" in r.details["source"]


def test_pattern_default_group_is_the_whole_match() -> None:
    cfg = tool(function="exact_match", extractor="pattern", ground_truth="id-42",
               extractor_config={"pattern": "id-\\d+"})
    assert verdict(grade(cfg, [], **said("the id-42 record"))) == PASS


def test_pattern_group_that_took_no_part_extracts_nothing() -> None:
    cfg = tool(function="contains", extractor="pattern", ground_truth="x",
               extractor_config={"pattern": "a(x)?", "group": 1})
    r = grade(cfg, [], **said("a"))
    assert verdict(r) == FAIL and "took no part" in r.explanation


@pytest.mark.parametrize(("value", "expected"), [
    ("plain text", "plain text"), (True, "true"), (["a", "b"], '["a","b"]'), (3, "3"),
    ('{"k": 1}', '{"k": 1}'),
])
def test_span_attribute_as_text(value: Any, expected: str) -> None:
    cfg = tool(function="exact_match", extractor="span_attribute",
               extractor_config={"attribute": "app.answer"}, ground_truth=expected)
    assert verdict(grade(cfg, [], root_attrs={"app.answer": value})) == PASS


def test_span_attribute_absent_extracts_nothing() -> None:
    cfg = tool(function="ascii_printable_only", extractor="span_attribute",
               extractor_config={"attribute": "app.answer"})
    r = grade(cfg, [])
    assert verdict(r) == FAIL
    assert r.explanation == "Nothing to grade: the root span has no root-span attribute 'app.answer'."


def test_empty_submission_scores_zero_even_for_ascii() -> None:
    cfg = tool(function="ascii_printable_only", extractor="after_marker",
               extractor_config={"marker": "OUT:"})
    r = grade(cfg, [], **said("OUT:   "))
    assert verdict(r) == FAIL and "is empty; an empty submission scores 0" in r.explanation
    r = grade(tool(function="ascii_printable_only"), [], **said("  \n "))
    assert verdict(r) == FAIL and r.details["submission_chars"] == 4


# -- the letta-evals flaws we do not reproduce (seeds/README.md) ------------------------------

def test_flaw_never_called_tool_is_not_an_empty_object() -> None:
    # letta-evals extracts "{}" for a tool that was never called, so ground truth {} passes.
    cfg = tool(function="exact_match", extractor="tool_arguments",
               extractor_config={"tool_name": "search"}, ground_truth="{}")
    r = grade(cfg, [call("other", {})])
    assert verdict(r) == FAIL and r.details["submission_chars"] is None
    # A call that really had empty arguments still passes.
    assert verdict(grade(cfg, [call("search", {})])) == PASS


def test_flaw_not_only_the_first_call_of_a_tool_is_graded() -> None:
    # letta-evals only ever grades the first call of a tool.
    calls = [call("search", {"q": "draft"}), call("search", {"q": "final"})]
    last = tool(function="contains", extractor="tool_arguments", ground_truth="final",
                extractor_config={"tool_name": "search", "occurrence": "last"})
    assert verdict(grade(last, calls)) == PASS
    every = tool(function="contains", extractor="tool_arguments", ground_truth="final",
                 extractor_config={"tool_name": "search", "occurrence": "all"})
    assert verdict(grade(every, calls)) == PASS


def test_flaw_argument_json_is_compared_as_values_not_raw_text() -> None:
    # letta-evals compares the raw argument text, so key order and spaces decide the verdict.
    cfg = tool(function="exact_match", extractor="tool_arguments",
               extractor_config={"tool_name": "calc"}, ground_truth='{"b": 2, "a": 1.0}')
    r = grade(cfg, [call("calc", '{"a":1,  "b":2}')])
    assert verdict(r) == PASS and r.details["compared"] == "json"
    # Still no type coercion.
    assert verdict(grade(cfg, [call("calc", '{"a":"1","b":2}')])) == FAIL
    assert verdict(grade(cfg, [call("calc", '{"a":true,"b":2}')])) == FAIL


def test_json_comparison_only_for_json_ground_truths() -> None:
    cfg = tool(function="exact_match", extractor="tool_arguments",
               extractor_config={"tool_name": "run"}, ground_truth="ls -la")
    r = grade(cfg, [call("run", "ls -la")])     # text arguments stay text
    assert verdict(r) == PASS and r.details["compared"] == "text"


def test_output_texts_are_compared_as_text_even_when_json() -> None:
    cfg = tool(function="exact_match", extractor="last_assistant", ground_truth='{"a": 1}')
    assert verdict(grade(cfg, [], **said('{"a":1}'))) == FAIL


# -- values stay out of explanations unless asked ---------------------------------------------

def test_explanations_carry_no_values_by_default() -> None:
    secret = "hunter2-SECRET"
    cfg = tool(function="contains", extractor="tool_arguments",
               extractor_config={"tool_name": "login"})
    r = grade(cfg, [call("login", {"password": secret})], **truth(secret))
    assert verdict(r) == PASS
    assert secret not in r.explanation and secret not in repr(r.details)


def test_include_values_shows_submission_and_ground_truth() -> None:
    cfg = tool(function="exact_match")
    cfg["emit"] = {"include_values": True}
    r = grade(cfg, [], **said("Lyon"), **truth("Paris"))
    assert verdict(r) == FAIL
    assert "Submission: 'Lyon'; ground truth: 'Paris'." in r.explanation
    assert (r.details["submission"], r.details["ground_truth"]) == ("Lyon", "Paris")


# -- custom graders -----------------------------------------------------------------------------

@grader(name="tg_scored_half")
def _half(run: AgentRun, submission: str | None) -> float:
    return 0.5


@grader
def tg_is_long(run: AgentRun, submission: str | None) -> bool:
    return submission is not None and len(submission) > 5


@grader
def tg_sees_everything(run: AgentRun, submission: str | None, ground_truth: str | None = None,
                       ) -> GradeResult:
    details = {"submission_is_none": submission is None, "ground_truth": ground_truth,
               "calls": len(run.calls)}
    return GradeResult("x", "y", 0.25, True, "pass", "Looked at everything.", details)


def test_custom_float_uses_the_threshold() -> None:
    r = grade(tool(function="tg_scored_half"), [], **said("x"))
    assert verdict(r) == (0.5, False, "fail") and "scored 0.5" in r.explanation
    r = grade(tool(function="tg_scored_half", threshold=0.5), [], **said("x"))
    assert verdict(r) == (0.5, True, "pass")


def test_custom_bool() -> None:
    assert verdict(grade(tool(function="tg_is_long"), [], **said("long enough"))) == PASS
    assert verdict(grade(tool(function="tg_is_long"), [], **said("short"))) == FAIL


def test_custom_receives_ground_truth_as_is_and_nothing_when_nothing_extracted() -> None:
    cfg = tool(function="tg_sees_everything", extractor="tool_output",
               extractor_config={"tool_name": "never"})
    r = grade(cfg, [call("a", {})])     # no ground truth anywhere: no error for custom graders
    assert r.label != "error"
    assert r.details["submission_is_none"] is True and r.details["ground_truth"] is None
    r = grade(cfg, [call("a", {})], **truth("gt"))
    assert r.details["ground_truth"] == "gt" and r.details["calls"] == 1


def test_custom_grade_result_is_renamed_and_passed_follows_the_threshold() -> None:
    r = grade(tool(name="mine", function="tg_sees_everything"), [])
    # The returned name/type are replaced; passed is score >= threshold for every return type.
    assert (r.name, r.type) == ("mine", "tool")
    assert verdict(r) == (0.25, False, "fail")
    r = grade(tool(name="mine", function="tg_sees_everything", threshold=0.25), [])
    assert verdict(r) == (0.25, True, "pass")


@grader
def tg_raises(run: AgentRun, submission: str | None) -> float:
    raise RuntimeError("boom with secret-123")


@grader
def tg_out_of_range(run: AgentRun, submission: str | None) -> float:
    return 1.5


@grader
def tg_wrong_type(run: AgentRun, submission: str | None) -> Any:
    return "yes"


@grader
def tg_returns_error(run: AgentRun, submission: str | None) -> GradeResult:
    return GradeResult.failure("a", "b", "Upstream", "The checker was unavailable.")


@pytest.mark.parametrize(("function", "error", "words"), [
    ("tg_raises", "RuntimeError", "Custom grader 'tg_raises' raised RuntimeError."),
    ("tg_out_of_range", "InvalidGraderResult",
     "Custom grader 'tg_out_of_range' returned a score outside [0, 1]; scores must lie in [0, 1]."),
    ("tg_wrong_type", "InvalidGraderResult",
     "Custom grader 'tg_wrong_type' returned str; return a GradeResult, a float in [0, 1] or a bool."),
    ("tg_returns_error", "Upstream", "The checker was unavailable."),
])
def test_custom_failures_are_error_results(function: str, error: str, words: str) -> None:
    """The explanation, word for word: it tells the author of the grader what to fix."""
    r = grade(tool(function=function), [], **said("x"))
    assert (r.score, r.passed, r.label, r.error) == (0.0, False, "error", error)
    assert r.explanation == words


def test_custom_exception_message_shown_only_with_include_values() -> None:
    cfg = tool(function="tg_raises")
    cfg["emit"] = {"include_values": True}
    assert "boom with secret-123" in grade(cfg, [], **said("x")).explanation


def test_other_graders_still_run_when_a_custom_grader_raises() -> None:
    from otel_tooleval.grading import grade_run

    cfg = load_config({"graders": [{"name": "a", "kind": "tool", "function": "tg_raises"},
                                   {"name": "b", "kind": "tool", "function": "tg_is_long"}]})
    report = grade_run(run_of([], outputs=["long enough"]), cfg)
    assert report is not None
    assert [r.label for r in report.results] == ["error", "pass"]


GRADERS_FILE = """
from otel_tooleval.graders.custom import grader

@grader
def starts_with_ok(run, submission):
    return bool(submission) and submission.startswith("OK")

def undecorated(run, submission):
    return 1.0
"""


def test_custom_from_a_file_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "graders").mkdir()
    path = tmp_path / "graders" / "tg_file_graders.py"
    path.write_text(GRADERS_FILE)
    r = grade(tool(function=f"{path}:starts_with_ok"), [], **said("OK, done"))
    assert verdict(r) == PASS
    monkeypatch.chdir(tmp_path)     # relative paths are read from the working directory
    r = grade(tool(function="graders/tg_file_graders.py:starts_with_ok"), [], **said("no"))
    assert verdict(r) == FAIL


def test_relative_custom_file_is_read_from_the_config_directory(tmp_path: Path) -> None:
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "tg_suite_graders.py").write_text(GRADERS_FILE)

    @dataclass(frozen=True)
    class Settings:
        include_values: bool = False
        ground_truth_attribute: str = "suite.expected"
        base_dir: Path | None = tmp_path / "suite"

    built = build_in_context({"function": "tg_suite_graders.py:starts_with_ok"}, "g", Settings())
    assert verdict(built.grade(run_of([], outputs=["OK then"]))) == PASS
    assert built.ground_truth_attribute == "suite.expected"
    with pytest.raises(ConfigProblems, match="does not exist"):
        build_in_context({"function": "tg_suite_graders.py:starts_with_ok"}, "g",
                         Settings(base_dir=tmp_path))


def test_custom_from_a_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tg_custom_mod.py").write_text(GRADERS_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    r = grade(tool(function="tg_custom_mod:starts_with_ok"), [], **said("OK"))
    assert verdict(r) == PASS


@pytest.mark.parametrize(("function", "words"), [
    ("tg_no_such_module_xyz:fn", "cannot import module 'tg_no_such_module_xyz'"),
    ("otel_tooleval.model:no_such_fn", "has no attribute 'no_such_fn'"),
    ("otel_tooleval.model:text_of", "is not decorated with @grader"),
    ("missing/dir/graders.py:fn", "does not exist"),
    ("pkg.mod:", "expected 'package.module:callable' or 'path/to/file.py:callable'"),
    ("no_such_function", "unknown function 'no_such_function'"),
])
def test_unloadable_functions_are_load_time_errors(function: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tool(function=function))
    message = str(info.value)
    assert "graders[0].function: " in message and words in message, message


def test_a_file_that_fails_to_import_is_a_load_time_error(tmp_path: Path) -> None:
    path = tmp_path / "tg_broken_graders.py"
    path.write_text("raise ImportError('needs a package that is not installed')\n")
    with pytest.raises(ConfigError) as info:
        load_config(tool(function=f"{path}:fn"))
    assert "graders[0].function: cannot import" in str(info.value)
    assert "needs a package that is not installed" in str(info.value)


def test_undecorated_file_function_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tg_undecorated.py"
    path.write_text(GRADERS_FILE)
    with pytest.raises(ConfigError, match=r"graders\[0\]\.function: .*not decorated"):
        load_config(tool(function=f"{path}:undecorated"))


def test_builtin_names_cannot_be_shadowed() -> None:
    @grader(name="contains")
    def always(run: AgentRun, submission: str | None) -> bool:
        return True

    r = grade(tool(function="contains", ground_truth="zzz"), [], **said("abc"))
    assert verdict(r) == FAIL


def test_one_name_claimed_by_two_functions_is_refused() -> None:
    @grader(name="tg_twice")
    def one(run: AgentRun, submission: str | None) -> bool:
        return True

    @grader(name="tg_twice")
    def two(run: AgentRun, submission: str | None) -> bool:
        return False

    with pytest.raises(ConfigError, match=r"graders\[0\]\.function: .*registered by several"):
        load_config(tool(function="tg_twice"))


def test_decorator_rejects_signatures_that_cannot_be_graded() -> None:
    with pytest.raises(TypeError, match="must accept \\(run, submission\\)"):
        grader(lambda run: 1.0)
    with pytest.raises(TypeError, match="unexpected required parameter"):
        @grader
        def needs_more(run: AgentRun, submission: str | None, threshold: float) -> float:
            return threshold

    with pytest.raises(TypeError, match="async graders are not supported"):
        @grader
        async def later(run: AgentRun, submission: str | None) -> float:
            return 1.0


def test_decorated_function_still_calls_through() -> None:
    assert tg_is_long(run_of([]), "long enough") is True
    assert tg_is_long.__name__ == "tg_is_long" and not tg_is_long.takes_ground_truth
    assert tg_sees_everything.takes_ground_truth


# -- plugins through the entry-point group ------------------------------------------------------

PLUGIN = """
from otel_tooleval.graders.custom import grader

@grader
def tg_plugin_good(run, submission):
    return submission == "plugged"

def tg_plugin_plain(run, submission):
    return 1.0
"""


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An installed distribution (a real .dist-info on sys.path) declaring three plugins."""
    (tmp_path / "tg_plugin_pkg.py").write_text(PLUGIN)
    info = tmp_path / "tg_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tg-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[otel_tooleval.graders]\n"
        "plugged = tg_plugin_pkg:tg_plugin_good\n"
        "broken = tg_plugin_missing_module_xyz:fn\n"
        "plain = tg_plugin_pkg:tg_plugin_plain\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    custom._forget_plugins()
    yield tmp_path
    custom._forget_plugins()


def test_installed_plugin_is_found_by_its_entry_point_name(plugins: Path) -> None:
    assert verdict(grade(tool(function="plugged"), [], **said("plugged"))) == PASS
    assert sorted(custom.plugin_graders()) == ["plugged"]


def test_broken_plugins_are_logged_once_and_skipped(plugins: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="otel_tooleval.graders.custom")
    for _ in range(3):
        assert verdict(grade(tool(function="plugged"), [], **said("plugged"))) == PASS
    warnings = [r.getMessage() for r in caplog.records]
    assert len([w for w in warnings if "'broken'" in w]) == 1, warnings
    assert len([w for w in warnings if "'plain'" in w and "not decorated" in w]) == 1, warnings
    with pytest.raises(ConfigError) as info:
        load_config(tool(function="broken"))
    assert "graders[0].function: the installed grader plugin 'broken' failed to load" in str(
        info.value)


def test_plugins_are_scanned_only_for_unknown_bare_names(
        plugins: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scans: list[int] = []
    real = custom._load_plugins

    def counting() -> Any:
        scans.append(1)
        return real()

    monkeypatch.setattr(custom, "_load_plugins", counting)
    load_config(tool(function="contains", ground_truth="x"))
    load_config(tool(function="tg_is_long"))
    assert scans == []
    load_config(tool(function="plugged"))
    load_config(tool(function="plugged"))
    assert scans == [1]


# -- load-time errors name the field ------------------------------------------------------------

@pytest.mark.parametrize(("entry", "where", "words"), [
    ({}, "graders[0].function", "required key is missing"),
    ({"function": "exact_match", "extractor": "last_turn"}, "graders[0].extractor",
     "unknown extractor 'last_turn'"),
    ({"function": "exact_match", "extractor": "tool_arguments"},
     "graders[0].extractor_config.tool_name", "required key is missing"),
    ({"function": "exact_match", "extractor": "tool_output",
      "extractor_config": {"tool_name": "t", "occurrence": "second"}},
     "graders[0].extractor_config.occurrence", "'first', 'last' or 'all'"),
    ({"function": "exact_match", "extractor": "tool_arguments",
      "extractor_config": {"tool": "search"}}, "graders[0].extractor_config.tool", "unknown key"),
    ({"function": "exact_match", "extractor_config": {"separator": ","}},
     "graders[0].extractor_config.separator", "unknown key"),
    ({"function": "exact_match", "extractor": "pattern", "extractor_config": {"pattern": "("}},
     "graders[0].extractor_config.pattern", "invalid regular expression"),
    ({"function": "exact_match", "extractor": "pattern",
      "extractor_config": {"pattern": "a(b)", "group": 2}},
     "graders[0].extractor_config.group", "the pattern has 1 group(s)"),
    ({"function": "exact_match", "extractor": "pattern",
      "extractor_config": {"pattern": "a(b)", "group": "name"}},
     "graders[0].extractor_config.group", "no group named 'name'"),
    ({"function": "exact_match", "extractor": "pattern",
      "extractor_config": {"pattern": "a(b)", "group": True}},
     "graders[0].extractor_config.group", "must be a group number or a group name"),
    ({"function": "exact_match", "extractor": "after_marker"},
     "graders[0].extractor_config.marker", "required key is missing"),
    ({"function": "exact_match", "extractor": "after_marker", "extractor_config": {"marker": ""}},
     "graders[0].extractor_config.marker", "at least 1 character"),
    ({"function": "exact_match", "extractor": "span_attribute"},
     "graders[0].extractor_config.attribute", "required key is missing"),
    ({"function": "exact_match", "extractor_config": "tool_name: x"},
     "graders[0].extractor_config", "valid dictionary"),
    ({"function": "regex_match", "ground_truth": "[a-"}, "graders[0].ground_truth",
     "invalid regular expression"),
    ({"function": "exact_match", "ground_truth": 4}, "graders[0].ground_truth",
     "valid string"),
    ({"function": "contains", "ground_truth": "  "}, "graders[0].ground_truth",
     "must not be empty"),
    ({"function": "ascii_printable_only", "ground_truth": "x"}, "graders[0].ground_truth",
     "takes no ground truth"),
    ({"function": "ascii_printable_only", "ground_truth_attribute": "x"},
     "graders[0].ground_truth_attribute", "takes no ground truth"),
    ({"function": "exact_match", "threshold": 1.5}, "graders[0].threshold",
     "less than or equal to 1"),
    ({"function": "exact_match", "threshold": True}, "graders[0].threshold", "valid"),
    ({"function": "exact_match", "prompt": "judge this"}, "graders[0].prompt", "unknown key"),
    ({"function": 3}, "graders[0].function", "valid string"),
])
def test_load_time_errors_name_the_field(entry: dict[str, Any], where: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tool(**entry))
    message = str(info.value)
    assert f"{where}: " in message, message
    assert words in message, message


def test_every_problem_of_an_entry_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tool(function="nope", extractor="memory_block"))
    assert [p.loc for p in info.value.problems] == [("graders", 0, "function"),
                                                    ("graders", 0, "extractor")]


def test_type_tool_stands_for_kind_tool() -> None:
    cfg = {"graders": [{"type": "tool", "function": "contains", "ground_truth": "a"}]}
    assert verdict(grade(cfg, [], **said("abc"))) == PASS


def test_schema_lists_the_closed_extractor_list() -> None:
    schema = _schema()
    props = schema["properties"]
    assert props["extractor"]["enum"] == sorted([
        "after_marker", "all_assistant", "first_assistant", "last_assistant", "pattern",
        "span_attribute", "tool_arguments", "tool_output"])
    assert props["kind"]["enum"] == ["tool"]
    assert schema["additionalProperties"] is False
    json.dumps(schema)


def test_the_reference_page_examples_load_and_grade(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    page = (Path(__file__).parent.parent / "docs" / "graders" / "tool_graders.md").read_text()
    blocks = re.findall(r"```(\w+)\n(.*?)```", page, re.DOTALL)
    (python,) = [body for lang, body in blocks if lang == "python"]
    (tmp_path / "my_graders.py").write_text(python)
    monkeypatch.chdir(tmp_path)
    configs = [load_config(body) for lang, body in blocks if lang == "yaml"]
    assert len(configs) == 4
    (json_field,) = configs[3].graders
    run = run_of([], outputs=['RESULT: {"order_id": 7}'], root_attrs={GT: "order_id"})
    assert verdict(json_field.grader.grade(run)) == PASS
    run = run_of([], outputs=['RESULT: {"id": 7}'], root_attrs={GT: "order_id"})
    assert verdict(json_field.grader.grade(run)) == (0.5, True, "pass")


# -- config-wide settings: runs.ground_truth_attribute, letta's graders-as-a-mapping --------

def test_runs_level_ground_truth_attribute() -> None:
    cfg = tool(function="exact_match")
    cfg["runs"] = {"ground_truth_attribute": "dataset.expected"}
    r = grade(cfg, [], **said("4"), root_attrs={"dataset.expected": "4"})
    assert verdict(r) == PASS


def test_letta_graders_mapping_shape() -> None:
    config = textwrap.dedent("""
        graders:
          my_metric:
            kind: tool
            function: exact_match
            extractor: last_assistant
    """)
    r = grade(config, [], **said("4"), **truth("4"))
    assert verdict(r) == PASS and r.name == "my_metric"


def test_keyword_only_parameters_with_a_default_are_optional_those_without_are_refused() -> None:
    @grader
    def tg_with_option(run: AgentRun, submission: str | None, *, strict: bool = False) -> bool:
        return strict

    assert not tg_with_option.takes_ground_truth
    with pytest.raises(TypeError, match=r"unexpected required parameter\(s\) strict;"):
        @grader
        def tg_needs_option(run: AgentRun, submission: str | None, *, strict: bool) -> bool:
            return strict


def test_nothing_to_grade_names_what_was_missing_in_text_and_details() -> None:
    r = grade(tool(function="ascii_printable_only", extractor="last_assistant"), [])
    assert r.explanation == "Nothing to grade: the run has no final output."
    assert r.details["source"] == "the final output"
    assert r.details["submission_chars"] is None


def test_arguments_of_every_call_of_a_tool_never_called_name_their_source() -> None:
    r = grade(tool(function="exact_match", extractor="tool_arguments",
                   extractor_config={"tool_name": "b", "occurrence": "all"}, ground_truth="[]"),
              [call("a")])
    assert (r.explanation, r.details["source"]) == ("Nothing to grade: b was never called.",
                                                    "the arguments of b")
