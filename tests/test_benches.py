"""Smoke test of the benchmark scripts in ``tests/bench/``: each still runs, at tiny sizes.

Every bench runs in a fresh Python process through ``run_all.py``'s own child mode
(``run_all.run_bench``), so that its providers, threads and grading processes stay out of this
one; its figures come back as JSON and go through ``run_all``'s row builders and
``print_table``, as in a real run. The arguments are ``run_all``'s own (so that every option it
passes still parses), followed by tiny sizes that override them.

Nothing here is timed (benchmarks print ratios measured in one run; they are not timed
assertions): only what holds on any machine is checked, the keys the row builders read,
counts that add up (every run graded, every span sent counted) and rows that show a value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.bench import (
    bench_files,
    bench_grade_memory,
    bench_graders,
    bench_peers,
    bench_serve,
    run_all,
)
from tests.bench.bench_overhead import CONFIG as EVERY_FAMILY

BENCH_DIR = Path(run_all.__file__).resolve().parent
BENCHES = {bench.name: bench for bench in run_all.BENCHES}
TIMEOUT_S = 120   # per bench; each takes a few seconds at these sizes

Check = Callable[[dict[str, Any], str, list[run_all.Row]], None]


def _bench(name: str, module: str | None = None) -> run_all.Bench:
    """The bench as ``run_all`` runs it, or a script it does not run (``module``)."""
    return BENCHES[name] if module is None else run_all.Bench(name, module, (), ())


def _run(bench: run_all.Bench, tiny: Sequence[str], capfd: pytest.CaptureFixture[str],
         monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], str, list[str]]:
    """Figures and printed output of one bench run in a child process, and its argv."""
    monkeypatch.setattr(run_all, "TIMEOUT_S", TIMEOUT_S)
    argv = [*bench.modest, *tiny]
    figures, _seconds = run_all.run_bench(bench, argv)
    out = capfd.readouterr().out
    assert "error" not in figures, f"{bench.module} {argv}: {figures['error']}\n{out}"
    assert "skipped" not in figures, figures["skipped"]
    assert figures, f"{bench.module} returned no figures"
    return figures, out, argv


def _rows(name: str, bench: run_all.Bench, figures: dict[str, Any], argv: list[str],
          capfd: pytest.CaptureFixture[str]) -> list[run_all.Row]:
    """``run_all``'s table rows of these figures, printed as ``run_all`` prints them."""

    def cmd(args: list[str]) -> str:
        return run_all.command(bench, args)

    make = run_all.ROWS.get(name)
    rows = (make(figures, cmd, argv) if make is not None
            else run_all.rows_generic(figures, cmd, argv, name))
    assert rows, f"{name}: no rows from {sorted(figures)}"
    run_all.print_table(rows)
    table = capfd.readouterr().out.splitlines()
    assert len(table) == len(rows) + 2    # header, rule, one line per row
    for row, line in zip(rows, table[2:]):
        assert row.figure and row.figure in line
        assert row.measured and row.measured in line
        assert bench.module in row.command
    return rows


def _no_missing(rows: list[run_all.Row], *, except_prefix: str | None = None) -> None:
    for row in rows:
        if except_prefix is not None and row.figure.startswith(except_prefix):
            continue
        assert "n/a" not in row.measured and "nan" not in row.measured.lower(), row


# -- overhead, in both grading modes ------------------------------------------------------------

OVERHEAD_TINY = ["--pairs", "7", "--runs", "1", "--warmup", "1", "--root-runs", "1"]
OVERHEAD_SIZE_KEYS = {"calls", "spans_per_run", "ratio", "cpu_ratio", "root_end_ratio",
                      "root_end_bare_us", "root_end_tooleval_us", "runs_graded",
                      "runs_expected", "drops", "spans_sent", "exported_bare",
                      "exported_tooleval"}


