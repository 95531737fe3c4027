"""``otel-tooleval serve``: real OTLP exporters in, a real OTLP receiver out, on 127.0.0.1."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import RunReport, load_config
from otel_tooleval.demo.agent import SCRIPTS, run_scripted_agent
from otel_tooleval.serve import ServeOptions, ToolEvalServer, options_from_args, parse_address
from tests.support.otlp_receiver import OtlpReceiver

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "otel_tooleval" / "demo" / "graders.yaml"
EXPECTED = [True, False, False, True]   # the demo scripts, in order (.env read; no validation)
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def demo_spans(repeat: int = 1) -> list[ReadableSpan]:
    """Finished SDK spans of the demo's scripted runs."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("travel-agent")
    for _ in range(repeat):
        for _, turns in SCRIPTS:
            run_scripted_agent(tracer, turns)
    provider.shutdown()
    return list(memory.get_finished_spans())


def body_of(spans: list[ReadableSpan]) -> bytes:
    return encode_spans(spans).SerializeToString()  # type: ignore[no-any-return]


def post(port: int, body: bytes, *, content_type: str = "application/x-protobuf",
         headers: dict[str, str] | None = None, path: str = "/v1/traces"
         ) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, body=body,
                     headers={"Content-Type": content_type, **(headers or {})})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def roots(rx: OtlpReceiver) -> list[dict[str, Any]]:
    return [s for s in rx.spans() if "tooleval.passed" in s["attributes"]]


@pytest.fixture
def serve_factory(receiver: OtlpReceiver) -> Iterator[Callable[..., ToolEvalServer]]:
    started: list[ToolEvalServer] = []

    def make(*, forward: str | None = None, **options: Any) -> ToolEvalServer:
        reports = options.pop("reports", None)
        opts = ServeOptions(load_config(options.pop("config", CONFIG)), grpc="127.0.0.1:0",
                            http="127.0.0.1:0", forward=forward or receiver.http_endpoint,
                            **{"decision_wait": 0.2, **options})
        server = ToolEvalServer(opts, on_report=reports.append if reports is not None else None)
        started.append(server.start())
        return server

    yield make
    for server in started:
        server.stop(timeout=5)


def test_parse_address() -> None:
    assert parse_address("0.0.0.0:4317", 1) == ("0.0.0.0", 4317)
    assert parse_address(":9", 1) == ("127.0.0.1", 9)
    assert parse_address("localhost", 4318) == ("localhost", 4318)
    assert parse_address("[::1]:4317", 1) == ("::1", 4317)
    with pytest.raises(ValueError, match="port"):
        parse_address("host:http", 1)


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_real_exporters_in_graded_trace_out(protocol: str, receiver: OtlpReceiver,
                                            serve_factory: Callable[..., ToolEvalServer]) -> None:
    reports: list[RunReport] = []
    server = serve_factory(reports=reports, emit_telemetry=True)
    exporter: Any = (HttpExporter(endpoint=f"http://127.0.0.1:{server.http_port}/v1/traces")
                     if protocol == "http/protobuf"
                     else GrpcExporter(endpoint=f"127.0.0.1:{server.grpc_port}", insecure=True))
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("travel-agent")
    for _, turns in SCRIPTS:
        run_scripted_agent(tracer, turns)
    provider.shutdown()
    assert receiver.wait_for(lambda: len(roots(receiver)) == len(SCRIPTS))
    assert server.stop(timeout=10)
    spans = receiver.spans()
    ids = Counter(s["span_id"] for s in spans)
    assert ids and max(ids.values()) == 1, "every span is forwarded exactly once"
    assert len(spans) == server.stats()["accepted_spans"]
    started = {r.run.trace_id_hex: r.run.start_ns for r in reports}
    graded = sorted(roots(receiver), key=lambda s: started[s["trace_id"]])   # script order
    assert [s["attributes"]["tooleval.passed"] for s in graded] == EXPECTED
    config = load_config(CONFIG)
    for span in graded:
        names = [e["attributes"]["gen_ai.evaluation.name"] for e in span["events"]
                 if e["name"] == "gen_ai.evaluation.result"]
        assert names == [g.name for g in config.graders]
        tools = [s for s in spans if s["trace_id"] == span["trace_id"]
                 and "gen_ai.tool.name" in s["attributes"]]
        assert span["attributes"]["tooleval.tool_calls"] == len(tools)
    # Its own log events and metrics went to the same next hop.
    events = [r for r in receiver.logs() if r["event_name"] == "gen_ai.evaluation.result"]
    assert len(events) == len(SCRIPTS) * len(config.graders)
    assert {e["trace_id"] for e in events} == {s["trace_id"] for s in graded}
    names = {m["name"] for m in receiver.metrics()}
    assert {"gen_ai.evaluation.score", "tooleval.runs"} <= names


