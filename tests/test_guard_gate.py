"""The guard fails its run at every front door (issue 28, item 1): ``grade`` (table, JSON, junit,
HTML), the live processor's roots, ``ToolEvalSpanExporter``, ``serve`` and the pytest plugin, each
with a result named ``guard`` beside the graders'; ``check`` counts and prints the guard.

One scenario throughout: "never delete_file, at most 3 calls", as a ``guard:`` section alone,
against a run of search, book, delete_file, search (two offending calls: the disallowed one and
the fourth call).
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import (
    ConfigError,
    ToolEvalSpanExporter,
    ToolEvalSpanProcessor,
    grade_spans,
    load_config,
)
from otel_tooleval.cli import main
from otel_tooleval.guard import GuardConfig, GuardRules
from otel_tooleval.guard_result import GUARD_RESULT, guard_result
from otel_tooleval.model import ToolCall
from tests.support.otlp_receiver import OtlpReceiver

GUARD_ONLY = "guard:\n  disallowed: ['^delete_file$']\n  max_calls: 3\n"
GUARD = {"disallowed": ["^delete_file$"], "max_calls": 3}
BAD = ["search", "book", "delete_file", "search"]
GOOD = ["search", "book"]
TRACE = "5b8aa5a2d2c872e8321cf37308d69df2"
OTHER = "6c9bb6b3e3d983f9432df48419e7ae30"
AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "booker"}


# -- traces ----------------------------------------------------------------------------------


def _otlp_span(trace: str, span_id: int, parent: int | None, name: str,
               attrs: dict[str, str]) -> dict[str, Any]:
    start = 1_700_000_000_000_000_000 + span_id * 1000
    out: dict[str, Any] = {
        "traceId": trace, "spanId": f"{span_id:016x}", "name": name, "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + (100_000 if parent is None else 500)),
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]}
    if parent is not None:
        out["parentSpanId"] = f"{parent:016x}"
    return out


def _otlp_run(trace: str, tools: Sequence[str]) -> list[dict[str, Any]]:
    spans = [_otlp_span(trace, 1, None, "invoke_agent booker", AGENT)]
    for i, tool in enumerate(tools):
        spans.append(_otlp_span(trace, 2 + i, 1, f"execute_tool {tool}", {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
            "gen_ai.tool.call.arguments": json.dumps({"q": f"call {i}"})}))
    return spans


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    """``guard.yaml`` (the guard alone), ``bad.json`` (one offending run), ``good.json``."""
    out = {}
    for name, spans in (("bad.json", _otlp_run(TRACE, BAD)), ("good.json", _otlp_run(OTHER, GOOD))):
        doc = {"resourceSpans": [{"resource": {}, "scopeSpans": [
            {"scope": {"name": "test"}, "spans": spans}]}]}
        (tmp_path / name).write_text(json.dumps(doc) + "\n")
        out[name] = str(tmp_path / name)
    (tmp_path / "guard.yaml").write_text(GUARD_ONLY)
    out["guard.yaml"] = str(tmp_path / "guard.yaml")
    return out


def _run_agent(tracer: Any, tools: Sequence[str]) -> None:
    with tracer.start_as_current_span("invoke_agent booker", attributes=AGENT):
        for i, tool in enumerate(tools):
            with tracer.start_as_current_span(f"execute_tool {tool}", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                    "gen_ai.tool.call.arguments": json.dumps({"q": f"call {i}"})}):
                pass


def _guard_of(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [r for r in results if r["name"] == GUARD_RESULT]
    return found


# -- grade -------------------------------------------------------------------------------------


def test_grade_fails_a_guard_only_config_on_a_violating_trace(
        files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grade", files["bad.json"], "-c", files["guard.yaml"]]) == 1
    out, err = capsys.readouterr()
    assert "FAIL  guard" in out and "'delete_file' matches guard.disallowed[0]" in out
    assert "FAIL: 0 of 1 runs passed." in out + err

    assert main(["grade", files["bad.json"], "-c", files["guard.yaml"], "-f", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    (run,) = doc["runs"]
    assert run["passed"] is False
    guard = _guard_of(run["results"])
    assert guard["type"] == "guard" and guard["passed"] is False and guard["score"] == 0.0
    assert [(v["call"], v["tool"], v["span_id"]) for v in guard["details"]["violations"]] == [
        (2, "delete_file", f"{4:016x}"), (3, "search", f"{5:016x}")]
    assert guard["details"]["rules"] == {"disallowed": 1, "max_calls": 1}
    assert guard["explanation"].startswith("2 calls break a guard rule: call #2 'delete_file'")
    assert "call #3 tool call 4 of this run ('search'); guard.max_calls allows 3" in \
        guard["explanation"]
    assert doc["aggregate"]["graders"][GUARD_RESULT] == {"runs": 1, "passed": 0,
                                                         "mean_score": 0.0}


def test_grade_passes_a_guard_only_config_on_a_clean_trace(
        files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grade", files["good.json"], "-c", files["guard.yaml"], "-f", "json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    guard = _guard_of(run["results"])
    assert guard["passed"] is True and guard["score"] == 1.0
    assert "violations" not in guard["details"]


def test_junit_and_html_show_the_guard_failing(files: dict[str, str], tmp_path: Path) -> None:
    junit, html = tmp_path / "out.xml", tmp_path / "out.html"
    assert main(["grade", files["bad.json"], "-c", files["guard.yaml"], "-f", "junit",
                 "-o", str(junit)]) == 1
    cases = [c for c in ET.parse(junit).iter("testcase") if c.get("name", "").endswith("guard")
             or "guard" in (c.get("name") or "")]
    assert cases and all(c.find("failure") is not None for c in cases)
    assert main(["grade", files["bad.json"], "-c", files["guard.yaml"], "-f", "html",
                 "-o", str(html)]) == 1
    page = html.read_text()
    assert "guard" in page and "guard.disallowed[0]" in page


def test_graders_and_the_guard_side_by_side(files: dict[str, str], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "both.yaml"
    config.write_text("graders:\n  - {name: searched, type: tool-calls, "
                      "config: {required: ['^search$']}}\n" + GUARD_ONLY)
    assert main(["grade", files["bad.json"], "-c", str(config), "-f", "json"]) == 1
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert [(r["name"], r["passed"]) for r in run["results"]] == [
        ("searched", True), ("guard", False)]


# -- check and the config ------------------------------------------------------------------------


def test_check_counts_the_guard_and_prints_it(files: dict[str, str],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", files["guard.yaml"]]) == 0
    out, err = capsys.readouterr()
    assert "0 grader(s), valid." not in err
    assert err.strip().endswith("0 grader(s) and a guard (disallowed, max_calls), valid.")
    guard = json.loads(out)["guard"]
    assert guard["max_calls"] == 3 and guard["disallowed"][0]["name"] == "^delete_file$"
    assert guard["max_repeats"] is None


def test_a_grader_named_guard_is_refused_beside_a_guard() -> None:
    entry = {"name": "guard", "type": "tool-calls", "config": {"required": ["x"]}}
    with pytest.raises(ConfigError) as caught:
        load_config({"graders": [entry], "guard": GUARD})
    assert "graders[0].name" in str(caught.value) and "guard's result" in str(caught.value)
    load_config({"graders": [entry]})   # without a guard: any name


def test_an_empty_guard_section_adds_no_result() -> None:
    config = load_config({"graders": [{"type": "tool-call-order", "tool_calls_order": ["a"]}],
                          "guard": {}})
    assert config.guard_rules is None


# -- the rules over a finished run -------------------------------------------------------------


def _calls(*calls: tuple[str, Any]) -> list[ToolCall]:
    return [ToolCall(name, i, None if args is None else json.dumps(args), span_id=i + 1)
            for i, (name, args) in enumerate(calls)]


def test_guard_result_applies_every_rule_as_the_live_guard_does() -> None:
    rules = GuardRules(GuardConfig.model_validate({
        "disallowed": [{"name": "^bash$", "command": "rm -rf"}],
        "allowed": ["bash", "search", "read"],
        "max_calls_per_tool": {"read": 1},
        "max_repeats": 1}))
    result = guard_result(_calls(("bash", {"command": "ls"}), ("bash", {"command": "rm -rf /"}),
                                 ("write", {}), ("read", {"p": 1}), ("read", {"p": 2}),
                                 ("search", {"q": "a", "n": 1}), ("search", {"n": 1.0, "q": "a"}),
                                 ("bash", None)), rules)
    assert not result.passed
    assert [(v["call"], v["reason"].split(":")[0]) for v in result.details["violations"]] == [
        (1, "guard.disallowed"), (2, "guard.allowed"), (4, "guard.max_calls_per_tool"),
        (6, "guard.max_repeats")]
    assert result.details["rules"] == {"disallowed": 1, "allowed": 1, "max_calls_per_tool": 1,
                                       "max_repeats": 1}
    assert "and 1 more" in result.explanation
    assert "rm -rf" not in result.explanation, "argument values never appear"


def test_a_guard_that_raises_fails_the_run_without_an_exception(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from otel_tooleval import grading

    def broken(*_: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(grading, "guard_result", broken)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _run_agent(provider.get_tracer("t"), GOOD)
    (report,) = grade_spans(exporter.get_finished_spans(), {"guard": GUARD})
    (result,) = report.results
    assert (result.name, result.passed, result.error) == ("guard", False, "RuntimeError")


# -- live: the processor's roots and ToolEvalSpanExporter ---------------------------------------


def _root(spans: Sequence[ReadableSpan]) -> ReadableSpan:
    (root,) = [s for s in spans if s.parent is None]
    return root


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_live_roots_fail_on_a_guard_violation(mode: str) -> None:
    exporter = InMemorySpanExporter()
    processor = ToolEvalSpanProcessor({"guard": GUARD, "grading": {"mode": mode}},
                                      downstream=SimpleSpanProcessor(exporter))
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    _run_agent(tracer, BAD)
    _run_agent(tracer, GOOD)
    provider.force_flush(30_000)
    provider.shutdown()
    roots = [s for s in exporter.get_finished_spans() if s.parent is None]
    by_calls = {len([c for c in exporter.get_finished_spans()
                     if c.context.trace_id == r.context.trace_id]) - 1: r for r in roots}
    bad, good = by_calls[4], by_calls[2]
    assert (bad.attributes or {})["tooleval.passed"] is False
    assert list((bad.attributes or {})["tooleval.failed"]) == ["guard"]
    assert (good.attributes or {})["tooleval.passed"] is True
    names = [e.attributes["gen_ai.evaluation.name"] for e in bad.events
             if e.name == "gen_ai.evaluation.result" and e.attributes]
    assert names == ["guard"]


def test_tool_eval_span_exporter_fails_the_root_and_marks_the_calls() -> None:
    memory = InMemorySpanExporter()
    exporter = ToolEvalSpanExporter(memory, {"guard": GUARD}, decision_wait=0.05)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _run_agent(provider.get_tracer("t"), BAD)
    provider.force_flush(10_000)
    exporter.force_flush(10_000)
    provider.shutdown()
    spans = memory.get_finished_spans()
    assert (_root(spans).attributes or {})["tooleval.passed"] is False
    marked = sorted((s.name, tuple((s.attributes or {})["tooleval.violation.graders"]))
                    for s in spans if (s.attributes or {}).get("tooleval.violation"))
    assert marked == [("execute_tool delete_file", ("guard",)),
                      ("execute_tool search", ("guard",))]


# -- serve -------------------------------------------------------------------------------------


def test_serve_fails_the_root_and_marks_the_calls(receiver: OtlpReceiver) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from otel_tooleval.serve import ServeOptions, ToolEvalServer

    options = ServeOptions(load_config({"guard": GUARD}), grpc="127.0.0.1:0",
                           http="127.0.0.1:0", forward=receiver.http_endpoint,
                           decision_wait=0.2)
    server = ToolEvalServer(options).start()
    try:
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
            endpoint=f"http://127.0.0.1:{server.http_port}/v1/traces")))
        _run_agent(provider.get_tracer("t"), BAD)
        provider.shutdown()
        assert receiver.wait_for(lambda: any(
            "tooleval.passed" in s["attributes"] for s in receiver.spans()))
    finally:
        assert server.stop(timeout=10)
    spans = receiver.spans()
    (root,) = [s for s in spans if "tooleval.passed" in s["attributes"]]
    assert root["attributes"]["tooleval.passed"] is False
    marked = sorted(s["name"] for s in spans if s["attributes"].get("tooleval.violation"))
    assert marked == ["execute_tool delete_file", "execute_tool search"]


# -- the pytest plugin ---------------------------------------------------------------------------

pytest_plugins = ["pytester"]


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.Pytester]:
    for name in list(os.environ):
        if name.startswith("OTEL_") or name == "TOOLEVAL_CONFIG":
            monkeypatch.delenv(name)
    root = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(root), str(pytester.path), *filter(None, [os.environ.get("PYTHONPATH")])]))
    (pytester.path / "guard.yaml").write_text(GUARD_ONLY)
    yield pytester


def test_the_pytest_plugin_fails_a_test_on_a_guard_violation(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_agent='''
        import json
        from opentelemetry import trace

        def run(tools):
            tracer = trace.get_tracer("app")
            with tracer.start_as_current_span("invoke_agent booker", attributes={
                    "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "booker"}):
                for tool in tools:
                    with tracer.start_as_current_span(f"execute_tool {tool}", attributes={
                            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}):
                        pass

        def test_good(tooleval):
            run(["search", "book"])
            tooleval.assert_passed("guard.yaml", runs=1)

        def test_bad(tooleval):
            run(["search", "book", "delete_file", "search"])
            tooleval.assert_passed("guard.yaml", runs=1)
    ''')
    result = suite.runpytest_subprocess("-p", "otel_tooleval.pytest_plugin", "-p",
                                        "no:cacheprovider", timeout=300)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["E * - guard [[]guard[]] fail, score 0.00: 2 calls break*"])
