"""Differential test: DeepEval's ToolCorrectnessMetric (4.3.1, the real API in the peers'
interpreter) against ``tool_correctness`` on the same seeded random trajectories
(PEER-GRADERS.md section 3), in every mode: names only, INPUT_PARAMETERS, OUTPUT, both;
should_consider_ordering; should_exact_match; strict_mode; MCP and FUNCTION calls.

Every case is graded through the normal config and grading path, and checked against an oracle
of PEER-GRADERS.md's rule (brute force). Cases outside the documented differences must get
DeepEval's score and verdict; cases a predicate puts inside one are counted and printed.
"""

from __future__ import annotations

import random
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval.graders.tool_call_checks import same_value
from tests.support.peer_cases import edit, random_call, value_conflict
from tests.support.peers import run_peer
from tests.support.runs import call, grade

SCRIPT = Path(__file__).parent / "data" / "peers" / "deepeval" / "run_peer.py"
CASES = 400
OUTPUTS: tuple[Any, ...] = (None, "ok", "fail", {"v": 1}, {"v": 1.0}, [1, 2])
PARAMS = ([], ["INPUT_PARAMETERS"], ["OUTPUT"], ["INPUT_PARAMETERS", "OUTPUT"])


def tool(rng: random.Random, c: dict[str, Any]) -> dict[str, Any]:
    return {"name": c["name"], "type": "MCP" if rng.random() < 0.15 else "FUNCTION",
            "input_parameters": c["args"], "output": rng.choice(OUTPUTS)}


def make_cases() -> list[dict[str, Any]]:
    rng = random.Random(23)
    cases = []
    for n in range(CASES):
        tricky = n % 5 == 0
        expected = [tool(rng, random_call(rng, tricky)) for _ in range(rng.randrange(0, 5))]
        if n % 3 == 0:                       # one tool only: pairings compete for its calls
            for t in expected:
                t["name"] = "search"
        called = [dict(t) for t in edit(rng, [{"name": t["name"], "args": t["input_parameters"]}
                                              for t in expected], tricky)]
        by_name = {t["name"]: t for t in expected}
        for c in called:                     # mostly the expected type and output, not always
            base = by_name.get(c["name"])
            c["input_parameters"] = c.pop("args")
            c["type"] = base["type"] if base and rng.random() < 0.85 else "FUNCTION"
            c["output"] = base["output"] if base and rng.random() < 0.7 else rng.choice(OUTPUTS)
            if tricky:                       # Python's True == 1: a twin DeepEval confuses
                c["input_parameters"] = {k: True if v == 1 and rng.random() < 0.6 else v
                                         for k, v in c["input_parameters"].items()}
        mode = rng.randrange(6)
        params: dict[str, Any] = {"evaluation_params": PARAMS[n % 4],
                                  "threshold": rng.choice([0.5, 0.75, 1.0]),
                                  "should_consider_ordering": mode in (1, 2),
                                  "should_exact_match": mode == 3,
                                  "strict_mode": mode == 4}
        cases.append({"params": params, "expected": expected, "called": called})
    return cases


def ours(case: dict[str, Any]) -> tuple[float, bool]:
    run = [call(c["name"], c["input_parameters"], c["output"],
                attrs={"mcp.server.name": "srv"} if c["type"] == "MCP" else None)
           for c in case["called"]]
    result = grade({"graders": [{"type": "tool_correctness", **case["params"],
                                 "expected_tools": case["expected"]}]}, run)
    return result.score, result.passed


# -- the oracle: PEER-GRADERS.md section 3, by brute force ------------------------------------------

def similarity(a: Any, b: Any) -> float:
    if same_value(a, b):
        return 1.0
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return 0.0
    union = len(set(a) | set(b))
    return sum(1 / union if same_value(a[k], b[k]) else similarity(a[k], b[k]) / union
               if isinstance(a[k], dict) and isinstance(b[k], dict) else 0.0
               for k in set(a) & set(b))


def pair_score(e: dict[str, Any], c: dict[str, Any], params: list[str]) -> float:
    if e["name"] != c["name"] or e["type"] != c["type"]:
        return 0.0
    s = similarity(e["input_parameters"], c["input_parameters"]) \
        if "INPUT_PARAMETERS" in params else 1.0
    return 0.0 if "OUTPUT" in params and not same_value(e["output"], c["output"]) else s


