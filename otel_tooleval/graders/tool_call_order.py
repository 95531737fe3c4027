"""The ``tool-call-order`` grader (seeds/tool-call-order.txt), and the entry shapes of the UiPath
SDK's tool-call evaluators that ``tool_call_checks`` shares.

Non-strict, the score is |LCS(expected, actual)| / |expected| over tool names; strict, 1.0 only
for an identical sequence. Every call counts, pending ones included: order is about invocation.

An entry is written either flat, options and criteria beside ``type``::

    {type: tool-call-order, strict: false, tool_calls_order: [a, b]}

or in the SDK's nested form, options in ``config`` and the criteria in ``evaluation_criteria``
(or ``default_evaluation_criteria``, in ``config`` as the SDK has it, or beside it)::

    {type: ToolCallOrderEvaluator, id: x, config: {name: ..., strict: false},
     evaluation_criteria: {tool_calls_order: [a, b]}}
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import filterfalse
from operator import attrgetter
from typing import Annotated, Any, Generic, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictStr

from ..lcs import lcs_pairs
from ..model import AgentRun, GradeResult, ToolCall
from .registry import ConfigProblems, GraderFamily, Problem, params_of, register

__all__ = [
    "NOT_EMPTY",
    "OrderCriteria",
    "OrderEntry",
    "SdkConfig",
    "SdkEntry",
    "Spec",
    "ToolCallOrderGrader",
    "ToolName",
    "build_spec",
    "calls_text",
    "entry_schema",
    "key_hints",
    "non_empty",
    "verdict",
]

TYPE = "tool-call-order"

ToolName = Annotated[StrictStr, Field(min_length=1)]
Threshold = Annotated[float, Field(ge=0.0, le=1.0, strict=True)]

C = TypeVar("C", bound=BaseModel)
T = TypeVar("T")


def non_empty(what: str) -> Callable[[T], T]:
    """A validator rejecting an empty list or mapping: empty criteria would grade nothing."""

    def check(value: T) -> T:
        if not value:
            raise ValueError(f"must not be empty: give at least one {what}")
        return value

    return check


class SdkOptions(BaseModel):
    """Options every tool-call evaluator has, beside ``type`` or in ``config``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    strict: StrictBool | None = Field(
        default=None, description="all or nothing (order: identical sequence); default false")
    threshold: Threshold | None = Field(
        default=None, description="passes when score >= threshold; default 1.0")


class SdkConfig(SdkOptions, Generic[C]):
    """The SDK's ``config`` block (``name`` is the SDK's evaluator name, kept in details)."""

    name: StrictStr | None = None
    default_evaluation_criteria: C | None = None


class SdkEntry(SdkOptions, Generic[C]):
    """The keys every tool-call evaluator entry accepts; each family adds its criteria key."""

    id: StrictStr | None = Field(default=None, description="the SDK's evaluator id, kept in details")
    config: SdkConfig[C] | None = None
    evaluation_criteria: C | None = None
    default_evaluation_criteria: C | None = None


@dataclass(frozen=True, slots=True)
class Spec(Generic[C]):
    """A resolved entry: the criteria, the options, and the SDK's labels for the details."""

    criteria: C
    strict: bool
    threshold: float
    options: Mapping[str, Any]
    labels: Mapping[str, str]


def build_spec(entry: SdkEntry[C], criteria_key: str, criteria_type: type[C],
               option_defaults: Mapping[str, Any] | None = None) -> Spec[C]:
    """Resolve an entry's criteria and options from whichever shape it was written in.

    Criteria come from the flat key or ``evaluation_criteria`` (not both), else from
    ``default_evaluation_criteria``. Each option is given beside ``type`` or in ``config``,
    not both. Raises ConfigProblems located relative to the entry.
    """
    problems: list[Problem] = []
    cfg = entry.config
    flat = getattr(entry, criteria_key)
    defaults = [d for d in (entry.default_evaluation_criteria,
                            cfg.default_evaluation_criteria if cfg else None) if d is not None]
    if flat is not None and entry.evaluation_criteria is not None:
        problems.append(Problem((criteria_key,), "given twice: here and in "
                                f"evaluation_criteria.{criteria_key}; keep one"))
    if len(defaults) > 1:
        problems.append(Problem(("default_evaluation_criteria",),
                                "given twice: here and in config.default_evaluation_criteria; "
                                "keep one"))
    criteria: C | None
    if flat is not None:
        criteria = criteria_type.model_validate({criteria_key: flat})
    else:
        criteria = entry.evaluation_criteria or (defaults[0] if defaults else None)
    if criteria is None:
        nested = cfg is not None or entry.id is not None
        problems.append(Problem(
            ("evaluation_criteria",) if nested else (criteria_key,),
            "required key is missing: give evaluation_criteria (or "
            "config.default_evaluation_criteria)" if nested else
            f"required key is missing: give {criteria_key} (or evaluation_criteria)"))
    values: dict[str, Any] = {}
    for key, default in {"strict": False, "threshold": 1.0, **(option_defaults or {})}.items():
        here = getattr(entry, key)
        inside = getattr(cfg, key) if cfg is not None else None
        if here is not None and inside is not None:
            problems.append(Problem((key,), f"given twice: here and in config.{key}; keep one"))
        values[key] = here if here is not None else inside if inside is not None else default
    if problems or criteria is None:
        raise ConfigProblems(problems)
    labels = {k: v for k, v in (("evaluator_id", entry.id),
                                ("evaluator_name", cfg.name if cfg else None)) if v}
    strict, threshold = values.pop("strict"), values.pop("threshold")
    return Spec(criteria, strict, threshold, values, labels)


