"""`otel-tooleval grade`: formats, outputs, exit codes, stdin, grouping (ARCHITECTURE.md)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from otel_tooleval.cli import main

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests/data/files"
JSONL = DATA / "traces.otlp.jsonl"

LENIENT = "graders:\n  - {name: anything, type: tool-call-count, tool_calls_count: {nope: ['==', 0]}}\n"
STRICT = "graders:\n  - {name: no-refund, type: tool-calls, config: {disallowed: ['^refund$']}}\n"


@pytest.fixture
def config(tmp_path: Path) -> callable:  # type: ignore[valid-type]
    def write(text: str) -> str:
        path = tmp_path / "graders.yaml"
        path.write_text(text)
        return str(path)
    return write


def test_exit_zero_when_every_run_passes(config, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grade", str(JSONL), "--config", config(LENIENT),
                 "--allow-input-problems"]) == 0
    out, err = capsys.readouterr()
    assert "PASS" in out
    # malformed lines are reported with file and line; the rest is still graded
    assert f"{JSONL}:4: invalid JSON" in err and f"{JSONL}:2:" in err


def test_input_problems_exit_two_after_reporting(config, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    assert main(["grade", str(JSONL), "-c", config(LENIENT), "-f", "json", "-o", str(out)]) == 2
    assert json.loads(out.read_text())["runs"], "the readable part is still graded and reported"
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "input problem(s), the first at" in last and f"{JSONL}:2:" in last
    import gzip
    cut = tmp_path / "cut.jsonl.gz"
    data = gzip.compress((DATA / "traces.otlp.json").read_bytes())
    cut.write_bytes(data[: len(data) // 2])
    assert main(["grade", str(cut), "-c", config(LENIENT)]) == 2


def test_exit_one_when_a_run_fails_and_json_is_the_documented_document(
        config, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grade", str(JSONL), "-c", config(STRICT), "--format", "json",
                 "--allow-input-problems"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"runs", "aggregate"}
    run = doc["runs"][0]
    assert set(run) == {"trace_id", "root_span_id", "agent", "tool_calls", "pending_calls",
                        "late_spans", "reading", "passed", "results"}
    assert len(run["trace_id"]) == 32 and len(run["root_span_id"]) == 16
    assert set(run["results"][0]) == {"name", "type", "score", "passed", "label",
                                      "explanation", "details", "error"}
    failing = [r for r in doc["runs"] if not r["passed"]]
    assert [r["agent"] for r in failing] == ["support"]
    agg = doc["aggregate"]
    assert agg["runs"] == len(doc["runs"]) and agg["failed"] == 1
    assert agg["graders"]["no-refund"]["runs"] == len(doc["runs"])


def test_junit_has_a_testcase_per_run_and_grader(config, tmp_path: Path) -> None:
    out = tmp_path / "junit.xml"
    assert main(["grade", str(JSONL), "-c", config(STRICT), "-f", "junit", "-o", str(out),
                 "--allow-input-problems"]) == 1
    root = ET.parse(out).getroot()
    cases = root.findall(".//testcase")
    assert len(cases) >= 4 and all(c.get("name") == "no-refund" for c in cases)
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == 1 and failed[0].get("classname", "").startswith("support ")


def test_html_to_a_file_is_self_contained(config, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert main(["grade", str(JSONL), "-c", config(STRICT), "-f", "html", "-o", str(out),
                 "--allow-input-problems"]) == 1
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") or html.lower().startswith("<!doctype html>")
    assert "http://" not in html.replace("http://www.w3.org", "") and "https://" not in html


@pytest.mark.parametrize("name", ["traces.otlp.jsonl.gz", "traces.otlp.json", "traces.otlp.pb",
                                  "traces.jaeger.json"])
def test_every_format_gives_the_same_verdicts(config, name: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    cfg = config(STRICT)
    main(["grade", str(JSONL), "-c", cfg, "-f", "json"])
    reference = json.loads(capsys.readouterr().out)
    main(["grade", str(DATA / name), "-c", cfg, "-f", "json"])
    doc = json.loads(capsys.readouterr().out)
    verdicts = [(r["agent"], r["tool_calls"], r["pending_calls"], r["passed"]) for r in doc["runs"]]
    assert verdicts == [(r["agent"], r["tool_calls"], r["pending_calls"], r["passed"])
                        for r in reference["runs"]]


def test_stdin(config, monkeypatch: pytest.MonkeyPatch,
               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(JSONL.read_bytes())))
    assert main(["grade", "-", "-c", config(STRICT), "-f", "json",
                 "--allow-input-problems"]) == 1
    assert len(json.loads(capsys.readouterr().out)["runs"]) >= 4


def test_group_by_gates_each_group(config, capsys: pytest.CaptureFixture[str]) -> None:
    text = ("graders:\n  - {name: sel, type: equal_function_sets, "
            "classes: [{name: s, members: [search]}], expect: [{tool_selection.f1: {'>=': 0}}]}\n")
    main(["grade", str(JSONL), "-c", config(text), "-f", "json", "--group-by", "gen_ai.agent.name"])
    agg = json.loads(capsys.readouterr().out)["aggregate"]
    assert agg["group_by"] == "gen_ai.agent.name"
    assert {"researcher", "support"} <= set(agg["groups"])


@pytest.mark.parametrize("argv", [
    ["grade", str(JSONL)],                                  # --config missing
    ["grade", "--config", "x.yaml"],                        # no file
    ["grade", str(JSONL), "-c", "x.yaml", "-f", "pdf"],     # unknown format
])
def test_bad_usage_exits_two(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2


def test_bad_config_and_unreadable_input_exit_two(config, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    bad = config("graders:\n  - {type: tool-calls, config: {}}\n")
    assert main(["grade", str(JSONL), "-c", bad]) == 2
    assert "graders[0].config" in capsys.readouterr().err
    assert main(["grade", str(tmp_path / "missing.jsonl"), "-c", config(LENIENT)]) == 2
    err = capsys.readouterr().err
    assert "missing.jsonl" in err and len(err.strip().splitlines()) == 1
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x00\x01not a trace")
    assert main(["grade", str(garbage), "-c", config(LENIENT)]) == 2


def test_console_script_exit_status(config) -> None:
    proc = subprocess.run([sys.executable, "-m", "otel_tooleval.cli", "grade", str(JSONL),
                           "-c", config(STRICT), "--allow-input-problems"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          check=False)
    assert proc.returncode == 1, proc.stderr
    assert "FAIL" in proc.stdout


def test_progress_on_a_terminal_for_large_input(tmp_path: Path) -> None:
    """A span counter on stderr when it is a terminal and the input is large; none otherwise."""
    from otel_tooleval import load_config
    from otel_tooleval.offline import grade_files

    spans = []
    for t in range(400):
        trace = f"{t + 1:032x}"
        root = f"{t * 100 + 1:016x}"
        spans.append({"traceId": trace, "spanId": root, "name": "invoke_agent a",
                      "startTimeUnixNano": "1", "endTimeUnixNano": "1000",
                      "attributes": [{"key": "gen_ai.operation.name",
                                      "value": {"stringValue": "invoke_agent"}}]})
        for i in range(2, 52):
            spans.append({"traceId": trace, "spanId": f"{t * 100 + i:016x}", "parentSpanId": root,
                          "name": "t", "startTimeUnixNano": str(i), "endTimeUnixNano": str(i + 1),
                          "attributes": [{"key": "gen_ai.tool.name",
                                          "value": {"stringValue": "search"}}]})
    path = tmp_path / "big.jsonl"
    with path.open("w") as fh:
        for start in range(0, len(spans), 500):
            doc = {"resourceSpans": [{"scopeSpans": [{"spans": spans[start:start + 500]}]}]}
            fh.write(json.dumps(doc) + "\n")
    config = load_config(STRICT)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty, pipe = Terminal(), io.StringIO()
    outcome = grade_files([str(path)], config, progress=tty)
    assert outcome.spans == 400 * 51 and len(outcome.reports) == 400
    assert "\rotel-tooleval: " in tty.getvalue() and "400 runs graded\n" in tty.getvalue()
    grade_files([str(path)], config, progress=pipe)
    assert pipe.getvalue() == ""
