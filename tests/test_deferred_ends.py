"""Deferred bookkeeping (issue 31): without violation marks, a guard, a ``conventions:`` mapping
or named agents, ``on_end`` of a span in a tracked trace only appends it to its trace's
``ended`` list and decides what must be decided then (a local root, an agent span, a framework
span graded as a run); ``TraceBuffers.settle`` keeps its calls and model calls later, before
anything reads them. What a run is made of, what is counted late or dropped, and what is
forwarded are the same as when the bookkeeping is done at once (the tests of
``test_processor.py`` and ``test_root_end.py`` run both ways, by their configs; every recorded
framework run is replayed deferred in ``test_framework_fixtures.py``)."""

from __future__ import annotations

import enum
import json
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace

from otel_tooleval.assembly import SETTLE_EVERY
from otel_tooleval.conventions import AGENT, span_kind
from otel_tooleval.conventions.kinds import (
    AGENT_OPERATIONS,
    OPERATION_KEY,
    OTHER_AGENT_KEYS,
    agent_kind,
)
from otel_tooleval.conventions.registry import MARKERS
from tests.support.harness import Harness
from tests.support.replay import _attributes, spans_of

#: A grader that lists violations: with violation marks (the default) tool spans wait for their
#: run's verdict, so the bookkeeping is done at once; with the marks off it is deferred.
GRADER = {"name": "no-delete", "type": "tool-calls", "config": {"disallowed": ["^delete$"]}}
DEFERRED = {"graders": [GRADER], "emit": {"violation_marks": False}}
AT_ONCE = {"graders": [GRADER]}
HTTP = {"http.request.method": "POST", "url.path": "/chat"}
FRAMEWORKS = Path(__file__).parent / "data" / "frameworks"


class Op(str, enum.Enum):
    """An application's str enum as an attribute value (the SDK keeps it as it is)."""

    AGENT = "invoke_agent"
    TOOL = "execute_tool"


def _inline_says_no_agent(attrs: dict[str, Any]) -> bool:
    """The hooks' inline test (hooks.py, deferred path): True only for a span that is surely
    no agent span, without calling ``agent_kind``."""
    op = attrs.get(OPERATION_KEY)
    return op.__class__ is str and op not in AGENT_OPERATIONS and \
        OTHER_AGENT_KEYS.isdisjoint(attrs)


def _attribute_sets() -> list[dict[str, Any]]:
    """Every recorded span's attributes, and each marker key with each of its values, as a
    str, a str enum, a non-string and beside a GenAI tool operation."""
    sets = [_attributes(s.get("attributes", ()))
            for path in sorted(FRAMEWORKS.glob("*/traces.jsonl")) for s in spans_of(path)]
    for m in MARKERS:
        for value in (*m.agents, *m.models, "TOOL", "tool", "other"):
            sets.append({m.key: value})
            sets.append({m.key: value, OPERATION_KEY: "execute_tool"})
            sets.append({OPERATION_KEY: value})
        sets.append({m.key: 3})
        sets.append({m.key: None})
        sets.append({m.key: ("invoke_agent",)})
    sets += [{OPERATION_KEY: Op.AGENT}, {OPERATION_KEY: Op.TOOL}, {OPERATION_KEY: 1}, {}]
    return sets


def test_agent_kind_is_span_kinds_agent_bit_and_the_inline_test_never_misses_one() -> None:
    sets = _attribute_sets()
    assert len(sets) > 500   # the recordings are there
    agents = 0
    for attrs in sets:
        expected = span_kind(attrs) & AGENT
        assert agent_kind(attrs) == expected, attrs
        if expected:
            agents += 1
            assert not _inline_says_no_agent(attrs), attrs
    assert agents > 30


def test_a_tool_span_waits_in_ended_until_something_reads_it() -> None:
    h = Harness(DEFERRED)
    try:
        with h.agent("a") as root:
            h.tool("search")
            state = _state(h, root)
            assert state.tools == [] and state.models == []
            assert [s.name for s in state.ended] == ["chat m", "execute_tool search"]
            # Forwarded at once all the same
            assert [s.name for s in h.finished()] == ["chat m", "execute_tool search"]
        assert h.flush()
        assert [c.name for c in h.reports[0].run.calls] == ["search"]
    finally:
        h.close()


def test_with_violation_marks_the_bookkeeping_is_done_at_once() -> None:
    h = Harness(AT_ONCE)
    try:
        with h.agent("a") as root:
            h.tool("search")
            state = _state(h, root)
            assert state.ended == [] and [s.name for s in state.tools] == ["execute_tool search"]
    finally:
        h.close()


def _state(h: Harness, span: trace.Span) -> Any:
    """The trace state of ``span``'s trace."""
    return h.processor._buffers._traces[span.get_span_context().trace_id]


def _child(h: Harness, name: str, parent: trace.Span, **attrs: Any) -> trace.Span:
    return h.tracer.start_span(name, context=trace.set_span_in_context(parent),
                               attributes=attrs or None)


