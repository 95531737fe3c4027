"""The ``tool_trajectory`` grader: every example of seeds/tool-trajectory.txt, the rules of
SEMANTICS 3 and the agentv flaws we must not reproduce."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import pytest

import otel_tooleval.graders.tool_trajectory  # noqa: F401  (registers the family)
from otel_tooleval import ConfigError, load_config
from otel_tooleval.graders.tool_trajectory import args_match
from otel_tooleval.grading import grade_run
from otel_tooleval.model import GradeResult
from tests.support.errors import assert_config_error
from tests.support.runs import call, grade, run_of


def entry(mode: str, **options: Any) -> dict[str, Any]:
    return {"graders": [{"type": "tool_trajectory", "mode": mode, **options}]}


def in_order(*expected: Any, **options: Any) -> dict[str, Any]:
    return entry("in_order", expected=[_e(x) for x in expected], **options)


def exact(*expected: Any, **options: Any) -> dict[str, Any]:
    return entry("exact", expected=[_e(x) for x in expected], **options)


def _e(x: Any) -> Any:
    return {"tool": x} if isinstance(x, str) else x


def calls(*names: str) -> list[dict[str, Any]]:
    return [call(n, {}) for n in names]


def yaml_cfg(body: str) -> str:
    return "graders:\n" + body


def verdict(r: GradeResult) -> tuple[float, bool, str]:
    return r.score, r.passed, r.label


# -- the page's samples, pasted as agentv writes them ---------------------------------------------

ANY_ORDER = """
  - name: tool-usage
    type: tool_trajectory
    mode: any_order
    minimums:
      knowledgeSearch: 2    # Must be called at least twice
      documentRetrieve: 1   # Must be called at least once
"""


def test_any_order_sample_passes_when_minimums_met_in_any_order() -> None:
    r = grade(yaml_cfg(ANY_ORDER), calls("documentRetrieve", "other", "knowledgeSearch",
                                         "knowledgeSearch"))
    assert verdict(r) == (1.0, True, "pass")
    assert r.name == "tool-usage" and r.type == "tool_trajectory"
    assert r.details["tools"] == [
        {"tool": "knowledgeSearch", "minimum": 2, "count": 2, "met": True, "calls": [2, 3],
         "pending": 0},
        {"tool": "documentRetrieve", "minimum": 1, "count": 1, "met": True, "calls": [0],
         "pending": 0},
    ]


def test_any_order_sample_scores_tools_meeting_their_minimum() -> None:
    r = grade(yaml_cfg(ANY_ORDER), calls("knowledgeSearch", "documentRetrieve"))
    assert verdict(r) == (0.5, False, "fail")
    assert r.details["met"] == 1 and r.details["total"] == 2
    assert "knowledgeSearch (1 of 2)" in r.explanation
    assert verdict(grade(yaml_cfg(ANY_ORDER), [])) == (0.0, False, "fail")


IN_ORDER = """
  - name: workflow-sequence
    type: tool_trajectory
    mode: in_order
    expected:
      - tool: fetchData
      - tool: validateSchema
      - tool: transformData
      - tool: saveResults
"""


def test_in_order_sample_allows_helper_calls_between_steps() -> None:
    r = grade(yaml_cfg(IN_ORDER), calls("fetchData", "log", "validateSchema", "transformData",
                                        "log", "saveResults"))
    assert verdict(r) == (1.0, True, "pass")
    assert [e["call"] for e in r.details["entries"]] == [0, 2, 3, 5]


def test_in_order_sample_out_of_order_scores_the_matched_fraction() -> None:
    r = grade(yaml_cfg(IN_ORDER), calls("fetchData", "transformData", "validateSchema",
                                        "saveResults"))
    assert verdict(r) == (0.75, False, "fail")
    assert r.details["hits"] == 3


EXACT = """
  - name: auth-sequence
    type: tool_trajectory
    mode: exact
    expected:
      - tool: checkCredentials
      - tool: generateToken
      - tool: auditLog
"""


def test_exact_sample_passes_only_for_the_exact_sequence() -> None:
    assert verdict(grade(yaml_cfg(EXACT), calls("checkCredentials", "generateToken",
                                                "auditLog"))) == (1.0, True, "pass")
    r = grade(yaml_cfg(EXACT), calls("checkCredentials", "auditLog", "generateToken"))
    assert r.score == pytest.approx(1 / 3) and not r.passed
    assert "position 1 expected generateToken, got auditLog" in r.explanation


ARGS = """
  - name: search-validation
    type: tool_trajectory
    mode: in_order
    expected:
      # Partial match — only specified keys are checked
      - tool: search
        args: { query: "machine learning" }

      # Skip argument validation for this tool
      - tool: process
        args: any

      # No args field = no argument validation (same as args: any)
      - tool: saveResults
