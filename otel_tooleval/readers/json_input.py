"""JSON inputs: JSON lines (one document per line, as the collector's file exporter writes
them) or one document, possibly pretty-printed over many lines; OTLP/JSON or Jaeger JSON.

JSON lines are parsed one line at a time, so memory follows the longest line, not the file.
A single document is loaded whole. The two are told apart by the first line: a line that
parses on its own (or a malformed first line followed by one that does) means JSON lines.
A line or document longer than ``max_line_bytes`` stops the input with an ``InputError``
before it is held: memory stays bounded whatever a file (or a gzip bomb) holds.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterator
from itertools import chain
from typing import IO, Any

from ..model import SpanRecord
from .jaeger import jaeger_records
from .otlp_json import otlp_records
from .problems import InputError, where
from .source import DEFAULT_MAX_LINE_BYTES, READ_ERRORS

__all__ = ["document_records", "json_records", "too_long"]

try:  # optional: about twice as fast as the standard library on large lines
    import orjson

    loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    loads = json.loads

_DECODE_ERRORS = (ValueError, RecursionError)  # orjson's and json's errors are ValueErrors
Report = Callable[[int | None, str], None]


def _reason(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        # One line was parsed: a later "line" of the error is past the line's newline.
        at = "at the end of the line" if exc.lineno > 1 else f"column {exc.colno}"
        return f"invalid JSON: {exc.msg} ({at})"
    if isinstance(exc, RecursionError):
        return "invalid JSON: nested too deeply"
    return f"invalid JSON: {exc}"


def document_records(doc: Any, input_format: str | None, report: Callable[[str], None]
                     ) -> list[SpanRecord]:
    """The spans of one parsed document, by its shape; a document of another kind is reported.

    ``input_format`` (``otlp-json`` or ``jaeger-json``) restricts the shapes accepted.
    """
    if isinstance(doc, list):
        out: list[SpanRecord] = []
        for i, item in enumerate(doc):
            def at_item(message: str, i: int = i) -> None:
                report(f"[{i}]: {message}")

            out += document_records(item, input_format, at_item)
        return out
    if not isinstance(doc, dict):
        report("not a JSON object; skipped")
        return []
    if "resourceSpans" in doc or "result" in doc and isinstance(doc["result"], dict):
        if input_format == "jaeger-json":
            report("an OTLP/JSON document where Jaeger JSON was expected; skipped")
            return []
        # Jaeger's api_v3 (and its gRPC gateway) wrap the OTLP request in "result".
        return otlp_records(doc if "resourceSpans" in doc else doc["result"], report)
    if "data" in doc or "spans" in doc:
        if input_format == "otlp-json":
            report("a Jaeger JSON document where OTLP/JSON was expected; skipped")
            return []
        return jaeger_records(doc, report)
    if not doc:
        return []
    for signal in ("resourceLogs", "resourceMetrics", "resourceProfiles"):
        if signal in doc:
            report(f"a {signal[8:].lower()} document, not traces; skipped")
            return []
    report("neither OTLP/JSON (resourceSpans) nor Jaeger JSON (data[].spans); skipped")
    return []


def _at_line(report: Report, line: int | None) -> Callable[[str], None]:
    def at_line(message: str) -> None:
        report(line, message)

    return at_line


_PIECE = 1 << 20  # a long line is read in pieces of this size, its length checked after each


def too_long(name: str, line: int | None, what: str, limit: int) -> InputError:
    """The error for a line or document over ``limit`` bytes."""
    return InputError(f"{where(name, line)}: {what} longer than {limit} bytes, the limit "
                      f"(--max-line-bytes N raises it)")


def _read_line(readline: Callable[[int], bytes], limit: int) -> bytes | None:
    """The next line (b"" at the end), or None when it is longer than ``limit`` bytes (then
    only about ``limit`` bytes of it were held)."""
    line = readline(_PIECE)
    if len(line) < _PIECE or line.endswith(b"\n"):
        return line
    pieces, size = [line], len(line)
    while True:
        piece = readline(_PIECE)
        size += len(piece)
        if size > limit:
            return None
        pieces.append(piece)
        if len(piece) < _PIECE or piece.endswith(b"\n"):
            return b"".join(pieces)


def _lines(stream: IO[bytes], name: str, report: Report, limit: int, first: int = 1
           ) -> Iterator[tuple[int, bytes]]:
    """Numbered lines, the first numbered ``first``; a read error mid-way is reported and
    ends the input.

    Raises:
        InputError: a line longer than ``limit`` bytes.
    """
    number = first - 1
    readline = stream.readline
    while True:
        try:
            line = _read_line(readline, limit)
        except READ_ERRORS as exc:
            report(number + 1, f"cannot read further: {exc}; the rest of the input is skipped")
            return
        number += 1
        if line is None or len(line) > limit:
            raise too_long(name, number, "a line", limit)
        if not line:
            return
        yield number, line


def _next_content(lines: Iterator[tuple[int, bytes]], seen: list[bytes], held: list[int],
                  name: str, limit: int) -> tuple[int, bytes] | None:
    """The next line that is not blank; every line on the way is kept in ``seen`` (a document
    may span them), blank lines before the first content only counted.

    Raises:
        InputError: what is kept grows over ``limit`` bytes.
    """
    for number, line in lines:
        if not line.isspace():
            seen.append(line)
            held[0] += len(line)
            if held[0] > limit:
                raise too_long(name, None, "a JSON document", limit)
            return number, line
        if seen:
            seen.append(line)
            held[0] += len(line)
            if held[0] > limit:
                raise too_long(name, None, "a JSON document", limit)
    return None


def json_records(stream: IO[bytes], name: str, input_format: str | None, report: Report, *,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, first_line: int = 1
                 ) -> Iterator[SpanRecord]:
    """Every span of a JSON input, streaming JSON lines; its first line is numbered
    ``first_line``.

    Raises:
        InputError: a single document that does not parse (nor its lines one by one); a line,
            or a single document, longer than ``max_line_bytes``.
    """
    limit = max_line_bytes
    lines = _lines(stream, name, report, limit, first_line)
    seen: list[bytes] = []
    held = [0]
    first = _next_content(lines, seen, held, name, limit)
    if first is None:
        return
    number, line = first
    try:
        loads(line)
    except _DECODE_ERRORS as exc:
        second = _next_content(lines, seen, held, name, limit)
        if second is None:
            raise InputError(f"{where(name, number)}: {_reason(exc)}") from None
        try:
            loads(second[1])
        except _DECODE_ERRORS:
            # Not JSON lines: one document over many lines, loaded whole (up to the limit).
            size = held[0]
            for _, rest in lines:
                size += len(rest)
                if size > limit:
                    raise too_long(name, None, "a JSON document", limit) from None
                seen.append(rest)
            yield from _single_document(name, seen, input_format, report, number)
            return
        lines = chain((first, second), lines)
    else:
        lines = chain((first,), lines)
    del seen[:]
    for number, line in lines:
        if not line.isspace():
            yield from _line_records(line, number, input_format, report)


class _CollectorPaused:
    """The cyclic garbage collector paused while a document is parsed and converted.

    A parsed batch is thousands of dicts and lists that all die together moments later; with
    the collector running they survive its young collections, are promoted, and trigger full
    collections that also walk every record held for open traces. Pausing it for the parse
    and conversion of each document (and collecting normally in between) makes grading a
    large file about 1.5 times as fast (tests/bench/bench_files.py). The previous state is
    restored, so a caller that disabled the collector keeps it disabled.
    """

    __slots__ = ("enabled",)

    def __enter__(self) -> None:
        self.enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            gc.enable()


def _line_records(line: bytes, number: int, input_format: str | None, report: Report
                  ) -> list[SpanRecord]:
    # The parsed document dies here, before its records are taken and graded.
    with _CollectorPaused():
        try:
            doc = loads(line)
        except _DECODE_ERRORS as exc:
            report(number, _reason(exc))
            return []
        return document_records(doc, input_format, _at_line(report, number))


def _single_document(name: str, lines: list[bytes], input_format: str | None, report: Report,
                     first: int) -> list[SpanRecord]:
    """``lines``: the document from its first content line, numbered ``first``."""
    with _CollectorPaused():
        try:
            doc = json.loads(b"".join(lines))
        except _DECODE_ERRORS as exc:
            failure = exc
        else:
            return document_records(doc, input_format, _at_line(report, None))
    # Still JSON lines if any line parses on its own (the first two were malformed).
    docs: list[tuple[int, Any]] = []
    for number, line in enumerate(lines, first):
        if not line.isspace():
            try:
                docs.append((number, loads(line)))
            except _DECODE_ERRORS as exc:
                docs.append((number, exc))
    if all(isinstance(parsed, BaseException) for _, parsed in docs):
        if isinstance(failure, json.JSONDecodeError):
            at_line = failure.lineno + first - 1
            raise InputError(f"{where(name, at_line)}: invalid JSON: {failure.msg} "
                             f"(column {failure.colno})")
        # Not a position in the document (nested too deeply): name the first bad line.
        at: int | None = docs[0][0] if docs else None
        bad = docs[0][1] if docs else failure
        raise InputError(f"{where(name, at)}: "
                         f"{_reason(bad if isinstance(bad, BaseException) else failure)}")
    out: list[SpanRecord] = []
    for number, parsed in docs:
        if isinstance(parsed, BaseException):
            report(number, _reason(parsed))
        else:
            out += document_records(parsed, input_format, _at_line(report, number))
    return out
