"""Regex matching of argument, result and message values, bounded: the one helper every grader
uses, and the per-run grading budget.

A match holds the GIL for the whole of it, so one slow match would stall every thread of the
process, the application's included. Three things bound the cost of matching here:

1. **Truncation** (``limits.max_match_chars``). A value longer than the limit is searched in its
   first and its last ``max_match_chars / 2`` characters, each on its own (a match across the
   cut is not found, and an end anchor such as ``$`` can match at the end of the first part).
   RE2's work is linear in the text, so this bounds the time of every match.
2. **Patterns run on RE2** (``user_regex``): every pattern from a config or a run is compiled
   on a linear-time engine, so no pattern (``(a|a)+$``, ``(.*a){20}``) takes more than time
   linear in the text; what RE2 cannot run (backreferences, lookaround) is refused when the
   config loads.
3. **A per-run budget** (``limits.grading_budget_ms``, CPU time of the grading thread). Every
   ``search`` checks it first; once it is spent, ``BudgetExceeded`` ends the grader, and the
   graders of the run that did not start yet are not run. A single match already running is
   not interrupted: the budget bounds how many matches run, truncation how long each one takes.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import NamedTuple

from ..user_regex import RegexMatch, UserRegex, compile_user, unsupported_reason

__all__ = [
    "DEFAULT_GRADING_BUDGET_MS",
    "DEFAULT_MAX_MATCH_CHARS",
    "BudgetExceeded",
    "GradingClock",
    "RegexMatch",
    "UserRegex",
    "check_budget",
    "compile_user",
    "grading_limits",
    "match_text",
    "matches",
    "max_match_chars",
    "search",
    "unsupported_reason",
]

DEFAULT_MAX_MATCH_CHARS = 8192
DEFAULT_GRADING_BUDGET_MS = 1000.0


class BudgetExceeded(Exception):
    """The run's grading budget is spent: the grader that meets it stops."""


class GradingClock:
    """The grading budget of one run: CPU time of the grading thread since it started.

    ``exceeded`` reads the cheap wall clock first and the thread's CPU time only once the
    wall clock says the budget could be spent (CPU time never runs ahead of wall time), so a
    check costs one ``time.monotonic()`` while the budget lasts.
    """

    __slots__ = ("budget_s", "cpu_start", "spent", "wall_deadline")

    def __init__(self, budget_ms: float) -> None:
        self.budget_s = budget_ms / 1000 if budget_ms > 0 else None
        self.cpu_start = time.thread_time()
        self.wall_deadline = (time.monotonic() + self.budget_s if self.budget_s is not None
                              else float("inf"))
        self.spent = False

    def exceeded(self) -> bool:
        if self.spent:
            return True
        if self.budget_s is None or time.monotonic() < self.wall_deadline:
            return False
        if time.thread_time() - self.cpu_start >= self.budget_s:
            self.spent = True
        return self.spent


class _Limits(NamedTuple):
    max_chars: int
    clock: GradingClock | None


_DEFAULT_LIMITS = _Limits(DEFAULT_MAX_MATCH_CHARS, None)
_LIMITS: ContextVar[_Limits | None] = ContextVar("otel_tooleval_match_limits", default=None)


class _RunLimits:
    """``grading_limits``: a class rather than ``@contextmanager`` (a generator and its
    wrapper cost more than the rest of it, once per graded run)."""

    __slots__ = ("budget_ms", "max_chars", "token")

    def __init__(self, max_chars: int, budget_ms: float) -> None:
        self.max_chars = max_chars
        self.budget_ms = budget_ms

    def __enter__(self) -> GradingClock:
        clock = GradingClock(self.budget_ms)
        self.token = _LIMITS.set(_Limits(self.max_chars, clock))
        return clock

    def __exit__(self, *exc_info: object) -> None:
        _LIMITS.reset(self.token)


def grading_limits(max_match_chars: int = DEFAULT_MAX_MATCH_CHARS,
                   budget_ms: float = 0.0) -> AbstractContextManager[GradingClock]:
    """Matching limits and a fresh budget clock for the graders run inside (one run)."""
    return _RunLimits(max(int(max_match_chars), 2), budget_ms)


def check_budget() -> None:
    """Raise ``BudgetExceeded`` when the current run's grading budget is spent."""
    clock = (_LIMITS.get() or _DEFAULT_LIMITS).clock
    if clock is not None and clock.exceeded():
        raise BudgetExceeded


def search(pattern: UserRegex, text: str) -> RegexMatch | None:
    """``pattern.search(text)`` within the current limits: the budget is checked first, and a
    text longer than ``max_match_chars`` is searched in its first and last halves of that
    length, each on its own.

    Raises:
        BudgetExceeded: the run's grading budget is spent.
    """
    limit = _checked_limit()
    n = len(text)
    if n <= limit:
        return pattern.search(text)
    head = limit // 2
    # endpos/pos bound the work to the two parts; "^" does not match at pos (as in re).
    return pattern.search(text, 0, head) or pattern.search(text, n - (limit - head))


def matches(pattern: UserRegex, text: str) -> bool:
    """Whether ``search`` finds a match; faster where no group is read.

    Raises:
        BudgetExceeded: the run's grading budget is spent.
    """
    limits = _LIMITS.get() or _DEFAULT_LIMITS      # _checked_limit, without the call
    clock = limits.clock
    if clock is not None and clock.exceeded():
        raise BudgetExceeded
    limit = limits.max_chars
    n = len(text)
    if n <= limit:
        return pattern.test(text)
    head = limit // 2
    start = n - (limit - head)
    # Slices, not pos/endpos: RE2 reads UTF-8, and the text is encoded whole for pos/endpos
    # (1 ms a megabyte). The one character before the tail keeps "^" and "\b" as at pos.
    return pattern.test(text[:head]) or pattern.test(text[start - 1:], 1)


def _checked_limit() -> int:
    limits = _LIMITS.get() or _DEFAULT_LIMITS
    clock = limits.clock
    if clock is not None and clock.exceeded():
        raise BudgetExceeded
    return limits.max_chars


def max_match_chars() -> int:
    """The current ``max_match_chars``: ``search`` looks at texts up to this long whole."""
    return (_LIMITS.get() or _DEFAULT_LIMITS).max_chars


def match_text(text: str) -> str:
    """What ``search`` would look at, as one string (first and last parts joined by a newline),
    for callers that must hand a bounded text on."""
    limit = (_LIMITS.get() or _DEFAULT_LIMITS).max_chars
    if len(text) <= limit:
        return text
    head = limit // 2
    return text[:head] + "\n" + text[len(text) - (limit - head):]
