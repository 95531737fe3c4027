"""The Langfuse sink against a local receiver: its requests are what the langfuse package's
own client sends, and Langfuse down, slow or refusing costs the caller nothing.

No Langfuse server runs here. Each request the sink POSTs to a stdlib HTTP server on 127.0.0.1
is parsed by the langfuse package's own request model (``CreateScoreRequest``) and sent again
by the package's own API client to the same receiver (``tests/support/langfuse_client.py``,
run with the package's interpreter: the package requires OpenTelemetry >= 1.45, so it lives in
a virtual environment of its own, ``.langfuse-venv``, which ``.ci/run`` installs). Without it
those tests skip, unless ``TOOLEVAL_REQUIRE_LANGFUSE`` is set (CI), where they fail.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from otel_tooleval.config import load_config
from otel_tooleval.model import RunReport
from otel_tooleval.sinks import build_sinks
from otel_tooleval.sinks.langfuse import (
    SCORES_PATH,
    LangfuseSink,
    LangfuseSinkConfig,
    refused_scores,
)
from otel_tooleval.sinks.langfuse_scores import run_scores, session_scores
from tests.test_langfuse_scores import CONFIG, graded, session_report

ROOT = Path(__file__).resolve().parents[1]
CLIENT = ROOT / "tests" / "support" / "langfuse_client.py"
LANGFUSE_VERSION = "5.0.4"
KEYS = {"public_key": "pk-lf-test", "secret_key": "sk-lf-secret"}
INSTALL = (f"python3 -m venv .langfuse-venv && .langfuse-venv/bin/pip install "
           f"langfuse=={LANGFUSE_VERSION} && "
           "export TOOLEVAL_LANGFUSE_PYTHON=$PWD/.langfuse-venv/bin/python")


class Receiver:
    """A stdlib HTTP server that records each POST and answers from a script of statuses
    (then 202); ``hang`` makes it wait that long before answering; ``bodies``: the answers'
    bodies, in order, before the default ones (raw bytes as they are, else as JSON)."""

    def __init__(self, statuses: list[int] | None = None, hang: float = 0.0,
                 bodies: list[Any] | None = None) -> None:
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.statuses = list(statuses or [])
        self.bodies = list(bodies or [])
        self.hang = hang
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver.lock:
                    receiver.requests.append((self.path, dict(self.headers), body))
                    status = receiver.statuses.pop(0) if receiver.statuses else 202
                    scripted = receiver.bodies.pop(0) if receiver.bodies else None
                if receiver.hang:
                    time.sleep(receiver.hang)
                reply = (scripted if isinstance(scripted, bytes) else json.dumps(
                    scripted if scripted is not None else
                    {"message": "Accepted"} if status < 300 else {"message": "no"}).encode())
                try:
                    self.send_response(status)
                    if status == 429:
                        self.send_header("Retry-After", "0")
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                except OSError:
                    pass    # the client gave up waiting

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def sink(url: str, **settings: Any) -> LangfuseSink:
    return LangfuseSinkConfig(host=url, flush_interval_s=0.05, **KEYS, **settings).build_sink()


def langfuse_python() -> str:
    path = os.environ.get("TOOLEVAL_LANGFUSE_PYTHON", "") or str(
        ROOT / ".langfuse-venv" / "bin" / "python")
    if os.access(path, os.X_OK):
        return path
    message = f"no langfuse interpreter at {path}: {INSTALL}"
    if os.environ.get("TOOLEVAL_REQUIRE_LANGFUSE", "") not in ("", "0"):
        pytest.fail(f"{message} (TOOLEVAL_REQUIRE_LANGFUSE is set: did .ci/run's install of "
                    "the langfuse package fail?)")
    pytest.skip(message)


def through_langfuse_client(bodies: list[Any], target: Receiver) -> dict[str, Any]:
    """The bodies parsed by the langfuse package's model and sent by its client to target."""
    job = json.dumps({"url": target.url, "bodies": bodies, **KEYS})
    done = subprocess.run([langfuse_python(), str(CLIENT)], input=job, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def timestamps_as_instants(body: Any) -> Any:
    items = body if isinstance(body, list) else [body]
    return [{**s, "timestamp": datetime.fromisoformat(s["timestamp"].replace("Z", "+00:00"))}
            if "timestamp" in s else s for s in items]


def delivered(target: Receiver) -> list[Any]:
    return [body for path, _, body in target.requests if path == SCORES_PATH]


def failing_run() -> RunReport:
    return graded(("view", "app/.env"), ("view", "README"))


@pytest.mark.parametrize("request_format", ["list", "object"])
def test_requests_are_what_the_langfuse_client_sends(receiver: Receiver,
                                                     request_format: str) -> None:
    report, session = failing_run(), session_report(False)
    scores = sink(receiver.url, request_format=request_format)
    scores.submit(report)
    scores.submit_session(session)
    assert scores.shutdown(5.0)
    ours = delivered(receiver)
    expected = run_scores(report) + session_scores(session)
    assert scores.stats()["sent"] == len(expected)
    flat = [s for body in ours for s in (body if isinstance(body, list) else [body])]
    assert flat == expected
    if request_format == "object":
        assert len(ours) == len(expected) and all(isinstance(b, dict) for b in ours)
    else:
        assert all(isinstance(b, list) for b in ours) and len(ours) <= 2

    mirror = Receiver()
    try:
        result = through_langfuse_client(ours, mirror)
        theirs = delivered(mirror)
    finally:
        mirror.close()
    assert result["version"] == LANGFUSE_VERSION
    assert result["problems"] == []
    assert {(f["name"], f["data_type"]) for f in result["fields"]} >= {
        ("tooleval", "BOOLEAN"), ("tooleval.score", "NUMERIC"), ("no-secrets", "NUMERIC"),
        ("tooleval.violation", "CATEGORICAL")}
    # The package's client sends the same scores, field for field, to the same path, with the
    # same basic auth.
    assert [timestamps_as_instants(b) for b in theirs] == [
        timestamps_as_instants(s) for body in ours for s in [
            body if isinstance(body, list) else [body]]]
    (_, our_headers, _), (_, their_headers, _) = receiver.requests[0], mirror.requests[0]
    assert our_headers["Authorization"] == their_headers["Authorization"] == "Basic " + \
        base64.b64encode(b"pk-lf-test:sk-lf-secret").decode()


def test_a_second_delivery_sends_the_same_ids(receiver: Receiver) -> None:
    report = failing_run()
    for _ in range(2):
        scores = sink(receiver.url)
        scores.submit(report)
        assert scores.shutdown(5.0)
    first, second = delivered(receiver)
    assert [(s["id"], s["timestamp"]) for s in first] == [
        (s["id"], s["timestamp"]) for s in second]


def test_langfuse_down_is_counted_not_raised() -> None:
    closed = Receiver()
    url = closed.url
    closed.close()
    scores = sink(url, max_attempts=2)
    scores.submit(failing_run())
    started = time.monotonic()
    scores.shutdown(5.0)
    assert time.monotonic() - started < 5.5
    stats = scores.stats()
    assert stats["sent"] == 0 and stats["dropped.unreachable"] == len(run_scores(failing_run()))


def test_langfuse_slow_times_out_and_shutdown_keeps_its_deadline() -> None:
    slow = Receiver(hang=3.0)
    try:
        scores = sink(slow.url, timeout_s=0.2, max_attempts=1)
        scores.submit(failing_run())
        time.sleep(0.6)
        assert scores.stats().get("dropped.timeout", 0) == len(run_scores(failing_run()))
        scores2 = sink(slow.url, timeout_s=5.0)
        scores2.submit(failing_run())
        time.sleep(0.2)
        started = time.monotonic()
        assert scores2.shutdown(0.5) is False
        assert time.monotonic() - started < 1.0
        # The batch still in flight (Langfuse has not answered) counts as lost to shutdown.
        assert scores2.stats()["sent"] == 0
        assert scores2.stats()["dropped.shutdown"] == len(run_scores(failing_run()))
    finally:
        slow.close()


def test_429_and_500_are_retried_400_is_not() -> None:
    flaky = Receiver(statuses=[429, 500])
    refusing = Receiver(statuses=[400, 400])
    try:
        scores = sink(flaky.url)
        scores.submit(failing_run())
        assert scores.shutdown(10.0)
        assert len(flaky.requests) == 3 and scores.stats()["sent"] == len(
            run_scores(failing_run()))
        assert scores.stats()["retries"] == 2
        bad = sink(refusing.url)
        bad.submit(failing_run())
        assert bad.shutdown(5.0)
        assert len(refusing.requests) == 1
        assert bad.stats()["dropped.http_400"] == len(run_scores(failing_run()))
    finally:
        flaky.close()
        refusing.close()


def test_a_partial_acceptance_counts_what_langfuse_refused(
        caplog: pytest.LogCaptureFixture) -> None:
    """HTTP 207: Langfuse kept some scores of the batch and says how many it refused; those
    are dropped (``dropped.rejected``), not sent, and not retried; the first reason is logged
    once."""
    size = len(run_scores(failing_run()))
    partial = Receiver(statuses=[207, 207], bodies=[
        {"accepted": size - 2, "rejected": 2,
         "errors": [{"status": 400, "message": "value out of range"},
                    {"status": 400, "message": "value out of range"}]},
        {"accepted": size - 1, "rejected": 1, "errors": [{"status": 404, "error": "no trace"}]}])
    try:
        scores = sink(partial.url)
        with caplog.at_level("WARNING", logger="otel_tooleval.sinks"):
            scores.submit(failing_run())
            assert scores.shutdown(10.0)
            scores2 = sink(partial.url)
            scores2.submit(failing_run())
            assert scores2.shutdown(10.0)
        assert len(partial.requests) == 2
        assert scores.stats()["sent"] == size - 2 and scores.stats()["dropped.rejected"] == 2
        assert scores2.stats()["sent"] == size - 1 and scores2.stats()["dropped.rejected"] == 1
        said = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert said == [(f"langfuse: POST {SCORES_PATH}: the server refused 2 of {size} "
                         "(HTTP 400: value out of range); counted as dropped.rejected"),
                        (f"langfuse: POST {SCORES_PATH}: the server refused 1 of {size} "
                         "(HTTP 404: no trace); counted as dropped.rejected")]
    finally:
        partial.close()


def test_a_207_that_cannot_be_read_counts_the_batch_as_refused() -> None:
    """Nothing is counted as sent that Langfuse did not say it kept."""
    size = len(run_scores(failing_run()))
    unreadable = Receiver(statuses=[207], bodies=[b"<html>partial</html>"])
    try:
        scores = sink(unreadable.url)
        scores.submit(failing_run())
        assert scores.shutdown(10.0)
        assert scores.stats()["sent"] == 0 and scores.stats()["dropped.rejected"] == size
    finally:
        unreadable.close()


@pytest.mark.parametrize(("status", "answer", "expected"), [
    (202, b'{"message": "Accepted"}', (0, None)),
    (200, b"", (0, None)),
    (207, b'{"accepted": 3, "errors": [{"message": "bad"}]}', (2, "bad")),
    (207, b'{"errors": [{"status": 400}, {"status": 400}]}', (2, "HTTP 400: no message")),
    (207, b'{"accepted": 5, "rejected": 0, "errors": []}', (0, None)),
    (207, b"[]", (5, "an HTTP 207 answer without counts")),
])
def test_what_an_answer_says_was_refused(status: int, answer: bytes,
                                         expected: tuple[int, str | None]) -> None:
    assert refused_scores(status, answer, 5) == expected


def test_a_full_queue_drops_and_counts(receiver: Receiver) -> None:
    scores = sink(receiver.url, max_queue=3)
    report = failing_run()
    scores.submit(report)
    assert scores.stats()["dropped.queue_full"] == len(run_scores(report)) - 3
    assert scores.shutdown(5.0)
    assert scores.stats()["sent"] == 3


def test_a_report_that_cannot_become_scores_is_a_counted_drop(receiver: Receiver) -> None:
    scores = sink(receiver.url)
    scores.submit("not a report")  # type: ignore[arg-type]
    scores.submit_session(None)  # type: ignore[arg-type]
    assert scores.stats()["dropped.build"] == 2
    assert scores.shutdown(1.0)


def test_the_config_reads_langfuses_own_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LANGFUSE_BASE_URL", "LANGFUSE_HOST", "LANGFUSE_PUBLIC_KEY",
                 "LANGFUSE_SECRET_KEY", "LANGFUSE_TRACING_ENVIRONMENT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValidationError, match=r"emit\.langfuse\.host is not set"):
        LangfuseSinkConfig()
    monkeypatch.setenv("LANGFUSE_HOST", "https://lf.example")
    with pytest.raises(ValidationError, match=r"emit\.langfuse\.public_key is not set"):
        LangfuseSinkConfig()
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk")
    with pytest.raises(ValidationError, match=r"emit\.langfuse\.secret_key is not set"):
        LangfuseSinkConfig()
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk")
    monkeypatch.setenv("LANGFUSE_BASE_URL", "https://base.example")
    monkeypatch.setenv("LANGFUSE_TRACING_ENVIRONMENT", "prod")
    config = LangfuseSinkConfig()
    assert (config.host, config.public_key, config.secret_key, config.environment) == (
        "https://base.example", "pk", "sk", "prod")
    assert "sk" not in repr(config)
    assert LangfuseSinkConfig(host="http://mine", environment="dev").host == "http://mine"
    with pytest.raises(ValidationError, match=r"emit\.langfuse\.host must be an http"):
        LangfuseSinkConfig(host="lf.example")
    with pytest.raises(ValidationError, match="request_format"):
        LangfuseSinkConfig(request_format="csv")
    with pytest.raises(ValidationError, match="hots"):
        LangfuseSinkConfig(hots="x")


def test_emit_langfuse_in_a_config_builds_the_sink(receiver: Receiver) -> None:
    config = load_config({**CONFIG, "emit": {"langfuse": {"host": receiver.url, **KEYS}}})
    assert config.emit.langfuse is not None
    (built,) = build_sinks(config.emit)
    assert isinstance(built, LangfuseSink)
    assert built.shutdown(1.0)
    assert load_config(CONFIG).emit.langfuse is None
    with pytest.raises(ValueError, match="langfuse"):
        load_config({**CONFIG, "emit": {"langfuse": {"host": receiver.url, "bogus": 1,
                                                     **KEYS}}})


def test_the_schema_covers_emit_langfuse() -> None:
    import jsonschema

    from otel_tooleval.schema import config_schema

    validator = jsonschema.Draft202012Validator(config_schema())
    good = {**CONFIG, "emit": {"langfuse": {"host": "https://lf.example",
                                            "request_format": "object", "batch_size": 20}}}
    assert not list(validator.iter_errors(good))
    for bad in ({"hots": "x"}, {"request_format": "csv"}, {"batch_size": 0}):
        assert list(validator.iter_errors({**CONFIG, "emit": {"langfuse": bad}})), bad
