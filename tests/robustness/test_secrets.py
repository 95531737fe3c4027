"""No argument, result or message value leaves through otel-tooleval unless asked for.

Contract (ARCHITECTURE.md, "Explanations and events carry no argument or result values unless
emit.include_values is on"), tested here as:

* Live: with default settings, nothing otel-tooleval **adds** carries a value of the run. What it
  adds: the root copy's new ``gen_ai.evaluation.result`` events and its new ``tooleval.*``
  attributes; every log record (all of them are otel-tooleval's: it is the only logger here);
  every metric's name, description, unit and data-point attributes. What it does **not** add,
  and so is not checked: the attributes and events the application put on its spans (the tool
  spans pass through untouched and legitimately carry their own arguments and results, and the
  root copy keeps the root's own attributes and events).
* Offline: ``otel-tooleval grade`` reports (json, junit, table, html) are made of the same
  verdicts, so the same rule holds for everything in them, ``details`` included.
* With ``emit.include_values: true`` the values do appear (so the scans above can fail), except
  in metrics, whose attributes never carry values.

Unique markers are planted in tool arguments, tool results, a tool's error, model input and
output messages, the final output and the run's ground truth; every grader family is configured,
including graders that fail on exactly those values, so explanations are written about them.
"""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from otel_tooleval import ToolEvalSpanProcessor, grader
from otel_tooleval.cli import main as cli_main
from otel_tooleval.model import AgentRun, RunReport

TOKEN = uuid.uuid4().hex            # every marker holds it; scans look for it, in any case
MARK = {where: f"SECRET-MARKER-{where}-{TOKEN}" for where in (
    "arg", "path", "command", "result", "error", "input", "message", "final", "truth",
    "root_event")}


@grader
def leaky_custom(run: AgentRun, submission: str | None) -> float:
    """A custom grader that fails by raising with the value in the message."""
    raise ValueError(f"cannot grade {submission}")


def config(include_values: bool) -> dict[str, Any]:
    """Every family; most graders fail on the planted values, so they explain about them."""
    return {"graders": [
        {"name": "tc-result", "type": "tool-calls", "config": {
            "disallowed": [{"name": "^search$", "result": "SECRET-MARKER-result"}]}},
        {"name": "tc-path", "type": "tool-calls", "config": {
            "disallowed": [{"name": "^read_file$", "path": r"\.env$"}],
            "required": [{"name": "^bash$", "command": "^npm test$"},
                         {"name": "^search$", "args": {"query": "nothing-like-it"}}],
            "sequence": ["^search$", "^bash$", "^read_file$"]}},
        {"name": "tc-missing-arg", "type": "tool-calls", "config": {
            "required": [{"name": "^search$", "command": "x"}]}},      # config error at grading
        {"name": "trajectory", "type": "tool_trajectory", "mode": "in_order", "expected": [
            {"tool": "search", "args": {"query": "expected query"}},
            {"tool": "bash", "args": {"command": "make"}, "max_duration_ms": 0}]},
        {"name": "trajectory-exact", "type": "tool_trajectory", "mode": "exact",
         "expected": [{"tool": "search"}, {"tool": "nope"}]},
        {"name": "selection", "type": "equal_function_sets", "classes": [
            {"name": "search", "members": ["search"]}, {"name": "fetch", "members": ["fetch"]}]},
        {"name": "final-exact", "kind": "tool", "function": "exact_match",
         "extractor": "last_assistant"},                                # truth from the run
        {"name": "args-regex", "kind": "tool", "function": "regex_match",
         "extractor": "tool_arguments",
         "extractor_config": {"tool_name": "search", "occurrence": "all"},
         "ground_truth": "^never$"},
        {"name": "output-contains", "kind": "tool", "function": "contains",
         "extractor": "tool_output", "extractor_config": {"tool_name": "search"},
         "ground_truth": "absent"},
        {"name": "error-output", "kind": "tool", "function": "contains",
         "extractor": "tool_output", "extractor_config": {"tool_name": "read_file"},
         "ground_truth": "absent"},
        {"name": "first-message", "kind": "tool", "function": "exact_match",
         "extractor": "first_assistant", "ground_truth": "other"},
        {"name": "all-messages", "kind": "tool", "function": "ascii_printable_only",
         "extractor": "all_assistant"},
        {"name": "marker", "kind": "tool", "function": "exact_match",
         "extractor": "after_marker", "extractor_config": {"marker": "ANSWER:"},
         "ground_truth": "other"},
        {"name": "pattern", "kind": "tool", "function": "exact_match", "extractor": "pattern",
         "extractor_config": {"pattern": r"SECRET-MARKER-\w+-\w+"}, "ground_truth": "other"},
        {"name": "attribute", "kind": "tool", "function": "contains",
         "extractor": "span_attribute", "extractor_config": {"attribute": "app.note"},
         "ground_truth": "other"},
        {"name": "custom", "kind": "tool",
         "function": "tests.robustness.test_secrets:leaky_custom",
         "extractor": "tool_output", "extractor_config": {"tool_name": "search"}},
        {"name": "order", "type": "tool-call-order", "tool_calls_order": ["bash", "search"]},
        {"name": "count", "type": "tool-call-count", "tool_calls_count": {"search": ["==", 5]}},
        {"name": "args", "type": "tool-call-args",
         "tool_calls": [{"name": "search", "args": {"query": "other"}}]},
        {"name": "output", "type": "tool-call-output",
         "tool_outputs": [{"name": "search", "output": "other"}]},
    ], "emit": {"include_values": include_values}}