"""


def test_args_sample_checks_only_the_given_keys() -> None:
    r = grade(yaml_cfg(ARGS), [call("search", {"query": "machine learning", "limit": 10}),
                               call("process", {"anything": [1, 2]}),
                               call("saveResults", {"path": "/tmp/x"})])
    assert verdict(r) == (1.0, True, "pass")
    assert [e["args_checked"] for e in r.details["entries"]] == [True, False, False]


def test_args_sample_a_different_value_is_not_a_match() -> None:
    r = grade(yaml_cfg(ARGS), [call("search", {"query": "deep learning"}),
                               call("process", {}), call("saveResults", {})])
    assert verdict(r) == (pytest.approx(2 / 3), False, "fail")
    assert r.details["entries"][0]["call"] is None
    assert "entry 0 (search with args)" in r.explanation


LATENCY = """
  - name: perf-check
    type: tool_trajectory
    mode: in_order
    expected:
      - tool: Read
        max_duration_ms: 100  # Must complete within 100ms
      - tool: Edit
        max_duration_ms: 500  # Allow 500ms for edits
      - tool: Write           # No timing requirement
"""


def test_latency_sample_each_limit_is_an_aspect() -> None:
    fast = [call("Read", {}, duration_ms=40), call("Edit", {}, duration_ms=500),
            call("Write", {}, duration_ms=9000)]
    r = grade(yaml_cfg(LATENCY), fast)
    assert verdict(r) == (1.0, True, "pass")
    assert r.details["aspects"] == 5          # 3 expected tools + 2 latency assertions
    assert r.details["latency"] == {"assertions": 2, "hits": 2, "misses": 0, "neutral": 0}
    slow = [call("Read", {}, duration_ms=101), call("Edit", {}, duration_ms=20),
            call("Write", {})]
    r = grade(yaml_cfg(LATENCY), slow)
    assert verdict(r) == (0.8, False, "fail")
    assert r.details["entries"][0]["latency"] == "miss"
    assert r.details["entries"][0]["duration_ms"] == pytest.approx(101)
    assert "over the latency limit: entry 0 (Read) at call #0" in r.explanation


def test_scoring_example_three_tools_two_latency_assertions_make_five_aspects() -> None:
    config = in_order({"tool": "a", "max_duration_ms": 10}, {"tool": "b", "max_duration_ms": 10},
                      "c")
    # b never called: its sequence aspect and its latency aspect are both misses.
    r = grade(config, [call("a", {}, duration_ms=1), call("c", {}, duration_ms=1)])
    assert r.details["aspects"] == 5
    assert r.score == pytest.approx(3 / 5)


def test_complete_example_research_agent_two_graders() -> None:
    config = yaml_cfg("""
  - name: coverage
    type: tool_trajectory
    mode: any_order
    minimums:
      webSearch: 1
      documentRead: 2
      noteTaking: 1
  - name: workflow
    type: tool_trajectory
    mode: in_order
    expected:
      - tool: webSearch
      - tool: documentRead
      - tool: summarize
""")
    cfg = load_config(config)
    run = run_of(calls("webSearch", "documentRead", "noteTaking", "documentRead", "summarize"),
                 cfg.policy)
    report = grade_run(run, cfg)
    assert report is not None
    assert [(r.name, r.score, r.passed) for r in report.results] == [
        ("coverage", 1.0, True), ("workflow", 1.0, True)]
    run = run_of(calls("summarize", "webSearch", "documentRead"), cfg.policy)
    report = grade_run(run, cfg)
    assert report is not None
    coverage, workflow = report.results
    assert coverage.score == pytest.approx(1 / 3) and not coverage.passed
    assert workflow.score == pytest.approx(2 / 3) and not workflow.passed


PIPELINE = """
  - name: pipeline-check
    type: tool_trajectory
    mode: exact
    expected:
      - tool: loadData
      - tool: validate
      - tool: transform
      - tool: export
