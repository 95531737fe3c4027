"""Cost of ``ToolEvalSpanProcessor``'s application-thread hooks alone, per span.

A standalone script, not a pytest test (pytest collects ``test_*.py`` only)::

    python tests/bench/bench_hooks.py [--calls 10,50] [--spans 3000] [--repeats 21] [--guard]
                                      [--cpu] [--cold] [--opcodes]

The start and end events of agent runs (``bench_overhead``'s workload: GenAI-semconv spans,
``--calls`` tool calls per run, five per turn) are captured once from a real ``TracerProvider``
and then replayed straight into the hooks (``on_start``, then ``_on_ending`` and ``on_end`` in
the order the spans started and ended), with no SDK around them. What is timed is what the
processor adds inside the application's ``span.start()`` / ``span.end()``; ``bench_overhead``
times the whole SDK around it (about 24 us per span on a 2-core machine), whose target of
1.10x leaves the hooks well under 1 us per span.

Three processors replay the same events, alternating, ``--repeats`` times each:

* null:     a ``SpanProcessor`` whose hooks do nothing (the downstream of the other two);
* forward:  the least a wrapper can do: forward every hook to the null one inside try/except;
* tooleval: ``ToolEvalSpanProcessor(bench_overhead.CONFIG, downstream=null)``.

With ``--guard``, two more replay the same events: ``guard-names``, the same processor with a
``guard:`` section of name rules only (``disallowed`` names, ``allowed``, ``max_calls``,
``max_calls_per_tool``), and ``guard-all``, which adds the rules that read arguments (a
``disallowed`` entry with a ``command`` condition on ``bash``, whose arguments are decoded at
each of its calls, and ``max_repeats``, which counts the other calls by their argument text).
No call breaks a rule (the usual case).
Their cost per tool span, ``(guard - tooleval) x spans / tool spans``, is printed after the
table: the guard's work happens only for tool spans, plus a test at every span's start
(``--calls 0``: runs of an agent span and a model-call span only, whose extra per span is
that test alone).

Replayed back to back, the hooks run with the core's caches and branch predictors trained on
them alone, which an application never gives them: in ``bench_overhead``'s agent loop the same
hooks cost 2.5-3x as much per span. ``--cold`` makes one span on a bare ``TracerProvider``
(``bench_overhead``'s tool span, no processor) before every replayed event and times only the
events (a clock read around each, the same for every processor): the hooks then cost what they
cost in the loop. ``--opcodes`` counts the bytecodes each processor's hooks execute per span
(``sys.settrace``; one replay): a figure that does not move with the machine's load, and in
the agent loop the application thread's CPU ratio follows the ratio of bytecodes executed
(docs/performance-log.md, "The application thread's share").

Grading does not run: the tooleval side gets a stand-in for its grading thread and an unbounded
queue, so an ended root is queued as usual (the queue is emptied between replays). The figure is
the median over the repeats, in microseconds per span; ``tooleval - null`` is the hooks' cost.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from otel_tooleval import ToolEvalSpanProcessor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_overhead import CONFIG, Workload, count_bytecodes, run_agent

Event = tuple[bool, Any]   # (ended, span)


class Capture(SpanProcessor):
    """Records every start and end, in order."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.events.append((False, span))

    def on_end(self, span: Any) -> None:
        self.events.append((True, span))


class Null(SpanProcessor):
    """Does nothing: ``on_start`` and ``_on_ending`` are the SDK's own no-ops."""

    def on_end(self, span: Any) -> None:
        pass


class Forward(SpanProcessor):
    """A wrapper that only forwards: the floor for any wrapping processor."""

    def __init__(self, downstream: SpanProcessor) -> None:
        self.downstream = downstream

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        try:
            self.downstream.on_start(span, parent_context=parent_context)
        except Exception:  # noqa: BLE001, S110 - contained, as a wrapper must
            pass

    def _on_ending(self, span: Any) -> None:
        try:
            self.downstream._on_ending(span)
        except Exception:  # noqa: BLE001, S110 - contained, as a wrapper must
            pass

    def on_end(self, span: Any) -> None:
        try:
            self.downstream.on_end(span)
        except Exception:  # noqa: BLE001, S110 - contained, as a wrapper must
            pass


