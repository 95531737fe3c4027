"""The ``tool_trajectory_avg_score`` grader (PEER-GRADERS 2: Google ADK's trajectory criterion).

One agent run is one ADK invocation: it scores 1.0 when its calls match the expected tool uses,
else 0.0, and passes when the score reaches the criterion's threshold. ``EXACT``: the same
length and, position by position, equal names and (unless ``ignore_args``) equal args.
``IN_ORDER``: the expected uses are a subsequence of the calls. ``ANY_ORDER``: each expected use
has a distinct call of its own, in any order. Extra calls are free in the last two.

The ``criteria`` block is pasted from ADK's ``test_config.json``; ``expected_tool_use`` is ADK's
``tool_uses`` list (``intermediate_data: {tool_uses: [...]}`` works too). Args are compared whole
by value equality (``tool_call_checks.same_value``): ``true`` is not ``1`` as it is in ADK.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ..model import AgentRun, GradeResult, ToolCall
from ..sessions.turns import TurnsGrader
from ..values import json_values
from ..violations import violation
from .registry import (
    BuildContext,
    ConfigProblems,
    Grader,
    GraderFamily,
    Problem,
    params_of,
    register,
)
from .tool_call_checks import same_value

__all__ = ["AvgScoreParams", "Criterion", "ToolTrajectoryAvgScoreGrader", "ToolUse"]

TYPE = "tool_trajectory_avg_score"
ALIASES = ("tool-trajectory-avg-score",)

MatchType = Literal["EXACT", "IN_ORDER", "ANY_ORDER"]
#: ADK's enum values: ``ToolTrajectoryCriterion.MatchType`` is an int enum.
_MATCH_BY_INT: dict[int, MatchType] = {0: "EXACT", 1: "IN_ORDER", 2: "ANY_ORDER"}
UnitInterval = Annotated[float, Field(strict=True, ge=0, le=1, allow_inf_nan=False)]
ToolName = Annotated[StrictStr, Field(min_length=1)]

_SESSIONS = ("a conversation of several runs (one per ADK invocation) is a session: put this "
             "grader under sessions.graders (docs/sessions.md), where expected_invocations "
             "grades each run of the session against its own list. For one run, give its "
             "calls as expected_tool_use")


def _snake_keys(value: Any, camel: Mapping[str, str]) -> Any:
    """ADK's models take camelCase aliases too: rename them, refusing a key given both ways."""
    if not isinstance(value, Mapping) or not any(k in value for k in camel):
        return value
    out = dict(value)
    for alias, name in camel.items():
        if alias in out:
            if name in out:
                raise PydanticCustomError(
                    "given_twice", "{alias} and {name} are the same key; keep one",
                    {"alias": alias, "name": name})
            out[name] = out.pop(alias)
    return out


