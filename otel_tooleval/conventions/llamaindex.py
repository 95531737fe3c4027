"""LlamaIndex through OpenInference (scope ``openinference.instrumentation.llama_index``).

Arguments are recorded as ``{"kwargs": {...}}``, results as the serialised ``ToolOutput``
(``raw_output`` is the tool's value). Each model response makes three LLM spans: the request
preparation (``._prepare_chat_with_tools``), and an outer and an inner ``astream_chat``.
"""

from __future__ import annotations

from .envelopes import llamaindex_tool_output, only_kwargs
from .spec import Convention, ToolConvention

__all__ = ["CONVENTION"]

CONVENTION = Convention(
    name="llamaindex",
    tools=(ToolConvention(
        "llamaindex", "tool.name", ("input.value",), ("output.value",),
        ("tool.id", "tool_call.id"), scope="openinference.instrumentation.llama_index",
        arguments_from=only_kwargs, result_from=llamaindex_tool_output),),
    not_models=("._prepare_chat_with_tools",),
)
