"""Run real agent frameworks offline, with scripted models, into a caller-given TracerProvider.

Two runners share one tiny weather "world" (three tools) and one script format:

* :func:`run_pydantic_ai_weather` drives a pydantic-ai ``Agent`` through ``FunctionModel``.
* :func:`run_langgraph_weather` drives a LangGraph ``StateGraph`` (agent node + ``ToolNode``)
  through :class:`ScriptedChatModel`, traced by OpenInference's ``LangChainInstrumentor``.

A *script* is a sequence of turns, one per model call. A turn is either a final answer (``str``)
or a list of ``(tool_name, args_dict)`` pairs that the model asks to run (in parallel when there
is more than one). The turn to play is chosen from how many model responses are already in the
conversation, so a run that outlives its script fails loudly instead of looping.

Framework imports are deferred to call time so this module imports without the optional
``frameworks`` extra installed.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_core.messages import AIMessage, BaseMessage
    from opentelemetry.trace import TracerProvider

__all__ = [
    "DEFAULT_PROMPT",
    "DEFAULT_SCRIPT",
    "Script",
    "ScriptExhausted",
    "ToolCall",
    "Turn",
    "convert_temp",
    "get_weather",
    "lookup_city",
    "make_scripted_chat_model",
    "run_langgraph_weather",
    "run_pydantic_ai_weather",
]

ToolCall = tuple[str, Mapping[str, Any]]
Turn = str | Sequence[ToolCall]
Script = Sequence[Turn]

DEFAULT_PROMPT = "What's the weather in Paris and Lyon? Give Paris in Fahrenheit too."
FINAL_ANSWER = "Paris 21C (69.8F), Lyon 18C"
DEFAULT_SCRIPT: tuple[Turn, ...] = (
    [("lookup_city", {"query": "paris"})],
    [("get_weather", {"city": "Paris"})],
    [("get_weather", {"city": "Lyon"}), ("convert_temp", {"celsius": 21.0})],
    FINAL_ANSWER,
)
INSTRUCTIONS = "You are a weather assistant. Use the tools to answer."

_WEATHER: dict[str, dict[str, Any]] = {
    "Paris": {"temp_c": 21.0, "conditions": "sunny"},
    "Lyon": {"temp_c": 18.0, "conditions": "cloudy"},
}


class ScriptExhausted(RuntimeError):
    """The model was called more times than the script has turns."""


# --------------------------------------------------------------------------- tools


def lookup_city(query: str) -> str:
    """Resolve a free-text place query to a canonical city name."""
    return query.strip().title()


def get_weather(city: str) -> dict:
    """Return the current weather for a city (temperature in Celsius)."""
    return {"city": city, **_WEATHER.get(city, {"temp_c": None, "conditions": "unknown"})}


def convert_temp(celsius: float) -> float:
    """Convert a temperature from Celsius to Fahrenheit."""
    return round(celsius * 9 / 5 + 32, 1)


_TOOLS = (lookup_city, get_weather, convert_temp)


# --------------------------------------------------------------------------- script helpers


def _normalise_script(script: Script | None) -> list[str | list[tuple[str, dict[str, Any]]]]:
    """Validate a script and copy it into plain lists/dicts."""
    turns: list[str | list[tuple[str, dict[str, Any]]]] = []
    for index, turn in enumerate(DEFAULT_SCRIPT if script is None else script):
        if isinstance(turn, str):
            turns.append(turn)
            continue
        calls: list[tuple[str, dict[str, Any]]] = []
        for call in turn:
            name, args = call
            if not isinstance(name, str) or not isinstance(args, Mapping):
                raise TypeError(f"turn {index}: expected (tool_name, args_dict), got {call!r}")
            calls.append((name, dict(args)))
        if not calls:
            raise ValueError(f"turn {index}: a tool turn needs at least one call")
        turns.append(calls)
    if not turns:
        raise ValueError("script must have at least one turn")
    return turns


def _turn_at(turns: Sequence[Any], index: int) -> Any:
    """Return turn ``index`` or raise :class:`ScriptExhausted`."""
    if index >= len(turns):
        raise ScriptExhausted(
            f"scripted model called for turn {index} but the script has only {len(turns)} turns"
        )
    return turns[index]


def _call_id(turn: int, position: int) -> str:
    """Deterministic tool-call id shared by both frameworks."""
    return f"call_{turn}_{position}"


# --------------------------------------------------------------------------- pydantic-ai


def run_pydantic_ai_weather(
    tracer_provider: TracerProvider,
    *,
    script: Script | None = None,
    agent_name: str = "weather_agent",
    prompt: str = DEFAULT_PROMPT,
) -> str:
    """Run a pydantic-ai weather agent on a scripted ``FunctionModel``; return its output.

    Instrumentation format version 5 (the current default, and the non-deprecated form of the
    v3+ shape) names the root span ``invoke_agent <name>`` with
    ``gen_ai.operation.name=invoke_agent`` and emits ``execute_tool <tool>`` spans carrying
    ``gen_ai.tool.name`` / ``gen_ai.tool.call.arguments`` / ``gen_ai.tool.call.result``
    (the last two only because ``include_content=True``).
    """
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import Instrumentation
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings

    turns = _normalise_script(script)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        index = sum(isinstance(message, ModelResponse) for message in messages)
        turn = _turn_at(turns, index)
        if isinstance(turn, str):
            return ModelResponse(parts=[TextPart(turn)])
        return ModelResponse(
            parts=[
                ToolCallPart(name, args, tool_call_id=_call_id(index, position))
                for position, (name, args) in enumerate(turn)
            ]
        )

    settings = InstrumentationSettings(
        tracer_provider=tracer_provider, version=5, include_content=True
    )
    agent = Agent(
        FunctionModel(respond, model_name="scripted"),
        name=agent_name,
        instructions=INSTRUCTIONS,
        tools=list(_TOOLS),
        capabilities=[Instrumentation(settings=settings)],
    )
    return agent.run_sync(prompt).output


# --------------------------------------------------------------------------- LangGraph


def _ai_message_for(turns: Sequence[Any], messages: Sequence[BaseMessage]) -> AIMessage:
    """Build the scripted ``AIMessage`` for the next turn of ``messages``."""
    from langchain_core.messages import AIMessage

    index = sum(isinstance(message, AIMessage) for message in messages)
    turn = _turn_at(turns, index)
    if isinstance(turn, str):
        return AIMessage(content=turn, id=f"msg_{index}")
    return AIMessage(
        content="",
        id=f"msg_{index}",
        tool_calls=[
            {"name": name, "args": args, "id": _call_id(index, position), "type": "tool_call"}
            for position, (name, args) in enumerate(turn)
        ],
    )


@functools.cache
def _scripted_chat_model_class() -> type:
    """Define (once) the ``BaseChatModel`` subclass used by :func:`make_scripted_chat_model`."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.utils.function_calling import convert_to_openai_tool

    class ScriptedChatModel(BaseChatModel):
        """Chat model whose reply is picked by counting AI messages already in the prompt."""

        turns: list[Any]
        model_name: str = "scripted"

        @property
        def _llm_type(self) -> str:
            return "scripted-chat"

        @property
        def _identifying_params(self) -> dict[str, Any]:
            return {"model_name": self.model_name}

        def _generate(
            self,
            messages: list[BaseMessage],
            stop: list[str] | None = None,
            run_manager: Any = None,
            **kwargs: Any,
        ) -> ChatResult:
            message = _ai_message_for(self.turns, messages)
            return ChatResult(generations=[ChatGeneration(message=message)])

        def bind_tools(
            self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any
        ) -> Any:
            """Bind OpenAI-format tool schemas, as a real provider integration would."""
            if tool_choice is not None:
                kwargs["tool_choice"] = tool_choice
            return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    return ScriptedChatModel


