"""The ``trajectory_match`` grader (LangChain agentevals' ``create_trajectory_match_evaluator``).

The run's calls are compared with reference calls under one of four modes: ``superset`` (every
reference call is paired with a distinct call, extras free), ``subset`` (every call is paired
with a distinct reference call), ``unordered`` (both) and ``strict`` (step by step, each step
the same calls as a multiset). Pairing is a maximum matching under the args rule
(``trajectory_args``), so the verdict never depends on the order of either list. Score 1.0 or
0.0. The reference is agentevals' own: flat ``reference_tool_calls`` or OpenAI-style messages.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictStr, WithJsonSchema

from ..model import AgentRun, GradeResult, ToolCall
from ..violations import violation
from .registry import (
    BuildContext,
    ConfigProblems,
    GraderFamily,
    Problem,
    did_you_mean,
    params_of,
    register,
)
from .tool_call_order import calls_text
from .trajectory_args import ARGS_MODES, ArgsRule, load_matcher, max_pairing, paths_rule, rule_of

__all__ = ["ReferenceCall", "TrajectoryMatchGrader", "TrajectoryMatchParams"]

TYPE = "trajectory_match"
ALIASES = ("trajectory-match", "create_trajectory_match_evaluator")

TrajectoryMode = Literal["strict", "unordered", "subset", "superset"]
ArgsMode = Literal["exact", "ignore", "subset", "superset"]

_OVERRIDE_SCHEMA = {"anyOf": [
    {"enum": list(ARGS_MODES)},
    {"type": "string", "pattern": r"^.+:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$",
     "description": "a callable (call_args, reference_args) -> bool: 'package.module:function' "
                    "or 'path/to/file.py:function'"},
    {"type": "array", "minItems": 1,
     "items": {"type": "string", "pattern": r"^[^.]+(\.[^.]+)*$"},
     "description": "compare only these key paths ('a.b' walks objects, 'items.0' lists)"},
]}


def _override(value: Any) -> Any:
    """One override: a mode, a non-empty key-path list, or a ``module:callable`` reference."""
    if isinstance(value, str):
        if value in ARGS_MODES or ":" in value:
            return value
        raise ValueError(f"unknown args mode {value!r}{did_you_mean(value, ARGS_MODES)}: use "
                         f"{', '.join(ARGS_MODES)}, a list of key paths, or a callable as "
                         "'package.module:function'")
    if isinstance(value, list):
        if not value:
            raise ValueError("an empty key-path list compares nothing: list the paths to "
                             "compare, or use the mode 'ignore'")
        for path in value:
            if not isinstance(path, str) or not path or "" in path.split("."):
                raise ValueError(f"key path {path!r} must be a string such as 'query' or "
                                 "'filter.city' or 'items.0'")
        return list(value)
    raise ValueError("must be an args mode, a list of key paths, or 'package.module:function'")


Override = Annotated[Any, BeforeValidator(_override), WithJsonSchema(_OVERRIDE_SCHEMA)]
ToolName = Annotated[StrictStr, Field(min_length=1)]


class TrajectoryMatchParams(BaseModel):
    """One ``trajectory_match`` entry, in agentevals' argument names (``name``/``type`` aside)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trajectory_match_mode: TrajectoryMode = Field(
        default="strict", description="strict | unordered | subset | superset")
    tool_args_match_mode: ArgsMode = Field(
        default="exact", description="exact | ignore | subset | superset")
    tool_args_match_overrides: dict[ToolName, Override] | None = Field(
        default=None, description="per tool name: an args mode, key paths, or a callable")
    reference_tool_calls: list[Any] | None = Field(
        default=None, description="the flat form: [{name, args}] (one message per call)",
        json_schema_extra={"items": {"type": "object"}})
    reference_trajectory: list[Any] | dict[str, Any] | None = Field(
        default=None, description="OpenAI-style messages, or {messages: [...]}")


_LLM = ("needs an LLM (agentevals' create_trajectory_llm_as_judge); trajectory_match is the "
        "deterministic evaluator and LLM-judged options are not supported")
_HINTS = {
    **dict.fromkeys(("model", "prompt", "judge", "few_shot_examples", "use_reasoning",
                     "continuous", "choices", "system"), _LLM),
    "threshold": "unknown key: trajectory_match scores 1.0 or 0.0 and passes on 1.0",
    "mode": "unknown key (did you mean 'trajectory_match_mode'?)",
}


