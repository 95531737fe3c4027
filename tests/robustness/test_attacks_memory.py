"""Issue 26, defects 3 and 4: serve's memory bound counts what held spans really cost.

Agent spans whose parent never arrives are held until their trace's TTL. Before, an OTLP/JSON
span was counted as 256 bytes whatever it held (a 15 MiB attribute too), and an OTLP/protobuf
span as its share of the body, when its decoded attributes take about ten times that. Here:
what a span is counted is at least what keeping it allocates (tracemalloc, in process), and a
``serve`` process under both attacks stays within twice ``--max-buffered-bytes`` of RSS,
answers the senders 429 / RESOURCE_EXHAUSTED with a retry delay once the bound is reached,
and drains within ``--shutdown-timeout`` at SIGTERM.
"""

from __future__ import annotations

import gc
import json
import signal
import socket
import time
import tracemalloc
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from otel_tooleval import load_config
from otel_tooleval.serve import ServeOptions, ToolEvalServer
from otel_tooleval.serve.decoding import Refused
from tests.support.serve_process import serve_process

CONFIG = {"graders": [{"name": "calls", "type": "tool-calls",
                       "config": {"required": ["^search$"]}}]}
BOUND = 64 * 1024 * 1024
MISSING_PARENT = (1 << 40).to_bytes(8, "big")


def _proto(first: int, *, spans: int = 1, attributes: int = 0, value: str = "",
           events: int = 0, elements: int = 0) -> Any:
    """A request of agent spans (trace ``first``, ``first + 1``, …) whose parent never comes."""
    request = trace_service_pb2.ExportTraceServiceRequest()
    ss = request.resource_spans.add().scope_spans.add()
    for n in range(first, first + spans):
        span = ss.spans.add(name="invoke_agent attacker", trace_id=(n + 1).to_bytes(16, "big"),
                            span_id=(n + 1).to_bytes(8, "big"), parent_span_id=MISSING_PARENT,
                            start_time_unix_nano=1, end_time_unix_nano=2)
        span.attributes.add(key="gen_ai.operation.name").value.string_value = "invoke_agent"
        if value:
            span.attributes.add(key="big").value.string_value = value
        for i in range(attributes):
            span.attributes.add(key=f"k{i:07d}").value.string_value = "v"
        if elements:
            array = span.attributes.add(key="array").value.array_value.values
            for i in range(elements):
                array.add().int_value = i
        for i in range(events):
            span.events.add(name="e").attributes.add(key="i").value.int_value = i
    return request


def _json(request: Any) -> bytes:
    """The OTLP/JSON body of ``request`` (ids in hex, as OTLP/JSON has them)."""
    from google.protobuf import json_format

    doc = json_format.MessageToDict(request)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    span[key] = __import__("base64").b64decode(span[key]).hex()
    return json.dumps(doc).encode()


@pytest.fixture
def server() -> Iterator[ToolEvalServer]:
    server = ToolEvalServer(ServeOptions(load_config(CONFIG), grpc=None, http=None,
                                         forward="none", emit_telemetry=False,
                                         max_buffered_bytes=BOUND))
    server.ready = True   # no listeners: requests go straight to ingest_body
    yield server
    server.stop(timeout=5)


@pytest.mark.parametrize(("shape", "content_type"), [
    ({"value": "x" * (2 << 20)}, "application/json"),           # defect 3
    ({"value": "x" * (2 << 20)}, "application/x-protobuf"),
    ({"attributes": 30_000}, "application/x-protobuf"),         # defect 4
    ({"attributes": 30_000}, "application/json"),
    ({"events": 20_000}, "application/x-protobuf"),
    ({"elements": 30_000}, "application/json"),
    ({"spans": 2_000, "attributes": 5}, "application/x-protobuf"),
], ids=["big-value-json", "big-value-proto", "attributes-proto", "attributes-json", "events",
        "array-elements", "many-small-spans"])
def test_a_held_span_is_counted_at_least_what_keeping_it_allocates(
        server: ToolEvalServer, shape: dict[str, Any], content_type: str) -> None:
    # One span first, so that what is made once (the grading thread, counters) is made.
    server.ingest_body(_proto(1 << 30).SerializeToString(), "application/x-protobuf")
    before = server.stats()["buffered_bytes"]
    request = _proto(0, **shape)
    body = (request.SerializeToString() if content_type == "application/x-protobuf"
            else _json(request))
    del request
    gc.collect()
    tracemalloc.start()
    try:
        server.ingest_body(body, content_type)
        gc.collect()
        kept, _ = tracemalloc.get_traced_memory()   # what the request left behind
    finally:
        tracemalloc.stop()
    stats = server.stats()
    assert stats["accepted_spans"] == shape.get("spans", 1) + 1 == stats["buffered_spans"]
    counted = stats["buffered_bytes"] - before
    assert counted >= kept, (counted, kept)
    assert counted < 3 * kept + 100_000, (counted, kept)   # and not wildly more


