"""Per-run parts of a report, kept on disk until the report is written, then read back sorted.

``grade`` writes its runs ordered by start time, but runs are graded in the order their traces
complete. A :class:`SortedSpool` takes each run's rendered part with its sort key as the run is
graded, holds up to ``memory_bytes`` of them, and writes each full batch, sorted, to one
temporary file as a segment; reading merges the segments. Memory stays within about
``memory_bytes`` plus one read block per segment, whatever the number of runs.
"""

from __future__ import annotations

import heapq
import os
import pickle
import tempfile
from collections.abc import Iterator
from typing import IO, Any

__all__ = ["DEFAULT_SPOOL_BYTES", "SortedSpool"]

#: Bytes of parts held in memory before a batch is written out.
DEFAULT_SPOOL_BYTES = 16 * 2**20
_BLOCK = 256            # parts per pickled block: the unit read back per segment
_MAX_SEGMENTS = 64      # more than this are merged into one, so few files stay open
_OVERHEAD = 120         # bytes counted per part besides its text (key tuple, list slot)

Part = tuple[tuple[Any, ...], str]


class SortedSpool:
    """Parts added in any order, read back ordered by key (keys must be unique and ordered).

    :meth:`close` removes the temporary file (and so does the garbage collector).
    """

    def __init__(self, memory_bytes: int = DEFAULT_SPOOL_BYTES) -> None:
        self.memory_bytes = max(memory_bytes, 1)
        self.count = 0
        self._held: list[Part] = []
        self._held_bytes = 0
        self._file: IO[bytes] | None = None
        self._segments: list[tuple[int, int]] = []   # (offset, end) of each sorted segment

    def add(self, key: tuple[Any, ...], text: str) -> None:
        self._held.append((key, text))
        self.count += 1
        self._held_bytes += len(text) + _OVERHEAD
        if self._held_bytes >= self.memory_bytes:
            self._spill()

    def __iter__(self) -> Iterator[Part]:
        """Every part, by key; the parts still held are merged in without being written."""
        self._held.sort(key=_key)
        if not self._segments:
            yield from self._held
            return
        if len(self._segments) + 1 > _MAX_SEGMENTS:
            self._spill()
            self._compact()
        streams = [self._read(start, end) for start, end in self._segments]
        if self._held:
            streams.append(iter(self._held))
        yield from heapq.merge(*streams, key=_key)

    def close(self) -> None:
        self._held = []
        if self._file is not None:
            self._file.close()
            self._file = None
        self._segments = []

    def _spill(self) -> None:
        if not self._held:
            return
        self._held.sort(key=_key)
        self._write_segment(iter(self._held))
        self._held = []
        self._held_bytes = 0
        if len(self._segments) >= _MAX_SEGMENTS:
            self._compact()

    def _write_segment(self, parts: Iterator[Part]) -> None:
        if self._file is None:
            # closed by close(); removed by the system as soon as it is closed
            self._file = tempfile.TemporaryFile(prefix="otel-tooleval-")  # noqa: SIM115
        fh = self._file
        start = end = fh.seek(0, os.SEEK_END)
        block: list[Part] = []
        for n, part in enumerate(parts, 1):
            block.append(part)
            if n % _BLOCK == 0:
                end = self._append(block)
                block = []
        if block:
            end = self._append(block)
        self._segments.append((start, end))

    def _append(self, block: list[Part]) -> int:
        # Seek every time: while segments are merged, their readers move the shared position.
        assert self._file is not None
        self._file.seek(0, os.SEEK_END)
        pickle.dump(block, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        return self._file.tell()

    def _compact(self) -> None:
        """Merge every segment into one, appended to the file (the old ones become dead
        space: the file is temporary and its size grows by the parts once more)."""
        streams = [self._read(start, end) for start, end in self._segments]
        self._segments = []
        self._write_segment(heapq.merge(*streams, key=_key))
        # the merged segment was the last one written: keep only it
        self._segments = self._segments[-1:]

    def _read(self, start: int, end: int) -> Iterator[Part]:
        """One segment's parts, a block at a time; the shared file is seeked per block."""
        assert self._file is not None
        fh = self._file
        offset = start
        while offset < end:
            fh.seek(offset)
            block: list[Part] = pickle.load(fh)
            offset = fh.tell()
            yield from block


def _key(part: Part) -> tuple[Any, ...]:
    return part[0]
