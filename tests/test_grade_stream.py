"""`otel-tooleval grade` streams its reports: each run is rendered as it is graded and dropped.

Two things are checked: the streamed documents are the same bytes as the ``render_*`` functions
give for the whole sorted list of runs (on the fixture files, and on runs added out of order
through a spool forced onto disk), and no ``RunReport`` or ``AgentRun`` outlives its ``add``:
the number alive is bounded whatever the number of runs, for every format.
"""

from __future__ import annotations

import gc
import io
import json
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval import load_config
from otel_tooleval.aggregate import RunningAggregate, _ExactSum, aggregate
from otel_tooleval.cli import main
from otel_tooleval.config import ToolEvalConfig
from otel_tooleval.model import AgentRun, GradeResult, RunReport, _jsonable
from otel_tooleval.offline import GradeOutcome, grade_files
from otel_tooleval.outputs import (
    HtmlWriter,
    JsonWriter,
    JunitWriter,
    ReportWriter,
    TableWriter,
    html_report,
    render_html,
    render_json,
    render_junit,
    render_table,
    run_key,
    spool,
)
from otel_tooleval.outputs.json_doc import run_json
from tests.bench.bench_grade_memory import CONFIG as SMALL_RUNS
from tests.bench.bench_grade_memory import write_input

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = sorted([*ROOT.glob("tests/data/files/traces.*"),
                   *ROOT.glob("tests/data/frameworks/*/traces.jsonl")])
FORMATS = ("table", "json", "junit", "html")

BROAD: dict[str, Any] = {"graders": [
    {"name": "looked", "type": "tool-calls",
     "config": {"required": [{"name": "search|get_weather|web_search|lookup|refund"}],
                "disallowed": [{"name": "^bash$"}]}},
    {"name": "selection", "type": "equal_function_sets",
     "classes": [{"name": "search", "members": ["search", "web_search", "get_weather"]}],
     "expect": [{"tool_selection.f1": {">=": 80}}]},
    {"name": "order", "type": "tool-call-order", "strict": False,
     "tool_calls_order": ["search", "filter", "display"]},
]}


def _render(fmt: str, reports: Sequence[RunReport], agg: dict[str, Any],
            problems: Sequence[str]) -> str:
    if fmt == "json":
        return render_json(reports, agg)
    if fmt == "junit":
        return render_junit(reports, agg, problems=problems)
    if fmt == "html":
        return render_html(reports, agg, problems=problems)
    return render_table(reports, agg, color=False, problems=problems)


def _writer(fmt: str, memory_bytes: int = spool.DEFAULT_SPOOL_BYTES) -> ReportWriter:
    if fmt == "json":
        return JsonWriter(memory_bytes=memory_bytes)
    if fmt == "junit":
        return JunitWriter(memory_bytes=memory_bytes)
    if fmt == "html":
        return HtmlWriter(memory_bytes=memory_bytes)
    return TableWriter(color=False, memory_bytes=memory_bytes)


def _not_streamed(paths: Sequence[str], config: ToolEvalConfig, group_by: str | None = None
                  ) -> tuple[GradeOutcome, list[str]]:
    problems: list[str] = []

    def problem(p: Any) -> None:
        problems.append(f"{p.path}:{p.line}: {p.message}" if p.line is not None
                        else f"{p.path}: {p.message}")

    outcome = grade_files(paths, config, group_by=group_by, on_problem=problem)
    return outcome, problems


# -- the same bytes -----------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_streamed_grade_writes_what_the_renderers_write_on_every_fixture(
        fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_path = tmp_path / "graders.json"
    config_path.write_text(json.dumps(BROAD))
    config = load_config(BROAD)
    graded_runs = 0
    for fixture in FIXTURES:
        for group_by in (None, "gen_ai.agent.name"):
            out = tmp_path / f"out.{fmt}"
            argv = ["grade", str(fixture), "-c", str(config_path), "-f", fmt, "-o", str(out),
                    "--allow-input-problems", "--allow-empty"]
            if group_by:
                argv += ["--group-by", group_by]
            main(argv)
            capsys.readouterr()
            outcome, problems = _not_streamed([str(fixture)], config, group_by)
            expected = _render(fmt, outcome.reports, outcome.aggregate, problems)
            assert out.read_text(encoding="utf-8") == expected, (fixture, group_by)
            graded_runs += len(outcome.reports)
    assert graded_runs > 20   # the fixtures did hold runs for these graders


