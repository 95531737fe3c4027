"""The pairings DeepEval's and Ragas' families share (otel_tooleval.graders.pairing), against
brute force on small random problems."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest

from otel_tooleval.graders import pairing
from otel_tooleval.graders.pairing import assign, longest_then_best, value_key, weighted_lcs
from otel_tooleval.graders.tool_call_checks import same_value


def best_assignment(weights: Sequence[Sequence[float]]) -> float:
    """The maximum total over every way to give rows distinct columns (or none)."""
    rows, cols = len(weights), len(weights[0]) if weights else 0
    best = 0.0
    for chosen in itertools.product(range(-1, cols), repeat=rows):
        used = [c for c in chosen if c >= 0]
        if len(used) != len(set(used)):
            continue
        best = max(best, sum(weights[r][c] for r, c in enumerate(chosen) if c >= 0))
    return best


def ordered_pairings(n: int, m: int) -> list[list[tuple[int, int]]]:
    """Every order-preserving pairing of n rows with m columns."""
    out: list[list[tuple[int, int]]] = [[]]
    for r in range(n):
        out = out + [p + [(r, c)] for p in out for c in range(m)
                     if not p or c > p[-1][1]]
    return out


def random_problem(rng: random.Random, rows: int, cols: int):
    """Rows and columns in classes (equal keys, equal weights); a few distinct scores."""
    row_keys = [rng.randrange(3) for _ in range(rows)]
    col_keys = [rng.randrange(4) for _ in range(cols)]
    table = {(a, b): rng.choice([0.0, 0.0, 0.25, 0.5, 1 / 3, 1.0])
             for a in range(3) for b in range(4)}
    weights = [[table[(a, b)] for b in col_keys] for a in row_keys]
    return row_keys, col_keys, weights


@pytest.mark.parametrize("seed", range(300))
def test_assign_is_a_maximum_total_pairing(seed: int) -> None:
    rng = random.Random(seed)
    rows, cols = rng.randrange(1, 6), rng.randrange(1, 6)
    row_keys, col_keys, weights = random_problem(rng, rows, cols)
    found = assign(row_keys, col_keys, lambda r, c: weights[r][c])
    assert found.exact
    assert len({r for r, _, _ in found.pairs}) == len(found.pairs)
    assert len({c for _, c, _ in found.pairs}) == len(found.pairs)
    assert all(s == weights[r][c] > 0 for r, c, s in found.pairs)
    assert sum(s for _, _, s in found.pairs) == pytest.approx(best_assignment(weights))


def test_greedy_first_choice_is_not_what_assign_does() -> None:
    # Row 0 prefers column 0 (1.0), but then row 1 (only column 0, 0.9) is left out.
    weights = [[1.0, 0.8], [0.9, 0.0]]
    found = assign([0, 1], [0, 1], lambda r, c: weights[r][c])
    assert [(r, c) for r, c, _ in found.pairs] == [(0, 1), (1, 0)]


def test_assign_beyond_the_bound_pairs_greedily_and_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pairing, "EXACT_CLASS_PAIRS", 1)
    weights = [[1.0, 0.8], [0.9, 0.0]]
    found = assign([0, 1], [0, 1], lambda r, c: weights[r][c])
    assert not found.exact
    assert [(r, c) for r, c, _ in found.pairs] == [(0, 0)]


def test_many_identical_rows_and_columns_cost_their_classes() -> None:
    calls = 0

    def weight(r: int, c: int) -> float:
        nonlocal calls
        calls += 1
        return 1.0 if (r % 2) == (c % 3 == 0) else 0.5

    found = assign([r % 2 for r in range(500)], [c % 3 == 0 for c in range(1000)], weight)
    assert calls == 4                           # 2 row classes x 2 column classes
    assert len(found.pairs) == 500
    # 250 odd rows take 250 of the 334 multiples of three; 250 even rows the others.
    assert sum(s for _, _, s in found.pairs) == 500.0


@pytest.mark.parametrize("seed", range(200))
def test_weighted_lcs_is_the_best_order_preserving_total(seed: int) -> None:
    rng = random.Random(seed)
    n, m = rng.randrange(0, 5), rng.randrange(0, 6)
    names_r = [rng.choice("ab") for _ in range(n)]
    names_c = [rng.choice("abc") for _ in range(m)]
    w = [[rng.choice([0.0, 0.5, 1.0, 0.25]) if names_r[r] == names_c[c] else 0.0
          for c in range(m)] for r in range(n)]
    total, pairs = weighted_lcs(n, m, lambda r: (
        [c for c in range(m) if names_r[r] == names_c[c]],
        [w[r][c] for c in range(m) if names_r[r] == names_c[c]]))
    brute = max(sum(w[r][c] for r, c in p) for p in ordered_pairings(n, m))
    assert total == pytest.approx(brute)
    assert sum(s for _, _, s in pairs) == pytest.approx(brute)
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in itertools.pairwise(pairs))


@pytest.mark.parametrize("seed", range(200))
def test_longest_then_best_takes_the_longest_and_among_those_the_best(seed: int) -> None:
    rng = random.Random(seed)
    n, m = rng.randrange(0, 5), rng.randrange(0, 6)
    names_r = [rng.choice("ab") for _ in range(n)]
    names_c = [rng.choice("abc") for _ in range(m)]
    w = [[rng.choice([0.0, 0.5, 1.0, 1 / 3, 2 / 3]) for _ in range(m)] for _ in range(n)]
    pairs = longest_then_best(n, m, lambda r: (
        [c for c in range(m) if names_r[r] == names_c[c]],
        [w[r][c] for c in range(m) if names_r[r] == names_c[c]]), scale=6)
    legal = [p for p in ordered_pairings(n, m)
             if all(names_r[r] == names_c[c] for r, c in p)]
    best = max((len(p), sum(w[r][c] for r, c in p)) for p in legal)
    assert (len(pairs), pytest.approx(sum(s for _, _, s in pairs))) == best


@pytest.mark.parametrize(("a", "b"), [
    (1, 1.0), ({"a": [1, {"b": 2}]}, {"a": [1.0, {"b": 2.0}]}), ({"x": 1, "y": 2}, {"y": 2, "x": 1}),
    (True, 1), ("10", 10), (None, 0), ([1, 2], [2, 1]), ({"a": True}, {"a": 1}), (0, False),
])
def test_value_key_agrees_with_value_equality(a: object, b: object) -> None:
    assert (value_key(a) == value_key(b)) == same_value(a, b)
