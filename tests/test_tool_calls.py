"""The ``tool-calls`` grader: every example of seeds/tool-calls.txt and the rules of SEMANTICS 3."""

from __future__ import annotations

from typing import Any

import pytest

from otel_tooleval import ConfigError, load_config
from otel_tooleval.graders import tool_calls
from otel_tooleval.graders.matching import grading_limits
from tests.support.errors import assert_config_error
from tests.support.runs import call, grade, run_of


def cfg(**config: object) -> dict[str, object]:
    return {"graders": [{"type": "tool-calls", "config": config}]}


def yaml_cfg(body: str) -> str:
    return "graders:\n" + body


# -- the page's top-level sample -----------------------------------------------------------------

PAGE_SAMPLE = """
- type: tool-calls
  config:
    required:
      - create
      - name: bash
        command: "npm test"
    disallowed:
      - name: view
        path: "secret\\\\.env$"
    sequence:
      - name: validate
      - name: create
"""


def test_page_sample_passes_when_all_checks_hold() -> None:
    r = grade(yaml_cfg(PAGE_SAMPLE), [
        call("validate", {"file": "a"}),
        call("create", {"path": "a.ts"}),
        call("bash", {"command": "npm test -- --ci"}, "ok"),
        call("view", {"path": "README.md"}),
    ])
    assert (r.passed, r.score, r.label) == (True, 1.0, "pass")
    checks = r.details["checks"]
    assert [c["check"] for c in checks] == ["required", "required", "disallowed", "sequence"]
    assert checks[3]["calls"] == [0, 1]


def test_page_sample_scores_the_fraction_of_checks() -> None:
    r = grade(yaml_cfg(PAGE_SAMPLE), [
        call("create", {"path": "a"}),          # create before validate: sequence broken
        call("view", {"path": "/x/secret.env"}),  # disallowed
        call("validate", {}),
    ])
    # required create holds; required bash fails; disallowed fails; sequence fails.
    assert r.passed is False
    assert r.score == pytest.approx(1 / 4)
    assert "disallowed 'view (with path)' called at #1 (view)" in r.explanation


# -- one test per documented example ------------------------------------------------------------

def test_required_plain_string_is_an_unanchored_name_regex() -> None:
    config = cfg(required=["create"])
    assert grade(config, [call("create_file", {})]).passed
    assert grade(config, [call("recreate", {})]).passed
    assert not grade(config, [call("delete", {})]).passed
    assert not grade(config, []).passed


def test_required_command() -> None:
    config = cfg(required=[{"name": "bash", "command": "npm test"}])
    assert grade(config, [call("bash", {"command": "cd app && npm test"})]).passed
    assert not grade(config, [call("bash", {"command": "npm run lint"})]).passed


def test_required_alternation_anchored() -> None:
    config = cfg(required=[{"name": "^(bash|powershell)$"}])
    assert grade(config, [call("powershell", {})]).passed
    assert grade(config, [call("bash", {})]).passed
    assert not grade(config, [call("bash_exec", {})]).passed


def test_disallowed_path() -> None:
    config = cfg(disallowed=[{"name": "view", "path": "\\.env$"}])
    assert grade(config, [call("view", {"path": "src/app.ts"})]).passed
    r = grade(config, [call("view", {"path": "src/app.ts"}), call("view", {"path": "/srv/.env"})])
    assert not r.passed and r.details["checks"][0]["calls"] == [1]


def test_required_and_disallowed_combined() -> None:
    config = cfg(required=[{"name": "edit", "path": "src/.*\\.ts$"}],
                 disallowed=[{"name": "bash", "command": "rm -rf"}])
    assert grade(config, [call("edit", {"path": "src/a.ts"}),
                          call("bash", {"command": "ls"})]).passed
    r = grade(config, [call("edit", {"path": "src/a.ts"}), call("bash", {"command": "rm -rf /"})])
    assert not r.passed and r.score == 0.5
    r = grade(config, [call("edit", {"path": "docs/a.md"})])
    assert not r.passed and r.score == 0.5


def test_sequence_validate_before_mutate() -> None:
    config = cfg(sequence=[{"name": "^validate_.*"}, {"name": "^(create|update)_.*"}])
    assert grade(config, [call("validate_input", {}), call("read", {}),
                          call("update_record", {})]).passed
    r = grade(config, [call("create_record", {}), call("validate_input", {})])
    assert not r.passed
    assert r.details["checks"][0]["matched_entries"] == 1