_CRITERIA_KEYS = {
    "tool_calls_order": "tool-call-order",
    "tool_calls_count": "tool-call-count",
    "tool_calls": "tool-call-args",
    "tool_outputs": "tool-call-output",
}
_CAMEL = {
    "toolCallsOrder": "tool_calls_order",
    "toolCallsCount": "tool_calls_count",
    "toolCalls": "tool_calls",
    "toolOutputs": "tool_outputs",
    "evaluationCriteria": "evaluation_criteria",
    "defaultEvaluationCriteria": "default_evaluation_criteria",
    "evaluatorConfig": "config",
}


def key_hints(own_type: str) -> dict[str, str]:
    """Messages for unknown keys a user of the SDK is likely to write."""
    hints = {camel: f"unknown key (write {snake})" for camel, snake in _CAMEL.items()}
    for key, type_ in _CRITERIA_KEYS.items():
        hints[key] = (f"unknown key here: {key} goes beside type or in evaluation_criteria"
                      if type_ == own_type else f"unknown key ({key} belongs to {type_})")
    return hints


def entry_schema(model: type[BaseModel], type_: str, aliases: Sequence[str],
                 criteria_key: str) -> dict[str, Any]:
    """The JSON Schema of one entry: its ``type``, and criteria given in one of the places."""
    schema = model.model_json_schema()
    schema["title"] = type_
    schema["properties"]["type"] = {"enum": [type_, *aliases]}
    schema["required"] = ["type"]
    schema["anyOf"] = [
        {"required": [criteria_key]},
        {"required": ["evaluation_criteria"]},
        {"required": ["default_evaluation_criteria"]},
        {"required": ["config"],
         "properties": {"config": {"required": ["default_evaluation_criteria"]}}},
    ]
    return schema


def verdict(name: str, type_: str, spec: Spec[Any], score: float, explanation: str,
            details: dict[str, Any]) -> GradeResult:
    """The result of one run: passed when score >= threshold. ``details`` is the grader's
    own fresh dict: completed in place (``strict`` and the labels), not copied."""
    passed = score >= spec.threshold
    details["strict"] = spec.strict
    if spec.labels:
        details.update(spec.labels)
    return GradeResult(name, type_, score, passed, "pass" if passed else "fail", explanation,
                       details)


def calls_text(indices: Sequence[int], limit: int = 5) -> str:
    """Call positions for an explanation: ``#0, #3, #7 and 12 more``."""
    shown = ", ".join(f"#{i}" for i in indices[:limit])
    return shown + (f" and {len(indices) - limit} more" if len(indices) > limit else "")


