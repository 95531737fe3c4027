"""Eval cases (docs/cases.md): matching runs to cases, per-case expectations, statuses, and
what ``grade`` reports for them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval.cases import Ambiguous, load_cases
from otel_tooleval.cli import main
from otel_tooleval.config import ConfigError, load_config
from otel_tooleval.grading import grade_spans

FRAMEWORKS = Path(__file__).parent / "data" / "frameworks"
ASKED = "What's the weather in Paris and Lyon? Give Paris in Fahrenheit too."
TRAJECTORY = {"name": "trajectory", "type": "tool_trajectory", "mode": "in_order",
              "expected": [{"tool": "never_called"}]}


def _spans(runs: list[dict[str, Any]]) -> list[Any]:
    """One agent run per entry: a root with the entry's attributes, one tool span per tool."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    for run in runs:
        attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "agent",
                 **run.get("attributes", {})}
        with tracer.start_as_current_span("invoke_agent agent", attributes=attrs):
            for tool in run["tools"]:
                with tracer.start_as_current_span(
                        f"execute_tool {tool}", attributes={
                            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}):
                    pass
    return list(exporter.get_finished_spans())


def _grade(tmp_path: Path, traces: list[str], cases: list[dict[str, Any]],
           capsys: pytest.CaptureFixture[str], *extra: str,
           graders: list[dict[str, Any]] | None = None) -> tuple[int, dict[str, Any]]:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"graders": graders or [TRAJECTORY]}))
    case_file = tmp_path / "cases.jsonl"
    case_file.write_text("".join(json.dumps(c) + "\n" for c in cases))
    code = main(["grade", *traces, "--config", str(config), "--cases", str(case_file),
                 "--format", "json", *extra])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


# -- the case set's shape ---------------------------------------------------------------------

@pytest.mark.parametrize(("cases", "message"), [
    ([{"match": {"first_user_message": "x"}}], "cases[0].id: required"),
    ([{"id": "a"}, {"id": "a"}], "cases[1].id: duplicate case id 'a' (also cases[0])"),
    ([{"id": "a", "match": {"first_user_message": "x", "first_user_message_regex": "y"}}],
     "cases[0].match: give exactly one of"),
    ([{"id": "a", "match": {"first_message": "x"}}],
     "cases[0].match.first_message: unknown way to match"),
    ([{"id": "a", "match": {"first_user_message_regex": "(a)\\1"}}],
     "cases[0].match.first_user_message_regex: unsupported regular expression"),
    ([{"id": "a", "match": {"attribute": {"key": "k", "value": [1]}}}],
     "cases[0].match.attribute.value: must be a string or a number"),
    ([{"id": "a", "expect": {"trajectory": [1]}}], "cases[0].expect.trajectory: must be a mapping"),
    ([{"id": "a", "expected": {}}], "cases[0].expected: unknown key"),
])
def test_a_bad_case_is_refused_naming_its_field(cases: list[Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_cases(cases)
    assert message in str(err.value)


def test_expect_must_name_a_configured_grader_and_fit_its_shape() -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"graders": [TRAJECTORY], "cases": [
            {"id": "a", "expect": {"trajectroy": {"expected": []}}},
            {"id": "b", "expect": {"trajectory": {"mode": "sideways"}}}]})
    text = str(err.value)
    assert ("cases[0].expect.trajectroy: no configured grader named 'trajectroy' "
            "(configured: trajectory)") in text
    assert "cases[1].expect.trajectory.mode: Input should be" in text


def test_a_case_file_that_is_not_json_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "cases.jsonl"
    bad.write_text('{"id": "a"}\n{"id": \n')
    with pytest.raises(ConfigError) as err:
        load_cases(bad)
    assert str(err.value).startswith(f"invalid case set ({bad}): line 2: not JSON")


# -- matching and per-case graders ------------------------------------------------------------

def test_runs_match_by_attribute_and_are_graded_by_their_case() -> None:
    config = load_config({"graders": [TRAJECTORY], "cases": [
        {"id": "weather", "expect": {"trajectory": {"expected": [{"tool": "get_weather"}]}}},
        {"id": "booking", "match": {"attribute": {"key": "dataset.item", "value": 7}},
         "expect": {"trajectory": {"expected": [{"tool": "create_booking"}]}}},
    ]})
    reports = grade_spans(_spans([
        {"attributes": {"tooleval.case.id": "weather"}, "tools": ["get_weather"]},
        {"attributes": {"dataset.item": 7}, "tools": ["get_weather"]},
        {"tools": ["get_weather"]},
    ]), config)
    by_case = {r.case: r for r in reports}
    assert set(by_case) == {"weather", "booking", None}
    assert by_case["weather"].passed                  # its own expected list
    assert not by_case["booking"].passed              # create_booking was expected
    assert not by_case[None].passed                   # the shared entry: never_called


