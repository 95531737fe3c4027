"""`otel-tooleval diff` over trace files and a config, and the example suite of examples/cases.

The suite (examples/cases/suite.py) is run once, in a subprocess under the examples' offline
environment, as its README's first command; it writes v1.jsonl and v2.jsonl, where v2 regresses
exactly book-lisbon (a wrong argument) and refund-order (a missing call).
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from otel_tooleval.cli import main
from otel_tooleval.diff_inputs import input_kind
from tests.test_examples import BLOCKED, offline_env

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cases"
CONFIG = str(EXAMPLE / "graders.yaml")
CASES = str(EXAMPLE / "cases.yaml")
REGRESSED = ["book-lisbon", "refund-order"]


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder where ``python examples/cases/suite.py`` wrote v1.jsonl and v2.jsonl."""
    where = tmp_path_factory.mktemp("suite")
    done = subprocess.run([sys.executable, str(EXAMPLE / "suite.py")], cwd=where,
                          env=offline_env(where), capture_output=True, text=True, timeout=120,
                          check=False)
    assert BLOCKED not in done.stderr, done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"{v}: 10 runs written to {v}.jsonl" for v in ("v1", "v2")]
    return where


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def regressed(out: str) -> list[str]:
    doc = json.loads(out)
    return [c["id"] for c in doc["cases"] if c["outcome"] == "regressed"]


def graded(capsys: pytest.CaptureFixture[str], traces: Path, out: Path) -> Path:
    code, _, err = run_cli(capsys, "grade", str(traces), "-c", CONFIG, "--cases", CASES,
                           "-f", "json", "-o", str(out))
    assert code in (0, 1), err
    return out


# -- the example suite --------------------------------------------------------------------

