"""Plain traffic (issue 31): the spans of a trace with no agent, model or tool span cost the
application thread a dict store and a pop, no trace state, no lock; the trace gets its state
only when such a span shows up (``TraceBuffers._promote``), and is then graded as before:
the rules of docs/conventions.md about runs below HTTP roots hold whatever ended first."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanContext

from otel_tooleval import ToolEvalSpanProcessor
from tests.support.harness import AGENT, Harness
from tests.test_plain_promotion_review import _end_on_another_thread

CONFIG: dict[str, Any] = {"graders": [
    {"name": "no-delete", "type": "tool-calls", "config": {"disallowed": ["^delete$"]}}]}
HTTP = {"http.request.method": "GET", "url.path": "/items"}


def _child(h: Harness, name: str, parent: trace.Span, **attrs: Any) -> trace.Span:
    return h.tracer.start_span(name, context=trace.set_span_in_context(parent),
                               attributes=attrs or None)


def _web_request(h: Harness) -> None:
    with h.tracer.start_as_current_span("GET /items", attributes=HTTP):
        with h.tracer.start_as_current_span("SELECT items",
                                            attributes={"db.system.name": "postgresql"}):
            pass
        with h.tracer.start_as_current_span("render"):
            pass


def test_a_plain_trace_has_no_state_and_starts_no_grading_thread() -> None:
    h = Harness(CONFIG)
    try:
        root = h.tracer.start_span("GET /items", attributes=HTTP)
        child = _child(h, "SELECT items", root, **{"db.system.name": "postgresql"})
        buffers = h.processor._buffers
        assert buffers._traces == {} and h.processor.stats()["open_traces"] == 0
        assert set(buffers._live) == {root.get_span_context().span_id,
                                      child.get_span_context().span_id}
        child.end()
        root.end()
        # Forwarded at once, each of them, by the application thread: no run to decide
        assert [s.name for s in h.finished()] == ["SELECT items", "GET /items"]
        assert buffers._live == {} and buffers._traces == {}
        assert h.processor._worker is None
        _web_request(h)
        assert h.flush() and h.processor._worker is None
        assert h.reports == [] and h.processor.stats().get("runs", 0) == 0
    finally:
        h.close()


def test_a_plain_root_queued_behind_a_run_is_forwarded_after_it() -> None:
    """With a grading thread (the service hosts an agent too), a plain trace's root is handed
    to it, forwarded after the runs queued before it; a flush forwards it."""
    h = Harness(CONFIG)
    try:
        h.agent_run(["search"], agent="a")
        assert h.flush() and h.processor._worker is not None
        _web_request(h)
        assert h.flush()
        names = [s.name for s in h.finished()]
        assert names.index("invoke_agent a") < names.index("GET /items")
        assert h.processor._buffers._traces == {}
    finally:
        h.close()


def test_a_tool_call_below_an_http_root_makes_the_root_a_run_whatever_ended_before() -> None:
    """The trace turns into a tracked one at its first tool span's end: the HTTP root and the
    sibling tool span still open are adopted, the db span that ended before is not needed."""
    h = Harness(CONFIG)
    try:
        root = h.tracer.start_span("POST /chat", attributes=HTTP)
        _child(h, "SELECT users", root, **{"db.system.name": "postgresql"}).end()
        first = _child(h, "execute_tool search", root)    # its attributes come at its end
        second = _child(h, "execute_tool delete", root)
        assert h.processor.stats()["open_traces"] == 0
        first.set_attribute("gen_ai.tool.name", "search")
        first.set_attribute("gen_ai.tool.call.arguments", json.dumps({"q": "x"}))
        first.end()
        assert h.processor.stats()["open_traces"] == 1
        second.set_attribute("gen_ai.tool.name", "delete")
        second.end()
        root.end()
        assert h.flush()
        (report,) = h.reports
        assert [c.name for c in report.run.calls] == ["search", "delete"]
        assert not report.passed
        (copy,) = h.by_name("POST /chat")
        assert copy.attributes is not None and copy.attributes["tooleval.passed"] is False
    finally:
        h.close()


def test_a_framework_span_below_an_http_root_is_the_run_when_its_agent_shows_up_late() -> None:
    """docs/conventions.md: below an HTTP root, the outermost framework span with an agent
    span below it is the run; OpenInference marks its spans only as they end, so the
    framework span is known by its scope while open, and adopted with the trace's open
    spans when the first marked span ends."""
    provider = TracerProvider()
    processor = ToolEvalSpanProcessor(CONFIG, on_report=(reports := []).append)
    provider.add_span_processor(processor)
    web = provider.get_tracer("web")
    graph = provider.get_tracer("openinference.instrumentation.langchain")
    root = web.start_span("POST /chat", attributes=HTTP)
    inside = trace.set_span_in_context(root)
    web.start_span("SELECT users", context=inside).end()
    chain = graph.start_span("LangGraph", context=inside)
    node = graph.start_span("agent", context=trace.set_span_in_context(chain))
    tool = graph.start_span("delete", context=trace.set_span_in_context(node))
    tool.set_attributes({"openinference.span.kind": "TOOL", "tool.name": "delete"})
    tool.end()
    node.set_attributes({"openinference.span.kind": "AGENT", "graph.node.id": "agent"})
    node.end()
    chain.set_attribute("openinference.span.kind", "CHAIN")
    chain.end()
    root.end()
    assert processor.force_flush(10_000)
    (report,) = reports
    assert report.run.root_name == "LangGraph"
    assert [c.name for c in report.run.calls] == ["delete"]
    provider.shutdown()


def test_an_agent_root_is_tracked_from_its_start() -> None:
    h = Harness(CONFIG)
    try:
        root = h.tracer.start_span("invoke_agent a", attributes={**AGENT,
                                                                 "gen_ai.agent.name": "a"})
        assert h.processor.stats()["open_traces"] == 1
        root.end()
    finally:
        h.close()


def test_a_plain_trace_stays_plain_while_a_run_is_tracked_and_a_run_after_plain_traffic() -> None:
    """The hooks read a span's trace id only when some trace is tracked (an empty ``_traces``
    answers for every trace): a plain request in the middle of a tracked run gets no state of
    its own, and a run that starts after plain traffic (nothing tracked) is tracked."""
    h = Harness(CONFIG)
    try:
        buffers = h.processor._buffers
        _web_request(h)
        assert buffers._traces == {} and buffers._live == {}
        root = h.tracer.start_span("invoke_agent a", attributes={**AGENT,
                                                                 "gen_ai.agent.name": "a"})
        run_id = root.get_span_context().trace_id
        assert list(buffers._traces) == [run_id]
        web = h.tracer.start_span("GET /items", attributes=HTTP)
        query = _child(h, "SELECT items", web, **{"db.system.name": "postgresql"})
        assert list(buffers._traces) == [run_id]
        assert set(buffers._live) == {web.get_span_context().span_id,
                                      query.get_span_context().span_id}
        query.end()
        web.end()
        assert [s.name for s in h.finished()][-2:] == ["SELECT items", "GET /items"]
        tool = _child(h, "execute_tool delete", root, **{"gen_ai.tool.name": "delete"})
        assert tool.get_span_context().span_id in buffers._traces[run_id].open
        tool.end()
        root.end()
        assert h.flush()
        (report,) = h.reports
        assert [c.name for c in report.run.calls] == ["delete"] and not report.passed
        assert buffers._live == {}
    finally:
        h.close()


def test_plain_spans_that_never_end_are_forgotten_at_the_ttl() -> None:
    h = Harness({**CONFIG, "limits": {"run_ttl_seconds": 1}})
    try:
        h.tracer.start_span("GET /stuck", attributes=HTTP,
                            start_time=time.time_ns() - 2 * 10**9)   # never ended
        buffers = h.processor._buffers
        assert len(buffers._live) == 1
        buffers.sweep()
        assert buffers._live == {}
    finally:
        h.close()


def test_a_span_starting_while_its_trace_is_promoted_is_adopted() -> None:
    """The race of two threads: a span stored as plain while another thread gave its trace a
    state is adopted by the hook that stored it (``_adopt_started``)."""
    h = Harness(CONFIG)
    try:
        root = h.tracer.start_span("POST /chat", attributes=HTTP)
        buffers = h.processor._buffers
        store = buffers._live
        trace_id = root.get_span_context().trace_id

        class Racing(dict):   # the promotion happens between the store and the second look
            def __setitem__(self, key: int, value: Any) -> None:
                super().__setitem__(key, value)
                if value.name == "lookup":
                    buffers._new_trace(trace_id, True)

        racing = Racing(store)
        buffers._live = racing
        h.processor._install_hooks()
        lookup = _child(h, "lookup", root)
        state = buffers._traces[trace_id]
        assert lookup.get_span_context().span_id in state.open
        assert lookup.get_span_context().span_id not in racing
    finally:
        h.close()


def test_a_span_ending_while_its_trace_is_promoted_is_not_left_open() -> None:
    """The race of two threads the other way: a plain span that another thread ends while a
    promotion has taken it from ``_live`` but not yet given the trace its state is not left in
    ``open``: its hook waits for the promotion (``TraceBuffers._end_untracked``) and ends it
    as tracked. Here a second local root of the trace, which left open would keep the trace
    from closing until its TTL. (A real second thread: the hook waits on the promotion's
    lock, which the promoting thread holds.)"""
    h = Harness(CONFIG)
    try:
        remote = trace.set_span_in_context(trace.NonRecordingSpan(trace.SpanContext(
            0x1234, 0x99, is_remote=True, trace_flags=trace.TraceFlags(1))))
        first = h.tracer.start_span("POST /chat", context=remote, attributes=HTTP)
        second = h.tracer.start_span("POST /chat", context=remote, attributes=HTTP)
        buffers = h.processor._buffers
        new_trace = buffers._new_trace

        threads: list[threading.Thread] = []

        def racing(*args: Any) -> Any:
            if not threads:   # another thread, inside the promotion's window
                _end_on_another_thread(buffers, second, threads)
            return new_trace(*args)

        buffers._new_trace = racing   # type: ignore[method-assign]
        agent = _child(h, "invoke_agent a", first, **AGENT)   # marked: promotes at its start
        buffers._new_trace = new_trace   # type: ignore[method-assign]
        threads[0].join(10)
        (state,) = buffers._traces.values()
        assert second.get_span_context().span_id not in state.open and state.open_roots == 1
        _child(h, "execute_tool search", agent, **{"gen_ai.tool.name": "search"}).end()
        agent.end()
        first.end()
        assert h.flush()
        assert h.processor.stats()["open_traces"] == 0
        assert [[c.name for c in r.run.calls] for r in h.reports] == [["search"]]
    finally:
        h.close()


def test_with_a_guard_plain_traffic_stays_untracked_and_calls_are_checked_at_their_start(
        ) -> None:
    """A `guard:` section no longer tracks every trace from its first span: a web request
    stays plain; a tool call below an HTTP root is tracked from its start, so the guard checks
    it then (marked before it ends), counts it in its run, and the run is graded as before."""
    from tests.test_guard import guarded

    with guarded({"disallowed": ["^delete_"], "max_calls": 2}) as g:
        buffers = g.processor._buffers
        tracer = g.tracer
        with tracer.start_as_current_span("GET /items", attributes=HTTP), \
                tracer.start_as_current_span("SELECT items",
                                             attributes={"db.system.name": "postgresql"}):
            assert buffers._traces == {} and len(buffers._live) == 2
        assert buffers._traces == {} and buffers._live == {}
        with tracer.start_as_current_span("POST /chat", attributes=HTTP):
            with tracer.start_as_current_span("SELECT users",
                                              attributes={"db.system.name": "postgresql"}):
                pass
            with g.run("helper"):
                assert buffers._traces != {}          # an agent span marks the trace
                with tracer.start_as_current_span("execute_tool delete_user", attributes={
                        "gen_ai.tool.name": "delete_user"}) as call:
                    assert call.attributes is not None
                    assert call.attributes["tooleval.guard.violation"] is True   # at its start
                g.call("search", {"q": "x"})
                g.call("search", {"q": "y"})          # the run's third call: over max_calls
        assert [(v.rule, v.tool, v.at) for v in g.violations] == [
            ("disallowed", "delete_user", "start"), ("max_calls", "search", "start")]
        assert g.processor.force_flush(10_000)
        assert g.processor.stats()["runs"] == 1


def test_with_a_guard_a_call_under_a_plain_root_is_checked_at_its_start() -> None:
    """No agent span: the first span that may be a tool call (its keys) gives the trace its
    state as it starts, and the guard checks it then."""
    from tests.test_guard import guarded

    with guarded({"disallowed": ["^delete_"]}) as g:
        with g.tracer.start_as_current_span("POST /run", attributes=HTTP):
            assert g.processor._buffers._traces == {}
            with g.tracer.start_as_current_span("execute_tool delete_user", attributes={
                    "gen_ai.tool.name": "delete_user"}) as call:
                assert g.processor._buffers._traces != {}
                assert call.attributes is not None
                assert call.attributes["tooleval.guard.violation"] is True
        assert [(v.rule, v.tool, v.at) for v in g.violations] == [
            ("disallowed", "delete_user", "start")]


def test_the_keys_a_guard_reads_calls_by_are_among_the_kind_keys() -> None:
    """The plain start test (``KIND_KEYS.isdisjoint``) rules out a tool call for the guard too
    only while every key a tool convention tests is a key ``span_kind`` reads."""
    from otel_tooleval.conventions.calls import TOOL_KEYS
    from otel_tooleval.conventions.kinds import KIND_KEYS

    assert TOOL_KEYS is not None and TOOL_KEYS <= KIND_KEYS


def test_the_keys_that_mark_a_framework_span_are_among_the_kind_keys() -> None:
    """A plain local root that ends is tested for a framework scope only: its attributes were
    just found to hold no kind key (hook_bodies.on_end), which rules out a framework kind too
    only while every key ``is_framework_span`` reads is a key ``span_kind`` reads."""
    from otel_tooleval.conventions.kinds import KIND_KEYS
    from otel_tooleval.conventions.registry import FRAME_KEYS

    assert FRAME_KEYS and set(FRAME_KEYS) <= KIND_KEYS


NAMED: dict[str, Any] = {**CONFIG, "runs": {"agent_span_names": ["^support_bot$"]}}


def test_with_named_agents_plain_traffic_stays_untracked_and_a_named_span_is_a_run() -> None:
    """``runs.agent_span_names``: a web request stays plain; a span named as an agent, with no
    attribute that marks it, below an HTTP root, is the run of the tool calls below it."""
    h = Harness(NAMED)
    try:
        _web_request(h)
        assert h.processor._buffers._traces == {} and h.processor._buffers._live == {}
        with h.tracer.start_as_current_span("POST /chat", attributes=HTTP), \
                h.tracer.start_as_current_span("support_bot"), \
                h.tracer.start_as_current_span("execute_tool delete",
                                               attributes={"gen_ai.tool.name": "delete"}):
            pass
        assert h.flush()
        (report,) = h.reports
        assert report.run.root_name == "support_bot" and not report.passed
        assert [c.name for c in report.run.calls] == ["delete"]
    finally:
        h.close()


def test_named_agents_are_remembered_by_span_name_with_the_same_answers() -> None:
    """``TraceBuffers._named`` gives ``RunPolicy.named_agent``'s answer, remembering it per span
    name only for spans that carry no agent name, and no more than ``_NAMES_REMEMBERED``."""
    from otel_tooleval import assembly

    h = Harness({**CONFIG, "runs": {"agent_span_names": ["^support_bot$", "^helper"]}})
    try:
        buffers = h.processor._buffers
        policy = buffers.policy
        cases: list[tuple[dict[str, Any], str]] = [
            ({}, "support_bot"), ({}, "GET /items"), ({}, "helper-2"),
            ({"gen_ai.agent.name": "helper"}, "GET /items"),     # by its agent name
            ({"agent.name": "nobody"}, "support_bot"),
            ({"gen_ai.agent.name": "support_bot"}, "render")]
        for attrs, name in cases * 2:
            assert buffers._named(attrs, name) == policy.named_agent(attrs, name), (attrs, name)
        assert buffers._named_names == {"support_bot": True, "GET /items": False,
                                        "helper-2": True}
        buffers._named_names.clear()
        for i in range(assembly._NAMES_REMEMBERED + 10):
            assert buffers._named({}, f"GET /items/{i}") is False
        assert len(buffers._named_names) == assembly._NAMES_REMEMBERED
    finally:
        h.close()


MAPPED: dict[str, Any] = {**CONFIG, "conventions": [
    {"scope": "tests", "span_name": "^support run$", "run": {"agent_name": "span_name"}},
    {"scope": "tests", "span_name": "^Calling (?P<name>\\w+)$", "tool": {"name": "span_name"}}]}


@pytest.mark.parametrize("named", [False, True])
def test_with_a_mapping_plain_traffic_stays_untracked_and_mapped_spans_are_read(
        named: bool) -> None:
    """A ``conventions:`` mapping (with named agents too, or not): a web request stays plain;
    spans that only the mapping marks (by scope and name, no attribute) below an HTTP root
    are the run and its calls."""
    config = ({**MAPPED, "runs": {"agent_span_names": ["^nobody$"]}} if named else MAPPED)
    h = Harness(config)
    try:
        _web_request(h)
        assert h.processor._buffers._traces == {} and h.processor._buffers._live == {}
        with h.tracer.start_as_current_span("POST /chat", attributes=HTTP), \
                h.tracer.start_as_current_span("support run"):
            with h.tracer.start_as_current_span("Calling search"):
                pass
            with h.tracer.start_as_current_span("Calling delete"):
                pass
        assert h.flush()
        (report,) = h.reports
        assert report.run.root_name == "support run" and not report.passed
        assert [c.name for c in report.run.calls] == ["search", "delete"]
    finally:
        h.close()


def test_with_root_local_root_every_trace_is_tracked_from_its_first_span() -> None:
    """``runs.root: local_root`` (every local root is a run): no plain path, a web request is
    tracked from its root's start and graded as a run of no calls."""
    h = Harness({**CONFIG, "runs": {"root": "local_root"}})
    try:
        root = h.tracer.start_span("GET /items", attributes=HTTP)
        buffers = h.processor._buffers
        assert not buffers.plain and h.processor.stats()["open_traces"] == 1
        child = _child(h, "SELECT items", root, **{"db.system.name": "postgresql"})
        assert buffers._live == {}
        (state,) = buffers._traces.values()
        assert set(state.open) == {root.get_span_context().span_id,
                                   child.get_span_context().span_id}
        child.end()
        root.end()
        assert h.flush()
        (report,) = h.reports
        assert report.run.root_name == "GET /items" and report.run.calls == () and report.passed
        assert sorted(s.name for s in h.finished()) == ["GET /items", "SELECT items"]
    finally:
        h.close()


