"""A CI gate never passes on nothing: no runs, too few runs, detached spans, empty configs,
and config problems that only show while grading (issue 14)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval import load_config
from otel_tooleval.cli import main
from otel_tooleval.config import ConfigError

TRACE = "5b8aa5a2d2c872e8321cf37308d69df2"
CONFIG = "graders:\n  - {name: no-refund, type: tool-calls, config: {disallowed: ['^refund$']}}\n"


def span(span_id: int, parent: int | None, name: str, trace: str = TRACE,
         **attrs: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": trace, "spanId": f"{span_id:016x}", "name": name, "kind": 1,
        "startTimeUnixNano": str(1_700_000_000_000_000_000 + span_id * 1000),
        "endTimeUnixNano": str(1_700_000_000_000_000_000 + span_id * 1000 + 500),
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]}
    if parent is not None:
        out["parentSpanId"] = f"{parent:016x}"
    return out


def agent_run(root: int, trace: str = TRACE, parent: int | None = None) -> list[dict[str, Any]]:
    return [span(root, parent, "invoke_agent support", trace, **{
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"}),
            span(root + 1, root, "execute_tool lookup", trace, **{
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"})]


def write(tmp_path: Path, name: str, spans: list[dict[str, Any]]) -> str:
    doc = {"resourceSpans": [{"resource": {}, "scopeSpans": [
        {"scope": {"name": "test"}, "spans": spans}]}]}
    path = tmp_path / name
    path.write_text(json.dumps(doc) + "\n" if spans else "")
    return str(path)


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "graders.yaml"
    path.write_text(CONFIG)
    return str(path)


def grade(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["grade", *argv])
    return code, capsys.readouterr().err


def test_an_empty_file_is_not_a_pass(tmp_path: Path, config: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "empty.jsonl", [])
    code, err = grade(capsys, path, "-c", config)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "read 0 span(s), none was an agent run" in line
    assert f"otel-tooleval inspect {path}" in line and "--allow-empty" in line


def test_an_http_only_trace_is_not_a_pass(tmp_path: Path, config: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "http.jsonl", [span(1, None, "GET /health", **{"http.method": "GET"}),
                                          span(2, 1, "SELECT", **{"db.system": "sqlite"})])
    code, err = grade(capsys, path, "-c", config)
    assert code == 2 and "read 2 span(s), none was an agent run" in err


def test_allow_empty_opts_out(tmp_path: Path, config: str,
                              capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "http.jsonl", [span(1, None, "GET /health")])
    code, err = grade(capsys, path, "-c", config, "--allow-empty")
    assert code == 0 and "none was an agent run" not in err


def test_min_runs(tmp_path: Path, config: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "two.jsonl", agent_run(0x10) + agent_run(0x20, trace="1" * 32))
    assert grade(capsys, path, "-c", config)[0] == 0
    assert grade(capsys, path, "-c", config, "--min-runs", "2")[0] == 0
    code, err = grade(capsys, path, "-c", config, "--min-runs", "3")
    assert code == 2 and "2 agent run(s) found, --min-runs asks for 3" in err
    # --allow-empty accepts zero runs, not too few of them
    assert grade(capsys, path, "-c", config, "--min-runs", "3", "--allow-empty")[0] == 2
    with pytest.raises(SystemExit) as exc:
        main(["grade", path, "-c", config, "--min-runs", "-1"])
    assert exc.value.code == 2


def test_parent_cycles_are_input_problems(tmp_path: Path, config: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    # A good run in one trace, and in another a cycle 0x31 -> 0x32 -> 0x31 that holds an agent
    # run: no root reaches it, so it would have been dropped without a word.
    cycle = "2" * 32
    spans = agent_run(0x10) + [
        {**agent_run(0x31, trace=cycle)[0], "parentSpanId": f"{0x32:016x}"},
        agent_run(0x31, trace=cycle)[1]]
    path = write(tmp_path, "cycle.jsonl", spans)
    code, err = grade(capsys, path, "-c", config)
    assert code == 2
    assert (f"{path}: trace {cycle}: 2 span(s) not graded, no root reaches them: spans "
            f"{0x31:016x}, {0x32:016x} lead into a cycle of parent links") in err
    assert "1 input problem(s)" in err
    assert grade(capsys, path, "-c", config, "--allow-input-problems")[0] == 0


def test_a_span_that_is_its_own_parent_is_an_input_problem(
        tmp_path: Path, config: str, capsys: pytest.CaptureFixture[str]) -> None:
    selfish = {**span(0x40, None, "invoke_agent other", **{
        "gen_ai.operation.name": "invoke_agent"}), "parentSpanId": f"{0x40:016x}"}
    path = write(tmp_path, "self.jsonl", agent_run(0x10) + [selfish])
    code, err = grade(capsys, path, "-c", config)
    assert code == 2 and f"span {0x40:016x} names itself as parent" in err


def test_a_config_without_graders_is_refused(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    for text in ("graders: []\n", "runs: {agents: [a]}\n", "graders: {}\n", ""):
        path = tmp_path / "empty.yaml"
        path.write_text(text)
        assert main(["check", str(path)]) == 2, text
        assert "graders: no grader configured" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="no grader configured"):
        load_config({"runs": {"agents": ["a"]}})
    # The library's own ungraded set-up (no TOOLEVAL_CONFIG) still loads.
    assert load_config(None).graders == ()


def test_a_config_problem_met_while_grading_exits_two(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # tool-calls' `command` filter needs a string `command` argument: a run whose bash call has
    # none is a config mismatch (SEMANTICS 3), not an agent breaking a rule.
    cfg = tmp_path / "g.yaml"
    cfg.write_text("graders:\n  - {name: tests-run, type: tool-calls, "
                   "config: {required: [{name: lookup, command: 'npm test'}]}}\n")
    path = write(tmp_path, "run.jsonl", agent_run(0x10))
    code, err = grade(capsys, path, "-c", str(cfg))
    assert code == 2
    assert "config problem found while grading" in err and "tests-run" in err
    assert f"root {0x10:016x}" in err


# -- errors that help -----------------------------------------------------------------------

@pytest.mark.parametrize("command", ["check", "grade"])
def test_config_is_always_a_path(tmp_path: Path, command: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    trace = write(tmp_path, "t.jsonl", agent_run(0x10))
    folder = tmp_path / "configs"
    folder.mkdir()
    for given, says in [(str(tmp_path / "graders"), "no such file"),
                        (str(tmp_path / "missing.yaml"), "no such file"),
                        (str(folder), "is a folder, not a config file")]:
        argv = ["check", given] if command == "check" else ["grade", trace, "-c", given]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert given in err and says in err, err
        assert "must be a mapping" not in err


def test_check_prints_every_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "g.yaml"
    path.write_text(CONFIG + "grading: {mode: process}\n")
    assert main(["check", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc) == ["graders", "runs", "limits", "emit", "grading"]
    assert doc["grading"] == {"mode": "process", "process_timeout_seconds": 30.0}


@pytest.mark.parametrize(("doc", "says"), [
    ({"grader": [{"type": "tool-calls", "config": {}}]},
     "grader: unknown key (did you mean 'graders'?)"),
    ({"graders": ["tool-calls"], "runs": {"agent": ["a"]}},
     "runs.agent: unknown key (did you mean 'agents'?)"),
    ({"graders": ["tool-calls"], "limits": {"max_open_run": 3}},
     "limits.max_open_run: unknown key (did you mean 'max_open_runs'?)"),
    ({"graders": [{"type": "tool-calls", "config": {"requird": []}}]},
     "graders[0].config.requird: unknown key (did you mean 'required'?)"),
    ({"graders": [{"type": "tool_trajectory", "mode": "any_order", "expectd": []}]},
     "graders[0].expectd: unknown key (did you mean 'expected'?)"),
    ({"graders": [{"type": "tool_trajectry", "expected": []}]},
     "graders[0].type: unknown grader type 'tool_trajectry' (did you mean 'tool_trajectory'?)"),
])
def test_did_you_mean(doc: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(doc)
    assert says in str(exc.value)


def test_unknown_type_lists_canonical_names_only() -> None:
    from otel_tooleval.graders.registry import REGISTRY, families

    with pytest.raises(ConfigError) as exc:
        load_config({"graders": [{"type": "zzz"}]})
    message = str(exc.value)
    known = message[message.index("(known: ") + len("(known: "):message.rindex(")")]
    assert known.split(", ") == sorted(f.type for f in families())
    aliases = set(REGISTRY) - {f.type for f in families()}
    assert aliases, "the registry has aliases (else this test shows nothing)"
    assert not aliases & set(known.split(", "))
    assert "did you mean" not in message, "nothing is close to 'zzz'"


@pytest.mark.parametrize("fmt", ["table", "html"])
def test_reports_of_no_run_do_not_say_pass(tmp_path: Path, config: str, fmt: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "empty.jsonl", [])
    assert main(["grade", path, "-c", config, "-f", fmt, "--allow-empty"]) == 0
    out = capsys.readouterr().out
    assert "PASS" not in out
    assert ("NO RUNS: no agent run was found; nothing was graded." in out if fmt == "table"
            else '<span class="badge b-other">NO RUNS</span>' in out)
