"""Warnings about how a ``ToolEvalSpanProcessor`` was registered, each at most once per
processor and never an exception: the mistakes that otherwise fail silently.

- no ``downstream``: the graded root copies, which carry the verdicts, reach no exporter;
- registered beside its own ``downstream`` on the same provider: every span is exported
  twice, and the downstream is shut down by the provider before the verdict roots reach it;
- no span at all by shutdown: the agent was never instrumented.

The first two are told from the first span the processor sees (after it, the hooks are the
usual ones: nothing is added to the hot path); the last at shutdown.
"""

from __future__ import annotations

import logging
from typing import Any

from ._compat import co_registered

__all__ = ["NO_SPANS", "first_span_warnings", "warn"]

_log = logging.getLogger("otel_tooleval.processor")

_FIX = ("ToolEvalSpanProcessor(config, downstream=BatchSpanProcessor(OTLPSpanExporter())), "
        "registered alone: provider.add_span_processor(processor)")

NO_SPANS = ("otel-tooleval: the ToolEvalSpanProcessor saw no span before shutdown: is the "
            "agent instrumented? (pydantic-ai: Agent.instrument_all(); an OpenInference "
            "framework: its instrumentor's .instrument(tracer_provider=provider); the "
            "provider must be the one the processor was added to)")


def first_span_warnings(downstream: Any, span: Any, *, expect_downstream: bool) -> list[str]:
    """What is wrong with the registration, as seen from the first span started."""
    if downstream is None:
        if not expect_downstream:
            return []
        return [("otel-tooleval: the ToolEvalSpanProcessor has no downstream: the verdicts "
                "(the graded root spans) reach no span exporter; wrap the exporting "
                f"processor: {_FIX}")]
    beside = co_registered(span)
    if any(p is downstream for p in beside):
        return [(f"otel-tooleval: the ToolEvalSpanProcessor's downstream "
                f"({type(downstream).__name__}) is also registered on the provider: every "
                "span is exported twice and the roots carrying the verdicts are lost when the "
                f"provider shuts it down first; register only the ToolEvalSpanProcessor: {_FIX}")]
    return []


def warn(message: str) -> None:
    """Log one registration warning (the processor calls this once per kind)."""
    _log.warning("%s", message)
