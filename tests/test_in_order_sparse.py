"""``tool_trajectory`` in_order with latency limits, sparse (``_sparse_settled``,
``_sparse_fronts``): the same matchings as the column DPs they replaced.

The oracle is the column-DP copy kept in ``tests/test_in_order_bits.py`` (the implementation
before any of the fast paths, verbatim), so the comparison does not drift with the module. The
runs mix entries without args, with scalar, nested, list, boolean and null values, and ``{}``;
calls without arguments, with plain text or nested values, duplicates, pending calls and calls
that ended without a duration.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_tooleval.graders import in_order as tt
from otel_tooleval.graders.trajectory_entries import _Entry
from otel_tooleval.model import _UNSET, ToolCall
from tests.support.runs import call as scripted
from tests.support.runs import grade, run_of
from tests.test_in_order_bits import _fronts, _oracle, _settled

TOOLS = "ab"
ENTRY_ARGS: list[dict[str, Any] | None] = [
    None, None, {}, {"x": 0}, {"x": 1}, {"x": 2}, {"x": 1, "y": "p"}, {"x": 1, "y": "q"},
    {"y": "p"}, {"x": True}, {"x": 1.0}, {"x": None}, {"n": {"x": 1}}, {"n": {}},
    {"l": [0, 1]}, {"l": []}, {"x": 1, "n": {"x": 0}}, {"x": "1"},
]
CALL_ARGS: list[Any] = [
    None, {}, {"x": 0}, {"x": 1}, {"x": 2}, {"x": 1, "y": "p"}, {"x": 1, "y": "q"},
    {"x": True}, {"x": 1.5}, {"x": None}, {"x": "1"}, {"x": [1]}, {"x": {"a": 1}},
    {"n": {"x": 1, "z": 2}}, {"n": {"x": 0}}, {"x": 1, "n": {"x": 0}}, {"l": [0, 1]},
    {"l": [0, 1.0, 2]}, {"l": []}, "plain text", [1, 2],
]


@st.composite
def runs(draw: st.DrawFn, most: int = 14) -> tuple[list[_Entry], list[ToolCall]]:
    entries = []
    for i in range(draw(st.integers(1, most))):
        limit = draw(st.sampled_from([None, 5.0, 50.0, 50.0]))
        entries.append(_Entry(i, draw(st.sampled_from(TOOLS)), draw(st.sampled_from(ENTRY_ARGS)),
                              limit))
    if all(e.limit is None for e in entries):      # the bit-parallel path: not this module's
        entries[0] = _Entry(0, entries[0].tool, entries[0].args, 5.0)
    calls = []
    pending_at_all = draw(st.booleans())
    for j in range(draw(st.integers(0, most + 4))):
        name = draw(st.sampled_from(TOOLS + "c"))
        args = draw(st.sampled_from(CALL_ARGS))
        pending = pending_at_all and draw(st.integers(0, 3)) == 0
        unfinished = not pending and draw(st.integers(0, 9)) == 0   # ended, no end time
        duration = draw(st.sampled_from([1, 10, 100]))
        raw = None if args is None else args if isinstance(args, str) else json.dumps(args)
        calls.append(ToolCall(name, j, raw_arguments=raw, pending=pending, start_ns=0,
                              end_ns=None if pending or unfinished else duration * 1_000_000))
    return entries, calls


def _chosen(matched: Mapping[int, ToolCall]) -> dict[int, int]:
    return {k: c.index for k, c in matched.items()}


def _sparse(entries: list[_Entry], calls: list[ToolCall]) -> dict[int, int]:
    pairs = tt._matching_pairs(calls, tt._by_tool(entries), budget=1 << 60)
    assert pairs is not None
    if any(c.pending for c in calls):
        return _chosen(tt._sparse_fronts(entries, calls, pairs))
    return _chosen(tt._sparse_settled(entries, calls, pairs))


@settings(max_examples=300, deadline=None)
@given(runs())
def test_the_index_finds_exactly_the_matching_pairs(
        run: tuple[list[_Entry], list[ToolCall]]) -> None:
    entries, calls = run
    pairs = tt._matching_pairs(calls, tt._by_tool(entries), budget=1 << 60)
    assert pairs is not None
    found = {(e.index, j) for j, matching in pairs for e in matching}
    assert found == {(e.index, j) for j, c in enumerate(calls) for e in entries if e.matches(c)}
    for _, matching in pairs:
        assert [e.index for e in matching] == sorted(e.index for e in matching)
        assert matching


@settings(max_examples=500, deadline=None)
@given(runs())
def test_same_matching_as_the_column_dps(run: tuple[list[_Entry], list[ToolCall]]) -> None:
    entries, calls = run
    assert _sparse(entries, calls) == _chosen(_oracle(entries, calls, tt._by_tool(entries)))


@settings(max_examples=300, deadline=None)
@given(runs())
def test_with_pending_calls_as_settled_ones_the_fronts_agree_too(
        run: tuple[list[_Entry], list[ToolCall]]) -> None:
    # _sparse_fronts on a run without pending calls: the general recurrence, many ties.
    entries, calls = run
    pairs = tt._matching_pairs(calls, tt._by_tool(entries), budget=1 << 60)
    assert pairs is not None
    by_tool = tt._by_tool(entries)
    assert (_chosen(tt._sparse_fronts(entries, calls, pairs))
            == _chosen(_fronts(entries, calls, by_tool)))
    if not any(c.pending for c in calls):
        assert (_chosen(tt._sparse_settled(entries, calls, pairs))
                == _chosen(_settled(entries, calls, by_tool)))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(most=70))
def test_longer_runs_match_the_column_dps(run: tuple[list[_Entry], list[ToolCall]]) -> None:
    entries, calls = run
    assert _sparse(entries, calls) == _chosen(_oracle(entries, calls, tt._by_tool(entries)))


def test_past_the_budget_the_column_dps_are_used() -> None:
    entries = [_Entry(i, "a", None, 5.0) for i in range(6)]
    calls = [ToolCall("a", j, start_ns=0, end_ns=j * 2_000_000) for j in range(6)]
    by_tool = tt._by_tool(entries)
    assert tt._matching_pairs(calls, by_tool, budget=36) is not None
    assert tt._matching_pairs(calls, by_tool, budget=35) is None   # 36 candidates
    assert _chosen(tt._in_order(entries, calls, by_tool)) == {k: k for k in range(6)}


def _coding_run(n: int, rng: random.Random, pending: float
                ) -> tuple[list[_Entry], list[ToolCall]]:
    """The bench's shape: every entry with its call's full args and a limit; some edits."""
    plan = []
    for i in range(n):
        tool = rng.choice(["read_file", "search", "bash"])
        args = {"path": f"src/{rng.randrange(n // 4 + 1)}.py"} if tool == "read_file" else \
            {"query": f"q{rng.randrange(5)}", "glob": "*.py"} if tool == "search" else \
            {"command": rng.choice(["ls", "make", "pytest -x"])}
        plan.append((tool, args, rng.choice([1, 30, 120])))
    actual = list(plan)
    for _ in range(n // 10):
        i = rng.randrange(len(actual))
        if rng.random() < 0.5:
            del actual[i]
        else:
            actual.insert(i, plan[rng.randrange(n)])
    entries = [_Entry(i, tool, args, 100.0) for i, (tool, args, _) in enumerate(plan)]
    calls = []
    for j, (tool, args, ms) in enumerate(actual):
        waiting = rng.random() < pending
        calls.append(ToolCall(tool, j, raw_arguments=json.dumps(args), pending=waiting,
                              start_ns=0, end_ns=None if waiting else ms * 1_000_000))
    return entries, calls


def test_a_long_coding_run_with_repeated_calls_matches_the_oracle() -> None:
    rng = random.Random(19)
    for pending in (0.0, 0.05):
        entries, calls = _coding_run(300, rng, pending)
        by_tool = tt._by_tool(entries)
        assert tt._matching_pairs(calls, by_tool, tt._pair_budget(300, len(calls))) is not None
        new = _chosen(tt._in_order(entries, calls, by_tool))
        assert new == _chosen(_oracle(entries, calls, by_tool))
        assert len(new) > 250


def test_grading_through_spans_reports_the_oracle_matching_and_latency() -> None:
    rng = random.Random(7)
    expected = [{"tool": "read_file", "args": {"path": f"f{i % 4}"}, "max_duration_ms": 50}
                if i % 3 else {"tool": "bash", "args": {"command": "ls"}, "max_duration_ms": 20}
                for i in range(24)]
    script = [scripted("read_file" if j % 3 else "bash",
                       {"path": f"f{rng.randrange(4)}"} if j % 3 else {"command": "ls"},
                       pending=j % 11 == 5, duration_ms=rng.choice([10, 30, 60]))
              for j in range(40)]
    config = {"graders": [{"type": "tool_trajectory", "mode": "in_order", "expected": expected}]}
    r = grade(config, script)
    entries = [_Entry(i, e["tool"], e["args"], e["max_duration_ms"])
               for i, e in enumerate(expected)]
    calls = run_of(script).calls
    old = _chosen(_oracle(entries, calls, tt._by_tool(entries)))
    assert [e["call"] for e in r.details["entries"]] == [old.get(i) for i in range(24)]
    assert r.details["hits"] == len(old) > 12
    assert r.details["latency"]["neutral"] > 0      # a pending call was matched: the fronts


@settings(max_examples=200, deadline=None)
@given(runs(most=24), st.data())
def test_small_settled_runs_take_the_columns_larger_ones_the_sparse_dp(
        run: tuple[list[_Entry], list[ToolCall]], data: st.DataObject) -> None:
    # _in_order picks the column DP up to _COLUMNS_UPTO cells without pending calls: both
    # sides of the cutoff give the oracle's matching, and each side takes its own path.
    entries, calls = run
    calls = [ToolCall(c.name, c.index, raw_arguments=c.raw_arguments, start_ns=0,
                      end_ns=c.end_ns) for c in calls]         # settled: no pending call
    by_tool = tt._by_tool(entries)
    taken: list[str] = []
    columns, sparse = tt._in_order_settled, tt._sparse_settled

    def spy_columns(*args: Any) -> Any:
        taken.append("columns")
        return columns(*args)

    def spy_sparse(*args: Any) -> Any:
        taken.append("sparse")
        return sparse(*args)

    index = tt._pair_index(by_tool) if data.draw(st.booleans()) else None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tt, "_in_order_settled", spy_columns)
        mp.setattr(tt, "_sparse_settled", spy_sparse)
        got = _chosen(tt._in_order(entries, calls, by_tool, index))
    assert got == _chosen(_oracle(entries, calls, by_tool))
    if len(entries) == len(calls) and tt._diagonal(entries, calls):
        assert taken == []                  # matched on the diagonal: neither DP
    elif len(entries) * len(calls) <= tt._COLUMNS_UPTO:
        assert taken == ["columns"]
    elif tt._matching_pairs(calls, by_tool, tt._pair_budget(len(entries), len(calls))):
        assert taken == ["sparse"]


def test_the_cutoff_between_the_columns_and_the_sparse_dp_keeps_the_matching() -> None:
    rng = random.Random(5)
    sides = set()
    for n in (8, 16, 17, 18, 30):
        entries, calls = _coding_run(n, rng, 0.0)
        by_tool = tt._by_tool(entries)
        sides.add(len(entries) * len(calls) <= tt._COLUMNS_UPTO)
        assert (_chosen(tt._in_order(entries, calls, by_tool, tt._pair_index(by_tool)))
                == _chosen(_oracle(entries, calls, by_tool)) == _sparse(entries, calls))
    assert sides == {True, False}


# -- the entry-text cache and the diagonal band -------------------------------------------------

def _brute_pairs(entries: list[_Entry], calls: list[ToolCall]) -> list[tuple[int, list[int]]]:
    """Every call's matching entries, by ``_Entry.matches`` one by one."""
    out = []
    for j, call in enumerate(calls):
        found = [e.index for e in entries if e.matches(call)]
        if found:
            out.append((j, found))
    return out


