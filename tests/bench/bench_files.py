"""Spans per second through ``otel-tooleval grade`` (parse + assemble + grade) and peak memory.

A standalone script, not a pytest test::

    python tests/bench/bench_files.py [--spans 250000,1000000] [--repeat N] [--json stdlib]
                                      [--keep DIR]

For each size it writes an OTLP/JSON-lines file as the collector's file exporter would: agent
runs of about 50 tool calls and 10 model calls each, eight runs in flight at once, spans in
the order they ended (each run's root last), a few hundred spans per line. Then, each in a
fresh process so that peak memory is its own, it times:

- ``parse``: ``read_records`` alone;
- ``assemble``: ``read_records`` + ``iter_traces``;
- ``grade``: ``read_records`` + ``iter_traces`` + ``grading.grade_records`` per trace with a
  tool-calls config (what ``grade`` does, less the output).

Peak memory is ``ru_maxrss`` (tracemalloc would slow a million spans down many times): the
process's peak after the imports, then after the run; with memory independent of file size the
growth is the same for 250k and 1M spans. Target (issue 4): >= 50,000 spans/s on one core.
``main(argv)`` returns the figures as a dict.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

RUN_CALLS = 50          # tool calls per agent run
MODEL_EVERY = 5         # a model call before every fifth tool call
IN_FLIGHT = 8           # agent runs in flight at once
BATCH = 300             # spans per line (the collector's batches)

TOOLS: tuple[tuple[str, dict[str, Any], Any], ...] = (
    ("read_file", {"path": "src/app/main.py"}, {"content": "def main():\n    return 42\n"}),
    ("search", {"query": "def main", "glob": "**/*.py"}, ["src/app/main.py:1"]),
    ("write_file", {"path": "src/app/main.py", "content": "x = 1\n"}, {"ok": True}),
    ("run_tests", {"selector": "tests/test_main.py"}, {"passed": 12, "failed": 0}),
    ("bash", {"command": "ls -la src/app"}, "main.py\n__init__.py\n"),
)

CONFIG = {"graders": [
    {"name": "safe", "type": "tool-calls", "config": {
        "required": [{"name": "^read_file$", "args": {"path": "\\.py$"}},
                     {"name": "^run_tests$", "min_count": 2}],
        "disallowed": [{"name": "^bash$", "command": "rm\\s+-rf"}],
        "sequence": ["^read_file$", "^write_file$", "^run_tests$"]}},
    {"name": "order", "type": "tool-call-order", "strict": False,
     "tool_calls_order": ["read_file", "search", "write_file", "run_tests"]},
]}


# -- the input file --------------------------------------------------------------------------------

def _kv(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def _span(trace: str, span_id: int, parent: int, name: str, start: int, end: int,
          attrs: dict[str, Any]) -> dict[str, Any]:
    span = {"traceId": trace, "spanId": format(span_id, "016x"), "name": name, "kind": 1,
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(end),
            "attributes": [_kv(k, v) for k, v in attrs.items()], "status": {}, "flags": 256}
    if parent:
        span["parentSpanId"] = format(parent, "016x")
    return span


def _run(rng: random.Random, number: int, start: int) -> list[tuple[str, dict[str, Any]]]:
    """One agent run's spans in the order they end, as (scope, OTLP/JSON span)."""
    trace = format(rng.getrandbits(128) | 1 << 127, "032x")
    root_id = number << 16
    sid = root_id
    t = start
    out: list[tuple[str, dict[str, Any]]] = []
    for i in range(RUN_CALLS):
        if i % MODEL_EVERY == 0:
            sid += 1
            out.append(("openai", _span(trace, sid, root_id, "chat gpt-4o", t, t + 900_000, {
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 1200 + i, "gen_ai.usage.output_tokens": 85})))
            t += 1_000_000
        name, args, result = TOOLS[(i + number) % len(TOOLS)]
        sid += 1
        out.append(("agent.tools", _span(trace, sid, root_id, f"execute_tool {name}", t,
                                         t + 400_000, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": f"call_{sid:x}",
            "gen_ai.tool.call.arguments": json.dumps(args),
            "gen_ai.tool.call.result": json.dumps(result)})))
        t += 500_000
    out.append(("agent", _span(trace, root_id, 0, "invoke_agent coder", start, t + 1_000, {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "coder",
        "gen_ai.system": "openai"})))
    return out


def _ended_spans(total: int, rng: random.Random) -> Iterator[tuple[str, dict[str, Any]]]:
    """Spans of IN_FLIGHT interleaved runs, in end order: whole runs, at least ``total`` spans
    (a run cut short would leave rootless spans that grade as runs of their own)."""
    number = 0
    planned = 0
    flights: list[list[tuple[str, dict[str, Any]]]] = []
    while flights or planned < total:
        while len(flights) < IN_FLIGHT and planned < total:
            number += 1
            run = _run(rng, number, 1_760_000_000_000_000_000 + number * 10**9)
            run.reverse()  # popped from the end
            planned += len(run)
            flights.append(run)
        flight = rng.choice(flights)
        yield flight.pop()
        if not flight:
            flights.remove(flight)


RESOURCE = {"attributes": [_kv("service.name", "coding-agent"), _kv("service.version", "2.1.0"),
                           _kv("telemetry.sdk.language", "python")]}


