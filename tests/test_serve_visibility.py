"""What an operator of ``otel-tooleval serve`` sees: one log line per graded run, the counts on
``/healthz``, and a one-line exit when a listen address is taken (docs/serve.md)."""

from __future__ import annotations

import logging
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import load_config
from otel_tooleval.cli import _parser, _serve_logging
from otel_tooleval.demo.agent import SCRIPTS, run_scripted_agent
from otel_tooleval.serve import ListenError, ServeOptions, ToolEvalServer
from tests.support.otlp_receiver import OtlpReceiver
from tests.test_serve import CONFIG, ROOT, body_of, get, post

LINE = re.compile(r"otel-tooleval serve: run agent=(?P<agent>\S+) trace=(?P<trace>[0-9a-f]{32}) "
                  r"root=(?P<root>[0-9a-f]{16}) (?P<verdict>PASS|FAIL \(failed: (?P<failed>.+)\))")
PASSING, FAILING = SCRIPTS[0][1], SCRIPTS[2][1]   # the demo's first and third scripts
FAILING_GRADERS = "reports-result, validates-before-booking, searches-early"


def _listening_socket() -> socket.socket:
    """A plain TCP listener on an ephemeral port of 127.0.0.1, as another collector is."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def _wait(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def server(loopback_only: None) -> Iterator[ToolEvalServer]:
    opts = ServeOptions(load_config(CONFIG), grpc="127.0.0.1:0", http="127.0.0.1:0",
                        forward="none", decision_wait=0.2, emit_telemetry=False)
    with ToolEvalServer(opts) as running:
        yield running


def test_one_log_line_per_graded_run_and_the_counts_on_healthz(
        server: ToolEvalServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="otel_tooleval.serve")
    port = server.http_port or 0
    status, doc = get(port, "/healthz")
    assert status == 200
    assert (doc["runs_graded"], doc["runs_passed"], doc["runs_failed"]) == (0, 0, 0)
    assert doc["dropped"] == {"late_span": 0, "max_spans_per_trace": 0, "max_open_runs": 0,
                              "shutdown": 0}
    sent = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(sent))
    provider.add_span_processor(BatchSpanProcessor(
        HttpExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")))
    tracer = provider.get_tracer("travel-agent")
    run_scripted_agent(tracer, PASSING)
    run_scripted_agent(tracer, FAILING)
    provider.shutdown()
    spans = sent.get_finished_spans()
    assert _wait(lambda: server.stats()["runs_graded"] == 2)
    time.sleep(0.3)   # a second line per run, or one per span, would show by now

    lines = [r.getMessage() for r in caplog.records
             if r.name == "otel_tooleval.serve" and ": run " in r.getMessage()]
    assert len(spans) > 10 and len(lines) == 2, lines
    assert all(r.levelno == logging.INFO for r in caplog.records if ": run " in r.getMessage())
    found = [LINE.fullmatch(line) for line in lines]
    assert all(found), lines
    roots = {f"{s.context.trace_id:032x}": s for s in spans if s.parent is None}
    verdicts = {}
    for match in found:
        assert match is not None
        root = roots[match["trace"]]
        assert match["root"] == f"{root.context.span_id:016x}"
        assert match["agent"] == "travel_agent"
        verdicts[match["trace"]] = match["verdict"]
    first, second = sorted(roots.values(), key=lambda s: s.start_time or 0)
    assert verdicts[f"{first.context.trace_id:032x}"] == "PASS"
    assert verdicts[f"{second.context.trace_id:032x}"] == f"FAIL (failed: {FAILING_GRADERS})"

    # A span of the failing trace arriving after its decision is dropped as late, by reason.
    late = next(s for s in spans if s.context.trace_id == second.context.trace_id
                and s.parent is not None)
    assert post(port, body_of([late]))[0] == 200
    status, doc = get(port, "/healthz")
    assert status == 200 and doc["status"] == "ready"
    assert (doc["runs_graded"], doc["runs_passed"], doc["runs_failed"]) == (2, 1, 1)
    assert doc["dropped"]["late_span"] == 1
    assert doc["dropped"]["max_open_runs"] == 0


def test_healthz_keeps_its_counts_while_draining(server: ToolEvalServer) -> None:
    server.counts["runs_failed"] += 3   # as graded runs would leave them
    server.draining = True
    status, doc = get(server.http_port or 0, "/healthz")
    assert status == 503 and doc["status"] == "draining"
    assert doc["runs_failed"] == 3 and "dropped" in doc


@pytest.mark.parametrize("level, shown", [("info", True), ("warning", False)])
def test_the_cli_logs_the_run_lines_to_stderr_unless_quiet(
        level: str, shown: bool, capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["serve", "-c", "x.yaml"]
                                + (["--quiet"] if level == "warning" else []))
    assert (args.quiet, args.log_level) == (level == "warning", "info")
    log = logging.getLogger("otel_tooleval.serve")
    with _serve_logging(level):
        log.info("otel-tooleval serve: run agent=a trace=t root=r PASS")
        log.warning("otel-tooleval serve: a warning")
    log.info("otel-tooleval serve: after the command")
    shown_lines = ["otel-tooleval serve: run agent=a trace=t root=r PASS"] if shown else []
    assert capsys.readouterr().err.splitlines() == [*shown_lines, "otel-tooleval serve: a warning"]


@pytest.mark.parametrize("flag", ["--grpc", "--http"])
def test_a_busy_port_exits_2_with_one_line_naming_the_address(flag: str,
                                                             loopback_only: None) -> None:
    with _listening_socket() as busy:
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        addresses = {"--grpc": "127.0.0.1:0", "--http": "127.0.0.1:0", flag: address}
        process = subprocess.run(
            [sys.executable, "-m", "otel_tooleval.cli", "serve", "--config", str(CONFIG),
             "--forward", "none", "--grpc", addresses["--grpc"], "--http", addresses["--http"]],
            check=False, capture_output=True, text=True, timeout=30)
    assert process.returncode == 2, process.stderr
    line = (f"otel-tooleval serve: cannot listen on {address} (address already in use; is another "
            f"collector or Phoenix running? use {flag} HOST:PORT)")
    assert process.stderr.splitlines() == [line]


def _new_threads(before: set[threading.Thread]) -> list[str]:
    """Threads started since ``before`` that have not ended within 5 s."""
    def left() -> list[str]:
        return [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
    _wait(lambda: not left(), timeout=5)
    return left()


def test_a_gRPC_server_on_the_port_is_refused_and_nothing_is_left_running(
        receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """grpcio's default SO_REUSEPORT would let a second gRPC server (Phoenix, another serve)
    share the port; serve refuses it even when the port check before gRPC is skipped."""
    first = ToolEvalServer(ServeOptions(load_config(CONFIG), grpc="127.0.0.1:0", http=None,
                                        forward="none", emit_telemetry=False)).start()
    try:
        taken = f"127.0.0.1:{first.grpc_port}"
        for skip_check in (False, True):
            if skip_check:
                monkeypatch.setattr("otel_tooleval.serve.grpc_receiver._check_free", lambda *a: None)
            before = set(threading.enumerate())
            second = ToolEvalServer(ServeOptions(   # telemetry on: its providers' threads too
                load_config(CONFIG), grpc=taken, http="127.0.0.1:0",
                forward=receiver.http_endpoint))
            with pytest.raises(ListenError, match=re.escape(f"cannot listen on {taken} (")):
                second.start()
            assert _new_threads(before) == []
    finally:
        first.stop(timeout=5)


def test_a_gRPC_bind_that_returns_0_is_a_listen_error(loopback_only: None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import grpc

    real = grpc.server

    def returns_0(*args: Any, **kwargs: Any) -> Any:   # as older grpcio answers a busy port
        server = real(*args, **kwargs)
        server.add_insecure_port = lambda address: 0
        return server

    monkeypatch.setattr(grpc, "server", returns_0)
    before = set(threading.enumerate())
    server = ToolEvalServer(ServeOptions(load_config(CONFIG), grpc="127.0.0.1:0",
                                         http="127.0.0.1:0", forward="none"))
    with pytest.raises(ListenError, match=r"cannot listen on 127\.0\.0\.1:0 .*use --grpc"):
        server.start()
    assert _new_threads(before) == []


def test_a_busy_http_port_after_grpc_started_stops_grpc(loopback_only: None) -> None:
    before = set(threading.enumerate())
    with _listening_socket() as busy:
        server = ToolEvalServer(ServeOptions(
            load_config(CONFIG), grpc="127.0.0.1:0", http=f"127.0.0.1:{busy.getsockname()[1]}",
            forward="none", emit_telemetry=False))
        with pytest.raises(ListenError, match="use --http HOST:PORT"):
            server.start()
    assert server.grpc_port   # gRPC was listening before HTTP failed
    with socket.socket() as probe:   # ...and is not any more
        assert probe.connect_ex(("127.0.0.1", server.grpc_port)) != 0
    assert _new_threads(before) == []


def test_docs_serve_md_shows_the_healthz_fields_and_the_flags_there_are(
        server: ToolEvalServer) -> None:
    import json

    doc_text = (ROOT / "docs" / "serve.md").read_text()
    example = re.search(r"## GET /healthz.*?```json\n(.*?)```", doc_text, re.DOTALL)
    assert example is not None
    _, body = get(server.http_port or 0, "/healthz")
    assert set(body) <= set(json.loads(example.group(1))), "a /healthz field is not documented"
    serve = _parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    known = {o for action in serve._actions for o in action.option_strings}
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", doc_text))
    assert {"--log-level", "--quiet"} <= flags <= known, flags - known
