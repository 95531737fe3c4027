"""Zero-code set-ups: ``opentelemetry-instrument`` runs an unmodified program, graded.

Each test runs ``examples/zero_code/agent.py`` (two runs of a travel agent that imports only
the OpenTelemetry API; the second reads ``.env`` and fails ``no-secrets``) under
``opentelemetry-instrument`` in a subprocess, exporting to a loopback OTLP receiver.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import ToolEvalSpanProcessor
from otel_tooleval import autoconfig as ac
from tests.support.otlp_receiver import OtlpReceiver

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "examples" / "zero_code" / "agent.py"
CONFIG = ROOT / "examples" / "zero_code" / "graders.yaml"
INSTRUMENT = Path(sys.executable).parent / "opentelemetry-instrument"
SPANS_PER_PROGRAM = 22      # 2 roots, 11 chat spans, 9 tool spans
GRADERS = ["reports-result", "no-secrets", "validates-before-booking"]

pytestmark = pytest.mark.skipif(not INSTRUMENT.exists(),
                                reason="opentelemetry-instrument is not installed")


def run_instrumented(**env_vars: str) -> subprocess.CompletedProcess[str]:
    """Run the example under opentelemetry-instrument with only the given OTEL_* settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "TOOLEVAL_")) and "proxy" not in k.lower()}
    env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
               OTEL_SERVICE_NAME="travel-agent",
               # The venv's instrumentors (LangChain, OpenAI Agents) import whole frameworks the
               # example does not use: skipping them keeps each run about a second.
               OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="*",
               OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none",
               OTEL_BSP_SCHEDULE_DELAY="200", OTEL_METRIC_EXPORT_INTERVAL="60000")
    env.update(env_vars)
    return subprocess.run([str(INSTRUMENT), sys.executable, str(AGENT)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def grpc_env(rx: OtlpReceiver) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{rx.grpc_endpoint}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}


def http_env(rx: OtlpReceiver) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": rx.http_endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}


def roots_of(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"] == "invoke_agent travel_agent"]


def assert_all_spans_once(spans: list[dict[str, Any]]) -> None:
    assert len(spans) == len({s["span_id"] for s in spans}) == SPANS_PER_PROGRAM
    assert {s["resource"].get("service.name") for s in spans} == {"travel-agent"}


def assert_graded(rx: OtlpReceiver, *, logs: bool = True, metrics: bool = True,
                  events_per_root: int = 3) -> None:
    spans = rx.spans()
    assert_all_spans_once(spans)
    by_calls = {r["attributes"]["tooleval.tool_calls"]: r for r in roots_of(spans)}
    assert sorted(by_calls) == [4, 5]
    good, bad = by_calls[4], by_calls[5]
    assert good["attributes"]["tooleval.passed"] is True
    assert bad["attributes"]["tooleval.passed"] is False
    assert bad["attributes"]["tooleval.failed"] == ["no-secrets"]
    for root in (good, bad):
        events = [e for e in root["events"] if e["name"] == "gen_ai.evaluation.result"]
        assert len(events) == events_per_root
        assert [e["attributes"]["gen_ai.evaluation.name"] for e in events[:3]] == GRADERS
    labels = {e["attributes"]["gen_ai.evaluation.name"]: e["attributes"]
              ["gen_ai.evaluation.score.label"] for e in bad["events"]}
    assert labels["no-secrets"] == "fail"
    if logs:
        assert rx.wait_for(lambda: len(rx.logs()) >= 6, timeout=5)
        records = rx.logs()
        assert [r["event_name"] for r in records] == ["gen_ai.evaluation.result"] * 6
        assert {(r["trace_id"], r["span_id"]) for r in records} == {
            (good["trace_id"], good["span_id"]), (bad["trace_id"], bad["span_id"])}
        assert {r["attributes"]["gen_ai.agent.name"] for r in records} == {"travel_agent"}
    else:
        assert rx.logs() == []
    if metrics:
        assert rx.wait_for(lambda: any(m["name"] == "tooleval.runs" for m in rx.metrics()),
                           timeout=5)
        names = {m["name"] for m in rx.metrics()}
        assert {"gen_ai.evaluation.score", "tooleval.runs"} <= names


def assert_ungraded(rx: OtlpReceiver) -> None:
    spans = rx.spans()
    assert_all_spans_once(spans)
    for span in spans:
        assert not any(k.startswith("tooleval.") for k in span["attributes"])
        assert not any(e["name"] == "gen_ai.evaluation.result" for e in span["events"])


# -- route 1: OTEL_TRACES_EXPORTER=tooleval_* ----------------------------------------------------

@pytest.mark.parametrize("name,transport", [
    ("tooleval_otlp_proto_grpc", "grpc"),
    ("tooleval_otlp_proto_http", "http"),
    ("tooleval_otlp", "http"),       # follows OTEL_EXPORTER_OTLP_PROTOCOL
    ("tooleval_otlp", "grpc"),
    ("tooleval_otlp", "default"),    # no protocol variable: OTLP/HTTP
])
def test_exporter_route_grades_an_unmodified_program(receiver: OtlpReceiver, name: str,
                                                     transport: str) -> None:
    env = grpc_env(receiver) if transport == "grpc" else http_env(receiver)
    if transport == "default":
        # Logs and metrics stay off: the SDK's own otlp for them would speak gRPC.
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.http_endpoint}
        proc = run_instrumented(OTEL_TRACES_EXPORTER=name, TOOLEVAL_CONFIG=str(CONFIG), **env)
        assert proc.returncode == 0, proc.stderr
        assert "otel-tooleval" not in proc.stderr
        assert_graded(receiver, logs=False, metrics=False)
        return
    proc = run_instrumented(OTEL_TRACES_EXPORTER=name, TOOLEVAL_CONFIG=str(CONFIG),
                            OTEL_LOGS_EXPORTER="otlp", OTEL_METRICS_EXPORTER="otlp", **env)
    assert proc.returncode == 0, proc.stderr
    assert "ran: reads the .env file" in proc.stdout
    assert "otel-tooleval" not in proc.stderr
    assert_graded(receiver)


def test_exporter_route_without_logs_and_metrics(receiver: OtlpReceiver) -> None:
    proc = run_instrumented(OTEL_TRACES_EXPORTER="tooleval_otlp", TOOLEVAL_CONFIG=str(CONFIG),
                            TOOLEVAL_DECISION_WAIT="0.2", **grpc_env(receiver))
    assert proc.returncode == 0, proc.stderr
    assert_graded(receiver, logs=False, metrics=False)


# -- route 2: OTEL_PYTHON_CONFIGURATOR=tooleval --------------------------------------------------

@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_configurator_route_wraps_the_exporting_processor(receiver: OtlpReceiver,
                                                          transport: str) -> None:
    env = grpc_env(receiver) if transport == "grpc" else http_env(receiver)
    proc = run_instrumented(OTEL_PYTHON_CONFIGURATOR="tooleval", OTEL_TRACES_EXPORTER="otlp",
                            TOOLEVAL_CONFIG=str(CONFIG), OTEL_LOGS_EXPORTER="otlp",
                            OTEL_METRICS_EXPORTER="otlp", **env)
    assert proc.returncode == 0, proc.stderr
    assert_graded(receiver)


def test_configurator_with_two_exporters_emits_logs_and_metrics_once(
        receiver: OtlpReceiver) -> None:
    proc = run_instrumented(OTEL_PYTHON_CONFIGURATOR="tooleval",
                            OTEL_TRACES_EXPORTER="otlp,console", TOOLEVAL_CONFIG=str(CONFIG),
                            OTEL_LOGS_EXPORTER="otlp", **grpc_env(receiver))
    assert proc.returncode == 0, proc.stderr
    assert_graded(receiver, metrics=False)               # exactly 6 log events, not 12
    assert proc.stdout.count('"tooleval.passed": false') == 1   # the console copy, annotated


def test_configurator_with_a_tooleval_exporter_grades_once(receiver: OtlpReceiver) -> None:
    proc = run_instrumented(OTEL_PYTHON_CONFIGURATOR="tooleval",
                            OTEL_TRACES_EXPORTER="tooleval_otlp", TOOLEVAL_CONFIG=str(CONFIG),
                            OTEL_LOGS_EXPORTER="otlp", **grpc_env(receiver))
    assert proc.returncode == 0, proc.stderr
    assert "graded there, not again" in proc.stderr
    assert_graded(receiver, metrics=False, events_per_root=3)


def test_configurator_not_selected_behaves_like_the_sdks(receiver: OtlpReceiver) -> None:
    """opentelemetry-instrument loads the first configurator when none is named: installing
    otel-tooleval must not change what an uninstrumented-for-grading program exports."""
    proc = run_instrumented(OTEL_TRACES_EXPORTER="otlp", TOOLEVAL_CONFIG=str(CONFIG),
                            **grpc_env(receiver))
    assert proc.returncode == 0, proc.stderr
    assert_ungraded(receiver)


# -- bad configuration: the program runs on, its spans go out ungraded ---------------------------

@pytest.mark.parametrize("route", ["exporter", "configurator"])
@pytest.mark.parametrize("case", ["missing-file", "bad-field", "unset"])
def test_bad_config_never_stops_the_program(receiver: OtlpReceiver, tmp_path: Path,
                                            route: str, case: str) -> None:
    env = grpc_env(receiver)
    if route == "exporter":
        env["OTEL_TRACES_EXPORTER"] = "tooleval_otlp_proto_grpc"
    else:
        env.update(OTEL_PYTHON_CONFIGURATOR="tooleval", OTEL_TRACES_EXPORTER="otlp")
    if case == "missing-file":
        env["TOOLEVAL_CONFIG"] = str(tmp_path / "nope.yaml")
        expected = ["TOOLEVAL_CONFIG", "nope.yaml", "cannot read"]
    elif case == "bad-field":
        bad = tmp_path / "graders.yaml"
        bad.write_text("graders:\n  - {name: x, type: tool-calls, config: {requird: [a]}}\n")
        env["TOOLEVAL_CONFIG"] = str(bad)
        expected = ["TOOLEVAL_CONFIG", str(bad), "graders[0].config.requird"]
    else:
        expected = ["TOOLEVAL_CONFIG is not set"]
    proc = run_instrumented(**env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("ran:") == 2
    for text in expected:
        assert text in proc.stderr
    assert "ungraded" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert_ungraded(receiver)


def test_bad_decision_wait_is_reported_and_grading_goes_on(receiver: OtlpReceiver) -> None:
    proc = run_instrumented(OTEL_TRACES_EXPORTER="tooleval_otlp", TOOLEVAL_CONFIG=str(CONFIG),
                            TOOLEVAL_DECISION_WAIT="soon", **grpc_env(receiver))
    assert proc.returncode == 0, proc.stderr
    assert "TOOLEVAL_DECISION_WAIT='soon'" in proc.stderr
    assert_graded(receiver, logs=False, metrics=False)


# -- in-process pieces ---------------------------------------------------------------------------

@pytest.mark.parametrize("traces,general,expected", [
    (None, None, "http/protobuf"),          # the OTel spec's default (gRPC up to 0.6.1)
    (None, "grpc", "grpc"),
    ("grpc", "http/protobuf", "grpc"),
    ("http/protobuf", "grpc", "http/protobuf"),
    (None, "carrier-pigeon", "http/protobuf"),
])
def test_tooleval_otlp_picks_the_protocol_like_every_front_door(
        loopback_only: None, monkeypatch: pytest.MonkeyPatch, traces: str | None,
        general: str | None, expected: str) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

    for name, value in (("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", traces),
                        ("OTEL_EXPORTER_OTLP_PROTOCOL", general)):
        if value is not None:
            monkeypatch.setenv(name, value)
    exporter = ac.ToolEvalOTLPSpanExporter()
    try:
        assert type(exporter.exporter) is (Grpc if expected == "grpc" else Http)
    finally:
        exporter.shutdown()


def test_env_exporter_without_config_forwards_ungraded(
        loopback_only: None, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="otel_tooleval.autoconfig"):
        exporter = ac.ToolEvalOTLPHttpSpanExporter()
    try:
        assert exporter.grading is False
        assert "TOOLEVAL_CONFIG is not set" in caplog.text
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        assert isinstance(exporter.exporter, OTLPSpanExporter)
    finally:
        exporter.shutdown()


def test_env_exporter_reads_config_and_wait(loopback_only: None,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLEVAL_CONFIG", str(CONFIG))
    monkeypatch.setenv("TOOLEVAL_DECISION_WAIT", "0.25")
    exporter = ac.ToolEvalOTLPGrpcSpanExporter()
    try:
        assert exporter.grading
        assert [g.name for g in exporter.config.graders] == GRADERS
        assert exporter._grader is not None
        assert exporter._grader.buffers.decision_wait == 0.25
    finally:
        exporter.shutdown()


def test_wrap_export_processors_for_sdks_without_the_factory() -> None:
    """SDK 1.39's configurator takes no processor factory: the batch processors it registered
    are swapped in place for the ToolEvalSpanProcessor around them."""
    from otel_tooleval._compat import wrap_export_processors

    memory, other = InMemorySpanExporter(), InMemorySpanExporter()
    provider = TracerProvider()
    batch = BatchSpanProcessor(memory, schedule_delay_millis=50)
    provider.add_span_processor(batch)
    provider.add_span_processor(SimpleSpanProcessor(other))
    wrapped: list[ToolEvalSpanProcessor] = []

    def wrap(processor: Any) -> Any:
        wrapped.append(ToolEvalSpanProcessor(CONFIG, downstream=processor))
        return wrapped[-1]

    assert wrap_export_processors(provider, wrap) == 1
    assert wrapped[0].downstream is batch
    tracer = provider.get_tracer("t")
    tool = {"gen_ai.tool.name": "read_file", "gen_ai.tool.call.arguments": '{"path": ".env"}'}
    with tracer.start_as_current_span("invoke_agent a", attributes={
            "gen_ai.operation.name": "invoke_agent"}), \
            tracer.start_as_current_span("execute_tool read_file", attributes=tool):
        pass
    provider.force_flush()
    graded = [s for s in memory.get_finished_spans() if "tooleval.passed" in (s.attributes or {})]
    assert len(graded) == 1 and len(memory.get_finished_spans()) == 2
    assert not any("tooleval.passed" in (s.attributes or {}) for s in other.get_finished_spans())
    provider.shutdown()


def test_drain_flushes_live_exporters(loopback_only: None) -> None:
    from otel_tooleval import ToolEvalSpanExporter
    from otel_tooleval._exit import drain

    memory = InMemorySpanExporter()
    exporter = ToolEvalSpanExporter(memory, CONFIG, decision_wait=60.0)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span(
            "invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}):
        pass
    assert memory.get_finished_spans() == ()
    assert drain(5.0)
    (root,) = memory.get_finished_spans()
    assert "tooleval.passed" in (root.attributes or {})
    provider.shutdown()
