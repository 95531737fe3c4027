"""Per-span overhead of ``ToolEvalSpanProcessor`` against the bare OpenTelemetry SDK.

A standalone script, not a pytest test (pytest collects ``test_*.py`` only)::

    python tests/bench/bench_overhead.py [--calls 10,50,500] [--pairs 9] [--spans 12000]
                                         [--runs N] [--root-runs N] [--config PATH] [--no-gc]
                                         [--grading thread|process] [--graders all|one|none]
                                         [--no-violation-marks] [--opcodes]
                                         [--traffic agent|web|mixed] [--split]
                                         [--gc-reset | --gc-carry]

Both sides are built once, in the same process, with the same kind of exporter (one that drops
everything) behind a ``BatchSpanProcessor``:

* bare:     ``TracerProvider`` + ``BatchSpanProcessor(DropExporter())``
* tooleval: ``TracerProvider`` + ``ToolEvalSpanProcessor(config,
  downstream=BatchSpanProcessor(DropExporter()))`` with one grader of every family (``CONFIG``
  below: the families of ``examples/all_families.yaml``, each configured for this workload's
  tools, and the default emission: span events, root attributes, log events and metrics), or
  the grader config given with ``--config``, or ``--graders one`` (only ``count``, the
  tool-call-count grader of ``CONFIG``: one cheap grader) or ``--graders none`` (no grader at
  all: the config ``ToolEvalSpanProcessor()`` loads without ``TOOLEVAL_CONFIG``, where runs are
  collected, copied with their ``tooleval.*`` summary and emitted, and nothing is graded: the
  bookkeeping alone); graded on a thread (``grading.mode: thread``, the
  default) or in a grading process (``--grading process``: before the first measurement, runs
  go through until the grading process is ready, since until then runs are graded on the
  thread, which would be measured as thread mode). Verdicts are tallied from the
  processor's ``stats()`` (an ``on_report`` callback would make the process mode rebuild
  each run in the application's process).

The workload is an agent run instrumented with the plain OTel API in GenAI semconv: a root
``invoke_agent bench`` span; per turn a ``chat`` span, then ``execute_tool X`` spans carrying
``gen_ai.tool.name``, ``gen_ai.tool.call.arguments`` (JSON text) and ``gen_ai.tool.call.result``.
Attribute values are prepared once so the timed section is the SDK (and processor) cost, not
``json.dumps``. Runs of 10, 50 and 500 tool calls (``--calls``) are measured one after the other
in the same process, against the same two providers.

Measurement, per run size: after a warm-up, the two sides alternate in pairs (bare, tooleval,
...); each measurement times enough agent runs for about ``--spans`` spans (or ``--runs`` runs)
with ``time.perf_counter_ns`` (wall clock) and ``time.thread_time_ns`` (CPU time of the
application thread only). ``force_flush`` is called on both providers outside the timed section
before every measurement, so the batch queues start empty and the grading queue is drained. The
cyclic collector starts both measurements of a pair from the same state, at a phase that moves
from pair to pair: a full collection, then ``k`` collections of the middle generation and ``j``
of the young one (``gc_phase``: ``k`` and ``j`` from 0 to 10, a golden-ratio sweep over the 121
phases), so a full collection (the collector's own, every eleventh of its middle generation's,
~12 ms of a heap this size) falls inside a measurement with a chance in proportion to the
collections that side itself causes, and inside both of a pair where both cause as many.
``--gc-carry`` lets the collector's state carry over from one measurement to the next instead
(tried first on 2026-11-29): where a full collection falls then follows the order of the
measurements, not the side that causes it (bare, tooleval / tooleval, bare locks onto the
collector's period: ``--calls 10 --graders none --spans 6000`` put one in every bare
measurement and in half of the tooleval side's:
docs/performance-log.md, "Review of the sixth round"). ``--gc-reset`` forces a full collection
before every measurement and nothing else (the default until 2026-11-29): every measurement
starts from the same state, and a side
that allocates a little more crosses the collector's threshold for a full collection inside
some of its measurements while the other side, just under it, never does, a cliff of 6-9% of
the ratio that moves with ``--spans`` (docs/performance-log.md, "Sixth round"). The full
collections inside the timed sections are counted and printed for each side. The
batch processors' worker threads run during the timed section on both sides alike; the tooleval
side also has its grading thread, which competes for the GIL: that is part of its cost in
wall-clock time but not in application-thread CPU time. The figure is the median of the
``--pairs`` paired ratios (at least 7). Target: 1.10x.

A second measurement times only ``root.end()`` on the application thread: the run root's end
with grading on (the trace marked closed, the root handed to the grading thread, which decides
whether it is a run) against the same root span ending
on the bare provider (median per measurement, then the median of the paired ratios). Target:
2.0x.

``--opcodes`` measures no time: it counts the bytecodes the application thread executes per span
(``sys.settrace``) over a few runs of each size on each side, the SDK's own included. The
application-thread CPU ratio follows the ratio of these counts (docs/performance-log.md, "The
application thread's share"); the count does not move with the machine's load.

``main(argv)`` returns the figures as a dict (``run_all.py`` collects them).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel_tooleval import ToolEvalSpanProcessor, load_config
from otel_tooleval.config import config_from_mapping

TARGET = 1.10
#: Targets per traffic (issue 31), medians of the paired ratios tooleval/bare: ``wall`` time
#: and ``cpu``, the application thread's CPU time; a figure without a key has no target.
TARGETS: dict[str, dict[str, float]] = {
    "agent": {"wall": TARGET},
    "web": {"wall": 1.08, "cpu": 1.05},
    "mixed": {"cpu": 1.10},
}

# Every grader family, each configured against the workload's tools (examples/all_families.yaml
# has the same families in the shapes of their original tools, but for other tool names and an
# agent filter this workload would not pass). Emission as the defaults: span events and root
# attributes on the copy, log events and metrics to the global (here: no-op) providers.
#: The calls of a coding run that does what the graders below want, in order (the Ragas
#: families' reference).
_CODER: list[dict[str, Any]] = [
    {"name": "read_file", "args": {"path": "src/app/main.py"}},
    {"name": "search", "args": {"query": "def main"}},
    {"name": "write_file", "args": {"path": "src/app/main.py", "content": "..."}},
    {"name": "run_tests", "args": {"selector": "tests"}},
    {"name": "run_tests", "args": {"selector": "tests"}},
    {"name": "bash", "args": {"command": "ls -la src/app"}},
]

CONFIG: dict[str, Any] = {
    "graders": [
        {"name": "safe", "type": "tool-calls", "config": {
            "required": [{"name": r"^read_file$", "args": {"path": r"\.py$"}},
                         {"name": r"^run_tests$", "min_count": 2},
                         {"name": r"^(write|edit)_file$", "args": {"path": r"^src/"}}],
            "disallowed": [{"name": r"^delete_"},
                           {"name": r"^bash$", "args": {"command": r"rm\s+-rf"}}],
            "sequence": [{"name": r"^read_file$"}, {"name": r"^write_file$"},
                         {"name": r"^run_tests$"}]}},
        {"name": "flow", "type": "tool_trajectory", "mode": "in_order", "expected": [
            {"tool": "read_file", "args": {"path": "src/app/main.py"}},
            {"tool": "search"}, {"tool": "write_file", "max_duration_ms": 500},
            {"tool": "run_tests", "max_duration_ms": 500}, {"tool": "bash"}]},
        {"name": "selection", "type": "equal_function_sets", "classes": [
            {"name": "read", "members": ["read_file"]},
            {"name": "search", "members": ["brave.web_search", "search"]},
            {"name": "write", "members": ["write_file", "edit_file"]},
            {"name": "test", "members": ["run_tests"]},
            {"name": "shell", "members": ["bash"]}],
         "expect": [{"tool_selection.f1": {">=": 50}}]},
        {"name": "searched", "kind": "tool", "function": "contains",
         "extractor": "tool_arguments",
         "extractor_config": {"tool_name": "search", "occurrence": "all"},
         "ground_truth": "def main"},
        {"name": "order", "type": "tool-call-order", "strict": False,
         "tool_calls_order": ["read_file", "search", "write_file", "run_tests"]},
        {"name": "count", "type": "tool-call-count", "tool_calls_count": {
            "read_file": [">=", 1], "bash": ["<", 10_000], "delete_file": ["==", 0]}},
        {"name": "args", "type": "tool-call-args", "subset": True, "tool_calls": [
            {"name": "read_file", "args": {"path": "src/app/main.py"}},
            {"name": "bash", "args": {"command": "ls -la src/app"}}]},
        {"name": "output", "type": "tool-call-output", "tool_outputs": [
            {"name": "bash", "output": "main.py\n__init__.py\n"}]},
        # The peer graders' families (issue 17), in the same run's terms (a run of the
        # coding shape that tests/test_grading_process.py records passes every one).
        {"name": "agentevals-flow", "type": "trajectory_match",
         "trajectory_match_mode": "superset", "tool_args_match_mode": "exact",
         "tool_args_match_overrides": {"search": "ignore"},
         "reference_tool_calls": [{"name": "read_file", "args": {"path": "src/app/main.py"}},
                                  {"name": "search", "args": {}}]},
        {"name": "adk-trajectory", "type": "tool_trajectory_avg_score",
         "criteria": {"tool_trajectory_avg_score": {"threshold": 0.5,
                                                    "match_type": "IN_ORDER"}},
         "expected_tool_use": [{"name": "read_file", "args": {"path": "src/app/main.py"}},
                               {"name": "run_tests", "args": {"selector": "tests"}}]},
        {"name": "deepeval-tools", "type": "tool_correctness",
         "evaluation_params": ["INPUT_PARAMETERS"], "should_consider_ordering": True,
         "expected_tools": [{"name": "read_file", "input_parameters": {"path": "src/app/main.py"}},
                            {"name": "run_tests", "input_parameters": {"selector": "tests"}}]},
        {"name": "ragas-accuracy", "type": "tool_call_accuracy", "reference_tool_calls": _CODER},
        {"name": "ragas-f1", "type": "tool_call_f1", "threshold": 0.5,
         "reference_tool_calls": _CODER},
    ],
}


def graders_config(which: str) -> Any:
    """``CONFIG`` (``all``), its tool-call-count grader alone (``one``), or the config with no
    grader (``none``; ``load_config`` refuses an empty document, the processor's own default
    without ``TOOLEVAL_CONFIG`` is this one)."""
    if which == "none":
        return config_from_mapping({}, allow_no_graders=True)
    if which == "one":
        return {"graders": [g for g in CONFIG["graders"] if g["name"] == "count"]}
    return CONFIG


class DropExporter(SpanExporter):
    """Accepts every batch and keeps nothing."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


