"""Google ADK (native OpenTelemetry, scope ``gcp.vertex.agent``), both span schemas.

Schema 2 writes the GenAI keys; a non-dict return value is recorded as ``{"result": x}``; after
parallel calls an ``execute_tool (merged)`` span named ``(merged tools)`` is bookkeeping. The
1.x schema keeps arguments and results in ``gcp.vertex.agent.tool_call_args`` /
``tool_response`` and marks model calls (``call_llm``) only by ``gcp.vertex.agent.llm_request``.
ADK 1.x's run root is ``invocation`` and its agent span ``agent_run [<agent name>]``, with no
attribute at all: the agent's name is in the span's name only.
"""

from __future__ import annotations

from .envelopes import genai_content_parts, only_result
from .spec import MODEL, Convention, KindMarker, ToolConvention

__all__ = ["CONVENTION"]

CONVENTION = Convention(
    name="adk",
    markers=(KindMarker("gcp.vertex.agent.llm_request", present=MODEL, frames=False),),
    tools=(ToolConvention(
        "adk", "gen_ai.tool.name",
        ("gen_ai.tool.call.arguments", "gcp.vertex.agent.tool_call_args"),
        ("gen_ai.tool.call.result", "gcp.vertex.agent.tool_response"),
        ("gen_ai.tool.call.id",), scope="gcp.vertex.agent", result_from=only_result,
        not_tools=frozenset({"(merged tools)"})),),
    model_texts=(("gcp.vertex.agent.llm_response", genai_content_parts),),
    agent_span_names=(("agent_run [", "]"),),
)