def _messages(text: str) -> str:
    return json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}]}])


ROOT_ATTRIBUTES = {
    "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "secretive",
    "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
        {"type": "text", "content": MARK["input"]}]}]),
    "tooleval.ground_truth": MARK["truth"],
    "app.note": MARK["message"],
}


def run_agent(tracer: trace.Tracer) -> None:
    """One run in GenAI semconv through the plain OTel API, values planted everywhere."""
    with tracer.start_as_current_span("invoke_agent secretive",
                                      attributes=ROOT_ATTRIBUTES) as root:
        root.add_event("app.event", {"note": MARK["root_event"]})
        with tracer.start_as_current_span("chat m", attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": ROOT_ATTRIBUTES["gen_ai.input.messages"],
                "gen_ai.output.messages": _messages(f"thinking about {MARK['message']} é")}):
            pass
        for name, args, result in (
            ("search", {"query": MARK["arg"]}, {"hits": [MARK["result"]]}),
            ("bash", {"command": MARK["command"]}, f"ran {MARK['result']}"),
            ("read_file", {"path": f"/{MARK['path']}/.env"}, None),
        ):
            with tracer.start_as_current_span(f"execute_tool {name}", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                    "gen_ai.tool.call.arguments": json.dumps(args)}) as span:
                if result is None:
                    span.set_status(Status(StatusCode.ERROR, MARK["error"]))
                else:
                    span.set_attribute("gen_ai.tool.call.result",
                                       result if isinstance(result, str) else json.dumps(result))
        final = f"ANSWER: {MARK['final']}"
        with tracer.start_as_current_span("chat m", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.output.messages": _messages(final)}):
            pass
        root.set_attribute("gen_ai.output.messages", _messages(final))


# -- scanning ------------------------------------------------------------------------------------

def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, bytes):
        yield value.decode("utf-8", "replace")
    elif isinstance(value, dict) or hasattr(value, "items"):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, Iterable):
        for v in value:
            yield from _strings(v)
    elif value is not None:
        yield str(value)


def leaks(where: str, value: Any) -> list[str]:
    return [f"{where}: {s!r}" for s in _strings(value) if TOKEN in s.lower()]


class Capture:
    """A live processor with real in-memory span, log and metric exporters."""

    def __init__(self, include_values: bool) -> None:
        self.spans = InMemorySpanExporter()
        self.logs = InMemoryLogRecordExporter()
        self.metrics = InMemoryMetricReader()
        self.logger_provider = LoggerProvider()
        self.logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.logs))
        self.meter_provider = MeterProvider(metric_readers=[self.metrics])
        self.reports: list[RunReport] = []
        self.processor = ToolEvalSpanProcessor(
            config(include_values), SimpleSpanProcessor(self.spans),
            meter_provider=self.meter_provider, logger_provider=self.logger_provider,
            on_report=self.reports.append)
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)

    def finish(self) -> None:
        assert self.provider.force_flush(30_000)
        self.provider.shutdown()

    def added_by_tooleval(self, app_root_attributes: dict[str, Any],
                          app_root_events: set[str]) -> dict[str, Any]:
        """Everything otel-tooleval added, by where it was found."""
        out: dict[str, Any] = {}
        roots = {r.run.root_span_id for r in self.reports}
        for span in self.spans.get_finished_spans():
            if span.context.span_id not in roots:
                continue           # a pass-through span: the application's own attributes
            attrs = dict(span.attributes or {})
            added = {k: v for k, v in attrs.items() if k not in app_root_attributes}
            assert all(k.startswith("tooleval.") for k in added), added
            out[f"root {span.name} attributes"] = added
            for i, event in enumerate(span.events):
                if event.name in app_root_events:
                    continue       # the application's own event, kept on the copy
                assert event.name == "gen_ai.evaluation.result"
                out[f"root event {i}"] = (event.name, dict(event.attributes or {}))
        for i, data in enumerate(self.logs.get_finished_logs()):
            record = data.log_record
            out[f"log {i}"] = (record.event_name, record.body, dict(record.attributes or {}))
        metrics = self.metrics.get_metrics_data()
        for rm in metrics.resource_metrics if metrics else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    out[f"metric {metric.name}"] = (
                        metric.name, metric.description, metric.unit,
                        [dict(p.attributes or {}) for p in metric.data.data_points])
        return out


def _scan(found: dict[str, Any]) -> list[str]:
    return [leak for where, value in found.items() for leak in leaks(where, value)]


