"""Per-span overhead of ``ToolEvalSpanProcessor`` against the bare OpenTelemetry SDK.

A standalone script, not a pytest test (pytest collects ``test_*.py`` only)::

    python tests/bench/bench_overhead.py [--calls 50] [--pairs 9] [--runs 200]

Both sides are built once, in the same process, with the same kind of exporter (one that drops
everything) behind a ``BatchSpanProcessor``:

* bare:     ``TracerProvider`` + ``BatchSpanProcessor(DropExporter())``
* tooleval: ``TracerProvider`` + ``ToolEvalSpanProcessor(config,
  downstream=BatchSpanProcessor(DropExporter()))`` with a ``tool-calls`` grader.

The workload is an agent run instrumented with the plain OTel API in GenAI semconv: a root
``invoke_agent bench`` span; per turn a ``chat`` span, then ``execute_tool X`` spans carrying
``gen_ai.tool.name``, ``gen_ai.tool.call.arguments`` (JSON text) and ``gen_ai.tool.call.result``.
Attribute values are prepared once so the timed section is the SDK (and processor) cost, not
``json.dumps``.

Measurement: after a warm-up, the two sides alternate in pairs (bare, tooleval, ...); each
measurement times ``--runs`` agent runs with ``time.perf_counter_ns`` (wall clock) and
``time.thread_time_ns`` (CPU time of the application thread only). ``force_flush`` is called on
both providers outside the timed section before every measurement, so the batch queues start
empty and the grading queue is drained. The batch processors' worker threads run during the
timed section on both sides alike; the tooleval side also has its grading thread, which competes
for the GIL: that is part of its cost in wall-clock time but not in application-thread CPU time.

A second measurement times only ``root.end()`` on the application thread: the run root's end
with grading on (decision, hand-off to the grading thread) against the same root span ending
on the bare provider.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel_tooleval import ToolEvalSpanProcessor

TARGET = 1.10

CONFIG: dict[str, Any] = {
    "graders": [
        {
            "type": "tool-calls",
            "name": "bench-tool-calls",
            "config": {
                "required": [
                    {"name": r"^read_file$", "args": {"path": r"\.py$"}},
                    {"name": r"^run_tests$", "min_count": 2},
                    {"name": r"^(write|edit)_file$", "args": {"path": r"^src/"}},
                ],
                "disallowed": [
                    {"name": r"^delete_"},
                    {"name": r"^bash$", "args": {"command": r"rm\s+-rf"}},
                ],
                "sequence": [
                    {"name": r"^read_file$"},
                    {"name": r"^write_file$"},
                    {"name": r"^run_tests$"},
                ],
            },
        }
    ],
}


class DropExporter(SpanExporter):
    """Accepts every batch and keeps nothing."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


# -- workload ---------------------------------------------------------------------------------

_TOOLS: tuple[tuple[str, dict[str, Any], Any], ...] = (
    ("read_file", {"path": "src/app/main.py"}, {"content": "def main():\n    return 42\n"}),
    ("search", {"query": "def main", "glob": "**/*.py"}, ["src/app/main.py:1"]),
    ("write_file", {"path": "src/app/main.py", "content": "def main():\n    return 43\n"},
     {"ok": True}),
    ("run_tests", {"selector": "tests/test_main.py"}, {"passed": 12, "failed": 0}),
    ("bash", {"command": "ls -la src/app"}, "main.py\n__init__.py\n"),
)


@dataclass(frozen=True)
class Workload:
    calls: int
    per_turn: int
    # (name, span name, arguments JSON, result JSON) for every call of a run, in order
    plan: tuple[tuple[str, str, str, str], ...] = field(init=False)

    def __post_init__(self) -> None:
        plan = []
        for i in range(self.calls):
            name, args, result = _TOOLS[i % len(_TOOLS)]
            plan.append((name, f"execute_tool {name}", json.dumps(args), json.dumps(result)))
        object.__setattr__(self, "plan", tuple(plan))

    @property
    def turns(self) -> int:
        # every turn with tool calls, plus the final answer turn
        return -(-self.calls // self.per_turn) + 1

    @property
    def spans_per_run(self) -> int:
        return 1 + self.turns + self.calls


def _turns(workload: Workload) -> Iterator[tuple[tuple[str, str, str, str], ...]]:
    plan = workload.plan
    for start in range(0, len(plan), workload.per_turn):
        yield plan[start:start + workload.per_turn]
    yield ()  # the final answer


def run_agent(tracer: trace.Tracer, workload: Workload) -> None:
    """One agent run, instrumented as a GenAI-semconv instrumentation would."""
    with tracer.start_as_current_span(
        "invoke_agent bench",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench"},
    ):
        _run_body(tracer, workload)


def _run_body(tracer: trace.Tracer, workload: Workload) -> None:
    for i, calls in enumerate(_turns(workload)):
        with tracer.start_as_current_span(
            "chat bench-model",
            attributes={"gen_ai.operation.name": "chat",
                        "gen_ai.request.model": "bench-model"},
        ):
            pass
        for j, (name, span_name, args, result) in enumerate(calls):
            with tracer.start_as_current_span(
                span_name,
                attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                            "gen_ai.tool.call.id": f"call_{i}_{j}",
                            "gen_ai.tool.call.arguments": args},
            ) as span:
                span.set_attribute("gen_ai.tool.call.result", result)