def _indices(pairs: Any) -> list[tuple[int, list[int]]]:
    return [(j, [e.index for e in found]) for j, found in pairs]


class _Unwrap:
    """A framework envelope: the arguments are under "inner" (``ToolConvention``'s part)."""

    result_from = None

    @staticmethod
    def arguments_from(value: Any) -> Any:
        return value.get("inner") if isinstance(value, dict) else value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(most=20), st.lists(st.lists(st.sampled_from(CALL_ARGS + ENTRY_ARGS[2:]),
                                        max_size=12), min_size=1, max_size=3), st.data())
def test_the_entry_text_cache_gives_every_run_the_matching_pairs(
        run: tuple[list[_Entry], list[ToolCall]], more: list[list[Any]],
        data: st.DataObject) -> None:
    # One index, hence one cache, across several runs: calls that recorded an entry's very
    # json.dumps text are answered from it, every other one decoded, an enveloped call always.
    entries, calls = run
    by_tool = tt._by_tool(entries)
    index = tt._pair_index(by_tool)
    assert _indices(tt._matching_pairs(calls, by_tool, 1 << 60, index)) == \
        _brute_pairs(entries, calls)
    for arguments in more:
        later = []
        for j, args in enumerate(arguments):
            raw = args if isinstance(args, str) else json.dumps(args)
            wrapped = data.draw(st.integers(0, 4)) == 0
            if wrapped:
                raw = json.dumps({"inner": args})
            later.append(ToolCall(data.draw(st.sampled_from(TOOLS)), j, raw_arguments=raw,
                                  start_ns=0, end_ns=1_000_000,
                                  envelope=_Unwrap() if wrapped else None))
        assert _indices(tt._matching_pairs(later, by_tool, 1 << 60, index)) == \
            _brute_pairs(entries, later)


