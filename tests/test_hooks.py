"""The processor's application-thread hooks (hooks.py): what the downstream receives, and how
the hooks are rebuilt (downstream set, subclass overrides, shutdown, fork)."""

from __future__ import annotations

import ast
import inspect
import os
import textwrap
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import RunReport, ToolEvalSpanProcessor
from otel_tooleval._compat import _NOOP_HOOKS, start_and_ending_hooks
from tests.support.harness import AGENT

CONFIG = {"graders": [{"name": "uses-search", "type": "tool-calls",
                       "config": {"required": ["^search$"]}}]}


class Recording(SpanProcessor):
    """Records every hook call, with the parent context ``on_start`` was given."""

    def __init__(self) -> None:
        self.started: list[tuple[Any, Context | None]] = []
        self.ending: list[Any] = []
        self.ended: list[Any] = []

    def on_start(self, span: Any, parent_context: Context | None = None) -> None:
        self.started.append((span, parent_context))

    def _on_ending(self, span: Any) -> None:
        self.ending.append(span)

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)


class EndingOnly(SpanProcessor):
    """Overrides ``_on_ending`` only: its ``on_start`` is the SDK's no-op."""

    def __init__(self) -> None:
        self.ending: list[Any] = []
        self.ended: list[Any] = []

    def _on_ending(self, span: Any) -> None:
        self.ending.append(span)

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)


def setup(processor: ToolEvalSpanProcessor) -> tuple[TracerProvider, trace.Tracer]:
    provider = TracerProvider()
    provider.add_span_processor(processor)
    return provider, provider.get_tracer("tests")


def run(tracer: trace.Tracer, calls: list[str]) -> list[tuple[Any, Context]]:
    """An agent run whose spans are started with explicit parent contexts; returns
    ``(span, the context it was started in)`` in start order."""
    started = []
    root_context = Context()
    root = tracer.start_span("invoke_agent a", context=root_context, attributes=AGENT)
    started.append((root, root_context))
    for name in calls:
        context = trace.set_span_in_context(root)
        span = tracer.start_span(f"execute_tool {name}", context=context,
                                 attributes={"gen_ai.tool.name": name})
        started.append((span, context))
        span.end()
    root.end()
    return started


def test_downstream_with_hooks_gets_every_call_with_its_parent_context() -> None:
    downstream = Recording()
    reports: list[RunReport] = []
    processor = ToolEvalSpanProcessor(CONFIG, downstream, on_report=reports.append)
    provider, tracer = setup(processor)
    started = run(tracer, ["search", "read"])
    assert processor.force_flush(10_000)
    assert [(s, c) for s, c in downstream.started] == started
    assert all(c is context for (_, c), (_, context) in zip(downstream.started, started))
    assert downstream.ending == [s for s, _ in started[1:]] + [started[0][0]]
    ids = [s.context.span_id for s in downstream.ended]
    assert sorted(ids) == sorted(s.context.span_id for s, _ in started)
    (report,) = reports
    assert [c.name for c in report.run.calls] == ["search", "read"]
    provider.shutdown()


def test_downstream_with_hooks_gets_every_call_of_a_plain_trace() -> None:
    """A trace with no agent, model nor tool span (no state: the hooks only remember its open
    spans) still gives the downstream every call, ``on_start`` with its parent context
    included (the plain ``on_start`` returns early only when there is no downstream
    ``on_start`` to call)."""
    downstream = Recording()
    processor = ToolEvalSpanProcessor(CONFIG, downstream)
    provider, tracer = setup(processor)
    root_context = Context()
    root = tracer.start_span("GET /items", context=root_context,
                             attributes={"http.request.method": "GET"})
    child_context = trace.set_span_in_context(root)
    child = tracer.start_span("SELECT items", context=child_context,
                              attributes={"db.system.name": "postgresql"})
    assert processor._buffers._traces == {}   # plain: no state
    child.end()
    root.end()
    assert processor.force_flush(10_000)
    assert downstream.started == [(root, root_context), (child, child_context)]
    assert downstream.ending == [child, root]
    assert [s.name for s in downstream.ended] == ["SELECT items", "GET /items"]
    assert processor._buffers._live == {} and processor._buffers._traces == {}
    provider.shutdown()


def test_downstream_overriding_only_on_ending_gets_it_for_every_span() -> None:
    downstream = EndingOnly()
    processor = ToolEvalSpanProcessor(CONFIG, downstream)
    assert start_and_ending_hooks(downstream)[0] is None   # its on_start: not called at all
    provider, tracer = setup(processor)
    started = run(tracer, ["search"])
    assert processor.force_flush(10_000)
    assert downstream.ending == [started[1][0], started[0][0]]
    assert len(downstream.ended) == 2
    provider.shutdown()


