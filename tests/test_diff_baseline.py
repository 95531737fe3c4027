"""`grade --baseline FILE [--update-baseline]`: grade and diff in one step (docs/diff.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_tooleval.cli import main

TRACES = str(Path(__file__).resolve().parent / "data" / "files" / "traces.otlp.jsonl")
# The researcher's run calls search, fetch_page twice and write_report: the first config scores
# it 1.0, the second 2/3, which still passes its threshold: grade alone exits 0 on both.
GOOD = ("graders:\n  - {name: g, type: tool_correctness, agents: [researcher], threshold: 0.1,"
        " expected_tools: [{name: search}, {name: fetch_page}]}\n")
WORSE = ("graders:\n  - {name: g, type: tool_correctness, agents: [researcher], threshold: 0.1,"
         " expected_tools: [{name: search}, {name: fetch_page}, {name: nope}]}\n")


def grade(tmp_path: Path, config: str, *extra: str) -> int:
    path = tmp_path / "graders.yaml"
    path.write_text(config)
    return main(["grade", TRACES, "-c", str(path), "--allow-input-problems", *extra])


def write_baseline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    baseline = tmp_path / "baseline.json"
    assert grade(tmp_path, GOOD, "-f", "json", "-o", str(baseline)) == 0
    capsys.readouterr()
    return baseline


def test_a_regression_against_the_baseline_exits_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    baseline = write_baseline(tmp_path, capsys)
    assert grade(tmp_path, WORSE) == 0                  # the run passes on its own
    capsys.readouterr()
    assert grade(tmp_path, WORSE, "--baseline", str(baseline)) == 1
    out, err = capsys.readouterr()
    assert "PASS" in out                                # the report is grade's own table
    assert "REGRESSED  researcher #1  g  1.00 -> 0.67  (-0.33)" in err
    assert "FAIL: 1 regressed, 0 improved, 3 same of 4 case(s) matched by run" in err


def test_the_same_grade_against_its_baseline_exits_0(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    baseline = write_baseline(tmp_path, capsys)
    assert grade(tmp_path, GOOD, "-f", "junit", "--baseline", str(baseline)) == 0
    out, err = capsys.readouterr()
    assert out.startswith("<?xml")                     # any report format, the diff on stderr
    assert "PASS: 0 regressed, 0 improved, 4 same" in err


def test_update_baseline_writes_this_run_and_does_not_fail(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    baseline = write_baseline(tmp_path, capsys)
    assert grade(tmp_path, WORSE, "--baseline", str(baseline), "--update-baseline") == 0
    err = capsys.readouterr().err
    assert "1 regressed" in err and f"baseline {baseline} updated" in err
    scores = [r["score"] for run in json.loads(baseline.read_text())["runs"]
              for r in run["results"]]
    assert scores == [pytest.approx(2 / 3)]
    assert grade(tmp_path, WORSE, "--baseline", str(baseline)) == 0   # the new baseline


def test_update_baseline_creates_a_missing_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    baseline = tmp_path / "new.json"
    assert grade(tmp_path, GOOD, "--baseline", str(baseline), "--update-baseline") == 0
    assert json.loads(baseline.read_text())["aggregate"]["runs"] == 4


def test_a_missing_baseline_without_update_is_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert grade(tmp_path, GOOD, "--baseline", str(tmp_path / "none.json")) == 2
    err = capsys.readouterr().err
    assert f"otel-tooleval: --baseline: {tmp_path / 'none.json'}: cannot read" in err


def test_a_baseline_that_is_not_grade_json_is_exit_2_and_kept(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    baseline = tmp_path / "b.json"
    baseline.write_text('{"not": "grade"}')
    assert grade(tmp_path, GOOD, "--baseline", str(baseline), "--update-baseline") == 2
    assert "not an otel-tooleval grade --format json document" in capsys.readouterr().err
    assert baseline.read_text() == '{"not": "grade"}'


def test_an_unusable_grade_leaves_the_baseline_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    baseline = write_baseline(tmp_path, capsys)
    before = baseline.read_text()
    path = tmp_path / "graders.yaml"
    path.write_text(WORSE)
    # without --allow-input-problems the malformed lines make the gate exit 2
    assert main(["grade", TRACES, "-c", str(path), "--baseline", str(baseline),
                 "--update-baseline"]) == 2
    assert baseline.read_text() == before


def test_update_baseline_needs_baseline(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert grade(tmp_path, GOOD, "--update-baseline") == 2
    assert "--update-baseline needs --baseline FILE" in capsys.readouterr().err
