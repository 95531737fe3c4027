"""The configuration file: pydantic models at the edge, ``load_config`` and ``ConfigError``.

Grader entries are resolved through the registry by their ``type`` (or letta's ``kind``); every
problem in the whole file is collected and reported at once, each with its location, e.g.
``graders[2].config.required[0].at_step: ...``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .bounded_yaml import (  # MAX_CONFIG_NODES: re-exported, part of config's API
    MAX_CONFIG_DEPTH,
    MAX_CONFIG_NODES,  # noqa: F401
    BoundedLoader,
    Unbounded,
)
from .cases import CaseSet, parse_cases, read_cases
from .config_errors import ConfigError
from .graders import REGISTRY
from .graders.matching import (
    DEFAULT_GRADING_BUDGET_MS,
    DEFAULT_MAX_MATCH_CHARS,
    UserRegex,
    compile_user,
)
from .graders.registry import (
    BuildContext,
    ConfigProblems,
    Grader,
    Problem,
    did_you_mean,
    families,
    family_by_keys,
    problems_from_validation,
)
from .guard import GuardConfig, GuardRules
from .guard_result import GUARD_RESULT
from .local_files import FileRefused, read_local_file
from .mappings import ConventionEntry, compile_conventions
from .sessions.settings import SessionsConfig
from .sessions.turns import TurnsGrader
from .sinks.langfuse import LangfuseSinkConfig
from .sinks.phoenix import PhoenixSinkConfig
from .trajectory import RunPolicy

__all__ = [
    "ConfigError",
    "ConfiguredGrader",
    "EmitConfig",
    "GradingConfig",
    "GuardConfig",
    "LimitsConfig",
    "RunsConfig",
    "SessionsConfig",
    "ToolEvalConfig",
    "load_config",
    "load_config_file",
    "with_cases",
]


def _pattern(value: str) -> str:
    compile_user(value)   # ValueError: RE2 cannot run it
    return value


Pattern = Annotated[str, AfterValidator(_pattern)]


class RunsConfig(BaseModel):
    """How runs are cut out of traces and which runs are graded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    root: str = Field(default="auto", description="auto, local_root, agent, or a span-name regex")
    agents: list[str] | None = Field(default=None, description="grade only runs of these agents")
    nested_agents: Literal["merge", "separate"] = "merge"
    agent_span_names: list[Pattern] = Field(default_factory=list)
    ignore_tools: list[Pattern] = Field(default_factory=list)
    server_attributes: list[str] = Field(
        default_factory=lambda: ["mcp.server.name", "gen_ai.tool.server.name", "server.address"])
    ground_truth_attribute: str = "tooleval.ground_truth"
    unwrap: Literal["auto", "off"] = Field(
        default="auto", description="auto: take generic envelopes off tool arguments and "
        "results ({\"result\": x} alone, tool messages, {\"input\": {...}, \"options\": "
        "null} ...); off: only the frameworks' own")

    @field_validator("unwrap", mode="before")
    @classmethod
    def _unwrap(cls, value: Any) -> Any:
        # YAML 1.1 reads a bare off as false.
        return "off" if value is False else value
    calls_from: Literal["auto", "executed", "requested"] = Field(
        default="auto",
        description="auto: the calls the model spans requested matched to the tool spans that "
                    "executed them (the tool spans alone where no model span records its "
                    "response); executed: the tool spans alone; requested: the requests alone, "
                    "completed by the matching tool span or the result handed back")
    strict_reading: bool = Field(
        default=False,
        description="a run whose two witnesses disagree (an unrequested execution, an "
                    "unexecuted request) gets a failing tooleval.reading result; grade exits 2")

    @field_validator("root")
    @classmethod
    def _root(cls, value: str) -> str:
        return value if value in ("auto", "local_root", "agent") else _pattern(value)


