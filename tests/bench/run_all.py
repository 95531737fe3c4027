"""Every benchmark in one command, with one summary table of the figures against their targets.

A standalone script, not a pytest test::

    python tests/bench/run_all.py [--full]
        [--only overhead,overhead-process,overhead-web,overhead-mixed,graders,in-order,memory,
                files,serve,grade-memory]
                                  [--json FILE] [--memory-args "..."]

Each bench runs in a fresh Python process (its own heap, threads and peak RSS) through its
``main(argv)``, which prints its own report as it goes and returns its headline figures; at the
end this script prints one table: figure, measured, target, met / NOT met, and the command that
reproduces the line on its own.

The default sizes are modest, so that the whole run takes about 10-15 minutes on a 2-core
machine; ``--full`` uses each bench's full sizes (the ones docs/performance.md quotes):

==========  ===============================================  ======================================
bench       default                                          --full
==========  ===============================================  ======================================
overhead    10/50/500 calls, 9 pairs, ~8,000 spans each      10/50/500 calls, 9 pairs, ~12,000
overhead-   the same with ``--grading process``              the same with ``--grading process``
process
overhead-   plain traffic: 4-span web requests, no agent,    the same, ~12,000 spans
web         one grader, 11 pairs, ~8,000 spans
overhead-   mixed: 1 agent run of 10 calls per 20 web        the same, ~12,000 spans
mixed       requests, one grader, 11 pairs, ~8,000 spans
graders     10 / 100 / 1,000 / 10,000 calls, LCS 10k x 10k   the same, 9 repeats
in-order    in_order 1k / 5k / 10k, before and after         the same, 5 repeats
memory      ``bench_memory.main([])`` (its own defaults)     ``bench_memory.main(["--full"])``
files       100,000 and 400,000 spans                        250,000 and 1,000,000 spans
serve       3 rounds of 100,000 spans                        3 rounds of 300,000 spans
grade-      10,000 and 100,000 runs, table/json/junit        10,000, 100,000 and 1,000,000 runs
memory
==========  ===============================================  ======================================

``bench_memory.py`` is optional: when it is missing, or has no ``main``, its line says so and
the rest still runs. The machine's load average is printed before and after: the overhead
ratios are paired and alternated, but on a busy machine every figure moves.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
try:
    SCRIPT_DIR = HERE.relative_to(Path.cwd())
except ValueError:
    SCRIPT_DIR = HERE
TIMEOUT_S = 3600


@dataclass(frozen=True)
class Bench:
    name: str
    module: str
    modest: tuple[str, ...]
    full: tuple[str, ...]


BENCHES: tuple[Bench, ...] = (
    Bench("overhead", "bench_overhead",
          ("--calls", "10,50,500", "--pairs", "9", "--spans", "8000"),
          ("--calls", "10,50,500", "--pairs", "9", "--spans", "12000")),
    Bench("overhead-process", "bench_overhead",
          ("--calls", "10,50,500", "--pairs", "9", "--spans", "8000", "--grading", "process"),
          ("--calls", "10,50,500", "--pairs", "9", "--spans", "12000", "--grading", "process")),
    Bench("overhead-web", "bench_overhead",
          ("--traffic", "web", "--calls", "10", "--graders", "one", "--pairs", "11",
           "--spans", "8000"),
          ("--traffic", "web", "--calls", "10", "--graders", "one", "--pairs", "11",
           "--spans", "12000")),
    Bench("overhead-mixed", "bench_overhead",
          ("--traffic", "mixed", "--calls", "10", "--graders", "one", "--pairs", "11",
           "--spans", "8000"),
          ("--traffic", "mixed", "--calls", "10", "--graders", "one", "--pairs", "11",
           "--spans", "12000")),
    Bench("graders", "bench_graders",
          ("--sizes", "10,100,1000,10000", "--repeat", "7"),
          ("--sizes", "10,100,1000,10000", "--repeat", "9")),
    Bench("in-order", "bench_in_order", ("--sizes", "1000,5000,10000"),
          ("--sizes", "1000,5000,10000", "--repeat", "5")),
    Bench("memory", "bench_memory", (), ("--full",)),
    Bench("files", "bench_files", ("--spans", "100000,400000"), ("--spans", "250000,1000000")),
    Bench("serve", "bench_serve", ("--spans", "100000", "--rounds", "3"),
          ("--spans", "300000", "--rounds", "3")),
    Bench("grade-memory", "bench_grade_memory", ("--runs", "10000,100000"),
          ("--runs", "10000,100000", "--full")),
)


@dataclass
class Row:
    figure: str
    measured: str
    target: str
    met: bool | None      # None: no target (information)
    command: str


# -- the child: one bench, in a fresh process ---------------------------------------------------

def _child(module: str, argv: list[str], result_path: str) -> int:
    sys.path.insert(0, str(HERE))
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        if exc.name != module:
            raise
        _write(result_path, {"skipped": f"tests/bench/{module}.py not found"})
        return 0
    main = getattr(mod, "main", None)
    if not callable(main):
        _write(result_path, {"skipped": f"{module} has no main(argv)"})
        return 0
    figures = main(argv)
    if not isinstance(figures, dict):
        figures = {"skipped": f"{module}.main returned {type(figures).__name__}, not a dict"}
    _write(result_path, figures)
    return 0


def _write(path: str, figures: dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(figures, fh, default=str)


def run_bench(bench: Bench, argv: Sequence[str]) -> tuple[dict[str, Any], float]:
    """Run one bench in a fresh process, its output shown as it comes; its figures back."""
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as fh:
        result_path = fh.name
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, str(HERE / "run_all.py"), "--child", bench.module,
             "--result", result_path, "--", *argv],
            timeout=TIMEOUT_S, check=False)
        seconds = time.perf_counter() - started
        if proc.returncode:
            return {"error": f"exit status {proc.returncode}"}, seconds
        try:
            with open(result_path, encoding="utf-8") as fh:
                return dict(json.load(fh)), seconds
        except (OSError, ValueError) as exc:
            return {"error": f"no figures ({exc})"}, seconds
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {TIMEOUT_S} s"}, time.perf_counter() - started
    finally:
        os.unlink(result_path)


def command(bench: Bench, argv: Sequence[str]) -> str:
    return shlex.join(["python", str(SCRIPT_DIR / f"{bench.module}.py"), *argv])


# -- figures -> rows ---------------------------------------------------------------------------

def _fmt(value: float, unit: str = "", digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:,.{digits}f}{unit}"


def rows_overhead(fig: dict[str, Any], cmd: Callable[[list[str]], str],
                  argv: Sequence[str]) -> list[Row]:
    rows = []
    target, root_target = fig.get("target", 1.10), fig.get("root_end_target", 2.0)
    traffic = fig.get("traffic", "agent")
    targets = fig.get("targets", {"wall": target})
    graders = fig.get("graders", [])
    base = _without(list(argv), "--calls")
    for size in fig.get("sizes", []):
        n = size["calls"]
        again = cmd(["--calls", str(n), *base])
        if traffic == "agent":
            what = (f"overhead, runs of {n} calls: wall time tooleval/bare (all families, "
                    f"grading: {fig.get('grading', 'thread')})")
        else:
            load = ("plain traffic (4-span web requests, no agent)" if traffic == "web" else
                    f"mixed traffic (1 agent run of {n} calls per 20 web requests)")
            what = (f"overhead, {load}: wall time tooleval/bare ({len(graders)} grader(s), "
                    f"grading: {fig.get('grading', 'thread')})")
        rows.append(_target_row(what, size["ratio"], targets.get("wall"), again))
        rows.append(_target_row(f"  ... application-thread CPU tooleval/bare, {n} calls",
                                size["cpu_ratio"], targets.get("cpu"), again))
        rows.append(Row(f"root span end() on the app thread, grading on/bare, {n} calls",
                        f"{_fmt(size['root_end_ratio'], 'x')} ({size['root_end_tooleval_us']:.1f}"
                        f" vs {size['root_end_bare_us']:.1f} us)",
                        f"<= {root_target:.1f}x", size["root_end_ratio"] <= root_target, again))
        if size.get("runs_graded") != size.get("runs_expected") or size.get("drops"):
            rows.append(Row(f"  ... runs graded, {n} calls",
                            f"{size.get('runs_graded')}/{size.get('runs_expected')}, drops "
                            f"{size.get('drops') or 'none'}", "all", False, again))
        sent = size.get("spans_sent")
        if sent and (size.get("exported_bare") != sent or size.get("exported_tooleval") != sent):
            rows.append(Row(f"  ... spans exported bare / tooleval of {sent:,}, {n} calls",
                            f"{size.get('exported_bare'):,} / {size.get('exported_tooleval'):,}",
                            "all (BatchSpanProcessor queue full)", False, again))
    return rows


def _target_row(figure: str, ratio: float, target: float | None, again: str) -> Row:
    if target is None:
        return Row(figure, _fmt(ratio, "x"), "-", None, again)
    return Row(figure, _fmt(ratio, "x"), f"<= {target:.2f}x", ratio <= target, again)


def rows_graders(fig: dict[str, Any], cmd: Callable[[list[str]], str],
                 argv: Sequence[str]) -> list[Row]:
    rows = []
    sizes = fig.get("sizes", [])
    per_run = fig.get("ms_per_run", {})
    again = cmd(list(argv))
    for i, n in enumerate(sizes):
        total = per_run.get("ALL FAMILIES", [])[i]
        families = {k: v[i] for k, v in per_run.items() if k not in ("ALL FAMILIES", "build run")}
        slowest = max(families, key=lambda k: families[k]) if families else "-"
        target = "< 5 ms" if n == 1_000 else "-"
        rows.append(Row(f"grading a {n:,}-call run, every family (slowest: {slowest} "
                        f"{families.get(slowest, float('nan')):.2f} ms)",
                        _fmt(total, " ms"), target, total < 5 if n == 1_000 else None, again))
        if "build run" in per_run:
            rows.append(Row(f"  ... building the {n:,}-call run from span records",
                            _fmt(per_run["build run"][i], " ms"), "-", None, again))
    lcs = fig.get("lcs") or {}
    n = fig.get("lcs_calls", 10_000)
    lcs_cmd = cmd(["--sizes", "10", "--repeat", "1", "--lcs", str(n)])
    for label, values in lcs.items():
        rows.append(Row(f"order LCS {n:,} x {n:,} ({label})", _fmt(values["ms"], " ms", 0),
                        "< 500 ms", values["ms"] < 500, lcs_cmd))
        rows.append(Row("  ... its peak memory; peak growth for twice the input",
                        f"{values['peak_mib']:.2f} MiB, {values['memory_growth']:.2f}x",
                        "linear (~2x; 4x = quadratic)", values["memory_growth"] <= 2.5, lcs_cmd))
    return rows


def rows_in_order(fig: dict[str, Any], cmd: Callable[[list[str]], str],
                  argv: Sequence[str]) -> list[Row]:
    rows = []
    again = cmd(list(argv))
    for r in fig.get("rows", []):
        n, variant = r["n"], r["variant"]
        if "before_ms" in r:
            rows.append(Row(f"tool_trajectory in_order {n:,} x {r['calls']:,} ({variant}): "
                            f"before/after (same matching: {r['same']})",
                            f"{_fmt(r['ratio'], 'x', 1)} ({_fmt(r['before_ms'], ' ms', 0)} -> "
                            f"{_fmt(r['after_ms'], ' ms', 1)})", "-",
                            None if r["same"] else False, again))
        else:
            rows.append(Row(f"tool_trajectory in_order {n:,} x {r['calls']:,} ({variant})",
                            _fmt(r["after_ms"], " ms", 1), "-", None, again))
        rows.append(Row(f"  ... twice the input ({2 * n:,}): time, peak memory",
                        f"{_fmt(r['growth'], 'x')}, {_fmt(r['peak_growth'], 'x')} of "
                        f"{_fmt(r['peak_mib'], ' MiB')}", "-", None, again))
    return rows


def rows_files(fig: dict[str, Any], cmd: Callable[[list[str]], str],
               argv: Sequence[str]) -> list[Row]:
    rows = []
    again = cmd(list(argv))
    for total, rate in (fig.get("grade_spans_per_s") or {}).items():
        growth = (fig.get("grade_rss_growth_mib") or {}).get(total)
        rows.append(Row(f"otel-tooleval grade, {int(total):,} spans (parse+assemble+grade)",
                        f"{_fmt(rate, ' spans/s', 0)}, RSS +{_fmt(growth, ' MiB', 0)}",
                        ">= 50,000 spans/s", rate >= 50_000, again))
    if "memory_growth_ratio" in fig:
        ratio = fig["memory_growth_ratio"]
        rows.append(Row(f"  ... grade's memory growth for {fig.get('input_ratio', 0):.0f}x the "
                        f"input", _fmt(ratio, "x"), "independent of size (<= 1.5x)",
                        ratio <= 1.5, again))
    return rows


def rows_serve(fig: dict[str, Any], cmd: Callable[[list[str]], str],
               argv: Sequence[str]) -> list[Row]:
    again = cmd(list(argv))
    best = fig.get("graded_per_s_best", float("nan"))
    rows = [Row(f"otel-tooleval serve, OTLP/HTTP, graded (best of {len(fig.get('rounds', []))} "
                f"rounds of {fig.get('spans_per_round', 0):,} spans)",
                _fmt(best, " spans/s", 0), ">= 20,000 spans/s", best >= 20_000, again)]
    rss = fig.get("rss_mib") or []
    if len(rss) >= 3:
        grew = rss[-1] > rss[1] * 1.10
        rows.append(Row("  ... serve's RSS after each round",
                        ", ".join(f"{r:.0f}" for r in rss) + " MiB",
                        "steady after round 1 (+10%)", not grew, again))
    return rows


def rows_generic(fig: dict[str, Any], cmd: Callable[[list[str]], str],
                 argv: Sequence[str], name: str) -> list[Row]:
    """A bench's own summary when it gives one (``summary``/``figures``: a list of dicts with
    figure, measured, target, met), else its numeric figures as information."""
    again = cmd(list(argv))
    listed = fig.get("summary") or fig.get("figures")
    rows = []
    if isinstance(listed, list) and all(isinstance(item, dict) for item in listed):
        for item in listed:
            met = item.get("met")
            rows.append(Row(str(item.get("figure") or item.get("name") or "?"),
                            str(item.get("measured", item.get("value", "?"))),
                            str(item.get("target", "-")),
                            met if isinstance(met, bool) else None,
                            str(item.get("command") or again)))
        return rows
    for key, value in _numbers(fig):
        rows.append(Row(f"{name}: {key}", _fmt(value), "-", None, again))
    return rows


def _numbers(fig: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    if isinstance(fig, dict) and depth < 3:
        for key, value in fig.items():
            out.extend(_numbers(value, f"{prefix}{key}" if not prefix else f"{prefix}.{key}",
                                depth + 1))
    elif isinstance(fig, (int, float)) and not isinstance(fig, bool):
        out.append((prefix, float(fig)))
    return out[:20]


def _without(argv: list[str], flag: str) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == flag:
            skip = True
            continue
        out.append(arg)
    return out


ROWS: dict[str, Callable[..., list[Row]]] = {
    "overhead": rows_overhead, "overhead-process": rows_overhead, "graders": rows_graders,
    "overhead-web": rows_overhead, "overhead-mixed": rows_overhead,
    "in-order": rows_in_order, "files": rows_files,
    "serve": rows_serve,
}


def print_table(rows: list[Row]) -> None:
    status = {True: "met", False: "NOT met", None: "-"}
    widths = [max(len(h), *(len(v) for v in col)) for h, col in (
        ("figure", [r.figure for r in rows]), ("measured", [r.measured for r in rows]),
        ("target", [r.target for r in rows]), ("status", [status[r.met] for r in rows]))]
    head = (f"{'figure':<{widths[0]}}  {'measured':>{widths[1]}}  {'target':<{widths[2]}}  "
            f"{'status':<{widths[3]}}  command")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r.figure:<{widths[0]}}  {r.measured:>{widths[1]}}  {r.target:<{widths[2]}}  "
              f"{status[r.met]:<{widths[3]}}  {r.command}")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="each bench's full sizes")
    parser.add_argument("--only", default=",".join(b.name for b in BENCHES),
                        help="comma-separated benches to run (default: all)")
    parser.add_argument("--json", help="also write every figure to this file")
    parser.add_argument("--memory-args", default=None,
                        help="arguments for bench_memory.main instead of the defaults")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.child:
        sys.exit(_child(opts.child, list(opts.rest), opts.result))

    chosen = [name.strip() for name in opts.only.split(",") if name.strip()]
    unknown = set(chosen) - {b.name for b in BENCHES}
    if unknown:
        parser.error(f"unknown bench(es): {', '.join(sorted(unknown))}")
    load = os.getloadavg()
    print(f"run_all: {', '.join(chosen)} ({'full' if opts.full else 'default'} sizes); "
          f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    started = time.perf_counter()
    rows: list[Row] = []
    figures: dict[str, Any] = {}
    for bench in BENCHES:
        if bench.name not in chosen:
            continue
        argv_b = list(bench.full if opts.full else bench.modest)
        if bench.name == "memory" and opts.memory_args is not None:
            argv_b = shlex.split(opts.memory_args)

        def cmd(args: list[str], bench: Bench = bench) -> str:
            return command(bench, args)

        print(f"\n{'=' * 30} {bench.name}: {command(bench, argv_b)} {'=' * 30}", flush=True)
        fig, seconds = run_bench(bench, argv_b)
        figures[bench.name] = {**fig, "seconds": seconds, "argv": argv_b}
        print(f"[{bench.name}: {seconds:.0f} s]", flush=True)
        if "skipped" in fig:
            rows.append(Row(f"{bench.name}: skipped", str(fig["skipped"]), "-", None,
                            command(bench, argv_b)))
            continue
        if "error" in fig:
            rows.append(Row(f"{bench.name}: FAILED", str(fig["error"]), "-", False,
                            command(bench, argv_b)))
            continue
        try:
            make = ROWS.get(bench.name)
            rows.extend(make(fig, cmd, argv_b) if make is not None
                        else rows_generic(fig, cmd, argv_b, bench.name))
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            rows.append(Row(f"{bench.name}: figures not understood", repr(exc)[:60], "-",
                            False, command(bench, argv_b)))
    load = os.getloadavg()
    elapsed = time.perf_counter() - started
    print(f"\n{'=' * 30} summary {'=' * 30}")
    print(f"{elapsed / 60:.1f} minutes; load average now {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}")
    print_table(rows)
    met = sum(r.met is True for r in rows)
    missed = sum(r.met is False for r in rows)
    print(f"\n{met} met, {missed} NOT met, {sum(r.met is None for r in rows)} without a target.")
    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as fh:
            json.dump({"figures": figures, "rows": [r.__dict__ for r in rows],
                       "seconds": elapsed}, fh, indent=1, default=str)
    return {"rows": [r.__dict__ for r in rows], "figures": figures, "seconds": elapsed}


if __name__ == "__main__":
    main()
