"""DSPy through OpenInference (scope ``openinference.instrumentation.dspy``).

A tool span carries no ``tool.name``: it is a TOOL-kind span named ``<tool>.__call__``, with
its arguments as ``{"kwargs": {...}}``. ReAct ends every run by calling its own ``finish``
tool, which is no call of the agent's tools.
"""

from __future__ import annotations

from .envelopes import only_kwargs
from .spec import Convention, ToolConvention

__all__ = ["CONVENTION"]


def _tool_name(span_name: str) -> str:
    return span_name.removesuffix(".__call__")


CONVENTION = Convention(
    name="dspy",
    tools=(ToolConvention(
        "dspy", None, ("input.value",), ("output.value",),
        when=("openinference.span.kind", "TOOL"), scope="openinference.instrumentation.dspy",
        arguments_from=only_kwargs, name_from=_tool_name, not_tools=frozenset({"finish"})),),
)
