"""Which calls of a run each verdict rests on, read from the results' details.

Grader families report call positions under their own keys (``checks[].calls`` of tool-calls,
``entries[].call`` of tool_trajectory, ``lcs_calls`` of tool-call-order, ``unexpected_calls`` of
equal_function_sets, ...). Rather than one reader per family, the details are walked generically,
so custom graders that follow the same naming get marks too:

- ``unexpected_calls``, ``extra_calls``, ``violating_calls``, the ``calls`` of a ``disallowed``
  check and the ``call`` of an entry whose latency verdict is ``miss`` broke the check; but the
  first three under a verdict that holds (a grader that passed anyway: an exact trajectory
  scoring over its threshold, a function-set F1 over its bar) are *extra*, calls the grader allowed,
  drawn neutral rather than as failures;
- ``call``, ``lcs_calls``, ``matched_calls`` and a list under ``matched`` satisfied their part;
- a list under ``calls`` follows the nearest verdict above it (``passed``, ``met``, ``matched``,
  ``ok``, else the result's own): satisfied when it holds, else *partial*, a call that counted
  towards a check that still failed overall;
- each entry of ``violations`` (``otel_tooleval.violations``: ``{call, span_id, tool, reason}``)
  broke the rule its ``reason`` names, or is *extra* under a verdict that holds; a call that
  is already marked broken keeps its first reason rather than gaining a second wording of it.

A position is a plain int that indexes ``run.calls``; anything else is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model import GradeResult
from ..violations import KEY

__all__ = ["BROKE", "EXTRA", "PARTIAL", "SATISFIED", "Mark", "call_marks"]

SATISFIED = "satisfied"
EXTRA = "extra"              # not expected, but allowed: the grader passed with it
PARTIAL = "partial"
BROKE = "broke"
_RANK = {EXTRA: 0, SATISFIED: 1, PARTIAL: 2, BROKE: 3}

_BAD_KEYS = frozenset({"unexpected_calls", "extra_calls", "violating_calls"})
_GOOD_KEYS = frozenset({"call", "lcs_calls", "matched_calls", "matched"})
_POSITION_KEYS = _BAD_KEYS | _GOOD_KEYS | {"calls"}
_CONTEXT_KEYS = ("passed", "met", "matched", "ok")
_MAX_DEPTH = 8
_MAX_NODES = 20_000          # a custom grader's details may be large; marks are best effort
_MAX_REASONS = 3


@dataclass(frozen=True, slots=True)
class Mark:
    """How one call figured in one result: the worst verdict, and each (verdict, why) behind it.

    The reasons are short texts made by the graders or from their details' names, no values.
    """

    verdict: str
    reasons: tuple[tuple[str, str], ...]


class _Walk:
    def __init__(self, n_calls: int) -> None:
        self.n_calls = n_calls
        self.nodes = 0
        self.found: dict[int, tuple[str, list[tuple[str, str]]]] = {}

    def add(self, position: int, verdict: str, reason: str) -> None:
        if position.__class__ is not int or not 0 <= position < self.n_calls:
            return
        held = self.found.get(position)
        if held is None:
            self.found[position] = (verdict, [(verdict, reason)])
            return
        worst = verdict if _RANK[verdict] > _RANK[held[0]] else held[0]
        reasons = held[1]
        if (verdict, reason) not in reasons:
            reasons.append((verdict, reason))
        self.found[position] = (worst, reasons)

    def visit(self, node: Any, holds: bool, reason: str, depth: int) -> None:
        self.nodes += 1
        if depth > _MAX_DEPTH or self.nodes > _MAX_NODES:
            return
        if isinstance(node, Mapping):
            self._mapping(node, holds, reason, depth)
        elif isinstance(node, (list, tuple)):
            for item in node:
                if isinstance(item, (Mapping, list, tuple)):
                    self.visit(item, holds, reason, depth + 1)

    def _mapping(self, node: Mapping[Any, Any], holds: bool, reason: str, depth: int) -> None:
        for key in _CONTEXT_KEYS:
            value = node.get(key)
            if isinstance(value, bool):
                holds = value
                break
        reason = _reason_of(node) or reason
        for key, value in node.items():
            if key.__class__ is not str:
                continue
            if key == KEY:
                self._violations(value, holds)
            elif key in _POSITION_KEYS:
                positions = _positions(key, value)
                if positions:
                    verdict = _verdict(key, node, holds)
                    why = _with_key(reason, key, node)
                    for position in positions:
                        self.add(position, verdict, why)
                # else e.g. [{"call": j, "args": ...}]: calls shown, not calls matched
            elif isinstance(value, (Mapping, list, tuple)):
                self.visit(value, holds, reason, depth + 1)


    def _violations(self, entries: Any, holds: bool) -> None:
        if not isinstance(entries, (list, tuple)):
            return
        verdict = EXTRA if holds else BROKE
        for entry in entries:
            self.nodes += 1
            if self.nodes > _MAX_NODES:
                return
            if not isinstance(entry, Mapping):
                continue
            position = entry.get("call")
            if position.__class__ is not int:
                continue
            reason = entry.get("reason")
            held = self.found.get(position)
            if held is not None and held[0] == verdict:
                continue
            self.add(position, verdict, reason if isinstance(reason, str) and reason
                     else "violation")


def _positions(key: str, value: Any) -> list[int]:
    """The positions under ``key``: an int only under ``call`` (``matched: 2`` and a class's
    ``calls: 3`` are counts), else a list of ints."""
    if value.__class__ is int:
        return [value] if key == "call" else []
    if isinstance(value, (list, tuple)) and all(v.__class__ is int for v in value):
        return list(value)
    return []


def _verdict(key: str, node: Mapping[Any, Any], holds: bool) -> str:
    if key in _BAD_KEYS:
        return EXTRA if holds else BROKE
    if key == "call":
        return BROKE if node.get("latency") == "miss" else SATISFIED
    if key == "calls":
        if node.get("check") == "disallowed":
            return BROKE
        return SATISFIED if holds else PARTIAL
    return SATISFIED


def _reason_of(node: Mapping[Any, Any]) -> str | None:
    message = node.get("message")
    if isinstance(message, str) and message:
        return message
    tool = node.get("tool")
    if isinstance(tool, str):
        index = node.get("index", node.get("entry"))
        return f"expected {tool!r}" + (f" (entry {index})" if index.__class__ is int else "")
    name = node.get("name")
    if isinstance(name, str) and name:
        return f"class {name!r}" if "matched_by" in node else repr(name)
    check = node.get("check")
    return f"{check} check" if isinstance(check, str) and check else None


def _with_key(reason: str, key: str, node: Mapping[Any, Any]) -> str:
    if key == "unexpected_calls":
        return "unexpected call"
    if key == "extra_calls":
        return "extra call beyond the expected ones"
    if key == "lcs_calls":
        return "in the expected order"
    if key == "call" and node.get("latency") == "miss":
        limit = node.get("max_duration_ms")
        if isinstance(limit, (int, float)):
            return f"{reason}: over the {limit:g} ms limit"
    return reason


def call_marks(result: GradeResult, n_calls: int) -> dict[int, Mark]:
    """Call position -> how that call figured in ``result``; calls not referenced are absent."""
    walk = _Walk(n_calls)
    walk.visit(result.details, result.passed, result.name, 0)
    return {position: Mark(verdict, tuple(reasons[:_MAX_REASONS]))
            for position, (verdict, reasons) in sorted(walk.found.items())}
