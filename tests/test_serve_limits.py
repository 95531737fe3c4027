"""``serve``'s connection limits and lossless shutdown (issue 16, findings 1 and 2).

Real sockets on 127.0.0.1, real OTLP exporters, and ``serve`` as a subprocess where signals
or the process's memory matter; what is forwarded is counted at a real OTLP receiver.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

from otel_tooleval import load_config
from otel_tooleval.serve import ServeOptions, ToolEvalServer
from tests.support.otlp_receiver import OtlpReceiver

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "otel_tooleval" / "demo" / "graders.yaml"
PROTOBUF = {"Content-Type": "application/x-protobuf"}
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _child_spans(n: int, *, attribute_bytes: int = 0, seed: int = 0) -> bytes:
    """A request of ``n`` leaf spans (they have a parent, so serve forwards them at once)."""
    rng = random.Random(seed)
    request = trace_service_pb2.ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for _ in range(n):
        span = scope.spans.add(trace_id=rng.randbytes(16), span_id=rng.randbytes(8),
                               parent_span_id=rng.randbytes(8), name="step",
                               start_time_unix_nano=1, end_time_unix_nano=2)
        if attribute_bytes:
            span.attributes.add(key="blob").value.string_value = "x" * attribute_bytes
    return request.SerializeToString()  # type: ignore[no-any-return]


class _Serve:
    """``otel-tooleval serve`` as a subprocess (HTTP only), its stderr in a file."""

    def __init__(self, tmp: Path, forward: str, *flags: str) -> None:
        self.port = _free_port()
        self.log = (tmp / "serve.log").open("w+")
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "otel_tooleval.cli", "serve", "--config", str(CONFIG),
             "--grpc", "off", "--http", f"127.0.0.1:{self.port}", "--forward", forward,
             "--quiet", *flags], env=env, stderr=self.log, text=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    conn.close()
                    break
            except OSError:
                pass
            assert self.process.poll() is None and time.monotonic() < deadline, self.stderr()
            time.sleep(0.05)

    def stderr(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def health(self) -> dict[str, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request("GET", "/healthz")
            return dict(json.loads(conn.getresponse().read()))
        finally:
            conn.close()

    def status(self, key: str) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        raise KeyError(key)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.log.close()


@pytest.fixture
def serve_process(tmp_path: Path) -> Iterator[Callable[..., _Serve]]:
    started: list[_Serve] = []

    def start(forward: str, *flags: str) -> _Serve:
        started.append(_Serve(tmp_path, forward, *flags))
        return started[-1]

    yield start
    for serve in started:
        serve.close()


@pytest.fixture
def serve_factory(receiver: OtlpReceiver) -> Iterator[Callable[..., ToolEvalServer]]:
    started: list[ToolEvalServer] = []

    def make(**options: Any) -> ToolEvalServer:
        opts = ServeOptions(load_config(CONFIG), grpc="127.0.0.1:0", http="127.0.0.1:0",
                            forward=receiver.http_endpoint,
                            **{"decision_wait": 0.2, "emit_telemetry": False, **options})
        started.append(ToolEvalServer(opts).start())
        return started[-1]

    yield make
    for server in started:
        server.stop(timeout=5)


def _response(sock: socket.socket, timeout: float = 5.0) -> http.client.HTTPResponse:
    sock.settimeout(timeout)
    response = http.client.HTTPResponse(sock)
    response.begin()
    response.read()
    return response


def _head(length: int | str, *, path: str = "/v1/traces") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def _forwarded_ids(rx: OtlpReceiver) -> Counter[str]:
    return Counter(s["span_id"] for s in rx.spans())


def _ids(body: bytes) -> list[str]:
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
    return [s.span_id.hex() for rs in request.resource_spans for ss in rs.scope_spans
            for s in ss.spans]


# -- finding 1: SIGTERM with connections open ------------------------------------------------

def test_sigterm_with_an_idle_exporter_connection_and_slowloris_exits_in_time(
        receiver: OtlpReceiver, serve_process: Callable[..., _Serve]) -> None:
    """A real OTLP/HTTP exporter leaves its pooled keep-alive connection idle, 20 clients
    trickle request headers; SIGTERM still ends serve within --shutdown-timeout, and every
    span answered 200 reaches the next hop."""
    serve = serve_process(receiver.http_endpoint, "--shutdown-timeout", "8",
                          "--read-timeout", "60", "--idle-timeout", "600",
                          "--decision-wait", "120")
    exporter = HttpExporter(endpoint=f"http://127.0.0.1:{serve.port}/v1/traces")
    provider = TracerProvider()
    memory: list[Any] = []

    class _Recording(SimpleSpanProcessor):
        def on_end(self, span: Any) -> None:
            memory.append(span)
            super().on_end(span)

    provider.add_span_processor(_Recording(exporter))
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("invoke_agent planner",
                                      attributes={"gen_ai.operation.name": "invoke_agent"}):
        for i in range(5):
            with tracer.start_as_current_span(f"execute_tool search_{i}"):
                pass
    sent = {f"{s.context.span_id:016x}" for s in memory}
    assert len(sent) == 6
    assert exporter.export([]) == SpanExportResult.SUCCESS   # the pooled connection: idle now
    slow = [socket.create_connection(("127.0.0.1", serve.port), timeout=5) for _ in range(20)]
    for sock in slow:
        sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")   # and nothing more
    try:
        start = time.monotonic()
        serve.process.send_signal(signal.SIGTERM)
        serve.process.wait(8 + 2)
        took = time.monotonic() - start
    finally:
        for sock in slow:
            sock.close()
        # The provider, not the exporter: the provider's exit hook would shut the exporter
        # down a second time (a stray "Exporter already shutdown" line after pytest's summary).
        provider.shutdown()
    assert serve.process.returncode == 0, serve.stderr()
    assert took < 8, f"exit took {took:.1f} s, over --shutdown-timeout"
    assert set(_forwarded_ids(receiver)) == sent   # the root was held: decided at SIGTERM


def test_stop_cuts_a_request_still_arriving_at_the_bound_and_keeps_what_was_answered(
        receiver: OtlpReceiver, serve_factory: Callable[..., ToolEvalServer]) -> None:
    """stop(): a body still arriving when the in-flight bound ends is cut unanswered (its
    sender retries), requests answered 200 before are forwarded, stop() returns in time."""
    server = serve_factory(read_timeout=60, decision_wait=60)
    port = server.http_port or 0
    body = _child_spans(3)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("POST", "/v1/traces", body=body, headers=PROTOBUF)
    assert conn.getresponse().status == 200
    half = socket.create_connection(("127.0.0.1", port), timeout=10)
    half.sendall(_head(1000) + b"x" * 10)
    time.sleep(0.2)
    start = time.monotonic()
    assert server.stop(timeout=6)
    took = time.monotonic() - start
    assert 1.5 < took < 6   # the bound is a third of the time: the request was waited for
    assert half.recv(100) == b""   # closed, never answered
    half.close()
    conn.close()
    assert sorted(_forwarded_ids(receiver)) == sorted(_ids(body))


# -- finding 2: many clients, large bodies, slow clients --------------------------------------

def test_200_clients_x_50_requests_no_resets_every_span_forwarded_once(
        receiver: OtlpReceiver, serve_process: Callable[..., _Serve]) -> None:
    """200 clients connect at once and send 50 requests each on keep-alive connections:
    no connection is reset, every answer is 200 or 429/503 with Retry-After (retried), and
    the next hop receives every span exactly once."""
    serve = serve_process(receiver.http_endpoint)
    clients, requests = 200, 50
    bodies = [[_child_spans(1, seed=c * requests + r + 1) for r in range(requests)]
              for c in range(clients)]
    problems: list[str] = []
    retries = Counter[int]()
    barrier = threading.Barrier(clients)
    give_up = time.monotonic() + 100

    def client(mine: list[bytes]) -> None:
        barrier.wait()
        conn = http.client.HTTPConnection("127.0.0.1", serve.port, timeout=30)
        try:
            for body in mine:
                while True:
                    conn.request("POST", "/v1/traces", body=body, headers=PROTOBUF)
                    response = conn.getresponse()
                    response.read()
                    if response.status == 200:
                        break
                    if response.status not in (429, 503) or not response.getheader(
                            "Retry-After"):
                        problems.append(f"answered {response.status} without Retry-After")
                        return
                    retries[response.status] += 1
                    if time.monotonic() > give_up:
                        problems.append("still refused after 100 s")
                        return
                    time.sleep(0.05)
        except OSError as exc:   # a reset, a refused connection, a timeout
            problems.append(repr(exc))
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(give_up + 20 - time.monotonic(), 0.1))
    assert not problems, problems[:5]
    expected = Counter(i for mine in bodies for body in mine for i in _ids(body))
    deadline = time.monotonic() + 60
    while serve.health()["forwarded_spans"] < len(expected):   # the receiver decodes slowly
        assert time.monotonic() < deadline, serve.health()
        time.sleep(0.5)
    assert _forwarded_ids(receiver) == expected   # each exactly once


def _send_large(port: int, body: bytes, out: list[tuple[int, str | None]],
                start: threading.Event) -> None:
    """Headers, then the body a MiB at a time, reading the answer as soon as one comes (a
    server may answer before the body, then close)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        start.wait()
        sock.sendall(_head(len(body)))
        view = memoryview(body)
        while view:
            if select.select([sock], [], [], 0)[0]:
                break   # an answer before the whole body: stop sending
            try:
                sent = sock.send(view[:1 << 20])
            except (BrokenPipeError, ConnectionResetError):
                break
            view = view[sent:]
        response = _response(sock, timeout=60)
        out.append((response.status, response.getheader("Retry-After")))
    except OSError as exc:
        out.append((0, repr(exc)))
    finally:
        sock.close()


