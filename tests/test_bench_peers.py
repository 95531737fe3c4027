"""tests/bench/bench_peers.py's parts that hold on any machine, peers installed or not: the
shared workload, the worker protocol (answers, errors, the timeout that must not hang), the
agreement labels and the TARGETS logic. Nothing here is timed."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval import load_config
from tests.bench import bench_peers, peer_trajectories

# -- the workload -------------------------------------------------------------------------------

def test_trajectories_are_seeded_and_shaped() -> None:
    calls = peer_trajectories.trajectory(2_000)
    assert calls == peer_trajectories.trajectory(2_000)           # deterministic
    assert calls != peer_trajectories.trajectory(2_000, seed=20)
    assert len(calls) == 2_000
    assert {c["name"] for c in calls} == set(peer_trajectories.TOOLS)
    assert all(1 <= c["duration_ms"] <= 200 for c in calls)
    starts = [c["start_ms"] for c in calls]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    # argument values repeat (n/4 indices per tool), but not all alike
    distinct = {peer_trajectories.compact([c["name"], c["args"]]) for c in calls}
    assert 2_000 // 4 < len(distinct) < 2_000


def test_expected_list_is_the_run_edited() -> None:
    calls = peer_trajectories.trajectory(10_000)
    entries = peer_trajectories.expected(calls)
    assert entries == peer_trajectories.expected(calls)
    assert all(e["max_duration_ms"] == peer_trajectories.MAX_DURATION_MS for e in entries)
    assert abs(len(entries) - len(calls)) < 0.01 * len(calls)
    as_calls = Counter(peer_trajectories.compact([c["name"], c["args"]]) for c in calls)
    foreign = sum(1 for e in entries
                  if peer_trajectories.compact([e["tool"], e["args"]]) not in as_calls)
    # perturbed (5%, most of them to values no call has) and inserted (1%) entries
    assert 0.03 * len(entries) < foreign < 0.08 * len(entries)


def test_family_configs_cover_every_family() -> None:
    work = peer_trajectories.workload(50)
    configs = work["configs"]
    assert set(configs) == {family for family, _ in bench_peers.FAMILIES}
    calls = work["calls"]
    letta = configs["letta exact_match"]
    first = next(c for c in calls if c["name"] == letta["tool_name"])
    assert letta["ground_truth"] == json.dumps(first["args"])
    # the tool whose first call comes last
    firsts = {c["name"]: i for i, c in reversed(list(enumerate(calls)))}
    assert firsts[letta["tool_name"]] == max(firsts.values())
    assert peer_trajectories.output_text({"content": "x"}) == "x"
    assert peer_trajectories.output_text({"ok": True}) == '{"ok":true}'
    assert peer_trajectories.output_text("a\nb") == "a\nb"


def test_our_side_grades_every_family() -> None:
    work = peer_trajectories.workload(40)
    recs = bench_peers.span_records(work["calls"])
    assert len(recs) == 41 and recs[0].is_local_root
    for family, _peer in bench_peers.FAMILIES:
        entry = bench_peers.our_entry(family, work["configs"][family])
        grader = load_config({"graders": [{"name": "g", **entry}]}).graders[0].grader
        result = grader.grade(bench_peers.fresh_run(recs))
        assert result.error is None and 0.0 <= result.score <= 1.0, (family, result)
    # the letta functions are given what the run's call recorded: they pass
    for family in ("letta exact_match", "letta contains", "letta regex_match",
                   "letta ascii_printable_only"):
        entry = bench_peers.our_entry(family, work["configs"][family])
        grader = load_config({"graders": [{"name": "g", **entry}]}).graders[0].grader
        assert grader.grade(bench_peers.fresh_run(recs)).score == 1.0, family


# -- the worker protocol ------------------------------------------------------------------------

FAKE_PEER = """
import gc, sys, time
sys.path.insert(0, {workers!r})
from _protocol import serve

