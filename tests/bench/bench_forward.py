"""Requests per second that serve's forwarder sends to a next hop, by ``--forward-workers``.

A standalone script, not a pytest test::

    python tests/bench/bench_forward.py [--requests 400] [--kib 64] [--latency-ms 5]
                                        [--workers 1,2,4]

A next hop on 127.0.0.1 (its own process: an OTLP/HTTP endpoint that reads each body, waits
``--latency-ms`` as a collector across a network answers, and says 200) receives
``--requests`` bodies of ``--kib`` KiB from serve's forwarder (``_Forwarder``, the code serve
runs) for each worker count. The time is from the first ``put`` until every request is
answered (``drain``). One worker sends one request at a time, so its rate is bounded by the
round trip; more workers overlap round trips, each on its own keep-alive connection. Printed:
requests/s and the ratio to one worker. ``main(argv)`` returns the figures as a dict.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from otel_tooleval.config import load_config
from otel_tooleval.serve import ServeOptions
from otel_tooleval.serve.forwarder import _Forwarder

_CONFIG = {"graders": [{"name": "any", "type": "tool-calls",
                         "config": {"required": [{"name": ".*"}]}}]}


class _Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    latency = 0.0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(self.latency)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def _sink(latency: float, ready: Any) -> None:
    _Sink.latency = latency
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    server.daemon_threads = True
    ready.send(server.server_address[1])
    server.serve_forever()


def measure(port: int, workers: int, requests: int, body: bytes) -> float:
    """Requests per second through ``workers`` sender threads."""
    forwarder = _Forwarder(ServeOptions(load_config(_CONFIG), forward=f"http://127.0.0.1:{port}",
                                        forward_workers=workers, max_queued_bytes=1 << 40))
    start = time.perf_counter()
    for _ in range(requests):
        forwarder.put(body, 1)
    if not forwarder.drain(time.monotonic() + 600):
        raise RuntimeError("the forwarder did not drain")
    elapsed = time.perf_counter() - start
    if forwarder.counts["forwarded_requests"] != requests:
        raise RuntimeError(f"forwarded {forwarder.counts['forwarded_requests']} of {requests}")
    return requests / elapsed


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--kib", type=int, default=64, help="body size in KiB (default 64)")
    parser.add_argument("--latency-ms", type=float, default=5.0,
                        help="the next hop's time to answer (default 5)")
    parser.add_argument("--workers", default="1,2,4", help="worker counts (default 1,2,4)")
    args = parser.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",") if w]
    receive, send = mp.Pipe(duplex=False)
    sink = mp.get_context("spawn").Process(target=_sink, args=(args.latency_ms / 1000, send),
                                           daemon=True)
    sink.start()
    try:
        port = int(receive.recv())
        body = b"\x0a" * (args.kib * 1024)
        measure(port, 1, min(20, args.requests), body)   # warm-up
        rates = {w: measure(port, w, args.requests, body) for w in counts}
    finally:
        sink.terminate()
        sink.join(5)
    base = rates[counts[0]]
    print(f"{args.requests} requests of {args.kib} KiB, next hop answers in "
          f"{args.latency_ms:g} ms")
    print(f"{'workers':>7}  {'requests/s':>10}  {'x ' + str(counts[0]):>6}")
    for w in counts:
        print(f"{w:>7}  {rates[w]:>10.0f}  {rates[w] / base:>6.2f}")
    return {"requests_per_s": {str(w): rates[w] for w in counts},
            "ratio": {str(w): rates[w] / base for w in counts}}


if __name__ == "__main__":
    main()
