"""The application-thread hooks' shortcuts keep what they replaced (docs/performance-log.md, "Why
the hooks cost 4x as much in the agent loop"): the downstream's ``on_end`` bound once, a C
function as ``_on_ending`` when the downstream has none."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

from otel_tooleval import ToolEvalSpanProcessor
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
