"""The config's ``conventions:`` section: a framework no built-in convention reads (Logfire's
own spans, tests/data/frameworks/logfire), mapped by the user, graded by ``grade`` and live
alike; and the mapping's load-time errors, each naming its field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval import ConfigError, load_config
from otel_tooleval.cli import main
from tests.support.replay import replay_file
from tests.test_framework_fixtures import SHARED, _plain, graded_offline, reading

LOGFIRE = Path(__file__).resolve().parent / "data/frameworks/logfire"

#: What a user writes for Logfire: the `logfire.span("agent run {agent_name}", ...)` root,
#: and `logfire.instrument` tool spans, one attribute per parameter, the result in `return`.
#: Model calls are `gen_ai.operation.name = chat` spans: read already.
MAPPING: list[dict[str, Any]] = [
    {"scope": "logfire", "span_name": "^agent run ", "run": {"agent_name": "agent_name"}},
    {"scope": "logfire", "span_name": r"^Calling (?:\w+\.)*(?P<name>\w+)$",
     "tool": {"name": "span_name", "arguments_from_attributes": ["query", "city", "celsius"],
              "result": "return"}},
]
CONFIG = {**SHARED, "conventions": MAPPING}


def _expected() -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = json.loads((LOGFIRE / "expected.json").read_text())["runs"]
    return [{**r, "calls": [{k: _plain(v) for k, v in c.items()} for c in r["calls"]]}
            for r in runs]


def _read(reports: list[Any]) -> list[dict[str, Any]]:
    out = []
    for report in reports:
        run = reading(report)
        del run["reading"]
        out.append({**run, "calls": [{k: _plain(v) for k, v in c.items()}
                                     for c in run["calls"]]})
    return out


def test_without_a_mapping_logfire_has_no_run() -> None:
    assert graded_offline(LOGFIRE, SHARED) == []


def test_grade_reads_the_mapped_run() -> None:
    reports = graded_offline(LOGFIRE, CONFIG)
    assert _read(reports) == _expected()
    assert [c.step for c in reports[0].run.calls] == [0, 1, 2, 2]
    assert [(g.name, g.passed) for g in reports[0].results] == [
        ("trajectory", True), ("strict-order", True), ("outputs", True), ("steps", True)]


def test_the_live_processor_reads_it_the_same() -> None:
    live = replay_file(LOGFIRE / "traces.jsonl", CONFIG)
    assert _read(live) == _expected()
    assert all(g.passed for g in live[0].results)


def test_the_cli_grades_with_the_mapping(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "tooleval.json"
    config.write_text(json.dumps(CONFIG))
    code = main(["grade", str(LOGFIRE / "traces.jsonl"), "--config", str(config),
                 "--format", "json", "--include-calls"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    (run,) = doc["runs"]
    assert run["agent"] == "weather_agent" and run["passed"]
    assert [(c["name"], c["arguments"], c["step"]) for c in run["calls"]] == [
        ("lookup_city", {"query": "paris"}, 0), ("get_weather", {"city": "Paris"}, 1),
        ("get_weather", {"city": "Lyon"}, 2), ("convert_temp", {"celsius": 21}, 2)]


def test_name_from_an_attribute_and_agent_from_the_span_name() -> None:
    # The other forms: the tool named by `code.function`, the agent by a regex group (here
    # the template itself, which is what Logfire's span name holds).
    mapping = [
        {"scope": "logfire", "span_name": r"^agent (?P<name>\w+)", "run": {
            "agent_name": "span_name"}},
        {"scope": "logfire", "attributes": {"logfire.span_type": "span"},
         "span_name": "^Calling ", "tool": {"name": "code.function",
                                            "arguments_from_attributes": ["query", "city"],
                                            "result": ["return"]}},
    ]
    (report,) = graded_offline(LOGFIRE, {**SHARED, "conventions": mapping})
    assert report.run.agent == "run"
    assert [c.name for c in report.run.calls] == [
        "lookup_city", "get_weather", "get_weather", "convert_temp"]
    assert report.run.calls[3].arguments == {}   # celsius is not listed


def test_an_attribute_condition_that_does_not_hold_maps_nothing() -> None:
    mapping = [MAPPING[0], {**MAPPING[1], "attributes": {"logfire.span_type": "log"}}]
    (report,) = graded_offline(LOGFIRE, {**SHARED, "conventions": mapping})
    # No tool span is read; the calls are what the model spans requested, none executed.
    assert report.run.reading.executed == 0 and len(report.run.reading.unexecuted) == 4
    assert {c.span_id for c in report.run.calls} == {0}
    (report,) = graded_offline(LOGFIRE, {**SHARED, "conventions": mapping,
                                         "runs": {"calls_from": "executed"}})
    assert report.run.calls == ()


def test_a_mapping_is_per_config() -> None:
    load_config(CONFIG)
    assert graded_offline(LOGFIRE, SHARED) == []   # another config: nothing mapped


def _problems(conventions: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load_config({**SHARED, "conventions": conventions})
    return str(info.value)


@pytest.mark.parametrize(("conventions", "where", "says"), [
    ([{"span_name": "(?=a)", "model": True}], "conventions[0].span_name",
     "unsupported regular expression '(?=a)': lookaround"),
    ([{"span_name": "(", "model": True}], "conventions[0].span_name", "invalid regular"),
    ([{"scope": "x", "tool": {"nmae": "a"}}], "conventions[0].tool.nmae",
     "did you mean 'name'"),
    ([{"scope": "x", "tool": {"name": "a"}, "spn_name": "x"}], "conventions[0].spn_name",
     "did you mean 'span_name'"),
    ([MAPPING[0], {"scope": "x"}], "conventions[1]", "maps nothing"),
    ([{"scope": "x", "model": True, "tool": {"name": "a"}}], "conventions[0]",
     "model and tool"),
    ([{"model": True}], "conventions[0]", "matches every span"),
    ([{"scope": "x", "tool": {"name": "a", "arguments": "x",
                              "arguments_from_attributes": ["y"]}}],
     "conventions[0].tool", "not both"),
    ([{"scope": "x", "model": False}], "conventions[0].model", ""),
    ({"scope": "x"}, "conventions", ""),
])
def test_load_time_errors_name_the_field(conventions: Any, where: str, says: str) -> None:
    message = _problems(conventions)
    assert f"{where}:" in message and says in message, message
