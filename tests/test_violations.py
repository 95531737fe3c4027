"""Verdicts on the offending calls: ``details.violations`` of every family that can name them,
and the marks (``tooleval.violation``, ``tooleval.violation.graders``) on the tool spans that
``ToolEvalSpanExporter`` and ``serve`` still hold, in ``grade --include-calls`` and in the HTML."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import OTLPJsonFileExporter, ToolEvalSpanExporter, grader, load_config
from otel_tooleval.cli import main
from otel_tooleval.model import AgentRun, GradeResult
from otel_tooleval.outputs import render_html
from otel_tooleval.serve import ServeOptions, ToolEvalServer
from otel_tooleval.violations import flagged_calls, flagged_spans
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.runs import call
from tests.test_reports import check_html, graded, rows_of

AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}
# search, search, delete_file: three graders name calls, one of them two graders at once.
CONFIG: dict[str, Any] = {"graders": [
    {"name": "no-delete", "type": "tool-calls", "config": {"disallowed": ["^delete"]}},
    {"name": "one-search", "type": "tool-call-count", "tool_calls_count": {"search": ["<=", 1]}},
    {"name": "just-search", "type": "tool_trajectory", "mode": "exact",
     "expected": [{"tool": "search"}]},
    {"name": "uses-search", "type": "tool-calls", "config": {"required": ["^search$"]}},
]}
MARKS = {1: ["one-search", "just-search"], 2: ["no-delete", "just-search"]}   # call -> graders
CALLS = [("search", {"q": "a"}), ("search", {"q": "b"}), ("delete_file", {"path": "/tmp/x"})]


def violations(result: GradeResult) -> list[tuple[int, str]]:
    return [(v["call"], v["reason"]) for v in result.details.get("violations", [])]


# -- details.violations, family by family ---------------------------------------------------------

RUN = [call("search", {"q": "a"}), call("search", {"q": "b"}, duration_ms=900),
       call("delete_file", {"path": "/tmp"}), call("report", {})]


@pytest.mark.parametrize("entry,expected", [
    ({"type": "tool-calls", "config": {"disallowed": [{"name": "^delete", "path": "^/tmp$"}]}},
     [(2, "disallowed '^delete'")]),
    ({"type": "tool-call-count", "tool_calls_count": {"search": ["<", 2], "report": [">", 3]}},
     [(1, "over the count: 'search' < 2")]),
    ({"type": "tool-call-count", "tool_calls_count": {"search": ["==", 0]}},
     [(0, "over the count: 'search' == 0"), (1, "over the count: 'search' == 0")]),
    ({"type": "tool-call-args", "tool_calls": [{"name": "search", "args": {"q": "a"}},
                                               {"name": "search", "args": {"q": "c"}}]},
     [(1, "arguments differ from expected 'search' (entry 1)")]),
    ({"type": "tool_trajectory", "mode": "exact",
      "expected": [{"tool": "search"}, {"tool": "search", "max_duration_ms": 100},
                   {"tool": "fetch"}]},
     [(1, "over the 100 ms limit of entry 1 ('search')"),
      (2, "another tool than entry 2 ('fetch')"), (3, "extra call beyond the 3 expected")]),
    ({"type": "tool_trajectory", "mode": "in_order",
      "expected": [{"tool": "search", "args": {"q": "b"}, "max_duration_ms": 100}]},
     [(1, "over the 100 ms limit of entry 0 ('search')")]),
    ({"type": "equal_function_sets", "classes": [{"name": "s", "members": ["search"]},
                                                 {"name": "r", "members": ["report"]}],
      "expect": [{"tool_selection.f1": {">=": 90}}]},
     [(2, "unexpected tool: in no expected class")]),
    ({"type": "tool_call_f1", "reference_tool_calls": [{"name": "search", "args": {"q": "a"}}]},
     [(j, "not in the reference (a false positive)") for j in (1, 2, 3)]),
    ({"type": "tool_call_accuracy", "reference_tool_calls": [
        {"name": "search", "args": {"q": "a"}}, {"name": "search", "args": {"q": "z"}},
        {"name": "delete_file", "args": {"path": "/tmp"}}, {"name": "report", "args": {}}]},
     [(1, "arguments differ from reference 1 ('search')")]),
    ({"type": "tool_correctness", "expected_tools": [{"name": "search"}],
      "should_exact_match": True},
     [(1, "extra call beyond the 1 expected"), (2, "extra call beyond the 1 expected"),
      (3, "extra call beyond the 1 expected")]),
    ({"type": "tool_correctness", "evaluation_params": ["INPUT_PARAMETERS"],
      "expected_tools": [{"name": "delete_file", "input_parameters": {"path": "/etc"}}]},
     [(2, "arguments differ from expected 'delete_file' (entry 0)")]),
    ({"type": "trajectory_match", "trajectory_match_mode": "subset",
      "reference_tool_calls": [{"name": "search", "args": {"q": "a"}}]},
     [(1, "extra call: not in the reference"), (2, "extra call: not in the reference"),
      (3, "extra call: not in the reference")]),
    ({"type": "tool_trajectory_avg_score",
      "criteria": {"tool_trajectory_avg_score": {"threshold": 1.0, "match_type": "EXACT"}},
      "expected_tool_use": [{"name": "search", "args": {"q": "a"}},
                            {"name": "fetch", "args": {}}]},
     [(1, "not the expected 'fetch' (entry 1)"), (2, "extra call beyond the 2 expected"),
      (3, "extra call beyond the 2 expected")]),
])
def test_each_family_names_the_calls_that_broke_its_rule(
        entry: dict[str, Any], expected: list[tuple[int, str]]) -> None:
    report = graded(RUN, {"graders": [{"name": "g", **entry}]})
    (result,) = report.results
    assert not result.passed, result.explanation
    assert violations(result) == expected
    for v in result.details["violations"]:   # the span id and the name of the call listed
        listed = report.run.calls[v["call"]]
        assert v["span_id"] == format(listed.span_id, "016x") and v["tool"] == listed.name
    assert list(flagged_spans(report.results)) == [
        report.run.calls[j].span_id for j in dict.fromkeys(j for j, _ in expected)]


@pytest.mark.parametrize("entry", [
    {"type": "tool_trajectory", "mode": "in_order", "expected": [{"tool": "report"}]},
    {"type": "tool-call-order", "tool_calls_order": ["search", "report"]},
    {"type": "tool_trajectory_avg_score", "expected_tool_use": [{"name": "report", "args": {}}],
     "criteria": {"tool_trajectory_avg_score": {"threshold": 1.0, "match_type": "IN_ORDER"}}},
    {"type": "trajectory_match", "trajectory_match_mode": "superset",
     "reference_tool_calls": [{"name": "report", "args": {}}]},
])
def test_rules_that_allow_extra_calls_name_none(entry: dict[str, Any]) -> None:
    (result,) = graded(RUN, {"graders": [{"name": "g", **entry}]}).results
    assert result.passed
    assert "violations" not in result.details


def test_a_grader_that_passes_despite_a_listed_call_marks_nothing() -> None:
    entry = {"name": "g", "type": "tool_trajectory", "mode": "exact", "threshold": 0.5,
             "expected": [{"tool": "search"}, {"tool": "search"}, {"tool": "delete_file"}]}
    report = graded(RUN, {"graders": [entry]})
    (result,) = report.results
    assert result.passed and violations(result) == [(3, "extra call beyond the 3 expected")]
    assert flagged_spans(report.results) == {} and flagged_calls(report.results) == {}


@grader
def flags_deletes(run: AgentRun, submission: str | None) -> GradeResult:
    listed: list[Any] = [{"call": c.index, "span_id": format(c.span_id, "016x"),
                          "tool": c.name, "reason": "custom rule"}
                         for c in run.calls if c.name.startswith("delete")]
    listed += ["not a mapping", {"call": "x", "span_id": "not hex at all"}]   # ignored
    return GradeResult("deletes", "custom", 0.0, False, "fail", "deletes", {"violations": listed})


def test_a_custom_grader_lists_violations_too() -> None:
    report = graded(RUN, {"graders": [{"name": "mine", "kind": "tool",
                                       "function": f"{__name__}:flags_deletes"}]})
    assert flagged_calls(report.results) == {2: ["mine"]}
    assert flagged_spans(report.results) == {report.run.calls[2].span_id: ["mine"]}


# -- real SDK spans: ToolEvalSpanExporter ---------------------------------------------------------

def run_agent(tracer: trace.Tracer, calls: Sequence[tuple[str, dict[str, Any]]] = CALLS
              ) -> None:
    """One agent run: a model call before each tool call."""
    with tracer.start_as_current_span("invoke_agent planner", attributes=AGENT):
        for name, args in calls:
            with tracer.start_as_current_span("chat m", attributes={"gen_ai.operation.name": "chat"}):
                pass
            with tracer.start_as_current_span(f"execute_tool {name}", attributes={
                    "gen_ai.tool.name": name, "gen_ai.tool.call.arguments": json.dumps(args)}):
                pass


class Pipeline:
    """TracerProvider → SimpleSpanProcessor → ToolEvalSpanExporter → InMemorySpanExporter."""

    def __init__(self, config: Any = CONFIG, decision_wait: float = 0.05) -> None:
        self.memory = InMemorySpanExporter()
        self.exporter = ToolEvalSpanExporter(self.memory, config, decision_wait=decision_wait)
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("tests.violations")

    def run(self) -> None:
        run_agent(self.tracer)

    def spans(self) -> list[ReadableSpan]:
        return list(self.memory.get_finished_spans())

    def close(self) -> None:
        self.provider.shutdown()


@pytest.fixture
def pipeline() -> Iterator[Pipeline]:
    p = Pipeline()
    yield p
    p.close()


def tool_marks(spans: Sequence[ReadableSpan]) -> list[tuple[str, Any, Any]]:
    """(name, tooleval.violation, tooleval.violation.graders) of each tool span, in start order."""
    tools = sorted((s for s in spans if "gen_ai.tool.name" in (s.attributes or {})),
                   key=lambda s: s.start_time or 0)
    return [(s.name, (s.attributes or {}).get("tooleval.violation"),
             (s.attributes or {}).get("tooleval.violation.graders")) for s in tools]


def test_exporter_marks_the_offending_tool_spans(pipeline: Pipeline) -> None:
    pipeline.run()
    assert pipeline.exporter.force_flush(10_000)
    spans = pipeline.spans()
    assert len(spans) == len({s.context.span_id for s in spans}) == 1 + 2 * len(CALLS)
    assert tool_marks(spans) == [
        ("execute_tool search", None, None),
        ("execute_tool search", True, ("one-search", "just-search")),
        ("execute_tool delete_file", True, ("no-delete", "just-search")),
    ]
    # only tool spans are marked; the root carries the verdicts as before
    (root,) = [s for s in spans if "tooleval.passed" in (s.attributes or {})]
    assert root.attributes["tooleval.failed"] == ("no-delete", "one-search", "just-search")
    assert not any("tooleval.violation" in (s.attributes or {}) for s in spans
                   if "gen_ai.tool.name" not in (s.attributes or {}))
    assert pipeline.exporter.stats()["marked_spans"] == 2


def test_exporter_holds_tool_spans_until_the_run_is_decided() -> None:
    p = Pipeline(decision_wait=0.5)
    try:
        p.run()
        assert [s.name for s in p.spans()] == ["chat m"] * 3   # tool spans and root held
        deadline = time.monotonic() + 10
        while len(p.spans()) < 7 and time.monotonic() < deadline:
            time.sleep(0.02)                                     # the grading thread, no flush
        assert [m[1] for m in tool_marks(p.spans())] == [None, True, True]
    finally:
        p.close()


@pytest.mark.parametrize("config", [
    {**CONFIG, "emit": {"violation_marks": False}},
    {"graders": [{"name": "answer", "kind": "tool", "function": "contains",
                  "extractor": "last_assistant", "ground_truth": "x"}]},   # names no call
], ids=["switched-off", "no-grader-names-calls"])
def test_without_marks_tool_spans_pass_through_at_once(config: Any) -> None:
    p = Pipeline(config, decision_wait=30.0)
    try:
        p.run()
        assert [s.name for s in p.spans()] == ["chat m", "execute_tool search"] * 2 + [
            "chat m", "execute_tool delete_file"]               # only the root is held
        assert p.exporter.force_flush(10_000)
        assert [(m[1], m[2]) for m in tool_marks(p.spans())] == [(None, None)] * 3
    finally:
        p.close()


def test_exporter_shutdown_decides_held_tool_spans(pipeline: Pipeline) -> None:
    """A trace whose root never ended: shutdown forwards its held tool span all the same."""
    span = pipeline.tracer.start_span("invoke_agent planner", attributes=AGENT)
    ctx = trace.set_span_in_context(span)
    with pipeline.tracer.start_as_current_span("execute_tool delete_file", context=ctx,
                                               attributes={"gen_ai.tool.name": "delete_file"}):
        pass
    assert pipeline.spans() == []
    assert pipeline.exporter.shutdown(10_000)
    (only,) = pipeline.spans()     # the open root never ended: no run, forwarded unmarked
    assert only.name == "execute_tool delete_file"
    assert "tooleval.violation" not in (only.attributes or {})


# -- real OTLP exporters into serve, forwarded to a receiver -------------------------------------

@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_serve_forwards_the_marked_tool_spans(protocol: str, receiver: OtlpReceiver) -> None:
    options = ServeOptions(load_config(CONFIG), grpc="127.0.0.1:0", http="127.0.0.1:0",
                           forward=receiver.http_endpoint, decision_wait=0.2)
    with ToolEvalServer(options) as server:
        exporter: Any = (
            HttpExporter(endpoint=f"http://127.0.0.1:{server.http_port}/v1/traces")
            if protocol == "http/protobuf"
            else GrpcExporter(endpoint=f"127.0.0.1:{server.grpc_port}", insecure=True))
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter))
        run_agent(provider.get_tracer("tests.violations"))
        provider.shutdown()
        assert receiver.wait_for(lambda: len(receiver.spans()) == 1 + 2 * len(CALLS))
        stats = server.stats()
    spans = receiver.spans()
    assert max(Counter(s["span_id"] for s in spans).values()) == 1
    by_query = {json.loads(s["attributes"]["gen_ai.tool.call.arguments"]).get("q", "-"):
                (s["name"], s["attributes"].get("tooleval.violation"),
                 s["attributes"].get("tooleval.violation.graders"))
                for s in spans if "gen_ai.tool.name" in s["attributes"]}
    assert by_query == {
        "a": ("execute_tool search", None, None),                       # call 0
        "b": ("execute_tool search", True, ["one-search", "just-search"]),
        "-": ("execute_tool delete_file", True, ["no-delete", "just-search"]),
    }
    assert stats["marked_spans"] == 2


# -- grade: JSON with --include-calls, and the HTML timeline --------------------------------------

@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    path = tmp_path / "traces.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileExporter(path)))
    run_agent(provider.get_tracer("tests.violations"))
    provider.shutdown()
    return path


def test_grade_json_marks_each_call(trace_file: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "graders.json"
    config.write_text(json.dumps(CONFIG))
    assert main(["grade", str(trace_file), "-c", str(config), "-f", "json",
                 "--include-calls"]) == 1
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert [(c["violation"], c["violation_graders"]) for c in run["calls"]] == [
        (False, []), (True, MARKS[1]), (True, MARKS[2])]
    listed = {v["span_id"] for r in run["results"] for v in r["details"].get("violations", [])}
    assert listed == {run["calls"][1]["span_id"], run["calls"][2]["span_id"]}


def test_html_timeline_flags_the_offending_calls() -> None:
    report = graded([call(n, a) for n, a in CALLS], CONFIG)
    text = render_html([report], {"runs": 1})
    check_html(text)
    rows = rows_of(text, 1)
    assert len(rows) == 3
    assert "f-violation" not in rows[0] and "data-violation" not in rows[0]
    for j in (1, 2):
        assert f'data-violation="{", ".join(MARKS[j])}"' in rows[j]
        assert re.search(r'<span class="flag f-violation" title="named by '
                         + re.escape(", ".join(MARKS[j])) + r'">violation</span>', rows[j])


def test_html_violation_flag_is_drawn_in_a_browser(tmp_path: Path) -> None:
    from tests.test_html_report import browse, chromium

    binary = chromium()
    report = graded([call(n, a) for n, a in CALLS], CONFIG)
    page = tmp_path / "report.html"
    page.write_text(render_html([report], {"runs": 1}), encoding="utf-8")
    dom = browse(binary, tmp_path / "profile", "--dump-dom", page.as_uri()).stdout
    flags = re.findall(r'<span class="flag f-violation" title[^>]*>violation</span>', dom)
    assert len(flags) == 2     # and one more in the legend, without a title
    assert dom.count("data-violation=") == 2
    shot = tmp_path / "shot.png"
    browse(binary, tmp_path / "profile2", f"--screenshot={shot}", "--window-size=1100,700",
           page.as_uri())
    assert shot.stat().st_size > 10_000


def test_the_docs_example_runs_and_prints_the_marked_calls() -> None:
    import subprocess
    import sys

    page = (Path(__file__).resolve().parents[1] / "docs" / "violations.md").read_text()
    script = re.search(r"^```python\n(.*?)^```", page, re.DOTALL | re.MULTILINE)
    printed = re.search(r"^prints\n\n```\n(.*?)^```", page, re.DOTALL | re.MULTILINE)
    assert script is not None and printed is not None
    done = subprocess.run([sys.executable, "-c", script.group(1)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == printed.group(1)
