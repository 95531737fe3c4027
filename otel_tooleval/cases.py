"""Eval cases: each case's own expected calls, matched to its run (docs/cases.md).

A case (``cases:`` in the config, or ``grade --cases FILE``)::

    - id: weather-paris
      match: {attribute: {key: tooleval.case.id, value: weather-paris}}
      # or {first_user_message: "What is the weather in Paris?"} (exact, after strip)
      # or {first_user_message_regex: "weather in Paris"}          (RE2, searched)
      expect: {trajectory: {expected: [{tool: get_weather, args: {city: Paris}}]}}
      graders: []

``CaseSet.match(run)`` finds a run's case with dict look-ups (attribute cases by key and value,
message cases by the stripped message); regex cases are tried only when no exact case matched.
This module validates the cases' shape; the graders they name are resolved with the config
(``config.config_from_mapping``), which builds each case's graders once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from .bounded_yaml import BoundedLoader, Unbounded
from .config_errors import ConfigError
from .graders.registry import Problem
from .local_files import FileRefused, read_local_file
from .model import AgentRun
from .user_regex import UserRegex, compile_user

__all__ = ["CASE_ATTRIBUTE", "Ambiguous", "Case", "CaseMatch", "CaseSet", "CaseTally",
           "first_user_message_of", "load_cases", "parse_cases", "read_cases"]

#: The root attribute that names a run's case, by default (and the one the live route sets).
CASE_ATTRIBUTE = "tooleval.case.id"
_WAYS = ("attribute", "first_user_message", "first_user_message_regex")
_CASE_KEYS = ("id", "match", "expect", "graders", "description")


@dataclass(frozen=True, slots=True)
class CaseMatch:
    """How a case finds its run: ``way`` is one of ``attribute``, ``first_user_message``,
    ``first_user_message_regex``; ``key`` the attribute's key (attribute only)."""

    way: str
    value: str
    key: str | None = None
    regex: UserRegex | None = field(default=None, compare=False, repr=False)

    def describe(self) -> str:
        if self.way == "attribute":
            return f"attribute {self.key}={self.value!r}"
        return f"{self.way} {self.value!r}"


@dataclass(frozen=True, slots=True)
class Case:
    """One case: its id, how it finds its run, the per-grader parameters it sets (by the name
    of a configured grader) and its own extra grader entries (config shape, unbuilt)."""

    id: str
    match: CaseMatch
    expect: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    graders: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Ambiguous:
    """A run that two or more cases match: an input problem."""

    cases: tuple[Case, ...]

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.cases)


def first_user_message_of(run: AgentRun) -> str | None:
    """The run's first user message (``conventions.inputs``), None when none was recorded."""
    reader = getattr(run.outputs, "first_user_message", None)
    return reader() if reader is not None else None


class CaseSet:
    """Validated cases, indexed for matching (module docstring)."""

    def __init__(self, cases: Sequence[Case]) -> None:
        self.cases: tuple[Case, ...] = tuple(cases)
        self.by_id: dict[str, Case] = {c.id: c for c in self.cases}
        self._attributes: dict[str, dict[str, list[Case]]] = {}
        self._messages: dict[str, list[Case]] = {}
        self._regexes: list[Case] = []
        for case in self.cases:
            m = case.match
            if m.way == "attribute":
                assert m.key is not None
                self._attributes.setdefault(m.key, {}).setdefault(m.value, []).append(case)
            elif m.way == "first_user_message":
                self._messages.setdefault(m.value, []).append(case)
            else:
                self._regexes.append(case)

    def __len__(self) -> int:
        return len(self.cases)

    def match(self, run: AgentRun) -> Case | Ambiguous | None:
        """The run's case; ``Ambiguous`` when two or more match; None when none does."""
        found: list[Case] = []
        attrs = run.root_attributes
        for key, values in self._attributes.items():
            value = attrs.get(key)
            if value is not None:
                found.extend(values.get(value if isinstance(value, str) else str(value), ()))
        message: str | None = None
        if self._messages or self._regexes:
            message = first_user_message_of(run)
        if message is not None and self._messages:
            found.extend(self._messages.get(message, ()))
        if not found and message is not None:
            found = [c for c in self._regexes
                     if c.match.regex is not None and c.match.regex.search(message)]
        if not found:
            return None
        return found[0] if len(found) == 1 else Ambiguous(tuple(found))


