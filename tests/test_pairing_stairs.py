"""The order-preserving DPs of otel_tooleval.graders.pairing keep each row as a staircase and
visit only the cells where names match; they must give exactly the pairs of the dense table
(every cell, walked back up / left / diagonal), ties included, and score each class once."""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import accumulate

import pytest

from otel_tooleval.graders import pairing
from otel_tooleval.graders.pairing import (
    ScoredColumns,
    class_candidates,
    longest_then_best,
    weighted_lcs,
)
from otel_tooleval.model import AgentRun, ToolCall


def dense(n: int, m: int, w: Sequence[Sequence[float | None]], gain) -> list[tuple[int, int]]:
    """The full (n + 1) x (m + 1) table and its walk back: the reference the sparse DP
    must agree with. ``w[r][c]`` None: names differ."""
    rows = [[0] * (m + 1)]
    for r in range(n):
        cand = rows[-1][:]
        for c in range(m):
            if w[r][c] is not None and gain(w[r][c]) > 0:
                cand[c + 1] = max(cand[c + 1], rows[-1][c] + gain(w[r][c]))
        rows.append(list(accumulate(cand, max)))
    pairs = []
    r, c = n, m
    while r > 0 and c > 0:
        if rows[r][c] == rows[r - 1][c]:
            r -= 1
        elif rows[r][c] == rows[r][c - 1]:
            c -= 1
        else:
            pairs.append((r - 1, c - 1))
            r, c = r - 1, c - 1
    return pairs[::-1]


def problem(seed: int) -> tuple[int, int, list[list[float | None]]]:
    rng = random.Random(seed)
    n, m = rng.randrange(0, 14), rng.randrange(0, 80)
    if seed % 5 == 0:                  # long runs: sparse rows under the production factor
        m = rng.randrange(200, 600)
    names_r = [rng.choice("abc") for _ in range(n)]
    names_c = [rng.choice("abcd") for _ in range(m)]
    scores = rng.choice([[1.0], [0.0, 1.0], [0.0, 0.25, 0.5, 1 / 3, 2 / 3, 1.0],
                         [rng.random() for _ in range(12)]])
    w = [[rng.choice(scores) if names_r[r] == names_c[c] else None for c in range(m)]
         for r in range(n)]
    return n, m, w


def candidates(w: Sequence[Sequence[float | None]]):
    return lambda r: ([c for c, s in enumerate(w[r]) if s is not None],
                      [s for s in w[r] if s is not None])


#: Rows always sparse, chosen by cost as in production, always dense.
FACTORS = [0, pairing.DENSE_FACTOR, 10**9]


@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("seed", range(300))
def test_weighted_lcs_gives_the_dense_tables_pairs(seed: int, factor: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pairing, "DENSE_FACTOR", factor)
    n, m, w = problem(seed)
    total, pairs = weighted_lcs(n, m, candidates(w))
    assert [(r, c) for r, c, _ in pairs] == dense(n, m, w, lambda s: s)
    assert all(s == w[r][c] for r, c, s in pairs)
    assert total == pytest.approx(sum(s for _, _, s in pairs))


@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("seed", range(300))
def test_longest_then_best_gives_the_dense_tables_pairs(seed: int, factor: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pairing, "DENSE_FACTOR", factor)
    n, m, w = problem(seed)
    w = [[None if s is None else round(s * 6) / 6 for s in line] for line in w]
    big = n * 6 + 1
    pairs = longest_then_best(n, m, candidates(w), scale=6)
    assert [(r, c) for r, c, _ in pairs] == dense(n, m, w, lambda s: big + round(s * 6))


def test_class_candidates_scores_each_class_once_and_groups_by_score() -> None:
    seen: list[tuple[int, int]] = []
    classes = [[0, 4, 9], [2, 3], [7]]

    def weight(r: int, c: int) -> float:
        seen.append((r, c))
        return {0: 1.0, 2: 0.5, 7: 1.0}[c]

    get = class_candidates(["x", "y", "x"], lambda r: classes, weight)
    first = get(0)
    assert get(2) is first                       # same row class: scored once
    assert first == ScoredColumns(((1.0, [0, 4, 7, 9]), (0.5, [2, 3])))
    assert first.score_at(3) == 0.5 and first.score_at(7) == 1.0
    get(1)
    assert seen == [(0, 0), (0, 2), (0, 7), (1, 0), (1, 2), (1, 7)]


def _run(calls: Sequence[ToolCall]) -> AgentRun:
    return AgentRun(1, 1, None, tuple(calls))


def test_argument_classes_group_equal_text_name_and_server() -> None:
    calls = [ToolCall("a", 0, '{"x": 1}'), ToolCall("a", 1, '{"x": 2}'),
             ToolCall("a", 2, '{"x": 1}'), ToolCall("b", 3, '{"x": 1}'),
             ToolCall("a", 4, '{"x": 1}', server="srv"), ToolCall("a", 5, {"x": 1}),
             ToolCall("a", 6, {"x": 1})]
    classes = _run(calls).argument_classes()
    assert sorted(classes) == ["a", "b"]
    # Values (not text) are never merged: equal text is the guarantee, not the test.
    assert sorted(classes["a"].values()) == [[0, 2], [1], [4], [5], [6]]
    assert list(classes["b"].values()) == [[3]]
    assert _run(calls).argument_classes() == classes


def test_argument_classes_keep_calls_read_through_different_envelopes_apart() -> None:
    class Envelope:
        arguments_from = None
        result_from = None

    calls = [ToolCall("a", 0, '{"x": 1}'), ToolCall("a", 1, '{"x": 1}', envelope=Envelope()),
             ToolCall("a", 2, '{"x": 1}'), ToolCall("a", 3, [1, {"y": 2}])]
    assert sorted(_run(calls).argument_classes()["a"].values()) == [[0, 2], [1], [3]]
