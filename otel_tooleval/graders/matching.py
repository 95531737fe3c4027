"""Regex matching of argument, result and message values, bounded: the one helper every grader
uses, and the per-run grading budget.

CPython's ``re`` cannot be interrupted once a match has started, and it holds the GIL for the
whole of it, so one slow match stalls every thread of the process, the application's
included. Three things bound the cost of matching here:

1. **Truncation** (``limits.max_match_chars``). A value longer than the limit is searched in its
   first and its last ``max_match_chars / 2`` characters, each on its own (a match across the
   cut is not found, and an end anchor such as ``$`` can match at the end of the first part).
   This is what bounds one match of an ordinary pattern: the work of a backtracking search grows
   with the length of the text, quadratically for patterns such as ``\\s+$`` or ``\\w+@`` on a
   long run of spaces or letters, so the text, not a clock, has to be cut.
2. **Patterns that backtrack exponentially are refused when the config loads**
   (``unsafe_pattern``): a repeated part that can match the same text in more than one way, as
   in ``(a+)+$`` or ``(\\w+\\s?)*$``, takes time exponential in the length of a text it does not
   match, so no truncation would help. The check is a conservative heuristic for these nested
   repetitions, not a proof of safety; atomic groups and possessive quantifiers (Python 3.11+)
   never backtrack and pass it.
3. **A per-run budget** (``limits.grading_budget_ms``, CPU time of the grading thread). Every
   ``search`` checks it first; once it is spent, ``BudgetExceeded`` ends the grader, and the
   graders of the run that did not start yet are not run. A single match already running is
   not interrupted (see above): the budget bounds how many matches run, truncation how long
   each one takes.
"""

from __future__ import annotations

import functools
import re
import sys
import time
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import Any, NamedTuple

try:  # Python 3.11+
    from re import _constants as _sre_c  # type: ignore[attr-defined]
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre_c
    import sre_parse as _sre_parse