"""


def test_complete_example_data_pipeline_exact() -> None:
    steps = ("loadData", "validate", "transform", "export")
    assert verdict(grade(yaml_cfg(PIPELINE), calls(*steps))) == (1.0, True, "pass")
    r = grade(yaml_cfg(PIPELINE), calls("loadData", "validate", "export"))
    assert verdict(r) == (0.5, False, "fail")
    assert "position 2 expected transform, got export" in r.explanation
    assert "missing entry 3 (export)" in r.explanation


PIPELINE_PERF = """
  - name: pipeline-perf
    type: tool_trajectory
    mode: in_order
    expected:
      - tool: loadData
        max_duration_ms: 1000  # Network fetch within 1s
      - tool: validate         # No timing requirement
      - tool: transform
        max_duration_ms: 500   # Transform must be fast
      - tool: export
        max_duration_ms: 200   # Export should be quick
"""


def test_complete_example_pipeline_with_latency_assertions() -> None:
    good = [call("loadData", {}, duration_ms=800), call("validate", {}, duration_ms=5000),
            call("transform", {}, duration_ms=499), call("export", {}, duration_ms=200)]
    r = grade(yaml_cfg(PIPELINE_PERF), good)
    assert verdict(r) == (1.0, True, "pass")
    assert r.details["aspects"] == 7
    late = [call("loadData", {}, duration_ms=1500), call("validate", {}),
            call("transform", {}, duration_ms=600), call("export", {}, duration_ms=100)]
    r = grade(yaml_cfg(PIPELINE_PERF), late)
    assert verdict(r) == (pytest.approx(5 / 7), False, "fail")
    assert [e.get("latency") for e in r.details["entries"]] == ["miss", None, "miss", "hit"]


# -- the flaws of agentv we must not reproduce (seeds/README.md) -------------------------------

def test_flaw_exact_with_extra_calls_does_not_pass() -> None:
    r = grade(exact("a", "b"), calls("a", "b", "c"))
    assert verdict(r) == (pytest.approx(2 / 3), False, "fail")   # max(2, 3) = 3 aspects
    assert r.details["extra_calls"] == [2]
    assert "1 extra call(s) at #2" in r.explanation


def test_flaw_in_order_missing_tool_does_not_consume_the_rest() -> None:
    r = grade(in_order("search", "analyze", "report"), calls("search", "report"))
    assert r.score == pytest.approx(2 / 3)
    assert [e["call"] for e in r.details["entries"]] == [0, None, 1]
    assert "no in-order match for entry 1 (analyze)" in r.explanation


def test_flaw_name_instead_of_tool_is_a_load_time_error() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(in_order({"name": "search"}))
    message = str(info.value)
    assert "graders[0].expected[0].name: unknown key; an expected call names its tool " \
           "with 'tool:'" in message
    assert "graders[0].expected[0].tool: required key is missing" in message


def test_flaw_default_argument_match_is_partial_not_two_way_equality() -> None:
    config = in_order({"tool": "search", "args": {"query": "x"}})
    assert grade(config, [call("search", {"query": "x", "limit": 5, "lang": "en"})]).passed


# -- argument matching (SEMANTICS 3) ------------------------------------------------------------

@pytest.mark.parametrize(("expected", "actual", "same"), [
    ({"n": 10}, {"n": "10"}, False),               # no coercion from text
    ({"n": "10"}, {"n": 10}, False),
    ({"f": True}, {"f": 1}, False),                # true is not 1
    ({"f": 1}, {"f": True}, False),
    ({"f": False}, {"f": 0}, False),
    ({"n": 1}, {"n": 1.0}, True),                  # but 1 == 1.0
    ({"n": 1.0}, {"n": 1}, True),
    ({"f": True}, {"f": True}, True),
    ({"x": None}, {"x": None}, True),
    ({"x": None}, {}, False),                      # a given key must be present
    ({"x": None}, {"x": 0}, False),
    ({"o": {"a": 1}}, {"o": {"a": 1, "b": 2}}, True),   # nested objects are partial
    ({"o": {"a": 1, "c": 3}}, {"o": {"a": 1, "b": 2}}, False),
    ({"l": [1, 2]}, {"l": [1, 2]}, True),
    ({"l": [1, 2]}, {"l": [1, 2, 3]}, False),      # lists need equal length
    ({"l": [2, 1]}, {"l": [1, 2]}, False),         # element by element
    ({"l": [{"a": 1}]}, {"l": [{"a": 1, "b": 2}]}, True),   # objects in lists partial too
    ({"l": []}, {"l": {}}, False),
    ({"o": {}}, {"o": []}, False),
    ({}, {"anything": 1}, True),
    ({"s": "A"}, {"s": "a"}, False),
])
def test_partial_deep_match(expected: Any, actual: Any, same: bool) -> None:
    assert args_match(expected, actual) is same
    # and the same through a real run, arguments recorded as JSON text on the span
    r = grade(in_order({"tool": "t", "args": expected}), [call("t", actual)])
    assert r.passed is same


def test_args_any_and_absent_args_match_any_arguments() -> None:
    for spec in ({"tool": "t", "args": "any"}, {"tool": "t"}):
        config = in_order(spec)
        assert grade(config, [call("t", "not json at all")]).passed
        assert grade(config, [call("t")]).passed
        assert grade(config, [call("t", [1, 2])]).passed


def test_args_mapping_needs_object_arguments_and_no_recorded_arguments_are_empty() -> None:
    assert not grade(in_order({"tool": "t", "args": {"q": "x"}}), [call("t", "q=x")]).passed
    assert not grade(in_order({"tool": "t", "args": {}}), [call("t", "text")]).passed
    assert grade(in_order({"tool": "t", "args": {}}), [call("t")]).passed
    assert not grade(in_order({"tool": "t", "args": {"q": None}}), [call("t")]).passed


def test_python_literal_arguments_are_decoded_before_matching() -> None:
    config = in_order({"tool": "t", "args": {"q": "x", "n": 2}})
    assert grade(config, [call("t", "{'q': 'x', 'n': 2, 'z': None}")]).passed


def test_tool_names_are_exact_and_case_sensitive() -> None:
    assert not grade(in_order("search"), calls("Search")).passed
    assert not grade(in_order("search"), calls("web_search")).passed
    assert not grade(in_order("web_search"), calls("mcp__brave__web_search")).passed
    assert not grade(exact("search"), calls("Search")).passed
    assert not grade(entry("any_order", minimums={"search": 1}), calls("SEARCH")).passed


# -- in_order: the largest in-order matching, best score among those --------------------------

def test_in_order_is_not_a_greedy_scan_even_one_that_skips_missing_tools() -> None:
    # greedy would take x at #2 and find nothing after it: 1 of 3
    r = grade(in_order("x", "a", "b"), calls("a", "b", "x"))
    assert r.score == pytest.approx(2 / 3)
    assert [e["call"] for e in r.details["entries"]] == [None, 0, 1]


def test_in_order_args_mismatch_is_skipped_for_a_later_matching_call() -> None:
    config = in_order({"tool": "s", "args": {"q": "b"}}, "r")
    r = grade(config, [call("s", {"q": "a"}), call("s", {"q": "b"}), call("r", {})])
    assert r.passed and [e["call"] for e in r.details["entries"]] == [1, 2]


def test_in_order_repeated_entries_need_distinct_calls() -> None:
    assert grade(in_order("poll", "poll"), calls("poll", "x", "poll")).passed
    assert grade(in_order("poll", "poll"), calls("poll")).score == 0.5
    # among equal matchings, the earliest calls are reported
    r = grade(in_order("poll", "poll"), calls("poll", "poll", "x", "poll"))
    assert [e["call"] for e in r.details["entries"]] == [0, 1]


def test_in_order_among_largest_matchings_the_fast_call_counts() -> None:
    config = in_order({"tool": "a", "max_duration_ms": 100}, "b")
    r = grade(config, [call("a", {}, duration_ms=500), call("a", {}, duration_ms=50),
                       call("b", {})])
    assert verdict(r) == (1.0, True, "pass")
    assert r.details["entries"][0]["call"] == 1


def test_in_order_more_hits_win_over_a_better_latency() -> None:
    # Matching the fast a (#2) would lose b: 2 hits and a latency miss beat 1 hit and a hit.
    config = in_order({"tool": "a", "max_duration_ms": 100}, "b")
    r = grade(config, [call("a", {}, duration_ms=500), call("b", {}),
                       call("a", {}, duration_ms=5)])
    assert r.details["hits"] == 2 and r.details["entries"][0]["call"] == 0
    assert r.score == pytest.approx(2 / 3)


def test_in_order_pending_call_is_matched_and_its_latency_is_neutral() -> None:
    config = in_order({"tool": "a", "max_duration_ms": 100}, "b")
    r = grade(config, [call("b", {}), call("a", {}, pending=True)])
    # a matched (pending counts for the sequence); b before it cannot follow
    assert r.details["hits"] == 1
    assert r.details["entries"][0]["latency"] == "neutral"
    assert r.details["aspects"] == 2                # 2 entries + 1 latency - 1 neutral
    assert r.score == 0.5
    assert "latency check(s) left out" in r.explanation


def test_in_order_prefers_a_neutral_pending_call_over_a_slow_one() -> None:
    config = in_order({"tool": "a", "max_duration_ms": 100})
    r = grade(config, [call("a", {}, duration_ms=500), call("a", {}, pending=True)])
    assert r.details["entries"][0]["call"] == 1
    assert verdict(r) == (1.0, True, "pass")


_RACE = [call("a", {}, duration_ms=500), call("b", {}, pending=True),
         call("b", {}, pending=True), call("a", {}, duration_ms=5),
         call("b", {}, duration_ms=500), call("b", {}, duration_ms=500)]


def test_in_order_two_neutral_aspects_can_beat_one_latency_hit() -> None:
    # X: a fast (#3), b slow, b slow: (3 + 1) / 6.  Y: a slow (#0), b and b pending: 3 / 4.
    lat = {"max_duration_ms": 100}
    r = grade(in_order({"tool": "a", **lat}, {"tool": "b", **lat}, {"tool": "b", **lat}), _RACE)
    assert r.score == 0.75
    assert [e["call"] for e in r.details["entries"]] == [0, 1, 2]


def test_in_order_one_latency_hit_can_beat_two_neutral_aspects() -> None:
    # Two more expected tools never called lower the ratio: X (3 + 1) / 9 beats Y 3 / 7.
    lat = {"max_duration_ms": 100}
    config = in_order({"tool": "a", **lat}, {"tool": "b", **lat}, {"tool": "b", **lat},
                      {"tool": "z", **lat}, "y")
    r = grade(config, _RACE)
    assert r.score == pytest.approx(4 / 9)
    assert [e["call"] for e in r.details["entries"]] == [3, 4, 5, None, None]


def _brute_force_in_order(config: dict[str, Any], script: Sequence[dict[str, Any]]
                          ) -> tuple[int, Fraction]:
    """(hits, score) of the best largest matching, by enumerating every in-order matching."""
    expected = config["graders"][0]["expected"]
    limits = [e.get("max_duration_ms") for e in expected]
    latency_aspects = sum(1 for x in limits if x is not None)
    best: tuple[int, Fraction] = (-1, Fraction(-1))
    for k in range(min(len(expected), len(script)) + 1):
        for entries in itertools.combinations(range(len(expected)), k):
            for positions in itertools.combinations(range(len(script)), k):
                if any(expected[i]["tool"] != script[j]["name"]
                       for i, j in zip(entries, positions)):
                    continue
                lat_hits = neutral = 0
                for i, j in zip(entries, positions):
                    if limits[i] is None:
                        continue
                    if script[j]["pending"]:
                        neutral += 1
                    elif (script[j]["duration_ms"] or 1e-5) <= limits[i]:
                        lat_hits += 1
                score = Fraction(k + lat_hits, len(expected) + latency_aspects - neutral)
                best = max(best, (k, score))
    return best


def test_in_order_matches_brute_force_on_random_runs() -> None:
    rng = random.Random(20240607)
    for _ in range(300):
        expected = [{"tool": rng.choice("abc")} for _ in range(rng.randint(1, 4))]
        for e in expected:
            if rng.random() < 0.6:
                e["max_duration_ms"] = 100
        script = [call(rng.choice("abcd"), {}, pending=rng.random() < 0.25,
                       duration_ms=rng.choice([10, 200])) for _ in range(rng.randint(0, 6))]
        config = entry("in_order", expected=expected)
        r = grade(config, script)
        hits, score = _brute_force_in_order(config, script)
        assert r.details["hits"] == hits, (expected, script)
        assert r.score == pytest.approx(float(score)), (expected, script)


def test_in_order_on_a_long_run_finds_the_sparse_sequence() -> None:
    script = [call(f"noise{i % 7}", {"i": i}) for i in range(3000)]
    for pos, name in ((10, "fetch"), (1500, "check"), (2990, "save")):
        script[pos] = call(name, {"i": pos})
    r = grade(in_order("fetch", "check", "save", "never"), script)
    assert r.details["hits"] == 3 and r.score == 0.75
    assert [e["call"] for e in r.details["entries"]] == [10, 1500, 2990, None]


# -- exact ------------------------------------------------------------------------------------

def test_exact_missing_calls_count_against_the_score() -> None:
    r = grade(exact("a", "b", "c"), calls("a"))
    assert verdict(r) == (pytest.approx(1 / 3), False, "fail")
    assert "missing entry 1 (b), entry 2 (c)" in r.explanation


def test_exact_is_position_by_position_and_args_count() -> None:
    config = exact("a", {"tool": "b", "args": {"k": 1}})
    assert grade(config, [call("a", {}), call("b", {"k": 1, "z": 0})]).passed
    r = grade(config, [call("a", {}), call("b", {"k": 2})])
    assert r.score == 0.5 and "position 1 expected b with args, got b with other args" \
        in r.explanation
    # an extra call at the front shifts everything
    assert grade(config, [call("x", {}), call("a", {}), call("b", {"k": 1})]).score == 0.0


def test_exact_denominator_is_max_of_expected_and_actual_plus_latency() -> None:
    config = exact({"tool": "a", "max_duration_ms": 100}, "b")
    r = grade(config, [call("a", {}, duration_ms=50), call("b", {}), call("c", {}),
                       call("d", {})])
    assert r.details["aspects"] == 5
    assert r.score == pytest.approx(3 / 5)


def test_exact_pending_call_counts_in_place_with_neutral_latency() -> None:
    config = exact("a", {"tool": "b", "max_duration_ms": 100})
    r = grade(config, [call("a", {}), call("b", {}, pending=True)])
    assert verdict(r) == (1.0, True, "pass")
    assert r.details["latency"]["neutral"] == 1 and r.details["aspects"] == 2


# -- any_order and pending calls ---------------------------------------------------------------

def test_any_order_minimums_count_completed_calls_only() -> None:
    config = entry("any_order", minimums={"deploy": 2})
    r = grade(config, [call("deploy", {}), call("deploy", {}, pending=True)])
    assert verdict(r) == (0.0, False, "fail")
    assert r.details["tools"][0]["pending"] == 1 and r.details["tools"][0]["count"] == 1
    assert grade(config, [call("deploy", {}), call("deploy", {}, error="boom")]).passed


# -- threshold ----------------------------------------------------------------------------------

def test_threshold_sets_the_pass_mark() -> None:
    config = in_order("a", "b", "c", threshold=0.6)
    r = grade(config, calls("a", "b"))
    assert verdict(r) == (pytest.approx(2 / 3), True, "pass")
    assert "threshold 0.6" in r.explanation
    r = grade(in_order("a", "b", "c", threshold=0.7), calls("a", "b"))
    assert verdict(r) == (pytest.approx(2 / 3), False, "fail")
    r = grade(entry("any_order", minimums={"a": 1, "b": 1}, threshold=0.5), calls("a"))
    assert r.passed and r.details["threshold"] == 0.5


def test_alias_and_yaml_threshold() -> None:
    r = grade(yaml_cfg("""
  - type: tool-trajectory
    mode: exact
    threshold: 0.5
    expected:
      - tool: a
      - tool: b
