"""Optimal pairings of expected entries with calls, shared by DeepEval's and Ragas' families.

Three pairings, each maximising the total of pair scores in [0, 1]:

- ``assign``: an assignment (each entry and each call used at most once, order ignored). Pairs
  only form within a block (one tool name, and for DeepEval one call type), so the caller
  hands in one block at a time. Inside a block, entries with equal arguments are one row class
  and calls with equal recorded arguments one column class; for each row class only its best
  columns can matter (those covering as many calls as the block has entries), and the rest is
  a transportation problem solved exactly by successive shortest paths over the classes. Its
  cost grows with the classes, not the calls: a 1,000-call run with a handful of distinct
  calls per tool costs about what a 10-call run does. A block with more than
  ``EXACT_CLASS_PAIRS`` (row class x kept column class) pairs is paired greedily by descending
  score instead (at least half the optimum), and the result says so.
- ``weighted_lcs``: an order-preserving pairing (DeepEval's ``should_consider_ordering``).
- ``longest_then_best``: among the longest order-preserving pairings of equal names, the one
  with the highest total (Ragas' ``strict_order``).

Both DPs keep each row as a staircase (where its best total rises) and visit only the cells
where names match, one per score class and step, so a 1,000-call run against a dozen entries
costs about what a 100-call run does; with ``class_candidates`` each (entry class, call class)
is scored once.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, compress, repeat
from operator import ne
from typing import Any

from .matching import check_budget

__all__ = [
    "EXACT_CLASS_PAIRS",
    "Assignment",
    "ScoredColumns",
    "assign",
    "assign_classes",
    "class_candidates",
    "longest_then_best",
    "value_key",
    "weighted_lcs",
]

#: Above this many (row class x kept column class) pairs in one block, ``assign`` pairs
#: greedily. 4,096 keeps the exact solver within a few milliseconds (docs/performance.md).
EXACT_CLASS_PAIRS = 4096

#: A DP row is computed dense (a copy and a maximum in C over the run's length) when this many
#: times its sparse work (steps + candidates visited) exceeds the run's length: a sparse cell is
#: Python, about twice a dense one (measured on the bench's runs and on dense random blocks).
DENSE_FACTOR = 2

Weight = Callable[[int, int], float]


@dataclass(frozen=True, slots=True)
class Assignment:
    """Pairs (row, column) with a positive score, and whether they are provably optimal."""

    pairs: list[tuple[int, int, float]]
    exact: bool = True


def value_key(value: Any) -> Hashable:
    """A hashable key equal for values equal under JSON value equality (``same_value``):
    ``1`` and ``1.0`` share a key, ``True`` and ``1`` do not, object key order is irrelevant."""
    cls = value.__class__
    if cls is str:
        return str(value)
    if cls is bool:
        return ("b", value)
    if cls is int or cls is float:
        return ("n", value)          # 1 == 1.0 and hash(1) == hash(1.0)
    if value is None:
        return ("z",)
    if isinstance(value, dict):
        return ("d", frozenset((k, value_key(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("l", tuple(value_key(v) for v in value))
    return ("o", repr(value))


def assign(row_keys: Sequence[Hashable], col_keys: Sequence[Hashable], weight: Weight
           ) -> Assignment:
    """A maximum-total pairing of rows with columns within one block.

    ``row_keys[r]`` / ``col_keys[c]`` are class keys: rows (columns) with equal keys must have
    equal weights against everything. ``weight(r, c)`` is the pair score in [0, 1]; pairs
    scoring 0 are never formed. Among optimal pairings, rows and columns are taken in index
    order within their classes.
    """
    if not row_keys or not col_keys:
        return Assignment([])
    return assign_classes(_classes(row_keys), _classes(col_keys), weight)


def assign_classes(rows: Sequence[Sequence[int]], cols: Sequence[Sequence[int]], weight: Weight
                   ) -> Assignment:
    """``assign`` on classes already formed: ``rows`` and ``cols`` list the ids of each class
    (ascending, classes in order of their first id), ``weight(r, c)`` takes ids and is asked
    once per (row class, column class); the pairs are (row id, column id, score)."""
    if not rows or not cols:
        return Assignment([])
    need = sum(map(len, rows))
    table: list[list[float]] = []
    kept: set[int] = set()
    for members in rows:
        check_budget()          # the run's grading budget bounds a pathological block
        line = [weight(members[0], c[0]) for c in cols]
        table.append(line)
        covered = 0
        # A row's partner can always be found among its best columns covering ``need``
        # calls: at most need - 1 of them are taken by other rows.
        for j in sorted((j for j, w in enumerate(line) if w > 0), key=lambda j: -line[j]):
            kept.add(j)
            covered += len(cols[j])
            if covered >= need:
                break
    keep = sorted(kept)
    if not keep:
        return Assignment([])
    weights = [[line[j] for j in keep] for line in table]
    supply = [len(m) for m in rows]
    capacity = [len(cols[j]) for j in keep]
    exact = len(rows) * len(keep) <= EXACT_CLASS_PAIRS
    flow = (_transport if exact else _greedy)(supply, capacity, weights)
    pairs: list[tuple[int, int, float]] = []
    row_next = [0] * len(rows)
    for kj, j in enumerate(keep):
        members = cols[j]
        taken = 0
        for i in range(len(rows)):
            units = flow[i][kj]
            if not units:
                continue
            start = row_next[i]
            for r, c in zip(rows[i][start:start + units], members[taken:taken + units]):
                pairs.append((r, c, weights[i][kj]))
            row_next[i] += units
            taken += units
    pairs.sort()
    return Assignment(pairs, exact)


def _classes(keys: Sequence[Hashable]) -> list[list[int]]:
    """Indices grouped by key, groups in order of first index."""
    groups: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        group = groups.get(key)
        if group is None:
            groups[key] = [i]
        else:
            group.append(i)
    return list(groups.values())


def _transport(supply: list[int], capacity: list[int], weights: list[list[float]]
               ) -> list[list[int]]:
    """Units per (row class, column class) of a maximum-total transportation plan.

    Successive shortest paths on the residual graph (source -> rows -> columns -> sink, a pair
    costing minus its score), each found by a queue-based Bellman-Ford since reverse arcs carry
    positive costs; augmenting stops when no path has a negative cost, i.e. when one more pair
    would not raise the total. Integral throughout: exact.
    """
    k, m = len(supply), len(capacity)
    flow = [[0] * m for _ in range(k)]
    left = supply[:]
    room = capacity[:]
    arcs = [[j for j in range(m) if weights[i][j] > 0] for i in range(k)]
    inf = float("inf")
    while True:
        check_budget()
        # Nodes: rows 0..k-1, columns k..k+m-1. Every row with supply left starts at 0.
        dist = [inf] * (k + m)
        back = [-1] * (k + m)
        queue: deque[int] = deque()
        queued = [False] * (k + m)
        for i in range(k):
            if left[i]:
                dist[i] = 0.0
                queue.append(i)
                queued[i] = True
        while queue:
            u = queue.popleft()
            queued[u] = False
            du = dist[u]
            if u < k:
                line = weights[u]
                for j in arcs[u]:
                    d = du - line[j]
                    if d < dist[k + j] - 1e-12:
                        dist[k + j] = d
                        back[k + j] = u
                        if not queued[k + j]:
                            queued[k + j] = True
                            queue.append(k + j)
            else:
                j = u - k
                for i in range(k):
                    if flow[i][j]:
                        d = du + weights[i][j]
                        if d < dist[i] - 1e-12:
                            dist[i] = d
                            back[i] = u
                            if not queued[i]:
                                queued[i] = True
                                queue.append(i)
        end, best = -1, -1e-12
        for j in range(m):
            if room[j] and dist[k + j] < best:
                end, best = j, dist[k + j]
        if end < 0:
            return flow
        # Walk back to a starting row, finding how many units the path can carry.
        units = room[end]
        node = k + end
        path = []
        while True:
            row = back[node]
            path.append((row, node - k))
            if back[row] < 0:
                break
            col = back[row] - k
            units = min(units, flow[row][col])
            path.append((row, -1 - col))        # a reverse arc: row gives back column col
            node = back[row]
        units = min(units, left[row])
        for i, j in path:
            if j >= 0:
                flow[i][j] += units
            else:
                flow[i][-1 - j] -= units
        left[row] -= units
        room[end] -= units


def _greedy(supply: list[int], capacity: list[int], weights: list[list[float]]
            ) -> list[list[int]]:
    """Best pairs first (ties: earlier classes): the bounded fallback, at least half the
    optimal total."""
    left, room = supply[:], capacity[:]
    flow = [[0] * len(capacity) for _ in supply]
    order = sorted(((w, i, j) for i, line in enumerate(weights) for j, w in enumerate(line)
                    if w > 0), key=lambda t: (-t[0], t[1], t[2]))
    for _, i, j in order:
        units = min(left[i], room[j])
        if units:
            flow[i][j] += units
            left[i] -= units
            room[j] -= units
    return flow


@dataclass(frozen=True, slots=True)
class ScoredColumns:
    """One row's candidate columns for the DPs below, grouped by score: ``groups`` holds
    (score, ascending columns) with each column in one group. Rows of one class share it."""

    groups: tuple[tuple[float, Sequence[int]], ...]

    def score_at(self, column: int) -> float:
        for score, columns in self.groups:
            i = bisect_left(columns, column)
            if i < len(columns) and columns[i] == column:
                return score
        raise KeyError(column)


#: ``candidates(r)`` for the DPs: row ``r``'s columns (ascending) and their scores, or the
#: same already grouped by score.
Candidates = Callable[[int], "tuple[Sequence[int], Sequence[float]] | ScoredColumns"]


def class_candidates(row_keys: Sequence[Hashable],
                     column_classes: Callable[[int], Sequence[Sequence[int]]],
                     weight: Weight) -> Callable[[int], ScoredColumns]:
    """``candidates`` for the DPs below, scoring each (row class, column class) once.

    ``column_classes(r)`` gives the columns row ``r`` may pair with as classes (ascending
    columns that score alike against every row; the same object for rows of one block), and
    ``weight(r, c)`` is called for one column of each class. Rows with equal keys and equal
    ``column_classes`` share their result.
    """
    memo: dict[tuple[Hashable, int], ScoredColumns] = {}

    def candidates(r: int) -> ScoredColumns:
        classes = column_classes(r)
        key = (row_keys[r], id(classes))
        found = memo.get(key)
        if found is None:
            by_score: dict[float, list[Sequence[int]]] = {}
            for members in classes:
                by_score.setdefault(weight(r, members[0]), []).append(members)
            found = memo[key] = ScoredColumns(tuple(
                (score, parts[0] if len(parts) == 1 else sorted(chain.from_iterable(parts)))
                for score, parts in by_score.items()))
        return found

    return candidates


def _grouped(found: tuple[Sequence[int], Sequence[float]] | ScoredColumns) -> ScoredColumns:
    if isinstance(found, ScoredColumns):
        return found
    by_score: dict[float, list[int]] = {}
    for c, w in zip(*found):
        by_score.setdefault(w, []).append(c)
    return ScoredColumns(tuple(by_score.items()))


#: A row of a DP as a staircase: the prefix counts where the best total rises, and the totals
#: from there on (the dense row's value at x is the total of the last step at or before x).
Stairs = tuple[list[int], list[Any]]


def _stairs(n_rows: int, n_cols: int, candidates: Candidates, gain: Callable[[float], Any]
            ) -> tuple[list[Stairs], list[ScoredColumns]]:
    """The rows of an order-preserving DP, each kept as its staircase.

    Row r + 1's total at x is the best of row r's at x and, for each column c < x row r may
    take, row r's total at c plus ``gain(score)`` (pairs with a gain <= 0 are not formed). Only
    the cells where names match are visited: for each step of row r and each score group, the
    first column of the group inside the step (later ones give the same total further right),
    found by bisection when the group has more columns than the row has steps. A row whose
    steps and candidates come near the run's length (many distinct scores for one tool) is
    computed as a dense row instead, its maximum in C. Either way exactly the values of the
    dense table (the same sums, the same maxima).
    """
    stairs: list[Stairs] = [([0], [0])]
    rows: list[ScoredColumns] = []
    dense: list[Any] | None = None        # the previous row, dense, when it was computed so
    for r in range(n_rows):
        check_budget()
        xs, vs = stairs[-1]
        row = _grouped(candidates(r))
        rows.append(row)
        live = [(g, columns) for g, columns in ((gain(score), columns)
                                                 for score, columns in row.groups)
                if g > 0 and columns]
        if not live:
            stairs.append(stairs[-1])
            continue
        k_steps = len(xs)
        if DENSE_FACTOR * (k_steps + sum(min(k_steps, len(c)) for _, c in live)) > n_cols:
            if dense is None:
                dense = _expand(xs, vs, n_cols)
            cand = dense[:]
            for g, columns in live:
                for c in columns:
                    cand[c + 1] = max(cand[c + 1], dense[c] + g)
            dense = list(accumulate(cand, max))
            rises = [0, *compress(range(1, n_cols + 1), map(ne, dense[1:], dense[:-1]))]
            stairs.append((rises, list(map(dense.__getitem__, rises))))
            continue
        dense = None
        points: list[tuple[int, Any]] = []
        for g, columns in live:
            m = len(columns)
            if k_steps < m:
                i = 0
                for k in range(k_steps):
                    i = bisect_left(columns, xs[k], i)
                    if i == m:
                        break
                    c = columns[i]
                    if k + 1 == k_steps or c < xs[k + 1]:
                        points.append((c + 1, vs[k] + g))
            else:
                k, seen, end = 0, -1, columns[-1] + 1
                limit = xs[1] if k_steps > 1 else end
                for c in columns:
                    while c >= limit:
                        k += 1
                        limit = xs[k + 1] if k + 1 < k_steps else end
                    if k != seen:
                        points.append((c + 1, vs[k] + g))
                        seen = k
        if len(live) > 1:
            points.sort()
        new_x, new_v = [0], [vs[0]]
        best = vs[0]
        i, j, n_points = 1, 0, len(points)
        while i < k_steps or j < n_points:
            if j == n_points or (i < k_steps and xs[i] <= points[j][0]):
                x, v = xs[i], vs[i]
                i += 1
            else:
                x, v = points[j]
                j += 1
            if v > best:
                best = v
                if new_x[-1] == x:
                    new_v[-1] = v
                else:
                    new_x.append(x)
                    new_v.append(v)
        stairs.append((new_x, new_v))
    return stairs, rows


def _expand(xs: Sequence[int], vs: Sequence[Any], n_cols: int) -> list[Any]:
    """A staircase as its dense row of n_cols + 1 totals."""
    out: list[Any] = []
    for k, x in enumerate(xs):
        out.extend(repeat(vs[k], (xs[k + 1] if k + 1 < len(xs) else n_cols + 1) - x))
    return out


def _value(stairs: Stairs, x: int) -> Any:
    xs, vs = stairs
    return vs[bisect_right(xs, x) - 1]


def weighted_lcs(n_rows: int, n_cols: int, candidates: Candidates
                 ) -> tuple[float, list[tuple[int, int, float]]]:
    """The order-preserving pairing with the highest total (DeepEval's weighted LCS).

    ``candidates(r)`` gives the columns row ``r`` may pair with (ascending) and their scores;
    pairs scoring 0 add nothing and are not formed. Returns (total, pairs). Time and memory
    grow with the candidates and the steps of each row's staircase, not with rows x columns.
    """
    stairs, rows = _stairs(n_rows, n_cols, candidates, lambda score: score)
    return _value(stairs[-1], n_cols), _trace(stairs, rows, n_rows, n_cols)


def longest_then_best(n_rows: int, n_cols: int, candidates: Candidates, scale: int = 1
                      ) -> list[tuple[int, int, float]]:
    """Among the longest order-preserving pairings over ``candidates`` (equal names), the one
    with the highest total score (Ragas' strict order). Pairs scoring 0 count for length.

    Scores must be multiples of ``1 / scale`` (Ragas' are hits / reference keys: ``scale`` is
    the least common multiple of the key counts). A DP cell is then one exact integer,
    ``length * (n_rows * scale + 1) + total * scale``, which orders as (length, total).
    """
    big = n_rows * scale + 1
    stairs, rows = _stairs(n_rows, n_cols, candidates,
                          lambda score: big + round(score * scale))
    return _trace(stairs, rows, n_rows, n_cols)


def _trace(stairs: Sequence[Stairs], rows: Sequence[ScoredColumns], r: int, x: int
           ) -> list[tuple[int, int, float]]:
    """The pairs of a DP, walking back from (r, x) as through the dense table: up while the
    row above has the same total, else left to the start of the step, where a pair ends."""
    pairs: list[tuple[int, int, float]] = []
    while r > 0 and x > 0:
        here, above = stairs[r], stairs[r - 1]
        if here is not above:
            xs, vs = here
            k = bisect_right(xs, x) - 1
            if vs[k] != _value(above, x):
                x = xs[k] - 1
                pairs.append((r - 1, x, rows[r - 1].score_at(x)))
        r -= 1
    pairs.reverse()
    return pairs
