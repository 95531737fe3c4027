"""Longest common subsequence of two sequences of hashable items, in linear memory.

``lcs_length`` runs the bit-vector algorithm of Allison-Dix / Hyyrö over Python big ints: the
longer sequence is the bit dimension, and each item of the shorter one updates the whole DP row
in four big-int operations (``U = V & M[c]; V = (V + U) | (V ^ U)``), so 10,000 x 10,000 items
take a few tens of milliseconds.

``lcs_pairs`` recovers one longest common subsequence with Hirschberg's divide and conquer: it
splits the shorter sequence in half, finds where the optimal path crosses the middle from one
forward and one backward bit-vector row, and recurses; blocks of at most ``_LEAF_ROWS`` items
are traced back from their stored rows. Memory stays linear in the input (``_LEAF_ROWS`` rows
of the longer sequence at most) and the time is about twice that of ``lcs_length``. The
recursion works on index ranges: the match masks of the whole longer sequence are built once,
forward and reversed, and a range's mask is a shift of them. When the longer sequence has fewer
than 256 distinct items (tool names, usually), items become byte ids: masks are built by
``bytes.translate`` and the trace-back finds a match with ``bytes.rfind``. Which subsequence is
returned (the split, the leaf size, the trace-back's preferences) is fixed: the pairs are those
of the implementation before issue 19 (tests/test_tool_call_order_oracle.py keeps it as an oracle).

Match masks (one big int per distinct item, with a bit at each position of the item) would be
quadratic for inputs with many distinct items, so only the masks that save the most work are
kept, within a budget of ``_MASK_BYTES_PER_ITEM`` bytes per input item; the others are rebuilt
from the item's positions when needed.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from itertools import accumulate, repeat
from typing import Any, TypeVar

__all__ = ["lcs", "lcs_length", "lcs_pairs"]

H = TypeVar("H", bound=Hashable)

# Rows kept per traced-back block: memory _LEAF_ROWS x len(longer) bits. Part of which LCS is
# returned (the trace-back of a block prefers other pairs than the split): fixed.
_LEAF_ROWS = 64
# Match masks kept per call, in bytes per input item (plus a small constant).
_MASK_BYTES_PER_ITEM = 8
_MASK_BYTES_MIN = 4096
# Bytes 0, 1, 2 (one step of _best_split's sum, plus one) as signed bytes -1, 0, +1.
_STEP = bytes([255, 0, 1]) + bytes(253)
# lcs_pairs on byte ids when the longer side has fewer distinct items than this.
_BYTE_ALPHABET = 256


def _positions_shared(seq: Sequence[Hashable], other: Sequence[Hashable]
                      ) -> tuple[dict[Hashable, list[int]], Counter[Hashable]]:
    """The positions in ``seq`` of each item that ``other`` holds too, in ascending order, and
    how often each item occurs in ``other``."""
    in_other = Counter(other)
    positions: dict[Hashable, list[int]] = {}
    get = positions.get
    for i, item in enumerate(seq):
        found = get(item)
        if found is not None:
            found.append(i)
        elif item in in_other:
            positions[item] = [i]
    return positions, in_other


class _Masks:
    """Match masks of a pattern: bit ``i`` of ``mask(c)`` is set where ``pattern[i] == c``.

    Only items that also occur in ``text`` matter. The masks that save the most rebuilding
    (occurrences in the text times occurrences in the pattern, per byte) are built once, within
    the byte budget; the rest are rebuilt from their positions on each use.
    """

    __slots__ = ("cached", "positions")

    def __init__(self, pattern: Sequence[Hashable], text: Sequence[Hashable]) -> None:
        positions, in_text = _positions_shared(pattern, text)
        budget = _MASK_BYTES_MIN + _MASK_BYTES_PER_ITEM * (len(pattern) + len(text))
        ranked = sorted(positions.items(),
                        key=lambda kv: in_text[kv[0]] * len(kv[1]) / (kv[1][-1] + 8),
                        reverse=True)
        cached: dict[Hashable, int] = {}
        for item, where in ranked:
            size = (where[-1] >> 3) + 1
            if size > budget:
                continue
            budget -= size
            cached[item] = _mask(where)
            del positions[item]
        self.cached = cached
        self.positions = positions


def _mask(positions: list[int]) -> int:
    if len(positions) == 1:
        return 1 << positions[0]
    buf = bytearray((positions[-1] >> 3) + 1)
    for p in positions:
        buf[p >> 3] |= 1 << (p & 7)
    return int.from_bytes(buf, "little")


def _final_row(pattern: Sequence[Hashable], text: Sequence[Hashable]) -> int:
    """The bit-vector row after all of ``text``: bit ``j`` is 0 where the LCS of ``text`` with
    ``pattern[:j + 1]`` is one longer than with ``pattern[:j]``. Masked to ``len(pattern)``."""
    masks = _Masks(pattern, text)
    cached, positions = masks.cached.get, masks.positions.get
    full = (1 << len(pattern)) - 1
    v = full
    for item in text:
        m = cached(item)
        if m is None:
            where = positions(item)
            if where is None:
                continue
            m = _mask(where)
        u = v & m
        # Carries past the top bit never reach back into the row; they are masked off once.
        v = (v + u) | (v ^ u)
    return v & full


def _trim(a: Sequence[H], b: Sequence[H]) -> tuple[int, int]:
    """Lengths of the common prefix and of the common suffix (not overlapping it)."""
    n = min(len(a), len(b))
    head = 0
    while head < n and a[head] == b[head]:
        head += 1
    tail = 0
    la, lb = len(a), len(b)
    while tail < n - head and a[la - 1 - tail] == b[lb - 1 - tail]:
        tail += 1
    return head, tail


def lcs_length(a: Sequence[H], b: Sequence[H]) -> int:
    """Length of a longest common subsequence of ``a`` and ``b`` (items compared with ``==``)."""
    head, tail = _trim(a, b)
    a_mid, b_mid = a[head:len(a) - tail], b[head:len(b) - tail]
    if not a_mid or not b_mid:
        return head + tail
    pattern, text = (a_mid, b_mid) if len(a_mid) >= len(b_mid) else (b_mid, a_mid)
    zeros = len(pattern) - _final_row(pattern, text).bit_count()
    return head + tail + zeros


def lcs_pairs(a: Sequence[H], b: Sequence[H]) -> list[tuple[int, int]]:
    """One longest common subsequence as increasing index pairs ``(i, j)`` with ``a[i] == b[j]``.

    Linear memory; about twice the time of ``lcs_length``.
    """
    swap = len(a) > len(b)
    short, long_ = (b, a) if swap else (a, b)
    head, tail = _trim(short, long_)
    out = [(k, k) for k in range(head)]
    i1, j1 = len(short) - tail, len(long_) - tail
    if head < i1 and head < j1:
        distinct = dict.fromkeys(long_)
        solver: _Hirschberg | None = None
        if len(distinct) < _BYTE_ALPHABET:
            # Items as byte ids; those of the short side missing from the long one: ``absent``.
            ids = {item: k for k, item in enumerate(distinct)}
            absent = len(ids)
            rows = bytes(map(ids.get, short, repeat(absent)))
            # Two masks of len(long_) bits per shared item, within the byte budget.
            shared = len(set(rows) - {absent})
            budget = _MASK_BYTES_MIN + _MASK_BYTES_PER_ITEM * (len(short) + len(long_))
            if shared * 2 * ((len(long_) >> 3) + 1) <= budget:
                solver = _ByteHirschberg(rows, bytes(map(ids.__getitem__, long_)), absent, out)
        if solver is None:
            solver = _ItemHirschberg(list(short), list(long_), out)
        solver.solve(head, i1, head, j1)
    out.extend((i1 + k, j1 + k) for k in range(tail))
    return [(j, i) for i, j in out] if swap else out


def lcs(a: Sequence[H], b: Sequence[H]) -> list[H]:
    """One longest common subsequence of ``a`` and ``b``, as a list of ``a``'s items."""
    return [a[i] for i, _ in lcs_pairs(a, b)]


