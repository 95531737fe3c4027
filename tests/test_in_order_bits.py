"""``tool_trajectory`` in_order, bit-parallel (``ordered_match``): the same matchings as the
column DPs it replaced, on random runs with plain and argument-matching entries, repeated tools,
pending calls and latency limits.

The oracle below is the implementation before the bit-parallel one, kept verbatim (only names
and imports adapted) so that the comparison does not drift with the module: ``_oracle`` picks
``_settled`` without pending calls and ``_fronts`` with them, as ``_in_order`` did.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_tooleval import ordered_match
from otel_tooleval.graders import in_order as tt
from otel_tooleval.graders.trajectory_entries import _Entry
from otel_tooleval.model import ToolCall
from tests.support.runs import call as scripted
from tests.support.runs import grade

# -- the oracle: tool_trajectory's in_order before ordered_match ------------------------------

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


def _oracle(entries: Sequence[_Entry], calls: Sequence[ToolCall],
            by_tool: Mapping[str, list[_Entry]]) -> dict[int, ToolCall]:
    if not any(c.pending for c in calls):
        return _settled(entries, calls, by_tool)
    return _fronts(entries, calls, by_tool)


def _fronts(entries: Sequence[_Entry], calls: Sequence[ToolCall],
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
    hits, front = column[-1]
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


def _settled(entries: Sequence[_Entry], calls: Sequence[ToolCall],
             by_tool: Mapping[str, list[_Entry]]) -> dict[int, ToolCall]:
    """``_oracle`` for runs without pending calls, in plain integers.

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




# -- random runs ------------------------------------------------------------------------------

TOOLS = "abc"
ARGS = st.one_of(st.none(), st.fixed_dictionaries({"x": st.integers(0, 2)}),
                 st.fixed_dictionaries({"x": st.integers(0, 2), "y": st.sampled_from("pq")}))
LIMITS = st.sampled_from([5.0, 50.0])


def _entries(draw: st.DrawFn, size: int, limits: bool) -> list[_Entry]:
    out = []
    for i in range(size):
        tool = draw(st.sampled_from(TOOLS))
        args = draw(ARGS)
        limit = draw(st.one_of(st.none(), LIMITS)) if limits else None
        out.append(_Entry(i, tool, args, limit))
    return out


def _calls(draw: st.DrawFn, size: int) -> list[ToolCall]:
    out = []
    for j in range(size):
        name = draw(st.sampled_from(TOOLS + "d"))
        args = draw(st.one_of(ARGS, st.just({}), st.just("plain text")))
        pending = draw(st.booleans()) and draw(st.booleans())
        duration = draw(st.sampled_from([1, 10, 100]))
        raw = None if args is None else args if isinstance(args, str) else json.dumps(args)
        out.append(ToolCall(name, j, raw_arguments=raw, pending=pending, start_ns=0,
                            end_ns=None if pending else duration * 1_000_000))
    return out


@st.composite
def runs(draw: st.DrawFn, limits: bool = False, most: int = 12
         ) -> tuple[list[_Entry], list[ToolCall]]:
    entries = _entries(draw, draw(st.integers(1, most)), limits)
    return entries, _calls(draw, draw(st.integers(0, most + 4)))


def _chosen(matched: Mapping[int, ToolCall]) -> dict[int, int]:
    return {k: c.index for k, c in matched.items()}


def _both(entries: list[_Entry], calls: list[ToolCall]) -> tuple[dict[int, int], dict[int, int]]:
    by_tool = tt._by_tool(entries)
    return (_chosen(tt._in_order(entries, calls, by_tool)),
            _chosen(_oracle(entries, calls, by_tool)))


@settings(max_examples=400, deadline=None)
@given(runs())
def test_same_matching_as_the_oracle_without_latency_limits(
        run: tuple[list[_Entry], list[ToolCall]]) -> None:
    new, old = _both(*run)
    assert new == old


