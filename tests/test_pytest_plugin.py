"""The pytest plugin: the ``tooleval`` fixture, its marker and ini option, run in real sessions.

Each scenario is a small test suite written into a ``pytester`` directory and run in a fresh
``python -m pytest`` process, so the global tracer provider (settable once per process) starts
unset, or set by the scenario's own conftest, exactly as in a user's session.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import textwrap
from pathlib import Path

import pytest

from otel_tooleval.model import AgentRun, GradeResult, RunReport, ToolCall
from otel_tooleval.pytest_plugin import describe_failures

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
MODULE = "otel_tooleval.pytest_plugin"

# Imported by the scenarios' test files (the pytester directory is on their sys.path).
AGENTLIB = '''
from opentelemetry import trace

def run_agent(tracer, agent, tools, **attributes):
    """One agent run in the GenAI conventions: a root invoke_agent span (with ``attributes``
    too) and its tool spans."""
    with tracer.start_as_current_span(
            f"invoke_agent {agent}",
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
                        **attributes}):
        for tool in tools:
            with tracer.start_as_current_span(
                    f"execute_tool {tool}",
                    attributes={"gen_ai.operation.name": "execute_tool",
                                "gen_ai.tool.name": tool}):
                pass
'''

# Passes on lookup → report; "lookup-first" fails without a lookup, "no-delete" on a delete_*.
CONFIG = '''
graders:
  - name: lookup-first
    type: tool-calls
    config:
      required: [{name: "^lookup$", at_step: 0}]
      sequence: [lookup, report]
  - name: no-delete
    type: tool-calls
    config: {disallowed: ["^delete_"]}
'''


def plugin_args() -> list[str]:
    """Load the plugin explicitly, by its entry point's name when the package declares one.

    Loading it by module name as well as through an entry point of another name would register
    it twice, which pytest refuses.
    """
    for ep in importlib.metadata.entry_points(group="pytest11"):
        if ep.value == MODULE:
            return ["-p", ep.name]
    return ["-p", MODULE]


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester directory with the helper module and a clean telemetry environment."""
    for name in list(os.environ):
        if name.startswith("OTEL_") or name == "TOOLEVAL_CONFIG":
            monkeypatch.delenv(name)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT), str(pytester.path), *filter(None, [os.environ.get("PYTHONPATH")])]))
    pytester.makepyfile(agentlib=AGENTLIB)
    (pytester.path / "graders.yaml").write_text(CONFIG)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", "-rA", *args,
                                         timeout=300)


# --------------------------------------------------------------------------- scenarios


def test_a_passing_and_a_failing_test(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_agents='''
        from opentelemetry import trace
        from agentlib import run_agent

        def test_good(tooleval):
            run_agent(trace.get_tracer("app"), "helper", ["lookup", "report"])
            reports = tooleval.assert_passed("graders.yaml", runs=1)
            assert [r.run.agent for r in reports] == ["helper"]

        def test_bad(tooleval):
            run_agent(trace.get_tracer("app"), "helper", ["lookup", "report"])
            run_agent(trace.get_tracer("app"), "rogue", ["report", "delete_all"])
            tooleval.assert_passed("graders.yaml")
    ''')
    result = run(suite)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "E * tooleval: 1 of 2 agent runs failed",
        "E * run 1 of 2 passed: agent 'helper', trace *, 2 tool calls (lookup, report)",
        "E * run 2 of 2 FAILED: agent 'rogue', trace *, 2 tool calls (report, delete_all)",
        ("E * - lookup-first [[]tool-calls[]] fail, score 0.00: 2 of 2 checks failed: required"
        " '^lookup$' needs a completed call in step 0, found 0; sequence broken at entry 0"
        " ('lookup'): no matching call."),
        ("E * - no-delete [[]tool-calls[]] fail, score 0.00: Disallowed '^delete_' called at #1"
        " (delete_all)."),
    ])
    # Only failing graders are listed, and the test's own traceback, not the plugin's.
    assert "- lookup-first" in result.stdout.str()
    assert "- no-delete" not in result.stdout.str().split("run 2 of 2")[0]
    assert "pytest_plugin.py" not in result.stdout.str()


