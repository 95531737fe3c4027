"""Grade details worked out when read: ``_Details`` and its ``_Later`` values.

A live run reads a grade's verdict and explanation, at most its violations; a report reads
every row. ``tool_trajectory`` keeps the rows as ``_Later`` calls, so only what is read is built.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any

__all__ = ["_Details", "_Later"]


class _Later(partial[Any]):
    """A value of ``_Details`` worked out on first read: the call of a function."""

    __slots__ = ()


class _Details(Mapping[str, Any]):
    """The details of a sequence-mode grade, read-only: the keys and values of a plain dict
    in the same order, but the values held as ``_Later`` (the per-entry ``entries`` rows and
    the ``violations``, one dict per entry or call) are worked out on first read and kept. A
    live run reads the explanation and at most the violations, so a grade builds no rows;
    ``dict()``, ``to_dict()`` and a pickle give the plain dict."""

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def __getitem__(self, key: str) -> Any:
        value = self._values[key]
        if value.__class__ is _Later:
            value = self._values[key] = value()
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __repr__(self) -> str:
        return repr(dict(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (dict(self),)
