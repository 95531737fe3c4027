"""collector-config/prometheus/: the rules pass promtool, and a real Prometheus scraping
``serve --metrics`` sees a failing run's alerts and a series for every dashboard query."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval.serve import ServeOptions, ToolEvalServer, options_from_args
from otel_tooleval.serve.metrics import prometheus_available
from tests.test_serve import CONFIG, body_of, demo_spans, post

ROOT = Path(__file__).resolve().parents[1]
RULES_DIR = ROOT / "collector-config" / "prometheus"
DASHBOARD = RULES_DIR / "dashboard.json"
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None and not os.environ.get("TOOLEVAL_REQUIRE_PROMETHEUS"),
    reason="promtool is not installed (Debian: apt-get install prometheus)")
needs_exporter = pytest.mark.skipif(not prometheus_available(),
                                    reason="opentelemetry-exporter-prometheus is not installed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _dashboard_queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in doc["panels"] for t in p["targets"]]


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    out = subprocess.run([str(PROMTOOL), "check", "rules", "rules.yaml"], cwd=RULES_DIR,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
def test_promtool_unit_tests_every_alert_firing_and_silent() -> None:
    out = subprocess.run([str(PROMTOOL), "test", "rules", "rules_test.yaml"], cwd=RULES_DIR,
                         capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    # Every alert of rules.yaml is named in a test both with alerts and with none.
    alerts = set(re.findall(r"- alert: (\w+)", (RULES_DIR / "rules.yaml").read_text()))
    tests = (RULES_DIR / "rules_test.yaml").read_text()
    fired = set(re.findall(r"alertname: (\w+)\n\s+eval_time: \S+(?:\s+#.*)?\n\s+exp_alerts:\n",
                           tests))
    silent = set(re.findall(r"alertname: (\w+), eval_time: \w+, exp_alerts: \[\]", tests))
    assert alerts and alerts <= fired, alerts - fired
    assert alerts <= silent, alerts - silent


@needs_exporter
def test_serve_metrics_flag_is_checked() -> None:
    with pytest.raises(ValueError, match="--metrics 0.0.0.0:9464: the metrics endpoint has no "
                                         "TLS"):
        options_from_args(str(CONFIG), grpc=None, http=None, forward=None,
                          forward_protocol=None, decision_wait=0, metrics="0.0.0.0:9464")
    with pytest.raises(ValueError, match="--metrics: invalid address"):
        options_from_args(str(CONFIG), grpc=None, http=None, forward=None,
                          forward_protocol=None, decision_wait=0, metrics="127.0.0.1:x")
    options_from_args(str(CONFIG), grpc=None, http=None, forward=None, forward_protocol=None,
                      decision_wait=0, metrics="0.0.0.0:9464", insecure_bind=True)


def test_serve_metrics_without_the_exporter_names_the_flag_and_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from otel_tooleval.serve import metrics

    monkeypatch.setattr(metrics, "prometheus_available", lambda: False)
    with pytest.raises(ValueError, match=r"--metrics: .*otel-tooleval\[prometheus\]"):
        options_from_args(str(CONFIG), grpc=None, http=None, forward=None,
                          forward_protocol=None, decision_wait=0, metrics="127.0.0.1:0")


@needs_exporter
def test_serve_metrics_endpoint_has_serve_and_grading_series() -> None:
    options = ServeOptions(__import__("otel_tooleval").load_config(str(CONFIG)), grpc=None,
                           http="127.0.0.1:0", decision_wait=0.0, metrics="127.0.0.1:0")
    with ToolEvalServer(options) as server:
        assert server.metrics_endpoint is not None and server.metrics_endpoint.port
        status, _, _ = post(server.http_port or 0, body_of(demo_spans()))
        assert status == 200
        deadline = time.monotonic() + 10
        text = ""
        while time.monotonic() < deadline and 'tooleval_passed="false"' not in text:
            time.sleep(0.1)
            url = f"http://127.0.0.1:{server.metrics_endpoint.port}/metrics"
            text = urllib.request.urlopen(url, timeout=5).read().decode()
    names = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{", text, re.MULTILINE))
    assert {"tooleval_runs_total", "gen_ai_evaluation_score_count",
            "tooleval_serve_requests_refused_total", "tooleval_serve_spans_accepted_total",
            "tooleval_serve_buffer_size_bytes", "tooleval_serve_buffer_limit_bytes",
            "tooleval_serve_open_traces"} <= names
    labels = set(re.findall(r"[{,]([a-zA-Z_][a-zA-Z0-9_]*)=", text))
    # Each metric and label the rules and the dashboard name is one the exporter writes, or one
    # only the in-process processor writes (the live guard), or one that comes with a drop.
    named = set(re.findall(r"\b((?:tooleval|gen_ai)_[a-z_]+)\b",
                           (RULES_DIR / "rules.yaml").read_text() + DASHBOARD.read_text()))
    assert named - names - labels <= {"tooleval_guard_violations_total", "tooleval_guard_rule",
                                      "gen_ai_tool_name", "tooleval_runs_dropped_total",
                                      "tooleval_sinks_dropped_total"}


def test_sink_deliveries_and_drops_are_scraped_under_the_names_the_rules_use() -> None:
    """serve's ``sinks.<name>.*`` counts (emit.phoenix, emit.langfuse) reach Prometheus as
    ``tooleval_sinks_sent_total{sink}`` and ``tooleval_sinks_dropped_total{sink,reason}``: the
    series ToolEvalVerdictsNotDelivered reads."""
    pytest.importorskip("opentelemetry.exporter.prometheus")
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import generate_latest

    from otel_tooleval.serve.metrics import MetricsEndpoint, serve_instruments

    counts = {"sinks.phoenix.sent": 7, "sinks.phoenix.dropped.unreachable": 3,
              "sinks.langfuse.sent": 2, "sinks.langfuse.queued": 1, "accepted_spans": 5}
    endpoint = MetricsEndpoint()
    provider = MeterProvider(metric_readers=[endpoint.reader])
    try:
        serve_instruments(provider, lambda: counts,
                          {"buffered_bytes": 10, "queued_bytes": 10}, "test")
        text = generate_latest(endpoint.registry).decode()
    finally:
        provider.shutdown()
    lines = re.MULTILINE
    assert re.search(r'^tooleval_sinks_sent_total\{[^}]*sink="phoenix"[^}]*\} 7\.0$', text, lines)
    assert re.search(r'^tooleval_sinks_sent_total\{[^}]*sink="langfuse"[^}]*\} 2\.0$', text, lines)
    dropped = re.findall(r'^tooleval_sinks_dropped_total\{([^}]*)\} (\S+)$', text, lines)
    assert len(dropped) == 1 and 'sink="phoenix"' in dropped[0][0]
    assert 'reason="unreachable"' in dropped[0][0] and dropped[0][1] == "3.0"
    assert "queued" not in text.split("tooleval_sinks_sent_total", 1)[1].split("\n# ", 1)[0]
    named = (RULES_DIR / "rules.yaml").read_text()
    assert "tooleval_sinks_dropped_total" in named


def _prom_get(port: int, path: str, **params: str) -> Any:
    url = f"http://127.0.0.1:{port}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())["data"]


@pytest.fixture
def e2e_config(tmp_path: Path) -> Path:
    """The demo's graders with the guard's `.env` rule and a grading budget nobody meets."""
    text = CONFIG.read_text().replace(
        "emit:", 'guard:\n  disallowed:\n    - {name: "^read_file$", path: "\\\\.env$"}\n'
        "limits:\n  grading_budget_ms: 0.000001\nemit:")
    path = tmp_path / "graders.yaml"
    path.write_text(text)
    return path


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[int, int, Path]]:
    """(Prometheus' port, the port it scrapes, its log), every second, with rules.yaml."""
    if PROMETHEUS is None:
        if os.environ.get("TOOLEVAL_REQUIRE_PROMETHEUS"):
            pytest.fail("prometheus is not installed")
        pytest.skip("prometheus is not installed (Debian: apt-get install prometheus)")
    web, target = _free_port(), _free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{RULES_DIR / 'rules.yaml'}']\n"
        "scrape_configs:\n  - job_name: tooleval\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{target}']}}]\n")
    log = tmp_path / "prometheus.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{web}"],
            stdout=sink, stderr=subprocess.STDOUT)
    try:
        yield web, target, log
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@needs_exporter
def test_real_prometheus_scrapes_serve_and_alerts_on_a_failing_run(
        prometheus: tuple[int, int, Path], e2e_config: Path) -> None:
    web, target, log = prometheus
    serve = subprocess.Popen(
        [sys.executable, "-m", "otel_tooleval.cli", "serve", "--config", str(e2e_config),
         "--grpc", "off", "--http", f"127.0.0.1:{_free_port()}", "--decision-wait", "0",
         "--metrics", f"127.0.0.1:{target}", "--shutdown-timeout", "5"],
        stderr=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])})
    try:
        assert serve.stderr is not None
        line = serve.stderr.readline()
        http = int(re.search(r"OTLP/HTTP on [^:]+:(\d+)", line).group(1))  # type: ignore[union-attr]
        assert f"Prometheus scrapes on 127.0.0.1:{target} (/metrics)" in line, line

        def up() -> bool:
            result = _prom_get(web, "/api/v1/query", query='up{job="tooleval"}')["result"]
            return bool(result) and result[0]["value"][1] == "1"

        _wait(up, 20, log, "Prometheus never scraped serve --metrics")
        body = body_of(demo_spans())
        assert post(http, body)[0] == 200
        time.sleep(2.5)   # two scrapes: the counters' series exist before they rise again
        assert post(http, body_of(demo_spans()))[0] == 200   # new runs: the counters rise
        assert post(http, body)[0] == 200   # the first runs again: late spans, counted drops

        def alerts() -> dict[str, str]:
            return {a["labels"]["alertname"]: a["state"]
                    for a in _prom_get(web, "/api/v1/alerts")["alerts"]}

        _wait(lambda: {"ToolEvalPassRateLow", "ToolEvalGraderPassRateLow",
                       "ToolEvalGuardViolation", "ToolEvalGradingErrors",
                       "ToolEvalRunsDroppedUngraded"} <= set(alerts()), 20, log,
              "the alerts never became pending")
        states = alerts()
        assert states["ToolEvalGuardViolation"] == "firing"   # no `for:`
        assert states["ToolEvalPassRateLow"] in ("pending", "firing")
        errors = [a["labels"] for a in _prom_get(web, "/api/v1/alerts")["alerts"]
                  if a["labels"]["alertname"] == "ToolEvalGradingErrors"]
        assert {e.get("error_type") for e in errors} == {"budget_exceeded"}, errors
        assert "ToolEvalServeRefusing" not in states and "ToolEvalServeBackingUp" not in states
        queries = _dashboard_queries()

        def empty() -> list[str]:
            return [q for q in queries if not _prom_get(web, "/api/v1/query", query=q)["result"]]

        # A series that first appeared at the last scrape has one sample: increase() over it is
        # empty until the next scrape (the drops counter rises only at the third post).
        _wait(lambda: not empty(), 10, log, "a dashboard query never returned data")
    finally:
        serve.terminate()
        serve.wait(15)


def _wait(check: Any, seconds: float, log: Path, message: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"{message}; Prometheus log:\n{log.read_text()[-3000:]}")
