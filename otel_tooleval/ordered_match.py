"""The largest in-order matching of entries to calls under any match predicate, bit-parallel.

A longest common subsequence where "equal" is a predicate given as one mask per entry: bit ``j``
of ``mask_of(k)`` is set where entry ``k`` matches call ``j``. The calls are the bit dimension
and each entry updates a whole row in four big-int operations, the recurrence of ``lcs.py``
(``U = V & M; V = (V + U) | (V ^ U)``): zero bits of row ``k`` mark the calls at which the
largest matching of the first ``k`` entries grows, so ``L(k, j)``, its size over the calls up to
``j``, is ``j + 1`` minus the one bits of row ``k`` up to ``j``.

Which matching: the one that a column-by-column DP keeps when it replaces a state only by a
strictly larger one and tries the entries matching a call in ascending order
(``graders.in_order._in_order_settled`` without latency limits). There, the matching for the
first ``i`` entries changes only at the call ``j`` where ``L(i, j)`` grows, and becomes entry
``k`` on call ``j`` plus the matching for the first ``k`` entries before ``j``, with ``k`` the
lowest entry matching call ``j`` such that ``L(k, j - 1) == L(i, j - 1)``. The trace-back
follows exactly that: from row ``i`` the highest zero bit below the current call is ``j``; the
lowest row ``a`` with ``L(a, j - 1) == L(i, j - 1)`` is found by galloping down and bisecting
(``L`` never decreases along the rows); ``first_match(a, i, j)`` names the entry. A step costs
a few big-int popcounts, so the whole is about as fast as the rows themselves.

Memory: every row is kept while they fit in ``ROW_BUDGET_BYTES``; beyond it, one row every
block is kept and a block's rows are recomputed from it when the trace-back reaches them (it
moves down the rows, so each block is recomputed about once).
"""

from __future__ import annotations

from collections.abc import Callable
from math import isqrt

__all__ = ["in_order_pairs"]

# Bytes of rows kept at once; past it, rows are recomputed block by block from checkpoints.
ROW_BUDGET_BYTES = 64 << 20
_BLOCKS_CACHED = 2


class _Rows:
    """Row ``k`` (after the first ``k`` entries) on demand, from stored checkpoint rows."""

    __slots__ = ("block", "cache", "checkpoints", "count", "full", "mask_of")

    def __init__(self, count: int, width: int, mask_of: Callable[[int], int]) -> None:
        self.count = count
        self.full = full = (1 << width) - 1
        self.mask_of = mask_of
        row_bytes = (width >> 3) + 32
        if (count + 1) * row_bytes <= ROW_BUDGET_BYTES:
            self.block = count + 1
        else:
            self.block = max(ROW_BUDGET_BYTES // (row_bytes * (_BLOCKS_CACHED + 1)),
                             isqrt(count) + 1)
        block = self.block
        self.checkpoints: list[int] = []
        rows: list[int] = []
        v = full
        for k in range(count + 1):
            if k % block == 0:
                self.checkpoints.append(v)
                rows = []
            rows.append(v)
            if k < count:
                m = mask_of(k)
                if m:
                    u = v & m
                    v = ((v + u) | (v ^ u)) & full
        self.cache: dict[int, list[int]] = {count // block: rows}

    def __getitem__(self, k: int) -> int:
        b, offset = divmod(k, self.block)
        rows = self.cache.pop(b, None)
        if rows is None:
            rows = self._recompute(b)
            if len(self.cache) >= _BLOCKS_CACHED:
                del self.cache[next(iter(self.cache))]
        self.cache[b] = rows      # most recently used last
        return rows[offset]

    def _recompute(self, b: int) -> list[int]:
        start = b * self.block
        v, full, mask_of = self.checkpoints[b], self.full, self.mask_of
        rows = [v]
        for k in range(start, min(start + self.block - 1, self.count)):
            m = mask_of(k)
            if m:
                u = v & m
                v = ((v + u) | (v ^ u)) & full
            rows.append(v)
        return rows


def in_order_pairs(count: int, width: int, mask_of: Callable[[int], int],
                   first_match: Callable[[int, int, int], int]) -> list[tuple[int, int]]:
    """The largest in-order matching of ``count`` entries to ``width`` calls, as ascending
    (entry, call) pairs, chosen as the module docstring says.

    Args:
        count: number of entries.
        width: number of calls.
        mask_of: entry index -> bit mask of the calls it matches (called once per entry, again
            only when rows are recomputed).
        first_match: ``(lo, hi, j)`` -> the lowest entry in ``[lo, hi)`` that matches call
            ``j``; one always exists when it is called.
    """
    if not count or not width:
        return []
    rows = _Rows(count, width, mask_of)
    i = count
    v = rows[i]
    below = rows.full
    length = width - v.bit_count()
    pairs: list[tuple[int, int]] = []
    while length:
        # The call at which the largest matching of the first i entries reached ``length``.
        j = ((v & below) ^ below).bit_length() - 1
        below = (1 << j) - 1
        target = length - 1
        low = _lowest_row(rows, i, below, j, target)
        k = first_match(low, i, j)
        pairs.append((k, j))
        i, length = k, target
        v = rows[i]
    pairs.reverse()
    return pairs


def _lowest_row(rows: _Rows, i: int, below: int, j: int, target: int) -> int:
    """The lowest row ``a`` with ``L(a, j - 1) >= target``, knowing row ``i - 1`` has it."""
    if not target:
        return 0
    # Row 0 has L == 0 < target: the answer lies in (lo, hi].
    hi, step = i - 1, 1
    while True:
        probe = max(hi - step, 0)
        if j - (rows[probe] & below).bit_count() >= target:
            hi, step = probe, step * 2
        else:
            lo = probe
            break
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if j - (rows[mid] & below).bit_count() >= target:
            hi = mid
        else:
            lo = mid
    return hi
