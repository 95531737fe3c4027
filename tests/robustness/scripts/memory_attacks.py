"""Serve's memory under the two attacks of issue 26 (defects 3 and 4), before and after.

Starts ``otel-tooleval serve`` (the code on PYTHONPATH) on 127.0.0.1, sends agent spans whose
parent never arrives (so they are held until the TTL) one per request, sequentially, until
``--spans`` were answered 200 or ``--refusals`` in a row were refused (429 / 503), then sends
SIGTERM and times the drain. Prints, per attack: spans accepted, refusals, ``buffered_bytes``
from /healthz, serve's RSS (grown over its idle RSS, and its peak during the drain), the ratio
of RSS grown to the bytes counted, and how the drain ended. Attacks:

- ``big-json``: OTLP/JSON spans with one attribute of ``--value-mib`` MiB (defect 3);
- ``many-proto`` / ``many-json``: OTLP/protobuf or OTLP/JSON spans with ``--attributes``
  attributes each (defect 4).

    PYTHONPATH=$PWD python tests/robustness/scripts/memory_attacks.py [--bound BYTES] ...

``--bound`` is passed as ``--max-buffered-bytes`` when the serve under test has that flag
(the old one does not: it runs with its fixed 512 MiB). Mind the machine: before the fix,
RSS grows about 2 x value-mib per big span and about 300 bytes per attribute.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Any

CONFIG = "graders:\n  - {name: calls, type: tool-calls, config: {required: ['^search$']}}\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _span_json(n: int, attributes: list[dict[str, Any]]) -> dict[str, Any]:
    return {"traceId": f"{n + 1:032x}", "spanId": f"{n + 1:016x}",
            "parentSpanId": f"{1 << 40:016x}", "name": "invoke_agent attacker",
            "startTimeUnixNano": "1", "endTimeUnixNano": "2",
            "attributes": [{"key": "gen_ai.operation.name",
                            "value": {"stringValue": "invoke_agent"}}, *attributes]}


def _body(attack: str, n: int, args: argparse.Namespace) -> tuple[bytes, str]:
    if attack == "big-json":
        value = "x" * (args.value_mib << 20)
        span = _span_json(n, [{"key": "big", "value": {"stringValue": value}}])
    elif attack == "many-json":
        span = _span_json(n, [{"key": f"k{i:07d}", "value": {"stringValue": "v"}}
                              for i in range(args.attributes)])
    else:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        request = trace_service_pb2.ExportTraceServiceRequest()
        proto = request.resource_spans.add().scope_spans.add().spans.add()
        proto.trace_id, proto.span_id = (n + 1).to_bytes(16, "big"), (n + 1).to_bytes(8, "big")
        proto.parent_span_id = (1 << 40).to_bytes(8, "big")
        proto.name = "invoke_agent attacker"
        proto.start_time_unix_nano, proto.end_time_unix_nano = 1, 2
        proto.attributes.add(key="gen_ai.operation.name").value.string_value = "invoke_agent"
        for i in range(args.attributes):
            proto.attributes.add(key=f"k{i:07d}").value.string_value = "v"
        return request.SerializeToString(), "application/x-protobuf"
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    return json.dumps(doc).encode(), "application/json"


def _post(port: int, body: bytes, content_type: str) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/traces", data=body,
                                     headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0   # cut: a refusal that closed the connection before the body was read


def _health(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as answer:
        doc: dict[str, Any] = json.loads(answer.read())
        return doc


def run(attack: str, args: argparse.Namespace) -> dict[str, Any]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    cmd = [sys.executable, "-m", "otel_tooleval.cli"]
    has_flag = "--max-buffered-bytes" in subprocess.run(
        [*cmd, "serve", "--help"], capture_output=True, text=True, env=env, check=False).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(CONFIG)
    serve = [*cmd, "serve", "--config", f.name, "--grpc", "off", "--http",
             f"127.0.0.1:{port}", "--forward", "none", "--quiet",
             "--shutdown-timeout", str(args.shutdown_timeout)]
    if has_flag and args.bound:
        serve += ["--max-buffered-bytes", str(args.bound)]
    process = subprocess.Popen(serve, env=env, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stderr.readline, "")),
                              daemon=True)   # type: ignore[union-attr]
    reader.start()
    out: dict[str, Any] = {"attack": attack,
                           "bound": args.bound if has_flag and args.bound else "512 MiB"}
    try:
        deadline = time.monotonic() + 30
        while not any("listening for" in line for line in lines):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("serve did not start: " + "".join(lines))
            time.sleep(0.05)
        idle = _rss(process.pid)
        accepted = refused = in_a_row = 0
        n = 0
        started = time.monotonic()
        while accepted < args.spans and in_a_row < args.refusals and \
                time.monotonic() - started < args.seconds:
            body, content_type = _body(attack, n, args)
            status = _post(port, body, content_type)
            n += 1
            if status == 200:
                accepted += 1
                in_a_row = 0
            elif status in (0, 429, 503):
                refused += 1
                in_a_row += 1
                time.sleep(0.2)
            else:
                raise RuntimeError(f"answer {status}")
        health = _health(port)
        grown = _rss(process.pid) - idle
        out.update(accepted=accepted, refused=refused,
                   buffered_bytes=health.get("buffered_bytes"),
                   rss_idle_mb=round(idle / 2**20), rss_grown_mb=round(grown / 2**20),
                   rss_per_counted=round(grown / max(health.get("buffered_bytes") or 1, 1), 1))
        peak = 0
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        while process.poll() is None and time.monotonic() - sent < args.shutdown_timeout + 30:
            peak = max(peak, _rss(process.pid))
            time.sleep(0.05)
        if process.poll() is None:
            process.kill()
        out.update(drain_seconds=round(time.monotonic() - sent, 1),
                   drain_peak_rss_mb=round(peak / 2**20), exit=process.wait(10))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        os.unlink(f.name)
        reader.join(5)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("attacks", nargs="*", default=["big-json", "many-proto", "many-json"])
    parser.add_argument("--bound", type=int, default=0,
                        help="--max-buffered-bytes for the new serve (0: its default)")
    parser.add_argument("--spans", type=int, default=30, help="stop after this many 200s")
    parser.add_argument("--refusals", type=int, default=5, help="stop after this many in a row")
    parser.add_argument("--seconds", type=float, default=120, help="stop sending after this")
    parser.add_argument("--value-mib", type=int, default=15)
    parser.add_argument("--attributes", type=int, default=200_000)
    parser.add_argument("--shutdown-timeout", type=float, default=30.0)
    args = parser.parse_args()
    for attack in args.attacks:
        print(json.dumps(run(attack, args)), flush=True)


if __name__ == "__main__":
    main()
