"""A pydantic-ai agent whose before-tool hook asks the live guard, and refuses what it forbids.

    python examples/guard/pydantic_ai_guard.py        # offline: scripted model, no API key

The guard's rules are in ``guard.yaml`` next to this file (no ``delete_*`` tool, at most two
``get_weather`` calls per run, no identical call twice). ``ToolEvalSpanProcessor`` checks
every tool span as it starts and marks the offenders (``tooleval.guard.violation``); the
agent's ``before_tool_execute`` hook calls ``otel_tooleval.check_call`` and answers a forbidden
call with ``ModelRetry``, so the tool's function never runs and the model is told why.

The scripted model asks for ``delete_account`` first, then for the weather, then answers.
The script prints what the hook refused, whether ``delete_account`` ran (it does not), and
the guard attributes of each exported tool span.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.capabilities import Hooks, Instrumentation
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

from otel_tooleval import GuardViolation, ToolEvalSpanProcessor, check_call

HERE = Path(__file__).resolve().parent

SCRIPT: list[Any] = [
    [("delete_account", {"user": "alice"})],
    [("get_weather", {"city": "Paris"})],
    "Paris: sunny, 21C. (Deleting accounts is not something I may do.)",
]

#: Tool functions that actually ran, in order (what the test checks).
RAN: list[str] = []


def get_weather(city: str) -> dict[str, Any]:
    """Current weather of a city, in Celsius."""
    RAN.append("get_weather")
    return {"city": city, "temp_c": 21.0, "conditions": "sunny"}


def delete_account(user: str) -> str:
    """Delete a user's account (the guard forbids it)."""
    RAN.append("delete_account")
    return f"deleted {user}"


def scripted_model(turns: list[Any]) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = turns[min(sum(isinstance(m, ModelResponse) for m in messages), len(turns) - 1)]
        if isinstance(turn, str):
            return ModelResponse(parts=[TextPart(turn)])
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"call_{i}")
                                    for i, (name, args) in enumerate(turn)])

    return FunctionModel(respond, model_name="scripted")


def guarded_hooks(refused: list[GuardViolation]) -> Hooks[Any]:
    """A ``Hooks`` capability whose ``before_tool_execute`` refuses what the guard forbids."""
    hooks: Hooks[Any] = Hooks()

    @hooks.on.before_tool_execute
    async def ask_the_guard(ctx: RunContext[Any], *, call: ToolCallPart, tool_def: Any,
                            args: Any) -> Any:
        violation = check_call(call.tool_name, args)
        if violation is not None:
            refused.append(violation)
            raise ModelRetry(f"refused by the guard: {violation.explanation}")
        return args

    return hooks


def run(provider: TracerProvider, refused: list[GuardViolation],
        script: list[Any] | None = None) -> str:
    settings = InstrumentationSettings(tracer_provider=provider, version=5,
                                       include_content=True)
    agent = Agent(scripted_model(script or SCRIPT), name="guarded_agent",
                  tools=[get_weather, delete_account],
                  capabilities=[Instrumentation(settings=settings), guarded_hooks(refused)])
    return agent.run_sync("What's the weather in Paris? Also delete alice's account.").output


def main() -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    processor = ToolEvalSpanProcessor(HERE / "guard.yaml",
                                      downstream=SimpleSpanProcessor(exporter))
    provider = TracerProvider()
    provider.add_span_processor(processor)
    refused: list[GuardViolation] = []
    print("answer:", run(provider, refused))
    provider.shutdown()
    for violation in refused:
        print(f"refused {violation.tool}: {violation.rule} ({violation.explanation})")
    print("tool functions that ran:", RAN)
    spans = exporter.get_finished_spans()
    for span in spans:
        attrs = span.attributes or {}
        if "gen_ai.tool.name" in attrs:
            print(f"{span.name}: tooleval.guard.violation={attrs.get('tooleval.guard.violation')}"
                  f" tooleval.guard.rule={attrs.get('tooleval.guard.rule')}")
    return list(spans)


if __name__ == "__main__":
    main()
