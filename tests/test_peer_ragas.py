"""Differential test: Ragas' ToolCallAccuracy and ToolCallF1 (0.4.3, the real API in the peers'
interpreter) against ``tool_call_accuracy`` and ``tool_call_f1`` on the same seeded random
trajectories (PEER-GRADERS.md section 4).

Every case is graded through the normal config and grading path, and checked against an oracle
of PEER-GRADERS.md's rule (brute force). Cases outside the documented differences must get
Ragas' score exactly; cases a predicate puts inside one are counted and printed.
"""

from __future__ import annotations

import random
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval.graders.tool_call_checks import same_value
from tests.support.peer_cases import edit, random_call, steps_of, value_conflict
from tests.support.peers import run_peer
from tests.support.runs import call, grade

SCRIPT = Path(__file__).parent / "data" / "peers" / "ragas" / "run_peer.py"
CASES = 400


def make_cases() -> list[dict[str, Any]]:
    rng = random.Random(17)
    cases = []
    for n in range(CASES):
        tricky = n % 4 == 0
        reference = [random_call(rng, tricky) for _ in range(rng.randrange(0, 6))]
        calls = edit(rng, reference, tricky) if rng.random() < 0.85 else [
            random_call(rng, tricky) for _ in range(rng.randrange(0, 5))]
        cases.append({"strict_order": n % 2 == 0, "reference": reference,
                      "steps": steps_of(rng, calls)})
    return cases


def flat(case: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for step in case["steps"] for c in step]


def ours(case: dict[str, Any]) -> tuple[float, float]:
    run = [call(c["name"], c["args"], "ok", step=k)
           for k, step in enumerate(case["steps"]) for c in step]
    accuracy = grade({"graders": [{"type": "tool_call_accuracy",
                                   "strict_order": case["strict_order"],
                                   "reference_tool_calls": case["reference"]}]}, run)
    f1 = grade({"graders": [{"type": "tool_call_f1",
                             "reference_tool_calls": case["reference"]}]}, run)
    return accuracy.score, f1.score


# -- the oracle: PEER-GRADERS.md section 4, by brute force ------------------------------------------

def pair_score(ref: dict[str, Any], args: dict[str, Any]) -> float:
    if not ref:
        return 0.0 if args else 1.0
    return sum(1 for k, v in ref.items() if k in args and same_value(v, args[k])) / len(ref)


def oracle_accuracy(refs: list[dict[str, Any]], calls: list[dict[str, Any]],
                    strict: bool) -> float:
    if not refs and not calls:
        return 1.0
    if not refs or not calls:
        return 0.0
    w = [[pair_score(r["args"], c["args"]) if r["name"] == c["name"] else None for c in calls]
         for r in refs]
    if strict:
        table = [[(0, 0.0)] * (len(calls) + 1) for _ in range(len(refs) + 1)]
        for i in range(1, len(refs) + 1):
            for j in range(1, len(calls) + 1):
                best = max(table[i - 1][j], table[i][j - 1])
                s = w[i - 1][j - 1]
                if s is not None:
                    n, t = table[i - 1][j - 1]
                    best = max(best, (n + 1, t + s))
                table[i][j] = best
        total = table[-1][-1][1]
    else:
        @cache
        def best(i: int, used: int) -> float:
            if i == len(refs):
                return 0.0
            out = best(i + 1, used)
            for j, s in enumerate(w[i]):
                if s is not None and not used >> j & 1:
                    out = max(out, s + best(i + 1, used | 1 << j))
            return out
        total = best(0, 0)
    return total / max(len(refs), len(calls))


def oracle_f1(refs: list[dict[str, Any]], calls: list[dict[str, Any]]) -> float:
    if not refs and not calls:
        return 1.0
    left = list(calls)
    tp = 0
    for r in refs:
        hit = next((k for k, c in enumerate(left) if c["name"] == r["name"]
                    and same_value(c["args"], r["args"])), None)
        if hit is not None:
            tp += 1
            left.pop(hit)
    p = tp / len(calls) if calls else 0.0
    rc = tp / len(refs) if refs else 0.0
    return round(2 * p * rc / (p + rc), 4) if p + rc else 0.0