def test_the_number_of_runs_is_checked(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_counts='''
        from opentelemetry import trace
        from agentlib import run_agent

        def test_too_few(tooleval):
            run_agent(trace.get_tracer("app"), "helper", ["lookup", "report"])
            tooleval.assert_passed("graders.yaml", runs=2)

        def test_none_at_all(tooleval):
            tooleval.assert_passed("graders.yaml")

        def test_none_expected(tooleval):
            assert tooleval.assert_passed("graders.yaml", runs=0) == []
    ''')
    result = run(suite)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines([
        "E * tooleval: expected 2 agent runs, found 1 in 3 captured spans",
        "E * run 1 of 1 passed: agent 'helper'*",
        "E * tooleval: expected at least one agent run, found 0 in 0 captured spans",
        ("E * no span was captured: does the code under test trace through the global tracer"
        " provider or through tooleval.provider?"),
    ])


def test_global_and_explicit_providers(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_providers='''
        import threading
        from opentelemetry import trace
        from agentlib import run_agent

        IMPORT_TIME_TRACER = trace.get_tracer("bound-at-import")   # a ProxyTracer

        def test_global_tracer(tooleval):
            assert tooleval.captures_global
            run_agent(IMPORT_TIME_TRACER, "at-import", ["lookup", "report"])
            worker = threading.Thread(
                target=run_agent, args=(trace.get_tracer("late"), "in-thread", ["lookup"]))
            worker.start(); worker.join()
            reports = tooleval.grade("graders.yaml")
            assert [r.run.agent for r in reports] == ["at-import", "in-thread"]
            assert [r.passed for r in reports] == [True, False]

        def test_explicit_provider(tooleval):
            run_agent(tooleval.provider.get_tracer("lib"), "explicit", ["lookup", "report"])
            run_agent(tooleval.tracer, "fixture-tracer", ["lookup", "report"])
            assert tooleval.provider is not trace.get_tracer_provider()
            tooleval.assert_passed("graders.yaml", runs=2)

        def test_one_trace_across_both(tooleval):
            with trace.get_tracer("app").start_as_current_span(
                    "invoke_agent mixed", attributes={"gen_ai.operation.name": "invoke_agent"}):
                run_agent(tooleval.tracer, "inner", [])
                with tooleval.tracer.start_as_current_span(
                        "execute_tool lookup", attributes={"gen_ai.tool.name": "lookup"}):
                    pass
                with IMPORT_TIME_TRACER.start_as_current_span(
                        "execute_tool report", attributes={"gen_ai.tool.name": "report"}):
                    pass
            assert len({s.context.trace_id for s in tooleval.spans()}) == 1
            [report] = tooleval.assert_passed("graders.yaml", runs=1)
            assert [c.name for c in report.run.calls] == ["lookup", "report"]
    ''')
    run(suite).assert_outcomes(passed=3)


def test_two_tests_in_one_session_see_only_their_own_spans(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_twice='''
        from opentelemetry import trace
        from agentlib import run_agent

        TRACER = trace.get_tracer("app")
        FIRST = []

        def test_first(tooleval):
            run_agent(TRACER, "first", ["lookup", "report"])
            [report] = tooleval.assert_passed("graders.yaml", runs=1)
            assert report.run.agent == "first"
            FIRST.append(tooleval)

        def test_between_without_the_fixture():
            from otel_tooleval import pytest_plugin
            assert not pytest_plugin._ROUTER._active, "a finished test still captures"
            run_agent(TRACER, "between", ["delete_all"])

        def test_second(tooleval):
            run_agent(TRACER, "second", ["lookup", "report"])
            [report] = tooleval.assert_passed("graders.yaml", runs=1)
            assert report.run.agent == "second"
            assert {s.name for s in tooleval.spans()} == {
                "invoke_agent second", "execute_tool lookup", "execute_tool report"}
            # The first test's capture stopped at its teardown and kept what it had.
            assert [s.name for s in FIRST[0].spans()][-1] == "invoke_agent first"
            assert len(FIRST[0].spans()) == 3

        def test_third_clears(tooleval):
            run_agent(TRACER, "rogue", ["delete_all"])
            assert not tooleval.grade("graders.yaml")[0].passed
            tooleval.clear()
            run_agent(TRACER, "third", ["lookup", "report"])
            tooleval.assert_passed("graders.yaml", runs=1)
    ''')
    run(suite).assert_outcomes(passed=4)