"""), calls("a", "x"))
    assert verdict(r) == (0.5, True, "pass") and r.type == "tool_trajectory"


# -- values stay out of explanations ----------------------------------------------------------

SECRET = "hunter2-SECRET"


def test_explanations_and_details_carry_no_values_by_default() -> None:
    config = exact({"tool": "login", "args": {"password": SECRET}}, "read")
    r = grade(config, [call("login", {"password": SECRET + "x"}, SECRET),
                       call("read", {"token": SECRET}, SECRET), call("x", {"k": SECRET})])
    assert SECRET not in r.explanation
    assert SECRET not in json.dumps(r.to_dict())
    r = grade(in_order({"tool": "login", "args": {"password": SECRET}}),
              [call("login", {"password": "other"}, SECRET)])
    assert SECRET not in json.dumps(r.to_dict())


def test_include_values_puts_arguments_in_details() -> None:
    config = in_order({"tool": "login", "args": {"user": "ann"}})
    config["emit"] = {"include_values": True}
    r = grade(config, [call("login", {"user": "ann", "pw": "x"})])
    assert r.details["entries"][0]["expected_args"] == {"user": "ann"}
    assert r.details["entries"][0]["arguments"] == {"user": "ann", "pw": "x"}


# -- load-time errors name the field ----------------------------------------------------------

@pytest.mark.parametrize(("config", "where", "words"), [
    (in_order({"name": "search"}), "graders[0].expected[0].name", "'tool:'"),
    (in_order({"tool": "a"}, {"tol": "b"}), "graders[0].expected[1].tol", "unknown key"),
    (entry("in_ordr", expected=[{"tool": "a"}]), "graders[0].mode",
     "'any_order', 'in_order' or 'exact'"),
    ({"graders": [{"type": "tool_trajectory", "expected": [{"tool": "a"}]}]},
     "graders[0].mode", "required key is missing"),
    (entry("in_order"), "graders[0].expected", "in_order mode needs a list of expected calls"),
    (entry("exact"), "graders[0].expected", "exact mode needs a list of expected calls"),
    (entry("exact", expected=[]), "graders[0].expected", "at least one expected call"),
    (entry("exact", expected={"tool": "a"}), "graders[0].expected", "valid list"),
    (entry("in_order", expected=["search"]), "graders[0].expected[0]",
     "must be a mapping with a 'tool' key"),
    (entry("any_order"), "graders[0].minimums", "any_order mode needs minimum counts"),
    (entry("any_order", minimums={}), "graders[0].minimums", "at least one tool"),
    (entry("any_order", minimums={"a": 1}, expected=[{"tool": "a"}]), "graders[0].expected",
     "only used by in_order and exact"),
    (entry("in_order", expected=[{"tool": "a"}], minimums={"a": 1}), "graders[0].minimums",
     "only used by any_order"),
    (entry("any_order", minimums={"a": 0}), "graders[0].minimums.a", "greater than or equal to 1"),
    (entry("any_order", minimums={"a": True}), "graders[0].minimums.a", "valid integer"),
    (entry("any_order", minimums={"a": "2"}), "graders[0].minimums.a", "valid integer"),
    (entry("any_order", minimums=["a"]), "graders[0].minimums", "valid dictionary"),
    (in_order({"tool": ""}), "graders[0].expected[0].tool", "at least 1 character"),
    (in_order({"tool": 5}), "graders[0].expected[0].tool", "valid string"),
    (in_order({"tool": "a", "args": "all"}), "graders[0].expected[0].args", "the word 'any'"),
    (in_order({"tool": "a", "args": None}), "graders[0].expected[0].args", "the word 'any'"),
    (in_order({"tool": "a", "args": ["q"]}), "graders[0].expected[0].args", "the word 'any'"),
    (in_order({"tool": "a", "args": {1: "x"}}), "graders[0].expected[0].args",
     "keys must be strings"),
    (in_order({"tool": "a", "args": {"q": float("nan")}}), "graders[0].expected[0].args",
     "at q: nan is not a JSON number"),
    (in_order({"tool": "a", "max_duration_ms": -1}), "graders[0].expected[0].max_duration_ms",
     "greater than or equal to 0"),
    (in_order({"tool": "a", "max_duration_ms": "100"}),
     "graders[0].expected[0].max_duration_ms", "valid number"),
    (in_order({"tool": "a", "max_duration_ms": True}),
     "graders[0].expected[0].max_duration_ms", "valid number"),
    (in_order("a", threshold=1.5), "graders[0].threshold", "less than or equal to 1"),
    (in_order("a", threshold="0.5"), "graders[0].threshold", "valid number"),
    (in_order("a", weight=2), "graders[0].weight", "unknown key"),
    (in_order("a", config={"threshold": 0.5}), "graders[0].config", "unknown key"),
])
def test_load_time_errors_name_the_field(config: object, where: str, words: str) -> None:
    assert_config_error(config, where, words)


def test_yaml_date_in_args_is_a_load_time_error_naming_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(yaml_cfg("""
  - type: tool_trajectory
    mode: in_order
    expected:
      - tool: report
        args: {range: {since: 2024-01-15}}
