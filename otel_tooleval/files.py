"""Trace files in: the readers behind ``otel-tooleval grade`` (see ``readers/``)."""

from __future__ import annotations

from .readers import (
    DEFAULT_MAX_LINE_BYTES,
    FORMATS,
    InputError,
    InputProblem,
    ProblemSink,
    iter_traces,
    read_records,
)

__all__ = ["DEFAULT_MAX_LINE_BYTES", "FORMATS", "InputError", "InputProblem", "ProblemSink",
           "iter_traces", "read_records"]
