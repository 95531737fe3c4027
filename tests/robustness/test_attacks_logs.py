"""Issue 26, what serve writes and how it stops (defects 7, 8 and 9b, and the JSON reports).

``otel-tooleval serve`` runs as a subprocess on 127.0.0.1 against next hops on 127.0.0.1 (one
that accepts and never answers, one that answers 500); the pieces are those of
tests/robustness/scripts/logs_attacks.py, which prints the figures.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from pathlib import Path

import pytest

from otel_tooleval import load_config
from otel_tooleval.serve import ServeOptions
from otel_tooleval.serve.forwarder import _Forwarder

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
import logs_attacks as attacks

SHUTDOWN_TIMEOUT = 2.0


def _raw(lines: list[str]) -> list[str]:
    return [line for line in lines if any(c in line for c in attacks.RAW)]


# -- defect 8: SIGTERM within --shutdown-timeout, whatever the next hop does -------------------

@pytest.mark.parametrize(("protocol", "telemetry"), [("http/protobuf", True),
                                                     ("http/protobuf", False),
                                                     ("grpc", True)])
def test_sigterm_against_a_next_hop_that_never_answers_ends_within_the_timeout(
        protocol: str, telemetry: bool) -> None:
    took, status, lines = attacks.sigterm_against_silent_hop(
        protocol, telemetry=telemetry, shutdown_timeout=SHUTDOWN_TIMEOUT, runs=2)
    assert took < SHUTDOWN_TIMEOUT + 1.0, (took, "".join(lines))
    assert status == 1, "".join(lines)   # not everything was delivered: said, not hidden
    (last,) = [line for line in lines if "otel-tooleval serve: stopped;" in line]
    assert "NOT everything was delivered before the shutdown timeout: " in last
    # 2 runs of 2 spans, 2 requests of 5 other spans, 2 session spans: none confirmed sent
    assert re.search(r"16 spans not forwarded \(\d+ queued, \d+ in flight, unanswered at the "
                     r"deadline\)", last), last
    if telemetry:
        assert "serve's log events and metrics not all exported" in last


def test_forwarder_drain_returns_at_its_deadline_and_counts_what_it_gave_up() -> None:
    hop = attacks.SilentHop()
    try:
        forwarder = _Forwarder(ServeOptions(load_config(attacks.config()),
                                            forward=f"http://127.0.0.1:{hop.port}",
                                            forward_workers=2, forward_timeout=30))
        for i in range(5):
            forwarder.put(b"z" * 10, i + 1)
        time.sleep(0.3)                      # two requests sent, never answered
        began = time.monotonic()
        assert not forwarder.drain(began + 0.5)
        took = time.monotonic() - began
    finally:
        hop.close()
    assert took < 1.4, took   # the stuck workers are not waited for (before: 2.5 s)
    assert forwarder.undelivered == {"queued": 3 + 4 + 5, "in_flight": 1 + 2}
    assert forwarder.counts["forward_failed_spans"] == 15
    assert forwarder.counts["forwarded_spans"] == 0 and forwarder.queued_bytes == 0


# -- defect 9b: a failing next hop gets the throttle's lines, not one per request ----------------

def test_a_next_hop_answering_500_gets_at_most_the_throttles_lines() -> None:
    sent, _, lines, health = attacks.flood_against_error_hop(1.5, telemetry=True)
    failed = [line for line in lines if re.search(r"forwarding \d+ spans to .* failed", line)]
    assert sent > 20 and 1 <= len(failed) <= 10, (sent, "".join(lines))
    assert all("HTTP 500" in line for line in failed)
    (summary,) = [line for line in lines if "forwarding failure line(s) not logged" in line]
    left_out = int(summary.split()[2])
    assert left_out > 0 and summary.endswith(
        "(at most 10 of each kind per 60 s; /healthz counts them all)\n")
    assert health["forward_failed_spans"] >= len(failed) + left_out   # counted, every one
    # the next hop's reason phrase, in serve's line and in the SDK exporter's, escaped
    assert _raw(lines) == [], _raw(lines)
    assert "HTTP 500 \\x1b[31mInternal\\x1b[0m \\x9bError" in failed[0]


# -- defect 7: escapes in agent names and session ids reach stderr escaped -----------------------

def test_agent_name_and_session_id_with_terminal_escapes_reach_stderr_escaped() -> None:
    raw, lines = attacks.escapes_in_log()
    assert raw == 0, _raw(lines)
    (run,) = [line for line in lines if " run agent=" in line]
    (session,) = [line for line in lines if " session agent=" in line]
    agent = '"\\u001b[31mred\\u001b[0m\\u202egnp.exe"'
    assert run.startswith(f"otel-tooleval serve: run agent={agent} trace="), run
    assert session.startswith(
        f"otel-tooleval serve: session agent={agent} session.id="
        '"\\u001b]8;;http://127.0.0.1/x\\u001b\\\\link\\u001b]8;;\\u001b\\\\\\u2066s\\u2069'
        '\\u009b2J" runs=1 '), session


def test_escaping_formatter_makes_every_record_one_safe_line() -> None:
    from otel_tooleval.serve.log_lines import EscapingFormatter

    formatter = EscapingFormatter("%(message)s")

    def record(msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
        info = None
        if exc:
            try:
                raise ValueError("bad \x1b[2J value")
            except ValueError:
                info = sys.exc_info()
        return logging.LogRecord("x", logging.WARNING, __file__, 1, msg, args, info)

    assert formatter.format(record("agent=%s ok", "\x1b[31mred\x7f\x85\u202e\u2066\t")) == \
        "agent=\\x1b[31mred\\x7f\\x85\\u202e\\u2066\\x09 ok"
    # a value cannot forge a second line; a message's own trailing break is dropped
    assert formatter.format(record("a %s", "x\notel-tooleval serve: run agent=fake")) == \
        "a x\\x0aotel-tooleval serve: run agent=fake"
    assert formatter.format(record("Exception in ASGI application\n")) == \
        "Exception in ASGI application"
    # a traceback keeps its lines, and escapes what is in them
    text = formatter.format(record("failed", exc=True))
    assert text.startswith("failed\nTraceback (most recent call last):\n"), text
    assert text.endswith("ValueError: bad \\x1b[2J value") and "\x1b" not in text


# -- JSON reports: C1 controls and bidi characters as \uXXXX, the same values ------------------

HOSTILE = "sup\x9b31m\x7fport\u202e\u2066x\u2069\u2028\x1b[0m\x85"


@pytest.mark.parametrize("command", [["grade", "-c", "{config}", "--format", "json",
                                      "--include-calls", "--allow-input-problems"],
                                     ["inspect", "--format", "json"]])
def test_json_reports_escape_c1_controls_and_bidi_characters(
        command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from otel_tooleval.cli import main

    source = Path(__file__).parents[1] / "data" / "files" / "traces.otlp.json"
    text = source.read_text()
    assert text.count('"support"') == 1 and text.count('"refund"') == 1
    trace = tmp_path / "hostile.otlp.json"   # an agent name and a tool name of the attacker's
    hostile = json.dumps(HOSTILE)
    trace.write_text(text.replace('"support"', hostile).replace('"refund"', hostile))
    config = tmp_path / "graders.yaml"
    config.write_text("graders:\n  - {name: any, type: tool-calls, config: {required: ['.']}}\n")
    main([command[0], str(trace), *[a.format(config=config) for a in command[1:]]])
    out = capsys.readouterr().out
    assert not [c for c in out if c in "\x7f\x85\x9b\u202e\u2066\u2069\u2028\x1b"], ascii(out)
    assert "\\u009b31m\\u007fport\\u202e\\u2066x\\u2069\\u2028\\u001b[0m\\u0085" in out
    assert _strings(json.loads(out)).count(HOSTILE) >= 2   # valid, with the same values


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = [*value, *value.values()]
    return [s for v in value for s in _strings(v)] if isinstance(value, list) else []
