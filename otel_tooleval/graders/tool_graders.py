"""The ``tool`` grader (seeds/tool-graders.txt, letta-evals): a function over one extracted text.

``{kind: tool, function: exact_match, extractor: last_assistant, extractor_config: {...},
ground_truth: "..."}``. The extractor (``extractors.py``) picks the submission out of the run;
the function compares it with the ground truth: the run's root-span attribute (default
``tooleval.ground_truth``) when present, else the config's ``ground_truth``. ``function`` may
also name a custom grader (``custom.py``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictStr

from ..model import AgentRun, GradeResult, text_of
from .custom import CustomGrader, load_reference, registered_grader
from .extractors import EXTRACTORS, Extraction, Extractor, build_extractor
from .matching import UserRegex, compile_user, matches, unsupported_reason
from .registry import (
    CONFIGURATION_ERROR,
    ConfigProblems,
    GraderFamily,
    GradingConfigError,
    Problem,
    params_of,
    register,
)

__all__ = ["BUILTIN_FUNCTIONS", "DEFAULT_GROUND_TRUTH_ATTRIBUTE", "ToolGrader", "ToolGraderParams"]

TYPE = "tool"
DEFAULT_GROUND_TRUTH_ATTRIBUTE = "tooleval.ground_truth"


class ToolGraderParams(BaseModel):
    """One ``kind: tool`` entry (without ``name``, ``agents`` and ``kind``/``type``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    function: StrictStr = Field(
        description="exact_match, contains, regex_match, ascii_printable_only, or a custom "
                    "grader: 'package.module:callable', 'path/to/file.py:callable' or a name "
                    "registered with @grader or by an installed plugin")
    extractor: StrictStr = Field(default="last_assistant", description="which text is graded")
    extractor_config: dict[StrictStr, Any] | None = None
    ground_truth: StrictStr | None = Field(
        default=None, description="fallback when the run carries no ground-truth attribute")
    ground_truth_attribute: StrictStr = Field(
        default=DEFAULT_GROUND_TRUTH_ATTRIBUTE, min_length=1,
        description="root-span attribute holding the run's own ground truth")
    threshold: Annotated[StrictFloat, Field(ge=0, le=1)] = 1.0


# -- the built-in functions ---------------------------------------------------------------------

class _Verdict(NamedTuple):
    """A function's verdict (a named tuple: one is built per grade)."""

    ok: bool
    says: str                   # "exactly matches the ground truth{gt}", without a subject
    details: Mapping[str, Any]


def _exact_match(text: str, truth: str, pattern: UserRegex | None,
                 extractor: Extractor) -> _Verdict:
    if extractor.writes_json:
        # Arguments JSON is our own serialisation: compare values, not key order or spacing.
        if text == _truth_compact(truth):
            return _JSON_VERDICTS[True]     # the truth's own compact text: equal, unparsed
        theirs = _truth_json(truth)
        if theirs.__class__ is dict or theirs.__class__ is list:
            mine = _json_or_none(text)
        else:
            mine = _NOT_JSON
        if mine is not _NOT_JSON:
            return _JSON_VERDICTS[_same_json(mine, theirs)]
    return _TEXT_VERDICTS[text.strip() == truth.strip()]


def _contains(text: str, truth: str, pattern: UserRegex | None,
              extractor: Extractor) -> _Verdict:
    return _CONTAINS_VERDICTS[truth.casefold() in text.casefold()]


def _regex_match(text: str, truth: str, pattern: UserRegex | None,
                 extractor: Extractor) -> _Verdict:
    assert pattern is not None
    return _REGEX_VERDICTS[matches(pattern, text)]


# The verdicts that do not depend on the text, built once ([False], [True]); their details are
# copied into each result's, never changed.
_JSON_VERDICTS = (
    _Verdict(False, "does not equal the ground truth{gt} as JSON", {"compared": "json"}),
    _Verdict(True, "equals the ground truth{gt} as JSON", {"compared": "json"}))
_TEXT_VERDICTS = (
    _Verdict(False, "does not exactly match the ground truth{gt}", {"compared": "text"}),
    _Verdict(True, "exactly matches the ground truth{gt}", {"compared": "text"}))
_CONTAINS_VERDICTS = (
    _Verdict(False, "does not contain the ground truth{gt}, ignoring case", {}),
    _Verdict(True, "contains the ground truth{gt}, ignoring case", {}))
_REGEX_VERDICTS = (
    _Verdict(False, "does not match the ground-truth pattern{gt}", {}),
    _Verdict(True, "matches the ground-truth pattern{gt}", {}))


def _is_printable(ch: str) -> bool:
    return " " <= ch <= "~" or ch in "\n\r"


def _all_printable(text: str) -> bool:
    """Whether every character passes ``_is_printable``, at C speed: in ASCII, ``isprintable``
    holds for exactly " " to "~", so only line breaks need taking out first."""
    if not text.isascii():
        return False
    return text.isprintable() or text.replace("\n", "").replace("\r", "").isprintable()


_PRINTABLE = _Verdict(True, "holds only printable ASCII", {"non_printable": 0})
_SAID_KEPT = 64      # formatted explanations a grader keeps (the constant verdicts' few)


def _ascii_printable_only(text: str, truth: str, pattern: UserRegex | None,
                          extractor: Extractor) -> _Verdict:
    if _all_printable(text):
        return _PRINTABLE           # its details are copied into the result's, never changed
    offsets = [i for i, ch in enumerate(text) if not _is_printable(ch)]
    if not offsets:
        return _PRINTABLE
    return _Verdict(False, f"holds {len(offsets)} character(s) outside printable ASCII "
                           f"(first at offset {offsets[0]})",
                    {"non_printable": len(offsets), "offsets": offsets[:20],
                     "code_points": [f"U+{ord(text[i]):04X}" for i in offsets[:20]]})


_Compare = Callable[[str, str, "UserRegex | None", Extractor], _Verdict]


@dataclass(frozen=True, slots=True)
class _Builtin:
    compare: _Compare
    needs_ground_truth: bool = True


BUILTIN_FUNCTIONS: Mapping[str, _Builtin] = {
    "exact_match": _Builtin(_exact_match),
    "contains": _Builtin(_contains),
    "regex_match": _Builtin(_regex_match),
    "ascii_printable_only": _Builtin(_ascii_printable_only, needs_ground_truth=False),
}

_NOT_JSON: Any = object()
# json.loads without its wrapper calls: the decoder's scanner on the text without the JSON
# whitespace around it (json.loads allows exactly that whitespace, and nothing after).
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_JSON_SPACE = " \t\n\r"


def _json_or_none(text: str) -> Any:
    """``json.loads(text)``, or ``_NOT_JSON`` where it raises."""
    text = text.strip(_JSON_SPACE)
    try:
        value, end = _SCAN(text, 0)
    except (StopIteration, ValueError):     # as json.loads, a RecursionError goes through
        return _NOT_JSON
    return value if end == len(text) else _NOT_JSON


@lru_cache(maxsize=256)
def _truth_json(truth: str) -> Any:
    """``_json_or_none`` of a ground truth, kept: the config's is the same text every run.
    (Callers only read the value.)"""
    return _json_or_none(truth)


@lru_cache(maxsize=256)
def _truth_compact(truth: str) -> str | None:
    """The ground truth's JSON object or array written as ``text_of`` writes it, or None.

    A text equal to it parses to the same value, which ``_same_json`` finds equal to the
    truth's, unless it holds a NaN (not equal to itself): None then, and for a truth that is
    no object or array (compared as text)."""
    value = _truth_json(truth)
    if value.__class__ is not dict and value.__class__ is not list:
        return None
    try:
        compact = text_of(value)
    except RecursionError:          # nested deeper than the encoder goes: the long way
        return None
    return None if "NaN" in compact else compact


def _same_json(a: Any, b: Any) -> bool:
    """Equal JSON values: no coercion (``"1"`` != ``1``, ``true`` != ``1``), but ``1`` == ``1.0``."""
    cls = a.__class__
    if cls is b.__class__:      # the common cases first, without the checks below
        if cls is str or cls is int or cls is float:
            return bool(a == b)
        if cls is dict:
            if a.keys() != b.keys():
                return False
            for k, v in a.items():
                if not _same_json(v, b[k]):
                    return False
            return True
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and bool(a == b)


# -- the grader ---------------------------------------------------------------------------------

class _Truth(NamedTuple):
    text: str | None
    origin: str | None          # "config" or "attribute"


_NO_TRUTH = _Truth(None, None)


def _shown(value: str, limit: int = 200) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "…")


