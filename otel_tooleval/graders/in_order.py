"""``tool_trajectory``'s ``in_order`` mode: the largest ordered matching of the expected entries
with the run's calls (gaps allowed), and among the largest, the best score.

Seven functions, one entry point, ``_in_order``, which picks in this order (CPU µs from
``python tests/bench/bench_in_order.py --paths``, one run on the 2-core CI machine):

1. ``_diagonal``: as many calls as entries and every call matching the entry at its position.
   That is then the only largest matching, found in one pass that stops at the first position
   that differs (a run that did exactly what its list says: 73 against 1,050 µs for the sparse
   DP at 1,000 calls, 8 against 98 at 100).
2. ``_in_order_bits``: no entry has a latency limit. Every largest matching then scores the
   same, so only its length counts: bit-parallel rows through ``ordered_match``, choosing the
   very matching ``_in_order_settled`` would (1.4 against 24 ms at 1,000 calls; the column DP
   costs less below about 50 x 50, 6 against 23 µs at 10 x 10, but that is microseconds).
3. ``_in_order_settled``: limits, no pending call, and at most ``_COLUMNS_UPTO`` (300)
   entry x call cells: a column of packed ints per call, whose setup costs no index.
4. ``_sparse_settled`` / ``_sparse_fronts``: limits, a larger run (or any run with a pending
   call), and the matching (entry, call) pairs within ``_pair_budget``: a DP over those pairs
   only (``_pair_index``, ``_matching_pairs``, ``_in_band``), O(r log E) for r pairs, on a
   coding agent's run of 1,000 calls 1.6 ms against 53 for the column DP, 2.1 against 106 with
   pending calls. ``_sparse_fronts`` keeps Pareto fronts, which a pending call needs (it makes
   a latency aspect neutral, so the score is a ratio no single number ranks);
   ``_sparse_settled`` packs a state into one int and costs 0.6-0.8x the fronts.
5. ``_in_order_settled`` / ``_in_order_fronts``: limits and too many candidate pairs (entries
   without args, or only nested ones, against many calls of their tool: r ~ E x calls /
   tools). There the settled column costs 0.6-0.75x the sparse DP (51 against 82 ms at 1,000
   calls), and the pairs alone would be r objects held at once where a column DP holds one
   column: the fronts stay for that memory bound, though the sparse fronts are faster (133
   against 258 ms), since a pending call there has no other bounded path.

All of them choose the same matching, tie-breaks included (earlier calls, then smaller entries):
``tests/test_in_order_bits.py`` and ``tests/test_in_order_sparse.py`` check them against the
oracle copy and each other; docs/performance.md has the figures and how to reproduce them.
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

from ..model import ToolCall
from ..ordered_match import ROW_BUDGET_BYTES, in_order_pairs
from ..values import decode_value
from .trajectory_entries import _by_tool, _Entry, args_match

__all__ = ["_by_tool", "_in_order", "_pair_index"]


# -- in_order: the largest ordered matching, best score among those -------------------------------
#
# A column of states over the expected entries, rolled over the calls (no full table). A state is
# (hits, front): among the largest matchings of that prefix, the Pareto front of (neutral,
# latency_hits, path) options. Score = (hits + latency_hits) / (E + L - neutral) is a ratio, not a
# sum, so no single number can rank partial matchings; but an option with at least as many
# neutral aspects and at least as many latency hits as another scores at least as well after any
# common continuation, so only the front is kept (one option unless pending calls were matched).
# Every largest matching extends largest matchings of its prefixes, so this is exact. Paths are
# shared linked tuples (entry, call, rest): memory stays linear in the number of entries.

_Path = tuple[int, int, Any] | None
_Option = tuple[int, int, _Path]
_State = tuple[int, tuple[_Option, ...]]


def _front(options: Sequence[_Option]) -> tuple[_Option, ...]:
    """The undominated options by ascending neutral count; earlier options win exact ties."""
    kept: list[_Option] = []
    for option in sorted(options, key=lambda o: (-o[0], -o[1])):
        if not kept or option[1] > kept[-1][1]:
            kept.append(option)
    kept.reverse()
    return tuple(kept)


def _better(a: _State, b: _State) -> _State:
    """The combination of two states; ``a`` wins ties (it uses earlier calls)."""
    if a is b:
        return a
    if a[0] != b[0]:
        return a if a[0] > b[0] else b
    fa, fb = a[1], b[1]
    if len(fa) == 1 and len(fb) == 1:
        (na, la, _), (nb, lb, _) = fa[0], fb[0]
        if na >= nb and la >= lb:
            return a
        if nb >= na and lb >= la:
            return b
    front = _front(fa + fb)
    if len(front) == len(fa) and all(x is y for x, y in zip(front, fa)):
        return a
    return a[0], front


def _extend(state: _State, entry: int, call: int, neutral: int, hit: int) -> _State:
    return state[0] + 1, tuple((n + neutral, lh + hit, (entry, call, path))
                               for n, lh, path in state[1])


_PENDING = attrgetter("pending")




def _in_order(entries: Sequence[_Entry], calls: Sequence[ToolCall],
              by_tool: Mapping[str, list[_Entry]],
              index: _Index | None = None) -> dict[int, ToolCall]:
    """Entry index -> matched call for the best largest in-order matching (``by_tool``:
    ``_by_tool(entries)``; ``index``: ``_pair_index(by_tool)``, built when needed if not given).

    Without latency limits every largest matching scores the same (hits / entries), so only
    the length counts and ``_in_order_bits`` finds it bit-parallel, choosing the very matching
    ``_in_order_settled`` would. With limits the choice weighs latency hits and neutral aspects
    too, which a length-only recurrence cannot see: those go through the sparse DPs over the
    matching (entry, call) pairs (``_sparse_settled``, ``_sparse_fronts``), the same matching
    as the column DPs below, which remain for runs where the pairs would be too many (entries
    without args, or whose args have no scalar value to index, against many calls of their tool)
    and for small runs without pending calls (``_COLUMNS_UPTO``), where the columns are short
    and the sparse DPs' lookups and steps cost more than they save.
    """
    if len(entries) == len(calls) and _diagonal(entries, calls):
        return dict(enumerate(calls))
    if all(e.limit is None for e in entries):
        return _in_order_bits(entries, calls, by_tool)
    pending = any(map(_PENDING, calls))
    if not pending and len(entries) * len(calls) <= _COLUMNS_UPTO:
        return _in_order_settled(entries, calls, by_tool)
    pairs = _matching_pairs(calls, by_tool, _pair_budget(len(entries), len(calls)), index)
    if pairs is not None:
        pairs = _in_band(pairs, len(entries), len(calls))
        if pending:
            return _sparse_fronts(entries, calls, pairs)
        return _sparse_settled(entries, calls, pairs)
    if not pending:
        return _in_order_settled(entries, calls, by_tool)
    return _in_order_fronts(entries, calls, by_tool)


def _diagonal(entries: Sequence[_Entry], calls: Sequence[ToolCall]) -> bool:
    """Whether every call matches the entry at its position, stopping at the first that does
    not. With as many calls as entries, the diagonal is then the only largest matching (a
    matching of all the entries and all the calls in order can pair them only position by
    position), so every tie-break agrees on it: a run that did exactly what its expected list
    says is matched in one pass, as ``exact`` mode would check it.
    """
    for e, call in zip(entries, calls):
        if call.name != e.tool:
            return False
        if e.args is None:
            continue
        raw = call.raw_arguments
        if raw.__class__ is str and raw == e.text and (
                call.envelope is None or call.envelope.arguments_from is None):
            continue                # _Entry.args_hold's shortcut, in line
        if not e.args_hold(call):
            return False
    return True


#: Up to this many (entry, call) cells, a run without pending calls goes through the column DP
#: (``_in_order_settled``): measured on tests/bench/peer_trajectories.py runs, the columns cost
#: 0.6x the sparse DP's at 10 x 10 and break even near 20 x 20. With pending calls the sparse
#: DP (``_sparse_fronts``) is as fast or faster at every size.
_COLUMNS_UPTO = 300


def _in_order_bits(entries: Sequence[_Entry], calls: Sequence[ToolCall],
                   by_tool: Mapping[str, list[_Entry]]) -> dict[int, ToolCall]:
    """``_in_order`` for entries without latency limits, through ``ordered_match``.

    An entry's mask over the calls: for a plain tool entry, every call of that tool (one mask
    per tool, shared); for an entry with arguments, the calls of its tool whose arguments
    match, found in one pass over those calls only.
    """
    positions: dict[str, list[int]] = {tool: [] for tool in by_tool}
    for j, call in enumerate(calls):
        found = positions.get(call.name)
        if found is not None:
            found.append(j)
    plain: dict[str, list[int]] = {}          # entry indices, per tool: without args
    with_args: dict[str, list[int]] = {}      # and with args
    for e in entries:
        (plain if e.args is None else with_args).setdefault(e.tool, []).append(e.index)
    masks: dict[Any, int] = {}                # by tool, or by tool and args: entries share
    budget = [ROW_BUDGET_BYTES]               # bytes of masks kept

    def mask_of(k: int) -> int:
        entry = entries[k]
        key = entry.tool if entry.args is None else _args_key(entry)
        mask = masks.get(key)
        if mask is not None:
            return mask
        where = positions[entry.tool]
        if entry.args is not None:
            where = [j for j in where if entry.args_hold(calls[j])]
        mask = _mask(where)
        size = len(where) and (where[-1] >> 3) + 1
        if key is not None and size <= budget[0]:
            budget[0] -= size
            masks[key] = mask
        return mask

    def first_match(lo: int, hi: int, j: int) -> int:
        call = calls[j]
        indices = plain.get(call.name, ())
        p = bisect_left(indices, lo)
        best = indices[p] if p < len(indices) and indices[p] < hi else hi
        indices = with_args.get(call.name, ())
        for p in range(bisect_left(indices, lo), len(indices)):
            k = indices[p]
            if k >= best:
                break
            if entries[k].args_hold(call):
                return k
        return best

    pairs = in_order_pairs(len(entries), len(calls), mask_of, first_match)
    return {k: calls[j] for k, j in pairs}


def _args_key(entry: _Entry) -> tuple[str, str] | None:
    """Entries with equal tool and args match the same calls: one mask for all of them."""
    try:
        return entry.tool, json.dumps(entry.args, sort_keys=True)
    except (TypeError, ValueError):
        return None


def _mask(positions: Sequence[int]) -> int:
    if not positions:
        return 0
    buf = bytearray((positions[-1] >> 3) + 1)
    for p in positions:
        buf[p >> 3] |= 1 << (p & 7)
    return int.from_bytes(buf, "little")


def _in_order_fronts(entries: Sequence[_Entry], calls: Sequence[ToolCall],
                     by_tool: Mapping[str, list[_Entry]]) -> dict[int, ToolCall]:
    """The general case: Pareto fronts, needed once a pending call makes an aspect neutral."""
    start: _State = (0, ((0, 0, None),))
    column: list[_State] = [start] * (len(entries) + 1)
    for j, call in enumerate(calls):
        entries_of_tool = by_tool.get(call.name)
        if entries_of_tool is None:
            continue            # a call no entry matches leaves the column as it was
        candidates = [e for e in entries_of_tool if e.args_hold(call)]
        if not candidates:
            continue
        matching = {e.index: e for e in candidates}
        first = candidates[0].index
        new = column[:first + 1]
        previous = new[-1]
        for i in range(first + 1, len(entries) + 1):
            # _better inlined for the common cases: same object, or different hit counts.
            above = column[i]
            if above is previous or above[0] > previous[0]:
                best = above
            elif above[0] < previous[0]:
                best = previous
            else:
                best = _better(above, previous)
            entry = matching.get(i - 1)
            if entry is not None:
                best = _better(best, _extend(column[i - 1], i - 1, j, *entry.latency(call)))
            new.append(best)
            previous = best
        column = new
    return _best_of_front(column[-1], entries, calls)


def _best_of_front(state: _State, entries: Sequence[_Entry], calls: Sequence[ToolCall]
                   ) -> dict[int, ToolCall]:
    """The matching of the best-scoring option of a final state's front (earlier options win
    ties), as entry index -> call."""
    hits, front = state
    aspects = len(entries) + sum(1 for e in entries if e.limit is not None)
    chosen = front[0]
    for option in front[1:]:
        if (hits + option[1]) * (aspects - chosen[0]) > (hits + chosen[1]) * (aspects - option[0]):
            chosen = option
    matched: dict[int, ToolCall] = {}
    path = chosen[2]
    while path is not None:
        entry_index, call_index, path = path
        matched[entry_index] = calls[call_index]
    return matched


def _in_order_settled(entries: Sequence[_Entry], calls: Sequence[ToolCall],
                      by_tool: Mapping[str, list[_Entry]]) -> dict[int, ToolCall]:
    """``_in_order`` for runs without pending calls, in plain integers.

    With no pending call every latency aspect of a matched entry is a hit or a miss, never
    neutral, so among the largest matchings the best score is the one with the most latency
    hits: states order by (hits, latency hits), packed into one int as hits * (E + 1) + lat.
    Ties keep the earlier calls, as ``_better`` does.
    """
    n = len(entries)
    scale = n + 1
    # column[i]: the best (key, path) over the first i entries and the calls so far. It never
    # decreases along i, so a call changes it only from a matching entry onwards, and only
    # while the raised value exceeds what was there: the rest is left as it was.
    column: list[tuple[int, _Path]] = [(0, None)] * (n + 1)
    for j, call in enumerate(calls):
        entries_of_tool = by_tool.get(call.name)
        if entries_of_tool is None:
            continue
        new = None
        for entry in entries_of_tool:       # ascending entry index
            if not entry.args_hold(call):
                continue
            if new is None:
                new = column[:]
            k = entry.index
            diagonal = column[k]            # the previous call's column: one call per entry
            key = diagonal[0] + scale
            if entry.limit is not None:     # a latency hit ranks above a miss
                duration = call.duration_ms
                key += duration is not None and duration <= entry.limit
            if key > new[k + 1][0]:         # strictly: ties keep the earlier calls
                new[k + 1] = raised = (key, (k, j, diagonal[1]))
                i = k + 2
                while i <= n and new[i][0] < key:
                    new[i] = raised
                    i += 1
        if new is not None:
            column = new
    matched: dict[int, ToolCall] = {}
    path = column[-1][1]
    while path is not None:
        entry_index, call_index, path = path
        matched[entry_index] = calls[call_index]
    return matched


# -- in_order with latency limits, sparse ----------------------------------------------------------
#
# The column DPs above keep, for every prefix of the entries, the first best state in the order
# (call, entry) of the pair that made it: a state changes only where a pair strictly improves
# it, calls in order and a call's entries in ascending order. So the state of a prefix is the
# first best over the pairs (entry k, call j) with k inside it, where a pair's value extends the
# state of the prefix before k as it stood before call j. Only the matching pairs are visited:
# candidate entries come from an index by tool and by one scalar argument of the entry (a
# partial match needs that very value in the call), and the column is kept as its steps (it
# only grows along the entries), read for all of a call's pairs before they are written.
# O(r log E) in the number r of matching pairs (plus list moves in C) instead of O(E) per
# matching call.

_SCALAR = (str, int, float, bool, type(None))
_ABSENT = object()
_INDEX = attrgetter("index")
_Pairs = list[tuple[int, list[_Entry]]]
_Group = tuple[dict[str, Any] | None, list[_Entry]]     # entries with equal args


def _pair_budget(entries: int, calls: int) -> int:
    """Most candidate pairs for which the sparse DPs beat the column DPs.

    A pair costs two bisections and a few list moves where the column DPs pay one short step
    per entry of the call's tool and a column copy: past about E x calls / 8 pairs, the
    candidates are nearly all the entries of the tool and the columns win.
    """
    return max(4 * (entries + calls), entries * calls // 8)


_Keyed = dict[str, dict[str, dict[Any, list[_Group]]]]
_Found = tuple[list[_Entry] | None, int]     # a call's matching entries, candidates examined
#: (tool -> key -> value -> groups, tool -> groups without a scalar, (tool, args text) -> the
#: matching entries of a call recording that text, once computed: None until then).
_Index = tuple[_Keyed, dict[str, list[_Group]], dict[tuple[str, str], _Found | None]]


def _pair_index(by_tool: Mapping[str, list[_Entry]]) -> _Index:
    """The index ``_matching_pairs`` looks candidates up in. It depends on the entries only,
    so a grader builds it once.

    An entry whose args hold a scalar at the top level can only match calls with that very
    value under that key (``args_match`` is partial but exact on scalars; Python's ``==`` and
    hash agree with it or are looser, as in ``True == 1``, and every candidate is confirmed),
    so entries are filed under the key of theirs that the fewest entries of their tool share.
    The others (no args, or only nested values) are candidates for every call of their tool.
    Entries with equal args form one group, confirmed once per call.

    The third part caches, per entry text (``_Entry.text``, the ``json.dumps`` of its args),
    what a call of that tool recording exactly that text matches: its arguments decode to that
    entry's args, whatever the call, so the answer is looked up once per grader and the
    calls that recorded it (most, where an expected list was written from real runs) are
    neither decoded nor compared again.
    """
    index: _Keyed = {}
    loose: dict[str, list[_Group]] = {}
    texts: dict[tuple[str, str], _Found | None] = {}
    for tool, group in by_tool.items():
        groups: dict[Any, _Group] = {}
        for e in group:
            if e.text is not None:
                texts[tool, e.text] = None
            same = _flat_key(e.args)
            made = groups.get(("entry", e.index) if same is None else same)
            if made is None:
                groups[("entry", e.index) if same is None else same] = (e.args, [e])
            else:
                made[1].append(e)
        scalars = {id(made): [item for item in made[0].items() if isinstance(item[1], _SCALAR)]
                   for made in groups.values() if made[0]}
        shared = Counter(item for items in scalars.values() for item in items)
        for made in groups.values():
            items = scalars.get(id(made))
            if not items:
                loose.setdefault(tool, []).append(made)
                continue
            key, value = min(items, key=shared.__getitem__)
            index.setdefault(tool, {}).setdefault(key, {}).setdefault(value, []).append(made)
    return index, loose, texts


_NONE: tuple[_Group, ...] = ()


def _candidates(keyed: dict[str, dict[Any, list[_Group]]] | None, free: Sequence[_Group],
                actual: Any) -> _Found:
    """The entries (ascending) of a call's tool that match its decoded arguments ``actual``
    (None: none do), and how many candidates were examined; ``keyed`` and ``free``: the
    tool's part of ``_pair_index``."""
    if actual is None:
        actual = {}     # a span that recorded no arguments: a call with none
    # The matching groups' entries: the one group's own list (read-only) when only one
    # matches, as it mostly does; a new list, sorted, when more do.
    found: list[_Entry] | None = None
    many = False
    examined = 0
    if keyed is not None and (actual.__class__ is dict or isinstance(actual, Mapping)):
        for key, buckets in keyed.items():
            value = actual.get(key, _ABSENT)
            if value is _ABSENT or not isinstance(value, _SCALAR):
                continue
            for args, entries in buckets.get(value, _NONE):
                examined += len(entries)
                if args_match(args, actual):
                    if found is None:
                        found = entries
                    else:
                        found, many = found + entries, True
    for args, entries in free:
        examined += len(entries)
        if args is None or args_match(args, actual):
            if found is None:
                found = entries
            else:
                found, many = found + entries, True
    if many:
        found.sort(key=_INDEX)      # type: ignore[union-attr]  # many: found is a list
    return found, examined


