"""The run root's end on the application thread: a local root is only marked there, its run
decided and its trace closed on the grading thread. Whatever the grading thread's timing, the
outcome must be the one of deciding at the root's end: these tests hold the grading thread
(a grader blocked on a gate, then the roots queued behind it) while the application goes on."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from otel_tooleval import AgentRun
from otel_tooleval.graders.custom import grader
from tests.support.harness import AGENT, Harness

GATE = threading.Event()
ENTERED = threading.Event()


@grader
def root_end_gated(run: AgentRun, submission: str | None) -> float:
    if any(c.name == "block" for c in run.calls):
        ENTERED.set()
        GATE.wait(30)
    return 1.0


CONFIG = {"graders": [
    {"name": "gated", "kind": "tool", "function": "root_end_gated"},
    {"name": "no-delete", "type": "tool-calls", "config": {"disallowed": ["^delete$"]}}]}


@pytest.fixture
def held() -> Iterator[Harness]:
    """A harness whose grading thread is stuck in a run until the test ends (or opens GATE)."""
    GATE.clear()
    ENTERED.clear()
    h = Harness(CONFIG)
    h.agent_run(["block"], agent="blocker")
    assert ENTERED.wait(10)
    try:
        yield h
    finally:
        GATE.set()
        h.close()


def tool_span(h: Harness, name: str, parent: trace.Span) -> trace.Span:
    return h.tracer.start_span(f"execute_tool {name}", context=trace.set_span_in_context(parent),
                               attributes={"gen_ai.tool.name": name,
                                           "gen_ai.tool.call.arguments": json.dumps({})})


def reports_by_agent(h: Harness) -> dict[str, list[tuple[str, bool]]]:
    return {r.run.agent: [(c.name, c.pending) for c in r.run.calls] for r in h.reports}


def test_a_call_ending_after_its_root_is_late_and_stays_in_the_run_as_it_was(held: Harness
                                                                             ) -> None:
    h = held
    root = h.tracer.start_span("invoke_agent a", attributes={**AGENT, "gen_ai.agent.name": "a"})
    done = tool_span(h, "search", root)
    done.end()
    slow = tool_span(h, "delete", root)
    root.end()                 # queued behind the blocked run: not decided yet
    slow.end()                 # ends after its root: late, whenever the root is graded
    after = tool_span(h, "delete", root)   # starts after the root ended: late, not in the run
    after.end()
    assert h.processor.stats()["late_spans"] == 2
    assert h.processor.stats()["open_traces"] == 0
    GATE.set()
    assert h.flush()
    got = reports_by_agent(h)
    # the call open at the root's end is in the run, pending (as when grading at once)
    assert got["a"] == [("search", False), ("delete", True)]
    assert [len(h.by_name(n)) for n in ("execute_tool search", "execute_tool delete")] == [1, 2]
    assert len(h.by_name("invoke_agent a")) == 1


def test_a_new_local_root_of_the_same_trace_is_a_run_of_its_own(held: Harness) -> None:
    h = held
    first = h.tracer.start_span("invoke_agent a", attributes={**AGENT, "gen_ai.agent.name": "a"})
    tool_span(h, "search", first).end()
    first.end()                # closed, not yet decided
    # the same trace comes back in through a remote parent (a second request of the trace)
    remote = SpanContext(first.get_span_context().trace_id, 0xABC, is_remote=True,
                         trace_flags=TraceFlags(TraceFlags.SAMPLED))
    second = h.tracer.start_span("invoke_agent b", attributes={**AGENT, "gen_ai.agent.name": "b"},
                                 context=trace.set_span_in_context(NonRecordingSpan(remote)))
    tool_span(h, "delete", second).end()
    assert h.processor.stats()["open_traces"] == 1      # b's; a's is closed
    second.end()
    assert h.processor.stats()["open_traces"] == 0
    GATE.set()
    assert h.flush()
    got = reports_by_agent(h)
    assert got["a"] == [("search", False)] and got["b"] == [("delete", False)]
    passed = {r.run.agent: r.passed for r in h.reports}
    assert passed == {"blocker": True, "a": True, "b": False}
    assert h.processor.stats().get("late_spans", 0) == 0


def test_a_local_root_that_is_no_run_is_forwarded_by_the_grading_thread(held: Harness) -> None:
    h = held
    with h.tracer.start_as_current_span("GET /health"), h.tracer.start_as_current_span("db query"):
        pass
    assert h.by_name("db query") and not h.by_name("GET /health")   # held until decided
    GATE.set()
    assert h.flush()
    (health,) = h.by_name("GET /health")
    assert "tooleval.passed" not in (health.attributes or {})
    assert {r.run.agent for r in h.reports} == {"blocker"}


def test_a_full_queue_decides_on_the_application_thread(held: Harness) -> None:
    h = held
    h.processor._queue_limit = 0           # every root from now on finds the queue full
    with h.tracer.start_as_current_span("GET /health"):
        pass
    h.agent_run(["search"], agent="late")
    # both forwarded at once, ungraded; only the run counts as dropped
    assert h.by_name("GET /health") and h.by_name("invoke_agent late")
    assert h.processor.stats()["dropped.queue_full"] == 1
    assert "tooleval.passed" not in (h.by_name("invoke_agent late")[0].attributes or {})


def test_shutdown_forwards_undecided_roots_and_counts_only_runs(held: Harness) -> None:
    h = held
    with h.tracer.start_as_current_span("GET /health"):
        pass
    h.agent_run(["search"], agent="queued")
    assert h.processor.shutdown(200) is False          # the blocked run holds the thread
    stats = h.processor.stats()
    # the run being graded and the queued run; the health check was no run
    assert stats["dropped.shutdown"] == 2 and stats["open_traces"] == 0
    assert h.by_name("GET /health") and h.by_name("invoke_agent queued")


def test_runs_that_keep_coming_slowly_are_polled_for_not_woken_for() -> None:
    """Roots ending every 60 ms for over a second: the grading thread finds each at its next
    poll (every 50 ms) and never goes to sleep, so no root's end() pays for waking it. (Before,
    a root found after the wait left the idle clock running: after a second the thread slept,
    and every root's end() woke it.)"""
    import time

    h = Harness({"graders": [{"type": "tool-calls", "config": {"required": ["search"]}}]})
    processor = h.processor
    try:
        h.agent_run(["search"])
        assert h.flush()
        wakes: list[float] = []
        wake = processor._wake_worker

        def counted() -> None:
            wakes.append(time.monotonic())
            wake()

        processor._wake_worker = counted  # type: ignore[method-assign]
        for _ in range(25):
            time.sleep(0.06)
            h.agent_run(["search"])
        assert h.flush()
        assert len(h.reports) == 26
        assert len(wakes) <= 2, f"{len(wakes)} wake-ups (force_flush wakes it once)"
    finally:
        h.close()
