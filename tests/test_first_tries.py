"""A newcomer's first tries (issue 28): the wrong file given to ``grade``, the arguments
swapped, a file of many bad lines; each answered in one line that says what to do."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from otel_tooleval.cli import main

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests/data/files/traces.otlp.json"
CONFIG = "graders:\n  - {name: no-delete, type: tool-call-count, tool_calls_count: {delete_file: ['==', 0]}}\n"


def console_output() -> str:
    """What the README's ConsoleSpanExporter prints for an agent run of two spans."""
    out = io.StringIO()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out)))
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("invoke_agent a",
                                      attributes={"gen_ai.operation.name": "invoke_agent"}), \
            tracer.start_as_current_span("execute_tool search", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}):
        pass
    provider.shutdown()
    return out.getvalue()


WRONG_FILES = {
    "graders.yaml": (CONFIG, ("looks like an otel-tooleval config (graders:), not traces: are "
                             "the arguments swapped?")),
    "graders.json": (json.dumps({"graders": [{"type": "tool-calls"}]}),
                     "looks like an otel-tooleval config in JSON"),
    "compose.yaml": ("services:\n  jaeger:\n    image: jaegertracing/all-in-one\n",
                     "looks like YAML, not traces; otel-tooleval reads OTLP/JSON"),
    "report.html": ("<!DOCTYPE html>\n<html><body><h1>otel-tooleval report</h1></body></html>\n",
                    "looks like an HTML page"),
    "report.xml": ('<?xml version="1.0" encoding="utf-8"?>\n<testsuites/>\n', "looks like XML"),
    "agent.py": ('"""My agent."""\nimport asyncio\n\nfrom pydantic_ai import Agent\n',
                 "looks like Python source, not traces; run it with OTLPJsonFileExporter"),
    "script.py": ("#!/usr/bin/env python3\nprint('hi')\n", "looks like Python source"),
    "console.txt": (None, ("looks like ConsoleSpanExporter output (spans printed one after "
                          "another), which otel-tooleval does not read; record OTLP/JSON "
                          "instead: OTLPJsonFileExporter('traces.jsonl')")),
}


