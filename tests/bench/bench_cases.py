"""Eval cases at scale: N runs graded with and without N cases (docs/performance.md, "Cases").

Each run is a root span and one tool span. Half the cases match by the root attribute
``tooleval.case.id``, half by the run's first user message (``gen_ai.input.messages``); every
case sets its own expected call on the shared ``tool_trajectory`` entry, so each case builds its
own grader. Printed: the config's load time with and without the cases, and the grading time of
the same runs with and without them (best of ``--repeat``, the two sides alternated).

    python tests/bench/bench_cases.py --runs 10000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from otel_tooleval.config import ToolEvalConfig, load_config
from otel_tooleval.grading import grade_records
from otel_tooleval.model import SpanRecord

SHARED = {"name": "trajectory", "type": "tool_trajectory", "mode": "in_order",
          "expected": [{"tool": "tool_0"}]}


def records(n: int) -> list[SpanRecord]:
    out = []
    for i in range(n):
        trace, root = i + 1, 2 * i + 1
        attrs: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent",
                                 "gen_ai.agent.name": "agent"}
        if i % 2:
            attrs["gen_ai.input.messages"] = json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": f"question {i}"}]}])
        else:
            attrs["tooleval.case.id"] = f"case-{i}"
        out.append(SpanRecord(trace, root, 0, "invoke_agent agent", 1_000, 9_000, attrs))
        out.append(SpanRecord(trace, root + 1, root, f"execute_tool tool_{i}", 2_000, 3_000,
                              {"gen_ai.operation.name": "execute_tool",
                               "gen_ai.tool.name": f"tool_{i}"}))
    return out


def cases(n: int) -> list[dict[str, Any]]:
    return [{"id": f"case-{i}",
             **({"match": {"first_user_message": f"question {i}"}} if i % 2 else {}),
             "expect": {"trajectory": {"expected": [{"tool": f"tool_{i}"}]}}}
            for i in range(n)]


def _timed(config: ToolEvalConfig, spans: list[SpanRecord]) -> tuple[float, int]:
    start = time.perf_counter()
    reports = grade_records(spans, config)
    elapsed = time.perf_counter() - start
    return elapsed, sum(r.passed for r in reports)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    n = args.runs
    spans = records(n)
    start = time.perf_counter()
    plain = load_config({"graders": [SHARED]})
    load_plain = time.perf_counter() - start
    start = time.perf_counter()
    cased = load_config({"graders": [SHARED], "cases": cases(n)})
    load_cased = time.perf_counter() - start
    without, with_ = [], []
    for _ in range(args.repeat):
        t, passed_plain = _timed(plain, spans)
        without.append(t)
        t, passed_cased = _timed(cased, spans)
        with_.append(t)
    assert passed_cased == n, f"{passed_cased} of {n} runs passed with their cases"
    assert passed_plain == 1, "without cases only run 0 calls tool_0"
    result = {"runs": n, "load_without_s": load_plain, "load_with_s": load_cased,
              "grade_without_s": min(without), "grade_with_s": min(with_)}
    extra = result["grade_with_s"] - result["grade_without_s"]
    print(f"{n} runs, {n} cases: config load {load_plain:.3f} s without cases, "
          f"{load_cased:.3f} s with; grading {min(without):.3f} s without, "
          f"{min(with_):.3f} s with (+{extra:.3f} s; "
          f"+{extra + load_cased - load_plain:.3f} s counting the load)")
    return result


if __name__ == "__main__":
    main()
