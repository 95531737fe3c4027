"""Shared pieces of the robustness suite: runs whose calls say whose they are, and checks.

Every run is identified by a key ``(t, i)`` (thread or task ``t``, run ``i``). Its agent name,
tool names and tool arguments all encode the key, so a call that landed in another run's verdict,
a verdict given twice, or a root exported twice or never is detected, not averaged away.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_tooleval import AgentRun, GradeResult, RunReport, grader

AGENT = {"gen_ai.operation.name": "invoke_agent"}
BAD_EVERY = 7          # every 7th run also calls the forbidden tool ``bad``

# Two graders whose verdict depends on the run's own calls: every run passes ``uses-tool``;
# ``no-bad`` fails exactly the runs that called ``bad``.
CONFIG: dict[str, Any] = {
    "graders": [
        {"name": "uses-tool", "type": "tool-calls", "config": {"required": ["^tool_"]}},
        {"name": "no-bad", "type": "tool-calls", "config": {"disallowed": ["^bad$"]}},
    ],
}
GRADERS = ["uses-tool", "no-bad"]

Key = tuple[int, int]


def agent_name(key: Key) -> str:
    return f"a{key[0]}-{key[1]}"


def key_of(agent: str) -> Key:
    t, i = agent.removeprefix("a").split("-")
    return int(t), int(i)


def expected_calls(key: Key) -> list[tuple[str, dict[str, int]]]:
    """The calls of run ``key``: one to three ``tool_<t>_<i>_<k>``, and ``bad`` every 7th run."""
    t, i = key
    calls = [(f"tool_{t}_{i}_{k}", {"t": t, "i": i, "k": k}) for k in range(1 + (t + i) % 3)]
    if i % BAD_EVERY == 0:
        calls.append(("bad", {"t": t, "i": i, "k": len(calls)}))
    return calls


def expected_passed(key: Key) -> bool:
    return key[1] % BAD_EVERY != 0


def spans_per_run(key: Key) -> int:
    return 1 + len(expected_calls(key))


def _tool_attributes(name: str, args: dict[str, int]) -> dict[str, Any]:
    return {"gen_ai.tool.name": name, "gen_ai.tool.call.arguments": json.dumps(args),
            "gen_ai.tool.call.result": json.dumps(f"ok {args['t']}-{args['i']}")}


def run_agent(tracer: trace.Tracer, key: Key) -> None:
    """One agent run on the current thread: the root, then its calls one after the other."""
    name = agent_name(key)
    with tracer.start_as_current_span(f"invoke_agent {name}",
                                      attributes={**AGENT, "gen_ai.agent.name": name}):
        for tool, args in expected_calls(key):
            with tracer.start_as_current_span(f"execute_tool {tool}",
                                              attributes=_tool_attributes(tool, args)):
                pass


def run_agents(tracer: trace.Tracer, keys: Iterable[Key]) -> None:
    for key in keys:
        run_agent(tracer, key)


async def run_agent_async(tracer: trace.Tracer, key: Key) -> None:
    """The same run as a coroutine: it yields to the loop before, inside and after every call,
    so a thousand of them interleave span by span; the parent comes from the task's context."""
    name = agent_name(key)
    with tracer.start_as_current_span(f"invoke_agent {name}",
                                      attributes={**AGENT, "gen_ai.agent.name": name}):
        for tool, args in expected_calls(key):
            await asyncio.sleep(0)
            with tracer.start_as_current_span(f"execute_tool {tool}",
                                              attributes=_tool_attributes(tool, args)):
                await asyncio.sleep(0)
        await asyncio.sleep(0)


def run_threads(count: int, target: Callable[[int], None], *, deadline: float = 120.0) -> None:
    """Run ``target(n)`` on ``count`` threads released together; re-raise the first failure."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def body(n: int) -> None:
        try:
            barrier.wait(30)
            target(n)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(n,), daemon=True) for n in range(count)]
    for thread in threads:
        thread.start()
    until = time.monotonic() + deadline
    for thread in threads:
        thread.join(max(until - time.monotonic(), 0.0))
    assert not any(t.is_alive() for t in threads), "application threads still running"
    if errors:
        raise errors[0]


# -- checks ----------------------------------------------------------------------------------

def roots_of(spans: Iterable[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith("invoke_agent ")]


def assert_each_span_once(spans: Sequence[ReadableSpan], expected: int) -> None:
    counts = Counter(s.context.span_id for s in spans)
    twice = [sid for sid, n in counts.items() if n > 1]
    assert not twice, f"{len(twice)} span(s) exported more than once"
    assert len(counts) == expected, f"{len(counts)} distinct spans exported, expected {expected}"


def check_calls(report: RunReport) -> Key:
    """The report's calls are exactly its own run's, all completed; returns the run's key."""
    assert report.run.agent is not None
    key = key_of(report.run.agent)
    want = expected_calls(key)
    got = [(c.name, c.arguments, c.pending) for c in report.run.calls]
    assert got == [(n, a, False) for n, a in want], f"run {key} graded with foreign calls"
    return key


def check_report(report: RunReport) -> Key:
    """``check_calls``, and the verdict of ``CONFIG`` follows from those calls."""
    key = check_calls(report)
    assert [r.name for r in report.results] == GRADERS
    assert report.passed is expected_passed(key)
    return key


