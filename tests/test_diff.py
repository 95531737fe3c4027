"""`otel-tooleval diff`: per-case regressions between two grade JSON documents (docs/diff.md)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval.cli import main
from otel_tooleval.diff import DiffInputError, compare, diff_files, read_side

DATA = Path(__file__).resolve().parent / "data" / "diff"
BASE = str(DATA / "baseline.json")
CAND = str(DATA / "candidate.json")
RUNS_BASE = str(DATA / "runs-baseline.json")
RUNS_CAND = str(DATA / "runs-candidate.json")


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["diff", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def case_doc(*cases: tuple[str, str, dict[str, float | None]]) -> dict[str, Any]:
    """A grade JSON document with a ``cases`` list: (id, status, {grader: score})."""
    return {"runs": [], "aggregate": {},
            "cases": [{"id": cid, "status": status, "runs": [],
                       "results": [{"name": n, "score": s, "label": None}
                                   for n, s in scores.items()]}
                      for cid, status, scores in cases]}


def compared(base: dict[str, Any], cand: dict[str, Any], **options: Any) -> Any:
    return compare(read_side("base.json", base), read_side("cand.json", cand), **options)


# -- the example suite: ten cases, two regressed ---------------------------------------------

def test_exactly_the_two_regressed_cases_are_reported_and_exit_1(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, BASE, CAND, "-f", "json")
    assert code == 1 and err == ""
    doc = json.loads(out)
    assert [c["id"] for c in doc["cases"] if c["outcome"] == "regressed"] == [
        "book-lisbon", "refund-order"]
    lisbon = next(c for c in doc["cases"] if c["id"] == "book-lisbon")
    row = next(r for r in lisbon["results"] if r["grader"] == "trajectory")
    assert (row["baseline"], row["candidate"], row["delta"], row["outcome"]) == (
        1.0, 0.5, -0.5, "regressed")
    assert doc["summary"]["regressed"] == 2 and doc["summary"]["same"] == 8
    assert doc["summary"]["failed"] is True and doc["matched_by"] == "case"


def test_identical_inputs_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, BASE, BASE)
    assert code == 0
    assert out.splitlines()[-1].startswith("PASS: 0 regressed, 0 improved, 10 same")


def test_table_lists_the_regressed_rows(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, BASE, CAND)
    assert code == 1
    rows = [line.split() for line in out.splitlines() if line.startswith("  ")]
    assert rows == [["REGRESSED", "book-lisbon", "trajectory", "1.00", "->", "0.50", "(-0.50)"],
                    ["REGRESSED", "refund-order", "tools", "1.00", "->", "0.00", "(-1.00)"]]


def test_swapped_sides_improve_and_pass(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, CAND, BASE, "-f", "json")
    assert code == 0
    assert [c["id"] for c in json.loads(out)["cases"] if c["outcome"] == "improved"] == [
        "book-lisbon", "refund-order"]


def test_markdown_is_a_table_of_the_changed_rows(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, BASE, CAND, "--format", "markdown")
    assert code == 1
    assert out.startswith("### otel-tooleval diff\n")
    assert "| book-lisbon | trajectory | 1.00 | 0.50 | -0.50 | regressed |" in out
    assert "| refund-order | tools | 1.00 | 0.00 | -1.00 | regressed |" in out
    assert "weather-paris" not in out          # unchanged cases stay out of the comment


def test_markdown_escapes_pipes_in_ids() -> None:
    from otel_tooleval.outputs.diff_report import render_diff_markdown

    report = compared(case_doc(("a|b", "pass", {"g": 1.0})),
                      case_doc(("a|b", "fail", {"g": 0.0})))
    assert "| a\\|b | g | 1.00 | 0.00 | -1.00 | regressed |" in render_diff_markdown(report)


def test_junit_one_suite_per_case_failure_per_regressed_grader(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "diff.xml"
    code, out, _ = run_cli(capsys, BASE, CAND, "-f", "junit", "-o", str(out_file))
    assert code == 1 and out == ""
    root = ET.parse(out_file).getroot()
    suites = root.findall("testsuite")
    assert len(suites) == 10 and root.get("failures") == "2" and root.get("tests") == "20"
    failed = [(c.get("classname"), c.get("name")) for c in root.iter("testcase")
              if c.find("failure") is not None]
    assert failed == [("book-lisbon", "trajectory"), ("refund-order", "tools")]


# -- threshold and --fail-on -------------------------------------------------------------------

def test_threshold_ignores_drops_within_it(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run_cli(capsys, BASE, CAND, "--threshold", "0.5")
    assert code == 1                            # refund-order fell by 1.0
    code, out, _ = run_cli(capsys, BASE, CAND, "--threshold", "1", "-f", "json")
    assert code == 0 and json.loads(out)["summary"]["regressed"] == 0


def test_default_threshold_any_drop_regresses() -> None:
    report = compared(case_doc(("c", "pass", {"g": 0.8})), case_doc(("c", "pass", {"g": 0.79})))
    assert [c.outcome for c in report.cases] == ["regressed"]
    report = compared(case_doc(("c", "pass", {"g": 0.8})),
                      case_doc(("c", "pass", {"g": 0.8 + 1e-12})))
    assert [c.outcome for c in report.cases] == ["same"]


def test_fail_on_mean_gates_on_the_mean_delta(capsys: pytest.CaptureFixture[str]) -> None:
    # two rows of twenty fell by 1.5 in all: the mean delta is -0.075
    assert run_cli(capsys, BASE, CAND, "--fail-on", "mean")[0] == 1
    assert run_cli(capsys, BASE, CAND, "--fail-on", "mean", "--threshold", "0.07")[0] == 1
    assert run_cli(capsys, BASE, CAND, "--fail-on", "mean", "--threshold", "0.08")[0] == 0


def test_a_negative_threshold_is_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["diff", BASE, CAND, "--threshold", "-0.1"])
    assert exc.value.code == 2
    assert "'-0.1' is not a number >= 0" in capsys.readouterr().err


# -- statuses, errors, graders and cases on one side -------------------------------------------

def test_a_case_gone_missing_regresses_on_its_status(capsys: pytest.CaptureFixture[str]) -> None:
    report = compared(case_doc(("c", "pass", {"g": 1.0})), case_doc(("c", "missing", {})))
    (case,) = report.cases
    assert case.outcome == "regressed" and case.status_regressed
    assert [(r.grader, r.outcome) for r in case.rows] == [("g", "removed")]
    from otel_tooleval.outputs.diff_report import render_diff_table

    assert "REGRESSED  c  status pass -> missing" in render_diff_table(report)


def test_a_grader_error_where_there_was_a_score_regresses() -> None:
    report = compared(case_doc(("c", "pass", {"g": 1.0})), case_doc(("c", "pass", {"g": None})))
    assert report.cases[0].rows[0].outcome == "regressed"
    assert report.cases[0].rows[0].delta is None
    report = compared(case_doc(("c", "pass", {"g": None})), case_doc(("c", "pass", {"g": 0.0})))
    assert report.cases[0].rows[0].outcome == "improved"


def test_graders_on_one_side_are_added_or_removed_not_regressed() -> None:
    report = compared(case_doc(("c", "pass", {"old": 1.0})), case_doc(("c", "pass", {"new": 0.0})))
    assert [(r.grader, r.outcome) for r in report.cases[0].rows] == [
        ("old", "removed"), ("new", "added")]
    assert not report.failed


def test_cases_only_on_one_side_are_listed_not_failed(capsys: pytest.CaptureFixture[str]) -> None:
    report = compared(case_doc(("a", "pass", {"g": 1.0}), ("gone", "pass", {"g": 1.0})),
                      case_doc(("a", "pass", {"g": 1.0}), ("new", "fail", {"g": 0.0})))
    assert report.only_baseline == ("gone",) and report.only_candidate == ("new",)
    assert not report.failed
    summary = report.summary()
    assert (summary["only_baseline"], summary["only_candidate"], summary["cases"]) == (1, 1, 1)


def test_runs_without_a_case_are_counted_not_compared() -> None:
    base = case_doc(("a", "pass", {"g": 1.0}))
    base["runs"] = [{"case": None, "agent": "x", "results": []}]
    report = compared(base, case_doc(("a", "pass", {"g": 1.0})))
    assert report.notes == ("base.json: 1 run(s) matched no case and are not compared",)


# -- documents without cases: the fallback pairing ---------------------------------------------

def test_runs_are_paired_by_agent_and_position_without_cases(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, RUNS_BASE, RUNS_CAND, "-f", "json")
    assert code == 1
    doc = json.loads(out)
    assert doc["matched_by"] == "run"
    assert [c["id"] for c in doc["cases"] if c["outcome"] == "regressed"] == [
        "travel-agent #3", "travel-agent #6"]


def test_runs_pair_by_first_user_message_when_present_min_over_repeats() -> None:
    def run(agent: str, message: str, score: float) -> dict[str, Any]:
        return {"agent": agent, "first_user_message": message, "passed": score == 1.0,
                "results": [{"name": "g", "score": score, "label": None}]}

    base = {"runs": [run("a", "Paris?", 1.0), run("a", "Rome?", 1.0)], "aggregate": {}}
    # another order, and Paris twice: the worse of its two runs is compared
    cand = {"runs": [run("a", "Rome?", 1.0), run("a", " Paris? ", 1.0), run("a", "Paris?", 0.5)],
            "aggregate": {}}
    report = compared(base, cand)
    assert [(c.id, c.outcome) for c in report.cases] == [
        ("a: Paris?", "regressed"), ("a: Rome?", "same")]
    assert report.cases[0].rows[0].candidate == 0.5


def test_runs_carrying_a_case_id_pair_by_it_without_a_cases_list() -> None:
    def run(case: str, score: float) -> dict[str, Any]:
        return {"case": case, "agent": "a", "results": [{"name": "g", "score": score}]}

    report = compared({"runs": [run("x", 1.0), run("y", 1.0)]},
                      {"runs": [run("y", 0.0), run("x", 1.0)]})
    assert [(c.id, c.outcome) for c in report.cases] == [("x", "same"), ("y", "regressed")]


# -- input problems: exit 2, one line naming the file ------------------------------------------

@pytest.mark.parametrize(("content", "says"), [
    ("not json", "not JSON (line 1 column 1"),
    ('{"aggregate": {}}', "not an otel-tooleval grade --format json document"),
    ("[1, 2]", "not an otel-tooleval grade --format json document"),
    ('{"runs": [], "cases": {}}', "cases: not a list"),
    ('{"runs": [], "cases": [{"status": "pass"}]}', "cases[0].id: not a non-empty string"),
    ('{"runs": [], "cases": [{"id": "a"}, {"id": "a"}]}', "cases[1].id: 'a' appears twice"),
    ('{"runs": [], "cases": [{"id": "a", "status": "ok"}]}', "cases[0].status: 'ok' is not"),
    ('{"runs": [], "cases": [{"id": "a", "results": [{"name": "g", "score": "1"}]}]}',
     "cases[0].results[0].score: '1' is not a number or null"),
    ('{"runs": [{"results": [{"score": 1}]}]}', "runs[0].results[0].name: not a non-empty"),
    ('{"runs": [7]}', "runs[0]: not an object"),
])
def test_a_file_that_is_not_grade_json_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, says: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code, out, err = run_cli(capsys, BASE, str(bad))
    assert code == 2 and out == ""
    assert err.startswith(f"otel-tooleval diff: {bad}: ") and says in err
    assert err.count("\n") == 1


def test_an_unreadable_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, str(tmp_path / "nope.json"), CAND)
    assert code == 2 and f"{tmp_path / 'nope.json'}: cannot read" in err


def test_cases_on_one_side_only_is_an_input_problem(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, RUNS_BASE, CAND)
    assert code == 2 and "runs-baseline.json: has no cases list while" in err


def test_two_unrelated_documents_are_an_input_problem() -> None:
    with pytest.raises(DiffInputError, match="no case in common"):
        compared(case_doc(("a", "pass", {"g": 1.0})), case_doc(("b", "pass", {"g": 1.0})))


def test_two_empty_documents_pass() -> None:
    assert not compared(case_doc(), case_doc()).failed


def test_an_unwritable_output_is_exit_2(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, BASE, CAND, "-o", str(tmp_path / "no" / "such" / "x"))
    assert code == 2 and "cannot write" in err


def test_diff_files_is_the_python_entry() -> None:
    report = diff_files(BASE, CAND, threshold=0.0)
    assert [c.id for c in report.regressed] == ["book-lisbon", "refund-order"]
    assert report.mean_delta() == pytest.approx(-0.075)


def test_the_table_shown_in_docs_is_what_diff_prints(capsys: pytest.CaptureFixture[str]) -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "diff.md").read_text(encoding="utf-8")
    shown = doc.split("otel-tooleval diff baseline.json -> candidate.json\n", 1)[1]
    shown = shown.split("  ```", 1)[0]
    _, out, _ = run_cli(capsys, BASE, CAND)
    printed = out.split("\n", 1)[1]
    assert [line.strip() for line in shown.splitlines()] == [
        line.strip() for line in printed.splitlines()]