def test_an_sdk_provider_already_global_is_used_and_kept(suite: pytest.Pytester) -> None:
    suite.makeconftest('''
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        APP_EXPORTER = InMemorySpanExporter()
        APP_PROVIDER = TracerProvider()
        APP_PROVIDER.add_span_processor(SimpleSpanProcessor(APP_EXPORTER))
        trace.set_tracer_provider(APP_PROVIDER)
    ''')
    suite.makepyfile(test_app_provider='''
        from opentelemetry import trace
        from agentlib import run_agent
        import conftest

        def test_first(tooleval):
            run_agent(trace.get_tracer("app"), "first", ["lookup", "report"])
            tooleval.assert_passed("graders.yaml", runs=1)

        def test_second(tooleval):
            run_agent(trace.get_tracer("app"), "second", ["report"])
            [report] = tooleval.grade("graders.yaml")
            assert report.run.agent == "second" and not report.passed

        def test_the_app_provider_kept_its_place_and_its_spans():
            assert trace.get_tracer_provider() is conftest.APP_PROVIDER
            roots = [s.name for s in conftest.APP_EXPORTER.get_finished_spans()
                     if s.parent is None]
            assert roots == ["invoke_agent first", "invoke_agent second"]
    ''')
    run(suite).assert_outcomes(passed=3)


def test_a_foreign_global_provider_warns_and_explicit_capture_still_works(
        suite: pytest.Pytester) -> None:
    suite.makeconftest('''
        from opentelemetry import trace
        trace.set_tracer_provider(trace.NoOpTracerProvider())
    ''')
    suite.makepyfile(test_noop='''
        from opentelemetry import trace
        from agentlib import run_agent

        def test_explicit_still_works(tooleval):
            assert not tooleval.captures_global
            run_agent(trace.get_tracer("app"), "lost", ["delete_all"])
            run_agent(tooleval.tracer, "kept", ["lookup", "report"])
            tooleval.assert_passed("graders.yaml", runs=1)

        def test_nothing_captured(tooleval):
            run_agent(trace.get_tracer("app"), "lost", ["lookup"])
            tooleval.assert_passed("graders.yaml")
    ''')
    result = run(suite)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        ("E * no span was captured: does the code under test trace through the global tracer"
        " provider (not captured here, see the warning) or through tooleval.provider?"),
        ("*ToolEvalCaptureWarning: tooleval: the global tracer provider is a NoOpTracerProvider,"
        " not an OpenTelemetry SDK TracerProvider, so spans made through it are not captured;"
        " pass tooleval.provider to the code under test instead"),
    ])


