"""Before/after figures for the gRPC receiver under attack (issue 26): run as
``python tests/robustness/scripts/grpc_attacks.py [SCENARIO ...|all]`` (stall, big, oversize,
tls-log, silent-tls, fd-flood, throughput; see each function) from the repository root with ``PYTHONPATH`` naming the code to measure. Each scenario starts
``otel-tooleval serve`` as a subprocess on 127.0.0.1, attacks it with real gRPC clients or raw
sockets (only 127.0.0.1), prints its figures and kills the process; each is bounded in time.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
CONFIG = Path(__file__).resolve().parents[3] / "otel_tooleval" / "demo" / "graders.yaml"
TOKEN = "s3cret-token"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _body(seed: int = 0, pad: int = 0) -> bytes:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    request = trace_service_pb2.ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id = seed.to_bytes(16, "big") or b"\x01" * 16
    span.span_id = (seed + 1).to_bytes(8, "big")
    span.name = "x" * pad if pad else f"span {seed}"
    return request.SerializeToString()


class Serve:
    """``otel-tooleval serve`` in a subprocess, its stderr lines collected."""

    def __init__(self, *flags: str, nofile: int | None = None) -> None:
        self.port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}

        def limits() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.process = subprocess.Popen(
            [sys.executable, "-m", "otel_tooleval.cli", "serve", "--config", str(CONFIG),
             "--grpc", f"127.0.0.1:{self.port}", "--http", "off", "--forward", "none",
             "--decision-wait", "0.2", *flags],
            env=env, stderr=subprocess.PIPE, text=True, preexec_fn=limits)  # noqa: PLW1509
        self.lines: list[str] = []
        self._reader = threading.Thread(
            target=lambda: self.lines.extend(iter(self.process.stderr.readline, "")),  # type: ignore[union-attr]
            daemon=True)
        self._reader.start()
        deadline = time.monotonic() + 30
        while not any("listening for" in line for line in self.lines):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise SystemExit("serve did not start:\n" + "".join(self.lines))
            time.sleep(0.05)

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self._reader.join(5)


def _tokens(where: Path) -> str:
    path = where / "tokens"
    path.write_text(TOKEN + "\n")
    return str(path)


def _silence(stop: threading.Event) -> Iterator[bytes]:
    stop.wait(120)
    return
    yield b""   # a request stream that sends no message until stopped


def _export(channel: grpc.Channel, *, token: bool = True, timeout: float = 25,
            body: bytes | None = None) -> tuple[str, float]:
    metadata = (("authorization", f"Bearer {TOKEN}"),) if token else ()
    started = time.monotonic()
    try:
        channel.unary_unary(EXPORT)(body or _body(1), metadata=metadata, timeout=timeout)
        code = "OK"
    except grpc.RpcError as error:
        code = error.code().name
    return code, time.monotonic() - started


def stall(where: Path) -> None:
    """--workers silent streams (headers, no message) without a token, then with a token;
    authorised exports meanwhile."""
    for label, token in (("without a token", False), ("with a valid token", True)):
        serve = Serve("--bearer-token-file", _tokens(where), "--read-timeout", "5",
                      "--idle-timeout", "5", "--workers", "8")
        stop = threading.Event()
        attacker = grpc.insecure_channel(f"127.0.0.1:{serve.port}")
        victim = grpc.insecure_channel(f"127.0.0.1:{serve.port}")
        try:
            metadata = (("authorization", f"Bearer {TOKEN}"),) if token else ()
            silent = [attacker.stream_unary(EXPORT).future(_silence(stop), metadata=metadata)
                      for _ in range(12)]
            time.sleep(1.0)
            results = [_export(victim) for _ in range(3)]
            time.sleep(max(0.0, 7 - 1))
            ended: dict[str, int] = {}
            for future in silent:
                code = "still open" if not future.done() else (
                    "OK" if future.exception() is None else future.exception().code().name)
                ended[code] = ended.get(code, 0) + 1
            print(f"stall, 12 silent streams {label}: authorised exports "
                  + ", ".join(f"{code} in {took:.2f} s" for code, took in results)
                  + f"; the silent streams ~7 s after they started: {ended}")
        finally:
            stop.set()
            attacker.close()
            victim.close()
            serve.close()


def big(where: Path) -> None:
    """100 unauthenticated 19 MiB exports at once; the peak RSS of serve."""
    _many_big(where, count=100, mib=19, token=False)


def oversize(where: Path) -> None:
    """20 authorised 60 MiB exports at once (over --max-body-bytes, 20 MiB); serve's peak RSS."""
    _many_big(where, count=20, mib=60, token=True)


