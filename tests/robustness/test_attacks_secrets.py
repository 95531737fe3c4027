"""Secret files as an attack (issue 26, defects 6 and 11): SIGHUP while the token file is
rewritten in place, short tokens, and token files and keys that others may read or write.

The storm runs ``otel-tooleval serve`` as a subprocess on 127.0.0.1 with a real HTTP client:
a writer rewrites the token file in place as a shell script does (``open("w")`` truncates,
then a few writes), SIGHUP comes every few milliseconds, and every request carrying the valid
token must be accepted (an OTLP exporter drops a batch on 401, it does not retry).
"""

from __future__ import annotations

import http.client
import logging
import os
import resource
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import trustme

from otel_tooleval.serve.security import (
    MIN_TOKEN_LENGTH,
    TokenStore,
    load_tls,
    read_steady,
)
from tests.support.serve_process import serve_process
from tests.test_serve import CONFIG, _free_port

STORM_S = 3.0


def _post(conn: http.client.HTTPConnection, token: str) -> int:
    """An empty OTLP/HTTP export (no spans) with ``token``; the status."""
    conn.request("POST", "/v1/traces", body=b"", headers={
        "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {token}"})
    response = conn.getresponse()
    response.read()
    return response.status


def _rewrite(path: Path, lines: list[str], pause: float) -> None:
    """In place, as a shell script or a slow program does: truncate, then the lines in
    writes of their own, each line in two (its first 7 characters, then the rest)."""
    with open(path, "w", encoding="utf-8") as handle:
        for line in lines:
            for part in (line[:7], line[7:] + "\n"):
                handle.write(part)
                handle.flush()
                time.sleep(pause)


def test_a_sighup_storm_during_in_place_rewrites_refuses_no_valid_token(tmp_path: Path
                                                                        ) -> None:
    valid, other, fresh = (secrets.token_hex(16) for _ in range(3))
    other = "other-" + other
    content = ["# serve tokens", other, valid]
    path = tmp_path / "tokens"
    path.write_text("\n".join(content) + "\n")
    path.chmod(0o600)
    port = _free_port()
    statuses: dict[str, list[int]] = {"valid": [], "cut": []}
    stop = threading.Event()

    def write() -> None:
        while not stop.is_set():
            _rewrite(path, content, 0.001)
            time.sleep(0.002)

    with serve_process("--config", str(CONFIG), "--grpc", "off", "--http",
                       f"127.0.0.1:{port}", "--forward", "none", "--decision-wait", "0.2",
                       "--bearer-token-file", str(path)) as (process, lines):
        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            deadline = time.monotonic() + STORM_S
            while time.monotonic() < deadline:
                process.send_signal(signal.SIGHUP)
                statuses["valid"].append(_post(conn, valid))
                statuses["cut"].append(_post(conn, other[:7]))   # a line cut short
                time.sleep(0.003)
        finally:
            stop.set()
            writer.join(5)
        # After the storm, reloads still take a rewritten file.
        _rewrite(path, ["# serve tokens", fresh, valid], 0.0)
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 15
        while _post(conn, fresh) != 200:
            assert time.monotonic() < deadline, "".join(lines[-5:])
            time.sleep(0.1)
        conn.close()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    refused = [s for s in statuses["valid"] if s != 200]
    assert len(statuses["valid"]) >= 20, statuses   # the storm ran
    assert refused == [], f"{len(refused)} of {len(statuses['valid'])} valid-token requests refused"
    assert set(statuses["cut"]) == {401}, "a line cut short was taken as a token"
    assert not any(valid in line or other in line for line in lines)   # tokens never logged