class ToolGrader:
    """A built-in or custom function applied to one extracted text of each run."""

    type = TYPE

    def __init__(self, name: str, params: ToolGraderParams, extractor: Extractor,
                 builtin: _Builtin | None, custom: CustomGrader | None,
                 static_pattern: UserRegex | None, include_values: bool,
                 ground_truth_attribute: str) -> None:
        self.name = name
        self.params = params
        self.extractor = extractor
        self.builtin = builtin
        self.custom = custom
        self.static_pattern = static_pattern
        self.include_values = include_values
        self.ground_truth_attribute = ground_truth_attribute
        self.threshold = float(params.threshold)
        self.config_truth = (_NO_TRUTH if params.ground_truth is None
                             else _Truth(params.ground_truth, "config"))
        self.is_regex = params.function == "regex_match"
        # A verdict's words with the ground truth's origin filled in, by (words, origin): the
        # built-in verdicts are a handful of constant texts, formatted once each.
        self._said: dict[tuple[str, str | None], str] = {}

    @property
    def names_calls(self) -> bool:
        """A custom function may list ``violations`` in its details; built-ins never do."""
        return self.custom is not None

    def grade(self, run: AgentRun) -> GradeResult:
        try:
            if self.custom is not None:
                return self._grade_custom(run, self.custom)
            assert self.builtin is not None
            return self._grade_builtin(run, self.builtin)
        except GradingConfigError as exc:
            return GradeResult.failure(self.name, TYPE, CONFIGURATION_ERROR, str(exc))

    def _truth(self, run: AgentRun) -> _Truth:
        value = run.root_attributes.get(self.ground_truth_attribute)
        if value is not None:
            text = text_of(value)
            if text.strip():
                return _Truth(text, "attribute")
        return self.config_truth

    def _details(self, extraction: Extraction, truth: _Truth) -> dict[str, Any]:
        details: dict[str, Any] = {
            "function": self.params.function,
            "extractor": self.extractor.name,
            "source": extraction.source,
            "calls": list(extraction.calls),
            "ground_truth_from": truth.origin,
            "ground_truth_attribute": self.ground_truth_attribute,
            "submission_chars": None if extraction.text is None else len(extraction.text),
        }
        if self.include_values:
            details["submission"] = extraction.text
            details["ground_truth"] = truth.text
        return details

    def _result(self, score: float, explanation: str, details: Mapping[str, Any]) -> GradeResult:
        passed = score >= self.threshold
        return GradeResult(self.name, TYPE, score, passed, "pass" if passed else "fail",
                           explanation, details)

    def _truth_words(self, truth: _Truth) -> str:
        if truth.origin == "attribute":
            return f"from run attribute {self.ground_truth_attribute!r}"
        return "from the config"

    def _said_of(self, verdict: _Verdict, truth: _Truth, needs_ground_truth: bool) -> str:
        """The verdict's words with where the ground truth came from."""
        key = (verdict.says, truth.origin)
        said = self._said.get(key)
        if said is None:
            gt = f" {self._truth_words(truth)}" if needs_ground_truth else ""
            said = verdict.says.format(gt=gt)
            if len(self._said) < _SAID_KEPT:
                self._said[key] = said
        return said

    def _grade_builtin(self, run: AgentRun, fn: _Builtin) -> GradeResult:
        if fn.needs_ground_truth:
            truth = self._truth(run)
            if truth.text is None:
                raise GradingConfigError(
                    f"No ground truth for this run: {self.params.function} needs the root-span "
                    f"attribute {self.ground_truth_attribute!r} or 'ground_truth' in the "
                    "config.")
        else:
            truth = _NO_TRUTH
        pattern = None
        if self.is_regex:
            assert truth.text is not None
            pattern = self.static_pattern if truth.origin == "config" else None
            if pattern is None:
                reason = unsupported_reason(truth.text)
                if reason is not None:
                    invalid = reason.startswith("not a valid")
                    says = reason if invalid else f"a regular expression that was not run: {reason}"
                    return self._result(0.0, (
                        f"The ground truth from run attribute {self.ground_truth_attribute!r} is "
                        f"{says}; fix the run's value."),
                        {**self._details(Extraction(None, "not extracted"), truth),
                         "invalid_pattern": True, "unsupported_pattern": not invalid})
                pattern = compile_user(truth.text)
        extraction = self.extractor.extract(run)
        details = self._details(extraction, truth)
        text = extraction.text
        if text is None:
            return self._result(0.0, f"Nothing to grade: {extraction.missing}.", details)
        if not text or text.isspace():     # what strip() leaves empty, without the copy
            return self._result(0.0, f"The submission ({extraction.source}) is empty; an empty "
                                     "submission scores 0.", details)
        verdict = fn.compare(text, truth.text or "", pattern, self.extractor)
        if verdict.details:
            details.update(verdict.details)
        ok = verdict.ok
        details["matched"] = ok
        explanation = (f"The submission ({extraction.source}) "
                       f"{self._said_of(verdict, truth, fn.needs_ground_truth)}.")
        if self.include_values:
            explanation += f" Submission: {_shown(text)}"
            if truth.text is not None:
                explanation += f"; ground truth: {_shown(truth.text)}"
            explanation += "."
        score = 1.0 if ok else 0.0
        passed = score >= self.threshold        # _result, without the call
        return GradeResult(self.name, TYPE, score, passed, "pass" if passed else "fail",
                           explanation, details)

    def _grade_custom(self, run: AgentRun, fn: CustomGrader) -> GradeResult:
        truth = self._truth(run)
        extraction = self.extractor.extract(run)
        details = self._details(extraction, truth)
        label = self.params.function
        try:
            out = fn.run(run, extraction.text, truth.text)
        except GradingConfigError:
            raise
        except Exception as exc:  # noqa: BLE001  (user code must not cost the other verdicts)
            more = f": {exc}" if self.include_values else ""
            return GradeResult.failure(self.name, TYPE, type(exc).__name__,
                                       f"Custom grader {label!r} raised {type(exc).__name__}"
                                       f"{more}.")
        if isinstance(out, GradeResult):
            if out.label == "error":
                return replace(out, name=self.name, type=TYPE, score=0.0, passed=False,
                               error=out.error or "CustomGraderError")
            score, explanation = out.score, out.explanation
            details = {**details, **dict(out.details or {})}
        elif isinstance(out, bool):
            score = 1.0 if out else 0.0
            explanation = f"Custom grader {label!r} returned {out}."
        elif isinstance(out, (int, float)):
            score = float(out)
            explanation = f"Custom grader {label!r} scored {score:g}."
        else:
            return GradeResult.failure(
                self.name, TYPE, "InvalidGraderResult",
                f"Custom grader {label!r} returned {type(out).__name__}; return a GradeResult, "
                "a float in [0, 1] or a bool.")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not (
                math.isfinite(score) and 0.0 <= score <= 1.0):
            return GradeResult.failure(
                self.name, TYPE, "InvalidGraderResult",
                f"Custom grader {label!r} returned a score outside [0, 1]; scores must lie in "
                "[0, 1].")
        return self._result(float(score), explanation, details)


