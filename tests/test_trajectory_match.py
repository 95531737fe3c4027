"""``trajectory_match``: LangChain agentevals' trajectory match (PEER-GRADERS.md section 1)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from otel_tooleval import grade_run
from otel_tooleval.cli import main
from otel_tooleval.config import load_config_file
from otel_tooleval.graders.registry import REGISTRY
from otel_tooleval.graders.trajectory_args import canonical, max_pairing, rule_of
from otel_tooleval.model import ToolCall
from tests.support.errors import assert_config_error, assert_schema_agrees
from tests.support.harness import Harness
from tests.support.runs import call, grade, run_of

DATA = Path(__file__).parent / "data" / "trajectory_match"


def tm(mode: str = "strict", *, args_mode: str | None = None, **rest: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "trajectory_match", "trajectory_match_mode": mode, **rest}
    if args_mode is not None:
        entry["tool_args_match_mode"] = args_mode
    return {"graders": [entry]}


def refs(*calls: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": n, "args": a} for n, a in calls]


def score(config: dict[str, Any], calls: list[dict[str, Any]]) -> float:
    return grade(config, calls).score


# -- PEER-GRADERS.md's example ---------------------------------------------------------------------

EXAMPLE = """
graders:
- name: booking-flow
  type: trajectory_match
  trajectory_match_mode: unordered        # strict | unordered | subset | superset (default strict)
  tool_args_match_mode: exact             # exact | ignore | subset | superset (default exact)
  tool_args_match_overrides:              # optional, per tool name
    search: [query, filter.city]          # compare only these key paths
    fetch: ignore                         # a mode
    lookup: my_pkg.matchers:same_city     # a callable (output_args, reference_args) -> bool
  reference_tool_calls:                   # or reference_trajectory: OpenAI-style messages
    - {name: search, args: {query: hotels}}
