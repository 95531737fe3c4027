"""Seeded random trajectories for the differential tests against DeepEval and Ragas.

A small vocabulary (three tools, three argument keys, values that collide under one equality
and not another: ``1``/``1.0``/``True``/``"1"``, nested objects in two key orders), references
of 0 to 5 calls and runs derived from them by edits (argument changes, drops, inserts, swaps,
duplicates), split into steps of parallel calls.
"""

from __future__ import annotations

import copy
import random
from typing import Any

TOOLS = ("search", "fetch", "lookup")
KEYS = ("q", "n", "opts")
VALUES: tuple[Any, ...] = ("x", "y", 1, 2, 1.0, 2.5, [1, 2], {"a": 1, "b": [1, 2]},
                           {"b": [1, 2], "a": 1}, {"a": 2})
TRICKY: tuple[Any, ...] = (True, "1", {"a": True}, [1.0, 2])


def random_args(rng: random.Random, tricky: bool) -> dict[str, Any]:
    pool = VALUES + TRICKY if tricky else VALUES
    keys = rng.sample(KEYS, rng.randrange(0, 3))
    return {k: copy.deepcopy(rng.choice(pool)) for k in keys}


def random_call(rng: random.Random, tricky: bool) -> dict[str, Any]:
    return {"name": rng.choice(TOOLS), "args": random_args(rng, tricky)}


def edit(rng: random.Random, reference: list[dict[str, Any]], tricky: bool
         ) -> list[dict[str, Any]]:
    """A run made from the reference by a few random edits."""
    calls = copy.deepcopy(reference)
    for _ in range(rng.choice((0, 1, 1, 2, 3))):
        what = rng.randrange(6)
        if what == 0 and calls:                                 # change one argument
            c = rng.choice(calls)
            if c["args"] and rng.random() < 0.7:
                c["args"][rng.choice(sorted(c["args"]))] = copy.deepcopy(
                    rng.choice(VALUES + (TRICKY if tricky else ())))
            else:
                c["args"] = random_args(rng, tricky)
        elif what == 1 and calls:                               # drop a call
            calls.pop(rng.randrange(len(calls)))
        elif what == 2:                                         # an extra call
            calls.insert(rng.randrange(len(calls) + 1), random_call(rng, tricky))
        elif what == 3 and len(calls) > 1:                      # swap two calls
            i, j = rng.sample(range(len(calls)), 2)
            calls[i], calls[j] = calls[j], calls[i]
        elif what == 4 and calls:                               # a duplicate
            calls.insert(rng.randrange(len(calls) + 1), copy.deepcopy(rng.choice(calls)))
        elif what == 5 and calls:                               # rename one
            rng.choice(calls)["name"] = rng.choice(TOOLS)
    return calls


def steps_of(rng: random.Random, calls: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The calls split into consecutive steps of 1 to 3 parallel calls."""
    steps: list[list[dict[str, Any]]] = []
    i = 0
    while i < len(calls):
        k = rng.choice((1, 1, 2, 3))
        steps.append(calls[i:i + k])
        i += k
    return steps


def value_conflict(a: Any, b: Any, python_equal: Any) -> bool:
    """Whether a peer's comparison (``python_equal``) and value equality disagree on ``a`` and
    ``b`` or, for two objects, on any key both have."""
    from otel_tooleval.graders.tool_call_checks import same_value

    if bool(python_equal(a, b)) != same_value(a, b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return any(value_conflict(a[k], b[k], python_equal) for k in a.keys() & b.keys())
    return False
