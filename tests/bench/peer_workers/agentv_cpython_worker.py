"""agentv's tool_trajectory scans written in Python, driven for tests/bench/bench_peers.py.

The question this side answers: is the gap between our tool_trajectory and agentv's (see
docs/performance-log.md, "agentv's single scans") in the algorithms or in the runtimes? agentv runs
its ``evaluateAnyOrder``, ``evaluateExact`` and ``evaluateInOrder`` as JavaScript compiled by
V8's JIT; here the same steps run on CPython, as a Python programmer would write them, on the
same input agentv is handed: the provider's messages with the arguments already parsed
(``traceOf`` in agentv_worker.mjs), built afresh before each call, untimed.

The steps, from agentv's source (its 4.x ``ToolTrajectoryGrader``): extract the tool calls from
the messages (a new record per call), then

- ``any_order``: count the calls per tool name; one assertion per tool with a minimum;
- ``exact``: an assertion when the lengths differ; per position, the tool names compared, then
  the arguments (``argsMatch`` in its default "exact" mode: ``deepEqual``), then the latency
  check; an assertion per position; one per entry beyond the calls;
- ``in_order``: a cursor over the calls; per entry, skip calls of other tools, then the first
  call of the entry's tool either matches (args and latency checked) or fails the entry; both
  consume it (the greedy scan, and its flaw: docs/differences.md).

Every assertion carries its text, as agentv's do; score = (sequence hits + latency hits) /
(entries + latency assertions not skipped), the verdict ``score >= 0.8``. Where agentv calls
``deepEqual`` this calls Python's ``==``, deep equality in C: faster than a recursive function
in Python, and the same answer on JSON values but for booleans against the numbers 0 and 1
(none in the bench's arguments). That leaves this side the fastest faithful rendering we know,
so that ours is measured against the algorithm at its best on this interpreter, not a straw man.

Run with bench_peers.py's own interpreter (stdlib only); speaks _protocol.py's line protocol.
"""

from __future__ import annotations

import json
import platform
from typing import Any

from _protocol import Graders, serve

THRESHOLD = 0.8         # agentv's DEFAULT_THRESHOLD


def trace_of(calls: list[Any]) -> list[dict[str, Any]]:
    """The provider's messages as agentv_worker.mjs builds them: one turn per call."""
    return [{"role": "assistant", "toolCalls": [
        {"tool": c["name"], "input": c["args"], "output": c["result"],
         "durationMs": c["duration_ms"]}]} for c in calls]


