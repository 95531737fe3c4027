"""Spans per second accepted and graded by one ``otel-tooleval serve`` over OTLP/HTTP protobuf.

A standalone script, not a pytest test::

    python tests/bench/bench_serve.py [--spans 300000] [--batch 512] [--clients 2]
                                      [--decision-wait 1] [--rounds 3] [--no-violation-marks]

It starts, each in its own process, on 127.0.0.1:
- a sink: the next hop, an OTLP/HTTP endpoint that reads each request and answers 200;
- ``otel-tooleval serve`` (the CLI, as users run it) forwarding to the sink;
- ``--clients`` sender processes posting pre-encoded ``ExportTraceServiceRequest`` bodies of
  ``--batch`` spans (agent runs of ~50 tool calls and ~10 model calls, each run's root after
  its children, as an SDK's batch processor sends them) over keep-alive connections.

A round sends ``--spans`` spans; it ends when serve has graded every run in them (read from
``/healthz``), so the time includes the decision wait of the last traces (reported apart) and
the grading. Throughput = spans / (time to the last accepted request), spans / (time to the
last graded run), and spans / (time until the sink has been sent every span). Serve's resident
memory (VmRSS) is read after each round, once everything is forwarded: at steady state it must
not grow from round to round. Target (issue 5): >= 20,000 spans/s. ``main(argv)`` returns the
figures as a dict.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RUN_CALLS = 50
MODEL_EVERY = 5
TOOLS = (
    ("read_file", {"path": "src/app/main.py"}, {"content": "def main():\n    return 42\n"}),
    ("search", {"query": "def main", "glob": "**/*.py"}, ["src/app/main.py:1"]),
    ("write_file", {"path": "src/app/main.py", "content": "x = 1\n"}, {"ok": True}),
    ("run_tests", {"selector": "tests/test_main.py"}, {"passed": 12, "failed": 0}),
)
CONFIG = """
graders:
  - name: safe
    type: tool-calls
    config:
      required: [{name: "^read_file$", args: {path: "\\\\.py$"}}, {name: "^run_tests$", min_count: 2}]
      disallowed: [{name: "^bash$", command: "rm\\\\s+-rf"}]
  - {name: order, type: tool-call-order, strict: false, tool_calls_order: [read_file, search, write_file, run_tests]}
  - {name: flow, type: tool_trajectory, mode: in_order, expected: [{tool: read_file}, {tool: run_tests}]}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_bodies(total_spans: int, batch: int, seed: int) -> tuple[list[bytes], int, int]:
    """Request bodies of ``batch`` spans; returns (bodies, spans, runs)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.trace.v1 import trace_pb2

    rng = random.Random(seed)
    spans: list[Any] = []
    runs = 0
    t = time.time_ns()
    while len(spans) < total_spans:
        runs += 1
        trace_id = rng.getrandbits(128).to_bytes(16, "big")
        root_id = rng.getrandbits(64).to_bytes(8, "big")
        start = t
        for i in range(RUN_CALLS):
            if i % MODEL_EVERY == 0:
                model = trace_pb2.Span(trace_id=trace_id, span_id=rng.getrandbits(64).to_bytes(
                    8, "big"), parent_span_id=root_id, name="chat m", kind=3,
                    start_time_unix_nano=t, end_time_unix_nano=t + 500)
                model.attributes.add(key="gen_ai.operation.name").value.string_value = "chat"
                spans.append(model)
                t += 1000
            name, args, result = TOOLS[i % len(TOOLS)]
            tool = trace_pb2.Span(trace_id=trace_id, span_id=rng.getrandbits(64).to_bytes(
                8, "big"), parent_span_id=root_id, name=f"execute_tool {name}",
                start_time_unix_nano=t, end_time_unix_nano=t + 800)
            for key, value in (("gen_ai.operation.name", "execute_tool"),
                               ("gen_ai.tool.name", name),
                               ("gen_ai.tool.call.arguments", json.dumps(args)),
                               ("gen_ai.tool.call.result", json.dumps(result))):
                tool.attributes.add(key=key).value.string_value = value
            spans.append(tool)
            t += 1000
        root = trace_pb2.Span(trace_id=trace_id, span_id=root_id, name="invoke_agent coder",
                              start_time_unix_nano=start, end_time_unix_nano=t)
        for key, value in (("gen_ai.operation.name", "invoke_agent"),
                           ("gen_ai.agent.name", "coder")):
            root.attributes.add(key=key).value.string_value = value
        spans.append(root)
    bodies = []
    for i in range(0, len(spans), batch):
        request = ExportTraceServiceRequest()
        rs = request.resource_spans.add()
        rs.resource.attributes.add(key="service.name").value.string_value = "bench-agent"
        ss = rs.scope_spans.add()
        ss.scope.name = "bench"
        ss.spans.extend(spans[i:i + batch])
        bodies.append(request.SerializeToString())
    return bodies, len(spans), runs


def _sender(port: int, bodies: list[bytes], out: Any) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    retries = 0
    for body in bodies:
        while True:
            conn.request("POST", "/v1/traces", body=body,
                         headers={"Content-Type": "application/x-protobuf"})
            response = conn.getresponse()
            response.read()
            if response.status == 200:
                break
            if response.status in (429, 503):
                retries += 1
                time.sleep(float(response.getheader("Retry-After") or 1) / 10)
                continue
            raise RuntimeError(f"serve answered {response.status}")
    out.put((time.perf_counter(), retries))


class _Sink(ThreadingHTTPServer):
    daemon_threads = True


class _SinkHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def _sink(port: int) -> None:
    _Sink(("127.0.0.1", port), _SinkHandler).serve_forever()


def _stats(port: int) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/healthz")
        return dict(json.loads(conn.getresponse().read()))
    finally:
        conn.close()


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=300_000, help="spans per round")
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--decision-wait", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-violation-marks", action="store_true",
                        help="emit.violation_marks: false (tool spans pass through, unheld)")
    args = parser.parse_args(argv)

    sink_port, http_port = _free_port(), _free_port()
    sink = mp.Process(target=_sink, args=(sink_port,), daemon=True)
    sink.start()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(CONFIG + ("emit: {violation_marks: false}\n" if args.no_violation_marks
                          else ""))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    # serve's stderr goes to a file: a pipe nobody reads fills up and blocks its log lines.
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in the finally below
    serve = subprocess.Popen(
        [sys.executable, "-m", "otel_tooleval.cli", "serve", "--config", f.name,
         "--grpc", "off", "--http", f"127.0.0.1:{http_port}",
         "--forward", f"http://127.0.0.1:{sink_port}", "--decision-wait",
         str(args.decision_wait), "--quiet"], env=env, stderr=log, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if _stats(http_port).get("status") == "ready":
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or serve.poll() is not None:
                serve.kill()
                serve.wait()
                log.seek(0)
                raise SystemExit(f"serve did not start: {log.read()}")
            time.sleep(0.1)
        print(f"serve pid {serve.pid}; {args.clients} sender processes; batches of "
              f"{args.batch} spans; decision wait {args.decision_wait:g} s")
        print(f"idle RSS {_rss_mib(serve.pid):.0f} MiB")
        print(f"{'round':>5} {'spans':>9} {'runs':>6} {'accepted/s':>11} {'graded/s':>9} "
              f"{'forwarded/s':>11} {'retries':>7} {'RSS MiB':>8}")
        graded_before = 0
        results = []
        for round_no in range(1, args.rounds + 1):
            bodies, spans, runs = make_bodies(args.spans, args.batch, seed=round_no)
            out: Any = mp.Queue()
            shares = [bodies[i::args.clients] for i in range(args.clients)]
            senders = [mp.Process(target=_sender, args=(http_port, share, out))
                       for share in shares]
            start = time.perf_counter()
            for p in senders:
                p.start()
            finished = [out.get(timeout=600) for _ in senders]
            for p in senders:
                p.join()
            accepted_at = max(t for t, _ in finished) - start
            while True:
                stats = _stats(http_port)
                if stats.get("runs", 0) - graded_before >= runs:
                    break
                time.sleep(0.02)
            graded_at = time.perf_counter() - start
            graded_before = stats["runs"]
            while stats.get("forwarded_spans", 0) < stats.get("accepted_spans", 0):
                time.sleep(0.02)
                stats = _stats(http_port)
            forwarded_at = time.perf_counter() - start
            rss = _rss_mib(serve.pid)
            retries = sum(r for _, r in finished)
            results.append((spans / accepted_at, spans / graded_at, rss, spans / forwarded_at,
                            retries))
            print(f"{round_no:>5} {spans:>9,} {runs:>6,} {spans / accepted_at:>11,.0f} "
                  f"{spans / graded_at:>9,.0f} {spans / forwarded_at:>11,.0f} {retries:>7} "
                  f"{rss:>8.0f}")
        stats = _stats(http_port)
        print(f"forwarded {stats.get('forwarded_spans', 0):,} of {stats.get('accepted_spans'):,}"
              f" spans accepted; open traces {stats.get('open_traces')}; buffered spans "
              f"{stats.get('buffered_spans')}")
        best = max(r[1] for r in results)
        print(f"graded throughput: best {best:,.0f} spans/s "
              f"(target >= 20,000: {'met' if best >= 20_000 else 'NOT met'}); RSS after "
              f"each round: {', '.join(f'{r[2]:.0f}' for r in results)} MiB")
        return {"spans_per_round": args.spans, "rounds": [
                    {"accepted_per_s": r[0], "graded_per_s": r[1], "rss_mib": r[2],
                     "forwarded_per_s": r[3], "retries": r[4]} for r in results],
                "graded_per_s_best": best, "rss_mib": [r[2] for r in results],
                "forwarded_spans": stats.get("forwarded_spans", 0),
                "accepted_spans": stats.get("accepted_spans", 0)}
    finally:
        serve.terminate()
        try:
            serve.wait(30)
        except subprocess.TimeoutExpired:
            serve.kill()
        sink.terminate()
        log.close()
        os.unlink(f.name)


if __name__ == "__main__":
    main()