# -- workload ---------------------------------------------------------------------------------

_TOOLS: tuple[tuple[str, dict[str, Any], Any], ...] = (
    ("read_file", {"path": "src/app/main.py"}, {"content": "def main():\n    return 42\n"}),
    ("search", {"query": "def main", "glob": "**/*.py"}, ["src/app/main.py:1"]),
    ("write_file", {"path": "src/app/main.py", "content": "def main():\n    return 43\n"},
     {"ok": True}),
    ("run_tests", {"selector": "tests/test_main.py"}, {"passed": 12, "failed": 0}),
    ("bash", {"command": "ls -la src/app"}, "main.py\n__init__.py\n"),
)


#: ``--traffic mixed``: web requests per agent run.
WEB_PER_AGENT = 20


@dataclass(frozen=True)
class Workload:
    """One unit of traffic: an agent run of ``calls`` tool calls (``agent``), one four-span web
    request (``web``), or ``WEB_PER_AGENT`` web requests and one agent run (``mixed``)."""

    calls: int
    per_turn: int
    traffic: str = "agent"
    # (name, span name, arguments JSON, result JSON) for every call of a run, in order
    plan: tuple[tuple[str, str, str, str], ...] = field(init=False)

    def __post_init__(self) -> None:
        plan = []
        for i in range(self.calls):
            name, args, result = _TOOLS[i % len(_TOOLS)]
            plan.append((name, f"execute_tool {name}", json.dumps(args), json.dumps(result)))
        object.__setattr__(self, "plan", tuple(plan))

    @property
    def turns(self) -> int:
        # every turn with tool calls, plus the final answer turn
        return -(-self.calls // self.per_turn) + 1

    @property
    def agent_spans(self) -> int:
        return 1 + self.turns + self.calls

    @property
    def agent_runs(self) -> int:
        """Agent runs per unit."""
        return 0 if self.traffic == "web" else 1

    @property
    def spans_per_run(self) -> int:
        """Spans per unit of traffic."""
        if self.traffic == "web":
            return WEB_SPANS
        if self.traffic == "mixed":
            return WEB_PER_AGENT * WEB_SPANS + self.agent_spans
        return self.agent_spans

    @property
    def root_spans(self) -> int:
        """Spans of one ``run_timing_root_end`` (an agent run; a web request with ``web``)."""
        return WEB_SPANS if self.traffic == "web" else self.agent_spans


def _turns(workload: Workload) -> Iterator[tuple[tuple[str, str, str, str], ...]]:
    plan = workload.plan
    for start in range(0, len(plan), workload.per_turn):
        yield plan[start:start + workload.per_turn]
    yield ()  # the final answer


WEB_SPANS = 4


def run_web(tracer: trace.Tracer) -> None:
    """One web request of a service that is no agent: ``GET /items`` > ``SELECT items``,
    ``cache get``, ``render``, with the attributes the HTTP, database and cache
    instrumentations set."""
    with tracer.start_as_current_span(
        "GET /items", kind=trace.SpanKind.SERVER,
        attributes={"http.request.method": "GET", "url.path": "/items",
                    "http.route": "/items", "server.address": "shop.local"},
    ) as root:
        with tracer.start_as_current_span(
            "SELECT items", kind=trace.SpanKind.CLIENT,
            attributes={"db.system.name": "postgresql", "db.operation.name": "SELECT",
                        "db.collection.name": "items",
                        "db.query.text": "SELECT id, name FROM items LIMIT 20"},
        ):
            pass
        with tracer.start_as_current_span(
            "cache get", kind=trace.SpanKind.CLIENT,
            attributes={"db.system.name": "redis", "db.operation.name": "GET"},
        ):
            pass
        with tracer.start_as_current_span("render", attributes={"template": "items.html"}):
            pass
        root.set_attribute("http.response.status_code", 200)


def run_traffic(tracer: trace.Tracer, workload: Workload) -> None:
    """One unit of ``workload``'s traffic (``Workload``)."""
    if workload.traffic == "agent":
        run_agent(tracer, workload)
        return
    if workload.traffic == "web":
        run_web(tracer)
        return
    for _ in range(WEB_PER_AGENT):
        run_web(tracer)
    run_agent(tracer, workload)


def run_agent(tracer: trace.Tracer, workload: Workload) -> None:
    """One agent run, instrumented as a GenAI-semconv instrumentation would."""
    with tracer.start_as_current_span(
        "invoke_agent bench",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench"},
    ):
        _run_body(tracer, workload)


def _run_body(tracer: trace.Tracer, workload: Workload) -> None:
    for i, calls in enumerate(_turns(workload)):
        with tracer.start_as_current_span(
            "chat bench-model",
            attributes={"gen_ai.operation.name": "chat",
                        "gen_ai.request.model": "bench-model"},
        ):
            pass
        for j, (name, span_name, args, result) in enumerate(calls):
            with tracer.start_as_current_span(
                span_name,
                attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                            "gen_ai.tool.call.id": f"call_{i}_{j}",
                            "gen_ai.tool.call.arguments": args},
            ) as span:
                span.set_attribute("gen_ai.tool.call.result", result)