@pytest.mark.parametrize("config", [DEFERRED, AT_ONCE], ids=["deferred", "at-once"])
def test_a_late_call_below_an_http_root_is_counted_late_at_the_next_stats_read(
        config: dict[str, Any]) -> None:
    """The run below the HTTP root is graded when its agent span ends; a call of it that ends
    after the grading thread took it is late, counted by the time ``stats()`` answers."""
    h = Harness(config)
    try:
        http = h.tracer.start_span("POST /chat", attributes=HTTP)
        agent = _child(h, "invoke_agent a", http, **{OPERATION_KEY: "invoke_agent"})
        early = _child(h, "execute_tool search", agent, **{"gen_ai.tool.name": "search"})
        early.end()
        late = _child(h, "execute_tool fetch", agent, **{"gen_ai.tool.name": "fetch"})
        agent.end()
        assert h.flush()
        assert [c.name for c in h.reports[0].run.calls] == ["search", "fetch"]
        assert h.reports[0].run.calls[1].pending
        late.end()
        assert h.processor.stats()["late_spans"] == 1
        http.end()
        assert h.flush()
        assert len(h.reports) == 1
        assert {s.name for s in h.finished()} == {
            "POST /chat", "invoke_agent a", "execute_tool search", "execute_tool fetch"}
    finally:
        h.close()


@pytest.mark.parametrize("config", [DEFERRED, AT_ONCE], ids=["deferred", "at-once"])
def test_every_conventions_agent_span_below_an_http_root_is_a_run(config: dict[str, Any]
                                                                   ) -> None:
    """Told inline (GenAI) or by ``agent_kind`` (the others, a str enum): each is a run."""
    marks = [{OPERATION_KEY: "invoke_agent"}, {OPERATION_KEY: Op.AGENT},
             {"openinference.span.kind": "AGENT"}, {"traceloop.span.kind": "agent"},
             {OPERATION_KEY: "execute_tool", "langfuse.observation.type": "agent"}]
    h = Harness(config)
    try:
        for i, mark in enumerate(marks):
            http = h.tracer.start_span("POST /chat", attributes=HTTP)
            agent = _child(h, f"agent {i}", http, **mark)
            _child(h, "execute_tool search", agent, **{"gen_ai.tool.name": "search"}).end()
            agent.end()
            http.end()
        assert h.flush()
        assert [r.run.root_name for r in h.reports] == [f"agent {i}" for i in range(len(marks))]
        assert all([c.name for c in r.run.calls] == ["search"] for r in h.reports)
    finally:
        h.close()


def test_a_long_run_is_settled_as_it_goes_within_its_byte_budget() -> None:
    """Every ``SETTLE_EVERY`` deferred spans the grading thread settles the trace, so the byte
    budget strips values while the run is still going, not only when its root ends."""
    big = "x" * 1000
    calls = SETTLE_EVERY + 10
    h = Harness({**DEFERRED, "limits": {"max_run_bytes": 20_000}})
    try:
        with h.agent("a") as root:
            for i in range(calls):
                with h.tracer.start_as_current_span(
                        f"execute_tool t{i}", attributes={"gen_ai.tool.name": "t",
                                                         "gen_ai.tool.call.arguments": big}):
                    pass
            state = _state(h, root)
            deadline = time.monotonic() + 10
            while len(state.tools) < SETTLE_EVERY and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(state.tools) >= SETTLE_EVERY and len(state.ended) < calls
            kept = [t for t in state.tools if hasattr(t, "_attributes")]
            assert len(kept) < 25   # past the budget, records without the values
            assert h.processor._buffers.counts["dropped.max_run_bytes"] > 0
        assert h.flush()
        run = h.reports[0].run
        assert len(run.calls) == calls
        assert sum(c.raw_arguments is not None for c in run.calls) < 25
    finally:
        h.close()


def test_a_span_settle_cannot_read_is_reported_and_the_others_are_kept(
        caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(DEFERRED)
    try:
        with h.agent("a") as root:
            state = _state(h, root)
            state.ended.append(object())   # nothing the SDK would hand over
            h.tool("search")
        assert h.flush()
        assert [c.name for c in h.reports[0].run.calls] == ["search"]
        assert "deferred bookkeeping" in caplog.text
    finally:
        h.close()


def test_settling_keeps_the_order_calls_ended_in_across_threads() -> None:
    """Calls ended by several application threads: the run lists each once, every one."""
    import threading

    h = Harness(DEFERRED)
    try:
        with h.agent("a") as root:
            ctx = trace.set_span_in_context(root)

            def calls(k: int) -> None:
                for i in range(200):
                    h.tracer.start_span(f"execute_tool t{k}.{i}", context=ctx, attributes={
                        "gen_ai.tool.name": f"t{k}", "gen_ai.tool.call.arguments":
                        json.dumps({"i": i})}).end()

            threads = [threading.Thread(target=calls, args=(k,)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert h.flush()
        run = h.reports[0].run
        assert len(run.calls) == 800
        for k in range(4):
            assert [json.loads(c.raw_arguments)["i"] for c in run.calls
                    if c.name == f"t{k}"] == list(range(200))
    finally:
        h.close()
