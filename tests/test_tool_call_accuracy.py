"""``tool_call_accuracy`` and ``tool_call_f1``: Ragas' ToolCallAccuracy and ToolCallF1
(PEER-GRADERS.md section 4): the examples, every deliberate difference (with what Ragas gives,
checked against the real metrics when the peers are installed), load-time errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from otel_tooleval.graders.registry import REGISTRY
from tests.support.errors import assert_config_error, assert_schema_agrees
from tests.support.harness import Harness
from tests.support.peers import run_peer
from tests.support.runs import call, grade

SCRIPT = Path(__file__).parent / "data" / "peers" / "ragas" / "run_peer.py"


def acc(refs: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    return {"graders": [{"type": "tool_call_accuracy", "reference_tool_calls": refs,
                         **options}]}


def f1(refs: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    return {"graders": [{"type": "tool_call_f1", "reference_tool_calls": refs, **options}]}


EXAMPLE = """
graders:
- name: accurate-calls
  type: tool_call_accuracy
  strict_order: true                  # Ragas' default
  threshold: 1.0                      # Ragas has no pass rule; ours: score >= threshold
  reference_tool_calls:
    - {name: search, args: {query: hotels}}
- name: call-f1
  type: tool_call_f1
  threshold: 1.0
  reference_tool_calls:
    - {name: search, args: {query: hotels}}