def test_a_call_recording_an_entry_text_is_not_decoded() -> None:
    entries = [_Entry(0, "read", {"path": "a.py"}, 50.0), _Entry(1, "read", {}, 50.0)]
    by_tool = tt._by_tool(entries)
    index = tt._pair_index(by_tool)
    first = ToolCall("read", 0, raw_arguments=json.dumps({"path": "a.py"}), start_ns=0,
                     end_ns=1)
    assert _indices(tt._matching_pairs([first], by_tool, 1 << 60, index)) == [(0, [0, 1])]
    assert index[2]["read", '{"path": "a.py"}'] is not None     # answered once, kept
    again = ToolCall("read", 0, raw_arguments='{"path": "a.py"}', start_ns=0, end_ns=1)
    assert _indices(tt._matching_pairs([again], by_tool, 1 << 60, index)) == [(0, [0, 1])]
    assert again.decoded_arguments is _UNSET                     # never decoded
    # The same text under an envelope is decoded and unwrapped: here to nothing that matches
    # entry 0, while {} (entry 1) still matches a call whose arguments are not an object.
    wrapped = ToolCall("read", 0, raw_arguments='{"path": "a.py"}', start_ns=0, end_ns=1,
                       envelope=_Unwrap())
    assert _indices(tt._matching_pairs([wrapped], by_tool, 1 << 60, index)) == \
        _brute_pairs(entries, [wrapped])
    assert wrapped.decoded_arguments is None