class _Hirschberg:
    """Hirschberg's recursion over index ranges of ``a`` (the rows) and ``b`` (the bits).

    The match masks of the whole of ``b`` are built once, forward and reversed; the mask of a
    range is a shift and an ``and`` of them. Subclasses give the rows (``_final_row``, the
    block's ``_rows``) and the last match before a position (``_last``).
    """

    __slots__ = ("a", "b", "out")

    a: Sequence[Hashable]
    b: Sequence[Hashable]
    out: list[tuple[int, int]]

    def _final_row(self, i0: int, i1: int, j0: int, j1: int, backward: bool) -> int:
        """``_final_row(b[j0:j1], a[i0:i1])``, or of both ranges reversed (``backward``)."""
        raise NotImplementedError

    def _rows(self, i0: int, i1: int, j0: int, j1: int) -> list[int]:
        """Every row of ``a[i0:i1]`` against ``b[j0:j1]``, the initial one first."""
        raise NotImplementedError

    def _finder(self) -> Callable[[Any, int, int], int]:
        """``last(item, j0, j)``: the last position of ``item`` in ``b[j0:j]`` (there is one)."""
        raise NotImplementedError

    def solve(self, i0: int, i1: int, j0: int, j1: int) -> None:
        """Append the pairs of one LCS of ``a[i0:i1]`` and ``b[j0:j1]`` to ``out``."""
        a, b, out = self.a, self.b, self.out
        while i0 < i1 and j0 < j1 and a[i0] == b[j0]:
            out.append((i0, j0))
            i0 += 1
            j0 += 1
        tail = 0
        while tail < i1 - i0 and tail < j1 - j0 and a[i1 - 1 - tail] == b[j1 - 1 - tail]:
            tail += 1
        i1, j1 = i1 - tail, j1 - tail
        if i0 < i1 and j0 < j1:
            if i1 - i0 <= _LEAF_ROWS:
                self._trace_block(i0, i1, j0, j1)
            else:
                mid = i0 + (i1 - i0) // 2
                split = self._best_split(i0, mid, i1, j0, j1)
                self.solve(i0, mid, j0, split)
                self.solve(mid, i1, split, j1)
        out.extend((i1 + k, j1 + k) for k in range(tail))

    def _best_split(self, i0: int, mid: int, i1: int, j0: int, j1: int) -> int:
        """The first ``j`` maximising LCS(a[i0:mid], b[j0:j]) + LCS(a[mid:i1], b[j:j1])."""
        n = j1 - j0
        fmt = f"0{n}b"
        full = (1 << n) - 1
        # Bit j of ~row is 1 where the LCS grows at b[j] (forward) or at b[j1 - 1 - j]
        # (backward). As text in b's order, growth reads '1' (49), else '0' (48).
        forward = format(~self._final_row(i0, mid, j0, j1, False) & full, fmt).encode()[::-1]
        backward = format(~self._final_row(mid, i1, j0, j1, True) & full, fmt).encode()
        # The sum at j is constant plus the forward growths before j minus the backward ones:
        # one step per position, 1 + forward - backward per byte (no byte borrows from the
        # next), read as -1, 0 or +1.
        steps = (int.from_bytes(forward, "big") + int.from_bytes(b"\x01" * n, "big")
                 - int.from_bytes(backward, "big")).to_bytes(n, "big").translate(_STEP)
        sums = list(accumulate(memoryview(steps).cast("b"), initial=0))
        return j0 + sums.index(max(sums))

    def _trace_block(self, i0: int, i1: int, j0: int, j1: int) -> None:
        """Trace one LCS of a short ``a[i0:i1]`` against ``b[j0:j1]`` back through every row.

        Bit ``j`` of row ``i`` is 1 where D[i][j + 1] == D[i][j] (no growth), so D[i][j] is
        ``j`` minus the ones below bit ``j``. From cell (i, j) the walk goes up while
        D[i - 1][j] == D[i][j]; otherwise every cell to the left up to the last occurrence of
        ``a[i - 1]`` in ``b[:j]`` holds the same value and that occurrence is a match, so the
        walk jumps straight to it: one count per row and one search per match.
        """
        rows = self._rows(i0, i1, j0, j1)
        a, last = self.a, self._finder()
        pairs: list[tuple[int, int]] = []
        i, j = i1 - i0, j1 - j0
        below = (1 << j) - 1
        ones = (rows[i] & below).bit_count()
        here = j - ones
        while here > 0:
            if (rows[i - 1] & below).bit_count() == ones:
                i -= 1
                continue
            i -= 1
            j = last(a[i0 + i], j0, j0 + j) - j0
            here -= 1
            pairs.append((i0 + i, j0 + j))
            below = (1 << j) - 1
            ones = j - here
        pairs.reverse()
        self.out.extend(pairs)


