"""The cyclic collector's work on each side of ``bench_overhead``, each side alone.

A standalone script, not a pytest test (pytest collects ``test_*.py`` only)::

    python tests/bench/bench_collector.py [--traffic agent|web|mixed] [--graders none|one|all]
                                          [--spans 150000] [--repeat 2]

``bench_overhead`` times both sides in one process, which share one collector: what one side
leaves counts towards the other's collections. Here each side runs alone in a fresh child
process (both sides built, as there, so the heap is the same; only one side driven): after a
warm-up and one full collection, ``--spans`` spans of ``--traffic``, counting the collections
of each generation that start on any thread (``gc.callbacks``), the application thread's CPU,
and the CPU it spent in full collections. The sides alternate, ``--repeat`` times each.

What it tells: whether the processor makes the collector work more in a process that runs for
long (more full collections per span, or costlier ones), which a measurement of a few thousand
spans cannot tell apart from where the collector's thresholds happen to fall
(docs/performance-log.md, "Sixth round"). Nothing here is a target.

``main(argv)`` returns the figures as a dict.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def one_side(side_name: str, traffic: str, graders: str, spans: int) -> dict[str, Any]:
    """Drive one side alone for about ``spans`` spans; the collector's counts and CPU."""
    sys.path.insert(0, str(HERE))
    import bench_overhead as bench

    bare, tooleval, _ = bench.build_sides(bench.graders_config(graders))
    side = bare if side_name == "bare" else tooleval
    workload = bench.Workload(calls=10, per_turn=5, traffic=traffic)
    for _ in range(max(3, 4000 // workload.spans_per_run)):
        bench.run_traffic(side.tracer, workload)
    side.flush()
    gc.collect()
    started: dict[int, int] = {}
    counts = [0, 0, 0]
    full_ns = [0]
    app = threading.get_ident()

    def count(phase: str, info: dict[str, Any]) -> None:
        generation = info["generation"]
        if phase == "start":
            counts[generation] += 1
            started[threading.get_ident()] = time.thread_time_ns()
        elif generation == 2 and threading.get_ident() == app:
            full_ns[0] += time.thread_time_ns() - started.pop(app, time.thread_time_ns())

    units = max(1, spans // workload.spans_per_run)
    gc.callbacks.append(count)
    try:
        c0 = time.thread_time_ns()
        for _ in range(units):
            bench.run_traffic(side.tracer, workload)
        cpu = time.thread_time_ns() - c0
    finally:
        gc.callbacks.remove(count)
    side.flush()
    for each in (bare, tooleval):
        each.provider.shutdown()
    total = units * workload.spans_per_run
    return {"side": side_name, "spans": total, "cpu_us_per_span": cpu / total / 1000,
            "collections": counts, "full_per_100k_spans": counts[2] * 100_000 / total,
            "full_cpu_share": full_ns[0] / cpu if cpu else 0.0}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traffic", choices=("agent", "web", "mixed"), default="mixed")
    parser.add_argument("--graders", choices=("none", "one", "all"), default="one")
    parser.add_argument("--spans", type=int, default=150_000,
                        help="spans per side per repeat (150000)")
    parser.add_argument("--repeat", type=int, default=2, help="children per side (2)")
    parser.add_argument("--child", choices=("bare", "tooleval"), help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.spans < 1 or opts.repeat < 1:
        parser.error("--spans and --repeat must be positive")
    if opts.child is not None:
        got = one_side(opts.child, opts.traffic, opts.graders, opts.spans)
        print(json.dumps(got))
        return got

    rows: list[dict[str, Any]] = []
    print(f"{opts.traffic} traffic, graders {opts.graders}, {opts.spans} spans per side, each "
          f"side alone in its own process")
    header = (f"{'side':>8}  {'cpu us/span':>11}  {'young / middle / full collections':>34}  "
              f"{'full per 100k spans':>19}  {'full, share of cpu':>18}")
    print(header)
    print("-" * len(header))
    for _ in range(opts.repeat):
        for side in ("bare", "tooleval"):
            child = subprocess.run(
                [sys.executable, __file__, "--child", side, "--traffic", opts.traffic,
                 "--graders", opts.graders, "--spans", str(opts.spans)],
                capture_output=True, text=True, check=True, timeout=1800)
            got = json.loads(child.stdout.strip().splitlines()[-1])
            rows.append(got)
            young, middle, full = got["collections"]
            print(f"{side:>8}  {got['cpu_us_per_span']:>11.2f}  "
                  f"{f'{young} / {middle} / {full}':>34}  {got['full_per_100k_spans']:>19.1f}  "
                  f"{got['full_cpu_share']:>17.1%}")
    return {"traffic": opts.traffic, "graders": opts.graders, "rows": rows}


if __name__ == "__main__":
    main()