@pytest.mark.parametrize("fmt", FORMATS)
def test_runs_added_out_of_order_through_a_spool_on_disk_come_out_sorted(
        fmt: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every part goes to disk (a 1-byte budget), with few segments before a merge."""
    monkeypatch.setattr(spool, "_MAX_SEGMENTS", 3)
    monkeypatch.setattr(spool, "_BLOCK", 2)
    monkeypatch.setattr(html_report, "MAX_RUN_SECTIONS", 7)
    monkeypatch.setattr(html_report, "MAX_INDEX_ROWS", 40)
    path = tmp_path / "runs.jsonl.gz"
    write_input(path, 120)
    config = load_config(SMALL_RUNS)
    outcome, _ = _not_streamed([str(path)], config, "gen_ai.agent.name")
    reports = outcome.reports
    assert len(reports) == 120 and 0 < sum(not r.passed for r in reports) < 120
    shuffled = reports[:]
    random.Random(3).shuffle(shuffled)
    writer = _writer(fmt, memory_bytes=1)
    try:
        for report in shuffled:
            writer.add(report, run_key(report))
        assert writer.spool._file is not None   # it did go to disk
        out = io.StringIO()
        writer.write(out, outcome.aggregate, problems=["x.jsonl:3: invalid JSON"])
    finally:
        writer.close()
    assert out.getvalue() == _render(fmt, reports, outcome.aggregate,
                                     ["x.jsonl:3: invalid JSON"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_runs_streams_the_empty_document(fmt: str) -> None:
    agg = aggregate([], load_config(BROAD))
    writer = _writer(fmt)
    out = io.StringIO()
    writer.write(out, agg)
    writer.close()
    assert out.getvalue() == _render(fmt, [], agg, [])


def test_junit_runs_without_cases_and_with_only_aggregate_cases() -> None:
    """A run no grader applies to has no test case; the document is still the same."""
    config = load_config(BROAD)
    lone = RunReport(AgentRun(1, 2, "idle", ()), ())
    failing = RunReport(AgentRun(3, 4, "a", ()),
                        (GradeResult("looked", "tool-calls", 0.0, False, "fail", "no <call>"),))
    for reports in ([lone], [lone, failing], [failing, lone]):
        agg = aggregate(reports, config)
        writer = JunitWriter()
        for report in reports:
            writer.add(report)
        out = io.StringIO()
        writer.write(out, agg, problems=["p: q"])
        writer.close()
        assert out.getvalue() == render_junit(reports, agg, problems=["p: q"])


# -- nothing kept -------------------------------------------------------------------------------

def _alive() -> tuple[int, int]:
    gc.collect()
    objects = gc.get_objects()
    return (sum(1 for o in objects if type(o) is RunReport),
            sum(1 for o in objects if type(o) is AgentRun))


def _most_alive(path: Path, fmt: str, streamed: bool) -> tuple[int, int]:
    """The most RunReports and AgentRuns alive at once while ``path`` is graded and written,
    looked at every 500 runs and after the document is written."""
    config = load_config(SMALL_RUNS)
    writer = _writer(fmt, memory_bytes=64 * 1024)
    most = [0, 0]
    seen = [0]

    def look() -> None:
        for i, n in enumerate(_alive()):
            most[i] = max(most[i], n)

    def graded(report: RunReport, key: tuple[int, int, int]) -> None:
        writer.add(report, key)
        seen[0] += 1
        if seen[0] % 500 == 0:
            look()

    try:
        outcome = grade_files([str(path)], config, on_report=graded if streamed else None)
        if not streamed:
            for report in outcome.reports:
                writer.add(report, run_key(report))
            look()
            del outcome
        writer.write(io.StringIO(), {"runs": seen[0]})
        look()
    finally:
        writer.close()
    return most[0], most[1]


@pytest.mark.parametrize("fmt", FORMATS)
def test_writers_keep_no_runs_however_many_are_graded(fmt: str, tmp_path: Path) -> None:
    small, large = tmp_path / "2k.jsonl.gz", tmp_path / "8k.jsonl.gz"
    write_input(small, 2000)
    write_input(large, 8000)
    before = _alive()
    for path in (small, large):
        reports, runs = _most_alive(path, fmt, streamed=True)
        # the run being graded, and what one trace gives: a handful, not thousands
        assert reports - before[0] <= 5 and runs - before[1] <= 5, (path.name, reports, runs)


def test_the_count_sees_runs_kept(tmp_path: Path) -> None:
    """The measure above can fail: the path that keeps every report shows them all."""
    small = tmp_path / "600.jsonl.gz"
    write_input(small, 600)
    before = _alive()
    reports, runs = _most_alive(small, "json", streamed=False)
    assert reports - before[0] >= 600 and runs - before[1] >= 600


# -- the aggregate as sums ----------------------------------------------------------------------

def test_running_aggregate_is_the_aggregate_in_any_order(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl.gz"
    write_input(path, 300)
    config = load_config(SMALL_RUNS)
    outcome, _ = _not_streamed([str(path)], config)
    reports = outcome.reports
    groups = ("a", "b", None, "c")
    for i, report in enumerate(reports):   # give the runs groups, as a root attribute would
        value = groups[(i * 7) % 4]
        attrs = {} if value is None else {"case": value}
        object.__setattr__(report.run, "root_attributes", attrs)
    expected = aggregate(reports, config, group_by="case")
    shuffled = list(enumerate(reports))
    random.Random(5).shuffle(shuffled)
    running = RunningAggregate(config, group_by="case")
    for position, report in shuffled:
        running.add(report, position)
    assert running.result() == expected
    # groups in the order of their first run: i * 7 % 4 gives a, c, None, b
    assert list(running.result()["groups"]) == ["a", "c", "null", "b"]
    selection = expected["graders"]["selection"]
    assert selection["passed_aggregate"] is True and selection["runs"] == 300


def test_exact_sum_rounds_as_fsum_does() -> None:
    rng = random.Random(11)
    for _ in range(200):
        values = [rng.choice([1e-17, 0.1, 1.0, 1 / 3, rng.random(), 1e16, -1e16])
                  for _ in range(rng.randint(0, 60))]
        total = _ExactSum()
        for v in values:
            total.add(v)
        assert total.value() == math.fsum(values)
    specials = _ExactSum()
    for v in (0.5, math.inf, 0.25, math.inf):
        specials.add(v)
    assert specials.value() == math.inf
    nan = _ExactSum()
    for v in (math.nan, 1.0, math.nan):
        nan.add(v)
    assert math.isnan(nan.value())


# -- the spool ----------------------------------------------------------------------------------

def test_spool_merges_segments_and_what_is_still_held(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spool, "_MAX_SEGMENTS", 4)
    rng = random.Random(2)
    parts = [((rng.randrange(50), i), "x" * rng.randrange(40)) for i in range(3000)]
    store = spool.SortedSpool(memory_bytes=5000)
    try:
        for key, text in parts:
            store.add(key, text)
        assert store._file is not None and 1 <= len(store._segments) < 4
        assert store._held, "the last parts were still in memory"
        assert list(store) == sorted(parts)
    finally:
        store.close()
    assert store._file is None


# -- the JSON of a run --------------------------------------------------------------------------

def _jsonable_before(value: Any) -> Any:
    """``model._jsonable`` as it was before its leaves were handled in line."""
    from collections.abc import Mapping
    cls = value.__class__
    if cls is str or cls is int or cls is float or cls is bool or value is None:
        return value
    if cls is dict:
        return {k if k.__class__ is str else str(k): _jsonable_before(v) for k, v in value.items()}
    if cls is list or cls is tuple:
        return [_jsonable_before(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable_before(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable_before(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def test_details_made_plain_as_before() -> None:
    from types import MappingProxyType
    odd: dict[Any, Any] = {
        True: 1, None: [1, (2, {3: "x"})], 1.5: {"s": {1, 2}}, "t": (None, False, 2.0),
        "m": MappingProxyType({"k": [b"b", {"n": math.nan}]}), (1, 2): object,
        "deep": [[[{"a": [{"b": ()}]}]]], "e": "\ud800",
    }
    assert _jsonable(odd) == _jsonable_before(odd)
    assert json.dumps(_jsonable(odd), default=str) == json.dumps(_jsonable_before(odd),
                                                                 default=str)


def test_run_json_is_the_runs_entry_of_the_document() -> None:
    odd = GradeResult("g", "t", math.nan, False, "fail", "lone \ud800 surrogate",
                      {True: {"x": math.inf}, "ok": [1, (2, 3)]})
    report = RunReport(AgentRun(5, 6, "é", ()), (odd,))
    text = run_json(report)
    doc = render_json([report], {"runs": 1})
    assert doc.splitlines()[1] == text
    assert json.loads(text)["results"][0]["details"] == {"True": {"x": None}, "ok": [1, [2, 3]]}
    assert "\\ud800" in text