def test_the_band_drops_far_pairs_and_keeps_the_oracle_matching() -> None:
    rng = random.Random(23)
    dropped_somewhere = False
    for n, pending in ((120, 0.0), (200, 0.0), (200, 0.05), (300, 0.0)):
        entries, calls = _coding_run(n, rng, pending)
        by_tool = tt._by_tool(entries)
        pairs = tt._matching_pairs(calls, by_tool, 1 << 60)
        assert pairs is not None
        band = tt._in_band(pairs, len(entries), len(calls))
        kept = sum(len(f) for _, f in band)
        dropped_somewhere |= kept < sum(len(f) for _, f in pairs)
        dp = tt._sparse_fronts if pending else tt._sparse_settled
        assert _chosen(dp(entries, calls, band)) == _chosen(dp(entries, calls, pairs)) == \
            _chosen(_oracle(entries, calls, by_tool))
    assert dropped_somewhere


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(most=40))
def test_the_band_never_changes_the_matching(run: tuple[list[_Entry], list[ToolCall]]) -> None:
    # Whatever the greedy finds (a poor size on shuffled runs only widens the band), the
    # pairs it drops are in no largest matching: both DPs choose as without the band.
    entries, calls = run
    pairs = tt._matching_pairs(calls, tt._by_tool(entries), 1 << 60)
    assert pairs is not None
    band = tt._in_band(pairs, len(entries), len(calls))
    for dp in (tt._sparse_settled, tt._sparse_fronts):
        if dp is tt._sparse_settled and any(c.pending for c in calls):
            continue
        assert _chosen(dp(entries, calls, band)) == _chosen(dp(entries, calls, pairs))