def make_scripted_chat_model(script: Script | None = None) -> Any:
    """Return a ``BaseChatModel`` that replays ``script`` and supports ``bind_tools``."""
    return _scripted_chat_model_class()(turns=_normalise_script(script))


def _build_weather_graph(model: Any, *, graph_name: str) -> Any:
    """Compile ``START -> agent -> (tools -> agent)* -> END`` over ``MessagesState``."""
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import StructuredTool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    tools = [StructuredTool.from_function(fn) for fn in _TOOLS]
    bound = model.bind_tools(tools)

    def agent(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"], config)]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "agent")
    return graph.compile(name=graph_name)


# LangChainInstrumentor is a process-wide singleton that patches BaseCallbackManager.__init__.
# ``instrument()`` while already instrumented is a silent no-op (it would keep the *first*
# provider), so each run instruments with its own provider, runs, and uninstruments, all under
# this lock so concurrent runs cannot swap providers under each other.
_LANGCHAIN_INSTRUMENTATION_LOCK = threading.Lock()


@contextmanager
def langchain_instrumented(tracer_provider: TracerProvider) -> Iterator[None]:
    """Instrument LangChain into ``tracer_provider`` for the duration of the block only."""
    from openinference.instrumentation.langchain import LangChainInstrumentor

    with _LANGCHAIN_INSTRUMENTATION_LOCK:
        instrumentor = LangChainInstrumentor()
        if instrumentor.is_instrumented_by_opentelemetry:
            raise RuntimeError(
                "LangChainInstrumentor is already instrumented elsewhere in this process; "
                "spans would go to that provider. Call uninstrument() first."
            )
        instrumentor.instrument(tracer_provider=tracer_provider, raise_exception_on_conflict=True)
        if not instrumentor.is_instrumented_by_opentelemetry:  # pragma: no cover - defensive
            raise RuntimeError("LangChainInstrumentor.instrument() did not take effect")
        try:
            yield
        finally:
            instrumentor.uninstrument()


def run_langgraph_weather(
    tracer_provider: TracerProvider,
    *,
    script: Script | None = None,
    prompt: str = DEFAULT_PROMPT,
    graph_name: str = "LangGraph",
) -> str:
    """Run a LangGraph weather agent on a scripted chat model; return the final text.

    ``graph_name`` becomes the root span name. OpenInference marks any run whose name contains
    "agent" as ``openinference.span.kind=AGENT``, so the default root is ``CHAIN`` while the
    ``agent`` node below it is ``AGENT``; pass e.g. ``"weather_agent"`` for an AGENT root.
    """
    from langchain_core.messages import HumanMessage

    graph = _build_weather_graph(make_scripted_chat_model(script), graph_name=graph_name)
    with langchain_instrumented(tracer_provider):
        result = graph.invoke({"messages": [HumanMessage(content=prompt)]})
    content = result["messages"][-1].content
    return content if isinstance(content, str) else str(content)