def test_40_concurrent_19_mib_bodies_keep_memory_bounded(
        serve_process: Callable[..., _Serve]) -> None:
    """40 clients send 19 MiB bodies at once: bodies that would take the bytes in flight past
    --max-inflight-bytes are answered 429 with Retry-After before being read, so serve's peak
    RSS stays under the budget plus 300 MiB (the old receiver read every body whole first:
    1.2 GB)."""
    budget = 64 * 1024 * 1024
    serve = serve_process("none", "--max-inflight-bytes", str(budget))
    before = serve.status("VmRSS")
    body = _child_spans(1, attribute_bytes=19 * 1024 * 1024)
    out: list[tuple[int, str | None]] = []
    go = threading.Event()
    threads = [threading.Thread(target=_send_large, args=(serve.port, body, out, go))
               for _ in range(40)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join(120)
    peak = serve.status("VmHWM")
    statuses = Counter(status for status, _ in out)
    assert len(out) == 40 and set(statuses) <= {200, 429}, out
    assert statuses[200] >= 1 and statuses[429] >= 1, statuses
    assert all(retry == "1" for status, retry in out if status == 429)
    bound = before + budget + 300 * 1024 * 1024
    assert peak < bound, f"peak RSS {peak >> 20} MiB, over {bound >> 20} MiB"


def test_slowloris_does_not_stop_a_normal_client_and_is_closed_at_the_deadline(
        serve_factory: Callable[..., ToolEvalServer],
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger="otel_tooleval")
    server = serve_factory(read_timeout=1.5)
    port = server.http_port or 0
    head = _head(10)
    slow = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(20)]
    closed_after: dict[int, float] = {}
    start = time.monotonic()
    try:
        for i in range(len(head)):   # a byte each 0.1 s on every connection
            for n, sock in enumerate(slow):
                if n in closed_after:
                    continue
                try:
                    sock.send(head[i:i + 1])
                except OSError:
                    closed_after[n] = time.monotonic() - start
            if i == 3:   # meanwhile a normal client is answered at once
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("POST", "/v1/traces", body=_child_spans(1), headers=PROTOBUF)
                assert conn.getresponse().status == 200
                conn.close()
            if len(closed_after) == len(slow) or time.monotonic() - start > 6:
                break
            time.sleep(0.1)
        for n, sock in enumerate(slow):
            if n not in closed_after:
                sock.settimeout(max(0.1, 6 - (time.monotonic() - start)))
                try:
                    data = sock.recv(100)
                except TimeoutError:
                    continue
                except OSError:
                    data = b""
                assert data == b"", "a trickling client was answered"
                closed_after[n] = time.monotonic() - start
    finally:
        for sock in slow:
            sock.close()
    assert len(closed_after) == 20, "a trickling connection was not closed"
    assert all(1.2 < t < 4 for t in closed_after.values()), closed_after
    lines = [r.getMessage() for r in caplog.records if "--read-timeout" in r.getMessage()]
    assert len(lines) == 20 and "request headers not received" in lines[0]


