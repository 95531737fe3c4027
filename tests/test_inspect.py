"""`grade --include-calls` (docs/inspect.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from otel_tooleval.cli import main

DATA = Path(__file__).resolve().parent / "data/files"
JSONL = DATA / "traces.otlp.jsonl"
GRADERS = "graders:\n  - {name: any, type: tool-call-count, tool_calls_count: {nope: ['==', 0]}}\n"


@pytest.fixture
def config_file(tmp_path: Path) -> Callable[[str], str]:
    def write(text: str) -> str:
        path = tmp_path / "tooleval.yaml"
        path.write_text(text)
        return str(path)
    return write


def test_grade_include_calls_adds_the_calls_to_the_json(
        config_file: Callable[[str], str], capsys: pytest.CaptureFixture[str]) -> None:
    cfg = config_file(GRADERS)
    main(["grade", str(JSONL), "-c", cfg, "-f", "json", "--allow-input-problems"])
    plain = json.loads(capsys.readouterr().out)
    assert all("calls" not in run for run in plain["runs"])
    main(["grade", str(JSONL), "-c", cfg, "-f", "json", "--allow-input-problems",
          "--include-calls"])
    doc = json.loads(capsys.readouterr().out)
    researcher = next(r for r in doc["runs"] if r["agent"] == "researcher")
    assert len(researcher["calls"]) == researcher["tool_calls"] == 4
    assert researcher["calls"][2] == {
        "step": 1, "name": "fetch_page", "arguments": {"url": "https://example.invalid/"},
        "result": "connection refused", "status": "error", "error": "connection refused",
        "duration_ms": 2.0, "span_id": "00f067aa0ba90206"}


def test_include_calls_without_json_is_bad_usage(config_file: Callable[[str], str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grade", str(JSONL), "-c", config_file(GRADERS), "--include-calls"]) == 2
    captured = capsys.readouterr()
    assert "--include-calls needs --format json" in captured.err and captured.out == ""
