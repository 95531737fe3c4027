"""Where the application thread's extra CPU per span goes in ``bench_overhead``'s agent loop.

A standalone script, not a pytest test (pytest collects ``test_*.py`` only)::

    python tests/bench/profile_app_thread.py [--calls 50] [--spans 6000] [--rounds 7]
                                             [--graders none|one|all]
                                             [--traffic agent|web|mixed]

Four sides run the same agent runs (``bench_overhead``'s workload), in rotation, each measured
for about ``--spans`` spans per round with ``time.thread_time_ns`` (application-thread CPU):

* bare:     ``TracerProvider`` + ``BatchSpanProcessor(DropExporter())``;
* forward:  ``ToolEvalSpanProcessor`` whose hooks only forward (``hooks.forwarding_hooks``, as
  after shutdown): the cost of being a wrapping processor, nothing tracked;
* tooleval: ``ToolEvalSpanProcessor`` as configured (``--graders``);
* held:     the same, with its grading thread kept from taking anything while the runs are
  timed (it grades them after): the application thread without a grading thread beside it.

Per side: CPU per span, the median of the paired ratios against bare, and the time the
application thread spent in the cyclic garbage collector (``gc.callbacks``) per span, with the
number of collections of each generation. docs/performance-log.md ("The application thread's
share") reads these figures.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_tooleval import ToolEvalSpanProcessor, load_config
from otel_tooleval.hooks import forwarding_hooks

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_overhead import TARGETS, DropExporter, Workload, graders_config, run_traffic

SIDES = ("bare", "forward", "tooleval", "held")


class GcClock:
    """Time in the collector on the application thread, and collections per generation."""

    def __init__(self) -> None:
        self.app = threading.get_ident()
        self.started = 0
        self.ns = 0
        self.counts = [0, 0, 0]

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() != self.app:
            return
        if phase == "start":
            self.started = time.perf_counter_ns()
        else:
            self.ns += time.perf_counter_ns() - self.started
            self.counts[info["generation"]] += 1

    def reset(self) -> None:
        self.ns = 0
        self.counts = [0, 0, 0]


def build(side: str, config: Any, go: threading.Event) -> tuple[TracerProvider, Any]:
    provider = TracerProvider()
    batch = BatchSpanProcessor(DropExporter())
    if side == "bare":
        provider.add_span_processor(batch)
        return provider, provider.get_tracer("bench")
    processor = ToolEvalSpanProcessor(load_config(config), downstream=batch)
    if side == "forward":
        hooks = forwarding_hooks(batch, processor._report)
        processor.on_start = hooks.on_start              # type: ignore[method-assign]
        processor._on_ending = hooks.on_ending           # type: ignore[method-assign,assignment]
        processor.on_end = hooks.on_end                  # type: ignore[method-assign,assignment]
    elif side == "held":
        take = processor._pop

        def held() -> Any:
            go.wait()
            return take()
        processor._pop = held                            # type: ignore[method-assign]
    provider.add_span_processor(processor)
    return provider, provider.get_tracer("bench")


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=50, help="tool calls per run (50)")
    parser.add_argument("--spans", type=int, default=6000,
                        help="spans per measurement, rounded to whole runs (6000)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of the four sides (7)")
    parser.add_argument("--graders", choices=("all", "one", "none"), default="none",
                        help="the tooleval sides' graders, as bench_overhead's (none)")
    parser.add_argument("--traffic", choices=tuple(TARGETS), default="agent",
                        help="as bench_overhead's: agent runs, plain web requests (web) or "
                             "both (mixed)")
    args = parser.parse_args(argv)
    workload = Workload(args.calls, 5, args.traffic)
    runs = max(2, round(args.spans / workload.spans_per_run))
    go = threading.Event()
    go.set()
    sides = {name: build(name, graders_config(args.graders), go) for name in SIDES}
    for provider, tracer in sides.values():   # warm-up
        for _ in range(runs // 2 + 1):
            run_traffic(tracer, workload)
        provider.force_flush()
    clock = GcClock()
    gc.callbacks.append(clock)
    cpu: dict[str, list[float]] = {name: [] for name in SIDES}
    in_gc: dict[str, list[float]] = {name: [] for name in SIDES}
    counts: dict[str, list[int]] = {name: [0, 0, 0] for name in SIDES}
    spans = runs * workload.spans_per_run
    try:
        for round_ in range(args.rounds):
            order = SIDES[round_ % len(SIDES):] + SIDES[:round_ % len(SIDES)]
            for name in order:
                for provider, _ in sides.values():
                    provider.force_flush()
                gc.collect()
                tracer = sides[name][1]
                if name == "held":
                    go.clear()
                clock.reset()
                started = time.thread_time_ns()
                for _ in range(runs):
                    run_traffic(tracer, workload)
                took = time.thread_time_ns() - started
                go.set()
                cpu[name].append(took / spans / 1000)
                in_gc[name].append(clock.ns / spans / 1000)
                counts[name] = [a + b for a, b in zip(counts[name], clock.counts)]
    finally:
        gc.callbacks.remove(clock)
        go.set()
        for provider, _ in sides.values():
            provider.shutdown()

    print(f"{args.traffic} traffic, {args.calls} tool calls per run, {runs} units ({spans} spans) per measurement, "
          f"{args.rounds} rounds, graders: {args.graders}; python {sys.version.split()[0]}")
    print(f"{'side':>9}  {'cpu us/span':>11}  {'vs bare':>7}  {'gc us/span':>10}  "
          f"collections gen0/gen1/gen2 per round")
    figures: dict[str, dict[str, float]] = {}
    for name in SIDES:
        ratio = statistics.median(t / b for t, b in zip(cpu[name], cpu["bare"]))
        figures[name] = {"cpu_us": statistics.median(cpu[name]), "ratio": ratio,
                         "gc_us": statistics.median(in_gc[name])}
        per_round = "/".join(f"{c / args.rounds:.0f}" for c in counts[name])
        print(f"{name:>9}  {figures[name]['cpu_us']:>11.2f}  {ratio:>6.3f}x  "
              f"{figures[name]['gc_us']:>10.2f}  {per_round}")
    return figures


if __name__ == "__main__":
    main()