def load(calls, configs):
    print("noise a peer prints on stdout")
    def fast():
        return float(len(calls)) / 100, True
    def slow():
        time.sleep(60)
        return 0.0, None
    def broken():
        raise ValueError("the peer rejected its config")
    prepared = []
    def fresh():
        return float(len(prepared)), None
    def prepare():
        time.sleep(0.3)
        prepared.append(1)
    fresh.prepare = prepare
    def collector():
        return float(gc.isenabled()), None
    def spin():
        end = time.thread_time() + 0.05
        while time.thread_time() < end:
            pass
        time.sleep(0.2)
        return 1.0, None
    return {{"count": fast, "args": slow, "output": broken, "fresh": fresh,
             "collector": collector, "spin": spin}}

serve("9.9", load)
"""


@pytest.fixture
def fake_worker(tmp_path: Path) -> Iterator[bench_peers.Worker]:
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_PEER.format(workers=str(bench_peers.WORKERS)))
    worker = bench_peers.Worker("fake", [sys.executable, str(script)],
                                ("count", "args", "output"))
    yield worker
    worker.stop()


def test_worker_answers_times_out_and_restarts(fake_worker: bench_peers.Worker) -> None:
    calls = peer_trajectories.trajectory(25)
    fake_worker.load(calls, {"count": {}, "args": {}, "output": {}, "letta x": {}}, 30)
    assert fake_worker.version == "9.9"
    answer = fake_worker.grade("count", 30)
    assert answer["score"] == 0.25 and answer["passed"] is True and answer["ms"] >= 0
    first = fake_worker.proc
    t0 = time.monotonic()
    with pytest.raises(bench_peers.PeerTimeout):
        fake_worker.grade("args", 0.5)
    assert time.monotonic() - t0 < 20          # killed at the timeout, not after the sleep
    assert fake_worker.proc is None and first is not None and first.poll() is not None
    # the next request starts a new worker and loads the same run into it
    assert fake_worker.grade("count", 30)["score"] == 0.25
    assert fake_worker.proc is not None and fake_worker.proc is not first
    with pytest.raises(bench_peers.PeerError, match="rejected its config"):
        fake_worker.grade("output", 30)
    with pytest.raises(bench_peers.PeerError, match="no grader for nothing"):
        fake_worker.grade("nothing", 30)
    # a grading callable's prepare runs before every timed call, outside the timing
    first_fresh = fake_worker.grade("fresh", 30)
    second_fresh = fake_worker.grade("fresh", 30)
    assert (first_fresh["score"], second_fresh["score"]) == (1.0, 2.0)
    assert first_fresh["ms"] < 300 and second_fresh["ms"] < 300   # the 0.3 s sleep not in it
    # warm: an untimed grade (after its own prepare) before the timed one
    assert fake_worker.grade("fresh", 30, warm=True)["score"] == 4.0
    # the collector runs on during the timed call, unless "off"
    assert fake_worker.grade("collector", 30)["score"] == 1.0
    assert fake_worker.grade("collector", 30, "off")["score"] == 0.0
    assert fake_worker.grade("collector", 30)["score"] == 1.0      # enabled again after
    # two clocks: the thread's CPU time leaves the sleep out, the wall clock has it
    spin = fake_worker.grade("spin", 30)
    assert spin["cpu_clock"] == "thread" and spin["ms"] == spin["wall_ms"]
    assert 40 <= spin["cpu_ms"] < 150 and spin["wall_ms"] >= 240


def test_worker_that_cannot_start_is_an_error(tmp_path: Path) -> None:
    script = tmp_path / "dies.py"
    script.write_text("import sys\nsys.stderr.write('no module named uipath\\n')\nsys.exit(3)\n")
    worker = bench_peers.Worker("dies", [sys.executable, str(script)], ("count",))
    try:
        with pytest.raises(bench_peers.PeerError, match="no module named uipath"):
            worker.load([], {"count": {}}, 30)
    finally:
        worker.stop()


def test_missing_peers_say_how_to_install(tmp_path: Path) -> None:
    workers = bench_peers.find_workers(tmp_path)
    py = workers.pop("agentv-py")             # agentv's steps on CPython: always there
    assert isinstance(py, bench_peers.Worker) and py.argv[0] == sys.executable
    assert workers == {"agentv": bench_peers.INSTALL_HINT, "uipath": bench_peers.INSTALL_HINT,
                       "letta-evals": bench_peers.INSTALL_HINT}
    (tmp_path / "uipath" / "bin").mkdir(parents=True)
    (tmp_path / "uipath" / "bin" / "python").write_text("")
    assert isinstance(bench_peers.find_workers(tmp_path)["uipath"], bench_peers.Worker)


# -- agentv's steps on CPython -------------------------------------------------------------------

def _agentv_py() -> object:
    sys.path.insert(0, str(bench_peers.WORKERS))
    try:
        import agentv_cpython_worker
    finally:
        sys.path.remove(str(bench_peers.WORKERS))
    return agentv_cpython_worker


def _call(name: str, args: dict[str, object], ms: int = 10) -> dict[str, object]:
    return {"name": name, "args": args, "result": None, "duration_ms": ms}


def test_agentv_steps_on_cpython_score_as_agentv_does() -> None:
    """Hand-worked answers from agentv's evaluateExact / evaluateInOrder / evaluateAnyOrder,
    its flaws included (extra calls left out of exact's score, in_order's greedy scan)."""
    mod: Any = _agentv_py()

    def score(config: dict[str, Any], calls: list[dict[str, Any]]) -> float:
        return float(mod.Grader(config).evaluate(mod.trace_of(calls))["score"])

    x, y = {"p": "x"}, {"p": "y"}
    exact = {"mode": "exact", "expected": [
        {"tool": "a", "args": x, "max_duration_ms": 100}, {"tool": "b", "args": None}]}
    # position 0 in place and fast (2 of 3 aspects), position 1 another tool
    assert score(exact, [_call("a", x, 50), _call("c", {})]) == pytest.approx(2 / 3)
    assert score(exact, [_call("a", x, 150), _call("b", y)]) == pytest.approx(2 / 3)  # slow
    assert score(exact, [_call("a", y), _call("b", y)]) == pytest.approx(1 / 3)      # args
    assert score(exact, [_call("a", x), _call("b", y), _call("c", {})]) == 1.0        # extra
    in_order = {"mode": "in_order", "expected": [{"tool": "a", "args": x},
                                                 {"tool": "b", "args": None}]}
    # the first call of a's tool has other args: consumed, and the entry fails (ours: 1.0)
    assert score(in_order, [_call("a", y), _call("a", x), _call("b", {})]) == 0.5
    assert score(in_order, [_call("c", {}), _call("a", x), _call("b", {})]) == 1.0
    assert score(in_order, [_call("b", {}), _call("a", x)]) == 0.5
    # nothing asked for: agentv passes with score 1
    assert score({"mode": "any_order", "minimums": {}}, [_call("a", x)]) == 1.0
    assert score({"mode": "exact", "expected": []}, [_call("a", x)]) == 1.0
    any_order = {"mode": "any_order", "minimums": {"a": 2, "b": 1}}
    assert score(any_order, [_call("a", x), _call("b", x)]) == 0.5
    assert score(any_order, [_call("a", x), _call("b", x), _call("a", y)]) == 1.0


def test_agentv_steps_on_cpython_agree_with_ours_where_agentv_does() -> None:
    """Through the worker protocol, as the bench drives it: any_order and in_order as listed
    give our scores on the bench's runs."""
    work = peer_trajectories.workload(60)
    worker = bench_peers.find_workers(Path("/nonexistent"))["agentv-py"]
    assert isinstance(worker, bench_peers.Worker)
    recs = bench_peers.span_records(work["calls"])
    try:
        worker.load(work["calls"], work["configs"], 60)
        assert worker.version.startswith("CPython ")
        for family in ("trajectory any_order", "trajectory in_order as listed",
                       "trajectory exact"):
            answer = worker.grade(family, 30, "collect")
            entry = bench_peers.our_entry(family, work["configs"][family])
            grader = load_config({"graders": [{"name": "g", **entry}]}).graders[0].grader
            result = grader.grade(bench_peers.fresh_run(recs))
            ours = result.score
            if family == "trajectory exact":
                # agentv leaves the calls beyond the expected ones out of the score (known):
                # the same hits over the entries and their latency aspects
                d = result.details
                ours = (d["hits"] + d["latency"]["hits"]) / (
                    d["expected"] + d["latency"]["assertions"] - d["latency"]["neutral"])
                assert d["actual"] > d["expected"]      # this run has an extra call
            assert answer["score"] == pytest.approx(ours), family
            assert answer["cpu_clock"] == "thread" and answer["cpu_ms"] > 0
    finally:
        worker.stop()


