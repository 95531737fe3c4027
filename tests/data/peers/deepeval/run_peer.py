"""DeepEval's ToolCorrectnessMetric (4.3.1) on the cases read from stdin (tests/support/peers.py).

A case: ``{"params": {threshold, evaluation_params: [names], should_exact_match,
should_consider_ordering, strict_mode}, "expected": [tool], "called": [tool]}``, a tool being
``{name, type, input_parameters, output}``. A verdict: ``{"score", "success"}``, or
``{"error": "<type>"}`` when the metric raises. Deterministic: no ``available_tools``, no model
call. The last stdout line is the JSON list of verdicts.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

os.environ.setdefault("OPENAI_API_KEY", "sk-offline-not-used")   # a model object is built, never called


def main() -> None:
    cases = json.load(sys.stdin)
    with contextlib.redirect_stdout(io.StringIO()):
        from deepeval.metrics import ToolCorrectnessMetric
        from deepeval.test_case import LLMTestCase, ToolCall, ToolCallParams, ToolCallType

        def tool(t: dict) -> ToolCall:
            return ToolCall(name=t["name"], type=ToolCallType[t.get("type", "FUNCTION")],
                            input_parameters=t.get("input_parameters"), output=t.get("output"))

        verdicts = []
        metrics: dict[str, ToolCorrectnessMetric] = {}   # building one costs ~0.3 s: share
        for case in cases:
            p = case["params"]
            key = json.dumps(p, sort_keys=True)
            metric = metrics.get(key) or ToolCorrectnessMetric(
                threshold=p.get("threshold", 0.5),
                evaluation_params=[ToolCallParams[n] for n in p.get("evaluation_params", [])],
                should_exact_match=p.get("should_exact_match", False),
                should_consider_ordering=p.get("should_consider_ordering", False),
                strict_mode=p.get("strict_mode", False), async_mode=False,
                include_reason=False)
            metrics[key] = metric
            test_case = LLMTestCase(input="q", actual_output="a",
                                    tools_called=[tool(t) for t in case["called"]],
                                    expected_tools=[tool(t) for t in case["expected"]])
            try:
                metric.measure(test_case, _show_indicator=False)
                verdicts.append({"score": float(metric.score), "success": bool(metric.success)})
            except Exception as exc:  # noqa: BLE001  (the peer's crash is the verdict)
                verdicts.append({"error": type(exc).__name__})
    print(json.dumps(verdicts))


if __name__ == "__main__":
    main()
