"""Grading time of tool-call-args and tool-call-output with expected lists as long as the run.

A standalone script, not a pytest test::

    python tests/bench/bench_uipath_shapes.py [--sizes 100,1000,10000] [--repeat 5]

The shape of issue 19: a coding agent's run drawn from six tools with varied argument values
(paths and queries with an index in them; the test selector and a few commands repeat, as they
do in a real session), durations of 1-200 ms, and an expected list made of the run's own calls
(full arguments for args, the output text for output) with about 5% of the entries perturbed
(another argument value or another tool) and about 1% removed and 1% inserted. Each grade runs
on a fresh run, so argument and result decoding is paid as it is live; the median is printed in
ms per grading call, with the time per call and its growth from one size to the next (flat for
linear work, 10x per step for quadratic work on sizes ten apart).

Families: ``args`` (exact arguments), ``args subset`` (the same list, ``subset: true``),
``output``, and ``args alike``: many entries that look alike, the case that made the old
matching quadratic (``subset: true``; a third as many ``run_tests {}`` entries as there are
``run_tests`` calls, listed first so that they take the calls the entries naming a selector,
one per call, need). ``main(argv)`` returns the figures as a dict.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from otel_tooleval import load_config
from otel_tooleval.graders.tool_call_checks import output_text
from otel_tooleval.model import AgentRun, SpanRecord
from otel_tooleval.trajectory import RunPolicy, build_run

TOOL_NAMES = ("read_file", "search", "write_file", "run_tests", "bash", "mcp__brave__web_search")
SELECTORS = tuple(f"tests/test_mod{i}.py" for i in range(8)) + ("tests/",)
COMMANDS = ("git status", "ls -la src", "git diff --stat", "make lint")


def call(rng: random.Random, i: int) -> tuple[str, dict[str, Any], Any]:
    """One call of the mix: (tool, arguments, result)."""
    name = TOOL_NAMES[rng.randrange(len(TOOL_NAMES))]
    k = rng.randrange(max(1, i))            # an index already seen: files are read again
    if name == "read_file":
        return name, {"path": f"src/pkg/mod{k}.py"}, {"content": f"def f{k}():\n    return {k}\n"}
    if name == "search":
        return name, {"query": f"def f{k}", "glob": "**/*.py"}, [f"src/pkg/mod{k}.py:1"]
    if name == "write_file":
        return name, {"path": f"src/pkg/mod{i}.py", "content": f"x = {i}\n"}, {"ok": True}
    if name == "run_tests":
        failed = rng.randrange(3)
        return name, {"selector": rng.choice(SELECTORS)}, {"passed": 12 - failed, "failed": failed}
    if name == "bash":
        if rng.randrange(2):
            command = rng.choice(COMMANDS)
            return name, {"command": command}, f"{command}: ok\n"
        return name, {"command": f"cat build/log{i}.txt"}, f"line {i}\n"
    return name, {"query": f"release notes {k}"}, [f"https://example.invalid/r{k}"]


def records(n_calls: int, *, seed: int = 19) -> list[SpanRecord]:
    rng = random.Random(seed)
    out = [SpanRecord(1, 1, 0, "invoke_agent bench", 0, 10**15,
                      {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench"})]
    t, sid = 1_000, 1
    for i in range(n_calls):
        if i % 5 == 0:
            sid += 1
            out.append(SpanRecord(1, sid, 1, "chat m", t, t + 1_000,
                                  {"gen_ai.operation.name": "chat"}))
            t += 2_000
        name, args, result = call(rng, i)
        sid += 1
        duration = rng.randrange(1, 201) * 1_000_000
        out.append(SpanRecord(1, sid, 1, f"execute_tool {name}", t, t + duration, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
            "gen_ai.tool.call.arguments": json.dumps(args),
            "gen_ai.tool.call.result": json.dumps(result)}))
        t += duration + 1_000
    return out


def fresh_run(recs: list[SpanRecord]) -> AgentRun:
    return build_run(recs[0], recs[1:], RunPolicy(max_calls_per_run=10**6))


def expected_lists(run: AgentRun, *, seed: int = 23
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The run's own calls as tool-call-args and tool-call-output entries, edited."""
    rng = random.Random(seed)
    args: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
    for c in run.calls:
        roll = rng.random()
        if roll < 0.01:                                     # removed
            continue
        name, values, text = c.name, dict(c.arguments), output_text(c) or ""
        if roll < 0.035:                                    # another value
            key = next(iter(values))
            values[key] = f"{values[key]}-changed"
            text += " (changed)"
        elif roll < 0.06:                                   # another tool
            name = TOOL_NAMES[(TOOL_NAMES.index(name) + 1) % len(TOOL_NAMES)]
        args.append({"name": name, "args": values})
        outputs.append({"name": name, "output": text})
        if rng.random() < 0.01:                             # inserted
            args.append({"name": "bash", "args": {"command": f"echo inserted {len(args)}"}})
            outputs.append({"name": "bash", "output": f"inserted {len(outputs)}\n"})
    return args, outputs


def timed(grade: Any, recs: list[SpanRecord], repeat: int) -> float:
    """Median ms of ``repeat`` grades, each on a fresh run."""
    times = []
    for _ in range(repeat):
        run = fresh_run(recs)
        t0 = time.perf_counter()
        grade(run)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def bench(sizes: Sequence[int], repeat: int) -> dict[str, dict[str, Any]]:
    """Prints the table; returns per family the ms per grade, one value per size, and the
    scores (equal before and after a change of algorithm)."""
    out: dict[str, dict[str, Any]] = {}
    for n in sizes:
        recs = records(n)
        run = fresh_run(recs)
        args, outputs = expected_lists(run)
        selectors = [c.arguments for c in run.calls if c.name == "run_tests"]
        alike = ([{"name": "run_tests", "args": {}}] * (len(selectors) // 3)
                 + [{"name": "run_tests", "args": a} for a in selectors])
        entries = {
            "args": {"type": "tool-call-args", "tool_calls": args},
            "args subset": {"type": "tool-call-args", "subset": True, "tool_calls": args},
            "output": {"type": "tool-call-output", "tool_outputs": outputs},
            "args alike": {"type": "tool-call-args", "subset": True, "tool_calls": alike},
        }
        reps = repeat if n <= 1_000 else max(1, repeat // 2)
        for family, entry in entries.items():
            grader = load_config({"graders": [entry]}).graders[0].grader
            row = out.setdefault(family, {"ms": [], "score": []})
            row["ms"].append(timed(grader.grade, recs, reps))
            row["score"].append(grader.grade(fresh_run(recs)).score)
    print(f"python {sys.version.split()[0]}; ms per grading call, median of {repeat} "
          f"(half at 10,000 calls and up); expected list as long as the run")
    header = f"{'family':<14}" + "".join(f"{n:>12,}" for n in sizes) + "   us/call growth"
    print(header)
    print("-" * len(header))
    for family, row in out.items():
        per_call = [ms * 1000 / n for ms, n in zip(row["ms"], sizes)]
        growth = " ".join(f"{b / a:.1f}x" for a, b in itertools.pairwise(per_call))
        print(f"{family:<14}" + "".join(f"{ms:>12.2f}" for ms in row["ms"]) + f"   {growth}")
    print("scores: " + "; ".join(f"{f} {', '.join(f'{s:.4f}' for s in row['score'])}"
                                 for f, row in out.items()))
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args(argv)
    sizes = [int(s) for s in opts.sizes.split(",")]
    return {"sizes": sizes, "families": bench(sizes, opts.repeat)}


if __name__ == "__main__":
    main()