def names_text(names: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# -- order ----------------------------------------------------------------------------------------

NOT_EMPTY = Field(json_schema_extra={"minItems": 1})
ToolNames = Annotated[list[ToolName], AfterValidator(non_empty("tool name")), NOT_EMPTY]


class OrderCriteria(BaseModel):
    """``evaluation_criteria`` of tool-call-order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool_calls_order: ToolNames = Field(description="expected tool names, in order")


class OrderEntry(SdkEntry[OrderCriteria]):
    """One tool-call-order entry, flat or in the SDK's nested form."""

    tool_calls_order: ToolNames | None = Field(
        default=None, description="expected tool names, in order")


class ToolCallOrderGrader:
    """Scores the order of the run's tool calls against an expected sequence of names."""

    type = TYPE

    def __init__(self, name: str, spec: Spec[OrderCriteria]) -> None:
        self.name = name
        self.spec = spec
        self.expected = tuple(spec.criteria.tool_calls_order)
        self._expected_list = list(self.expected)

    def grade(self, run: AgentRun) -> GradeResult:
        expected = self.expected
        calls = run.calls
        actual = [c.name for c in calls]
        if self.spec.strict and actual and actual != self._expected_list:
            # Positional: the verdict and its text need no LCS; the details' LCS is worked
            # out when they are read (a report), not when only the verdict is (live).
            passed = 0.0 >= self.spec.threshold
            return GradeResult(self.name, TYPE, 0.0, passed, "pass" if passed else "fail",
                               self._strict_text(actual),
                               _StrictDetails(actual, expected, calls, self.spec))
        pairs = lcs_pairs(expected, actual) if actual else []
        lcs, lcs_calls, unmatched = _lcs_parts(expected, calls, pairs)
        details: dict[str, Any] = {
            "actual_tool_calls_order": actual,
            "expected_tool_calls_order": list(expected),
            "lcs": lcs,
            "lcs_calls": lcs_calls,
            "unmatched_expected": unmatched,
        }
        if not actual:
            return verdict(self.name, TYPE, self.spec, 0.0,
                           f"The run made no tool calls; {len(expected)} were expected in order "
                           f"({names_text(expected)}).", details)
        if self.spec.strict:
            return verdict(self.name, TYPE, self.spec, 1.0,
                           f"The {len(actual)} calls match the expected sequence exactly.",
                           details)
        score = len(pairs) / len(expected)
        if not unmatched:
            text = (f"All {len(expected)} expected tools were called in the expected order "
                    f"(calls {calls_text(details['lcs_calls'])}).")
        else:
            missing = "; ".join(f"{expected[i]!r} (expected position {i})"
                                for i in unmatched[:3])
            more = f" and {len(unmatched) - 3} more" if len(unmatched) > 3 else ""
            text = (f"{len(pairs)} of {len(expected)} expected tools were called in the "
                    f"expected order; not in order or not called: {missing}{more}.")
        return verdict(self.name, TYPE, self.spec, score, text, details)

    def _strict_text(self, actual: list[str]) -> str:
        expected = self.expected
        k = 0
        while k < len(actual) and k < len(expected) and actual[k] == expected[k]:
            k += 1
        if k < len(actual) and k < len(expected):
            where = f"call #{k} is {actual[k]!r} where {expected[k]!r} was expected"
        elif k == len(actual):
            where = (f"the run stopped after {k} calls; {expected[k]!r} was expected next "
                     f"(expected position {k})")
        else:
            where = f"call #{k} ({actual[k]!r}) comes after the whole expected sequence"
        return f"Strict order: the calls differ from the expected sequence; {where}."


_LCS_KEYS = ("lcs", "lcs_calls", "unmatched_expected")
_INDEX = attrgetter("index")


def _lcs_parts(expected: tuple[str, ...], calls: Sequence[ToolCall],
               pairs: list[tuple[int, int]]) -> tuple[list[str], list[int], list[int]]:
    """The details' ``lcs``, ``lcs_calls`` and ``unmatched_expected`` of the LCS ``pairs``."""
    if not pairs:
        return [], [], list(range(len(expected)))
    rows, cols = zip(*pairs, strict=True)
    return (list(map(expected.__getitem__, rows)), list(map(_INDEX, map(calls.__getitem__, cols))),
            list(filterfalse(set(rows).__contains__, range(len(expected)))))


class _StrictDetails(Mapping[str, Any]):
    """The details of a strict grade whose calls differ from the expected sequence: the same
    keys, in the same order and with the same values, as the eager details of the other
    grades; ``lcs``, ``lcs_calls`` and ``unmatched_expected`` are computed on first read.
    Pickled as the plain dict."""

    __slots__ = ("_actual", "_calls", "_expected", "_expected_list", "_lcs", "_tail")

    def __init__(self, actual: list[str], expected: tuple[str, ...],
                 calls: Sequence[ToolCall], spec: Spec[Any]) -> None:
        self._actual = actual
        self._expected = expected
        self._expected_list = list(expected)
        self._calls = calls
        self._tail: dict[str, Any] = {"strict": spec.strict, **spec.labels}
        self._lcs: tuple[list[str], list[int], list[int]] | None = None

    def _lcs_parts(self) -> tuple[list[str], list[int], list[int]]:
        parts = self._lcs
        if parts is None:
            parts = self._lcs = _lcs_parts(self._expected, self._calls,
                                           lcs_pairs(self._expected, self._actual))
        return parts

    def __getitem__(self, key: str) -> Any:
        if key == "actual_tool_calls_order":
            return self._actual
        if key == "expected_tool_calls_order":
            return self._expected_list
        if key in _LCS_KEYS:
            return self._lcs_parts()[_LCS_KEYS.index(key)]
        return self._tail[key]

    def __iter__(self) -> Iterator[str]:
        yield "actual_tool_calls_order"
        yield "expected_tool_calls_order"
        yield from _LCS_KEYS
        yield from self._tail

    def __len__(self) -> int:
        return 5 + len(self._tail)

    def __contains__(self, key: object) -> bool:
        return key in ("actual_tool_calls_order", "expected_tool_calls_order",
                       *_LCS_KEYS) or key in self._tail

    def __repr__(self) -> str:
        return repr(dict(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (dict(self),)


def _build(entry: Mapping[str, Any], name: str, include_values: bool) -> ToolCallOrderGrader:
    parsed = params_of(OrderEntry, entry, key_hints(TYPE))
    return ToolCallOrderGrader(name, build_spec(parsed, "tool_calls_order", OrderCriteria))


ALIASES = ("ToolCallOrderEvaluator", "uipath-tool-call-order", "tool_call_order")


def _schema() -> dict[str, Any]:
    return entry_schema(OrderEntry, TYPE, ALIASES, "tool_calls_order")


register(GraderFamily(TYPE, ALIASES, _build, schema=_schema))