# -- the reference ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ReferenceCall:
    """One reference call: its tool name, arguments and step (one message = one step)."""

    name: str
    args: dict[str, Any]
    step: int


_CALL_KEYS = ("name", "args", "function", "id", "type")


def _args_value(value: Any, loc: tuple[str | int, ...]) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ConfigProblems([Problem(loc, "must be a JSON object (the text does not "
                                               "parse as JSON)")]) from None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigProblems([Problem(loc, "must be an object of argument values (or its "
                                           "JSON text)")])
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        raise ConfigProblems([Problem(loc, "must hold JSON values only (a YAML date or "
                                           "timestamp? quote it)")]) from None
    return dict(value)


def _tool_call(raw: Any, step: int, loc: tuple[str | int, ...]) -> ReferenceCall:
    """``{name, args}`` (LangChain) or ``{function: {name, arguments}}`` (OpenAI)."""
    if not isinstance(raw, Mapping):
        raise ConfigProblems([Problem(loc, "a tool call must be a mapping: {name, args} or "
                                           "{function: {name, arguments}}")])
    for key in raw:
        if key not in _CALL_KEYS:
            raise ConfigProblems([Problem(loc + (str(key),), "unknown key"
                                          + did_you_mean(str(key), _CALL_KEYS))])
    if "function" in raw:
        function = raw["function"]
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise ConfigProblems([Problem(loc + ("function",),
                                          "must be {name, arguments} with a string name")])
        name, args, where = function["name"], function.get("arguments", {}), "arguments"
        loc = loc + ("function",)
    else:
        if not isinstance(raw.get("name"), str):
            raise ConfigProblems([Problem(loc + ("name",), "required key is missing: the "
                                                           "tool's name as a string")])
        name, args, where = raw["name"], raw.get("args", {}), "args"
    if not name:
        raise ConfigProblems([Problem(loc + ("name",), "must not be empty")])
    return ReferenceCall(name=name, args=_args_value(args, loc + (where,)), step=step)


def _messages(value: Any) -> tuple[list[Any], tuple[str | int, ...]]:
    loc: tuple[str | int, ...] = ("reference_trajectory",)
    if isinstance(value, Mapping):
        if "role" in value or "type" in value:
            return [value], loc
        if "messages" not in value:
            raise ConfigProblems([Problem(loc, "a mapping must hold 'messages' (or be one "
                                               "message with a 'role')")])
        extra = [k for k in value if k != "messages"]
        if extra:
            raise ConfigProblems([Problem(loc + (str(extra[0]),), "unknown key"
                                          + did_you_mean(str(extra[0]), ["messages"]))])
        value, loc = value["messages"], loc + ("messages",)
    if not isinstance(value, list):
        raise ConfigProblems([Problem(loc, "must be a list of messages")])
    return value, loc


_ASSISTANT = frozenset({"assistant", "ai", "AIMessage", "AIMessageChunk"})


def parse_reference(params: TrajectoryMatchParams) -> tuple[ReferenceCall, ...]:
    """The reference calls, each with its step (one message = one step).

    Assistant messages without tool calls and messages of other roles are left out: spans
    carry no message layout to compare them with.

    Raises:
        ConfigProblems: a malformed message or tool call, located.
    """
    if params.reference_tool_calls is not None:
        return tuple(_tool_call(raw, i, ("reference_tool_calls", i))
                     for i, raw in enumerate(params.reference_tool_calls))
    messages, loc = _messages(params.reference_trajectory)
    out: list[ReferenceCall] = []
    step = 0
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ConfigProblems([Problem(loc + (i,), "a message must be a mapping with a "
                                                      "'role'")])
        role = message.get("role", message.get("type"))
        if not isinstance(role, str):
            raise ConfigProblems([Problem(loc + (i, "role"), "required key is missing")])
        calls = message.get("tool_calls")
        if calls is None or role not in _ASSISTANT:
            continue
        if not isinstance(calls, list):
            raise ConfigProblems([Problem(loc + (i, "tool_calls"), "must be a list")])
        if not calls:
            continue
        out.extend(_tool_call(raw, step, loc + (i, "tool_calls", j))
                   for j, raw in enumerate(calls))
        step += 1
    return tuple(out)


# -- grading ------------------------------------------------------------------------------------

def _span(call: ToolCall) -> str:
    return format(call.span_id, "016x")


#: Unpaired calls listed in the details (all are counted).
_LISTED = 50


