"""Time per grading call, per family: the fixed cost at 10 calls and the linear families' growth.

A standalone script, not a pytest test::

    python tests/bench/bench_fixed_cost.py [--sizes 10,100,1000,10000] [--repeat 7]
                                           [--families any_order,exact,...]

Runs are a coding agent's trajectory: six tools with JSON arguments whose values carry an index
(``src/m17.py``, ``def f3``), durations of 1-200 ms, a model turn every five calls. The sequence
families expect the run's own calls with full ``args`` and ``max_duration_ms: 100``, about 5% of
the entries perturbed (another argument value or another tool) and a few calls removed and
inserted, so the expected list is as long as the run. Each family is timed on fresh runs built
from the same span records (argument decoding is paid, as it is live): a batch of runs graded one
after the other, the time divided by the batch, the median of ``--repeat`` batches, in µs per
grading call. The clock is the process's CPU time (``--clock wall`` for wall time): on a shared
machine other processes' load moves wall time far more. A full garbage collection runs before
each batch, so that the runs just built are not traced inside the timed grades.
``main(argv)`` returns the figures as a dict.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from otel_tooleval import load_config
from otel_tooleval.model import AgentRun, SpanRecord
from otel_tooleval.trajectory import RunPolicy, build_run

TOOLS = ("read_file", "search", "write_file", "run_tests", "bash", "mcp__brave__web_search")


def arguments(tool: str, i: int) -> dict[str, Any]:
    """The arguments of a call of ``tool``; ``i`` varies the values."""
    if tool == "read_file":
        return {"path": f"src/m{i}.py"}
    if tool == "search":
        return {"query": f"def f{i}", "glob": "**/*.py"}
    if tool == "write_file":
        return {"path": f"src/m{i}.py", "content": f"x = {i}\n"}
    if tool == "run_tests":
        return {"selector": f"tests/test_m{i}.py"}
    if tool == "bash":
        return {"command": f"ls -la src/d{i}"}
    return {"query": f"release notes {i}"}


def trajectory(n: int, seed: int = 7) -> tuple[list[SpanRecord], list[tuple[str, dict[str, Any]]]]:
    """Span records of an n-call run (root first) and its calls as (tool, arguments)."""
    rng = random.Random(seed)
    out = [SpanRecord(1, 1, 0, "invoke_agent bench", 0, 10**15,
                      {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench"})]
    calls = []
    t, sid = 1_000, 1
    for i in range(n):
        if i % 5 == 0:
            sid += 1
            out.append(SpanRecord(1, sid, 1, "chat m", t, t + 1_000,
                                  {"gen_ai.operation.name": "chat"}))
            t += 2_000
        tool = TOOLS[rng.randrange(len(TOOLS))]
        args = arguments(tool, rng.randrange(max(n, 10)))
        duration = rng.randrange(1, 201) * 1_000_000
        sid += 1
        out.append(SpanRecord(1, sid, 1, f"execute_tool {tool}", t, t + duration, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
            "gen_ai.tool.call.arguments": json.dumps(args),
            "gen_ai.tool.call.result": json.dumps({"content": f"ok {i % 7}"})}))
        calls.append((tool, args))
        t += duration + 1_000
    return out, calls


def expected(calls: Sequence[tuple[str, dict[str, Any]]], seed: int = 11,
             ) -> list[dict[str, Any]]:
    """The run's own calls with full args and a latency limit, ~5% perturbed, a few calls
    removed and inserted."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for tool, args in calls:
        roll = rng.random()
        if roll < 0.025:
            tool = TOOLS[(TOOLS.index(tool) + 1) % len(TOOLS)]
        elif roll < 0.05:
            args = {**args, next(iter(args)): "perturbed"}
        out.append({"tool": tool, "args": args, "max_duration_ms": 100})
    for _ in range(max(1, len(out) // 200)):
        del out[rng.randrange(len(out))]
        tool = TOOLS[rng.randrange(len(TOOLS))]
        out.insert(rng.randrange(len(out) + 1), {"tool": tool, "args": arguments(tool, -1),
                                                  "max_duration_ms": 100})
    return out


def families(calls: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """One config entry per family, configured for this run."""
    exp = expected(calls)
    head = calls[:10]
    return {
        "tool_trajectory any_order": {"type": "tool_trajectory", "mode": "any_order",
                                      "minimums": {t: 1 for t in TOOLS}},
        "tool_trajectory exact": {"type": "tool_trajectory", "mode": "exact", "expected": exp},
        "tool_trajectory in_order": {"type": "tool_trajectory", "mode": "in_order",
                                     "expected": exp},
        "tool exact_match (letta)": {"kind": "tool", "function": "exact_match",
                                     "extractor": "tool_arguments",
                                     "extractor_config": {"tool_name": "search"},
                                     "ground_truth": '{"query": "def f1", "glob": "**/*.py"}'},
        "tool contains (letta)": {"kind": "tool", "function": "contains",
                                  "extractor": "tool_arguments",
                                  "extractor_config": {"tool_name": "search",
                                                       "occurrence": "all"},
                                  "ground_truth": "def f1"},
        "tool-call-count": {"type": "tool-call-count", "tool_calls_count": {
            "read_file": [">=", 1], "bash": ["<", 10_000], "delete_file": ["==", 0]}},
        "tool-call-order": {"type": "tool-call-order",
                            "tool_calls_order": [t for t, _ in head] or ["bash"]},
        "tool-call-args": {"type": "tool-call-args", "subset": True,
                           "tool_calls": [{"name": e["tool"], "args": e["args"]} for e in exp]},
        "tool-call-output": {"type": "tool-call-output", "tool_outputs": [
            {"name": t, "output": f"ok {i % 7}"} for i, (t, _) in enumerate(calls)]},
    }


def per_call_us(grader: Any, recs: list[SpanRecord], batch: int, repeat: int,
                clock: Callable[[], float] = time.process_time) -> float:
    """Median over ``repeat`` batches of the time per grading call, in µs, on fresh runs."""
    times = []
    policy = RunPolicy(max_calls_per_run=10**6)
    for _ in range(repeat):
        runs: list[AgentRun] = [build_run(recs[0], recs[1:], policy) for _ in range(batch)]
        grade = grader.grade
        # The runs just built would otherwise be traced by the next full collection, which
        # the grades below would trigger and pay for (tens of ms at 10,000 calls).
        gc.collect()
        t0 = clock()
        for run in runs:
            grade(run)
        times.append((clock() - t0) / batch)
    return statistics.median(times) * 1e6


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100,1000,10000")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--families", default="",
                        help="comma-separated prefixes of family names (default: all)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="process CPU time (default: steadier on a shared machine) or "
                             "wall time")
    opts = parser.parse_args(argv)
    sizes = [int(s) for s in opts.sizes.split(",")]
    wanted = [w for w in opts.families.split(",") if w]
    clock = time.process_time if opts.clock == "cpu" else time.perf_counter
    print(f"python {sys.version.split()[0]}; µs per grading call ({opts.clock} time), median "
          f"of {opts.repeat} batches of fresh runs")
    table: dict[str, list[float]] = {}
    for n in sizes:
        recs, calls = trajectory(n)
        entries = families(calls)
        batch = max(1, min(500, 20_000 // max(n, 1)))
        repeat = opts.repeat if n <= 1_000 else max(3, opts.repeat // 2)
        for name, entry in entries.items():
            if wanted and not any(name.startswith(w) for w in wanted):
                continue
            grader = load_config({"graders": [entry]}).graders[0].grader
            table.setdefault(name, []).append(per_call_us(grader, recs, batch, repeat, clock))
    header = f"{'family':<28}" + "".join(f"{n:>12,}" for n in sizes)
    print(header)
    print("-" * len(header))
    for name, values in table.items():
        print(f"{name:<28}" + "".join(f"{v:>12.1f}" for v in values))
    return {"sizes": sizes, "us_per_call": table}


if __name__ == "__main__":
    main()