def _matching_pairs(calls: Sequence[ToolCall], by_tool: Mapping[str, list[_Entry]],
                    budget: int, index: _Index | None = None) -> _Pairs | None:
    """(call index, its matching entries in ascending order) for every call some entry
    matches; None once the candidates examined exceed ``budget``. ``index``:
    ``_pair_index(by_tool)``, built here when not given.
    """
    keyed_by_tool, loose, texts = _pair_index(by_tool) if index is None else index
    if loose:
        counts = Counter(call.name for call in calls)
        if sum(counts[tool] * sum(len(g[1]) for g in groups_of)
               for tool, groups_of in loose.items()) > budget:
            return None
    pairs: _Pairs = []
    examined = 0
    for j, call in enumerate(calls):
        tool = call.name
        raw = call.raw_arguments
        if raw.__class__ is str and texts:
            known = texts.get((tool, raw), _ABSENT)
            if known is not _ABSENT and (
                    call.envelope is None or call.envelope.arguments_from is None):
                if known is None:
                    known = texts[tool, raw] = _candidates(
                        keyed_by_tool.get(tool), loose.get(tool, _NONE), decode_value(raw))
                cached: _Found = known      # type: ignore[assignment]  # not _ABSENT here
                found, n = cached
                examined += n
                if examined > budget:
                    return None
                if found is not None:
                    pairs.append((j, found))
                continue
        keyed = keyed_by_tool.get(tool)
        free = loose.get(tool, _NONE)
        if keyed is None and not free:
            continue            # no entry of this tool: its arguments are not even decoded
        found, n = _candidates(keyed, free, call.arguments)
        examined += n
        if examined > budget:
            return None
        if found is not None:
            pairs.append((j, found))
    return pairs


