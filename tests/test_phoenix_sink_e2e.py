"""End to end with a real Phoenix: ``emit.phoenix`` annotates the graded runs in Arize Phoenix.

An agent run goes through ``ToolEvalSpanProcessor`` to a ``phoenix serve`` on 127.0.0.1 (the same
server ``tests/test_phoenix_e2e.py`` starts; ``TOOLEVAL_PHOENIX`` names it), its spans over
OTLP/HTTP, its verdicts through Phoenix's annotation API; they are read back through Phoenix's
REST API (``GET /v1/projects/{p}/span_annotations`` / ``trace_annotations``). The channels that
put grader names on the spans (events, root attributes) are off, so what names them in Phoenix
is the annotations alone. Headless Chromium opens the run's root span and its page must show
them; the screenshot is kept in ``test-artifacts/`` (``TOOLEVAL_UPDATE_DOCS_IMAGE=1`` redraws
``docs/images/phoenix-annotations.png``).
"""

from __future__ import annotations

import os
import shutil
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_tooleval import ToolEvalSpanProcessor
from otel_tooleval.model import RunReport
from otel_tooleval.sinks.phoenix import PhoenixSink, PhoenixSinkConfig
from tests.support.phoenix import DevToolsPage, PhoenixServer, wait_for
from tests.test_html_report import FLAGS, chromium
from tests.test_phoenix_e2e import phoenix_executable
from tests.test_violations import CONFIG, run_agent

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
DOCS_IMAGE = ROOT / "docs" / "images" / "phoenix-annotations.png"
PROJECT = "tooleval-annotations"
ROOT_LABELS = {"no-delete": "fail", "one-search": "fail", "just-search": "fail",
               "uses-search": "pass"}
# tool span -> graders that list it (tests/test_violations.py's MARKS, by tool)
TOOL_ANNOTATIONS = [("delete_file", "just-search"), ("delete_file", "no-delete"),
                    ("search", "just-search"), ("search", "one-search")]
QUIET = {"span_events": False, "root_attributes": False, "log_events": False,
         "metrics": False, "violation_marks": False}


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    executable = phoenix_executable()
    workdir = tmp_path_factory.mktemp("phoenix-sink")
    with PhoenixServer(executable, workdir, log_path=ARTIFACTS / "phoenix-sink.log") as server:
        yield server


@dataclass
class Annotated:
    report: RunReport
    span_annotations: list[dict[str, Any]]
    trace_annotations: list[dict[str, Any]]


def read_back(phoenix: PhoenixServer, report: RunReport) -> tuple[list[dict[str, Any]],
                                                                   list[dict[str, Any]]]:
    """The annotations on the run's spans and trace; none while the project does not exist."""
    project = quote(PROJECT, safe="")
    spans = [report.run.root_span_id_hex, *(format(c.span_id, "016x") for c in report.run.calls)]
    try:
        on_spans = phoenix.get(f"/v1/projects/{project}/span_annotations", span_ids=spans,
                               limit=1000)["data"]
        on_trace = phoenix.get(f"/v1/projects/{project}/trace_annotations",
                               trace_ids=[report.run.trace_id_hex], limit=1000)["data"]
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return [], []
        raise
    return on_spans, on_trace


@pytest.fixture(scope="module")
def annotated(phoenix: PhoenixServer) -> Annotated:
    reports: list[RunReport] = []
    config = {**CONFIG, "emit": {**QUIET, "phoenix": {"endpoint": phoenix.url,
                                                      "flush_interval_s": 0.1}}}
    processor = ToolEvalSpanProcessor(
        config, BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix.url}/v1/traces")),
        on_report=reports.append)
    provider = TracerProvider(resource=Resource.create(
        {"service.name": "tooleval-sink-e2e", "openinference.project.name": PROJECT}))
    provider.add_span_processor(processor)
    run_agent(provider.get_tracer("tests.phoenix_sink"))
    assert processor.shutdown(30_000)
    assert processor.sinks is not None
    stats = processor.sinks.stats()
    assert stats["sinks.phoenix.sent"] == 9, stats
    (report,) = reports

    def all_there() -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        spans, traces = read_back(phoenix, report)
        return (spans, traces) if len(spans) == 8 and len(traces) == 1 else None

    # Phoenix queues annotations and holds those whose span has not arrived yet
    spans, traces = wait_for(all_there, timeout=60, what="the annotations in Phoenix")
    return Annotated(report, spans, traces)


def test_the_graders_verdicts_are_annotations_on_the_root_span(annotated: Annotated) -> None:
    root = annotated.report.run.root_span_id_hex
    on_root = {a["name"]: a for a in annotated.span_annotations if a["span_id"] == root}
    assert {name: a["result"]["label"] for name, a in on_root.items()} == ROOT_LABELS
    scores = {r.name: r.score for r in annotated.report.results}
    assert {name: a["result"]["score"] for name, a in on_root.items()} == pytest.approx(scores)
    no_delete = on_root["no-delete"]
    assert no_delete["annotator_kind"] == "CODE"
    assert no_delete["identifier"] == "otel-tooleval"
    assert no_delete["metadata"]["grader_type"] == "tool-calls"
    assert no_delete["metadata"]["details"]["violations_count"] == 1
    assert no_delete["result"]["explanation"] == annotated.report.results[0].explanation


def test_the_runs_verdict_is_a_trace_annotation(annotated: Annotated) -> None:
    (trace,) = annotated.trace_annotations
    assert trace["trace_id"] == annotated.report.run.trace_id_hex
    assert trace["name"] == "tooleval" and trace["result"]["label"] == "fail"
    assert trace["result"]["score"] == pytest.approx(annotated.report.score)