class Criterion(BaseModel):
    """ADK's ``ToolTrajectoryCriterion`` as ``test_config.json`` writes it (object form)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    threshold: UnitInterval = Field(description="passes when the score >= threshold")
    match_type: MatchType = Field(
        default="EXACT", description="EXACT | IN_ORDER | ANY_ORDER (any case, - or space for _, "
                                     "or ADK's enum ints 0, 1, 2)")
    ignore_args: StrictBool = Field(default=False, description="compare tool names only")
    include_intermediate_responses_in_final: StrictBool = Field(
        default=False, description="ADK's option for response metrics; no effect on tool calls")

    @model_validator(mode="before")
    @classmethod
    def _camel(cls, value: Any) -> Any:
        return _snake_keys(value, {
            "matchType": "match_type", "ignoreArgs": "ignore_args",
            "includeIntermediateResponsesInFinal": "include_intermediate_responses_in_final"})

    @field_validator("match_type", mode="before")
    @classmethod
    def _match_type(cls, value: Any) -> Any:
        if isinstance(value, str):       # as ADK normalises it
            return value.strip().upper().replace("-", "_").replace(" ", "_")
        if isinstance(value, int) and not isinstance(value, bool) and value in _MATCH_BY_INT:
            return _MATCH_BY_INT[value]
        return value


_LLM_METRICS = ("response_evaluation_score", "final_response_match_v2", "safety_v1",
                "rubric_based_final_response_quality_v1", "hallucinations_v1",
                "rubric_based_tool_use_quality_v1", "per_turn_user_simulator_quality_v1",
                "multi_turn_task_success_v1", "multi_turn_trajectory_quality_v1",
                "multi_turn_tool_use_quality_v1", "rubric_based_multi_turn_trajectory_quality_v1")
_OTHER_METRICS = ("response_match_score", "tool_call_count_v1", "inference_call_count_v1",
                  "token_usage_v1", "invocation_duration_v1")


class Criteria(BaseModel):
    """The ``criteria`` block of ADK's ``test_config.json``: this family's metric only."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool_trajectory_avg_score: Criterion = Field(
        description="a threshold (match_type EXACT) or {threshold, match_type, ignore_args}")

    @field_validator("tool_trajectory_avg_score", mode="before")
    @classmethod
    def _bare_threshold(cls, value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not 0 <= value <= 1:      # also NaN
                raise PydanticCustomError(
                    "threshold_range", "a threshold must be from 0 to 1, got {value}",
                    {"value": value})
            return {"threshold": value}
        if not isinstance(value, (Mapping, Criterion)):
            raise PydanticCustomError(
                "criterion_type", "must be a threshold (a number from 0 to 1) or an object "
                "with threshold, match_type and ignore_args")
        return value




class ToolUse(BaseModel):
    """One expected tool use: ADK's ``FunctionCall`` (``id`` is kept in ADK's files, unused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: ToolName
    args: dict[StrictStr, Any] | None = Field(
        default=None, description="compared whole with the call's arguments; left out: {}")
    id: StrictStr | None = Field(default=None, description="ADK's call id; not compared")

    _check_args = field_validator("args")(json_values)


class IntermediateData(BaseModel):
    """ADK's ``intermediate_data`` of an invocation; only ``tool_uses`` is graded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool_uses: list[ToolUse] = Field(default_factory=list)
    tool_responses: list[Any] = Field(default_factory=list,
                                      description="accepted as ADK writes it; not graded")
    intermediate_responses: list[Any] = Field(default_factory=list,
                                              description="accepted as ADK writes it; not graded")

    @model_validator(mode="before")
    @classmethod
    def _camel(cls, value: Any) -> Any:
        return _snake_keys(value, {"toolUses": "tool_uses", "toolResponses": "tool_responses",
                                   "intermediateResponses": "intermediate_responses"})


class AvgScoreParams(BaseModel):
    """One ``tool_trajectory_avg_score`` entry (``name`` and ``type`` aside)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    criteria: Criteria | None = Field(
        default=None, description="ADK's criteria block; default: threshold 1.0, EXACT")
    expected_tool_use: list[ToolUse] | None = Field(
        default=None, description="the expected tool uses of the run: [{name, args}]")
    intermediate_data: IntermediateData | None = Field(
        default=None, description="ADK's intermediate_data: {tool_uses: [...]}")

    @model_validator(mode="before")
    @classmethod
    def _camel(cls, value: Any) -> Any:
        return _snake_keys(value, {"expectedToolUse": "expected_tool_use",
                                   "intermediateData": "intermediate_data"})


def _hints() -> dict[str, str]:
    hints = {
        "expected_invocations": f"not in per-run graders: {_SESSIONS}",
        "expectedInvocations": f"not in per-run graders: {_SESSIONS}",
        "conversation": f"unknown key: an ADK conversation of several invocations is {_SESSIONS}",
        "threshold": "unknown key here: give it in criteria.tool_trajectory_avg_score "
                     "(a number, or {threshold: ...})",
        "match_type": "unknown key here: give it in criteria.tool_trajectory_avg_score",
        "ignore_args": "unknown key here: give it in criteria.tool_trajectory_avg_score",
        "tool_name": "unknown key (ADK's FunctionCall calls it name)",
        "tool_input": "unknown key (ADK's FunctionCall calls it args)",
    }
    for key in ("judge_model_options", "judgeModelOptions", "rubrics"):
        hints[key] = ("unknown key: options of an LLM judge, which otel-tooleval does not run "
                      "(tool_trajectory_avg_score needs none)")
    for metric in _LLM_METRICS:
        hints[metric] = ("an LLM-judged ADK metric: otel-tooleval runs no LLM, so it is refused; "
                         "keep only tool_trajectory_avg_score here")
    for metric in _OTHER_METRICS:
        hints[metric] = ("another ADK metric, not about the tool trajectory: this family grades "
                         "tool_trajectory_avg_score only; remove it")
    return hints


_DEFAULT = Criterion(threshold=1.0)


class ToolTrajectoryAvgScoreGrader:
    """Matches a run's calls against ADK's expected tool uses (EXACT, IN_ORDER or ANY_ORDER)."""

    type = TYPE

    def __init__(self, name: str, criterion: Criterion, expected: Sequence[ToolUse],
                 include_values: bool) -> None:
        self.name = name
        self.criterion = criterion
        # The resolved entry (``check`` prints it): one criteria form, one expected list.
        self.params = AvgScoreParams(
            criteria=Criteria(tool_trajectory_avg_score=criterion),
            expected_tool_use=[ToolUse(name=u.name, args=u.args or {}) for u in expected])
        self.match_type: MatchType = criterion.match_type
        self.ignore_args = criterion.ignore_args
        self.include_values = include_values
        # Expected args left out mean {}: a call's missing arguments are {} too.
        self.expected = tuple((u.name, {} if u.args is None else dict(u.args)) for u in expected)

    def matches(self, k: int, call: ToolCall) -> bool:
        name, args = self.expected[k]
        if call.name != name:
            return False
        if self.ignore_args:
            return True
        actual = call.arguments
        return same_value(args, {} if actual is None else actual)

    def grade(self, run: AgentRun) -> GradeResult:
        calls = run.calls
        if self.match_type == "EXACT":
            paired, why = self._exact(calls)
        elif self.match_type == "IN_ORDER":
            paired, why = self._in_order(calls)
        else:
            paired, why = self._any_order(calls)
        score = 1.0 if why is None else 0.0
        threshold = self.criterion.threshold
        passed = score >= threshold
        text = self._explain(calls, paired, why)
        if threshold < 1.0:
            text += f" Score {score:g} {'>=' if passed else '<'} threshold {threshold:g}."
        rows = []
        for k, (name, args) in enumerate(self.expected):
            j = paired[k]
            row: dict[str, Any] = {"entry": k, "tool": name, "call": j,
                                   "span_id": None if j is None else _hex(calls[j].span_id)}
            if self.include_values:
                row["expected_args"] = args
                row["arguments"] = None if j is None else calls[j].arguments
            rows.append(row)
        details: dict[str, Any] = {
            "match_type": self.match_type, "ignore_args": self.ignore_args,
            "threshold": threshold, "expected": len(self.expected), "actual": len(calls),
            "matched": sum(1 for j in paired if j is not None), "pairing": rows,
            "actual_tool_calls": [c.name for c in calls[:100]],
        }
        if self.match_type == "EXACT" and why is not None:
            details["violations"] = self._out_of_place(calls, paired)
        return GradeResult(self.name, TYPE, score, passed, "pass" if passed else "fail", text,
                           details)

    def _out_of_place(self, calls: Sequence[ToolCall], paired: Sequence[int | None]
                      ) -> list[dict[str, Any]]:
        """EXACT: the calls that are not the expected use at their position, and the extra
        ones (IN_ORDER and ANY_ORDER allow extra calls and blame none)."""
        n = len(self.expected)
        out = [violation(c, f"not the expected {self.expected[c.index][0]!r} "
                            f"(entry {c.index})")
               for c in calls[:n] if paired[c.index] is None]
        out += [violation(c, f"extra call beyond the {n} expected") for c in calls[n:]]
        return out

    # Each mode returns the pairing (entry -> call position or None) and, when the calls do
    # not match, the reason for the explanation.

    def _exact(self, calls: Sequence[ToolCall]) -> tuple[list[int | None], str | None]:
        n = len(self.expected)
        paired: list[int | None] = [k if k < len(calls) and self.matches(k, calls[k]) else None
                                    for k in range(n)]
        if len(calls) != n:
            return paired, (f"{len(calls)} call{_s(len(calls))} where {n} tool use{_s(n)} "
                            "were expected (EXACT needs the same number)")
        wrong = next((k for k in range(n) if paired[k] is None), None)
        if wrong is None:
            return paired, None
        name = self.expected[wrong][0]
        actual = calls[wrong].name
        what = (f"call #{wrong} ({actual!r}) has other args than entry {wrong}"
                if actual == name else f"call #{wrong} is {actual!r} where entry {wrong} "
                                       f"expects {name!r}")
        return paired, what

    def _in_order(self, calls: Sequence[ToolCall]) -> tuple[list[int | None], str | None]:
        # Greedy earliest matching: a subsequence exists exactly when this finds one.
        paired: list[int | None] = [None] * len(self.expected)
        k = 0
        for j, call in enumerate(calls):
            if k == len(self.expected):
                break
            if self.matches(k, call):
                paired[k] = j
                k += 1
        if k == len(self.expected):
            return paired, None
        after = f" after call #{paired[k - 1]}" if k else ""
        return paired, (f"entry {k} ({self.expected[k][0]!r}) has no matching call{after}, "
                        f"so only the first {k} of {len(self.expected)} were found in order")

    def _any_order(self, calls: Sequence[ToolCall]) -> tuple[list[int | None], str | None]:
        # Equality of (name, args) is an equivalence, so taking the first free equal call for
        # each entry pairs as many entries as any matching could. Calls are bucketed by a key
        # equal exactly when the values are (value_key), so this is linear, not entries x calls.
        by_name: dict[str, list[int]] = {}
        wanted = {name for name, _ in self.expected}
        buckets: dict[Any, deque[int]] = {}
        for j, call in enumerate(calls):
            if call.name not in wanted:
                continue
            by_name.setdefault(call.name, []).append(j)
            buckets.setdefault(self._key(call.name, call.arguments), deque()).append(j)
        paired: list[int | None] = []
        for name, args in self.expected:
            bucket = buckets.get(self._key(name, args))
            paired.append(bucket.popleft() if bucket else None)
        missing = [k for k, j in enumerate(paired) if j is None]
        if not missing:
            return paired, None
        reasons = []
        for k in missing[:3]:
            name = self.expected[k][0]
            if name not in by_name:
                reasons.append(f"entry {k} ({name!r}) was never called")
            elif any(self.matches(k, calls[j]) for j in by_name[name]):
                reasons.append(f"entry {k} ({name!r}): its equal calls are taken by other "
                               "entries")
            else:
                reasons.append(f"entry {k} ({name!r}): no call with equal args")
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        return paired, "; ".join(reasons) + more

    def _key(self, name: str, args: Any) -> Any:
        if self.ignore_args:
            return name
        return name, value_key({} if args is None else args)

    def _explain(self, calls: Sequence[ToolCall], paired: Sequence[int | None],
                 why: str | None) -> str:
        n = len(self.expected)
        what = "tool names" if self.ignore_args else "tool names and args"
        if why is not None:
            return f"{self.match_type}: {why}."
        if self.match_type == "EXACT":
            if not n:
                return "EXACT: no tool use expected and none made."
            return f"EXACT: the {n} call{_s(n)} equal the {n} expected tool use{_s(n)} ({what})."
        if not n:
            return f"{self.match_type}: no tool use expected; passes whatever was called."
        mode = "in order" if self.match_type == "IN_ORDER" else "in any order"
        at = ", ".join(f"#{j}" for j in paired[:5]) + (" …" if n > 5 else "")
        return (f"{self.match_type}: all {n} expected tool use{_s(n)} found {mode} ({what}) at "
                f"call{_s(n)} {at}; {len(calls) - n} other call{_s(len(calls) - n)}.")


def value_key(value: Any) -> Any:
    """A hashable key of a JSON value, equal for two values exactly when ``same_value`` holds:
    numbers by value (``1`` and ``1.0`` alike: Python hashes them alike), booleans apart from
    numbers, lists and tuples alike, objects by their keys and values in any order."""
    cls = value.__class__
    if cls is str:
        return value
    if isinstance(value, bool):
        return _BOOL, value
    if isinstance(value, (int, float)):
        if value.__class__ is float and math.isnan(value):
            return object()                                    # NaN equals nothing
        return _NUMBER, value
    if value is None:
        return _NULL
    if isinstance(value, Mapping):
        return _OBJECT, frozenset((k, value_key(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return _LIST, tuple(value_key(v) for v in value)
    try:
        return type(value), hash(value), value
    except TypeError:
        return object()


_BOOL, _NUMBER, _NULL, _OBJECT, _LIST = "\0b", "\0n", "\0z", "\0o", "\0l"


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _hex(span_id: int) -> str | None:
    return format(span_id, "016x") if span_id else None


class Invocation(BaseModel):
    """One of ADK's expected invocations as an eval case writes it; only the tool uses of its
    ``intermediate_data`` are graded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    intermediate_data: IntermediateData = Field(default_factory=IntermediateData)
    invocation_id: StrictStr | None = Field(default=None, description="not graded")
    user_content: Any = Field(default=None, description="not graded")
    final_response: Any = Field(default=None, description="not graded")
    creation_timestamp: float | None = Field(default=None, description="not graded")

    @model_validator(mode="before")
    @classmethod
    def _camel(cls, value: Any) -> Any:
        return _snake_keys(value, {"intermediateData": "intermediate_data",
                                   "invocationId": "invocation_id",
                                   "userContent": "user_content",
                                   "finalResponse": "final_response",
                                   "creationTimestamp": "creation_timestamp"})


class SessionParams(BaseModel):
    """``expected_invocations``: one expected list per run of the session (ADK's several
    invocations of one eval case), each a list of tool uses or an invocation object."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    expected_invocations: list[list[ToolUse] | Invocation] = Field(
        min_length=1, description="per run of the session, in run order: [{name, args}] or "
                                  "{intermediate_data: {tool_uses: [...]}}")


def _build(entry: Mapping[str, Any], name: str, context: BuildContext) -> Grader:
    include_values = context.include_values
    invocations_key = next((k for k in ("expected_invocations", "expectedInvocations")
                            if k in entry), None)
    if context.session and invocations_key is not None:
        given = [k for k in ("expected_tool_use", "expectedToolUse", "intermediate_data",
                             "intermediateData") if k in entry]
        if given:
            raise ConfigProblems([Problem((given[0],), "give expected_invocations or "
                                          f"{given[0]}, not both")])
        session: SessionParams = params_of(
            SessionParams, {"expected_invocations": entry[invocations_key]})
        rest = {k: v for k, v in entry.items() if k != invocations_key}
        params: AvgScoreParams = params_of(AvgScoreParams, {**rest, "expected_tool_use": []},
                                           _hints())
        criterion = params.criteria.tool_trajectory_avg_score if params.criteria else _DEFAULT
        turns = [ToolTrajectoryAvgScoreGrader(
                     name, criterion,
                     inv if isinstance(inv, list) else inv.intermediate_data.tool_uses,
                     include_values)
                 for inv in session.expected_invocations]
        return TurnsGrader(name, TYPE, turns, what="invocation",
                           pass_threshold=criterion.threshold)
    return _build_run(entry, name, include_values)


def _build_run(entry: Mapping[str, Any], name: str, include_values: bool,
               ) -> ToolTrajectoryAvgScoreGrader:
    params: AvgScoreParams = params_of(AvgScoreParams, entry, _hints())
    inline, nested = params.expected_tool_use, params.intermediate_data
    if inline is not None and nested is not None:
        raise ConfigProblems([Problem(("expected_tool_use",), "given twice: here and as "
                                      "intermediate_data.tool_uses; keep one")])
    if inline is None and nested is None:
        raise ConfigProblems([Problem(("expected_tool_use",), "required key is missing: give "
                                      "the expected tool uses (or intermediate_data.tool_uses)")])
    expected = inline if inline is not None else nested.tool_uses if nested else []
    criterion = params.criteria.tool_trajectory_avg_score if params.criteria else _DEFAULT
    return ToolTrajectoryAvgScoreGrader(name, criterion, expected, include_values)


def _schema() -> dict[str, Any]:
    schema = AvgScoreParams.model_json_schema()
    schema["title"] = TYPE
    schema["properties"]["type"] = {"enum": [TYPE, *ALIASES]}
    schema["required"] = ["type"]
    schema["anyOf"] = [{"required": ["expected_tool_use"]}, {"required": ["intermediate_data"]},
                       {"required": ["expectedToolUse"]}, {"required": ["intermediateData"]}]
    # What the validators accept beyond the models: a bare threshold, camelCase keys, enum ints.
    defs = schema["$defs"]
    criteria = defs["Criteria"]["properties"]
    criteria["tool_trajectory_avg_score"] = {
        "description": criteria["tool_trajectory_avg_score"].get("description", ""),
        "anyOf": [{"type": "number", "minimum": 0, "maximum": 1},
                  {"$ref": "#/$defs/Criterion"}]}
    props = defs["Criterion"]["properties"]
    props["match_type"] = {"description": props["match_type"]["description"],
                           "anyOf": [{"type": "string"}, {"enum": [0, 1, 2]}]}
    props["matchType"] = props["match_type"]
    props["ignoreArgs"] = props["ignore_args"]
    props["includeIntermediateResponsesInFinal"] = props[
        "include_intermediate_responses_in_final"]
    inter = defs["IntermediateData"]["properties"]
    inter["toolUses"], inter["toolResponses"] = inter["tool_uses"], inter["tool_responses"]
    inter["intermediateResponses"] = inter["intermediate_responses"]
    schema["properties"]["expectedToolUse"] = schema["properties"]["expected_tool_use"]
    schema["properties"]["intermediateData"] = schema["properties"]["intermediate_data"]
    return schema


def _build_plain(entry: Mapping[str, Any], name: str, include_values: bool) -> Grader:
    return _build(entry, name, BuildContext(include_values=include_values))


register(GraderFamily(TYPE, ALIASES, _build_plain, schema=_schema, build_with_context=_build))