class TrajectoryMatchGrader:
    """Compares a run's calls with reference calls under one of agentevals' four modes."""

    type = TYPE
    names_calls = True   # unpaired calls, where they count: violations

    def __init__(self, name: str, params: TrajectoryMatchParams,
                 reference: Sequence[ReferenceCall], rules: Mapping[str, ArgsRule],
                 include_values: bool) -> None:
        self.name = name
        self.params = params
        self.reference = tuple(reference)
        self.rules = dict(rules)
        self.default = rule_of(params.tool_args_match_mode)
        self.include_values = include_values
        self.mode = params.trajectory_match_mode
        steps: dict[int, list[int]] = {}
        for i, ref in enumerate(self.reference):
            steps.setdefault(ref.step, []).append(i)
        self.ref_steps = list(steps.values())
        # The reference calls' pairing keys, computed on the first run that needs them.
        self.ref_keys: dict[tuple[str, int], Hashable] = {}

    def rule_for(self, name: str) -> ArgsRule:
        return self.rules.get(name, self.default)

    def _pair(self, ref_ids: Sequence[int], calls: Sequence[ToolCall]) -> list[int | None]:
        refs = [(self.reference[i].name, self.reference[i].args) for i in ref_ids]
        found = max_pairing(refs, calls, self.rule_for, self.ref_keys)
        return [None if j is None else calls[j].index for j in found]

    def grade(self, run: AgentRun) -> GradeResult:
        calls = run.calls
        paired: list[int | None] = [None] * len(self.reference)
        steps_note: dict[str, Any] = {}
        if self.mode == "strict":
            by_step: dict[int, list[ToolCall]] = {}
            for c in calls:
                by_step.setdefault(c.step, []).append(c)
            run_steps = list(by_step.items())
            for ref_ids, (_, step_calls) in zip(self.ref_steps, run_steps):
                for i, j in zip(ref_ids, self._pair(ref_ids, step_calls)):
                    paired[i] = j
            ref_step_of = {i: k for k, ids in enumerate(self.ref_steps) for i in ids}
            steps_note = {"reference_steps": len(self.ref_steps), "run_steps": len(run_steps),
                          "run_step_numbers": [s for s, _ in run_steps]}
            step_names = [{c.name for c in step_calls} for _, step_calls in run_steps]
        else:
            paired = self._pair(range(len(self.reference)), calls)
            ref_step_of = {}
            step_names = [{c.name for c in calls}]
        used = {j for j in paired if j is not None}
        unpaired_calls = [c for c in calls if c.index not in used]
        missing = [i for i, j in enumerate(paired) if j is None]
        if self.mode == "superset":
            passed = not missing
        elif self.mode == "subset":
            passed = not unpaired_calls
        elif self.mode == "unordered":
            passed = not missing and not unpaired_calls
        else:
            passed = (not missing and not unpaired_calls
                      and steps_note["reference_steps"] == steps_note["run_steps"])
        rows = []
        for i, (ref, j) in enumerate(zip(self.reference, paired)):
            row: dict[str, Any] = {"entry": i, "tool": ref.name, "call": j,
                                   "span_id": None if j is None else _span(calls[j])}
            if self.mode == "strict":
                row["step"] = ref_step_of[i]
            if self.include_values:
                row["args"] = ref.args
                row["call_args"] = None if j is None else calls[j].arguments
            rows.append(row)
        details: dict[str, Any] = {
            "trajectory_match_mode": self.mode,
            "tool_args_match_mode": self.params.tool_args_match_mode,
            "overrides": {name: rule.describe for name, rule in self.rules.items()},
            "paired": len(used), "reference_calls": len(self.reference), "calls": len(calls),
            "expected": rows,
            **steps_note,
        }
        if self.mode != "superset":         # extra calls count in these modes only
            details["unpaired_calls"] = [
                {"call": c.index, "tool": c.name, "span_id": _span(c)}
                for c in unpaired_calls[:_LISTED]]
            details["unpaired_call_count"] = len(unpaired_calls)
            if unpaired_calls:   # every one, not only the listed: each span gets its mark
                details["violations"] = [violation(c, "extra call: not in the reference")
                                         for c in unpaired_calls]
        text = self._explain(passed, missing, unpaired_calls, calls, steps_note, step_names)
        score = 1.0 if passed else 0.0
        return GradeResult(self.name, TYPE, score, passed, "pass" if passed else "fail", text,
                           details)

    def _explain(self, passed: bool, missing: Sequence[int], unpaired: Sequence[ToolCall],
                 calls: Sequence[ToolCall], steps: Mapping[str, Any],
                 step_names: Sequence[set[str]]) -> str:
        n_ref = len(self.reference)
        if passed:
            what = {"superset": f"all {n_ref} reference calls were made (extra calls allowed)",
                    "subset": f"all {len(calls)} calls are in the reference",
                    "unordered": f"the {n_ref} calls match the reference in some order",
                    "strict": f"the {len(self.ref_steps)} steps match the reference step by "
                              "step"}[self.mode]
            return what[0].upper() + what[1:] + "."
        problems = []
        if steps and steps["reference_steps"] != steps["run_steps"]:
            problems.append(f"the run has {steps['run_steps']} step(s) with tool calls, the "
                            f"reference {steps['reference_steps']}")
        if missing and self.mode != "subset":
            strict = self.mode == "strict"
            shown = []
            for i in missing[:3]:
                ref = self.reference[i]
                k = ref.step if strict else 0
                if k >= len(step_names):
                    why = "the run has no such step"
                elif ref.name not in step_names[k]:
                    why = "not called in that step" if strict else "never called"
                else:
                    why = (f"no call{' of that step' if strict else ''} left with matching "
                           f"args ({self.rule_for(ref.name).describe})")
                shown.append(f"{ref.name!r} (entry {i}{f', step {k}' if strict else ''}): "
                             f"{why}")
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            problems.append(f"{len(missing)} of {n_ref} reference calls unpaired: "
                            + "; ".join(shown) + more)
        if unpaired and self.mode != "superset":
            names = ", ".join(f"{c.name!r}" for c in unpaired[:3])
            problems.append(f"call(s) {calls_text([c.index for c in unpaired], 3)} ({names}"
                            f"{', …' if len(unpaired) > 3 else ''}) not in the reference"
                            + (" step" if self.mode == "strict" else ""))
        return f"No {self.mode} match: " + "; ".join(problems) + "."