def run_agent_timing_root_end(tracer: trace.Tracer, workload: Workload) -> int:
    """One agent run whose root is ended by hand; returns the ns ``root.end()`` took."""
    root = tracer.start_span(
        "invoke_agent bench",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench"},
    )
    with trace.use_span(root, end_on_exit=False):
        _run_body(tracer, workload)
    t0 = time.perf_counter_ns()
    root.end()
    return time.perf_counter_ns() - t0


# -- sides ------------------------------------------------------------------------------------

@dataclass
class Side:
    name: str
    provider: TracerProvider
    tracer: trace.Tracer
    exporter: DropExporter
    processor: ToolEvalSpanProcessor | None = None

    def flush(self) -> None:
        if not self.provider.force_flush(60_000):
            raise RuntimeError(f"{self.name}: force_flush timed out")


class ReportTally:
    """Counts verdicts without keeping reports (kept reports would grow the heap, and the GC)."""

    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0
        self.first_failure: Any = None

    def __call__(self, report: Any) -> None:
        if report.passed:
            self.passed += 1
        else:
            self.failed += 1
            if self.first_failure is None:
                self.first_failure = [r.to_dict() for r in report.results if not r.passed][:1]


def build_sides(config: Any) -> tuple[Side, Side, ReportTally]:
    reports = ReportTally()

    bare_exporter = DropExporter()
    bare = TracerProvider()
    bare.add_span_processor(BatchSpanProcessor(bare_exporter))

    tool_exporter = DropExporter()
    processor = ToolEvalSpanProcessor(
        config, downstream=BatchSpanProcessor(tool_exporter), on_report=reports)
    tooleval = TracerProvider()
    tooleval.add_span_processor(processor)

    return (
        Side("bare", bare, bare.get_tracer("bench"), bare_exporter),
        Side("tooleval", tooleval, tooleval.get_tracer("bench"), tool_exporter, processor),
        reports,
    )


@dataclass
class Measurement:
    wall_ns: int
    cpu_ns: int      # application thread only
    proc_ns: int     # every thread of the process (batch workers, grading thread)
    spans: int

    @property
    def wall_per_span_us(self) -> float:
        return self.wall_ns / self.spans / 1000

    @property
    def cpu_per_span_us(self) -> float:
        return self.cpu_ns / self.spans / 1000

    @property
    def proc_per_span_us(self) -> float:
        return self.proc_ns / self.spans / 1000


def measure(side: Side, workload: Workload, runs: int, both: Sequence[Side]) -> Measurement:
    for s in both:  # outside the timed section: empty batch queues, drained grading queue
        s.flush()
    tracer = side.tracer
    gc.collect()
    p0 = time.process_time_ns()
    c0 = time.thread_time_ns()
    t0 = time.perf_counter_ns()
    for _ in range(runs):
        run_agent(tracer, workload)
    t1 = time.perf_counter_ns()
    c1 = time.thread_time_ns()
    p1 = time.process_time_ns()
    return Measurement(t1 - t0, c1 - c0, p1 - p0, runs * workload.spans_per_run)


def measure_root_end(side: Side, workload: Workload, runs: int,
                     both: Sequence[Side]) -> list[int]:
    for s in both:
        s.flush()
    tracer = side.tracer
    gc.collect()
    return [run_agent_timing_root_end(tracer, workload) for _ in range(runs)]


