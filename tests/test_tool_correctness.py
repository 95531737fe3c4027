"""``tool_correctness``: DeepEval's ToolCorrectnessMetric, its deterministic part
(PEER-GRADERS.md section 3): the examples, every deliberate difference (with what DeepEval
gives, checked against the real metric when the peers are installed), load-time errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from otel_tooleval import load_config
from otel_tooleval.graders.registry import REGISTRY
from otel_tooleval.graders.tool_correctness import args_similarity
from tests.support.errors import assert_config_error, assert_schema_agrees
from tests.support.harness import Harness
from tests.support.peers import run_peer
from tests.support.runs import call, grade

SCRIPT = Path(__file__).parent / "data" / "peers" / "deepeval" / "run_peer.py"
MCP = {"mcp.server.name": "brave"}


def tc(expected: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    return {"graders": [{"type": "tool_correctness", "expected_tools": expected, **options}]}


ARGS = ["INPUT_PARAMETERS"]

# -- PEER-GRADERS.md's example ---------------------------------------------------------------------

EXAMPLE = """
graders:
- name: tools-correct
  type: tool_correctness
  threshold: 0.5                      # DeepEval's default
  evaluation_params: [INPUT_PARAMETERS, OUTPUT]   # default []: names only
  should_exact_match: false
  should_consider_ordering: false
  strict_mode: false
  expected_tools:
    - {name: search, input_parameters: {query: hotels}}
