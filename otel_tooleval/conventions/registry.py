"""The conventions in the order they are tried, and the tables derived from them.

The first convention whose tool-name attribute a span carries reads that span's call; marker
attributes of every convention are checked on every span.
"""

from __future__ import annotations

from . import genai, openinference, traceloop
from .spec import Convention, ToolConvention

__all__ = ["AGENT_NAME_KEYS", "CONVENTIONS", "FRAMEWORK_SCOPES", "MARKERS", "MARKER_KEYS",
           "TOOL_CONVENTIONS"]

CONVENTIONS: tuple[Convention, ...] = (genai.CONVENTION, openinference.CONVENTION,
                                       traceloop.CONVENTION)

MARKERS = tuple(marker for c in CONVENTIONS for marker in c.markers)
MARKER_KEYS: tuple[str, ...] = tuple(m.key for m in MARKERS)
TOOL_CONVENTIONS: tuple[ToolConvention, ...] = tuple(t for c in CONVENTIONS for t in c.tools)
FRAMEWORK_SCOPES: tuple[str, ...] = tuple(s for c in CONVENTIONS for s in c.scopes)
AGENT_NAME_KEYS: tuple[str, ...] = tuple(k for c in CONVENTIONS for k in c.agent_names)
