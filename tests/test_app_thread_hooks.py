"""The application-thread hooks' shortcuts keep what they replaced (docs/performance-log.md, "Why
the hooks cost 4x as much in the agent loop"): the downstream's ``on_end`` bound once, a C
function as ``_on_ending`` when the downstream has none, the SDK's ``BatchSpanProcessor.on_end``
inline (its sampled test and its queue's ``emit``)."""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

from otel_tooleval import ToolEvalSpanProcessor, _compat
from otel_tooleval.config import config_from_mapping

NO_GRADERS = config_from_mapping({}, allow_no_graders=True)


class NoEnd:
    """A downstream without ``on_end`` (not a SpanProcessor)."""

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def test_a_downstream_without_on_end_fails_at_each_span_contained(
        caplog: pytest.LogCaptureFixture) -> None:
    processor = ToolEvalSpanProcessor(NO_GRADERS, NoEnd())   # type: ignore[arg-type]
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    with caplog.at_level(logging.ERROR, logger="otel_tooleval"):
        with tracer.start_as_current_span("step", attributes={"http.method": "GET"}):
            pass   # a root that is no run: forwarded at once, by the grading thread
        assert processor.force_flush(10_000)
    assert any("downstream.on_end" in r.getMessage() for r in caplog.records)
    provider.shutdown()


def test_a_downstream_whose_on_end_is_replaced_gets_it_when_set_again() -> None:
    class Recording(SpanProcessor):
        def __init__(self) -> None:
            self.ended: list[Any] = []

        def on_end(self, span: ReadableSpan) -> None:
            self.ended.append(span)

    downstream = Recording()
    processor = ToolEvalSpanProcessor(NO_GRADERS, downstream)
    other: list[Any] = []
    downstream.on_end = other.append   # type: ignore[method-assign]
    processor.downstream = downstream  # looked up again when the downstream is set
    span = ReadableSpan("plain")
    processor.on_end(span)
    assert other == [span] and downstream.ended == []
    processor.shutdown()


def test_on_ending_without_a_downstream_one_is_a_no_op_of_c() -> None:
    processor = ToolEvalSpanProcessor(NO_GRADERS, NoEnd())   # type: ignore[arg-type]
    span = ReadableSpan("plain")
    processor._on_ending(span)   # type: ignore[arg-type]   # accepted, nothing happens
    assert not hasattr(processor._on_ending, "__code__")   # no Python frame per span
    processor.shutdown()


class RecordingBatch(BatchSpanProcessor):
    """A subclass of the SDK's batch processor that records the names its on_end sees."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        super().__init__(exporter)
        self.seen: list[str] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.seen.append(span.name)
        super().on_end(span)


class QuietSampler(Sampler):
    """Records every span, samples those whose name does not start with ``quiet``."""

    def should_sample(self, parent_context: Any, trace_id: int, name: str, kind: Any = None,
                      attributes: Any = None, links: Any = None,
                      trace_state: Any = None) -> SamplingResult:
        quiet = name.startswith("quiet")
        return SamplingResult(Decision.RECORD_ONLY if quiet else Decision.RECORD_AND_SAMPLE,
                              attributes)

    def get_description(self) -> str:
        return "quiet"


def _traffic(provider: TracerProvider) -> None:
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("GET /items", attributes={"http.route": "/items"}):
        with tracer.start_as_current_span("SELECT items", attributes={"db.system.name": "pg"}):
            pass
        with tracer.start_as_current_span("quiet cache get"):
            pass
        for name in ("embed", "quiet embed"):   # a kind key of no kind: plain_end's way
            with tracer.start_as_current_span(
                    name, attributes={"gen_ai.operation.name": "embeddings"}):
                pass
    with tracer.start_as_current_span("quiet GET /ping"):
        pass
    with tracer.start_as_current_span("POST /chat"), tracer.start_as_current_span(
            "invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}):
        for name in ("execute_tool lookup", "quiet execute_tool fetch"):
            with tracer.start_as_current_span(
                    name, attributes={"gen_ai.operation.name": "execute_tool",
                                      "gen_ai.tool.name": name.split()[-1]}):
                pass


# Named agents: every plain span goes the rare way (``plain_end``), as with a mapping.
NAMED = config_from_mapping({"runs": {"agent_span_names": ["^invoke_agent"]}},
                            allow_no_graders=True)


@pytest.mark.parametrize("config", [NO_GRADERS, NAMED], ids=["plain", "named-agents"])
def test_a_batch_span_processor_downstream_exports_what_it_exports_bare(config: Any) -> None:
    """Its on_end is run inline by the hooks (_compat.batch_emit): sampled spans are queued, a
    recorded span that is not sampled is not, as the SDK's own on_end decides, and the
    application thread never calls BatchSpanProcessor.on_end."""
    bare_exporter, exporter = InMemorySpanExporter(), InMemorySpanExporter()
    bare = TracerProvider(sampler=QuietSampler())
    bare.add_span_processor(BatchSpanProcessor(bare_exporter))
    processor = ToolEvalSpanProcessor(config, BatchSpanProcessor(exporter))
    provider = TracerProvider(sampler=QuietSampler())
    provider.add_span_processor(processor)
    on_end_code = BatchSpanProcessor.on_end.__code__
    calls: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:   # this thread only
        if event == "call" and frame.f_code is on_end_code:
            calls.append(frame.f_locals["span"].name)

    _traffic(bare)
    assert len(calls) == 0
    sys.setprofile(profile)
    try:
        _traffic(bare)
        bare_calls = len(calls)
        calls.clear()
        _traffic(provider)
    finally:
        sys.setprofile(None)
    assert bare_calls == 10 and calls == []
    assert processor.force_flush(10_000)
    bare.shutdown()
    provider.shutdown()
    exported = sorted(span.name for span in exporter.get_finished_spans())
    assert exported == ["GET /items", "POST /chat", "SELECT items", "embed", "execute_tool lookup",
                        "invoke_agent a"]
    assert sorted(2 * exported) == sorted(span.name for span in bare_exporter.get_finished_spans())


def test_the_grading_thread_forwards_through_the_batch_processors_queue_as_the_hooks_do() -> None:
    """With a grader and violation marks (the defaults) the grading thread forwards the held
    tool spans, the run's root with its verdicts and the local roots it decided: through the
    batch processor's queue (``ToolEvalSpanProcessor._forward``), never its ``on_end``, on no
    thread, an unsampled span dropped as the SDK's own ``on_end`` drops it."""
    config = config_from_mapping({"graders": [{"name": "count", "type": "tool-call-count",
                                               "tool_calls_count": {"fetch": ["==", 0]}}]})
    exporter = InMemorySpanExporter()
    processor = ToolEvalSpanProcessor(config, BatchSpanProcessor(exporter))
    provider = TracerProvider(sampler=QuietSampler())
    provider.add_span_processor(processor)
    on_end_code = BatchSpanProcessor.on_end.__code__
    calls: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is on_end_code:
            calls.append(frame.f_locals["span"].name)

    threading.setprofile(profile)   # the grading thread starts with the first root
    sys.setprofile(profile)
    try:
        _traffic(provider)
        assert processor.force_flush(10_000)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)   # type: ignore[arg-type]
    worker = processor._worker
    provider.shutdown()
    assert worker is not None and calls == []
    exported = {span.name: span.attributes or {} for span in exporter.get_finished_spans()}
    assert sorted(exported) == ["GET /items", "POST /chat", "SELECT items", "embed",
                                "execute_tool lookup", "invoke_agent a"]
    # the unsampled call broke the rule: the verdict counts it, its span is not exported
    assert exported["invoke_agent a"]["tooleval.passed"] is False