def test_a_case_adds_graders_of_its_own() -> None:
    config = load_config({"graders": [TRAJECTORY], "cases": [
        {"id": "w", "graders": [{"name": "order", "type": "tool-call-order",
                                 "tool_calls_order": ["lookup", "get_weather"]}]}]})
    [report] = grade_spans(_spans([{"attributes": {"tooleval.case.id": "w"},
                                    "tools": ["get_weather", "lookup"]}]), config)
    assert [r.name for r in report.results] == ["trajectory", "order"]
    assert not report.results[1].passed


def test_a_case_grader_named_like_a_shared_one_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"graders": [TRAJECTORY], "cases": [{"id": "w", "graders": [TRAJECTORY]}]})
    assert "cases[0].graders[0].name: duplicate grader name 'trajectory'" in str(err.value)


def test_two_matching_cases_make_the_run_ambiguous() -> None:
    cases = load_cases([{"id": "a", "match": {"attribute": {"key": "k", "value": "x"}}},
                        {"id": "b", "match": {"attribute": {"key": "k", "value": "x"}}}])
    config = load_config({"graders": [TRAJECTORY]})
    [report] = grade_spans(_spans([{"attributes": {"k": "x"}, "tools": ["t"]}]), config)
    found = cases.match(report.run)
    assert isinstance(found, Ambiguous) and found.ids == ("a", "b")


@pytest.mark.parametrize("framework", [
    "pydantic_ai",             # GenAI semconv: gen_ai.input.messages
    "openai_agents",           # OpenInference: llm.input_messages.N.message.*
    "openllmetry_langgraph",   # OpenLLMetry / Traceloop over LangGraph
    "mlflow",                  # the framework's own mlflow.spanInputs
    "vercel_ai",
    "haystack",                # the root's haystack.component.input (an input-named attribute)
    "langfuse",                # the model call's langfuse.observation.input
    "adk_legacy",              # the model call's gcp.vertex.agent.llm_request (Gemini contents)
    "vercel_ai/legacy",        # the root's ai.prompt
    "llamaindex",              # llm.input_messages only on the model span nested in another
    "strands",                 # a gen_ai.user.message event holding content blocks
])
def test_runs_match_by_their_first_user_message(framework: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _grade(tmp_path, [str(FRAMEWORKS / framework / "traces.jsonl")], [
        {"id": "weather", "match": {"first_user_message": f"  {ASKED} "},
         "expect": {"trajectory": {"expected": [{"tool": "get_weather"}]}}}], capsys)
    assert [run["case"] for run in doc["runs"]] == ["weather"]
    [case] = doc["cases"]
    assert case["status"] == "pass" and case["passed"]
    assert case["runs"] == [{"trace_id": doc["runs"][0]["trace_id"],
                             "root_span_id": doc["runs"][0]["root_span_id"]}]
    assert case["results"] == [{"name": "trajectory", "score": 1.0, "label": "pass",
                                "passed": True}]
    assert doc["aggregate"]["cases"] == {"cases": 1, "passed": 1, "failed": 0, "missing": 0}
    assert code == 0


def test_a_templated_prompt_is_matched_by_regex(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _grade(tmp_path, [str(FRAMEWORKS / "crewai" / "traces.jsonl")], [
        {"id": "exact", "match": {"first_user_message": ASKED}},
        {"id": "weather", "match": {"first_user_message_regex": r"weather in Paris and Lyon"},
         "expect": {"trajectory": {"expected": [{"tool": "get_weather"}]}}}], capsys)
    assert [run["case"] for run in doc["runs"]] == ["weather"]
    assert [c["status"] for c in doc["cases"]] == ["missing", "pass"]
    assert code == 1                  # the exact case found no run


def test_a_missing_case_fails_and_an_unmatched_run_has_no_case(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _grade(tmp_path, [str(FRAMEWORKS / "pydantic_ai" / "traces.jsonl")], [
        {"id": "booking", "match": {"first_user_message": "Book Lisbon for 2 nights"}}],
        capsys, graders=[{**TRAJECTORY, "expected": [{"tool": "get_weather"}]}])
    assert [run["case"] for run in doc["runs"]] == [None]
    assert doc["runs"][0]["passed"]
    assert doc["cases"] == [{"id": "booking", "status": "missing", "passed": False,
                             "match": "first_user_message 'Book Lisbon for 2 nights'",
                             "runs": [], "results": []}]
    assert code == 1


def test_an_ambiguous_run_is_an_input_problem(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    trace = str(FRAMEWORKS / "pydantic_ai" / "traces.jsonl")
    cases = [{"id": "a", "match": {"first_user_message": ASKED}},
             {"id": "b", "match": {"first_user_message": ASKED}}]
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"graders": [TRAJECTORY]}))
    (tmp_path / "cases.yaml").write_text(yaml.safe_dump({"cases": cases}))
    assert main(["grade", trace, "-c", str(config), "--cases", str(tmp_path / "cases.yaml"),
                 "-f", "json"]) == 2
    err = capsys.readouterr().err
    assert "the run matches 2 cases (a, b)" in err


def test_without_cases_the_document_is_unchanged(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"graders": [TRAJECTORY]}))
    main(["grade", str(FRAMEWORKS / "pydantic_ai" / "traces.jsonl"), "-c", str(config),
          "-f", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert "cases" not in doc and "case" not in doc["runs"][0]
    assert "cases" not in doc["aggregate"]


def test_junit_has_one_testsuite_per_case(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    import xml.etree.ElementTree as ET

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"graders": [TRAJECTORY], "cases": [
        {"id": "weather", "match": {"first_user_message": ASKED}},
        {"id": "booking", "match": {"first_user_message": "Book Lisbon"}}]}))
    code = main(["grade", str(FRAMEWORKS / "pydantic_ai" / "traces.jsonl"), "-c", str(config),
                 "-f", "junit"])
    root = ET.fromstring(capsys.readouterr().out)
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert list(suites) == ["otel-tooleval", "case weather", "case booking"]
    [graded] = suites["case weather"].iter("testcase")
    assert (graded.get("name"), graded.get("classname")) == ("trajectory", "case weather")
    assert graded.find("failure") is not None           # never_called was not called
    [missing] = suites["case booking"].iter("testcase")
    assert missing.get("name") == "missing"
    assert missing.find("failure").get("type") == "missing"  # type: ignore[union-attr]
    assert root.get("tests") == "3" and root.get("failures") == "3"
    assert code == 1


