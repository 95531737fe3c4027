"""The ``tool-calls`` grader (seeds/tool-calls.txt): required, disallowed and sequence checks.

Each required entry, each disallowed entry and the whole sequence is one check; the grader
passes when every check holds and scores the fraction that hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from ..model import AgentRun, GradeResult, ToolCall
from ..violations import violation
from .matching import UserRegex, compile_user, matches, max_match_chars
from .registry import (
    CONFIGURATION_ERROR,
    ConfigProblems,
    GraderFamily,
    GradingConfigError,
    Problem,
    params_of,
    register,
)

__all__ = ["Matcher", "SequenceMatch", "ToolCallsGrader", "ToolCallsParams", "ToolMatch"]

TYPE = "tool-calls"


def _compile(pattern: str) -> UserRegex:
    return compile_user(pattern)


class _Match(BaseModel):
    """Fields every entry kind shares. Patterns are compiled when the config loads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: StrictStr
    command: StrictStr | None = None
    path: StrictStr | None = None
    args: dict[StrictStr, StrictStr] | None = None

    @field_validator("name", "command", "path")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is not None:
            _compile(value)
        return value

    @field_validator("args")
    @classmethod
    def _arg_patterns(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for key, pattern in (value or {}).items():
            try:
                _compile(pattern)
            except ValueError as exc:
                raise ValueError(f"args.{key}: {exc}") from None
        return value


class SequenceMatch(_Match):
    """A sequence entry: matched at invocation time, so no result and no positional keys."""


class DisallowedMatch(_Match):
    result: StrictStr | None = None

    @field_validator("result")
    @classmethod
    def _result_pattern(cls, value: str | None) -> str | None:
        if value is not None:
            _compile(value)
        return value


class ToolMatch(DisallowedMatch):
    """A required entry: every filter, plus count and position constraints."""

    min_count: StrictInt = Field(default=1, ge=1)
    final: StrictBool = False
    at_step: StrictInt | None = Field(default=None, ge=0)
    before_step: StrictInt | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _steps(self) -> ToolMatch:
        if (self.at_step is not None and self.before_step is not None
                and self.at_step >= self.before_step):
            raise ValueError(
                f"at_step ({self.at_step}) must be less than before_step "
                f"({self.before_step}): no step could satisfy both"
            )
        return self


def _shorthand(value: Any) -> Any:
    if isinstance(value, list):
        return [{"name": v} if isinstance(v, str) else v for v in value]
    return value


class ToolCallsParams(BaseModel):
    """The ``config:`` block of a tool-calls grader."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    required: list[ToolMatch] | None = None
    disallowed: list[DisallowedMatch] | None = None
    sequence: list[SequenceMatch] | None = None

    @field_validator("required", "disallowed", "sequence", mode="before")
    @classmethod
    def _strings_are_names(cls, value: Any) -> Any:
        return _shorthand(value)

    @model_validator(mode="after")
    def _something(self) -> ToolCallsParams:
        if not (self.required or self.disallowed or self.sequence):
            raise ValueError("at least one of required, disallowed or sequence must be given")
        return self


_ROLE_ONLY = {
    "min_count": "min_count is only allowed on required entries",
    "final": "final is only allowed on required entries",
    "at_step": "at_step is only allowed on required entries",
    "before_step": "before_step is only allowed on required entries",
    "result": "result is not supported on sequence entries (they match before the result exists)",
}


class _Matcher:
    """A compiled ToolMatch."""

    __slots__ = ("args", "command", "filters", "label", "name", "path", "required_args",
                 "result", "spec")

    def __init__(self, spec: SequenceMatch | DisallowedMatch | ToolMatch) -> None:
        self.spec = spec
        self.name = compile_user(spec.name)
        self.command = compile_user(spec.command) if spec.command is not None else None
        self.path = compile_user(spec.path) if spec.path is not None else None
        self.args = {k: compile_user(v) for k, v in (spec.args or {}).items()}
        result = getattr(spec, "result", None)
        self.result = compile_user(result) if result is not None else None
        filters = [k for k in ("command", "path", "args", "result") if getattr(spec, k, None)]
        self.label = spec.name + (f" (with {', '.join(filters)})" if filters else "")
        # Arguments that must hold a string (command, path), and every argument filter in the
        # order they are tried: command, path, then args.
        self.required_args = tuple((k, p) for k, p in (("command", self.command),
                                                         ("path", self.path)) if p is not None)
        self.filters = self.required_args + tuple(self.args.items())

    def hits(self, candidates: list[ToolCall]) -> list[ToolCall]:
        """The name-matching ``candidates`` that match every filter, in call order."""
        if not self.filters and self.result is None:
            return candidates
        self.check_arguments(candidates)
        return [c for c in candidates if self.filters_match(c)]

    def check_arguments(self, calls: list[ToolCall]) -> None:
        """SEMANTICS 3: every name-matching call must hold the ``command``/``path`` it filters on
        (whatever its step, order or completion), else the config is wrong for these tools."""
        for key, _ in self.required_args:
            for call in calls:
                if not isinstance(call.argument(key), str):
                    raise GradingConfigError(
                        f"matcher {self.spec.name!r} filters on {key!r}, but call #{call.index} "
                        f"({call.name}) has no string {key!r} argument"
                    )

    def filters_match(self, call: ToolCall) -> bool:
        """Argument and result filters (call ``check_arguments`` on the candidates first)."""
        if self.filters:
            args = call.arguments
            if args.__class__ is not dict and not isinstance(args, Mapping):
                return False    # no argument to match (as ``ToolCall.argument`` finds)
            for key, pattern in self.filters:
                value = args.get(key)
                if not isinstance(value, str) or not matches(pattern, value):
                    return False
        if self.result is not None:
            text = call.result_text
            if text is None or not matches(self.result, text):
                return False
        return True


#: A compiled entry, for other users of the same matching (the live guard's ``disallowed``).
Matcher = _Matcher


#: Tool names whose matchers a grader remembers at most: beyond this, names are searched
#: every time.
_MAX_REMEMBERED_NAMES = 1024


class ToolCallsGrader:
    """Grades a run against required / disallowed / sequence matchers."""

    type = TYPE
    names_calls = True

    def __init__(self, name: str, params: ToolCallsParams) -> None:
        self.name = name
        self.params = params
        self.required = [(_Matcher(m), m) for m in params.required or ()]
        self.disallowed = [_Matcher(m) for m in params.disallowed or ()]
        self.sequence = [_Matcher(m) for m in params.sequence or ()]
        self.matchers = (*(m for m, _ in self.required), *self.disallowed, *self.sequence)
        # Tool name -> positions (in ``matchers``) of the matchers whose name pattern it
        # matches, shared by every run: an agent uses a handful of tool names, and each
        # matcher would search each of them in every run.
        self.names: dict[str, tuple[int, ...]] = {}

    def grade(self, run: AgentRun) -> GradeResult:
        candidates = iter(self._candidates(run.calls_by_name()))
        try:
            checks = [self._required(i, m, spec, run, next(candidates))
                      for i, (m, spec) in enumerate(self.required)]
            checks += [self._disallowed(i, m, next(candidates))
                       for i, m in enumerate(self.disallowed)]
            if self.sequence:
                checks.append(self._sequence(run, [next(candidates) for _ in self.sequence]))
        except GradingConfigError as exc:
            return GradeResult.failure(self.name, TYPE, CONFIGURATION_ERROR, str(exc))
        held = sum(1 for c in checks if c["passed"])
        passed = held == len(checks)
        failing = [c["message"] for c in checks if not c["passed"]]
        if len(checks) == 1:
            explanation = checks[0]["message"][:1].upper() + checks[0]["message"][1:] + "."
        elif passed:
            explanation = f"All {len(checks)} checks hold."
        else:
            explanation = (f"{len(failing)} of {len(checks)} checks failed: "
                           + "; ".join(failing) + ".")
        details: dict[str, Any] = {"checks": checks}
        offending = [violation(run.calls[j], f"disallowed {c['matcher']!r}")
                     for c in checks if c["check"] == "disallowed" for j in c["calls"]]
        if offending:
            details["violations"] = sorted(offending, key=_call_of)
        return GradeResult(
            name=self.name,
            type=TYPE,
            score=held / len(checks),
            passed=passed,
            label="pass" if passed else "fail",
            explanation=explanation,
            details=details,
        )

    def _candidates(self, by_name: Mapping[str, Sequence[ToolCall]]) -> list[list[ToolCall]]:
        """Per matcher (in ``matchers`` order), the calls whose name it matches, in call order:
        one regex search per matcher and distinct name, or none for a name seen before."""
        out: list[list[ToolCall]] = [[] for _ in self.matchers]
        merged: set[int] = set()
        known = self.names
        whole = max_match_chars()   # a longer name is searched cut (see ``search``)
        for name, calls in by_name.items():
            matching = known.get(name) if len(name) <= whole else None
            if matching is None:
                matching = tuple(k for k, m in enumerate(self.matchers)
                                 if matches(m.name, name))
                if len(name) <= whole and len(known) < _MAX_REMEMBERED_NAMES:
                    known[name] = matching
            for k in matching:
                if out[k]:
                    merged.add(k)
                out[k].extend(calls)
        for k in merged:    # calls of several names: back into call order
            out[k].sort(key=_index)
        return out

    def _required(self, i: int, m: _Matcher, spec: ToolMatch, run: AgentRun,
                  candidates: list[ToolCall]) -> dict[str, Any]:
        m.check_arguments(candidates)
        at, before = spec.at_step, spec.before_step
        filtered = bool(m.filters) or m.result is not None
        hits = [c for c in candidates
                if not c.pending and (at is None or c.step == at)
                and (before is None or c.step < before) and (not filtered or m.filters_match(c))]
        last = run.calls[-1] if run.calls else None
        if spec.final:
            final_ok = last is not None and any(c is last for c in hits)
            passed = final_ok and len(hits) >= spec.min_count
        else:
            passed = len(hits) >= spec.min_count
        where = ""
        if spec.at_step is not None:
            where += f" in step {spec.at_step}"
        if spec.before_step is not None:
            where += f" before step {spec.before_step}"
        if passed:
            message = f"required {m.label!r} satisfied by call(s) {_positions(hits)}"
        elif spec.final and hits and last is not None and not any(c is last for c in hits):
            message = (f"required {m.label!r} must be the final call, but the final call is "
                       f"#{last.index} ({last.name})")
        else:
            want = f"at least {spec.min_count} completed calls" if spec.min_count > 1 else (
                "a completed call")
            message = (f"required {m.label!r} needs {want}{where}"
                       f"{' as the final call' if spec.final else ''}, found {len(hits)}")
        return {
            "check": "required", "index": i, "matcher": spec.name, "passed": passed,
            "calls": [c.index for c in hits], "count": len(hits), "min_count": spec.min_count,
            "message": message,
        }

    def _disallowed(self, i: int, m: _Matcher, candidates: list[ToolCall]) -> dict[str, Any]:
        hits = m.hits(candidates)
        passed = not hits
        message = (f"disallowed {m.label!r} not called" if passed
                   else f"disallowed {m.label!r} called at {_positions(hits)}")
        return {"check": "disallowed", "index": i, "matcher": m.spec.name, "passed": passed,
                "calls": [c.index for c in hits], "message": message}

    def _sequence(self, run: AgentRun, candidates: list[list[ToolCall]]) -> dict[str, Any]:
        # Each entry's matching calls, then greedy earliest matching, which is optimal for
        # "is an ordered subsequence".
        hits = [{c.index for c in m.hits(cands)} for m, cands in zip(self.sequence, candidates)]
        matched: list[int] = []
        pos = 0
        calls = run.calls
        for entry in hits:
            while pos < len(calls) and calls[pos].index not in entry:
                pos += 1
            if pos == len(calls):
                break
            matched.append(calls[pos].index)
            pos += 1
        passed = len(matched) == len(self.sequence)
        if passed:
            message = f"sequence satisfied by calls {matched}"
        else:
            missing = self.sequence[len(matched)]
            after = f" after call #{matched[-1]}" if matched else ""
            message = (f"sequence broken at entry {len(matched)} ({missing.label!r}): "
                       f"no matching call{after}")
        return {"check": "sequence", "passed": passed, "calls": matched,
                "matched_entries": len(matched), "entries": len(self.sequence),
                "message": message}


def _index(call: ToolCall) -> int:
    return call.index


def _call_of(entry: dict[str, Any]) -> int:
    return int(entry["call"])


def _positions(calls: Sequence[ToolCall]) -> str:
    return ", ".join(f"#{c.index} ({c.name})" for c in calls)


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    config: dict[str, Any]


def _build(entry: Mapping[str, Any], name: str, include_values: bool) -> ToolCallsGrader:
    outer = params_of(_Entry, entry)
    try:
        params = params_of(ToolCallsParams, outer.config, _ROLE_ONLY)
    except ConfigProblems as exc:
        raise ConfigProblems([Problem(("config", *p.loc, *_field_of(p.message)), p.message)
                              for p in exc.problems]) from None
    return ToolCallsGrader(name, params)


def _field_of(message: str) -> tuple[str, ...]:
    # Cross-field rules are checked on the whole entry; point at the field they name.
    return ("at_step",) if message.startswith("at_step (") else ()


def _schema() -> dict[str, Any]:
    schema = _Entry.model_json_schema()
    params = ToolCallsParams.model_json_schema()
    defs = params.pop("$defs", {})
    for key in ("required", "disallowed", "sequence"):
        # a plain string is shorthand for {name: ...}
        items = params["properties"][key]["anyOf"][0]["items"]
        params["properties"][key] = {"type": "array",
                                     "items": {"anyOf": [{"type": "string"}, items]}}
    schema["properties"]["config"] = params
    schema["properties"]["type"] = {"enum": [TYPE, "tool_calls"]}
    schema["required"] = ["type", "config"]
    schema["$defs"] = defs
    return schema


register(GraderFamily(TYPE, ("tool_calls",), _build, schema=_schema))