def write_input(path: Path, total: int) -> None:
    rng = random.Random(7)
    batch: list[tuple[str, dict[str, Any]]] = []
    with path.open("w", encoding="utf-8") as fh:
        def flush() -> None:
            scopes: dict[str, list[dict[str, Any]]] = {}
            for scope, span in batch:
                scopes.setdefault(scope, []).append(span)
            doc = {"resourceSpans": [{"resource": RESOURCE, "scopeSpans": [
                {"scope": {"name": s}, "spans": spans} for s, spans in scopes.items()]}]}
            fh.write(json.dumps(doc, separators=(",", ":")))
            fh.write("\n")
            batch.clear()

        for item in _ended_spans(total, rng):
            batch.append(item)
            if len(batch) == BATCH:
                flush()
        if batch:
            flush()


# -- one measurement, in a fresh process ------------------------------------------------------

def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def measure(path: Path, stage: str, parser: str) -> dict[str, Any]:
    from otel_tooleval.config import load_config
    from otel_tooleval.files import iter_traces, read_records
    from otel_tooleval.grading import grade_records
    from otel_tooleval.readers import json_input

    if parser == "stdlib":
        json_input.loads = json.loads

    config = load_config(CONFIG)
    problems: list[Any] = []
    before = _maxrss_mib()
    spans = traces = runs = passed = 0
    start = time.perf_counter()
    records = read_records(path, on_problem=problems.append)
    if stage == "parse":
        for _ in records:
            spans += 1
    else:
        for trace in iter_traces(records):
            spans += len(trace)
            traces += 1
            if stage == "grade":
                for report in grade_records(trace, config):
                    runs += 1
                    passed += report.passed
    seconds = time.perf_counter() - start
    return {"stage": stage, "spans": spans, "traces": traces, "runs": runs, "passed": passed,
            "problems": len(problems), "seconds": seconds, "spans_per_s": spans / seconds,
            "rss_before_mib": before, "rss_peak_mib": _maxrss_mib()}


def _in_child(path: Path, stage: str, parser: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    out = subprocess.run([sys.executable, __file__, "--measure", str(path), "--stage", stage,
                          "--json", parser],
                         check=True, capture_output=True, text=True, env=env)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spans", default="250000,1000000",
                        help="comma-separated input sizes in spans")
    parser.add_argument("--stages", default="parse,assemble,grade")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each stage this many times and keep the fastest")
    parser.add_argument("--keep", help="write the inputs here and keep them")
    parser.add_argument("--json", choices=("auto", "stdlib"), default="auto",
                        help="JSON parser: orjson when installed (auto), or the standard "
                             "library's")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--stage", default="grade", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        child = measure(Path(args.measure), args.stage, args.json)
        print(json.dumps(child))
        return child
    try:
        import orjson  # noqa: F401
        parser_name = "orjson" if args.json == "auto" else "json (stdlib)"
    except ImportError:
        parser_name = "json (stdlib)"
    print(f"python {sys.version.split()[0]}, JSON parser: {parser_name}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        rows = []
        for total in (int(n) for n in args.spans.split(",")):
            path = folder / f"spans-{total}.otlp.jsonl"
            t0 = time.perf_counter()
            write_input(path, total)
            size = path.stat().st_size / 2**20
            print(f"\n{total:,} spans: {path.name}, {size:,.0f} MiB, written in "
                  f"{time.perf_counter() - t0:.1f} s")
            print(f"  {'stage':<9} {'spans/s':>10} {'seconds':>8} {'runs':>7} {'peak RSS':>9} "
                  f"{'growth':>8}")
            for stage in args.stages.split(","):
                r = max((_in_child(path, stage, args.json) for _ in range(args.repeat)),
                        key=lambda m: m["spans_per_s"])
                growth = r["rss_peak_mib"] - r["rss_before_mib"]
                rows.append((total, stage, r))
                print(f"  {stage:<9} {r['spans_per_s']:>10,.0f} {r['seconds']:>8.2f} "
                      f"{r['runs']:>7,} {r['rss_peak_mib']:>7.0f} M {growth:>6.0f} M")
                if r["spans"] < total or r["problems"]:
                    print(f"  !! read {r['spans']} spans, {r['problems']} problems")
        out: dict[str, Any] = {"parser": parser_name, "rows": [
            {"spans_in": total, **r} for total, stage, r in rows]}
        grade = [(total, r) for total, stage, r in rows if stage == "grade"]
        if grade:
            out["grade_spans_per_s"] = {total: r["spans_per_s"] for total, r in grade}
            out["grade_rss_growth_mib"] = {total: r["rss_peak_mib"] - r["rss_before_mib"]
                                           for total, r in grade}
        if len(grade) >= 2:
            (small, a), (large, b) = grade[0], grade[-1]
            ga = a["rss_peak_mib"] - a["rss_before_mib"]
            gb = b["rss_peak_mib"] - b["rss_before_mib"]
            print(f"\nmemory growth {large:,} vs {small:,} spans: {gb:.0f} MiB vs {ga:.0f} MiB "
                  f"(ratio {gb / ga:.2f} for {large / small:.0f}x the input)")
            out["memory_growth_ratio"] = gb / ga if ga else float("nan")
            out["input_ratio"] = large / small
        if args.keep:
            print(f"inputs kept in {folder}")
        return out


if __name__ == "__main__":
    main()