def _token_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "tokens"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_short_token_is_refused_at_startup_and_kept_out_on_reload(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    good = "g" * MIN_TOKEN_LENGTH
    path = _token_file(tmp_path, f"{good}\n{'s' * (MIN_TOKEN_LENGTH - 1)}\n")
    with pytest.raises(ValueError, match=f"^--bearer-token-file {path}: line 2 is shorter "
                                         f"than {MIN_TOKEN_LENGTH} characters") as caught:
        TokenStore(str(path))
    assert "sss" not in str(caught.value)
    path.write_text(f"{good}\n")
    store = TokenStore(str(path))
    path.write_text(f"{good}\nshort-token\n")
    caplog.set_level(logging.WARNING, logger="otel_tooleval.serve")
    assert not store.reload()
    assert store.check(f"Bearer {good}") and not store.check("Bearer short-token")
    assert "line 2 is shorter than" in caplog.text and "short-token" not in caplog.text


def _capped() -> None:   # a file read whole (/dev/zero) fails fast, not with the machine
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def _serve(args: list[str], tmp_path: Path) -> tuple[int, str]:
    """``serve ARGS`` expected to refuse to start: its exit status and stderr; killed (and
    the test failed) when it is still running after 15 s."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    try:
        done = subprocess.run([sys.executable, "-m", "otel_tooleval.cli", "serve", "--config",
                               str(CONFIG), "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0",
                               "--forward", "none", *args], check=False, capture_output=True,
                              text=True, timeout=15, env=env, cwd=tmp_path,
                              preexec_fn=_capped)
    except subprocess.TimeoutExpired:
        pytest.fail(f"serve {args}: still running after 15 s (killed)")
    return done.returncode, done.stderr


@pytest.fixture(scope="module")
def key_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    where = tmp_path_factory.mktemp("pki")
    leaf = trustme.CA().issue_cert("127.0.0.1")
    leaf.cert_chain_pems[0].write_to_path(str(where / "cert.pem"))
    leaf.private_key_pem.write_to_path(str(where / "key.pem"))
    return where / "cert.pem", where / "key.pem"


def test_a_world_writable_token_file_or_key_is_refused_in_one_line(
        tmp_path: Path, key_pair: tuple[Path, Path]) -> None:
    cert, key = key_pair
    tokens = _token_file(tmp_path, "t" * 32 + "\n", 0o666)
    code, err = _serve(["--bearer-token-file", str(tokens)], tmp_path)
    assert code == 2 and err.count("\n") == 1, err
    assert f"--bearer-token-file {tokens}: anyone may write it (mode 0666)" in err, err
    key.chmod(0o646)
    try:
        code, err = _serve(["--tls-cert", str(cert), "--tls-key", str(key)], tmp_path)
    finally:
        key.chmod(0o600)
    assert code == 2 and err.count("\n") == 1, err
    assert f"--tls-key {key}: anyone may write it (mode 0646)" in err, err


def test_a_token_file_or_key_others_may_read_is_taken_with_one_warning(
        tmp_path: Path, key_pair: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    cert, key = key_pair
    caplog.set_level(logging.WARNING, logger="otel_tooleval.serve")
    tokens = _token_file(tmp_path, "t" * 32 + "\n", 0o644)
    key.chmod(0o640)
    try:
        store = TokenStore(str(tokens))
        assert store.reload() and store.check("Bearer " + "t" * 32)
        assert load_tls(str(cert), str(key), None) is not None
        assert load_tls(str(cert), str(key), None) is not None
    finally:
        key.chmod(0o600)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    said = "the group or others may read it (mode {}); chmod 600 it unless another user must " \
        "read it"
    assert warnings == [   # once each, not again on reload
        f"otel-tooleval serve: --bearer-token-file {tokens}: {said.format('0644')}",
        f"otel-tooleval serve: --tls-key {key}: {said.format('0640')}"], warnings
    caplog.clear()
    tokens.chmod(0o600)
    assert TokenStore(str(tokens)) and load_tls(str(cert), str(key), None)
    assert caplog.records == []


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder"])
def test_a_token_file_or_key_that_is_no_file_is_refused_at_once(
        kind: str, tmp_path: Path, key_pair: tuple[Path, Path]) -> None:
    cert, _ = key_pair
    path = {"fifo": tmp_path / "pipe", "dev-zero": Path("/dev/zero"), "folder": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    says = {"fifo": "a FIFO (named pipe), not a file", "dev-zero": "a character device, not a "
            "file", "folder": "a folder, not a file"}[kind]
    for args, flag in ((["--bearer-token-file", str(path)], "--bearer-token-file"),
                       (["--tls-cert", str(cert), "--tls-key", str(path)], "--tls-key")):
        started = time.monotonic()
        code, err = _serve(args, tmp_path)
        assert code == 2 and err.count("\n") == 1, err
        assert f"{flag} {path}: {says}" in err, err
        assert time.monotonic() - started < 10


def test_a_file_being_written_is_read_once_it_holds_still(tmp_path: Path) -> None:
    """``read_steady`` waits out a writer that pauses between writes, and gives up (naming
    the file) on one that never stops."""
    path = tmp_path / "tokens"
    path.write_text("")
    lines = ["# tokens", "a" * 32, "b" * 32]

    def slow() -> None:
        _rewrite(path, lines, 0.03)

    writer = threading.Thread(target=slow)
    writer.start()
    try:
        got = read_steady("--bearer-token-file", str(path), 1 << 20)
    finally:
        writer.join()
    assert got.data.decode() == "\n".join(lines) + "\n"
    stop = threading.Event()

    def endless() -> None:
        while not stop.is_set():
            _rewrite(path, lines, 0.01)

    writer = threading.Thread(target=endless)
    writer.start()
    try:
        with pytest.raises(ValueError, match=f"^--bearer-token-file {path}: kept changing"):
            read_steady("--bearer-token-file", str(path), 1 << 20)
    finally:
        stop.set()
        writer.join()