def _many_big(where: Path, *, count: int, mib: int, token: bool) -> None:
    serve = Serve("--bearer-token-file", _tokens(where))
    body = _body(3, pad=mib * 1024 * 1024)
    codes: dict[str, int] = {}
    lock = threading.Lock()
    start_rss = serve.rss_mib()

    def one() -> None:
        channel = grpc.insecure_channel(f"127.0.0.1:{serve.port}",
                                        options=[("grpc.max_send_message_length", -1),
                                                 ("grpc.use_local_subchannel_pool", 1)])
        try:
            code, _ = _export(channel, token=token, timeout=60, body=body)
        finally:
            channel.close()
        with lock:
            codes[code] = codes.get(code, 0) + 1

    try:
        started = time.monotonic()
        threads = [threading.Thread(target=one, daemon=True) for _ in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(90)
        print(f"{count} {'authorised' if token else 'unauthenticated'} {mib} MiB exports: "
              f"{codes} in "
              f"{time.monotonic() - started:.1f} s; serve peak RSS {serve.rss_mib():.0f} MiB "
              f"(at start {start_rss:.0f} MiB)")
    finally:
        serve.close()


def _pki(where: Path) -> tuple[str, str, bytes]:
    import trustme

    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.cert_chain_pems[0].write_to_path(str(where / "cert.pem"))
    server.private_key_pem.write_to_path(str(where / "key.pem"))
    return str(where / "cert.pem"), str(where / "key.pem"), ca.cert_pem.bytes()


def tls_log(where: Path) -> None:
    """600 connections that are not TLS to the TLS gRPC port: lines on serve's stderr."""
    cert, key, _ = _pki(where)
    for level in ("info", "error"):   # info: the default
        serve = Serve("--tls-cert", cert, "--tls-key", key, "--log-level", level)
        try:
            before = len(serve.lines)
            for _ in range(600):
                with socket.create_connection(("127.0.0.1", serve.port), timeout=5) as sock:
                    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                    try:
                        sock.recv(100)
                    except OSError:
                        pass
            time.sleep(1.5)
            new = serve.lines[before:]
            print(f"tls-log --log-level {level}: 600 bad handshakes -> {len(new)} stderr lines"
                  + (f"; first: {new[0].strip()[:160]}" if new else ""))
        finally:
            serve.close()


def silent_tls(where: Path) -> None:
    """TLS connections that never send a ClientHello: when does serve let them go?"""
    cert, key, _ = _pki(where)
    serve = Serve("--tls-cert", cert, "--tls-key", key, "--read-timeout", "2")
    try:
        socks = [socket.create_connection(("127.0.0.1", serve.port), timeout=30)
                 for _ in range(5)]
        started = time.monotonic()
        closed = []
        for sock in socks:
            sock.settimeout(max(0.1, started + 30 - time.monotonic()))
            try:
                sock.recv(1)
            except OSError:
                pass
            closed.append(time.monotonic() - started)
            sock.close()
        print(f"silent-tls --read-timeout 2: connections closed by serve after "
              f"{max(closed):.1f} s (30 s: not closed by the end of the wait)")
    finally:
        serve.close()


def fd_flood(where: Path) -> None:
    """ulimit -n 1024 for serve, 1,100 silent TCP connections to its gRPC port, then
    authorised exports; serve's CPU and stderr lines during the flood."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    serve = Serve("--bearer-token-file", _tokens(where), "--read-timeout", "3", nofile=1024)
    socks: list[socket.socket] = []
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{serve.port}")
        first = _export(channel, timeout=5)
        channel.close()
        before, cpu = len(serve.lines), serve.cpu_seconds()
        for _ in range(1100):
            socks.append(socket.create_connection(("127.0.0.1", serve.port), timeout=5))
        time.sleep(3)
        during = grpc.insecure_channel(f"127.0.0.1:{serve.port}")
        middle = _export(during, timeout=3)
        during.close()
        time.sleep(2)
        cpu_flood = serve.cpu_seconds() - cpu
        for sock in socks:
            sock.close()
        socks.clear()
        time.sleep(1)
        after = grpc.insecure_channel(f"127.0.0.1:{serve.port}")
        results = [_export(after, timeout=10) for _ in range(3)]
        after.close()
        new = serve.lines[before:]
        print(f"fd-flood (ulimit -n 1024, 1100 silent connections, --read-timeout 3): before "
              f"{first[0]}; during {middle[0]} in {middle[1]:.1f} s; after "
              + ", ".join(f"{c} in {t:.2f} s" for c, t in results)
              + f"; serve CPU {cpu_flood:.1f} s over ~8 s of flood; {len(new)} stderr lines"
              + (f"; first: {new[0].strip()[:160]}" if new else ""))
    finally:
        for sock in socks:
            sock.close()
        serve.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def throughput(where: Path) -> None:
    """No attack: 8 threads x 1000 small authorised exports, the rate (the cost of the
    receive deadline and of reading the message in the handler)."""
    serve = Serve("--bearer-token-file", _tokens(where))
    channel = grpc.insecure_channel(f"127.0.0.1:{serve.port}")
    codes: dict[str, int] = {}
    lock = threading.Lock()

    def client(n: int) -> None:
        for i in range(1000):
            code, _ = _export(channel, timeout=20, body=_body(n * 1000 + i))
            with lock:
                codes[code] = codes.get(code, 0) + 1

    try:
        _export(channel, timeout=10)
        started = time.monotonic()
        threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        took = time.monotonic() - started
        print(f"throughput: 8000 authorised exports from 8 threads: {codes} in {took:.1f} s "
              f"({8000 / took:.0f}/s)")
    finally:
        channel.close()
        serve.close()


SCENARIOS: dict[str, Any] = {"stall": stall, "big": big, "oversize": oversize,
                             "tls-log": tls_log, "silent-tls": silent_tls, "fd-flood": fd_flood,
                             "throughput": throughput}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scenario", nargs="*", default=["all"],
                        choices=[*SCENARIOS, "all"])
    names = parser.parse_args().scenario
    import otel_tooleval

    print(f"code under test: {otel_tooleval.__file__}")
    with tempfile.TemporaryDirectory() as where:
        for name in SCENARIOS if "all" in names else names:
            SCENARIOS[name](Path(where))


if __name__ == "__main__":
    main()
