"""Untrusted text made safe to print: tool names and explanations come from spans.

Control characters could move a terminal's cursor or recolour it, bidirectional overrides
reorder what a reader sees, and lone surrogates (valid in JSON input, not in UTF-8) fail the
encoder when the report is written. Each is shown as a visible escape instead.
"""

from __future__ import annotations

import re

__all__ = ["fmt_duration", "one_line", "readable", "shorten"]

_UNSAFE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
    "\ud800-\udfff\ufffe\uffff]")
_UNSAFE_OR_BREAK = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def readable(text: object) -> str:
    """Text with unsafe characters escaped; tabs and line breaks are kept.

    What is left is also legal in XML 1.0 and encodable as UTF-8.
    """
    return _UNSAFE.sub(_escape, str(text))


def one_line(text: object) -> str:
    """Like :func:`readable`, and line breaks and tabs escaped too (for one-line fields)."""
    return _UNSAFE_OR_BREAK.sub(_escape, str(text))


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, an ellipsis marking the cut."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def fmt_duration(ns: float) -> str:
    """A duration in nanoseconds as a short human figure: ``850 µs``, ``12 ms``, ``3.4 s``."""
    if ns < 0:
        return "-" + fmt_duration(-ns)
    if ns < 1_000_000:
        return f"{ns / 1_000:.0f} µs"
    ms = ns / 1_000_000
    if ms < 10:
        return f"{ms:.1f} ms"
    if ms < 1_000:
        return f"{ms:.0f} ms"
    seconds = ms / 1_000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    return f"{minutes // 60} h {minutes % 60} min"
