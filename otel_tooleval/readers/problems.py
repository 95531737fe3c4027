"""What a reader says about bad input: a problem it skipped, or an error that stops it."""

from __future__ import annotations

import binascii
import logging
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["BAD_SHAPE", "InputError", "InputProblem", "ProblemSink", "describe", "log_problem",
           "where"]

_log = logging.getLogger("otel_tooleval.readers")

# What converting a span, document or message of the wrong shape raises.
BAD_SHAPE: tuple[type[Exception], ...] = (
    KeyError, TypeError, ValueError, AttributeError, IndexError, binascii.Error)


@dataclass(frozen=True, slots=True)
class InputProblem:
    """A malformed line, document, message or span that was skipped; the rest was read.

    ``line`` is the 1-based line of a JSON-lines file, None where lines do not apply (a
    pretty-printed document, protobuf); ``message`` then says where (a JSON path or a message
    number and byte offset).
    """

    path: str
    line: int | None
    message: str

    def __str__(self) -> str:
        return f"{where(self.path, self.line)}: {self.message}"


class InputError(Exception):
    """The whole input is unreadable: unknown format, not decodable, or not there at all.

    The message names the file and, where known, the line.
    """


ProblemSink = Callable[[InputProblem], None]


def where(path: str, line: int | None) -> str:
    """``path:line`` (or just ``path``), as compilers and linters name a place in a file."""
    return path if line is None else f"{path}:{line}"


def log_problem(problem: InputProblem) -> None:
    """The default sink: one warning per problem."""
    _log.warning("skipped %s", problem)


def describe(exc: BaseException) -> str:
    """A short reason for a ``BAD_SHAPE`` exception, fit for a problem message."""
    if isinstance(exc, KeyError):
        return f"missing {exc.args[0]!r}" if exc.args else "a field is missing"
    if isinstance(exc, (TypeError, AttributeError)):
        return "a field has the wrong type"
    return str(exc) or type(exc).__name__