def check_runs(keys: Iterable[Key], reports: Sequence[RunReport],
               spans: Sequence[ReadableSpan]) -> None:
    """Every run graded exactly once with its own calls; every span exported exactly once; each
    run's root exported once, as the copy with that run's verdict."""
    keys = list(keys)
    graded = Counter(check_report(r) for r in reports)
    assert sorted(graded) == sorted(keys), (
        f"{len(graded)} distinct runs graded of {len(keys)} (reports: {len(reports)})")
    assert set(graded.values()) == {1}, "a run was graded more than once"

    assert_each_span_once(spans, sum(spans_per_run(k) for k in keys))
    by_root = {r.run.root_span_id: r for r in reports}
    roots = roots_of(spans)
    assert len(roots) == len(keys)
    for root in roots:
        attrs = dict(root.attributes or {})
        assert "tooleval.passed" in attrs, f"root {root.name} exported without its verdict"
        report = by_root[root.context.span_id]
        key = key_of(str(attrs["gen_ai.agent.name"]))
        assert report.run.agent == agent_name(key)
        assert attrs["tooleval.passed"] is expected_passed(key)
        assert attrs["tooleval.tool_calls"] == len(expected_calls(key))
        events = [e for e in root.events if e.name == "gen_ai.evaluation.result"]
        assert [(e.attributes or {})["gen_ai.evaluation.name"] for e in events] == GRADERS
    # the children point at their own run's root
    root_of = {r.context.span_id: key_of(r.name.removeprefix("invoke_agent ")) for r in roots}
    for span in spans:
        if span.name.startswith("execute_tool "):
            args = json.loads(str((span.attributes or {})["gen_ai.tool.call.arguments"]))
            assert span.parent is not None
            assert root_of[span.parent.span_id] == (args["t"], args["i"])


# -- telemetry -------------------------------------------------------------------------------

def new_meter_provider() -> tuple[MeterProvider, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    return MeterProvider(metric_readers=[reader]), reader


def metric_points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    return [p for rm in (data.resource_metrics if data else ()) for sm in rm.scope_metrics
            for m in sm.metrics if m.name == name for p in m.data.data_points]


def dropped_by_reason(reader: InMemoryMetricReader) -> dict[str, int]:
    return {str(p.attributes["reason"]): int(p.value)
            for p in metric_points(reader, "tooleval.runs.dropped")}


def runs_counted(reader: InMemoryMetricReader) -> int:
    return sum(int(p.value) for p in metric_points(reader, "tooleval.runs"))


def drops(stats: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in stats.items() if k.startswith("dropped.") and v}


# -- fault doubles ---------------------------------------------------------------------------

class RecordingProcessor(SpanProcessor):
    """A downstream that only records: every span id it was handed, with how often."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ended: list[ReadableSpan] = []
        self.started = 0
        self.flushes = 0
        self.shutdowns = 0

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        with self.lock:
            self.started += 1

    def on_end(self, span: ReadableSpan) -> None:
        with self.lock:
            self.ended.append(span)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        self.flushes += 1
        return True

    def shutdown(self) -> None:
        self.shutdowns += 1

    def spans(self) -> list[ReadableSpan]:
        with self.lock:
            return list(self.ended)


class HangingExporter(SpanExporter):
    """``export`` blocks until released, like a network call that never returns."""

    def __init__(self, *, hang: bool = True) -> None:
        self.lock = threading.Lock()
        self.exported: list[ReadableSpan] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        if not hang:
            self.release.set()
        self.shutdowns = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.entered.set()
        self.release.wait(60)
        with self.lock:
            self.exported.extend(spans)
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        self.shutdowns += 1

    def spans(self) -> list[ReadableSpan]:
        with self.lock:
            return list(self.exported)


class RaisingExporter(HangingExporter):
    """Records what it was handed, then raises from every method."""

    def __init__(self) -> None:
        super().__init__(hang=False)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        super().export(spans)
        raise ConnectionError("collector unreachable")

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        raise ConnectionError("flush")

    def shutdown(self) -> None:
        super().shutdown()
        raise ConnectionError("shutdown")


@grader
def rb_custom_raises(run: AgentRun, submission: str | None) -> float:
    raise RuntimeError("custom grader bug")


@grader
def rb_custom_exits(run: AgentRun, submission: str | None) -> float:
    raise SystemExit(3)       # user code calling sys.exit() on the grading thread


@grader
def rb_custom_counts(run: AgentRun, submission: str | None) -> GradeResult | float:
    return 1.0 if run.calls else 0.0


# A slow grader: blocks while GATE is closed. Reassign GATE (not just set it) to change the
# gate of a forked child: the function looks the name up at every call.
GATE = threading.Event()
ENTERED = threading.Event()


@grader
def rb_gated(run: AgentRun, submission: str | None) -> float:
    ENTERED.set()
    GATE.wait(60)
    return 1.0


GATED = {"graders": [{"name": "gated", "kind": "tool", "function":
                      "tests.robustness.support:rb_gated"}]}


def wait_until(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    until = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= until:
            return condition()
        time.sleep(0.01)
    return True


def wait_child(pid: int, seconds: float = 30.0) -> int:
    """The exit code of a forked child; kill it (and fail) if it hangs past ``seconds``."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"forked child did not finish within {seconds} s")
