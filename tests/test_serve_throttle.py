"""serve's refusal lines: named by sender, under --log-level, and throttled so that a flood of
bad connections cannot flood the log (otel_tooleval/serve/throttle.py)."""

from __future__ import annotations

import logging
import signal
import socket
import time

from otel_tooleval.serve.throttle import PeerLog, RefusalThrottle, refusal_of
from tests.support.serve_process import serve_process
from tests.test_serve import CONFIG, _free_port


def _record(msg: str, *args: object, kind: str | None = "http-401") -> logging.LogRecord:
    record = logging.LogRecord("otel_tooleval.serve", logging.WARNING, __file__, 1, msg, args,
                               None)
    if kind is not None:
        record.__dict__.update(refusal_of(kind))
    return record


def test_throttle_lets_a_burst_per_window_through_and_says_what_it_left_out() -> None:
    now = [0.0]
    throttle = RefusalThrottle(burst=3, window=60.0, clock=lambda: now[0])
    passed = [throttle.filter(_record("refused %s", i)) for i in range(5)]
    assert passed == [True, True, True, False, False]
    # another kind has its own budget; a record that is no refusal always passes
    assert throttle.filter(_record("refused grpc", kind="grpc-invalid"))
    assert all(throttle.filter(_record("run graded", kind=None)) for _ in range(10))
    now[0] = 59.9
    assert not throttle.filter(_record("refused %s", 5))
    now[0] = 60.0                                   # a new window: the count of before told
    record = _record("refused %s", 6)
    assert throttle.filter(record)
    assert record.getMessage() == "refused 6 (3 more like it not logged)"
    assert throttle.filter(_record("refused %s", 7))
    assert throttle.left_out == 3
    assert throttle.summary() == ("otel-tooleval serve: 3 refusal line(s) not logged (at most "
                                  "3 of each kind per 60 s; /healthz counts them all)")
    assert RefusalThrottle().summary() is None


def test_peer_log_names_the_sender_and_marks_the_line_a_refusal() -> None:
    logger = logging.getLogger("tests.peer_log")
    logger.setLevel(5)
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    handler = Keep()
    logger.addHandler(handler)
    try:
        log = PeerLog(logger, ("192.0.2.7", 51000))
        assert log.level == 5                      # uvicorn reads it for its TRACE checks
        log.warning("Invalid HTTP request received.")
        PeerLog(logger, None).warning("Unsupported upgrade request.")
        try:
            raise RuntimeError("a bug")
        except RuntimeError:
            log.exception("Exception in ASGI application\n")
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage() for r in seen] == [
        "otel-tooleval serve: request from 192.0.2.7: Invalid HTTP request received.",
        "otel-tooleval serve: request from ?: Unsupported upgrade request.",
        "otel-tooleval serve: request from 192.0.2.7: Exception in ASGI application\n"]
    assert seen[0].__dict__["otel_tooleval_refusal"] == "http-protocol"
    assert {r.pathname for r in seen} == {__file__}      # the caller's line, not the adapter's
    # an error of the receiver is no refusal: never throttled, its traceback kept
    assert "otel_tooleval_refusal" not in seen[2].__dict__ and seen[2].exc_info
    throttle = RefusalThrottle(burst=0)
    assert [throttle.filter(r) for r in seen] == [False, False, True]


def _serve_with_junk(connections: int, *extra: str, hangup: bool = False) -> list[str]:
    """``otel-tooleval serve`` (HTTP only) sent ``connections`` connections of bytes that are
    not HTTP (and a SIGHUP first, with ``hangup``); its stderr lines once it has stopped."""
    port = _free_port()
    with serve_process("--config", str(CONFIG), "--grpc", "off", "--http", f"127.0.0.1:{port}",
                       "--forward", "none", *extra) as (process, lines):
        if hangup:      # nothing to reload: serve keeps serving (and drains at SIGTERM)
            process.send_signal(signal.SIGHUP)
            time.sleep(0.5)
            assert process.poll() is None, "".join(lines)
        for _ in range(connections):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(b"\x16\x03\x01 not http\r\n\r\n")   # a TLS hello, say
                sock.recv(1024)                                  # the 400, or the close
        process.terminate()
        process.wait(timeout=30)
    assert process.returncode == 0, "".join(lines)
    return lines


def test_a_flood_of_junk_connections_is_logged_a_few_lines_a_minute() -> None:
    lines = _serve_with_junk(25)
    junk = [line for line in lines if "Invalid HTTP request" in line]
    assert len(junk) == 10, "".join(lines)
    assert all(line.startswith("otel-tooleval serve: request from 127.0.0.1: ") for line in junk)
    assert lines[-1].startswith("otel-tooleval serve: 15 refusal line(s) not logged"), lines


def test_log_level_error_silences_uvicorns_warnings_too() -> None:
    # and a SIGHUP to a serve without tokens or TLS is harmless: it still drains at the end
    lines = _serve_with_junk(3, "--log-level", "error", hangup=True)
    assert "otel-tooleval serve: stopped;" in "".join(lines)
    assert not [line for line in lines if "Invalid HTTP" in line or "not logged" in line], lines