@settings(max_examples=200, deadline=None)
@given(runs(limits=True))
def test_same_matching_as_the_oracle_with_latency_limits(
        run: tuple[list[_Entry], list[ToolCall]]) -> None:
    new, old = _both(*run)
    assert new == old


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(most=60))
def test_same_matching_with_rows_recomputed_from_checkpoints(
        run: tuple[list[_Entry], list[ToolCall]]) -> None:
    saved = ordered_match.ROW_BUDGET_BYTES
    ordered_match.ROW_BUDGET_BYTES = 1      # blocks of ~sqrt(entries) rows, two cached
    try:
        new, old = _both(*run)
    finally:
        ordered_match.ROW_BUDGET_BYTES = saved
    assert new == old


def test_checkpointed_rows_equal_the_full_table(monkeypatch: pytest.MonkeyPatch) -> None:
    masks = [(k * 2654435761) % (1 << 40) for k in range(100)]
    full = ordered_match._Rows(100, 40, masks.__getitem__)
    assert full.block == 101
    monkeypatch.setattr(ordered_match, "ROW_BUDGET_BYTES", 1)
    blocked = ordered_match._Rows(100, 40, masks.__getitem__)
    assert blocked.block < 20
    table = [full[k] for k in range(101)]
    assert [blocked[k] for k in reversed(range(101))] == table[::-1]
    assert [blocked[k] for k in range(101)] == table
    assert len(blocked.cache) <= 2


def _lcs_table(masks: Sequence[int], width: int) -> int:
    prev = [0] * (width + 1)
    for m in masks:
        row = [0]
        for j in range(width):
            row.append(prev[j] + 1 if m >> j & 1 else max(prev[j + 1], row[j]))
        prev = row
    return prev[-1]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 20).flatmap(lambda width: st.tuples(
    st.just(width), st.lists(st.integers(0, (1 << width) - 1), min_size=1, max_size=20))))
def test_ordered_match_is_a_largest_matching_under_any_masks(
        case: tuple[int, list[int]]) -> None:
    width, masks = case

    def first_match(lo: int, hi: int, j: int) -> int:
        return next(k for k in range(lo, hi) if masks[k] >> j & 1)

    pairs = ordered_match.in_order_pairs(len(masks), width, masks.__getitem__, first_match)
    assert len(pairs) == _lcs_table(masks, width)
    assert all(masks[k] >> j & 1 for k, j in pairs)
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in itertools.pairwise(pairs))


def test_a_long_run_with_arguments_and_pending_calls_matches_the_oracle() -> None:
    import random

    rng = random.Random(16)
    entries = [_Entry(i, rng.choice("ab"), rng.choice([None, None, {"x": rng.randrange(3)}]),
                      None) for i in range(400)]
    calls = []
    for j in range(500):
        pending = rng.random() < 0.1
        calls.append(ToolCall(rng.choice("abc"), j,
                              raw_arguments=json.dumps({"x": rng.randrange(3)}),
                              pending=pending, start_ns=0, end_ns=None if pending else 5))
    new, old = _both(entries, calls)
    assert new == old
    assert len(new) > 200


def test_grading_through_spans_reports_the_oracle_matching() -> None:
    expected = [{"tool": "a"}, {"tool": "b", "args": {"x": 1}}, {"tool": "a"}, {"tool": "c"},
                {"tool": "b"}] * 6
    script = [scripted("abcab"[i % 5], {"x": i % 3}, pending=i % 7 == 0) for i in range(45)]
    r = grade({"graders": [{"type": "tool_trajectory", "mode": "in_order",
                            "expected": expected}]}, script)
    entries = [_Entry(i, e["tool"], e.get("args"), None) for i, e in enumerate(expected)]
    calls = [ToolCall(c["name"], j, raw_arguments=json.dumps(c["args"]), pending=c["pending"])
             for j, c in enumerate(script)]
    old = _chosen(_oracle(entries, calls, tt._by_tool(entries)))
    assert [e["call"] for e in r.details["entries"]] == [old.get(i) for i in range(30)]
    assert r.details["hits"] == len(old) and r.score == len(old) / 30