# -- agreement and targets ----------------------------------------------------------------------

def _cell(family: str, calls: int, ours: float, peer: float | None, *,
          ours_score: float = 0.5, peer_score: float | None = 0.5,
          peer_passed: bool | None = None) -> bench_peers.Cell:
    cell = bench_peers.Cell(family, "p", calls, ours, ours_score, False, peer_ms=peer,
                            peer_score=peer_score if peer is not None else None,
                            peer_passed=peer_passed)
    cell.agreement = bench_peers._agreement(cell)
    return cell


def test_agreement_labels() -> None:
    assert _cell("count", 10, 1, 1).agreement == "agree"
    assert _cell("count", 10, 1, 1, peer_score=0.25).agreement.startswith("DIFFERS (score 0.5")
    assert _cell("count", 10, 1, 1, peer_passed=True).agreement.startswith("DIFFERS (passed")
    known = _cell("trajectory in_order", 10, 1, 1, peer_score=0.0).agreement
    assert known.startswith("differs (") and "known: agentv's greedy scan" in known
    assert _cell("count", 10, 1, None).agreement == ""


def test_targets_pass_and_miss() -> None:
    cells = [
        _cell("args", 10, 0.01, 0.02), _cell("args", 100, 0.1, 0.2),
        _cell("args", 1_000, 9.0, 20.0), _cell("args", 10_000, 99.0, 300.0),
        _cell("output", 10, 0.04, 0.02), _cell("output", 100, 0.3, 0.2),
        _cell("output", 1_000, 5.0, 6.0), _cell("output", 10_000, 150.0, None),
    ]
    status = {t["target"]: (t["status"], t["figure"]) for t in bench_peers.targets(cells)}
    assert status["args at 1,000 calls under 10 ms"][0] == "PASS"
    assert status["args at 10,000 calls under 100 ms"][0] == "PASS"
    assert status["output at 10,000 calls under 100 ms"] == ("MISS", "150.000 ms")
    quad = "sub-quadratic (per call, 10,000 vs 1,000, within 2x)"
    assert status[f"args {quad}"][0] == "PASS"                  # 1.10x per call
    assert status[f"output {quad}"] == ("MISS", "3.00x (5.000 ms -> 150.000 ms)")
    assert status[f"trajectory in_order {quad}"][0] == "n/a"
    slower = "no slower than its peer at 100 calls and up"
    assert status[f"args {slower}"][0] == "PASS"
    assert status[f"output {slower}"][0] == "MISS" and "slower at 100" in \
        status[f"output {slower}"][1]
    fixed = "fixed cost at 10 calls within 1.5x of its peer"
    assert status[f"args {fixed}"][0] == "PASS"
    assert status[f"output {fixed}"][0] == "MISS"                # 2x


