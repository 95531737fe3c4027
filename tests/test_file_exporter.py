"""``OTLPJsonFileExporter`` and the ``tooleval_file`` entry point (docs/file-exporter.md).

Spans of real agent runs (the demo's scripted travel agent, a pydantic-ai agent on a scripted
``FunctionModel``) go through a real ``TracerProvider`` into the file, which must be what the
collector's file exporter writes and what ``otel-tooleval grade`` grades exactly like
``grade_spans`` grades the same spans in memory.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_tooleval
from otel_tooleval import OTLPJsonFileExporter, grade_spans, load_config
from otel_tooleval.cli import main
from otel_tooleval.demo.agent import SCRIPTS, default_config_text, run_scripted_agent

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "file-exporter.md"
AGENT = ROOT / "examples" / "zero_code" / "agent.py"
ZERO_CODE_CONFIG = ROOT / "examples" / "zero_code" / "graders.yaml"
INSTRUMENT = Path(sys.executable).parent / "opentelemetry-instrument"
HEX32 = re.compile(r"[0-9a-f]{32}")
HEX16 = re.compile(r"[0-9a-f]{16}")
CAMEL = re.compile(r"[a-z][A-Za-z]*")
ANY_VALUE_KEYS = {"stringValue", "boolValue", "intValue", "doubleValue", "arrayValue",
                  "kvlistValue", "bytesValue"}


def record(path: Path, *, framework: bool = False) -> list[ReadableSpan]:
    """Run the demo's agent scripts (and a pydantic-ai agent) into ``path``, through a batch
    processor in small batches (several lines); return the same spans as kept in memory."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(BatchSpanProcessor(OTLPJsonFileExporter(path),
                                                   max_export_batch_size=7,
                                                   schedule_delay_millis=50))
    tracer = provider.get_tracer("tests.file_exporter")
    for _, turns in SCRIPTS:
        run_scripted_agent(tracer, turns)
    if framework:
        from tests.support.agents import run_pydantic_ai_weather

        run_pydantic_ai_weather(provider)
    provider.shutdown()
    return list(memory.get_finished_spans())


def verdicts(doc: dict[str, Any]) -> list[tuple[str, str, bool, list[tuple[str, bool, float]]]]:
    return sorted((r["trace_id"], r["root_span_id"], r["passed"],
                   [(g["name"], g["passed"], g["score"]) for g in r["results"]])
                  for r in doc["runs"])


def graded_file(path: Path, config: Path, capsys: pytest.CaptureFixture[str]
                ) -> tuple[int, dict[str, Any]]:
    code = main(["grade", str(path), "--config", str(config), "--format", "json"])
    out, err = capsys.readouterr()
    assert err == "" or "problem" not in err, err
    return code, json.loads(out)


# -- (1) graded from the file as from memory ------------------------------------------------------

