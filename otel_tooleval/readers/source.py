"""Opening an input: a path, ``-`` (standard input) or a binary stream; gzip; format sniffing.

Nothing here holds more than the first bytes: the readers stream the rest. Leading
whitespace beyond the first ``_HEAD`` bytes is read and dropped (its lines counted), so a file
of blank lines costs no memory.
"""

from __future__ import annotations

import gzip
import io
import os
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, cast

from .problems import InputError

__all__ = ["DEFAULT_MAX_LINE_BYTES", "FORMATS", "OpenedInput", "open_input", "pushback"]

FORMATS: tuple[str, ...] = ("otlp-json", "otlp-proto", "jaeger-json")

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_UTF8_BOM = b"\xef\xbb\xbf"
_HEAD = 64 * 1024
_BUFFER = 1 << 20
# The longest JSON line or document read (``--max-line-bytes``): far above any batch the
# collector writes (its gRPC receiver takes 4 MiB messages by default), far below what makes
# a gzip bomb exhaust memory.
DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
# What a read of a broken file or a broken gzip stream raises.
READ_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error)


@dataclass(slots=True)
class OpenedInput:
    """An input ready to read: decompressed, its first bytes looked at and put back.

    ``kind`` is ``json`` (first non-space byte ``{`` or ``[``), ``binary`` or ``empty``.
    ``skipped_lines``: newlines in leading whitespace that was dropped, not put back (the
    line numbers of what follows start after them). ``head``: the first bytes (decompressed),
    to tell what kind of file it is.
    """

    name: str
    stream: BinaryIO
    kind: str
    first_byte: int | None
    close: Callable[[], None]
    skipped_lines: int = 0
    head: bytes = b""


class _Rejoined(io.RawIOBase):
    """Bytes already read, then the rest of the stream they came from."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        super().__init__()
        self._head = memoryview(head)
        self._rest = rest
        self._read_rest: Callable[[int], bytes] = getattr(rest, "read1", rest.read)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        if len(self._head):
            n = min(len(view), len(self._head))
            view[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._read_rest(len(view))
        n = len(data)
        view[:n] = data
        return n


def pushback(data: bytes, stream: IO[bytes]) -> BinaryIO:
    """A buffered stream that gives ``data`` first, then what is left of ``stream``."""
    if not data:
        return stream  # type: ignore[return-value]
    return io.BufferedReader(_Rejoined(data, stream), buffer_size=_BUFFER)


def open_input(source: str | Path | BinaryIO) -> OpenedInput:
    """Open ``source``, undo gzip, and tell JSON from binary by the first non-space byte.

    Raises:
        InputError: the file cannot be opened, or is compressed in a way that cannot be read.
    """
    owned: IO[bytes] | None = None
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if path == "-":
            name, raw = "<stdin>", getattr(sys.stdin, "buffer", None)
            if raw is None:
                raise InputError("<stdin>: there is no standard input to read")
        else:
            name = path
            try:
                owned = raw = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by the reader
            except OSError as exc:
                raise InputError(f"{name}: cannot read: {exc.strerror or exc}") from None
    else:
        label = getattr(source, "name", None)
        name, raw = (label if isinstance(label, str) else "<stream>"), source

    def close() -> None:
        if owned is not None:
            owned.close()

    try:
        head, skipped = _read_head(raw, name)
        stream: IO[bytes] = raw
        if head.startswith(_GZIP_MAGIC):
            unzipped = cast(IO[bytes], gzip.GzipFile(fileobj=pushback(head, raw), mode="rb"))
            try:
                head, skipped = _read_head(unzipped, name)
            except InputError as exc:
                raise InputError(f"{name}: not gzip-decodable: {exc.__cause__ or exc}") from None
            stream = unzipped
        elif head.startswith(_ZSTD_MAGIC):
            raise InputError(f"{name}: zstd-compressed input (the collector's "
                             f"'compression: zstd') is not supported; decompress it first")
    except BaseException:
        close()
        raise
    text = head.lstrip()
    if text.startswith(_UTF8_BOM) and text[3:].lstrip()[:1] in (b"{", b"["):
        head = text[3:]  # a BOM before JSON; protobuf keeps every byte
        text = head.lstrip()
    first = text[0] if text else None
    kind = "empty" if first is None else "json" if first in b"{[" or _json_lines_after_all(
        text) else "binary"
    return OpenedInput(name, pushback(head, stream), kind, first, close, skipped, head)


_CONTROL = bytes(c for c in range(32) if c not in b"\t\n\r")
_DOCUMENT_STARTS = (b'{"resourceSpans"', b'{"data"', b'{"result"')


def _json_lines_after_all(head: bytes) -> bool:
    """Whether input whose first byte is not ``{`` or ``[`` is still meant as JSON: text (a
    first line that is not JSON, e.g. cut off by a crash or a rotation, should be reported by its
    line, not make the file protobuf), or a later line of the head that starts like an OTLP/JSON
    or Jaeger document (after a first line of binary garbage, such as the zeros a crash can
    leave). Protobuf has tags and lengths below 0x20 in its first bytes and random bytes in
    every id, so it is neither."""
    sample = head[:-3] if len(head) >= _HEAD else head   # the head may end mid-character
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        if len(sample.translate(None, _CONTROL)) == len(sample):   # no control characters
            return True
    return any(line.lstrip(b" \t\r").startswith(_DOCUMENT_STARTS)
               for line in head.split(b"\n")[1:])


def _read_head(stream: IO[bytes], name: str) -> tuple[bytes, int]:
    """The first bytes, up to and including the first chunk that is not all whitespace, and
    the newlines of leading whitespace dropped on the way.

    Whitespace is kept up to ``_HEAD`` bytes (a short first read of a pipe may be a
    protobuf length byte that happens to be ``\\n``); past that it is dropped, only its
    newlines counted, so the head stays under twice ``_HEAD`` whatever the input.
    """
    read = getattr(stream, "read1", stream.read)
    chunks: list[bytes] = []
    kept = skipped = 0
    while True:
        try:
            chunk = read(_HEAD)
        except READ_ERRORS as exc:
            raise InputError(f"{name}: cannot read: {exc}") from exc
        if not chunk:
            break
        if not chunk.isspace():
            chunks.append(chunk)
            break
        if kept + len(chunk) > _HEAD:
            skipped += sum(c.count(b"\n") for c in chunks) + chunk.count(b"\n")
            chunks, kept = [], 0
            continue
        chunks.append(chunk)
        kept += len(chunk)
    return b"".join(chunks), skipped
