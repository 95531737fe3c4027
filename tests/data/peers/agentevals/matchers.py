"""Argument matchers named by ``tool_args_match_overrides`` in the differential test.

Both sides load this file: the peer script imports it, our config names it as
``matchers.py:<function>``. Each takes ``(call_args, reference_args)``; ``covers_city`` is
asymmetric on purpose, so that a swapped call (agentevals' subset and unordered modes) shows.
"""

from __future__ import annotations

from typing import Any


def covers_city(call_args: Any, reference_args: Any) -> bool:
    """The call names the reference's city and has at least as many keys."""
    return (call_args.get("city") == reference_args.get("city")
            and len(call_args) >= len(reference_args))


def same_q(call_args: Any, reference_args: Any) -> bool:
    """Symmetric: the same ``q`` (both absent counts as the same)."""
    return call_args.get("q") == reference_args.get("q")
