"""``tool_trajectory_avg_score`` (Google ADK's trajectory criterion; PEER-GRADERS 2)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import otel_tooleval.graders.tool_trajectory_avg_score  # noqa: F401  (registers the family)
from otel_tooleval import load_config
from otel_tooleval.graders.registry import REGISTRY
from tests.support.errors import assert_config_error, assert_schema_agrees
from tests.support.harness import Harness
from tests.support.runs import call, grade

ROOT = Path(__file__).resolve().parents[1]
TYPE = "tool_trajectory_avg_score"


def adk(expected: list[dict[str, Any]] | None, criterion: Any = None, **entry: Any
        ) -> dict[str, Any]:
    body: dict[str, Any] = {"type": TYPE, **entry}
    if expected is not None:
        body["expected_tool_use"] = expected
    if criterion is not None:
        body["criteria"] = {"tool_trajectory_avg_score": criterion}
    return {"graders": [body]}


def use(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args}


def mode(match_type: Any, threshold: float = 1.0, **more: Any) -> dict[str, Any]:
    return {"threshold": threshold, "match_type": match_type, **more}


def score(config: dict[str, Any], calls: list[dict[str, Any]]) -> float:
    r = grade(config, calls)
    assert r.label in ("pass", "fail"), r
    return r.score


# -- PEER-GRADERS.md's example ----------------------------------------------------------------------

PAGE_EXAMPLE = """
graders:
- name: adk-trajectory
  type: tool_trajectory_avg_score
  criteria: {tool_trajectory_avg_score: {threshold: 1.0, match_type: IN_ORDER, ignore_args: false}}
  expected_tool_use:
    - {name: lookup_city, args: {country: France}}
