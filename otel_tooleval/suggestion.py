"""A ``conventions:`` mapping suggested by ``inspect`` from the spans no convention read.

Spans are grouped by instrumentation scope and span name (``SpanShapes``, bounded); the
guess is deliberately plain, a starting point to review:

- a span carrying an agent-name-like key (``*agent*name*``) is a run root, named by it;
- a span carrying a tool-name-like key (``*tool*name*``, ``*function*name*``, ``code.function``)
  and an input- or output-like key is a tool call: arguments from the input-like keys
  (``*tool*input*``, ``*arg*``), else an object of its bare (undotted) keys, one per
  parameter (Logfire's ``query``, ``city``); the result from the output-like keys
  (``*tool*output*``, ``*result*``, ``return``).

Tool spans of one scope and name key make one entry, restricted to the common start of their
span names; run entries come first, so a root that also carries the tool-name key is a run.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

__all__ = ["SpanShapes", "suggest_conventions", "suggestion_yaml"]

MAX_SHAPES = 200
MAX_KEYS_PER_SHAPE = 100


def _any(*patterns: str) -> re.Pattern[str]:
    return re.compile("|".join(fnmatch.translate(p) for p in patterns), re.IGNORECASE)


_AGENT = _any("*agent*name*")
_NOT_AGENT = re.compile(r".*user[._-]?agent.*", re.IGNORECASE)
#: Tool-name-like keys, best first.
_TOOL_NAMES = (_any("*tool*name*"), _any("*function*name*"), _any("code.function"))
_INPUT = _any("*tool*input*", "*tool*arg*", "*arguments*", "*input.value")
_OUTPUT = _any("*tool*output*", "*tool*result*", "*result*", "*output.value", "return")


@dataclass(slots=True)
class SpanShapes:
    """Attribute keys of spans no convention marked, by (scope, span name); bounded."""

    shapes: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    def add(self, scope: str, name: str, keys: Any) -> None:
        found = self.shapes.get((scope, name))
        if found is None:
            if len(self.shapes) >= MAX_SHAPES:
                return
            found = self.shapes[(scope, name)] = set()
        for key in keys:
            if len(found) >= MAX_KEYS_PER_SHAPE:
                break
            found.add(key)


def _first(keys: list[str], pattern: re.Pattern[str]) -> str | None:
    return next((k for k in keys if pattern.fullmatch(k)), None)


def _escape(text: str) -> str:
    return re.escape(text).replace("\\ ", " ")   # a space means itself (no re.VERBOSE)


def _prefix_pattern(names: list[str]) -> str:
    """A regex for the common start of ``names`` (the whole name when there is one)."""
    if len(names) == 1:
        return "^" + _escape(names[0]) + "$"
    common = os.path.commonprefix(names)
    return "^" + _escape(common) if common.strip() else ""


def suggest_conventions(found: SpanShapes) -> list[dict[str, Any]]:
    """``conventions:`` entries that would read the spans seen (empty: nothing to suggest)."""
    runs: dict[tuple[str, str], list[str]] = {}
    tools: dict[tuple[str, str], tuple[list[str], set[str], set[str], set[str]]] = {}
    for (scope, name), key_set in sorted(found.shapes.items()):
        keys = sorted(key_set)
        agent = _first([k for k in keys if not _NOT_AGENT.fullmatch(k)], _AGENT)
        if agent is not None:
            runs.setdefault((scope, agent), []).append(name)
            continue
        tool_name = next((k for p in _TOOL_NAMES if (k := _first(keys, p)) is not None), None)
        inputs = [k for k in keys if _INPUT.fullmatch(k) and k != tool_name]
        outputs = [k for k in keys if _OUTPUT.fullmatch(k) and k != tool_name]
        params = [k for k in keys if "." not in k and k not in outputs and k != tool_name]
        if tool_name is None or not (inputs or outputs or params):
            continue
        names, args, parameters, results = tools.setdefault(
            (scope, tool_name), ([], set(), set(), set()))
        names.append(name)
        args.update(inputs)
        parameters.update(params)
        results.update(outputs)
    out: list[dict[str, Any]] = []
    for (scope, agent), names in runs.items():
        entry: dict[str, Any] = {"scope": scope} if scope else {}
        if pattern := _prefix_pattern(names):
            entry["span_name"] = pattern
        entry["run"] = {"agent_name": agent}
        if len(entry) > 1:
            out.append(entry)
    for (scope, tool_name), (names, args, parameters, results) in tools.items():
        entry = {"scope": scope} if scope else {}
        if pattern := _prefix_pattern(names):
            entry["span_name"] = pattern
        tool: dict[str, Any] = {"name": tool_name}
        if args:
            tool["arguments"] = sorted(args)
        elif parameters:
            tool["arguments_from_attributes"] = sorted(parameters)
        if results:
            tool["result"] = sorted(results)
        entry["tool"] = tool
        out.append(entry)
    return out


def suggestion_yaml(entries: list[dict[str, Any]]) -> str:
    """The entries as the YAML of a ``conventions:`` section."""
    return yaml.safe_dump({"conventions": entries}, sort_keys=False, allow_unicode=True,
                          default_flow_style=False, width=1000)
