"""The processor's verdicts travel over the real OTLP exporters to a real receiver.

Two agent runs in GenAI semconv (plain OTel API), one passing and one failing the configured
``tool-calls`` graders, go through ``ToolEvalSpanProcessor`` wrapped around real OTLP span, log
and metric exporters (gRPC and HTTP/protobuf), and through ``otel_tooleval.install()``. What the
in-process receiver on 127.0.0.1 decodes must carry the verdicts as ARCHITECTURE.md's "Emitted
telemetry" describes: events and ``tooleval.*`` attributes on the (single) root span copy,
``gen_ai.evaluation.result`` log records in the root's context, and metrics whose attributes
carry neither trace ids nor argument values.

Batch processors and the metric reader are given 60 s delays, so only ``force_flush`` (and
``shutdown``) export: the checks prove that flushing drains the grading thread too.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Tracer

import otel_tooleval
from otel_tooleval import ToolEvalSpanProcessor

try:
    from tests.support.otlp_receiver import OtlpReceiver, decode_attributes
except ImportError:  # pytest run with only tests/ on sys.path
    from support.otlp_receiver import OtlpReceiver, decode_attributes

EXPORT_TIMEOUT_S = 5          # per export call; a broken export fails fast instead of retrying
FLUSH_TIMEOUT_MS = 10_000
NEVER_MS = 60_000             # batch/reader delays: nothing exports unless flushed
EVENT = "gen_ai.evaluation.result"
AGENT = "researcher"

CONFIG: dict[str, Any] = {
    "graders": [
        {"name": "research", "type": "tool-calls",
         "config": {"required": [{"name": "^search$"}], "disallowed": [{"name": "^delete_file$"}]}},
        {"name": "safe", "type": "tool-calls",
         "config": {"disallowed": [{"name": "^drop_database$"}]}},
    ],
}

# Argument and result values that must never show up in metric attributes (nor, with
# include_values off, in the verdict events and log records).
SECRETS = ("q-secret-1f3a", "https://example.invalid/s-7c2e", "/tmp/s-9d41.txt",
           "result-secret-55aa")

# (tool name, arguments, result) per call; None between calls means a model turn.
PASSING_RUN = [
    ("search", {"query": SECRETS[0]}, f"3 hits {SECRETS[3]}"),
    ("fetch", {"url": SECRETS[1]}, "<html>ok</html>"),
]
FAILING_RUN = [
    ("search", {"query": SECRETS[0]}, "1 hit"),
    ("fetch", {"url": SECRETS[1]}, "<html>ok</html>"),
    ("delete_file", {"path": SECRETS[2]}, "deleted"),
]

# Expected verdict per run: grader -> (score, label); then run-level summary.
EXPECTED = {
    True: {"graders": {"research": (1.0, "pass"), "safe": (1.0, "pass")},
           "score": 1.0, "tool_calls": 2, "failed": None},
    False: {"graders": {"research": (0.5, "fail"), "safe": (1.0, "pass")},
            "score": 0.75, "tool_calls": 3, "failed": ["research"]},
}


@pytest.fixture(autouse=True)
def _loopback(loopback_only: None) -> None:
    """Every test here talks only to 127.0.0.1 (see conftest.loopback_only)."""


PROTOCOLS = pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])


# --------------------------------------------------------------------------- the agent runs


@dataclass
class Run:
    passing: bool
    trace_id: str = ""
    root_id: str = ""
    children: dict[str, str] = field(default_factory=dict)   # span id -> name


def _hex(ctx: Any) -> tuple[str, str]:
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")


def _agent_run(tracer: Tracer, calls: list[tuple[str, dict[str, Any], str]],
               passing: bool) -> Run:
    """One agent run in OTel GenAI semconv: a chat turn before each tool call and at the end."""
    run = Run(passing)

    def chat() -> None:
        with tracer.start_as_current_span(
            "chat scripted-model",
            attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "scripted"},
        ) as span:
            run.children[_hex(span.get_span_context())[1]] = span.name

    with tracer.start_as_current_span(
        f"invoke_agent {AGENT}",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT},
    ) as root:
        run.trace_id, run.root_id = _hex(root.get_span_context())
        for i, (name, args, result) in enumerate(calls):
            chat()
            with tracer.start_as_current_span(
                f"execute_tool {name}",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": f"call_{i}",
                    "gen_ai.tool.call.arguments": json.dumps(args),
                    "gen_ai.tool.call.result": result,
                },
            ) as span:
                run.children[_hex(span.get_span_context())[1]] = span.name
        chat()
    return run


def _two_runs(tracer: Tracer) -> list[Run]:
    return [_agent_run(tracer, PASSING_RUN, True), _agent_run(tracer, FAILING_RUN, False)]


# --------------------------------------------------------------------------- checks


def _check_spans(rx: OtlpReceiver, runs: list[Run],
                 service_name: str | None = None) -> None:
    expected_count = sum(1 + len(r.children) for r in runs)
    assert rx.wait_for(lambda: len(rx.spans()) >= expected_count, timeout=2), (
        f"{len(rx.spans())} of {expected_count} spans arrived")
    spans = rx.spans()
    ids = Counter(s["span_id"] for s in spans)
    assert all(n == 1 for n in ids.values()), f"span ids received more than once: {ids}"
    assert len(spans) == expected_count

    for run in runs:
        want = EXPECTED[run.passing]
        roots = [s for s in spans if s["span_id"] == run.root_id]
        assert len(roots) == 1, "each root span id is received exactly once"
        (root,) = roots
        assert root["trace_id"] == run.trace_id
        assert root["parent_span_id"] is None
        assert root["name"] == f"invoke_agent {AGENT}"

        # Children arrive untouched, under the root's trace.
        got_children = {s["span_id"]: s["name"] for s in spans
                        if s["trace_id"] == run.trace_id and s["span_id"] != run.root_id}
        assert got_children == run.children
        for s in spans:
            if s["span_id"] in run.children:
                assert s["parent_span_id"] == run.root_id
                # only the marks a failing grader puts on a call it names (violation_marks)
                assert not any(k.startswith("tooleval.") and not k.startswith(
                    "tooleval.violation") for k in s["attributes"])
                assert not [e for e in s["events"] if e["name"] == EVENT]

        # The root copy: original attributes kept, verdict attributes added.
        attrs = root["attributes"]
        assert attrs["gen_ai.operation.name"] == "invoke_agent"
        assert attrs["gen_ai.agent.name"] == AGENT
        assert attrs["tooleval.passed"] is run.passing
        assert attrs["tooleval.score"] == pytest.approx(want["score"])
        assert isinstance(attrs["tooleval.score"], float)
        assert attrs["tooleval.tool_calls"] == want["tool_calls"]
        if want["failed"] is None:
            assert "tooleval.failed" not in attrs
        else:
            assert attrs["tooleval.failed"] == want["failed"]

        # One gen_ai.evaluation.result event per grader.
        events = [e for e in root["events"] if e["name"] == EVENT]
        assert len(events) == len(CONFIG["graders"])
        by_grader = {e["attributes"]["gen_ai.evaluation.name"]: e["attributes"] for e in events}
        assert set(by_grader) == set(want["graders"])
        for grader, (score, label) in want["graders"].items():
            ev = by_grader[grader]
            assert ev["gen_ai.evaluation.score.value"] == pytest.approx(score)
            assert ev["gen_ai.evaluation.score.label"] == label
            explanation = ev["gen_ai.evaluation.explanation"]
            assert isinstance(explanation, str) and explanation
            assert "error.type" not in ev
            _assert_no_secrets(ev, f"event of {grader}")

        if service_name is not None:
            assert root["resource"]["service.name"] == service_name
            assert all(s["resource"]["service.name"] == service_name for s in spans)


def _events_of_root(rx: OtlpReceiver, run: Run) -> list[dict[str, Any]]:
    (root,) = [s for s in rx.spans() if s["span_id"] == run.root_id]
    return [e["attributes"] for e in root["events"] if e["name"] == EVENT]


def _check_logs(rx: OtlpReceiver, runs: list[Run]) -> None:
    n_graders = len(CONFIG["graders"])
    expected = n_graders * len(runs)

    def verdicts() -> list[dict[str, Any]]:
        return [r for r in rx.logs() if r["event_name"] == EVENT]

    assert rx.wait_for(lambda: len(verdicts()) >= expected, timeout=2), (
        f"{len(verdicts())} of {expected} {EVENT} log records arrived")
    records = verdicts()
    assert len(records) == expected
    for run in runs:
        mine = [r for r in records if r["span_id"] == run.root_id]
        assert len(mine) == n_graders, "log records sit in the root span's context"
        for record in mine:
            assert record["trace_id"] == run.trace_id
            assert record["attributes"]["gen_ai.agent.name"] == AGENT
            _assert_no_secrets(record["attributes"], "log record")
        # Same verdict attributes as the root's events (plus the agent name).
        logged = sorted((_without(r["attributes"], "gen_ai.agent.name") for r in mine),
                        key=lambda a: a["gen_ai.evaluation.name"])
        evented = sorted(_events_of_root(rx, run), key=lambda a: a["gen_ai.evaluation.name"])
        assert logged == evented


def _check_metrics(rx: OtlpReceiver, runs: list[Run]) -> None:
    def latest() -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for metric in rx.metrics():  # cumulative: the last export of each holds everything
            out[metric["name"]] = metric
        return out

    wanted = ("gen_ai.evaluation.score", "tooleval.runs")
    assert rx.wait_for(lambda: all(n in latest() for n in wanted), timeout=2), (
        f"metrics received: {sorted(latest())}")
    metrics = latest()

    # No metric attribute (of any instrument, in any export) holds an id or an argument value.
    ids = {r.trace_id for r in runs} | {r.root_id for r in runs}
    ids |= {i for r in runs for i in r.children}
    id_ints = {int(i, 16) for i in ids}
    for metric in rx.metrics():
        for point in metric["points"]:
            for key, value in point["attributes"].items():
                assert "trace" not in key and "span_id" not in key, (metric["name"], key)
                where = (metric["name"], key, value)
                text = str(value)
                assert text not in ids, where
                assert not (isinstance(value, int) and value in id_ints), where
                assert not any(s in text for s in SECRETS), where

    score = metrics["gen_ai.evaluation.score"]
    assert score["kind"] == "histogram"
    assert score["unit"] == "1"
    for point in score["points"]:
        assert set(point["attributes"]) == {
            "gen_ai.evaluation.name", "gen_ai.evaluation.score.label", "gen_ai.agent.name"}
    hist = {(p["attributes"]["gen_ai.evaluation.name"],
             p["attributes"]["gen_ai.evaluation.score.label"],
             p["attributes"]["gen_ai.agent.name"]): (p["count"], pytest.approx(p["sum"]))
            for p in score["points"]}
    assert hist == {
        ("research", "pass", AGENT): (1, 1.0),
        ("research", "fail", AGENT): (1, 0.5),
        ("safe", "pass", AGENT): (2, 2.0),
    }

    runs_metric = metrics["tooleval.runs"]
    assert runs_metric["kind"] == "sum"
    for point in runs_metric["points"]:
        assert set(point["attributes"]) == {"gen_ai.agent.name", "tooleval.passed"}
    counted = {(p["attributes"]["gen_ai.agent.name"], p["attributes"]["tooleval.passed"]):
               p["value"] for p in runs_metric["points"]}
    assert counted == {(AGENT, True): 1, (AGENT, False): 1}

    assert "tooleval.runs.dropped" not in metrics, "nothing was dropped"


def _without(attrs: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if k != key}


def _assert_no_secrets(attrs: dict[str, Any], where: str) -> None:
    blob = json.dumps(attrs, default=str)
    leaked = [s for s in SECRETS if s in blob]
    assert not leaked, f"{where} carries argument/result values {leaked} with include_values off"


def _resource_service_names(rx: OtlpReceiver) -> set[str]:
    names: set[str] = set()
    for req in rx.log_requests:
        for rl in req.resource_logs:
            names.add(decode_attributes(rl.resource.attributes).get("service.name"))
    for req in rx.metric_requests:
        for rm in req.resource_metrics:
            names.add(decode_attributes(rm.resource.attributes).get("service.name"))
    return names


# --------------------------------------------------------------------------- exporters


def _exporters(rx: OtlpReceiver, protocol: str) -> tuple[Any, Any, Any]:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        common = {"endpoint": rx.grpc_endpoint, "insecure": True, "timeout": EXPORT_TIMEOUT_S}
        return OTLPSpanExporter(**common), OTLPMetricExporter(**common), OTLPLogExporter(**common)

    from opentelemetry.exporter.otlp.proto.http._log_exporter import (  # type: ignore[no-redef]
        OTLPLogExporter,
    )
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # type: ignore[no-redef]
        OTLPMetricExporter,
    )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[no-redef]
        OTLPSpanExporter,
    )

    base = rx.http_endpoint
    return (OTLPSpanExporter(endpoint=f"{base}/v1/traces", timeout=EXPORT_TIMEOUT_S),
            OTLPMetricExporter(endpoint=f"{base}/v1/metrics", timeout=EXPORT_TIMEOUT_S),
            OTLPLogExporter(endpoint=f"{base}/v1/logs", timeout=EXPORT_TIMEOUT_S))


# --------------------------------------------------------------------------- tests


@PROTOCOLS
def test_processor_verdicts_arrive_over_otlp(receiver: OtlpReceiver, protocol: str) -> None:
    span_exporter, metric_exporter, log_exporter = _exporters(receiver, protocol)
    resource = Resource.create({"service.name": "tooleval-wire"})
    meter_provider = MeterProvider(resource=resource, metric_readers=[
        PeriodicExportingMetricReader(metric_exporter, export_interval_millis=NEVER_MS)])
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(log_exporter, schedule_delay_millis=NEVER_MS))
    processor = ToolEvalSpanProcessor(
        CONFIG, BatchSpanProcessor(span_exporter, schedule_delay_millis=NEVER_MS),
        meter_provider=meter_provider, logger_provider=logger_provider)
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(processor)
    try:
        runs = _two_runs(tracer_provider.get_tracer("tests.wire"))

        assert tracer_provider.force_flush(FLUSH_TIMEOUT_MS)
        assert logger_provider.force_flush(FLUSH_TIMEOUT_MS)
        assert meter_provider.force_flush(FLUSH_TIMEOUT_MS)

        _check_spans(receiver, runs, service_name="tooleval-wire")
        _check_logs(receiver, runs)
        _check_metrics(receiver, runs)
        assert processor.stats().get("runs") == 2
    finally:
        # Before the receiver stops: a gRPC exporter facing a closed port retries slowly.
        tracer_provider.shutdown()
        logger_provider.shutdown()
        meter_provider.shutdown()

    # Shutdown exports nothing new on traces and logs (everything went out with the flush).
    assert len(receiver.spans()) == sum(1 + len(r.children) for r in runs)
    assert len([r for r in receiver.logs() if r["event_name"] == EVENT]) == 4


@PROTOCOLS
def test_install_exports_verdicts_from_env_endpoint(
        receiver: OtlpReceiver, protocol: str, monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = (f"http://{receiver.grpc_endpoint}" if protocol == "grpc"
                else receiver.http_endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", str(EXPORT_TIMEOUT_S))
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", str(NEVER_MS))
    monkeypatch.setenv("OTEL_BLRP_SCHEDULE_DELAY", str(NEVER_MS))
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", str(NEVER_MS))

    installation = otel_tooleval.install(CONFIG, protocol=protocol,
                                         service_name="tooleval-install", set_global=False)
    shut = False
    try:
        runs = _two_runs(installation.tracer_provider.get_tracer("tests.wire.install"))
        assert installation.force_flush(FLUSH_TIMEOUT_MS)
        installation.shutdown()
        shut = True
    finally:
        if not shut:
            installation.shutdown()

    _check_spans(receiver, runs, service_name="tooleval-install")
    _check_logs(receiver, runs)
    _check_metrics(receiver, runs)
    assert installation.processor.stats().get("runs") == 2
    assert _resource_service_names(receiver) == {"tooleval-install"}
