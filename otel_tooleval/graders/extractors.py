"""The closed list of extractors of the ``tool`` grader: which part of a run is graded.

An extractor turns a run into a submission text, or into nothing (a tool never called, a
marker never written). Its options come from the entry's ``extractor_config`` and are
validated when the config loads; patterns are compiled then.

Assistant texts are the texts of the run's model calls in order, followed by the run's final
output when that is not already the last of them (SEMANTICS 1: the final output counts as the
last assistant text), so ``last_assistant`` is always the last of ``all_assistant``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any, ClassVar, Literal, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from ..model import AgentRun, ToolCall, text_of
from .matching import UserRegex, compile_user, search
from .registry import ConfigProblems, Problem, problems_from_validation

__all__ = ["EXTRACTORS", "Extraction", "Extractor", "assistant_texts", "build_extractor"]


class Extraction(NamedTuple):
    """What an extractor found.

    ``text`` is None when nothing could be extracted, and ``missing`` then says why.
    ``source`` names what was extracted in words, without its value ("the final output",
    "the arguments of call #3 (search)"); ``calls`` are the positions of the calls it read.
    A named tuple rather than a frozen dataclass: one is built per grade, at half the cost.
    """

    text: str | None
    source: str
    calls: tuple[int, ...] = ()
    missing: str | None = None


_INDEX = attrgetter("index")


def assistant_texts(run: AgentRun) -> tuple[str, ...]:
    """The run's assistant texts in order, ending with its final output."""
    texts = run.assistant_texts
    final = run.final_output
    if final is not None and final.strip() and (not texts or texts[-1].strip() != final.strip()):
        return (*texts, final)
    return texts