def run_agent_timing_root_end(tracer: trace.Tracer, workload: Workload) -> int:
    """One agent run whose root is ended by hand; returns the ns ``root.end()`` took."""
    root = tracer.start_span(
        "invoke_agent bench",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench"},
    )
    with trace.use_span(root, end_on_exit=False):
        _run_body(tracer, workload)
    t0 = time.perf_counter_ns()
    root.end()
    return time.perf_counter_ns() - t0


def run_timing_root_end(tracer: trace.Tracer, workload: Workload) -> int:
    """``run_agent_timing_root_end``; with ``web`` traffic, a web request's root instead."""
    if workload.traffic != "web":
        return run_agent_timing_root_end(tracer, workload)
    root = tracer.start_span("GET /items", kind=trace.SpanKind.SERVER,
                             attributes={"http.request.method": "GET", "url.path": "/items"})
    with trace.use_span(root, end_on_exit=False):
        with tracer.start_as_current_span("SELECT items",
                                          attributes={"db.system.name": "postgresql"}):
            pass
        with tracer.start_as_current_span("cache get", attributes={"db.system.name": "redis"}):
            pass
        with tracer.start_as_current_span("render"):
            pass
    t0 = time.perf_counter_ns()
    root.end()
    return time.perf_counter_ns() - t0