def test_config_from_marker_ini_option_and_argument(suite: pytest.Pytester) -> None:
    # The ini config forbids "lookup"; the marker's (next to the test file) requires it.
    suite.mkdir("ci")
    (suite.path / "ci" / "strict.yaml").write_text(
        "graders:\n  - {name: ini-grader, type: tool-calls, config: {disallowed: [lookup]}}\n")
    suite.mkdir("tests")
    (suite.path / "tests" / "marked.yaml").write_text(
        "graders:\n  - {name: marker-grader, type: tool-calls, config: {required: [lookup]}}\n")
    suite.makeini("[pytest]\ntooleval_config = ci/strict.yaml\n")
    (suite.path / "tests" / "test_sources.py").write_text(textwrap.dedent('''
        import pytest
        from opentelemetry import trace
        from agentlib import run_agent

        def lookup(tooleval):
            run_agent(trace.get_tracer("app"), "agent", ["lookup"])

        def test_ini_option(tooleval):
            lookup(tooleval)
            tooleval.assert_passed()

        @pytest.mark.tooleval("marked.yaml")
        def test_marker_path_next_to_the_test_file(tooleval):
            lookup(tooleval)
            [report] = tooleval.assert_passed()
            assert report.results[0].name == "marker-grader"

        @pytest.mark.tooleval(config={"graders": [
            {"name": "mapping-grader", "type": "tool-calls", "config": {"required": ["report"]}}]})
        def test_marker_mapping(tooleval):
            lookup(tooleval)
            tooleval.assert_passed()

        @pytest.mark.tooleval("marked.yaml")
        class TestClassMarker:
            def test_argument_wins_over_marker(self, tooleval):
                lookup(tooleval)
                [report] = tooleval.grade(
                    "graders: [{name: arg-grader, type: tool-calls, config: {required: [x]}}]")
                assert [r.name for r in report.results] == ["arg-grader"]

            def test_class_marker(self, tooleval):
                lookup(tooleval)
                tooleval.assert_passed()
    '''))
    result = run(suite, "tests")
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines_random([
        "FAILED tests/test_sources.py::test_ini_option - AssertionError: tooleval*",
        "FAILED tests/test_sources.py::test_marker_mapping - AssertionError: tooleval*",
        "E * - ini-grader [[]tool-calls[]] fail*Disallowed 'lookup' called at #0 (lookup).",
        "E * - mapping-grader [[]tool-calls[]] fail*Required 'report'*",
        "PASSED tests/test_sources.py::test_marker_path_next_to_the_test_file",
        "PASSED tests/test_sources.py::TestClassMarker::test_class_marker",
    ])
    # The ini option's path is relative to the ini file, not to the working directory.
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(suite.path / "tests")
        result = suite.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", "-c",
                                            str(suite.path / "tox.ini"), "test_sources.py",
                                            "-k", "ini_option", timeout=300)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E * - ini-grader *"])