"""


def test_the_examples_of_peer_graders_md() -> None:
    config = yaml.safe_load(EXAMPLE)
    for entry in config["graders"]:
        r = grade({"graders": [entry]}, [call("search", {"query": "hotels"})])
        assert (r.score, r.passed, r.label) == (1.0, True, "pass")
        assert r.details["pairs"][0]["reference"] == 0 and r.details["pairs"][0]["call"] == 0
        assert len(r.details["pairs"][0]["span_id"]) == 16
        r = grade({"graders": [entry]}, [call("search", {"query": "flights"})])
        assert (r.score, r.passed) == (0.0, False)


# -- accuracy ---------------------------------------------------------------------------------------

def test_pair_score_is_the_fraction_of_reference_keys_equal() -> None:
    refs = [{"name": "s", "args": {"q": "x", "n": 1, "o": {"a": 1, "b": 2}}}]
    r = grade(acc(refs), [call("s", {"q": "x", "n": 1.0, "o": {"b": 2, "a": 1}, "extra": 9})])
    assert r.score == 1.0                                   # extra call keys are free
    assert grade(acc(refs), [call("s", {"q": "x", "n": 2})]).score == pytest.approx(1 / 3)
    assert grade(acc([{"name": "s", "args": {}}]), [call("s", {})]).score == 1.0
    assert grade(acc([{"name": "s", "args": {}}]), [call("s", {"q": 1})]).score == 0.0
    assert grade(acc([{"name": "s"}]), [call("s")]).score == 1.0    # args left out: {}


@pytest.mark.parametrize(("refs", "calls", "score"), [
    ([], [], 1.0), ([], [call("a")], 0.0), ([{"name": "a"}], [], 0.0),
])
def test_accuracy_empty_sides(refs: list[dict[str, Any]], calls: list[dict[str, Any]],
                              score: float) -> None:
    assert grade(acc(refs), calls).score == score
    assert grade(acc(refs, strict_order=False), calls).score == score


def test_strict_order_pairs_along_the_longest_name_subsequence_then_the_best_total() -> None:
    refs = [{"name": "a", "args": {"x": 1}}, {"name": "b"}, {"name": "a", "args": {"x": 2}}]
    # Names a, b, a against a, a, b, a: the longest common subsequences have 3 pairs; the
    # first reference may take call 0 (x: 2, scores 0) or call 1 (x: 1): the best takes call 1.
    r = grade(acc(refs), [call("a", {"x": 2}), call("a", {"x": 1}), call("b"),
                          call("a", {"x": 2})])
    assert r.score == pytest.approx(3 / 4)
    assert [(p["reference"], p["call"]) for p in r.details["pairs"]] == [(0, 1), (1, 2), (2, 3)]
    assert r.details["unpaired_calls"] == [0] and "1 extra call(s) at #0" in r.explanation


def test_non_strict_order_is_a_maximum_total_assignment() -> None:
    refs = [{"name": "a", "args": {"x": 1}}, {"name": "a", "args": {"x": 2}}]
    r = grade(acc(refs, strict_order=False), [call("a", {"x": 2}), call("a", {"x": 1})])
    assert r.score == 1.0
    assert [(p["reference"], p["call"]) for p in r.details["pairs"]] == [(0, 1), (1, 0)]


def test_threshold_decides_passed() -> None:
    r = grade(acc([{"name": "a"}, {"name": "b"}], threshold=0.5), [call("a")])
    assert (r.score, r.passed) == (0.5, True)


# -- f1 ---------------------------------------------------------------------------------------------

def test_f1_counts_multisets_and_rounds_to_four_decimals() -> None:
    refs = [{"name": "a", "args": {"x": 1}}, {"name": "b"}, {"name": "c"}]
    r = grade(f1(refs), [call("a", {"x": 1.0}), call("b", {}), call("d")])
    assert r.score == 0.6667                                # P = R = 2/3
    assert (r.details["true_positives"], r.details["false_positives"],
            r.details["false_negatives"]) == (2, 1, 1)
    assert "missing: 'c' (reference 2)" in r.explanation
    assert grade(f1(refs), []).score == 0.0
    assert grade(f1([]), [call("a")]).score == 0.0


# -- the deliberate differences (Ragas' value on the same case, checked below) ----------------------

def case(refs: list[dict[str, Any]], steps: list[list[dict[str, Any]]], strict: bool = True
         ) -> dict[str, Any]:
    return {"strict_order": strict, "reference": refs, "steps": steps}


A = {"name": "a", "args": {"x": 1}}
B = {"name": "b", "args": {"y": "z"}}
ACCURACY: list[tuple[str, dict[str, Any], float, float]] = [
    ("one extra call no longer zeroes", case([A, B], [[A], [B], [A]]), 0.0, 2 / 3),
    ("one missing call no longer zeroes", case([A, B], [[A]]), 0.0, 0.5),
    ("1 == 1.0", case([A], [[{"name": "a", "args": {"x": 1.0}}]]), 0.0, 1.0),
    ('"10" != 10', case([{"name": "a", "args": {"x": "10"}}], [[{"name": "a", "args": {"x": 10}}]]),
     1.0, 0.0),
    ("nested key order is irrelevant",
     case([{"name": "a", "args": {"o": {"p": 1, "q": 2}}}],
          [[{"name": "a", "args": {"o": {"q": 2, "p": 1}}}]]), 0.0, 1.0),
    ("a wrong name costs its pair only", case([A, B], [[A], [{"name": "c", "args": {}}]]),
     0.0, 0.5),
    # Sorted by (name, key, str(value), ...), {w: 0, x: 2} comes first and is paired with
    # {x: 1}: both pairs score 0; the best pairing scores 1 each.
    ("non-strict pairs by best match", case(
        [{"name": "a", "args": {"x": 1}}, {"name": "a", "args": {"x": 2}}],
        [[{"name": "a", "args": {"x": 1, "z": 0}}, {"name": "a", "args": {"w": 0, "x": 2}}]],
        strict=False), 0.0, 1.0),
]
F1: list[tuple[str, dict[str, Any], float, float]] = [
    ("no calls on either side is 1.0", case([], []), 0.0, 1.0),
    ("duplicate calls count", case([A], [[A], [A]]), 1.0, 0.6667),
    ("true != 1", case([A], [[{"name": "a", "args": {"x": True}}]]), 1.0, 0.0),
]


def _calls(c: dict[str, Any]) -> list[dict[str, Any]]:
    return [call(x["name"], x["args"], step=k) for k, step in enumerate(c["steps"]) for x in step]


@pytest.mark.parametrize(("why", "c", "ragas", "ours"), ACCURACY, ids=[d[0] for d in ACCURACY])
def test_accuracy_deliberate_differences(why: str, c: dict[str, Any], ragas: float,
                                         ours: float) -> None:
    r = grade(acc(c["reference"], strict_order=c["strict_order"]), _calls(c))
    assert r.score == pytest.approx(ours), why


@pytest.mark.parametrize(("why", "c", "ragas", "ours"), F1, ids=[d[0] for d in F1])
def test_f1_deliberate_differences(why: str, c: dict[str, Any], ragas: float,
                                   ours: float) -> None:
    assert grade(f1(c["reference"]), _calls(c)).score == ours, why


def test_ragas_really_gives_those_values() -> None:
    verdicts = run_peer(SCRIPT, [c for _, c, _, _ in ACCURACY + F1])
    assert [v["accuracy"] for v in verdicts[:len(ACCURACY)]] == pytest.approx(
        [r for _, _, r, _ in ACCURACY])
    assert [v["f1"] for v in verdicts[len(ACCURACY):]] == [r for _, _, r, _ in F1]


# -- load-time errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("type_", "entry", "where", "words"), [
    ("tool_call_accuracy", {"arg_comparison_metric": "NonLLMStringSimilarity"},
     "graders[0].arg_comparison_metric", "may need an LLM"),
    ("tool_call_accuracy", {"strict_order": "yes"}, "graders[0].strict_order", "boolean"),
    ("tool_call_accuracy", {"strictorder": False}, "graders[0].strictorder",
     "did you mean 'strict_order'"),
    ("tool_call_accuracy", {"threshold": -0.1}, "graders[0].threshold", "greater than or equal"),
    ("tool_call_f1", {"threshold": 1.1}, "graders[0].threshold", "less than or equal to 1"),
    ("tool_call_f1", {"strict_order": True}, "graders[0].strict_order", "unknown key"),
    ("tool_call_f1", {"reference_tool_calls": [{"name": "a", "arguments": {}}]},
     "graders[0].reference_tool_calls[0].arguments", "unknown key"),
    ("tool_call_accuracy", {"reference_tool_calls": [{"name": "a", "args": [1]}]},
     "graders[0].reference_tool_calls[0].args", "dictionary"),
    ("tool_call_accuracy", {"reference_tool_calls": [{"args": {}}]},
     "graders[0].reference_tool_calls[0].name", "required"),
    ("tool_call_f1", {"user_input": []}, "graders[0].user_input", "the run's calls"),
])
def test_load_time_errors_name_the_field(type_: str, entry: dict[str, Any], where: str,
                                         words: str) -> None:
    body = {"type": type_, "reference_tool_calls": [{"name": "a"}], **entry}
    assert_config_error({"graders": [body]}, where, words)


def test_a_yaml_date_in_args_is_refused() -> None:
    assert_config_error(yaml.safe_load("""