def test_readme_second_command_reports_the_two_regressed_cases_exit_1(suite: Path) -> None:
    """The README's second command, as a newcomer types it (a subprocess, the table)."""
    done = subprocess.run(
        [sys.executable, "-m", "otel_tooleval.cli", "diff", "v1.jsonl", "v2.jsonl",
         "-c", CONFIG, "--cases", CASES], cwd=suite, env=offline_env(suite),
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    readme = (EXAMPLE / "README.md").read_text()
    assert f"```\n{done.stdout}```\n" in readme, done.stdout      # the output shown there
    assert ("python examples/cases/suite.py" in readme and "otel-tooleval diff v1.jsonl v2.jsonl "
            "-c examples/cases/graders.yaml --cases examples/cases/cases.yaml" in readme)
    lines = done.stdout.splitlines()
    assert {line.split()[1] for line in lines if line.lstrip().startswith("REGRESSED")} == set(
        REGRESSED)
    assert lines[-1].startswith("FAIL: 2 regressed, 0 improved, 8 same of 10 case(s)")


def test_v1_passes_every_case(suite: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "grade", str(suite / "v1.jsonl"), "-c", CONFIG,
                             "--cases", CASES, "-f", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert [c["status"] for c in doc["cases"]] == ["pass"] * 10
    assert all(run["case"] for run in doc["runs"])


def test_diff_over_trace_files_exactly_the_two_regressed_cases(
        suite: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "diff", str(suite / "v1.jsonl"), str(suite / "v2.jsonl"),
                             "-c", CONFIG, "--cases", CASES, "-f", "json")
    assert code == 1 and err == ""
    assert regressed(out) == REGRESSED
    doc = json.loads(out)
    assert doc["summary"]["same"] == 8 and doc["matched_by"] == "case"
    lisbon = next(c for c in doc["cases"] if c["id"] == "book-lisbon")
    assert [(r["grader"], r["baseline"], r["candidate"]) for r in lisbon["results"]
            if r["outcome"] == "regressed"] == [("trajectory", 1.0, 0.5)]


def test_diff_over_identical_trace_files_exit_0(
        suite: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "diff", str(suite / "v1.jsonl"), str(suite / "v1.jsonl"),
                           "-c", CONFIG, "--cases", CASES, "-f", "json")
    assert code == 0 and regressed(out) == []
    assert json.loads(out)["summary"]["same"] == 10


def test_diff_over_grade_json_agrees_with_diff_over_traces(
        suite: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = graded(capsys, suite / "v1.jsonl", tmp_path / "base.json")
    cand = graded(capsys, suite / "v2.jsonl", tmp_path / "cand.json")
    code, from_json, _ = run_cli(capsys, "diff", str(base), str(cand), "-f", "json")
    assert code == 1 and regressed(from_json) == REGRESSED
    code, same, _ = run_cli(capsys, "diff", str(base), str(base))
    assert code == 0 and same.splitlines()[-1].startswith("PASS: 0 regressed")
    _, from_traces, _ = run_cli(capsys, "diff", str(suite / "v1.jsonl"),
                                str(suite / "v2.jsonl"), "-c", CONFIG, "--cases", CASES,
                                "-f", "json")
    strip = ("baseline", "candidate")
    assert ({k: v for k, v in json.loads(from_json).items() if k not in strip}
            == {k: v for k, v in json.loads(from_traces).items() if k not in strip})


def test_a_grade_json_side_and_a_trace_side_mix(
        suite: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = graded(capsys, suite / "v1.jsonl", tmp_path / "base.json")
    code, out, _ = run_cli(capsys, "diff", str(base), str(suite / "v2.jsonl"), "-c", CONFIG,
                           "--cases", CASES, "-f", "json")
    assert code == 1 and regressed(out) == REGRESSED


def test_cases_in_the_config_need_no_cases_flag(
        suite: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    merged = tmp_path / "suite.yaml"
    merged.write_text((EXAMPLE / "graders.yaml").read_text()
                      + (EXAMPLE / "cases.yaml").read_text())
    code, out, _ = run_cli(capsys, "diff", str(suite / "v1.jsonl"), str(suite / "v2.jsonl"),
                           "-c", str(merged), "-f", "json")
    assert code == 1 and regressed(out) == REGRESSED


# -- input problems -----------------------------------------------------------------------

def test_a_trace_file_without_a_config_is_named(
        suite: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = str(suite / "v2.jsonl")
    code, out, err = run_cli(capsys, "diff", trace, trace)
    assert code == 2 and out == ""
    assert err == (f"otel-tooleval diff: {trace}: looks like traces, not a grade --format "
                   "json document: give --config FILE (and --cases FILE) to grade it, or "
                   "diff the outputs of grade --format json\n")


def test_cases_without_a_config_is_bad_usage(
        suite: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "diff", str(suite / "v1.jsonl"), str(suite / "v2.jsonl"),
                           "--cases", CASES)
    assert code == 2 and "--cases needs --config FILE" in err


def test_a_run_matching_two_cases_is_an_input_problem(
        suite: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text("cases:\n"
                     "  - {id: a, match: {first_user_message_regex: Paris}}\n"
                     "  - {id: b, match: {first_user_message_regex: weather}}\n")
    code, out, err = run_cli(capsys, "diff", str(suite / "v1.jsonl"), str(suite / "v2.jsonl"),
                             "-c", CONFIG, "--cases", str(cases))
    assert code == 2 and out == ""
    assert err.startswith(f"otel-tooleval diff: {suite / 'v1.jsonl'}: trace ")
    assert "the run matches 2 cases (a, b)" in err and "input problem(s) in all" in err


def test_a_trace_file_without_agent_runs_is_an_input_problem(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    http_only = tmp_path / "http.jsonl"
    span = {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": "GET /",
            "startTimeUnixNano": "1", "endTimeUnixNano": "2"}
    http_only.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}))
    code, _, err = run_cli(capsys, "diff", str(http_only), str(http_only), "-c", CONFIG)
    assert code == 2
    assert err == (f"otel-tooleval diff: {http_only}: read 1 span(s), none was an agent run: "
                   "nothing to compare\n")


def test_a_bad_config_is_exit_2(suite: Path, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("graders:\n  - {name: t, type: tool_trajectory, mode: sideways}\n")
    code, _, err = run_cli(capsys, "diff", str(suite / "v1.jsonl"), str(suite / "v2.jsonl"),
                           "-c", str(bad))
    assert code == 2 and "graders[0]" in err


# -- telling a grade document from traces -------------------------------------------------

@pytest.mark.parametrize(("content", "kind"), [
    (b'{"runs": [\n],\n"aggregate": {}}\n', "grade"),
    (b'{\n  "aggregate": {},\n  "runs": []\n}\n', "grade"),          # jq -S
    (b'\xef\xbb\xbf{"cases": [], "runs": []}', "grade"),
    (b'{"resourceSpans": []}\n', "traces"),
    (b'{"data": [{"traceID": "1"}]}', "traces"),
    (gzip.compress(b'{"runs": []}'), "traces"),
    (b"\x0a\x8f\xff\xfe\x00", "traces"),                                 # OTLP protobuf
    (b'{"runs": [{"agent": "' + b"x" * (64 * 1024 - 22) + "é".encode(), "grade"),  # é cut
    (b'{"graders": []}', "unknown"),
    (b"not json", "unknown"),
])
def test_input_kind_by_content(tmp_path: Path, content: bytes, kind: str) -> None:
    path = tmp_path / "input"
    path.write_bytes(content)
    assert input_kind(str(path)) == kind


def test_input_kind_of_a_missing_file_is_unknown(tmp_path: Path) -> None:
    assert input_kind(str(tmp_path / "nope")) == "unknown"


def test_a_config_problem_met_while_grading_is_exit_2(
        suite: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # tool-calls' `command` filter needs a string `command` argument, which get_weather has not:
    # a config that does not fit the runs (as grade says, exit 2), not a regression.
    cfg = tmp_path / "g.yaml"
    cfg.write_text("graders:\n  - {name: runs-tests, type: tool-calls, "
                   "config: {required: [{name: get_weather, command: 'npm test'}]}}\n")
    code, out, err = run_cli(capsys, "diff", str(suite / "v1.jsonl"), str(suite / "v2.jsonl"),
                             "-c", str(cfg))
    assert code == 2 and out == ""
    assert err.startswith(f"otel-tooleval diff: {suite / 'v1.jsonl'}: config problem found "
                          "while grading: runs-tests: ")


def test_a_file_neither_grade_json_nor_traces_is_named_with_or_without_config(
        suite: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    odd = tmp_path / "odd.json"
    odd.write_text('{"foo": 1}\n')
    code, _, err = run_cli(capsys, "diff", str(odd), str(suite / "v1.jsonl"), "-c", CONFIG)
    assert code == 2 and err == f"otel-tooleval diff: {odd}: no span could be read (1 problems)\n"
    code, _, err = run_cli(capsys, "diff", str(odd), str(odd))
    assert code == 2 and err == (f"otel-tooleval diff: {odd}: not an otel-tooleval grade "
                                 "--format json document (no top-level runs list)\n")
