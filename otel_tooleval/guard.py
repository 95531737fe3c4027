"""The live guard's rules (the ``guard:`` config section): pure, no OpenTelemetry.

A rule is checked for one tool call against what its run did so far (``GuardRun``):

- ``disallowed``: entries shaped like the tool-calls family's (``name`` pattern, ``command`` /
  ``path`` / ``args`` conditions), matched the same way (``graders.tool_calls.Matcher``);
- ``allowed``: names or patterns, each matching the whole tool name;
- ``max_calls``: calls per run; ``max_calls_per_tool``: calls per run of one tool name;
- ``max_repeats``: N identical calls (same name, arguments equal by value) are allowed in a
  run, the next one is a loop.

Rules are tried in that order and the first broken one is the violation. Rules that read
arguments (``disallowed`` entries with conditions, ``max_repeats``) can be put off until the
arguments are known: ``check`` takes ``arguments=UNKNOWN`` and ``check_arguments`` finishes the
job (``live_guard`` does this for frameworks that record arguments only at a tool span's end).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from .graders.matching import UserRegex, compile_user, matches
from .graders.pairing import value_key
from .graders.tool_calls import Matcher, SequenceMatch
from .values import decode_value

__all__ = ["RULES", "UNKNOWN", "GuardConfig", "GuardMatch", "GuardRules", "GuardRun",
           "GuardViolation"]

#: The rule names, in the order they are tried (the value of ``tooleval.guard.rule``).
RULES = ("disallowed", "allowed", "max_calls_per_tool", "max_calls", "max_repeats")

#: ``arguments`` not known yet (the span has no arguments attribute at its start).
UNKNOWN: Any = object()

#: Tool names whose name-rule outcome a rule set remembers (the rest are searched each time).
_MAX_REMEMBERED_NAMES = 1024


class GuardMatch(SequenceMatch):
    """A ``guard.disallowed`` entry: a tool-calls matcher without ``result`` (a call is
    checked when it starts, before it has one)."""

    @model_validator(mode="before")
    @classmethod
    def _no_result(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "result" in data:
            raise ValueError("result is not supported in guard.disallowed: a call is checked "
                             "when it starts, before it has a result")
        return data


class GuardConfig(BaseModel):
    """Rules the live processor checks as each tool call starts (see docs/guard.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    disallowed: list[GuardMatch] = Field(
        default_factory=list,
        description="calls that must not happen: tool-calls entries (name pattern, command, "
                    "path, args conditions); a string is a name pattern")
    allowed: list[StrictStr] | None = Field(
        default=None, description="the only tools that may be called: names or patterns, "
                                  "each matching the whole tool name")
    max_calls: StrictInt | None = Field(default=None, ge=0, description="tool calls per run")
    max_calls_per_tool: dict[StrictStr, StrictInt] = Field(
        default_factory=dict, description="tool name -> calls per run of that tool")
    max_repeats: StrictInt | None = Field(
        default=None, ge=1, description="identical calls (same name, equal arguments) allowed "
                                        "in a run; the next one is a loop")

    @field_validator("disallowed", mode="before")
    @classmethod
    def _strings_are_names(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"name": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("allowed")
    @classmethod
    def _allowed_patterns(cls, value: list[str] | None) -> list[str] | None:
        for pattern in value or ():
            _whole(pattern)
        return value

    @field_validator("max_calls_per_tool")
    @classmethod
    def _limits(cls, value: dict[str, int]) -> dict[str, int]:
        for tool, limit in value.items():
            if limit < 0:
                raise ValueError(f"{tool}: must be 0 or more, got {limit}")
        return value

    @property
    def active(self) -> bool:
        """Whether any rule is set."""
        return bool(self.disallowed or self.allowed is not None or self.max_calls is not None
                    or self.max_calls_per_tool or self.max_repeats is not None)


def _whole(pattern: str) -> UserRegex:
    """An allow-list entry: the pattern must match the whole name (``search`` would let
    ``search`` allow ``research_and_delete``)."""
    return compile_user(f"^(?:{pattern})$")


@dataclass(frozen=True, slots=True)
class GuardViolation:
    """A tool call that breaks a guard rule.

    ``rule`` is one of ``RULES``; ``entry`` the index of the broken ``disallowed`` entry;
    ``limit`` and ``count`` the limit of a count rule and the calls it counted, this one
    included. ``explanation`` names the tool and the rule, never argument values. ``trace_id``
    and ``span_id`` are those of the offending tool span (0 when ``check_call`` answered for
    a call whose span has not started); ``at`` says when it was found: ``start``, ``end`` (the
    arguments were recorded only then) or ``check`` (``check_call``).
    """

    rule: str
    tool: str
    explanation: str
    entry: int | None = None
    limit: int | None = None
    count: int | None = None
    trace_id: int = 0
    span_id: int = 0
    at: str = "start"


@dataclass(slots=True)
class GuardRun:
    """What a run did so far, as the guard counts it."""

    calls: int = 0
    per_tool: dict[str, int] = field(default_factory=dict)
    repeats: dict[Hashable, int] = field(default_factory=dict)


class GuardRules:
    """A compiled ``GuardConfig``. ``check`` is called on the application thread: name rules
    are remembered per tool name, arguments are decoded only when a rule reads them."""

    def __init__(self, config: GuardConfig) -> None:
        self.config = config
        self.disallowed = [Matcher(m) for m in config.disallowed]
        #: Entries that read arguments (put off while the arguments are unknown).
        self.argument_entries = tuple(i for i, m in enumerate(self.disallowed) if m.filters)
        self.allowed = ([_whole(p) for p in config.allowed]
                        if config.allowed is not None else None)
        self.max_calls = config.max_calls
        self.per_tool = dict(config.max_calls_per_tool)
        self.max_repeats = config.max_repeats
        self.reads_arguments = bool(self.argument_entries) or self.max_repeats is not None
        self._names: dict[str, tuple[tuple[int, ...], bool]] = {}
        self._lock = threading.Lock()   # the count updates of one run from several threads

    def _by_name(self, name: str) -> tuple[tuple[int, ...], bool]:
        """The disallowed entries whose name pattern matches, and whether the allow-list
        lets the name through."""
        known = self._names.get(name)
        if known is None:
            hits = tuple(i for i, m in enumerate(self.disallowed) if matches(m.name, name))
            allowed = self.allowed is None or any(p.test(name) for p in self.allowed)
            known = hits, allowed
            if len(self._names) < _MAX_REMEMBERED_NAMES:
                self._names[name] = known
        return known

    def check(self, run: GuardRun, name: str, arguments: Any = UNKNOWN, *,
              record: bool = True) -> GuardViolation | None:
        """The first rule this call breaks, counting it in ``run`` when ``record``.

        With ``arguments=UNKNOWN`` the rules that read arguments are skipped (and the call is
        not counted for ``max_repeats``): ``check_arguments`` does that part later.
        """
        hits, allowed = self._by_name(name)
        args = UNKNOWN if arguments is UNKNOWN else decode_value(arguments)
        found = self._disallowed(hits, name, args, name_only=args is UNKNOWN)
        if found is None and not allowed:
            found = GuardViolation("allowed", name, f"{name!r} is not in guard.allowed")
        with self._lock:
            calls = run.calls + 1
            tool_calls = run.per_tool.get(name, 0) + 1
            if record:
                run.calls = calls
                run.per_tool[name] = tool_calls
        if found is None:
            limit = self.per_tool.get(name)
            if limit is not None and tool_calls > limit:
                found = GuardViolation(
                    "max_calls_per_tool", name,
                    f"call {tool_calls} of {name!r} in this run; "
                    f"guard.max_calls_per_tool allows {limit}", limit=limit, count=tool_calls)
        if found is None and self.max_calls is not None and calls > self.max_calls:
            found = GuardViolation(
                "max_calls", name, f"tool call {calls} of this run ({name!r}); "
                f"guard.max_calls allows {self.max_calls}", limit=self.max_calls, count=calls)
        if args is not UNKNOWN:
            repeat = self._repeat(run, name, args, record)
            if found is None:
                found = repeat
        return found

    def check_arguments(self, run: GuardRun, name: str, arguments: Any, *,
                        record: bool = True) -> GuardViolation | None:
        """The rules ``check`` put off for a call checked with unknown arguments."""
        args = decode_value(arguments)
        hits, _ = self._by_name(name)
        found = self._disallowed(hits, name, args, name_only=False, with_filters_only=True)
        repeat = self._repeat(run, name, args, record)
        return found if found is not None else repeat

    def _disallowed(self, hits: tuple[int, ...], name: str, args: Any, *, name_only: bool,
                    with_filters_only: bool = False) -> GuardViolation | None:
        for i in hits:
            matcher = self.disallowed[i]
            if matcher.filters:
                if name_only or not _filters_match(matcher, args):
                    continue
            elif with_filters_only:
                continue
            return GuardViolation("disallowed", name,
                                  f"{name!r} matches guard.disallowed[{i}] ({matcher.label})",
                                  entry=i)
        return None

    def _repeat(self, run: GuardRun, name: str, args: Any,
                record: bool) -> GuardViolation | None:
        if self.max_repeats is None:
            return None
        try:
            key: Hashable = (name, value_key(args))
        except TypeError:       # an unhashable leaf: by its text
            key = (name, repr(args))
        with self._lock:
            seen = run.repeats.get(key, 0) + 1
            if record:
                run.repeats[key] = seen
        if seen <= self.max_repeats:
            return None
        return GuardViolation(
            "max_repeats", name, f"identical call {seen} of {name!r} in this run; "
            f"guard.max_repeats allows {self.max_repeats}", limit=self.max_repeats, count=seen)


def _filters_match(matcher: Matcher, args: Any) -> bool:
    """The entry's ``command`` / ``path`` / ``args`` conditions, as the tool-calls family
    applies them (string argument values only; a missing one is a non-match here: the guard
    cannot report a configuration error at call time)."""
    if not isinstance(args, Mapping):
        return False
    for key, pattern in matcher.filters:
        value = args.get(key)
        if not isinstance(value, str) or not matches(pattern, value):
            return False
    return True