"""


def test_the_peer_graders_example() -> None:
    hit = grade(PAGE_EXAMPLE, [call("search"), call("lookup_city", {"country": "France"}),
                               call("get_weather", {"city": "Paris"})])
    assert (hit.name, hit.score, hit.passed, hit.label) == ("adk-trajectory", 1.0, True, "pass")
    assert hit.details["pairing"] == [{"entry": 0, "tool": "lookup_city", "call": 1,
                                       "span_id": "0000000000000103"}]
    miss = grade(PAGE_EXAMPLE, [call("lookup_city", {"country": "france"})])
    assert (miss.score, miss.passed, miss.label) == (0.0, False, "fail")
    assert "entry 0 ('lookup_city') has no matching call" in miss.explanation


# -- the criteria block, in every form ADK's test_config.json accepts -----------------------------

RUN = [call("a", {"x": 1}), call("b", {}), call("c", {"y": [1, 2]})]


@pytest.mark.parametrize(("criterion", "expected_score"), [
    (1.0, 0.0), (1, 0.0), (0.5, 0.0),                      # bare number: EXACT
    ({"threshold": 1}, 0.0),                               # object without match_type: EXACT
    (mode("IN_ORDER"), 1.0), (mode("in_order"), 1.0), (mode("In Order"), 1.0),
    (mode("in-order"), 1.0), (mode(" in_order "), 1.0), (mode(1), 1.0),
    (mode("ANY_ORDER"), 1.0), (mode("any-order"), 1.0), (mode("Any Order"), 1.0), (mode(2), 1.0),
    (mode("EXACT"), 0.0), (mode("exact"), 0.0), (mode(0), 0.0),
    ({"threshold": 1.0, "matchType": "inOrder".replace("O", "_O")}, 1.0),   # in_Order
    ({"threshold": 1.0, "matchType": "ANY_ORDER", "ignoreArgs": True}, 1.0),
    ({"threshold": 1.0, "includeIntermediateResponsesInFinal": True}, 0.0),
])
def test_criteria_forms(criterion: Any, expected_score: float) -> None:
    # Expected: a then c; the run has a, b, c: only EXACT fails.
    config = adk([use("a", x=1), use("c", y=[1, 2])], criterion)
    assert score(config, RUN) == expected_score


def test_without_criteria_threshold_one_and_exact() -> None:
    config = adk([use("a", x=1), use("b"), use("c", y=[1, 2])])
    r = grade(config, RUN)
    assert (r.score, r.passed) == (1.0, True)
    assert (r.details["match_type"], r.details["threshold"], r.details["ignore_args"]) == (
        "EXACT", 1.0, False)
    assert grade(config, RUN[:2]).score == 0.0


def test_threshold_decides_passed() -> None:
    config = adk([use("zzz")], 0.0)
    r = grade(config, RUN)
    assert (r.score, r.passed, r.label) == (0.0, True, "pass")
    assert "Score 0 >= threshold 0." in r.explanation
    half = grade(adk([use("a", x=1)], mode("IN_ORDER", 0.5)), RUN)
    assert (half.score, half.passed) == (1.0, True)


def test_intermediate_data_and_camel_case_tool_uses() -> None:
    expected = [use("a", x=1), use("b"), use("c", y=[1, 2])]
    for body in ({"intermediate_data": {"tool_uses": expected}},
                 {"intermediate_data": {"toolUses": expected, "toolResponses": [],
                                        "intermediateResponses": []}},
                 {"intermediateData": {"tool_uses": expected}},
                 {"expectedToolUse": expected}):
        assert score({"graders": [{"type": TYPE, **body}]}, RUN) == 1.0
    empty = {"graders": [{"type": TYPE, "intermediate_data": {}}]}
    assert score(empty, []) == 1.0 and score(empty, RUN) == 0.0


def test_adk_ids_in_pasted_tool_uses_are_accepted_and_not_compared() -> None:
    config = adk([{"id": "adk-123", "name": "a", "args": {"x": 1}}], mode("ANY_ORDER"))
    assert score(config, RUN) == 1.0


# -- the three match types ------------------------------------------------------------------------

def test_exact_needs_same_length_names_and_args_in_place() -> None:
    config = adk([use("a", x=1), use("b")])
    assert score(config, [call("a", {"x": 1}), call("b", {})]) == 1.0
    extra = grade(config, [call("a", {"x": 1}), call("b", {}), call("b", {})])
    assert extra.score == 0.0
    assert "3 calls where 2 tool uses were expected" in extra.explanation
    swapped = grade(config, [call("b", {}), call("a", {"x": 1})])
    assert "call #0 is 'b' where entry 0 expects 'a'" in swapped.explanation
    other = grade(config, [call("a", {"x": 2}), call("b", {})])
    assert "call #0 ('a') has other args than entry 0" in other.explanation
    assert [p["call"] for p in other.details["pairing"]] == [None, 1]
    assert score(adk([]), []) == 1.0 and score(adk([]), [call("a")]) == 0.0


def test_exact_ignore_args_compares_names_only() -> None:
    config = adk([use("a", x=1), use("b")], mode("EXACT", ignore_args=True))
    assert score(config, [call("a", {"x": 999}), call("b", "not even json")]) == 1.0
    assert score(config, [call("b"), call("a")]) == 0.0


def test_in_order_is_a_subsequence_with_extras_allowed() -> None:
    config = adk([use("a"), use("b"), use("a")], mode("IN_ORDER"))
    assert score(config, [call("x"), call("a", {}), call("a", {}), call("b", {}),
                          call("y"), call("a", {})]) == 1.0
    r = grade(config, [call("a", {}), call("a", {}), call("b", {})])
    assert r.score == 0.0
    assert [p["call"] for p in r.details["pairing"]] == [0, 2, None]
    assert "entry 2 ('a') has no matching call after call #2" in r.explanation
    assert score(adk([], mode("IN_ORDER")), []) == 1.0          # empty expected passes
    assert score(adk([], mode("IN_ORDER")), [call("a")]) == 1.0
    assert score(config, []) == 0.0


def test_any_order_is_multiset_containment() -> None:
    config = adk([use("a", q=1), use("a", q=1), use("b")], mode("ANY_ORDER"))
    assert score(config, [call("b", {}), call("c"), call("a", {"q": 1}),
                          call("a", {"q": 1.0})]) == 1.0
    once = grade(config, [call("b", {}), call("a", {"q": 1})])     # duplicates need two calls
    assert once.score == 0.0
    assert "entry 1 ('a'): its equal calls are taken by other entries" in once.explanation
    assert [p["call"] for p in once.details["pairing"]] == [1, None, 0]
    wrong = grade(config, [call("a", {"q": 2}), call("a", {"q": 1})])
    assert "entry 1 ('a'): no call with equal args" not in wrong.explanation
    assert "entry 2 ('b') was never called" in wrong.explanation
    assert score(adk([], mode("ANY_ORDER")), [call("a")]) == 1.0


def test_args_are_compared_whole_never_partially() -> None:
    config = adk([use("a", x=1)], mode("ANY_ORDER"))
    assert score(config, [call("a", {"x": 1, "y": 2})]) == 0.0
    assert score(config, [call("a", {"y": 2, "x": 1}), call("a", {"x": 1.0})]) == 1.0
    nested = adk([use("a", o={"p": 1, "q": [1, {"r": "s"}]})], mode("ANY_ORDER"))
    assert score(nested, [call("a", {"o": {"q": [1, {"r": "s"}], "p": 1.0}})]) == 1.0
    assert score(nested, [call("a", {"o": {"q": [{"r": "s"}, 1], "p": 1}})]) == 0.0


def test_pending_calls_count_as_issued() -> None:
    config = adk([use("a"), use("b")])
    assert score(config, [call("a", {}), call("b", {}, pending=True)]) == 1.0


def test_values_in_details_only_with_include_values() -> None:
    config = adk([use("secret", token="s3cr3t")], mode("ANY_ORDER"))
    calls = [call("secret", {"token": "other"})]
    plain = grade(config, calls)
    assert "s3cr3t" not in json.dumps(plain.details) + plain.explanation
    shown = grade({**config, "emit": {"include_values": True}}, calls)
    assert shown.details["pairing"][0]["expected_args"] == {"token": "s3cr3t"}
    assert "s3cr3t" not in shown.explanation


# -- deliberate differences (docs/differences.md), each where ADK goes wrong -----------------------

def test_difference_true_is_not_one() -> None:
    # ADK compares args with Python's ==, so {flag: true} equals a call's {flag: 1} (recorded:
    # tests/data/peers/adk/verdicts.json, see test_peer_adk.py); a JSON boolean is not a number.
    config = adk([use("a", flag=True, n=0)], mode("ANY_ORDER"))
    assert score(config, [call("a", {"flag": 1, "n": False})]) == 0.0
    assert score(config, [call("a", {"flag": True, "n": 0.0})]) == 1.0
    assert score(adk([use("a", n="10")], mode("ANY_ORDER")), [call("a", {"n": 10})]) == 0.0


def test_difference_args_left_out_mean_no_args() -> None:
    # ADK keeps a left-out args as None, which never equals a call's {}: [{name: a}] fails a run
    # that called a() with no arguments. Ours: {} (and a span without arguments is {} too).
    config = adk([{"name": "a"}, {"name": "b", "args": None}])
    assert score(config, [call("a", {}), call("b")]) == 1.0
    assert score(config, [call("a", {"x": 1}), call("b")]) == 0.0


def test_difference_misspelled_keys_are_errors() -> None:
    # ADK's criterion allows extra keys: match_typ: IN_ORDER silently grades EXACT.
    assert_config_error(adk([use("a")], {"threshold": 1.0, "match_typ": "IN_ORDER"}),
                        "graders[0].criteria.tool_trajectory_avg_score.match_typ",
                        "unknown key (did you mean 'match_type'?)")
    assert_config_error(adk([use("a")], {"threshold": 1.0, "ignore_arg": True}),
                        "graders[0].criteria.tool_trajectory_avg_score.ignore_arg",
                        "did you mean 'ignore_args'?")


def test_difference_threshold_must_be_in_the_unit_interval() -> None:
    # ADK takes threshold -0.5 (every run passes, score 0 included) and 1.5 (none can pass).
    assert_config_error(adk([use("a")], {"threshold": -0.5}),
                        "graders[0].criteria.tool_trajectory_avg_score.threshold",
                        "greater than or equal to 0")
    assert_config_error(adk([use("a")], 1.5), "graders[0].criteria.tool_trajectory_avg_score",
                        "a threshold must be from 0 to 1, got 1.5")


# -- multi-turn: refused until sessions -----------------------------------------------------------

def test_expected_invocations_is_refused_per_run_naming_sessions() -> None:
    for key in ("expected_invocations", "expectedInvocations"):
        error = assert_config_error(
            {"graders": [{"type": TYPE, key: [[use("a")], [use("b")]]}]},
            f"graders[0].{key}", "not in per-run graders")
        assert "sessions.graders" in str(error) and "expected_tool_use" in str(error)
        # ... and accepted under sessions:
        assert load_config({"sessions": {"graders": [{"type": TYPE, key: [[use("a")]]}]}})


# -- load-time errors -----------------------------------------------------------------------------

@pytest.mark.parametrize(("config", "where", "words"), [
    (adk([use("a")], {"match_type": "IN_ORDER"}),
     "graders[0].criteria.tool_trajectory_avg_score.threshold", "required key is missing"),
    (adk([use("a")], {"matchType": 1}),
     "graders[0].criteria.tool_trajectory_avg_score.threshold", "required key is missing"),
    (adk([use("a")], mode("SOME_ORDER")),
     "graders[0].criteria.tool_trajectory_avg_score.match_type", "'EXACT', 'IN_ORDER' or"),
    (adk([use("a")], mode(3)), "graders[0].criteria.tool_trajectory_avg_score.match_type",
     "'EXACT', 'IN_ORDER' or"),
    (adk([use("a")], mode(True)), "graders[0].criteria.tool_trajectory_avg_score.match_type",
     "'EXACT', 'IN_ORDER' or"),
    (adk([use("a")], mode("EXACT", ignore_args="yes")),
     "graders[0].criteria.tool_trajectory_avg_score.ignore_args", "valid boolean"),
    (adk([use("a")], {"threshold": 1, "match_type": "EXACT", "matchType": "EXACT"}),
     "graders[0].criteria.tool_trajectory_avg_score", "matchType and match_type are the same"),
    (adk([use("a")], {"threshold": "1.0"}),
     "graders[0].criteria.tool_trajectory_avg_score.threshold", "valid number"),
    (adk([use("a")], True), "graders[0].criteria.tool_trajectory_avg_score",
     "must be a threshold (a number from 0 to 1) or an object"),
    (adk([use("a")], "IN_ORDER"), "graders[0].criteria.tool_trajectory_avg_score",
     "must be a threshold"),
    ({"graders": [{"type": TYPE, "criteria": {}, "expected_tool_use": []}]},
     "graders[0].criteria.tool_trajectory_avg_score", "required key is missing"),
    ({"graders": [{"type": TYPE, "criteria": {"tool_trajectory_avg_score": 1.0,
                                              "final_response_match_v2": 0.8},
                   "expected_tool_use": []}]},
     "graders[0].criteria.final_response_match_v2", "an LLM-judged ADK metric"),
    ({"graders": [{"type": TYPE, "criteria": {"tool_trajectory_avg_score": 1.0,
                                              "rubric_based_tool_use_quality_v1": {}},
                   "expected_tool_use": []}]},
     "graders[0].criteria.rubric_based_tool_use_quality_v1", "otel-tooleval runs no LLM"),
    ({"graders": [{"type": TYPE, "criteria": {"tool_trajectory_avg_score": 1.0,
                                              "response_match_score": 0.8},
                   "expected_tool_use": []}]},
     "graders[0].criteria.response_match_score", "not about the tool trajectory"),
    (adk([use("a")], {"threshold": 1, "judge_model_options": {"judge_model": "m"}}),
     "graders[0].criteria.tool_trajectory_avg_score.judge_model_options",
     "an LLM judge, which otel-tooleval does not run"),
    (adk([use("a")], {"threshold": 1, "rubrics": []}),
     "graders[0].criteria.tool_trajectory_avg_score.rubrics",
     ("unknown key: options of an LLM judge, which otel-tooleval does not run "
      "(tool_trajectory_avg_score needs none)")),
    ({"graders": [{"type": TYPE, "criteria": {"tool_trajectory_avg_score": 1.0,
                                              "tool_call_count_v1": 1},
                   "expected_tool_use": []}]},
     "graders[0].criteria.tool_call_count_v1",
     ("another ADK metric, not about the tool trajectory: this family grades "
      "tool_trajectory_avg_score only; remove it")),
    ({"graders": [{"type": TYPE}]}, "graders[0].expected_tool_use", "required key is missing"),
    ({"graders": [{"type": TYPE, "expected_tool_use": [],
                   "intermediate_data": {"tool_uses": []}}]},
     "graders[0].expected_tool_use", "given twice"),
    (adk([{"args": {}}]), "graders[0].expected_tool_use[0].name", "required key is missing"),
    (adk([{"name": ""}]), "graders[0].expected_tool_use[0].name", "at least 1 character"),
    (adk([{"name": "a", "args": [1]}]), "graders[0].expected_tool_use[0].args",
     "valid dictionary"),
    (adk([{"name": "a", "args": {"d": float("nan")}}]),
     "graders[0].expected_tool_use[0].args", "JSON values only"),
    (adk([{"name": "a", "tool_input": {}}]), "graders[0].expected_tool_use[0].tool_input",
     "unknown key (ADK's FunctionCall calls it args)"),
    (adk([{"tool_name": "a", "tool_input": {}}]),
     "graders[0].expected_tool_use[0].tool_name", "calls it name"),
    (adk([{"name": "a", "arg": {}}]), "graders[0].expected_tool_use[0].arg",
     "did you mean 'args'?"),
    (adk([use("a")], threshold=0.5), "graders[0].threshold",
     "give it in criteria.tool_trajectory_avg_score"),
    (adk([use("a")], match_type="IN_ORDER"), "graders[0].match_type",
     "give it in criteria.tool_trajectory_avg_score"),
    ({"graders": [{"type": TYPE, "intermediate_data": {"tool_use": []}}]},
     "graders[0].intermediate_data.tool_use", "did you mean 'tool_uses'?"),
    ({"graders": [{"type": TYPE, "expected_tool_uses": []}]},
     "graders[0].expected_tool_uses", "did you mean 'expected_tool_use'?"),
])
def test_load_time_errors_name_the_field(config: object, where: str, words: str) -> None:
    assert_config_error(config, where, words)


def test_schema_agrees_with_load_config() -> None:
    schema = REGISTRY[TYPE].schema
    assert schema is not None
    good = [{"type": TYPE, "expected_tool_use": [use("a", x=1)]},
            {"type": TYPE, "criteria": {"tool_trajectory_avg_score": 0.5},
             "intermediate_data": {"tool_uses": [{"name": "a"}]}},
            {"type": TYPE, "criteria": {"tool_trajectory_avg_score": {
                "threshold": 1, "matchType": 2, "ignoreArgs": True}},
             "expected_tool_use": []}]
    bad = [{"type": TYPE},
           {"type": TYPE, "expected_tool_use": [], "bogus": 1},
           {"type": TYPE, "criteria": {"tool_trajectory_avg_score": 1.5}, "expected_tool_use": []},
           {"type": TYPE, "criteria": {"tool_trajectory_avg_score": {"match_type": "EXACT"}},
            "expected_tool_use": []},
           {"type": TYPE, "expected_invocations": [[]]}]
    assert_schema_agrees(schema(), good, bad)


# -- real SDK spans, the CLI, the reference page --------------------------------------------------

def test_grades_real_sdk_spans_through_the_processor() -> None:
    config = adk([use("lookup_city", query="paris"), use("get_weather", city="Paris")],
                 mode("IN_ORDER"))
    h = Harness(config)
    try:
        with h.agent("weather_agent"):
            h.tool("lookup_city", {"query": "paris"})
            h.tool("log", {})
            h.tool("get_weather", {"city": "Paris"})
        with h.agent("weather_agent"):
            h.tool("get_weather", {"city": "Paris"})
            h.tool("lookup_city", {"query": "paris"})
        assert h.flush()
        (good,), (bad,) = (r.results for r in h.reports)
        assert (good.score, good.passed, bad.score, bad.passed) == (1.0, True, 0.0, False)
        spans = {format(s.context.span_id, "016x"): s.name for s in h.by_name(
            "execute_tool lookup_city") + h.by_name("execute_tool get_weather")}
        assert [spans[p["span_id"]] for p in good.details["pairing"]] == [
            "execute_tool lookup_city", "execute_tool get_weather"]
    finally:
        h.close()


DOC = ROOT / "docs/graders/tool_trajectory_avg_score.md"
EXAMPLE = ROOT / "tests/data/peers/adk/weather_agent.yaml"


def test_every_yaml_block_of_the_reference_page_loads() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) >= 2
    for block in blocks:
        assert load_config(block).graders
    assert EXAMPLE.read_text(encoding="utf-8") in DOC.read_text(encoding="utf-8")


def test_the_runnable_example_of_the_reference_page() -> None:
    command = ["grade", "tests/data/frameworks/adk/traces.jsonl", "-c", str(EXAMPLE.relative_to(
        ROOT)), "-f", "json"]
    assert "otel-tooleval " + " ".join(command[:4]) in DOC.read_text(encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "otel_tooleval.cli", *command], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr        # one grader fails, as the page says
    (run,) = json.loads(proc.stdout)["runs"]
    results = {r["name"]: r for r in run["results"]}
    assert (results["adk-in-order"]["score"], results["adk-exact-names"]["score"]) == (1.0, 0.0)
    assert [p["call"] for p in results["adk-in-order"]["details"]["pairing"]] == [0, 1, 3]


def test_check_prints_the_resolved_criterion() -> None:
    proc = subprocess.run([sys.executable, "-m", "otel_tooleval.cli", "check", str(EXAMPLE)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    graders = json.loads(proc.stdout)["graders"]
    assert graders[1]["params"]["criteria"]["tool_trajectory_avg_score"] == {
        "threshold": 1.0, "match_type": "EXACT", "ignore_args": True,
        "include_intermediate_responses_in_final": False}
    assert graders[1]["params"]["expected_tool_use"][0] == {"name": "lookup_city", "args": {}}


def test_any_order_buckets_agree_with_pairwise_value_equality() -> None:
    """ANY_ORDER pairs through hashed value keys; the oracle pairs each entry with the first free
    call that ``same_value`` finds equal (what ADK does with its ``==``)."""
    import random

    from otel_tooleval.graders.tool_call_checks import same_value
    from otel_tooleval.graders.tool_trajectory_avg_score import value_key

    values: list[Any] = [0, 1, 1.0, True, False, 0.0, "1", "", None, [1, 2], [1.0, 2], [True],
                         {"a": 1, "b": [1]}, {"b": [1.0], "a": 1.0}, {"a": True}, {}, [], 2**60,
                         float(2**60), 2**60 + 1, 10**400]
    for a in [*values, float("inf"), float("nan")]:
        for b in [*values, float("inf"), float("nan")]:
            assert (value_key(a) == value_key(b)) == same_value(a, b), (a, b)
    rng = random.Random(5)
    for _ in range(300):
        expected = [{"name": rng.choice("ab"), "args": {"v": rng.choice(values)}}
                    for _ in range(rng.randint(0, 5))]
        calls = [(rng.choice("ab"), {"v": rng.choice(values)}) for _ in range(rng.randint(0, 8))]
        used: set[int] = set()
        oracle: list[int | None] = []
        for e in expected:
            found = next((j for j, (n, a) in enumerate(calls) if j not in used
                          and n == e["name"] and same_value(e["args"], a)), None)
            if found is not None:
                used.add(found)
            oracle.append(found)
        r = grade(adk(expected, mode("ANY_ORDER")), [call(n, a) for n, a in calls])
        assert [p["call"] for p in r.details["pairing"]] == oracle, (expected, calls)
        assert r.score == (1.0 if None not in oracle else 0.0)


def test_an_exact_pass_explains_itself_in_the_singular_and_plural() -> None:
    one = grade(adk([use("a", q=1)], mode("EXACT")), [call("a", {"q": 1})])
    assert one.explanation == ("EXACT: the 1 call equal the 1 expected tool use "
                               "(tool names and args).")
    two = grade(adk([use("a"), use("b")], mode("EXACT")), [call("a", {}), call("b", {})])
    assert two.explanation == ("EXACT: the 2 calls equal the 2 expected tool uses "
                               "(tool names and args).")


def test_details_list_the_actual_tool_calls_by_name() -> None:
    r = grade(adk([use("a")]), [call("a", {}), call("b", {})])
    assert r.details["actual_tool_calls"] == ["a", "b"]
