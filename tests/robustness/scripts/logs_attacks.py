"""Issue 26, what serve writes and how it stops: the figures of defects 7, 8 and 9b.

Run from the repository root (``PYTHONPATH=$PWD python tests/robustness/scripts/logs_attacks.py``);
``otel-tooleval serve`` runs as a subprocess on 127.0.0.1, and so do the next hops:

- SIGTERM against a next hop that accepts connections and never answers, with serve's log
  events and metrics on and off, over both forward protocols: seconds from the signal to the
  exit, the exit status and the last line (defect 8; the bound is --shutdown-timeout + 1 s).
- a next hop that answers every request 500 for a few seconds: how many lines serve wrote
  about it (defect 9b; the bound is the throttle's 10 lines of each kind a minute).
- an agent name and a session id with ESC[31m, an OSC 8 hyperlink and bidi overrides: how
  many raw control and bidi characters reached stderr (defect 7; the bound is none).

The test file tests/robustness/test_attacks_logs.py runs the same pieces with smaller figures.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.serve_process import serve_process

#: ESC[31m (red), an OSC 8 hyperlink, a right-to-left override and a left-to-right isolate.
EVIL_AGENT = "\x1b[31mred\x1b[0m\u202egnp.exe"
EVIL_SESSION = "\x1b]8;;http://127.0.0.1/x\x1b\\link\x1b]8;;\x1b\\\u2066s\u2069\x9b2J"
#: What must never reach serve's stderr raw.
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\u2066", "\u2069")


def config(*, telemetry: bool = True) -> dict[str, Any]:
    """A run grader and a session grader; serve's log events and metrics on or off."""
    return {"graders": [{"name": "some-call", "type": "tool-calls",
                         "config": {"required": ["."]}}],
            "sessions": {"graders": [{"name": "flow", "type": "tool-call-order",
                                      "strict": False, "tool_calls_order": ["search"]}]},
            "emit": {"log_events": telemetry, "metrics": telemetry}}


@contextlib.contextmanager
def config_file(**options: Any) -> Iterator[str]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "graders.json"
        path.write_text(json.dumps(config(**options)))
        yield str(path)


@contextlib.contextmanager
def serve(*args: str) -> Iterator[tuple[subprocess.Popen[str], list[str], int]]:
    """``otel-tooleval serve ARGS`` with its OTLP/HTTP receiver on a port of the kernel's
    choosing (no race with other programs for a "free" port), and that port."""
    with serve_process("--grpc", "off", "--http", "127.0.0.1:0", *args) as (process, lines):
        (found,) = [m for m in map(_LISTENING.search, lines) if m]
        yield process, lines, int(found.group(1))


_LISTENING = re.compile(r"OTLP/HTTP on 127\.0\.0\.1:(\d+) ")


def run_body(agent: str = "travel", session: str = "s-1", tools: int = 1) -> bytes:
    """One agent run (a root with ``tools`` tool calls), as an ExportTraceServiceRequest."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("attacks")
    root = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
            "session.id": session}
    with tracer.start_as_current_span(f"invoke_agent {agent}", attributes=root):
        for _ in range(tools):
            with tracer.start_as_current_span("execute_tool search",
                                              attributes={"gen_ai.tool.name": "search"}):
                pass
    provider.shutdown()
    return encode_spans(memory.get_finished_spans()).SerializeToString()  # type: ignore[no-any-return]


def plain_body(spans: int = 1) -> bytes:
    """Spans of no agent run (forwarded at once)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("attacks")
    for _ in range(spans):
        with tracer.start_as_current_span("GET /"):
            pass
    provider.shutdown()
    return encode_spans(memory.get_finished_spans()).SerializeToString()  # type: ignore[no-any-return]