def test_a_plain_local_root_of_a_framework_scope_is_a_run() -> None:
    """A local root with no kind that a framework's scope marks (``FRAMEWORK_SCOPES``) may be a
    run (``root: auto``): it is decided as one, not forwarded as plain traffic."""
    h = Harness(CONFIG)
    try:
        with h.provider.get_tracer("strands.telemetry").start_as_current_span("Agent loop"):
            pass
        with h.tracer.start_as_current_span("GET /items", attributes=HTTP):
            pass
        assert h.flush()
        assert [(r.run.root_name, r.passed) for r in h.reports] == [("Agent loop", True)]
        assert sorted(s.name for s in h.finished()) == ["Agent loop", "GET /items"]
    finally:
        h.close()


class _SpanIdsPerTrace:
    """Span ids 1, 2, ... restarted at will: unique within a trace only (the spec asks no
    more; ``_live`` is keyed by span id alone)."""

    def __init__(self) -> None:
        self.ids = iter(range(1, 1 << 20))

    def generate_trace_id(self) -> int:
        return int.from_bytes(os.urandom(16), "big") or 1

    def generate_span_id(self) -> int:
        return next(self.ids)

    def is_trace_id_random(self) -> bool:
        return True


def test_a_tracked_span_whose_id_an_open_plain_span_of_another_trace_shares_ends_tracked(
        ) -> None:
    """``_live`` is keyed by span id, which is unique within a trace only: a tracked span
    ending while another trace's open plain span holds its id ends tracked, and the plain
    span stays stored (review of the eighth round: the run root was adopted twice)."""
    h = Harness(CONFIG)
    try:
        buffers = h.processor._buffers
        ids = _SpanIdsPerTrace()
        h.tracer.id_generator = ids
        web = h.tracer.start_span("GET /items", attributes=HTTP)   # span id 1, plain
        ids.ids = iter(range(1, 1 << 20))
        root = h.tracer.start_span("invoke_agent a", attributes={**AGENT,
                                                                 "gen_ai.agent.name": "a"})
        assert root.get_span_context().span_id == web.get_span_context().span_id
        tool = _child(h, "execute_tool delete", root, **{"gen_ai.tool.name": "delete"})
        tool.end()
        root.end()   # tracked; the plain span under the same id stays in _live
        assert set(buffers._live) == {web.get_span_context().span_id}
        web.end()
        assert h.flush()
        (report,) = h.reports
        assert [c.name for c in report.run.calls] == ["delete"]
        assert buffers._traces == {} and buffers._live == {}
        assert [s.name for s in h.finished()][-1] == "GET /items"
    finally:
        h.close()


def test_a_plain_span_ended_with_a_copy_of_its_context_is_plain() -> None:
    """While a run is tracked, the span ``on_end`` is given is told to be the one stored as it
    started by its context (the SDK's copy for ``on_end`` shares it), or else by its trace id:
    a copy of the context (another SDK) still ends it as plain, taken out of ``_live``."""
    h = Harness(CONFIG)
    try:
        buffers = h.processor._buffers
        root = h.tracer.start_span("invoke_agent a", attributes={**AGENT,
                                                                 "gen_ai.agent.name": "a"})
        web = h.tracer.start_span("GET /items", attributes=HTTP)
        copy = web._readable_span()   # type: ignore[attr-defined]
        ctx = copy.context
        copy._context = SpanContext(ctx.trace_id, ctx.span_id, ctx.is_remote, ctx.trace_flags,
                                    ctx.trace_state)
        assert copy._context is not web.get_span_context()
        h.processor.on_end(copy)
        assert buffers._live == {} and len(buffers._traces) == 1
        assert [s.name for s in h.finished()] == ["GET /items"]
        root.end()
        assert h.flush() and len(h.reports) == 1
    finally:
        h.close()
