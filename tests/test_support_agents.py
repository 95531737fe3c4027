"""The offline framework runners in ``tests.support.agents`` emit the spans we rely on."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.agents import (
    DEFAULT_SCRIPT,
    FINAL_ANSWER,
    ScriptExhausted,
    run_langgraph_weather,
    run_pydantic_ai_weather,
)

pytestmark = pytest.mark.frameworks

EXPECTED_CALLS = [
    ("convert_temp", {"celsius": 21.0}),
    ("get_weather", {"city": "Lyon"}),
    ("get_weather", {"city": "Paris"}),
    ("lookup_city", {"query": "paris"}),
]


class StartAttributeRecorder(SpanProcessor):
    """Remember each span's attributes as they were at ``on_start``."""

    def __init__(self) -> None:
        self.at_start: dict[int, dict[str, Any]] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.at_start[span.context.span_id] = dict(span.attributes or {})


def _provider() -> tuple[TracerProvider, InMemorySpanExporter, StartAttributeRecorder]:
    """A fresh provider exporting to memory, plus an on_start recorder."""
    provider = TracerProvider()
    recorder = StartAttributeRecorder()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(recorder)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter, recorder


def _canonical(calls: Sequence[tuple[str, dict[str, Any]]]) -> list[tuple[str, str]]:
    """Order-insensitive, comparable form of (tool, args) pairs."""
    return sorted((name, json.dumps(args, sort_keys=True)) for name, args in calls)


def _only_root(spans: Sequence[ReadableSpan]) -> ReadableSpan:
    roots = [span for span in spans if span.parent is None]
    assert len(roots) == 1, [span.name for span in roots]
    assert len({span.context.trace_id for span in spans}) == 1
    return roots[0]


# --------------------------------------------------------------------------- pydantic-ai


@pytest.fixture
def _pydantic_ai() -> None:
    pytest.importorskip("pydantic_ai")


@pytest.mark.usefixtures("_pydantic_ai")
def test_pydantic_ai_default_script_emits_genai_tool_spans() -> None:
    provider, exporter, recorder = _provider()

    assert run_pydantic_ai_weather(provider) == FINAL_ANSWER

    spans = exporter.get_finished_spans()
    assert {span.instrumentation_scope.name for span in spans} == {"pydantic-ai"}
    root = _only_root(spans)
    assert root.name == "invoke_agent weather_agent"
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == "weather_agent"
    assert root.attributes["final_result"] == FINAL_ANSWER

    by_op: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        by_op.setdefault(str(span.attributes.get("gen_ai.operation.name")), []).append(span)
    assert len(by_op["chat"]) == len(DEFAULT_SCRIPT)
    tools = by_op["execute_tool"]
    assert all(span.parent.span_id == root.context.span_id for span in tools + by_op["chat"])
    assert all(span.name == f"execute_tool {span.attributes['gen_ai.tool.name']}" for span in tools)
    calls = [
        (
            span.attributes["gen_ai.tool.name"],
            json.loads(span.attributes["gen_ai.tool.call.arguments"]),
        )
        for span in tools
    ]
    assert _canonical(calls) == _canonical(EXPECTED_CALLS)
    results = {
        json.dumps(json.loads(span.attributes["gen_ai.tool.call.arguments"])): span.attributes[
            "gen_ai.tool.call.result"
        ]
        for span in tools
    }
    assert results['{"celsius": 21.0}'] == "69.8"
    assert results['{"query": "paris"}'] == "Paris"
    assert json.loads(results['{"city": "Lyon"}'])["temp_c"] == 18.0
    assert sorted(span.attributes["gen_ai.tool.call.id"] for span in tools) == [
        "call_0_0",
        "call_1_0",
        "call_2_0",
        "call_2_1",
    ]

    # Identity attributes are passed at span creation; results only arrive before on_end.
    start = recorder.at_start
    assert start[root.context.span_id]["gen_ai.operation.name"] == "invoke_agent"
    for span in tools:
        at_start = start[span.context.span_id]
        assert at_start["gen_ai.tool.name"] == span.attributes["gen_ai.tool.name"]
        assert "gen_ai.tool.call.arguments" in at_start
        assert "gen_ai.tool.call.result" not in at_start
    assert all(start[s.context.span_id]["gen_ai.operation.name"] == "chat" for s in by_op["chat"])


@pytest.mark.usefixtures("_pydantic_ai")
def test_pydantic_ai_custom_script_and_agent_name() -> None:
    provider, exporter, _ = _provider()
    script = [[("convert_temp", {"celsius": 0})], "0C is 32F"]

    assert run_pydantic_ai_weather(provider, script=script, agent_name="converter") == "0C is 32F"

    spans = exporter.get_finished_spans()
    assert _only_root(spans).name == "invoke_agent converter"
    (tool,) = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    assert tool.attributes["gen_ai.tool.name"] == "convert_temp"
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"celsius": 0}
    assert tool.attributes["gen_ai.tool.call.result"] == "32.0"