def test_a_downstream_without_on_ending_or_none_at_all() -> None:
    class Bare:   # not a SpanProcessor: on_end, shutdown and force_flush only
        def __init__(self) -> None:
            self.ended: list[Any] = []

        def on_end(self, span: ReadableSpan) -> None:
            self.ended.append(span)

        def shutdown(self) -> None:
            pass

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            return True

    bare = Bare()
    for downstream in (bare, None):
        reports: list[RunReport] = []
        processor = ToolEvalSpanProcessor(CONFIG, downstream,  # type: ignore[arg-type]
                                          on_report=reports.append)
        provider, tracer = setup(processor)
        run(tracer, ["search"])
        assert processor.force_flush(10_000)
        assert len(reports) == 1
        provider.shutdown()
    assert len(bare.ended) == 2


def test_the_sdk_hooks_skipped_are_no_ops() -> None:
    """Skipping them is only right while their bodies are empty: this fails on an SDK where one
    of them starts doing something."""
    assert len(_NOOP_HOOKS) >= 2
    for hook in _NOOP_HOOKS:
        (function,) = ast.parse(textwrap.dedent(inspect.getsource(hook))).body
        assert isinstance(function, ast.FunctionDef)
        body = function.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]   # the docstring
        assert all(isinstance(statement, ast.Pass) for statement in body), hook
    exporter = InMemorySpanExporter()
    batch = BatchSpanProcessor(exporter)
    assert start_and_ending_hooks(batch) == (None, None)
    assert start_and_ending_hooks(SimpleSpanProcessor(exporter)) == (None, None)
    recording = Recording()
    assert start_and_ending_hooks(recording) == (recording.on_start, recording._on_ending)
    batch.shutdown()


def test_setting_downstream_rebuilds_the_hooks() -> None:
    reports: list[RunReport] = []
    processor = ToolEvalSpanProcessor(CONFIG, None, on_report=reports.append)
    provider, tracer = setup(processor)
    run(tracer, ["search"])
    # The first run's verdict goes to whichever downstream is set when the grading thread
    # forwards it: let it finish first, or the new downstream may get that root too.
    assert processor.force_flush(10_000)
    downstream = Recording()
    processor.downstream = downstream
    assert processor.downstream is downstream
    started = run(tracer, ["search", "read"])
    assert processor.force_flush(10_000)
    assert downstream.started == started
    assert len(downstream.ending) == len(downstream.ended) == 3
    assert [len(r.run.calls) for r in reports] == [1, 2]   # tracked before and after
    provider.shutdown()


def test_a_subclass_override_of_a_hook_is_what_the_sdk_calls() -> None:
    class Counting(ToolEvalSpanProcessor):
        ends = 0

        def on_end(self, span: ReadableSpan) -> None:
            type(self).ends += 1
            super().on_end(span)

    downstream = Recording()
    reports: list[RunReport] = []
    processor = Counting(CONFIG, downstream, on_report=reports.append)
    provider, tracer = setup(processor)
    run(tracer, ["search"])
    assert processor.force_flush(10_000)
    assert Counting.ends == 2 and len(reports) == 1
    assert len(downstream.started) == len(downstream.ending) == len(downstream.ended) == 2
    provider.shutdown()


def test_after_shutdown_spans_are_forwarded_not_tracked() -> None:
    downstream = Recording()
    processor = ToolEvalSpanProcessor(CONFIG, downstream)
    provider, tracer = setup(processor)
    assert processor.shutdown()
    started = run(tracer, ["search"])
    assert downstream.started == started
    assert len(downstream.ending) == len(downstream.ended) == 2
    assert processor.stats()["open_traces"] == 0 and processor.stats().get("runs", 0) == 0
    provider.shutdown()


def test_spans_of_other_classes_are_contained_and_forwarded() -> None:
    downstream = Recording()
    processor = ToolEvalSpanProcessor(CONFIG, downstream)
    # A ReadableSpan built by hand keeps a plain dict of attributes, not the SDK's fields.
    plain = ReadableSpan("execute_tool search", attributes={"gen_ai.tool.name": "search"})
    processor.on_start(plain)   # type: ignore[arg-type]
    processor._on_ending(plain)   # type: ignore[arg-type]
    processor.on_end(plain)
    assert downstream.started == [(plain, None)]
    assert downstream.ending == downstream.ended == [plain]
    processor.shutdown()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_child_tracks_in_its_own_buffers() -> None:
    processor = ToolEvalSpanProcessor(CONFIG, Recording())
    provider, tracer = setup(processor)
    root = tracer.start_span("invoke_agent a", attributes=AGENT)   # open across the fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: its hooks must use its own (new, empty) buffers, not the parent's
        try:
            os.close(read)
            before = processor.stats()["open_traces"]
            tracer.start_span("execute_tool search", context=trace.set_span_in_context(root),
                              attributes={"gen_ai.tool.name": "search"})
            os.write(write, f"{before} {processor.stats()['open_traces']}".encode())
        finally:
            os._exit(0)
    os.close(write)
    got = os.read(read, 100).decode()
    os.waitpid(pid, 0)
    assert got == "0 1"   # the child span's trace is new to the child
    assert processor.stats()["open_traces"] == 1
    root.end()
    provider.shutdown()
