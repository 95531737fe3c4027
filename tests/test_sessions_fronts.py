"""Sessions at the front doors of ended spans: ``ToolEvalSpanExporter`` and ``serve``.

Real SDK spans, real OTLP exporters and a real OTLP receiver: three user turns (one trace
each) graded as one session, the session span forwarded like the roots.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import ToolEvalSpanExporter, load_config
from otel_tooleval.serve import ServeOptions, ToolEvalServer
from otel_tooleval.sessions import SessionReport
from tests.support.otlp_receiver import OtlpReceiver

TURNS = ["search", "book", "pay"]
SESSION_GRADERS = [
    {"name": "flow", "type": "tool-call-order", "strict": True,
     "tool_calls_order": ["search", "book", "pay"]},
    {"name": "per-turn", "type": "tool_trajectory", "mode": "in_order",
     "turns": [{"expected": [{"tool": "search"}]}, {"expected": [{"tool": "book"}]},
               {"expected": [{"tool": "pay"}]}]},
]


def config(**sessions: Any) -> dict[str, Any]:
    return {"graders": [{"name": "some-call", "type": "tool-calls",
                         "config": {"required": ["."]}}],
            "sessions": {"graders": SESSION_GRADERS, **sessions}}


def talk(provider: TracerProvider, key: str, tools: list[str]) -> None:
    """One run (trace) per user turn; the session key on the agent span only."""
    tracer = provider.get_tracer("travel")
    for tool in tools:
        agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "travel",
                 "gen_ai.conversation.id": key}
        with (tracer.start_as_current_span("invoke_agent travel", attributes=agent),
              tracer.start_as_current_span(f"execute_tool {tool}",
                                           attributes={"gen_ai.tool.name": tool})):
            pass


def wait_until(check: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return bool(check())


# -- ToolEvalSpanExporter ----------------------------------------------------------------------

class _Setup:
    def __init__(self, sessions: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.reports: list[SessionReport] = []
        self.wrapped = InMemorySpanExporter()
        self.exporter = ToolEvalSpanExporter(
            self.wrapped, config(**(sessions or {})), on_session=self.reports.append,
            decision_wait=0.05, **kwargs)
        self.provider = TracerProvider(resource=Resource.create({"service.name": "travel-svc"}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def session_spans(self) -> list[Any]:
        return [s for s in self.wrapped.get_finished_spans()
                if s.attributes and "tooleval.session.passed" in s.attributes]


@pytest.fixture
def setup() -> Iterator[_Setup]:
    made = _Setup()
    yield made
    made.provider.shutdown()


def test_exporter_grades_three_turns_as_one_session_on_end_session(setup: _Setup) -> None:
    talk(setup.provider, "c-1", TURNS)
    setup.exporter.end_session("c-1")
    assert wait_until(lambda: setup.reports)
    (report,) = setup.reports
    assert report.passed and report.ended == "end_session" and len(report.runs) == 3
    (span,) = setup.session_spans()
    attrs = dict(span.attributes or {})
    assert span.name == "session travel"
    assert attrs["gen_ai.conversation.id"] == "c-1"
    assert attrs["tooleval.session.runs"] == 3
    assert span.resource.attributes["service.name"] == "travel-svc"
    roots = {(s.context.trace_id, s.context.span_id)
             for s in setup.wrapped.get_finished_spans() if s.name == "invoke_agent travel"}
    assert len(roots) == 3
    assert {(link.context.trace_id, link.context.span_id) for link in span.links} == roots
    assert setup.exporter.stats()["sessions"] == 1


def test_exporter_failing_session_and_an_unknown_key(setup: _Setup) -> None:
    talk(setup.provider, "c-2", ["search", "pay", "book"])
    setup.exporter.end_session("no-such-session")   # ignored
    setup.exporter.end_session("c-2")
    assert wait_until(lambda: setup.reports)
    (span,) = setup.session_spans()
    assert span.attributes["tooleval.session.passed"] is False
    assert set(span.attributes["tooleval.session.failed"]) == {"flow", "per-turn"}
    assert setup.exporter.stats()["sessions.failed"] == 1


def test_exporter_session_ends_when_idle() -> None:
    made = _Setup({"idle_seconds": 0.3})
    try:
        talk(made.provider, "c-3", TURNS)
        assert wait_until(lambda: made.reports)
        assert made.reports[0].ended == "idle" and made.reports[0].passed
        assert len(made.session_spans()) == 1
    finally:
        made.provider.shutdown()


def test_exporter_force_flush_ends_open_sessions(setup: _Setup) -> None:
    talk(setup.provider, "c-4", TURNS)
    talk(setup.provider, "c-5", TURNS[:2])
    assert setup.exporter.force_flush(10_000)
    assert sorted((r.key.value, r.ended, r.passed) for r in setup.reports) == [
        ("c-4", "flush", True), ("c-5", "flush", False)]
    assert len(setup.session_spans()) == 2


def test_exporter_shutdown_grades_open_sessions() -> None:
    made = _Setup()
    talk(made.provider, "c-6", TURNS)
    assert not made.reports
    made.provider.shutdown()   # shuts the exporter down: within its deadline
    (report,) = made.reports
    assert report.ended == "shutdown" and report.passed
    assert len(made.session_spans()) == 1


def test_exporter_shutdown_out_of_time_counts_open_sessions() -> None:
    made = _Setup()
    talk(made.provider, "c-7", TURNS)
    grader = made.exporter._grader
    assert grader is not None
    assert wait_until(lambda: made.exporter.stats().get("open_sessions") == 1)
    # The grading thread is busy past the deadline (a slow grader): nothing is graded late.
    stall = grader._decide_all

    def slow(decisions: Any) -> None:
        time.sleep(1.0)
        stall(decisions)

    grader._decide_all = slow   # type: ignore[method-assign]
    assert made.exporter.shutdown(timeout_millis=200) is False
    stats = made.exporter.stats()
    assert stats["sessions.dropped.shutdown"] == 1 and stats["open_sessions"] == 0
    time.sleep(1.2)
    assert made.reports == []   # dropped sessions are never graded afterwards


def test_exporter_sessions_stay_bounded() -> None:
    made = _Setup({"max_open_sessions": 2})
    try:
        for k in range(4):
            talk(made.provider, f"s-{k}", ["search"])
        assert made.exporter.force_flush(10_000)
        ended = sorted((r.key.value, r.ended) for r in made.reports)
        assert ended == [("s-0", "evicted"), ("s-1", "evicted"), ("s-2", "flush"),
                         ("s-3", "flush")]
        assert made.exporter.stats()["sessions.dropped.max_open_sessions"] == 2
    finally:
        made.provider.shutdown()


def test_exporter_runs_without_a_key_are_in_no_session(setup: _Setup) -> None:
    tracer = setup.provider.get_tracer("travel")
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "travel"}
    with (tracer.start_as_current_span("invoke_agent travel", attributes=agent),
          tracer.start_as_current_span("execute_tool search",
                                       attributes={"gen_ai.tool.name": "search"})):
        pass
    assert setup.exporter.force_flush(10_000)
    assert setup.reports == [] and setup.session_spans() == []
    assert setup.exporter.stats()["runs"] == 1


# -- serve ---------------------------------------------------------------------------------------

def session_span_of(receiver: OtlpReceiver) -> list[Any]:
    return [s for s in receiver.spans() if s["name"] == "session travel"]


@pytest.fixture
def server(receiver: OtlpReceiver) -> Iterator[ToolEvalServer]:
    options = ServeOptions(load_config(config(idle_seconds=0.5)), grpc=None,
                           http="127.0.0.1:0", forward=receiver.http_endpoint,
                           decision_wait=0.1, emit_telemetry=False)
    with ToolEvalServer(options) as running:
        yield running


def test_serve_grades_a_session_from_a_real_otlp_exporter(
        receiver: OtlpReceiver, server: ToolEvalServer) -> None:
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{server.http_port}/v1/traces")
    provider = TracerProvider(resource=Resource.create({"service.name": "travel-svc"}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    talk(provider, "conv-9", ["search", "pay", "book"])
    provider.shutdown()
    assert receiver.wait_for(lambda: len(session_span_of(receiver)) == 1, timeout=15)
    (span,) = session_span_of(receiver)
    assert span["attributes"]["tooleval.session.passed"] is False
    assert span["attributes"]["gen_ai.conversation.id"] == "conv-9"
    assert span["attributes"]["tooleval.session.ended"] == "idle"
    assert span["resource"]["service.name"] == "travel-svc"
    roots = {s["trace_id"] for s in receiver.spans() if s["name"] == "invoke_agent travel"}
    assert len(roots) == 3 and span["trace_id"] not in roots
    status, health = _health(server)
    assert status == 200
    assert (health["sessions_graded"], health["sessions_passed"],
            health["sessions_failed"]) == (1, 0, 1)


def test_serve_session_span_links_every_run_root(receiver: OtlpReceiver,
                                                 server: ToolEvalServer) -> None:
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{server.http_port}/v1/traces")
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    talk(provider, "conv-10", TURNS)
    provider.shutdown()
    assert receiver.wait_for(lambda: len(session_span_of(receiver)) == 1, timeout=15)

    def links() -> set[tuple[str, str]]:
        for request in receiver.trace_requests:
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        if span.name == "session travel":
                            return {(link.trace_id.hex(), link.span_id.hex())
                                    for link in span.links}
        return set()

    roots = {(s["trace_id"], s["span_id"]) for s in receiver.spans()
             if s["name"] == "invoke_agent travel"}
    assert len(roots) == 3 and links() == roots
    assert session_span_of(receiver)[0]["attributes"]["tooleval.session.passed"] is True


def _health(server: ToolEvalServer) -> tuple[int, dict[str, Any]]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", server.http_port or 0, timeout=10)
    try:
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_serve_healthz_counts_no_sessions_without_session_graders(
        receiver: OtlpReceiver) -> None:
    options = ServeOptions(load_config({"graders": config()["graders"]}), grpc=None,
                           http="127.0.0.1:0", forward=receiver.http_endpoint,
                           emit_telemetry=False)
    with ToolEvalServer(options) as running:
        status, health = _health(running)
    assert status == 200 and "sessions_graded" not in health


def test_serve_sigterm_grades_open_sessions_before_the_forwarder_drains(
        receiver: OtlpReceiver, tmp_path: Path) -> None:
    path = tmp_path / "graders.yaml"
    path.write_text(json.dumps(config()))   # idle_seconds: 300, never reached here
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_tooleval.cli", "serve", "--config", str(path),
         "--grpc", "off", "--http", f"127.0.0.1:{port}", "--forward", receiver.http_endpoint,
         "--decision-wait", "120"],
        env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: _ready(port), timeout=20), "serve did not become ready"
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        talk(provider, "conv-term", TURNS)
        provider.shutdown()
        assert session_span_of(receiver) == []   # the runs wait 120 s, the session 300 s
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    (span,) = session_span_of(receiver)
    assert span["attributes"]["tooleval.session.ended"] == "shutdown"
    assert span["attributes"]["tooleval.session.passed"] is True
    assert span["attributes"]["tooleval.session.runs"] == 3
    assert "3 runs graded, 1 sessions graded" in err
    assert "session agent=travel gen_ai.conversation.id=conv-term runs=3 ended=shutdown PASS" \
        in err


def free_port() -> int:
    """A free TCP port on the loopback (closed again before use)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(port: int) -> bool:
    import http.client

    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/healthz")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except OSError:
        return False
