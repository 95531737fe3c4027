"""Semantic Kernel (native OpenTelemetry, scopes ``semantic_kernel.*``).

A tool is a kernel function named ``<Plugin>-<function>``: the function is the tool's name,
the plugin its server. Results are ``str()`` of the return value (Python reprs, which
``decode_value`` parses safely).
"""

from __future__ import annotations

from .spec import Convention, ToolConvention

__all__ = ["CONVENTION"]

CONVENTION = Convention(
    name="semantic_kernel",
    tools=(ToolConvention(
        "semantic_kernel", "gen_ai.tool.name", ("gen_ai.tool.call.arguments",),
        ("gen_ai.tool.call.result",), ("gen_ai.tool.call.id",), scope="semantic_kernel",
        server_sep="-"),),
)