def test_a_peer_that_answers_otherwise_is_not_compared_for_speed() -> None:
    """Cells whose scores differ by the peer's known flaw time another question: the speed
    target leaves them out (n/a, with the figure), and compares the cells where both agree."""
    cells = [_cell("trajectory in_order", n, ours, peer, peer_score=0.001)
             for n, ours, peer in ((100, 0.2, 0.02), (1_000, 1.6, 0.13))]
    cells += [_cell("trajectory in_order as listed", n, ours, peer)
              for n, ours, peer in ((100, 0.01, 0.02), (1_000, 0.2, 0.13))]
    cells.append(_cell("count", 100, 0.2, 0.1, peer_score=0.25))        # DIFFERS: compared
    status = {t["target"]: (t["status"], t["figure"]) for t in bench_peers.targets(cells)}
    slower = "no slower than its peer at 100 calls and up"
    verdict, figure = status[f"trajectory in_order {slower}"]
    assert verdict == "n/a" and "known flaw at 100, 1,000 calls" in figure
    assert "up to 12.31" in figure
    assert status[f"trajectory in_order as listed {slower}"] == (
        "MISS", "worst ours/peer 1.54 at 1,000 calls; slower at 1,000")
    assert status[f"count {slower}"][0] == "MISS"


def test_a_reference_side_has_targets_of_its_own() -> None:
    """agentv's steps on CPython are a reference, not a peer: their speed targets are named
    after them, and our own limits are read off the peer's rows only."""
    cells = [_cell("trajectory exact", n, ours, peer) for n, ours, peer in
             ((10, 0.014, 0.007), (100, 0.04, 0.02), (1_000, 0.3, 0.2))]
    for n, ours, peer in ((10, 0.015, 0.02), (100, 0.05, 0.2), (1_000, 20.0, 0.9)):
        cell = _cell("trajectory exact", n, ours, peer)
        cell.peer = "agentv-py"
        cells.append(cell)
    status = {t["target"]: (t["status"], t["figure"]) for t in bench_peers.targets(cells)}
    assert status["trajectory exact at 1,000 calls under 10 ms"] == ("PASS", "0.300 ms")
    assert status["trajectory exact no slower than its peer at 100 calls and up"][0] == "MISS"
    steps = "agentv's steps on CPython"
    assert status[f"trajectory exact no slower than {steps} at 100 calls and up"] == (
        "MISS", "worst ours/peer 22.22 at 1,000 calls; slower at 1,000")
    assert status[f"trajectory exact fixed cost at 10 calls within 1.5x of {steps}"][0] == \
        "PASS"
    assert status["trajectory exact fixed cost at 10 calls within 1.5x of its peer"][0] == \
        "MISS"