# -- building -----------------------------------------------------------------------------------

def _resolve_function(function: str, base_dir: Path | None,
                      ) -> tuple[_Builtin | None, CustomGrader | None]:
    """The built-in or custom function a ``function:`` value names; ValueError when none."""
    builtin = BUILTIN_FUNCTIONS.get(function)
    if builtin is not None:
        return builtin, None
    if ":" in function:
        return None, load_reference(function, base_dir)
    found = registered_grader(function)
    if found is None:
        raise ValueError(
            f"unknown function {function!r}: use one of {', '.join(BUILTIN_FUNCTIONS)}, or a "
            "custom grader as 'package.module:callable' or 'path/to/file.py:callable' "
            "(decorated with @grader)")
    return None, found


def build_tool_grader(entry: Mapping[str, Any], name: str, include_values: bool,
                      ground_truth_attribute: str | None = None,
                      base_dir: Path | None = None) -> ToolGrader:
    """Build a ``tool`` grader.

    ``ground_truth_attribute`` is the config-wide default (``runs.ground_truth_attribute``);
    the entry's own key wins over it. ``base_dir`` is where relative custom-grader files are
    read from (the config file's directory; None: the working directory).

    Raises:
        ConfigProblems: every problem of the entry, located relative to it.
    """
    params: ToolGraderParams = params_of(ToolGraderParams, entry)
    problems: list[Problem] = []
    builtin: _Builtin | None = None
    custom: CustomGrader | None = None
    try:
        builtin, custom = _resolve_function(params.function, base_dir)
    except (ValueError, TypeError) as exc:
        problems.append(Problem(("function",), str(exc)))
    extractor: Extractor | None = None
    try:
        extractor = build_extractor(params.extractor, params.extractor_config)
    except ConfigProblems as exc:
        problems.extend(exc.problems)
    static_pattern = None
    if params.ground_truth is not None:
        if not params.ground_truth.strip():
            problems.append(Problem(("ground_truth",), (
                "must not be empty: an empty ground truth would let contains and regex_match "
                "pass any submission; remove the key to take it from the runs")))
        elif builtin is not None and not builtin.needs_ground_truth:
            problems.append(Problem(("ground_truth",),
                                    f"{params.function} takes no ground truth; remove the key"))
        elif params.function == "regex_match":
            try:
                static_pattern = compile_user(params.ground_truth)
            except ValueError as exc:
                problems.append(Problem(("ground_truth",), str(exc)))
    if ("ground_truth_attribute" in params.model_fields_set and builtin is not None
            and not builtin.needs_ground_truth):
        problems.append(Problem(("ground_truth_attribute",),
                                f"{params.function} takes no ground truth; remove the key"))
    if problems or extractor is None:
        raise ConfigProblems(problems)
    attribute = params.ground_truth_attribute
    if "ground_truth_attribute" not in params.model_fields_set and ground_truth_attribute:
        attribute = ground_truth_attribute
    return ToolGrader(name, params, extractor, builtin, custom, static_pattern, include_values,
                      attribute)