def extract(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    calls = []
    for message in messages:
        for call in message.get("toolCalls") or ():
            calls.append({"name": call["tool"], "args": call["input"],
                          "durationMs": call.get("durationMs")})
    return calls


def check_latency(tool: str, limit: float | None, duration: float | None) -> tuple[str, str]:
    if limit is None:
        return "skip", ""
    if duration is None:
        return "skip", f"No duration data for {tool}; latency assertion skipped"
    if duration <= limit:
        return "pass", f"{tool} completed in {duration}ms (max: {limit}ms)"
    return "fail", f"{tool} took {duration}ms (max: {limit}ms)"


def args_match(expected: Any, actual: Any) -> bool:
    if expected is None or expected == "any":
        return True
    if actual is None:
        return False
    return bool(expected == actual)


class Grader:
    def __init__(self, config: dict[str, Any]) -> None:
        self.mode = config["mode"]
        self.minimums = config.get("minimums") or {}
        self.expected = [{"tool": e["tool"], "args": e.get("args"),
                          "maxDurationMs": e.get("max_duration_ms")}
                         for e in config.get("expected") or ()]

    def evaluate(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        calls = extract(messages)
        if not (self.minimums if self.mode == "any_order" else self.expected):
            # agentv: "No tool requirements specified" / "No tool sequence specified"
            return {"score": 1.0, "verdict": "pass", "assertions": []}
        if self.mode == "any_order":
            return self.any_order(calls)
        if self.mode == "exact":
            return self.exact(calls)
        return self.in_order(calls)

    def any_order(self, calls: list[dict[str, Any]]) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for call in calls:
            counts[call["name"]] = counts.get(call["name"], 0) + 1
        assertions = []
        for tool, required in self.minimums.items():
            actual = counts.get(tool, 0)
            assertions.append({"text": f"{tool}: called {actual} times (required >={required})",
                               "passed": actual >= required})
        score = sum(a["passed"] for a in assertions) / len(self.minimums)
        return {"score": score, "verdict": "pass" if score >= THRESHOLD else "fail",
                "assertions": assertions}

    def _latency(self, item: dict[str, Any], call: dict[str, Any],
                 assertions: list[dict[str, Any]]) -> tuple[int, int]:
        """(latency hit, skip) of a matched call, its assertion appended."""
        status, message = check_latency(item["tool"], item["maxDurationMs"], call["durationMs"])
        if status == "pass":
            assertions.append({"text": message, "passed": True})
            return 1, 0
        if status == "fail":
            assertions.append({"text": message, "passed": False})
        elif message:
            return 0, 1
        return 0, 0

    def _result(self, hits: int, latency_hits: int, skips: int,
                assertions: list[dict[str, Any]]) -> dict[str, Any]:
        limited = sum(1 for item in self.expected if item["maxDurationMs"] is not None)
        total = len(self.expected) + limited - skips
        score = (hits + latency_hits) / total if total else 1.0
        return {"score": score, "verdict": "pass" if score >= THRESHOLD else "fail",
                "assertions": assertions}

    def exact(self, calls: list[dict[str, Any]]) -> dict[str, Any]:
        expected = self.expected
        assertions: list[dict[str, Any]] = []
        hits = latency_hits = skips = 0
        if len(calls) != len(expected):
            assertions.append({"text": f"Expected {len(expected)} tool calls, got {len(calls)}",
                               "passed": False})
        n = min(len(expected), len(calls))
        for i in range(n):
            item = expected[i]
            tool = item["tool"]
            call = calls[i]
            if call["name"] == tool:
                if args_match(item["args"], call["args"]):
                    assertions.append({"text": f"Position {i}: {tool}", "passed": True})
                    hits += 1
                    hit, skip = self._latency(item, call, assertions)
                    latency_hits += hit
                    skips += skip
                else:
                    assertions.append({"text": f"Position {i}: {tool} args mismatch",
                                       "passed": False})
            else:
                assertions.append({"text": f"Position {i}: expected {tool}, got {call['name']}",
                                   "passed": False})
        for i in range(n, len(expected)):
            assertions.append({"text": f"Position {i}: expected {expected[i]['tool']}, got "
                                       "nothing", "passed": False})
        return self._result(hits, latency_hits, skips, assertions)

    def in_order(self, calls: list[dict[str, Any]]) -> dict[str, Any]:
        assertions: list[dict[str, Any]] = []
        hits = latency_hits = skips = 0
        at = 0
        for i, item in enumerate(self.expected):
            tool = item["tool"]
            found = mismatch = False
            while at < len(calls):
                call = calls[at]
                if call["name"] == tool:
                    if args_match(item["args"], call["args"]):
                        assertions.append({"text": f"Found {tool} at position {at}",
                                           "passed": True})
                        hits += 1
                        found = True
                        hit, skip = self._latency(item, call, assertions)
                        latency_hits += hit
                        skips += skip
                    else:
                        assertions.append({"text": f"Expected {tool} at position {i}: tool "
                                                   f"found at {at} but args mismatch",
                                           "passed": False})
                        mismatch = True
                    at += 1
                    break
                at += 1
            if not found and not mismatch:
                assertions.append({"text": f"Expected {tool} at position {i}, not found in "
                                           "remaining trace", "passed": False})
        return self._result(hits, latency_hits, skips, assertions)


class _Grade:
    """One family's grading call (timed), with ``prepare`` (untimed): the messages anew."""

    def __init__(self, grader: Grader, calls_text: str) -> None:
        self.grader, self.calls_text = grader, calls_text
        self.messages: list[dict[str, Any]] = []

    def prepare(self) -> None:
        self.messages = []
        self.messages = trace_of(json.loads(self.calls_text))

    def __call__(self) -> tuple[float, bool | None]:
        result = self.grader.evaluate(self.messages)
        return float(result["score"]), result["verdict"] == "pass"


def load(calls: list[Any], configs: dict[str, Any]) -> Graders:
    text = json.dumps(calls)
    return {family: _Grade(Grader(cfg), text) for family, cfg in configs.items()
            if family.startswith("trajectory ")}


if __name__ == "__main__":
    serve(f"CPython {platform.python_version()}", load)