#: How far the diagonal of ``_in_band``'s greedy matching may move in one step.
_REACH = 16


def _in_band(pairs: _Pairs, n_entries: int, n_calls: int) -> _Pairs:
    """``pairs`` without those that no largest matching can hold.

    A matching holding the pair (k, j) holds at most min(k, j) pairs before it and
    min(E - 1 - k, M - 1 - j) after it; when that bound is below the size S of some matching,
    the pair is in no largest one, and the sparse DPs choose the same matching without it
    (every state on the path of a largest matching is made of pairs of largest matchings
    only). The bound holds S exactly when S - M <= k - j <= E - S: a band along the diagonal.
    S comes from a greedy matching: for each call, its first entry past the last one taken,
    when the offset between entry and call moves by at most ``_REACH`` (any entry after
    ``_REACH`` calls without one). A run that follows its expected list closely keeps its
    pairs near the diagonal, and repeats of a value far away in the run are dropped here.
    """
    last = taken_at = -1
    size = 0
    for j, found in pairs:
        for e in found:
            k = e.index
            if k > last:
                if -_REACH <= (k - j) - (last - taken_at) <= _REACH or j - taken_at > _REACH:
                    last, taken_at = k, j
                    size += 1
                break
    low, high = size - n_calls, n_entries - size       # the band of k - j
    kept: _Pairs = []
    dropped = False
    for pair in pairs:
        j, found = pair
        if found[0].index - j >= low and found[-1].index - j <= high:
            kept.append(pair)
            continue
        dropped = True
        within = [e for e in found if low <= e.index - j <= high]
        if within:
            kept.append((j, within))
    return kept if dropped else pairs