# -- sides ------------------------------------------------------------------------------------

@dataclass
class Side:
    name: str
    provider: TracerProvider
    tracer: trace.Tracer
    exporter: DropExporter
    processor: ToolEvalSpanProcessor | None = None
    reports: ReportTally | None = None

    def flush(self) -> None:
        if not self.provider.force_flush(60_000):
            raise RuntimeError(f"{self.name}: force_flush timed out")


class ReportTally:
    """Verdicts counted by the processor (``stats()``): no report is kept or built."""

    def __init__(self) -> None:
        self.processor: ToolEvalSpanProcessor | None = None

    @property
    def failed(self) -> int:
        return self.processor.stats().get("runs.failed", 0) if self.processor else 0

    @property
    def passed(self) -> int:
        graded = self.processor.stats().get("runs", 0) if self.processor else 0
        return graded - self.failed


def build_sides(config: Any, grading: str | None = None, marks: bool | None = None
                ) -> tuple[Side, Side, ReportTally]:
    reports = ReportTally()

    bare_exporter = DropExporter()
    bare = TracerProvider()
    bare.add_span_processor(BatchSpanProcessor(bare_exporter))

    tool_exporter = DropExporter()
    loaded = load_config(config)
    if grading is not None and loaded.document is not None:
        loaded = config_from_mapping({**loaded.document, "grading": {"mode": grading}},
                                     allow_no_graders=True)
    if marks is not None and loaded.document is not None:
        emit = {**(loaded.document.get("emit") or {}), "violation_marks": marks}
        loaded = config_from_mapping({**loaded.document, "emit": emit}, allow_no_graders=True)
    processor = ToolEvalSpanProcessor(loaded, downstream=BatchSpanProcessor(tool_exporter))
    reports.processor = processor
    tooleval = TracerProvider()
    tooleval.add_span_processor(processor)

    return (
        Side("bare", bare, bare.get_tracer("bench"), bare_exporter),
        Side("tooleval", tooleval, tooleval.get_tracer("bench"), tool_exporter, processor),
        reports,
    )


class FullCollections:
    """Counts the cyclic collector's full (generation 2) collections that start on any thread
    while ``side`` names a side (inside a timed section), by side."""

    def __init__(self) -> None:
        self.side: str | None = None
        self.counts = {"bare": 0, "tooleval": 0}

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info.get("generation") == 2 and self.side is not None:
            self.counts[self.side] += 1


FULL_COLLECTIONS = FullCollections()


@dataclass
class Measurement:
    wall_ns: int
    cpu_ns: int      # application thread only
    proc_ns: int     # every thread of the process (batch workers, grading thread)
    spans: int
    web_cpu_ns: int = 0     # --split (mixed traffic): the application thread's CPU in the
    agent_cpu_ns: int = 0   # web requests, and in the agent runs

    @property
    def wall_per_span_us(self) -> float:
        return self.wall_ns / self.spans / 1000

    @property
    def cpu_per_span_us(self) -> float:
        return self.cpu_ns / self.spans / 1000

    @property
    def proc_per_span_us(self) -> float:
        return self.proc_ns / self.spans / 1000


def gc_phase(pair: int) -> tuple[int, int]:
    """The collector's phase both measurements of ``pair`` start from: ``(k, j)``, collections
    of the middle and young generations after a full one (each 0-10 with the default
    thresholds), a golden-ratio sweep of the phases, so pairs spread over them evenly."""
    _, middle, oldest = gc.get_threshold()
    p = int((pair * 0.6180339887498949) % 1.0 * (oldest + 1) * (middle + 1))
    return p // (middle + 1), p % (middle + 1)