def test_otlp_json_body_is_graded(receiver: OtlpReceiver,
                                  serve_factory: Callable[..., ToolEvalServer]) -> None:
    from google.protobuf import json_format

    server = serve_factory(emit_telemetry=False)
    doc = json_format.MessageToDict(encode_spans(demo_spans()))
    for rs in doc["resourceSpans"]:   # OTLP/JSON ids are hex, not protobuf's base64
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        import base64
                        span[key] = base64.b64decode(span[key]).hex()
    status, _, payload = post(server.http_port or 0, json.dumps(doc).encode(),
                              content_type="application/json")
    assert status == 200, payload
    assert json.loads(payload) == {}
    assert receiver.wait_for(lambda: len(roots(receiver)) == len(SCRIPTS))
    assert sorted(s["attributes"]["tooleval.passed"] for s in roots(receiver)) == sorted(EXPECTED)


def test_late_child_inside_the_window_counts_and_after_it_is_forwarded_as_late(
        receiver: OtlpReceiver, serve_factory: Callable[..., ToolEvalServer]) -> None:
    reports: list[RunReport] = []
    server = serve_factory(reports=reports, decision_wait=1.0, emit_telemetry=False)
    spans = demo_spans()
    trace_id = spans[-1].context.trace_id
    trace = [s for s in spans if s.context.trace_id == trace_id]
    root = trace[-1]
    tools = [s for s in trace if "gen_ai.tool.name" in (s.attributes or {})]
    early = [s for s in trace if s is not tools[-1] and s is not tools[-2]]
    assert post(server.http_port or 0, body_of(early))[0] == 200      # root arrives first
    time.sleep(0.3)
    assert post(server.http_port or 0, body_of([tools[-2]]))[0] == 200  # inside the window
    assert receiver.wait_for(lambda: roots(receiver), timeout=5)
    assert post(server.http_port or 0, body_of([tools[-1]]))[0] == 200  # after the decision
    assert receiver.wait_for(lambda: len(receiver.spans()) == len(trace))
    (report,) = reports
    # The late call was not executed in the graded run: the model's request stands for it,
    # unexecuted (a pending call).
    assert report.run.reading.executed == len(tools) - 1
    assert [n.name for n in report.run.reading.unexecuted] == [
        tools[-1].attributes["gen_ai.tool.name"]]
    assert report.run.pending_calls == 1
    assert roots(receiver)[0]["span_id"] == f"{root.context.span_id:016x}"
    assert server.stats()["late_spans"] == 1


def test_backpressure_answers_retry_later(receiver: OtlpReceiver,
                                          serve_factory: Callable[..., ToolEvalServer]) -> None:
    server = serve_factory(decision_wait=60, max_buffered_spans=5, emit_telemetry=False)
    spans = demo_spans()
    assert post(server.http_port or 0, body_of(spans[:8]))[0] == 200   # fills the buffers
    status, headers, payload = post(server.http_port or 0, body_of(spans[8:]))
    assert status == 429
    assert headers.get("Retry-After") == "1"
    assert "retry later" in status_pb2.Status.FromString(payload).message
    with (grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel,
          pytest.raises(grpc.RpcError) as info):
        channel.unary_unary(EXPORT)(body_of(spans[8:]), timeout=5)
    error: Any = info.value
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    trailers = dict(error.trailing_metadata())
    status_msg = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    retry = error_details_pb2.RetryInfo()
    assert status_msg.details[0].Unpack(retry) and retry.retry_delay.seconds == 1
    assert server.stats()["refused_full"] == 2
    # Once the held traces are decided (flush), the sender's retry goes through.
    assert server.tail.flush(5)
    server.tail.buffers.take_due(everything="test")   # rootless leftovers too
    assert post(server.http_port or 0, body_of(spans[8:]))[0] == 200