class LimitsConfig(BaseModel):
    """Memory and queue bounds of the live processor (every drop is counted), and the bounds
    on grading itself: ``max_match_chars`` and ``grading_budget_ms`` (see
    ``otel_tooleval.graders.matching``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_open_runs: int = Field(default=10_000, ge=1, description="open traces tracked at once")
    max_calls_per_run: int = Field(default=10_000, ge=1)
    max_spans_per_trace: int = Field(default=100_000, ge=1)
    max_run_bytes: int = Field(default=16 * 1024 * 1024, ge=0,
                               description="argument and result bytes kept per run")
    run_ttl_seconds: float = Field(default=600.0, gt=0)
    tombstone_seconds: float = Field(default=60.0, ge=0)
    queue_size: int = Field(default=1024, ge=1, description="runs waiting to be graded")
    max_match_chars: int = Field(
        default=DEFAULT_MAX_MATCH_CHARS, ge=2,
        description="argument, result and message text longer than this is regex-searched "
                    "only in its first and last halves of this length (a single regex match "
                    "cannot be interrupted: this is what bounds its time)")
    grading_budget_ms: float = Field(
        default=DEFAULT_GRADING_BUDGET_MS, ge=0, allow_inf_nan=False,
        description="CPU time the graders of one run may take; past it the remaining graders "
                    "give an error result (error.type budget_exceeded). 0: no budget")

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: Any) -> Any:
        # ``export_timeout_seconds`` (0.1-0.6) never bounded anything: every wait on the
        # downstream is bounded by the ``timeout_millis`` of force_flush/shutdown. Still
        # accepted, with a warning, so that a config that set it keeps loading.
        if isinstance(data, Mapping) and "export_timeout_seconds" in data:
            warnings.warn("limits.export_timeout_seconds has no effect and is ignored (waits on "
                          "the downstream are bounded by force_flush/shutdown's timeout_millis); "
                          "remove it from the config", FutureWarning, stacklevel=2)
            data = {k: v for k, v in data.items() if k != "export_timeout_seconds"}
        return data


class EmitConfig(BaseModel):
    """Which channels carry the verdicts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    span_events: bool = True
    root_attributes: bool = True
    log_events: bool = True
    metrics: bool = True
    include_values: bool = False
    violation_marks: bool = Field(
        default=True,
        description="ToolEvalSpanProcessor, ToolEvalSpanExporter and serve hold tool spans "
                    "until their run is graded, "
                    "so that the calls a failing grader lists under details.violations carry "
                    "tooleval.violation and tooleval.violation.graders; false forwards tool "
                    "spans at once, unmarked")
    phoenix: PhoenixSinkConfig | None = Field(
        default=None, description="annotate the graded runs in Arize Phoenix (docs/phoenix.md)")
    langfuse: LangfuseSinkConfig | None = Field(
        default=None, description="each run's verdicts as Langfuse scores (docs/langfuse.md); "
                                  "absent: off")