def test_before_step() -> None:
    config = cfg(required=[{"name": "^load_skill$", "before_step": 3}])
    assert grade(config, [call("x", step=0), call("load_skill", {}, step=2)]).passed
    r = grade(config, [call("x", step=0), call("load_skill", {}, step=3)])
    assert not r.passed and "before step 3" in r.explanation


def test_at_step_zero() -> None:
    config = cfg(required=[{"name": "^validate$", "at_step": 0}])
    assert grade(config, [call("validate", {}, step=0)]).passed
    assert not grade(config, [call("x", {}, step=0), call("validate", {}, step=1)]).passed


def test_min_count() -> None:
    config = cfg(required=[{"name": "^upload$", "min_count": 2}])
    assert not grade(config, [call("upload", {})]).passed
    assert grade(config, [call("upload", {}), call("upload", {})]).passed


def test_args_generic_matching() -> None:
    config = cfg(required=[{"name": "^web_search$", "args": {"query": "release notes"}}])
    assert grade(config, [call("web_search", {"query": "v2 release notes"})]).passed
    assert not grade(config, [call("web_search", {"query": "changelog"})]).passed
    # absent argument: a non-match, not an error
    r = grade(config, [call("web_search", {"q": "release notes"})])
    assert (r.passed, r.label) == (False, "fail")


def test_result_matching_on_build_output() -> None:
    config = cfg(required=[{"name": "^bash$", "command": "npm run build",
                            "result": "BUILD SUCCEEDED"}])
    assert grade(config, [call("bash", {"command": "npm run build"}, "... BUILD SUCCEEDED")]).passed
    assert not grade(config, [call("bash", {"command": "npm run build"}, "BUILD FAILED")]).passed


def test_final_call() -> None:
    config = cfg(required=[{"name": "^report_result$", "final": True}])
    assert grade(config, [call("a", {}), call("report_result", {})]).passed
    r = grade(config, [call("report_result", {}), call("a", {})])
    assert not r.passed and "final call is #1 (a)" in r.explanation


def test_final_with_min_count_explains_the_count() -> None:
    config = cfg(required=[{"name": "^r$", "final": True, "min_count": 2}])
    r = grade(config, [call("r", {})])
    assert not r.passed
    assert "needs at least 2 completed calls as the final call, found 1" in r.explanation
    assert grade(config, [call("r", {}), call("r", {})]).passed


# -- rules of the page and of SEMANTICS 3 -------------------------------------------------------

def test_only_string_arguments_are_matchable() -> None:
    config = cfg(required=[{"name": "t", "args": {"n": "1"}}])
    assert not grade(config, [call("t", {"n": 1})]).passed
    assert not grade(config, [call("t", {"n": [1]})]).passed
    assert grade(config, [call("t", {"n": "1"})]).passed


@pytest.mark.parametrize("key", ["command", "path"])
def test_command_or_path_missing_is_a_grading_time_config_error(key: str) -> None:
    config = cfg(required=[{"name": "^bash$", key: "x"}])
    r = grade(config, [call("bash", {"other": "x"})])
    assert (r.label, r.passed, r.score, r.error) == ("error", False, 0.0, "ConfigurationError")
    assert r.name == "tool-calls"           # the grader the report names
    assert r.explanation == (f"matcher '^bash$' filters on {key!r}, but call #0 (bash) has no "
                             f"string {key!r} argument")
    # a non-string value is treated as absent, hence also the error
    r = grade(config, [call("bash", {key: 7})])
    assert r.label == "error"
    # a call whose name does not match never needs the argument
    assert grade(config, [call("python", {}), call("bash", {key: "x"})]).label == "pass"


def test_result_non_string_is_compact_json() -> None:
    config = cfg(required=[{"name": "t", "result": '^\\{"ok":true,"n":\\[1,2\\]\\}$'}])
    assert grade(config, [call("t", {}, {"ok": True, "n": [1, 2]})]).passed


def test_call_without_result_never_matches_result() -> None:
    config = cfg(disallowed=[{"name": "t", "result": ".*"}])
    assert grade(config, [call("t", {})]).passed


def test_repeated_sequence_entries_need_distinct_calls() -> None:
    config = cfg(sequence=["poll", "poll"])
    assert not grade(config, [call("poll", {})]).passed
    assert grade(config, [call("poll", {}), call("x", {}), call("poll", {})]).passed