def test_batch_emit_is_only_for_the_sdks_own_batch_span_processor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    exporter = InMemorySpanExporter()
    batch = BatchSpanProcessor(exporter)
    assert _compat.batch_emit(batch) == batch._batch_processor.emit

    patched = BatchSpanProcessor(exporter)
    patched.on_end = lambda span: None   # type: ignore[method-assign]
    others = [RecordingBatch(exporter), patched, SimpleSpanProcessor(exporter), SpanProcessor(), None]
    assert [_compat.batch_emit(one) for one in others] == [None] * len(others)
    # A wrapper on the class's on_end that passes its __code__ through (as wrapt's does): the
    # wrapper is called.
    sdk_on_end = BatchSpanProcessor.on_end

    class Wrapped:
        __code__ = sdk_on_end.__code__

        def __get__(self, instance: Any, owner: Any = None) -> Any:
            return sdk_on_end.__get__(instance, owner)

    monkeypatch.setattr(BatchSpanProcessor, "on_end", Wrapped())
    assert _compat.batch_emit(batch) is None
    monkeypatch.setattr(BatchSpanProcessor, "on_end", sdk_on_end)
    assert _compat.batch_emit(batch) == batch._batch_processor.emit
    # An SDK whose on_end reads anything else: its on_end is called.
    monkeypatch.setattr(_compat, "_BATCH_ON_END_NAMES", ("context", "emit"))
    assert _compat.batch_emit(batch) is None
    for one in (batch, patched, *others[:1]):
        one.shutdown()


def test_a_batch_span_processor_subclass_gets_every_span_through_its_on_end() -> None:
    exporter = InMemorySpanExporter()
    downstream = RecordingBatch(exporter)
    processor = ToolEvalSpanProcessor(NO_GRADERS, downstream)
    provider = TracerProvider(sampler=QuietSampler())
    provider.add_span_processor(processor)
    _traffic(provider)
    assert processor.force_flush(10_000)
    provider.shutdown()
    assert sorted(downstream.seen) == sorted([
        "GET /items", "SELECT items", "quiet cache get", "embed", "quiet embed", "quiet GET /ping",
        "POST /chat", "invoke_agent a", "execute_tool lookup", "quiet execute_tool fetch"])
    assert len(exporter.get_finished_spans()) == 6


