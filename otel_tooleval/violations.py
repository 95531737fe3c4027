"""The calls that broke a grader's rule: one key in ``details``, read back by every front door.

A grader that can tell which calls broke its rule (a disallowed call, an argument mismatch, a
call nobody expected, a call over a count) lists them in its result's ``details`` under
``violations``, one entry per call and reason::

    {"call": 3, "span_id": "00f067aa0ba902b7", "tool": "delete_file",
     "reason": "disallowed '^delete'"}

``call`` is the call's position in the run, ``span_id`` its span id (16 hex digits; null for a
call read from a span without one), ``tool`` the name as recorded; ``reason`` names the rule, in
words and tool names only, never argument or result values. Custom graders may add the same key.

The offending calls of a run are those listed by the results that did *not* pass: a grader
that passed despite a listed call (a threshold below 1) tolerated it. Those calls carry
``tooleval.violation=true`` and ``tooleval.violation.graders`` wherever their spans are still in
hand before export (``ToolEvalSpanProcessor``, ``ToolEvalSpanExporter`` and ``serve`` hold them
for their run's verdict), and are marked in ``grade``'s outputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .model import GradeResult, ToolCall

__all__ = ["GRADERS_ATTRIBUTE", "KEY", "VIOLATION_ATTRIBUTE", "flagged_calls", "flagged_spans",
           "mark_attributes", "names_calls", "violation", "violations", "violations_of"]

KEY = "violations"
VIOLATION_ATTRIBUTE = "tooleval.violation"
GRADERS_ATTRIBUTE = "tooleval.violation.graders"


def violation(call: ToolCall, reason: str) -> dict[str, Any]:
    """One entry of ``details["violations"]``."""
    return {"call": call.index,
            "span_id": format(call.span_id, "016x") if call.span_id else None,
            "tool": call.name, "reason": reason}


def violations(offending: Iterable[tuple[ToolCall, str]]) -> list[dict[str, Any]]:
    """``violation`` for many (call, reason) pairs, in their order; one loop for a grader that
    lists a violation per call of a long run."""
    return [{"call": call.index,
             "span_id": format(call.span_id, "016x") if call.span_id else None,
             "tool": call.name, "reason": reason} for call, reason in offending]


def violations_of(result: GradeResult) -> list[Mapping[str, Any]]:
    """The entries a failing result lists (none for a result that passed); malformed entries,
    which only a custom grader could write, are left out."""
    if result.passed:
        return []
    found = result.details.get(KEY) if isinstance(result.details, Mapping) else None
    if not isinstance(found, (list, tuple)):
        return []
    return [v for v in found if isinstance(v, Mapping)]


def _span_id(entry: Mapping[str, Any]) -> int | None:
    text = entry.get("span_id")
    if not isinstance(text, str) or len(text) != 16:
        return None
    try:
        value = int(text, 16)
    except ValueError:
        return None
    return value or None


def _collect(results: Iterable[GradeResult], key: Any) -> dict[Any, list[str]]:
    out: dict[Any, list[str]] = {}
    for result in results:
        for entry in violations_of(result):
            found = key(entry)
            if found is None:
                continue
            graders = out.setdefault(found, [])
            if result.name not in graders:
                graders.append(result.name)
    return out


def flagged_spans(results: Iterable[GradeResult]) -> dict[int, list[str]]:
    """Span id -> names of the failing graders that list a call of that span, in result order."""
    return _collect(results, _span_id)


def flagged_calls(results: Iterable[GradeResult]) -> dict[int, list[str]]:
    """Call position -> names of the failing graders that list it, in result order."""
    return _collect(results, lambda e: e.get("call") if e.get("call").__class__ is int else None)


def mark_attributes(graders: Sequence[str]) -> dict[str, Any]:
    """The attributes an offending tool span carries."""
    return {VIOLATION_ATTRIBUTE: True, GRADERS_ATTRIBUTE: list(graders)}


def names_calls(graders: Iterable[Any]) -> bool:
    """Whether any of the configured graders may list violations (``names_calls`` on the
    grader: the built-in families that can, and custom graders, which may)."""
    return any(getattr(g, "names_calls", False) for g in graders)
