"""What the collector's otlp exporter sends is what a real `serve` takes and answers.

The collector (contrib 0.129, core exporter/otlpexporter: `compression: gzip` by default, no
send limit of its own, grpc-go's 4 MiB receive limit for the reply) sends ExportTraceService
requests gzip-compressed, in batches of up to `send_batch_size` spans (8192 in
collector-config/, several MiB). It retries RESOURCE_EXHAUSTED only when the status carries
RetryInfo, after the delay it names (core exporter/otlpexporter/otlp.go, shouldRetry and
getThrottleDuration). Here a grpcio client does the same against `otel-tooleval serve` run as
a subprocess on 127.0.0.1.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tests.support.otlp_receiver import OtlpReceiver
from tests.test_serve import CONFIG, EXPECTED, EXPORT, _free_port, body_of, demo_spans, get, roots

# grpc-go's default receive limit, which the collector's exporter keeps for serve's replies
COLLECTOR_MAX_RECV = 4 * 1024 * 1024
COLLECTOR_CHANNEL = [("grpc.max_receive_message_length", COLLECTOR_MAX_RECV),
                     ("grpc.max_send_message_length", -1)]


def _start(receiver: OtlpReceiver, *extra: str) -> tuple[subprocess.Popen[str], int]:
    grpc_port, http_port = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_tooleval.cli", "serve", "--config", str(CONFIG),
         "--grpc", f"127.0.0.1:{grpc_port}", "--http", f"127.0.0.1:{http_port}",
         "--forward", receiver.http_endpoint, *extra],
        env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while True:
        try:
            if get(http_port, "/healthz")[0] == 200:
                return process, grpc_port
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"serve did not start: {process.communicate()[1]}")
        time.sleep(0.05)


@pytest.fixture
def serve_proc(receiver: OtlpReceiver) -> Iterator[Any]:
    started: list[subprocess.Popen[str]] = []

    def start(*extra: str) -> int:
        process, port = _start(receiver, *extra)
        started.append(process)
        return port

    yield start
    for process in started:
        process.terminate()
        try:
            process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def test_a_gzip_export_of_a_collector_sized_batch_is_taken_and_graded(
        receiver: OtlpReceiver, serve_proc: Any) -> None:
    port = serve_proc("--decision-wait", "0.5")
    spans = demo_spans(repeat=3)
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(body_of(spans))
    # a batch of a busy agent is several MiB; padding on the resource stands in for its size
    pad = request.resource_spans[0].resource.attributes.add()
    pad.key, pad.value.string_value = "padding", "x" * (COLLECTOR_MAX_RECV + 1024)
    body = request.SerializeToString()
    assert len(body) > COLLECTOR_MAX_RECV   # past grpc's 4 MiB default, as a full batch is
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=COLLECTOR_CHANNEL,
                               compression=grpc.Compression.Gzip) as channel:
        reply, call = channel.unary_unary(EXPORT).with_call(body, timeout=30)
    assert call.code() == grpc.StatusCode.OK
    assert len(reply) < COLLECTOR_MAX_RECV
    assert receiver.wait_for(lambda: len(roots(receiver)) == len(EXPECTED) * 3, timeout=30)
    passed = sorted(r["attributes"]["tooleval.passed"] for r in roots(receiver))
    assert passed == sorted(EXPECTED * 3)
    assert len(receiver.spans()) == len(spans)


def test_busy_serve_answers_a_gzip_export_with_retry_info_the_collector_honours(
        receiver: OtlpReceiver, serve_proc: Any) -> None:
    port = serve_proc("--decision-wait", "60", "--max-buffered-spans", "5")
    spans = demo_spans()
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=COLLECTOR_CHANNEL,
                               compression=grpc.Compression.Gzip) as channel:
        export = channel.unary_unary(EXPORT)
        export(body_of(spans[:8]), timeout=10)             # fills the buffers
        with pytest.raises(grpc.RpcError) as info:
            export(body_of(spans[8:]), timeout=10)
    error: Any = info.value
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    trailers = dict(error.trailing_metadata())
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    assert status.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    retry = error_details_pb2.RetryInfo()
    assert any(detail.Unpack(retry) for detail in status.details)
    # the collector waits this long before its retry (0 would mean its own backoff)
    assert retry.retry_delay.seconds >= 1