def test_an_unsampled_tool_span_the_guard_marks_is_not_exported_by_the_batch_processor() -> None:
    """Without violation marks a tool span that breaks a guard rule, known as a call only after
    its start, is forwarded as a marked copy through the downstream's own on_end: a sampled one
    is exported with its mark, an unsampled one is not."""
    config = config_from_mapping({"guard": {"disallowed": ["^delete$"]},
                                  "emit": {"violation_marks": False}}, allow_no_graders=True)
    exporter = InMemorySpanExporter()
    processor = ToolEvalSpanProcessor(config, BatchSpanProcessor(exporter))
    provider = TracerProvider(sampler=QuietSampler())
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span(
            "invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}):
        for name in ("execute_tool delete", "quiet execute_tool delete"):
            with tracer.start_as_current_span(
                    name, attributes={"gen_ai.operation.name": "execute_tool"}) as span:
                span.set_attribute("gen_ai.tool.name", "delete")   # checked as it ends
    assert processor.force_flush(10_000)
    provider.shutdown()
    marked = {span.name: (span.attributes or {}).get("tooleval.guard.violation")
              for span in exporter.get_finished_spans()}
    assert marked == {"execute_tool delete": True, "invoke_agent a": None}


class StuckExporter(InMemorySpanExporter):
    """An exporter whose thread is held until ``release`` (an export thread behind)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def export(self, spans: Any) -> Any:
        self.release.wait(10)
        return super().export(spans)


def test_batch_backlog_says_when_the_batch_processors_queue_is_more_than_half_full() -> None:
    exporter = StuckExporter()
    batch = BatchSpanProcessor(exporter, max_queue_size=8, max_export_batch_size=8,
                               schedule_delay_millis=60_000)
    behind = _compat.batch_backlog(batch)
    assert behind is not None and not behind()
    provider = TracerProvider()
    provider.add_span_processor(batch)
    tracer = provider.get_tracer("t")
    for i in range(5):
        tracer.start_span(f"s{i}").end()
    assert behind()   # 5 of 8 queued, none exported
    exporter.release.set()
    provider.shutdown()
    assert len(exporter.get_finished_spans()) == 5
    others = [RecordingBatch(InMemorySpanExporter()), SimpleSpanProcessor(exporter), None]
    assert [_compat.batch_backlog(one) for one in others] == [None] * len(others)
    others[0].shutdown()


def test_the_grading_thread_gives_the_lock_away_while_the_export_thread_is_behind(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without it, a busy loop of agent runs made the batch processor's queue drop spans: the
    grading thread held the interpreter lock while the export thread waited for it."""
    from otel_tooleval import processor as processor_module

    given: list[int] = []
    monkeypatch.setattr(processor_module, "_give_way", lambda: given.append(1))
    batch = BatchSpanProcessor(InMemorySpanExporter())
    processor = ToolEvalSpanProcessor(NO_GRADERS, batch)
    behind = [False]
    processor._backlog = lambda: behind[0]
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("invoke_agent a",
                                      attributes={"gen_ai.operation.name": "invoke_agent"}):
        tracer.start_span("execute_tool x", attributes={"gen_ai.tool.name": "x"}).end()
    assert processor.force_flush(10_000) and given == []
    behind[0] = True
    with tracer.start_as_current_span("invoke_agent a",
                                      attributes={"gen_ai.operation.name": "invoke_agent"}):
        tracer.start_span("execute_tool x", attributes={"gen_ai.tool.name": "x"}).end()
    assert processor.force_flush(10_000) and given
    provider.shutdown()


def test_a_span_forwarded_while_the_downstream_is_replaced_goes_to_the_one_it_reads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The setter sets ``_downstream`` and then rebuilds the hooks (``_install_hooks``, which
    binds ``_to_queue``). A span the grading thread forwards in between, once ``downstream``
    reads as the new processor, goes to the new one: never into the old batch processor's
    queue (here shut down before it was replaced, so the span would be dropped there)."""
    old_exporter, new_exporter = InMemorySpanExporter(), InMemorySpanExporter()
    old, new = BatchSpanProcessor(old_exporter), BatchSpanProcessor(new_exporter)
    processor = ToolEvalSpanProcessor(NO_GRADERS, old)
    made = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(made))
    with provider.get_tracer("t").start_as_current_span("late root"):
        pass
    span, = made.get_finished_spans()
    assert span.__class__ is ReadableSpan and span.context.trace_flags.sampled
    inside, release = threading.Event(), threading.Event()
    batch_emit = _compat.batch_emit

    def slow_batch_emit(downstream: Any) -> Any:   # the setter, half-way through
        if downstream is new:
            inside.set()
            release.wait(10)
        return batch_emit(downstream)

    monkeypatch.setattr("otel_tooleval.processor.batch_emit", slow_batch_emit)
    old.shutdown()   # type: ignore[no-untyped-call]
    setter = threading.Thread(target=setattr, args=(processor, "downstream", new))
    setter.start()
    try:
        assert inside.wait(10) and processor.downstream is new
        processor._forward(span)   # as the grading thread does
    finally:
        release.set()
        setter.join(10)
    assert new.force_flush(10_000)
    assert [s.name for s in new_exporter.get_finished_spans()] == ["late root"]
    assert old_exporter.get_finished_spans() == ()
    processor.shutdown()
    provider.shutdown()