"""


@pytest.fixture
def my_pkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    pkg = tmp_path / "my_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "matchers.py").write_text(
        "def same_city(call_args, reference_args):\n"
        "    return call_args.get('city', '').lower() == reference_args.get('city', '').lower()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("my_pkg", "my_pkg.matchers"):
        sys.modules.pop(name, None)


def test_the_peer_graders_example(my_pkg: None) -> None:
    example = yaml.safe_load(EXAMPLE)
    # search compares query and filter.city only: filter.city absent from both sides is equal
    assert grade(example, [call("search", {"query": "hotels", "page": 2})]).passed
    r = grade(example, [call("search", {"query": "hotels", "filter": {"city": "Lyon"}})])
    assert (r.score, r.passed, r.label) == (0.0, False, "fail")
    # The callable (lookup) and the ignore mode (fetch), through the same entry.
    example["graders"][0]["reference_tool_calls"] = refs(("lookup", {"city": "Lyon"}),
                                                         ("fetch", {"url": "a"}))
    assert grade(example, [call("fetch", {"url": "b"}), call("lookup", {"city": "LYON"})]).passed
    assert not grade(example, [call("fetch", {}), call("lookup", {"city": "Paris"})]).passed


# -- the four modes ---------------------------------------------------------------------------------

def test_superset_every_reference_call_made_extras_free() -> None:
    cfg = tm("superset", reference_tool_calls=refs(("a", {"x": 1}), ("b", {})))
    assert score(cfg, [call("c", {}), call("b", {}), call("a", {"x": 1.0})]) == 1.0
    assert score(cfg, [call("a", {"x": 1})]) == 0.0
    # duplicates need distinct calls
    dup = tm("superset", reference_tool_calls=refs(("a", {}), ("a", {})))
    assert score(dup, [call("a", {})]) == 0.0
    assert score(dup, [call("a", {}), call("a", {})]) == 1.0


def test_subset_is_an_allow_list_with_multiplicity() -> None:
    cfg = tm("subset", reference_tool_calls=refs(("a", {}), ("b", {})))
    assert score(cfg, [call("b", {})]) == 1.0
    assert score(cfg, []) == 1.0
    assert score(cfg, [call("b", {}), call("b", {})]) == 0.0
    r = grade(cfg, [call("a", {}), call("z", {})])
    assert not r.passed
    assert r.details["unpaired_calls"] == [{"call": 1, "tool": "z", "span_id": r.details[
        "unpaired_calls"][0]["span_id"]}]
    assert "#1 ('z') not in the reference" in r.explanation


def test_unordered_is_multiset_equality() -> None:
    cfg = tm("unordered", reference_tool_calls=refs(("a", {}), ("b", {"k": [1, {"z": 2}]})))
    assert score(cfg, [call("b", {"k": [1.0, {"z": 2}]}), call("a", {})]) == 1.0
    assert score(cfg, [call("b", {"k": [1, {"z": 2}]})]) == 0.0
    assert score(cfg, [call("a", {}), call("b", {"k": [1, {"z": 2}]}), call("a", {})]) == 0.0


def test_strict_is_step_by_step_with_parallel_calls_in_any_order() -> None:
    trajectory = [{"role": "user", "content": "go"},
                  {"role": "assistant", "tool_calls": refs(("a", {}), ("b", {}))},
                  {"role": "tool", "content": "x", "tool_call_id": "1"},
                  {"role": "assistant", "tool_calls": refs(("c", {}))},
                  {"role": "assistant", "content": "done"}]
    cfg = tm("strict", reference_trajectory=trajectory)
    assert score(cfg, [call("b", {}, step=0), call("a", {}, step=0), call("c", {}, step=1)]) == 1.0
    # the same calls in other steps
    assert score(cfg, [call("a", {}, step=0), call("b", {}, step=1), call("c", {}, step=2)]) == 0.0
    assert score(cfg, [call("c", {}, step=0), call("a", {}, step=1), call("b", {}, step=1)]) == 0.0
    r = grade(cfg, [call("a", {}, step=0), call("b", {}, step=0)])
    assert not r.passed
    assert "the run has 1 step(s) with tool calls, the reference 2" in r.explanation
    assert [row["step"] for row in r.details["expected"]] == [0, 0, 1]


def test_strict_with_flat_reference_calls_is_one_step_per_call() -> None:
    cfg = tm("strict", reference_tool_calls=refs(("a", {}), ("b", {})))
    assert score(cfg, [call("a", {}, step=0), call("b", {}, step=1)]) == 1.0
    assert score(cfg, [call("a", {}, step=0), call("b", {}, step=0)]) == 0.0
    # Model turns without tool calls between them do not count as steps.
    assert score(cfg, [call("a", {}, step=0), call("b", {}, step=3)]) == 1.0


@pytest.mark.parametrize("mode", ["strict", "unordered", "subset", "superset"])
def test_empty_reference_loads(mode: str) -> None:
    cfg = tm(mode, reference_tool_calls=[])
    assert score(cfg, []) == 1.0
    assert score(cfg, [call("a", {})]) == (1.0 if mode == "superset" else 0.0)


# -- reference shapes -------------------------------------------------------------------------------

def test_reference_trajectory_in_every_shape() -> None:
    openai = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "1", "type": "function",
         "function": {"name": "a", "arguments": json.dumps({"x": {"y": 1}})}}]}
    langchain = {"role": "ai", "tool_calls": [{"name": "a", "args": {"x": {"y": 1}},
                                               "id": "1", "type": "tool_call"}]}
    calls = [call("a", {"x": {"y": 1.0}})]
    for reference in ([openai], {"messages": [openai]}, openai, [langchain],
                      {"messages": [{"role": "user", "content": "hi"}, langchain]}):
        assert score(tm("unordered", reference_trajectory=reference), calls) == 1.0
    flat = tm("unordered", reference_tool_calls=[
        {"function": {"name": "a", "arguments": '{"x": {"y": 1}}'}}])
    assert score(flat, calls) == 1.0


def test_a_call_without_recorded_arguments_has_empty_ones() -> None:
    cfg = tm("unordered", reference_tool_calls=[{"name": "a"}])
    assert score(cfg, [call("a")]) == 1.0
    assert score(cfg, [call("a", {"x": 1})]) == 0.0


# -- args rules ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("args_mode,call_args,passed", [
    ("exact", {"q": "a", "n": 1.0}, True),
    ("exact", {"q": "a"}, False),
    ("ignore", {"anything": True}, True),
    ("subset", {"q": "a"}, True),                     # call args within the reference
    ("subset", {"q": "a", "extra": 1}, False),
    ("superset", {"q": "a", "n": 1, "extra": 1}, True),   # reference args within the call
    ("superset", {"q": "a"}, False),
])
def test_args_modes(args_mode: str, call_args: dict[str, Any], passed: bool) -> None:
    cfg = tm("superset", args_mode=args_mode, reference_tool_calls=refs(("t", {"q": "a", "n": 1})))
    assert grade(cfg, [call("t", call_args)]).passed is passed


def test_key_paths_walk_objects_and_index_lists() -> None:
    ref = refs(("t", {"filter": {"city": "Lyon"}, "items": [{"id": 7}], "q": "x"}))
    cfg = tm("superset", tool_args_match_overrides={"t": ["filter.city", "items.0.id"]},
             reference_tool_calls=ref)
    assert score(cfg, [call("t", {"filter": {"city": "Lyon", "n": 2}, "items": [{"id": 7.0}, 1],
                                  "q": "other"})]) == 1.0
    assert score(cfg, [call("t", {"filter": {"city": "Lyon"}, "items": [{"id": 8}]})]) == 0.0
    # absent on both sides is equal; absent on one side and null on the other is not
    both_absent = tm("superset", tool_args_match_overrides={"t": ["missing.x"]},
                     reference_tool_calls=refs(("t", {})))
    assert score(both_absent, [call("t", {"other": 1})]) == 1.0
    assert score(both_absent, [call("t", {"missing": {"x": None}})]) == 0.0


def test_overrides_win_over_the_default_mode_per_tool() -> None:
    cfg = tm("unordered", args_mode="exact", tool_args_match_overrides={"b": "ignore"},
             reference_tool_calls=refs(("a", {"x": 1}), ("b", {"x": 1})))
    assert score(cfg, [call("a", {"x": 1}), call("b", {"x": 2})]) == 1.0
    assert score(cfg, [call("a", {"x": 2}), call("b", {"x": 1})]) == 0.0


def test_a_callable_from_a_file_beside_the_config(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "seen = []\n"
        "def first_is_call(call_args, reference_args):\n"
        "    seen.append((call_args, reference_args))\n"
        "    return call_args.get('who') == 'call' and reference_args.get('who') == 'ref'\n")
    path = tmp_path / "graders.yaml"
    path.write_text(json.dumps(tm("subset", tool_args_match_overrides={"t": "m.py:first_is_call"},
                                  reference_tool_calls=refs(("t", {"who": "ref"})))))
    cfg = load_config_file(path)
    report = grade_run(run_of([call("t", {"who": "call"})], cfg.policy), cfg)
    assert report is not None and report.results[0].passed


# -- deliberate differences: cases where agentevals goes wrong ---------------------------------------

def test_pairing_is_a_maximum_matching_not_first_come() -> None:
    # agentevals pairs reference {} with the first call {a:1} (superset args), then has only
    # {b:2} left for reference {a:1}: False. Reordering the reference list makes it True.
    cfg = tm("superset", args_mode="superset", reference_tool_calls=refs(("s", {}), ("s", {"a": 1})))
    r = grade(cfg, [call("s", {"a": 1}), call("s", {"b": 2})])
    assert r.passed
    assert [(row["entry"], row["call"]) for row in r.details["expected"]] == [(0, 1), (1, 0)]
    assert all(len(row["span_id"]) == 16 for row in r.details["expected"])


def test_subset_args_keep_their_meaning_in_subset_mode() -> None:
    # agentevals' subset mode swaps the args roles: the reference's args must lie within the
    # call's, so subset args act as superset args there.
    cfg = tm("subset", args_mode="subset", reference_tool_calls=refs(("s", {"a": 1, "b": 2})))
    assert score(cfg, [call("s", {"a": 1})]) == 1.0            # agentevals: 0.0
    assert score(cfg, [call("s", {"a": 1, "b": 2, "c": 3})]) == 0.0   # agentevals: 1.0


def test_unordered_with_superset_args_is_not_collapsed_to_equality() -> None:
    cfg = tm("unordered", args_mode="superset", reference_tool_calls=refs(("s", {"a": 1})))
    assert score(cfg, [call("s", {"a": 1, "b": 2})]) == 1.0     # agentevals: 0.0


def test_callables_always_get_call_args_first(tmp_path: Path) -> None:
    (tmp_path / "order.py").write_text(
        "def call_first(call_args, reference_args):\n"
        "    return 'from_call' in call_args and 'from_ref' in reference_args\n")
    for mode in ("strict", "unordered", "subset", "superset"):
        path = tmp_path / f"{mode}.yaml"
        path.write_text(json.dumps(tm(mode, tool_args_match_overrides={
            "t": "order.py:call_first"}, reference_tool_calls=refs(("t", {"from_ref": 1})))))
        cfg = load_config_file(path)
        report = grade_run(run_of([call("t", {"from_call": 1})], cfg.policy), cfg)
        assert report is not None and report.results[0].passed, mode


def test_key_paths_index_lists_where_agentevals_reads_none() -> None:
    # agentevals reads None for items.0 on both sides (lists are not walked): always equal.
    cfg = tm("superset", tool_args_match_overrides={"t": ["items.0"]},
             reference_tool_calls=refs(("t", {"items": ["a"]})))
    assert score(cfg, [call("t", {"items": ["b"]})]) == 0.0
    assert score(cfg, [call("t", {"items": ["a", "z"]})]) == 1.0


def test_true_is_not_one() -> None:
    cfg = tm("unordered", reference_tool_calls=refs(("t", {"flag": 1})))
    assert score(cfg, [call("t", {"flag": True})]) == 0.0       # agentevals: 1.0 (True == 1)
    assert score(cfg, [call("t", {"flag": 1.0})]) == 1.0


def test_strict_ignores_assistant_turns_without_tool_calls() -> None:
    trajectory = [{"role": "assistant", "content": "thinking"},
                  {"role": "assistant", "tool_calls": refs(("a", {}))},
                  {"role": "assistant", "content": "still thinking", "tool_calls": []},
                  {"role": "assistant", "content": "done"}]
    assert score(tm("strict", reference_trajectory=trajectory), [call("a", {})]) == 1.0


# -- load-time errors name their field ------------------------------------------------------------------

R = refs(("a", {}))


@pytest.mark.parametrize("entry,where,words", [
    ({"trajectory_mode": "strict", "reference_tool_calls": R}, "graders[0].trajectory_mode",
     "did you mean 'trajectory_match_mode'"),
    ({"trajectory_match_mode": "exact", "reference_tool_calls": R},
     "graders[0].trajectory_match_mode", "strict"),
    ({"tool_args_match_mode": "partial", "reference_tool_calls": R},
     "graders[0].tool_args_match_mode", "superset"),
    ({"tool_args_match_overrides": {"a": "supreset"}, "reference_tool_calls": R},
     "graders[0].tool_args_match_overrides.a", "did you mean 'superset'"),
    ({"tool_args_match_overrides": {"a": []}, "reference_tool_calls": R},
     "graders[0].tool_args_match_overrides.a", "empty key-path list"),
    ({"tool_args_match_overrides": {"a": ["x..y"]}, "reference_tool_calls": R},
     "graders[0].tool_args_match_overrides.a", "key path 'x..y'"),
    ({"tool_args_match_overrides": {"a": 3}, "reference_tool_calls": R},
     "graders[0].tool_args_match_overrides.a", "args mode"),
    ({"tool_args_match_overrides": {"a": "no_such_module_x:f"}, "reference_tool_calls": R},
     "graders[0].tool_args_match_overrides.a", "cannot import module"),
    ({"tool_args_match_overrides": {"a": "json:nothing_here"}, "reference_tool_calls": R},
     "graders[0].tool_args_match_overrides.a", "has no attribute"),
    ({"tool_args_match_overrides": {"a": "json:__doc__"}, "reference_tool_calls": R},
     "graders[0].tool_args_match_overrides.a", "not callable"),
    ({"tool_args_match_overrides": {"a": "json:dumps"}, "reference_tool_calls": R},
     "graders[0].tool_args_match_overrides.a", "(call_args, reference_args)"),
    ({"tool_args_match_overrides": {"a": "missing_file.py:f"}, "reference_tool_calls": R},
     "graders[0].tool_args_match_overrides.a", "does not exist"),
    ({}, "graders[0].reference_tool_calls", "reference_trajectory"),
    ({"reference_tool_calls": R, "reference_trajectory": []},
     "graders[0].reference_trajectory", "not both"),
    ({"reference_tool_calls": [{"name": "a", "arguments": {}}]},
     "graders[0].reference_tool_calls[0].arguments", "did you mean 'args'"),
    ({"reference_tool_calls": [{"args": {}}]}, "graders[0].reference_tool_calls[0].name",
     "required"),
    ({"reference_tool_calls": [{"name": "a", "args": "{not json"}]},
     "graders[0].reference_tool_calls[0].args", "JSON"),
    ({"reference_tool_calls": [{"name": "a", "args": [1]}]},
     "graders[0].reference_tool_calls[0].args", "object"),
    ({"reference_tool_calls": [{"function": {"name": "a", "arguments": "[]"}}]},
     "graders[0].reference_tool_calls[0].function.arguments", "object"),
    ({"reference_trajectory": [{"content": "x"}]}, "graders[0].reference_trajectory[0].role",
     "required"),
    ({"reference_trajectory": {"msgs": []}}, "graders[0].reference_trajectory", "messages"),
    ({"reference_trajectory": {"messages": [], "extra": 1}},
     "graders[0].reference_trajectory.extra", "unknown key"),
    ({"reference_trajectory": {"messages": [], "mesages": 1}},
     "graders[0].reference_trajectory.mesages", "unknown key (did you mean 'messages'?)"),
    ({"reference_trajectory": {"messages": "user: hi"}},
     "graders[0].reference_trajectory.messages", "must be a list of messages"),
    ({"reference_tool_calls": [{"name": "", "args": {}}]},
     "graders[0].reference_tool_calls[0].name", "must not be empty"),
    ({"reference_trajectory": [{"role": "assistant", "tool_calls": {"name": "a"}}]},
     "graders[0].reference_trajectory[0].tool_calls", "must be a list"),
    ({"reference_tool_calls": R, "model": "openai:o3-mini"}, "graders[0].model", "needs an LLM"),
    ({"reference_tool_calls": R, "prompt": "..."}, "graders[0].prompt", "needs an LLM"),
    ({"reference_tool_calls": R, "threshold": 0.5}, "graders[0].threshold", "1.0 or 0.0"),
])
def test_load_time_errors(entry: dict[str, Any], where: str, words: str) -> None:
    assert_config_error({"graders": [{"type": "trajectory_match", **entry}]}, where, words)


def test_yaml_dates_in_reference_args_are_refused() -> None:
    import datetime
    assert_config_error({"graders": [{"type": "trajectory_match", "reference_tool_calls": [
        {"name": "a", "args": {"d": datetime.date(2024, 1, 1)}}]}]},
        "graders[0].reference_tool_calls[0].args", "JSON values only")


def test_schema_agrees_with_load_config() -> None:
    schema = REGISTRY["trajectory_match"].schema
    assert schema is not None
    document = schema()
    good = [{"type": "trajectory_match", "reference_tool_calls": R},
            {"type": "trajectory-match", "trajectory_match_mode": "superset",
             "tool_args_match_overrides": {"a": ["x.y"], "b": "ignore", "c": "operator:eq"},
             "reference_trajectory": {"messages": []}}]
    bad = [{"type": "trajectory_match"},
           {"type": "trajectory_match", "reference_tool_calls": R, "bogus": 1},
           {"type": "trajectory_match", "reference_tool_calls": R,
            "tool_args_match_overrides": {"a": []}},
           {"type": "trajectory_match", "reference_tool_calls": R, "reference_trajectory": []},
           {"type": "trajectory_match", "trajectory_match_mode": "loose",
            "reference_tool_calls": R}]
    assert_schema_agrees(document, good, bad)
    jsonschema.Draft202012Validator.check_schema(document)


def test_check_shows_the_grader(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(DATA / "booking.yaml")]) == 0
    doc = json.loads(capsys.readouterr().out)
    first = doc["graders"][0]
    assert first["type"] == "trajectory_match"
    assert first["params"]["tool_args_match_overrides"]["lookup"] == "matchers.py:same_city"
    assert first["params"]["trajectory_match_mode"] == "superset"


# -- real spans ------------------------------------------------------------------------------------

def test_grades_live_sdk_spans_with_parallel_calls() -> None:
    cfg = tm("strict", reference_trajectory=[
        {"role": "assistant", "tool_calls": refs(("lookup", {"city": "Lyon"}),
                                                 ("search", {"q": "h"}))},
        {"role": "assistant", "tool_calls": refs(("book", {"id": 1}))}])
    h = Harness(cfg)
    try:
        with h.agent("booking"):
            with h.tracer.start_as_current_span(
                    "chat m", attributes={"gen_ai.operation.name": "chat"}):
                pass
            for name, args in (("search", {"q": "h"}), ("lookup", {"city": "Lyon"})):
                with h.tracer.start_as_current_span(f"execute_tool {name}", attributes={
                        "gen_ai.tool.name": name, "gen_ai.tool.call.arguments": json.dumps(args)}):
                    pass
            h.tool("book", {"id": 1})
        h.flush()
        (report,) = h.reports
        r = report.results[0]
        assert (r.passed, r.label) == (True, "pass"), r.explanation
        assert {row["tool"]: row["call"] for row in r.details["expected"]} == {
            "lookup": 1, "search": 0, "book": 2}
    finally:
        h.close()


def test_the_recorded_booking_traces_grade_as_documented(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str],
                                                         ) -> None:
    sys.path.insert(0, str(DATA))
    try:
        import record  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(DATA))
    fresh = tmp_path / "traces.otlp.jsonl"
    record.record(fresh)
    for traces in (DATA / "traces.otlp.jsonl", fresh):
        code = main(["grade", str(traces), "-c", str(DATA / "booking.yaml"), "-f", "json"])
        out = json.loads(capsys.readouterr().out)
        assert code == 1
        verdicts = [[r["passed"] for r in run["results"]] for run in out["runs"]]
        assert verdicts == [[True, True], [False, False]]


# -- the pairing -----------------------------------------------------------------------------------

def test_canonical_keys_follow_value_equality() -> None:
    assert canonical({"a": [1, {"b": 2.0}]}) == canonical({"a": [1.0, {"b": 2}]})
    assert canonical(True) != canonical(1)
    assert canonical("1") != canonical(1)
    assert canonical(None) != canonical("z")


def test_max_pairing_groups_identical_entries_and_is_order_free() -> None:
    superset = rule_of("superset")
    refs_ = [("s", {}), ("s", {"a": 1}), ("s", {"a": 1})]
    calls = [ToolCall("s", j, raw_arguments=json.dumps(a))
             for j, a in enumerate([{"a": 1, "b": 1}, {"c": 1}, {"a": 1.0}])]
    paired = max_pairing(refs_, calls, lambda _: superset)
    assert sorted(p for p in paired if p is not None) == [0, 1, 2]
    assert paired[0] == 1
    assert max_pairing(list(reversed(refs_)), calls, lambda _: superset).count(None) == 0


def test_max_pairing_remembers_reference_keys_across_runs() -> None:
    superset, exact = rule_of("superset"), rule_of("exact")
    rules = {"s": superset, "e": exact}
    refs_ = [("s", {"a": 1}), ("e", {"b": [1, 2]}), ("s", {"a": 1})] * 3
    first = [ToolCall("s", 0, raw_arguments='{"a": 1, "z": 0}'),
             ToolCall("e", 1, raw_arguments='{"b": [1, 2.0]}')]
    second = [ToolCall("e", 0, raw_arguments='{"b": [2, 1]}'),
              ToolCall("s", 1, raw_arguments='{"a": 1}'), ToolCall("s", 2, raw_arguments="{}")]
    keys: dict[tuple[str, int], object] = {}
    for calls in (first, second, first):
        assert max_pairing(refs_, calls, rules.__getitem__, keys) == max_pairing(
            refs_, calls, rules.__getitem__)
    assert len(keys) == 3                   # one per distinct args object, computed once
    assert keys[("e", id(refs_[1][1]))] == canonical({"b": [1, 2]})


def test_a_failed_match_explains_each_missing_entry_in_its_mode() -> None:
    ref = refs(("a", {"q": 1}))
    r = grade(tm("strict", args_mode="exact", reference_tool_calls=ref), [call("a", {"q": 2})])
    assert r.explanation == ("No strict match: 1 of 1 reference calls unpaired: 'a' (entry 0, "
                             "step 0): no call of that step left "
                             "with matching args (exact); call(s) #0 ('a') not in the reference "
                             "step.")
    r = grade(tm("superset", args_mode="exact", reference_tool_calls=ref), [call("a", {"q": 2})])
    assert r.explanation == ("No superset match: 1 of 1 reference calls unpaired: 'a' (entry 0): "
                             "no call left with matching args (exact).")


def test_subset_failure_names_the_calls_outside_the_reference_only() -> None:
    # References the run did not make are no problem for a subset: only the extra call is.
    cfg = tm("subset", reference_tool_calls=refs(("a", {}), ("b", {})))
    r = grade(cfg, [call("c", {})])
    assert r.explanation == "No subset match: call(s) #0 ('c') not in the reference."


def test_a_callable_override_is_named_by_its_reference(my_pkg: None) -> None:
    cfg = tm("superset", reference_tool_calls=refs(("lookup", {"city": "Lyon"})),
             tool_args_match_overrides={"lookup": "my_pkg.matchers:same_city"})
    r = grade(cfg, [call("lookup", {"city": "LYON"})])
    assert r.passed
    assert r.details["overrides"] == {"lookup": "my_pkg.matchers:same_city"}


def test_a_strict_failure_lists_three_unpaired_references_and_counts_the_rest() -> None:
    cfg = tm("strict", reference_tool_calls=refs(("a", {}), ("b", {}), ("c", {}), ("d", {})))
    assert grade(cfg, []).explanation == (
        "No strict match: the run has 0 step(s) with tool calls, the reference 4; 4 of 4 "
        "reference calls unpaired: 'a' (entry 0, step 0): the run has no such step; 'b' "
        "(entry 1, step 1): the run has no such step; 'c' (entry 2, step 2): the run has no "
        "such step and 1 more.")


@pytest.mark.parametrize(("entry", "line"), [
    ({"reference_trajectory": {"msgs": []}}, ("graders[0].reference_trajectory: a mapping must "
     "hold 'messages' (or be one message with a 'role')")),
    ({"reference_tool_calls": ["a"]}, ("graders[0].reference_tool_calls[0]: a tool call must "
     "be a mapping: {name, args} or {function: {name, arguments}}")),
    ({"reference_trajectory": ["x"]},
     "graders[0].reference_trajectory[0]: a message must be a mapping with a 'role'"),
])
def test_reference_shape_errors_word_for_word(entry: dict[str, Any], line: str) -> None:
    """The message names the shapes a reference may take: what the user is to write instead."""
    from otel_tooleval import ConfigError, load_config

    with pytest.raises(ConfigError) as info:
        load_config({"graders": [{"type": "trajectory_match", **entry}]})
    assert str(info.value) == f"invalid otel-tooleval config: {line}"


def test_the_ignore_rule_holds_for_any_arguments() -> None:
    rule = rule_of("ignore")
    assert rule.holds({"a": 1}, {"b": 2}) and rule.holds(None, {})
