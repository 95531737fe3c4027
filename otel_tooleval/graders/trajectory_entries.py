"""The expected entries of ``tool_trajectory``, and whether a call matches one.

``_Entry`` is an ``expected`` item as the grader holds it; ``args_match`` is SEMANTICS 3's
partial deep match; ``_args_text``, ``_needles`` and ``_differs`` decide from a call's argument
text alone, where they can, that it matches (it is the entry's ``json.dumps``) or that it cannot
(a needed string value is missing), so most calls are never decoded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model import ToolCall
from ..values import unwrap_arguments

__all__ = ["_Entry", "_args_text", "_by_tool", "_differs", "_needles", "args_match"]


def args_match(expected: Any, actual: Any) -> bool:
    """SEMANTICS 3: partial deep equality without type coercion (but ``1 == 1.0``).

    Every key of an expected object must be present with a matching value (nested objects are
    partial too); lists need equal length and match element by element.
    """
    cls = expected.__class__   # exact types first: the config's dicts and strings
    if cls is str:
        return isinstance(actual, str) and expected == actual
    if cls is dict:
        if actual.__class__ is not dict and not isinstance(actual, Mapping):
            return False
        for key, value in expected.items():
            if key not in actual:
                return False
            if value.__class__ is str:      # the str case below, without a call
                got = actual[key]
                if not (got.__class__ is str or isinstance(got, str)) or value != got:
                    return False
            elif not args_match(value, actual[key]):
                return False
        return True
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            key in actual and args_match(value, actual[key]) for key, value in expected.items())
    if isinstance(expected, list):
        return (isinstance(actual, list) and len(actual) == len(expected)
                and all(args_match(e, a) for e, a in zip(expected, actual)))
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if isinstance(expected, (int, float)):
        return isinstance(actual, (int, float)) and expected == actual
    if expected is None:
        return actual is None
    return isinstance(actual, str) and expected == actual


@dataclass(frozen=True, slots=True)
class _Entry:
    index: int
    tool: str
    args: dict[str, Any] | None
    limit: float | None
    #: ``args`` as ``json.dumps`` writes it by default, when a call recording exactly that text
    #: is sure to match (``_args_text``): one string comparison instead of decoding the call's
    #: arguments. None when no such shortcut exists.
    text: str | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", _args_text(self.args))

    @property
    def what(self) -> str:
        return self.tool + (" with args" if self.args is not None else "")

    @property
    def label(self) -> str:
        return f"entry {self.index} ({self.what})"

    def matches(self, call: ToolCall) -> bool:
        return call.name == self.tool and self.args_hold(call)

    def args_hold(self, call: ToolCall) -> bool:
        """The arguments part of ``matches``, for a call of this entry's tool."""
        if self.args is None:
            return True
        raw = call.raw_arguments
        if raw.__class__ is str and raw == self.text and (
                call.envelope is None or call.envelope.arguments_from is None):
            return True
        # A span that recorded no arguments stands for a call with no arguments.
        actual = call.arguments
        return args_match(self.args, {} if actual is None else actual)

    def latency(self, call: ToolCall) -> tuple[int, int]:
        """(neutral, hit) of this entry's latency aspect when matched to ``call``."""
        if self.limit is None:
            return 0, 0
        duration = call.duration_ms
        if duration is None:
            return 1, 0
        return 0, int(duration <= self.limit)


def _args_text(args: Mapping[str, Any] | None) -> str | None:
    """The text whose decoding is sure to match ``args``: ``json.dumps(args)``.

    Decoding it gives back ``args`` itself (JSON values only, string keys: the config's
    validator saw to that), and ``args_match`` holds for equal values, unless the decoder
    unwraps it as a framework envelope (an object with a ``kwargs`` or ``type`` key), or a
    call's arguments are taken out of it as a generic one (``values.unwrap_arguments``):
    those get no shortcut. Agents written in Python record ``json.dumps`` text more often
    than not, so a matching call is usually found without decoding its arguments.
    """
    if args is None or "kwargs" in args or "type" in args or unwrap_arguments(args) is not args:
        return None
    try:
        return json.dumps(args)
    except (TypeError, ValueError):
        return None


#: An expected string value whose only JSON spelling without escapes is itself in quotes.
_PLAIN = re.compile(r"[^\"'\\#\x00-\x1f]*")
#: Two string literals Python's parser would join into one ("a" "b"): a quote, whitespace or
#: line breaks, a quote. (A comment between them needs "#", a line continuation a backslash.)
_ADJACENT = re.compile(r'"[ \t\f\r\n\v]*"')


def _needles(args: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The quoted texts a call's argument text must hold to match ``args`` (``_differs``):
    each top-level string value free of quotes, backslashes, "#" and control characters."""
    if args is None:
        return ()
    return tuple(f'"{value}"' for value in args.values()
                 if value.__class__ is str and _PLAIN.fullmatch(value))


def _differs(needles: tuple[str, ...], raw: str) -> bool:
    """True when no decoding of the argument text ``raw`` can match the entry: one of its
    ``needles`` is missing, and ``raw`` is written so that every string value decoded from it
    (as JSON or as a Python literal, through an envelope or not) is either a run of its
    characters between two double quotes or holds a line break or a backslash, which no
    needle's value does (``_PLAIN``). That holds when ``raw`` has no escape but ``\\n`` (every
    backslash followed by an "n": in a string, a line break, or a backslash and an "n" in a
    raw Python string; outside one, text no decoder reads), no single quote, no "#" and no
    two adjacent string literals; otherwise False: decode. (A coding agent's file contents
    are written with ``\\n`` escapes: those calls are ruled out too.)
    """
    for needle in needles:
        if needle not in raw:
            return not (("\\" in raw and raw.count("\\") != raw.count("\\n")) or "'" in raw
                        or "#" in raw or (
                            # Two literals can be adjacent only where a quote is followed by a
                            # quote, a space or another whitespace character, none of which is
                            # printable: three scans in C before the regex (a third of its
                            # cost on a coding agent's arguments, where none of them is found).
                            ('""' in raw or '" ' in raw or not raw.isprintable())
                            and _ADJACENT.search(raw)))
    return False


def _by_tool(entries: Sequence[_Entry]) -> dict[str, list[_Entry]]:
    by_tool: dict[str, list[_Entry]] = {}
    for e in entries:
        by_tool.setdefault(e.tool, []).append(e)
    return by_tool