def post(port: int, body: bytes) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/v1/traces", body=body,
                     headers={"Content-Type": "application/x-protobuf"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


class SilentHop:
    """A next hop that accepts every connection and never answers (nor closes)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


#: The reason phrase of ErrorHop's 500: a next hop's words reach serve's lines too.
EVIL_REASON = "\x1b[31mInternal\x1b[0m \x9bError"   # latin-1, as HTTP/1.1 writes it


class _Answer500(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b"no"
        self.send_response(500, EVIL_REASON)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass   # serve closing its keep-alive connections at exit: no traceback here


class ErrorHop:
    """A next hop (HTTP) that answers every request 500, with ``EVIL_REASON``."""

    def __init__(self) -> None:
        self.server = _QuietServer(("127.0.0.1", 0), _Answer500)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def sigterm_against_silent_hop(protocol: str, *, telemetry: bool, shutdown_timeout: float,
                               runs: int = 3) -> tuple[float, int | None, list[str]]:
    """Seconds from SIGTERM to the exit of a serve whose next hop never answers, its exit
    status and its stderr lines."""
    hop = SilentHop()
    try:
        with config_file(telemetry=telemetry) as path, serve(
                "--config", path, "--forward", f"http://127.0.0.1:{hop.port}",
                "--forward-protocol", protocol, "--decision-wait", "0",
                "--shutdown-timeout", str(shutdown_timeout)) as (process, lines, port):
            for i in range(runs):
                assert post(port, run_body(session=f"s-{i}")) == 200
                assert post(port, plain_body(5)) == 200
            time.sleep(0.5)   # graded, and the forwarder and the exporters are waiting
            began = time.monotonic()
            process.terminate()
            try:
                process.wait(timeout=shutdown_timeout + 60)
            except Exception:  # noqa: BLE001 - reported as no exit status
                return time.monotonic() - began, None, lines
            return time.monotonic() - began, process.returncode, lines
    finally:
        hop.close()


def flood_against_error_hop(seconds: float, *, telemetry: bool = False, at_least: int = 40
                            ) -> tuple[int, int, list[str], dict[str, Any]]:
    """Requests sent for ``seconds`` (and ``at_least`` of them, however slow the machine) to a
    serve whose next hop answers 500, then each one's forwarding failure waited for; the number
    sent, the number of lines serve wrote about forwarding, all its lines, and /healthz then."""
    hop = ErrorHop()
    body = plain_body(2)
    sent = 0
    try:
        with config_file(telemetry=telemetry) as path, serve(
                "--config", path, "--forward", f"http://127.0.0.1:{hop.port}",
                "--decision-wait", "0", "--shutdown-timeout", "5") as (process, lines, port):
            if telemetry:   # a graded run: log events to export (and fail)
                post(port, run_body())
            end = time.monotonic() + seconds
            while time.monotonic() < end or sent < at_least:
                post(port, body)
                sent += 1
            deadline = time.monotonic() + 15
            health = healthz(port)
            while (health.get("forward_failed_spans", 0) < sent
                   and time.monotonic() < deadline):
                time.sleep(0.1)
                health = healthz(port)
            time.sleep(0.3)
            health = healthz(port)
            process.terminate()
            process.wait(timeout=30)
    finally:
        hop.close()
    return sent, sum("forwarding" in line for line in lines), lines, health


def healthz(port: int) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/healthz")
        return json.loads(conn.getresponse().read())  # type: ignore[no-any-return]
    finally:
        conn.close()


def escapes_in_log() -> tuple[int, list[str]]:
    """Raw control and bidi characters on serve's stderr after a run and a session whose
    agent name and session id carry them."""
    with config_file(telemetry=False) as path, serve(
            "--config", path, "--forward", "none", "--decision-wait", "0"
    ) as (process, lines, port):
        assert post(port, run_body(agent=EVIL_AGENT, session=EVIL_SESSION)) == 200
        deadline = time.monotonic() + 10
        while not any(" run agent=" in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.05)
        process.terminate()
        process.wait(timeout=30)
    text = "".join(lines)
    return sum(text.count(c) for c in RAW), lines


def main() -> int:
    timeout = 5.0
    print(f"defect 8: SIGTERM, next hop accepts and never answers, --shutdown-timeout {timeout:g}")
    for protocol in ("http/protobuf", "grpc"):
        for telemetry in (True, False):
            took, rc, lines = sigterm_against_silent_hop(protocol, telemetry=telemetry,
                                                         shutdown_timeout=timeout)
            last = lines[-1].strip() if lines else ""
            print(f"  {protocol:13} telemetry {'on ' if telemetry else 'off'}: {took:5.1f} s, "
                  f"exit {rc}\n    last line: {last}")
    sent, forwarding, lines, _ = flood_against_error_hop(4.0, telemetry=True)
    print(f"defect 9b: next hop answering 500, 4 s: {sent} requests, {forwarding} lines "
          "about forwarding on stderr; the last two:")
    for line in [line for line in lines if "forwarding" in line][-2:]:
        print("    " + ascii(line.rstrip()))
    raw = sum("".join(lines).count(c) for c in RAW)
    print(f"  {raw} raw control/bidi characters on stderr (the next hop's reason phrase)")
    raw, lines = escapes_in_log()
    print(f"defect 7: {raw} raw control/bidi characters on stderr; the run and session lines:")
    for line in lines:
        if " run agent=" in line or " session agent=" in line:
            print("  " + ascii(line.rstrip("\n")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
