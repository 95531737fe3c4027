"""Grading time per run for each grader family, and the 10k x 10k LCS.

A standalone script, not a pytest test::

    python tests/bench/bench_graders.py [--sizes 10,100,1000,10000] [--repeat 7] [--lcs 10000]

For each run size it builds agent runs from span records (a coding agent's mix of tools, JSON
arguments and results, a model turn every five calls), then times each family's grader on a
fresh run (so argument and result decoding is paid, as it is live) and all families together,
and prints the median. Building the run from spans is timed on its own line. Last, the order
family's LCS on two 10,000-call sequences (``--lcs``): time and tracemalloc peak, and the peak
on sequences twice as long, so that its growth shows whether memory is linear (2x for twice the
input) or quadratic (4x).

Targets (issue 3): a 1,000-call run through every family under 5 ms in total; the 10k x 10k
LCS under 0.5 s with memory linear in the input. ``main(argv)`` returns the figures as a dict.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from otel_tooleval import load_config
from otel_tooleval.lcs import lcs, lcs_length
from otel_tooleval.model import AgentRun, SpanRecord
from otel_tooleval.trajectory import RunPolicy, build_run

TOOLS: tuple[tuple[str, dict[str, Any], Any], ...] = (
    ("read_file", {"path": "src/app/main.py"}, {"content": "def main():\n    return 42\n"}),
    ("search", {"query": "def main", "glob": "**/*.py"}, ["src/app/main.py:1"]),
    ("write_file", {"path": "src/app/main.py", "content": "x = 1\n"}, {"ok": True}),
    ("run_tests", {"selector": "tests/test_main.py"}, {"passed": 12, "failed": 0}),
    ("bash", {"command": "ls -la src/app"}, "main.py\n__init__.py\n"),
    ("mcp__brave__web_search", {"query": "release notes"}, ["https://example.invalid/r"]),
)

FAMILIES: dict[str, dict[str, Any]] = {
    "tool-calls": {"type": "tool-calls", "config": {
        "required": [{"name": "^read_file$", "args": {"path": "\\.py$"}},
                     {"name": "^run_tests$", "min_count": 2},
                     {"name": "^write_file$", "before_step": 100}],
        "disallowed": [{"name": "^bash$", "command": "rm\\s+-rf"}, "^delete_"],
        "sequence": ["^read_file$", "^write_file$", "^run_tests$"]}},
    "tool_trajectory": {"type": "tool_trajectory", "mode": "in_order", "expected": [
        {"tool": "read_file", "args": {"path": "src/app/main.py"}},
        {"tool": "search"}, {"tool": "write_file", "max_duration_ms": 50},
        {"tool": "run_tests", "max_duration_ms": 50}, {"tool": "bash"}]},
    "equal_function_sets": {"type": "equal_function_sets", "classes": [
        {"name": "read", "members": ["read_file"]},
        {"name": "search", "members": ["brave.web_search", "search"]},
        {"name": "test", "members": ["run_tests"]}],
        "expect": [{"tool_selection.f1": {">=": 50}}]},
    "tool (letta)": {"kind": "tool", "function": "contains", "extractor": "tool_arguments",
                     "extractor_config": {"tool_name": "search", "occurrence": "all"},
                     "ground_truth": "def main"},
    "tool-call-order": {"type": "tool-call-order", "strict": False,
                        "tool_calls_order": ["read_file", "search", "write_file", "run_tests"] * 5},
    "tool-call-count": {"type": "tool-call-count", "tool_calls_count": {
        "read_file": [">=", 1], "bash": ["<", 10_000], "delete_file": ["==", 0]}},
    "tool-call-args": {"type": "tool-call-args", "subset": True, "tool_calls": [
        {"name": "read_file", "args": {"path": "src/app/main.py"}},
        {"name": "bash", "args": {"command": "ls -la src/app"}}] * 3},
    "tool-call-output": {"type": "tool-call-output", "tool_outputs": [
        {"name": "bash", "output": "main.py\n__init__.py\n"}] * 3},
    "trajectory_match": {"type": "trajectory_match", "trajectory_match_mode": "superset",
                         "tool_args_match_mode": "superset",
                         "tool_args_match_overrides": {"search": ["query"], "bash": "ignore"},
                         "reference_tool_calls": [
                             {"name": "read_file", "args": {"path": "src/app/main.py"}},
                             {"name": "search", "args": {"query": "def main"}},
                             {"name": "write_file", "args": {}}, {"name": "bash", "args": {}},
                             {"name": "run_tests", "args": {}}] * 20},
    # ADK IN_ORDER: the last use is never made, so every bash call's args are compared.
    "trajectory_avg (adk)": {"type": "tool_trajectory_avg_score", "criteria": {
        "tool_trajectory_avg_score": {"threshold": 1.0, "match_type": "IN_ORDER"}},
        "expected_tool_use": [{"name": "read_file", "args": {"path": "src/app/main.py"}},
                              {"name": "run_tests", "args": {"selector": "tests/test_main.py"}},
                              {"name": "bash", "args": {"command": "rm -rf /"}}]},
    # Issue 17: DeepEval's tool_correctness, Ragas' tool_call_accuracy and tool_call_f1.
    **{name: {**entry, key: [{"name": "read_file", arg: {"path": "src/app/main.py"}},
                             {"name": "search", arg: {"query": "def main"}},
                             {"name": "run_tests", arg: {"selector": "tests/test_main.py"}},
                             {"name": "bash", arg: {"command": "ls"}}] * 3}
       for name, entry, key, arg in (
           ("tool_correctness", {"type": "tool_correctness",
                                 "evaluation_params": ["INPUT_PARAMETERS"]},
            "expected_tools", "input_parameters"),
           ("tool_correctness (ordering)", {"type": "tool_correctness",
                                            "evaluation_params": ["INPUT_PARAMETERS"],
                                            "should_consider_ordering": True},
            "expected_tools", "input_parameters"),
           ("tool_call_accuracy", {"type": "tool_call_accuracy"}, "reference_tool_calls", "args"),
           ("tool_call_accuracy (any order)", {"type": "tool_call_accuracy",
                                               "strict_order": False},
            "reference_tool_calls", "args"),
           ("tool_call_f1", {"type": "tool_call_f1"}, "reference_tool_calls", "args"))},
}


def records(n_calls: int, *, seed: int = 7) -> list[SpanRecord]:
    rng = random.Random(seed)
    out = [SpanRecord(1, 1, 0, "invoke_agent bench", 0, 10**15,
                      {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench"})]
    t, sid = 1_000, 1
    for i in range(n_calls):
        if i % 5 == 0:
            sid += 1
            out.append(SpanRecord(1, sid, 1, "chat m", t, t + 1_000,
                                  {"gen_ai.operation.name": "chat"}))
            t += 2_000
        name, args, result = TOOLS[rng.randrange(len(TOOLS))]
        sid += 1
        duration = rng.randrange(1, 80) * 1_000_000
        out.append(SpanRecord(1, sid, 1, f"execute_tool {name}", t, t + duration, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
            "gen_ai.tool.call.arguments": json.dumps(args),
            "gen_ai.tool.call.result": json.dumps(result)}))
        t += duration + 1_000
    return out


def fresh_run(recs: list[SpanRecord]) -> AgentRun:
    return build_run(recs[0], recs[1:], RunPolicy(max_calls_per_run=10**6))


def timed(fn: Callable[[], Any], repeat: int) -> float:
    """Median seconds of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_sizes(sizes: Sequence[int], repeat: int) -> dict[str, list[float]]:
    """Prints the table; returns ms per run, per family (and "ALL FAMILIES", "build run"),
    one value per size."""
    graders = {name: load_config({"graders": [entry]}).graders[0].grader
               for name, entry in FAMILIES.items()}
    header = f"{'family':<32}" + "".join(f"{n:>12,}" for n in sizes)
    print("grading time per run, median of", repeat, "(ms); calls per run across")
    print(header)
    print("-" * len(header))
    rows: dict[str, list[float]] = {name: [] for name in [*graders, "ALL FAMILIES", "build run"]}
    for n in sizes:
        recs = records(n)
        reps = repeat if n <= 1_000 else max(3, repeat // 2)
        for name, grader in graders.items():
            runs = [fresh_run(recs) for _ in range(reps)]
            it = iter(runs)
            rows[name].append(timed(lambda g=grader, it=it: g.grade(next(it)), reps))
        runs = [fresh_run(recs) for _ in range(reps)]
        it = iter(runs)

        def everything(it: Iterator[AgentRun] = it) -> None:
            run = next(it)
            for grader in graders.values():
                grader.grade(run)

        rows["ALL FAMILIES"].append(timed(everything, reps))
        rows["build run"].append(timed(lambda r=recs: fresh_run(r), reps))
    for name, values in rows.items():
        if name == "build run":
            print("-" * len(header))
        print(f"{name:<32}" + "".join(f"{v * 1000:>12.2f}" for v in values))
    if 1_000 in sizes:
        total = rows["ALL FAMILIES"][list(sizes).index(1_000)] * 1000
        print(f"\n1,000-call run through every family: {total:.2f} ms (target < 5 ms)")
    return {name: [v * 1000 for v in values] for name, values in rows.items()}


def _sequences(n: int) -> tuple[list[str], list[str]]:
    rng = random.Random(11)
    names = [f"tool_{i}" for i in range(40)]
    expected = [rng.choice(names) for _ in range(n)]
    actual = list(expected)
    for _ in range(n // 5):   # an edited copy: substitutions, insertions, deletions
        i = rng.randrange(len(actual))
        op = rng.randrange(3)
        if op == 0:
            actual[i] = rng.choice(names)
        elif op == 1:
            actual.insert(i, rng.choice(names))
        else:
            del actual[i]
    return expected, actual


def _peak(fn: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def bench_lcs(n: int = 10_000) -> dict[str, dict[str, float]]:
    """The order family's LCS on two n-call sequences; returns ms, peak MiB and the peak's
    growth from n to 2n calls, for the length alone and with the subsequence."""
    expected, actual = _sequences(n)
    double_e, double_a = _sequences(2 * n)
    out: dict[str, dict[str, float]] = {}
    for label, fn, double in (
            ("length", lambda: lcs_length(expected, actual),
             lambda: lcs_length(double_e, double_a)),
            ("with subsequence", lambda: lcs(expected, actual), lambda: lcs(double_e, double_a))):
        # Timed without tracemalloc (it slows every allocation several times), then run again
        # under tracemalloc for the peak.
        elapsed = timed(fn, 3)
        result, peak = _peak(fn)
        _, double_peak = _peak(double)
        growth = double_peak / peak if peak else float("nan")
        size = result if isinstance(result, int) else len(result)
        print(f"LCS {n:,} x {len(actual):,} ({label}): |LCS| = {size:,}, "
              f"{elapsed * 1000:.0f} ms, peak {peak / 2**20:.2f} MiB; {2 * n:,} calls: "
              f"{growth:.2f}x the peak (target < 500 ms; linear: ~2x, quadratic: 4x)")
        out[label] = {"ms": elapsed * 1000, "peak_mib": peak / 2**20, "memory_growth": growth,
                      "lcs": size}
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100,1000,10000")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--lcs", type=int, default=10_000,
                        help="calls per sequence for the LCS (10000; 0 skips it)")
    opts = parser.parse_args(argv)
    sizes = [int(s) for s in opts.sizes.split(",")]
    print(f"python {sys.version.split()[0]}")
    rows = bench_sizes(sizes, opts.repeat)
    out: dict[str, Any] = {"sizes": sizes, "ms_per_run": rows}
    if opts.lcs:
        print()
        out["lcs_calls"] = opts.lcs
        out["lcs"] = bench_lcs(opts.lcs)
    return out


if __name__ == "__main__":
    main()
