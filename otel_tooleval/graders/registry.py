"""The registry that grader families plug into, and what every grader shares.

A family is one module: a pydantic params model next to its logic, and one ``register`` call.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from ..model import AgentRun, GradeResult

__all__ = [
    "CONFIGURATION_ERROR",
    "REGISTRY",
    "Grader",
    "GraderFamily",
    "GradingConfigError",
    "Problem",
    "did_you_mean",
    "families",
    "family_by_keys",
    "family_for",
    "problems_from_validation",
    "register",
]

Loc = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Problem:
    """One configuration problem: where it is and what is wrong."""

    loc: Loc
    message: str
    #: The problem is a mapping's key itself (pydantic's ``[key]``, dropped from ``loc``): a
    #: family may word it as an unknown name (function_sets' targets and operators).
    key: bool = field(default=False, compare=False)

    def render(self) -> str:
        return f"{format_loc(self.loc)}: {self.message}" if self.loc else self.message


def format_loc(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "<config>"


class GradingConfigError(Exception):
    """A configuration problem that only shows when a run is graded (label ``error``)."""


#: ``GradeResult.error`` of a result that met a ``GradingConfigError``: the config, not the
#: agent, is wrong (``grade`` exits 2 on it, not 1).
CONFIGURATION_ERROR = "ConfigurationError"


@runtime_checkable
class Grader(Protocol):
    """A configured grader: one verdict per run."""

    name: str
    type: str

    def grade(self, run: AgentRun) -> GradeResult: ...


@runtime_checkable
class AggregatingGrader(Grader, Protocol):
    """A grader whose verdicts also combine across runs (equal-function sets' micro-average).

    ``aggregate`` receives this grader's results over a group of runs and returns a
    JSON-serialisable mapping with at least ``passed`` (bool).
    """

    def aggregate(self, results: Sequence[GradeResult]) -> Mapping[str, Any]: ...


class AggregateTally(Protocol):
    """``AggregatingGrader.aggregate`` computed as results arrive, without keeping them."""

    def add(self, result: GradeResult) -> None: ...

    def combined(self) -> Mapping[str, Any]: ...


@runtime_checkable
class TallyingGrader(AggregatingGrader, Protocol):
    """An aggregating grader that can also combine its results one at a time: ``tally()``
    gives an empty :class:`AggregateTally` whose ``combined()`` equals ``aggregate`` over the
    results added. ``grade`` then keeps sums, not results, however many runs it reads."""

    def tally(self) -> AggregateTally: ...


@dataclass(frozen=True, slots=True)
class BuildContext:
    """Config-wide settings a family may need when it builds a grader.

    ``base_dir`` is the directory of the config file (None for a mapping or YAML text), against
    which relative paths in the config (a custom grader's ``file.py``) are resolved.
    ``session`` is True for entries under ``sessions.graders`` (turn-aware forms allowed).
    """

    include_values: bool = False
    ground_truth_attribute: str = "tooleval.ground_truth"
    base_dir: Path | None = None
    session: bool = False


@dataclass(frozen=True, slots=True)
class GraderFamily:
    """A family of graders: its type ids and how an entry of the config becomes a grader.

    ``build(entry, name, include_values)`` receives the entry without the shared keys
    (``name``, ``agents``, and the ``type``/``kind`` that chose the family) and returns a
    grader; it raises ``pydantic.ValidationError`` or ``ConfigProblems`` for bad entries,
    located relative to the entry.

    ``build_with_context``, when given, is used instead of ``build`` and receives the
    config-wide ``BuildContext``.

    ``keys`` are keys that identify the family in an entry without its type, for shapes pasted
    from the original tools (mcptest's ``equal_function_sets:`` block); such an entry reaches
    ``build`` with its ``type``/``kind`` left in. ``schema`` returns the JSON Schema of one entry
    (for ``otel-tooleval schema``).
    """

    type: str
    aliases: tuple[str, ...]
    build: Callable[[Mapping[str, Any], str, bool], Grader]
    keys: tuple[str, ...] = ()
    schema: Callable[[], dict[str, Any]] | None = None
    build_with_context: Callable[[Mapping[str, Any], str, BuildContext], Grader] | None = None


class ConfigProblems(Exception):
    """Raised by a family's ``build`` with problems located relative to the entry."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(p.render() for p in problems))
        self.problems = problems


REGISTRY: dict[str, GraderFamily] = {}


def register(family: GraderFamily) -> GraderFamily:
    for key in (family.type, *family.aliases):
        REGISTRY[key] = family
    return family


def family_for(type_id: str) -> GraderFamily | None:
    return REGISTRY.get(type_id)


def family_by_keys(entry: Mapping[str, Any]) -> GraderFamily | None:
    """The family one of whose identifying ``keys`` the entry carries, if any."""
    for family in set(REGISTRY.values()):
        if any(key in entry for key in family.keys):
            return family
    return None


def families() -> list[GraderFamily]:
    """Every registered family once, in registration order."""
    return list(dict.fromkeys(REGISTRY.values()))


_MESSAGES = {
    "extra_forbidden": "unknown key",
    "missing": "required key is missing",
}


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known``, or nothing when none is close."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation may hold (through Optional, unions, lists, dicts)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if isinstance(annotation, (types.GenericAlias, types.UnionType)) or typing.get_origin(
            annotation) is not None:
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


def _keys_at(model: type[BaseModel], path: Loc) -> set[str]:
    """The keys a model accepts at ``path`` (list indexes and dict keys walked through)."""
    models = [model]
    for part in path:
        if isinstance(part, int):
            continue
        inner: list[type[BaseModel]] = []
        for m in models:
            field = m.model_fields.get(part)
            inner.extend(_models_in(field.annotation) if field is not None else [m])
        models = inner
        if not models:
            return set()
    keys: set[str] = set()
    for m in models:
        for name, field in m.model_fields.items():
            keys.add(field.alias or name)
    return keys


def problems_from_validation(err: ValidationError, prefix: Loc = (),
                             extra_messages: Mapping[str, str] | None = None,
                             model: type[BaseModel] | None = None) -> list[Problem]:
    """Turn pydantic errors into located problems with messages a person can act on.

    With the ``model`` that was validated, an unknown key names the closest known one.
    """
    problems = []
    for e in err.errors(include_url=False):
        # pydantic marks a dict key's own error with "[key]" after the key: the key names it.
        key = "[key]" in e["loc"]
        loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and (
            p.startswith("function-") or p == "[key]")))
        message = _MESSAGES.get(e["type"], e["msg"])
        if e["type"] == "extra_forbidden" and loc:
            hint = extra_messages.get(str(loc[-1])) if extra_messages else None
            if hint is not None:
                message = hint
            elif model is not None:
                message += did_you_mean(str(loc[-1]), _keys_at(model, loc[:-1]))
        if e["type"] == "value_error" and message.startswith("Value error, "):
            message = message[len("Value error, "):]
        problems.append(Problem(prefix + loc, message, key))
    return problems


def params_of(model: type[BaseModel], data: Any, extra_messages: Mapping[str, str] | None = None,
              ) -> Any:
    """Validate ``data`` with ``model``; raise ConfigProblems with entry-relative locations."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigProblems(problems_from_validation(err, (), extra_messages, model)) from None