def test_step_is_where_the_call_was_issued_and_unmarked_runs_are_step_zero() -> None:
    config = cfg(required=[{"name": "t", "at_step": 0}])
    # no model-call spans at all: everything is step 0
    from otel_tooleval.model import SpanRecord
    from otel_tooleval.trajectory import RunPolicy, build_run

    root = SpanRecord(1, 1, 0, "invoke_agent a", 0, 100, {"gen_ai.operation.name": "invoke_agent"})
    tools = [SpanRecord(1, 1 + i, 1, "t", 10 * i, 10 * i + 5, {"gen_ai.tool.name": "t"})
             for i in range(1, 4)]
    run = build_run(root, tools, RunPolicy())
    assert [c.step for c in run.calls] == [0, 0, 0]
    assert load_config(config).graders[0].grader.grade(run).passed


def test_step_is_the_turn_that_issued_the_call_not_where_its_result_arrived() -> None:
    # seeds/tool-calls.txt, "at_step / before_step": "The step is the turn in which the tool was
    # invoked (the tool_call), not where its result arrived."  SEMANTICS 1 "Steps": the last
    # model-call span that started before the call started; calls before any are step 0.
    from otel_tooleval.model import SpanRecord
    from otel_tooleval.trajectory import RunPolicy, build_run

    chat = {"gen_ai.operation.name": "chat"}
    root = SpanRecord(1, 1, 0, "invoke_agent a", 0, 1000, {"gen_ai.operation.name": "invoke_agent"})
    spans = [
        SpanRecord(1, 2, 1, "early", 5, 8, {"gen_ai.tool.name": "early"}),   # before any turn
        SpanRecord(1, 3, 1, "chat", 10, 20, chat),                            # step 0
        # issued in step 0; its result only arrives after step 1's model call started
        SpanRecord(1, 4, 1, "slow", 30, 200, {"gen_ai.tool.name": "slow",
                                              "gen_ai.tool.call.result": "done"}),
        SpanRecord(1, 5, 1, "chat", 100, 110, chat),                          # step 1
        SpanRecord(1, 6, 1, "next", 120, 130, {"gen_ai.tool.name": "next"}),
    ]
    run = build_run(root, spans, RunPolicy())
    assert [(c.name, c.step) for c in run.calls] == [("early", 0), ("slow", 0), ("next", 1)]

    def passes(entry: dict[str, object]) -> bool:
        return load_config(cfg(required=[entry])).graders[0].grader.grade(run).passed

    assert passes({"name": "^slow$", "at_step": 0})
    assert not passes({"name": "^slow$", "at_step": 1})
    assert passes({"name": "^slow$", "before_step": 1})
    assert passes({"name": "^early$", "at_step": 0})
    assert passes({"name": "^next$", "at_step": 1, "before_step": 2})
    assert not passes({"name": "^next$", "before_step": 1})


def test_min_count_counts_completed_calls_only() -> None:
    # SEMANTICS 3 tool-calls: "`min_count` counts completed matching calls" (the page: "at least
    # N matching (completed) calls"); a pending call does not count, a failed one does.
    config = cfg(required=[{"name": "^upload$", "min_count": 2}])
    r = grade(config, [call("upload", {}), call("upload", {}, pending=True)])
    assert (r.passed, r.score) == (False, 0.0)
    assert grade(config, [call("upload", {}), call("upload", {}, error="503")]).passed


def test_args_every_listed_argument_must_be_present_and_match() -> None:
    # seeds/tool-calls.txt: "Every listed argument must be present and match."
    config = cfg(required=[{"name": "^web_search$",
                            "args": {"query": "release notes", "site": "github"}}])
    assert grade(config, [call("web_search", {"query": "release notes", "site": "github.com"})
                          ]).passed
    assert not grade(config, [call("web_search", {"query": "release notes"})]).passed
    assert not grade(config, [call("web_search", {"query": "release notes",
                                                  "site": "gitlab.com"})]).passed


def test_disallowed_is_violated_only_by_calls_matching_its_args_and_result_filters() -> None:
    # seeds/tool-calls.txt: "A disallowed matcher is violated when any tool call matches it
    # (including its args / result filters)."
    config = cfg(disallowed=[{"name": "^http_get$", "args": {"url": "^http://"}},
                             {"name": "^bash$", "result": "Permission denied"}])
    r = grade(config, [call("http_get", {"url": "https://a.example"}),
                       call("bash", {"command": "ls"}, "a b c")])
    assert (r.passed, r.score) == (True, 1.0)
    r = grade(config, [call("http_get", {"url": "https://a.example"}),
                       call("http_get", {"url": "http://b.example"}),
                       call("bash", {"command": "cat /root/x"}, "cat: Permission denied")])
    assert (r.passed, r.score) == (False, 0.0)
    assert [c["calls"] for c in r.details["checks"]] == [[1], [2]]


