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
from otel_tooleval.conventions import is_model_span
from otel_tooleval.files import iter_traces, read_records
from otel_tooleval.grading import grade_records
from otel_tooleval.model import RunReport, text_of
from tests.support.replay import replay_file

ROOT = Path(__file__).resolve().parent / "data" / "frameworks"
FOLDERS = sorted(p.parent for p in ROOT.glob("**/expected.json") if ".venv" not in p.parts
                 and "node_modules" not in p.parts)

#: What otel-tooleval reads wrong today, per recording and per part of the reading (the
#: strict xfails of this file: a fix that makes one pass fails the suite until it is removed).
GAPS: dict[str, dict[str, str]] = {
    "agent": {
        "logfire": "Logfire marks no span as agent or tool: read with a conventions: mapping "
                   "(tests/test_user_conventions.py)",
    },
    "calls": {
        "logfire": "Logfire marks no span as agent or tool: read with a conventions: mapping "
                   "(tests/test_user_conventions.py)",
    },
    "final_output": {
        "logfire": "no run is found without a conventions: mapping "
                   "(tests/test_user_conventions.py)",
    },
}

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
        {"name": "convert_temp", "output": "69.8"}]},
    {"name": "steps", "type": "tool-calls", "config": {"required": [
        {"name": "^convert_temp$", "at_step": 2}, {"name": "^lookup_city$", "at_step": 0}]}},
]}


def _name(folder: Path) -> str:
    return folder.relative_to(ROOT).as_posix()


def _ids(part: str | None = None) -> list[Any]:
    """One parameter per recording; a strict xfail where ``GAPS[part]`` lists it."""
    gaps = GAPS.get(part or "", {})
    return [pytest.param(f, id=_name(f), marks=pytest.mark.xfail(reason=gaps[_name(f)],
                                                                 strict=True))
            if _name(f) in gaps else pytest.param(f, id=_name(f)) for f in FOLDERS]


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
        for c in run.calls], "reading": {**run.reading.to_dict(), **run.reading.notes()}}


def test_there_are_recordings() -> None:
    # The recordings are committed with their recorder scripts; the suite never installs
    # the frameworks themselves.
    assert FOLDERS, "no recording under tests/data/frameworks"
    for folder in FOLDERS:
        assert (folder / "traces.jsonl").is_file() and (folder / "README.md").is_file()
        assert (folder / "record.sh").is_file() or (folder.parent / "record.sh").is_file(), \
            folder.name


def _plain(value: Any) -> Any:
    """Objects as they are; a scalar as the text a span records (``69.8`` or ``"69.8"``): a
    scalar result stays the recorded text (SEMANTICS), whatever the tool returned."""
    return value if isinstance(value, (dict, list)) else text_of(value)


def _keys(expected: dict[str, Any]) -> tuple[tuple[str, ...], bool]:
    """The call fields to compare, and whether the final output is compared: what the
    framework's telemetry records at all (``not_recorded`` lists the rest)."""
    missing = set(expected.get("not_recorded", ()))
    fields = ("name",) + (() if "arguments" in missing else ("arguments",)) + (
        () if "results" in missing else ("result",)) + (() if "steps" in missing else ("step",))
    return fields, "final_output" not in missing


def _expected(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "expected.json").read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("folder", _ids("agent"))
def test_one_run_per_agent_run_with_the_agents_name(folder: Path) -> None:
    expected = _expected(folder)
    runs = graded_offline(folder, SHARED)
    assert len(runs) == len(expected["runs"]), [r.run.root_name for r in runs]
    if "agent_name" not in expected.get("not_recorded", ()):
        assert [r.run.agent for r in runs] == [r["agent"] for r in expected["runs"]]


@pytest.mark.parametrize("folder", _ids("calls"))
def test_calls_in_order_with_arguments_results_and_steps(folder: Path) -> None:
    expected = _expected(folder)
    fields, _ = _keys(expected)
    got = [[{k: _plain(c[k]) for k in fields} for c in reading(r)["calls"]]
           for r in graded_offline(folder, SHARED)]
    assert got == [[{k: _plain(c[k]) for k in fields} for c in r["calls"]]
                   for r in expected["runs"]]


