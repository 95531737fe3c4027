"""``tool-call-order`` and ``lcs_pairs`` against the implementation before issue 19, kept here as
an oracle: the same pairs (every tie-break of Hirschberg's recursion), the same scores, texts
and details, key order included, for random sequences. Strict grades that differ from the
expected sequence compute their LCS details when read; that is tested too."""

from __future__ import annotations

import dataclasses
import json
import pickle
import random
from bisect import bisect_left
from collections import Counter
from collections.abc import Hashable, Sequence
from itertools import accumulate
from typing import Any

import pytest

import otel_tooleval.graders.tool_call_order as order_module
from otel_tooleval import lcs as lcs_module
from otel_tooleval.config import load_config
from otel_tooleval.graders.tool_call_order import calls_text, names_text
from otel_tooleval.lcs import lcs_pairs
from otel_tooleval.model import AgentRun, GradeResult
from otel_tooleval.outputs.marks import call_marks
from tests.support.runs import call, run_of

# -- the oracle: lcs.py's lcs_pairs before issue 19, unchanged but for names -------------------


class OracleMasks:
    def __init__(self, pattern: Sequence[Hashable], text: Sequence[Hashable],
                 per_item: int, minimum: int) -> None:
        in_text = Counter(text)
        positions: dict[Hashable, list[int]] = {}
        for i, item in enumerate(pattern):
            found = positions.get(item)
            if found is not None:
                found.append(i)
            elif item in in_text:
                positions[item] = [i]
        budget = minimum + per_item * (len(pattern) + len(text))
        ranked = sorted(positions.items(),
                        key=lambda kv: in_text[kv[0]] * len(kv[1]) / (kv[1][-1] + 8),
                        reverse=True)
        self.cached: dict[Hashable, int] = {}
        for item, where in ranked:
            size = (where[-1] >> 3) + 1
            if size > budget:
                continue
            budget -= size
            self.cached[item] = oracle_mask(where)
            del positions[item]
        self.positions = positions


def oracle_mask(positions: list[int]) -> int:
    out = 0
    for p in positions:
        out |= 1 << p
    return out


class Oracle:
    def __init__(self, leaf: int = 64, per_item: int = 8, minimum: int = 4096) -> None:
        self.leaf, self.per_item, self.minimum = leaf, per_item, minimum

    def rows(self, pattern: Sequence[Hashable], text: Sequence[Hashable]) -> list[int]:
        masks = OracleMasks(pattern, text, self.per_item, self.minimum)
        full = (1 << len(pattern)) - 1
        v = full
        out = [v]
        for item in text:
            m = masks.cached.get(item)
            if m is None:
                where = masks.positions.get(item)
                m = 0 if where is None else oracle_mask(where)
            u = v & m
            v = ((v + u) | (v ^ u)) & full
            out.append(v)
        return out

    def pairs(self, a: Sequence[Hashable], b: Sequence[Hashable]) -> list[tuple[int, int]]:
        swap = len(a) > len(b)
        short, long_ = (b, a) if swap else (a, b)
        out: list[tuple[int, int]] = []
        self.hirschberg(list(short), list(long_), 0, 0, out)
        return [(j, i) for i, j in out] if swap else out

    def hirschberg(self, a: list[Hashable], b: list[Hashable], a0: int, b0: int,
                   out: list[tuple[int, int]]) -> None:
        n = min(len(a), len(b))
        head = 0
        while head < n and a[head] == b[head]:
            head += 1
        tail = 0
        while tail < n - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
            tail += 1
        out.extend((a0 + k, b0 + k) for k in range(head))
        suffix = [(a0 + len(a) - tail + k, b0 + len(b) - tail + k) for k in range(tail)]
        a, b = a[head:len(a) - tail], b[head:len(b) - tail]
        a0, b0 = a0 + head, b0 + head
        if a and b:
            if len(a) <= self.leaf:
                self.trace_block(a, b, a0, b0, out)
            else:
                mid = len(a) // 2
                split = self.best_split(a[:mid], a[mid:], b)
                self.hirschberg(a[:mid], b[:split], a0, b0, out)
                self.hirschberg(a[mid:], b[split:], a0 + mid, b0 + split, out)
        out.extend(suffix)

    def best_split(self, top: list[Hashable], bottom: list[Hashable],
                   b: list[Hashable]) -> int:
        n = len(b)
        fmt = f"0{n}b"
        forward = format(~self.rows(b, top)[-1] & ((1 << n) - 1), fmt).encode()[::-1]
        backward = format(~self.rows(b[::-1], bottom[::-1])[-1] & ((1 << n) - 1),
                          fmt).encode()[::-1]
        f = list(accumulate(forward, initial=0))
        r = list(accumulate(backward, initial=0))
        best_j, best = 0, -1
        for j in range(n + 1):
            score = f[j] + r[n - j] - 48 * n
            if score > best:
                best_j, best = j, score
        return best_j

    def trace_block(self, a: list[Hashable], b: list[Hashable], a0: int, b0: int,
                    out: list[tuple[int, int]]) -> None:
        n = len(b)
        fmt = f"0{n}b"
        rows = [format(v, fmt)[::-1] for v in self.rows(b, a)]
        where: dict[Hashable, list[int]] = {}
        for j, item in enumerate(b):
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


