"""`otel-tooleval inspect` with eval cases (docs/cases.md, docs/inspect.md): which case each run
matched and why, the nearest case of a run that matched none, ambiguous runs, missing cases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_tooleval import inspection
from otel_tooleval.cli import main

FRAMEWORKS = Path(__file__).parent / "data" / "frameworks"
ASKED = "What's the weather in Paris and Lyon? Give Paris in Fahrenheit too."
PYDANTIC = str(FRAMEWORKS / "pydantic_ai" / "traces.jsonl")        # GenAI semconv
OPENAI_AGENTS = str(FRAMEWORKS / "openai_agents" / "traces.jsonl")  # OpenInference
MLFLOW = str(FRAMEWORKS / "mlflow" / "traces.jsonl")                # mlflow.spanInputs
# The pydantic_ai recording's root carries this conversation id.
CONVERSATION = "01a214de-e8a5-71ed-831b-2bf9f46e51a8"


def _inspect(tmp_path: Path, traces: list[str], cases: list[dict[str, Any]],
             capsys: pytest.CaptureFixture[str], fmt: str = "json") -> Any:
    case_file = tmp_path / "cases.yaml"
    case_file.write_text(yaml.safe_dump({"cases": cases}))
    assert main(["inspect", *traces, "--cases", str(case_file), "--format", fmt]) == 0
    out = capsys.readouterr().out
    return json.loads(out) if fmt == "json" else out


def test_each_run_says_which_case_it_matched_and_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = [{"id": "by-attribute", "match": {"attribute": {"key": "gen_ai.conversation.id",
                                                            "value": CONVERSATION}}},
             {"id": "by-regex", "match": {"first_user_message_regex": "weather in Paris"}},
             {"id": "never", "match": {"first_user_message": "Book Lisbon for 2 nights"}}]
    doc = _inspect(tmp_path, [PYDANTIC, OPENAI_AGENTS], cases, capsys)
    found = {run["trace_id"]: run["case"] for run in doc["runs"]}
    assert sorted((c["case"], c["status"]) for c in found.values()) == [
        ("by-attribute", "matched"), ("by-regex", "matched")]
    by_case = {c["case"]: c for c in found.values()}
    assert by_case["by-attribute"]["why"] == [
        f"attribute gen_ai.conversation.id={CONVERSATION!r}"]
    assert by_case["by-regex"]["why"] == [
        f"first user message {ASKED!r} matches regex 'weather in Paris'"]
    assert by_case["by-regex"]["first_user_message"] == ASKED
    assert "nearest" not in by_case["by-regex"]
    assert [(c["id"], c["status"], len(c["runs"])) for c in doc["cases"]] == [
        ("by-attribute", "matched", 1), ("by-regex", "matched", 1), ("never", "missing", 0)]

    text = _inspect(tmp_path, [PYDANTIC, OPENAI_AGENTS], cases, capsys, fmt="table")
    assert f"case: by-attribute  by attribute gen_ai.conversation.id={CONVERSATION!r}" in text
    assert "case: by-regex  by first user message" in text
    assert "cases (3): 2 matched a run, 1 missing; runs: 0 with no case, 0 ambiguous" in text
    assert "    never  missing: no run matched it" in text


@pytest.mark.parametrize("trace", [PYDANTIC, OPENAI_AGENTS, MLFLOW])
def test_an_exact_first_user_message_match_is_explained(
        trace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _inspect(tmp_path, [trace], [
        {"id": "weather", "match": {"first_user_message": ASKED}}], capsys)
    [run] = doc["runs"]
    assert run["case"]["case"] == "weather"
    assert run["case"]["why"] == [f"first user message equals {ASKED!r}"]


def test_a_run_with_no_case_gets_its_nearest_case_and_the_attribute_it_lacks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    near = "What's the weather in Paris and Lyon? Give Paris in Celsius."
    cases = [{"id": "booking", "match": {"first_user_message": "Book Lisbon for 2 nights"}},
             {"id": "weather-celsius", "match": {"first_user_message": near}},
             {"id": "item-7", "match": {"attribute": {"key": "dataset.item", "value": 7}}}]
    doc = _inspect(tmp_path, [PYDANTIC], cases, capsys)
    [run] = doc["runs"]
    finding = run["case"]
    assert (finding["status"], finding["case"], finding["first_user_message"]) == (
        "no case", None, ASKED)
    assert finding["nearest"]["case"] == "weather-celsius"
    assert finding["nearest"]["way"] == "first_user_message"
    assert 0.8 < finding["nearest"]["similarity"] < 1
    assert near in finding["nearest"]["needs"]
    assert finding["attributes"] == {"dataset.item": None}
    assert [c["status"] for c in doc["cases"]] == ["missing"] * 3

    text = _inspect(tmp_path, [PYDANTIC], cases, capsys, fmt="table")
    assert f"case: no case  first user message: {ASKED!r}" in text
    assert "nearest case: weather-celsius (similarity 0.87), would match with" in text
    assert "attribute dataset.item (cases match on it): not carried" in text


def test_the_nearest_case_by_attribute_names_the_value_it_needs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = CONVERSATION[:-1] + "9"
    doc = _inspect(tmp_path, [PYDANTIC], [
        {"id": "conv", "match": {"attribute": {"key": "gen_ai.conversation.id",
                                               "value": other}}}], capsys)
    nearest = doc["runs"][0]["case"]["nearest"]
    assert nearest["case"] == "conv" and nearest["way"] == "attribute"
    assert nearest["needs"] == (f"attribute gen_ai.conversation.id={other!r} on the run's root "
                                f"(it has gen_ai.conversation.id={CONVERSATION!r})")
    assert doc["runs"][0]["case"]["attributes"] == {"gen_ai.conversation.id": CONVERSATION}


def test_an_ambiguous_run_names_both_cases_and_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = [{"id": "a", "match": {"first_user_message": ASKED}},
             {"id": "b", "match": {"attribute": {"key": "gen_ai.conversation.id",
                                                 "value": CONVERSATION}}}]
    doc = _inspect(tmp_path, [PYDANTIC], cases, capsys)
    finding = doc["runs"][0]["case"]
    assert (finding["status"], finding["case"]) == ("ambiguous", None)
    assert sorted(finding["cases"]) == ["a", "b"]
    assert sorted(finding["why"]) == [
        f"a: first user message equals {ASKED!r}",
        f"b: attribute gen_ai.conversation.id={CONVERSATION!r}"]
    text = _inspect(tmp_path, [PYDANTIC], cases, capsys, fmt="table")
    assert "case: ambiguous, 2 cases match" in text
    assert "runs: 0 with no case, 1 ambiguous" in text


def test_the_nearest_case_is_worked_out_for_a_bounded_number_of_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inspection, "MAX_NEAREST", 1)
    doc = _inspect(tmp_path, [PYDANTIC, OPENAI_AGENTS], [
        {"id": "booking", "match": {"first_user_message": "Book Lisbon for 2 nights"}}], capsys)
    assert [run["case"]["nearest"] is not None for run in doc["runs"]] == [True, False]


def test_cases_from_the_config_are_used_too(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"cases": [
        {"id": "weather", "match": {"first_user_message": ASKED}}]}))
    assert main(["inspect", PYDANTIC, "--config", str(config), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["runs"][0]["case"]["case"] == "weather"


def test_without_cases_inspect_says_nothing_of_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", PYDANTIC, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "cases" not in doc and "case" not in doc["runs"][0]
    assert main(["inspect", PYDANTIC]) == 0
    text = capsys.readouterr().out
    assert "case:" not in text and "cases (" not in text


def test_a_bad_case_file_is_a_usage_error_naming_the_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case_file = tmp_path / "cases.yaml"
    case_file.write_text(yaml.safe_dump([{"id": "a", "match": {"first_message": "x"}}]))
    assert main(["inspect", PYDANTIC, "--cases", str(case_file)]) == 2
    assert "cases[0].match.first_message: unknown way to match" in capsys.readouterr().err