def test_result_json_keeps_non_ascii_characters() -> None:
    # SEMANTICS 3 tool-calls: non-string results are matched as
    # json.dumps(value, separators=(",", ":"), ensure_ascii=False): no \\u escapes, no spaces.
    config = cfg(required=[{"name": "t", "result": '"city":"Zürich","temp":\\[21,22\\]'}])
    assert grade(config, [call("t", {}, {"city": "Zürich", "temp": [21, 22]})]).passed


def test_pending_calls_count_for_disallowed_not_for_required() -> None:
    config = cfg(required=["deploy"], disallowed=["drop_table"])
    r = grade(config, [call("deploy", {}, pending=True), call("drop_table", {}, pending=True)])
    assert not r.passed and r.score == 0.0
    assert r.details["checks"][1]["calls"] == [1]


def test_final_counts_pending_calls_as_last() -> None:
    config = cfg(required=[{"name": "report", "final": True}])
    assert not grade(config, [call("report", {}), call("cleanup", {}, pending=True)]).passed


def test_sequence_counts_pending_calls() -> None:
    config = cfg(sequence=["a", "b"])
    assert grade(config, [call("a", {}), call("b", {}, pending=True)]).passed


def test_name_matches_whole_recorded_name_including_mcp_prefix() -> None:
    config = cfg(required=["^web_search$"])
    assert not grade(config, [call("mcp__brave__web_search", {})]).passed
    assert grade(cfg(required=["^mcp__brave__web_search$"]),
                 [call("mcp__brave__web_search", {})]).passed


def test_case_sensitive_unless_inline_flag() -> None:
    assert not grade(cfg(required=["Bash"]), [call("bash", {})]).passed
    assert grade(cfg(required=["(?i)Bash"]), [call("bash", {})]).passed


def test_error_status_call_is_completed_with_error_as_result() -> None:
    config = cfg(required=[{"name": "t", "result": "timed out"}])
    assert grade(config, [call("t", {}, error="timed out")]).passed


def test_explanations_carry_no_argument_or_result_values() -> None:
    secret = "hunter2-SECRET"
    config = cfg(required=[{"name": "t", "args": {"q": "zzz"}}], disallowed=["u"])
    r = grade(config, [call("t", {"q": secret}, secret), call("u", {"q": secret}, secret)])
    assert secret not in r.explanation and secret not in repr(r.details)


# -- load-time errors name the field -------------------------------------------------------------

@pytest.mark.parametrize(("config", "where", "words"), [
    (cfg(), "graders[0].config", "at least one of required, disallowed or sequence"),
    ({"graders": [{"type": "tool-calls"}]}, "graders[0].config", "required key is missing"),
    (cfg(disallowed=[{"name": "x", "min_count": 2}]), "graders[0].config.disallowed[0].min_count",
     "only allowed on required"),
    (cfg(disallowed=[{"name": "x", "final": True}]), "graders[0].config.disallowed[0].final",
     "only allowed on required"),
    (cfg(sequence=[{"name": "x", "at_step": 1}]), "graders[0].config.sequence[0].at_step",
     "only allowed on required"),
    (cfg(sequence=[{"name": "x", "before_step": 1}]), "graders[0].config.sequence[0].before_step",
     "only allowed on required"),
    (cfg(sequence=[{"name": "x", "result": "ok"}]), "graders[0].config.sequence[0].result",
     "not supported on sequence"),
    (cfg(required=[{"name": "x", "before_step": 0}]), "graders[0].config.required[0].before_step",
     "greater than or equal to 1"),
    (cfg(required=[{"name": "x", "at_step": 2, "before_step": 2}]),
     "graders[0].config.required[0].at_step", "must be less than before_step"),
    (cfg(required=[{"name": "x", "min_count": 0}]), "graders[0].config.required[0].min_count",
     "greater than or equal to 1"),
    (cfg(required=[{"name": "x", "comand": "typo"}]), "graders[0].config.required[0].comand",
     "unknown key"),
    (cfg(required=[{"name": "("}]), "graders[0].config.required[0].name",
     "invalid regular expression"),
    (cfg(required=[{"name": "x", "args": {"q": "[a"}}]), "graders[0].config.required[0].args",
     "args.q: invalid regular expression"),
    (cfg(required=[{"command": "x"}]), "graders[0].config.required[0].name", "missing"),
    (cfg(required=[{"name": "x", "min_count": True}]),
     "graders[0].config.required[0].min_count", "valid integer"),
    (cfg(required=[{"name": "x", "final": "yes"}]),
     "graders[0].config.required[0].final", "valid boolean"),
    (cfg(disallowed=[{"name": "x", "at_step": 1}]), "graders[0].config.disallowed[0].at_step",
     "only allowed on required"),
    (cfg(disallowed=[{"name": "x", "before_step": 2}]),
     "graders[0].config.disallowed[0].before_step", "only allowed on required"),
    (cfg(sequence=[{"name": "x", "min_count": 2}]), "graders[0].config.sequence[0].min_count",
     "only allowed on required"),
    (cfg(sequence=[{"name": "x", "final": True}]), "graders[0].config.sequence[0].final",
     "only allowed on required"),
    ({"graders": [{"type": "tool-calls", "config": {"required": ["x"]}, "threshold": 1}]},
     "graders[0].threshold", "unknown key"),
])
def test_load_time_errors_name_the_field(config: object, where: str, words: str) -> None:
    assert_config_error(config, where, words)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(cfg(required=[{"name": "x", "min_count": 0}],
                        disallowed=[{"name": "y", "final": True}]))
    assert len(info.value.problems) == 2


