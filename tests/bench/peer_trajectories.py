"""The trajectories and configs that tests/bench/bench_peers.py gives us and every peer.

Deterministic (seeded) and plain JSON data, so that the same run goes to a peer's own process
unchanged. A run is a coding agent's mix of six tools with JSON arguments whose values carry an
index (paths, queries, commands), so that values repeat a few times in a long run, as they do in
a real one; durations 1-200 ms. The expected list is the run's own calls, every entry with its
full ``args`` and a ``max_duration_ms``, with about 5% of the entries perturbed (another argument
value or another tool) and about 1% of the calls left out and as many foreign entries put in.

``trajectory(n)`` gives the run, ``expected(run)`` the expected list, and ``family_configs``
the config of every family in one neutral shape: each side (ours in bench_peers.py, each peer's
worker) writes it in its own terms.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

TOOLS = ("read_file", "search", "write_file", "run_tests", "bash", "mcp__brave__web_search")

#: The latency limit of every expected entry; call durations are drawn from 1-200 ms.
MAX_DURATION_MS = 100

#: The share of expected entries given another argument value or another tool.
PERTURBED = 0.05

#: The share of the run's calls left out of the expected list, and of foreign entries put in.
EDITED = 0.01


def _args(name: str, k: int) -> dict[str, Any]:
    if name == "read_file":
        return {"path": f"src/app/module_{k}.py"}
    if name == "search":
        return {"query": f"def handler_{k}", "glob": "**/*.py"}
    if name == "write_file":
        return {"path": f"src/app/module_{k}.py", "content": f"VALUE = {k}\n"}
    if name == "run_tests":
        return {"selector": f"tests/test_module_{k}.py"}
    if name == "bash":
        return {"command": f"ls -la src/app/pkg_{k}"}
    return {"query": f"release notes {k}"}


def _result(name: str, k: int) -> Any:
    if name == "read_file":
        return {"content": f"def handler_{k}():\n    return {k}\n"}
    if name == "search":
        return [f"src/app/module_{k}.py:1"]
    if name == "write_file":
        return {"ok": True}
    if name == "run_tests":
        return {"passed": k % 40, "failed": 0}
    if name == "bash":
        return f"module_{k}.py\n__init__.py\n"
    return [f"https://example.invalid/notes/{k}"]


def trajectory(n_calls: int, *, seed: int = 19) -> list[dict[str, Any]]:
    """``n_calls`` tool calls in order: ``name``, ``args``, ``result``, ``start_ms`` (from the
    run's start), ``duration_ms``. Argument values are drawn from n/4 indices per tool, so a
    value recurs about four times in a run."""
    rng = random.Random(seed * 1_000_003 + n_calls)
    spread = max(1, n_calls // 4)
    calls = []
    t = 0
    for _ in range(n_calls):
        name = TOOLS[rng.randrange(len(TOOLS))]
        k = rng.randrange(spread)
        duration = rng.randint(1, 200)
        calls.append({"name": name, "args": _args(name, k), "result": _result(name, k),
                      "start_ms": t, "duration_ms": duration})
        t += duration + 1
    return calls


def expected(calls: list[dict[str, Any]], *, seed: int = 23) -> list[dict[str, Any]]:
    """The run's calls as expected entries (``tool``, ``args``, ``max_duration_ms``, and
    ``result`` for the output family), edited: PERTURBED of them given another argument value
    or another tool, EDITED of the calls left out and as many foreign entries put in."""
    rng = random.Random(seed * 1_000_003 + len(calls))
    spread = max(1, len(calls) // 4)
    out: list[dict[str, Any]] = []
    for call in calls:
        if rng.random() < EDITED:
            continue                                    # a call the expected list leaves out
        name, args, result = call["name"], call["args"], call["result"]
        roll = rng.random()
        if roll < PERTURBED / 2:                        # another argument value
            k = spread + rng.randrange(spread)
            args, result = _args(name, k), _result(name, k)
        elif roll < PERTURBED:                          # another tool, same kind of value
            name = TOOLS[(TOOLS.index(name) + 1 + rng.randrange(len(TOOLS) - 1)) % len(TOOLS)]
            k = rng.randrange(spread)
            args, result = _args(name, k), _result(name, k)
        out.append({"tool": name, "args": args, "result": result,
                    "max_duration_ms": MAX_DURATION_MS})
        if rng.random() < EDITED:                       # an entry no call answers
            name = TOOLS[rng.randrange(len(TOOLS))]
            k = 2 * spread + rng.randrange(spread)
            out.append({"tool": name, "args": _args(name, k), "result": _result(name, k),
                        "max_duration_ms": MAX_DURATION_MS})
    return out


def compact(value: Any) -> str:
    """A value as compact JSON (the text a span records)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def output_text(result: Any) -> str:
    """A call's result as the output text both sides compare: a JSON object's ``content``
    field, a string as is, any other value as compact JSON (our tool-call-output's reading of
    a recorded result, and the SDK's of its normalized ``{"content": ...}`` output)."""
    if isinstance(result, dict) and "content" in result:
        result = result["content"]
    return result if isinstance(result, str) else compact(result)