@pytest.mark.parametrize("name", sorted(WRONG_FILES))
@pytest.mark.parametrize("command", ["grade", "inspect"])
def test_a_file_that_is_not_traces_is_named_in_one_line(
        name: str, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text, said = WRONG_FILES[name]
    path = tmp_path / name
    path.write_text(console_output() if text is None else text)
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    argv = [command, str(path)] + (["--config", str(config)] if command == "grade" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err          # one line, not one per line of the file
    assert err.startswith(f"otel-tooleval: {path}: {said}"), err
    assert "invalid JSON" not in err


def test_console_output_of_many_spans_is_one_line(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "console.txt"
    path.write_text(console_output() * 50)
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    assert main(["grade", str(path), "-c", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ConsoleSpanExporter output" in err


def test_traces_still_read_with_a_text_first_line(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A file cut off by a crash (its first line not JSON) is still a trace file: reported by
    its line, the rest graded; sniffing does not take it for YAML or text."""
    path = tmp_path / "traces.jsonl"
    doc = json.dumps(json.loads(TRACES.read_text()))
    path.write_text('e": "x"}\n' + doc + "\n")
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    assert main(["grade", str(path), "-c", str(config), "--allow-input-problems"]) == 0
    err = capsys.readouterr().err
    assert f"{path}:1: invalid JSON" in err


def test_swapped_arguments_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "graders.yaml"
    config.write_text(CONFIG)
    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps(json.loads(TRACES.read_text())) + "\n")
    assert main(["grade", str(config), "--config", str(traces)]) == 2
    err = capsys.readouterr().err
    assert err == (f"otel-tooleval: {traces} looks like traces (OTLP/JSON), not a config: are "
                   f"the arguments swapped? try: otel-tooleval grade {traces} --config "
                   f"{config}\n")
    assert main(["check", str(traces)]) == 2
    assert "looks like traces (OTLP/JSON), not a config" in capsys.readouterr().err


def test_input_problems_on_stderr_are_capped_per_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = json.dumps(json.loads(TRACES.read_text()))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good + "\n" + "{not json}\n" * 40)
    also = tmp_path / "also.jsonl"
    also.write_text(good + "\n" + "{not json}\n" * 2)
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    assert main(["grade", str(bad), str(also), "-c", str(config), "--allow-input-problems"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert sum(line.startswith(f"otel-tooleval: {bad}:") and "invalid JSON" in line
               for line in err) == 5
    assert f"otel-tooleval: {bad}: 35 more input problem(s) not shown (40 in all)" in err
    assert sum(f"{also}:" in line for line in err) == 2    # under the cap: each shown


def test_a_missing_config_level_is_one_problem_saying_move_these_keys() -> None:
    from otel_tooleval.config import ConfigError, load_config

    with pytest.raises(ConfigError) as caught:
        load_config({"graders": [{"name": "t", "type": "tool-calls",
                                  "required": [{"name": "search"}],
                                  "disallowed": [{"name": "delete_file"}]}]})
    assert [p.render() for p in caught.value.problems] == [
        ("graders[0]: move these keys under config: required, disallowed (the options of this "
        "grader sit one level down: config: {required: ..., disallowed: ...})")]


def test_a_missing_config_level_keeps_the_entrys_other_problems() -> None:
    from otel_tooleval.config import ConfigError, load_config

    with pytest.raises(ConfigError) as caught:
        load_config({"graders": [{"name": "", "type": "tool-calls",
                                  "required": [{"name": "search"}]}]})
    rendered = [p.render() for p in caught.value.problems]
    assert any(r.startswith("graders[0].name:") for r in rendered), rendered
    assert any("move these keys under config: required" in r for r in rendered), rendered


YAML_MISTAKES = {
    # text: (line, column, what the message says)
    "graders:\n- name: a\n type: b\n": ("line 3, column 2", "this line is indented differently"),
    "graders:\n  - name: a\n    type: tool-calls\n     config: {}\n":
        ("line 4, column 12", "a ':' where no key can start"),
    "graders:\n\t- a\n": ("line 2, column 1", "a tab: YAML indents with spaces only"),
    "graders:\n  - {name: a, type: tool-calls\n":
        ("line 3, column 1", "a '{' (opened at line 2, column 5) is not closed: a '}' or ','"),
    "graders: [a\n": ("line 2, column 1", "a '[' (opened at line 1, column 10) is not closed"),
    'graders: "a\n': ("line 2, column 1", "a quote (opened at line 1, column 10) is never closed"),
    "graders: *x\n": ("line 1, column 10", "*x names no &x anchor"),
}


@pytest.mark.parametrize("text", sorted(YAML_MISTAKES))
def test_yaml_mistakes_in_plain_words(text: str, tmp_path: Path) -> None:
    from otel_tooleval.config import ConfigError, load_config_file

    where, said = YAML_MISTAKES[text]
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config_file(path)
    message = str(caught.value)
    assert f"not valid YAML: {where}: {said}" in message, message
    assert "<" not in message.split("not valid YAML", 1)[1], message   # no <block end> tokens


def test_serve_with_no_next_hop_starts_grades_and_says_once_it_forwards_nowhere(
        tmp_path: Path) -> None:
    """A first ``serve`` from a clone: no --forward, no OTEL_EXPORTER_OTLP_ENDPOINT. It used
    to refuse to start; now it grades, logs each verdict, and its start line says once that
    the traces go nowhere."""
    import http.client
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_tooleval.cli", "serve", "--config",
         str(ROOT / "otel_tooleval/demo/graders.yaml"), "--grpc", "off", "--http",
         f"127.0.0.1:{port}", "--decision-wait", "0.1"], env=env, stderr=log, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("POST", "/v1/traces", TRACES.read_bytes(),
                             {"Content-Type": "application/json"})
                status = conn.getresponse().status
                conn.close()
                if status == 503:   # listening, not ready yet: a client retries, as told
                    raise ConnectionRefusedError("serve is starting")
                assert status == 200
                break
            except OSError:
                # The log read by path: a seek on ``log``, whose offset the child's stderr
                # shares, made the child's next line overwrite the log from its start.
                assert process.poll() is None and time.monotonic() < deadline, (
                    tmp_path / "serve.log").read_text()
                time.sleep(0.05)
        while "serve: run agent=" not in (tmp_path / "serve.log").read_text():
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        log.close()
    err = (tmp_path / "serve.log").read_text()
    assert err.count("forwarding nowhere: verdicts are only logged here") == 1, err
    assert "forwarding to none" not in err
    assert "serve: run agent=" in err and "none forwarded (no next hop), 4 runs graded" in err


@pytest.mark.parametrize(("command", "said"), [
    ("check", "Validate a config file and print it normalised"),
    ("demo", "Run a scripted agent"),
    ("grade", "junit (one testcase per run and grader"),
])
def test_help_describes_each_command(command: str, said: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert said in " ".join(capsys.readouterr().out.split())
