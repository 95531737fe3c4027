"""The annotated root copy (``_compat.copy_with``) as exporters see it.

The verdict events carry read-only plain mappings instead of the SDK's ``BoundedAttributes``
(which cost a lock each), and the events and links are tuples unless the original dropped some.
What the real OTLP encoder writes must be exactly what it wrote for a copy built the SDK's way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import Link

from otel_tooleval._compat import annotated_copy, copy_with
from otel_tooleval.emit.span import root_attributes, span_events
from tests.support.runs import call, run_of

VERDICT_ATTRS: dict[str, Any] = {
    "gen_ai.evaluation.name": "uses-search", "gen_ai.evaluation.score.value": 0.5,
    "gen_ai.evaluation.score.label": "fail", "gen_ai.evaluation.explanation": "1 of 2 checks",
    "tooleval.grader.type": "tool-calls", "error.type": "budget_exceeded",
    "tooleval.list": ["a", "b"],
}


def _finished_root(limits: SpanLimits | None = None, *, events: int = 2,
                   links: int = 1) -> ReadableSpan:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=limits) if limits else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("other") as other:
        pass
    with tracer.start_as_current_span(
            "invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent", "n": 1},
            links=[Link(other.get_span_context(), {"k": "v"})] * links) as root:
        for i in range(events):
            root.add_event(f"e{i}", {"i": i})
    provider.shutdown()
    return exporter.get_finished_spans()[-1]


def _the_sdk_way(span: ReadableSpan, attributes: Mapping[str, Any],
                 events: Sequence[tuple[str, Mapping[str, Any], int]]) -> ReadableSpan:
    """The copy as the SDK would build it: BoundedAttributes and BoundedLists throughout."""
    merged = {**span.attributes, **attributes}
    all_events: BoundedList[Event] = BoundedList(None)
    all_events.extend(span.events)
    all_events.extend([Event(name, BoundedAttributes(attributes=attrs, immutable=True), ts)
                       for name, attrs, ts in events])
    all_events.dropped = span.dropped_events
    links: BoundedList[Any] = BoundedList(None)
    links.extend(span.links)
    links.dropped = span.dropped_links
    bounded = BoundedAttributes(attributes=merged, immutable=True)
    bounded.dropped = span.dropped_attributes
    return ReadableSpan(
        name=span.name, context=span.context, parent=span.parent, resource=span.resource,
        attributes=bounded, events=all_events, links=links, kind=span.kind,
        status=span.status, start_time=span.start_time, end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope)


@pytest.mark.parametrize("limits", [None, SpanLimits(max_events=1, max_links=0,
                                                     max_span_attributes=1)],
                         ids=["nothing dropped", "events, links and attributes dropped"])
def test_the_otlp_encoding_is_the_sdk_ways(limits: SpanLimits | None) -> None:
    span = _finished_root(limits)
    added = [("gen_ai.evaluation.result", VERDICT_ATTRS, span.end_time or 0),
             ("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "b"}, 7)]
    attributes = {"tooleval.passed": False, "tooleval.failed": ["uses-search"]}

    copy = copy_with(span, attributes, added)

    assert encode_spans([copy]) == encode_spans([_the_sdk_way(span, attributes, added)])
    assert (copy.dropped_events, copy.dropped_links, copy.dropped_attributes) == (
        span.dropped_events, span.dropped_links, span.dropped_attributes)
    if limits is not None:
        assert (copy.dropped_events, copy.dropped_links, copy.dropped_attributes) == (1, 1, 1)
    assert copy.to_json()     # the console exporter's path reads the events' mappings too


def test_verdict_event_attributes_are_a_read_only_private_copy() -> None:
    span = _finished_root()
    given = dict(VERDICT_ATTRS)
    copy = copy_with(span, {}, [("gen_ai.evaluation.result", given, 1)])
    given["gen_ai.evaluation.name"] = "changed later"

    attrs = copy.events[-1].attributes
    assert attrs is not None
    assert attrs["gen_ai.evaluation.name"] == "uses-search"
    assert attrs["tooleval.list"] == ("a", "b")         # lists become tuples, as the SDK's
    assert copy.events[-1].dropped_attributes == 0
    with pytest.raises(TypeError):
        attrs["x"] = 1  # type: ignore[index]
    # the original's own events are passed through untouched
    assert [e.name for e in copy.events] == ["e0", "e1", "gen_ai.evaluation.result"]


def test_annotated_copy_of_a_report() -> None:
    from otel_tooleval import load_config
    from otel_tooleval.grading import grade_run

    config = load_config({"graders": [{"name": "s", "type": "tool-calls",
                                       "config": {"required": ["search"]}}]})
    report = grade_run(run_of([call("search", {"q": "x"})]), config)
    assert report is not None
    span = _finished_root()
    copy = annotated_copy(span, report)
    reference = _the_sdk_way(span, root_attributes(report),
                             span_events(report, span.end_time or 0))
    assert encode_spans([copy]) == encode_spans([reference])
