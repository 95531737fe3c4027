"""The command line: demo on its embedded defaults, check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from otel_tooleval.cli import main
from tests.support.otlp_receiver import OtlpReceiver

ROOT = Path(__file__).resolve().parents[1]


def test_demo_runs_and_prints_verdicts(capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert out.count("\nrun ") + out.startswith("run ") == 4
    assert "run 1  PASS" in out and "run 2  FAIL" in out and "run 3  FAIL" in out
    assert "FAIL  no-secrets" in out and "2 of 4 runs passed." in out
    assert "16 gen_ai.evaluation.result events" in out
    assert "/app/.env" not in out, "argument values never appear in explanations"


def test_demo_console_script_on_a_fresh_process() -> None:
    proc = subprocess.run([sys.executable, "-m", "otel_tooleval.cli", "demo"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert "2 of 4 runs passed." in proc.stdout


def test_demo_with_own_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "g.yaml").write_text(
        "graders:\n  - {type: tool-calls, config: {disallowed: [get_weather]}}\n")
    assert main(["demo", "--config", str(tmp_path / "g.yaml")]) == 0
    out = capsys.readouterr().out
    assert "run 1  FAIL" in out and "run 2  PASS" in out and "2 of 4 runs passed." in out


def test_print_config_is_the_example_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--print-config"]) == 0
    assert capsys.readouterr().out == (ROOT / "examples/plain_otel/graders.yaml").read_text()


def test_check_valid_and_invalid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(ROOT / "examples/plain_otel/graders.yaml")]) == 0
    assert '"name": "no-secrets"' in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("graders:\n  - {type: tool-calls, config: {sequence: [{name: a, final: true}]}}\n")
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "graders[0].config.sequence[0].final: final is only allowed on required entries" in err


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_demo_exports_traces_logs_and_metrics_over_otlp(
        protocol: str, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "5")
    rx = receiver
    endpoint = rx.http_endpoint if protocol != "grpc" else f"http://{rx.grpc_endpoint}"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert f"exported over OTLP to {endpoint}" in out
    roots = [s for s in rx.spans() if "tooleval.passed" in s["attributes"]]
    assert sorted(r["attributes"]["tooleval.passed"] for r in roots) == [False, False, True, True]
    assert all(len([e for e in r["events"] if e["name"] == "gen_ai.evaluation.result"]) == 4
               for r in roots)
    assert len([lg for lg in rx.logs() if lg["event_name"] == "gen_ai.evaluation.result"]) == 16
    assert {"gen_ai.evaluation.score", "tooleval.runs"} <= {m["name"] for m in rx.metrics()}
    assert {r["resource"].get("service.name") for r in roots} == {"otel-tooleval-demo"}


def test_demo_endpoint_option_wins_over_the_environment(
        receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")   # nothing there
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "5")
    assert main(["demo", "--endpoint", receiver.http_endpoint]) == 0
    assert f"exported over OTLP to {receiver.http_endpoint}" in capsys.readouterr().out
    assert len([s for s in receiver.spans() if "tooleval.passed" in s["attributes"]]) == 4