def set_gc_phase(phase: tuple[int, int]) -> None:
    """A full collection, then ``k`` of the middle generation and ``j`` of the young one:
    ``gc.get_count()`` is then ``(0, j, k)``."""
    k, j = phase
    gc.collect()
    for _ in range(k):
        gc.collect(1)
    for _ in range(j):
        gc.collect(0)


def measure(side: Side, workload: Workload, runs: int, both: Sequence[Side],
            split: bool = False, gc_reset: bool = False,
            phase: tuple[int, int] | None = None) -> Measurement:
    """One timed measurement. The collector: a full collection first (``gc_reset``), or set
    to ``phase`` (``set_gc_phase``), or (neither) as the previous measurement left it."""
    for s in both:  # outside the timed section: empty batch queues, drained grading queue
        s.flush()
    tracer = side.tracer
    if gc_reset:
        gc.collect()
    elif phase is not None:
        set_gc_phase(phase)
    FULL_COLLECTIONS.side = side.name
    gc.callbacks.append(FULL_COLLECTIONS)   # counting only inside the timed section
    try:
        return _measure(tracer, workload, runs, split)
    finally:
        gc.callbacks.remove(FULL_COLLECTIONS)
        FULL_COLLECTIONS.side = None


def _measure(tracer: trace.Tracer, workload: Workload, runs: int, split: bool) -> Measurement:
    if split and workload.traffic == "mixed":
        return _measure_split(tracer, workload, runs)
    p0 = time.process_time_ns()
    c0 = time.thread_time_ns()
    t0 = time.perf_counter_ns()
    for _ in range(runs):
        run_traffic(tracer, workload)
    t1 = time.perf_counter_ns()
    c1 = time.thread_time_ns()
    p1 = time.process_time_ns()
    return Measurement(t1 - t0, c1 - c0, p1 - p0, runs * workload.spans_per_run)


def _measure_split(tracer: trace.Tracer, workload: Workload, runs: int) -> Measurement:
    """``measure`` for mixed traffic with the web requests and the agent runs timed apart on
    the application thread (two more clock reads per unit, on both sides)."""
    clock = time.thread_time_ns
    web = agent = 0
    p0, c0, t0 = time.process_time_ns(), clock(), time.perf_counter_ns()
    for _ in range(runs):
        start = clock()
        for _ in range(WEB_PER_AGENT):
            run_web(tracer)
        middle = clock()
        run_agent(tracer, workload)
        agent += clock() - middle
        web += middle - start
    t1, c1, p1 = time.perf_counter_ns(), clock(), time.process_time_ns()
    return Measurement(t1 - t0, c1 - c0, p1 - p0, runs * workload.spans_per_run, web, agent)


def measure_root_end(side: Side, workload: Workload, runs: int,
                     both: Sequence[Side]) -> list[int]:
    for s in both:
        s.flush()
    tracer = side.tracer
    gc.collect()
    return [run_timing_root_end(tracer, workload) for _ in range(runs)]


def wait_for_grading_process(side: Side, workload: Workload, timeout_s: float = 30.0
                             ) -> float | None:
    """Process mode: agent runs until the grading process is ready (it starts on the first
    run, ~0.5 s; runs before are graded on the thread); the seconds it took, None if never."""
    offload = side.processor._offload if side.processor else None
    if offload is None:
        return None
    started = time.monotonic()
    while (not offload.ready and not offload.disabled
           and time.monotonic() - started < timeout_s):
        run_agent(side.tracer, workload)
        time.sleep(0.05)
    side.flush()
    return time.monotonic() - started if offload.ready else None


def count_opcodes(side: Side, workload: Workload, runs: int = 3) -> float:
    """Bytecodes the application thread executes per span over ``runs`` agent runs (after
    one run not counted), whatever code runs them: the SDK's and the processor's."""
    run_traffic(side.tracer, workload)
    side.flush()

    def agent_runs() -> None:
        for _ in range(runs):
            run_traffic(side.tracer, workload)

    counted = count_bytecodes(agent_runs)
    side.flush()
    return counted / (runs * workload.spans_per_run)