def test_the_table_lists_each_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"graders": [TRAJECTORY], "cases": [
        {"id": "weather", "match": {"first_user_message": ASKED},
         "expect": {"trajectory": {"expected": [{"tool": "get_weather"}]}}},
        {"id": "booking", "match": {"first_user_message": "Book Lisbon"}}]}))
    main(["grade", str(FRAMEWORKS / "pydantic_ai" / "traces.jsonl"), "-c", str(config)])
    out = capsys.readouterr().out
    assert "case weather  PASS  runs=1  trajectory=1.00\n" in out
    assert "case booking  MISSING  runs=0\n" in out
    assert out.endswith("FAIL: 1 of 1 runs passed, 1 of 2 cases passed (1 missing).\n")


def test_the_cases_bench_runs_and_every_run_finds_its_case() -> None:
    from tests.bench import bench_cases

    result = bench_cases.main(["--runs", "40", "--repeat", "1"])
    assert result["runs"] == 40     # its own asserts: all 40 pass with cases, one without


def test_a_broken_shared_grader_is_reported_once_not_as_unknown_to_its_cases() -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"graders": [{**TRAJECTORY, "expected": []}],
                     "cases": [{"id": "a", "expect": {"trajectory": {"expected": []}}}]})
    assert "graders[0].expected" in str(err.value)
    assert "no configured grader" not in str(err.value)


def _live(mode: str, config: dict[str, Any], items: tuple[str, ...], **options: Any
          ) -> list[Any]:
    """The root copies a live processor forwards for one ``invoke_agent travel`` run per item
    (its ``dataset.item``, one ``book`` call each). In process mode the grading process is
    waited for first (it starts with the first run, which the thread grades meanwhile), and
    every run is checked to have gone to it."""
    import time

    from otel_tooleval import ToolEvalSpanProcessor

    exporter = InMemorySpanExporter()
    processor = ToolEvalSpanProcessor({**config, "grading": {"mode": mode}},
                                      downstream=SimpleSpanProcessor(exporter), **options)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("cases")

    def run(item: str) -> None:
        with tracer.start_as_current_span("invoke_agent travel", attributes={
                "gen_ai.operation.name": "invoke_agent", "dataset.item": item}), \
                tracer.start_as_current_span("execute_tool book", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "book"}):
            pass

    offload = processor._offload
    sent = 0
    if mode == "process":
        assert offload is not None
        run("warm-up")
        deadline = time.monotonic() + 30
        while not offload.ready:
            assert time.monotonic() < deadline, "the grading process did not start"
            time.sleep(0.02)
        assert processor.force_flush()
        sent = offload._next_id
    for item in items:
        run(item)
    assert processor.force_flush()
    if mode == "process":
        assert offload is not None and offload._next_id - sent == len(items)
    provider.shutdown()
    return [s for s in exporter.get_finished_spans() if s.name == "invoke_agent travel"
            and (s.attributes or {}).get("dataset.item") != "warm-up"]