def test_config_problems_fail_the_test_with_a_clear_message(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    suite.makepyfile(test_problems='''
        import pytest

        def test_no_config_anywhere(tooleval):
            tooleval.grade()

        @pytest.mark.tooleval({"graders": [{"type": "tool-calls", "config": {"requird": []}}]})
        def test_bad_config_in_marker(tooleval):
            tooleval.assert_passed()

        @pytest.mark.tooleval("a.yaml", "b.yaml")
        def test_two_configs_in_marker(tooleval):
            tooleval.grade()

        def test_missing_file(tooleval):
            tooleval.grade("nowhere.yaml")
    ''')
    result = run(suite)
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines_random([
        ("*tooleval: no grader config: pass one to tooleval.grade()/assert_passed(), mark the test"
        " with @pytest.mark.tooleval(config), or set the tooleval_config ini option"),
        ("*tooleval: bad config in the @pytest.mark.tooleval marker: invalid otel-tooleval"
        " config: graders[[]0[]].config.requird*"),
        "*tooleval: @pytest.mark.tooleval takes exactly one config*",
        ("*tooleval: bad config in the argument: invalid otel-tooleval config (nowhere.yaml):"
        " cannot read nowhere.yaml*"),
    ])
    # The last resort: the file TOOLEVAL_CONFIG names, as for the other front doors.
    monkeypatch.setenv("TOOLEVAL_CONFIG", str(suite.path / "graders.yaml"))
    run(suite, "-k", "no_config_anywhere").assert_outcomes(passed=1, deselected=3)


# The shared grader "flow" expects a lookup; each case says what it expects instead.
FLOW = "graders:\n  - {name: flow, type: tool_trajectory, mode: in_order, expected: [{tool: lookup}]}\n"
CASES = '''
- id: report-case
  expect: {flow: {expected: [{tool: lookup}, {tool: report}]}}
- id: audit-case
  match: {attribute: {key: dataset.item, value: item-7}}
  expect: {flow: {expected: [{tool: audit}]}}
  graders: [{name: no-delete, type: tool-calls, config: {disallowed: ["^delete_"]}}]
'''


def test_a_case_grades_the_tests_runs(suite: pytest.Pytester) -> None:
    """``cases=`` and ``case="id"`` on the marker or in the call: the test's runs are graded
    with that case's expectations and its own graders, matched or not."""
    suite.mkdir("tests")
    (suite.path / "tests" / "flow.yaml").write_text(FLOW)
    (suite.path / "tests" / "cases.yaml").write_text(CASES)
    adk = ROOT / "tests" / "data" / "cases" / "adk" / "travel.evalset.json"
    (suite.path / "tests" / "travel.evalset.json").write_text(adk.read_text())
    (suite.path / "tests" / "test_cases.py").write_text(textwrap.dedent('''
        import pytest
        from opentelemetry import trace
        from agentlib import run_agent

        def agent(*tools, **attributes):
            run_agent(trace.get_tracer("app"), "helper", list(tools), **attributes)

        @pytest.mark.tooleval("flow.yaml", cases="cases.yaml", case="report-case")
        def test_named_case_passes(tooleval):
            agent("lookup", "report")      # no match rule needed: case= names it
            [report] = tooleval.assert_passed(runs=1)
            assert report.case == "report-case"
            assert [r.name for r in report.results] == ["flow"]

        @pytest.mark.tooleval("flow.yaml", cases="cases.yaml", case="audit-case")
        def test_named_case_fails_with_its_own_grader(tooleval):
            agent("lookup", "delete_all")
            tooleval.assert_passed()

        @pytest.mark.tooleval("flow.yaml", cases="cases.yaml")
        def test_runs_matched_to_their_cases(tooleval):
            agent("lookup", "report", **{"tooleval.case.id": "report-case"})
            agent("audit", **{"dataset.item": "item-7"})
            agent("lookup")                 # no case: the shared graders
            reports = tooleval.assert_passed(runs=3)
            assert [r.case for r in reports] == ["report-case", "audit-case", None]

        def test_the_call_gives_cases_and_case(tooleval):
            agent("search")
            [report] = tooleval.assert_passed("flow.yaml", case="inline", cases=[
                {"id": "inline", "expect": {"flow": {"expected": [{"tool": "search"}]}}}])
            assert report.case == "inline"

        @pytest.mark.tooleval("flow.yaml", cases="cases.yaml", case="report-case")
        def test_the_calls_case_wins_over_the_markers(tooleval):
            agent("audit")
            [report] = tooleval.assert_passed(case="audit-case")
            assert report.case == "audit-case"

        @pytest.mark.tooleval("flow.yaml", cases=[
            {"id": "a", "match": {"attribute": {"key": "k", "value": "x"}}},
            {"id": "b", "match": {"attribute": {"key": "k", "value": "x"}}}])
        def test_a_run_matching_two_cases_fails(tooleval):
            agent("lookup", k="x")
            tooleval.assert_passed()

        @pytest.mark.tooleval("flow.yaml", cases="travel.evalset.json", case="small-talk")
        def test_an_adk_eval_set_case(tooleval):
            agent()                         # ADK expects no tool call for small talk
            [report] = tooleval.grade()
            assert report.case == "small-talk"
            assert [(r.name, r.passed) for r in report.results] == [
                ("flow", False), ("tool_trajectory_avg_score", True)]
    '''))
    result = run(suite, "tests")
    result.assert_outcomes(passed=5, failed=2)
    result.stdout.fnmatch_lines_random([
        "PASSED tests/test_cases.py::test_named_case_passes",
        "PASSED tests/test_cases.py::test_runs_matched_to_their_cases",
        "PASSED tests/test_cases.py::test_the_call_gives_cases_and_case",
        "PASSED tests/test_cases.py::test_the_calls_case_wins_over_the_markers",
        "PASSED tests/test_cases.py::test_an_adk_eval_set_case",
        "E * run 1 of 1 FAILED: case 'audit-case', agent 'helper', trace *, 2 tool calls*",
        "E * - flow [[]tool_trajectory[]] fail*",
        "E * - no-delete [[]tool-calls[]] fail*Disallowed '^delete_' called at #1 (delete_all).",
        "E * run 1 of 1 FAILED: agent 'helper', trace *, 1 tool call (lookup)",
        ("E * - it matches 2 cases ('a', 'b'): a run belongs to one case; it was graded by the"
         " shared graders"),
    ])


def test_case_problems_fail_the_test_naming_them(suite: pytest.Pytester) -> None:
    (suite.path / "cases.yaml").write_text(CASES)
    (suite.path / "flow.yaml").write_text(FLOW)
    suite.makepyfile(test_case_problems='''
        import pytest

        @pytest.mark.tooleval("flow.yaml", cases="cases.yaml", case="nope")
        def test_unknown_case(tooleval):
            tooleval.grade()

        @pytest.mark.tooleval("flow.yaml", case="report-case")
        def test_case_without_cases(tooleval):
            tooleval.grade()

        @pytest.mark.tooleval("flow.yaml", cases="nowhere.yaml")
        def test_missing_case_file(tooleval):
            tooleval.grade()

        @pytest.mark.tooleval("flow.yaml", cases=[{"id": "x", "expect": {"flo": {}}}])
        def test_bad_case(tooleval):
            tooleval.grade()

        def test_bad_cases_argument(tooleval):
            tooleval.grade("flow.yaml", cases={"id": "x"})

        @pytest.mark.tooleval("flow.yaml", case="x", cases=[], when="now")
        def test_unknown_marker_keyword(tooleval):
            tooleval.grade()
    ''')
    result = run(suite)
    result.assert_outcomes(failed=6)
    result.stdout.fnmatch_lines_random([
        ("*tooleval: unknown case 'nope' in the @pytest.mark.tooleval marker: the cases are:"
         " 'report-case', 'audit-case'"),
        ("*tooleval: unknown case 'report-case' in the @pytest.mark.tooleval marker: there are"
         " no cases: give cases= or a config with cases:"),
        ("*tooleval: bad cases in the @pytest.mark.tooleval marker: invalid case set"
         " (nowhere.yaml): cannot read it*"),
        "*tooleval: bad cases in the @pytest.mark.tooleval marker: *cases[[]0[]].expect.flo*",
        ("*tooleval: bad cases in the argument: cases= takes a case file's path or a list of case"
         " entries, got dict"),
        "*tooleval: @pytest.mark.tooleval takes exactly one config*(unknown: when)",
    ])
    assert "pytest_plugin.py" not in result.stdout.str()


@pytest.mark.frameworks
def test_a_real_pydantic_ai_agent(suite: pytest.Pytester) -> None:
    pytest.importorskip("pydantic_ai")
    suite.makepyfile(test_weather='''
        import pytest
        from opentelemetry import trace
        from tests.support.agents import run_pydantic_ai_weather

        POLICY = {"graders": [{
            "name": "weather-policy", "type": "tool-calls",
            "config": {"required": [{"name": "^convert_temp$", "final": True}],
                       "disallowed": [{"name": "^get_weather$",
                                       "result": '"conditions":"unknown"'}],
                       "sequence": ["lookup_city", "get_weather", "convert_temp"]}}]}

        @pytest.mark.tooleval(POLICY)
        def test_explicit_provider(tooleval):
            assert run_pydantic_ai_weather(tooleval.provider).startswith("Paris 21C")
            [report] = tooleval.assert_passed(runs=1)
            assert report.run.agent == "weather_agent"
            assert [c.name for c in report.run.calls] == [
                "lookup_city", "get_weather", "get_weather", "convert_temp"]

        @pytest.mark.tooleval(POLICY)
        def test_global_provider(tooleval):
            run_pydantic_ai_weather(trace.get_tracer_provider(), agent_name="global_agent")
            [report] = tooleval.assert_passed(runs=1)
            assert report.run.agent == "global_agent"

        @pytest.mark.tooleval(POLICY)
        def test_a_bad_run_fails(tooleval):
            run_pydantic_ai_weather(tooleval.provider, script=[
                [("lookup_city", {"query": "paris"})],
                [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "London"})],
                "Paris 21C, London unknown",
            ])
            tooleval.assert_passed(runs=1)
    ''')
    result = run(suite)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        ("E * run 1 of 1 FAILED: agent 'weather_agent', trace *, 3 tool calls"
         " (lookup_city, get_weather, get_weather)"),
        ("E * - weather-policy [[]tool-calls[]] fail, score 0.00: 3 of 3 checks failed: required"
         " '^convert_temp$' needs a completed call as the final call, found 0; disallowed"
         " '^get_weather$ (with result)' called at #2 (get_weather); sequence broken at entry 2"
         " ('convert_temp'): no matching call after call #1."),
    ])
    message = "\n".join(line for line in result.stdout.lines if line.startswith("E "))
    assert "London" not in message, "explanations never carry argument or result values"


