"""Trace files in: the readers behind ``otel-tooleval grade`` (see ``readers/``)."""

from __future__ import annotations

from .readers import FORMATS, InputError, InputProblem, ProblemSink, iter_traces, read_records

__all__ = ["FORMATS", "InputError", "InputProblem", "ProblemSink", "iter_traces", "read_records"]