def test_ours_once_times_a_fresh_run_by_two_clocks() -> None:
    work = peer_trajectories.workload(30)
    entry = bench_peers.our_entry("args", work["configs"]["args"])
    grader = load_config({"graders": [{"name": "g", **entry}]}).graders[0].grader
    cpu_ms, wall_ms, result = bench_peers._ours_once(grader, work["calls"])
    assert 0 < cpu_ms and 0 < wall_ms and result.error is None
    again = bench_peers._ours_once(grader, work["calls"], "off", warm=True)[2]
    assert again.score == result.score
    assert bench_peers._quartiles([4.0]) == (4.0, 4.0)
    # a clock counting whole µs: 60 samples of 5 and 41 of 6 have their median within 5's step
    counted = [0.005] * 60 + [0.006] * 41
    assert bench_peers._median(counted) == 0.005
    assert 0.0053 < bench_peers._median(counted, 0.001) < 0.0054   # 4.5 + 50.5 / 60
    assert bench_peers._quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 4.0)


def _spread(cell: bench_peers.Cell, ours: tuple[float, float],
            peer: tuple[float, float]) -> bench_peers.Cell:
    cell.ours_iqr, cell.peer_iqr = ours, peer
    return cell


def test_targets_tie_within_noise() -> None:
    """A MISS by the medians whose interquartile ranges overlap reads TIE; apart, MISS."""
    cells = [
        _spread(_cell("letta contains", 10, 0.016, 0.010), (0.014, 0.018), (0.009, 0.0095)),
        _spread(_cell("letta contains", 100, 0.022, 0.020), (0.019, 0.025), (0.018, 0.021)),
        _spread(_cell("letta regex_match", 10, 0.020, 0.010), (0.019, 0.021), (0.009, 0.011)),
        _spread(_cell("letta regex_match", 100, 0.030, 0.020), (0.029, 0.031), (0.019, 0.021)),
        _spread(_cell("args", 1_000, 10.5, None), (9.5, 11.0), (0.0, 0.0)),
        _spread(_cell("output", 1_000, 10.5, None), (10.2, 11.0), (0.0, 0.0)),
    ]
    assert bench_peers.within_noise(cells[1]) and not bench_peers.within_noise(cells[3])
    assert bench_peers.within_noise(cells[0], 1.5) and not bench_peers.within_noise(cells[0])
    assert not bench_peers.within_noise(_cell("count", 10, 1.0, 1.0))    # no spread known
    status = {t["target"]: (t["status"], t["figure"]) for t in bench_peers.targets(cells)}
    slower = "no slower than its peer at 100 calls and up"
    fixed = "fixed cost at 10 calls within 1.5x of its peer"
    assert status[f"letta contains {slower}"][0] == "TIE"
    assert "within noise" in status[f"letta contains {slower}"][1]
    assert status[f"letta contains {fixed}"][0] == "TIE"        # 1.6x; 0.014 <= 1.5 x 0.0095
    assert status[f"letta regex_match {slower}"][0] == "MISS"
    assert status[f"letta regex_match {fixed}"][0] == "MISS"     # 2x, ranges apart
    assert status["args at 1,000 calls under 10 ms"][0] == "TIE"
    assert status["output at 1,000 calls under 10 ms"][0] == "MISS"


