"""How a ToolEvalSpanProcessor was registered (issue 28): no downstream, beside its own
downstream, no span at all; each a warning, at most once per processor, never an exception."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import ToolEvalSpanProcessor

CONFIG = {"graders": [{"name": "no-delete", "type": "tool-call-count",
                       "tool_calls_count": {"delete_file": ["==", 0]}}]}
LOGGER = "otel_tooleval"


def run_agent(provider: TracerProvider, runs: int = 2) -> None:
    tracer = provider.get_tracer("agent")
    for _ in range(runs):
        with tracer.start_as_current_span("invoke_agent a", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}), \
                tracer.start_as_current_span("execute_tool search", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}):
            pass


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_no_downstream_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    provider = TracerProvider()
    provider.add_span_processor(ToolEvalSpanProcessor(CONFIG))
    with caplog.at_level(logging.WARNING, LOGGER):
        run_agent(provider)
        provider.shutdown()
    said = warnings(caplog)
    assert len(said) == 1, said
    assert "has no downstream: the verdicts (the graded root spans) reach no span exporter" \
        in said[0] and "downstream=BatchSpanProcessor(OTLPSpanExporter())" in said[0]


def test_no_downstream_with_on_report_is_a_choice(caplog: pytest.LogCaptureFixture) -> None:
    got: list[object] = []
    provider = TracerProvider()
    provider.add_span_processor(ToolEvalSpanProcessor(CONFIG, on_report=got.append))
    with caplog.at_level(logging.WARNING, LOGGER):
        run_agent(provider)
        provider.shutdown()
    assert warnings(caplog) == [] and len(got) == 2


def test_beside_its_own_downstream_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    exporter = InMemorySpanExporter()
    downstream = SimpleSpanProcessor(exporter)
    provider = TracerProvider()
    provider.add_span_processor(downstream)
    provider.add_span_processor(ToolEvalSpanProcessor(CONFIG, downstream=downstream))
    with caplog.at_level(logging.WARNING, LOGGER):
        run_agent(provider)
        provider.shutdown()
    said = [m for m in warnings(caplog) if "otel-tooleval" in m]
    assert len(said) == 1, said
    assert ("downstream (SimpleSpanProcessor) is also registered on the provider: every span "
            "is exported twice") in said[0]


def test_registered_right_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(ToolEvalSpanProcessor(CONFIG,
                                                      downstream=SimpleSpanProcessor(exporter)))
    with caplog.at_level(logging.WARNING, LOGGER):
        run_agent(provider)
        provider.shutdown()
    assert warnings(caplog) == []
    roots = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert [s.attributes["tooleval.passed"] for s in roots] == [True, True]


def test_no_span_by_shutdown_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    processor = ToolEvalSpanProcessor(CONFIG,
                                      downstream=SimpleSpanProcessor(InMemorySpanExporter()))
    provider = TracerProvider()
    provider.add_span_processor(processor)
    with caplog.at_level(logging.WARNING, LOGGER):
        provider.shutdown()
        processor.shutdown()
    said = warnings(caplog)
    assert len(said) == 1 and "saw no span before shutdown: is the agent instrumented?" \
        in said[0] and "Agent.instrument_all()" in said[0], said


def test_a_failing_check_never_reaches_the_application(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import otel_tooleval.processor as processor_module

    def broken(*args: object, **kwargs: object) -> list[str]:
        raise RuntimeError("boom")

    monkeypatch.setattr(processor_module, "first_span_warnings", broken)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(ToolEvalSpanProcessor(CONFIG,
                                                      downstream=SimpleSpanProcessor(exporter)))
    with caplog.at_level(logging.WARNING, LOGGER):
        run_agent(provider)      # no exception
        provider.shutdown()
    assert len([s for s in exporter.get_finished_spans() if s.parent is None]) == 2