def test_next_hop_down_fills_the_queue_then_senders_are_told_to_retry(
        receiver: OtlpReceiver, serve_factory: Callable[..., ToolEvalServer]) -> None:
    import socket

    with socket.socket() as s:   # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    server = serve_factory(forward=f"http://127.0.0.1:{dead}", max_queued_bytes=1,
                           emit_telemetry=False)
    spans = demo_spans()
    assert post(server.http_port or 0, body_of(spans))[0] == 200
    assert post(server.http_port or 0, body_of(spans))[0] == 429


def test_malformed_and_oversized_bodies_are_refused_with_a_reason(
        serve_factory: Callable[..., ToolEvalServer]) -> None:
    server = serve_factory(max_body_bytes=4096, emit_telemetry=False)
    port = server.http_port or 0
    status, _, payload = post(port, b"\xff\xff\xff not protobuf")
    assert status == 400
    assert "malformed ExportTraceServiceRequest" in status_pb2.Status.FromString(payload).message
    status, _, payload = post(port, b"{nope", content_type="application/json")
    assert status == 400 and "not JSON" in json.loads(payload)["message"]
    bad_id = {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz", "name": "x"}]}]}]}
    status, _, payload = post(port, json.dumps(bad_id).encode(), content_type="application/json")
    assert status == 400
    assert "resourceSpans[0].scopeSpans[0].spans[0].traceId" in json.loads(payload)["message"]
    assert post(port, b"x" * 5000)[0] == 413
    bomb = gzip.compress(b"\0" * 100_000)
    assert len(bomb) < 4096
    assert post(port, bomb, headers={"Content-Encoding": "gzip"})[0] == 413
    assert post(port, b"", content_type="text/plain")[0] == 415
    assert post(port, b"", path="/v1/logs")[0] == 404
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        with pytest.raises(grpc.RpcError) as info:
            channel.unary_unary(EXPORT)(b"\xff\xff\xff", timeout=5)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
        with pytest.raises(grpc.RpcError) as info:
            channel.unary_unary(EXPORT)(b"\n" + b"x" * 5000, timeout=5)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
    # A well-formed request with one invalid span id: that span is rejected, the rest accepted.
    request = encode_spans(demo_spans()[:3])
    request.resource_spans[0].scope_spans[0].spans[0].span_id = b"\0" * 8
    status, _, payload = post(port, request.SerializeToString())
    assert status == 200
    response = trace_service_pb2.ExportTraceServiceResponse.FromString(payload)
    assert response.partial_success.rejected_spans == 1
    assert "span_id" in response.partial_success.error_message
    assert server.stats()["rejected_spans"] == 1


def test_healthz_tells_ready_then_draining(serve_factory: Callable[..., ToolEvalServer]) -> None:
    server = serve_factory(emit_telemetry=False)
    status, doc = get(server.http_port or 0, "/healthz")
    assert status == 200 and doc["status"] == "ready"
    server.draining = True
    status, doc = get(server.http_port or 0, "/healthz")
    assert status == 503 and doc["status"] == "draining"
    assert post(server.http_port or 0, body_of(demo_spans()[:2]))[0] == 503


def test_forwarding_over_grpc_and_retrying_until_the_next_hop_is_up(
        loopback_only: None) -> None:
    spans = demo_spans()
    with OtlpReceiver() as rx:
        grpc_target = rx.grpc_endpoint
    # rx is stopped: the next hop is down. Forwarding retries until it is back on that port.
    opts = ServeOptions(load_config(CONFIG), grpc=None, http="127.0.0.1:0",
                        forward=grpc_target, forward_protocol="grpc", decision_wait=0.1,
                        emit_telemetry=False)
    with ToolEvalServer(opts) as server:
        assert post(server.http_port or 0, body_of(spans))[0] == 200
        time.sleep(0.5)
        assert server.stats()["forward_retries"] >= 1
        port = int(grpc_target.rsplit(":", 1)[1])
        with OtlpReceiver(grpc_port=port) as back:
            assert back.wait_for(lambda: len(back.spans()) == len(spans), timeout=15)
            assert sorted(s["attributes"]["tooleval.passed"] for s in roots(back)) == sorted(
                EXPECTED)


def test_options_from_args_name_the_bad_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    common: dict[str, Any] = {"grpc": None, "http": None, "forward_protocol": None,
                              "decision_wait": 1.0}
    # No next hop at all: a first try still starts, forwarding nowhere.
    assert options_from_args(str(CONFIG), forward=None, **common).forward == "none"
    with pytest.raises(ValueError, match="--forward-protocol"):
        options_from_args(str(CONFIG), forward="none", **{**common, "forward_protocol": "udp"})
    with pytest.raises(ValueError, match="--decision-wait"):
        options_from_args(str(CONFIG), forward="none", **{**common, "decision_wait": -1})
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert options_from_args(str(CONFIG), forward=None, **common).forward.endswith(":4318")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_sigterm_drains_everything_accepted(receiver: OtlpReceiver) -> None:
    """The CLI under SIGTERM: runs still inside their decision window are graded and sent,
    while an idle keep-alive connection and a half-sent request are open (a read timeout of
    60 s must not hold the shutdown)."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_tooleval.cli", "serve", "--config", str(CONFIG),
         "--grpc", "off", "--http", f"127.0.0.1:{port}", "--forward", receiver.http_endpoint,
         "--decision-wait", "120", "--read-timeout", "60"],
        env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if get(port, "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "serve did not become ready"
            time.sleep(0.05)
        spans = demo_spans(repeat=3)
        for start in range(0, len(spans), 20):
            assert post(port, body_of(spans[start:start + 20]))[0] == 200
        assert not roots(receiver), "decided before SIGTERM: the wait is 120 s"
        keep_alive = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        keep_alive.request("GET", "/healthz")
        assert keep_alive.getresponse().read()
        half = _raw(port, b"POST /v1/traces HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc")
        start = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            _, err = process.communicate(timeout=20)
        finally:
            keep_alive.close()
            half.close()
        assert time.monotonic() - start < 20
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    received = receiver.spans()
    assert sorted(s["span_id"] for s in received) == sorted(
        f"{s.context.span_id:016x}" for s in spans)
    assert sorted(s["attributes"]["tooleval.passed"] for s in roots(receiver)) == sorted(
        EXPECTED * 3)
    assert "draining" in err and "12 runs graded" in err
    # The CLI logs one line per graded run on stderr by default (docs/serve.md).
    assert err.count("otel-tooleval serve: run agent=travel_agent trace=") == 12, err


class _Router(ThreadingHTTPServer):
    """Splits every OTLP/HTTP request by trace id over backends, as the collector's
    ``loadbalancing`` exporter with ``routing_key: traceID`` does."""

    daemon_threads = True

    def __init__(self, backends: list[int]) -> None:
        self.backends = backends
        self.sent: Counter[int] = Counter()
        super().__init__(("127.0.0.1", 0), _RouterHandler)


class _RouterHandler(BaseHTTPRequestHandler):
    server: _Router

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        parts: dict[int, trace_service_pb2.ExportTraceServiceRequest] = {}
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    backend = int.from_bytes(span.trace_id, "big") % len(self.server.backends)
                    part = parts.setdefault(backend,
                                            trace_service_pb2.ExportTraceServiceRequest())
                    out_rs = part.resource_spans.add(resource=rs.resource)
                    out_rs.scope_spans.add(scope=ss.scope).spans.append(span)
        for backend, part in parts.items():
            status = post(self.server.backends[backend], part.SerializeToString())[0]
            assert status == 200
            self.server.sent[backend] += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def test_two_instances_behind_a_trace_id_router_grade_every_run_once(
        receiver: OtlpReceiver, serve_factory: Callable[..., ToolEvalServer]) -> None:
    reports: list[list[RunReport]] = [[], []]
    servers = [serve_factory(reports=r, emit_telemetry=False) for r in reports]
    router = _Router([s.http_port or 0 for s in servers])
    thread = threading.Thread(target=router.serve_forever, daemon=True)
    thread.start()
    try:
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(
            HttpExporter(endpoint=f"http://127.0.0.1:{router.server_address[1]}/v1/traces"),
            max_export_batch_size=64))
        tracer = provider.get_tracer("travel-agent")
        runs = 25
        for _ in range(runs):
            for _, turns in SCRIPTS:
                run_scripted_agent(tracer, turns)
        provider.shutdown()
    finally:
        router.shutdown()
        router.server_close()
    total = runs * len(SCRIPTS)
    assert receiver.wait_for(lambda: len(roots(receiver)) == total, timeout=20)
    graded = [r.run.trace_id_hex for rs in reports for r in rs]
    assert len(graded) == len(set(graded)) == total, "every run graded exactly once"
    assert all(reports), "both instances got traces"
    assert set(graded).isdisjoint({r.run.trace_id_hex for r in reports[0]} & {
        r.run.trace_id_hex for r in reports[1]})
    assert Counter(s["attributes"]["tooleval.passed"] for s in roots(receiver)) == Counter(
        EXPECTED * runs)


def test_every_serve_flag_in_the_docs_exists() -> None:
    import re

    from otel_tooleval.cli import _parser

    page = (ROOT / "docs" / "serve.md").read_text()
    section = page[:page.index("## What serve prints")]
    flags = set(re.findall(r"(--[a-z][a-z-]+)", section))
    serve = _parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    known = {o for action in serve._actions for o in action.option_strings}
    assert flags and flags <= known, flags - known


# -- request decoding: gzip, deep and malformed bodies (issue 16, findings 3 and 4) ------------

def _accepted(server: ToolEvalServer) -> int:
    return int(server.stats().get("accepted_spans", 0))


def test_gzip_bodies_are_read_whole_and_cut_streams_refused(
        serve_factory: Callable[..., ToolEvalServer]) -> None:
    """A second gzip member is read, not dropped with a 200; a stream without its end is 400."""
    server = serve_factory(max_body_bytes=64 * 1024, emit_telemetry=False)
    port = server.http_port or 0
    spans = demo_spans()
    first, second = body_of(spans[:10]), body_of(spans[10:])   # concatenated: one request
    status, _, payload = post(port, gzip.compress(first) + gzip.compress(second),
                              headers={"Content-Encoding": "gzip"})
    assert status == 200, payload
    assert _accepted(server) == len(spans), "every member's spans are accepted"
    # Zero padding after a member (gzip(1) accepts it) is not an error.
    assert post(port, gzip.compress(first) + b"\0" * 10,
                headers={"Content-Encoding": "gzip"})[0] == 200
    before = _accepted(server)
    whole = gzip.compress(body_of(spans))
    import zlib
    deflated = zlib.compress(body_of(spans))
    for name, body, encoding in [
            ("gzip without its trailer", whole[:-8], "gzip"),
            ("gzip cut in the middle", whole[:len(whole) // 2], "gzip"),
            ("second member cut", gzip.compress(first) + gzip.compress(second)[:-4], "gzip"),
            ("garbage after a member", gzip.compress(first) + b"garbage", "gzip"),
            ("empty gzip", b"", "gzip"),
            ("deflate without its end", deflated[:-4], "deflate"),
            ("bytes after the deflate stream", deflated + b"x", "deflate")]:
        status, _, payload = post(port, body, headers={"Content-Encoding": encoding})
        assert status == 400, (name, status)
        assert status_pb2.Status.FromString(payload).message, name
    assert _accepted(server) == before, "nothing of a refused body is kept"
    # The bound holds over all members together, however many.
    member = gzip.compress(b"\0" * 40_000)
    status, _, _ = post(port, member * 2, headers={"Content-Encoding": "gzip"})
    assert status == 413
    tiny = gzip.compress(first[:0])   # many empty members: bounded work, not quadratic
    assert post(port, tiny * 3000 + gzip.compress(first),
                headers={"Content-Encoding": "gzip"})[0] == 200


def _nested_any_value(depth: int) -> bytes:
    """An OTLP/protobuf request with one span whose attribute is an array nested ``depth``
    deep (AnyValue.array_value -> ArrayValue.values -> AnyValue ...), encoded by hand."""
    def field(number: int, payload: bytes) -> bytes:
        size, out = len(payload), bytearray()
        while True:
            out.append((size & 0x7F) | (0x80 if size > 0x7F else 0))
            size >>= 7
            if not size:
                break
        return bytes([number << 3 | 2]) + bytes(out) + payload
    value = field(1, b"x")   # AnyValue.string_value
    for _ in range(depth):
        value = field(5, field(1, value))
    span = (field(1, b"\1" * 16) + field(2, b"\2" * 8) + field(5, b"deep")
            + field(9, field(1, b"a") + field(2, value)))
    return field(1, field(2, field(2, span)))


def test_deep_and_malformed_bodies_are_400_with_one_log_line(
        serve_factory: Callable[..., ToolEvalServer], caplog: pytest.LogCaptureFixture) -> None:
    server = serve_factory(emit_telemetry=False)
    port = server.http_port or 0
    deep = 100_000

    def attr_doc(depth: int) -> bytes:
        value: dict[str, Any] = {"stringValue": "x"}
        for _ in range(depth):
            value = {"arrayValue": {"values": [value]}}
        return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{
            "traceId": "1" * 32, "spanId": "2" * 16, "name": "deep",
            "attributes": [{"key": "a", "value": value}]}]}]}]}).encode()

    bodies = [
        (b"[" * deep + b"]" * deep, "application/json"),
        (b'{"resourceSpans": ' + b"[" * deep + b"]" * deep + b"}", "application/json"),
        (b'{"resourceSpans": ' + b"[" * 500 + b"]" * 500 + b"}", "application/json"),
        (attr_doc(200), "application/json"),
        (b'{"resourceSpans": 5}', "application/json"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [null]}]}]}', "application/json"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": 1'
         + b"0" * 5000 + b"}]}]}]}", "application/json"),
        (b'{"a": "\xff\xfe"}', "application/json"),
        (b"\n\x01", "application/x-protobuf"),
        (_nested_any_value(500), "application/x-protobuf"),
    ]
    caplog.set_level("DEBUG", logger="otel_tooleval")
    for body, content_type in bodies:
        caplog.clear()
        status, _, payload = post(port, body, content_type=content_type)
        message = (json.loads(payload)["message"] if content_type == "application/json"
                   else status_pb2.Status.FromString(payload).message)
        assert status == 400, (body[:40], status, message)
        assert "\n" not in message and len(message) <= 300, message
        records = [r for r in caplog.records if r.name.startswith("otel_tooleval")]
        assert len(records) == 1, [r.getMessage() for r in records]
        assert records[0].exc_info is None and "\n" not in records[0].getMessage()
        assert "refused: 400" in records[0].getMessage()
    status, _, payload = post(port, b"[" * deep + b"]" * deep, content_type="application/json")
    assert "nested too deeply" in json.loads(payload)["message"]
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        with pytest.raises(grpc.RpcError) as info:
            channel.unary_unary(EXPORT)(_nested_any_value(500), timeout=5)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    assert _accepted(server) == 0
    # A shallow nesting is still a request like any other.
    assert post(port, _nested_any_value(5))[0] == 200


# -- HTTP read timeout (issue 16, finding 2 in part) ----------------------------------------------

def _raw(port: int, data: bytes = b"") -> Any:
    import socket

    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if data:
        sock.sendall(data)
    return sock


def _closed_after(sock: Any) -> float:
    """Seconds until the server closes ``sock`` (reads to the end; fails after 5 s)."""
    start = time.monotonic()
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        pytest.fail("the server kept the connection open")
    except ConnectionResetError:
        pass
    return time.monotonic() - start


def test_read_timeout_closes_slow_half_sent_and_idle_connections(
        serve_factory: Callable[..., ToolEvalServer], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="otel_tooleval")
    server = serve_factory(read_timeout=0.6, idle_timeout=0.6, emit_telemetry=False)
    port = server.http_port or 0
    body = body_of(demo_spans()[:3])
    head = (f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    opened: list[Any] = []   # closed at the end even when a check fails: stop() waits for them
    try:
        # Half a body, then silence: closed, not answered, nothing accepted.
        half = _raw(port, head + body[:len(body) // 2])
        opened.append(half)
        assert 0.3 < _closed_after(half) < 3
        assert _accepted(server) == 0
        assert any("body not received" in r.getMessage() for r in caplog.records)
        # Slowloris: a byte every 0.1 s never lets a per-read timeout fire; the deadline does.
        slow = _raw(port)
        opened.append(slow)
        start = time.monotonic()
        try:
            for byte in head:
                slow.send(bytes([byte]))
                time.sleep(0.1)
                assert time.monotonic() - start < 4, "the trickling connection was not closed"
        except (BrokenPipeError, ConnectionResetError):
            pass
        else:
            assert _closed_after(slow) < 3
        # An idle keep-alive connection after a whole request: closed after --idle-timeout.
        idle = _raw(port, head + body)
        opened.append(idle)
        response = http.client.HTTPResponse(idle)
        response.begin()
        assert response.status == 200 and response.getheader("Connection") != "close"
        response.read()
        assert 0.3 < _closed_after(idle) < 3
    finally:
        for sock in opened:
            sock.close()
    assert post(port, body)[0] == 200   # the server itself is fine
    assert _accepted(server) == 2 * 3


def test_stop_finishes_while_connections_wait(
        receiver: OtlpReceiver, serve_factory: Callable[..., ToolEvalServer]) -> None:
    """An idle keep-alive and a half-sent request do not hold stop() (SIGTERM) up, even with
    a long read timeout; everything answered 200 is forwarded."""
    server = serve_factory(read_timeout=60, emit_telemetry=False, decision_wait=60)
    port = server.http_port or 0
    spans = demo_spans()
    body = body_of(spans)
    keep_alive = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    keep_alive.request("POST", "/v1/traces", body=body,
                       headers={"Content-Type": "application/x-protobuf"})
    assert keep_alive.getresponse().status == 200
    half = _raw(port, b"POST /v1/traces HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc")
    done: list[bool] = []
    stopper = threading.Thread(target=lambda: done.append(server.stop(timeout=20)))
    start = time.monotonic()
    try:
        stopper.start()
        stopper.join(10)
        assert done == [True], "stop() waited for connections that sent no request"
        assert time.monotonic() - start < 10
    finally:
        keep_alive.close()
        half.close()
        stopper.join(30)
    assert sorted(s["span_id"] for s in receiver.spans()) == sorted(
        f"{s.context.span_id:016x}" for s in spans)


def test_the_serve_page_lists_every_serve_flag() -> None:
    """Issue 16: docs/serve.md's flags table documents every flag and limit with its default
    (it was the README's until the README was cut to a first read, issue 28)."""
    from otel_tooleval.cli import _parser

    readme = (ROOT / "docs" / "serve.md").read_text()
    start = readme.index("Every flag of `serve`, with its default")
    table = readme[start:readme.index("\n\n", readme.index("| flag | default", start))]
    serve = _parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    flags = {o for action in serve._actions for o in action.option_strings if o.startswith("--")}
    flags -= {"--help"}
    listed = set(re.findall(r"`(--[a-z][a-z-]+)`", table))
    assert flags == listed, (flags - listed, listed - flags)
