"""Record Google ADK's verdicts on generated trajectories into verdicts.json.

Re-record (one command, from the repository root; ADK's ``[eval]`` extra is large, so it lives
in a virtualenv of its own, outside the project and its dependencies)::

    python3 -m venv /tmp/adk-venv && /tmp/adk-venv/bin/pip install "google-adk[eval]==2.13.0" \
        && /tmp/adk-venv/bin/python tests/data/peers/adk/record.py

The script imports nothing from otel-tooleval. It generates seeded random cases (a criteria
block as ADK's test_config.json holds it, the expected tool uses, the calls the agent made) and
runs each through ADK's real evaluation API, offline: ``EvalConfig`` parses the criteria,
``get_eval_metrics_from_config`` makes the metric, ``DEFAULT_METRIC_EVALUATOR_REGISTRY`` gives
its evaluator (``TrajectoryEvaluator``), and ``evaluate_invocations`` grades one actual
invocation against one expected invocation (one agent run, for us).

Each case gets two verdicts:

- ``adk``: ADK on the case as written (score, status; or the error ADK raised);
- ``adk_value_equality``: ADK on the same case with the inputs of our deliberate differences
  neutralised: booleans in args replaced by marker strings (so ``True`` no longer equals ``1``)
  and expected args left out given as ``{}``. That is what our documented rules should give;
  tests/test_peer_adk.py replays both.

The output is deterministic for a seed (``--seed``, default 17; ``--cases``, default 400).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "verdicts.json"

NAMES = ("search", "fetch", "book")
# Argument values chosen to make the equality rules meet: true/1, false/0, 1/1.0, "10"/10,
# nested objects in another key order, lists.
VALUES: tuple[Any, ...] = (1, 1.0, True, 0, False, "10", 10, "x", None, [1, 2], [1, True],
                           {"a": 1, "b": {"c": True}}, {"b": {"c": 1}, "a": 1.0}, 2.5)
KEYS = ("q", "n", "flag")

#: ``criteria.tool_trajectory_avg_score`` forms, as test_config.json may write them.
def criterion(rng: random.Random) -> Any:
    threshold = rng.choice([1.0, 1.0, 1, 0.5, 0.0])
    form = rng.randrange(12)
    if form == 0:
        return threshold                                    # bare number: EXACT
    match = rng.choice([
        "EXACT", "IN_ORDER", "ANY_ORDER", "in_order", "any-order", "In Order", " exact ",
        "ANY ORDER", 0, 1, 2])
    out: dict[str, Any] = {"threshold": threshold}
    key = "matchType" if form in (1, 2) else "match_type"
    if form != 3:
        out[key] = match
    if rng.random() < 0.3:
        out["ignoreArgs" if form == 4 else "ignore_args"] = rng.random() < 0.6
    return out


def config_error_cases(rng: random.Random) -> list[Any]:
    """Criteria ADK refuses (no threshold) or accepts where we refuse (documented)."""
    return [
        {"match_type": "IN_ORDER"},                         # ADK raises: threshold required
        {"matchType": 1, "ignoreArgs": True},               # the same, camelCase
        {"threshold": 1.5, "match_type": "ANY_ORDER"},      # ADK grades; we refuse > 1
        {"threshold": -0.5},                                # ADK grades; we refuse < 0
        1.5,                                                # bare, above 1
        {"threshold": 1.0, "match_typ": "IN_ORDER"},        # misspelled: ADK ignores it (EXACT)
        {"threshold": 1.0, "ignore_arg": True},             # misspelled: ADK ignores it
        {"threshold": 1.0, "matchType": "IN_ORDER", "ignoreArgs": False, "extra": 1},
    ]


def args(rng: random.Random) -> dict[str, Any]:
    return {k: rng.choice(VALUES) for k in rng.sample(KEYS, rng.randint(0, 2))}


def tool_use(rng: random.Random) -> dict[str, Any]:
    return {"name": rng.choice(NAMES), "args": args(rng)}


def lookalike(value: Any, rng: random.Random) -> Any:
    """A value Python finds equal but JSON does not (true/1, false/0), else another value."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return value == 1
    return rng.choice(VALUES)