def test_the_recipe_in_the_docs_runs_as_shown(suite: pytest.Pytester) -> None:
    text = (ROOT / "docs" / "pytest.md").read_text()
    example = re.findall(r"```python\n(.*?)```", text, re.DOTALL)[0]
    shown = re.findall(r"```\n(E .*?)```", text, re.DOTALL)[0].splitlines()
    suite.makepyfile(test_travel_agent=example)
    run(suite).assert_outcomes(passed=2)
    suite.makepyfile(test_travel_agent=example.replace(
        'book_trip("Lisbon")', 'book_trip("Lisbon", peek_at_secrets=True)', 1))
    result = run(suite)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [line.replace("[", "[[]").replace("5f0c…", "*") for line in shown])


# --------------------------------------------------------------------------- the message alone


def _report(agent: str, *results: tuple[str, bool], calls: int = 2, pending: int = 0
            ) -> RunReport:
    run = AgentRun(trace_id=0xABC, root_span_id=0x1, agent=agent,
                   calls=tuple(ToolCall(name=f"t{i}", index=i) for i in range(calls)),
                   pending_calls=pending)
    return RunReport(run, tuple(
        GradeResult(name, "tool-calls", 1.0 if ok else 0.0, ok, "pass" if ok else "fail",
                    f"{name} explained") for name, ok in results))