def test_a_connection_that_sends_nothing_is_closed_at_the_deadline(
        serve_factory: Callable[..., ToolEvalServer]) -> None:
    server = serve_factory(read_timeout=0.8)
    sock = socket.create_connection(("127.0.0.1", server.http_port or 0), timeout=5)
    start = time.monotonic()
    assert sock.recv(10) == b""
    assert 0.5 < time.monotonic() - start < 4
    sock.close()


# -- answered on the headers: the body is never read -----------------------------------------

def test_connection_cap_answers_503_with_retry_after(
        serve_factory: Callable[..., ToolEvalServer]) -> None:
    server = serve_factory(max_connections=3, max_connections_per_peer=4)   # all from one peer
    port = server.http_port or 0
    held = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(3)]
    time.sleep(0.2)
    try:
        extra = socket.create_connection(("127.0.0.1", port), timeout=5)
        extra.sendall(_head(50 * 1024 * 1024))   # a huge body announced, none sent
        response = _response(extra)
        assert response.status == 503 and response.getheader("Retry-After") == "1"
        assert response.getheader("Connection") == "close"
        assert extra.recv(10) == b""
        extra.close()
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.2)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)   # under the cap again
    conn.request("POST", "/v1/traces", body=_child_spans(1), headers=PROTOBUF)
    assert conn.getresponse().status == 200
    conn.close()
    assert server.stats()["refused_connections"] == 1