def family_configs(calls: list[dict[str, Any]],
                   entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each family's config in a neutral shape, keyed by the family's name in the bench.

    - trajectory.*: ``mode`` and ``expected`` (``tool``, ``args``, ``max_duration_ms``), or
      ``minimums`` for any_order (each tool's count in the expected list); ``in_order as
      listed`` expects the run's own calls, unedited: a run that did what its list says, where
      agentv's greedy scan is right too, so the two in_order answers agree;
    - order.*: ``strict`` and ``tool_calls_order`` (the expected tools);
    - count: ``tool_calls_count`` (each expected tool: ``==`` its count in the expected list,
      ``>=`` for every other tool of the expected list, alternating by name);
    - args: ``tool_calls`` (``name``, full ``args``); output: ``tool_outputs`` (``name``,
      ``output``: the result as text, ``output_text``);
    - letta.*: ``function``, ``tool_name`` and ``ground_truth`` (text) for the arguments of
      the first call of the tool whose first call comes last (letta-evals' ``tool_arguments``
      grades the first call of a tool only); exact_match's ground truth is the arguments as
      the span recorded them (``json.dumps``), so that letta's raw-text comparison holds.
    """
    counts = Counter(e["tool"] for e in entries)
    expected_entries = [{"tool": e["tool"], "args": e["args"],
                         "max_duration_ms": e["max_duration_ms"]} for e in entries]
    configs: dict[str, dict[str, Any]] = {
        "trajectory any_order": {"mode": "any_order", "minimums": dict(sorted(counts.items()))},
        "trajectory in_order": {"mode": "in_order", "expected": expected_entries},
        "trajectory in_order as listed": {"mode": "in_order", "expected": [
            {"tool": c["name"], "args": c["args"], "max_duration_ms": MAX_DURATION_MS}
            for c in calls]},
        "trajectory exact": {"mode": "exact", "expected": expected_entries},
        "order lcs": {"strict": False, "tool_calls_order": [e["tool"] for e in entries]},
        "order strict": {"strict": True, "tool_calls_order": [e["tool"] for e in entries]},
        "count": {"tool_calls_count": {
            tool: ["==" if i % 2 == 0 else ">=", c]
            for i, (tool, c) in enumerate(sorted(counts.items()))}},
        "args": {"tool_calls": [{"name": e["tool"], "args": e["args"]} for e in entries]},
        "output": {"tool_outputs": [{"name": e["tool"], "output": output_text(e["result"])}
                                    for e in entries]},
    }
    if calls:
        first_index: dict[str, int] = {}
        for i, call in enumerate(calls):
            first_index.setdefault(call["name"], i)
        tool = max(first_index, key=first_index.__getitem__)
        first = calls[first_index[tool]]
        value = next(iter(first["args"].values()))
        configs.update({
            "letta exact_match": {"function": "exact_match", "tool_name": tool,
                                  "ground_truth": json.dumps(first["args"])},
            "letta contains": {"function": "contains", "tool_name": tool,
                               "ground_truth": value},
            "letta regex_match": {"function": "regex_match", "tool_name": tool,
                                  "ground_truth": "_[0-9]+"},
            "letta ascii_printable_only": {"function": "ascii_printable_only",
                                           "tool_name": tool, "ground_truth": None},
        })
    return configs


def workload(n_calls: int) -> dict[str, Any]:
    """One size's run and configs, as sent to a peer's worker."""
    calls = trajectory(n_calls)
    entries = expected(calls)
    return {"calls": calls, "configs": family_configs(calls, entries)}
