"""The scripted model for DSPy's ReAct, which asks for text fields, not native tool calls.

``dspy.ReAct`` builds a signature with the text output fields ``next_thought``,
``next_tool_name`` and ``next_tool_args`` (one tool per step, then the built-in ``finish``
tool) and answers with a ``ChainOfThought`` extract call (``reasoning``, ``answer``).
``dspy.ChatAdapter(use_native_function_calling=True)`` only applies to signatures with a
``dspy.ToolCalls`` output field, which ReAct's has not, so the shared scripted server's native
tool calls are never asked for. This plays the same weather script in ChatAdapter's
``[[ ## field ## ]]`` text format, one call per step because ReAct cannot issue two at once:

0. lookup_city(query="paris")  1. get_weather(city="Paris")  2. get_weather(city="Lyon")
3. convert_temp(celsius=21)  4. finish()  then the extract call answers FINAL_ANSWER.

It reuses ``scripted_openai.serve`` and only swaps the answer function while serving.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import scripted_openai
from scripted_openai import FINAL_ANSWER, SCRIPT

#: ReAct's steps: the shared script flattened to one call per step, then DSPy's ``finish``.
STEPS = [call for turn in SCRIPT for call in turn] + [("finish", {})]


def _fields(**fields: str) -> str:
    body = "".join(f"[[ ## {name} ## ]]\n{value}\n\n" for name, value in fields.items())
    return body + "[[ ## completed ## ]]"


def _answer(body: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
    messages = body.get("messages") or []
    system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
    user = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
    if isinstance(user, list):  # content parts
        user = "".join(p.get("text", "") for p in user if isinstance(p, dict))
    if "next_tool_name" not in system:  # ReAct's extract (ChainOfThought) call
        return _fields(reasoning="All four observations are in the trajectory.",
                       answer=FINAL_ANSWER), []
    step = len(set(re.findall(r"\[\[ ## tool_name_(\d+) ## \]\]", user)))
    name, args = STEPS[min(step, len(STEPS) - 1)]
    return _fields(next_thought=f"Step {step}: call {name}.", next_tool_name=name,
                   next_tool_args=json.dumps(args)), []


@contextmanager
def serve(port: int = 0) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """``scripted_openai.serve``, answering in DSPy's ChatAdapter text format."""
    shared = scripted_openai._answer
    scripted_openai._answer = _answer
    try:
        with scripted_openai.serve(port) as served:
            yield served
    finally:
        scripted_openai._answer = shared