__all__ = [
    "DEFAULT_GRADING_BUDGET_MS",
    "DEFAULT_MAX_MATCH_CHARS",
    "BudgetExceeded",
    "GradingClock",
    "check_budget",
    "compile_safe",
    "grading_limits",
    "match_text",
    "max_match_chars",
    "search",
    "unsafe_reason",
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


def search(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    """``pattern.search(text)`` within the current limits: the budget is checked first, and a
    text longer than ``max_match_chars`` is searched in its first and last halves of that
    length, each on its own.

    Raises:
        BudgetExceeded: the run's grading budget is spent.
    """
    limits = _LIMITS.get() or _DEFAULT_LIMITS
    clock = limits.clock
    if clock is not None and clock.exceeded():
        raise BudgetExceeded
    n = len(text)
    limit = limits.max_chars
    if n <= limit:
        return pattern.search(text)
    head = limit // 2
    # endpos/pos bound the work to the two parts; "^" does not match at pos (re's rule).
    return pattern.search(text, 0, head) or pattern.search(text, n - (limit - head))


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


# -- patterns that backtrack exponentially -----------------------------------------------------

_MAXREPEAT = _sre_c.MAXREPEAT
_REPEATS = frozenset({_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT})
_POSSESSIVE = getattr(_sre_c, "POSSESSIVE_REPEAT", None)
_ATOMIC = getattr(_sre_c, "ATOMIC_GROUP", None)
_SINGLE = frozenset({_sre_c.LITERAL, _sre_c.NOT_LITERAL, _sre_c.ANY, _sre_c.IN})
_ZERO_WIDTH = frozenset({_sre_c.AT, _sre_c.ASSERT, _sre_c.ASSERT_NOT})
_IGNORECASE = re.IGNORECASE.value
_DOTALL = re.DOTALL.value
# Characters a character class is tried on to tell whether two classes overlap.
_SAMPLE = tuple(chr(c) for c in (*range(0x250), 0x2028, 0x3000, 0x4E00, 0x1F600))
_CATEGORY_PATTERNS = {
    "CATEGORY_DIGIT": r"\d", "CATEGORY_NOT_DIGIT": r"\D", "CATEGORY_SPACE": r"\s",
    "CATEGORY_NOT_SPACE": r"\S", "CATEGORY_WORD": r"\w", "CATEGORY_NOT_WORD": r"\W",
    "CATEGORY_LINEBREAK": r"\n", "CATEGORY_NOT_LINEBREAK": r"[^\n]",
}
_CATEGORY_SETS = {name: frozenset(c for c in _SAMPLE if re.fullmatch(p, c))
                  for name, p in _CATEGORY_PATTERNS.items()}
_ALL = frozenset(_SAMPLE)
_HINT = ("; rewrite it so that each part of the text can be matched one way only (e.g. 'a+' "
         "for '(a+)+')" + (", or make the inner repetition possessive ('a++') or atomic "
                           "('(?>...)')" if sys.version_info >= (3, 11) else ""))


class _Unsafe(Exception):
    pass


def _charset(op: Any, av: Any, flags: int) -> frozenset[str] | None:
    """The sample characters one single-character item matches (None: not such an item)."""
    if op is _sre_c.LITERAL:
        out = frozenset({chr(av)})
    elif op is _sre_c.NOT_LITERAL:
        out = _ALL - {chr(av)}
    elif op is _sre_c.ANY:
        out = _ALL if flags & _DOTALL else _ALL - {"\n"}
    elif op is _sre_c.IN:
        chars: set[str] = set()
        negate = False
        for sub_op, sub_av in av:
            if sub_op is _sre_c.NEGATE:
                negate = True
            elif sub_op is _sre_c.LITERAL:
                chars.add(chr(sub_av))
            elif sub_op is _sre_c.RANGE:
                lo, hi = sub_av
                chars.update(c for c in _SAMPLE if lo <= ord(c) <= hi)
                if hi > 0x24F:
                    chars.update(chr(c) for c in range(max(lo, 0x250), min(hi, 0x250 + 64) + 1))
            elif sub_op is _sre_c.CATEGORY:
                chars.update(_CATEGORY_SETS.get(str(sub_av), _ALL))
            else:
                chars.update(_ALL)
        out = frozenset(_ALL - chars if negate else chars)
    else:
        return None
    if flags & _IGNORECASE:
        out = out | {v for c in out for v in (c.lower(), c.upper()) if len(v) == 1}
    return out


def _flat(items: Any, flags: int) -> list[tuple[Any, Any, int]]:
    """A sequence with its groups opened (capturing and not), each item with its flags."""
    out: list[tuple[Any, Any, int]] = []
    for op, av in items:
        if op is _sre_c.SUBPATTERN:
            _group, add, remove, content = av
            out.extend(_flat(content, (flags | add) & ~remove))
        else:
            out.append((op, av, flags))
    return out


def _nullable_seq(items: Any, flags: int) -> bool:
    return all(_nullable(op, av, f) for op, av, f in _flat(items, flags))


def _nullable(op: Any, av: Any, flags: int) -> bool:
    if op in _REPEATS or op is _POSSESSIVE:
        return bool(av[0] == 0) or _nullable_seq(av[2], flags)
    if op is _sre_c.BRANCH:
        return any(_nullable_seq(alt, flags) for alt in av[1])
    if op is _ATOMIC:
        return _nullable_seq(av, flags)
    if op in _SINGLE:
        return False
    if op in _ZERO_WIDTH:
        return True
    return True   # back references, conditionals: may match nothing


def _single_of(items: Any, flags: int) -> frozenset[str] | None:
    """The charset when ``items`` is one single-character item (through groups)."""
    flat = _flat(items, flags)
    if len(flat) != 1:
        return None
    op, av, f = flat[0]
    return _charset(op, av, f)


def _variable(op: Any, av: Any, flags: int) -> tuple[bool, frozenset[str] | None]:
    """Whether the item can match texts of different lengths by backtracking, and the charset
    of what it repeats when that is one character class."""
    if op in _REPEATS and av[0] != av[1]:
        return True, _single_of(av[2], flags)
    if op is _sre_c.BRANCH:
        alts = av[1]
        if any(_nullable_seq(a, flags) for a in alts) and not all(
                _nullable_seq(a, flags) for a in alts):
            sets = [_single_of(a, flags) for a in alts if not _nullable_seq(a, flags)]
            if all(s is not None for s in sets):
                return True, frozenset().union(*sets)  # type: ignore[arg-type]
            return True, None
    return False, None


def _ambiguous_body(items: Any, flags: int) -> bool:
    """Whether a repeated body can match one text as one iteration and as several: it holds a
    part of variable length, and everything else in it either may match nothing or consists of
    characters that part can take as well."""
    flat = _flat(items, flags)
    if len(flat) == 1 and flat[0][0] is _sre_c.BRANCH:
        # (a+|b)+: each alternative is a body of its own
        return any(_ambiguous_body(alt, flat[0][2]) for alt in flat[0][1][1])
    for k, (op, av, f) in enumerate(flat):
        variable, chars = _variable(op, av, f)
        if not variable:
            continue
        ambiguous = True
        for j, (other_op, other_av, other_f) in enumerate(flat):
            if j == k or _nullable(other_op, other_av, other_f):
                continue
            other = _charset(other_op, other_av, other_f)
            if other is None and (other_op in _REPEATS or other_op is _POSSESSIVE):
                other = _single_of(other_av[2], other_f)
            if chars is None or other is None or not (chars & other):
                ambiguous = False
                break
        if ambiguous:
            return True
    return False


def _walk(items: Any, flags: int) -> None:
    for op, av, f in _flat(items, flags):
        if op in _REPEATS:
            low, high, body = av
            if (high == _MAXREPEAT or high >= 32) and high != low and _ambiguous_body(body, f):
                raise _Unsafe
            _walk(body, f)
        elif op is _POSSESSIVE:
            _walk(av[2], f)
        elif op is _ATOMIC:
            _walk(av, f)
        elif op is _sre_c.BRANCH:
            for alt in av[1]:
                _walk(alt, f)
        elif op in (_sre_c.ASSERT, _sre_c.ASSERT_NOT):
            _walk(av[1], f)
        elif op is _sre_c.GROUPREF_EXISTS:
            _walk(av[1], f)
            if av[2] is not None:
                _walk(av[2], f)


@functools.lru_cache(maxsize=256)
def unsafe_reason(pattern: str) -> str | None:
    """Why ``pattern`` can take exponential time on texts it does not match, or None.

    A conservative check for nested repetition (``(a+)+``, ``(\\w+\\s?)*``, ``(.*,)+``,
    ``(a|aa)+``): a repeated part that can match the same text as one iteration or as several.
    A pattern that does not compile is not judged here (None). The verdicts on the last 256
    patterns are remembered: a ground truth read from a run is checked for every run, and
    parsing it costs tens of microseconds.
    """
    try:
        parsed = _sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError, ValueError):
        return None
    flags = int(getattr(parsed, "state", parsed).flags)
    try:
        _walk(parsed, flags)
    except _Unsafe:
        return ("the pattern can take exponential time on a text it does not match: a repeated "
                "part of it can match the same text in more than one way" + _HINT)
    except RecursionError:  # pragma: no cover - a pattern nested thousands deep
        return "the pattern is nested too deeply to be checked"
    return None


def compile_safe(pattern: str) -> re.Pattern[str]:
    """Compile a pattern from the config, refusing the ones that backtrack exponentially.

    Raises:
        ValueError: the pattern does not compile, or ``unsafe_reason`` finds it unsafe; the
            message says which, and how to fix it.
    """
    try:
        compiled = re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    reason = unsafe_reason(pattern)
    if reason is not None:
        raise ValueError(f"unsafe regular expression {pattern!r}: {reason}")
    return compiled
