"""Where ``ToolEvalSpanProcessor``'s cost goes, on the application thread and the grading thread.

A standalone script, not a pytest test::

    python tests/bench/profile_processor.py [--calls 50] [--runs 300] [--repeat 5] [--top 25]
                                            [--cprofile app|grading|none]
                                            [--graders all|one|none]

The processor is the one ``bench_overhead.py`` measures (every grader family configured; or,
with ``--graders one`` / ``none``, its tool-call-count grader alone / no grader at all). To
keep the two threads apart, the run roots are not queued: ``_submit`` is replaced by a list
append, so the agent runs execute on the application thread with no grading thread at all,
and each captured job is then graded on this thread as soon as its run ended, exactly as
``_grade_and_forward`` does, with each stage timed in thread CPU time:

- ``members``: collecting the run's tool and model spans as records (``TraceBuffers.members``);
- ``root record``: the root's record; ``run_from``: sorting and building the ``ToolCall`` s;
- ``decode``: JSON arguments and results (graders decode lazily; decoding them first here keeps
  it out of the first grader's line);
- one line per grader, then ``release``, the annotated root copy, forwarding it downstream
  (``BatchSpanProcessor.on_end``) and emitting (log events, metrics, ``on_report``).

The application-thread figure is the hooks' share: the same runs on the bare side
(``BatchSpanProcessor`` alone) and through the processor with grading skipped (each run root is
forwarded downstream ungraded as it ends), in thread CPU time per span.
``--cprofile app`` / ``grading`` prints cProfile's top functions of either side.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import pstats
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_overhead import DropExporter, Workload, graders_config, run_agent
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_tooleval import ToolEvalSpanProcessor
from otel_tooleval._compat import detach, record_from_span, suppress_instrumentation
from otel_tooleval.assembly import RunJob
from otel_tooleval.trajectory import run_from


def _capturing(config: Any, *, keep: bool = True
               ) -> tuple[ToolEvalSpanProcessor, TracerProvider, list[Any]]:
    """A provider whose processor hands run roots to a list (``keep``) instead of the grading
    thread, or forwards them downstream at once, ungraded (``keep=False``: the hooks' cost)."""
    jobs: list[Any] = []
    downstream = BatchSpanProcessor(DropExporter())
    processor = ToolEvalSpanProcessor(config, downstream=downstream,
                                      on_report=lambda report: None)

    def submit(item: Any) -> bool:
        # an ended local root is decided here, as the grading thread would
        job = item if isinstance(item, RunJob) else processor._buffers.decide(*item)
        if keep and job is not None:
            jobs.append(job)
        else:
            downstream.on_end(item.root if isinstance(item, RunJob) else item[1])
        return True

    processor._submit = submit  # type: ignore[method-assign]
    provider = TracerProvider()
    provider.add_span_processor(processor)
    return processor, provider, jobs


def grading_stages(processor: ToolEvalSpanProcessor, jobs: Sequence[Any]
                   ) -> dict[str, list[int]]:
    """Grade each job as ``_grade_and_forward`` does, timing every stage (thread CPU ns)."""
    clock = time.thread_time_ns
    config = processor.config
    buffers = processor._buffers
    stages: dict[str, list[int]] = {}

    def add(name: str, ns: int) -> None:
        stages.setdefault(name, []).append(ns)

    for job in jobs:
        t_start = clock()
        token = suppress_instrumentation()
        t0 = clock()
        tools, models, dropped = buffers.members(job)
        t1 = clock()
        add("members", t1 - t0)
        root = job.root
        record = record_from_span(root)
        t2 = clock()
        add("root record", t2 - t1)
        run = run_from(record, tools, models, config.policy, dropped_calls=dropped)
        t3 = clock()
        add("run_from (calls)", t3 - t2)
        for call in run.calls if config.graders else ():
            call.arguments  # noqa: B018 - decoding is the point
            call.result  # noqa: B018
        t4 = clock()
        add("decode args/results", t4 - t3)
        from otel_tooleval.model import RunReport
        results = []
        for entry in config.graders:
            g0 = clock()
            results.append(entry.grader.grade(run))
            add(f"grader {entry.type}", clock() - g0)
        report = RunReport(run, tuple(results))
        t5 = clock()
        buffers.release(job, tools, models)
        t6 = clock()
        add("release", t6 - t5)
        detach(token)
        copy = processor._annotated(root, report)
        t7 = clock()
        add("annotated root copy", t7 - t6)
        processor._forward_root(job, copy)
        t8 = clock()
        add("forward (downstream.on_end)", t8 - t7)
        processor._emit(report, root)
        t9 = clock()
        add("emit (logs, metrics, on_report)", t9 - t8)
        add("TOTAL", t9 - t_start)
    return stages


class _Forwarding(SpanProcessor):
    """The floor of any wrapping processor: on_start/on_end forwarded, nothing else."""

    def __init__(self, downstream: SpanProcessor) -> None:
        self.downstream = downstream

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.downstream.on_start(span, parent_context=parent_context)

    def on_end(self, span: Any) -> None:
        self.downstream.on_end(span)

    def shutdown(self) -> None:
        self.downstream.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.downstream.force_flush(timeout_millis)


def app_thread_cpu(config: Any, workload: Workload, runs: int, repeat: int
                   ) -> dict[str, float]:
    """Application-thread CPU per span (us): no processor, hooks only, hooks + capture."""
    bare = TracerProvider()
    batch_only = TracerProvider()
    batch_only.add_span_processor(BatchSpanProcessor(DropExporter()))
    forwarding = TracerProvider()
    forwarding.add_span_processor(_Forwarding(BatchSpanProcessor(DropExporter())))
    _, hooks, _ = _capturing(config, keep=False)
    tracers = {"sdk, no processor": bare.get_tracer("b"),
               "sdk + batch (the bare side)": batch_only.get_tracer("b"),
               "a processor that only forwards to batch": forwarding.get_tracer("b"),
               "tooleval hooks + batch, grading skipped": hooks.get_tracer("b")}
    for tracer in tracers.values():
        for _ in range(50):
            run_agent(tracer, workload)
    out: dict[str, list[float]] = {name: [] for name in tracers}
    for _ in range(repeat):       # alternate the sides
        for name, tracer in tracers.items():
            gc.collect()
            c0 = time.thread_time_ns()
            for _ in range(runs):
                run_agent(tracer, workload)
            out[name].append((time.thread_time_ns() - c0) / (runs * workload.spans_per_run))
    for provider in (bare, batch_only, forwarding, hooks):
        provider.shutdown()
    return {name: statistics.median(v) / 1000 for name, v in out.items()}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--per-turn", type=int, default=5)
    parser.add_argument("--runs", type=int, default=300, help="agent runs per measurement")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--graders", choices=("all", "one", "none"), default="all",
                        help="bench_overhead's every family (all), its tool-call-count grader "
                             "alone (one) or no grader (none: the bookkeeping alone)")
    parser.add_argument("--cprofile", choices=("app", "grading", "none"), default="none")
    parser.add_argument("--no-app", action="store_true", help="skip the application thread")
    parser.add_argument("--no-gc", action="store_true",
                        help="disable the cyclic GC while grading (its share of the stages)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON, last")
    opts = parser.parse_args(argv)
    workload = Workload(opts.calls, opts.per_turn)
    print(f"workload: {opts.calls} tool calls/run, {workload.spans_per_run} spans/run; "
          f"python {sys.version.split()[0]}")

    # -- grading thread, stage by stage ------------------------------------------------------
    config = graders_config(opts.graders)
    processor, provider, jobs = _capturing(config)
    tracer = provider.get_tracer("bench")
    for _ in range(50):   # warm-up
        run_agent(tracer, workload)
    grading_stages(processor, jobs)
    per_stage: dict[str, list[float]] = {}
    for _ in range(opts.repeat):
        gc.collect()
        if opts.no_gc:
            gc.disable()
        if opts.cprofile == "grading":
            prof = cProfile.Profile()
        stages: dict[str, list[int]] = {}
        for _ in range(opts.runs):
            # Each run graded as soon as it ends, as the grading thread does (its spans are
            # still in the CPU caches), its stages added up over the runs.
            jobs.clear()
            run_agent(tracer, workload)
            if opts.cprofile == "grading":
                prof.enable()
            for name, values in grading_stages(processor, jobs).items():
                stages.setdefault(name, []).extend(values)
            if opts.cprofile == "grading":
                prof.disable()
        gc.enable()
        for name, values in stages.items():
            per_stage.setdefault(name, []).append(statistics.mean(values) / 1000)
    med = {name: statistics.median(v) for name, v in per_stage.items()}
    print(f"\ngrading thread, CPU per run of {opts.calls} calls (us; median of {opts.repeat} "
          f"means over {opts.runs} runs):")
    for name, us in med.items():
        if name == "TOTAL":
            print(f"  {'-' * 44}")
        print(f"  {name:<36} {us:>8.1f}")
    print(f"  per span of the run: {med['TOTAL'] / workload.spans_per_run:.2f} us")
    if opts.cprofile == "grading":
        _print_profile(prof, opts.top)
    provider.shutdown()

    out: dict[str, Any] = {"grading_us_per_run": med["TOTAL"],
                           "grading_us_per_span": med["TOTAL"] / workload.spans_per_run,
                           "stages_us": med}
    if opts.no_app:
        if opts.json:
            print(json.dumps(out))
        return out

    # -- application thread ---------------------------------------------------------------
    app = app_thread_cpu(config, workload, opts.runs, opts.repeat)
    print(f"\napplication thread, CPU per span (us; median of {opts.repeat}):")
    for name, us in app.items():
        print(f"  {name:<44} {us:>6.2f}")
    hooks = app["tooleval hooks + batch, grading skipped"] - app["sdk + batch (the bare side)"]
    print(f"  hooks' share per span: {hooks:.2f} us")
    if opts.cprofile == "app":
        _, prov, _ = _capturing(config, keep=False)
        tr = prov.get_tracer("bench")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(opts.runs):
            run_agent(tr, workload)
        prof.disable()
        _print_profile(prof, opts.top)
        prov.shutdown()
    out.update(app_us_per_span=app, hooks_us_per_span=hooks)
    if opts.json:
        print(json.dumps(out))
    return out


def _print_profile(prof: cProfile.Profile, top: int) -> None:
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    print(out.getvalue())


if __name__ == "__main__":
    main()