def _run_plain(include_values: bool) -> Capture:
    capture = Capture(include_values)
    run_agent(capture.provider.get_tracer("secrets-test"))
    capture.finish()
    return capture


def _check_graded(capture: Capture) -> RunReport:
    (report,) = capture.reports
    failing = [r for r in report.results if not r.passed]
    # The graders did judge (and fail on) the planted values, so explanations were written.
    assert len(failing) >= 15, [(r.name, r.label) for r in report.results]
    by_name = {r.name: r for r in report.results}
    assert by_name["custom"].label == "error"
    assert by_name["tc-missing-arg"].label == "error"
    assert by_name["tc-result"].label == "fail"
    assert by_name["final-exact"].details["ground_truth_from"] == "attribute"
    return report


def test_default_settings_emit_no_value_live() -> None:
    capture = _run_plain(include_values=False)
    _check_graded(capture)
    found = capture.added_by_tooleval(ROOT_ATTRIBUTES | {"gen_ai.output.messages": ""},
                                      {"app.event"})
    assert any(k.startswith("root event") for k in found)
    assert any(k.startswith("log ") for k in found)
    assert "metric gen_ai.evaluation.score" in found
    assert _scan(found) == []
    # The distinction is real: the application's own spans and root attributes do carry the
    # values, and they pass through untouched.
    own = [leak for s in capture.spans.get_finished_spans()
           for leak in leaks(s.name, [dict(s.attributes or {}),
                                      [dict(e.attributes or {}) for e in s.events],
                                      s.status.description])]
    assert len(own) >= 8


def test_include_values_shows_them_except_in_metrics() -> None:
    capture = _run_plain(include_values=True)
    _check_graded(capture)
    found = capture.added_by_tooleval(ROOT_ATTRIBUTES | {"gen_ai.output.messages": ""},
                                      {"app.event"})
    events = _scan({k: v for k, v in found.items() if k.startswith("root event")})
    logs = _scan({k: v for k, v in found.items() if k.startswith("log ")})
    assert events and logs, "include_values: true shows no value: the scan could not fail"
    for where in ("final", "truth", "result", "error"):
        assert any(MARK[where].lower() in leak.lower() for leak in events), where
    assert _scan({k: v for k, v in found.items() if k.startswith("metric ")}) == []


# -- offline reports -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    run_agent(provider.get_tracer("secrets-test"))
    provider.shutdown()
    spans: list[ReadableSpan] = list(exporter.get_finished_spans())
    path = tmp_path_factory.mktemp("secrets") / "traces.jsonl"
    doc = json_format.MessageToDict(encode_spans(spans))
    path.write_text(json.dumps(doc) + "\n")
    assert TOKEN in path.read_text()      # the input does hold the values
    return path


def _grade(trace_file: Path, include_values: bool, fmt: str) -> str:
    cfg = trace_file.parent / f"graders-{include_values}.json"
    cfg.write_text(json.dumps(config(include_values)))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(["grade", str(trace_file), "-c", str(cfg), "-f", fmt])
    # 2, not 1: the config's tc-missing-arg grader meets a config problem while grading
    # (its call has no string 'command'), and the one-line reason must not leak values either.
    assert code == 2, err.getvalue()
    assert "config problem found while grading" in err.getvalue()
    assert TOKEN not in err.getvalue().lower()
    return out.getvalue()


@pytest.mark.parametrize("fmt", ["json", "junit", "table", "html"])
def test_offline_reports_hold_no_value_by_default(trace_file: Path, fmt: str) -> None:
    text = _grade(trace_file, False, fmt)
    assert "tc-result" in text                     # the verdicts are there
    assert TOKEN not in text.lower(), [line for line in text.splitlines()
                                       if TOKEN in line.lower()][:3]


@pytest.mark.parametrize("fmt", ["json", "junit", "table", "html"])
def test_offline_reports_show_values_with_include_values(trace_file: Path, fmt: str) -> None:
    assert TOKEN in _grade(trace_file, True, fmt).lower()


# -- a real framework ----------------------------------------------------------------------------

@pytest.mark.frameworks
def test_pydantic_ai_run_emits_no_value() -> None:
    pytest.importorskip("pydantic_ai")
    from tests.support.agents import run_pydantic_ai_weather

    capture = Capture(include_values=False)
    output = run_pydantic_ai_weather(
        capture.provider, agent_name="secretive", prompt=f"weather for {MARK['input']}",
        script=[[("lookup_city", {"query": MARK["arg"]})],
                [("get_weather", {"city": MARK["command"]})],
                f"ANSWER: {MARK['final']}"])
    capture.finish()
    assert MARK["final"] in output
    (report,) = capture.reports
    assert len(report.run.calls) == 2 and not report.passed
    root_ids = {report.run.root_span_id}
    root_attrs = {k for s in capture.spans.get_finished_spans()
                  if s.context.span_id in root_ids for k in (s.attributes or {})
                  if not k.startswith("tooleval.")}
    found = capture.added_by_tooleval(dict.fromkeys(root_attrs), set())
    assert _scan(found) == []
