"""Regular expressions from configs (and ground truths read from runs), on RE2.

CPython's ``re`` backtracks: patterns such as ``(a|a)+$`` or ``(.*a){20}`` take time
exponential in the text they are tried on, a match cannot be interrupted, and it holds the GIL,
so one config pattern could freeze the application, ``serve`` or a CI job. Every pattern a user
writes is therefore compiled here, on Google's RE2 (package ``google-re2``), whose matching
time is linear in the text for every pattern it accepts.

RE2 refuses what it cannot run in linear time: backreferences (``\\1``, ``(?P=name)``),
lookaround (``(?=``, ``(?!``, ``(?<=``, ``(?<!``), atomic groups and possessive quantifiers
(not needed: RE2 never backtracks), ``\\Z`` (``\\z`` in RE2), and counted repetitions over
1000. Such a pattern is refused when the config loads, with the reason (see ``compile_user``).
"""

from __future__ import annotations

import functools
import re
from typing import Any, Protocol

import re2

__all__ = ["RegexMatch", "UserRegex", "compile_user", "unsupported_reason"]

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False     # the reason goes into the config error, not onto stderr
# For yes/no tests: without submatches RE2 answers from its DFA alone; asking for groups makes
# it run its (still linear, much slower) NFA over the match, e.g. 0.7 s for (.*a){20} on 1 MB.
_NO_CAPTURE = re2.Options()
_NO_CAPTURE.log_errors = False
_NO_CAPTURE.never_capture = True
# A whole-text yes/no test calls the compiled RE2 object directly: the package's ``search``
# builds a generator, converts offsets and a match object per call (1.8 us against 0.6 us for a
# tool name). The private names are used here only, with the public path as the fallback.
_UNANCHORED = getattr(getattr(re2, "_Anchor", None), "UNANCHORED", None)
_NULL_SPAN = getattr(re2, "_NULL_SPAN", (-1, -1))
# RE2 reads UTF-8, which cannot hold a lone surrogate (a broken "\ud800" in a span's JSON):
# one U+FFFD per surrogate keeps every offset of the text.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _encodable(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text)


class RegexMatch(Protocol):
    """What callers read from a match."""

    def group(self, group: int | str = 0, /) -> str | None: ...

    def start(self, group: int | str = 0, /) -> int: ...

    def end(self, group: int | str = 0, /) -> int: ...


class UserRegex:
    """A compiled user pattern with the part of ``re.Pattern``'s surface the code uses."""

    __slots__ = ("_raw", "_regexp", "_tester", "groupindex", "groups", "pattern")

    def __init__(self, regexp: Any, pattern: str) -> None:
        self._regexp = regexp
        self.pattern = pattern
        self.groups: int = regexp.groups
        self.groupindex: dict[str, int] = dict(regexp.groupindex)
        self._tester = regexp if not self.groups else re2.compile(pattern, _NO_CAPTURE)
        raw = getattr(self._tester, "_regexp", None)
        self._raw = raw if _UNANCHORED is not None and hasattr(raw, "Match") else None

    def test(self, text: str, pos: int = 0, endpos: int | None = None) -> bool:
        """Whether ``search`` would find a match (faster: no groups are computed)."""
        if self._raw is not None and pos <= 1 and endpos is None:
            try:
                data = text.encode("utf-8")
            except UnicodeEncodeError:
                data = _encodable(text).encode("utf-8")
            start = 0 if not pos else len(text[:pos].encode("utf-8", "surrogatepass"))
            return bool(self._raw.Match(_UNANCHORED, data, start, len(data))[0] != _NULL_SPAN)
        return self._call(self._tester.search, text, pos, endpos) is not None

    def search(self, text: str, pos: int = 0, endpos: int | None = None) -> RegexMatch | None:
        """The first match in ``text[pos:endpos]`` (``^`` matches at the text's start only)."""
        return self._call(self._regexp.search, text, pos, endpos)

    def match(self, text: str, pos: int = 0, endpos: int | None = None) -> RegexMatch | None:
        return self._call(self._regexp.match, text, pos, endpos)

    def fullmatch(self, text: str, pos: int = 0,
                  endpos: int | None = None) -> RegexMatch | None:
        return self._call(self._regexp.fullmatch, text, pos, endpos)

    @staticmethod
    def _call(method: Any, text: str, pos: int, endpos: int | None) -> RegexMatch | None:
        try:
            match: RegexMatch | None = method(text, pos, endpos)
        except UnicodeEncodeError:
            match = method(_encodable(text), pos, endpos)
        return match

    def __repr__(self) -> str:
        return f"UserRegex({self.pattern!r})"


