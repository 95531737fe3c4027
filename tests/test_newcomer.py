"""A newcomer's path through the README, walked in a temporary directory (issue 28).

The goal the issue's newcomer had: "my agent must never call delete_file, must search before it
books, and make at most 3 calls; CI fails otherwise". Everything here comes from the README
itself: its first config (the block marked ``trace-your-own-config``), its agent snippet (marked
``trace-your-own``) and its commands, run as a user runs them (``otel-tooleval`` in a
subprocess, nothing installed beyond the project). Asserted: a guard-only config fails the gate
on a violating trace and passes a clean one, ``"*"`` caps every call, a wrong file is named in
one line, and the snippet's own console output is recognised for what it is.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_tooleval import OTLPJsonFileExporter

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _marked(marker: str, lang: str) -> str:
    found = re.search(rf"<!-- test: {re.escape(marker)} -->\n```{lang}\n(.*?)^```", README,
                      re.DOTALL | re.MULTILINE)
    assert found, f"no {lang} block marked {marker!r} in README.md"
    return found.group(1)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otel_tooleval.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


def _trace(path: Path, calls: list[tuple[str, dict[str, Any]]]) -> Path:
    """One agent run with these calls, in GenAI semconv as the README's snippet writes it,
    recorded with the exporter the README names."""
    import json

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileExporter(path)))
    tracer = provider.get_tracer("newcomer")
    with tracer.start_as_current_span("invoke_agent travel_agent", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "travel_agent"}):
        for tool, args in calls:
            with tracer.start_as_current_span(f"execute_tool {tool}", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                    "gen_ai.tool.call.arguments": json.dumps(args)}):
                pass
    provider.shutdown()
    return path


CLEAN = [("web_search", {"query": "Lisbon hotels"}), ("create_booking", {"hotel": "Avenida"})]
#: Deletes a file and makes a fourth call: breaks the guard twice and the call cap.
BAD = [("web_search", {"query": "Lisbon hotels"}), ("delete_file", {"path": "notes.txt"}),
       ("create_booking", {"hotel": "Avenida"}), ("report_result", {})]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "graders.yaml").write_text(_marked("trace-your-own-config", "yaml"))
    _trace(tmp_path / "clean.jsonl", CLEAN)
    _trace(tmp_path / "bad.jsonl", BAD)
    return tmp_path


def test_the_readme_config_holds_a_guard_rule_and_a_call_cap() -> None:
    config = yaml.safe_load(_marked("trace-your-own-config", "yaml"))
    assert "delete_file" in str(config["guard"]["disallowed"])
    assert config["guard"]["max_calls"] == 3
    counts = [g for g in config["graders"] if g["type"] == "tool-call-count"]
    assert counts and counts[0]["tool_calls_count"] == {"*": ["<=", 3]}


def test_check_counts_the_guard_of_the_readme_config(home: Path) -> None:
    done = _cli("check", "graders.yaml", cwd=home)
    assert done.returncode == 0, done.stderr
    assert "guard" in done.stdout and "0 grader(s)" not in done.stdout


def test_a_guard_only_config_fails_the_gate_on_a_violating_trace(home: Path) -> None:
    guard_only = {"guard": yaml.safe_load(_marked("trace-your-own-config", "yaml"))["guard"]}
    (home / "guard.yaml").write_text(yaml.safe_dump(guard_only))
    bad = _cli("grade", "bad.jsonl", "--config", "guard.yaml", cwd=home)
    assert bad.returncode == 1, (bad.stdout, bad.stderr)
    assert "guard" in bad.stdout and "delete_file" in bad.stdout, bad.stdout
    clean = _cli("grade", "clean.jsonl", "--config", "guard.yaml", cwd=home)
    assert clean.returncode == 0, (clean.stdout, clean.stderr)


def test_the_readme_config_fails_the_gate_on_the_violating_trace(home: Path) -> None:
    done = _cli("grade", "bad.jsonl", "-c", "graders.yaml", "-f", "json", cwd=home)
    assert done.returncode == 1, done.stderr
    import json

    (run,) = json.loads(done.stdout)["runs"]
    results = {r["name"]: r for r in run["results"]}
    assert results["guard"]["label"] == "fail"
    assert results["at-most-3-calls"]["label"] == "fail"   # "*": the 4 calls of the run


def test_star_caps_every_call_of_the_run(home: Path) -> None:
    cap = {"graders": [{"type": "tool-call-count", "tool_calls_count": {"*": ["<=", 3]}}]}
    (home / "cap.yaml").write_text(yaml.safe_dump(cap))
    assert _cli("grade", "bad.jsonl", "-c", "cap.yaml", cwd=home).returncode == 1
    assert _cli("grade", "clean.jsonl", "-c", "cap.yaml", cwd=home).returncode == 0
    (home / "pattern.yaml").write_text(yaml.safe_dump(
        {"graders": [{"type": "tool-call-count", "tool_calls_count": {"get_*": ["<=", 3]}}]}))
    refused = _cli("check", "pattern.yaml", cwd=home)
    assert refused.returncode == 2 and "get_*" in refused.stderr, refused.stderr


@pytest.mark.parametrize(("name", "text", "says"), [
    ("graders.yaml", None, "are the arguments swapped?"),
    ("page.html", "<!DOCTYPE html>\n<html><body>report</body></html>\n", "HTML"),
    ("agent.py", '"""An agent."""\nimport asyncio\n', "Python"),
])
def test_a_wrong_file_is_named_in_one_line(home: Path, name: str, text: str | None,
                                           says: str) -> None:
    if text is not None:
        (home / name).write_text(text)
    done = _cli("grade", name, "-c", "graders.yaml", cwd=home)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], lines


def test_the_snippets_console_output_is_recognised(home: Path) -> None:
    (home / "agent.py").write_text(_marked("trace-your-own", "python"))
    run = subprocess.run([sys.executable, "agent.py"], cwd=home, capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    (home / "console.txt").write_text(run.stdout)
    done = _cli("grade", "console.txt", "-c", "graders.yaml", cwd=home)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "ConsoleSpanExporter" in lines[0], lines
    assert "OTLPJsonFileExporter" in lines[0]


def test_the_readme_is_a_first_read() -> None:
    """At most 300 lines, and no test counts or timings to go stale."""
    assert len(README.splitlines()) <= 300
    assert not re.search(r"\b\d[\d,]* (tests|passed)\b", README)
    assert not re.search(r"\b\d+ min(utes)?\b", README)
