"""Memory of ``ToolEvalSpanProcessor``: per open run, per buffered call, and in steady state.

A standalone script, not a pytest test::

    python tests/bench/bench_memory.py [--open-runs 1000] [--calls 0,1,10,50]
                                       [--spans 1000000] [--every 100000] [--run-calls 20]
                                       [--no-tracemalloc] [--full] [--downstream-queue 2048]
                                       [--max-open-runs N]

Every grader family is configured (``examples/all_families.yaml``, one grader of each registered
family), with every emit channel on, on a real ``TracerProvider`` whose processor forwards to a
``BatchSpanProcessor`` with an exporter that drops everything, and real meter and logger
providers.

1. Steady state. Agent runs of ``--run-calls`` tool calls (and a model call every fifth call
   and a final answer) are traced until ``--spans`` spans have been graded, after a warm-up
   that runs until the processor's bounded tables are full (its tombstones: ``max_open_runs``
   finished traces remembered for late spans; ``limits.tombstone_seconds`` is set to a day
   here, so that the table's size does not follow the throughput, which moves during a run). After every ``--every`` spans the grading is
   drained (``force_flush``) and the process's RSS is read (VmRSS from /proc/self/status) twice:
   as it is ("RSS MiB"), and after glibc's ``malloc_trim(0)`` has given the C heap's free pages
   back, less ``tracemalloc.get_tracemalloc_memory()``, the tables tracemalloc itself keeps
   ("net RSS"). The first is a high-water mark: when the downstream ``BatchSpanProcessor``'s
   queue backs up for a moment (starved of the GIL in this synthetic loop, it logs "Queue
   full"), the C heap grows by the backlog and keeps the pages, fragmented; the second is what
   the process holds (``--downstream-queue 256`` makes that backlog, and its step, smaller).
   ``tracemalloc``'s current size and the interpreter's allocated blocks
   are recorded too. The series is printed with the growth ratio of the last quarter's mean
   to the first quarter's: memory must not grow (targets: net RSS and blocks ratio <= 1.10;
   tracemalloc, which counts only what was allocated since it started, a few hundred KiB
   live, so that its ratio moves with any cache: last - first quarter <= 1 MiB). It runs
   first, so that the RSS series starts from this process's own baseline, not from the
   high-water mark of part 2.
2. Per open run and per buffered call. ``--open-runs`` N agent roots are started and left
   open, each with K ended tool calls buffered (for each K of ``--calls``), the application
   holding its open root spans as it would. ``tracemalloc`` snapshots are taken before and
   after (after ``gc.collect()``), and the same workload is measured on a bare TracerProvider
   with the same downstream. The processor's share is tooleval - bare: bytes per open run
   (K = 0) and bytes per buffered call (the slope over K), printed with the largest
   allocation sites.

``tracemalloc`` slows the steady-state run several times (a million spans take minutes on
two cores); ``--no-tracemalloc`` records RSS and allocated blocks only. ``--max-open-runs N``
overrides the config's ``limits.max_open_runs`` (10,000) in both parts, so that the warm-up
fills a smaller tombstone table (for a quick smoke run: ``tests/test_benches.py``). The
defaults are the full sizes but 300,000 spans; ``--full`` is ``--spans 1000000``.
``main(argv)`` prints the report and returns its figures as a dict (``summary`` lists them
with their targets, for ``run_all.py``).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_tooleval import ToolEvalSpanProcessor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_overhead import DropExporter

ROOT = Path(__file__).resolve().parents[2]
CONFIG_PATH = ROOT / "examples" / "all_families.yaml"
GROWTH_TARGET = 1.10
TRACED_TARGET = 1024 * 1024   # tracemalloc current, last quarter - first quarter, bytes
WARM_UP = 20
#: limits.tombstone_seconds for this bench (a day): the tombstone table bounded by count alone
STEADY_TOMBSTONES = 86_400.0

# (tool name, extra span attributes, arguments, result): every family sees something to grade.
TOOLS: tuple[tuple[str, dict[str, Any], dict[str, Any], Any], ...] = (
    ("search", {}, {"query": "capital of France"}, ["Paris is the capital of France."]),
    ("web_search", {"mcp.server.name": "brave"}, {"q": "capital of France"},
     [{"url": "https://example.org/france", "title": "France"}]),
    ("filter", {}, {"keep": "population > 1e6"}, {"kept": 3}),
    ("bash", {}, {"command": "npm test"}, "12 passing\n"),
    ("view", {}, {"path": "src/app/main.py"}, "def main():\n    return 42\n"),
    ("display", {}, {"rows": 3}, {"ok": True}),
    ("report", {}, {"title": "France"}, {"ok": True}),
)


class DropLogs(LogRecordExporter):
    def export(self, batch: Sequence[Any]) -> LogRecordExportResult:
        return LogRecordExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def load_all_families() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(CONFIG_PATH.read_text())
    return config


class Tally:
    """Counts verdicts and keeps none (kept reports would be a growth of their own)."""

    def __init__(self) -> None:
        self.runs = 0
        self.passed = 0
        self.failed_graders: dict[str, int] = {}

    def __call__(self, report: Any) -> None:
        self.runs += 1
        self.passed += report.passed
        for result in report.results:
            if not result.passed:
                self.failed_graders[result.name] = self.failed_graders.get(result.name, 0) + 1


class Side:
    """A TracerProvider with (tooleval) or without (bare) the processor, same downstream."""

    def __init__(self, tooleval: bool, config: dict[str, Any], queue: int = 2048) -> None:
        self.exporter = DropExporter()
        self.meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        self.logger_provider = LoggerProvider()
        self.logger_provider.add_log_record_processor(BatchLogRecordProcessor(DropLogs()))
        self.tally = Tally()
        self.provider = TracerProvider()
        downstream = BatchSpanProcessor(self.exporter, max_queue_size=queue,
                                        max_export_batch_size=min(512, queue))
        self.processor: ToolEvalSpanProcessor | None = None
        if tooleval:
            self.processor = ToolEvalSpanProcessor(
                config, downstream, meter_provider=self.meter_provider,
                logger_provider=self.logger_provider, on_report=self.tally)
            self.provider.add_span_processor(self.processor)
        else:
            self.provider.add_span_processor(downstream)
        self.tracer = self.provider.get_tracer("bench_memory")

    def flush(self) -> None:
        """Grade and export what is pending, log events too: only what is kept remains."""
        if not self.provider.force_flush(120_000):
            raise RuntimeError("force_flush timed out")
        self.logger_provider.force_flush(120_000)

    def close(self) -> None:
        self.provider.shutdown()
        self.logger_provider.shutdown()
        self.meter_provider.shutdown()


# -- the workload -------------------------------------------------------------------------------

_PREPARED = [(name, f"execute_tool {name}", extra, json.dumps(args), json.dumps(result))
             for name, extra, args, result in TOOLS]
_ANSWER = json.dumps([{"role": "assistant", "parts": [
    {"type": "text", "content": "The capital of France is Paris."}]}])
_AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "researcher",
          "tooleval.ground_truth": "Paris"}
_CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "bench-model"}


def tool_call(tracer: trace.Tracer, i: int, run: int) -> int:
    """One tool call (and a model call before every fifth); the spans it made."""
    spans = 1
    if i % 5 == 0:
        tracer.start_span("chat bench-model", attributes=_CHAT).end()
        spans += 1
    name, span_name, extra, args, result = _PREPARED[i % len(_PREPARED)]
    tracer.start_span(span_name, attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": f"call_{run}_{i}", "gen_ai.tool.call.arguments": args,
        "gen_ai.tool.call.result": result, **extra}).end()
    return spans


def agent_run(tracer: trace.Tracer, calls: int, run: int) -> int:
    """A whole agent run; the number of spans it made."""
    spans = 2
    with tracer.start_as_current_span("invoke_agent researcher", attributes=_AGENT):
        for i in range(calls):
            spans += tool_call(tracer, i, run)
        tracer.start_span("chat bench-model", attributes={
            **_CHAT, "gen_ai.output.messages": _ANSWER}).end()
    return spans


def open_runs(side: Side, n: int, calls: int) -> list[trace.Span]:
    """``n`` agent roots left open, each with ``calls`` ended tool calls below it."""
    roots = []
    tracer = side.tracer
    for r in range(n):
        root = tracer.start_span("invoke_agent researcher", attributes=_AGENT)
        with trace.use_span(root, end_on_exit=False):
            for i in range(calls):
                name, span_name, extra, args, result = _PREPARED[i % len(_PREPARED)]
                tracer.start_span(span_name, attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": f"call_{r}_{i}", "gen_ai.tool.call.arguments": args,
                    "gen_ai.tool.call.result": result, **extra}).end()
        roots.append(root)
    return roots


# -- 1. per open run and per buffered call ---------------------------------------------------------

def _snapshot() -> tracemalloc.Snapshot:
    gc.collect()
    return tracemalloc.take_snapshot().filter_traces(
        (tracemalloc.Filter(False, tracemalloc.__file__),))


def measure_open(tooleval: bool, config: dict[str, Any], n: int, calls: int
                 ) -> tuple[int, list[tracemalloc.StatisticDiff]]:
    side = Side(tooleval, config)
    try:
        open_runs(side, 20, calls)       # warm-up: first-use caches, worker threads
        side.flush()
        before = _snapshot()
        roots = open_runs(side, n, calls)
        side.flush()                     # the batch queue empty again: only what is kept
        after = _snapshot()
        diff = after.compare_to(before, "lineno")
        grown = sum(d.size_diff for d in diff)
        del roots
        return grown, diff
    finally:
        side.close()


def per_run_and_call(config: dict[str, Any], n: int, ks: list[int]) -> dict[str, Any]:
    print(f"\n2. memory of {n:,} open runs with K buffered tool calls each (tracemalloc, after "
          f"gc; the application holds its open roots on both sides)")
    head = (f"  {'K':>4}  {'bare B/run':>11}  {'tooleval B/run':>15}  {'processor B/run':>16}")
    print(head)
    print("  " + "-" * (len(head) - 2))
    rows = []
    top: list[tracemalloc.StatisticDiff] = []
    tracemalloc.start()
    try:
        for k in ks:
            bare, _ = measure_open(False, config, n, k)
            tool, diff = measure_open(True, config, n, k)
            rows.append({"calls": k, "bare_per_run": bare / n, "tooleval_per_run": tool / n,
                         "processor_per_run": (tool - bare) / n})
            print(f"  {k:>4}  {bare / n:>11,.0f}  {tool / n:>15,.0f}  {(tool - bare) / n:>16,.0f}")
            if k == max(ks):
                top = diff
    finally:
        tracemalloc.stop()
    base = next((r for r in rows if r["calls"] == 0), rows[0])
    slopes = [(r["processor_per_run"] - base["processor_per_run"]) / (r["calls"] - base["calls"])
              for r in rows if r["calls"] > base["calls"]]
    per_call = slopes[-1] if slopes else float("nan")
    per_run = base["processor_per_run"]
    print(f"  per open run (K={base['calls']}): {per_run:,.0f} B kept by the processor; "
          f"per buffered call: {per_call:,.0f} B (slope to K={rows[-1]['calls']}); "
          f"slopes {', '.join(f'{s:,.0f}' for s in slopes)}")
    print(f"  largest growths with tooleval, K={max(ks)}:")
    for stat in sorted(top, key=lambda d: -d.size_diff)[:6]:
        frame = stat.traceback[0]
        path = Path(frame.filename)
        where = f"{path.parent.name}/{path.name}:{frame.lineno}"
        print(f"    {stat.size_diff / n:>9,.0f} B/run  {stat.count_diff / n:>6.1f} blocks/run  "
              f"{where}")
    return {"open_runs": n, "rows": rows, "bytes_per_open_run": per_run,
            "bytes_per_buffered_call": per_call}


# -- 2. steady state ------------------------------------------------------------------------------

def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None (another C library)."""
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _quarters(values: list[float]) -> tuple[float, float]:
    """Means of the first and of the last quarter of a series."""
    q = max(1, len(values) // 4)
    return statistics.fmean(values[:q]), statistics.fmean(values[-q:])


def _growth(values: list[float]) -> float:
    first, last = _quarters(values)
    return last / first if first else float("nan")


def fill_tombstones(side: Side, run_calls: int) -> dict[str, Any]:
    """Run agent runs until the processor's tombstones (finished traces remembered for late
    spans) are as many as they will ever be: ``max_open_runs`` of them, or those of the last
    ``tombstone_seconds`` at this rate. Without it the first part of the series grows by the
    table filling up (about 100 B per finished trace), which is bounded, not a leak."""
    assert side.processor is not None
    limits = side.processor.config.limits
    started = time.perf_counter()
    runs = 0
    while (side.processor.stats()["closed_traces"] < limits.max_open_runs
           and time.perf_counter() - started < limits.tombstone_seconds + 1):
        for _ in range(100):
            agent_run(side.tracer, run_calls, -1)
        runs += 100
        side.flush()
    return {"runs": runs, "seconds": time.perf_counter() - started,
            "closed": side.processor.stats()["closed_traces"]}


def steady_state(config: dict[str, Any], total: int, every: int, run_calls: int,
                 use_tracemalloc: bool, queue: int = 2048) -> dict[str, Any]:
    print(f"1. steady state: agent runs of {run_calls} tool calls until {total:,} spans are "
          f"graded; memory after every {every:,} (grading drained, after gc); downstream "
          f"queue {queue:,}" + ("" if use_tracemalloc else "; tracemalloc off"))
    side = Side(True, config, queue)
    assert side.processor is not None
    if use_tracemalloc:
        tracemalloc.start()
    try:
        spans = run = 0
        for _ in range(WARM_UP):                 # first-use caches, threads; not counted
            agent_run(side.tracer, run_calls, -1)
        side.flush()
        warm = fill_tombstones(side, run_calls)
        print(f"  warm-up: {WARM_UP + warm['runs']:,} runs in {warm['seconds']:.0f} s, until "
              f"the finished traces remembered for late spans reached their steady number "
              f"({warm['closed']:,}; bounded by limits.max_open_runs, each kept "
              f"tombstone_seconds)")
        head = (f"  {'spans':>10}  {'runs':>7}  {'RSS MiB':>8}  {'net RSS':>8}  "
                f"{'traced MiB':>10}  "
                f"{'blocks':>10}  {'open traces':>11}  {'s':>6}")
        print(head)
        print("  " + "-" * (len(head) - 2))
        series: list[dict[str, Any]] = []
        started = time.perf_counter()
        mark = every
        while spans < total:
            spans += agent_run(side.tracer, run_calls, run)
            run += 1
            if spans >= mark or spans >= total:
                mark += every
                side.flush()
                gc.collect()
                rss = _rss()
                if _TRIM is not None:   # give back the C heap's free pages (see the docstring)
                    _TRIM(0)
                own = tracemalloc.get_tracemalloc_memory() if use_tracemalloc else 0
                point = {"spans": spans, "runs": run, "rss": rss, "net_rss": _rss() - own,
                         "traced": tracemalloc.get_traced_memory()[0] if use_tracemalloc else 0,
                         "blocks": sys.getallocatedblocks(),
                         "open_traces": side.processor.stats()["open_traces"],
                         "seconds": time.perf_counter() - started}
                series.append(point)
                print(f"  {spans:>10,}  {run:>7,}  {rss / 2**20:>8.1f}  "
                      f"{point['net_rss'] / 2**20:>8.1f}  "
                      f"{point['traced'] / 2**20:>10.2f}  {point['blocks']:>10,}  "
                      f"{point['open_traces']:>11}  {point['seconds']:>6.0f}")
        stats = side.processor.stats()
    finally:
        if use_tracemalloc:
            tracemalloc.stop()
        side.close()
    drops = {k: v for k, v in stats.items() if k.startswith("dropped") and v}
    graded = side.tally.runs - WARM_UP - warm["runs"]
    out: dict[str, Any] = {
        "spans": spans, "runs": run, "graded": graded, "passed": side.tally.passed,
        "drops": drops, "series": series,
        "rss_growth": _growth([p["net_rss"] for p in series]),
        "raw_rss_growth": _growth([p["rss"] for p in series]),
        "blocks_growth": _growth([p["blocks"] for p in series]),
        "traced_growth": _growth([p["traced"] for p in series]) if use_tracemalloc else None,
    }
    first, last = _quarters([p["traced"] for p in series])
    # tracemalloc counts only what was allocated since it started (a few hundred KiB live
    # here), so its ratio moves with any cache; the difference in bytes is the real figure.
    out["traced_growth_bytes"] = last - first if use_tracemalloc else None
    first, last = _quarters([p["net_rss"] for p in series])
    out["rss_growth_bytes"] = last - first
    print(f"  graded {graded:,}/{run:,} runs (+{WARM_UP + warm['runs']:,} warm-up; "
          f"failing graders, counts: "
          f"{side.tally.failed_graders or 'none'}), drops {drops or 'none'}")
    traced = (f"tracemalloc current {out['traced_growth']:.3f}x "
              f"({out['traced_growth_bytes'] / 1024:+,.0f} KiB), " if use_tracemalloc else "")
    raw = (f" (raw RSS {out['raw_rss_growth']:.3f}x)" if use_tracemalloc else "")
    print(f"  growth, last quarter / first quarter: net RSS {out['rss_growth']:.3f}x "
          f"({out['rss_growth_bytes'] / 2**20:+,.1f} MiB){raw}, {traced}allocated blocks "
          f"{out['blocks_growth']:.3f}x  (targets: <= {GROWTH_TARGET:.2f}x; tracemalloc "
          f"<= {TRACED_TARGET // 1024:,} KiB)")
    return out


# -- main -------------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--open-runs", type=int, default=1000, help="open runs (1000)")
    parser.add_argument("--calls", default="0,1,10,50",
                        help="buffered calls per open run, comma-separated (0,1,10,50)")
    parser.add_argument("--spans", type=int, default=300_000,
                        help="spans graded in the steady-state part (300,000; --full: 1,000,000)")
    parser.add_argument("--every", type=int, default=None,
                        help="record memory after every N spans (spans / 10)")
    parser.add_argument("--run-calls", type=int, default=20, help="tool calls per run (20)")
    parser.add_argument("--no-tracemalloc", action="store_true",
                        help="steady state: RSS and allocated blocks only (much faster)")
    parser.add_argument("--full", action="store_true", help="--spans 1000000")
    parser.add_argument("--downstream-queue", type=int, default=2048,
                        help="steady state: max_queue_size of the downstream BatchSpanProcessor "
                             "(2048, the SDK's default)")
    parser.add_argument("--max-open-runs", type=int, default=None,
                        help="override the config's limits.max_open_runs, in both parts "
                             "(default: the config's, 10,000): a smaller tombstone table to "
                             "fill in the warm-up")
    opts = parser.parse_args(argv)
    if opts.full:
        opts.spans = 1_000_000
    every = opts.every or max(opts.spans // 10, 1)
    ks = sorted({int(k) for k in opts.calls.split(",")})
    config = load_all_families()
    # The tombstone table holds the finished traces of the last tombstone_seconds, at most
    # max_open_runs: its size follows the throughput, which moves during a run (tracemalloc,
    # the machine). Kept by count alone, it fills once and stays full, and what is left to
    # see is growth.
    config["limits"] = {**(config.get("limits") or {}), "tombstone_seconds": STEADY_TOMBSTONES}
    if opts.max_open_runs is not None:
        config["limits"] = {**(config.get("limits") or {}), "max_open_runs": opts.max_open_runs}
    families = sorted({g.get("type") or g.get("kind") for g in config["graders"]})
    print(f"python {sys.version.split()[0]}; graders: {', '.join(families)} "
          f"({CONFIG_PATH.relative_to(ROOT)}); limits {config.get('limits')}\n")
    started = time.perf_counter()
    # The steady state first: the RSS series then starts from this process's own baseline,
    # not from the high-water mark of the open-run measurements.
    steady = steady_state(config, opts.spans, every, opts.run_calls, not opts.no_tracemalloc,
                          opts.downstream_queue)
    open_figures = per_run_and_call(config, opts.open_runs, ks)
    args = list(sys.argv[1:] if argv is None else argv)
    cmd = " ".join(["python tests/bench/bench_memory.py", *args])
    growth_keys = ["rss_growth", "blocks_growth"]
    summary = [
        {"figure": f"memory per open run kept by the processor ({opts.open_runs:,} open runs)",
         "measured": f"{open_figures['bytes_per_open_run']:,.0f} B", "target": "-",
         "met": None, "command": cmd},
        {"figure": "memory per buffered tool call kept by the processor",
         "measured": f"{open_figures['bytes_per_buffered_call']:,.0f} B", "target": "-",
         "met": None, "command": cmd},
    ]
    for key in growth_keys:
        label = {"rss_growth": "RSS after malloc_trim, net of tracemalloc's own memory",
                 "blocks_growth": "allocated blocks",
                 "traced_growth": "tracemalloc current"}[key]
        summary.append({
            "figure": f"steady state over {steady['spans']:,} graded spans: {label}, last "
                      f"quarter / first quarter",
            "measured": f"{steady[key]:.3f}x", "target": f"<= {GROWTH_TARGET:.2f}x",
            "met": steady[key] <= GROWTH_TARGET, "command": cmd})
    if steady["traced_growth_bytes"] is not None:
        grew = steady["traced_growth_bytes"]
        summary.append({
            "figure": f"steady state over {steady['spans']:,} graded spans: tracemalloc "
                      f"current, last quarter - first quarter ({steady['traced_growth']:.2f}x)",
            "measured": f"{grew / 1024:+,.0f} KiB", "target": f"<= {TRACED_TARGET // 1024:,} KiB",
            "met": grew <= TRACED_TARGET, "command": cmd})
    print(f"\ndone in {time.perf_counter() - started:.0f} s")
    return {"open": open_figures, "steady": steady, "summary": summary}


if __name__ == "__main__":
    main()
