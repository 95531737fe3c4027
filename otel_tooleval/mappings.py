"""The config's ``conventions:`` section: the user's own span mappings, validated at the edge
and compiled to ``conventions.user.UserConventions`` (see docs/config.md, "conventions").

Each entry matches spans (``scope`` prefix, ``span_name`` regex, ``attributes`` equal to
values, all given together) and says what they are: a ``run`` root, a ``model`` call (one
step) or a ``tool`` call, and where that call's name, arguments, result and id are.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from .conventions.spec import AGENT, MODEL, TOOL, ToolConvention
from .conventions.user import SPAN_NAME, UserConvention, UserConventions
from .graders.matching import UserRegex, compile_user

__all__ = ["ConventionEntry", "RunMapping", "ToolMapping", "compile_conventions"]


def _pattern(value: str) -> str:
    compile_user(value)   # ValueError: RE2 cannot run it
    return value


Pattern = Annotated[str, AfterValidator(_pattern)]
Keys = str | list[str]
Value = str | int | float | bool


class ToolMapping(BaseModel):
    """Where a mapped tool span keeps its call."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(
        min_length=1,
        description="attribute holding the tool's name, or `span_name`: the span's name (the "
                    "`name` group of the entry's span_name regex when it has one)")
    arguments: Keys = Field(
        default_factory=list, description="attributes holding the arguments, tried in order")
    arguments_from_attributes: list[str] = Field(
        default_factory=list,
        description="the arguments are an object of these attributes (one per parameter)")
    result: Keys = Field(default_factory=list,
                         description="attributes holding the result, tried in order")
    call_id: Keys = Field(default_factory=list,
                          description="attributes holding the call id, tried in order")

    @model_validator(mode="after")
    def _one_argument_source(self) -> ToolMapping:
        if self.arguments and self.arguments_from_attributes:
            raise ValueError("give arguments or arguments_from_attributes, not both")
        return self


class RunMapping(BaseModel):
    """A mapped agent run's root."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent_name: str | None = Field(
        default=None, min_length=1,
        description="attribute holding the agent's name, or `span_name`: the span's name (the "
                    "`name` group of the entry's span_name regex when it has one)")


_KINDS = ("run", "model", "tool")
_MATCHERS = ("scope", "span_name", "attributes")


class ConventionEntry(BaseModel):
    """One mapping: which spans, and what they are."""

    model_config = ConfigDict(
        extra="forbid", frozen=True,
        json_schema_extra={"oneOf": [{"required": [k]} for k in _KINDS],
                           "anyOf": [{"required": [k]} for k in _MATCHERS]})

    scope: str | None = Field(default=None, min_length=1,
                              description="instrumentation scope name prefix")
    span_name: Pattern | None = Field(default=None, description="regex searched in span names")
    attributes: dict[str, Value] = Field(
        default_factory=dict, description="attributes the span carries, with these values")
    run: RunMapping | Literal[True] | None = Field(
        default=None, description="such a span is an agent run's root")
    model: Literal[True] | None = Field(
        default=None, description="such a span is a model call (one step)")
    tool: ToolMapping | None = Field(default=None, description="such a span is a tool call")

    @model_validator(mode="after")
    def _maps_something(self) -> ConventionEntry:
        kinds = [k for k in _KINDS if getattr(self, k) is not None]
        if not kinds:
            raise ValueError("maps nothing: say what the spans are with run, model or tool")
        if len(kinds) > 1:
            raise ValueError(f"maps spans as {' and '.join(kinds)}: give one of run, model, tool")
        if self.scope is None and self.span_name is None and not self.attributes:
            raise ValueError("matches every span: give scope, span_name or attributes")
        return self


def _keys(value: Keys) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _group_of(pattern: UserRegex) -> Any:
    def name_from(span_name: str) -> str:
        match = pattern.search(span_name)
        return (match.group("name") if match is not None else None) or span_name
    return name_from


def compile_entry(index: int, entry: ConventionEntry) -> UserConvention:
    label = f"conventions[{index}]"
    pattern = compile_user(entry.span_name) if entry.span_name is not None else None
    grouped = pattern is not None and "name" in pattern.groupindex
    required: tuple[str, ...] = ()
    tool = None
    agent_name = None
    if entry.tool is not None:
        t = entry.tool
        by_span = t.name == SPAN_NAME
        if not by_span:
            required = (t.name,)
        tool = ToolConvention(
            label, None if by_span else t.name, _keys(t.arguments), _keys(t.result),
            _keys(t.call_id),
            name_from=_group_of(pattern) if by_span and grouped and pattern else None,
            argument_attributes=tuple(t.arguments_from_attributes))
        kind = TOOL
    elif entry.model is not None:
        kind = MODEL
    else:
        kind = AGENT
        if isinstance(entry.run, RunMapping):
            agent_name = entry.run.agent_name
    return UserConvention(label, kind, entry.scope, pattern,
                          tuple(entry.attributes.items()), required, tool, agent_name)


def compile_conventions(entries: list[ConventionEntry]) -> UserConventions | None:
    """The compiled mappings of a config (None for none: the built-in conventions alone)."""
    if not entries:
        return None
    return UserConventions(tuple(compile_entry(i, e) for i, e in enumerate(entries)))