class Extractor(BaseModel):
    """One extractor's options; ``extract`` reads a run. Subclasses are the closed list."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: ClassVar[str] = ""
    #: True when the text is JSON the extractor wrote itself (so key order and spacing are
    #: artefacts, and exact_match compares the parsed values).
    writes_json: ClassVar[bool] = False

    def extract(self, run: AgentRun) -> Extraction:
        raise NotImplementedError


class LastAssistant(Extractor):
    name = "last_assistant"

    def extract(self, run: AgentRun) -> Extraction:
        final = run.final_output
        if final is None:
            return Extraction(None, "the final output", missing="the run has no final output")
        return Extraction(final, "the final output")


class FirstAssistant(Extractor):
    name = "first_assistant"

    def extract(self, run: AgentRun) -> Extraction:
        texts = assistant_texts(run)
        if not texts:
            return Extraction(None, "the first assistant text",
                              missing="the run has no assistant text")
        return Extraction(texts[0], "the first assistant text")


class AllAssistant(Extractor):
    name = "all_assistant"
    separator: StrictStr = "\n"

    def extract(self, run: AgentRun) -> Extraction:
        texts = assistant_texts(run)
        if not texts:
            return Extraction(None, "the assistant texts", missing="the run has no assistant text")
        return Extraction(self.separator.join(texts), f"all {len(texts)} assistant texts")


class AfterMarker(Extractor):
    name = "after_marker"
    marker: StrictStr = Field(min_length=1)

    def extract(self, run: AgentRun) -> Extraction:
        texts = assistant_texts(run)
        for k in range(len(texts) - 1, -1, -1):
            at = texts[k].find(self.marker)
            if at >= 0:
                return Extraction(texts[k][at + len(self.marker):].strip(),
                                  f"the text after the marker in assistant text {k + 1} of "
                                  f"{len(texts)}")
        return Extraction(None, "the text after the marker",
                          missing=f"none of the run's {len(texts)} assistant texts holds the "
                                  "marker")


class _ToolSelection(Extractor):
    tool_name: StrictStr = Field(min_length=1)
    occurrence: Literal["first", "last", "all"] = "first"

    def _pick(self, calls: Sequence[ToolCall]) -> Sequence[ToolCall]:
        if self.occurrence == "first":
            return calls[:1]
        if self.occurrence == "last":
            return calls[-1:]
        return calls

    def _never_called(self, what: str) -> Extraction:
        return Extraction(None, f"the {what} of {self.tool_name}",
                          missing=f"{self.tool_name} was never called")

    def _source(self, what: str, picked: Sequence[ToolCall]) -> str:
        if self.occurrence == "all":
            return f"the {what} of all {len(picked)} {self.tool_name} calls"
        return f"the {what} of call #{picked[0].index} ({self.tool_name})"


class ToolArguments(_ToolSelection):
    """The arguments of that tool's call(s); pending calls count (only the invocation matters).

    One call: its arguments as compact JSON (text arguments that are not JSON as they are);
    ``occurrence: all``: a compact JSON array of every call's arguments.
    """

    name = "tool_arguments"
    writes_json = True

    def extract(self, run: AgentRun) -> Extraction:
        if self.occurrence != "all":
            call = run.first_call(self.tool_name, last=self.occurrence == "last")
            if call is None:
                return self._never_called("arguments")
            return Extraction(text_of(_arguments(call)), self._source("arguments", (call,)),
                              (call.index,))
        calls = run.calls_by_name().get(self.tool_name)    # shared: read, never changed
        if not calls:
            return self._never_called("arguments")
        text = text_of([_arguments(c) for c in calls])      # a JSON array, compact
        return Extraction(text, self._source("arguments", calls), tuple(map(_INDEX, calls)))


class ToolOutput(_ToolSelection):
    """The result text of that tool's completed call(s); pending calls have no outcome yet.

    A completed call that recorded no result gives empty text; ``occurrence: all`` joins the
    results with newlines.
    """

    name = "tool_output"

    def extract(self, run: AgentRun) -> Extraction:
        named = run.calls_by_name().get(self.tool_name)    # shared: read, never changed
        if not named:
            return self._never_called("result")
        calls = [c for c in named if not c.pending]
        if not calls:
            return Extraction(None, f"the result of {self.tool_name}",
                              tuple(map(_INDEX, named)),
                              missing=f"no {self.tool_name} call completed "
                                      f"({len(named)} still pending)")
        picked = self._pick(calls)
        text = "\n".join(c.result_text or "" for c in picked)
        return Extraction(text, self._source("result", picked), tuple(map(_INDEX, picked)))


class PatternExtractor(Extractor):
    """A regex searched in the assistant texts from the last backwards; ``group`` of the match."""

    name = "pattern"
    pattern: StrictStr
    group: int | str = 0
    _compiled: UserRegex = PrivateAttr()

    @field_validator("group", mode="before")
    @classmethod
    def _number_or_name(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise PydanticCustomError("group_type", "must be a group number or a group name")
        return value

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        compile_user(value)   # ValueError: RE2 cannot run it
        return value

    @field_validator("group")
    @classmethod
    def _group_exists(cls, value: int | str, info: ValidationInfo) -> int | str:
        pattern = info.data.get("pattern")
        if pattern is None:
            return value
        compiled = compile_user(pattern)
        if isinstance(value, int) and not 0 <= value <= compiled.groups:
            raise ValueError(f"the pattern has {compiled.groups} group(s); group must be "
                             f"between 0 and {compiled.groups}")
        if isinstance(value, str) and value not in compiled.groupindex:
            names = ", ".join(compiled.groupindex) or "none"
            raise ValueError(f"the pattern has no group named {value!r} (named groups: {names})")
        return value

    def model_post_init(self, context: Any, /) -> None:
        self._compiled = compile_user(self.pattern)

    def extract(self, run: AgentRun) -> Extraction:
        texts = assistant_texts(run)
        for k in range(len(texts) - 1, -1, -1):
            match = search(self._compiled, texts[k])
            if match is None:
                continue
            where = f"the pattern's match in assistant text {k + 1} of {len(texts)}"
            value = match.group(self.group)
            if value is None:
                return Extraction(None, where,
                                  missing=f"group {self.group!r} of the pattern took no part in "
                                          f"its match in assistant text {k + 1}")
            return Extraction(value, where)
        return Extraction(None, "the pattern's match",
                          missing=f"the pattern matches none of the run's {len(texts)} "
                                  "assistant texts")


class SpanAttribute(Extractor):
    """An attribute of the run's root span as text (a string as is, else compact JSON)."""

    name = "span_attribute"
    attribute: StrictStr = Field(min_length=1)

    def extract(self, run: AgentRun) -> Extraction:
        source = f"root-span attribute {self.attribute!r}"
        value = run.root_attributes.get(self.attribute)
        if value is None:
            return Extraction(None, source, missing=f"the root span has no {source}")
        return Extraction(text_of(value), source)


EXTRACTORS: Mapping[str, type[Extractor]] = {
    cls.name: cls
    for cls in (LastAssistant, FirstAssistant, AllAssistant, AfterMarker, ToolArguments,
                ToolOutput, PatternExtractor, SpanAttribute)
}


def build_extractor(name: str, config: Mapping[str, Any] | None) -> Extractor:
    """The extractor ``name`` with its ``extractor_config``.

    Raises:
        ConfigProblems: located at ``extractor`` (unknown name) or ``extractor_config.<key>``.
    """
    cls = EXTRACTORS.get(name)
    if cls is None:
        known = ", ".join(sorted(EXTRACTORS))
        raise ConfigProblems([Problem(("extractor",), (
            f"unknown extractor {name!r} (known: {known}); to grade state the agent keeps "
            "outside its messages (e.g. a memory block), record it as an attribute of the "
            "run's root span and use 'extractor: span_attribute' with "
            "'extractor_config: {attribute: <name>}'"))])
    try:
        return cls.model_validate(dict(config or {}))
    except ValidationError as exc:
        raise ConfigProblems(problems_from_validation(exc, ("extractor_config",))) from None


def _arguments(call: ToolCall) -> Any:
    """A call's arguments; a span that recorded none stands for a call with none (``{}``),
    as tool-call-args and tool_trajectory read it."""
    return {} if call.arguments is None else call.arguments
