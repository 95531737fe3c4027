"""The Langfuse SDK's OpenTelemetry spans (scope ``langfuse-sdk``).

``langfuse.observation.type`` marks agents, generations (model calls) and tools; a tool span
is named after the function, its input is ``{"args": [...], "kwargs": {...}}``.
"""

from __future__ import annotations

from .spec import Convention, KindMarker, ToolConvention

__all__ = ["CONVENTION"]

CONVENTION = Convention(
    name="langfuse",
    markers=(KindMarker("langfuse.observation.type", agents=frozenset({"agent"}),
                        models=frozenset({"generation"})),),
    tools=(ToolConvention("langfuse", None, ("langfuse.observation.input",),
                          ("langfuse.observation.output",),
                          when=("langfuse.observation.type", "tool")),),
    scopes=("langfuse",),
    outputs=("langfuse.observation.output",),
)
