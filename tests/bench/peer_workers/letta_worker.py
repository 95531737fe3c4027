"""letta-evals' tool graders, driven for tests/bench/bench_peers.py.

Run with the interpreter of the venv install_peers.sh made (``.bench-peers/letta-evals``);
speaks _protocol.py's line protocol. The trajectory becomes a Letta message history, one turn
per call (a ToolCallMessage with the arguments as JSON text, then its ToolReturnMessage); the
ToolGrader (extractor ``tool_arguments``) and the Sample are built at load, and only
``ToolGrader.grade()`` (extraction and function) is timed. The message history is built afresh
before every grading call, untimed (``prepare``, see _protocol.py): bench_peers.py grades ours
on a run built just before each sample, and building thousands of objects evicts the CPU
caches, which then costs the next grading call up to ten times its warm time on either side
(a history built once and graded again and again would keep the peer's caches warm).
"""

from __future__ import annotations

import importlib.metadata
import json
from datetime import datetime, timezone
from typing import Any

from _protocol import Graders, drive, serve
from letta_client.types import ToolReturnMessage
from letta_client.types.agents import ToolCallMessage
from letta_evals.graders.tool import ToolGrader
from letta_evals.models import Sample


def history(calls: list[Any]) -> list[list[Any]]:
    date = datetime(2026, 1, 1, tzinfo=timezone.utc)
    turns = []
    for i, c in enumerate(calls):
        call_id = f"call-{i}"
        turns.append([
            ToolCallMessage.model_validate({
                "id": f"m-{i}-call", "date": date, "message_type": "tool_call_message",
                "tool_call": {"name": c["name"], "arguments": json.dumps(c["args"]),
                              "tool_call_id": call_id}}),
            ToolReturnMessage.model_validate({
                "id": f"m-{i}-return", "date": date, "message_type": "tool_return_message",
                "status": "success", "tool_call_id": call_id,
                "tool_return": json.dumps(c["result"])}),
        ])
    return turns


class _Grade:
    """One family's grading call (timed), with ``prepare`` (untimed) to rebuild its history."""

    def __init__(self, grader: Any, sample: Any, calls: list[Any]) -> None:
        self.grader, self.sample, self.calls = grader, sample, calls
        self.trajectory = history(calls)

    def prepare(self) -> None:
        self.trajectory = []            # the old history freed first, as ours is
        self.trajectory = history(self.calls)

    def __call__(self) -> tuple[float, bool | None]:
        result, _submission = drive(self.grader.grade(self.sample, self.trajectory))
        return float(result.score), result.score >= 1.0


def load(calls: list[Any], configs: dict[str, Any]) -> Graders:
    graders: Graders = {}
    for family, cfg in configs.items():
        if not family.startswith("letta "):
            continue
        grader = ToolGrader(function=cfg["function"], extractor="tool_arguments",
                            extractor_config={"tool_name": cfg["tool_name"]})
        truth = cfg["ground_truth"]
        sample = Sample(id=0, input="bench", ground_truth=(
            json.dumps(truth) if isinstance(truth, dict) else truth))
        graders[family] = _Grade(grader, sample, calls)
    return graders


if __name__ == "__main__":
    serve(importlib.metadata.version("letta-evals"), load)
