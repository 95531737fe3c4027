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

import copy
import re
import sys
import threading
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from itertools import count
from typing import Any, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from .graders.matching import UserRegex, compile_user, matches, max_match_chars
from .graders.pairing import value_key
from .graders.tool_calls import Matcher, SequenceMatch
from .values import decode_value, unwrap_arguments

__all__ = ["RULES", "UNKNOWN", "GuardConfig", "GuardMatch", "GuardRules", "GuardRun",
           "GuardViolation", "NameRules", "StartCheck"]

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


class _Repeats:
    """One tool's calls in a run, as ``max_repeats`` counts them.

    ``texts``: argument text (or, for a value that is no text, ``("v", value key)``) ->
    ``[calls, value key or None]``. Identical texts are counted without decoding. The value
    classes (``classes``: value key -> calls) are worked out only once the tool has been
    called more than ``max_repeats`` times in the run (before that no class can be over the
    limit): then each distinct text is decoded once, and equal values with different texts
    (key order, ``1`` and ``1.0``) share a class.
    """

    __slots__ = ("calls", "classes", "texts")

    def __init__(self, first: str | None = None) -> None:
        """``first``: the argument text of the tool's first call in the run, counted."""
        self.calls = 0 if first is None else 1
        self.texts: dict[Hashable, list[Any]] = {} if first is None else {first: [1, None]}
        self.classes: dict[Hashable, int] | None = None


class GuardRun:
    """What a run did so far, as the guard counts it: ``counter`` numbers its calls,
    ``per_tool`` the calls of each tool that has a ``max_calls_per_tool`` limit, ``repeats``
    (tool name -> its calls with arguments) is what ``max_repeats`` counts.

    The counters are ``itertools.count``: ``next`` on one is a single step under the GIL, so
    calls of one run starting on several threads each get their own number, exactly, with no
    lock (``repeats``, several dicts updated together, is kept under ``GuardRules``' lock).
    """

    __slots__ = ("counter", "per_tool", "repeats")

    def __init__(self) -> None:
        self.counter = count(1)
        self.per_tool: dict[str, count[int]] = {}
        self.repeats: dict[str, _Repeats] = {}

    @property
    def calls(self) -> int:
        """The calls counted so far."""
        return _counted(self.counter)

    def tool_calls(self, name: str) -> int:
        """The calls of ``name`` counted so far (0 for a tool without a limit)."""
        counter = self.per_tool.get(name)
        return 0 if counter is None else _counted(counter)


def _counted(counter: count[int]) -> int:
    """How many numbers a ``count(1)`` handed out, without taking one: the next number of a
    copy (``itertools.count`` copies its state)."""
    return next(copy.copy(counter)) - 1


class NameRules(NamedTuple):
    """What the rules say about one tool name, worked out once per name.

    ``found``: the violation the name alone makes (a ``disallowed`` entry without conditions,
    else the allow-list), or None. ``before``: the ``disallowed`` entries with conditions
    whose name pattern matches and that come before the entry of ``found`` (all of them when
    the name alone breaks no ``disallowed`` entry): the arguments decide those. ``limit``:
    the name's ``max_calls_per_tool``. ``reads``: whether any rule reads this tool's
    arguments (``before``, or ``max_repeats``); without, they are not even looked at. A tuple,
    which the start check unpacks in one step.
    """

    found: GuardViolation | None
    before: tuple[int, ...]
    limit: int | None
    reads: bool


#: How a literal name in ``allowed`` / ``disallowed`` looks (no regex syntax).
_LITERAL = re.compile(r"[A-Za-z0-9_\-]+")
#: How a literal ``command`` / ``path`` / ``args`` condition looks: tested as a substring.
_LITERAL_TEXT = re.compile(r"[A-Za-z0-9_\- /:=,@%]+")

#: A ``disallowed`` entry's conditions: (argument key, pattern, the pattern's text when it is
#: a literal, else None).
_Conditions = tuple[tuple[str, UserRegex, "str | None"], ...]