def test_refusals_are_decided_on_the_headers_without_the_body(
        serve_factory: Callable[..., ToolEvalServer]) -> None:
    """413 (over --max-body-bytes), 429 (buffers full; in-flight bytes over the budget) and
    503 (draining) arrive while the announced body is still unsent."""
    server = serve_factory(max_body_bytes=1024 * 1024, max_inflight_bytes=600 * 1024,
                           max_buffered_spans=2, decision_wait=60)
    port = server.http_port or 0

    def answer(head: bytes) -> http.client.HTTPResponse:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            sock.sendall(head)
            return _response(sock)
        finally:
            sock.close()

    assert answer(_head(2 * 1024 * 1024)).status == 413
    # A body of 500 KiB half sent holds its bytes in flight; another of 500 KiB is refused.
    holder = socket.create_connection(("127.0.0.1", port), timeout=5)
    holder.sendall(_head(500 * 1024) + b"\0" * 1000)
    time.sleep(0.2)
    busy = answer(_head(500 * 1024))
    assert busy.status == 429 and busy.getheader("Retry-After") == "1"
    holder.close()
    time.sleep(0.2)
    assert server.stats()["refused_inflight"] == 1
    # Buffers full: two held roots fill --max-buffered-spans 2.
    full = trace_service_pb2.ExportTraceServiceRequest()
    scope = full.resource_spans.add().scope_spans.add()
    for n in range(2):
        scope.spans.add(trace_id=bytes([n + 1]) * 16, span_id=bytes([n + 1]) * 8,
                        name="invoke_agent a", start_time_unix_nano=1, end_time_unix_nano=2)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("POST", "/v1/traces", body=full.SerializeToString(), headers=PROTOBUF)
    assert conn.getresponse().status == 200
    conn.close()
    assert server.full()
    refused = answer(_head(900 * 1024))
    assert refused.status == 429 and refused.getheader("Retry-After") == "1"
    server.draining = True   # as stop() sets it first
    try:
        draining = answer(_head(900 * 1024))
    finally:
        server.draining = False
    assert draining.status == 503 and draining.getheader("Retry-After") == "1"


