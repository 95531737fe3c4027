"""A custom args matcher for ``booking.yaml``: ``(call_args, reference_args) -> bool``."""

from __future__ import annotations

from typing import Any


def same_city(call_args: Any, reference_args: Any) -> bool:
    """The same city, whatever its case."""
    return str(call_args.get("city", "")).lower() == str(reference_args.get("city", "")).lower()
