"""``tool_trajectory`` against its grading code of before issue 19's third round on it (the
precomputed explanation parts, in_order's diagonal from exact's scan, any_order's counts and
lazy rows, the rule-out of ``\\n`` texts): on generated runs every result must be the very
same, explanation, score and details alike.

The runs mix what sends the grader off its fast paths: pending calls, calls without an end,
argument texts that are not ``json.dumps`` of the entry (other spacing, Python literals,
envelopes), arguments recorded as values or as a ``str`` subclass, envelopes that unwrap,
durations on either side of the limits, runs shorter and longer than the expected list.
"""

from __future__ import annotations

import json
import pickle
import random
from types import SimpleNamespace
from typing import Any

import pytest

from otel_tooleval import load_config
from otel_tooleval.graders.tool_trajectory import ToolTrajectoryGrader
from otel_tooleval.model import AgentRun, ToolCall
from tests._trajectory_oracle import OracleGrader

TOOLS = ("read", "write", "bash")
ARGS: list[dict[str, Any] | None] = [
    None, {"path": "a.py"}, {"path": "b.py"}, {"path": "a.py", "n": 1}, {"q": "x y"},
    {"kwargs": {"path": "a.py"}}, {"path": "a\"b"}, {}]


class _Text(str):
    """A str subclass: decoding leaves it as it is."""


def raw_text(args: dict[str, Any] | None, rng: random.Random) -> Any:
    if args is None:
        return None if rng.random() < 0.5 else "{}"
    roll = rng.random()
    if roll < 0.55:
        return json.dumps(args)
    if roll < 0.65:
        return json.dumps(args, separators=(",", ":"))
    if roll < 0.72:
        return repr(args)                  # a Python literal
    if roll < 0.78:
        return args                        # recorded as a value
    if roll < 0.84:
        return _Text(json.dumps(args))
    if roll < 0.9:
        return json.dumps({"args": [], "kwargs": args})
    return rng.choice(['{"path": "a" ".py"}', "not json", "", '{"path": "a\\u002epy"}'])


UNWRAP = SimpleNamespace(arguments_from=lambda value: {"path": "a.py"}, result_from=None)
PLAIN = SimpleNamespace(arguments_from=None, result_from=None)


def make_run(rng: random.Random, n: int, awkward: bool) -> AgentRun:
    calls = []
    t = 0
    for i in range(n):
        tool = rng.choice(TOOLS)
        args = rng.choice(ARGS)
        duration = rng.choice((1, 5, 9, 10, 11, 50)) * 1_000_000 + rng.choice((0, 1, 999_999))
        pending = awkward and rng.random() < 0.1
        end: int | None = t + duration
        if awkward and rng.random() < 0.05:
            end = None
        envelope = None
        if awkward and rng.random() < 0.1:
            envelope = rng.choice((UNWRAP, PLAIN))
        calls.append(ToolCall(tool, i, raw_arguments=raw_text(args, rng) if awkward
                              else (None if args is None else json.dumps(args)),
                              span_id=i + 2 if rng.random() < 0.9 else 0, start_ns=t,
                              end_ns=end, pending=pending, envelope=envelope))
        t += duration + 1
    return AgentRun(1, 1, "agent", tuple(calls), pending_calls=sum(c.pending for c in calls))


def expected_list(rng: random.Random, n: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(n):
        entry: dict[str, Any] = {"tool": rng.choice(TOOLS)}
        args = rng.choice(ARGS)
        if args is not None:
            entry["args"] = args
        if rng.random() < 0.7:
            entry["max_duration_ms"] = rng.choice((0, 5, 10, 10.5, 100))
        out.append(entry)
    return out


def graders(entry: dict[str, Any], include_values: bool) -> tuple[Any, Any]:
    config: dict[str, Any] = {"graders": [entry]}
    if include_values:
        config["emit"] = {"include_values": True}
    new = load_config(config).graders[0].grader
    assert isinstance(new, ToolTrajectoryGrader)
    return new, OracleGrader(new.name, new.params, new.include_values)


def same(new: Any, old: Any, run: AgentRun) -> None:
    a, b = new.grade(run), old.grade(run)
    assert (a.score, a.passed, a.label, a.explanation) == (b.score, b.passed, b.label,
                                                          b.explanation)
    assert a.to_dict() == b.to_dict()
    assert list(a.details) == list(b.details)       # keys in the same order
    assert pickle.loads(pickle.dumps(a.details)) == pickle.loads(pickle.dumps(b.details))


@pytest.mark.parametrize("mode", ["exact", "in_order"])
@pytest.mark.parametrize("awkward", [False, True])
def test_sequence_modes_grade_as_before(mode: str, awkward: bool) -> None:
    rng = random.Random(f"{mode}{awkward}")
    for _ in range(150):
        n_entries = rng.randrange(1, 14)
        expected = expected_list(rng, n_entries)
        entry: dict[str, Any] = {"type": "tool_trajectory", "mode": mode, "expected": expected,
                                 "threshold": rng.choice((1.0, 0.8, 0.0))}
        new, old = graders(entry, rng.random() < 0.3)
        for _ in range(4):
            n = rng.choice((0, n_entries, n_entries, rng.randrange(0, 16)))
            run = make_run(rng, n, awkward)
            if not awkward and rng.random() < 0.5:
                # the run its expected list describes, so that the diagonal holds
                calls = [ToolCall(e["tool"], i, raw_arguments=json.dumps(e["args"])
                                  if "args" in e else None, span_id=i + 2,
                                  start_ns=10 * i * 1_000_000,
                                  end_ns=(10 * i + rng.choice((1, 10, 11))) * 1_000_000)
                         for i, e in enumerate(expected)]
                run = AgentRun(1, 1, "agent", tuple(calls))
            same(new, old, run)


@pytest.mark.parametrize("awkward", [False, True])
def test_any_order_grades_as_before(awkward: bool) -> None:
    rng = random.Random(f"any{awkward}")
    for _ in range(200):
        tools = rng.sample((*TOOLS, "other", "x"), rng.randrange(1, 5))
        minimums = {t: rng.randrange(1, 4) for t in tools}
        entry = {"type": "tool_trajectory", "mode": "any_order", "minimums": minimums,
                 "threshold": rng.choice((1.0, 0.5))}
        new, old = graders(entry, False)
        for _ in range(3):
            same(new, old, make_run(rng, rng.randrange(0, 20), awkward))


def test_any_order_with_many_tools_grades_as_before() -> None:
    # Past 200 call x tool comparisons the counts come from one pass, not list.count per tool.
    rng = random.Random(5)
    names = [f"t{i}" for i in range(20)]
    minimums = {t: rng.randrange(1, 3) for t in names}
    new, old = graders({"type": "tool_trajectory", "mode": "any_order",
                        "minimums": minimums}, False)
    for _ in range(30):
        calls = tuple(ToolCall(rng.choice(names), i, pending=rng.random() < 0.1)
                      for i in range(rng.randrange(0, 60)))
        same(new, old, AgentRun(1, 1, "agent", calls))