"""


def test_the_example_of_peer_graders_md() -> None:
    config = yaml.safe_load(EXAMPLE)
    # OUTPUT without an expected output expects null: a call without a result.
    r = grade(config, [call("search", {"query": "hotels"})])
    assert (r.score, r.passed, r.label) == (1.0, True, "pass")
    assert r.details["pairs"][0]["expected"] == 0 and r.details["pairs"][0]["call"] == 0
    assert len(r.details["pairs"][0]["span_id"]) == 16
    # A result where null was expected scores 0 (DeepEval's behaviour).
    r = grade(config, [call("search", {"query": "hotels"}, "3 hotels")])
    assert (r.score, r.passed) == (0.0, False)
    # Half the arguments right: 0.5, which passes the default threshold.
    r = grade(config, [call("search", {"query": "hotels", "city": "Lisbon"})])
    assert (r.score, r.passed) == (0.5, True)
    assert "partial: 'search' (entry 0) at call #0 scores 0.50" in r.explanation


# -- the rules --------------------------------------------------------------------------------------

def test_names_only_by_default_and_extra_calls_are_free() -> None:
    r = grade(tc([{"name": "search"}, {"name": "fetch"}]),
              [call("fetch", {"x": 1}), call("other"), call("search", {"y": 2})])
    assert r.score == 1.0
    assert [(p["expected"], p["call"]) for p in r.details["pairs"]] == [(0, 2), (1, 0)]
    assert r.details["unpaired_calls"] == [1]


@pytest.mark.parametrize(("expected", "calls", "score"), [
    ([], [], 1.0), ([], [call("a")], 0.0), ([{"name": "a"}], [], 0.0),
])
def test_empty_sides(expected: list[dict[str, Any]], calls: list[dict[str, Any]],
                     score: float) -> None:
    assert grade(tc(expected), calls).score == score


@pytest.mark.parametrize(("a", "b", "similarity"), [
    ({"q": "x"}, {"q": "x"}, 1.0),
    ({"q": "x", "n": 1}, {"q": "x", "n": 2}, 0.5),
    ({"q": "x"}, {"q": "x", "n": 2}, 0.5),              # the union counts
    ({"o": {"a": 1, "b": 2}, "q": "x"}, {"o": {"a": 1, "b": 3}, "q": "x"}, 0.75),  # recursive
    ({"l": [1, 2], "q": "x"}, {"l": [1, 3], "q": "x"}, 0.5),   # lists: all or nothing
    ({}, {"q": "x"}, 0.0), ({"n": 1}, {"n": 1.0}, 1.0), ({"n": 1}, {"n": True}, 0.0),
    ({"o": {"b": 1, "a": 2}}, {"o": {"a": 2, "b": 1}}, 1.0),
])
def test_args_similarity(a: dict[str, Any], b: dict[str, Any], similarity: float) -> None:
    assert args_similarity(a, b) == pytest.approx(similarity)
    assert grade(tc([{"name": "t", "input_parameters": a}], evaluation_params=ARGS),
                 [call("t", b)]).score == pytest.approx(similarity)


def test_call_type_comes_from_the_server_rule() -> None:
    expected = [{"name": "web_search", "type": "MCP"}]
    assert grade(tc(expected), [call("web_search", attrs=MCP)]).score == 1.0
    assert grade(tc(expected), [call("web_search")]).score == 0.0
    # The MCP-client name form yields a server too; the name is kept as recorded.
    assert grade(tc([{"name": "mcp__brave__web_search", "type": "MCP"}]),
                 [call("mcp__brave__web_search")]).score == 1.0
    r = grade(tc([{"name": "web_search"}]), [call("web_search", attrs=MCP)])
    assert r.score == 0.0 and r.details["missing"] == [
        {"expected": 0, "tool": "web_search", "type": "FUNCTION"}]


def test_output_compared_as_values_and_pending_calls_have_no_output() -> None:
    expected = [{"name": "f", "output": {"rows": [1, 2]}}]
    assert grade(tc(expected, evaluation_params=["OUTPUT"]),
                 [call("f", {}, {"rows": [1.0, 2]})]).score == 1.0
    assert grade(tc(expected, evaluation_params=["OUTPUT"]),
                 [call("f", {}, {"rows": [1, 2]}, pending=True)]).score == 0.0
    # Without OUTPUT the result is not looked at.
    assert grade(tc(expected), [call("f", {}, "anything")]).score == 1.0


def test_ordering_is_a_weighted_lcs() -> None:
    config = tc([{"name": "a", "input_parameters": {"x": 1}}, {"name": "b"}, {"name": "a",
                 "input_parameters": {"x": 2}}], evaluation_params=ARGS,
                should_consider_ordering=True)
    r = grade(config, [call("a", {"x": 2}), call("b", {}), call("a", {"x": 1})])
    # Order-preserving, only one full pair fits: a(x:1) at call 2, or b at call 1 (a(x:2)
    # would need a matching call after it).
    assert r.score == pytest.approx(1 / 3)
    assert r.details["mode"] == "ordering"
    r = grade(config, [call("a", {"x": 1}), call("b", {}), call("a", {"x": 2})])
    assert r.score == 1.0


def test_exact_match_position_by_position_wins_over_ordering() -> None:
    config = tc([{"name": "a"}, {"name": "b"}], should_exact_match=True,
                should_consider_ordering=True)
    assert grade(config, [call("a"), call("b")]).score == 1.0
    r = grade(config, [call("b"), call("a")])
    assert r.score == 0.0 and "call #0 is 'b' where 'a' (entry 0) was expected" in r.explanation
    assert grade(config, [call("a"), call("b"), call("c")]).score == 0.0
    args = tc([{"name": "a", "input_parameters": {"n": 1}}], should_exact_match=True,
              evaluation_params=ARGS)
    assert grade(args, [call("a", {"n": 1.0})]).score == 1.0
    assert grade(args, [call("a", {"n": 1, "m": 2})]).score == 0.0


def test_an_exact_match_explains_itself_in_the_singular_and_the_plural() -> None:
    one = grade(tc([{"name": "a"}], should_exact_match=True), [call("a")])
    assert one.explanation == "The one call matches the expected tool exactly."
    two = grade(tc([{"name": "a"}, {"name": "b"}], should_exact_match=True),
                [call("a"), call("b")])
    assert two.explanation == ("The 2 calls match the expected tools exactly, position by "
                               "position.")


def test_strict_mode_makes_the_threshold_one_and_lower_scores_zero() -> None:
    config = tc([{"name": "a"}, {"name": "b"}], strict_mode=True, threshold=0.2)
    r = grade(config, [call("a")])
    assert (r.score, r.passed) == (0.0, False)
    assert r.details["threshold"] == 1.0
    assert grade(config, [call("b"), call("a")]).score == 1.0


def test_threshold_decides_passed() -> None:
    r = grade(tc([{"name": "a"}, {"name": "b"}], threshold=0.75), [call("a")])
    assert (r.score, r.passed, r.label) == (0.5, False, "fail")


# -- the deliberate differences (DeepEval's value on the same case, checked below) ------------------

DIFFERENCES: list[tuple[str, dict[str, Any], float, float]] = [
    # First-come pairing: entry 0 takes call 0 (0.5, the first of two equal bests), leaving
    # entry 1 only call 1 (0.5); the assignment gives 0.5 + 1.0.
    ("assignment, not first-come", {
        "params": {"evaluation_params": ARGS},
        "expected": [{"name": "s", "input_parameters": {"q": "x", "n": 1}},
                     {"name": "s", "input_parameters": {"q": "x"}}],
        "called": [{"name": "s", "input_parameters": {"q": "x"}},
                   {"name": "s", "input_parameters": {"q": "x", "n": 2}}]}, 0.5, 0.75),
    # Two identical calls for two identical expected tools: DeepEval counts the calls once.
    ("identical duplicate calls are distinct", {
        "params": {}, "expected": [{"name": "s"}, {"name": "s"}],
        "called": [{"name": "s"}, {"name": "s"}]}, 0.5, 1.0),
    # Python's True == 1.
    ("true != 1", {
        "params": {"evaluation_params": ARGS},
        "expected": [{"name": "s", "input_parameters": {"n": 1}}],
        "called": [{"name": "s", "input_parameters": {"n": True}}]}, 1.0, 0.0),
]


def _run_of(case: dict[str, Any]) -> list[dict[str, Any]]:
    return [call(c["name"], c.get("input_parameters") or {}, c.get("output"),
                 attrs=MCP if c.get("type") == "MCP" else None) for c in case["called"]]


@pytest.mark.parametrize(("why", "case", "deepeval", "ours"), DIFFERENCES,
                         ids=[d[0] for d in DIFFERENCES])
def test_deliberate_differences(why: str, case: dict[str, Any], deepeval: float,
                                ours: float) -> None:
    r = grade(tc(case["expected"], **case["params"]), _run_of(case))
    assert r.score == pytest.approx(ours), why


def test_deepeval_really_gives_those_values() -> None:
    verdicts = run_peer(SCRIPT, [case for _, case, _, _ in DIFFERENCES])
    assert [v["score"] for v in verdicts] == pytest.approx([d for _, _, d, _ in DIFFERENCES])


def test_an_expected_tool_without_input_parameters_means_empty_where_deepeval_crashes() -> None:
    case = {"params": {"evaluation_params": ARGS}, "expected": [{"name": "s"}],
            "called": [{"name": "s", "input_parameters": {}}]}
    assert grade(tc(case["expected"], **case["params"]), _run_of(case)).score == 1.0
    assert grade(tc(case["expected"], **case["params"]), [call("s", {"q": 1})]).score == 0.0
    assert run_peer(SCRIPT, [case]) == [{"error": "AttributeError"}]


def test_the_explanation_names_the_really_missed_tools_in_order() -> None:
    r = grade(tc([{"name": "c"}, {"name": "a"}, {"name": "b"}, {"name": "a"}]),
              [call("a"), call("b")])
    assert r.score == 0.5
    assert "missing: 'c' (entry 0), 'a' (entry 3)" in r.explanation
    assert [m["expected"] for m in r.details["missing"]] == [0, 3]


# -- load-time errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("entry", "where", "words"), [
    ({"available_tools": [{"name": "a"}]}, "graders[0].available_tools", "needs an LLM"),
    ({"model": "gpt-4o"}, "graders[0].model", "needs an LLM"),
    ({"evaluation_params": ["INPUT"]}, "graders[0].evaluation_params[0]", "INPUT_PARAMETERS"),
    ({"threshold": 1.5}, "graders[0].threshold", "less than or equal to 1"),
    ({"should_exact_match": "yes"}, "graders[0].should_exact_match", "boolean"),
    ({"expected_tools": [{"name": "a", "type": "function"}]},
     "graders[0].expected_tools[0].type", "FUNCTION"),
    ({"expected_tools": [{"name": "a", "input_params": {}}]},
     "graders[0].expected_tools[0].input_params", "did you mean 'input_parameters'"),
    ({"expected_tools": [{"name": "a", "input_parameters": "q=1"}]},
     "graders[0].expected_tools[0].input_parameters", "dictionary"),
    ({"expected_tools": [{"name": "a", "output": float("nan")}]},
     "graders[0].expected_tools[0].output", "JSON values"),
    ({"expected_tools": [{"name": ""}]}, "graders[0].expected_tools[0].name", "at least 1"),
    ({"strict_mod": True}, "graders[0].strict_mod", "did you mean 'strict_mode'"),
])
def test_load_time_errors_name_the_field(entry: dict[str, Any], where: str, words: str) -> None:
    body = {"type": "tool_correctness", "expected_tools": [{"name": "a"}], **entry}
    assert_config_error({"graders": [body]}, where, words)


def test_expected_tools_is_required() -> None:
    assert_config_error({"graders": [{"type": "tool_correctness"}]},
                        "graders[0].expected_tools", "required")


def test_pasted_enum_members_and_camel_case_are_accepted() -> None:
    cfg = load_config(tc([{"name": "a", "type": "ToolCallType.MCP", "inputParameters": {"x": 1}}],
                         evaluation_params=["ToolCallParams.INPUT_PARAMETERS"]))
    grader = cfg.graders[0].grader
    assert grader.params.expected_tools[0].type == "MCP"      # type: ignore[attr-defined]
    assert grader.use_args                                      # type: ignore[attr-defined]


def test_schema_agrees_with_the_loader() -> None:
    family = REGISTRY["tool_correctness"]
    assert family.schema is not None
    good = [{"type": "tool_correctness", "expected_tools": []},
            {"type": "ToolCorrectnessMetric", "expected_tools": [{"name": "a", "type": "MCP"}],
             "evaluation_params": ["OUTPUT"], "threshold": 0.7}]
    bad = [{"type": "tool_correctness"},
           {"type": "tool_correctness", "expected_tools": [], "available_tools": []},
           {"type": "tool_correctness", "expected_tools": [], "threshold": 2}]
    assert_schema_agrees(family.schema(), good, bad)
    jsonschema.Draft202012Validator.check_schema(family.schema())


def test_check_shows_the_family(tmp_path: Path) -> None:
    path = tmp_path / "graders.yaml"
    path.write_text(EXAMPLE)
    proc = subprocess.run([sys.executable, "-m", "otel_tooleval.cli", "check", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)["graders"][0]
    assert shown["type"] == "tool_correctness"
    assert shown["params"]["evaluation_params"] == ["INPUT_PARAMETERS", "OUTPUT"]


# -- real spans -------------------------------------------------------------------------------------

def test_graded_live_from_sdk_spans() -> None:
    h = Harness(tc([{"name": "search", "input_parameters": {"query": "hotels"}},
                    {"name": "book", "input_parameters": {"id": 7}}],
                   evaluation_params=ARGS, threshold=0.7))
    try:
        with h.agent():
            h.tool("search", {"query": "hotels"})
            h.tool("book", {"id": 7.0})
        assert h.flush()
        (report,) = h.reports
        (result,) = report.results
        assert (result.score, result.passed) == (1.0, True)
        spans = {format(s.context.span_id, "016x") for s in h.by_name("execute_tool book")}
        assert result.details["pairs"][1]["span_id"] in spans
    finally:
        h.close()


def test_a_pathological_block_is_bounded_by_the_grading_budget() -> None:
    # 300 distinct expected calls of one tool against 300 distinct calls of it: the per-run
    # grading budget (limits.grading_budget_ms) ends the grader with label error.
    expected = [{"name": "read", "input_parameters": {"path": f"f{i}", "n": i}}
                for i in range(300)]
    config = {**tc(expected, evaluation_params=ARGS), "limits": {"grading_budget_ms": 1}}
    r = grade(config, [call("read", {"path": f"f{i}", "n": -i}) for i in range(300)])
    assert (r.label, r.passed, r.error) == ("error", False, "budget_exceeded")


def test_ordering_explanations_say_in_order_and_not_matched() -> None:
    config = tc([{"name": "a"}, {"name": "b"}], should_consider_ordering=True)
    assert grade(config, [call("a"), call("b")]).explanation == (
        "All 2 expected tools were matched in order.")
    assert grade(config, [call("b"), call("a")]).explanation == (
        "1 of 2 expected tools were matched in order, score 0.50; not matched: 'b' (entry 1).")


def test_exact_match_with_output_compares_each_result() -> None:
    config = tc([{"name": "f", "output": {"t": 1}}], should_exact_match=True,
                evaluation_params=["OUTPUT"])
    assert grade(config, [call("f", {}, {"t": 1})]).score == 1.0
    r = grade(config, [call("f", {}, {"t": 2})])
    assert r.score == 0.0
    assert r.explanation == ("Not an exact match: call #0 differs in the evaluated params where "
                             "'f' (entry 0) was expected.")


def test_greedy_pairing_is_named_in_details_and_explanation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from otel_tooleval.graders import pairing

    config = tc([{"name": "a", "input_parameters": {"x": 1}},
                 {"name": "a", "input_parameters": {"x": 2}}], evaluation_params=ARGS)
    run = [call("a", {"x": 2}), call("a", {"x": 1})]
    assert grade(config, run).details["assignment"] == "exact"
    monkeypatch.setattr(pairing, "EXACT_CLASS_PAIRS", 1)
    r = grade(config, run)
    assert (r.score, r.details["assignment"]) == (1.0, "greedy")
    assert r.explanation.endswith("(Paired greedily: too many distinct calls of one tool for "
                                  "the exact assignment.)")


def test_details_name_the_mode_and_show_values_only_when_asked() -> None:
    entry = tc([{"name": "a", "input_parameters": {"x": 1}}], evaluation_params=ARGS)
    r = grade(entry, [call("a", {"x": 1})])
    assert r.details["mode"] == "assignment"
    assert "input_parameters" not in r.details["pairs"][0]
    r = grade({**entry, "emit": {"include_values": True}}, [call("a", {"x": 1})])
    assert r.details["pairs"][0]["expected_input_parameters"] == {"x": 1}
    assert r.details["pairs"][0]["input_parameters"] == {"x": 1}


def test_assignment_with_output_pairs_the_call_with_the_expected_result() -> None:
    config = tc([{"name": "f", "output": {"t": 1}}], evaluation_params=["OUTPUT"])
    assert grade(config, [call("f", {}, {"t": 2}), call("f", {}, {"t": 1})]).details[
        "pairs"][0]["call"] == 1


@pytest.mark.parametrize(("calls", "text"), [
    ([], "No tools were expected and none was called."),
    ([call("a")], "No tools were expected, but the run made 1 call(s)."),
])
def test_no_expected_tools_explained_word_for_word(calls: list[Any], text: str) -> None:
    r = grade({"graders": [{"type": "tool_correctness", "expected_tools": []}]}, calls)
    assert r.explanation == text