class GuardRules:
    """A compiled ``GuardConfig``. ``check`` is called on the application thread: what the
    name decides is remembered per tool name (``NameRules``), counts are lock-free counters
    (``GuardRun``), and arguments are decoded only when a rule needs their value (see
    ``_Repeats``)."""

    def __init__(self, config: GuardConfig, *, unwrap: bool = True) -> None:
        self.config = config
        #: ``runs.unwrap``: generic envelopes taken off arguments, as the graders read them
        self._generic = unwrap
        self.disallowed = [Matcher(m) for m in config.disallowed]
        self._conditions: list[_Conditions] = [
            tuple((key, pattern, pattern.pattern if _LITERAL_TEXT.fullmatch(pattern.pattern)
                   else None) for key, pattern in m.filters) for m in self.disallowed]
        self.allowed = ([_whole(p) for p in config.allowed]
                        if config.allowed is not None else None)
        # Exact names of the allow-list, tested before its patterns.
        self._allowed_names = frozenset(p for p in config.allowed or ()
                                        if _LITERAL.fullmatch(p))
        self._allowed_patterns = tuple(
            r for p, r in zip(config.allowed or (), self.allowed or (), strict=True)
            if p not in self._allowed_names)
        # A literal disallowed name pattern matches where it occurs (``search``).
        self._disallowed_literals = tuple(
            m.spec.name if _LITERAL.fullmatch(m.spec.name) else None for m in self.disallowed)
        self.max_calls = config.max_calls
        self.per_tool = dict(config.max_calls_per_tool)
        self.max_repeats = config.max_repeats
        self._names: dict[str, NameRules] = {}
        #: Remembered names whose only rule is ``max_calls`` (no name rule, no per-tool limit,
        #: no argument rule): the start hook counts their calls itself (see ``over_calls``).
        self.counted_only: set[str] = set()
        #: ``max_calls``, or a count no run reaches.
        self.call_limit = self.max_calls if self.max_calls is not None else sys.maxsize
        self._lock = threading.Lock()   # ``max_repeats``' updates of one run from several threads
        #: ``check`` as a tool span starts, written for these rules (``_start_check``).
        self.start_check: StartCheck = self._start_check()

    def for_name(self, name: str) -> NameRules:
        """What the rules say about ``name`` (remembered for up to 1,024 names; the rest are
        worked out at each call)."""
        known = self._names.get(name)
        if known is None:
            known = self._name_rules(name)
            if len(self._names) < _MAX_REMEMBERED_NAMES:
                self._names[name] = known
                if known.found is None and known.limit is None and not known.reads:
                    self.counted_only.add(name)
        return known

    def over_calls(self, name: str, calls: int) -> GuardViolation:
        """The ``max_calls`` violation of call number ``calls`` (over the limit)."""
        return GuardViolation(
            "max_calls", name, f"tool call {calls} of this run ({name!r}); "
            f"guard.max_calls allows {self.max_calls}", limit=self.max_calls, count=calls)

    def _name_rules(self, name: str) -> NameRules:
        found: GuardViolation | None = None
        before: list[int] = []
        for i, matcher in enumerate(self.disallowed):
            literal = self._disallowed_literals[i]
            if not (literal in name if literal is not None else matches(matcher.name, name)):
                continue
            if matcher.filters:
                before.append(i)
            else:
                found = GuardViolation(
                    "disallowed", name,
                    f"{name!r} matches guard.disallowed[{i}] ({matcher.label})", entry=i)
                break
        if found is None and self.allowed is not None and name not in self._allowed_names \
                and not any(p.test(name) for p in self._allowed_patterns):
            found = GuardViolation("allowed", name, f"{name!r} is not in guard.allowed")
        return NameRules(found, tuple(before), self.per_tool.get(name),
                         bool(before) or self.max_repeats is not None)

    def check(self, run: GuardRun, name: str, arguments: Any = UNKNOWN,
              unwrap: Callable[[Any], Any] | None = None, *,
              record: bool = True) -> GuardViolation | None:
        """The first rule this call breaks, counting it in ``run`` when ``record``.

        ``arguments``: as the span holds them (JSON text, or a value), decoded here only if a
        rule needs their value; ``unwrap`` takes the decoded value out of a framework's
        envelope (``ToolConvention.arguments_from``). With ``arguments=UNKNOWN`` the rules
        that read arguments are skipped (and the call is not counted for ``max_repeats``):
        ``check_arguments`` does that part later.
        """
        rules = self._names.get(name)
        if rules is None:
            rules = self.for_name(name)
        found = rules.found
        value: Any = _UNDECODED
        if rules.before and arguments is not UNKNOWN:
            value = _decode(arguments, unwrap, self._generic)
            found = self._disallowed(rules.before, name, value) or found
        limit = rules.limit
        if record:
            calls = next(run.counter)
            tool_calls = 0
            if limit is not None:
                counter = run.per_tool.get(name)
                if counter is None:
                    counter = run.per_tool.setdefault(name, count(1))
                tool_calls = next(counter)
        else:
            calls = run.calls + 1
            tool_calls = run.tool_calls(name) + 1
        repeat = None
        if self.max_repeats is not None and arguments is not UNKNOWN:
            with self._lock:
                repeat = self._repeat(run, name, arguments, value, unwrap, record)
        if found is not None:
            return found
        if limit is not None and tool_calls > limit:
            return GuardViolation(
                "max_calls_per_tool", name,
                f"call {tool_calls} of {name!r} in this run; "
                f"guard.max_calls_per_tool allows {limit}", limit=limit, count=tool_calls)
        if calls > self.call_limit:
            return self.over_calls(name, calls)
        return repeat

    def _start_check(self) -> StartCheck:
        """``check(run, name, arguments, unwrap)`` counting the call, for a tool span's start
        (``arguments`` None: not recorded, ``UNKNOWN`` for ``check``), in one frame: a call of
        ``max_repeats`` whose tool is new in the run, or under the limit, has its argument
        text counted inline (``_repeat`` does the rest). The same answers as ``check``
        (``tests/test_guard_start.py`` compares them)."""
        names_get, for_name = self._names.get, self.for_name
        # The lock's methods bound: ``with lock`` costs twice as much (``__exit__`` and its
        # three arguments).
        max_repeats, acquire, release = self.max_repeats, self._lock.acquire, self._lock.release
        limit_calls, over_calls = self.call_limit, self.over_calls
        disallowed, repeat = self._disallowed, self._repeat

        def check(run: GuardRun, name: str, arguments: Any,
                  unwrap: Callable[[Any], Any] | None) -> GuardViolation | None:
            rules = names_get(name)
            if rules is None:
                rules = for_name(name)
            found, before, limit, reads = rules
            calls = next(run.counter)
            tool_calls = 0
            if limit is not None:
                counter = run.per_tool.get(name)
                if counter is None:
                    counter = run.per_tool.setdefault(name, count(1))
                tool_calls = next(counter)
            looped = None
            if reads and arguments is not None:
                value: Any = _UNDECODED
                if before:
                    value = _decode(arguments, unwrap, self._generic)
                    found = disallowed(before, name, value) or found
                if max_repeats is not None:
                    acquire()
                    try:
                        tool = run.repeats.get(name)
                        if arguments.__class__ is not str:
                            looped = repeat(run, name, arguments, value, unwrap, True)
                        elif tool is None:
                            run.repeats[name] = _Repeats(arguments)
                        elif tool.calls < max_repeats:
                            # Under the limit no value can be a loop: the text counted only.
                            tool.calls += 1
                            entry = tool.texts.get(arguments)
                            if entry is None:
                                tool.texts[arguments] = [1, None]
                            else:
                                entry[0] += 1
                        else:
                            looped = repeat(run, name, arguments, value, unwrap, True)
                    finally:
                        release()
            if found is not None:
                return found
            if limit is not None and tool_calls > limit:
                return GuardViolation(
                    "max_calls_per_tool", name,
                    f"call {tool_calls} of {name!r} in this run; "
                    f"guard.max_calls_per_tool allows {limit}", limit=limit, count=tool_calls)
            if calls > limit_calls:
                return over_calls(name, calls)
            return looped

        return check

    def check_arguments(self, run: GuardRun, name: str, arguments: Any,
                        unwrap: Callable[[Any], Any] | None = None, *,
                        record: bool = True) -> GuardViolation | None:
        """The rules ``check`` put off for a call checked with unknown arguments."""
        rules = self.for_name(name)
        value: Any = _UNDECODED
        found = None
        if rules.before:
            value = _decode(arguments, unwrap, self._generic)
            found = self._disallowed(rules.before, name, value)
        if self.max_repeats is None:
            return found
        with self._lock:
            repeat = self._repeat(run, name, arguments, value, unwrap, record)
        return found if found is not None else repeat

    def _disallowed(self, entries: tuple[int, ...], name: str,
                    value: Any) -> GuardViolation | None:
        for i in entries:
            matcher = self.disallowed[i]
            if _conditions_match(self._conditions[i], value):
                return GuardViolation(
                    "disallowed", name,
                    f"{name!r} matches guard.disallowed[{i}] ({matcher.label})", entry=i)
        return None

    def _repeat(self, run: GuardRun, name: str, arguments: Any, value: Any,
                unwrap: Callable[[Any], Any] | None, record: bool) -> GuardViolation | None:
        """``max_repeats`` for one call (under the lock): ``value`` is its decoded arguments,
        or ``_UNDECODED``."""
        limit = self.max_repeats
        assert limit is not None
        tool = run.repeats.get(name)
        if tool is None:
            if not record:
                return None   # a first call is never a repeat (the limit is 1 or more)
            tool = run.repeats[name] = _Repeats()
        text: Hashable
        if arguments.__class__ is str:
            text = arguments
        else:
            if value is _UNDECODED:
                value = _decode(arguments, unwrap, self._generic)
            text = ("v", _value_key(value))
        entry = tool.texts.get(text)
        calls = tool.calls + 1
        if calls <= limit:
            # No value can have been called more than ``limit`` times: count the text only.
            if record:
                tool.calls = calls
                if entry is None:
                    tool.texts[text] = [1, text[1] if text.__class__ is tuple else None]
                else:
                    entry[0] += 1
            return None
        classes = tool.classes
        if classes is None:
            classes = tool.classes = {}
            for seen_text, counted in tool.texts.items():
                if counted[1] is None:
                    counted[1] = _value_key(_decode(seen_text, unwrap, self._generic))
                classes[counted[1]] = classes.get(counted[1], 0) + counted[0]
        if entry is not None and entry[1] is not None:
            key = entry[1]
        else:
            if value is _UNDECODED:
                value = _decode(arguments, unwrap, self._generic)
            key = _value_key(value)
        seen = classes.get(key, 0) + 1
        if record:
            tool.calls = calls
            if entry is None:
                tool.texts[text] = [1, key]
            else:
                entry[0] += 1
                entry[1] = key
            classes[key] = seen
        if seen <= limit:
            return None
        return GuardViolation(
            "max_repeats", name, f"identical call {seen} of {name!r} in this run; "
            f"guard.max_repeats allows {limit}", limit=limit, count=seen)