def parse_cases(data: Any, where: tuple[str | int, ...] = ("cases",)
                ) -> tuple[list[Case], list[Problem]]:
    """Validate a list of case entries; every problem with its location (``cases[3].match``)."""
    if not isinstance(data, list):
        return [], [Problem(where, f"must be a list of cases, got {type(data).__name__}")]
    cases: list[Case] = []
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(data):
        loc = (*where, i)
        case, found = _case(entry, loc)
        problems.extend(found)
        if case is None:
            continue
        if case.id in seen:
            problems.append(Problem((*loc, "id"), f"duplicate case id {case.id!r} (also "
                                                  f"{_render((*where, seen[case.id]))})"))
            continue
        seen[case.id] = i
        cases.append(case)
    return cases, problems


def _render(loc: tuple[str | int, ...]) -> str:
    return Problem(loc, "").render().rstrip(": ")


def _case(entry: Any, loc: tuple[str | int, ...]) -> tuple[Case | None, list[Problem]]:
    if not isinstance(entry, Mapping):
        return None, [Problem(loc, f"a case must be a mapping, got {type(entry).__name__}")]
    problems = [Problem((*loc, k), f"unknown key (a case has: {', '.join(_CASE_KEYS)})")
                for k in entry if k not in _CASE_KEYS]
    ident = entry.get("id")
    if not isinstance(ident, str) or not ident.strip():
        problems.append(Problem((*loc, "id"), "required: a non-empty string naming the case"))
    match, found = _match(entry.get("match"), (*loc, "match"),
                          ident if isinstance(ident, str) else "")
    problems.extend(found)
    expect = entry.get("expect") or {}
    if not isinstance(expect, Mapping):
        problems.append(Problem((*loc, "expect"), "must map grader names to their parameters "
                                                  "for this case"))
    else:
        for name, params in expect.items():
            if not isinstance(params, Mapping):
                problems.append(Problem((*loc, "expect", str(name)), "must be a mapping of the "
                                        f"grader's keys, got {type(params).__name__}"))
    graders = entry.get("graders") or []
    if not isinstance(graders, list):
        problems.append(Problem((*loc, "graders"), "must be a list of grader entries"))
    if problems or match is None:
        return None, problems
    assert isinstance(ident, str)
    return Case(ident.strip(), match, dict(expect), tuple(graders)), []


def _match(raw: Any, loc: tuple[str | int, ...], ident: str
           ) -> tuple[CaseMatch | None, list[Problem]]:
    if raw is None:
        # No match: given: the case id on the root, the attribute the live route sets.
        return CaseMatch("attribute", ident.strip(), CASE_ATTRIBUTE), []
    if not isinstance(raw, Mapping):
        return None, [Problem(loc, "must be a mapping with one of: " + ", ".join(_WAYS))]
    ways = [w for w in raw if w in _WAYS]
    unknown = [k for k in raw if k not in _WAYS]
    if unknown:
        return None, [Problem((*loc, str(unknown[0])),
                              f"unknown way to match (one of: {', '.join(_WAYS)})")]
    if len(ways) != 1:
        return None, [Problem(loc, "give exactly one of: " + ", ".join(_WAYS))]
    way = ways[0]
    value = raw[way]
    if way == "attribute":
        if isinstance(value, str):
            value = {"value": value}
        if not isinstance(value, Mapping):
            return None, [Problem((*loc, way), "must be {key: ..., value: ...} (key defaults "
                                               f"to {CASE_ATTRIBUTE})")]
        key = value.get("key", CASE_ATTRIBUTE)
        wanted = value.get("value", ident)
        bad = [k for k in value if k not in ("key", "value")]
        if bad:
            return None, [Problem((*loc, way, str(bad[0])), "unknown key (key, value)")]
        if not isinstance(key, str) or not key:
            return None, [Problem((*loc, way, "key"), "must be a non-empty attribute key")]
        if isinstance(wanted, bool) or not isinstance(wanted, (str, int, float)):
            return None, [Problem((*loc, way, "value"), "must be a string or a number")]
        return CaseMatch(way, str(wanted), key), []
    if not isinstance(value, str) or not value.strip():
        return None, [Problem((*loc, way), "must be a non-empty string")]
    if way == "first_user_message":
        return CaseMatch(way, value.strip()), []
    try:
        regex = compile_user(value)
    except ValueError as exc:
        return None, [Problem((*loc, way), str(exc))]
    return CaseMatch(way, value, regex=regex), []