# -- main -------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50, help="tool calls per run (50)")
    parser.add_argument("--per-turn", type=int, default=5, help="tool calls per turn (5)")
    parser.add_argument("--pairs", type=int, default=9, help="bare/tooleval pairs (9, >= 7)")
    parser.add_argument("--runs", type=int, default=200, help="agent runs per measurement (200)")
    parser.add_argument("--warmup", type=int, default=100, help="warm-up runs per side (100)")
    parser.add_argument("--root-runs", type=int, default=200,
                        help="runs per side per pair timing root.end() only (200)")
    parser.add_argument("--no-gc", action="store_true",
                        help="disable the cyclic GC in the timed sections")
    opts = parser.parse_args(argv)
    if opts.pairs < 7:
        parser.error("--pairs must be at least 7")
    if opts.calls < 1 or opts.per_turn < 1 or opts.runs < 1:
        parser.error("--calls, --per-turn and --runs must be positive")

    workload = Workload(opts.calls, opts.per_turn)
    bare, tooleval, reports = build_sides(CONFIG)
    both = (bare, tooleval)
    started = time.perf_counter()

    for side in both:  # warm-up: first-call costs, worker threads started, caches filled
        for _ in range(opts.warmup):
            run_agent(side.tracer, workload)
            run_agent_timing_root_end(side.tracer, workload)
    for side in both:
        side.flush()
    if opts.no_gc:
        gc.disable()

    print(f"workload: {opts.calls} tool calls/run, {workload.turns} chat turns, "
          f"{workload.spans_per_run} spans/run; {opts.runs} runs per measurement; "
          f"python {sys.version.split()[0]}")
    print()
    header = (f"{'pair':>4}  {'bare us/span':>12}  {'tooleval us/span':>16}  {'ratio':>6}  "
              f"{'bare cpu':>9}  {'tooleval cpu':>12}  {'cpu ratio':>9}  {'proc ratio':>10}")
    print(header)
    print("-" * len(header))
    ratios, cpu_ratios, proc_ratios = [], [], []
    bare_us, tool_us, bare_cpu, tool_cpu = [], [], [], []
    for pair in range(1, opts.pairs + 1):
        b = measure(bare, workload, opts.runs, both)
        t = measure(tooleval, workload, opts.runs, both)
        ratio = t.wall_ns / b.wall_ns
        cpu_ratio = t.cpu_ns / b.cpu_ns
        ratios.append(ratio)
        cpu_ratios.append(cpu_ratio)
        proc_ratio = t.proc_ns / b.proc_ns
        proc_ratios.append(proc_ratio)
        bare_us.append(b.wall_per_span_us)
        tool_us.append(t.wall_per_span_us)
        bare_cpu.append(b.cpu_per_span_us)
        tool_cpu.append(t.cpu_per_span_us)
        print(f"{pair:>4}  {b.wall_per_span_us:>12.2f}  {t.wall_per_span_us:>16.2f}  "
              f"{ratio:>5.2f}x  {b.cpu_per_span_us:>9.2f}  {t.cpu_per_span_us:>12.2f}  "
              f"{cpu_ratio:>8.2f}x  {proc_ratio:>9.2f}x")
    print("-" * len(header))
    med = statistics.median
    print(f"{'med':>4}  {med(bare_us):>12.2f}  {med(tool_us):>16.2f}  {med(ratios):>5.2f}x  "
          f"{med(bare_cpu):>9.2f}  {med(tool_cpu):>12.2f}  {med(cpu_ratios):>8.2f}x  "
          f"{med(proc_ratios):>9.2f}x")
    print(f"us/span: wall clock; cpu: application-thread CPU; proc ratio: CPU of all threads "
          f"(grading included).\nextra per span: {med(tool_us) - med(bare_us):.1f} us wall, "
          f"{med(tool_cpu) - med(bare_cpu):.1f} us application-thread CPU")

    # root.end() on the application thread: grading on vs. the same root on the bare SDK
    root_ratios, root_bare, root_tool = [], [], []
    for _ in range(opts.pairs):
        b_ns = med(measure_root_end(bare, workload, opts.root_runs, both))
        t_ns = med(measure_root_end(tooleval, workload, opts.root_runs, both))
        root_bare.append(b_ns)
        root_tool.append(t_ns)
        root_ratios.append(t_ns / b_ns)
    if opts.no_gc:
        gc.enable()
    for side in both:
        side.flush()

    stats = tooleval.processor.stats() if tooleval.processor else {}
    drops = {k: v for k, v in stats.items() if k.startswith("dropped") and v}
    expected = (opts.warmup * 2 + opts.pairs * (opts.runs + opts.root_runs))
    failed = reports.failed
    print()
    print(f"sanity: {stats.get('runs', 0)}/{expected} runs graded, {failed} failed, "
          f"open traces {stats.get('open_traces', 0)}, drops {drops or 'none'}; "
          f"exported bare {bare.exporter.spans}, tooleval {tooleval.exporter.spans} spans; "
          f"{time.perf_counter() - started:.1f}s")
    if failed:
        print("  first failing check:", reports.first_failure)
    print(f"root end() per run (median of medians): bare {med(root_bare) / 1000:.1f} us, "
          f"tooleval {med(root_tool) / 1000:.1f} us; "
          f"root end() ratio (median of {opts.pairs} pairs): {med(root_ratios):.2f}x")
    print(f"overhead ratio (median of {opts.pairs} pairs, {opts.calls} calls/run): "
          f"{med(ratios):.2f}x  (target <= {TARGET:.2f}x; app-thread cpu {med(cpu_ratios):.2f}x)")

    for side in both:
        side.provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
