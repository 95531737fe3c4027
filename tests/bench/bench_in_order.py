"""``tool_trajectory`` in_order matching: bit-parallel (now) against the column DPs (before).

A standalone script, not a pytest test::

    python tests/bench/bench_in_order.py [--sizes 1000,5000,10000] [--before-max 10000]
    python tests/bench/bench_in_order.py --limits [--sizes 1000,5000,10000] [--variants coding]

For each size n: n expected entries against an edited copy of them as the run's calls (about n
calls; substitutions, insertions, deletions), over 8 tools, in two variants: ``names``, plain
tool entries and no pending call; ``args``, a third of the entries with an argument matcher and
1% of the calls pending (the case that took the Pareto-front DP before). Times the matching
itself (``graders.in_order._in_order``; the arguments are decoded beforehand, as a grader that
ran first would have) now and with the implementation it replaced (kept as the oracle of
``tests/test_in_order_bits.py``), checks both chose the same calls, and prints before/after.
Then the growth for twice the input: now at 2n against n (the rows are n x n bits, so ~4x is
expected; the per-call Python work of before grew the same way, only ~50-100 times slower), and
the tracemalloc peak at n and 2n.

``--limits``: entries with latency limits (the sparse DPs, ``_sparse_settled`` and
``_sparse_fronts``) instead, in a coding agent's shape: calls of six tools with JSON arguments
that carry an index (files re-read, queries repeated), durations 1-200 ms; the expected list is
the run's own calls with full ``args`` and ``max_duration_ms: 100``, 5% of them perturbed
(another argument value or tool), 2% removed and 2% inserted. Variants: ``coding`` (no pending
call), ``coding+pending`` (1% pending: the Pareto fronts) and ``names+limits`` (plain tool
entries with limits: no argument to index, so past the pair budget the column DPs remain).

``--paths``: each of ``graders/in_order.py``'s algorithms timed on the same runs, to show which
earns its place where (CPU µs, median of ``--repeat``; default sizes 10,20,50,100,1000): on a
run of the ``coding`` shape without pending calls the column DP (``_in_order_settled``), the
sparse DP (``_sparse_settled``; the pairs found and banded inside the timing, the candidate
index built beforehand as a grader keeps it) and both Pareto-front DPs; with 1% pending calls
the two front DPs; on the unedited run (its own calls as the expected list) ``_in_order`` with
its ``_diagonal`` pass against the sparse DP alone; without limits (``names``) the bit-parallel
path against the column DP; and ``names+limits`` (no argument to index) the column DP against
the sparse DP over every candidate pair. Each line says whether all chose the same calls.

``--before-max`` caps the sizes at which the old implementation is timed (it takes tens of
seconds at 10,000 x 10,000). ``main(argv)`` returns the figures as a dict.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the oracle, in tests/

from otel_tooleval.graders import in_order as tt
from otel_tooleval.model import ToolCall
from tests.test_in_order_bits import _oracle

TOOLS = [f"tool_{i}" for i in range(8)]
Case = tuple[list[tt._Entry], list[ToolCall]]


def case(n: int, variant: str, seed: int = 16) -> Case:
    """n entries and an edited copy of them as calls (see the module docstring)."""
    rng = random.Random(seed)
    with_args = variant == "args"
    plan = [(rng.choice(TOOLS), rng.randrange(4)) for _ in range(n)]
    entries = [tt._Entry(i, tool, {"k": key} if with_args and i % 3 == 0 else None, None)
               for i, (tool, key) in enumerate(plan)]
    actual = list(plan)
    for _ in range(n // 5):
        i = rng.randrange(len(actual))
        op = rng.randrange(3)
        if op == 0:
            actual[i] = (rng.choice(TOOLS), rng.randrange(4))
        elif op == 1:
            actual.insert(i, (rng.choice(TOOLS), rng.randrange(4)))
        else:
            del actual[i]
    calls = []
    for j, (tool, key) in enumerate(actual):
        pending = with_args and rng.random() < 0.01
        c = ToolCall(tool, j, raw_arguments=json.dumps({"k": key, "path": f"src/{j}.py"}),
                     pending=pending, start_ns=0, end_ns=None if pending else 1_000_000)
        c.arguments   # noqa: B018 - decoded once, before timing
        calls.append(c)
    return entries, calls


CODING_TOOLS = ("read_file", "search", "write_file", "run_tests", "bash",
                "mcp__brave__web_search")


def coding_args(tool: str, x: int) -> dict[str, Any]:
    if tool == "read_file":
        return {"path": f"src/app/mod_{x}.py"}
    if tool == "search":
        return {"query": f"def handler_{x}", "glob": "**/*.py"}
    if tool == "write_file":
        return {"path": f"src/app/mod_{x}.py", "content": f"x = {x}\n"}
    if tool == "run_tests":
        return {"selector": f"tests/test_mod_{x}.py"}
    if tool == "bash":
        return {"command": f"ls -la src/app/{x}"}
    return {"query": f"release notes {x}"}


def coding_case(n: int, variant: str, seed: int = 19) -> Case:
    """n calls of a coding agent and an expected list made of them (``--limits``)."""
    rng = random.Random(seed)
    spread = max(n // 20, 3)
    actual = []
    for _ in range(n):
        tool = rng.choice(CODING_TOOLS)
        actual.append((tool, coding_args(tool, rng.randrange(spread)), rng.randrange(1, 201)))
    calls = []
    for j, (tool, args, ms) in enumerate(actual):
        pending = variant == "coding+pending" and rng.random() < 0.01
        c = ToolCall(tool, j, raw_arguments=json.dumps(args), pending=pending, start_ns=0,
                     end_ns=None if pending else ms * 1_000_000)
        c.arguments   # noqa: B018 - decoded once, before timing
        calls.append(c)
    plan: list[tuple[str, dict[str, Any] | None]] = [(tool, args) for tool, args, _ in actual]
    for i in range(len(plan)):
        if rng.random() < 0.05:
            tool = rng.choice(CODING_TOOLS)
            plan[i] = (tool, coding_args(tool, rng.randrange(spread)))
    for _ in range(n // 50):
        del plan[rng.randrange(len(plan))]
        tool = rng.choice(CODING_TOOLS)
        plan.insert(rng.randrange(len(plan)), (tool, coding_args(tool, rng.randrange(spread))))
    entries = [tt._Entry(i, tool, None if variant == "names+limits" else args, 100.0)
               for i, (tool, args) in enumerate(plan)]
    return entries, calls


def timed(fn: Callable[[], Any], repeat: int) -> tuple[Any, float]:
    """The result and median seconds of ``repeat`` calls."""
    return timed_cpu(fn, repeat)[:2]


def timed_cpu(fn: Callable[[], Any], repeat: int) -> tuple[Any, float, float]:
    """The result, median wall seconds and median CPU seconds (this process) of ``repeat``
    calls: on a shared machine the CPU time shows the cost without the wait for a core."""
    times, cpu, result = [], [], None
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return result, statistics.median(times), statistics.median(cpu)


def peak(fn: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _chosen(matched: dict[int, ToolCall]) -> dict[int, int]:
    return {k: c.index for k, c in matched.items()}


def bench(sizes: Sequence[int], before_max: int, repeat: int, limits: bool = False,
          variants: Sequence[str] = ()) -> list[dict[str, Any]]:
    rows = []
    make = coding_case if limits else case
    variants = variants or (("coding", "coding+pending", "names+limits") if limits
                            else ("names", "args"))
    for variant in variants:
        for n in sizes:
            entries, calls = make(n, variant)
            by_tool = tt._by_tool(entries)

            now = partial(tt._in_order, entries, calls, by_tool)
            matched, after, after_cpu = timed_cpu(now, repeat)
            row: dict[str, Any] = {"variant": variant, "n": n, "calls": len(calls),
                                   "hits": len(matched), "after_ms": after * 1000,
                                   "after_cpu_ms": after_cpu * 1000}
            if n <= before_max:
                old, before = timed(partial(_oracle, entries, calls, by_tool), 1)
                row["before_ms"] = before * 1000
                row["ratio"] = before / after
                row["same"] = _chosen(old) == _chosen(matched)
            double_entries, double_calls = make(2 * n, variant)
            double = partial(tt._in_order, double_entries, double_calls,
                             tt._by_tool(double_entries))
            row["growth"] = timed(double, repeat)[1] / after
            row["peak_mib"] = peak(now) / 2**20
            row["peak_growth"] = peak(double) / 2**20 / row["peak_mib"]
            before_text = (f"before {row['before_ms']:,.0f} ms, {row['ratio']:,.0f}x faster, "
                           f"same matching: {row['same']}" if "before_ms" in row
                           else "before: not timed (--before-max)")
            per_call = row["after_cpu_ms"] * 1000 / max(len(calls), 1)
            print(f"in_order {variant:<5} {n:>6,} x {len(calls):>6,}: {len(matched):,} hits; "
                  f"after {row['after_ms']:,.1f} ms (CPU {row['after_cpu_ms']:,.1f}; "
                  f"{per_call:.2f} us CPU per call); "
                  f"{before_text}; twice the input: "
                  f"{row['growth']:.2f}x the time, peak {row['peak_mib']:.1f} MiB -> "
                  f"{row['peak_growth']:.2f}x", flush=True)
            rows.append(row)
    return rows


def _sparse(entries: list[tt._Entry], calls: list[ToolCall], settled: bool,
            index: Any) -> dict[int, ToolCall]:
    """A sparse DP over every matching pair (no budget), as ``_in_order`` would run it."""
    by_tool = tt._by_tool(entries)
    pairs = tt._matching_pairs(calls, by_tool, 1 << 62, index)
    assert pairs is not None
    pairs = tt._in_band(pairs, len(entries), len(calls))
    return (tt._sparse_settled if settled else tt._sparse_fronts)(entries, calls, pairs)


def paths(sizes: Sequence[int], repeat: int) -> list[dict[str, Any]]:
    """Each in_order algorithm on the same runs (see ``--paths`` in the module docstring)."""
    rows = []
    for n in sizes:
        for variant in ("coding", "coding+pending", "unedited", "names", "names+limits"):
            if variant == "names":
                entries, calls = case(n, "names")
            else:
                entries, calls = coding_case(n, "coding" if variant == "unedited" else variant)
            if variant == "unedited":
                entries = [tt._Entry(c.index, c.name, c.arguments, 100.0) for c in calls]
            by_tool = tt._by_tool(entries)
            index = tt._pair_index(by_tool)
            pending = variant == "coding+pending"
            if variant == "names":
                algorithms = {"bits": partial(tt._in_order_bits, entries, calls, by_tool),
                              "columns": partial(tt._in_order_settled, entries, calls, by_tool)}
            elif variant == "unedited":
                algorithms = {"diagonal": partial(tt._in_order, entries, calls, by_tool, index),
                              "sparse": partial(_sparse, entries, calls, True, index)}
            elif pending:
                algorithms = {"column fronts": partial(tt._in_order_fronts, entries, calls,
                                                       by_tool),
                              "sparse fronts": partial(_sparse, entries, calls, False, index)}
            else:
                algorithms = {"columns": partial(tt._in_order_settled, entries, calls, by_tool),
                              "sparse": partial(_sparse, entries, calls, True, index),
                              "column fronts": partial(tt._in_order_fronts, entries, calls,
                                                       by_tool),
                              "sparse fronts": partial(_sparse, entries, calls, False, index)}
            row: dict[str, Any] = {"variant": variant, "n": n, "calls": len(calls)}
            chosen = []
            for name, fn in algorithms.items():
                matched, _, cpu = timed_cpu(fn, repeat)
                row[name] = cpu * 1e6
                chosen.append(_chosen(matched))
            row["same"] = all(c == chosen[0] for c in chosen)
            print(f"paths {variant:<14} {n:>6,} x {len(calls):>6,}: " + ", ".join(
                f"{name} {row[name]:,.0f}" for name in algorithms)
                + f" µs CPU; same matching: {row['same']}", flush=True)
            rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,5000,10000")
    parser.add_argument("--before-max", type=int, default=10_000,
                        help="largest size at which the old implementation is timed")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--limits", action="store_true",
                        help="entries with max_duration_ms, in a coding agent's shape")
    parser.add_argument("--paths", action="store_true",
                        help="each in_order algorithm timed on the same runs")
    parser.add_argument("--variants", default="",
                        help="comma-separated subset of the variants (default: all)")
    opts = parser.parse_args(argv)
    if opts.paths:
        sizes = [int(s) for s in (opts.sizes if opts.sizes != "1000,5000,10000"
                                  else "10,20,50,100,1000").split(",")]
        print(f"python {sys.version.split()[0]}")
        return {"sizes": sizes, "paths": paths(sizes, opts.repeat)}
    sizes = [int(s) for s in opts.sizes.split(",")]
    variants = [v for v in opts.variants.split(",") if v]
    print(f"python {sys.version.split()[0]}")
    rows = bench(sizes, opts.before_max, opts.repeat, opts.limits, variants)
    return {"sizes": sizes, "rows": rows}


if __name__ == "__main__":
    main()