def _check_overhead(fig: dict[str, Any], mode: str, calls: list[int],
                    rows: list[run_all.Row]) -> None:
    assert fig["grading"] == mode
    assert fig["graders"] == [g.get("type") or g.get("kind") for g in EVERY_FAMILY["graders"]]
    assert [size["calls"] for size in fig["sizes"]] == calls
    runs_per_size = 2 * 1 + 7 * (1 + 1)   # warm-up on both sides, pairs x (runs + root runs)
    for size in fig["sizes"]:
        assert OVERHEAD_SIZE_KEYS <= set(size)
        assert size["runs_expected"] == runs_per_size
        assert size["runs_graded"] == size["runs_expected"], size
        assert size["drops"] == {}
        assert size["spans_sent"] == runs_per_size * size["spans_per_run"]
        assert size["exported_bare"] == size["exported_tooleval"] == size["spans_sent"]
        assert all(math.isfinite(size[k]) and size[k] > 0
                   for k in ("ratio", "cpu_ratio", "root_end_ratio"))
    graded = sum(size["runs_graded"] for size in fig["sizes"])
    if mode == "thread":
        assert fig["grading_process"] is None
        assert fig["runs_passed"] + fig["runs_failed"] == graded
    else:   # the grading process was ready before the first measurement and never exited
        assert fig["grading_process"] == {"ready": True, "starts": 1}
        assert fig["runs_passed"] + fig["runs_failed"] > graded   # + the runs that waited
    # three rows per size (overhead, app-thread CPU, root end()); a count that did not add up
    # would add a row of its own
    assert len(rows) == 3 * len(calls)
    assert [r.figure.split(":")[0] for r in rows[::3]] == [
        f"overhead, runs of {n} calls" for n in calls]
    _no_missing(rows)


def test_bench_overhead_full_set_is_every_registered_family() -> None:
    """``--graders all`` is the full set: one grader of every family the registry knows."""
    from otel_tooleval import load_config
    from otel_tooleval.graders.registry import families
    loaded = load_config(EVERY_FAMILY)
    assert {g.get("type") or g.get("kind") for g in EVERY_FAMILY["graders"]} == \
        {f.type for f in families()}
    assert len(loaded.graders) == len(EVERY_FAMILY["graders"])