# -- name matches remembered across runs ---------------------------------------------------------

def _grader(config: dict[str, object]) -> Any:
    return load_config(config).graders[0].grader


def test_name_matches_are_remembered_per_name_across_runs() -> None:
    grader = _grader(cfg(required=["^create"], disallowed=["delete"],
                         sequence=["create", "delete"]))
    good = run_of([call("create_file", {})])
    bad = run_of([call("create_file", {}), call("delete_file", {})])
    for _ in range(2):   # the second time every name is known
        g, b = grader.grade(good), grader.grade(bad)
        assert (g.passed, g.score) == (False, 2 / 3)     # sequence incomplete
        assert (b.passed, b.score) == (False, 2 / 3)     # delete_file is disallowed
        assert [c["calls"] for c in b.details["checks"]] == [[0], [1], [0, 1]]
    assert set(grader.names) == {"create_file", "delete_file"}


def test_a_name_longer_than_max_match_chars_is_searched_cut_whatever_was_remembered() -> None:
    # Cut to 4 characters, "tool_name_end" is searched as "to" and "nd": "_end$" finds
    # nothing there, though it matches the whole name.
    grader = _grader(cfg(required=["_end$"]))
    run = run_of([call("tool_name_end", {})])
    assert grader.grade(run).passed                  # remembered under the default limit
    with grading_limits(4):
        assert not grader.grade(run).passed
    assert grader.grade(run).passed


def test_names_beyond_the_table_are_searched_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tool_calls, "_MAX_REMEMBERED_NAMES", 1)
    grader = _grader(cfg(required=["^a"]))
    for name, passed in [("alpha", True), ("beta", False), ("apex", True), ("beta", False)]:
        assert grader.grade(run_of([call(name, {})])).passed is passed
    assert list(grader.names) == ["alpha"]


def test_calls_of_several_matching_names_are_in_call_order() -> None:
    r = grade(cfg(required=[{"name": "_file$", "min_count": 3}], disallowed=["_file$"]), [
        call("read_file", {}), call("write_file", {}), call("read_file", {})])
    assert [c["calls"] for c in r.details["checks"]] == [[0, 1, 2], [0, 1, 2]]
    assert "#0 (read_file), #1 (write_file), #2 (read_file)" in r.explanation


def test_schema_takes_lists_of_names_or_matchers_and_no_bare_name() -> None:
    from otel_tooleval.graders.registry import REGISTRY
    from tests.support.errors import assert_schema_agrees

    family = REGISTRY[tool_calls.TYPE]
    assert family.schema is not None
    good = [{"type": "tool-calls", "config": {key: ["validate", {"name": "create"}]}}
            for key in ("required", "disallowed", "sequence")]
    bad = [{"type": "tool-calls", "config": {key: "validate"}}
           for key in ("required", "disallowed", "sequence")]
    assert_schema_agrees(family.schema(), good, bad)


def test_required_check_details_name_their_matcher() -> None:
    r = grade(cfg(required=["validate"]), [call("validate", {})])
    (check,) = r.details["checks"]
    assert (check["check"], check["index"], check["matcher"], check["passed"]) == (
        "required", 0, "validate", True)