_REASONS = (
    # (what RE2's error message holds, why it is refused)
    (("(?=", "(?!", "(?<=", "(?<!"),
     ("lookaround ((?=, (?!, (?<=, (?<!) is not supported: config patterns run on RE2, a "
     "linear-time engine, which has no lookaround; match the text itself instead")),
    (("invalid escape sequence: \\1", "invalid escape sequence: \\2",
      "invalid escape sequence: \\3", "invalid escape sequence: \\4",
      "invalid escape sequence: \\5", "invalid escape sequence: \\6",
      "invalid escape sequence: \\7", "invalid escape sequence: \\8",
      "invalid escape sequence: \\9", "(?P=", "(?P>"),
     ("backreferences (\\1, (?P=name)) are not supported: config patterns run on RE2, a "
     "linear-time engine, which cannot match a backreference in linear time")),
    (("(?>", "++", "*+", "?+", "}+"),
     ("atomic groups and possessive quantifiers are not supported, nor needed: config "
     "patterns run on RE2, which never backtracks; write (?:...) and a plain quantifier")),
    (("\\Z",), "\\Z is not supported: config patterns run on RE2; write \\z (end of text)"),
    (("invalid repetition size",),
     "a counted repetition is limited to 1000 on RE2, the engine config patterns run on"),
    (("pattern too large",),
     ("the pattern is too large for RE2's memory budget (8 MB), the engine config patterns "
     "run on; make it shorter or its counted repetitions smaller")),
)


def _reason(message: str, pattern: str) -> str:
    if "(?P" in message and ("(?P=" in pattern or "(?P>" in pattern):
        return _REASONS[1][1]          # RE2 names only the "(?P" of a named backreference
    for needles, why in _REASONS:
        if any(n in message for n in needles):
            return why
    return f"{_INVALID}{message} (config patterns are in RE2's syntax)"


_INVALID = "not a valid regular expression: "


@functools.lru_cache(maxsize=256)
def _compile(pattern: str) -> tuple[UserRegex | None, str | None]:
    """The compiled pattern, or None and why RE2 cannot run it."""
    try:
        return UserRegex(re2.compile(pattern, _OPTIONS), pattern), None
    except re2.error as exc:
        raw = exc.args[0] if exc.args else exc
        message = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    except (TypeError, ValueError, OverflowError) as exc:   # e.g. a NUL byte
        message = str(exc)
    return None, _reason(message, pattern)


def unsupported_reason(pattern: str) -> str | None:
    """Why ``pattern`` cannot be run (it is refused), or None. The last 256 verdicts are
    remembered: a ground truth read from a run is compiled for every run."""
    return _compile(pattern)[1]


def compile_user(pattern: str) -> UserRegex:
    """Compile a user's pattern on RE2.

    Raises:
        ValueError: RE2 cannot run it; the message says why (backreference, lookaround, …)
            and what to write instead.
    """
    compiled, reason = _compile(pattern)
    if reason is not None:
        if reason.startswith(_INVALID):
            raise ValueError(f"invalid regular expression {pattern!r}: "
                             f"{reason[len(_INVALID):]}")
        raise ValueError(f"unsupported regular expression {pattern!r}: {reason}")
    assert compiled is not None
    return compiled