class _ByteHirschberg(_Hirschberg):
    """Items as byte ids (fewer than ``_BYTE_ALPHABET`` distinct items in ``b``): masks made
    by ``bytes.translate``, indexed by id, and the last match found by ``bytes.rfind``."""

    __slots__ = ("forward", "reverse")

    a: bytes
    b: bytes

    def __init__(self, a: bytes, b: bytes, absent: int, out: list[tuple[int, int]]) -> None:
        self.a, self.b, self.out = a, b, out
        # Masks of the ids that occur in a; id ``absent`` (and any other) has none.
        self.forward = [0] * (absent + 1)
        self.reverse = [0] * (absent + 1)
        zeros = b"0" * 256
        for k in set(a):
            if k == absent:
                continue
            # '1' where b has id k, read as a number with b[0] last (forward) or first.
            digits = b.translate(zeros[:k] + b"1" + zeros[k + 1:])
            self.forward[k] = int(digits[::-1], 2)
            self.reverse[k] = int(digits, 2)

    def _masks(self, text: bytes, j0: int, j1: int, backward: bool) -> list[int]:
        whole = self.reverse if backward else self.forward
        shift = len(self.b) - j1 if backward else j0
        full = (1 << (j1 - j0)) - 1
        masks = [0] * len(whole)
        for k in set(text):
            if whole[k]:
                masks[k] = (whole[k] >> shift) & full
        return masks

    def _final_row(self, i0: int, i1: int, j0: int, j1: int, backward: bool) -> int:
        text = self.a[i0:i1]
        if backward:
            text = text[::-1]
        masks = self._masks(text, j0, j1, backward)
        full = (1 << (j1 - j0)) - 1
        v = full
        for k in text:
            m = masks[k]
            if m:
                u = v & m
                v = (v + u) | (v ^ u)
        return v & full

    def _rows(self, i0: int, i1: int, j0: int, j1: int) -> list[int]:
        text = self.a[i0:i1]
        masks = self._masks(text, j0, j1, False)
        full = (1 << (j1 - j0)) - 1
        v = full
        out = [v]
        for k in text:
            m = masks[k]
            if m:
                u = v & m
                v = ((v + u) | (v ^ u)) & full
            out.append(v)
        return out

    def _finder(self) -> Callable[[Any, int, int], int]:
        return self.b.rfind


