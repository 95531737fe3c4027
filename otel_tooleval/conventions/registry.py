"""The conventions in the order they are tried, and the tables derived from them.

The first convention whose tool-name attribute a span carries reads that span's call; marker
attributes of every convention are checked on every span.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import (
    adk,
    dspy,
    genai,
    haystack,
    langfuse,
    llamaindex,
    mlflow,
    openinference,
    openllmetry,
    semantic_kernel,
    strands,
    traceloop,
    vercel_ai,
)
from .spec import Convention, ToolConvention

__all__ = [
    "AGENT_NAME_KEYS",
    "AGENT_SPAN_NAMES",
    "AGENT_SPAN_PREFIXES",
    "CONVENTIONS",
    "FRAMEWORK_SCOPES",
    "FRAME_KEYS",
    "MARKERS",
    "MARKER_KEYS",
    "MODEL_TEXTS",
    "NESTED_AGENT_NAME_KEYS",
    "NOT_MODELS",
    "ROOT_OUTPUTS",
    "ROOT_OUTPUT_EVENTS",
    "TOOL_CONVENTIONS",
]

# The frameworks' own rows first: they are restricted to their scope or marked by their own
# keys, and read the spans the general conventions would read otherwise.
CONVENTIONS: tuple[Convention, ...] = (
    adk.CONVENTION, strands.CONVENTION, llamaindex.CONVENTION, dspy.CONVENTION,
    openllmetry.CONVENTION, semantic_kernel.CONVENTION, haystack.CONVENTION,
    mlflow.CONVENTION, langfuse.CONVENTION, vercel_ai.CONVENTION,
    genai.CONVENTION, openinference.CONVENTION, traceloop.CONVENTION,
)

MARKERS = tuple(marker for c in CONVENTIONS for marker in c.markers)
MARKER_KEYS: tuple[str, ...] = tuple(dict.fromkeys(m.key for m in MARKERS))
#: Marker keys whose presence makes a framework span.
FRAME_KEYS: tuple[str, ...] = tuple(dict.fromkeys(m.key for m in MARKERS if m.frames))
TOOL_CONVENTIONS: tuple[ToolConvention, ...] = tuple(t for c in CONVENTIONS for t in c.tools)
FRAMEWORK_SCOPES: tuple[str, ...] = tuple(s for c in CONVENTIONS for s in c.scopes)
AGENT_NAME_KEYS: tuple[str, ...] = tuple(k for c in CONVENTIONS for k in c.agent_names)
NESTED_AGENT_NAME_KEYS: tuple[str, ...] = AGENT_NAME_KEYS + tuple(
    k for c in CONVENTIONS for k in c.agent_node_names)
#: ``(prefix, suffix)`` of agent spans named after their agent (``Convention.agent_span_names``)
#: and the prefixes alone (one ``str.startswith`` tells a span of none of them).
AGENT_SPAN_NAMES: tuple[tuple[str, str], ...] = tuple(
    n for c in CONVENTIONS for n in c.agent_span_names)
AGENT_SPAN_PREFIXES: tuple[str, ...] = tuple(dict.fromkeys(p for p, _ in AGENT_SPAN_NAMES))
NOT_MODELS: tuple[str, ...] = tuple(s for c in CONVENTIONS for s in c.not_models)
ROOT_OUTPUTS: tuple[str, ...] = tuple(k for c in CONVENTIONS for k in c.outputs)
ROOT_OUTPUT_EVENTS: tuple[tuple[str, str], ...] = tuple(
    dict.fromkeys(e for c in CONVENTIONS for e in c.output_events))
MODEL_TEXTS: tuple[tuple[str, Callable[[Any], str | None]], ...] = tuple(
    t for c in CONVENTIONS for t in c.model_texts)