def test_chunked_bodies_are_read_within_the_limit(
        serve_factory: Callable[..., ToolEvalServer]) -> None:
    server = serve_factory(max_body_bytes=64 * 1024)
    port = server.http_port or 0

    def chunked(body: bytes) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            pieces = (body[i:i + 8192] for i in range(0, len(body), 8192))
            conn.request("POST", "/v1/traces", body=pieces, headers=PROTOBUF,
                         encode_chunked=True)
            return conn.getresponse().status
        except (BrokenPipeError, ConnectionResetError):
            return -1
        finally:
            conn.close()

    assert chunked(_child_spans(3)) == 200
    assert chunked(_child_spans(1, attribute_bytes=200 * 1024)) in (413, -1)
    assert server.stats()["accepted_spans"] == 3


# -- gRPC -----------------------------------------------------------------------------------

def _retry_delay(error: Any) -> int:
    """The RetryInfo delay (s) of a refused call's status details, as the collector reads it."""
    from google.rpc import error_details_pb2, status_pb2

    trailers = dict(error.trailing_metadata() or ())
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    retry = error_details_pb2.RetryInfo()
    assert status.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert status.details[0].Unpack(retry)
    return int(retry.retry_delay.seconds)


def _held_exports(server: ToolEvalServer) -> tuple[threading.Event, threading.Semaphore]:
    """Makes ``server``'s exports wait until the event returned is set (20 s at most); the
    semaphore is released once by each export as it starts waiting."""
    release = threading.Event()
    running = threading.Semaphore(0)
    export = server.export

    def held_export(body: bytes, content_type: str) -> tuple[int, str]:
        running.release()
        release.wait(20)
        return export(body, content_type)

    server.export = held_export  # type: ignore[method-assign]
    return release, running


def test_grpc_concurrent_rpcs_beyond_the_limit_get_resource_exhausted_with_retry_info(
        serve_factory: Callable[..., ToolEvalServer]) -> None:
    """Beyond --max-concurrent-rpcs an export is refused RESOURCE_EXHAUSTED with RetryInfo,
    which the collector's exporter needs to retry it rather than drop the spans; and the
    retry goes through once the exports in progress are done."""
    server = serve_factory(max_concurrent_rpcs=1)
    release, running = _held_exports(server)
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    call = channel.unary_unary(EXPORT)
    try:
        first = call.future(_child_spans(1, seed=1), timeout=10)
        assert running.acquire(timeout=5)
        for _ in range(3):
            with pytest.raises(grpc.RpcError) as refused:
                call(_child_spans(1, seed=2), timeout=5)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "--max-concurrent-rpcs" in (refused.value.details() or "")
            assert _retry_delay(refused.value) == 1
        release.set()
        first.result()
        call(_child_spans(1, seed=2), timeout=5)        # the retry, once there is room
    finally:
        release.set()
        channel.close()
    stats = server.stats()
    assert stats["accepted_spans"] == 2 and stats["refused_busy"] == 3