class _ItemHirschberg(_Hirschberg):
    """Any hashable items. Masks that do not fit the byte budget are rebuilt from the item's
    positions in the range on each use, as in ``_Masks``."""

    __slots__ = ("forward", "positions", "rare", "reverse")

    a: list[Hashable]
    b: list[Hashable]

    def __init__(self, a: list[Hashable], b: list[Hashable],
                 out: list[tuple[int, int]]) -> None:
        self.a, self.b, self.out = a, b, out
        positions, in_a = _positions_shared(b, a)
        n = len(b)
        budget = _MASK_BYTES_MIN + _MASK_BYTES_PER_ITEM * (len(a) + n)
        # Both masks of an item: bits up to its last position, and from its first one.
        ranked = sorted(positions.items(),
                        key=lambda kv: in_a[kv[0]] * len(kv[1]) / (n + kv[1][-1] - kv[1][0] + 16),
                        reverse=True)
        forward: dict[Hashable, int] = {}
        reverse: dict[Hashable, int] = {}
        rare: set[Hashable] = set()
        for item, where in ranked:
            size = ((where[-1] >> 3) + 1) + (((n - 1 - where[0]) >> 3) + 1)
            if size > budget:
                rare.add(item)
                continue
            budget -= size
            forward[item] = _mask(where)
            reverse[item] = _mask([n - 1 - j for j in reversed(where)])
        self.positions, self.forward, self.reverse, self.rare = positions, forward, reverse, rare

    def _sub(self, item: Hashable, j0: int, j1: int, backward: bool) -> int:
        """The mask of ``item`` in ``b[j0:j1]`` (``backward``: in that range reversed)."""
        whole = (self.reverse if backward else self.forward).get(item)
        if whole is not None:
            return (whole >> (len(self.b) - j1 if backward else j0)) & ((1 << (j1 - j0)) - 1)
        where = self.positions.get(item)
        if where is None:
            return 0
        lo, hi = bisect_left(where, j0), bisect_left(where, j1)
        if lo == hi:
            return 0
        return _mask([j1 - 1 - j for j in reversed(where[lo:hi])] if backward
                     else [j - j0 for j in where[lo:hi]])

    def _final_row(self, i0: int, i1: int, j0: int, j1: int, backward: bool) -> int:
        full = (1 << (j1 - j0)) - 1
        text = self.a[i0:i1]
        if backward:
            text.reverse()
        masks: dict[Hashable, int] = {}
        known, rare, sub = masks.get, self.rare, self._sub
        v = full
        for item in text:
            m = known(item)
            if m is None:
                m = sub(item, j0, j1, backward)
                if item not in rare:
                    masks[item] = m
            if m:
                u = v & m
                v = (v + u) | (v ^ u)
        return v & full

    def _rows(self, i0: int, i1: int, j0: int, j1: int) -> list[int]:
        full = (1 << (j1 - j0)) - 1
        masks: dict[Hashable, int] = {}
        known, rare, sub = masks.get, self.rare, self._sub
        v = full
        out = [v]
        for item in self.a[i0:i1]:
            m = known(item)
            if m is None:
                m = sub(item, j0, j1, False)
                if item not in rare:
                    masks[item] = m
            if m:
                u = v & m
                v = ((v + u) | (v ^ u)) & full
            out.append(v)
        return out

    def _finder(self) -> Callable[[Any, int, int], int]:
        positions = self.positions

        def last(item: Hashable, j0: int, j: int) -> int:
            found = positions[item]
            return found[bisect_left(found, j) - 1]

        return last
