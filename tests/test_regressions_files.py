"""Regressions found in the second review: malformed or truncated input does not pass a gate,
duplicate spans, YAML dates in expected arguments, custom graders' error results,
`tool_arguments` of a call without arguments."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from otel_tooleval.model import AgentRun, GradeResult, ToolCall

MAIN = Path(__file__).resolve().parents[1]
GOOD = MAIN / "tests/data/files/traces.otlp.jsonl"


def _cli(tmp_path, *files, cfg="graders:\n  - {name: order, type: tool-call-order, threshold: 0.0, tool_calls_order: [search]}\n"):
    c = tmp_path / "cfg.yaml"
    c.write_text(cfg)
    return subprocess.run([sys.executable, "-m", "otel_tooleval.cli", "grade", *map(str, files),
                           "-c", str(c), "-f", "json"], capture_output=True, text=True, cwd=MAIN,
                          check=False)


def _clean_lines():
    # lines of the golden file that carry no deliberate problem
    out = []
    for line in GOOD.read_text().splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if "resourceSpans" in d and "not-a-trace-id" not in line:
            out.append(line)
    return out


# F1: truncated (unreadable) input must not pass the gate
def test_truncated_gzip_exits_2(tmp_path):
    data = ("\n".join(_clean_lines()) + "\n").encode()
    g = gzip.compress(data)
    p = tmp_path / "t.jsonl.gz"
    p.write_bytes(g[: len(g) // 2])
    r = _cli(tmp_path, p)
    assert r.returncode == 2, (r.returncode, r.stderr[-300:])


# F2: a malformed line is unreadable input (reason names file and line) -> exit 2
def test_malformed_line_exits_2(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text("\n".join(_clean_lines()) + "\n{not json\n")
    r = _cli(tmp_path, p)
    assert r.returncode == 2, (r.returncode, r.stderr[-300:])


# F3: duplicate span records (exporter retries) multiply runs and calls
def test_duplicate_spans_are_deduplicated(tmp_path):
    one = tmp_path / "one.jsonl"
    two = tmp_path / "two.jsonl"
    text = "\n".join(_clean_lines()) + "\n"
    one.write_text(text)
    two.write_text(text * 2)
    a = json.loads(_cli(tmp_path, one).stdout)
    b = json.loads(_cli(tmp_path, two).stdout)
    assert [r["tool_calls"] for r in b["runs"]] == [r["tool_calls"] for r in a["runs"]]


# F8b: CLI: a YAML date in tool-call-args is a config error (exit 2), not a traceback
def test_cli_yaml_date_in_args_exits_2(tmp_path):
    r = _cli(tmp_path, GOOD, cfg="graders:\n  - {type: tool-call-args, tool_calls: [{name: t, args: {d: 2020-01-01}}]}\n")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-300:]



# F5: custom grader GradeResult with label "error" must carry an error type name
def test_custom_error_result_has_error_type():
    from otel_tooleval.config import load_config
    from otel_tooleval.graders.custom import grader

    @grader(name="rev2_err")
    def rev2_err(run, submission):
        return GradeResult("x", "tool", 0.0, False, "error", "could not grade")

    cfg = load_config({"graders": [{"name": "c", "kind": "tool", "function": "rev2_err"}]})
    res = cfg.graders[0].grader.grade(AgentRun(1, 1, "a", ()))
    assert res.label == "error" and res.error, res


# F6: a custom GradeResult with details=None raises out of ToolGrader.grade()
def test_custom_result_without_details_does_not_raise():
    from otel_tooleval.config import load_config
    from otel_tooleval.graders.custom import grader

    @grader(name="rev2_nodetails")
    def rev2_nodetails(run, submission):
        return GradeResult("x", "tool", 1.0, True, "pass", "ok", None)

    cfg = load_config({"graders": [{"name": "c", "kind": "tool", "function": "rev2_nodetails"}]})
    res = cfg.graders[0].grader.grade(AgentRun(1, 1, "a", ()))
    assert res.passed


# F7: a call that recorded no arguments is "{}" for tool_arguments (as the args graders treat it)
def test_tool_arguments_no_args_is_empty_object():
    from otel_tooleval.config import load_config
    cfg = load_config({"graders": [{"name": "a", "kind": "tool", "function": "exact_match",
                                    "extractor": "tool_arguments",
                                    "extractor_config": {"tool_name": "ping"},
                                    "ground_truth": "{}"}]})
    run = AgentRun(1, 1, "a", (ToolCall("ping", 0, end_ns=1),))
    res = cfg.graders[0].grader.grade(run)
    assert res.passed, res.explanation


# F8: tool-call-args: YAML dates in expected args silently never match (trajectory rejects them at load)
def test_tool_call_args_rejects_yaml_date_at_load():
    import datetime

    from otel_tooleval.config import ConfigError, load_config
    with pytest.raises(ConfigError):
        load_config({"graders": [{"type": "tool-call-args",
                                  "tool_calls": [{"name": "t", "args": {"d": datetime.date(2020, 1, 1)}}]}]})
