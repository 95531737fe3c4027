"""Peak memory of ``otel-tooleval grade`` against the number of runs, per output format.

A standalone script, not a pytest test::

    python tests/bench/bench_grade_memory.py [--runs 10000,100000] [--full]
                                             [--formats table,json,junit] [--keep DIR]

For each size it writes an OTLP/JSON-lines file (gzip) of small agent runs: one root span and
two tool calls each, four runs in flight at once and spans in the order they ended, so that the
runs do not arrive in start order and ``grade`` must sort them. Then for each format it runs
``otel-tooleval grade FILE --format F --output OUT`` in a subprocess and reads that child's peak
RSS (``ru_maxrss`` from ``os.wait4``) and its wall time (runs/s), and the ratio of peak RSS
between each size and the smallest. The trace cutter holds a window of spans anyway
(``iter_traces`` keeps a trace until 100,000 later spans have been read: about 140 MiB of these
spans), so a file of fewer than ~33,000 runs (100,000 spans) sits inside that window and its
peak is lower for that reason; the flatness target (<= 1.5x) is checked between the largest
size and the smallest one at or above that window (at the default sizes, only 100,000 runs is:
the 10,000-run ratio is printed without a target).

``--full`` adds 1,000,000 runs (a ~40 MiB gzip file; each format takes minutes there).
``main(argv)`` prints the report and returns its figures as a dict (``summary`` lists them with
their targets, for ``run_all.py``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

IN_FLIGHT = 4      # runs open at once
BATCH = 500        # spans per line
SPANS_PER_RUN = 3
WINDOW_SPANS = 100_000   # iter_traces' idle_spans: what the cutter may hold at once
FLAT_TARGET = 1.5  # peak RSS, largest size / smallest size beyond the window

CONFIG = {"graders": [
    {"name": "lookup-first", "type": "tool-calls", "config": {
        "required": [{"name": "^lookup$"}], "sequence": ["^lookup$", "^answer$"]}},
    {"name": "selection", "type": "equal_function_sets",
     "classes": [{"name": "lookup", "members": ["lookup"]}, {"name": "answer", "members": ["answer"]}],
     "expect": [{"tool_selection.f1": {">=": 80}}]},
]}


def _span(trace: str, span_id: int, parent: int, start: int, tool: str | None) -> dict[str, Any]:
    end = start + (900 if tool is None else 50)
    span: dict[str, Any] = {"traceId": trace, "spanId": format(span_id, "016x"),
                            "startTimeUnixNano": str(start), "endTimeUnixNano": str(end)}
    if tool is None:
        span["name"] = "invoke_agent helper"
        span["attributes"] = [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}},
            {"key": "gen_ai.agent.name", "value": {"stringValue": "helper"}}]
    else:
        span["name"] = f"execute_tool {tool}"
        span["parentSpanId"] = format(parent, "016x")
        span["attributes"] = [{"key": "gen_ai.tool.name", "value": {"stringValue": tool}}]
    return span


def _spans(runs: int, rng: random.Random) -> Iterator[dict[str, Any]]:
    """Every run's spans in the order they end (root last), IN_FLIGHT runs interleaved.
    One run in eleven calls ``answer`` before ``lookup`` and fails the sequence."""
    flights: list[list[dict[str, Any]]] = []
    number = 0
    while flights or number < runs:
        while len(flights) < IN_FLIGHT and number < runs:
            number += 1
            trace = format(number | 1 << 127, "032x")
            root = number << 8
            start = 1_760_000_000_000_000_000 + number * 1000
            tools = ("answer", "lookup") if number % 11 == 0 else ("lookup", "answer")
            run = [_span(trace, root + 1 + i, root, start + 10 + i * 100, tool)
                   for i, tool in enumerate(tools)]
            run.append(_span(trace, root, 0, start, None))
            run.reverse()   # popped from the end
            flights.append(run)
        flight = rng.choice(flights)
        yield flight.pop()
        if not flight:
            flights.remove(flight)


def write_input(path: Path, runs: int) -> None:
    """``runs`` runs as OTLP/JSON lines, gzip-compressed, written as they are generated."""
    rng = random.Random(16)
    batch: list[dict[str, Any]] = []
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as fh:
        def flush() -> None:
            doc = {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "agent"},
                                                      "spans": batch}]}]}
            fh.write(json.dumps(doc, separators=(",", ":")) + "\n")
            batch.clear()

        for span in _spans(runs, rng):
            batch.append(span)
            if len(batch) == BATCH:
                flush()
        if batch:
            flush()


def measure(path: Path, config: Path, fmt: str, out: Path) -> dict[str, Any]:
    """One ``grade`` in a child process: its exit status, seconds and peak RSS."""
    command = [sys.executable, "-m", "otel_tooleval.cli", "grade", str(path), "-c", str(config),
               "--format", fmt, "--output", str(out)]
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"exit": proc.returncode, "seconds": seconds, "peak_rss_mib": usage.ru_maxrss / 1024,
            "output_mib": out.stat().st_size / 2**20 if out.exists() else 0.0,
            "stderr": err.decode("utf-8", "replace")[-300:]}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", default="10000,100000", help="comma-separated run counts")
    parser.add_argument("--full", action="store_true", help="add 1,000,000 runs")
    parser.add_argument("--formats", default="table,json,junit")
    parser.add_argument("--keep", help="write the inputs and outputs here and keep them")
    args = parser.parse_args(argv)
    sizes = sorted({int(n) for n in args.runs.split(",")} | ({1_000_000} if args.full else set()))
    formats = [f for f in args.formats.split(",") if f]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; runs of 1 root + 2 tool "
          f"calls, {IN_FLIGHT} in flight; formats {', '.join(formats)}")
    tmp = tempfile.mkdtemp(prefix="bench-grade-memory-")
    folder = Path(args.keep or tmp)
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config.json"
    config.write_text(json.dumps(CONFIG), encoding="utf-8")
    rows: list[dict[str, Any]] = []
    try:
        for runs in sizes:
            path = folder / f"runs-{runs}.otlp.jsonl.gz"
            t0 = time.perf_counter()
            write_input(path, runs)
            print(f"\n{runs:,} runs: {path.name}, {path.stat().st_size / 2**20:,.1f} MiB, "
                  f"written in {time.perf_counter() - t0:.1f} s")
            print(f"  {'format':<7} {'runs/s':>9} {'seconds':>8} {'peak RSS':>10} {'output':>10}"
                  f"  exit")
            for fmt in formats:
                out = folder / f"out-{runs}.{fmt}"
                r = measure(path, config, fmt, out)
                if not args.keep:
                    out.unlink(missing_ok=True)
                rows.append({"runs": runs, "format": fmt, **r,
                             "runs_per_s": runs / r["seconds"]})
                print(f"  {fmt:<7} {runs / r['seconds']:>9,.0f} {r['seconds']:>8.1f} "
                      f"{r['peak_rss_mib']:>8.0f} M {r['output_mib']:>8.1f} M  {r['exit']}")
                if r["exit"] not in (0, 1):
                    print(f"  !! exit {r['exit']}: {r['stderr']}")
            if not args.keep:
                path.unlink()
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    figures: dict[str, Any] = {"sizes": sizes, "formats": formats, "rows": rows, "summary": [],
                               "rss_ratio": {}}
    beyond = [n for n in sizes if n * SPANS_PER_RUN >= WINDOW_SPANS]
    base = beyond[0] if len(beyond) >= 2 else sizes[0]
    large = sizes[-1]
    print()
    for fmt in formats:
        by_size = {r["runs"]: r for r in rows if r["format"] == fmt}
        peak = {n: by_size[n]["peak_rss_mib"] for n in sizes}
        figures["rss_ratio"][fmt] = {n: peak[n] / peak[sizes[0]] for n in sizes}
        print(f"{fmt}: peak RSS " + ", ".join(f"{peak[n]:.0f} MiB at {n:,}" for n in sizes)
              + " runs; ratios to the smallest: "
              + ", ".join(f"{peak[n] / peak[sizes[0]]:.2f}x" for n in sizes[1:]))
        again = (f"python tests/bench/bench_grade_memory.py --runs "
                 f"{','.join(str(n) for n in sizes)} --formats {fmt}")
        ratio = peak[large] / peak[base]
        targeted = base != large and base * SPANS_PER_RUN >= WINDOW_SPANS
        figures["summary"].append({
            "figure": f"grade --format {fmt}: peak RSS {large:,} runs / {base:,} runs"
                      + ("" if targeted else " (the smaller inside the span window)"),
            "measured": f"{ratio:.2f}x ({peak[large]:.0f} vs {peak[base]:.0f} MiB)",
            "target": f"flat (<= {FLAT_TARGET:.1f}x)" if targeted else "-",
            "met": ratio <= FLAT_TARGET if targeted else None,
            "command": again})
        figures["summary"].append({
            "figure": f"  ... grade --format {fmt}, {large:,} runs",
            "measured": f"{by_size[large]['runs_per_s']:,.0f} runs/s", "target": "-",
            "met": None, "command": again})
    if args.keep:
        print(f"inputs and outputs kept in {folder}")
    return figures


if __name__ == "__main__":
    main()