class GradingConfig(BaseModel):
    """Where the live processor runs the graders (``otel_tooleval.offload``).

    ``thread``: on one grading thread of the application's process. ``process``: in one child
    Python process fed the runs' records over a pipe, so that grading takes no CPU time under
    the application's GIL; the application's process still collects the records and builds
    the root copy and the log events and metrics. Configs with custom Python graders, or a
    process that cannot start one (no ``sys.executable``, a frozen application), stay on the
    thread (logged once).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["thread", "process"] = Field(
        default="thread", description="thread: a grading thread; process: a grading process")
    process_timeout_seconds: float = Field(
        default=30.0, gt=0, allow_inf_nan=False,
        description="a run sent to the grading process and not answered within this time "
                    "ends that process; its unanswered runs are forwarded ungraded (counted "
                    "as dropped, reason grading_process)")


_DEFAULT_GRADING = GradingConfig()


class _TopLevel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    graders: list[Any] | dict[str, Any] = Field(default_factory=list)
    runs: RunsConfig = Field(default_factory=RunsConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    emit: EmitConfig = Field(default_factory=EmitConfig)
    grading: GradingConfig = Field(default_factory=GradingConfig)
    conventions: list[ConventionEntry] = Field(default_factory=list)
    guard: GuardConfig | None = None
    sessions: SessionsConfig = Field(default_factory=SessionsConfig)
    cases: list[Any] = Field(default_factory=list, description=(
        "eval cases: each with an id, a match (attribute, first_user_message or "
        "first_user_message_regex), expect (parameters per configured grader name) and "
        "graders of its own (docs/cases.md)"))


_DEFAULT_SESSIONS = SessionsConfig()


@dataclass(frozen=True, slots=True)
class ConfiguredGrader:
    """A grader with the keys every entry may carry: ``name`` and ``agents``."""

    name: str
    type: str
    agents: frozenset[str] | None
    grader: Grader

    def applies_to(self, agent: str | None) -> bool:
        return self.agents is None or agent in self.agents


@dataclass(frozen=True, slots=True)
class ToolEvalConfig:
    """A loaded, validated configuration."""

    graders: tuple[ConfiguredGrader, ...]
    runs: RunsConfig
    limits: LimitsConfig
    emit: EmitConfig
    policy: RunPolicy
    source: str | None = None
    grading: GradingConfig = _DEFAULT_GRADING
    #: The document it was validated from (what a grading process loads again).
    document: Mapping[str, Any] | None = None
    #: The guard's rules (``guard:``): checked live by ``ToolEvalSpanProcessor`` as each call
    #: starts, and on every graded run's calls (its ``guard`` result, ``guard_result``).
    guard: GuardConfig | None = None
    #: The ``sessions:`` section, and its graders resolved (``otel_tooleval.sessions``).
    sessions: SessionsConfig = _DEFAULT_SESSIONS
    session_graders: tuple[ConfiguredGrader, ...] = ()
    #: ``guard`` compiled for grading (None without an active guard); ``grade_run`` uses it.
    guard_rules: GuardRules | None = dataclasses.field(default=None, compare=False, repr=False)
    #: The ``cases:`` section (None without one) and each case's graders, built once: the
    #: shared graders with the case's ``expect`` merged in, then its own (``grade_run``).
    cases: CaseSet | None = dataclasses.field(default=None, compare=False, repr=False)
    case_graders: Mapping[str, tuple[ConfiguredGrader, ...]] = dataclasses.field(
        default_factory=dict, compare=False, repr=False)


def _build_grader(index: int | str, entry: Any, names: dict[str, int | str],
                  context: BuildContext, where: tuple[str | int, ...] = ("graders",),
                  ) -> tuple[ConfiguredGrader | None, list[Problem]]:
    loc: tuple[str | int, ...] = (*where, index)
    if isinstance(entry, str):
        entry = {"type": entry}
    if not isinstance(entry, Mapping):
        return None, [Problem(loc, f"a grader entry must be a mapping, got {type(entry).__name__}")]
    if isinstance(index, str):
        # letta's shape: graders keyed by name; a ``name`` inside must agree.
        if entry.get("name", index) != index:
            return None, [Problem(loc + ("name",), f"differs from the key {index!r} it is under")]
        entry = {**entry, "name": index}
    by_keys = family_by_keys(entry)
    type_key = "type" if "type" in entry else "kind" if "kind" in entry else None
    if by_keys is not None:
        family, type_key = by_keys, None     # a pasted shape: its own keys say what it is
    elif type_key is None:
        return None, [Problem(loc, "missing 'type' (or 'kind'): which grader is this?")]
    else:
        type_id = entry[type_key]
        found = REGISTRY.get(type_id) if isinstance(type_id, str) else None
        if found is None:
            # Aliases are accepted but not listed: one name per family reads better.
            known = ", ".join(sorted(f.type for f in families()))
            hint = did_you_mean(type_id, REGISTRY) if isinstance(type_id, str) else ""
            return None, [Problem(loc + (type_key,),
                                  f"unknown grader type {type_id!r}{hint} (known: {known})")]
        family = found
    problems: list[Problem] = []
    name = entry.get("name")
    if name is None:
        name = family.type
        n = 2
        while name in names:
            name, n = f"{family.type}-{n}", n + 1
    elif not isinstance(name, str) or not name:
        problems.append(Problem(loc + ("name",), "must be a non-empty string"))
        name = f"{family.type}#{index}"
    elif name in names:
        other = names[name]
        section = ".".join(str(w) for w in where)
        seen = f"{section}[{other}]" if isinstance(other, int) else f"{section}.{other}"
        problems.append(Problem(loc + ("name",), f"duplicate grader name {name!r} (also {seen})"))
    names[name] = index
    agents = entry.get("agents")
    if type_key is None and isinstance(entry.get("agent"), str) and agents is None:
        agents = [entry["agent"]]        # mcptest's test entry names its one agent
    if agents is not None and (not isinstance(agents, list)
                               or not all(isinstance(a, str) for a in agents)):
        problems.append(Problem(loc + ("agents",), "must be a list of agent names"))
        agents = None
    shared = ("name", "agents", type_key) if type_key else ("name", "agents", "agent")
    rest = {k: v for k, v in entry.items() if k not in shared}
    try:
        if family.build_with_context is not None:
            grader = family.build_with_context(rest, name, context)
        else:
            grader = family.build(rest, name, context.include_values)
    except ConfigProblems as exc:
        return None, problems + _missing_level(
            [Problem(loc + p.loc, p.message) for p in exc.problems], loc)
    except ValidationError as exc:
        return None, problems + _missing_level(problems_from_validation(exc, loc), loc)
    if problems:
        return None, problems
    return ConfiguredGrader(name, family.type, frozenset(agents) if agents else None,
                            grader), []


def _missing_level(problems: list[Problem], loc: tuple[str | int, ...]) -> list[Problem]:
    """An entry whose family keeps its options under a required ``config:`` (tool-calls),
    written with them beside ``type``: one problem, "move these keys under config:", instead
    of "config: required key is missing" and an "unknown key" for each of them."""
    missing = [p for p in problems if p.loc == (*loc, "config")
               and p.message.startswith("required key is missing")]
    stray = [p for p in problems if len(p.loc) == len(loc) + 1 and p.loc[:-1] == loc
             and p.message.startswith("unknown key")]
    if not missing or not stray:
        return problems
    keys = [str(p.loc[-1]) for p in stray]
    rest = [p for p in problems if p not in missing and p not in stray]
    shape = ", ".join(f"{k}: ..." for k in keys)
    return [Problem(loc, f"move these keys under config: {', '.join(keys)} (the options of "
                         f"this grader sit one level down: config: {{{shape}}})"), *rest]


_TURN_SHARED = ("type", "kind", "name", "agents")


def _build_session_grader(index: int, entry: Any, names: dict[str, int | str],
                          context: BuildContext) -> tuple[ConfiguredGrader | None, list[Problem]]:
    """A ``sessions.graders`` entry; with ``turns:``, one grader per run of the session: each
    turn's keys over the entry's own (docs/sessions.md)."""
    where: tuple[str | int, ...] = ("sessions", "graders")
    if not isinstance(entry, Mapping) or "turns" not in entry:
        return _build_grader(index, entry, names, context, where)
    loc = (*where, index, "turns")
    turns = entry["turns"]
    if not isinstance(turns, list) or not turns:
        return None, [Problem(loc, "must be a non-empty list: one entry per run of the "
                                   "session, each holding that run's expectation")]
    base = {k: v for k, v in entry.items() if k != "turns"}
    built: list[ConfiguredGrader] = []
    problems: list[Problem] = []
    for k, turn in enumerate(turns):
        turn = {} if turn is None else turn
        if not isinstance(turn, Mapping):
            problems.append(Problem((*loc, k), "a turn must be a mapping of the grader's keys "
                                               f"for that run, got {type(turn).__name__}"))
            continue
        shared = [key for key in _TURN_SHARED if key in turn]
        if shared:
            problems.append(Problem((*loc, k, shared[0]), "give it once, beside turns:, not "
                                                          "per turn"))
            continue
        grader, found = _build_grader(k, {**base, **turn}, {}, context, loc)
        problems.extend(found)
        if grader is not None:
            built.append(grader)
    if problems:
        return None, problems
    # The entry's own name and agents, checked as any entry's are (its first turn stands in).
    head, found = _build_grader(index, {**base, **turns[0]}, names, context, where)
    if head is None:
        return None, found
    return ConfiguredGrader(head.name, head.type, head.agents,
                            TurnsGrader(head.name, head.type, [g.grader for g in built])), []


def _compile_all(patterns: list[str]) -> tuple[UserRegex, ...]:
    return tuple(compile_user(p) for p in patterns)


def config_from_mapping(data: Any, source: str | None = None, *,
                        allow_no_graders: bool = False) -> ToolEvalConfig:
    """Validate a parsed document (the YAML's top-level mapping).

    A document with no grader is refused (every run would pass on nothing) unless
    ``allow_no_graders``: the library's own ungraded set-ups and re-loads of a validated one.
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError([Problem((), f"the config must be a mapping, got {type(data).__name__}")],
                          source)
    problems: list[Problem] = []
    try:
        top = _TopLevel.model_validate(data)
    except ValidationError as exc:
        # Report the other sections' problems too, then the graders' as far as they parse.
        problems.extend(problems_from_validation(exc, model=_TopLevel))
        top = _TopLevel.model_construct(graders=data.get("graders") or [], runs=RunsConfig(),
                                        limits=LimitsConfig(), emit=EmitConfig(),
                                        grading=GradingConfig(), conventions=[], guard=None,
                                        sessions=SessionsConfig(), cases=[])
        if not isinstance(top.graders, (list, Mapping)):
            raise ConfigError(problems, source) from None
    graders: list[ConfiguredGrader] = []
    names: dict[str, int | str] = {}
    context = BuildContext(
        include_values=top.emit.include_values,
        ground_truth_attribute=top.runs.ground_truth_attribute,
        base_dir=Path(source).parent if source is not None else None,
    )
    keyed: list[tuple[int | str, Any]] = (
        list(top.graders.items()) if isinstance(top.graders, Mapping)
        else list(enumerate(top.graders)))
    guarded = top.guard is not None and top.guard.active   # a guard alone is a use
    if not keyed and not top.sessions.graders and not allow_no_graders and not guarded:
        problems.append(Problem(("graders",), "no grader configured: add at least one "
                                "(a config without graders would pass every run on nothing)"))
    for i, entry in keyed:
        grader, found = _build_grader(i, entry, names, context)
        problems.extend(found)
        if grader is not None:
            graders.append(grader)
    if guarded and GUARD_RESULT in names:
        problems.append(Problem(
            ("graders", names[GUARD_RESULT], "name"),
            f"{GUARD_RESULT!r} is the name of the guard's result in each run's results "
            "(the config has a guard: section): name this grader otherwise"))
    session_graders: list[ConfiguredGrader] = []
    session_names: dict[str, int | str] = {}
    session_context = dataclasses.replace(context, session=True)
    for i, entry in enumerate(top.sessions.graders):
        grader, found = _build_session_grader(i, entry, session_names, session_context)
        problems.extend(found)
        if grader is not None:
            session_graders.append(grader)
    case_set, case_graders = _cases(top.cases, keyed, graders, names, context, problems)
    if problems:
        raise ConfigError(problems, source)
    runs = top.runs
    named_root = runs.root in ("auto", "local_root", "agent")
    policy = RunPolicy(
        root=runs.root if named_root else "pattern",
        root_pattern=None if named_root else compile_user(runs.root),
        nested_agents=runs.nested_agents,
        agent_span_names=_compile_all(runs.agent_span_names),
        ignore_tools=_compile_all(runs.ignore_tools),
        server_attributes=tuple(runs.server_attributes),
        max_calls_per_run=top.limits.max_calls_per_run,
        conventions=compile_conventions(top.conventions),
        unwrap=runs.unwrap == "auto",
        calls_from=runs.calls_from,
    )
    rules = GuardRules(top.guard, unwrap=policy.unwrap) if guarded and top.guard else None
    return ToolEvalConfig(tuple(graders), runs, top.limits, top.emit, policy, source,
                          top.grading, data, guard=top.guard, sessions=top.sessions,
                          session_graders=tuple(session_graders), guard_rules=rules,
                          cases=case_set, case_graders=case_graders)


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on ``base``: mappings merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in over.items():
        below = out.get(key)
        out[key] = (_merged(below, value) if isinstance(below, Mapping)
                    and isinstance(value, Mapping) else value)
    return out


def _cases(data: list[Any], keyed: list[tuple[int | str, Any]],
           graders: list[ConfiguredGrader], names: dict[str, int | str],
           context: BuildContext, problems: list[Problem],
           ) -> tuple[CaseSet | None, dict[str, tuple[ConfiguredGrader, ...]]]:
    """The ``cases:`` section and each case's graders: the shared entries, those the case's
    ``expect`` names rebuilt with its parameters merged in, then its own ``graders``."""
    if not data:
        return None, {}
    cases, found = parse_cases(data)
    problems.extend(found)
    # Every shared entry built (else the config fails anyway): the i-th grader is keyed[i].
    entries = ({g.name: (index, {"type": entry} if isinstance(entry, str) else entry)
                for g, (index, entry) in zip(graders, keyed, strict=True)}
               if len(graders) == len(keyed) else {})
    by_name = {g.name: g for g in graders}
    at = {entry["id"].strip(): i for i, entry in reversed(list(enumerate(data)))
          if isinstance(entry, Mapping) and isinstance(entry.get("id"), str)}
    built: dict[str, tuple[ConfiguredGrader, ...]] = {}
    for case in cases:
        loc: tuple[str | int, ...] = ("cases", at[case.id])
        replaced: dict[str, ConfiguredGrader] = {}
        for name, params in case.expect.items():
            if len(graders) != len(keyed):
                break     # a shared entry is broken (reported): what it is called is unknown
            if name not in by_name or name not in entries:
                known = ", ".join(sorted(by_name)) or "none"
                problems.append(Problem((*loc, "expect", name), f"no configured grader named "
                                        f"{name!r} (configured: {known})"))
                continue
            index, entry = entries[name]
            grader, bad = _build_grader(index, _merged({**entry, "name": name}, params), {},
                                        context)
            problems.extend(Problem((*loc, "expect", name, *p.loc[2:]), p.message)
                            for p in bad)
            if grader is not None:
                replaced[name] = grader
        own: list[ConfiguredGrader] = []
        own_names: dict[str, int | str] = dict(names)
        for i, entry in enumerate(case.graders):
            grader, bad = _build_grader(i, entry, own_names, context, (*loc, "graders"))
            problems.extend(bad)
            if grader is not None:
                own.append(grader)
        built[case.id] = (*(replaced.get(g.name, g) for g in graders), *own)
    return CaseSet(cases), built


def load_config(source: ToolEvalConfig | Mapping[str, Any] | str | os.PathLike[str] | None
                ) -> ToolEvalConfig:
    """Load a config from a path (YAML or JSON), YAML text, or a mapping.

    ``None`` reads the file named by ``TOOLEVAL_CONFIG``, or gives the empty config (no
    grader: runs are collected, nothing is graded). Any other source must configure at least
    one grader.

    Raises:
        ConfigError: listing every problem with its location.
    """
    if isinstance(source, ToolEvalConfig):
        return source
    if source is None:
        env = os.environ.get("TOOLEVAL_CONFIG")
        return load_config(Path(env)) if env else config_from_mapping({}, allow_no_graders=True)
    if not isinstance(source, (str, os.PathLike)):
        return config_from_mapping(source, None)
    path: Path | None = None
    if isinstance(source, os.PathLike) or "\n" not in source and source.strip().endswith((".yaml", ".yml", ".json")) or "\n" not in source and _is_file(source):
        path = Path(source)
    if path is not None:
        return load_config_file(path)
    return config_from_mapping(_parse_text(str(source), None), None)


MAX_CONFIG_BYTES = 4 * 1024 * 1024
"""The largest config file read (YAML or JSON): far beyond any real config."""

def load_config_file(path: str | os.PathLike[str], *,
                     allow_no_graders: bool = False) -> ToolEvalConfig:
    """Load the config file at ``path`` (what ``--config`` names: always a path, never YAML).

    ``allow_no_graders`` for readers that grade nothing (``inspect`` takes ``runs:`` alone).
    Only a regular file of at most ``MAX_CONFIG_BYTES`` is read: a FIFO, a device
    (``/dev/zero``) or a folder is refused at once.

    Raises:
        ConfigError: the file is missing, is not a regular file, is too large, cannot be
            read, is nested too deep or expands too far (``MAX_CONFIG_DEPTH``,
            ``MAX_CONFIG_NODES``), or is not a valid config.
    """
    where = Path(path)
    try:
        data = read_local_file(where, max_bytes=MAX_CONFIG_BYTES).data
    except FileRefused as exc:
        problem = (f"{where} is {exc.kind}, not a config file" if exc.kind
                   else f"cannot read {where}: no such file" if exc.missing
                   else f"{where}: {exc.reason}")
        raise ConfigError([Problem((), problem)], str(where)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([Problem((), f"cannot read {where}: not UTF-8 text (byte "
                                       f"{exc.start})")], str(where)) from None
    return config_from_mapping(_parse_text(text, str(where)), str(where),
                               allow_no_graders=allow_no_graders)


def _json_depth(doc: Any) -> int:
    """How deep the lists and objects of a parsed JSON document go (without recursion)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(doc, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            depth += 1
            deepest = max(deepest, depth)
            stack.extend((child, depth) for child in (
                value.values() if isinstance(value, dict) else value))
    return deepest


def _parse_text(text: str, source: str | None) -> Any:
    if source is not None and source.endswith(".json"):
        try:
            doc = json.loads(text)
        except RecursionError:
            doc = None   # deeper than the parser goes: deeper than the bound too
        except ValueError as exc:
            raise ConfigError([Problem((), f"not valid JSON: {exc}")], source) from None
        else:
            if _json_depth(doc) <= MAX_CONFIG_DEPTH:
                return doc
        raise ConfigError([Problem((), f"nested deeper than {MAX_CONFIG_DEPTH} levels")],
                          source)
    try:
        # PyYAML's reader checks a string's characters as the loader is made: a control
        # character raises here, not in get_single_data.
        loader = BoundedLoader(text)
    except yaml.reader.ReaderError as exc:
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise ConfigError([Problem((), f"not valid YAML: character {exc.position + 1} is a "
                                       f"control character (U+{code:04X}), which YAML does "
                                       "not allow")], source) from None
    try:
        return loader.get_single_data()
    except Unbounded as exc:
        mark = exc.problem_mark
        raise ConfigError([Problem((), f"refused: line {mark.line + 1}, column "
                                       f"{mark.column + 1}: {exc.problem}")], source) from None
    except yaml.YAMLError as exc:
        raise ConfigError([Problem((), f"not valid YAML: {_yaml_problem(exc)}")],
                          source) from None
    finally:
        loader.dispose()


# PyYAML's token names, in words.
_TOKENS = {"<block end>": "the end of an indented block", "<stream end>": "the end of the file",
           "<block mapping start>": "a key indented deeper",
           "<block sequence start>": "a list indented deeper", "<scalar>": "a value",
           "<block entry>": "a list item ('- ')", "<document start>": "'---'"}


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A PyYAML error in plain words, where it is (line and column, 1-based) first.

    The usual mistakes get a sentence that says what to change (indentation, a tab, a ':' in
    an unquoted value, a bracket or quote never closed); any other keeps PyYAML's words with
    its token names spelled out."""
    mark = getattr(exc, "problem_mark", None)
    opened = getattr(exc, "context_mark", None)
    raw = str(getattr(exc, "problem", None) or exc)

    def at(m: Any) -> str:
        return f"line {m.line + 1}, column {m.column + 1}"

    since = f" (opened at {at(opened)})" if opened is not None else ""
    if raw.startswith("mapping values are not allowed"):
        text = ("a ':' where no key can start: is this line indented too far, or does an "
                "unquoted value hold ': '? (quote it: \"a: b\")")
    elif raw.startswith(("expected <block end>", "did not find expected key",
                         "did not find expected '-'")):
        text = ("this line is indented differently from the lines above it: the keys of one "
                "mapping, and the '- ' items of one list, start in the same column")
    elif "'\\t'" in raw or "'\t'" in raw:
        text = "a tab: YAML indents with spaces only"
    elif raw.startswith(("expected ',' or '}'", "expected ',' or ']'")):
        opener, close = ("{", "}") if "'}'" in raw else ("[", "]")
        text = f"a '{opener}'{since} is not closed: a '{close}' or ',' is missing before this point"
    elif raw.startswith("found unexpected end of stream") or "end of stream" in raw and (
            "quoted" in str(getattr(exc, "context", ""))):
        text = f"a quote{since} is never closed"
    elif raw.startswith("could not find expected ':'"):
        text = (f"a key{since} without ':' after it (or a value that runs onto the next "
                "line: quote it)")
    elif raw.startswith("found undefined alias"):
        alias = raw.split("'")[1] if raw.count("'") >= 2 else "alias"
        text = f"*{alias} names no &{alias} anchor defined before it"
    else:
        text = raw
        for token, words in _TOKENS.items():
            text = text.replace(f"'{token}'", words).replace(token, words)
    return f"{at(mark)}: {text}" if mark is not None else text


def _is_file(text: str) -> bool:
    """Whether ``text`` names something that exists (a file, or a folder, FIFO or device,
    which ``load_config_file`` then refuses by name: single-line text naming one was meant
    as a path, and no such text is a config); False for text no path can be (too long...)."""
    try:
        return Path(text).exists()
    except (OSError, ValueError):
        return False


def with_cases(config: ToolEvalConfig,
               source: str | os.PathLike[str] | Sequence[Any]) -> ToolEvalConfig:
    """``config`` with the cases of a case file (``grade --cases``), or of a list of case
    entries (the pytest plugin's ``cases=``), after its own ``cases:``; a problem in them is
    located as in the config (``cases[N]``, the first added case numbered after the config's
    own).

    Raises:
        ConfigError: the file cannot be read, or a case is invalid.
    """
    entries = (_case_entries(source) if isinstance(source, (str, os.PathLike))
               else list(source))
    if config.document is None and (config.graders or config.guard is not None):
        raise ConfigError([Problem(("cases",), "this config was built by hand, without the "
                                   "document its graders came from; load it with load_config "
                                   "to add cases")], config.source)
    doc = dict(config.document or {})
    doc["cases"] = [*(doc.get("cases") or []), *entries]
    return config_from_mapping(doc, config.source, allow_no_graders=True)


def _case_entries(path: str | os.PathLike[str]) -> list[Any]:
    """The case entries of a case file: ours as ``read_cases`` reads them, or another tool's
    eval set (ADK, agentv, DeepEval, Ragas, UiPath: ``case_imports``) turned into ours."""
    from .case_imports import CaseImportError, detect_format, import_cases, read_case_file

    try:
        native = detect_format(path, read_case_file(path)) == "native"
    except CaseImportError:
        native = True   # ours, or nothing known: read_cases names the problem
    if native:
        return read_cases(path)
    try:
        return list(import_cases(path))
    except CaseImportError as exc:
        where = f"{exc.field}: " if exc.field else ""
        raise ConfigError([Problem((), f"{where}{exc.problem}")], os.fspath(path),
                          what="case set") from None
