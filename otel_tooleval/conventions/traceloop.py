"""Traceloop / OpenLLMetry: ``traceloop.span.kind`` marks runs (``agent``, ``workflow``), model
calls and tools; a tool's name, input and output are the entity's."""

from __future__ import annotations

from .envelopes import mcp_call_result
from .spec import Convention, KindMarker, ToolConvention

__all__ = ["CONVENTION"]

CONVENTION = Convention(
    name="traceloop",
    markers=(KindMarker("traceloop.span.kind", agents=frozenset({"agent", "workflow"}),
                        models=frozenset({"llm", "chat"})),),
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
