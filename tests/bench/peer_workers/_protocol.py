"""The line protocol of the Python peer workers (run in the peer's own venv, stdlib only).

One JSON request per line on stdin, one answer per line on stdout prefixed ``@@peer `` (a peer
that prints to stdout cannot be mistaken for an answer):

- ``{"op": "load", "calls": [...], "configs": {...}}``: the worker builds the peer's inputs
  and evaluators for every family it has; answers ``{"ok": true, "version": ...}``;
- ``{"op": "grade", "family": NAME}``: one grading call, timed alone; answers ``{"ms": ...,
  "score": ..., "passed": ...}`` (``passed`` null where the peer has no pass mark).

A grading callable may carry a ``prepare`` attribute: a callable run, untimed, right before
each timed call (the letta worker builds a fresh message history there, as bench_peers.py
builds a fresh run for ours before every sample, so both sides grade data just built).
"""

from __future__ import annotations

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
                graders = load(request["calls"], request["configs"])
                reply({"ok": True, "version": version})
            elif request["op"] == "grade":
                grade = graders.get(request["family"])
                if grade is None:
                    reply({"error": f"no grader for {request['family']}"})
                    continue
                prepare = getattr(grade, "prepare", None)
                if prepare is not None:
                    prepare()
                t0 = time.perf_counter()
                score, passed = grade()
                elapsed = time.perf_counter() - t0
                reply({"ms": elapsed * 1000, "score": score, "passed": passed})
            else:
                reply({"error": f"unknown op {request['op']}"})
        except Exception:  # noqa: BLE001 - reported to the bench, which prints it
            reply({"error": traceback.format_exc(limit=5)})
