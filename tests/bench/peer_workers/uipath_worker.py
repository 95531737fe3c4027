"""The UiPath Python SDK's tool-call evaluators, driven for tests/bench/bench_peers.py.

Run with the interpreter of the venv install_peers.sh made (``.bench-peers/uipath``); speaks
_protocol.py's line protocol. The trajectory becomes OpenTelemetry ReadableSpans as the SDK
reads them (``tool.name``, ``input.value`` with the arguments as JSON, ``output.value`` as the
normalized ``{"content": ...}``). The evaluators and criteria are built at load (what a config
gives); the spans and their ``WorkloadExecution`` afresh before every grading call, untimed
(``prepare``, see _protocol.py); only ``evaluate()`` is timed.
"""

from __future__ import annotations

import importlib.metadata
import json
from typing import Any

from _protocol import Graders, drive, serve
from opentelemetry.sdk.trace import ReadableSpan
from uipath.eval.evaluators.tool_call_args_evaluator import (
    ToolCallArgsEvaluationCriteria,
    ToolCallArgsEvaluator,
)
from uipath.eval.evaluators.tool_call_count_evaluator import (
    ToolCallCountEvaluationCriteria,
    ToolCallCountEvaluator,
)
from uipath.eval.evaluators.tool_call_order_evaluator import (
    ToolCallOrderEvaluationCriteria,
    ToolCallOrderEvaluator,
)
from uipath.eval.evaluators.tool_call_output_evaluator import (
    ToolCallOutputEvaluationCriteria,
    ToolCallOutputEvaluator,
)
from uipath.eval.models import ToolCall, ToolOutput, WorkloadExecution


def output_text(result: Any) -> str:
    """A call's result as output text: peer_trajectories.output_text (this venv does not
    import the project's files)."""
    if isinstance(result, dict) and "content" in result:
        result = result["content"]
    if isinstance(result, str):
        return result
    return json.dumps(result, separators=(",", ":"))


def execution(calls: list[Any]) -> Any:
    """The run as the SDK reads it: one ReadableSpan per call, in a WorkloadExecution."""
    spans = [ReadableSpan(name=f"tool {c['name']}", attributes={
        "tool.name": c["name"], "input.value": json.dumps(c["args"]),
        "output.value": json.dumps({"content": output_text(c["result"])})}) for c in calls]
    return WorkloadExecution(agent_input=None, workload_output="", workload_trace=spans)


class _Grade:
    """One family's ``evaluate()`` (timed), with ``prepare`` (untimed) to rebuild its spans."""

    def __init__(self, evaluator: Any, criteria: Any, calls: list[Any]) -> None:
        self.evaluator, self.criteria, self.calls = evaluator, criteria, calls
        self.execution: Any = None

    def prepare(self) -> None:
        self.execution = None           # the old spans freed first, as ours is
        self.execution = execution(self.calls)

    def __call__(self) -> tuple[float, bool | None]:
        result = drive(self.evaluator.evaluate(self.execution, self.criteria))
        return float(result.score), None


def load(calls: list[Any], configs: dict[str, Any]) -> Graders:
    graders: Graders = {}

    def add(family: str, evaluator: Any, criteria: Any) -> None:
        graders[family] = _Grade(evaluator, criteria, calls)

    for family, cfg in configs.items():
        if family.startswith("order "):
            add(family, ToolCallOrderEvaluator.model_validate(
                {"id": family, "evaluatorConfig": {"strict": cfg["strict"]}}),
                ToolCallOrderEvaluationCriteria(tool_calls_order=cfg["tool_calls_order"]))
        elif family == "count":
            add(family, ToolCallCountEvaluator.model_validate(
                {"id": family, "evaluatorConfig": {"strict": False}}),
                ToolCallCountEvaluationCriteria(tool_calls_count={
                    name: tuple(spec) for name, spec in cfg["tool_calls_count"].items()}))
        elif family == "args":
            add(family, ToolCallArgsEvaluator.model_validate(
                {"id": family, "evaluatorConfig": {"strict": False, "subset": False}}),
                ToolCallArgsEvaluationCriteria(tool_calls=[
                    ToolCall(name=e["name"], args=e["args"]) for e in cfg["tool_calls"]]))
        elif family == "output":
            add(family, ToolCallOutputEvaluator.model_validate(
                {"id": family, "evaluatorConfig": {"strict": False}}),
                ToolCallOutputEvaluationCriteria(tool_outputs=[
                    ToolOutput(name=e["name"], output=e["output"])
                    for e in cfg["tool_outputs"]]))
    return graders


if __name__ == "__main__":
    serve(importlib.metadata.version("uipath"), load)