# -- building -----------------------------------------------------------------------------------

def _rules(params: TrajectoryMatchParams, base_dir: Path | None) -> dict[str, ArgsRule]:
    rules: dict[str, ArgsRule] = {}
    problems = []
    for tool, value in (params.tool_args_match_overrides or {}).items():
        if isinstance(value, list):
            rules[tool] = paths_rule(value)
        elif value in ARGS_MODES:
            rules[tool] = rule_of(value)
        else:
            try:
                rules[tool] = load_matcher(value, base_dir)
            except (ValueError, TypeError) as exc:
                problems.append(Problem(("tool_args_match_overrides", tool), str(exc)))
    if problems:
        raise ConfigProblems(problems)
    return rules


def build_trajectory_match(entry: Mapping[str, Any], name: str, context: BuildContext,
                           ) -> TrajectoryMatchGrader:
    """Build a ``trajectory_match`` grader; callables resolve against ``context.base_dir``.

    Raises:
        ConfigProblems: every problem of the entry, located relative to it.
    """
    params: TrajectoryMatchParams = params_of(TrajectoryMatchParams, entry, _HINTS)
    given = [k for k in ("reference_tool_calls", "reference_trajectory")
             if getattr(params, k) is not None]
    if not given:
        raise ConfigProblems([Problem(("reference_tool_calls",), "required key is missing: "
                                      "give reference_tool_calls or reference_trajectory")])
    if len(given) == 2:
        raise ConfigProblems([Problem(("reference_trajectory",), "give either "
                                      "reference_tool_calls or reference_trajectory, not both")])
    reference = parse_reference(params)
    rules = _rules(params, context.base_dir)
    return TrajectoryMatchGrader(name, params, reference, rules, context.include_values)


def _build(entry: Mapping[str, Any], name: str, include_values: bool) -> TrajectoryMatchGrader:
    return build_trajectory_match(entry, name, BuildContext(include_values=include_values))


def _schema() -> dict[str, Any]:
    schema = TrajectoryMatchParams.model_json_schema()
    schema["title"] = TYPE
    schema["properties"]["type"] = {"enum": [TYPE, *ALIASES]}
    schema["required"] = ["type"]
    schema["oneOf"] = [{"required": ["reference_tool_calls"]},
                       {"required": ["reference_trajectory"]}]
    return schema


register(GraderFamily(TYPE, ALIASES, _build, schema=_schema,
                      build_with_context=build_trajectory_match))
