"""The line protocol of the Python peer workers (run in the peer's own venv, stdlib only).

One JSON request per line on stdin, one answer per line on stdout prefixed ``@@peer `` (a peer
that prints to stdout cannot be mistaken for an answer):

- ``{"op": "load", "calls": [...], "configs": {...}}``: the worker builds the peer's evaluators
  (and criteria: what a config load gives) for every family it has; answers ``{"ok": true,
  "version": ...}``;
- ``{"op": "grade", "family": NAME, "gc": "collect" | "off", "warm": BOOL}``: one grading
  call, timed alone (with ``warm``, after an untimed one on an input of its own);
  answers ``{"ms": ..., "wall_ms": ..., "cpu_ms": ..., "cpu_clock": "thread", "score": ...,
  "passed": ...}`` (``ms`` is ``wall_ms``; ``passed`` null where the peer has no pass mark).

Every grading callable carries a ``prepare`` attribute: a callable run, untimed, right before
each timed call, that builds the peer's input (spans, message history) afresh from the run's
calls, as bench_peers.py builds a fresh run for ours before every sample: every side grades
data just built, never an input it graded before (whose objects would sit warm in the CPU
caches, or carry what the peer memoised on them). With ``warm``, an untimed grade of another
fresh input comes first, so that the timed call finds the grader's code and data in the caches
whatever ran on the core meanwhile (the other side's process, another program): the state
before a timed call is then set by the worker alone.

Then, still untimed, the garbage collector runs (``gc.collect()``), so that a timed call does
not pay for a collection the input's building made due, and every call starts from the same
counts. The heap of the load (modules, evaluators, criteria) is frozen after it
(``gc.freeze()``), so that collection, and any the grade itself triggers, walks what the input
and the grade allocated, not everything the peer imported. With ``"gc": "off"`` the collector
is also disabled during the timed call. bench_peers.py does the same on our side.

Two clocks time the call: the CPU time of the calling thread (``time.thread_time_ns``, which is
``CLOCK_THREAD_CPUTIME_ID`` on Linux: nanoseconds, and blind to the time the thread waits while
another process has the core) and the wall clock (``time.perf_counter_ns``).
"""

from __future__ import annotations

import gc
import json
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

#: family -> a callable that grades once and returns (score, passed or None)
Graders = dict[str, Callable[[], tuple[float, bool | None]]]


def drive(coroutine: Any) -> Any:
    """The value of a coroutine that never suspends (the peers' async evaluators compute
    synchronously), without the cost of an event loop around it."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    coroutine.close()
    raise RuntimeError("the evaluator suspended; it needs an event loop")


def settle_heap() -> None:
    """Collect, then freeze what is left: later collections walk only newer objects."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def timed(grade: Callable[[], Any], gc_mode: str) -> tuple[Any, int, int]:
    """``grade()``'s value, its thread CPU time and its wall time (ns); the collector run
    before, and off during the call when ``gc_mode`` is ``"off"``."""
    gc.collect()
    off = gc_mode == "off"
    if off:
        gc.disable()
    try:
        w0 = time.perf_counter_ns()
        c0 = time.thread_time_ns()
        value = grade()
        c1 = time.thread_time_ns()
        w1 = time.perf_counter_ns()
    finally:
        if off:
            gc.enable()
    return value, c1 - c0, w1 - w0


def serve(version: str, load: Callable[[list[Any], dict[str, Any]], Graders]) -> None:
    out = sys.stdout
    graders: Graders = {}

    def reply(obj: dict[str, Any]) -> None:
        out.write("@@peer " + json.dumps(obj) + "\n")
        out.flush()

    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            if request["op"] == "load":
                graders = {}
                graders = load(request["calls"], request["configs"])
                settle_heap()
                reply({"ok": True, "version": version})
            elif request["op"] == "grade":
                grade = graders.get(request["family"])
                if grade is None:
                    reply({"error": f"no grader for {request['family']}"})
                    continue
                prepare = getattr(grade, "prepare", None)
                if request.get("warm"):
                    if prepare is not None:
                        prepare()
                    grade()
                if prepare is not None:
                    prepare()
                (score, passed), cpu_ns, wall_ns = timed(grade, request.get("gc", "collect"))
                reply({"ms": wall_ns / 1e6, "wall_ms": wall_ns / 1e6, "cpu_ms": cpu_ns / 1e6,
                       "cpu_clock": "thread", "score": score, "passed": passed})
            else:
                reply({"error": f"unknown op {request['op']}"})
        except Exception:  # noqa: BLE001 - reported to the bench, which prints it
            reply({"error": traceback.format_exc(limit=5)})