# -- the documented differences, as predicates on a case --------------------------------------------

def str_equal(a: Any, b: Any) -> bool:
    return str(a) == str(b)


def accuracy_differences(case: dict[str, Any]) -> set[str]:
    refs, calls = case["reference"], flat(case)
    found = set()
    names_r, names_c = [r["name"] for r in refs], [c["name"] for c in calls]
    aligned = names_r == names_c if case["strict_order"] else sorted(names_r) == sorted(names_c)
    if refs and calls and not aligned:
        found.add("unaligned names or lengths score 0 in Ragas")
    for r in refs:
        for c in calls:
            if r["name"] == c["name"] and any(
                    k in c["args"] and value_conflict(v, c["args"][k], str_equal)
                    for k, v in r["args"].items()):
                found.add("str() comparison of arguments")
    if not found and not case["strict_order"] and refs and calls:
        def key(tc: dict[str, Any]) -> tuple[str, ...]:
            return (tc["name"], *(x for k in sorted(tc["args"]) for x in (k, str(tc["args"][k]))))
        ragas = sum(pair_score(r["args"], c["args"])
                    for r, c in zip(sorted(refs, key=key), sorted(calls, key=key)))
        if ragas / len(refs) < oracle_accuracy(refs, calls, False) - 1e-9:
            found.add("non-strict pairs by sorted position")
    return found


def f1_differences(case: dict[str, Any]) -> set[str]:
    refs, calls = case["reference"], flat(case)
    items = [(x["name"], x["args"]) for x in refs + calls]
    found = set()
    if not refs and not calls:
        found.add("no calls on either side")
    for group in (refs, calls):
        for i, a in enumerate(group):
            if any(a["name"] == b["name"] and (a["args"] == b["args"]
                                               or same_value(a["args"], b["args"]))
                   for b in group[i + 1:]):
                found.add("duplicates count")
    if any(value_conflict(a, b, lambda x, y: x == y) for a in items for b in items):
        found.add("value equality (true != 1)")
    return found


@pytest.fixture(scope="module")
def verdicts() -> list[dict[str, Any]]:
    return run_peer(SCRIPT, make_cases())


def test_tool_call_accuracy_agrees_with_ragas_outside_the_documented_differences(
        verdicts: list[dict[str, Any]]) -> None:
    counted: Counter[str] = Counter()
    agreed = disagreed = 0
    for n, (case, peer) in enumerate(zip(make_cases(), verdicts)):
        score, _ = ours(case)
        expected = oracle_accuracy(case["reference"], flat(case), case["strict_order"])
        assert score == pytest.approx(expected, abs=1e-12), (n, case)
        differences = accuracy_differences(case)
        if differences:
            counted.update(differences)
            disagreed += abs(peer["accuracy"] - score) > 1e-9
            continue
        assert score == pytest.approx(peer["accuracy"], abs=1e-12), (n, case, peer)
        agreed += 1
    print(f"\ntool_call_accuracy: {agreed} of {CASES} cases equal to Ragas; inside a documented "
          f"difference (Ragas differs on {disagreed}): {dict(counted)}")
    assert agreed >= CASES // 4
    assert disagreed >= 20          # the differences are real, not imagined


def test_tool_call_f1_agrees_with_ragas_outside_the_documented_differences(
        verdicts: list[dict[str, Any]]) -> None:
    counted: Counter[str] = Counter()
    agreed = disagreed = 0
    for n, (case, peer) in enumerate(zip(make_cases(), verdicts)):
        _, score = ours(case)
        assert score == oracle_f1(case["reference"], flat(case)), (n, case)
        differences = f1_differences(case)
        if differences:
            counted.update(differences)
            disagreed += peer["f1"] != score
            continue
        assert score == peer["f1"], (n, case, peer)
        agreed += 1
    print(f"\ntool_call_f1: {agreed} of {CASES} cases equal to Ragas; inside a documented "
          f"difference (Ragas differs on {disagreed}): {dict(counted)}")
    assert agreed >= CASES // 2
    assert disagreed >= 10