def test_the_offending_tool_spans_are_annotated(annotated: Annotated) -> None:
    tools = {format(c.span_id, "016x"): c.name for c in annotated.report.run.calls}
    on_tools = sorted((tools[a["span_id"]], a["name"], a["result"]["label"])
                      for a in annotated.span_annotations if a["span_id"] in tools)
    assert on_tools == [(tool, grader, "fail") for tool, grader in TOOL_ANNOTATIONS]


def test_a_second_delivery_updates_rather_than_duplicates(phoenix: PhoenixServer,
                                                          annotated: Annotated) -> None:
    before = {a["id"]: a["updated_at"] for a in annotated.span_annotations
              + annotated.trace_annotations}
    sink = PhoenixSink(PhoenixSinkConfig(endpoint=phoenix.url, flush_interval_s=0.05))
    sink.submit(annotated.report)
    sink.submit(annotated.report)
    assert sink.shutdown(30.0)
    assert sink.stats()["sent"] == 18

    def updated() -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        spans, traces = read_back(phoenix, annotated.report)
        now = {a["id"]: a["updated_at"] for a in spans + traces}
        return (spans, traces) if all(now.get(i, t) != t for i, t in before.items()) else None

    spans, traces = wait_for(updated, timeout=60, what="the annotations updated")
    assert sorted(a["id"] for a in spans + traces) == sorted(before)


def test_phoenix_ui_shows_the_annotations_of_the_failing_run(phoenix: PhoenixServer,
                                                             annotated: Annotated,
                                                             tmp_path: Path) -> None:
    binary = chromium()
    run = annotated.report.run
    root = next(s for s in phoenix.spans(PROJECT, trace_id=[run.trace_id_hex])
                if s["parent_id"] is None)
    url = (f"{phoenix.url}/projects/{phoenix.project_id(PROJECT)}/spans/{run.trace_id_hex}"
           f"?selectedSpanNodeId={root['id']}")
    shot = ARTIFACTS / "phoenix-annotations.png"
    shot.unlink(missing_ok=True)
    with DevToolsPage(binary, FLAGS, tmp_path / "profile", width=1600, height=1000,
                      log_path=ARTIFACTS / "chromium-phoenix-sink.log") as page:
        page.navigate(url)
        # the trace's annotation, and each span's annotations (name and mean score) in the
        # trace's tree and on the root span's Annotations card; no other channel names the
        # graders here (QUIET)
        text = page.wait_for_text(run.trace_id_hex, "TRACE ANNOTATIONS", "SPAN ANNOTATIONS",
                                  "tooleval", *ROOT_LABELS, "0.00", "1.00", "0.33")
        assert "Server disconnected" not in text
        # the root span's Annotations card opened, as a table: label, score, explanation
        expand = ("(() => { const b = document.querySelector("
                  "'button.card__collapsible-button[aria-label=Annotations]');"
                  " if (!b) return false; if (b.getAttribute('aria-expanded') != 'true')"
                  " b.click(); return true; })()")
        wait_for(lambda: page.evaluate(expand), timeout=30, what="the Annotations card")
        as_table = ("(() => { const table = [...document.querySelectorAll("
                    "'[aria-label=\"Annotations view\"] button')]"
                    ".find(b => b.textContent.trim() == 'Table');"
                    " if (table) { table.click(); return true; } return false; })()")
        wait_for(lambda: page.evaluate(as_table), timeout=30, what="the annotations' table")
        page.wait_for_text("CODE", "fail", "pass", "Disallowed '^delete' called at #2",
                           "otel-tooleval")
        page.screenshot(shot)
    if os.environ.get("TOOLEVAL_UPDATE_DOCS_IMAGE"):
        shutil.copyfile(shot, DOCS_IMAGE)


def test_a_session_is_a_session_annotation(phoenix: PhoenixServer) -> None:
    """Phoenix reads a session from the spans' session.id; the session's verdict lands on it."""
    import json

    from tests.test_violations import AGENT

    project = "tooleval-sessions"
    sessions: list[Any] = []
    config = {**CONFIG, "sessions": {"graders": [
        {"name": "searched", "type": "tool-calls", "config": {"required": ["^search$"]}}]},
        "emit": {**QUIET, "phoenix": {"endpoint": phoenix.url, "flush_interval_s": 0.1}}}
    processor = ToolEvalSpanProcessor(
        config, BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix.url}/v1/traces")),
        on_session=sessions.append)
    provider = TracerProvider(resource=Resource.create(
        {"service.name": "tooleval-sink-e2e", "openinference.project.name": project}))
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests.phoenix_sink")
    for query in ("a", "b"):
        with tracer.start_as_current_span("invoke_agent planner",
                                          attributes={**AGENT, "session.id": "conv-1"}), \
                tracer.start_as_current_span("execute_tool search", attributes={
                    "gen_ai.tool.name": "search",
                    "gen_ai.tool.call.arguments": json.dumps({"q": query})}):
            pass
    assert processor.shutdown(30_000)
    assert [s.key.value for s in sessions] == ["conv-1"]

    def annotated() -> list[dict[str, Any]] | None:
        try:
            found = phoenix.get(f"/v1/projects/{project}/session_annotations",
                                session_ids=["conv-1"], limit=100)["data"]
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        return list(found) or None

    (annotation,) = wait_for(annotated, timeout=60, what="the session annotation")
    assert annotation["name"] == "tooleval" and annotation["result"]["label"] == "pass"
    assert annotation["result"]["score"] == 1.0
    assert annotation["metadata"]["graders"] == {"searched": {"label": "pass", "score": 1.0}}
