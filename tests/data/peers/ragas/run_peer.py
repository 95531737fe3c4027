"""Ragas' ToolCallAccuracy and ToolCallF1 (0.4.3) on the cases read from stdin
(tests/support/peers.py).

A case: ``{"strict_order": bool, "reference": [{name, args}], "steps": [[{name, args}], ...]}``:
each step is one AIMessage with its tool calls (a ToolMessage answers each call). A verdict:
``{"accuracy": float, "f1": float}`` from ``multi_turn_ascore`` on a ``MultiTurnSample`` (the
metrics' public API; deterministic, no LLM). The last stdout line is the JSON list of verdicts.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import sys
import warnings


async def grade(cases: list[dict]) -> list[dict]:
    from ragas.dataset_schema import MultiTurnSample
    from ragas.messages import AIMessage, HumanMessage, ToolCall, ToolMessage
    from ragas.metrics import ToolCallAccuracy, ToolCallF1

    f1 = ToolCallF1()
    verdicts = []
    for case in cases:
        messages: list = [HumanMessage(content="do it")]
        for step in case["steps"]:
            messages.append(AIMessage(content="", tool_calls=[
                ToolCall(name=c["name"], args=c["args"]) for c in step]))
            messages.extend(ToolMessage(content="ok") for _ in step)
        messages.append(AIMessage(content="done"))
        sample = MultiTurnSample(user_input=messages, reference_tool_calls=[
            ToolCall(name=c["name"], args=c["args"]) for c in case["reference"]])
        accuracy = ToolCallAccuracy(strict_order=case["strict_order"])
        verdicts.append({"accuracy": float(await accuracy.multi_turn_ascore(sample)),
                         "f1": float(await f1.multi_turn_ascore(sample))})
    return verdicts


def main() -> None:
    cases = json.load(sys.stdin)
    warnings.simplefilter("ignore")
    with contextlib.redirect_stdout(io.StringIO()):
        verdicts = asyncio.run(grade(cases))
    print(json.dumps(verdicts))


if __name__ == "__main__":
    main()
