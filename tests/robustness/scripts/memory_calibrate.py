"""What held spans really cost against what serve counts (``buffered_bytes``), per shape.

Feeds one in-process ``ToolEvalServer`` (no listeners, nothing forwarded) spans of one shape
whose parent never arrives, then prints the RSS it grew by, the bytes counted, and their ratio
(real / counted: at most 1 is what the estimate of ``serve/spans.py`` aims at). One process per
shape, so that memory freed by one does not hide the next. Run from the repository root:

    PYTHONPATH=$PWD python tests/robustness/scripts/memory_calibrate.py [SHAPE ...]

Bounded: about 150 MB of spans per shape, 127.0.0.1 never contacted.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from typing import Any

SHAPES = ("small-spans", "plain-spans", "tool-spans", "str-attributes", "int-attributes",
          "array-elements", "kvlist-entries", "events", "event-attributes", "links",
          "big-string", "big-resource")
TARGET = 150 * 1024 * 1024   # bytes of memory (about) that each shape's spans take


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _request(shape: str, batch: int, first: int) -> Any:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    request = trace_service_pb2.ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    rs.resource.attributes.add(key="service.name").value.string_value = "calibrate"
    if shape == "big-resource":
        for i in range(20_000):
            rs.resource.attributes.add(key=f"r{i:06d}").value.string_value = f"v{i:06d}"
    ss = rs.scope_spans.add()
    ss.scope.name = "calibrate"
    per_span = {"small-spans": 1000, "plain-spans": 1000, "tool-spans": 1000}.get(shape, 20)
    for n in range(first, first + per_span):
        span = ss.spans.add()
        span.trace_id = (n + 1 if shape != "plain-spans" else 1).to_bytes(16, "big")
        span.span_id = (n + 1).to_bytes(8, "big")
        span.parent_span_id = (1 << 40).to_bytes(8, "big")   # never arrives
        span.name = "invoke_agent calibrate"
        span.start_time_unix_nano, span.end_time_unix_nano = 1, 2
        attrs = span.attributes
        op = {"plain-spans": "other", "tool-spans": "execute_tool"}.get(shape, "invoke_agent")
        attrs.add(key="gen_ai.operation.name").value.string_value = op
        if shape == "plain-spans":
            for i in range(50):
                attrs.add(key=f"k{i:07d}").value.string_value = f"v{i:07d}"
        if shape == "str-attributes":
            for i in range(batch):
                attrs.add(key=f"k{i:07d}").value.string_value = f"v{i:07d}"
        elif shape == "int-attributes":
            for i in range(batch):
                attrs.add(key=f"k{i:07d}").value.int_value = i
        elif shape == "array-elements":
            values = attrs.add(key="a").value.array_value.values
            for i in range(batch):
                values.add().int_value = i
        elif shape == "kvlist-entries":
            entries = attrs.add(key="a").value.kvlist_value.values
            for i in range(batch):
                entries.add(key=f"k{i:07d}").value.string_value = "v"
        elif shape == "events":
            for i in range(batch):
                span.events.add(name="e")
        elif shape == "event-attributes":
            for i in range(batch):
                event = span.events.add(name="e")
                event.attributes.add(key="k").value.int_value = i
        elif shape == "links":
            for i in range(batch):
                span.links.add(trace_id=b"\1" * 16, span_id=b"\2" * 8)
        elif shape == "big-string":
            attrs.add(key="big").value.string_value = "x" * batch
    return request


def measure(shape: str) -> tuple[float, int, int]:
    """(RSS grown, buffered bytes, spans) for one shape, in this process."""
    from otel_tooleval import load_config
    from otel_tooleval.serve import ServeOptions, ToolEvalServer

    config = load_config({"graders": [{"name": "g", "type": "tool-calls",
                                       "config": {"required": ["^t$"]}}],
                          "limits": {"max_open_runs": 1_000_000,
                                     "max_spans_per_trace": 1_000_000}})
    server = ToolEvalServer(ServeOptions(config, grpc=None, http=None, forward="none",
                                         emit_telemetry=False, max_buffered_bytes=1 << 40))
    batch = {"big-string": 1 << 20, "small-spans": 0, "plain-spans": 0, "tool-spans": 0,
             "big-resource": 0}.get(shape, 2000)
    gc.collect()
    before = _rss()
    first = 0
    for _ in range(10_000):
        if server.stats()["buffered_bytes"] >= TARGET or _rss() - before >= 2 * TARGET:
            break
        request = _request(shape, batch, first)
        first += 1000
        server.ingest(request, request.SerializeToString())
        del request
    gc.collect()
    stats = server.stats()
    grown = _rss() - before
    server.stop(timeout=5)
    return grown, stats["buffered_bytes"], stats["buffered_spans"]


def main() -> None:
    shapes = sys.argv[1:] or SHAPES
    if len(shapes) == 1:
        grown, counted, spans = measure(shapes[0])
        print(f"{shapes[0]:18} spans {spans:7d}  RSS grown {grown / 2**20:7.1f} MiB  counted "
              f"{counted / 2**20:7.1f} MiB  real/counted {grown / max(counted, 1):5.2f}")
        return
    for shape in shapes:
        subprocess.run([sys.executable, __file__, shape], check=True, timeout=300)


if __name__ == "__main__":
    main()
