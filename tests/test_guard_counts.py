"""The guard's counts of one run, taken from several threads at once: exact without a lock."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Iterator

import pytest

from otel_tooleval.guard import GuardConfig, GuardRules, GuardRun, GuardViolation

THREADS = 8
CALLS = 2_000


@pytest.fixture(autouse=True)
def _switch_often() -> Iterator[None]:
    # Threads swapped as often as the interpreter allows: a count read and written back in two
    # steps would lose updates here.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def _hammer(rules: GuardRules, run: GuardRun, names: list[str]) -> list[GuardViolation]:
    found: list[GuardViolation] = []
    start = threading.Barrier(THREADS)

    def calls(name: str) -> None:
        start.wait()
        for _ in range(CALLS):
            violation = rules.check(run, name, "{}")
            if violation is not None:
                found.append(violation)

    threads = [threading.Thread(target=calls, args=(names[i % len(names)],))
               for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return found


def test_a_run_counted_from_several_threads_numbers_each_call_once() -> None:
    limit = THREADS * CALLS // 2
    rules = GuardRules(GuardConfig.model_validate({"max_calls": limit}))
    run = GuardRun()
    found = _hammer(rules, run, ["search"])
    assert run.calls == THREADS * CALLS
    # Every call past the limit is flagged once, with its own number.
    assert len(found) == THREADS * CALLS - limit
    assert sorted(v.count for v in found if v.count is not None) == list(
        range(limit + 1, THREADS * CALLS + 1))


def test_per_tool_counts_from_several_threads_are_exact() -> None:
    rules = GuardRules(GuardConfig.model_validate(
        {"max_calls_per_tool": {"a": CALLS, "b": 0}}))
    run = GuardRun()
    found = _hammer(rules, run, ["a", "b", "c"])
    threads_of = Counter(["a", "b", "c"][i % 3] for i in range(THREADS))
    assert run.tool_calls("a") == threads_of["a"] * CALLS
    assert run.tool_calls("b") == threads_of["b"] * CALLS
    assert run.tool_calls("c") == 0   # no limit: not counted per tool
    assert Counter(v.tool for v in found) == {
        "a": (threads_of["a"] - 1) * CALLS, "b": threads_of["b"] * CALLS}