def oracle_grade(expected: list[str], run: AgentRun, strict: bool, threshold: float,
                 labels: dict[str, str]) -> dict[str, Any]:
    """ToolCallOrderGrader.grade before issue 19, as the result's dict."""
    actual = [c.name for c in run.calls]
    pairs = Oracle().pairs(expected, actual) if actual else []
    matched = {i for i, _ in pairs}
    unmatched = [i for i in range(len(expected)) if i not in matched]
    details: dict[str, Any] = {
        "actual_tool_calls_order": actual,
        "expected_tool_calls_order": list(expected),
        "lcs": [expected[i] for i, _ in pairs],
        "lcs_calls": [run.calls[j].index for _, j in pairs],
        "unmatched_expected": unmatched,
    }
    if not actual:
        score = 0.0
        text = (f"The run made no tool calls; {len(expected)} were expected in order "
                f"({names_text(expected)}).")
    elif strict:
        same = actual == expected
        score = 1.0 if same else 0.0
        text = (oracle_strict_text(expected, actual) if not same else
                f"The {len(actual)} calls match the expected sequence exactly.")
    else:
        score = len(pairs) / len(expected)
        if not unmatched:
            text = (f"All {len(expected)} expected tools were called in the expected order "
                    f"(calls {calls_text(details['lcs_calls'])}).")
        else:
            missing = "; ".join(f"{expected[i]!r} (expected position {i})"
                                for i in unmatched[:3])
            more = f" and {len(unmatched) - 3} more" if len(unmatched) > 3 else ""
            text = (f"{len(pairs)} of {len(expected)} expected tools were called in the "
                    f"expected order; not in order or not called: {missing}{more}.")
    passed = score >= threshold
    return GradeResult("order", "tool-call-order", score, passed, "pass" if passed else "fail",
                       text, {**details, "strict": strict, **labels}).to_dict()


def oracle_strict_text(expected: list[str], actual: list[str]) -> str:
    k = 0
    while k < len(actual) and k < len(expected) and actual[k] == expected[k]:
        k += 1
    if k < len(actual) and k < len(expected):
        where = f"call #{k} is {actual[k]!r} where {expected[k]!r} was expected"
    elif k == len(actual):
        where = (f"the run stopped after {k} calls; {expected[k]!r} was expected next "
                 f"(expected position {k})")
    else:
        where = f"call #{k} ({actual[k]!r}) comes after the whole expected sequence"
    return f"Strict order: the calls differ from the expected sequence; {where}."


# -- random sequences -----------------------------------------------------------------------------

def sequences(rng: random.Random, alphabet: int, n: int, m: int) -> tuple[list[str], list[str]]:
    """Two sequences: independent, or the second an edited copy of the first (the usual
    case: a run against its own expected list with a few entries changed)."""
    a = [f"t{rng.randrange(alphabet)}" for _ in range(n)]
    if rng.random() < 0.5:
        return a, [f"t{rng.randrange(alphabet)}" for _ in range(m)]
    b: list[str] = []
    for item in a:
        roll = rng.random()
        if roll < 0.05:
            continue
        b.append(f"t{rng.randrange(alphabet)}" if roll < 0.15 else item)
        if rng.random() < 0.05:
            b.append(f"t{rng.randrange(alphabet)}")
    return a, b


@pytest.mark.parametrize(("leaf", "per_item", "byte_alphabet"), [
    (64, 8, 256), (64, 8, 0), (2, 0, 256), (2, 0, 0), (5, 8, 256), (5, 8, 0), (1, 8, 0)])
def test_lcs_pairs_are_the_oracles(monkeypatch: pytest.MonkeyPatch, leaf: int, per_item: int,
                                   byte_alphabet: int) -> None:
    # Small leaves force deep recursion; a zero budget forces masks rebuilt per use; a zero
    # byte alphabet takes the path for any hashable items.
    monkeypatch.setattr(lcs_module, "_LEAF_ROWS", leaf)
    monkeypatch.setattr(lcs_module, "_MASK_BYTES_PER_ITEM", per_item)
    monkeypatch.setattr(lcs_module, "_MASK_BYTES_MIN", 4096 if per_item else 0)
    monkeypatch.setattr(lcs_module, "_BYTE_ALPHABET", byte_alphabet)
    oracle = Oracle(leaf, per_item, 4096 if per_item else 0)
    rng = random.Random(leaf * 1000 + per_item * 10 + byte_alphabet)
    for _ in range(250):
        a, b = sequences(rng, rng.choice((1, 2, 3, 6, 12)), rng.randint(0, 180),
                         rng.randint(0, 180))
        assert lcs_pairs(a, b) == oracle.pairs(a, b), (a, b)
        assert lcs_pairs(b, a) == oracle.pairs(b, a), (a, b)