def test_the_band_is_exact_at_its_edges() -> None:
    # Entries v = 0..39; the calls follow them, with one early call of v = 30 (calls 0, 1,
    # 30, 2, 3, ..., 39). The largest matching takes every entry in order (40) and leaves
    # the early call; the greedy, which does not jump 28 entries ahead, finds it too, so the
    # band is 40 - 41 <= k - j <= 40 - 40: the early pair (30, call 2) is dropped and every
    # pair of the diagonal, at offset 0 or -1, is kept.
    entries = [_Entry(i, "t", {"v": i}, 50.0) for i in range(40)]
    values = [0, 1, 30] + list(range(2, 40))
    calls = [ToolCall("t", j, raw_arguments=json.dumps({"v": v}), start_ns=0, end_ns=1)
             for j, v in enumerate(values)]
    pairs = tt._matching_pairs(calls, tt._by_tool(entries), 1 << 60)
    assert (2, [30]) in _indices(pairs)
    band = _indices(tt._in_band(pairs, 40, 41))
    assert band == [(j, [v]) for j, v in enumerate(values) if j != 2]
    assert _chosen(tt._sparse_settled(entries, calls, tt._in_band(pairs, 40, 41))) == \
        {v: j for j, v in enumerate(values) if j != 2}
    # Without the early call the band is 40 - 40 <= k - j <= 0 (the diagonal alone), and a
    # run one call short (entry 5's call left out) keeps offsets 0 and 1 only.
    short = [v for v in range(40) if v != 5]
    calls = [ToolCall("t", j, raw_arguments=json.dumps({"v": v}), start_ns=0, end_ns=1)
             for j, v in enumerate(short)]
    pairs = tt._matching_pairs(calls, tt._by_tool(entries), 1 << 60)
    assert tt._in_band(pairs, 40, 39) is pairs        # nothing to drop: the very list


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(most=30), st.data())
def test_a_run_that_follows_its_list_exactly_is_matched_on_the_diagonal(
        run: tuple[list[_Entry], list[ToolCall]], data: st.DataObject) -> None:
    # Calls written from the entries (each one matching the entry at its position, some
    # pending, limits or not): the diagonal, and the oracle's choice, whatever else matches.
    entries, _ = run
    if data.draw(st.booleans()):
        entries = [_Entry(e.index, e.tool, e.args, None) for e in entries]  # the bits path
    calls = []
    for j, e in enumerate(entries):
        args = e.args if e.args is not None else data.draw(st.sampled_from(CALL_ARGS))
        raw = None if args is None else args if isinstance(args, str) else json.dumps(args)
        pending = data.draw(st.integers(0, 5)) == 0
        calls.append(ToolCall(e.tool, j, raw_arguments=raw, pending=pending, start_ns=0,
                              end_ns=None if pending else data.draw(st.sampled_from(
                                  [1, 10, 100])) * 1_000_000))
    by_tool = tt._by_tool(entries)
    assert tt._diagonal(entries, calls)
    got = _chosen(tt._in_order(entries, calls, by_tool))
    assert got == {k: k for k in range(len(entries))}
    assert got == _chosen(_oracle(entries, calls, by_tool))


def test_the_diagonal_is_only_taken_when_it_matches_every_entry() -> None:
    entries = [_Entry(i, "t", {"v": i % 3}, 50.0) for i in range(6)]
    calls = [ToolCall("t", j, raw_arguments=json.dumps({"v": j % 3}), start_ns=0, end_ns=1)
             for j in range(6)]
    assert tt._diagonal(entries, calls)
    swapped = calls[:2] + [ToolCall("t", 2, raw_arguments='{"v": 0}', start_ns=0, end_ns=1)] \
        + calls[3:]
    assert not tt._diagonal(entries, swapped)
    by_tool = tt._by_tool(entries)
    assert _chosen(tt._in_order(entries, swapped, by_tool)) == \
        _chosen(_oracle(entries, swapped, by_tool))
    # One call short: the diagonal holds for every call there is, but a matching of all the
    # calls need not be the diagonal one, so the DPs decide.
    assert tt._diagonal(entries, calls[:5])
    assert _chosen(tt._in_order(entries, calls[:5], by_tool)) == \
        _chosen(_oracle(entries, calls[:5], by_tool))


def _with_tail(head_entries: list[_Entry], head_ms: list[int]) -> tuple[list[_Entry],
                                                                         list[ToolCall]]:
    """``head`` entries and calls of tool a (durations ``head_ms``), then 19 entries and calls of
    tool b with distinct args: over 300 entry x call cells and few matching pairs, so
    ``_in_order`` takes the sparse DP."""
    n = len(head_entries)
    entries = head_entries + [_Entry(n + i, "b", {"x": i}, None) for i in range(19)]
    calls = [ToolCall("a", j, start_ns=0, end_ns=ms * 1_000_000) for j, ms in enumerate(head_ms)]
    calls += [ToolCall("b", len(calls) + i, raw_arguments=json.dumps({"x": i}), start_ns=0,
                       end_ns=1_000_000) for i in range(19)]
    assert len(entries) * len(calls) > tt._COLUMNS_UPTO
    return entries, calls


