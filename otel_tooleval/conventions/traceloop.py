"""Traceloop / OpenLLMetry: ``traceloop.span.kind`` marks runs (``agent``, ``workflow``), model
calls and tools; a tool's name, input and output are the entity's.

OpenLLMetry's model-client instrumentations (openai, anthropic, bedrock, ... up to 0.47, the
older flattened ``gen_ai.prompt.N`` / ``gen_ai.completion.N`` spelling) mark their model calls
with ``llm.request.type`` (``chat``, ``completion``; ``embedding`` and ``rerank`` are no model
response) and write no ``gen_ai.operation.name``: that older marker names a model span too.
``gen_ai.system`` with ``gen_ai.request.model`` marks nothing: OpenLLMetry's CrewAI and OpenAI
Agents instrumentations write both on agent spans (the agent's model), so they tell no kind.
"""

from __future__ import annotations

from .envelopes import mcp_call_result
from .spec import Convention, KindMarker, ToolConvention

__all__ = ["CONVENTION"]

CONVENTION = Convention(
    name="traceloop",
    markers=(KindMarker("traceloop.span.kind", agents=frozenset({"agent", "workflow"}),
                        models=frozenset({"llm", "chat"})),
             # Shape: the older OpenLLMetry model-call marker (no gen_ai.operation.name). Not a
             # framework mark (frames=False): a lone model call, no agent, stays no run, as it
             # was before this marker was read.
             KindMarker("llm.request.type", models=frozenset({"chat", "completion"}),
                        frames=False)),
    tools=(
        ToolConvention(
            "traceloop", "traceloop.entity.name",
            ("traceloop.entity.input",), ("traceloop.entity.output",),
            when=("traceloop.span.kind", "tool"), result_from=mcp_call_result,
        ),
    ),
    scopes=("traceloop", "opentelemetry.instrumentation.langchain",
            "opentelemetry.instrumentation.crewai", "opentelemetry.instrumentation.openai_agents"),
)