def test_a_request_that_would_go_past_the_bound_is_refused_whole_and_retryable(
        server: ToolEvalServer) -> None:
    value = "x" * (10 << 20)   # each span counted about 20 MiB: the record's and the held copy
    accepted = 0
    with pytest.raises(Refused) as refused:
        for n in range(10):
            server.ingest_body(_json(_proto(n, value=value)), "application/json")
            accepted += 1
    assert refused.value.retry and refused.value.status == 429
    stats = server.stats()
    assert accepted == stats["accepted_spans"] == stats["buffered_spans"] == 3
    assert stats["buffered_bytes"] <= BOUND < stats["buffered_bytes"] + 20 << 20
    assert stats["refused_full"] == 1


def test_one_request_larger_than_the_bound_alone_is_taken(server: ToolEvalServer) -> None:
    server.tail.buffers.max_bytes = 1 << 20
    server.ingest_body(_json(_proto(0, value="x" * (2 << 20))), "application/json")
    assert server.stats()["accepted_spans"] == 1
    with pytest.raises(Refused):
        server.ingest_body(_json(_proto(1)), "application/json")


# -- serve as a process under attack ----------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _post(port: int, body: bytes, content_type: str) -> tuple[int, str | None]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/traces", data=body,
                                     headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, None
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Retry-After")


def _grpc_export(port: int, body: bytes) -> tuple[grpc.StatusCode, dict[str, Any]]:
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=[
            ("grpc.max_send_message_length", 32 << 20)]) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        try:
            stub.Export(request, timeout=30)
        except grpc.RpcError as exc:
            return exc.code(), dict(exc.trailing_metadata() or ())
        return grpc.StatusCode.OK, {}


@pytest.mark.parametrize("attack", ["big-json", "many-attributes"])
def test_serve_under_attack_stays_within_twice_the_bound_and_drains_in_time(
        tmp_path: Path, attack: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps(CONFIG))
    http, grpc_port = _free_port(), _free_port()
    with serve_process("--config", str(config), "--http", f"127.0.0.1:{http}",
                       "--grpc", f"127.0.0.1:{grpc_port}", "--forward", "none", "--quiet",
                       "--max-buffered-bytes", str(BOUND), "--shutdown-timeout", "5"
                       ) as (process, lines):
        idle = _rss(process.pid)
        peak = 0
        refusals: list[Any] = []
        # Built once; each send a trace of its own (the hex trace id of span 0 replaced).
        proto = _proto(0, value="x" * (4 << 20)) if attack == "big-json" else _proto(
            0, attributes=150_000)
        template = _json(proto)
        first = f"{1:032x}".encode()
        # Before the fix, all 12 taken: 12 x 4 MiB counted 256 bytes each, 12 x 150,000
        # attributes (about 40 MB each in memory) counted their 2.5 MB of body.
        for n in range(12):
            if attack == "big-json" or n % 2:   # OTLP/JSON, and OTLP/protobuf over gRPC
                status: Any = _post(http, template.replace(first, f"{n + 1:032x}".encode()),
                                    "application/json")
                taken = status[0] == 200
            else:
                proto.resource_spans[0].scope_spans[0].spans[0].trace_id = (
                    n + 1).to_bytes(16, "big")
                status = _grpc_export(grpc_port, proto.SerializeToString())
                taken = status[0] == grpc.StatusCode.OK
            peak = max(peak, _rss(process.pid))
            assert peak - idle <= 2 * BOUND, (n, (peak - idle) >> 20, "".join(lines))
            if not taken:
                refusals.append(status)
                if len(refusals) == 3:
                    break
                time.sleep(0.1)
        assert refusals, "the bound was never reached"
        for refusal in refusals:
            assert refusal in ((429, "1"), (503, "1")) or (
                refusal[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
                and "google.rpc.retryinfo-bin" in refusal[1]), refusal
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/healthz", timeout=10) as answer:
            health = json.load(answer)
        assert 0 < health["buffered_bytes"] <= BOUND
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
        took = time.monotonic() - sent
    assert code == 0 and took <= 5 + 1, (code, took, "".join(lines))
    assert "NOT everything" not in "".join(lines)
