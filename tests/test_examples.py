"""The runnable examples in examples/: each runs offline as `python examples/<x>/agent.py`.

Every example is run in a subprocess from the repository root, with an environment that cannot
reach the network: no proxies, no OTEL_* or SDK settings inherited, no API keys, and a
``sitecustomize`` that refuses (and reports) any connection or DNS look-up to a host other than
the loopback one. The expected verdicts follow from each example's script and graders.yaml.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.frameworks

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = "tooleval-test: blocked network access"

# scenario -> (passed, failing grader names), per example, in the order the runs are played.
EXPECTED: dict[str, dict[str, tuple[bool, tuple[str, ...]]]] = {
    # asks-twice: calls get_weather twice (count <= 1 broken) and never convert_temp (the
    # in-order trajectory misses it); its search_city -> get_weather(Paris) still satisfies
    # checks-weather.
    "pydantic_ai": {
        "by-the-book": (True, ()),
        "asks-twice": (False, ("trajectory", "no-weather-spam")),
    },
    # plain-http-shortcut: no web_search in the first turn and fetch_page on an http:// URL
    # (research-rules), order fetch_page, calculator = LCS 2 of 3 (research-order); the
    # calculator still returns "7" (computes-years passes).
    "langgraph": {
        "search-read-compute": (True, ()),
        "plain-http-shortcut": (False, ("research-rules", "research-order")),
    },
    # emails-the-user: calls the disallowed send_email (no-unapproved-email) where the exact
    # trajectory expects the calculator; it still fetches the weather once per city.
    "openai_agents": {
        "answers-in-chat": (True, ()),
        "emails-the-user": (False, ("no-unapproved-email", "trajectory")),
    },
}

LINE = re.compile(r"^([0-9a-f]{32})  (PASS|FAIL)  (\S+)  failed: (.*)$")

_NETWORK_GUARD = textwrap.dedent(f"""
    import socket
    import sys

    _LOCAL = {{"127.0.0.1", "::1", "localhost", "0.0.0.0", None}}

    def _refuse(what):
        sys.stderr.write("{BLOCKED}: %r\\n" % (what,))
        raise OSError("network access blocked by the test: %r" % (what,))

    _getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else host
        if name not in _LOCAL:
            _refuse(name)
        return _getaddrinfo(host, *args, **kwargs)

    def _guard(method):
        def guarded(self, address):
            if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in _LOCAL:
                _refuse(address)
            return method(self, address)
        return guarded

    socket.getaddrinfo = getaddrinfo
    socket.socket.connect = _guard(socket.socket.connect)
    socket.socket.connect_ex = _guard(socket.socket.connect_ex)
""")

_DROPPED_PREFIXES = ("OTEL_", "OPENAI_", "LANGCHAIN_", "LANGSMITH_", "TOOLEVAL_")
_PROXIES = ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy", "no_proxy")


def offline_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The parent's environment minus anything that could send telemetry or reach the network."""
    guard = tmp_path / "network_guard"
    guard.mkdir(exist_ok=True)
    (guard / "sitecustomize.py").write_text(_NETWORK_GUARD)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_DROPPED_PREFIXES) and k.lower() not in _PROXIES}
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(guard), env.get("PYTHONPATH")])),
        no_proxy="127.0.0.1,localhost",
        NO_PROXY="127.0.0.1,localhost",
        LANGSMITH_TRACING="false",          # LangChain: no LangSmith upload
        LANGCHAIN_TRACING_V2="false",
        OPENAI_AGENTS_DISABLE_TRACING="0",  # keep the SDK's traces (OpenInference reads them)
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def run_example(name: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, f"examples/{name}/agent.py"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert BLOCKED not in done.stderr, done.stderr
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done


def verdict_lines(stdout: str) -> list[tuple[str, bool, str, tuple[str, ...]]]:
    """(trace id, passed, scenario, failing graders) of each verdict line, in printed order."""
    out = []
    for line in stdout.splitlines():
        match = LINE.match(line)
        if match:
            trace_id, verdict, scenario, failed = match.groups()
            names = () if failed == "-" else tuple(failed.split(", "))
            out.append((trace_id, verdict == "PASS", scenario, names))
    return out


def check_verdicts(name: str, stdout: str) -> list[tuple[str, bool, str, tuple[str, ...]]]:
    lines = verdict_lines(stdout)
    assert [(scenario, passed, failed) for _, passed, scenario, failed in lines] == [
        (scenario, passed, failed) for scenario, (passed, failed) in EXPECTED[name].items()
    ], stdout
    assert len({trace_id for trace_id, *_ in lines}) == len(lines), "one trace per run"
    return lines


def test_network_guard_refuses_remote_hosts(tmp_path: Path) -> None:
    """The guard the examples run under does refuse a remote host (so passing means offline)."""
    code = "import socket; socket.create_connection(('example.com', 443), timeout=1)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=offline_env(tmp_path),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert f"{BLOCKED}: 'example.com'" in done.stderr, done.stderr


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_offline(name: str, tmp_path: Path) -> None:
    done = run_example(name, offline_env(tmp_path))
    check_verdicts(name, done.stdout)


def test_plain_otel_example_runs_offline(tmp_path: Path) -> None:
    done = run_example("plain_otel", offline_env(tmp_path))
    runs = re.findall(r"^run (\d+)\s+(PASS|FAIL)\s+agent=travel_agent\s+trace=[0-9a-f]{32}",
                      done.stdout, re.MULTILINE)
    # The demo's scripts: runs 2 (reads .env) and 3 (books without validating) break the rules.
    assert runs == [("1", "PASS"), ("2", "FAIL"), ("3", "FAIL"), ("4", "PASS")], done.stdout
    run2 = done.stdout.split("run 2", 1)[1].split("run 3", 1)[0]
    assert re.search(r"^\s+FAIL\s+no-secrets\b", run2, re.MULTILINE), run2
    assert "2 of 4 runs passed." in done.stdout


def test_openai_agents_example_exports_verdicts_over_otlp(receiver: OtlpReceiver,
                                                          tmp_path: Path) -> None:
    env = offline_env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.http_endpoint,
                      OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf")
    done = run_example("openai_agents", env)
    lines = check_verdicts("openai_agents", done.stdout)
    expected = {trace_id: (passed, failed) for trace_id, passed, _, failed in lines}

    def graded_roots() -> dict[str, dict[str, Any]]:
        return {s["trace_id"]: s for s in receiver.spans()
                if s["parent_span_id"] is None and "tooleval.passed" in s["attributes"]}

    assert receiver.wait_for(lambda: set(graded_roots()) >= set(expected)), receiver.spans()
    roots = graded_roots()
    for trace_id, (passed, failed) in expected.items():
        root = roots[trace_id]
        attrs = root["attributes"]
        assert root["name"] == "weather_agent"
        assert root["scope"] == "openinference.instrumentation.openai_agents"
        assert root["resource"]["service.name"] == "openai-agents-weather"
        assert attrs["tooleval.passed"] is passed
        assert tuple(attrs.get("tooleval.failed", ())) == failed
        assert attrs["tooleval.tool_calls"] == 3
        events = [e for e in root["events"] if e["name"] == "gen_ai.evaluation.result"]
        assert len(events) == 3
    tools = sorted(s["attributes"]["tool.name"] for s in receiver.spans()
                   if "tool.name" in s["attributes"])
    assert tools == ["calculator", "get_weather", "get_weather", "get_weather", "get_weather",
                     "send_email"]
    assert receiver.wait_for(lambda: any(
        log["event_name"] == "gen_ai.evaluation.result" for log in receiver.logs()))
