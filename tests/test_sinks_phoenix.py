"""The Phoenix sink: the annotations a run becomes, its config, and the processor, exporter and
serve feeding it (against a local HTTP receiver; tests/test_phoenix_sink_e2e.py has the real
Phoenix)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import ToolEvalSpanExporter, ToolEvalSpanProcessor
from otel_tooleval.cli import main
from otel_tooleval.config import ConfigError, config_from_mapping
from otel_tooleval.model import GradeResult
from otel_tooleval.schema import config_schema
from otel_tooleval.sessions.model import SessionKey, SessionReport
from otel_tooleval.sinks.phoenix import PhoenixSinkConfig, run_annotations, session_annotation
from tests.support.runs import call
from tests.test_reports import graded
from tests.test_sinks_delivery import Receiver, _closed_port
from tests.test_violations import CONFIG, run_agent

RUN = [call("search", {"q": "a"}), call("search", {"q": "b"}), call("delete_file", {"p": "/"})]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    import threading
    server = Receiver([200])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def phoenix(endpoint: str, **extra: Any) -> dict[str, Any]:
    return {**CONFIG, "emit": {"phoenix": {"endpoint": endpoint, "flush_interval_s": 0.05,
                                           **extra}}}


# -- the annotations ------------------------------------------------------------------------------

def test_a_run_becomes_grader_span_annotations_a_trace_annotation_and_violation_ones() -> None:
    report = graded(RUN, CONFIG)
    config = PhoenixSinkConfig(endpoint="http://127.0.0.1:6006")
    pairs = run_annotations(report, config)
    root = report.run.root_span_id_hex
    on_root = {p["name"]: p for path, p in pairs
               if path == "/v1/span_annotations" and p["span_id"] == root}
    assert {name: (p["result"]["label"], p["result"]["score"]) for name, p in on_root.items()} \
        == {r.name: ("pass" if r.passed else "fail", r.score) for r in report.results}
    assert {p["result"]["label"] for p in on_root.values()} == {"pass", "fail"}
    first = on_root["no-delete"]
    assert first["annotator_kind"] == "CODE" and first["identifier"] == "otel-tooleval"
    assert first["result"]["explanation"] == report.results[0].explanation
    assert first["metadata"]["grader_type"] == "tool-calls"
    assert first["metadata"]["trace_id"] == report.run.trace_id_hex
    assert first["metadata"]["details"]["violations_count"] == 1
    (trace,) = [p for path, p in pairs if path == "/v1/trace_annotations"]
    assert trace["trace_id"] == report.run.trace_id_hex and trace["name"] == "tooleval"
    assert trace["result"]["label"] == "fail"
    assert trace["result"]["score"] == pytest.approx(report.score)
    assert trace["result"]["explanation"] == f"failed: {', '.join(report.failed)}"
    spans = {format(c.span_id, "016x"): c.name for c in report.run.calls}
    on_tools = sorted((spans[p["span_id"]], p["name"], p["result"]["label"])
                      for path, p in pairs
                      if path == "/v1/span_annotations" and p["span_id"] != root)
    assert on_tools == [("delete_file", "just-search", "fail"), ("delete_file", "no-delete", "fail"),
                        ("search", "just-search", "fail"), ("search", "one-search", "fail")]
    deleted = next(p for path, p in pairs if p.get("span_id") == format(
        report.run.calls[2].span_id, "016x") and p["name"] == "no-delete")
    assert deleted["result"]["explanation"] == "disallowed '^delete'"
    json.dumps(pairs)                                   # all of it JSON as it stands


def test_violations_off_and_names_are_configurable() -> None:
    report = graded(RUN, CONFIG)
    config = PhoenixSinkConfig(endpoint="http://x", violations=False, run_annotation="agent-eval",
                               identifier="ci-42")
    pairs = run_annotations(report, config)
    root = report.run.root_span_id_hex
    assert all(p.get("span_id", root) == root for _, p in pairs)
    assert {p["identifier"] for _, p in pairs} == {"ci-42"}
    assert [p["name"] for path, p in pairs if path == "/v1/trace_annotations"] == ["agent-eval"]


def test_a_grader_that_raised_is_labelled_error() -> None:
    report = graded(RUN, CONFIG)
    broken = GradeResult.failure("no-delete", "tool-calls", "ValueError: boom", "grader raised")
    report = type(report)(report.run, (broken, *report.results[1:]))
    pairs = run_annotations(report, PhoenixSinkConfig(endpoint="http://x"))
    labels = {p["name"]: p["result"]["label"] for path, p in pairs
              if p.get("span_id") == report.run.root_span_id_hex}
    assert labels["no-delete"] == "error"
    assert next(p for path, p in pairs if path == "/v1/trace_annotations")["result"]["label"] \
        == "error"


def test_a_session_becomes_a_session_annotation() -> None:
    result = GradeResult("turns", "turns", 0.5, False, "fail", "1 of 2 turns", {})
    report = SessionReport(SessionKey("conv-7", "session.id"), "planner", (), (result,))
    path, payload = session_annotation(report, PhoenixSinkConfig(endpoint="http://x"))
    assert path == "/v1/session_annotations"
    assert payload["session_id"] == "conv-7" and payload["result"]["label"] == "fail"
    assert payload["metadata"]["graders"] == {"turns": {"label": "fail", "score": 0.5}}


# -- the config -----------------------------------------------------------------------------------

def test_endpoint_and_key_default_from_phoenix_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHOENIX_COLLECTOR_ENDPOINT", "http://phoenix:6006/v1/traces")
    monkeypatch.setenv("PHOENIX_API_KEY", "k3y")
    config = config_from_mapping({**CONFIG, "emit": {"phoenix": {}}}).emit.phoenix
    assert config is not None
    assert config.endpoint == "http://phoenix:6006"
    assert config.request_headers() == {"Authorization": "Bearer k3y"}
    assert "k3y" not in repr(config)
    explicit = PhoenixSinkConfig(endpoint="https://p.example/", api_key="other")
    assert explicit.endpoint == "https://p.example"
    assert explicit.request_headers()["Authorization"] == "Bearer other"


@pytest.mark.parametrize("phoenix_config,message", [
    ({}, ("emit.phoenix.endpoint: Phoenix's URL is needed: set emit.phoenix.endpoint or "
          "PHOENIX_COLLECTOR_ENDPOINT")),
    ({"endpoint": "localhost:6006"}, "emit.phoenix.endpoint: must be an http:// or https:// URL"),
    ({"endpoint": "http://x", "batch_size": 0}, "emit.phoenix.batch_size"),
    ({"endpoint": "http://x", "annotations": True}, "emit.phoenix.annotations: unknown key"),
])
def test_config_errors_name_the_field(monkeypatch: pytest.MonkeyPatch,
                                      phoenix_config: dict[str, Any], message: str) -> None:
    monkeypatch.delenv("PHOENIX_COLLECTOR_ENDPOINT", raising=False)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        config_from_mapping({**CONFIG, "emit": {"phoenix": phoenix_config}})


def test_the_schema_covers_the_phoenix_section() -> None:
    validator = jsonschema.Draft202012Validator(config_schema())
    assert validator.is_valid({**CONFIG, "emit": {"phoenix": {"endpoint": "http://x"}}})
    assert not validator.is_valid({**CONFIG, "emit": {"phoenix": {"endpoint": "http://x",
                                                                  "bogus": 1}}})


# -- fed by the processor, the exporter and serve -------------------------------------------------

def _annotations(server: Receiver, path: str) -> list[dict[str, Any]]:
    return [item for body, p in zip(server.bodies, server.paths) if p.startswith(path)
            for item in body["data"]]


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_the_processor_feeds_the_sink_and_shuts_it_down(receiver: Receiver, mode: str) -> None:
    config = {**phoenix(receiver.url), "grading": {"mode": mode}}
    memory = InMemorySpanExporter()
    processor = ToolEvalSpanProcessor(config, SimpleSpanProcessor(memory))
    provider = TracerProvider()
    provider.add_span_processor(processor)
    run_agent(provider.get_tracer("t"))
    assert processor.shutdown(10_000)
    root = next(s for s in memory.get_finished_spans() if s.parent is None)
    on_root = {a["name"]: a["result"]["label"] for a in _annotations(receiver, "/v1/span_ann")
               if a["span_id"] == format(root.context.span_id, "016x")}
    assert on_root == {"no-delete": "fail", "one-search": "fail", "just-search": "fail",
                       "uses-search": "pass"}
    assert [a["trace_id"] for a in _annotations(receiver, "/v1/trace_annotations")] \
        == [format(root.context.trace_id, "032x")]
    assert processor.sinks is not None
    stats = processor.sinks.stats()
    assert stats["sinks.phoenix.sent"] == 9 and stats["sinks.phoenix.queued"] == 0


def test_the_exporter_feeds_the_sink(receiver: Receiver) -> None:
    memory = InMemorySpanExporter()
    exporter = ToolEvalSpanExporter(memory, phoenix(receiver.url), decision_wait=0.05)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    run_agent(provider.get_tracer("t"))
    provider.shutdown()
    assert len(_annotations(receiver, "/v1/trace_annotations")) == 1
    assert len(_annotations(receiver, "/v1/span_annotations")) == 8


def test_an_unreachable_phoenix_costs_the_app_nothing() -> None:
    config = phoenix(_closed_port(), timeout_s=0.2, max_attempts=20, retry_deadline_s=300)
    processor = ToolEvalSpanProcessor(config, SimpleSpanProcessor(InMemorySpanExporter()))
    provider = TracerProvider()
    provider.add_span_processor(processor)
    started = time.monotonic()
    run_agent(provider.get_tracer("t"))
    assert time.monotonic() - started < 0.5
    # The run reaches the sink from the grading thread: wait until its annotations are there
    # (queued, or already being retried), so that shutdown finds them, however loaded the host.
    assert processor.sinks is not None
    waited = time.monotonic() + 10
    while not any(processor.sinks.stats().get(f"sinks.phoenix.{key}", 0)
                  for key in ("queued", "retries")):
        assert time.monotonic() < waited, processor.sinks.stats()
        time.sleep(0.01)
    shutdown_started = time.monotonic()
    assert processor.shutdown(1_000) is False          # the annotations were lost: said so
    assert time.monotonic() - shutdown_started < 1.5
    assert processor.sinks is not None
    stats = processor.sinks.stats()
    assert stats["sinks.phoenix.dropped.shutdown"] == 9
    assert stats.get("sinks.phoenix.sent", 0) == 0


# -- grade --to phoenix ---------------------------------------------------------------------------

JSONL = Path(__file__).resolve().parent / "data" / "files" / "traces.otlp.jsonl"
STRICT = "graders:\n  - {name: no-refund, type: tool-calls, config: {disallowed: ['^refund$']}}\n"


def _grade(tmp_path: Path, config: str, *extra: str) -> int:
    path = tmp_path / "graders.yaml"
    path.write_text(config)
    return main(["grade", str(JSONL), "--config", str(path), "--allow-input-problems",
                 "--to", "phoenix", *extra])


def test_grade_to_phoenix_annotates_the_runs_read_from_files(
        tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PHOENIX_COLLECTOR_ENDPOINT", receiver.url)
    code = _grade(tmp_path, STRICT)
    err = capsys.readouterr().err
    trace_annotations = _annotations(receiver, "/v1/trace_annotations")
    assert code == 1                                # the gate's own verdict, delivered
    assert trace_annotations and {a["name"] for a in trace_annotations} == {"tooleval"}
    sent = len(trace_annotations) + len(_annotations(receiver, "/v1/span_annotations"))
    assert f"otel-tooleval: --to phoenix: sent {sent}\n" in err


def test_grade_to_phoenix_fails_when_delivery_fails_unless_allowed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PHOENIX_COLLECTOR_ENDPOINT", _closed_port())
    config = STRICT + "emit:\n  phoenix: {max_attempts: 1}\n"
    assert _grade(tmp_path, config) == 2
    err = capsys.readouterr().err
    assert "--to phoenix: sent 0, dropped.unreachable " in err
    assert "not every verdict was delivered (--allow-delivery-errors" in err
    assert _grade(tmp_path, config, "--allow-delivery-errors") == 1


def test_grade_to_phoenix_without_an_endpoint_names_what_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("PHOENIX_COLLECTOR_ENDPOINT", raising=False)
    assert _grade(tmp_path, STRICT) == 2
    assert ("otel-tooleval: --to phoenix: emit.phoenix.endpoint: Phoenix's URL is needed: set "
            "emit.phoenix.endpoint or PHOENIX_COLLECTOR_ENDPOINT") in capsys.readouterr().err


def test_serve_feeds_the_sink_and_shuts_it_down(receiver: Receiver) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from otel_tooleval import load_config
    from otel_tooleval.serve import ServeOptions, ToolEvalServer

    options = ServeOptions(load_config(phoenix(receiver.url)), grpc="127.0.0.1:0",
                           http="127.0.0.1:0", forward="none", decision_wait=0.1)
    with ToolEvalServer(options) as server:
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
            endpoint=f"http://127.0.0.1:{server.http_port}/v1/traces")))
        run_agent(provider.get_tracer("t"))
        provider.shutdown()
        deadline = time.monotonic() + 10
        while server.stats().get("runs", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
    stats = server.stats()              # after serve's shutdown: the sink was shut down too
    assert stats["sinks.phoenix.sent"] == 9 and stats["sinks.phoenix.queued"] == 0
    assert len(_annotations(receiver, "/v1/trace_annotations")) == 1
