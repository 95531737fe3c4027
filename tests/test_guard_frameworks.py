"""The live guard with real frameworks, offline: pydantic-ai refusing a disallowed tool in its
``before_tool_execute`` hook (``examples/guard/pydantic_ai_guard.py``), and LangGraph under
OpenInference, whose tool spans carry their name and arguments only when they end."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import GuardViolation, ToolEvalSpanProcessor
from tests.support.agents import run_langgraph_weather
from tests.test_examples import offline_env

pytestmark = pytest.mark.frameworks

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "guard" / "pydantic_ai_guard.py"


def _example() -> ModuleType:
    pytest.importorskip("pydantic_ai")
    spec = importlib.util.spec_from_file_location("pydantic_ai_guard_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _provider(config: Any) -> tuple[TracerProvider, InMemorySpanExporter,
                                    list[GuardViolation]]:
    exporter = InMemorySpanExporter()
    seen: list[GuardViolation] = []
    processor = ToolEvalSpanProcessor(config, downstream=SimpleSpanProcessor(exporter),
                                      on_violation=seen.append)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    return provider, exporter, seen


def _tool_spans(exporter: InMemorySpanExporter, key: str) -> list[ReadableSpan]:
    spans = [s for s in exporter.get_finished_spans() if key in (s.attributes or {})]
    return sorted(spans, key=lambda s: s.start_time or 0)


def test_pydantic_ai_hook_refuses_the_disallowed_tool_before_its_body_runs() -> None:
    example = _example()
    provider, exporter, seen = _provider(example.HERE / "guard.yaml")
    refused: list[GuardViolation] = []
    output = example.run(provider, refused)
    provider.shutdown()
    assert example.RAN == ["get_weather"]            # delete_account's body never ran
    assert output == example.SCRIPT[-1]
    assert [(v.tool, v.rule) for v in refused] == [("delete_account", "disallowed")]
    assert [(v.tool, v.rule) for v in seen] == [("delete_account", "disallowed")]
    tools = _tool_spans(exporter, "gen_ai.tool.name")
    marks = [(s.attributes or {}).get("tooleval.guard.rule") for s in tools]
    assert [(s.attributes or {})["gen_ai.tool.name"] for s in tools] == [
        "delete_account", "get_weather"]
    assert marks == ["disallowed", None]
    assert (tools[0].attributes or {})["pydantic_ai.tool.retry.cause"] == "model_retry"
    # The model was told why: pydantic-ai sends the ModelRetry text back in the next request.
    chats = sorted((s for s in exporter.get_finished_spans() if s.name.startswith("chat")),
                   key=lambda s: s.start_time or 0)
    assert "refused by the guard" in str((chats[1].attributes or {}).get(
        "gen_ai.input.messages", ""))


def test_without_the_hook_the_guard_marks_but_the_tool_runs() -> None:
    """The control: the processor alone observes; only the hook blocks."""
    example = _example()
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import Instrumentation
    from pydantic_ai.models.instrumented import InstrumentationSettings

    provider, _exporter, seen = _provider(example.HERE / "guard.yaml")
    settings = InstrumentationSettings(tracer_provider=provider, version=5,
                                       include_content=True)
    agent = Agent(example.scripted_model(example.SCRIPT), name="unguarded",
                  tools=[example.get_weather, example.delete_account],
                  capabilities=[Instrumentation(settings=settings)])
    agent.run_sync("go")
    provider.shutdown()
    assert example.RAN == ["delete_account", "get_weather"]
    assert [(v.tool, v.rule, v.at) for v in seen] == [("delete_account", "disallowed", "start")]


def test_pydantic_ai_guard_example_runs_as_a_script(tmp_path: Path) -> None:
    pytest.importorskip("pydantic_ai")
    done = subprocess.run([sys.executable, str(EXAMPLE)], cwd=ROOT, env=offline_env(tmp_path),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "tool functions that ran: ['get_weather']" in done.stdout, done.stdout
    assert ("execute_tool delete_account: tooleval.guard.violation=True "
            "tooleval.guard.rule=disallowed") in done.stdout, done.stdout


def test_langgraph_arguments_recorded_at_the_end_are_checked_then() -> None:
    pytest.importorskip("langgraph")
    config = {"guard": {"disallowed": [{"name": "^get_weather$", "args": {"input": "Lyon"}}],
                        "max_calls_per_tool": {"get_weather": 1}}}
    provider, exporter, seen = _provider(config)
    run_langgraph_weather(provider)
    provider.shutdown()
    tools = _tool_spans(exporter, "tool.name")
    names = [(s.attributes or {})["tool.name"] for s in tools]
    assert names == ["lookup_city", "get_weather", "get_weather", "convert_temp"]
    marks = [(s.attributes or {}).get("tooleval.guard.rule") for s in tools]
    # OpenInference writes tool.name only as the span ends: every check happens then, and the
    # forwarded copy carries the mark. The second get_weather (Lyon) is over its limit; the
    # disallowed entry does not match it: OpenInference records a lone string argument bare
    # ("Lyon", not an object), and argument conditions read objects only, as in tool-calls.
    assert marks == [None, None, "max_calls_per_tool", None]
    assert [(v.tool, v.rule, v.at) for v in seen] == [("get_weather", "max_calls_per_tool", "end")]
    marked = tools[2]
    assert [e.name for e in marked.events][-1] == "tooleval.guard.violation"