def test_grade_over_the_file_agrees_with_grade_spans(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pydantic_ai")
    path = tmp_path / "traces.jsonl"
    spans = record(path, framework=True)
    config = tmp_path / "graders.yaml"
    config.write_text(default_config_text())
    expected = [r.to_dict() for r in grade_spans(spans, load_config(config))]
    assert len(expected) == len(SCRIPTS) + 1
    assert {r["passed"] for r in expected} == {True, False}     # both kinds of verdict
    code, doc = graded_file(path, config, capsys)
    assert code == 1                                            # a run failed
    assert verdicts(doc) == verdicts({"runs": expected})
    assert [r["tool_calls"] for r in sorted(doc["runs"], key=lambda r: r["trace_id"])] == [
        r["tool_calls"] for r in sorted(expected, key=lambda r: r["trace_id"])]
    assert {r["agent"] for r in doc["runs"]} == {"travel_agent", "weather_agent"}


# -- (2) the collector's OTLP/JSON ---------------------------------------------------------------

def walk_keys(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [k for k, v in node.items() for k in [k, *walk_keys(v)]]
    if isinstance(node, list):
        return [k for item in node for k in walk_keys(item)]
    return []


def attribute_values(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        own = [node["value"]] if "key" in node and "value" in node else []
        return own + [v for child in node.values() for v in attribute_values(child)]
    if isinstance(node, list):
        return [v for item in node for v in attribute_values(item)]
    return []


def to_base64_ids(doc: dict[str, Any]) -> None:
    """Hex ids back to protobuf JSON's base64, so ``json_format.Parse`` takes the document."""
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for item in [span, *span.get("links", ())]:
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in item:
                            item[key] = base64.b64encode(bytes.fromhex(item[key])).decode()


def test_each_line_is_an_otlp_json_request_as_the_collector_writes_it(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    spans = record(path)
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n")
    lines = text.splitlines()
    assert len(lines) >= len(spans) // 7            # one line per export, batches of 7
    written: dict[str, Any] = {}
    for line in lines:
        doc = json.loads(line)
        assert set(doc) == {"resourceSpans"}
        assert all(CAMEL.fullmatch(k) for k in walk_keys(doc)), doc
        for value in attribute_values(doc):
            assert len(value) == 1 and set(value) <= ANY_VALUE_KEYS, value
        for rs in doc["resourceSpans"]:
            assert rs["resource"]["attributes"]
            for ss in rs["scopeSpans"]:
                assert ss["scope"]["name"] == "tests.file_exporter"
                for span in ss["spans"]:
                    assert HEX32.fullmatch(span["traceId"]), span["traceId"]
                    assert HEX16.fullmatch(span["spanId"]), span["spanId"]
                    assert "parentSpanId" not in span or HEX16.fullmatch(span["parentSpanId"])
                    assert isinstance(span["kind"], int)
                    assert span["startTimeUnixNano"].isdigit()
                    assert span["endTimeUnixNano"].isdigit()
        to_base64_ids(doc)
        request = json_format.Parse(json.dumps(doc), ExportTraceServiceRequest())
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    written[span.span_id.hex()] = span
    # Lossless: every span, byte for byte what the SDK's OTLP encoder makes of it.
    expected = {s.span_id.hex(): s
                for rs in encode_spans(spans).resource_spans for ss in rs.scope_spans
                for s in ss.spans}
    assert len(expected) == len(spans) == len(written)
    assert written == expected
    kinds = {s.kind for s in written.values()}
    assert len(kinds) == 2                          # INTERNAL and the chat spans' CLIENT


def test_links_and_remote_parents_keep_hex_ids(tmp_path: Path) -> None:
    from opentelemetry.trace import (
        Link,
        NonRecordingSpan,
        SpanContext,
        TraceFlags,
        set_span_in_context,
    )

    remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1))
    provider = TracerProvider()
    exporter = OTLPJsonFileExporter(tmp_path / "t.jsonl")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("child", context=set_span_in_context(
            NonRecordingSpan(remote)), links=[Link(remote)]):
        pass
    provider.shutdown()
    (span,) = json.loads((tmp_path / "t.jsonl").read_text())["resourceSpans"][0][
        "scopeSpans"][0]["spans"]
    assert span["traceId"] == f"{0xABC:032x}" and span["parentSpanId"] == f"{0xDEF:016x}"
    assert span["links"][0]["traceId"] == f"{0xABC:032x}"
    assert span["links"][0]["spanId"] == f"{0xDEF:016x}"


# -- (3) the entry point -------------------------------------------------------------------------

def run_instrumented(cwd: Path, **env_vars: str) -> subprocess.CompletedProcess[str]:
    """The zero-code example under opentelemetry-instrument (as tests/test_autoconfig.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TOOLEVAL_"))}
    env.update(OTEL_SERVICE_NAME="travel-agent", OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="*",
               OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none")
    env.update(env_vars)
    return subprocess.run([str(INSTRUMENT), sys.executable, str(AGENT)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


needs_instrument = pytest.mark.skipif(not INSTRUMENT.exists(),
                                      reason="opentelemetry-instrument is not installed")


def roots_in(path: Path) -> list[dict[str, Any]]:
    return [span for line in path.read_text().splitlines()
            for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"]
            for span in ss["spans"] if span["name"].startswith("invoke_agent")]


@needs_instrument
def test_entry_point_records_to_the_named_file_without_grading(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "out" / "recorded.jsonl"
    path.parent.mkdir()
    proc = run_instrumented(tmp_path, OTEL_TRACES_EXPORTER="tooleval_file",
                            TOOLEVAL_TRACES_FILE=str(path),
                            TOOLEVAL_CONFIG=str(ZERO_CODE_CONFIG))   # recorded, not graded
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("ran:") == 2
    roots = roots_in(path)
    assert len(roots) == 2
    assert not any(a["key"].startswith("tooleval.") for r in roots for a in r["attributes"])
    code, doc = graded_file(path, ZERO_CODE_CONFIG, capsys)
    assert code == 1
    assert sorted(r["passed"] for r in doc["runs"]) == [False, True]
    failed = [g["name"] for r in doc["runs"] for g in r["results"] if not g["passed"]]
    assert failed == ["no-secrets"]


@needs_instrument
def test_entry_point_default_file_is_traces_jsonl_in_the_working_directory(
        tmp_path: Path) -> None:
    proc = run_instrumented(tmp_path, OTEL_TRACES_EXPORTER="tooleval_file")
    assert proc.returncode == 0, proc.stderr
    assert len(roots_in(tmp_path / "traces.jsonl")) == 2


@needs_instrument
def test_entry_point_under_the_tooleval_configurator_records_graded_roots(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "graded.jsonl"
    proc = run_instrumented(tmp_path, OTEL_PYTHON_CONFIGURATOR="tooleval",
                            OTEL_TRACES_EXPORTER="tooleval_file", TOOLEVAL_TRACES_FILE=str(path),
                            TOOLEVAL_CONFIG=str(ZERO_CODE_CONFIG))
    assert proc.returncode == 0, proc.stderr
    passed = sorted(next(a["value"]["boolValue"] for a in r["attributes"]
                         if a["key"] == "tooleval.passed") for r in roots_in(path))
    assert passed == [False, True]
    code, doc = graded_file(path, ZERO_CODE_CONFIG, capsys)   # and it still grades offline
    assert code == 1 and sorted(r["passed"] for r in doc["runs"]) == [False, True]


def test_built_with_no_arguments_reads_the_variable(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TOOLEVAL_TRACES_FILE", raising=False)
    assert OTLPJsonFileExporter().path == str(tmp_path / "traces.jsonl")
    monkeypatch.setenv("TOOLEVAL_TRACES_FILE", "sub/x.jsonl")
    assert OTLPJsonFileExporter().path == str(tmp_path / "sub" / "x.jsonl")
    assert "OTLPJsonFileExporter" in otel_tooleval.__all__


# -- (4) threads, appending, shutdown ------------------------------------------------------------

def test_concurrent_exports_write_whole_lines(tmp_path: Path) -> None:
    """Lines of 800 kB from 8 threads: an exporter writing a line in parts without holding
    its lock across them (or json.dump straight to the file) interleaves them here."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    for i in range(4):
        with tracer.start_as_current_span(f"s{i}", attributes={"blob": "x" * 200_000}):
            pass
    batch = list(memory.get_finished_spans())
    exporter = OTLPJsonFileExporter(tmp_path / "t.jsonl")
    start = threading.Barrier(8)
    results: list[SpanExportResult] = []

    def worker() -> None:
        start.wait()
        for _ in range(10):
            results.append(exporter.export(batch))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    exporter.shutdown()
    assert results == [SpanExportResult.SUCCESS] * 80
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert len(lines) == 80
    for line in lines:
        assert len(json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]) == 4


def test_appends_flushes_and_fails_after_shutdown(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"resourceSpans":[]}\n')
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("t").start_as_current_span("s"):
        pass
    spans = memory.get_finished_spans()
    exporter = OTLPJsonFileExporter(path)
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    assert len(path.read_text().splitlines()) == 2          # flushed, before any shutdown
    assert exporter.force_flush() is True
    exporter.shutdown()
    assert exporter.export(spans) is SpanExportResult.FAILURE
    assert path.read_text().splitlines()[0] == '{"resourceSpans":[]}'
    assert len(path.read_text().splitlines()) == 2
    exporter.shutdown()                                     # twice is harmless


# -- (5) an unwritable file ----------------------------------------------------------------------

@pytest.mark.parametrize("where", ["missing-directory", "a-directory"])
def test_unwritable_path_logs_once_and_never_raises(tmp_path: Path, where: str,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "no" / "such" / "dir.jsonl" if where == "missing-directory" else tmp_path
    exporter = OTLPJsonFileExporter(path)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with caplog.at_level(logging.ERROR, logger="otel_tooleval.file_exporter"):
        for _ in range(3):
            with tracer.start_as_current_span("s"):
                pass
        memory = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        with tracer.start_as_current_span("s"):
            pass
        assert exporter.export(memory.get_finished_spans()) is SpanExportResult.FAILURE
    provider.shutdown()
    records = [r for r in caplog.records if r.name == "otel_tooleval.file_exporter"]
    assert len(records) == 1
    assert str(path) in records[0].getMessage()


# -- the doc's example runs ----------------------------------------------------------------------

def test_the_docs_example_runs_and_grades(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    text = DOC.read_text()
    (python,) = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    yamls = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    monkeypatch.chdir(tmp_path)
    exec(compile(python, str(DOC), "exec"), {"__name__": "docs_example"})  # noqa: S102
    (tmp_path / "graders.yaml").write_text(yamls[0])
    assert "otel-tooleval grade traces.jsonl --config graders.yaml" in text
    assert main(["grade", "traces.jsonl", "--config", "graders.yaml"]) == 0
    assert "PASS" in capsys.readouterr().out
    missing = tmp_path / "graders-missing.yaml"
    missing.write_text(yamls[0].replace("search", "fetch"))
    assert main(["grade", "traces.jsonl", "--config", str(missing)]) == 1