def test_grpc_refusals_do_not_wait_behind_queued_exports(
        serve_factory: Callable[..., ToolEvalServer]) -> None:
    """More exports admitted than workers, then a burst over the limit: every refusal comes
    at once and with RetryInfo, not after the queued exports (grpcio's one FIFO pool), and
    none is grpcio's own refusal without RetryInfo."""
    server = serve_factory(max_concurrent_rpcs=4, workers=2)
    release, running = _held_exports(server)
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    call = channel.unary_unary(EXPORT)
    try:
        held = [call.future(_child_spans(1, seed=i), timeout=30) for i in range(4)]
        assert running.acquire(timeout=5) and running.acquire(timeout=5)   # two workers busy
        time.sleep(0.5)                     # the other two admitted, queued behind them
        over = [call.future(_child_spans(1, seed=10 + i), timeout=30) for i in range(6)]
        started = time.monotonic()
        for future in over:
            with pytest.raises(grpc.RpcError) as refused:
                future.result(timeout=5)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert _retry_delay(refused.value) == 1
        assert time.monotonic() - started < 5
        assert not any(f.done() for f in held)           # the admitted ones still wait
        release.set()
        for future in held:
            future.result(timeout=20)
    finally:
        release.set()
        channel.close()


def test_grpc_a_sender_that_sends_no_body_does_not_hold_up_refusals(
        serve_factory: Callable[..., ToolEvalServer]) -> None:
    """A refusal does not wait for the request's body: a call that opens and sends nothing,
    beyond the limit, is refused at once, and so are the exports after it."""
    server = serve_factory(max_concurrent_rpcs=1, workers=1)
    release, running = _held_exports(server)
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    unary = channel.unary_unary(EXPORT)
    silence = threading.Event()

    def nothing() -> Iterator[bytes]:
        silence.wait(20)
        return
        yield b""   # a generator that sends no message until released

    try:
        held = unary.future(_child_spans(1, seed=1), timeout=30)
        assert running.acquire(timeout=5)
        silent = channel.stream_unary(EXPORT).future(nothing(), timeout=30)
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as refused:
            silent.result(timeout=5)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        for seed in range(3):
            with pytest.raises(grpc.RpcError) as refused:
                unary(_child_spans(1, seed=10 + seed), timeout=5)
            assert _retry_delay(refused.value) == 1
        assert time.monotonic() - started < 5
        release.set()
        held.result(timeout=20)
    finally:
        silence.set()
        release.set()
        channel.close()
    assert server.stats()["refused_busy"] == 4


def test_grpc_concurrency_gate_reads_grpcios_count_and_steps_aside_without_it() -> None:
    """The gate refuses from the limit on by grpcio's own count of RPCs in progress; where a
    grpcio release has no such count, it lets every call through (grpcio's limit applies)."""
    from types import SimpleNamespace

    from otel_tooleval.serve.grpc_receiver import _concurrency_gate

    app: Any = SimpleNamespace(options=SimpleNamespace(max_concurrent_rpcs=2, workers=1),
                               _count=print)
    gate = _concurrency_gate(app)

    def through(details: Any) -> str:
        return "handler"

    assert gate.intercept_service(through, None) == "handler"          # no state known
    gate.server_state = SimpleNamespace()                               # no count in it
    assert gate.intercept_service(through, None) == "handler"
    gate.server_state = SimpleNamespace(active_rpc_count=1)
    assert gate.intercept_service(through, None) == "handler"
    gate.server_state.active_rpc_count = 2
    refusal = gate.intercept_service(through, None)
    # a stream handler (it answers without reading the body) on the gate's own threads
    assert refusal != "handler" and refusal.stream_unary is not None
    assert refusal.stream_unary.experimental_thread_pool is gate.pool
    gate.pool.shutdown()
    # grpcio's own count is where start_grpc finds it
    server = grpc.server(ThreadPoolExecutor(1))
    try:
        assert isinstance(server._state.active_rpc_count, int)   # type: ignore[attr-defined]
    finally:
        server.stop(None)


# -- without uvicorn ------------------------------------------------------------------------

def test_without_uvicorn_http_is_refused_in_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from otel_tooleval.cli import main

    monkeypatch.setitem(sys.modules, "uvicorn", None)   # as if not installed
    args = ["serve", "--config", str(CONFIG), "--grpc", "off", "--forward", "none"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pip install -e '.[serve]'" in err
    assert "otel-tooleval[serve]" not in err   # not on the index: that hint fails
    assert "--http off" in err