#: The largest case file read (a 10,000-case suite is a few MiB).
MAX_CASES_BYTES = 64 * 1024 * 1024


def read_cases(path: str | os.PathLike[str]) -> list[Any]:
    """The case entries of a file: YAML or JSON (a list, or a mapping with ``cases:``) or
    JSON lines (one case per line).

    Raises:
        ConfigError: the file cannot be read or parsed, or holds no list of cases.
    """
    name = os.fspath(path)

    def fail(message: str, loc: tuple[str | int, ...] = ()) -> ConfigError:
        return ConfigError([Problem(loc, message)], name, what="case set")

    try:   # a regular file of bounded size only, as a config (a FIFO would hang)
        text = read_local_file(name, max_bytes=MAX_CASES_BYTES).data.decode("utf-8")
    except FileRefused as exc:
        raise fail(f"cannot read it: {exc.reason}") from None
    except UnicodeDecodeError as exc:
        raise fail(f"cannot read it: {exc}") from None
    if name.endswith(".jsonl"):
        entries = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    entries.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise fail(f"line {n}: not JSON: {exc.msg}") from None
        return entries
    try:   # YAML bounded as a config's is (depth, values with aliases expanded)
        doc = json.loads(text) if name.endswith(".json") else _bounded_yaml(text)
    except Unbounded as exc:
        mark = exc.problem_mark
        raise fail(f"refused: line {mark.line + 1}, column {mark.column + 1}: "
                   f"{exc.problem}") from None
    except (json.JSONDecodeError, RecursionError, yaml.YAMLError) as exc:
        raise fail(f"not {'JSON' if name.endswith('.json') else 'YAML'}: "
                   f"{str(exc).splitlines()[0]}") from None
    if isinstance(doc, Mapping) and "cases" in doc:
        doc = doc["cases"]
    if not isinstance(doc, list):
        raise fail("holds no list of cases (a list, or a mapping with cases:)")
    return doc


def _bounded_yaml(text: str) -> Any:
    loader = BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load_cases(source: str | os.PathLike[str] | Sequence[Any]) -> CaseSet:
    """Validate cases from a file path or a list of entries (their graders unresolved: a
    config resolves them, ``config_from_mapping`` with ``cases:``).

    Raises:
        ConfigError: every problem, each located (``cases[3].match.first_user_message``).
    """
    name = None
    if isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        source = read_cases(source)
    cases, problems = parse_cases(list(source))
    if problems:
        raise ConfigError(problems, name, what="case set")
    return CaseSet(cases)


class CaseTally:
    """The ``cases`` list of a grade report, built as runs are graded: per case its runs and,
    per grader, the lowest score over them (the worst run speaks for the case)."""

    def __init__(self, cases: CaseSet) -> None:
        self.cases = cases
        self._runs: dict[str, list[dict[str, str]]] = {}
        self._results: dict[str, dict[str, dict[str, Any]]] = {}

    def add(self, case: str | None, trace_id: str, root_span_id: str,
            results: Iterable[Any]) -> None:
        if case is None:
            return
        self._runs.setdefault(case, []).append({"trace_id": trace_id,
                                                "root_span_id": root_span_id})
        worst = self._results.setdefault(case, {})
        for r in results:
            seen = worst.get(r.name)
            if seen is None or r.score < seen["score"] or (not r.passed and seen["passed"]):
                worst[r.name] = {"name": r.name, "score": r.score, "label": r.label,
                                 "passed": r.passed}

    def result(self) -> list[dict[str, Any]]:
        """One entry per case, in the order of the case set."""
        out = []
        for case in self.cases.cases:
            runs = self._runs.get(case.id, [])
            results = list(self._results.get(case.id, {}).values())
            status = ("missing" if not runs
                      else "pass" if all(r["passed"] for r in results) else "fail")
            out.append({"id": case.id, "status": status, "passed": status == "pass",
                        "match": case.match.describe(), "runs": runs, "results": results})
        return out

    def summary(self) -> dict[str, int]:
        counts = {"cases": len(self.cases), "passed": 0, "failed": 0, "missing": 0}
        for entry in self.result():
            counts[{"pass": "passed", "fail": "failed"}.get(entry["status"], "missing")] += 1
        return counts