def test_lcs_pairs_are_the_oracles_on_long_sequences() -> None:
    rng = random.Random(19)
    oracle = Oracle()
    for alphabet, n in ((6, 1500), (40, 1200), (300, 900), (2, 700)):
        a, b = sequences(rng, alphabet, n, n + rng.randint(-100, 100))
        assert lcs_pairs(a, b) == oracle.pairs(a, b), alphabet


@pytest.mark.parametrize("per_item", [8, 1000])
def test_lcs_pairs_of_any_hashable_items_are_the_oracles(monkeypatch: pytest.MonkeyPatch,
                                                         per_item: int) -> None:
    # A large budget takes the byte-id path with 255 distinct items, a small one does not.
    monkeypatch.setattr(lcs_module, "_MASK_BYTES_PER_ITEM", per_item)
    rng = random.Random(5 + per_item)
    oracle = Oracle()
    for _ in range(60):
        # 255 and 256 distinct items: either side of the byte-id path's limit.
        alphabet = rng.choice((255, 256, 400))
        a = [(rng.randrange(alphabet),) for _ in range(rng.randint(200, 600))]
        b = list(a) if rng.random() < 0.5 else []
        b = [x if rng.random() < 0.9 else (rng.randrange(alphabet),) for x in b or a[::-1]]
        b.extend((k,) for k in range(alphabet))
        assert lcs_pairs(a, b) == oracle.pairs(a, b)


# -- grades -------------------------------------------------------------------------------------

def grader_of(expected: list[str], **options: Any) -> Any:
    entry = {"type": "tool-call-order", "name": "order", "tool_calls_order": expected,
             **options}
    return load_config({"graders": [entry]}).graders[0].grader


def as_json(result: dict[str, Any]) -> str:
    return json.dumps(result)


@pytest.mark.parametrize("strict", [False, True])
def test_grades_are_the_oracles(strict: bool) -> None:
    rng = random.Random(7 + strict)
    for trial in range(300):
        expected, actual = sequences(rng, rng.choice((1, 3, 6)), rng.randint(1, 120),
                                     rng.randint(0, 120))
        if trial % 5 == 0:
            actual = list(expected)     # identical: the strict pass
        elif trial % 7 == 0:
            actual = expected[:rng.randint(0, len(expected))]
        threshold = rng.choice((0.0, 0.5, 1.0))
        options: dict[str, Any] = {"strict": strict, "threshold": threshold}
        labels = {}
        if trial % 2:
            options = {"type": "ToolCallOrderEvaluator", "id": f"e{trial}",
                       "config": {"name": "Order", "strict": strict, "threshold": threshold}}
            labels = {"evaluator_id": f"e{trial}", "evaluator_name": "Order"}
        grader = grader_of(expected, **options)
        run = run_of([call(n, {}) for n in actual])
        got = grader.grade(run)
        want = oracle_grade(expected, run, strict, threshold, labels)
        # Byte-identical as JSON: every value and the order of the details' keys.
        assert as_json(got.to_dict()) == as_json(want), (expected, actual)
        assert list(got.details) == list(want["details"])
        assert dict(got.details) == want["details"] == got.details


def test_a_failing_strict_grade_computes_its_lcs_when_the_details_are_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    expected = ["read", "search", "write", "test"] * 50
    actual = ["read", "write", "search", "test"] * 50
    computed: list[int] = []
    real = order_module.lcs_pairs

    def counting(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int]]:
        computed.append(1)
        return real(a, b)

    monkeypatch.setattr(order_module, "lcs_pairs", counting)
    grader = grader_of(expected, strict=True)
    run = run_of([call(n, {}) for n in actual])
    result = grader.grade(run)
    assert (result.score, result.passed, result.label) == (0.0, False, "fail")
    assert "call #1 is 'write' where 'search' was expected" in result.explanation
    # What the live processor reads of a result (metrics, the grading process's summary).
    assert result.details and result.details.get("tool_selection_counts") is None
    assert "lcs" in result.details and len(result.details) == 6
    assert result.details["actual_tool_calls_order"] == actual
    assert computed == []
    want = oracle_grade(expected, run, True, 1.0, {})
    assert result.details["lcs_calls"] == want["details"]["lcs_calls"]
    assert computed == [1]
    assert result.to_dict() == want and computed == [1]
    # Pickled (the grading process's full results) as the plain dict.
    copy = pickle.loads(pickle.dumps(result.details))
    assert type(copy) is dict and copy == want["details"]
    assert repr(result.details) == repr(want["details"])
    # The report's marks per call read the mapping as they read a dict.
    plain = dataclasses.replace(result, details=dict(result.details))
    assert call_marks(result, len(actual)) == call_marks(plain, len(actual)) != {}


def test_a_strict_pass_needs_no_lcs_recursion(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int]]:
        raise AssertionError("no LCS expected")

    grader = grader_of(["a", "b", "a"], strict=True)
    run = run_of([call(n, {}) for n in ("a", "b", "a")])
    want = oracle_grade(["a", "b", "a"], run, True, 1.0, {})
    monkeypatch.setattr(lcs_module, "_ByteHirschberg", refuse)
    monkeypatch.setattr(lcs_module, "_ItemHirschberg", refuse)
    assert grader.grade(run).to_dict() == want