#: Arguments not decoded yet.
_UNDECODED: Any = object()

#: ``GuardRules.start_check``: ``(run, name, raw arguments or None, unwrap)`` -> the violation.
StartCheck = Callable[[GuardRun, str, Any, "Callable[[Any], Any] | None"], "GuardViolation | None"]


def _decode(arguments: Any, unwrap: Callable[[Any], Any] | None, generic: bool) -> Any:
    """Arguments as the grading reads them (``ToolCall.arguments``): the framework's own
    envelope (``unwrap``), then with ``generic`` the envelopes known by their shape."""
    value = decode_value(arguments)
    if unwrap is not None:
        value = unwrap(value)
    return unwrap_arguments(value) if generic else value


def _value_key(value: Any) -> Hashable:
    """The ``max_repeats`` key of decoded arguments: equal for values equal by value."""
    try:
        return value_key(value)
    except TypeError:       # an unhashable leaf: by its text
        return ("r", repr(value))


def _conditions_match(conditions: _Conditions, args: Any) -> bool:
    """A ``disallowed`` entry's ``command`` / ``path`` / ``args`` conditions, as the tool-calls
    family applies them (string argument values only; a missing one is a non-match here: the
    guard cannot report a configuration error at call time). A literal pattern is a substring
    test, the same answer as the regex search for a text it searches whole (up to
    ``max_match_chars``), at a fraction of its cost."""
    if args.__class__ is not dict and not isinstance(args, Mapping):   # the ABC test is slow
        return False
    for key, pattern, literal in conditions:
        value = args.get(key)
        if value.__class__ is not str and not isinstance(value, str):
            return False
        if literal is not None and len(value) <= max_match_chars():
            if literal not in value:
                return False
        elif not matches(pattern, value):
            return False
    return True