def oracle(case: dict[str, Any]) -> tuple[float, bool]:
    p, expected, called = case["params"], case["expected"], case["called"]
    params = p["evaluation_params"]
    if p["should_exact_match"]:
        score = float(len(expected) == len(called) and all(
            e["name"] == c["name"] and e["type"] == c["type"]
            and ("INPUT_PARAMETERS" not in params
                 or same_value(e["input_parameters"], c["input_parameters"]))
            and ("OUTPUT" not in params or same_value(e["output"], c["output"]))
            for e, c in zip(expected, called)))
    elif not expected:
        score = 0.0 if called else 1.0
    else:
        w = [[pair_score(e, c, params) for c in called] for e in expected]
        if p["should_consider_ordering"]:
            table = [[0.0] * (len(called) + 1) for _ in range(len(expected) + 1)]
            for i in range(1, len(expected) + 1):
                for j in range(1, len(called) + 1):
                    table[i][j] = max(table[i - 1][j], table[i][j - 1],
                                      table[i - 1][j - 1] + w[i - 1][j - 1])
            total = table[-1][-1]
        else:
            @cache
            def best(i: int, used: int) -> float:
                if i == len(expected):
                    return 0.0
                out = best(i + 1, used)
                for j, s in enumerate(w[i]):
                    if s > 0 and not used >> j & 1:
                        out = max(out, s + best(i + 1, used | 1 << j))
                return out
            total = best(0, 0)
        score = total / len(expected)
    threshold = 1.0 if p["strict_mode"] else p["threshold"]
    if p["strict_mode"] and score < 1.0:
        score = 0.0
    return score, score >= threshold


# -- the documented differences, as predicates on a case --------------------------------------------

def differences(case: dict[str, Any]) -> set[str]:
    p, expected, called = case["params"], case["expected"], case["called"]
    params = p["evaluation_params"]
    found = set()
    for e in expected:
        for c in called:
            if e["name"] == c["name"] and (
                    value_conflict(e["input_parameters"], c["input_parameters"],
                                   lambda x, y: x == y)
                    or value_conflict(e["output"], c["output"], lambda x, y: x == y)):
                found.add("value equality (true != 1)")
    if found or p["should_exact_match"] or p["should_consider_ordering"] or not expected:
        return found
    # DeepEval's pairing: first-come best per expected tool, and a call equal to one already
    # paired (name, input_parameters, output) counts as paired too.
    taken: list[dict[str, Any]] = []
    total = 0.0
    for e in expected:
        best, choice = 0.0, None
        for c in called:
            if any(c["name"] == t["name"] and c["input_parameters"] == t["input_parameters"]
                   and c["output"] == t["output"] for t in taken):
                continue
            s = pair_score(e, c, params)
            if s > best:
                best, choice = s, c
        if choice is not None:
            total += best
            taken.append(choice)
    if total / len(expected) < oracle(case)[0] - 1e-9 or (
            p["strict_mode"] and oracle(case)[0] > 0 and total < len(expected)):
        found.add("first-come pairing, identical calls counted once")
    return found


@pytest.fixture(scope="module")
def verdicts() -> list[dict[str, Any]]:
    return run_peer(SCRIPT, make_cases())


def test_tool_correctness_agrees_with_deepeval_outside_the_documented_differences(
        verdicts: list[dict[str, Any]]) -> None:
    counted: Counter[str] = Counter()
    agreed = disagreed = 0
    for n, (case, peer) in enumerate(zip(make_cases(), verdicts)):
        score, passed = ours(case)
        want_score, want_passed = oracle(case)
        assert score == pytest.approx(want_score, abs=1e-12), (n, case)
        assert passed == want_passed, (n, case)
        found = differences(case)
        if found:
            counted.update(found)
            disagreed += "error" in peer or abs(peer["score"] - score) > 1e-9
            continue
        assert "error" not in peer, (n, case, peer)
        assert score == pytest.approx(peer["score"], abs=1e-9), (n, case, peer)
        assert passed == peer["success"], (n, case, peer)
        agreed += 1
    print(f"\ntool_correctness: {agreed} of {CASES} cases equal to DeepEval; inside a "
          f"documented difference (DeepEval differs on {disagreed}): {dict(counted)}")
    assert agreed >= CASES * 3 // 4
    assert disagreed >= 5           # the differences are real, not imagined