def _build(entry: Mapping[str, Any], name: str, include_values: bool) -> ToolGrader:
    return build_tool_grader(entry, name, include_values)


class BuildSettings(Protocol):
    """The config-wide settings a ``tool`` grader uses (see ``build_in_context``)."""

    @property
    def include_values(self) -> bool: ...

    @property
    def ground_truth_attribute(self) -> str: ...

    @property
    def base_dir(self) -> Path | None: ...


def build_in_context(entry: Mapping[str, Any], name: str, settings: BuildSettings,
                     ) -> ToolGrader:
    """``build_tool_grader`` with the config-wide settings, for a registry that passes them."""
    return build_tool_grader(entry, name, settings.include_values,
                             settings.ground_truth_attribute, settings.base_dir)


def _schema() -> dict[str, Any]:
    schema = ToolGraderParams.model_json_schema()
    props = schema.setdefault("properties", {})
    props["kind"] = {"enum": [TYPE], "description": "letta's key; 'type: tool' works too"}
    props["type"] = {"enum": [TYPE]}
    props["extractor"]["enum"] = sorted(EXTRACTORS)
    defs = schema.setdefault("$defs", {})
    options = []
    for extractor_name, cls in sorted(EXTRACTORS.items()):
        sub = cls.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(sub.pop("$defs", {}))
        sub["title"] = f"extractor_config of {extractor_name}"
        options.append(sub)
    props["extractor_config"] = {"anyOf": [*options, {"type": "null"}]}
    return schema


register(GraderFamily(TYPE, (), _build, schema=_schema, build_with_context=build_in_context))