def count_bytecodes(work: Callable[[], Any]) -> int:
    """The bytecodes this thread executes while ``work()`` runs (a tracer per opcode)."""
    count = 0

    def trace(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        frame.f_trace_opcodes = True
        if event == "opcode":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        work()
    finally:
        sys.settrace(None)
    return count


def opcodes_table(sizes: Sequence[int], per_turn: int, both: tuple[Side, Side],
                  traffic: str = "agent") -> list[dict[str, Any]]:
    bare, tooleval = both
    print(f"{'calls/run':>9}  {'bare':>7}  {'tooleval':>8}  {'extra':>6}  {'ratio':>6}  "
          f"(bytecodes per span, application thread)")
    figures = []
    for n in sizes:
        workload = Workload(n, per_turn, traffic)
        b, t = count_opcodes(bare, workload), count_opcodes(tooleval, workload)
        print(f"{n:>9}  {b:>7.0f}  {t:>8.0f}  {t - b:>6.0f}  {t / b:>5.3f}x")
        figures.append({"calls": n, "bare_opcodes": b, "tooleval_opcodes": t,
                        "opcode_ratio": t / b})
    return figures


# -- main -------------------------------------------------------------------------------------

def _describe(workload: Workload) -> str:
    agent = (f"{workload.calls} tool calls/run, {workload.turns} chat turns, "
             f"{workload.agent_spans} spans/run")
    if workload.traffic == "web":
        return f"plain traffic: web requests of {WEB_SPANS} spans, no agent"
    if workload.traffic == "mixed":
        return f"mixed traffic: {WEB_PER_AGENT} web requests then one agent run ({agent})"
    return agent


TARGET_ROOT_END = 2.0
med = statistics.median


def _target(targets: dict[str, float], key: str) -> str:
    return f"<= {targets[key]:.2f}x" if key in targets else "none"


def _per_run(value: int | None, spans: int, workload: Workload, minimum: int) -> int:
    """Runs per measurement: as given, else enough runs for about ``spans`` spans."""
    if value is not None:
        return value
    return max(minimum, round(spans / workload.spans_per_run))


GC_MODES = {
    "phase": "each pair's two measurements started from the same phase of the collector",
    "carry": "the collector carried over from one measurement to the next",
    "reset": "forced before every measurement",
}


def _gc_mode(opts: argparse.Namespace) -> str:
    return "reset" if opts.gc_reset else "carry" if opts.gc_carry else "phase"


def bench_size(workload: Workload, both: tuple[Side, Side], opts: argparse.Namespace
               ) -> dict[str, Any]:
    """The paired measurements of one run size; prints its table, returns its figures."""
    bare, tooleval = both
    runs = _per_run(opts.runs, opts.spans, workload, 2)
    root_runs = _per_run(opts.root_runs, opts.spans // 2, workload, 5)
    warmup = _per_run(opts.warmup, opts.spans // 2, workload, 3)
    graded_before = tooleval.processor.stats().get("runs", 0) if tooleval.processor else 0
    exported_before = bare.exporter.spans, tooleval.exporter.spans
    started = time.perf_counter()

    # One full collection before the warm-up; then each pair's measurements start from the
    # same phase of the collector (gc_phase), or as the previous one left it (--gc-carry), or
    # from a full collection (--gc-reset).
    gc.collect()
    for side in both:  # warm-up: first-call costs, worker threads started, caches filled
        for _ in range(warmup):
            run_traffic(side.tracer, workload)
            run_timing_root_end(side.tracer, workload)
    for side in both:
        side.flush()
    full_before = dict(FULL_COLLECTIONS.counts)
    if opts.no_gc:
        gc.disable()

    print(f"workload: {_describe(workload)}, {workload.spans_per_run} spans per unit; "
          f"{runs} units per measurement; "
          f"python {sys.version.split()[0]}")
    print()
    header = (f"{'pair':>4}  {'bare us/span':>12}  {'tooleval us/span':>16}  {'ratio':>6}  "
              f"{'bare cpu':>9}  {'tooleval cpu':>12}  {'cpu ratio':>9}  {'proc ratio':>10}")
    print(header)
    print("-" * len(header))
    ratios, cpu_ratios, proc_ratios = [], [], []
    split_ratios: list[tuple[float, float]] = []
    bare_us, tool_us, bare_cpu, tool_cpu = [], [], [], []
    for pair in range(1, opts.pairs + 1):
        # Alternate which side goes first, so a drift in the machine's load favours neither.
        phase = gc_phase(pair) if _gc_mode(opts) == "phase" else None
        if pair % 2:
            b = measure(bare, workload, runs, both, opts.split, opts.gc_reset, phase)
            t = measure(tooleval, workload, runs, both, opts.split, opts.gc_reset, phase)
        else:
            t = measure(tooleval, workload, runs, both, opts.split, opts.gc_reset, phase)
            b = measure(bare, workload, runs, both, opts.split, opts.gc_reset, phase)
        if b.web_cpu_ns and b.agent_cpu_ns:
            split_ratios.append((t.web_cpu_ns / b.web_cpu_ns, t.agent_cpu_ns / b.agent_cpu_ns))
        ratio = t.wall_ns / b.wall_ns
        cpu_ratio = t.cpu_ns / b.cpu_ns
        proc_ratio = t.proc_ns / b.proc_ns
        ratios.append(ratio)
        cpu_ratios.append(cpu_ratio)
        proc_ratios.append(proc_ratio)
        bare_us.append(b.wall_per_span_us)
        tool_us.append(t.wall_per_span_us)
        bare_cpu.append(b.cpu_per_span_us)
        tool_cpu.append(t.cpu_per_span_us)
        print(f"{pair:>4}  {b.wall_per_span_us:>12.2f}  {t.wall_per_span_us:>16.2f}  "
              f"{ratio:>5.2f}x  {b.cpu_per_span_us:>9.2f}  {t.cpu_per_span_us:>12.2f}  "
              f"{cpu_ratio:>8.2f}x  {proc_ratio:>9.2f}x")
    print("-" * len(header))
    print(f"{'med':>4}  {med(bare_us):>12.2f}  {med(tool_us):>16.2f}  {med(ratios):>5.2f}x  "
          f"{med(bare_cpu):>9.2f}  {med(tool_cpu):>12.2f}  {med(cpu_ratios):>8.2f}x  "
          f"{med(proc_ratios):>9.2f}x")
    print(f"us/span: wall clock; cpu: application-thread CPU; proc ratio: CPU of all threads "
          f"(grading included).\nextra per span: {med(tool_us) - med(bare_us):.1f} us wall, "
          f"{med(tool_cpu) - med(bare_cpu):.1f} us application-thread CPU")
    full = {name: FULL_COLLECTIONS.counts[name] - full_before[name] for name in full_before}
    print(f"full collections inside the timed sections: bare {full['bare']}, tooleval "
          f"{full['tooleval']} ({GC_MODES[_gc_mode(opts)]})")

    # root.end() on the application thread: grading on vs. the same root on the bare SDK
    root_ratios, root_bare, root_tool = [], [], []
    for pair in range(opts.pairs):
        order = both if pair % 2 == 0 else (tooleval, bare)
        got = {side.name: med(measure_root_end(side, workload, root_runs, both))
               for side in order}
        root_bare.append(got["bare"])
        root_tool.append(got["tooleval"])
        root_ratios.append(got["tooleval"] / got["bare"])
    if opts.no_gc:
        gc.enable()
    for side in both:
        side.flush()

    stats = tooleval.processor.stats() if tooleval.processor else {}
    drops = {k: v for k, v in stats.items() if k.startswith("dropped") and v}
    expected = ((warmup + opts.pairs * runs) * workload.agent_runs
                + (warmup + opts.pairs * root_runs) * (workload.traffic != "web"))
    graded = stats.get("runs", 0) - graded_before
    reports = tooleval.reports or ReportTally()
    print()
    exported = (bare.exporter.spans - exported_before[0],
                tooleval.exporter.spans - exported_before[1])
    sent = ((warmup + opts.pairs * runs) * workload.spans_per_run
            + (warmup + opts.pairs * root_runs) * workload.root_spans)
    print(f"sanity: {graded}/{expected} runs graded, {reports.failed} failed so far, "
          f"open traces {stats.get('open_traces', 0)}, drops {drops or 'none'}; "
          f"exported bare {exported[0]}, tooleval {exported[1]} of {sent} spans; "
          f"{time.perf_counter() - started:.1f}s")
    if exported[0] != sent or exported[1] != sent:
        print("  !! a BatchSpanProcessor dropped spans (its queue was full: its worker thread "
              "did not get the GIL often enough); that side did less work than it was given")
    print(f"root end() per run (median of medians): bare {med(root_bare) / 1000:.1f} us, "
          f"tooleval {med(root_tool) / 1000:.1f} us; "
          f"root end() ratio (median of {opts.pairs} pairs): {med(root_ratios):.2f}x "
          f"(target <= {TARGET_ROOT_END:.1f}x)")
    targets = TARGETS[workload.traffic]
    print(f"overhead ratio (median of {opts.pairs} pairs, {_describe(workload)}): "
          f"wall {med(ratios):.2f}x (target {_target(targets, 'wall')}), app-thread cpu "
          f"{med(cpu_ratios):.2f}x (target {_target(targets, 'cpu')})")
    if split_ratios:
        print(f"application-thread cpu, timed apart (median of {len(split_ratios)} pairs): web "
              f"requests {med([w for w, _ in split_ratios]):.2f}x, agent runs "
              f"{med([a for _, a in split_ratios]):.2f}x")
    return {
        "traffic": workload.traffic, "targets": TARGETS[workload.traffic],
        "calls": workload.calls, "spans_per_run": workload.spans_per_run,
        "runs_per_measurement": runs, "pairs": opts.pairs,
        "ratio": med(ratios), "ratios": ratios, "cpu_ratio": med(cpu_ratios),
        "proc_ratio": med(proc_ratios),
        "bare_us_per_span": med(bare_us), "tooleval_us_per_span": med(tool_us),
        "bare_cpu_us_per_span": med(bare_cpu), "tooleval_cpu_us_per_span": med(tool_cpu),
        "root_end_ratio": med(root_ratios), "root_end_bare_us": med(root_bare) / 1000,
        "root_end_tooleval_us": med(root_tool) / 1000,
        "runs_graded": graded, "runs_expected": expected, "drops": drops,
        "full_collections": full, "gc_reset": opts.gc_reset, "gc": _gc_mode(opts),
        "spans_sent": sent, "exported_bare": exported[0], "exported_tooleval": exported[1],
        **({"split_cpu_ratios": {"web": med([w for w, _ in split_ratios]),
                                 "agent": med([a for _, a in split_ratios])}}
           if split_ratios else {}),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", default="10,50,500",
                        help="tool calls per run, comma-separated sizes (10,50,500)")
    parser.add_argument("--per-turn", type=int, default=5, help="tool calls per turn (5)")
    parser.add_argument("--pairs", type=int, default=9, help="bare/tooleval pairs (9, >= 7)")
    parser.add_argument("--spans", type=int, default=12_000,
                        help="spans per measurement, rounded to whole runs (12000)")
    parser.add_argument("--runs", type=int, default=None,
                        help="agent runs per measurement, for every size (default: --spans)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="warm-up runs per side per size (default: --spans / 2)")
    parser.add_argument("--root-runs", type=int, default=None,
                        help="runs per side per pair timing root.end() only "
                             "(default: --spans / 2)")
    parser.add_argument("--config", default=None,
                        help="grader config (path or YAML) instead of the built-in one with "
                             "every family")
    parser.add_argument("--graders", choices=("all", "one", "none"), default="all",
                        help="without --config: every family (all, the default), only the "
                             "tool-call-count grader (one), or no grader (none)")
    parser.add_argument("--traffic", choices=tuple(TARGETS), default="agent",
                        help="agent runs (agent, the default), plain web requests of four "
                             "spans and no agent (web), or one agent run per "
                             f"{WEB_PER_AGENT} web requests (mixed)")
    parser.add_argument("--no-gc", action="store_true",
                        help="disable the cyclic GC in the timed sections")
    gc_mode = parser.add_mutually_exclusive_group()
    gc_mode.add_argument("--gc-reset", action="store_true",
                         help="a full collection before every measurement (the default until "
                              "2026-11-29; see the module's docstring)")
    gc_mode.add_argument("--gc-carry", action="store_true",
                         help="the collector's state carried over from one measurement to the "
                              "next (tried first on 2026-11-29; see the module's docstring)")
    parser.add_argument("--grading", choices=("thread", "process"), default=None,
                        help="grading.mode of the tooleval side (default: the config's)")
    parser.add_argument("--no-violation-marks", action="store_true",
                        help="emit.violation_marks: false (tool spans forwarded as they end, "
                             "not held for their run's verdict)")
    parser.add_argument("--split", action="store_true",
                        help="mixed traffic: also time the web requests and the agent runs "
                             "apart on the application thread (two more clock reads per unit)")
    parser.add_argument("--opcodes", action="store_true",
                        help="count the bytecodes the application thread executes per span on "
                             "each side instead of timing")
    opts = parser.parse_args(argv)
    try:
        sizes = [int(n) for n in str(opts.calls).split(",")]
    except ValueError:
        parser.error("--calls takes comma-separated integers")
    if opts.pairs < 7:
        parser.error("--pairs must be at least 7")
    if min(sizes) < 1 or opts.per_turn < 1 or (opts.runs is not None and opts.runs < 1):
        parser.error("--calls, --per-turn and --runs must be positive")

    config = opts.config if opts.config is not None else graders_config(opts.graders)
    bare, tooleval, reports = build_sides(config, opts.grading,
                                          False if opts.no_violation_marks else None)
    tooleval.reports = reports
    both = (bare, tooleval)
    loaded = tooleval.processor.config if tooleval.processor else None
    graders = loaded.graders if loaded else ()
    mode = loaded.grading.mode if loaded else "thread"
    print(f"graders: {', '.join(f'{g.name} ({g.type})' for g in graders) or 'none'}; "
          f"grading: {mode}")
    offload = tooleval.processor._offload if tooleval.processor else None
    if offload is not None:
        ready_s = wait_for_grading_process(tooleval, Workload(min(sizes), opts.per_turn))
        print(f"grading process: ready after {ready_s:.1f} s" if ready_s is not None else
              f"grading process: NOT ready, runs graded on the thread ({offload.disabled})")
    if opts.opcodes:
        counted = opcodes_table(sizes, opts.per_turn, both, opts.traffic)
        for side in both:
            side.provider.shutdown()
        return {"graders": [g.type for g in graders], "grading": mode, "opcodes": counted}
    started = time.perf_counter()
    results = []
    for n in sizes:
        print(f"\n=== runs of {n} tool calls ===")
        results.append(bench_size(Workload(n, opts.per_turn, opts.traffic), both, opts))
    # process mode: the grading process still answering, and started once (it never exited)
    process = ({"ready": offload.ready, "starts": offload.starts}
               if offload is not None else None)
    for side in both:
        side.provider.shutdown()

    print(f"\nsummary ({opts.pairs} pairs per size, medians; {opts.traffic} traffic, targets: {TARGETS[opts.traffic]}, "
          f"root end() <= {TARGET_ROOT_END:.1f}x)")
    header = (f"{'calls/run':>9}  {'bare us/span':>12}  {'tooleval us/span':>16}  "
              f"{'ratio':>6}  {'app cpu':>7}  {'root end bare/tooleval us':>25}  {'root':>6}")
    print(header)
    print("-" * len(header))
    for r in results:
        root = f"{r['root_end_bare_us']:.1f} / {r['root_end_tooleval_us']:.1f}"
        print(f"{r['calls']:>9}  {r['bare_us_per_span']:>12.2f}  {r['tooleval_us_per_span']:>16.2f}"
              f"  {r['ratio']:>5.2f}x  {r['cpu_ratio']:>6.2f}x  {root:>25}  "
              f"{r['root_end_ratio']:>5.2f}x")
    print(f"verdicts: {reports.passed} runs passed, {reports.failed} failed; "
          f"{time.perf_counter() - started:.0f} s")
    return {"target": TARGET, "targets": TARGETS[opts.traffic], "traffic": opts.traffic,
            "root_end_target": TARGET_ROOT_END, "grading": mode,
            "graders": [g.type for g in graders], "sizes": results,
            "runs_passed": reports.passed, "runs_failed": reports.failed,
            "grading_process": process}


if __name__ == "__main__":
    main()
