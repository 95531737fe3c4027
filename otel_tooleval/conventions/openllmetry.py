"""OpenLLMetry's LangChain instrumentation (scope ``opentelemetry.instrumentation.langchain``).

Its tool spans carry the GenAI keys, with LangChain's callback envelope as the arguments
(``input_str``, ``inputs``, ``tags`` ...) and a serialised ``ToolMessage`` as the result.
"""

from __future__ import annotations

from .envelopes import langchain_callback_inputs, langchain_tool_message
from .spec import Convention, ToolConvention

__all__ = ["CONVENTION"]

CONVENTION = Convention(
    name="openllmetry_langchain",
    tools=(ToolConvention(
        "openllmetry_langchain", "gen_ai.tool.name", ("gen_ai.tool.call.arguments",),
        ("gen_ai.tool.call.result",), ("gen_ai.tool.call.id",),
        scope="opentelemetry.instrumentation.langchain",
        arguments_from=langchain_callback_inputs, result_from=langchain_tool_message),),
)
