"""``serve`` stays responsive while a run with pathological regex work is graded.

Issue 16, finding 5: a regex from the config used to hold the GIL for minutes inside ``serve``,
so ``/healthz`` stopped answering. Config patterns run on RE2 (linear time) and the graders of a
run share ``limits.grading_budget_ms``; grading happens on the grading thread. This test sends a
run whose 100 tool results (100 kB each) make one grader busy up to its budget and polls
``/healthz`` the whole time: every answer must come back within a second (a "did not freeze"
bound: without the fixes one match ran for minutes).
"""

from __future__ import annotations

import threading
import time

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval.config import load_config
from otel_tooleval.model import RunReport
from otel_tooleval.serve import ServeOptions, ToolEvalServer
from tests.robustness.test_regex_budget import SLOW_FOR_RE2, _random_ab
from tests.test_serve import body_of, get, post


def _slow_run() -> bytes:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("invoke_agent slow", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "slow"}):
        for i in range(100):
            tracer.start_span("execute_tool fetch", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch",
                "gen_ai.tool.call.arguments": "{}",
                "gen_ai.tool.call.result": _random_ab(100_000, seed=i)}).end()
    provider.shutdown()
    return body_of(list(memory.get_finished_spans()))


def test_healthz_answers_while_a_slow_pattern_is_graded() -> None:
    config = load_config({
        "graders": [
            {"name": "slow", "type": "tool-calls",
             "config": {"disallowed": [{"name": "fetch", "result": SLOW_FOR_RE2}]}},
            {"name": "after", "type": "tool-calls", "config": {"required": ["fetch"]}}],
        "limits": {"max_match_chars": 65536, "grading_budget_ms": 250}})
    graded = threading.Event()
    reports: list[RunReport] = []

    def on_report(report: RunReport) -> None:
        reports.append(report)
        graded.set()

    server = ToolEvalServer(ServeOptions(config, grpc=None, http="127.0.0.1:0", forward="none",
                                         decision_wait=0.0), on_report=on_report).start()
    try:
        assert server.http_port is not None
        status, _, _ = post(server.http_port, _slow_run())
        assert status == 200
        waits: list[float] = []
        started = time.monotonic()
        while not graded.is_set() and time.monotonic() - started < 60:
            t = time.monotonic()
            code, doc = get(server.http_port, "/healthz")
            waits.append(time.monotonic() - t)
            assert code == 200 and doc["status"] == "ready"
            time.sleep(0.01)
        assert graded.is_set(), "the run was not graded within a minute"
        assert waits, "grading finished before /healthz was asked once"
        assert max(waits) < 1.0, max(waits)
    finally:
        server.stop(timeout=10)
    (report,) = reports
    assert len(report.run.calls) == 100
    slow, after = report.results
    # A whole scan takes about 4 s of CPU here (40 ms a call), 16 times the budget: the
    # budget ends it, and the grader after it finds the shared budget spent.
    assert (slow.error, slow.passed) == ("budget_exceeded", False)
    assert (after.error, after.passed) == ("budget_exceeded", False)
