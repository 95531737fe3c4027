"""Where the application's process spends its CPU on grading, per run, in either grading mode.

A standalone script, not a pytest test::

    python tests/bench/profile_grading_side.py [--grading thread|process] [--calls 10] [--spans 6000]

Runs ``bench_overhead``'s workload through ``ToolEvalSpanProcessor`` (every grader family,
downstream a ``BatchSpanProcessor`` that drops) and wraps the processor's grading-side steps
with thread-CPU timers: collecting and grading a run (``_grade_and_forward``; in process mode
collecting, then handing over to ``submit``), sending batches (``flush``: encoding and the pipe
write), reading verdicts (``read_frame``), finishing a run from its verdicts (``_finish_verdict``,
with the root copy ``copy_with`` and ``_emit`` inside it). Prints µs per run for each step, and
the process's CPU per run split into the application thread and every other thread. The
wrappers add a little to every figure; compare modes with each other, not with the bench.
"""

from __future__ import annotations

import argparse
import collections
import functools
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_overhead import CONFIG, DropExporter, Workload, run_agent
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_tooleval import ToolEvalSpanProcessor
from otel_tooleval import offload as offload_module
from otel_tooleval import processor as processor_module

_spent: collections.Counter[str] = collections.Counter()
_calls: collections.Counter[str] = collections.Counter()


def _timed(owner: Any, name: str) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.thread_time_ns()
        try:
            return original(*args, **kwargs)
        finally:
            _spent[name] += time.thread_time_ns() - t0
            _calls[name] += 1

    setattr(owner, name, wrapper)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grading", choices=("thread", "process"), default="process")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--spans", type=int, default=6000)
    opts = parser.parse_args(argv)
    for owner, name in ((processor_module.ToolEvalSpanProcessor, "_grade_and_forward"),
                        (processor_module.ToolEvalSpanProcessor, "_finish_verdict"),
                        (processor_module.ToolEvalSpanProcessor, "_emit"),
                        (offload_module.GradingProcess, "submit"),
                        (offload_module.GradingProcess, "flush"),
                        (processor_module, "copy_with"),
                        (offload_module, "read_frame")):
        _timed(owner, name)
    processor = ToolEvalSpanProcessor({**CONFIG, "grading": {"mode": opts.grading}},
                                      downstream=BatchSpanProcessor(DropExporter()))
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("profile")
    workload = Workload(opts.calls, 5)
    runs = max(5, opts.spans // workload.spans_per_run)
    for _ in range(runs // 2):   # warm-up; in process mode the child starts meanwhile
        run_agent(tracer, workload)
    deadline = time.monotonic() + 30
    while (opts.grading == "process" and processor._offload is not None
           and not processor._offload.ready and time.monotonic() < deadline):
        run_agent(tracer, workload)
        time.sleep(0.05)
    processor.force_flush()
    _spent.clear()
    _calls.clear()
    p0, c0 = time.process_time_ns(), time.thread_time_ns()
    for _ in range(runs):
        run_agent(tracer, workload)
    processor.force_flush()
    p1, c1 = time.process_time_ns(), time.thread_time_ns()
    out = {"process_us_per_run": (p1 - p0) / runs / 1000,
           "app_thread_us_per_run": (c1 - c0) / runs / 1000,
           "other_threads_us_per_run": ((p1 - p0) - (c1 - c0)) / runs / 1000}
    print(f"grading: {opts.grading}; {runs} runs of {opts.calls} calls "
          f"({workload.spans_per_run} spans); CPU of the application's process per run:")
    for key, value in out.items():
        print(f"  {key:28} {value:8.1f} us")
    print("steps (thread CPU per run, and how often each ran):")
    for name, ns in _spent.items():
        out[name] = ns / runs / 1000
        print(f"  {name:28} {out[name]:8.1f} us  ({_calls[name]} calls)")
    provider.shutdown()
    return out


if __name__ == "__main__":
    main()
