"""LangChain agentevals 0.0.9 on differential-test cases (runs in the peers' interpreter).

Reads a JSON list of cases on stdin: ``{mode, args_mode, overrides, outputs, reference}`` where
``outputs`` and ``reference`` are OpenAI-style message lists (or ``{messages: [...]}``) and an
override is a mode, a key-path list, or ``{"callable": name}`` naming a function of
``matchers.py``. Calls the real public API, ``create_trajectory_match_evaluator``, once per case
and prints one JSON list of verdicts (``{"score": 0 or 1}`` or ``{"error": text}``) as the last
line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import matchers
from agentevals.trajectory.match import create_trajectory_match_evaluator


def overrides_of(raw):
    if not raw:
        return None
    out = {}
    for tool, value in raw.items():
        out[tool] = getattr(matchers, value["callable"]) if isinstance(value, dict) else value
    return out


def main() -> None:
    cases = json.load(sys.stdin)
    verdicts = []
    for case in cases:
        evaluator = create_trajectory_match_evaluator(
            trajectory_match_mode=case["mode"], tool_args_match_mode=case["args_mode"],
            tool_args_match_overrides=overrides_of(case.get("overrides")))
        try:
            result = evaluator(outputs=case["outputs"], reference_outputs=case["reference"])
        except Exception as exc:  # noqa: BLE001  (reported per case, compared by the test)
            verdicts.append({"error": f"{type(exc).__name__}: {exc}"})
            continue
        verdicts.append({"score": 1.0 if result["score"] else 0.0})
    print(json.dumps(verdicts))


if __name__ == "__main__":
    main()
