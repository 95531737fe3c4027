"""Issue 26, defect 6: SIGHUP storm while the bearer token file is rewritten in place.

Starts ``otel-tooleval serve`` (HTTP on 127.0.0.1 only, a free port) with a token file of a
comment, another token and the valid one; for SECONDS a writer rewrites the file in place as
a slow writer does (``open("w")`` truncates, then each line in two writes, its first 7
characters and the rest, PAUSE seconds apart),
SIGHUP is sent every few milliseconds, and a client sends empty OTLP/HTTP exports with the
valid token and with the other token's first 7 characters (a line cut short). Prints how
many valid-token requests were refused and how many cut-token requests were accepted.

    python tests/robustness/scripts/secrets_token_storm.py [SECONDS] [PAUSE]

Bounded: SECONDS (default 3) of storm, the server killed on the way out.
"""

from __future__ import annotations

import http.client
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

CONFIG = Path(__file__).resolve().parents[3] / "otel_tooleval" / "demo" / "graders.yaml"


def _post(conn: http.client.HTTPConnection, token: str) -> int:
    conn.request("POST", "/v1/traces", body=b"", headers={
        "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {token}"})
    response = conn.getresponse()
    response.read()
    return response.status


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.001
    valid, other = secrets.token_hex(16), "other-" + secrets.token_hex(16)
    content = ["# serve tokens", other, valid]
    with tempfile.TemporaryDirectory() as where:
        path = Path(where) / "tokens"
        path.write_text("\n".join(content) + "\n")
        path.chmod(0o600)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        log = open(Path(where) / "stderr", "w+")   # noqa: SIM115 - closed below
        process = subprocess.Popen(
            [sys.executable, "-m", "otel_tooleval.cli", "serve", "--config", str(CONFIG),
             "--grpc", "off", "--http", f"127.0.0.1:{port}", "--forward", "none",
             "--bearer-token-file", str(path)], env=env, stderr=log)
        stop = threading.Event()

        def write() -> None:
            while not stop.is_set():
                with open(path, "w", encoding="utf-8") as handle:
                    for line in content:   # each line in two writes: 7 chars, the rest
                        for part in (line[:7], line[7:] + "\n"):
                            handle.write(part)
                            handle.flush()
                            time.sleep(pause)
                time.sleep(0.002)

        try:
            deadline = time.monotonic() + 30
            while True:
                # Read by path: a seek on ``log``, whose offset the child's stderr shares,
                # would let the child's next line overwrite the log from its start.
                started = (Path(where) / "stderr").read_text(encoding="utf-8")
                if "listening for" in started:
                    break
                if process.poll() is not None or time.monotonic() > deadline:
                    print("serve did not start:", started, file=sys.stderr)
                    return 2
                time.sleep(0.05)
            writer = threading.Thread(target=write, daemon=True)
            writer.start()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            valid_status: Counter[int] = Counter()
            cut_status: Counter[int] = Counter()
            hups = 0
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                process.send_signal(signal.SIGHUP)
                hups += 1
                valid_status[_post(conn, valid)] += 1
                cut_status[_post(conn, other[:7])] += 1
                time.sleep(0.003)
            stop.set()
            writer.join(5)
            conn.close()
        finally:
            process.kill()
            process.wait(10)
        log.seek(0)
        text = log.read()
        log.close()
    total = sum(valid_status.values())
    refused = total - valid_status[200]
    print(f"SIGHUPs sent: {hups}; reloads done: {text.count('bearer tokens reloaded')}, "
          f"kept the old tokens: {text.count('bearer tokens not reloaded')}")
    print(f"valid-token requests: {total}, refused: {refused} ({100 * refused / max(total, 1):.1f}%)"
          f" statuses {dict(valid_status)}")
    print(f"cut-token (7 chars) requests: {sum(cut_status.values())}, accepted: "
          f"{cut_status[200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