def _flat_key(args: dict[str, Any] | None) -> tuple[Any, ...] | None:
    """Equal for args that match the same calls: flat scalars, compared with their types
    (``True == 1`` to Python, not to ``args_match``); None for nested ones."""
    if args is None:
        return (None,)          # not (): {} does not match a call whose arguments are text
    key: list[Any] = []
    for name, value in args.items():
        if not isinstance(value, _SCALAR):
            return None
        key += (name, value.__class__, value)
    return tuple(key)


def _sparse_settled(entries: Sequence[_Entry], calls: Sequence[ToolCall],
                    pairs: _Pairs) -> dict[int, ToolCall]:
    """``_in_order_settled``'s matching from the matching pairs only.

    A state is one int: its key (hits * (E + 1) + latency hits) times ``width``, plus a
    tie-break that is larger for an earlier call, then a smaller entry (the pair that made it),
    so the first best is simply the largest. The column, the best state of every prefix of
    the entries, only grows along the entries: it is kept as its steps, ``starts`` (ascending
    prefix lengths) with strictly ascending ``values``. A pair raising the prefixes from k + 1
    on replaces the steps it exceeds, each removed once.
    """
    n, m = len(entries), len(calls)
    scale = n + 1
    width = (m + 1) * scale
    starts, values = [0], [0]
    # The pairs that made a step, three ints each in one flat list (no object per pair): the
    # entry, the call and the position of the pair before it on the path (-1: none);
    # ``steps`` holds each step's position.
    trail: list[int] = []
    steps = [-1]
    made: list[int] = []                    # (first, value, before, entry) per pair of a call
    for j, found in pairs:
        call = calls[j]
        end = call.end_ns                   # ToolCall.duration_ms, in line
        duration = None if call.pending or end is None else (end - call.start_ns) / 1e6
        tie = (m - j) * scale + n
        if len(found) == 1:                 # one pair: read and written at once
            e = found[0]
            k = e.index
            if k >= starts[-1]:
                # The pair extends the best state of all: a new last step (what the general
                # path below comes to when k is past the last step's start), as most pairs of
                # a run that follows its expected list closely do.
                key = values[-1] // width + scale
                limit = e.limit
                if limit is not None and duration is not None and duration <= limit:
                    key += 1
                before = steps[-1]
                steps.append(len(trail))
                trail += (k, j, before)
                starts.append(k + 1)
                values.append(key * width + tie - k)
                continue
            at = bisect_right(starts, k) - 1
            key = values[at] // width + scale
            limit = e.limit
            if limit is not None and duration is not None and duration <= limit:
                key += 1
            made = [k + 1, key * width + tie - k, steps[at], k]
        else:
            made = []
            for e in found:                 # all read before any is written: one call each
                k = e.index
                at = bisect_right(starts, k) - 1
                key = values[at] // width + scale
                limit = e.limit
                if limit is not None and duration is not None and duration <= limit:
                    key += 1
                made += (k + 1, key * width + tie - k, steps[at], k)
        for p in range(0, len(made), 4):
            first, value = made[p], made[p + 1]
            at = bisect_right(starts, first) - 1
            if values[at] >= value:
                continue
            if starts[at] != first:
                at += 1
            end = bisect_left(values, value, at)
            step = len(trail)
            trail += (made[p + 3], j, made[p + 2])
            if end == at:
                starts.insert(at, first)
                values.insert(at, value)
                steps.insert(at, step)
            else:
                starts[at], values[at], steps[at] = first, value, step
                if end > at + 1:
                    del starts[at + 1:end], values[at + 1:end], steps[at + 1:end]
    matched: dict[int, ToolCall] = {}
    step = steps[-1]
    while step >= 0:
        matched[trail[step]] = calls[trail[step + 1]]
        step = trail[step + 2]
    return matched


