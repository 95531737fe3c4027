"""Real OTLP exporters (gRPC and HTTP) against the in-process test receiver."""

from __future__ import annotations

import gzip
import http.client
from typing import Any

import grpc
import pytest
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (
    OTLPLogExporter as GrpcLogExporter,
)
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
    OTLPMetricExporter as GrpcMetricExporter,
)
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
from opentelemetry.exporter.otlp.proto.http._log_exporter import (
    OTLPLogExporter as HttpLogExporter,
)
from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
    OTLPMetricExporter as HttpMetricExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

try:
    from tests.support.otlp_receiver import OtlpReceiver, decode_any_value
except ImportError:  # pytest run with only tests/ on sys.path
    from support.otlp_receiver import OtlpReceiver, decode_any_value

# Keep every exporter call short: a failure should fail fast, not retry for 10 s.
EXPORT_TIMEOUT_S = 5
RESOURCE = Resource.create({"service.name": "otlp-receiver-test"})


@pytest.fixture(autouse=True)
def _loopback(loopback_only: None) -> None:
    """Every test here talks only to 127.0.0.1 (see conftest.loopback_only)."""


def _span_exporter(rx: OtlpReceiver, transport: str) -> Any:
    if transport == "grpc":
        return GrpcSpanExporter(endpoint=rx.grpc_endpoint, insecure=True, timeout=EXPORT_TIMEOUT_S)
    return HttpSpanExporter(
        endpoint=f"{rx.http_endpoint}/v1/traces",
        timeout=EXPORT_TIMEOUT_S,
        compression=HttpCompression.Gzip,
    )


def _log_exporter(rx: OtlpReceiver, transport: str) -> Any:
    if transport == "grpc":
        return GrpcLogExporter(
            endpoint=rx.grpc_endpoint,
            insecure=True,
            timeout=EXPORT_TIMEOUT_S,
            compression=grpc.Compression.Gzip,
        )
    return HttpLogExporter(endpoint=f"{rx.http_endpoint}/v1/logs", timeout=EXPORT_TIMEOUT_S)


def _metric_exporter(rx: OtlpReceiver, transport: str) -> Any:
    if transport == "grpc":
        return GrpcMetricExporter(
            endpoint=rx.grpc_endpoint, insecure=True, timeout=EXPORT_TIMEOUT_S
        )
    return HttpMetricExporter(endpoint=f"{rx.http_endpoint}/v1/metrics", timeout=EXPORT_TIMEOUT_S)


TRANSPORTS = pytest.mark.parametrize("transport", ["grpc", "http"])


@TRANSPORTS
def test_spans_arrive_decoded(receiver: OtlpReceiver, transport: str) -> None:
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(_span_exporter(receiver, transport)))
    try:
        tracer = provider.get_tracer("tests.receiver")
        with tracer.start_as_current_span("parent") as parent, tracer.start_as_current_span(
            "tool.call",
            attributes={
                "tool.name": "search",
                "tool.ok": True,
                "tool.retries": 2,
                "tool.score": 0.75,
                "tool.tags": ["a", "b"],
            },
        ) as child:
            child.add_event("tool.result", {"result.size": 3, "result.kind": "list"})
    finally:
        provider.shutdown()

    assert receiver.wait_for(lambda: len(receiver.spans()) == 2, timeout=5)
    by_name = {s["name"]: s for s in receiver.spans()}
    span, root = by_name["tool.call"], by_name["parent"]

    assert span["attributes"] == {
        "tool.name": "search",
        "tool.ok": True,
        "tool.retries": 2,
        "tool.score": 0.75,
        "tool.tags": ["a", "b"],
    }
    assert span["events"] == [
        {"name": "tool.result", "attributes": {"result.size": 3, "result.kind": "list"}}
    ]
    assert span["trace_id"] == format(child.get_span_context().trace_id, "032x")
    assert span["span_id"] == format(child.get_span_context().span_id, "016x")
    assert span["parent_span_id"] == format(parent.get_span_context().span_id, "016x")
    assert root["parent_span_id"] is None
    assert len(span["trace_id"]) == 32 and len(span["span_id"]) == 16
    assert span["resource"]["service.name"] == "otlp-receiver-test"
    assert span["scope"] == "tests.receiver"
    assert len(receiver.trace_requests) == 2  # SimpleSpanProcessor: one export per span


@TRANSPORTS
def test_logs_arrive_with_event_name(receiver: OtlpReceiver, transport: str) -> None:
    provider = LoggerProvider(resource=RESOURCE)
    provider.add_log_record_processor(SimpleLogRecordProcessor(_log_exporter(receiver, transport)))
    try:
        logger = provider.get_logger("tests.receiver")
        logger.emit(
            LogRecord(
                event_name="tool.graded",
                body="graded one call",
                attributes={"grade.score": 1.0, "grade.passed": True, "tool.name": "search"},
            )
        )
        logger.emit(LogRecord(body={"plain": "record"}))
    finally:
        provider.shutdown()

    assert receiver.wait_for(lambda: len(receiver.logs()) == 2, timeout=5)
    graded, plain = receiver.logs()
    assert graded == {
        "event_name": "tool.graded",
        "body": "graded one call",
        "attributes": {"grade.score": 1.0, "grade.passed": True, "tool.name": "search"},
        "trace_id": None,
        "span_id": None,
    }
    assert plain["event_name"] == ""
    assert plain["body"] == {"plain": "record"}