def calls_from(expected: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """The agent's calls: the expected ones, edited (extra, missing, reordered, other args)."""
    calls = [{"name": e["name"], "args": dict(e.get("args") or {})} for e in expected]
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
        op = rng.randrange(6)
        if op == 0:
            calls.insert(rng.randint(0, len(calls)), tool_use(rng))
        elif op == 1 and calls:
            del calls[rng.randrange(len(calls))]
        elif op == 2 and len(calls) > 1:
            i, j = rng.sample(range(len(calls)), 2)
            calls[i], calls[j] = calls[j], calls[i]
        elif op == 3 and calls:
            c = calls[rng.randrange(len(calls))]
            if c["args"]:
                k = rng.choice(sorted(c["args"]))
                c["args"][k] = lookalike(c["args"][k], rng)
            else:
                c["args"] = args(rng)
        elif op == 4 and calls:
            calls.append(dict(rng.choice(calls)))      # a duplicate call
        elif op == 5 and calls:
            calls[rng.randrange(len(calls))]["name"] = rng.choice(NAMES)
    return calls


def generate(seed: int, n: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    cases: list[dict[str, Any]] = []
    for block in config_error_cases(rng):
        expected = [tool_use(rng) for _ in range(rng.randint(1, 3))]
        cases.append({"criteria": {"tool_trajectory_avg_score": block}, "expected": expected,
                      "calls": calls_from(expected, rng)})
    while len(cases) < n:
        expected = [tool_use(rng) for _ in range(rng.choice([0, 1, 1, 2, 2, 3, 3, 4]))]
        for e in expected:
            if rng.random() < 0.12:
                del e["args"]                          # args left out: ADK's None
        case: dict[str, Any] = {"expected": expected, "calls": calls_from(expected, rng)}
        if rng.random() < 0.9:                         # else ADK's default criteria
            case["criteria"] = {"tool_trajectory_avg_score": criterion(rng)}
        cases.append(case)
    for i, case in enumerate(cases):
        case["id"] = i
    return cases


_MARKS = {True: "\x00bool:true", False: "\x00bool:false"}


def neutral(value: Any) -> Any:
    """Booleans as marker strings, so that Python's ``True == 1`` no longer holds."""
    if isinstance(value, bool):
        return _MARKS[value]
    if isinstance(value, dict):
        return {k: neutral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [neutral(v) for v in value]
    return value


def adk_verdict(criteria: Any, expected: list[dict[str, Any]], calls: list[dict[str, Any]],
                ) -> dict[str, Any]:
    from google.adk.evaluation.eval_case import IntermediateData, Invocation
    from google.adk.evaluation.eval_config import EvalConfig, get_eval_metrics_from_config
    from google.adk.evaluation.metric_evaluator_registry import (
        DEFAULT_METRIC_EVALUATOR_REGISTRY,
    )
    from google.genai import types

    try:
        config = EvalConfig.model_validate({"criteria": criteria} if criteria is not None
                                           else {"criteria": {"tool_trajectory_avg_score": 1.0}})
        (metric,) = [m for m in get_eval_metrics_from_config(config)
                     if m.metric_name == "tool_trajectory_avg_score"]
        evaluator = DEFAULT_METRIC_EVALUATOR_REGISTRY.get_evaluator(metric)

        def invocation(uses: list[dict[str, Any]]) -> Invocation:
            return Invocation(
                user_content=types.Content(role="user", parts=[types.Part(text="hi")]),
                intermediate_data=IntermediateData(tool_uses=[
                    types.FunctionCall(name=u["name"], args=u.get("args")) for u in uses]))

        result = evaluator.evaluate_invocations([invocation(calls)], [invocation(expected)])
    except Exception as exc:  # noqa: BLE001  (ADK's refusal is the verdict)
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    return {"score": result.overall_score, "status": result.overall_eval_status.name,
            "passed": result.overall_eval_status.name == "PASSED"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--cases", type=int, default=400)
    parser.add_argument("--out", type=Path, default=OUT)
    opts = parser.parse_args(argv)
    cases = generate(opts.seed, opts.cases)
    for case in cases:
        criteria = case.get("criteria")
        case["adk"] = adk_verdict(criteria, case["expected"], case["calls"])
        fixed = [{"name": e["name"], "args": neutral(e.get("args") or {})}
                 for e in case["expected"]]
        calls = [{"name": c["name"], "args": neutral(c["args"])} for c in case["calls"]]
        case["adk_value_equality"] = adk_verdict(criteria, fixed, calls)
    doc = {"peer": "google-adk[eval]", "adk_version": version("google-adk"),
           "python": sys.version.split()[0], "seed": opts.seed,
           "recorded_by": "tests/data/peers/adk/record.py", "cases": cases}
    opts.out.write_text(json.dumps(doc, indent=None, separators=(",", ":")) + "\n",
                        encoding="utf-8")
    scores = [c["adk"].get("score") for c in cases]
    print(f"{len(cases)} cases, ADK {doc['adk_version']}: {scores.count(1.0)} score 1, "
          f"{scores.count(0.0)} score 0, {scores.count(None)} errors -> {opts.out}")


if __name__ == "__main__":
    main()
