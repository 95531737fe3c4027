"""Our graders side by side with the tools they come from, on the same trajectories (issue 19).

A standalone script, not a pytest test::

    bash tests/bench/install_peers.sh            # once: agentv, uipath, letta-evals
    python tests/bench/bench_peers.py [--sizes 10,100,1000,10000] [--repeat 7]
        [--peers-dir .bench-peers] [--peer-timeout 120] [--budget 20] [--skip-slow]
        [--families trajectory,order,count,args,output,letta]

Each peer runs in its own environment (install_peers.sh puts them under ``.bench-peers/``) as
a worker process (tests/bench/peer_workers/) that receives the same run and configs as we do
(tests/bench/peer_trajectories.py: a coding agent's mix of six tools, an expected list as long
as the run with full ``args`` and a ``max_duration_ms``, about 5% of it perturbed) and times
only its grading call. Ours is timed the same way: ``grader.grade(run)`` on a fresh run (built
from span records beforehand, so argument decoding is paid, as the peers pay theirs). Ours and
theirs alternate, one sample each per repeat; the medians are printed per family and size, with
the ratio (peer / ours: above 1, we are faster) and whether the scores (and pass verdicts,
where the peer has a pass mark) agree. A disagreement explained by a documented flaw of the
peer (docs/differences.md) says so; any other reads DIFFERS.

A peer that is not installed is reported as such and ours is still measured. A grading call
that runs past ``--peer-timeout`` seconds reads ``timeout`` (its worker is killed and started
again for the next family). ``--budget`` caps the seconds spent on one family and size (at
least one sample each); ``--skip-slow`` leaves out the peers' known multi-minute cells (the
UiPath SDK's LCS table and argument matching above 1,000 calls).

Last, a TARGETS block checks issue 19's targets, PASS or MISS with the figure. ``main(argv)``
returns the figures as a dict.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# peer_trajectories sits beside this file: on the path already when run as a script, appended
# (after everything else) when imported as tests.bench.bench_peers.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parent))

import peer_trajectories

from otel_tooleval import load_config
from otel_tooleval.model import AgentRun, GradeResult, SpanRecord
from otel_tooleval.trajectory import RunPolicy, build_run

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
WORKERS = HERE / "peer_workers"
INSTALL_HINT = "not installed (run tests/bench/install_peers.sh)"

#: (family, peer), in the order of the table.
FAMILIES: tuple[tuple[str, str], ...] = (
    ("trajectory any_order", "agentv"),
    ("trajectory in_order", "agentv"),
    ("trajectory exact", "agentv"),
    ("order lcs", "uipath"),
    ("order strict", "uipath"),
    ("count", "uipath"),
    ("args", "uipath"),
    ("output", "uipath"),
    ("letta exact_match", "letta-evals"),
    ("letta contains", "letta-evals"),
    ("letta regex_match", "letta-evals"),
    ("letta ascii_printable_only", "letta-evals"),
)

#: Where a score may legitimately differ: the peer's documented flaw (docs/differences.md).
KNOWN_FLAWS = {
    "trajectory in_order": "agentv's greedy scan: a missing or args-mismatched entry "
                           "consumes the trace",
    "trajectory exact": "agentv's exact leaves extra calls out of the score",
}

#: Peer cells that take minutes (--skip-slow): the SDK's full LCS table, its args matching.
SLOW = {("order lcs", "uipath"), ("args", "uipath")}
SLOW_ABOVE = 1_000

#: agentv's default pass mark (its DEFAULT_THRESHOLD); ours is set to it for the comparison.
AGENTV_THRESHOLD = 0.8


# -- our side ----------------------------------------------------------------------------------

def our_entry(family: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """The neutral config of ``family`` as our graders' config entry."""
    if family.startswith("trajectory "):
        entry: dict[str, Any] = {"type": "tool_trajectory", "mode": cfg["mode"],
                                 "threshold": AGENTV_THRESHOLD}
        if "minimums" in cfg:
            entry["minimums"] = cfg["minimums"]
        else:
            entry["expected"] = cfg["expected"]
        return entry
    if family.startswith("order "):
        return {"type": "tool-call-order", "strict": cfg["strict"],
                "tool_calls_order": cfg["tool_calls_order"]}
    if family == "count":
        return {"type": "tool-call-count", "tool_calls_count": cfg["tool_calls_count"]}
    if family == "args":
        return {"type": "tool-call-args", "tool_calls": cfg["tool_calls"]}
    if family == "output":
        return {"type": "tool-call-output", "tool_outputs": cfg["tool_outputs"]}
    if family.startswith("letta "):
        entry = {"kind": "tool", "function": cfg["function"], "extractor": "tool_arguments",
                 "extractor_config": {"tool_name": cfg["tool_name"], "occurrence": "first"}}
        if cfg["ground_truth"] is not None:
            entry["ground_truth"] = cfg["ground_truth"]
        return entry
    raise ValueError(f"unknown family {family}")