@pytest.mark.parametrize("folder", _ids())
def test_requests_and_executions_agree(folder: Path) -> None:
    # Where the model spans record their responses, every call the model requested was
    # executed by a tool span and every tool span was requested (docs/conventions.md, "Two
    # witnesses"); where they record nothing, the tool spans are read alone. A recording whose
    # model spans record the requests is read from both (its steps' responses are found).
    recorded = _expected(folder)["requests_recorded"]
    for report in graded_offline(folder, SHARED):
        got = report.run.reading
        assert got.recorded or not recorded
        if got.recorded:
            assert (got.requested, got.executed) == (got.matched, got.matched), got.problems()
            assert got.matched == len(report.run.calls)
        else:
            assert got.executed == len(report.run.calls) and got.requested == 0


@pytest.mark.parametrize("folder", _ids("final_output"))
def test_final_output(folder: Path) -> None:
    expected = _expected(folder)
    if not _keys(expected)[1]:
        pytest.skip(f"{_name(folder)} records no final output")
    assert [r.run.final_output for r in graded_offline(folder, SHARED)] == [
        r.get("final_output") for r in expected["runs"]]


@pytest.mark.parametrize("folder", _ids())
def test_live_and_grade_agree(folder: Path) -> None:
    offline = graded_offline(folder, SHARED)
    live = replay_file(folder / "traces.jsonl", SHARED)
    assert [reading(r) for r in live] == [reading(r) for r in offline]
    assert [[(g.name, g.score, g.passed) for g in r.results] for r in live] == [
        [(g.name, g.score, g.passed) for g in r.results] for r in offline]


@pytest.mark.parametrize("folder", _ids())
def test_live_and_grade_agree_with_the_bookkeeping_deferred(folder: Path) -> None:
    """Without violation marks the live hooks defer a tracked span's bookkeeping to the
    grading thread (hooks.py, ``defer``; tests/test_deferred_ends.py): the same runs."""
    config = {**SHARED, "emit": {"violation_marks": False}}
    offline = graded_offline(folder, config)
    live = replay_file(folder / "traces.jsonl", config)
    assert [reading(r) for r in live] == [reading(r) for r in offline]
    assert [[(g.name, g.score, g.passed) for g in r.results] for r in live] == [
        [(g.name, g.score, g.passed) for g in r.results] for r in offline]
    assert [[c.name for c in r.run.calls] for r in live] == [
        [c.name for c in r.run.calls] for r in offline]


@pytest.mark.parametrize("folder", _ids("calls"))
def test_the_shared_config_passes(folder: Path) -> None:
    expected = _expected(folder)
    missing = {"arguments", "results", "steps"} & set(expected.get("not_recorded", ()))
    if missing:
        pytest.skip(f"{_name(folder)} records no {' or '.join(sorted(missing))}")
    calls = expected["runs"][0]["calls"]
    if [c["step"] for c in calls] != [0, 1, 2, 2]:
        pytest.skip(f"{_name(folder)} cannot make two calls in one model response")
    (report,) = graded_offline(folder, SHARED)
    failing = [(g.name, g.explanation) for g in report.results if not g.passed]
    assert failing == []


@pytest.mark.parametrize("folder", _ids("requests"))
def test_the_model_spans_record_the_requests(folder: Path) -> None:
    # The second witness, read from the recording's model spans alone (message formats,
    # otel_tooleval/conventions/messages.py): where ``requests_recorded``, one list per model
    # response that asked for calls, in the order the response lists them, equal to the calls
    # the framework made (two in the third response); elsewhere no model span yields a call.
    messages = pytest.importorskip("otel_tooleval.conventions.messages")
    expected = _expected(folder)
    got: list[list[tuple[str, Any, int]]] = []
    for trace in iter_traces(read_records(str(folder / "traces.jsonl"))):
        for span in sorted(trace, key=lambda s: (s.start_ns, s.span_id)):
            if is_model_span(span.attributes):
                requested = messages.requested_calls(span.attributes, span.events)
                if requested:
                    got.append([(r.name, r.arguments, r.position) for r in requested])
    if not expected["requests_recorded"]:
        assert got == []
        return
    steps: dict[tuple[int, int], list[tuple[str, Any, int]]] = {}
    for run, want in enumerate(expected["runs"]):
        for call in want["calls"]:
            step = steps.setdefault((run, call["step"]), [])
            step.append((call["name"], call["arguments"], len(step)))
    assert got == list(steps.values())
