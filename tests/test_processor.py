"""The live processor on a real TracerProvider: emitted telemetry, run cutting, and faults."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from otel_tooleval import GradeResult, ToolEvalSpanProcessor
from otel_tooleval.graders.registry import REGISTRY, GraderFamily, register
from tests.support.harness import AGENT, Harness

CONFIG = {
    "graders": [
        {"name": "uses-search", "type": "tool-calls", "config": {"required": ["^search$"]}},
        {"name": "no-delete", "type": "tool-calls", "config": {"disallowed": ["^delete$"]}},
    ]
}


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness(CONFIG)
    yield harness
    harness.close()


def verdict_roots(h: Harness) -> list[ReadableSpan]:
    return [s for s in h.finished() if s.attributes and "tooleval.passed" in s.attributes]


# -- emitted telemetry, exact names -------------------------------------------------------------

def test_root_copy_carries_events_and_attributes(h: Harness) -> None:
    h.agent_run(["search", "delete"], agent="planner")
    assert h.flush()
    (root,) = h.by_name("invoke_agent planner")
    attrs = dict(root.attributes or {})
    assert attrs["tooleval.passed"] is False
    assert attrs["tooleval.score"] == pytest.approx(0.5)
    assert attrs["tooleval.failed"] == ("no-delete",)
    assert attrs["tooleval.tool_calls"] == 2
    assert attrs["gen_ai.agent.name"] == "planner"   # the original attributes are kept
    events = [e for e in root.events if e.name == "gen_ai.evaluation.result"]
    assert [e.attributes["gen_ai.evaluation.name"] for e in events] == ["uses-search", "no-delete"]
    ok, bad = (dict(e.attributes) for e in events)
    assert ok["gen_ai.evaluation.score.value"] == 1.0
    assert ok["gen_ai.evaluation.score.label"] == "pass"
    assert bad["gen_ai.evaluation.score.value"] == 0.0
    assert bad["gen_ai.evaluation.score.label"] == "fail"
    assert "#1 (delete)" in bad["gen_ai.evaluation.explanation"]
    assert "error.type" not in bad
    assert all(e.timestamp == root.end_time for e in events)


def test_each_span_exported_once_and_children_unchanged(h: Harness) -> None:
    h.agent_run(["search"])
    h.flush()
    spans = h.finished()
    ids = [s.context.span_id for s in spans]
    assert len(ids) == len(set(ids)) == 3
    for s in spans:
        if s.name != "invoke_agent agent":
            assert not any(k.startswith("tooleval.") for k in s.attributes or {})


def test_passing_run_has_no_failed_attribute(h: Harness) -> None:
    h.agent_run(["search"])
    h.flush()
    (root,) = verdict_roots(h)
    assert root.attributes["tooleval.passed"] is True
    assert "tooleval.failed" not in root.attributes


def test_log_events_in_root_context(h: Harness) -> None:
    h.agent_run(["search", "delete"], agent="planner")
    h.flush()
    (root,) = verdict_roots(h)
    logs = [d.log_record for d in h.logs.get_finished_logs()]
    assert [r.event_name for r in logs] == ["gen_ai.evaluation.result"] * 2
    for record in logs:
        assert record.trace_id == root.context.trace_id
        assert record.span_id == root.context.span_id
        assert record.attributes["gen_ai.agent.name"] == "planner"
    assert {r.attributes["gen_ai.evaluation.name"]: r.attributes["gen_ai.evaluation.score.label"]
            for r in logs} == {"uses-search": "pass", "no-delete": "fail"}


def test_metrics(h: Harness) -> None:
    h.agent_run(["search"], agent="a")
    h.agent_run(["delete"], agent="a")
    h.flush()
    scores = h.metric_points("gen_ai.evaluation.score")
    got = {(p.attributes["gen_ai.evaluation.name"], p.attributes["gen_ai.evaluation.score.label"]):
           (p.count, p.sum) for p in scores}
    assert got == {("uses-search", "pass"): (1, 1.0), ("uses-search", "fail"): (1, 0.0),
                   ("no-delete", "pass"): (1, 1.0), ("no-delete", "fail"): (1, 0.0)}
    assert all(p.attributes["gen_ai.agent.name"] == "a" for p in scores)
    runs = {(p.attributes["gen_ai.agent.name"], p.attributes["tooleval.passed"]): p.value
            for p in h.metric_points("tooleval.runs")}
    assert runs == {("a", True): 1, ("a", False): 1}
    data = h.reader.get_metrics_data()
    units = {m.name: m.unit for rm in data.resource_metrics for sm in rm.scope_metrics
             for m in sm.metrics}
    assert units["gen_ai.evaluation.score"] == "1"
    for point in scores + h.metric_points("tooleval.runs"):
        assert not any("trace" in k or "span" in k for k in point.attributes)


@pytest.mark.parametrize("channel", ["span_events", "root_attributes", "log_events", "metrics"])
def test_each_channel_can_be_switched_off(channel: str) -> None:
    h = Harness({**CONFIG, "emit": {channel: False}})
    try:
        h.agent_run(["search"])
        h.flush()
        (root,) = h.by_name("invoke_agent agent")
        has_events = any(e.name == "gen_ai.evaluation.result" for e in root.events)
        has_attrs = "tooleval.passed" in (root.attributes or {})
        has_logs = bool(h.logs.get_finished_logs())
        has_metrics = bool(h.metric_points("tooleval.runs"))
        assert {"span_events": has_events, "root_attributes": has_attrs,
                "log_events": has_logs, "metrics": has_metrics} == {
            k: k != channel for k in ("span_events", "root_attributes", "log_events", "metrics")}
    finally:
        h.close()


def test_grader_agents_filter_and_runs_agents_filter() -> None:
    config = {"graders": [
        {"name": "only-a", "type": "tool-calls", "agents": ["a"], "config": {"required": ["x"]}},
        {"name": "all", "type": "tool-calls", "config": {"required": ["x"]}}],
        "runs": {"agents": ["a", "b"]}}
    h = Harness(config)
    try:
        for agent in ("a", "b", "c"):
            h.agent_run(["x"], agent=agent)
        h.flush()
        assert {r.run.agent: [g.name for g in r.results] for r in h.reports} == {
            "a": ["only-a", "all"], "b": ["all"]}
        (c_root,) = h.by_name("invoke_agent c")
        assert "tooleval.passed" not in (c_root.attributes or {})
    finally:
        h.close()


# -- run cutting, live ---------------------------------------------------------------------------

def test_nested_agents_are_one_run(h: Harness) -> None:
    with h.agent("outer"):
        h.tool("search")
        with h.agent("inner"):
            h.tool("delete")
    h.flush()
    assert [(r.run.agent, [c.name for c in r.run.calls]) for r in h.reports] == [
        ("outer", ["search", "delete"])]
    (inner,) = h.by_name("invoke_agent inner")
    assert "tooleval.passed" not in (inner.attributes or {})


def test_nested_agents_separate() -> None:
    h = Harness({**CONFIG, "runs": {"nested_agents": "separate"}})
    try:
        with h.agent("outer"):
            h.tool("search")
            with h.agent("inner"):
                h.tool("delete")
        h.flush()
        got = sorted((r.run.agent, tuple(c.name for c in r.run.calls)) for r in h.reports)
        assert got == [("inner", ("delete",)), ("outer", ("search", "delete"))]
    finally:
        h.close()


def test_sibling_runs_under_a_plain_root(h: Harness) -> None:
    with h.tracer.start_as_current_span("GET /plan", kind=trace.SpanKind.SERVER,
                                        attributes={"http.request.method": "GET"}):
        h.agent_run(["search"], agent="first")
        h.agent_run(["delete", "search"], agent="second")
    h.flush()
    assert [(r.run.agent, [c.name for c in r.run.calls], r.passed) for r in h.reports] == [
        ("first", ["search"], True), ("second", ["delete", "search"], False)]
    (http,) = h.by_name("GET /plan")
    assert "tooleval.passed" not in (http.attributes or {})
    assert len(h.finished()) == 1 + (1 + 2) + (1 + 2 * 2)   # http + run 1 + run 2


def test_plain_root_without_tools_is_not_graded(h: Harness) -> None:
    with h.tracer.start_as_current_span("GET /health"), h.tracer.start_as_current_span(
            "db.query"):
        pass
    h.flush()
    assert h.reports == [] and len(h.finished()) == 2


def test_remote_parent(h: Harness) -> None:
    remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1))
    ctx = trace.set_span_in_context(NonRecordingSpan(remote))
    token = otel_context.attach(ctx)
    try:
        h.agent_run(["search"])
    finally:
        otel_context.detach(token)
    h.flush()
    (root,) = verdict_roots(h)
    assert root.parent is not None and root.parent.span_id == 0xDEF and root.parent.is_remote
    assert root.context.trace_id == 0xABC


def test_pending_call_and_late_child(h: Harness) -> None:
    root = h.tracer.start_span("invoke_agent a", attributes=AGENT)
    ctx = trace.set_span_in_context(root)
    done = h.tracer.start_span("execute_tool search", context=ctx,
                               attributes={"gen_ai.tool.name": "search"})
    done.end()
    slow = h.tracer.start_span("execute_tool delete", context=ctx,
                               attributes={"gen_ai.tool.name": "delete"})
    root.end()
    h.flush()
    (report,) = h.reports
    assert [(c.name, c.pending) for c in report.run.calls] == [("search", False), ("delete", True)]
    assert report.run.pending_calls == 1
    assert not report.passed   # a started forbidden call counts
    slow.end()                 # arrives after the run was graded
    h.flush()
    assert h.processor.stats()["late_spans"] == 1
    assert len(h.reports) == 1, "a late child never starts a new run"
    assert [s.name for s in h.finished()].count("execute_tool delete") == 1
    dropped = {p.attributes["reason"]: p.value for p in h.metric_points("tooleval.runs.dropped")}
    assert dropped == {"late_span": 1}


# -- faults --------------------------------------------------------------------------------------

class Raising(SpanProcessor):
    def __init__(self) -> None:
        self.calls = 0

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.calls += 1
        raise RuntimeError("downstream on_start")

    def on_end(self, span: ReadableSpan) -> None:
        self.calls += 1
        raise RuntimeError("downstream on_end")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        raise RuntimeError("downstream flush")

    def shutdown(self) -> None:
        raise RuntimeError("downstream shutdown")


def test_downstream_that_raises_never_reaches_the_application() -> None:
    downstream = Raising()
    h = Harness(CONFIG, downstream=downstream)
    h.agent_run(["search"])            # would raise here if anything leaked
    assert h.flush() is False           # the downstream's flush failed: say so
    assert [r.passed for r in h.reports] == [True]
    assert downstream.calls >= 6
    assert h.processor.shutdown() is False
    h.logger_provider.shutdown()
    h.meter_provider.shutdown()


def _blocking_family(gate: threading.Event, seen: list[Any]) -> None:
    class Blocking:
        type = "test-blocking"

        def __init__(self, name: str) -> None:
            self.name = name

        def grade(self, run: Any) -> GradeResult:
            seen.append((threading.current_thread().name,
                         otel_context.get_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY)))
            gate.wait(10)
            return GradeResult(self.name, self.type, 1.0, True, "pass", "ok")

    register(GraderFamily("test-blocking", (), lambda entry, name, iv: Blocking(name)))


@pytest.fixture
def blocking() -> Iterator[tuple[threading.Event, list[Any]]]:
    gate, seen = threading.Event(), []
    _blocking_family(gate, seen)
    yield gate, seen
    gate.set()
    REGISTRY.pop("test-blocking", None)


def test_grading_runs_off_the_application_thread_with_instrumentation_suppressed(
        blocking: tuple[threading.Event, list[Any]]) -> None:
    gate, seen = blocking
    h = Harness({"graders": [{"type": "test-blocking"}]})
    try:
        started = time.perf_counter()
        h.agent_run(["search"])             # the grader blocks, the application does not
        assert time.perf_counter() - started < 1.0
        gate.set()
        assert h.flush()
        assert seen == [("otel-tooleval-grader", True)]
    finally:
        h.close()


def test_full_queue_forwards_ungraded_and_counts(
        blocking: tuple[threading.Event, list[Any]]) -> None:
    gate, _ = blocking
    h = Harness({"graders": [{"type": "test-blocking"}], "limits": {"queue_size": 1}})
    try:
        for i in range(4):                  # one grading, one queued, two dropped
            h.agent_run(["search"], agent=f"a{i}")
            time.sleep(0.05)
        dropped = h.processor.stats().get("dropped.queue_full", 0)
        assert dropped == 2
        # the dropped runs' roots were forwarded at once, ungraded
        assert len([s for s in h.finished() if s.name.startswith("invoke_agent")]) == 2
        gate.set()
        assert h.flush()
        roots = [s for s in h.finished() if s.name.startswith("invoke_agent")]
        assert len(roots) == 4 and len(verdict_roots(h)) == 2
        points = {p.attributes["reason"]: p.value for p in h.metric_points("tooleval.runs.dropped")}
        assert points == {"queue_full": 2}
    finally:
        h.close()


def test_grader_that_raises_yields_error_and_others_still_run() -> None:
    class Boom:
        type = "test-boom"

        def __init__(self, name: str) -> None:
            self.name = name

        def grade(self, run: Any) -> GradeResult:
            raise ZeroDivisionError("boom")

    register(GraderFamily("test-boom", (), lambda entry, name, iv: Boom(name)))
    try:
        h = Harness({"graders": [{"type": "test-boom"}, CONFIG["graders"][0]]})
        h.agent_run(["search"])
        h.flush()
        (report,) = h.reports
        boom, ok = report.results
        assert (boom.label, boom.passed, boom.score, boom.error) == (
            "error", False, 0.0, "ZeroDivisionError")
        assert ok.passed
        (root,) = verdict_roots(h)
        err = [e for e in root.events if e.attributes["gen_ai.evaluation.name"] == "test-boom"]
        assert err[0].attributes["error.type"] == "ZeroDivisionError"
        h.close()
    finally:
        REGISTRY.pop("test-boom", None)


def test_shutdown_with_a_run_still_open(h: Harness) -> None:
    root = h.tracer.start_span("invoke_agent a", attributes=AGENT)
    child = h.tracer.start_span("execute_tool search", context=trace.set_span_in_context(root),
                                attributes={"gen_ai.tool.name": "search"})
    child.end()
    assert h.processor.shutdown(5_000) is True
    assert h.processor.stats()["dropped.shutdown"] == 1
    assert h.processor.stats()["open_traces"] == 0
    root.end()                      # after shutdown: no exception, nothing graded
    assert h.reports == []


def test_root_that_never_ends_is_evicted_after_ttl() -> None:
    h = Harness({**CONFIG, "limits": {"run_ttl_seconds": 0.2}})
    try:
        root = h.tracer.start_span("invoke_agent a", attributes=AGENT)
        h.tracer.start_span("execute_tool search", context=trace.set_span_in_context(root),
                            attributes={"gen_ai.tool.name": "search"}).end()
        assert h.processor.stats()["open_traces"] == 1
        h.agent_run(["search"])          # starts the grading thread, which sweeps
        deadline = time.monotonic() + 5
        while h.processor.stats().get("dropped.ttl", 0) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert h.processor.stats()["dropped.ttl"] == 1
        assert h.processor.stats()["open_traces"] == 0
        h.agent_run(["search"])          # still grading new runs
        h.flush()
        assert len(h.reports) == 2
    finally:
        h.close()


def test_open_run_cap_evicts_the_oldest_and_keeps_grading() -> None:
    h = Harness({**CONFIG, "limits": {"max_open_runs": 2}})
    try:
        stuck = [h.tracer.start_span(f"invoke_agent s{i}", attributes=AGENT) for i in range(3)]
        assert h.processor.stats()["open_traces"] == 2
        assert h.processor.stats()["dropped.max_open_runs"] == 1
        h.agent_run(["search"])
        h.flush()
        assert [r.run.agent for r in h.reports] == ["agent"]
        for s in stuck:
            s.end()
    finally:
        h.close()


def test_finished_traces_are_remembered_up_to_the_open_run_cap() -> None:
    h = Harness({**CONFIG, "limits": {"max_open_runs": 3}})
    try:
        for i in range(5):
            h.agent_run(["search"], agent=f"a{i}")
        h.flush()
        stats = h.processor.stats()
        assert stats["runs"] == 5 and stats["open_traces"] == 0
        assert stats["closed_traces"] == 3   # the newest three; the oldest forgotten first
    finally:
        h.close()


def test_calls_per_run_cap() -> None:
    h = Harness({**CONFIG, "limits": {"max_calls_per_run": 3}})
    try:
        h.agent_run(["search"] * 5)
        h.flush()
        (report,) = h.reports
        assert len(report.run.calls) == 3
        assert report.run.dropped_calls == 2
        assert h.processor.stats()["dropped.max_calls_per_run"] == 2   # every dropped call
        (root,) = verdict_roots(h)
        assert root.attributes["tooleval.dropped_calls"] == 2
    finally:
        h.close()


def test_run_bytes_cap_keeps_calls_without_values() -> None:
    h = Harness({"graders": [{"type": "tool-calls", "config": {
        "required": [{"name": "search", "args": {"q": "x"}}]}}],
        "limits": {"max_run_bytes": 40}})
    try:
        with h.agent():
            h.tool("search", {"q": "x" * 10})
            h.tool("search", {"q": "x" * 100})
        h.flush()
        (report,) = h.reports
        first, second = report.run.calls
        assert first.arguments == {"q": "x" * 10}
        assert second.arguments is None and second.name == "search"
        assert h.processor.stats()["dropped.max_run_bytes"] == 1
    finally:
        h.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_child_starts_clean_parent_keeps_its_runs(h: Harness) -> None:
    root = h.tracer.start_span("invoke_agent a", attributes=AGENT)
    h.tracer.start_span("execute_tool search", context=trace.set_span_in_context(root),
                        attributes={"gen_ai.tool.name": "search"}).end()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(read)
            open_traces = h.processor.stats()["open_traces"]
            h.agent_run(["search"])
            flushed = h.processor.force_flush(5_000)
            msg = f"{open_traces} {len(h.reports)} {flushed}"
            os.write(write, msg.encode())
        finally:
            os._exit(0)
    os.close(write)
    got = os.read(read, 100).decode()
    os.waitpid(pid, 0)
    assert got == "0 1 True"
    assert h.processor.stats()["open_traces"] == 1
    root.end()
    h.flush()
    assert [len(r.run.calls) for r in h.reports] == [1]


def test_hooks_never_raise_even_on_broken_spans() -> None:
    class Broken:
        @property
        def context(self) -> Any:
            raise ValueError("no context")

    class Recording(SpanProcessor):
        def __init__(self) -> None:
            self.started: list[Any] = []
            self.ended: list[Any] = []

        def on_start(self, span: Any, parent_context: Any = None) -> None:
            self.started.append(span)

        def on_end(self, span: Any) -> None:
            self.ended.append(span)

    downstream = Recording()
    processor = ToolEvalSpanProcessor(CONFIG, downstream)
    broken = Broken()
    processor.on_start(broken)  # type: ignore[arg-type]
    processor.on_end(broken)    # type: ignore[arg-type]
    # contained, and still passed on: our failure never costs the application a span
    assert downstream.started == [broken] and downstream.ended == [broken]
    processor.shutdown()


def test_config_errors_raise_at_construction_not_later() -> None:
    from otel_tooleval import ConfigError

    with pytest.raises(ConfigError):
        ToolEvalSpanProcessor({"graders": [{"type": "tool-calls", "config": {}}]})


def test_force_flush_and_shutdown_return_bools_within_deadline(
        blocking: tuple[threading.Event, list[Any]]) -> None:
    gate, _ = blocking
    h = Harness({"graders": [{"type": "test-blocking"}]})
    h.agent_run(["search"])
    started = time.monotonic()
    assert h.processor.force_flush(200) is False     # the grader is still blocked
    assert time.monotonic() - started < 1.0
    gate.set()
    assert h.processor.force_flush(5_000) is True
    assert h.processor.shutdown() is True
    h.logger_provider.shutdown()
    h.meter_provider.shutdown()


def test_framework_chain_below_plain_root_with_kinds_set_at_end(h: Harness) -> None:
    """OpenInference sets every attribute when a span ends; the scope tells it is a framework."""
    oi = h.provider.get_tracer("openinference.instrumentation.langchain")
    with h.tracer.start_as_current_span("POST /chat"):
        for _ in range(2):
            with oi.start_as_current_span("LangGraph") as graph:
                for node in ("agent", "agent"):
                    with oi.start_as_current_span(node) as agent_node:
                        with oi.start_as_current_span("model") as llm:
                            llm.set_attribute("openinference.span.kind", "LLM")
                        agent_node.set_attribute("openinference.span.kind", "AGENT")
                    with oi.start_as_current_span("tools") as tools:
                        with oi.start_as_current_span("search") as tool:
                            tool.set_attributes({"tool.name": "search",
                                                 "openinference.span.kind": "TOOL"})
                        tools.set_attribute("openinference.span.kind", "CHAIN")
                graph.set_attribute("openinference.span.kind", "CHAIN")
    h.flush()
    assert [(r.run.root_name, len(r.run.calls), r.run.steps) for r in h.reports] == [
        ("LangGraph", 2, 2), ("LangGraph", 2, 2)]
    assert len(verdict_roots(h)) == 2


def test_root_copy_keeps_the_original_drop_counts() -> None:
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider

    h = Harness(CONFIG)
    try:
        provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=3, max_events=1))
        provider.add_span_processor(h.processor)
        tracer = provider.get_tracer("t")
        with tracer.start_as_current_span("invoke_agent a", attributes={
                **AGENT, "a": 1, "b": 2, "c": 3, "d": 4}) as root:
            root.add_event("one")
            root.add_event("two")
            with tracer.start_as_current_span("t", attributes={"gen_ai.tool.name": "search"}):
                pass
        h.flush()
        (copy,) = verdict_roots(h)
        assert copy.dropped_attributes == 2
        assert copy.dropped_events == 1
        assert len([e for e in copy.events if e.name == "gen_ai.evaluation.result"]) == 2
    finally:
        h.close()


def test_call_cap_is_per_run_under_a_long_lived_root() -> None:
    h = Harness({**CONFIG, "limits": {"max_calls_per_run": 3}})
    try:
        with h.tracer.start_as_current_span("GET /stream"):
            for i in range(4):
                h.agent_run(["search", "search"], agent=f"a{i}")
                assert h.flush()          # graded, so its calls are released
        assert [len(r.run.calls) for r in h.reports] == [2, 2, 2, 2]
        assert "dropped.max_calls_per_run" not in h.processor.stats()
    finally:
        h.close()


def test_a_grading_thread_that_cannot_start_leaves_the_root_queued_not_forwarded_twice(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No new thread (a resource limit, or interpreter exit): the root that could not start
    the grading thread stays queued, held; the next root starts the thread, which grades and
    forwards both, each once. (Before, the hook forwarded it at once and the queue kept it:
    forwarded again, graded, by the thread, or ungraded by shutdown.)"""
    h = Harness(CONFIG)
    try:
        start = threading.Thread.start

        def no_grader(thread: threading.Thread) -> None:
            if thread.name == "otel-tooleval-grader":
                raise RuntimeError("can't start new thread")
            start(thread)

        monkeypatch.setattr(threading.Thread, "start", no_grader)
        h.agent_run(["search"], agent="first")          # never raises into the application
        monkeypatch.undo()
        h.agent_run(["search"], agent="second")
        assert h.flush()
        for name in ("invoke_agent first", "invoke_agent second"):
            (root,) = h.by_name(name)
            assert (root.attributes or {}).get("tooleval.passed") is True
        assert h.processor.stats()["runs"] == 2
    finally:
        h.close()


def test_framework_runs_under_a_root_that_never_ends_leave_no_entry_behind(h: Harness) -> None:
    """Framework spans graded as runs below a local root that never ends (a session span):
    once graded, each leaves nothing in the trace state. (Before, every one stayed in the
    trace's set of framework run roots for the life of the trace: one entry per run, no cap.)"""
    session = h.tracer.start_span("session")
    with trace.use_span(session, end_on_exit=False):
        for _ in range(50):
            with h.tracer.start_as_current_span(
                    "graph", attributes={"openinference.span.kind": "CHAIN"}):
                h.agent_run(["search"], agent="inner")
    assert h.flush()
    assert h.processor.stats()["runs"] == 50
    (state,) = h.processor._buffers.open_traces()
    assert not state.run_roots and not state.graded
    assert set(state.parents) == {session.get_span_context().span_id}
    session.end()


def test_stats_count_graded_runs_and_the_failed_ones(h: Harness) -> None:
    h.agent_run(["search"], agent="a")
    h.agent_run(["search", "delete"], agent="b")
    h.agent_run(["fetch"], agent="c")
    assert h.flush()
    stats = h.processor.stats()
    assert (stats["runs"], stats["runs.failed"]) == (3, 2)
