"""Longest common subsequence of two sequences of hashable items, in linear memory.

``lcs_length`` runs the bit-vector algorithm of Allison-Dix / Hyyrö over Python big ints: the
longer sequence is the bit dimension, and each item of the shorter one updates the whole DP row
in four big-int operations (``U = V & M[c]; V = (V + U) | (V ^ U)``), so 10,000 x 10,000 items
take a few tens of milliseconds.

``lcs_pairs`` recovers one longest common subsequence with Hirschberg's divide and conquer: it
splits the shorter sequence in half, finds where the optimal path crosses the middle from one
forward and one backward bit-vector row, and recurses; blocks of at most ``_LEAF_ROWS`` items
are traced back from their stored rows. Memory stays linear in the input (``_LEAF_ROWS`` rows
of the longer sequence at most) and the time is about twice that of ``lcs_length``.

Match masks (one big int per distinct item, with a bit at each position of the item) would be
quadratic for inputs with many distinct items, so only the masks that save the most work are
kept, within a budget of ``_MASK_BYTES_PER_ITEM`` bytes per input item; the others are rebuilt
from the item's positions when needed.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Hashable, Sequence
from itertools import accumulate
from typing import TypeVar

__all__ = ["lcs", "lcs_length", "lcs_pairs"]

H = TypeVar("H", bound=Hashable)

# Rows kept per traced-back block: memory _LEAF_ROWS x len(longer) bits, as text.
_LEAF_ROWS = 64
# Match masks kept per call, in bytes per input item (plus a small constant).
_MASK_BYTES_PER_ITEM = 8
_MASK_BYTES_MIN = 4096


class _Masks:
    """Match masks of a pattern: bit ``i`` of ``mask(c)`` is set where ``pattern[i] == c``.

    Only items that also occur in ``text`` matter. The masks that save the most rebuilding
    (occurrences in the text times occurrences in the pattern, per byte) are built once, within
    the byte budget; the rest are rebuilt from their positions on each use.
    """

    __slots__ = ("cached", "positions")

    def __init__(self, pattern: Sequence[Hashable], text: Sequence[Hashable]) -> None:
        in_text = Counter(text)
        positions: dict[Hashable, list[int]] = {}
        get = positions.get
        for i, item in enumerate(pattern):
            found = get(item)
            if found is not None:
                found.append(i)
            elif item in in_text:
                positions[item] = [i]
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


def _rows(pattern: Sequence[Hashable], text: Sequence[Hashable]) -> list[int]:
    """Every bit-vector row: the initial one and the one after each item of ``text``."""
    masks = _Masks(pattern, text)
    cached, positions = masks.cached.get, masks.positions.get
    full = (1 << len(pattern)) - 1
    v = full
    out = [v]
    for item in text:
        m = cached(item)
        if m is None:
            where = positions(item)
            m = 0 if where is None else _mask(where)
        u = v & m
        v = ((v + u) | (v ^ u)) & full
        out.append(v)
    return out


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
    out: list[tuple[int, int]] = []
    _hirschberg(list(short), list(long_), 0, 0, out)
    return [(j, i) for i, j in out] if swap else out


def lcs(a: Sequence[H], b: Sequence[H]) -> list[H]:
    """One longest common subsequence of ``a`` and ``b``, as a list of ``a``'s items."""
    return [a[i] for i, _ in lcs_pairs(a, b)]


def _hirschberg(a: list[H], b: list[H], a0: int, b0: int,
                out: list[tuple[int, int]]) -> None:
    """Append the pairs of one LCS of ``a`` and ``b`` (offset by ``a0``, ``b0``) to ``out``."""
    head, tail = _trim(a, b)
    out.extend((a0 + k, b0 + k) for k in range(head))
    suffix = [(a0 + len(a) - tail + k, b0 + len(b) - tail + k) for k in range(tail)]
    if head or tail:
        a, b = a[head:len(a) - tail], b[head:len(b) - tail]
        a0, b0 = a0 + head, b0 + head
    if a and b:
        if len(a) <= _LEAF_ROWS:
            _trace_block(a, b, a0, b0, out)
        else:
            mid = len(a) // 2
            split = _best_split(a[:mid], a[mid:], b)
            _hirschberg(a[:mid], b[:split], a0, b0, out)
            _hirschberg(a[mid:], b[split:], a0 + mid, b0 + split, out)
    out.extend(suffix)


def _best_split(top: list[H], bottom: list[H], b: list[H]) -> int:
    """The ``j`` maximising LCS(top, b[:j]) + LCS(bottom, b[j:])."""
    n = len(b)
    fmt = f"0{n}b"
    # Counting zero bits from the low end: bit j of ~row is 1 where the LCS grows at b[j].
    forward = format(~_final_row(b, top) & ((1 << n) - 1), fmt).encode()[::-1]
    backward = format(~_final_row(b[::-1], bottom[::-1]) & ((1 << n) - 1), fmt).encode()[::-1]
    # accumulate over bytes adds ord('0') or ord('1'); subtract 48 per position.
    f = list(accumulate(forward, initial=0))
    r = list(accumulate(backward, initial=0))
    best_j, best = 0, -1
    for j in range(n + 1):
        score = f[j] + r[n - j] - 48 * n
        if score > best:
            best_j, best = j, score
    return best_j


def _trace_block(a: list[H], b: list[H], a0: int, b0: int,
                 out: list[tuple[int, int]]) -> None:
    """Trace one LCS of a short ``a`` against ``b`` back through every stored row.

    Row ``i`` as text: character ``j`` is '1' where D[i][j + 1] == D[i][j] (no growth), so
    D[i][j] = j - row.count('1', 0, j). From cell (i, j) the walk goes up while
    D[i - 1][j] == D[i][j]; otherwise every cell to the left up to the last occurrence of
    ``a[i - 1]`` in ``b[:j]`` holds the same value and that occurrence is a match, so the walk
    jumps straight to it: one count per row and one bisection per match.
    """
    n = len(b)
    fmt = f"0{n}b"
    rows = [format(v, fmt)[::-1] for v in _rows(b, a)]
    wanted = set(a)
    where: dict[Hashable, list[int]] = {}
    for j, item in enumerate(b):
        if item in wanted:
            where.setdefault(item, []).append(j)
    pairs: list[tuple[int, int]] = []
    i, j = len(a), n
    here = j - rows[i].count("1", 0, j)
    while here > 0:
        if j - rows[i - 1].count("1", 0, j) == here:
            i -= 1
            continue
        found = where[a[i - 1]]
        j = found[bisect_left(found, j) - 1]
        i -= 1
        here -= 1
        pairs.append((a0 + i, b0 + j))
    pairs.reverse()
    out.extend(pairs)