def test_message_is_none_exactly_when_everything_passed() -> None:
    good = _report("a", ("g", True))
    assert describe_failures([good]) is None
    assert describe_failures([good, good], runs=2) is None
    assert describe_failures([], runs=0) is None
    assert describe_failures([good], runs=2) is not None
    assert describe_failures([]) is not None
    assert describe_failures([good, _report("b", ("g", False))]) is not None


def test_message_lists_every_failing_grader_of_every_run() -> None:
    errored = RunReport(_report("c").run, (
        GradeResult.failure("custom", "tool", "ValueError", "grader 'custom' raised ValueError"),))
    message = describe_failures([
        _report("a", ("ok", True), ("one", False), ("two", False), calls=25, pending=1),
        _report("b", ("ok", True)),
        errored,
    ], runs=4, spans=40)
    assert message == "\n".join([
        "tooleval: expected 4 agent runs, found 3 in 40 captured spans; 2 of 3 agent runs failed",
        "run 1 of 3 FAILED: agent 'a', trace 00000000000000000000000000000abc, 25 tool calls,"
        " 1 pending (" + ", ".join(f"t{i}" for i in range(20)) + ", ... 5 more)",
        "  - one [tool-calls] fail, score 0.00: one explained",
        "  - two [tool-calls] fail, score 0.00: two explained",
        ("run 2 of 3 passed: agent 'b', trace 00000000000000000000000000000abc, 2 tool calls"
        " (t0, t1)"),
        ("run 3 of 3 FAILED: agent 'c', trace 00000000000000000000000000000abc, 2 tool calls"
        " (t0, t1)"),
        "  - custom [tool] error (ValueError), score 0.00: grader 'custom' raised ValueError",
    ])


def test_message_names_each_runs_case_and_fails_an_ambiguous_run() -> None:
    cased = RunReport(_report("a", ("g", True)).run, _report("a", ("g", True)).results,
                      case="weather-paris")
    twice = RunReport(cased.run, cased.results, ambiguous=("a", "b"))
    assert describe_failures([cased]) is None
    assert describe_failures([twice]) == (
        "tooleval: 1 of 1 agent run failed\n"
        "run 1 of 1 FAILED: agent 'a', trace 00000000000000000000000000000abc, 2 tool calls"
        " (t0, t1)\n"
        "  - it matches 2 cases ('a', 'b'): a run belongs to one case; it was graded by the"
        " shared graders")
    message = describe_failures([cased, twice])
    assert message is not None and "run 1 of 2 passed: case 'weather-paris', agent 'a'" in message
