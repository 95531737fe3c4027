"""Deferred bookkeeping under concurrency (tests/test_deferred_ends.py): the deferred path
leaves what the bookkeeping done at once (``on_end``'s ``else:`` branch) leaves, under every
interleaving of application threads, the grading thread and readers; each test forces one."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from opentelemetry import trace

from otel_tooleval.assembly import SETTLE_EVERY
from tests.support.harness import AGENT, Harness

CONFIG = {
    "graders": [
        {"name": "uses-search", "type": "tool-calls", "config": {"required": ["^search$"]}},
        {"name": "no-delete", "type": "tool-calls", "config": {"disallowed": ["^delete$"]}},
    ],
    # Without violation marks (and with no guard, mapping or named agents) the hooks defer.
    "emit": {"violation_marks": False},
}


def _tool(h: Harness, name: str, ctx: Any) -> Any:
    return h.tracer.start_span(f"execute_tool {name}", context=ctx,
                               attributes={"gen_ai.tool.name": name,
                                           "gen_ai.tool.call.arguments": "{}",
                                           "gen_ai.tool.call.result": "ok"})


def _graded_with_a_late_call(h: Harness, name: str) -> Any:
    """A run below a local root that stays open (returned), graded with the call ``name``
    pending, then that call ended: late, its run taken."""
    request = h.tracer.start_span("GET /chat")
    agent = h.tracer.start_span("invoke_agent a", attributes=AGENT,
                                context=trace.set_span_in_context(request))
    slow = _tool(h, name, trace.set_span_in_context(agent))
    agent.end()
    assert h.flush()
    assert len(h.reports) == 1
    slow.end()
    return request


def _health_check(h: Harness, health: list[int]) -> None:
    """``stats()`` read on another thread (a health check), whose id goes into ``health``;
    waited for."""
    def check() -> None:
        health.append(threading.get_ident())
        h.processor.stats()

    checker = threading.Thread(target=check)
    checker.start()
    checker.join(10)


def test_run_taken_while_another_thread_settles_keeps_its_calls() -> None:
    """``processor.stats()`` on a health-check thread settles; the grading thread that takes a
    run while that settle has taken the spans from ``ended`` but not kept them yet waits for it
    (``settle`` takes its lock even when ``ended`` is empty): the calls are in the run and none
    is late."""
    h = Harness(CONFIG)
    try:
        buffers = h.processor._buffers
        entered, go = threading.Event(), threading.Event()
        health: list[int] = []
        settle_one, members = buffers._settle_one, buffers.members

        def slow_settle_one(state: Any, span: Any) -> None:
            # The health-check thread is preempted after taking the spans (GIL switch).
            if threading.get_ident() in health and not entered.is_set():
                entered.set()
                go.wait(5)
            settle_one(state, span)

        def members_after(job: Any) -> Any:
            entered.wait(5)   # the grading thread reaches the run while the settle is under way
            try:
                return members(job)
            finally:
                go.set()

        buffers._settle_one = slow_settle_one   # type: ignore[method-assign]
        buffers.members = members_after          # type: ignore[method-assign]

        request = h.tracer.start_span("GET /chat")   # a plain local root that stays open
        with h.tracer.start_as_current_span("invoke_agent a", attributes=AGENT,
                                            context=trace.set_span_in_context(request)):
            h.tool("search")
            h.tool("delete")

        _health_check(h, health)
        request.end()
        assert h.flush()
        (report,) = h.reports
        assert [c.name for c in report.run.calls] == ["search", "delete"]
        assert h.processor.stats().get("late_spans", 0) == 0
    finally:
        h.close()


def test_late_span_of_an_evicted_trace_is_counted() -> None:
    """A tool span that ends after its run was taken is late; deferred, it waits in
    ``state.ended``, and a trace evicted (``max_open_runs``) is settled as it goes: counted."""
    h = Harness({**CONFIG, "limits": {"max_open_runs": 1}})
    try:
        request = _graded_with_a_late_call(h, "search")
        other = h.tracer.start_span("invoke_agent b", attributes=AGENT)   # evicts the first
        other.end()
        request.end()
        assert h.flush()
        stats = h.processor.stats()
        assert stats["dropped.max_open_runs"] == 1
        assert stats.get("late_spans", 0) == 1
    finally:
        h.close()


def test_late_span_metric_is_recorded_by_force_flush() -> None:
    """A late span reaches ``tooleval.runs.dropped`` (reason ``late_span``) by the end of a
    ``force_flush``, which settles every trace, as it does when counted at once."""
    h = Harness(CONFIG)
    try:
        request = _graded_with_a_late_call(h, "delete")
        assert h.flush()
        dropped = {p.attributes["reason"]: p.value
                   for p in h.metric_points("tooleval.runs.dropped")}
        assert dropped == {"late_span": 1}
        request.end()
    finally:
        h.close()


def _busy_grader(h: Harness) -> tuple[threading.Event, threading.Event]:
    """A slow grader: the grading thread, taking a run, sets the first event and waits for
    the second (``release``) before it reads the run."""
    buffers = h.processor._buffers
    grading, release = threading.Event(), threading.Event()
    members = buffers.members

    def slow_members(job: Any) -> Any:
        grading.set()
        release.wait(10)
        return members(job)

    buffers.members = slow_members   # type: ignore[method-assign]
    return grading, release


def test_deferred_spans_stay_bounded_while_the_grading_thread_is_busy() -> None:
    """Done at once, a plain span (no kind) of a tracked trace leaves nothing when it ends, and
    a kept call is stripped past the byte budget as it ends. Deferred, every tracked span waits
    in ``state.ended``; past ``SETTLE_EVERY`` a settle is queued, and while a slow grader keeps
    the grading thread from it the application thread settles the trace itself past
    ``2 * SETTLE_EVERY``: no trace holds more."""

    h = Harness(CONFIG)
    try:
        buffers = h.processor._buffers
        grading, release = _busy_grader(h)
        request = h.tracer.start_span("GET /chat")   # a long-lived local root
        ctx = trace.set_span_in_context(request)
        with h.tracer.start_as_current_span("invoke_agent a", attributes=AGENT, context=ctx):
            h.tool("search")
        assert grading.wait(5)
        (state,) = buffers._traces.values()
        held = 0
        for i in range(8 * SETTLE_EVERY):      # the application goes on: plain spans (db, http)
            h.tracer.start_span(f"SELECT {i}", context=ctx).end()
            held = max(held, len(state.ended))
        release.set()
        request.end()
        assert h.flush()
        assert SETTLE_EVERY < held <= 2 * SETTLE_EVERY + 1
    finally:
        release.set()
        h.close()


def test_settle_every_is_not_skipped_when_two_threads_end_spans_at_once() -> None:
    """Another application thread that ends a span of the same trace between this thread's
    append and its ``len`` test (a GIL switch there) makes both read ``SETTLE_EVERY + 1``: the
    settle is still queued (the hooks test ``>``, not a multiple). Simulated here by ending the
    other span inside the append."""

    h = Harness(CONFIG)
    try:
        request = h.tracer.start_span("GET /chat")   # a long-lived local root
        ctx = trace.set_span_in_context(request)
        with h.tracer.start_as_current_span("invoke_agent a", attributes=AGENT, context=ctx):
            h.tool("search")
        assert h.flush()                              # graded; ``ended`` settled
        (state,) = h.processor._buffers._traces.values()
        assert not state.ended
        other = h.tracer.start_span("SELECT other", context=ctx)   # another thread's span

        class Interleaved(list):  # type: ignore[type-arg]
            def append(self, span: Any) -> None:
                super().append(span)
                if len(self) == SETTLE_EVERY and other.end_time is None:
                    other.end()   # the other thread's on_end, between append and len test

        state.ended = Interleaved(state.ended)
        for i in range(SETTLE_EVERY):
            h.tracer.start_span(f"SELECT {i}", context=ctx).end()
        assert h.flush()
        assert len(state.ended) < SETTLE_EVERY, "the settle at SETTLE_EVERY was skipped"
        request.end()
    finally:
        h.close()


@pytest.mark.parametrize("deferred", [True, False], ids=["deferred", "at-once"])
def test_settle_items_do_not_take_the_queue_slots_of_runs(deferred: bool) -> None:
    """``limits.queue_size`` counts runs waiting to be graded: two long traces past
    ``SETTLE_EVERY`` while the grader is busy queue their settles apart (``_settles``), and
    the next run still finds room (found in review: they took the run queue's two slots)."""
    h = Harness({**CONFIG, "emit": {"violation_marks": not deferred}, "limits": {"queue_size": 2}})
    try:
        grading, release = _busy_grader(h)
        h.agent_run(["search"], agent="first")   # taken by the grading thread, which is busy
        assert grading.wait(5)

        roots = []
        for service in ("y", "z"):           # two long-lived requests, tracked (a tool call)
            root = h.tracer.start_span(f"GET /{service}")
            ctx = trace.set_span_in_context(root)
            _tool(h, "lookup", ctx).end()
            for i in range(SETTLE_EVERY + 1):   # their plain spans: a settle queued for each
                h.tracer.start_span(f"SELECT {i}", context=ctx).end()
            roots.append(root)
        queued_runs = sum(1 for item in h.processor._queue if item.__class__.__name__ == "RunJob")
        assert queued_runs == 0

        h.agent_run(["search"], agent="second")   # no run waiting: room for it
        dropped = h.processor.stats().get("dropped.queue_full", 0)
        release.set()
        assert h.flush()
        for root in roots:
            root.end()
        assert h.flush()
        assert dropped == 0
        assert [r.run.agent for r in h.reports][:2] == ["first", "second"]
    finally:
        release.set()
        h.close()


def test_late_call_settled_by_another_thread_during_release_is_late() -> None:
    """A call of a graded run that ends while ``release`` runs, taken from ``state.ended`` by
    another settler (``stats()`` on a health-check thread): ``release`` settles and prunes the
    parent map under the settle lock, so the other settler waits and finds it late (found in
    review: with the prune outside the lock its parent link was gone, and it was kept as a
    call of the next run)."""
    h = Harness(CONFIG)
    try:
        buffers = h.processor._buffers
        entered, taken, go = threading.Event(), threading.Event(), threading.Event()
        health: list[int] = []
        forget, settle_one = buffers._forget_subtree, buffers._settle_one

        def forget_after(state: Any, root_id: int) -> None:   # the grading thread, in release
            entered.set()
            taken.wait(5)   # the health-check thread took the late call meanwhile
            try:
                forget(state, root_id)
            finally:
                go.set()

        def slow_settle_one(state: Any, span: Any) -> None:
            if threading.get_ident() in health and span.name == "execute_tool slow":
                taken.set()   # taken from ``ended``, not kept yet (a GIL switch here)
                go.wait(5)
            settle_one(state, span)

        buffers._forget_subtree = forget_after       # type: ignore[method-assign]
        buffers._settle_one = slow_settle_one         # type: ignore[method-assign]

        request = h.tracer.start_span("GET /chat")   # a long-lived local root
        agent = h.tracer.start_span("invoke_agent a", attributes=AGENT,
                                    context=trace.set_span_in_context(request))
        ctx = trace.set_span_in_context(agent)
        _tool(h, "search", ctx).end()
        slow = _tool(h, "slow", ctx)
        agent.end()                 # the run is graded; ``slow`` left ``open``
        assert entered.wait(5)      # ... and released: settled, the parent map not pruned yet
        slow.end()                  # late: its run was taken

        _health_check(h, health)
        assert h.flush()
        (state,) = buffers._traces.values()
        stats = h.processor.stats()
        request.end()
        assert h.flush()
        assert [c.name for c in h.reports[0].run.calls] == ["search", "slow"]
        assert stats.get("late_spans", 0) == 1
        assert state.tool_calls == 0
    finally:
        go.set()
        h.close()


def test_call_ending_as_its_trace_closes_is_settled() -> None:
    """Another application thread ends a call of a local-root run after its ``state.closed``
    test and before its append to ``state.ended`` (a GIL switch there), while the root ends
    and the grading thread decides, takes and grades the run: the hook finds the trace closed
    after its append and settles it, so the call is counted late, as done at once (found in
    review: nothing settled that trace again)."""
    h = Harness(CONFIG)
    try:
        buffers = h.processor._buffers
        inside, go = threading.Event(), threading.Event()

        agent = h.tracer.start_span("invoke_agent a", attributes=AGENT)   # a local root run
        ctx = trace.set_span_in_context(agent)
        _tool(h, "search", ctx).end()
        slow = _tool(h, "slow", ctx)
        (state,) = buffers._traces.values()
        worker = threading.current_thread()

        class Switched(list):  # type: ignore[type-arg]
            def append(self, span: Any) -> None:
                if threading.current_thread() is not worker:
                    inside.set()   # past ``state.closed``; the GIL to the others
                    go.wait(5)
                super().append(span)

        state.ended = Switched(state.ended)
        other = threading.Thread(target=slow.end)   # a tool run on another thread
        other.start()
        assert inside.wait(5)
        agent.end()
        assert h.flush()                             # graded; ``slow`` left ``open``
        go.set()
        other.join(5)
        assert h.flush()
        in_run = [c.name for c in h.reports[0].run.calls] == ["search", "slow"]
        late = h.processor.stats().get("late_spans", 0)
        assert in_run or late == 1, "the call is neither in its run nor counted late"
    finally:
        go.set()
        h.close()