@pytest.mark.usefixtures("_pydantic_ai")
def test_pydantic_ai_script_exhausted_is_loud() -> None:
    provider, _, _ = _provider()
    with pytest.raises(ScriptExhausted):
        run_pydantic_ai_weather(provider, script=[[("lookup_city", {"query": "x"})]])


# --------------------------------------------------------------------------- LangGraph


@pytest.fixture
def _langgraph() -> None:
    pytest.importorskip("langgraph")
    pytest.importorskip("openinference.instrumentation.langchain")


def _by_kind(spans: Sequence[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        out.setdefault(str(span.attributes.get("openinference.span.kind")), []).append(span)
    return out


def _tool_input_args(span: ReadableSpan, arg_name: str) -> dict[str, Any]:
    """OpenInference records a lone string argument bare, anything else as JSON."""
    raw = span.attributes["input.value"]
    if span.attributes.get("input.mime_type") == "application/json":
        return json.loads(raw)
    return {arg_name: raw}


@pytest.mark.usefixtures("_langgraph")
def test_langgraph_default_script_emits_openinference_spans() -> None:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    provider, exporter, recorder = _provider()

    assert run_langgraph_weather(provider) == FINAL_ANSWER
    assert not LangChainInstrumentor().is_instrumented_by_opentelemetry

    spans = exporter.get_finished_spans()
    assert {span.instrumentation_scope.name for span in spans} == {
        "openinference.instrumentation.langchain"
    }
    ids = {span.context.span_id: span for span in spans}
    root = _only_root(spans)
    assert root.name == "LangGraph"
    assert root.attributes["openinference.span.kind"] == "CHAIN"

    kinds = _by_kind(spans)
    assert [s.name for s in kinds["AGENT"]] == ["agent"] * len(DEFAULT_SCRIPT)
    assert all(ids[s.parent.span_id] is root for s in kinds["AGENT"])
    assert len(kinds["LLM"]) == len(DEFAULT_SCRIPT)
    assert all(ids[s.parent.span_id].name == "agent" for s in kinds["LLM"])

    tools = kinds["TOOL"]
    assert all(span.name == span.attributes["tool.name"] for span in tools)
    assert all(ids[span.parent.span_id].name == "tools" for span in tools)
    assert all(ids[ids[span.parent.span_id].parent.span_id] is root for span in tools)
    arg_names = {"lookup_city": "query", "get_weather": "city", "convert_temp": "celsius"}
    calls = [(span.name, _tool_input_args(span, arg_names[span.name])) for span in tools]
    assert _canonical(calls) == _canonical(EXPECTED_CALLS)

    # The model's requested calls, as recorded on the LLM spans.
    requested = []
    for span in kinds["LLM"]:
        prefix = "llm.output_messages.0.message.tool_calls"
        index = 0
        while f"{prefix}.{index}.tool_call.function.name" in span.attributes:
            requested.append(
                (
                    span.attributes[f"{prefix}.{index}.tool_call.function.name"],
                    json.loads(span.attributes[f"{prefix}.{index}.tool_call.function.arguments"]),
                )
            )
            index += 1
    assert _canonical(requested) == _canonical(EXPECTED_CALLS)

    # OpenInference starts spans bare and sets every attribute just before on_end.
    assert all(recorder.at_start[span.context.span_id] == {} for span in spans)


@pytest.mark.usefixtures("_langgraph")
def test_langgraph_repeated_runs_go_to_their_own_provider() -> None:
    runs = [_provider() for _ in range(3)]
    for provider, _, _ in runs:
        assert run_langgraph_weather(provider) == FINAL_ANSWER
    counts = [len(exporter.get_finished_spans()) for _, exporter, _ in runs]
    assert counts[0] > 0 and counts == [counts[0]] * 3
    assert all(
        len({s.context.trace_id for s in exporter.get_finished_spans()}) == 1
        for _, exporter, _ in runs
    )


@pytest.mark.usefixtures("_langgraph")
def test_langgraph_custom_script_and_agent_named_root() -> None:
    provider, exporter, _ = _provider()
    script = [[("get_weather", {"city": "Lyon"})], "Lyon 18C"]

    assert run_langgraph_weather(provider, script=script, graph_name="weather_agent") == "Lyon 18C"

    spans = exporter.get_finished_spans()
    root = _only_root(spans)
    assert root.name == "weather_agent"
    assert root.attributes["openinference.span.kind"] == "AGENT"
    (tool,) = _by_kind(spans)["TOOL"]
    assert tool.attributes["tool.name"] == "get_weather"
    assert tool.attributes["input.value"] == "Lyon"
    assert json.loads(tool.attributes["output.value"])["data"]["tool_call_id"] == "call_0_0"


@pytest.mark.usefixtures("_langgraph")
def test_langgraph_script_exhausted_is_loud_and_uninstruments() -> None:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    provider, exporter, _ = _provider()
    with pytest.raises(ScriptExhausted):
        run_langgraph_weather(provider, script=[[("lookup_city", {"query": "x"})]])
    assert not LangChainInstrumentor().is_instrumented_by_opentelemetry
    assert exporter.get_finished_spans()  # the failed run was still traced