def capture(calls: int, spans: int) -> list[Event]:
    workload = Workload(calls, 5)
    recorder = Capture()
    provider = TracerProvider()
    provider.add_span_processor(recorder)
    tracer = provider.get_tracer("bench_hooks")
    for _ in range(max(1, spans // workload.spans_per_run)):
        run_agent(tracer, workload)
    provider.shutdown()
    return recorder.events


_NAMES = ["read_file", "search", "write_file", "run_tests", "bash"]
GUARD_NAMES: dict[str, Any] = {
    "disallowed": ["^delete_", "^drop_"], "allowed": _NAMES, "max_calls": 100_000,
    "max_calls_per_tool": {"bash": 100_000}}
GUARD_ALL: dict[str, Any] = {
    **GUARD_NAMES, "disallowed": ["^delete_", {"name": "^bash$", "command": "rm -rf"}],
    "max_repeats": 100_000}


def tooleval(downstream: SpanProcessor, guard: dict[str, Any] | None = None
             ) -> ToolEvalSpanProcessor:
    config = CONFIG if guard is None else {**CONFIG, "guard": guard}
    processor = ToolEvalSpanProcessor(config, downstream=downstream)
    processor._worker = object()       # type: ignore[assignment]  # queued roots stay queued
    processor._queue_limit = 1 << 62
    return processor


def replay(processor: SpanProcessor, events: list[Event]) -> None:
    # Bound once, as SynchronousMultiSpanProcessor's loop would look them up.
    start, ending, end = processor.on_start, processor._on_ending, processor.on_end
    for ended, span in events:
        if ended:
            ending(span)
            end(span)
        else:
            start(span, parent_context=None)


def sdk_span() -> Callable[[], None]:
    """One tool span (bench_overhead's attributes) on a bare provider: the SDK's own work that
    runs between two hook calls in an application."""
    tracer = TracerProvider().get_tracer("bench_hooks.between")
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file",
                  "gen_ai.tool.call.id": "call_0_0",
                  "gen_ai.tool.call.arguments": '{"path": "src/app/main.py"}'}

    def between() -> None:
        with tracer.start_as_current_span("execute_tool read_file", attributes=attributes) as s:
            s.set_attribute("gen_ai.tool.call.result", '{"ok": true}')
    return between


def replay_cold(processor: SpanProcessor, events: list[Event],
                between: Callable[[], None]) -> int:
    """``replay`` with ``between()`` before every event; the ns the events alone took."""
    start, ending, end = processor.on_start, processor._on_ending, processor.on_end
    clock = time.perf_counter_ns
    took = 0
    for ended, span in events:
        between()
        started = clock()
        if ended:
            ending(span)
            end(span)
        else:
            start(span, parent_context=None)
        took += clock() - started
    return took


def processors_for(null: SpanProcessor, guard: bool) -> dict[str, SpanProcessor]:
    processors: dict[str, SpanProcessor] = {
        "null": null, "forward": Forward(null), "tooleval": tooleval(null)}
    if guard:
        processors["guard-names"] = tooleval(null, GUARD_NAMES)
        processors["guard-all"] = tooleval(null, GUARD_ALL)
    return processors


def release(processors: dict[str, SpanProcessor]) -> None:
    for stand_in in processors.values():
        if isinstance(stand_in, ToolEvalSpanProcessor):
            stand_in._queue.clear()
            stand_in._worker = None
            stand_in.shutdown(0)


def opcodes(events: list[Event], guard: bool = False) -> dict[str, float]:
    """Bytecodes each processor's hooks execute per span, over one replay (after one untimed
    replay, so that what happens once per processor is left out)."""
    processors = processors_for(Null(), guard)
    counted: dict[str, float] = {}
    for name, processor in processors.items():
        replay(processor, events)
        if isinstance(processor, ToolEvalSpanProcessor):
            processor._queue.clear()
        counted[name] = count_bytecodes(partial(replay, processor, events)) / (len(events) // 2)
    release(processors)
    return counted


def measure(events: list[Event], repeats: int, guard: bool = False,
            clock: Callable[[], int] = time.perf_counter_ns, cold: bool = False
            ) -> dict[str, float]:
    """Median us per span of each processor over ``repeats`` alternating replays (``cold``:
    with an SDK span made before every event, only the events timed)."""
    null = Null()
    processors = processors_for(null, guard)
    between = sdk_span() if cold else None
    resets: dict[str, Callable[[], None]] = {
        name: p._queue.clear for name, p in processors.items()   # type: ignore[attr-defined]
        if isinstance(p, ToolEvalSpanProcessor)}
    spans = len(events) // 2
    samples: dict[str, list[float]] = {name: [] for name in processors}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            for name, processor in processors.items():
                if name in resets:
                    resets[name]()
                if between is not None:
                    took = replay_cold(processor, events, between)
                else:
                    started = clock()
                    replay(processor, events)
                    took = clock() - started
                samples[name].append(took / spans / 1000)
    finally:
        if gc_was_enabled:
            gc.enable()
    release(processors)
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv: Sequence[str] | None = None) -> dict[int, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", default="10,50",
                        help="tool calls per run, comma-separated (default: 10,50)")
    parser.add_argument("--spans", type=int, default=3000,
                        help="spans replayed per measurement (default: 3000)")
    parser.add_argument("--repeats", type=int, default=21,
                        help="replays per processor, alternating (default: 21)")
    parser.add_argument("--guard", action="store_true",
                        help="also replay with guard: rules (name rules; all rules)")
    parser.add_argument("--cpu", action="store_true",
                        help="time the process's CPU time, not the wall clock (steadier on a "
                             "loaded machine: time the process waits for a core is left out)")
    parser.add_argument("--cold", action="store_true",
                        help="make an SDK span before every replayed event (not timed): the "
                             "hooks' cost with the caches and predictors as an application "
                             "leaves them (wall clock per event; --cpu does not apply)")
    parser.add_argument("--opcodes", action="store_true",
                        help="count the bytecodes the hooks execute per span instead of "
                             "timing them")
    args = parser.parse_args(argv)
    clock = time.process_time_ns if args.cpu else time.perf_counter_ns
    sizes = [int(c) for c in args.calls.split(",") if c]

    if args.opcodes:
        print(f"python {sys.version.split()[0]}; bytecodes executed per span by the hooks")
    else:
        print(f"python {sys.version.split()[0]}; median of {args.repeats} replays, us per span"
              f"{' (cold: an SDK span before every event)' if args.cold else ''}")
    head = (f"{'calls':>5}  {'spans':>6}  {'null':>7}  {'forward':>7}  {'tooleval':>8}  "
            f"{'tooleval - null':>15}")
    print(head)
    print("-" * len(head))
    results: dict[int, dict[str, float]] = {}
    for calls in sizes:
        events = capture(calls, args.spans)
        figures = (opcodes(events, args.guard) if args.opcodes
                   else measure(events, args.repeats, args.guard, clock, args.cold))
        results[calls] = figures
        digits = 1 if args.opcodes else 3
        print(f"{calls:>5}  {len(events) // 2:>6}  {figures['null']:>7.{digits}f}  "
              f"{figures['forward']:>7.{digits}f}  {figures['tooleval']:>8.{digits}f}  "
              f"{figures['tooleval'] - figures['null']:>15.{digits}f}")
    if args.guard:
        unit = "bytecodes" if args.opcodes else "us"
        print(f"\nguard: extra {unit} per tool span (and per span), against tooleval without it")
        for calls, figures in results.items():
            spans = Workload(calls, 5).spans_per_run
            for name in ("guard-names", "guard-all"):
                extra = figures[name] - figures["tooleval"]
                what = (f"{extra * spans / calls:>7.3f} per tool span" if calls
                        else f"{extra:>7.3f} per span (no tool spans)")
                print(f"{calls:>5} calls  {name:<11}  {what}  ({extra:.3f} per span; tooleval "
                      f"{figures['tooleval']:.3f} -> {figures[name]:.3f})")
    return results


if __name__ == "__main__":
    main()