def span_records(calls: list[dict[str, Any]]) -> list[SpanRecord]:
    """The run as the spans an instrumented agent would record (root first)."""
    ms = 1_000_000
    end = (calls[-1]["start_ms"] + calls[-1]["duration_ms"] + 1) * ms if calls else ms
    out = [SpanRecord(1, 1, 0, "invoke_agent bench", 0, end,
                      {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench"})]
    for i, call in enumerate(calls):
        start = call["start_ms"] * ms
        out.append(SpanRecord(1, i + 2, 1, f"execute_tool {call['name']}", start,
                              start + call["duration_ms"] * ms, {
                                  "gen_ai.operation.name": "execute_tool",
                                  "gen_ai.tool.name": call["name"],
                                  "gen_ai.tool.call.arguments": json.dumps(call["args"]),
                                  "gen_ai.tool.call.result": json.dumps(call["result"])}))
    return out


def fresh_run(recs: list[SpanRecord]) -> AgentRun:
    return build_run(recs[0], recs[1:], RunPolicy(max_calls_per_run=10**6))


# -- the peers' side ---------------------------------------------------------------------------

class PeerTimeout(Exception):
    pass


class PeerError(Exception):
    pass


@dataclass
class Worker:
    """One peer's worker process; speaks peer_workers/_protocol.py's line protocol."""

    name: str
    argv: list[str]
    prefix: tuple[str, ...]
    proc: subprocess.Popen[bytes] | None = None
    version: str = ""
    loaded: bytes = b""
    _buffer: bytes = b""
    _stderr: Any = None
    _workdir: str = ""
    _loaded_in_proc: bool = False
    notes: list[str] = field(default_factory=list)

    def start(self) -> None:
        self._workdir = self._workdir or tempfile.mkdtemp(prefix=f"bench-peer-{self.name}-")
        env = {k: v for k, v in os.environ.items()
               if k in ("PATH", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")}
        env.update({"HOME": self._workdir, "NO_PROXY": "*", "no_proxy": "*",
                    "UIPATH_TELEMETRY_ENABLED": "false", "DO_NOT_TRACK": "1"})
        if self._stderr is not None:
            self._stderr.close()
        # Kept open while the worker lives (its tail goes into error reports); closed in stop().
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, cwd=self._workdir, env=env)
        self._buffer = b""
        self._loaded_in_proc = False

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.stdin:
                proc.stdin.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        text: bytes = self._stderr.read()
        return text.decode("utf-8", "replace")[-2000:]

    def load(self, calls: list[dict[str, Any]], configs: dict[str, Any],
             timeout: float) -> None:
        mine = {k: v for k, v in configs.items() if k.startswith(self.prefix)}
        self.loaded = json.dumps({"op": "load", "calls": calls, "configs": mine}).encode()
        self._loaded_in_proc = False
        self._ensure_loaded(timeout)

    def _ensure_loaded(self, timeout: float) -> None:
        if self.proc is None:
            self.start()
        if not self._loaded_in_proc:
            answer = self._request(self.loaded, timeout)
            self.version = str(answer.get("version", ""))
            self._loaded_in_proc = True

    def grade(self, family: str, timeout: float) -> dict[str, Any]:
        self._ensure_loaded(max(timeout, 60.0))
        return self._request(json.dumps({"op": "grade", "family": family}).encode(), timeout)

    def _request(self, payload: bytes, timeout: float) -> dict[str, Any]:
        proc = self.proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        deadline = time.monotonic() + timeout
        try:
            proc.stdin.write(payload + b"\n")
            proc.stdin.flush()
        except BrokenPipeError as exc:
            self.kill()
            raise PeerError(f"{self.name} worker exited:\n{self.stderr_tail()}") from exc
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                while b"\n" in self._buffer:
                    line, self._buffer = self._buffer.split(b"\n", 1)
                    if line.startswith(b"@@peer "):
                        answer: dict[str, Any] = json.loads(line[7:])
                        if "error" in answer:
                            raise PeerError(f"{self.name}: {answer['error']}")
                        return answer
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not sel.select(remaining):
                    self.kill()
                    raise PeerTimeout(self.name)
                data = os.read(fd, 1 << 16)
                if not data:
                    self.kill()
                    raise PeerError(f"{self.name} worker exited:\n{self.stderr_tail()}")
                self._buffer += data


def find_workers(peers_dir: Path) -> dict[str, Worker | str]:
    """Each peer's worker, or why there is none."""
    out: dict[str, Worker | str] = {}
    node = shutil.which("node")
    agentv = peers_dir / "agentv" / "node_modules" / "agentv" / "package.json"
    if not agentv.is_file():
        out["agentv"] = INSTALL_HINT
    elif node is None:
        out["agentv"] = "node not found"
    else:
        out["agentv"] = Worker("agentv", [node, str(WORKERS / "agentv_worker.mjs"),
                                          str(peers_dir / "agentv")], ("trajectory ",))
    for name, script, prefix in (("uipath", "uipath_worker.py", ("order ", "count", "args",
                                                                  "output")),
                                 ("letta-evals", "letta_worker.py", ("letta ",))):
        python = peers_dir / name / "bin" / "python"
        out[name] = (Worker(name, [str(python), str(WORKERS / script)], prefix)
                     if python.is_file() else INSTALL_HINT)
    return out


# -- measuring ---------------------------------------------------------------------------------

@dataclass
class Cell:
    family: str
    peer: str
    calls: int
    ours_ms: float
    ours_score: float
    ours_passed: bool
    peer_ms: float | None = None
    peer_score: float | None = None
    peer_passed: bool | None = None
    peer_status: str = ""
    samples: int = 0
    agreement: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _ours_once(grader: Any, recs: list[SpanRecord]) -> tuple[float, GradeResult]:
    run = fresh_run(recs)
    t0 = time.perf_counter()
    result = grader.grade(run)
    return (time.perf_counter() - t0) * 1000, result


def _agreement(cell: Cell) -> str:
    if cell.peer_score is None:
        return ""
    same_score = abs(cell.peer_score - cell.ours_score) < 1e-9
    same_pass = cell.peer_passed is None or cell.peer_passed == cell.ours_passed
    if same_score and same_pass:
        return "agree"
    what = (f"score {cell.ours_score:.4g} vs {cell.peer_score:.4g}" if not same_score
            else f"passed {cell.ours_passed} vs {cell.peer_passed}")
    flaw = KNOWN_FLAWS.get(cell.family)
    return f"differs ({what}; known: {flaw})" if flaw else f"DIFFERS ({what})"


def measure(n: int, workers: dict[str, Worker | str], families: Sequence[tuple[str, str]],
            opts: argparse.Namespace) -> list[Cell]:
    workload = peer_trajectories.workload(n)
    calls, configs = workload["calls"], workload["configs"]
    recs = span_records(calls)
    loaded: dict[str, str] = {}
    for peer in {p for _, p in families}:
        worker = workers[peer]
        if isinstance(worker, str):
            loaded[peer] = worker
            continue
        try:
            worker.load(calls, configs, max(opts.peer_timeout, 60.0))
            loaded[peer] = ""
        except (PeerTimeout, PeerError) as exc:
            loaded[peer] = f"load failed: {str(exc).splitlines()[0]}"
            worker.notes.append(str(exc))
    cells = []
    for family, peer in families:
        grader = load_config({"graders": [{"name": family.replace(" ", "-"),
                                           **our_entry(family, configs[family])}]}
                             ).graders[0].grader
        worker = workers[peer]
        status = loaded[peer]
        if not status and opts.skip_slow and (family, peer) in SLOW and n > SLOW_ABOVE:
            status = "skipped (--skip-slow)"
        use_peer = not status and isinstance(worker, Worker)
        ours: list[float] = []
        theirs: list[float] = []
        result: GradeResult | None = None
        answer: dict[str, Any] = {}
        if n <= 1_000:      # warm-up, untimed: imports, caches, the peer's JIT
            _ours_once(grader, recs)
            if use_peer and isinstance(worker, Worker):
                try:
                    worker.grade(family, opts.peer_timeout)
                except PeerTimeout:
                    status, use_peer = "timeout", False
                except PeerError as exc:
                    status, use_peer = f"error: {str(exc).splitlines()[0]}", False
                    worker.notes.append(str(exc))
        spent = 0.0
        for r in range(opts.repeat):
            sides = ("ours", "peer") if r % 2 == 0 else ("peer", "ours")
            for side in sides:
                if side == "ours":
                    ms, result = _ours_once(grader, recs)
                    ours.append(ms)
                    spent += ms / 1000
                elif use_peer and isinstance(worker, Worker):
                    try:
                        answer = worker.grade(family, opts.peer_timeout)
                    except PeerTimeout:
                        status, use_peer = "timeout", False
                        continue
                    except PeerError as exc:
                        status, use_peer = f"error: {str(exc).splitlines()[0]}", False
                        worker.notes.append(str(exc))
                        continue
                    theirs.append(float(answer["ms"]))
                    spent += float(answer["ms"]) / 1000
            if spent > opts.budget:
                break
        assert result is not None
        cell = Cell(family, peer, n, statistics.median(ours), result.score, result.passed,
                    samples=len(ours), peer_status=status)
        if theirs:
            cell.peer_ms = statistics.median(theirs)
            cell.peer_score = float(answer["score"])
            cell.peer_passed = answer.get("passed")
        cell.agreement = _agreement(cell)
        cells.append(cell)
        print(_row(cell), flush=True)
    return cells


def _row(cell: Cell) -> str:
    if cell.peer_ms is not None:
        theirs = f"{cell.peer_ms:>11.3f}"
        ratio = (f"{_ratio(cell.peer_ms / cell.ours_ms):>10}x" if cell.ours_ms
                 else f"{'-':>11}")
        tail = cell.agreement
    else:
        theirs, ratio, tail = f"{'-':>11}", f"{'-':>11}", cell.peer_status
    return (f"{cell.family:<27}{cell.peer:<12}{cell.calls:>7,}{cell.ours_ms:>11.3f}"
            f"{theirs}{ratio}  {tail}")


def _ratio(value: float) -> str:
    """Two decimals, or three significant digits below 0.1 (so that 0.004 does not read 0)."""
    return f"{value:.2f}" if value >= 0.1 else f"{value:.3g}"


HEADER = (f"{'family':<27}{'peer':<12}{'calls':>7}{'ours ms':>11}{'peer ms':>11}"
          f"{'peer/ours':>11}  scores")


# -- targets -----------------------------------------------------------------------------------

def targets(cells: list[Cell]) -> list[dict[str, Any]]:
    """Issue 19's targets, each PASS, MISS or n/a (a size or peer figure not measured)."""
    by = {(c.family, c.calls): c for c in cells}
    families = list(dict.fromkeys(c.family for c in cells))
    out: list[dict[str, Any]] = []

    def add(name: str, ok: bool | None, figure: str) -> None:
        out.append({"target": name, "status": "n/a" if ok is None else
                    ("PASS" if ok else "MISS"), "figure": figure})

    measured = {c.calls for c in cells}
    for n, limit in ((1_000, 10.0), (10_000, 100.0)):
        if n not in measured:
            add(f"every family at {n:,} calls under {limit:g} ms", None,
                f"size {n:,} not measured (--sizes)")
            continue
        for family in families:
            cell = by.get((family, n))
            add(f"{family} at {n:,} calls under {limit:g} ms",
                None if cell is None else cell.ours_ms < limit,
                "not measured" if cell is None else f"{cell.ours_ms:.3f} ms")
    for family in ("trajectory in_order", "args", "output"):
        small, big = by.get((family, 1_000)), by.get((family, 10_000))
        if small is None or big is None or not small.ours_ms:
            add(f"{family} sub-quadratic (per call, 10,000 vs 1,000, within 2x)", None,
                "needs sizes 1000 and 10000")
            continue
        growth = (big.ours_ms / 10_000) / (small.ours_ms / 1_000)
        add(f"{family} sub-quadratic (per call, 10,000 vs 1,000, within 2x)", growth <= 2.0,
            f"{growth:.2f}x ({small.ours_ms:.3f} ms -> {big.ours_ms:.3f} ms)")
    for family in families:
        compared = [c for c in cells if c.family == family and c.calls >= 100
                    and c.peer_ms is not None]
        if not compared:
            add(f"{family} no slower than its peer at 100 calls and up", None,
                "no peer figure")
            continue
        worst = max(compared, key=lambda c: c.ours_ms / (c.peer_ms or 1e-12))
        slower = [c for c in compared if c.ours_ms > (c.peer_ms or 0.0)]
        add(f"{family} no slower than its peer at 100 calls and up", not slower,
            f"worst ours/peer {worst.ours_ms / (worst.peer_ms or 1e-12):.2f} "
            f"at {worst.calls:,} calls"
            + (f"; slower at {', '.join(f'{c.calls:,}' for c in slower)}" if slower else ""))
    for family in families:
        cell = by.get((family, 10))
        if cell is None or cell.peer_ms is None:
            add(f"{family} fixed cost at 10 calls within 1.5x of its peer", None,
                "no peer figure at 10 calls")
            continue
        ratio = cell.ours_ms / cell.peer_ms if cell.peer_ms else float("inf")
        add(f"{family} fixed cost at 10 calls within 1.5x of its peer", ratio <= 1.5,
            f"ours/peer {ratio:.2f} ({cell.ours_ms:.4f} vs {cell.peer_ms:.4f} ms)")
    return out


def markdown(cells: list[Cell], sizes: Sequence[int]) -> str:
    """The figures as one Markdown table: a row per family, ``ours / peer`` ms per size."""
    by = {(c.family, c.calls): c for c in cells}
    families = list(dict.fromkeys((c.family, c.peer) for c in cells))
    lines = ["| family (peer) | " + " | ".join(f"{n:,} calls" for n in sizes) + " |",
             "|---|" + "---|" * len(sizes)]
    for family, peer in families:
        row = []
        for n in sizes:
            cell = by.get((family, n))
            if cell is None:
                row.append("")
                continue
            theirs = (_short(cell.peer_ms) if cell.peer_ms is not None
                      else cell.peer_status.split(" (")[0])
            mark = (" ¹" if cell.agreement.startswith("differs")
                    else " (scores DIFFER)" if cell.agreement.startswith("DIFFERS") else "")
            row.append(f"{_short(cell.ours_ms)} / {theirs}{mark}")
        lines.append(f"| {family} ({peer}) | " + " | ".join(row) + " |")
    if any(c.agreement.startswith("differs") for c in cells):
        lines.append("")
        lines.append("¹ the scores differ: a documented flaw of the peer (docs/differences.md).")
    return "\n".join(lines)


def _short(ms: float) -> str:
    """Three significant digits, thousands separated."""
    if ms >= 100:
        return f"{ms:,.0f}"
    return f"{ms:.3g}"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100,1000,10000")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--peers-dir", default=str(ROOT / ".bench-peers"))
    parser.add_argument("--peer-timeout", type=float, default=120.0,
                        help="seconds one peer grading call may take (120)")
    parser.add_argument("--budget", type=float, default=20.0,
                        help="seconds of grading per family and size before repeats stop (20)")
    parser.add_argument("--skip-slow", action="store_true",
                        help="leave out the UiPath SDK's LCS and args above 1,000 calls")
    parser.add_argument("--families", default="",
                        help="comma-separated prefixes (trajectory,order,count,args,output,"
                             "letta); all by default")
    parser.add_argument("--markdown", action="store_true",
                        help="also print the table as Markdown (README's performance table)")
    opts = parser.parse_args(argv)
    sizes = [int(s) for s in opts.sizes.split(",")]
    prefixes = tuple(p.strip() for p in opts.families.split(",") if p.strip())
    families = [f for f in FAMILIES if not prefixes or f[0].startswith(prefixes)]
    workers = find_workers(Path(opts.peers_dir))
    print(f"python {sys.version.split()[0]}; peers under {opts.peers_dir}")
    cells: list[Cell] = []
    try:
        for n in sizes:
            print(f"\n{n:,} calls per run ({opts.repeat} alternated samples at most, "
                  f"{opts.budget:g} s per cell; ms per grading call, median)")
            print(HEADER)
            print("-" * len(HEADER))
            cells.extend(measure(n, workers, families, opts))
    finally:
        for worker in workers.values():
            if isinstance(worker, Worker):
                worker.stop()
    used = {peer for _, peer in families}
    versions = {name: (w.version or "?") if isinstance(w, Worker) else w
                for name, w in workers.items() if name in used}
    print("\npeers: " + "; ".join(f"{name} {v}" for name, v in versions.items()))
    checks = targets(cells)
    print("\nTARGETS")
    for check in checks:
        print(f"  {check['status']:<5} {check['target']}: {check['figure']}")
    if opts.markdown:
        print("\n" + markdown(cells, sizes))
    return {"sizes": sizes, "peers": versions, "cells": [c.as_dict() for c in cells],
            "targets": checks}


if __name__ == "__main__":
    main()
