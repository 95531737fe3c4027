"""Every recorded framework run (tests/data/frameworks/*/) read right, offline and live.

Each recording is the same scripted four-call weather run, recorded from the framework's real
agent and tool machinery (see tests/data/frameworks/README.md). For each one:

* ``grade``'s reading (the file readers, run cutting, conventions) gives what ``expected.json``
  says the framework did: one run, the agent's own name, the calls in order with their
  arguments as objects, results unwrapped to the tools' return values, the model turn of each
  call;
* the live processor, fed the same spans again through a real SDK (``tests/support/replay``),
  grades the same runs with the same verdicts;
* one shared config (order, arguments, outputs, steps) passes on every recording read right.

Frameworks whose telemetry otel-tooleval does not read right yet are listed in ``GAPS`` with
what is wrong; their tests are strict xfails, so that a fix that makes one pass says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval import load_config
from otel_tooleval.files import iter_traces, read_records
from otel_tooleval.grading import grade_records
from otel_tooleval.model import RunReport, text_of
from tests.support.replay import replay_file

ROOT = Path(__file__).resolve().parent / "data" / "frameworks"
FOLDERS = sorted(p.parent for p in ROOT.glob("*/expected.json"))

#: What otel-tooleval reads wrong today, per recording (the strict xfails of this file).
GAPS: dict[str, str] = {}

#: One config for every recording: the calls in order with their arguments, the strict order
#: of names, the outputs, and the model turn of the parallel pair.
SHARED = {"graders": [
    {"name": "trajectory", "type": "tool_trajectory", "mode": "in_order", "expected": [
        {"tool": "lookup_city", "args": {"query": "paris"}},
        {"tool": "get_weather", "args": {"city": "Paris"}},
        {"tool": "get_weather", "args": {"city": "Lyon"}},
        {"tool": "convert_temp", "args": {"celsius": 21}}]},
    {"name": "strict-order", "type": "tool-call-order", "strict": True,
     "tool_calls_order": ["lookup_city", "get_weather", "get_weather", "convert_temp"]},
    {"name": "outputs", "type": "tool-call-output", "tool_outputs": [
        {"name": "lookup_city", "output": "Paris"},
        {"name": "get_weather", "output": '{"city":"Lyon","temp_c":18.0}'},
        {"name": "convert_temp", "output": "69.8"}]},
    {"name": "steps", "type": "tool-calls", "config": {"required": [
        {"name": "^convert_temp$", "at_step": 2}, {"name": "^lookup_city$", "at_step": 0}]}},
]}


def _ids(folders: list[Path]) -> list[Any]:
    return [pytest.param(f, id=f.name, marks=pytest.mark.xfail(
        reason=GAPS[f.name], strict=True)) if f.name in GAPS else pytest.param(f, id=f.name)
        for f in folders]


def graded_offline(folder: Path, config: Any) -> list[RunReport]:
    cfg = load_config(config)
    reports: list[RunReport] = []
    for trace in iter_traces(read_records(str(folder / "traces.jsonl"))):
        reports.extend(grade_records(trace, cfg))
    return sorted(reports, key=lambda r: (r.run.start_ns, r.run.root_span_id))


def reading(report: RunReport) -> dict[str, Any]:
    run = report.run
    return {"agent": run.agent, "final_output": run.final_output, "calls": [
        {"name": c.name, "arguments": c.arguments, "result": c.result, "step": c.step}
        for c in run.calls]}


def test_there_are_recordings() -> None:
    # The recordings are committed with their recorder scripts; the suite never installs
    # the frameworks themselves.
    assert FOLDERS, "no recording under tests/data/frameworks"
    for folder in FOLDERS:
        assert (folder / "traces.jsonl").is_file() and (folder / "README.md").is_file()
        assert (folder / "record.sh").is_file(), folder.name


def _plain(value: Any) -> Any:
    """Objects as they are; a scalar as the text a span records (``69.8`` or ``"69.8"``): a
    scalar result stays the recorded text (SEMANTICS), whatever the tool returned."""
    return value if isinstance(value, (dict, list)) else text_of(value)


def _keys(expected: dict[str, Any]) -> tuple[tuple[str, ...], bool]:
    """The call fields to compare, and whether the final output is compared: what the
    framework's telemetry records at all (``not_recorded`` lists the rest)."""
    missing = set(expected.get("not_recorded", ()))
    fields = ("name",) + (() if "arguments" in missing else ("arguments",)) + (
        () if "results" in missing else ("result",)) + ("step",)
    return fields, "final_output" not in missing


@pytest.mark.parametrize("folder", _ids(FOLDERS))
def test_grade_reads_what_the_framework_did(folder: Path) -> None:
    expected = json.loads((folder / "expected.json").read_text())
    fields, final = _keys(expected)

    def shape(agent: Any, output: Any, calls: list[dict[str, Any]]) -> dict[str, Any]:
        return {"agent": agent, "calls": [{k: _plain(c[k]) for k in fields} for c in calls],
                **({"final_output": output} if final else {})}

    want = [shape(r["agent"], r.get("final_output"), r["calls"]) for r in expected["runs"]]
    got = [shape(r["agent"], r["final_output"], r["calls"])
           for r in map(reading, graded_offline(folder, SHARED))]
    assert got == want


@pytest.mark.parametrize("folder", _ids(FOLDERS))
def test_live_and_grade_agree(folder: Path) -> None:
    offline = graded_offline(folder, SHARED)
    live = replay_file(folder / "traces.jsonl", SHARED)
    assert [reading(r) for r in live] == [reading(r) for r in offline]
    assert [[(g.name, g.score, g.passed) for g in r.results] for r in live] == [
        [(g.name, g.score, g.passed) for g in r.results] for r in offline]


@pytest.mark.parametrize("folder", _ids(FOLDERS))
def test_the_shared_config_passes(folder: Path) -> None:
    expected = json.loads((folder / "expected.json").read_text())
    if {"arguments", "results"} & set(expected.get("not_recorded", ())):
        pytest.skip(f"{folder.name} records no {' or '.join(expected['not_recorded'])}")
    (report,) = graded_offline(folder, SHARED)
    failing = [(g.name, g.explanation) for g in report.results if not g.passed]
    assert failing == []