def test_log_inside_span_carries_ids(receiver: OtlpReceiver) -> None:
    tracer_provider = TracerProvider(resource=RESOURCE)
    logger_provider = LoggerProvider(resource=RESOURCE)
    logger_provider.add_log_record_processor(
        SimpleLogRecordProcessor(_log_exporter(receiver, "grpc"))
    )
    try:
        tracer = tracer_provider.get_tracer("tests.receiver")
        with tracer.start_as_current_span("work") as span:
            logger_provider.get_logger("tests.receiver").emit(LogRecord(event_name="inside"))
    finally:
        logger_provider.shutdown()
        tracer_provider.shutdown()

    assert receiver.wait_for(lambda: receiver.logs(), timeout=5)
    (record,) = receiver.logs()
    assert record["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert record["span_id"] == format(span.get_span_context().span_id, "016x")


@TRANSPORTS
def test_metrics_arrive_decoded(receiver: OtlpReceiver, transport: str) -> None:
    # Long interval: only force_flush (and shutdown) export.
    reader = PeriodicExportingMetricReader(
        _metric_exporter(receiver, transport), export_interval_millis=60_000
    )
    provider = MeterProvider(metric_readers=[reader], resource=RESOURCE)
    try:
        meter = provider.get_meter("tests.receiver")
        counter = meter.create_counter("tool.calls", unit="{call}")
        histogram = meter.create_histogram("tool.duration", unit="s")
        counter.add(2, {"tool.name": "search"})
        counter.add(1, {"tool.name": "search"})
        counter.add(5, {"tool.name": "fetch"})
        histogram.record(0.5, {"tool.name": "search"})
        histogram.record(1.5, {"tool.name": "search"})
        assert provider.force_flush(timeout_millis=EXPORT_TIMEOUT_S * 1000)
        assert receiver.wait_for(lambda: len(receiver.metrics()) >= 2, timeout=5)
    finally:
        provider.shutdown()

    by_name: dict[str, dict[str, Any]] = {}
    for metric in receiver.metrics():  # shutdown re-exports; keep the first of each
        by_name.setdefault(metric["name"], metric)

    calls = by_name["tool.calls"]
    assert calls["kind"] == "sum"
    assert calls["unit"] == "{call}"
    values = {p["attributes"]["tool.name"]: p["value"] for p in calls["points"]}
    assert values == {"search": 3, "fetch": 5}

    duration = by_name["tool.duration"]
    assert duration["kind"] == "histogram"
    assert duration["unit"] == "s"
    assert duration["points"] == [{"attributes": {"tool.name": "search"}, "count": 2, "sum": 2.0}]


def test_gauge_kind(receiver: OtlpReceiver) -> None:
    reader = PeriodicExportingMetricReader(
        _metric_exporter(receiver, "grpc"), export_interval_millis=60_000
    )
    provider = MeterProvider(metric_readers=[reader], resource=RESOURCE)
    try:
        gauge = provider.get_meter("tests.receiver").create_gauge("queue.depth")
        gauge.set(7, {"queue": "q1"})
        assert provider.force_flush(timeout_millis=EXPORT_TIMEOUT_S * 1000)
    finally:
        provider.shutdown()

    assert receiver.wait_for(lambda: receiver.metrics(), timeout=5)
    first = receiver.metrics()[0]
    assert first["kind"] == "gauge"
    assert first["points"] == [{"attributes": {"queue": "q1"}, "value": 7}]


def test_endpoints_and_lifecycle() -> None:
    rx = OtlpReceiver()
    with pytest.raises(RuntimeError):
        _ = rx.grpc_endpoint
    with rx:
        host, port = rx.grpc_endpoint.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        assert rx.http_endpoint.startswith("http://127.0.0.1:")
        assert int(rx.http_endpoint.rsplit(":", 1)[1]) > 0
    with pytest.raises(RuntimeError):
        _ = rx.http_endpoint
    rx.stop()  # idempotent


def _post(rx: OtlpReceiver, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    host, port = rx.http_endpoint.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_http_raw_requests(receiver: OtlpReceiver) -> None:
    request = trace_service_pb2.ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.name = "raw"
    span.trace_id = bytes(range(16))
    span.span_id = bytes(range(8))
    protobuf = {"Content-Type": "application/x-protobuf"}

    status, body = _post(
        receiver,
        "/v1/traces",
        gzip.compress(request.SerializeToString()),
        {**protobuf, "Content-Encoding": "gzip"},
    )
    assert status == 200
    trace_service_pb2.ExportTraceServiceResponse.FromString(body)  # parses
    assert receiver.spans()[0]["name"] == "raw"
    assert receiver.spans()[0]["trace_id"] == bytes(range(16)).hex()

    assert _post(receiver, "/v1/nope", b"", protobuf)[0] == 404
    assert _post(receiver, "/v1/traces", b"{}", {"Content-Type": "application/json"})[0] == 415
    assert _post(receiver, "/v1/traces", b"\xff\xff\xff", protobuf)[0] == 400
    assert len(receiver.trace_requests) == 1

    receiver.clear()
    assert receiver.spans() == []


def test_decode_any_value_kinds() -> None:
    value = common_pb2.AnyValue()
    assert decode_any_value(value) is None
    value.kvlist_value.values.add(key="b", value=common_pb2.AnyValue(bytes_value=b"\x00\x01"))
    nested = value.kvlist_value.values.add(key="arr").value.array_value
    nested.values.add(int_value=-3)
    nested.values.add(double_value=2.5)
    nested.values.add(bool_value=False)
    nested.values.add(string_value="s")
    assert decode_any_value(value) == {"b": b"\x00\x01", "arr": [-3, 2.5, False, "s"]}


def test_wait_for_times_out_quickly(receiver: OtlpReceiver) -> None:
    assert receiver.wait_for(lambda: True, timeout=0)
    assert not receiver.wait_for(lambda: receiver.spans(), timeout=0.1)