graders:
- type: tool_call_accuracy
  reference_tool_calls: [{name: book, args: {day: 2025-01-31}}]
"""), "graders[0].reference_tool_calls[0].args", "JSON values")


@pytest.mark.parametrize("type_", ["tool_call_accuracy", "tool_call_f1"])
def test_schema_agrees_with_the_loader(type_: str) -> None:
    family = REGISTRY[type_]
    assert family.schema is not None
    good = [{"type": type_, "reference_tool_calls": []},
            {"type": type_, "reference_tool_calls": [{"name": "a", "args": {"x": 1}}],
             "threshold": 0.5}]
    bad = [{"type": type_}, {"type": type_, "reference_tool_calls": [], "threshold": 2},
           {"type": type_, "reference_tool_calls": [{"name": "a", "tool": "b"}]}]
    assert_schema_agrees(family.schema(), good, bad)
    jsonschema.Draft202012Validator.check_schema(family.schema())


# -- real spans -------------------------------------------------------------------------------------

def test_graded_live_from_sdk_spans() -> None:
    refs = [{"name": "search", "args": {"query": "hotels"}}, {"name": "book", "args": {"id": 7}}]
    h = Harness({"graders": [{"type": "tool_call_accuracy", "reference_tool_calls": refs},
                             {"type": "tool_call_f1", "reference_tool_calls": refs}]})
    try:
        with h.agent():
            h.tool("search", {"query": "hotels"})
            h.tool("book", {"id": 7.0})
            h.tool("book", {"id": 8})
        assert h.flush()
        (report,) = h.reports
        accuracy, score_f1 = report.results
        assert accuracy.score == pytest.approx(2 / 3) and not accuracy.passed
        assert score_f1.score == 0.8                            # P = 2/3, R = 1
        spans = {format(s.context.span_id, "016x") for s in h.by_name("execute_tool book")}
        assert accuracy.details["pairs"][1]["span_id"] in spans
    finally:
        h.close()


def test_listings_name_the_first_three_and_count_the_rest() -> None:
    from otel_tooleval.graders.tool_call_accuracy import _listing

    assert _listing(["a", "b"]) == "a, b"
    assert _listing(["a", "b", "c"]) == "a, b, c"
    assert _listing(["a", "b", "c", "d", "e"]) == "a, b, c and 2 more"
    assert _listing(["#1", "#2", "#3"], total=7) == "#1, #2, #3 and 4 more"


def test_f1_without_references_reports_zero_recall_and_lists_the_calls() -> None:
    """No reference calls and one call: nothing recalled (0, as Ragas), the call a false positive."""
    r = grade({"graders": [{"type": "tool_call_f1", "reference_tool_calls": []}]}, [call("a")])
    assert (r.score, r.details["precision"], r.details["recall"]) == (0.0, 0.0, 0.0)
    assert r.explanation == ("F1 0.0000: 0 of 0 reference calls made with equal arguments; "
                             "1 call(s) not in the reference: #0 'a'.")
