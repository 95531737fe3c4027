"""``read_records``: any supported trace file to a stream of SpanRecords."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ..model import SpanRecord
from .json_input import json_records
from .otlp_proto import proto_records
from .problems import InputError, InputProblem, ProblemSink, log_problem
from .sniff import not_traces
from .source import DEFAULT_MAX_LINE_BYTES, FORMATS, OpenedInput, open_input

__all__ = ["read_records"]


def read_records(
    source: str | Path | BinaryIO,
    *,
    input_format: str | None = None,
    on_problem: ProblemSink | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Iterator[SpanRecord]:
    """Stream the spans of a trace file, in file order.

    ``source`` is a path, ``-`` for standard input, or a binary stream (left open). Gzip is
    undone whatever the format. The format is told from the content (JSON: OTLP/JSON or
    Jaeger JSON by each document's shape; anything else: OTLP protobuf) unless
    ``input_format`` (``otlp-json``, ``otlp-proto`` or ``jaeger-json``) says it.

    Memory is bounded: a JSON line, a single JSON document or a protobuf message longer than
    ``max_line_bytes`` (default 64 MiB) stops the input with an ``InputError`` naming the
    file, the line (or message) and the limit, before more than about that much is held.

    A malformed line, document, message or span is passed to ``on_problem`` as an
    ``InputProblem`` (default: logged as a warning) and skipped; the rest is read.

    The file is opened and its first bytes looked at when this is called; the rest is read
    as the records are taken.

    Raises:
        InputError: the input as a whole is unreadable (cannot be opened, unknown format, not
            gzip-decodable, text that is plainly not traces: a config, YAML, HTML, Python,
            ConsoleSpanExporter output, named in one line by ``sniff.not_traces``; a single
            JSON document that does not parse, a line or document
            over ``max_line_bytes``); it names the file and, where known, the line. Raised
            here, or while iterating for what shows later.
        ValueError: an unknown ``input_format``, or ``max_line_bytes`` below 1.
    """
    if input_format is not None and input_format not in FORMATS:
        raise ValueError(f"unknown input format {input_format!r}; "
                         f"expected one of {', '.join(FORMATS)}")
    if max_line_bytes < 1:
        raise ValueError("max_line_bytes must be at least 1")
    opened = open_input(source)
    return _records(opened, input_format, on_problem or log_problem, max_line_bytes)


def _records(opened: OpenedInput, input_format: str | None, sink: ProblemSink,
             max_line_bytes: int) -> Iterator[SpanRecord]:
    name = opened.name

    def report(line: int | None, message: str) -> None:
        sink(InputProblem(name, line, message))

    try:
        if opened.kind == "empty":
            return
        if input_format == "otlp-proto" or input_format is None and opened.kind == "binary":
            yield from proto_records(opened.stream, name, lambda m: report(None, m),
                                     max_message_bytes=max_line_bytes)
            return
        if opened.kind == "json" and input_format != "otlp-proto":
            # Text: a config, a page, source code or console output is named, in one line.
            verdict = not_traces(opened.head, name)
            if verdict is not None:
                raise InputError(verdict)
        if opened.kind != "json":
            raise InputError(f"{name}: not JSON (first byte 0x{opened.first_byte or 0:02x}), "
                             f"but read as {input_format}")
        yield from json_records(opened.stream, name, input_format, report,
                                max_line_bytes=max_line_bytes,
                                first_line=opened.skipped_lines + 1)
    finally:
        opened.close()
