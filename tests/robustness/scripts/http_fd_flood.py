"""Silent connections against ``otel-tooleval serve``'s OTLP/HTTP receiver under a small
open-file limit (issue 26, defect 2): what an authorised sender sees meanwhile, how long the
silent connections are held, and how much serve writes to stderr.

Run from a checkout (``PYTHONPATH=$PWD``)::

    python tests/robustness/scripts/http_fd_flood.py [--tls] [--connections 1100] [--peers 1]

serve runs as a subprocess on 127.0.0.1 with ``ulimit -n`` set in the child; the attacker holds
``--connections`` silent connections from ``--peers`` loopback source addresses (127.0.0.1,
127.0.0.2, ...) for ``--seconds`` and opens a new one for each that serve closes; an authorised
exporter on 127.0.0.250 posts a small export every half second. Self-contained (stdlib,
trustme, opentelemetry-proto), so the same script measures an older checkout.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import selectors
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

#: ``otel-tooleval ARGS`` under ``ulimit -n N`` (``python -c LIMITED N ARGS``): the limit is
#: set in the child itself, as a shell's ``ulimit -n`` would be.
LIMITED = ("import resource, runpy, sys; n = int(sys.argv.pop(1)); "
           "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
           "runpy.run_module('otel_tooleval.cli', run_name='__main__')")
LEGIT = "127.0.0.250"   # the authorised sender's source address (another peer than the flood)
TOKEN = "flood-test-token"


def export_body() -> bytes:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2

    request = trace_service_pb2.ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 16, b"\x02" * 8, "lookup"
    span.start_time_unix_nano, span.end_time_unix_nano = 1, 2
    span.kind = trace_pb2.Span.SPAN_KIND_INTERNAL
    return request.SerializeToString()   # type: ignore[no-any-return]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Stderr:
    """Counts serve's stderr lines and bytes; keeps the first few lines."""

    def __init__(self, stream: object) -> None:
        self.lines = self.bytes = 0
        self.first: list[str] = []
        self.listening = threading.Event()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: object) -> None:
        for raw in iter(stream.readline, b""):   # type: ignore[attr-defined]
            self.lines += 1
            self.bytes += len(raw)
            if len(self.first) < 8:
                self.first.append(raw.decode(errors="replace").rstrip()[:200])
            if b"listening for" in raw:
                self.listening.set()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--connections", type=int, default=1100)
    parser.add_argument("--peers", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--read-timeout", type=float, default=2.0)
    parser.add_argument("--nofile", type=int, default=1024)
    parser.add_argument("serve_args", nargs="*", help="more serve flags (after --)")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)   # this script holds the flood
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.connections + 512), hard))
    where = Path(tempfile.mkdtemp(prefix="http-fd-flood-"))
    (where / "tokens").write_text(TOKEN + "\n")
    (where / "config.yaml").write_text(
        "graders:\n  - name: any\n    type: tool-calls\n    config: {required: ['.']}\n")
    flags = ["--config", str(where / "config.yaml"), "--grpc", "off", "--forward", "none",
             "--bearer-token-file", str(where / "tokens"),
             "--read-timeout", str(args.read_timeout), *args.serve_args]
    client_tls = None
    if args.tls:
        import trustme

        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1")
        cert.cert_chain_pems[0].write_to_path(str(where / "cert.pem"))
        cert.private_key_pem.write_to_path(str(where / "key.pem"))
        flags += ["--tls-cert", str(where / "cert.pem"), "--tls-key", str(where / "key.pem")]
        client_tls = ssl.create_default_context()
        ca.configure_trust(client_tls)
    port = free_port()
    nofile = args.nofile
    serve = subprocess.Popen(
        [sys.executable, "-c", LIMITED, str(nofile), "serve", "--http", f"127.0.0.1:{port}",
         *flags], stderr=subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")})
    err = Stderr(serve.stderr)
    held: dict[socket.socket, float] = {}
    lifetimes: list[float] = []
    exports: list[tuple[float, str, float]] = []   # (when, outcome, seconds)
    body = export_body()
    try:
        if not err.listening.wait(30):
            print("serve did not start:", *err.first, sep="\n")
            return 1
        lines_at_start = err.lines
        start = time.monotonic()
        end = start + args.seconds
        selector = selectors.DefaultSelector()

        def open_one(i: int) -> None:
            sock = socket.socket()
            sock.settimeout(1.0)
            try:
                sock.bind((f"127.0.0.{1 + i % args.peers}", 0))
                sock.connect(("127.0.0.1", port))
            except OSError:
                sock.close()
                return
            sock.setblocking(False)
            held[sock] = time.monotonic()
            selector.register(sock, selectors.EVENT_READ)

        def flood() -> None:
            opened = 0
            while opened < args.connections and time.monotonic() < end:
                open_one(opened)
                opened += 1
            while time.monotonic() < end:
                for key, _ in selector.select(timeout=0.1):
                    sock = key.fileobj
                    try:
                        data = sock.recv(4096)   # type: ignore[union-attr]
                    except OSError:
                        data = b""
                    if not data:   # closed by serve (or answered): open another
                        lifetimes.append(time.monotonic() - held.pop(sock))   # type: ignore[arg-type]
                        selector.unregister(sock)
                        sock.close()   # type: ignore[union-attr]
                        if time.monotonic() < end:
                            open_one(opened)
                            opened += 1

        attacker = threading.Thread(target=flood, daemon=True)
        attacker.start()
        time.sleep(0.5)
        while time.monotonic() < end:
            began = time.monotonic()
            try:
                conn: http.client.HTTPConnection = (
                    http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=client_tls,
                                                source_address=(LEGIT, 0))
                    if client_tls else http.client.HTTPConnection(
                        "127.0.0.1", port, timeout=5, source_address=(LEGIT, 0)))
                conn.request("POST", "/v1/traces", body=body, headers={
                    "Content-Type": "application/x-protobuf",
                    "Authorization": f"Bearer {TOKEN}"})
                outcome = str(conn.getresponse().status)
                conn.close()
            except OSError as exc:
                outcome = type(exc).__name__
            exports.append((began - start, outcome, time.monotonic() - began))
            time.sleep(max(0.0, 0.5 - (time.monotonic() - began)))
        attacker.join(5)
        lines_during = err.lines - lines_at_start
        bytes_during = err.bytes
        stats: dict[str, object] = {}
        for sock in list(held):
            sock.close()
        time.sleep(args.read_timeout + 0.5)
        try:
            conn = (http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=client_tls)
                    if client_tls else http.client.HTTPConnection("127.0.0.1", port, timeout=5))
            conn.request("GET", "/healthz")
            stats = json.loads(conn.getresponse().read())
            conn.close()
        except (OSError, ValueError) as exc:
            stats = {"healthz": type(exc).__name__}
    finally:
        for sock in list(held):
            sock.close()
        serve.kill()
        serve.wait(10)
        err.thread.join(5)
    ok = [e for e in exports if e[1] == "200"]
    print(f"serve {'TLS' if args.tls else 'plaintext'}, ulimit -n {nofile}, --read-timeout "
          f"{args.read_timeout:g}, {args.connections} silent connections from {args.peers} "
          f"peer(s) for {args.seconds:g} s")
    print(f"  authorised exports: {len(ok)}/{len(exports)} answered 200; first 200 at "
          f"{ok[0][0]:.1f} s" if ok else f"  authorised exports: 0/{len(exports)} answered 200")
    print(f"  export outcomes: {sorted({e[1] for e in exports})}; slowest "
          f"{max((e[2] for e in exports), default=0):.2f} s")
    if lifetimes:
        print(f"  silent connections closed by serve: {len(lifetimes)}; held median "
              f"{statistics.median(lifetimes):.2f} s, max {max(lifetimes):.2f} s")
    else:
        print("  silent connections closed by serve: 0")
    print(f"  stderr during the flood: {lines_during} lines; {bytes_during} bytes in all")
    print("  healthz counters: " + json.dumps({k: v for k, v in stats.items() if k.startswith(
        ("refused_", "accept")) or k == "healthz"}))
    for line in err.first[1:4]:
        print(f"  stderr: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
