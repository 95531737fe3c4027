"""Violation marks on the live route: ``ToolEvalSpanProcessor`` holds a run's tool spans until
its verdict (``emit.violation_marks``), then forwards the offending ones marked
(``tooleval.violation``, ``tooleval.violation.graders``), each span exactly once."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import ToolEvalSpanProcessor
from tests.test_violations import AGENT, CALLS, CONFIG, run_agent, tool_marks

MARKED = [
    ("execute_tool search", None, None),
    ("execute_tool search", True, ("one-search", "just-search")),
    ("execute_tool delete_file", True, ("no-delete", "just-search")),
]


class Live:
    """TracerProvider → ToolEvalSpanProcessor → SimpleSpanProcessor → InMemorySpanExporter."""

    def __init__(self, config: Any = CONFIG) -> None:
        self.memory = InMemorySpanExporter()
        self.processor = ToolEvalSpanProcessor(config, SimpleSpanProcessor(self.memory))
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("tests.processor_marks")

    def spans(self) -> list[ReadableSpan]:
        return list(self.memory.get_finished_spans())

    def names(self) -> list[str]:
        return [s.name for s in self.spans()]

    def assert_each_once(self, n: int) -> None:
        counts = Counter(s.context.span_id for s in self.spans())
        assert len(counts) == n and set(counts.values()) == {1}, counts

    def close(self) -> None:
        self.provider.shutdown()


@pytest.fixture
def live() -> Iterator[Live]:
    p = Live()
    yield p
    p.close()


def test_processor_marks_the_offending_tool_spans(live: Live) -> None:
    run_agent(live.tracer)
    assert live.processor.force_flush(10_000)
    live.assert_each_once(1 + 2 * len(CALLS))
    assert tool_marks(live.spans()) == MARKED
    (root,) = [s for s in live.spans() if "tooleval.passed" in (s.attributes or {})]
    assert root.attributes["tooleval.failed"] == ("no-delete", "one-search", "just-search")
    assert live.processor.stats()["marked_spans"] == 2
    # the tool spans reach the exporter just before their root, which comes last
    assert live.names()[-4:] == ["execute_tool search", "execute_tool search",
                                 "execute_tool delete_file", "invoke_agent planner"]


def test_tool_spans_wait_for_their_runs_verdict(live: Live) -> None:
    root = live.tracer.start_span("invoke_agent planner", attributes=AGENT)
    ctx = trace.set_span_in_context(root)
    live.tracer.start_span("chat m", context=ctx,
                           attributes={"gen_ai.operation.name": "chat"}).end()
    live.tracer.start_span("execute_tool delete_file", context=ctx,
                           attributes={"gen_ai.tool.name": "delete_file"}).end()
    time.sleep(0.2)   # the grading thread has nothing to do with them yet
    assert live.names() == ["chat m"]                  # the tool span waits with the run
    root.end()
    deadline = time.monotonic() + 10
    while len(live.spans()) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)                               # the grading thread, no flush
    assert live.names() == ["chat m", "execute_tool delete_file", "invoke_agent planner"]
    assert tool_marks(live.spans())[0][1] is True


@pytest.mark.parametrize("config", [
    {**CONFIG, "emit": {"violation_marks": False}},
    {"graders": [{"name": "answer", "kind": "tool", "function": "contains",
                  "extractor": "last_assistant", "ground_truth": "x"}]},   # names no call
], ids=["switched-off", "no-grader-names-calls"])
def test_without_marks_tool_spans_pass_through_at_once(config: Any) -> None:
    p = Live(config)
    try:
        root = p.tracer.start_span("invoke_agent planner", attributes=AGENT)
        p.tracer.start_span("execute_tool delete_file", context=trace.set_span_in_context(root),
                            attributes={"gen_ai.tool.name": "delete_file"}).end()
        assert p.names() == ["execute_tool delete_file"]
        root.end()
        assert p.processor.force_flush(10_000)
        assert [(m[1], m[2]) for m in tool_marks(p.spans())] == [(None, None)]
    finally:
        p.close()


def test_process_mode_marks_too() -> None:
    p = Live({**CONFIG, "grading": {"mode": "process"}})
    try:
        deadline = time.monotonic() + 60
        while True:   # until the grading process answers (runs before go to the thread)
            run_agent(p.tracer)
            assert p.processor.force_flush(30_000)
            offload = p.processor._offload
            if (offload is not None and offload.ready) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        p.memory.clear()
        run_agent(p.tracer)
        assert p.processor.force_flush(30_000)
        assert offload is not None and offload.ready
        assert tool_marks(p.spans()) == MARKED
    finally:
        p.close()


def test_a_nested_runs_marks_reach_the_calls_its_outer_run_forwards() -> None:
    config = {**CONFIG, "runs": {"nested_agents": "separate"}}
    p = Live(config)
    try:
        with p.tracer.start_as_current_span("invoke_agent outer", attributes={
                **AGENT, "gen_ai.agent.name": "outer"}):
            run_agent(p.tracer, [("search", {"q": "a"})])                       # inner run
            with p.tracer.start_as_current_span("execute_tool search", attributes={
                    "gen_ai.tool.name": "search", "gen_ai.tool.call.arguments": "{}"}):
                pass
        assert p.processor.force_flush(10_000)
        p.assert_each_once(2 + 2 + 1)
        # the inner run (one search) passes; the outer run's two searches break one-search
        # and just-search, its second search only
        marks = tool_marks(p.spans())
        assert marks == [("execute_tool search", None, None),
                         ("execute_tool search", True, ("one-search", "just-search"))]
    finally:
        p.close()


def test_a_run_whose_root_never_ends_has_its_tool_spans_forwarded_at_shutdown(
        live: Live) -> None:
    root = live.tracer.start_span("invoke_agent planner", attributes=AGENT)
    live.tracer.start_span("execute_tool delete_file", context=trace.set_span_in_context(root),
                           attributes={"gen_ai.tool.name": "delete_file"}).end()
    assert live.processor.force_flush(10_000)
    assert live.names() == []                          # held: its run is not decided
    assert live.processor.shutdown(10_000)
    (only,) = live.spans()                             # no run: forwarded unmarked
    assert only.name == "execute_tool delete_file"
    assert "tooleval.violation" not in (only.attributes or {})


def test_an_evicted_run_forwards_its_held_tool_spans_at_once_unmarked() -> None:
    p = Live({**CONFIG, "limits": {"max_open_runs": 1}})
    try:
        first = p.tracer.start_span("invoke_agent planner", attributes=AGENT)
        p.tracer.start_span("execute_tool delete_file", context=trace.set_span_in_context(first),
                            attributes={"gen_ai.tool.name": "delete_file"}).end()
        assert p.names() == []
        second = p.tracer.start_span("invoke_agent planner", attributes=AGENT)   # evicts first
        assert p.names() == ["execute_tool delete_file"]
        assert p.processor.stats()["dropped.max_open_runs"] == 1
        second.end()
        first.end()                                    # late: forwarded as it is
        assert p.processor.force_flush(10_000)
        p.assert_each_once(3)
        assert [m[1] for m in tool_marks(p.spans())] == [None]
    finally:
        p.close()


def test_a_tool_span_past_the_byte_budget_goes_on_at_once_unmarked() -> None:
    p = Live({**CONFIG, "limits": {"max_run_bytes": 10}})
    try:
        root = p.tracer.start_span("invoke_agent planner", attributes=AGENT)
        p.tracer.start_span("execute_tool delete_file", context=trace.set_span_in_context(root),
                            attributes={"gen_ai.tool.name": "delete_file",
                                        "gen_ai.tool.call.arguments": '{"path": "/tmp/x"}'}).end()
        assert p.names() == ["execute_tool delete_file"]   # its values are not kept, nor it
        root.end()
        assert p.processor.force_flush(10_000)
        p.assert_each_once(2)
        assert [m[1] for m in tool_marks(p.spans())] == [None]
        assert p.processor.stats()["dropped.max_run_bytes"] == 1
    finally:
        p.close()


def test_guard_and_grader_marks_on_one_span() -> None:
    p = Live({**CONFIG, "guard": {"disallowed": ["delete_file"]}})
    try:
        run_agent(p.tracer)
        assert p.processor.force_flush(10_000)
        p.assert_each_once(1 + 2 * len(CALLS))
        (deleted,) = [s for s in p.spans() if s.name == "execute_tool delete_file"]
        attrs = deleted.attributes or {}
        assert attrs["tooleval.guard.violation"] is True
        # the guard's own result names the call too (a guard violation fails its run)
        assert attrs["tooleval.violation.graders"] == ("no-delete", "just-search", "guard")
    finally:
        p.close()


def test_a_downstream_that_raises_never_reaches_the_application() -> None:
    class Raising(SimpleSpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            raise RuntimeError("boom")

    processor = ToolEvalSpanProcessor(CONFIG, Raising(InMemorySpanExporter()))
    provider = TracerProvider()
    provider.add_span_processor(processor)
    run_agent(provider.get_tracer("t"))                # nothing raised here
    assert processor.force_flush(10_000)
    assert processor.stats()["marked_spans"] == 2
    provider.shutdown()
