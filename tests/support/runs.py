"""Build runs from short call lists, through the real span → run path (SpanRecord, build_run)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from otel_tooleval.config import load_config
from otel_tooleval.grading import grade_run
from otel_tooleval.model import AgentRun, GradeResult, SpanRecord
from otel_tooleval.trajectory import RunPolicy, build_run

TRACE = 0x0AF7651916CD43DD8448EB211C80319C
ROOT = 0x1


def call(name: str, args: Any = None, result: Any = None, *, step: int | None = None,
         pending: bool = False, error: str | None = None, attrs: dict[str, Any] | None = None,
         duration_ms: float | None = None) -> dict[str, Any]:
    """One tool call of a scripted run (GenAI semconv attributes).

    ``args``/``result`` that are not strings are recorded as JSON text, as instrumentations do.
    """
    return {"name": name, "args": args, "result": result, "step": step, "pending": pending,
            "error": error, "attrs": attrs or {}, "duration_ms": duration_ms}


def records(calls: Sequence[dict[str, Any]], *, agent: str = "agent",
            root_attrs: dict[str, Any] | None = None,
            outputs: Sequence[str] = ()) -> list[SpanRecord]:
    """Root + model-call spans + tool spans; a call's ``step`` opens that many model turns.

    ``root_attrs`` are added to the root span (e.g. ``final_result``, a ground truth);
    ``outputs`` are assistant texts of model calls made after the last tool call.
    """
    root = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
            **(root_attrs or {})}
    out = [SpanRecord(TRACE, ROOT, 0, f"invoke_agent {agent}", 0, 10**15, root)]
    t = 1_000
    sid = 0x100
    current_step = -1
    for c in calls:
        want = c["step"] if c["step"] is not None else max(current_step, 0)
        while current_step < want:
            current_step += 1
            sid += 1
            out.append(SpanRecord(TRACE, sid, ROOT, "chat m", t, t + 10,
                                  {"gen_ai.operation.name": "chat"}))
            t += 20
        attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool",
                                 "gen_ai.tool.name": c["name"]}
        if c["args"] is not None:
            attrs["gen_ai.tool.call.arguments"] = (
                c["args"] if isinstance(c["args"], str) else json.dumps(c["args"]))
        if c["result"] is not None:
            attrs["gen_ai.tool.call.result"] = (
                c["result"] if isinstance(c["result"], str) else json.dumps(c["result"]))
        attrs.update(c["attrs"])
        sid += 1
        span_ns = 10 if c["duration_ms"] is None else int(c["duration_ms"] * 1_000_000)
        end = None if c["pending"] else t + span_ns
        out.append(SpanRecord(TRACE, sid, ROOT, f"execute_tool {c['name']}", t, end, attrs,
                              error=c["error"]))
        t += span_ns + 10
    for text in outputs:
        sid += 1
        message = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}]}])
        out.append(SpanRecord(TRACE, sid, ROOT, "chat m", t, t + 10,
                              {"gen_ai.operation.name": "chat",
                               "gen_ai.output.messages": message}))
        t += 20
    return out


def run_of(calls: Sequence[dict[str, Any]], policy: RunPolicy | None = None,
           **kwargs: Any) -> AgentRun:
    recs = records(calls, **kwargs)
    return build_run(recs[0], recs[1:], policy or RunPolicy())


def grade(config: Any, calls: Sequence[dict[str, Any]], **kwargs: Any) -> GradeResult:
    """Grade a scripted run with the single grader of ``config``."""
    cfg = load_config(config)
    report = grade_run(run_of(calls, cfg.policy, **kwargs), cfg)
    assert report is not None and len(report.results) == 1
    return report.results[0]