def test_row_shows_the_spread_and_noise() -> None:
    cell = _spread(_cell("letta contains", 100, 0.022, 0.020), (0.019, 0.025), (0.018, 0.021))
    cell.samples = 101
    row = bench_peers._row(cell)
    assert "27/15" in row and " 101  agree; within noise" in row
    assert "within noise" not in bench_peers._row(_cell("count", 100, 1.0, 2.0))


def test_markdown_table_has_a_row_per_family_and_marks_known_flaws() -> None:
    cells = [_cell("count", 10, 0.0123, 0.05), _cell("count", 1_000, 123.4, None),
             _cell("trajectory in_order", 10, 1.5, 0.07, peer_score=0.0),
             _cell("output", 1_000, 2.0, 3.0, peer_score=0.25)]
    cells[1].peer_status = "timeout"
    table = bench_peers.markdown(cells, [10, 1_000]).splitlines()
    assert table[0] == "| family (peer) | 10 calls | 1,000 calls |"
    count_row = next(line for line in table if line.startswith("| count"))
    assert "0.0123 / 0.05" in count_row and "123 / timeout" in count_row
    order_row = next(line for line in table if line.startswith("| trajectory in_order"))
    assert order_row.endswith("1.5 / 0.07 ¹ |  |")
    output_row = next(line for line in table if line.startswith("| output"))
    assert output_row.endswith("2 / 3 (scores DIFFER) |")
    assert table[-1].startswith("¹ the scores differ")


def test_performance_page_table_has_every_family() -> None:
    """docs/performance.md's table is bench_peers' --markdown output: one row per family, every
    size."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "performance.md").read_text()
    section = page.split("## Side by side with the peers\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert rows[0] == "| family (peer) | 10 calls | 100 calls | 1,000 calls | 10,000 calls |"
    assert [r.split(" | ")[0][2:] for r in rows[1:]] == [
        f"{family} ({peer})" for family, peer in bench_peers.FAMILIES]
    assert all(r.count(" / ") == 4 for r in rows[1:])