@pytest.mark.parametrize(("head", "head_ms", "chosen"), [
    # a call lasting exactly the limit is within it: the later call is chosen for its latency
    ([_Entry(0, "a", None, 5.0)], [6, 5], {0: 1}),
    # both within: the earlier call, even though the later one is faster
    ([_Entry(0, "a", None, 5.0)], [5, 3], {0: 0}),
    # call 1 can match either entry (the others, in the band, one each): lasting exactly the
    # limit, it and call 2 give two latency hits where call 0 (6 ms) would give one
    ([_Entry(0, "a", None, 5.0), _Entry(1, "a", None, 5.0)], [6, 5, 5], {0: 1, 1: 2}),
])
def test_a_duration_equal_to_the_limit_is_a_latency_hit_in_the_sparse_dp(
        head: list[_Entry], head_ms: list[int], chosen: dict[int, int]) -> None:
    entries, calls = _with_tail(head, head_ms)
    by_tool = tt._by_tool(entries)
    assert tt._matching_pairs(calls, by_tool, tt._pair_budget(len(entries), len(calls))) \
        is not None
    got = _chosen(tt._in_order(entries, calls, by_tool))
    assert {k: v for k, v in got.items() if k < len(head)} == chosen
    assert got == _chosen(_oracle(entries, calls, by_tool))


def test_past_the_budget_a_long_settled_run_takes_the_column_dp() -> None:
    """20 plain entries of one tool against its 20 calls: 400 candidate pairs, past the budget,
    and past the columns' small-run cutoff: the column DP of the settled run is used."""
    entries = [_Entry(i, "a", None, 5.0 if i == 0 else None) for i in range(20)]
    calls = [ToolCall("a", j, start_ns=0, end_ns=(j % 7) * 1_000_000) for j in range(21)]
    by_tool = tt._by_tool(entries)
    assert len(entries) * len(calls) > tt._COLUMNS_UPTO
    assert tt._matching_pairs(calls, by_tool, tt._pair_budget(len(entries), len(calls))) is None
    got = _chosen(tt._in_order(entries, calls, by_tool))
    assert got == _chosen(_oracle(entries, calls, by_tool))
    assert len(got) == 20 and got[0] == 0       # call 0 took 0 ms, within entry 0's 5 ms


@pytest.mark.parametrize("raw", ['{"x": 1}', '{"x":1}'])   # the entry's own text, or another
def test_argument_candidates_count_against_the_budget(raw: str) -> None:
    """Entries with args: each call's candidates are counted, the sum against the budget."""
    entries = [_Entry(i, "a", {"x": 1}, 5.0) for i in range(6)]
    calls = [ToolCall("a", j, raw_arguments=raw, start_ns=0, end_ns=j * 2_000_000)
             for j in range(6)]
    by_tool = tt._by_tool(entries)
    assert tt._matching_pairs(calls, by_tool, budget=36) is not None
    assert tt._matching_pairs(calls, by_tool, budget=35) is None   # 6 calls x 6 candidates


def test_past_the_budget_a_run_with_pending_calls_takes_the_fronts_dp() -> None:
    """Plain entries of two tools against many calls, some pending: past the pair budget, the
    column DP of Pareto fronts chooses the matching, the oracle's."""
    rng = random.Random(41)
    for _ in range(20):
        entries = [_Entry(i, rng.choice("ab"), None, rng.choice([None, 5.0])) for i in range(18)]
        calls = []
        for j in range(24):
            pending = rng.random() < 0.2
            calls.append(ToolCall(rng.choice("ab"), j, pending=pending, start_ns=0,
                                  end_ns=None if pending else rng.choice([1, 9]) * 1_000_000))
        if not any(c.pending for c in calls):
            continue
        by_tool = tt._by_tool(entries)
        assert tt._matching_pairs(calls, by_tool,
                                  tt._pair_budget(len(entries), len(calls))) is None
        assert (_chosen(tt._in_order(entries, calls, by_tool))
                == _chosen(_oracle(entries, calls, by_tool)))