"""))
    assert "graders[0].expected[0].args: at range.since: YAML read this as a date; quote it" \
        in str(info.value)
    # quoted, it is text and matches the text the tool received
    config = yaml_cfg("""
  - type: tool_trajectory
    mode: in_order
    expected:
      - tool: report
        args: {range: {since: "2024-01-15"}}
""")
    assert grade(config, [call("report", {"range": {"since": "2024-01-15"}})]).passed


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(in_order({"name": "a"}, {"tool": "b", "max_duration_ms": -5}))
    assert len(info.value.problems) == 3


def test_schema_describes_an_entry() -> None:
    from otel_tooleval.graders.registry import family_for

    family = family_for("tool-trajectory")
    assert family is not None and family.type == "tool_trajectory" and family.schema is not None
    schema = family.schema()
    assert schema["properties"]["type"] == {"enum": ["tool_trajectory", "tool-trajectory"]}
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"type", "mode", "minimums", "expected", "threshold"}
    jsonschema = pytest.importorskip("jsonschema")
    from otel_tooleval.schema import entry_schema

    defs: dict[str, Any] = {}
    full = entry_schema(family, defs)
    assert full is not None
    validator = jsonschema.Draft202012Validator({**full, "$defs": defs})
    good = {"type": "tool_trajectory", "name": "x", "mode": "in_order",
            "expected": [{"tool": "a", "args": "any", "max_duration_ms": 5}]}
    assert not list(validator.iter_errors(good))
    for bad in ({**good, "expected": [{"name": "a"}]}, {**good, "mode": "any_order"},
                {"type": "tool_trajectory", "mode": "exact"}):
        assert list(validator.iter_errors(bad)), bad


def test_every_yaml_example_in_the_docs_loads_and_grades() -> None:
    from pathlib import Path

    doc = Path(__file__).resolve().parents[1] / "docs" / "graders" / "tool_trajectory.md"
    blocks = doc.read_text(encoding="utf-8").split("```yaml\n")[1:]
    assert len(blocks) == 3
    script = [call("search", {"query": "machine learning"}), call("process", {}),
              call("saveResults", {}, duration_ms=5), call("knowledgeSearch", {}),
              call("knowledgeSearch", {}), call("documentRetrieve", {})]
    scores = [grade(block.split("```")[0], script).score for block in blocks]
    assert scores == [1.0, 1.0, 0.0]


def test_settled_fast_path_agrees_with_the_pareto_fronts() -> None:
    """Without pending calls the integer DP must choose as well as the general one."""
    import random

    from otel_tooleval.graders import in_order as tt

    rng = random.Random(5)
    tools = ["a", "b", "c"]
    for _ in range(300):
        entries = [tt._Entry(i, rng.choice(tools), None, rng.choice([None, 5.0, 50.0]))
                   for i in range(rng.randrange(1, 6))]
        run = run_of([call(rng.choice(tools), {}, "ok", duration_ms=rng.choice([1, 10, 100]))
                      for _ in range(rng.randrange(0, 12))])
        by_tool: dict[str, list[tt._Entry]] = {}
        for e in entries:
            by_tool.setdefault(e.tool, []).append(e)
        fast = tt._in_order_settled(entries, run.calls, by_tool)
        full = tt._in_order_fronts(entries, run.calls, by_tool)

        def score(m: dict[int, object], entries: list[tt._Entry] = entries
                  ) -> tuple[int, int]:
            return (len(m), sum(e.latency(m[e.index])[1] for e in entries if e.index in m))

        assert score(fast) == score(full)


def test_args_match_on_other_mappings_and_string_types() -> None:
    from types import MappingProxyType

    class Text(str):
        pass

    assert args_match({"a": "x"}, MappingProxyType({"a": "x", "b": 1}))
    assert not args_match({"a": "x"}, MappingProxyType({"a": "y"}))
    assert args_match(MappingProxyType({"a": 1}), {"a": 1.0})
    assert args_match({"a": "x"}, {"a": Text("x")}) and args_match(Text("x"), "x")
    assert not args_match({"a": "true"}, {"a": True}) and not args_match({"a": "1"}, {"a": 1})
    assert not args_match({"a": "x"}, ["a"]) and not args_match("x", None)


@pytest.mark.parametrize("mode", ["exact", "in_order"])
def test_a_call_lasting_exactly_max_duration_ms_meets_its_limit(mode: str) -> None:
    # "at most that long": 100 ms against a 100 ms limit is a latency hit, 100.001 ms is not.
    config = entry(mode, expected=[{"tool": "a", "max_duration_ms": 100}])
    r = grade(config, [call("a", {}, duration_ms=100)])
    assert verdict(r) == (1.0, True, "pass")
    assert r.details["entries"][0]["latency"] == "hit"
    r = grade(config, [call("a", {}, duration_ms=100.001)])
    assert r.score == 0.5 and not r.passed
