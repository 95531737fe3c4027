"""A LangGraph research agent on a scripted chat model, graded live by otel-tooleval.

    python examples/langgraph/agent.py            # offline; one verdict line per run
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 python examples/langgraph/agent.py

The graph (agent node -> ToolNode -> agent ... -> END) is traced by OpenInference's
``LangChainInstrumentor``: the graph is the root span, each chat-model call an ``LLM`` span and
each tool a ``TOOL`` span with ``tool.name``. The chat model replays a script, so nothing leaves
the machine and no API key is needed. Two runs are played: one that searches, reads an https page
and computes (PASS) and one that fetches a plain-http page without searching first (FAIL:
``research-rules`` and ``research-order``, see graders.yaml).

With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, ``otel_tooleval.install()`` exports traces (the root
spans carry the verdicts), log events and metrics over OTLP; without it the spans stay in memory.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_tooleval

HERE = Path(__file__).resolve().parent
PROMPT = "How many years passed between the first OpenTelemetry release and today (2026)?"

# One model turn per entry: a list of (tool, arguments) calls, or the final answer.
SCENARIOS: dict[str, list[Any]] = {
    "search-read-compute": [
        [("web_search", {"query": "OpenTelemetry first release", "max_results": 3})],
        [("fetch_page", {"url": "https://opentelemetry.io/about/", "max_chars": 2000})],
        [("calculator", {"expression": "2026 - 2019", "precision": 0})],
        "OpenTelemetry was first released in 2019: 7 years ago.",
    ],
    "plain-http-shortcut": [
        [("fetch_page", {"url": "http://otel-history.example/", "max_chars": 2000})],
        [("calculator", {"expression": "2026 - 2019", "precision": 0})],
        "7 years.",
    ],
}


@tool
def web_search(query: str, max_results: int = 5) -> list[dict[str, str]]:
    """Search the web; return titles and URLs."""
    return [{"title": "About OpenTelemetry", "url": "https://opentelemetry.io/about/"}][:max_results]


@tool
def fetch_page(url: str, max_chars: int = 2000) -> str:
    """Fetch a web page and return its text."""
    return "OpenTelemetry was formed in 2019 by merging OpenTracing and OpenCensus."[:max_chars]


@tool
def calculator(expression: str, precision: int = 2) -> str:
    """Evaluate a subtraction or addition of two integers, e.g. '2026 - 2019'."""
    left, op, right = expression.split()
    value = int(left) - int(right) if op == "-" else int(left) + int(right)
    return f"{value:.{precision}f}"


TOOLS = [web_search, fetch_page, calculator]


class ScriptedChatModel(BaseChatModel):
    """A chat model that plays ``turns`` in order (the turn index = AI messages so far)."""

    turns: list[Any]

    @property
    def _llm_type(self) -> str:
        return "scripted-chat"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        index = sum(isinstance(m, AIMessage) for m in messages)
        turn = self.turns[index]
        if isinstance(turn, str):
            message = AIMessage(content=turn, id=f"msg_{index}")
        else:
            message = AIMessage(content="", id=f"msg_{index}", tool_calls=[
                {"name": name, "args": args, "id": f"call_{index}_{i}", "type": "tool_call"}
                for i, (name, args) in enumerate(turn)])
        return ChatResult(generations=[ChatGeneration(message=message)])

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


def build_graph(model: BaseChatModel) -> Any:
    """START -> agent -> (tools -> agent)* -> END over the messages state."""
    bound = model.bind_tools(TOOLS)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(TOOLS))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "agent")
    return graph.compile(name="research_agent")  # the root span's name = the run's agent name


def start_tooleval(reports: list[otel_tooleval.RunReport]) -> Any:
    """Set up a global tracer provider that grades live; return it (or the OTLP installation).

    Either has ``force_flush()`` (grades every finished run) and ``shutdown()``.
    """
    config = HERE / "graders.yaml"
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        # Traces, metrics and logs over OTLP, configured by the OTEL_EXPORTER_OTLP_* variables.
        return otel_tooleval.install(config, service_name="langgraph-research",
                                     on_report=reports.append)
    # Offline: the ten lines of docs/python-api.md, with an in-memory exporter instead of OTLP.
    provider = TracerProvider()
    provider.add_span_processor(otel_tooleval.ToolEvalSpanProcessor(
        config, downstream=SimpleSpanProcessor(InMemorySpanExporter()), on_report=reports.append))
    trace.set_tracer_provider(provider)
    return provider


def main() -> None:
    reports: list[otel_tooleval.RunReport] = []
    telemetry = start_tooleval(reports)
    LangChainInstrumentor().instrument()  # OpenInference, into the global tracer provider
    for scenario, turns in SCENARIOS.items():
        done = len(reports)
        build_graph(ScriptedChatModel(turns=turns)).invoke(
            {"messages": [HumanMessage(content=PROMPT)]})
        telemetry.force_flush()  # grades the finished run (grading runs off this thread)
        for report in reports[done:]:
            failed = ", ".join(report.failed) or "-"
            print(f"{report.run.trace_id_hex}  {'PASS' if report.passed else 'FAIL'}  "
                  f"{scenario}  failed: {failed}")
    LangChainInstrumentor().uninstrument()
    telemetry.shutdown()


if __name__ == "__main__":
    main()