def _earlier(a: _Option, b: _Option) -> bool:
    """Whether ``a``'s last pair comes first in (call, entry) order."""
    pa, pb = a[2], b[2]
    if pa is None or pb is None:
        return pb is not None or pa is None
    return (pa[1], pa[0]) < (pb[1], pb[0])


def _merge(a: _State, b: _State) -> _State:
    """The combination of two prefix states: the most hits, then the Pareto front of their
    options; of two options with equal aspects, the one whose last pair comes first. ``a``
    itself when nothing of ``b`` enters it."""
    if a is b:
        return a
    if a[0] != b[0]:
        return a if a[0] > b[0] else b
    fa, fb = a[1], b[1]
    if len(fa) == 1 and len(fb) == 1:
        (na, la, _), (nb, lb, _) = fa[0], fb[0]
        if na == nb and la == lb:
            return a if _earlier(fa[0], fb[0]) else b
        if na >= nb and la >= lb:
            return a
        if nb >= na and lb >= la:
            return b
    points: dict[tuple[int, int], _Option] = {}
    for option in fa + fb:
        point = option[0], option[1]
        other = points.get(point)
        if other is None or _earlier(option, other):
            points[point] = option
    front = _front(list(points.values()))
    if len(front) == len(fa) and all(x is y for x, y in zip(front, fa)):
        return a
    return a[0], front