LIVE = {"graders": [{"name": "flow", "type": "tool_trajectory", "mode": "in_order",
                     "expected": [{"tool": "search"}]}],
        "cases": [{"id": "lisbon", "match": {"attribute": {"key": "dataset.item",
                                                           "value": "item-7"}},
                   "expect": {"flow": {"expected": [{"tool": "book"}]}}},
                  {"id": "twin-a", "match": {"attribute": {"key": "dataset.item",
                                                           "value": "item-9"}}},
                  {"id": "twin-b", "match": {"attribute": {"key": "dataset.item",
                                                           "value": "item-9"}}}]}


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_the_live_root_carries_its_case_id(mode: str) -> None:
    """Live, a run matched to a case (here by an attribute the app already sets) is graded by
    its case and its root copy says which: ``tooleval.case.id`` (issue 29, item 3)."""
    roots = {(s.attributes or {})["dataset.item"]: s.attributes or {}
             for s in _live(mode, LIVE, ("item-7", "item-8"))}
    assert roots["item-7"]["tooleval.case.id"] == "lisbon"
    assert roots["item-7"]["tooleval.passed"] is True    # the case's own expectation: book
    assert "tooleval.case.id" not in roots["item-8"]      # no case: the shared graders
    assert roots["item-8"]["tooleval.passed"] is False


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_the_live_on_report_callback_gets_the_runs_case(mode: str) -> None:
    """The ``RunReport`` an ``on_report`` callback gets says which case its run matched, and
    which cases an ambiguous run matched, as ``grade``'s does, whichever thread or process
    graded it."""
    from otel_tooleval.model import RunReport

    reports: list[RunReport] = []
    _live(mode, LIVE, ("item-7", "item-8", "item-9"), on_report=reports.append)
    by_item = {r.run.root_attributes["dataset.item"]: r for r in reports}
    by_item.pop("warm-up", None)                         # process mode's first run
    assert set(by_item) == {"item-7", "item-8", "item-9"}
    assert (by_item["item-7"].case, by_item["item-7"].ambiguous) == ("lisbon", ())
    assert by_item["item-7"].passed                      # graded by its case: book expected
    assert (by_item["item-8"].case, by_item["item-8"].ambiguous) == (None, ())
    assert (by_item["item-9"].case, by_item["item-9"].ambiguous) == (None, ("twin-a", "twin-b"))


def test_a_case_named_by_the_caller_grades_every_run_unmatched() -> None:
    """``grade_spans(..., case=id)`` (the pytest plugin's ``case=``) grades each run by that
    case whatever its match rule says; an id that is no case is refused before grading."""
    config = load_config({"graders": [TRAJECTORY], "cases": [
        {"id": "weather", "match": {"first_user_message": "never asked"},
         "expect": {"trajectory": {"expected": [{"tool": "get_weather"}]}}}]})
    spans = _spans([{"tools": ["get_weather"]}, {"tools": ["get_weather"]}])
    assert [r.case for r in grade_spans(spans, config)] == [None, None]
    forced = grade_spans(spans, config, case="weather")
    assert [(r.case, r.passed) for r in forced] == [("weather", True)] * 2
    with pytest.raises(ValueError, match="no case 'nope' among the config's cases"):
        grade_spans(spans, config, case="nope")


def test_cases_added_to_a_config_built_without_its_document_is_an_error() -> None:
    """``with_cases`` rebuilds a config from its document: one built by hand has none, and
    would silently lose its graders, so it is refused naming why."""
    import dataclasses

    from otel_tooleval.config import with_cases

    loaded = load_config({"graders": [{"type": "tool-calls", "name": "tc",
                                       "config": {"required": ["get_weather"]}}]})
    by_hand = dataclasses.replace(loaded, document=None)
    with pytest.raises(ConfigError, match="built by hand"):
        with_cases(by_hand, [{"id": "a", "match": {"first_user_message": "x"}}])
    added = with_cases(loaded, [{"id": "a", "match": {"first_user_message": "x"}}])
    assert [g.name for g in added.graders] == ["tc"]
