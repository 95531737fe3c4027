"""Trace-file readers for ``otel-tooleval grade``: OTLP/JSON (JSON lines or one document),
OTLP protobuf (length-delimited) and Jaeger JSON, gzip or not, to a stream of SpanRecords."""

from __future__ import annotations

from .problems import InputError, InputProblem, ProblemSink
from .reader import read_records
from .source import DEFAULT_MAX_LINE_BYTES, FORMATS
from .traces import iter_traces

__all__ = ["DEFAULT_MAX_LINE_BYTES", "FORMATS", "InputError", "InputProblem", "ProblemSink", "iter_traces", "read_records"]