def _sparse_fronts(entries: Sequence[_Entry], calls: Sequence[ToolCall],
                   pairs: _Pairs) -> dict[int, ToolCall]:
    """``_in_order_fronts``'s matching from the matching pairs only.

    The column is kept as its steps, as in ``_sparse_settled``; a prefix state is the merge
    (``_merge``, order-free) of the pairs inside it. A new pair's state merges into the steps
    from k + 1 on and stops at the first one it leaves unchanged: every later step holds the
    options that absorbed it there, or better ones.
    """
    starts = [0]
    states: list[_State] = [(0, ((0, 0, None),))]
    for j, found in pairs:
        duration = calls[j].duration_ms
        made: list[tuple[int, _State]] = []
        for e in found:
            k = e.index
            hits, front = states[bisect_right(starts, k) - 1]
            if e.limit is None:
                neutral = hit = 0
            elif duration is None:
                neutral, hit = 1, 0
            else:
                neutral, hit = 0, int(duration <= e.limit)
            if len(front) == 1:
                n0, h0, rest = front[0]
                made.append((k + 1, (hits + 1, ((n0 + neutral, h0 + hit, (k, j, rest)),))))
            else:
                made.append((k + 1, _extend((hits, front), k, j, neutral, hit)))
        for first, state in made:
            at = bisect_right(starts, first) - 1
            merged = _merge(states[at], state)
            if merged is states[at]:
                continue
            if starts[at] != first:         # split the step at first
                at += 1
                starts.insert(at, first)
                states.insert(at, merged)
            else:
                states[at] = merged
            end, hits = at + 1, state[0]
            while end < len(states) and states[end][0] < hits:
                end += 1                    # fewer hits: the new state replaces them whole
            del starts[at + 1:end], states[at + 1:end]
            end = at + 1
            while end < len(states):        # as many hits: merged, until one absorbs it
                now = states[end]
                merged = _merge(now, state)
                if merged is now:
                    break
                if merged is state and states[end - 1] is state:
                    del starts[end], states[end]
                else:
                    states[end] = merged
                    end += 1
    return _best_of_front(states[-1], entries, calls)