def test_bench_overhead_thread(capfd: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("overhead")
    fig, _, argv = _run(bench, ["--calls", "1,5", *OVERHEAD_TINY], capfd, monkeypatch)
    _check_overhead(fig, "thread", [1, 5], _rows("overhead", bench, fig, argv, capfd))


def test_bench_overhead_without_violation_marks(capfd: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """``--no-violation-marks``: the tool spans are not held, every span still exported once."""
    bench = _bench("overhead")
    fig, _, _ = _run(bench, ["--calls", "3", *OVERHEAD_TINY, "--no-violation-marks"],
                     capfd, monkeypatch)
    (size,) = fig["sizes"]
    assert size["exported_bare"] == size["exported_tooleval"] == size["spans_sent"]
    from bench_overhead import build_sides, graders_config
    _, side, _ = build_sides(graders_config("all"), None, False)
    assert side.processor is not None and not side.processor._hold
    _, side, _ = build_sides(graders_config("all"))
    assert side.processor is not None and side.processor._hold


def test_bench_overhead_mixed_traffic_timed_apart(capfd: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``--split``: mixed traffic's web requests and agent runs timed apart on the application
    thread, a ratio each; every span still exported once, every run graded."""
    bench = _bench("overhead-mixed")
    fig, out, _ = _run(bench, ["--calls", "2", *OVERHEAD_TINY, "--split", "--gc-reset"],
                       capfd, monkeypatch)
    (size,) = fig["sizes"]
    assert size["gc_reset"] is True and "forced before every measurement" in out
    split = size["split_cpu_ratios"]
    assert set(split) == {"web", "agent"} and all(r > 0 for r in split.values())
    assert "timed apart (median of 7 pairs)" in out
    assert size["runs_graded"] == size["runs_expected"] > 0
    assert size["exported_bare"] == size["exported_tooleval"] == size["spans_sent"]


def test_bench_overhead_process(capfd: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("overhead-process")
    assert "--grading" in bench.modest
    fig, out, argv = _run(bench, ["--calls", "3", *OVERHEAD_TINY], capfd, monkeypatch)
    assert "grading process: ready after" in out
    _check_overhead(fig, "process", [3], _rows("overhead-process", bench, fig, argv, capfd))


@pytest.mark.parametrize(("name", "agent_runs", "wall", "cpu"),
                         [("overhead-web", 0, 1.08, 1.05), ("overhead-mixed", 1, None, 1.10)])
def test_bench_overhead_plain_and_mixed_traffic(name: str, agent_runs: int, wall: float | None,
                                                cpu: float, capfd: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain traffic (4-span web requests, no agent) and mixed traffic (one agent run per 20
    web requests): every span exported once on both sides, every agent run graded, none of
    the web requests; run_all's rows carry the issue's targets."""
    bench = _bench(name)
    fig, out, argv = _run(bench, ["--calls", "2", *OVERHEAD_TINY], capfd, monkeypatch)
    traffic = name.removeprefix("overhead-")
    assert fig["traffic"] == traffic and fig["graders"] == ["tool-call-count"]
    (size,) = fig["sizes"]
    assert OVERHEAD_SIZE_KEYS <= set(size)
    assert size["traffic"] == traffic
    per_unit = 4 if traffic == "web" else 20 * 4 + (1 + 2 + 2)   # root, 2 chats, 2 calls
    assert size["spans_per_run"] == per_unit
    # warm-up and 7 pairs of 1 unit, plus as many root-end runs (an agent run each, mixed)
    assert size["runs_expected"] == (1 + 7) * agent_runs * 2
    assert size["runs_graded"] == size["runs_expected"] and size["drops"] == {}
    assert size["exported_bare"] == size["exported_tooleval"] == size["spans_sent"]
    assert "web requests" in out
    assert size["gc_reset"] is False and set(size["full_collections"]) == {"bare", "tooleval"}
    assert "full collections inside the timed sections: bare " in out
    rows = _rows(name, bench, fig, argv, capfd)
    assert len(rows) == 3
    assert rows[0].figure.startswith("overhead, plain traffic" if traffic == "web"
                                     else "overhead, mixed traffic")
    assert rows[0].target == ("-" if wall is None else f"<= {wall:.2f}x")
    assert rows[1].target == f"<= {cpu:.2f}x"
    _no_missing(rows)


def test_bench_overhead_counts_the_full_collections_inside_the_timed_sections() -> None:
    """``FullCollections`` counts a full collection for the side being timed, and nothing
    else: none outside a timed section, no younger generation's."""
    import gc

    from bench_overhead import FullCollections
    counter = FullCollections()
    gc.callbacks.append(counter)
    try:
        gc.collect()   # outside a timed section
        counter.side = "tooleval"
        gc.collect(0)
        gc.collect(1)
        gc.collect()
        counter.side = None
        gc.collect()
    finally:
        gc.callbacks.remove(counter)
    assert counter.counts == {"bare": 0, "tooleval": 1}


@pytest.mark.parametrize("reset", [False, True])
def test_bench_overhead_forces_a_full_collection_before_a_measurement_only_with_gc_reset(
        reset: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``--gc-reset`` a measurement leaves the collector's state as it was (a forced
    full collection before each one made a side that allocates a little more cross the
    threshold of a full collection inside its measurements, and the other never:
    docs/performance.md); with it, one forced full collection before each."""
    import bench_overhead
    forced: list[int] = []
    real_collect = bench_overhead.gc.collect
    bare, tooleval, _ = bench_overhead.build_sides(bench_overhead.graders_config("none"))
    try:
        monkeypatch.setattr(bench_overhead.gc, "collect",
                            lambda generation=2: forced.append(generation) or 0)
        workload = bench_overhead.Workload(1, 5, "web")
        for side in (bare, tooleval):
            got = bench_overhead.measure(side, workload, 2, (bare, tooleval), gc_reset=reset)
            assert got.spans == 2 * workload.spans_per_run and got.cpu_ns > 0
            assert bench_overhead.FULL_COLLECTIONS.side is None
            assert bench_overhead.FULL_COLLECTIONS not in bench_overhead.gc.callbacks
    finally:
        monkeypatch.setattr(bench_overhead.gc, "collect", real_collect)
        for side in (bare, tooleval):
            side.provider.shutdown()
    assert forced == ([2, 2] if reset else [])


@pytest.mark.parametrize("mode", ["phase", "carry", "reset"])
def test_bench_overhead_starts_both_measurements_of_a_pair_from_one_collector_phase(
        mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """By default both measurements of a pair start from the same phase of the collector, one
    that moves from pair to pair (``gc_phase``): with the state carried over (``--gc-carry``,
    tried first, in 8f8b516) where a full collection falls follows the order bare, tooleval /
    tooleval, bare, not the side that causes it (``--calls 10 --graders none --spans 6000``:
    one in each of 20 bare measurements, in 10 of the tooleval side's 20)."""
    import argparse

    import bench_overhead
    phases: list[tuple[str, Any]] = []
    real_measure = bench_overhead.measure

    def spy(side: Any, workload: Any, runs: int, both: Any, split: bool = False,
            gc_reset: bool = False, phase: Any = None) -> Any:
        phases.append((side.name, phase))
        return real_measure(side, workload, runs, both, split, gc_reset, phase)

    monkeypatch.setattr(bench_overhead, "measure", spy)
    bare, tooleval, _ = bench_overhead.build_sides(bench_overhead.graders_config("none"))
    opts = argparse.Namespace(pairs=7, spans=8, runs=1, root_runs=1, warmup=1, no_gc=False,
                              gc_reset=mode == "reset", gc_carry=mode == "carry", split=False)
    try:
        got = bench_overhead.bench_size(bench_overhead.Workload(1, 5, "web"),
                                        (bare, tooleval), opts)
    finally:
        for side in (bare, tooleval):
            side.provider.shutdown()
    assert got["gc"] == mode and len(phases) == 14
    pairs = [dict(phases[i:i + 2]) for i in range(0, 14, 2)]
    assert all(set(pair) == {"bare", "tooleval"} for pair in pairs)
    if mode == "phase":
        assert all(pair["bare"] == pair["tooleval"] is not None for pair in pairs)
        assert len({pair["bare"] for pair in pairs}) == 7   # a new phase for every pair
    else:
        assert all(phase is None for _, phase in phases)


def test_bench_overhead_sets_the_collector_phase() -> None:
    """``set_gc_phase((k, j))``: a full collection, then k of the middle generation and j of
    the young one; the phases of ``gc_phase`` cover the collector's period."""
    import gc

    import bench_overhead
    gc.disable()   # no collection of the young generation set off by another thread meanwhile
    try:
        bench_overhead.set_gc_phase((3, 7))
        assert gc.get_count()[1:] == (7, 3)
    finally:
        gc.enable()
    _, middle, oldest = gc.get_threshold()
    seen = {bench_overhead.gc_phase(pair) for pair in range(1, 200)}
    assert all(0 <= k <= oldest and 0 <= j <= middle for k, j in seen)
    assert {k for k, _ in seen} == set(range(oldest + 1))


def test_bench_collector_runs_each_side_alone(capfd: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``bench_collector``: each side driven alone in a child process of its own, the
    collections of each generation counted there (a full collection is forced in none: at
    this size the counts are the young and middle generations' own)."""
    bench = _bench("collector", "bench_collector")
    fig, out, _ = _run(bench, ["--spans", "1000", "--repeat", "1", "--traffic", "mixed"],
                       capfd, monkeypatch)
    assert fig["traffic"] == "mixed" and fig["graders"] == "one"
    assert [row["side"] for row in fig["rows"]] == ["bare", "tooleval"]
    for row in fig["rows"]:
        young, middle, full = row["collections"]
        assert row["spans"] >= 1000 - 94 and row["cpu_us_per_span"] > 0
        assert young > 0 and middle >= 0 and full >= 0 and 0 <= row["full_cpu_share"] < 1
    assert "each side alone in its own process" in out


@pytest.mark.parametrize(("which", "types"), [("none", []), ("one", ["tool-call-count"])])
def test_bench_overhead_fewer_graders(which: str, types: list[str],
                                      capfd: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("overhead")
    fig, out, _ = _run(bench, ["--calls", "2", *OVERHEAD_TINY, "--graders", which],
                       capfd, monkeypatch)
    assert fig["graders"] == types
    (size,) = fig["sizes"]
    # without graders every run is still collected, summarised and counted (as passed)
    assert size["runs_graded"] == size["runs_expected"] > 0
    assert fig["runs_failed"] == 0 and fig["runs_passed"] >= size["runs_graded"]
    assert size["exported_bare"] == size["exported_tooleval"] == size["spans_sent"]
    if which == "none":
        assert "graders: none;" in out


def test_profile_processor_without_graders(capfd: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("processor", "profile_processor")
    fig, _, _ = _run(bench, ["--calls", "3", "--runs", "2", "--repeat", "1", "--graders",
                             "none", "--no-app"], capfd, monkeypatch)
    stages = fig["stages_us"]
    assert not [name for name in stages if name.startswith("grader ")]
    assert {"members", "run_from (calls)", "annotated root copy", "TOTAL"} <= set(stages)


# -- graders ------------------------------------------------------------------------------------

def test_bench_graders(capfd: pytest.CaptureFixture[str],
                       monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("graders")
    fig, _, argv = _run(bench, ["--sizes", "10,1000", "--repeat", "1", "--lcs", "200"],
                        capfd, monkeypatch)
    assert fig["sizes"] == [10, 1000]
    per_run = fig["ms_per_run"]
    assert set(per_run) == {*bench_graders.FAMILIES, "ALL FAMILIES", "build run"}
    for family, values in per_run.items():   # a figure per family per size
        assert len(values) == 2 and all(math.isfinite(v) and v >= 0 for v in values), family
    assert fig["lcs_calls"] == 200
    assert set(fig["lcs"]) == {"length", "with subsequence"}
    for values in fig["lcs"].values():
        assert 0 < values["lcs"] <= 200
        assert values["peak_mib"] > 0 and math.isfinite(values["memory_growth"])
    rows = _rows("graders", bench, fig, argv, capfd)
    # per size: every family, building the run; per LCS variant: time, memory
    assert len(rows) == 2 * 2 + 2 * 2
    assert rows[2].target == "< 5 ms"   # the 1,000-call run has its target
    _no_missing(rows)


# -- in_order --------------------------------------------------------------------------------

def test_bench_in_order(capfd: pytest.CaptureFixture[str],
                        monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("in-order")
    fig, out, argv = _run(bench, ["--sizes", "60,120", "--before-max", "60", "--repeat", "1"],
                          capfd, monkeypatch)
    assert fig["sizes"] == [60, 120]
    rows = fig["rows"]
    assert [(r["variant"], r["n"]) for r in rows] == [
        ("names", 60), ("names", 120), ("args", 60), ("args", 120)]
    for r in rows:
        assert 0 < r["hits"] <= r["n"] and math.isfinite(r["growth"]) and r["peak_mib"] > 0
        assert ("before_ms" in r) == (r["n"] == 60)
        if r["n"] == 60:
            assert r["same"] is True and math.isfinite(r["ratio"])
    assert "before: not timed" in out
    table = _rows("in-order", bench, fig, argv, capfd)
    assert len(table) == 2 * len(rows)   # per size: before/after (or after), twice the input
    _no_missing(table)


def test_bench_in_order_with_latency_limits(capfd: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("in-order")
    fig, out, _ = _run(bench, ["--limits", "--sizes", "60", "--before-max", "60",
                               "--repeat", "1"], capfd, monkeypatch)
    rows = fig["rows"]
    assert [r["variant"] for r in rows] == ["coding", "coding+pending", "names+limits"]
    for r in rows:
        assert 0 < r["hits"] <= r["n"] and r["same"] is True
        assert math.isfinite(r["after_cpu_ms"]) and math.isfinite(r["growth"])
    assert "us CPU per call" in out


# -- memory -------------------------------------------------------------------------------------

MEMORY_TINY = ["--max-open-runs", "100", "--run-calls", "7", "--spans", "400", "--every", "100",
               "--open-runs", "20", "--calls", "0,1"]


def test_bench_memory(capfd: pytest.CaptureFixture[str],
                      monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("memory")
    fig, out, argv = _run(bench, MEMORY_TINY, capfd, monkeypatch)
    assert "'max_open_runs': 100" in out.splitlines()[0]   # the override, in the header
    # the warm-up filled the tombstone table to its bound, no further
    filled = re.search(r"reached their steady number \(([\d,]+);", out)
    assert filled and filled.group(1) == "100", out
    steady = fig["steady"]
    assert steady["runs"] > 0 and steady["graded"] == steady["runs"]
    assert steady["spans"] >= 400 and steady["drops"] == {}
    assert len(steady["series"]) == 4   # one point per 100 spans
    assert all(p["open_traces"] == 0 for p in steady["series"])
    for key in ("blocks_growth", "rss_growth"):
        assert math.isfinite(steady[key]) and steady[key] > 0, key
    assert steady["traced_growth_bytes"] is not None   # tracemalloc was on (the default)
    opened = fig["open"]
    assert opened["open_runs"] == 20
    assert [r["calls"] for r in opened["rows"]] == [0, 1]
    assert math.isfinite(opened["bytes_per_open_run"])
    assert math.isfinite(opened["bytes_per_buffered_call"])
    rows = _rows("memory", bench, fig, argv, capfd)
    # per open run, per buffered call, net RSS, blocks, tracemalloc: the bench's own summary
    assert len(rows) == len(fig["summary"]) == 5
    _no_missing(rows)


# -- files and serve ----------------------------------------------------------------------------

def _whole_runs(spans: int, per_run: int) -> int:
    """Both inputs are whole agent runs: at least ``spans`` spans."""
    return math.ceil(spans / per_run)


def test_bench_files(capfd: pytest.CaptureFixture[str],
                     monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("files")
    fig, _, argv = _run(bench, ["--spans", "200,400"], capfd, monkeypatch)
    per_run = 1 + bench_files.RUN_CALLS + math.ceil(bench_files.RUN_CALLS
                                                    / bench_files.MODEL_EVERY)
    measured = [(r["spans_in"], r["stage"]) for r in fig["rows"]]
    assert measured == [(n, s) for n in (200, 400) for s in ("parse", "assemble", "grade")]
    for r in fig["rows"]:
        runs = _whole_runs(r["spans_in"], per_run)
        assert r["spans"] == runs * per_run, r    # every span written was read
        assert r["problems"] == 0
        if r["stage"] != "parse":
            assert r["traces"] == runs
        if r["stage"] == "grade":
            assert r["runs"] == runs and r["passed"] <= runs
    assert set(fig["grade_spans_per_s"]) == set(fig["grade_rss_growth_mib"]) == {"200", "400"}
    assert fig["input_ratio"] == 2
    rows = _rows("files", bench, fig, argv, capfd)
    assert len(rows) == 3   # one per size, and the memory growth between them
    # a growth ratio needs the small input to have grown the peak RSS at all
    ratio = fig["memory_growth_ratio"]
    _no_missing(rows, except_prefix=None if math.isfinite(ratio) else "  ... grade's memory")


def test_bench_serve(capfd: pytest.CaptureFixture[str],
                     monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("serve")
    tiny = ["--spans", "200", "--rounds", "3", "--batch", "64", "--decision-wait", "0.1"]
    fig, _, argv = _run(bench, tiny, capfd, monkeypatch)
    per_run = 1 + bench_serve.RUN_CALLS + math.ceil(bench_serve.RUN_CALLS
                                                    / bench_serve.MODEL_EVERY)
    sent = 3 * _whole_runs(200, per_run) * per_run
    assert fig["spans_per_round"] == 200
    assert len(fig["rounds"]) == 3 and len(fig["rss_mib"]) == 3
    assert fig["accepted_spans"] == sent        # every span sent was accepted ...
    assert fig["forwarded_spans"] == sent       # ... and forwarded to the next hop
    assert all(r > 0 for r in fig["rss_mib"])
    rows = _rows("serve", bench, fig, argv, capfd)
    assert len(rows) == 2   # graded throughput, RSS after each round
    _no_missing(rows)


def test_bench_grade_memory(capfd: pytest.CaptureFixture[str],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("grade-memory")
    fig, _, argv = _run(bench, ["--runs", "40,120", "--formats", "table,junit"],
                          capfd, monkeypatch)
    assert fig["sizes"] == [40, 120] and fig["formats"] == ["table", "junit"]
    assert [(r["runs"], r["format"]) for r in fig["rows"]] == [
        (n, f) for n in (40, 120) for f in ("table", "junit")]
    for r in fig["rows"]:
        # every run graded and written: one in eleven fails its sequence, so grade exits 1
        assert r["exit"] == 1, r["stderr"]
        assert r["peak_rss_mib"] > 0 and r["output_mib"] > 0
    assert set(fig["rss_ratio"]) == {"table", "junit"}
    rows = _rows("grade-memory", bench, fig, argv, capfd)
    assert len(rows) == 4    # per format: the RSS ratio (no target: both sizes are tiny), runs/s
    assert all(row.met is None for row in rows)
    assert bench_grade_memory.SPANS_PER_RUN * 120 < bench_grade_memory.WINDOW_SPANS
    _no_missing(rows)


# -- scripts run_all does not run ---------------------------------------------------------------

def test_bench_hooks(capfd: pytest.CaptureFixture[str],
                     monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("hooks", "bench_hooks")
    fig, _, argv = _run(bench, ["--calls", "3,10", "--spans", "60", "--repeats", "1"],
                        capfd, monkeypatch)
    assert set(fig) == {"3", "10"}   # JSON keys: the run sizes
    for figures in fig.values():
        assert set(figures) == {"null", "forward", "tooleval"}
        assert all(math.isfinite(v) and v > 0 for v in figures.values())
    rows = _rows("hooks", bench, fig, argv, capfd)
    assert len(rows) == 6
    _no_missing(rows)


def test_bench_hooks_counts_bytecodes_and_replays_cold(
        capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("hooks", "bench_hooks")
    fig, out, _ = _run(bench, ["--calls", "10", "--spans", "60", "--opcodes"], capfd,
                       monkeypatch)
    counted = fig["10"]
    # per span: the replay loop alone (null), one frame more per hook, then the tracking
    assert 0 < counted["null"] < counted["forward"] < counted["tooleval"]
    assert "bytecodes executed per span" in out
    fig, out, _ = _run(bench, ["--calls", "10", "--spans", "60", "--repeats", "1", "--cold"],
                       capfd, monkeypatch)
    assert set(fig["10"]) == {"null", "forward", "tooleval"}
    assert all(math.isfinite(v) and v > 0 for v in fig["10"].values())
    assert "cold: an SDK span before every event" in out


def test_bench_overhead_counts_bytecodes(capfd: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("overhead-opcodes", "bench_overhead")
    fig, out, _ = _run(bench, ["--opcodes", "--calls", "3", "--graders", "none"], capfd,
                       monkeypatch)
    (row,) = fig["opcodes"]
    assert row["calls"] == 3
    assert 0 < row["bare_opcodes"] < row["tooleval_opcodes"]
    assert row["opcode_ratio"] == pytest.approx(row["tooleval_opcodes"] / row["bare_opcodes"])
    assert "bytecodes per span, application thread" in out


def test_profile_app_thread(capfd: pytest.CaptureFixture[str],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("app-thread", "profile_app_thread")
    fig, out, _ = _run(bench, ["--calls", "3", "--spans", "40", "--rounds", "1"], capfd,
                       monkeypatch)
    assert set(fig) == {"bare", "forward", "tooleval", "held"}
    assert fig["bare"]["ratio"] == 1.0
    for figures in fig.values():
        assert figures["cpu_us"] > 0 and figures["gc_us"] >= 0 and figures["ratio"] > 0
    assert "collections gen0/gen1/gen2" in out
    fig, out, _ = _run(bench, ["--traffic", "web", "--spans", "40", "--rounds", "1"], capfd,
                       monkeypatch)
    assert set(fig) == {"bare", "forward", "tooleval", "held"}
    assert out.startswith("web traffic") or "\nweb traffic" in out


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_profile_grading_side(mode: str, capfd: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("grading-side", "profile_grading_side")
    fig, _, argv = _run(bench, ["--grading", mode, "--calls", "3", "--spans", "60"],
                        capfd, monkeypatch)
    assert {"process_us_per_run", "app_thread_us_per_run", "other_threads_us_per_run",
            "_grade_and_forward", "_emit"} <= set(fig)
    # the steps of the grading process ran only when runs went to it
    in_process = {"submit", "flush", "read_frame", "_finish_verdict"}
    if mode == "process":
        assert in_process <= set(fig)
    else:
        assert not in_process & set(fig)
    rows = _rows("grading-side", bench, fig, argv, capfd)
    assert len(rows) == len(fig)
    _no_missing(rows)


def test_profile_processor(capfd: pytest.CaptureFixture[str],
                           monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("processor", "profile_processor")
    fig, _, argv = _run(bench, ["--calls", "3", "--runs", "2", "--repeat", "1"],
                        capfd, monkeypatch)
    stages = fig["stages_us"]
    graders = {f"grader {g.get('type') or g.get('kind')}" for g in EVERY_FAMILY["graders"]}
    assert graders <= set(stages)
    assert {"members", "run_from (calls)", "annotated root copy", "TOTAL"} <= set(stages)
    assert fig["grading_us_per_run"] == stages["TOTAL"]
    assert len(fig["app_us_per_span"]) == 4 and math.isfinite(fig["hooks_us_per_span"])
    rows = _rows("processor", bench, fig, argv, capfd)
    _no_missing(rows)


def test_bench_forward(capfd: pytest.CaptureFixture[str],
                       monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("forward", "bench_forward")
    fig, out, _ = _run(bench, ["--requests", "30", "--kib", "1", "--latency-ms", "1",
                               "--workers", "1,3"], capfd, monkeypatch)
    assert set(fig["requests_per_s"]) == set(fig["ratio"]) == {"1", "3"}
    assert fig["ratio"]["1"] == 1.0 and all(v > 0 for v in fig["requests_per_s"].values())
    assert "requests/s" in out


def test_bench_uipath_shapes(capfd: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("uipath-shapes", "bench_uipath_shapes")
    fig, out, _ = _run(bench, ["--sizes", "30,60", "--repeat", "1"], capfd, monkeypatch)
    assert fig["sizes"] == [30, 60]
    assert set(fig["families"]) == {"args", "args subset", "output", "args alike"}
    for row in fig["families"].values():
        assert len(row["ms"]) == 2 and all(ms > 0 for ms in row["ms"])
        assert all(0 < s < 1 for s in row["score"])    # some entries perturbed, most paired
    assert "us/call growth" in out


def test_bench_peers_without_peers(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """No peer installed: every cell says so, ours is still measured and scored. The peers
    themselves (their workers, agreement, targets) are covered in test_bench_peers.py."""
    bench = _bench("peers", "bench_peers")
    fig, out, _ = _run(bench, ["--sizes", "3,12", "--repeat", "2", "--min-time", "0",
                               "--min-samples", "0",
                               "--peers-dir", str(tmp_path / "none")], capfd, monkeypatch)
    assert fig["sizes"] == [3, 12]
    # agentv's steps on CPython need nothing installed: that reference side is measured
    reference = fig["peers"].pop("agentv-py")
    assert reference.startswith("CPython ")
    assert set(fig["peers"].values()) == {bench_peers.INSTALL_HINT}
    assert [(c["family"], c["peer"], c["calls"]) for c in fig["cells"]] == [
        (family, peer, n) for n in (3, 12) for family, peer in bench_peers.FAMILIES]
    for cell in fig["cells"]:
        if cell["peer"] == "agentv-py":
            assert cell["peer_status"] == "" and cell["peer_ms"] > 0
            assert cell["agreement"] == "agree" or cell["agreement"].startswith("differs (")
        else:
            assert cell["peer_status"] == bench_peers.INSTALL_HINT and cell["peer_ms"] is None
            assert cell["agreement"] == ""
        assert cell["ours_ms"] > 0 and 0.0 <= cell["ours_score"] <= 1.0
        assert cell["samples"] == 2
        assert cell["clock"] == "cpu" and cell["ours_other_ms"] > 0     # wall time kept too
        low, high = cell["ours_iqr"]
        assert low <= cell["ours_ms"] <= high
    installed = sum(1 for c in fig["cells"] if c["peer"] == "agentv-py")
    assert out.count(bench_peers.INSTALL_HINT) >= len(fig["cells"]) - installed
    # sizes 1,000 and 10,000 not measured, no peer figure: nothing can PASS or MISS
    assert {t["status"] for t in fig["targets"]} == {"n/a"}
    assert "TARGETS" in out


def test_bench_fixed_cost(capfd: pytest.CaptureFixture[str],
                          monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench("fixed-cost", "bench_fixed_cost")
    fig, out, _ = _run(bench, ["--sizes", "3,20", "--repeat", "1"], capfd, monkeypatch)
    assert fig["sizes"] == [3, 20]
    table = fig["us_per_call"]
    assert {"tool_trajectory any_order", "tool_trajectory exact", "tool_trajectory in_order",
            "tool exact_match (letta)", "tool-call-args", "tool-call-output"} <= set(table)
    assert all(len(v) == 2 and all(x > 0 for x in v) for v in table.values())
    assert "tool_trajectory exact" in out
    fig, _, _ = _run(bench, ["--sizes", "5", "--repeat", "1", "--families", "tool-call-c",
                             "--clock", "wall"], capfd, monkeypatch)
    assert set(fig["us_per_call"]) == {"tool-call-count"}


# -- every script is covered --------------------------------------------------------------------

COVERED_MODULES = {"bench_overhead", "bench_graders", "bench_in_order", "bench_memory",
                   "bench_files", "bench_serve", "bench_hooks", "profile_grading_side",
                   "profile_processor", "bench_forward", "bench_grade_memory",
                   "bench_peers", "peer_trajectories", "bench_fixed_cost", "bench_uipath_shapes",
                   "profile_app_thread", "bench_collector",
                   "bench_cases"}   # smoke-tested in tests/test_cases.py


def test_every_bench_has_a_smoke_test() -> None:
    scripts = {p.stem for p in BENCH_DIR.glob("*.py")} - {"__init__", "run_all"}
    assert scripts == COVERED_MODULES
    assert set(BENCHES) == {"overhead", "overhead-process", "overhead-web", "overhead-mixed",
                            "graders", "in-order", "memory", "files", "serve", "grade-memory"}
    # memory and grade-memory: their own summary
    assert set(BENCHES) <= set(run_all.ROWS) | {"memory", "grade-memory"}
