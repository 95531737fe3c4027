"""Value objects of the grading core: spans in, tool calls, runs and verdicts out.

Everything here is plain data (frozen dataclasses with slots) and imports nothing from the
OpenTelemetry SDK, so the core can be tested and reused without a TracerProvider.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from operator import attrgetter
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

from .values import decode_value, unwrap_arguments, unwrap_result

__all__ = ["AgentRun", "GradeResult", "Reading", "ReadingNote", "RunReport", "SpanEvent",
           "SpanRecord", "ToolCall", "Verbatim", "Verdicts", "text_of"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})

#: One span event: its name and its attributes (decoded as span attributes are).
SpanEvent = tuple[str, Mapping[str, Any]]


class SpanRecord(NamedTuple):
    """The parts of one span the core needs, whatever it was read from.

    ``parent_id`` is 0 for a span without a parent; ``parent_remote`` marks a parent in another
    process. ``end_ns`` is None while the span is still open. ``attributes`` is the span's own
    mapping (never copied for an ended span). ``events`` holds the span's events in order as
    ``(name, attributes)`` pairs (some frameworks keep a call's arguments and result only
    there); an ended live span's event attributes are the SDK's own mappings, not copies. A
    named tuple rather than a frozen dataclass: one is built per span on the grading thread,
    and a tuple costs a quarter as much. Every field is plain data (tuples, dicts, strings,
    numbers), so that a record goes to the grading process as marshal data.
    """

    trace_id: int
    span_id: int
    parent_id: int
    name: str
    start_ns: int
    end_ns: int | None
    attributes: Mapping[str, Any] = _EMPTY
    error: str | None = None
    parent_remote: bool = False
    scope: str = ""
    events: tuple[SpanEvent, ...] = ()

    @property
    def is_local_root(self) -> bool:
        return self.parent_id == 0 or self.parent_remote

    def event_value(self, name: str, key: str) -> Any:
        """The attribute ``key`` of the first event called ``name`` that has it, else None."""
        for event_name, attrs in self.events:
            if event_name == name and key in attrs:
                return attrs[key]
        return None


_UNSET: Any = object()


@dataclass(frozen=True, slots=True)
class Verbatim:
    """A call's envelope under ``runs.unwrap: off``: only its convention row's own unwrapping
    (``arguments_from`` / ``result_from``, None for none), no generic envelope taken off."""

    arguments_from: Callable[[Any], Any] | None = None
    result_from: Callable[[Any], Any] | None = None


@dataclass(slots=True, eq=False)
class ToolCall:
    """One tool invocation of an agent run, in call order. Treat it as immutable.

    ``arguments`` and ``result`` hold parsed JSON where the span held JSON text, else the text;
    they are decoded on first use, so graders that look only at names never pay for parsing.
    ``has_result`` tells a missing result from a ``None`` result. ``step`` is the 0-based agent
    turn (model response) the call was issued in. A call is ``pending`` when its span had not
    ended when the run's root ended.

    Not a frozen dataclass: frozen construction goes through ``object.__setattr__`` per field
    and costs about seven times as much (measured: 2.1 µs against 0.3 µs), and every run builds
    one per call on the grading thread.
    """

    name: str
    index: int
    raw_arguments: Any = None
    raw_result: Any = None
    has_result: bool = False
    call_id: str | None = None
    span_id: int = 0
    start_ns: int = 0
    end_ns: int | None = None
    step: int = 0
    pending: bool = False
    error: str | None = None
    server: str | None = None
    decoded_arguments: Any = field(default=_UNSET, repr=False)
    decoded_result: Any = field(default=_UNSET, repr=False)
    #: The convention row that read the call, when it unwraps the framework's envelopes
    #: (``arguments_from`` / ``result_from`` of ``conventions.ToolConvention``); a
    #: ``Verbatim`` when the generic envelopes are not taken off (``runs.unwrap: off``).
    #: Either way the generic ones (``values.unwrap_arguments`` / ``unwrap_result``) are
    #: taken off after the row's, unless it is a ``Verbatim``.
    envelope: Any = field(default=None, repr=False)
    #: In a session's view (``otel_tooleval.sessions``), where ``index`` and ``step`` count
    #: across the session: the run's position in the session and the step within that run.
    #: Outside a session: 0 and None (the step is ``step``).
    run_index: int = 0
    run_step: int | None = None

    @property
    def arguments(self) -> Any:
        if self.decoded_arguments is _UNSET:
            value = decode_value(self.raw_arguments)
            envelope = self.envelope
            if envelope is None:
                value = unwrap_arguments(value)
            else:
                if envelope.arguments_from is not None:
                    value = envelope.arguments_from(value)
                if envelope.__class__ is not Verbatim:
                    value = unwrap_arguments(value)
            self.decoded_arguments = value
        return self.decoded_arguments

    @property
    def result(self) -> Any:
        if self.decoded_result is _UNSET:
            value = decode_value(self.raw_result)
            envelope = self.envelope
            if envelope is None:
                value = unwrap_result(value)
            else:
                if envelope.result_from is not None and self.error is None:
                    value = envelope.result_from(value)
                if envelope.__class__ is not Verbatim:
                    value = unwrap_result(value)
            self.decoded_result = value
        return self.decoded_result

    @property
    def completed(self) -> bool:
        return not self.pending

    @property
    def duration_ms(self) -> float | None:
        if self.pending or self.end_ns is None:
            return None
        return (self.end_ns - self.start_ns) / 1e6

    def argument(self, key: str) -> Any:
        """The named argument, or None when the arguments are not an object or lack it."""
        args = self.arguments
        if args.__class__ is dict or isinstance(args, Mapping):   # dict first: ABC checks are slow
            return args.get(key)
        return None

    @property
    def result_text(self) -> str | None:
        """The result as text: a string as is, anything else as compact JSON."""
        if not self.has_result:
            return None
        return text_of(self.result)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolCall):
            return NotImplemented
        return (self.name, self.index, self.arguments, self.result, self.has_result,
                self.call_id, self.span_id, self.start_ns, self.end_ns, self.step, self.pending,
                self.error, self.server) == (
            other.name, other.index, other.arguments, other.result, other.has_result,
            other.call_id, other.span_id, other.start_ns, other.end_ns, other.step,
            other.pending, other.error, other.server)

    __hash__ = None  # type: ignore[assignment]


def _argument_classes(calls: Sequence[ToolCall]) -> dict[str, dict[Any, list[int]]]:
    """``AgentRun.argument_classes``: grouped in C (attribute tuples as dict keys) when the
    calls share one envelope and their arguments are hashable, else call by call."""
    flat: dict[tuple[str, Any, str | None], list[int]] = {}
    if len(set(map(id, map(_ENVELOPE, calls)))) <= 1:
        try:
            for i, key in enumerate(map(_CLASS_KEY, calls)):
                members = flat.get(key)
                if members is None:
                    flat[key] = [i]
                else:
                    members.append(i)
        except TypeError:           # unhashable arguments, recorded as values
            flat = {}
    classes: dict[str, dict[Any, list[int]]] = {}
    if flat or not calls:
        for (name, raw, server), members in flat.items():
            by_args = classes.setdefault(name, {})
            if raw.__class__ is str:
                by_args[(raw, 0, server)] = members
            else:                   # values, not text: each call a class of its own
                for i in members:
                    by_args[(i, 0, server)] = [i]
        return classes
    for i, call in enumerate(calls):
        raw = call.raw_arguments
        key = (raw if raw.__class__ is str else i, id(call.envelope), call.server)
        classes.setdefault(call.name, {}).setdefault(key, []).append(i)
    return classes


_ENVELOPE = attrgetter("envelope")
_CLASS_KEY = attrgetter("name", "raw_arguments", "server")


class ReadingNote(NamedTuple):
    """One call the two witnesses disagree on: an execution no model response requested
    (``span_id``: the tool span) or a request no tool span executed (``span_id``: the model
    span that requested it)."""

    name: str
    span_id: int
    call_id: str | None
    step: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "span_id": format(self.span_id, "016x"),
                "call_id": self.call_id, "step": self.step}


@dataclass(frozen=True, slots=True)
class Reading:
    """How a run's calls were read from its two witnesses: the calls the model spans
    requested and the tool spans that executed them (``otel_tooleval.reconcile``).

    ``calls_from`` is the policy (``runs.calls_from``); ``recorded`` tells whether any model
    span of the run recorded its response (content capture on). ``unrequested``: executions
    that match no request, left out of the trajectory (kept where the response before them
    recorded nothing); ``unexecuted``: requests no tool span executed.
    """

    calls_from: str = "auto"
    recorded: bool = False
    requested: int = 0
    executed: int = 0
    matched: int = 0
    unrequested: tuple[ReadingNote, ...] = ()
    unexecuted: tuple[ReadingNote, ...] = ()

    @property
    def agrees(self) -> bool:
        """No execution without its request and no request without its execution."""
        return not self.unrequested and not self.unexecuted

    def problems(self) -> list[str]:
        """The disagreements in words, one per call."""
        return ([f"{n.name} (span {n.span_id:016x}, step {n.step}) was executed but no model "
                 f"response requested it" for n in self.unrequested]
                + [f"{n.name} (call id {n.call_id or '-'}, step {n.step}) was requested by model "
                   f"span {n.span_id:016x} but no tool span executed it"
                   for n in self.unexecuted])

    @property
    def source(self) -> str:
        """What the calls were read from: ``requests+executions`` (matched), ``executions``
        (the tool spans alone: ``calls_from: executed``, or no request recorded) or
        ``requests`` (``calls_from: requested``)."""
        if self.calls_from == "requested":
            return "requests"
        if self.calls_from == "executed" or not self.recorded:
            return "executions"
        return "requests+executions"

    def to_dict(self) -> dict[str, Any]:
        """The counts, as the grade JSON document writes them."""
        return {"requested": self.requested, "executed": self.executed,
                "matched": self.matched, "unrequested": len(self.unrequested),
                "unexecuted": len(self.unexecuted), "source": self.source}

    def notes(self) -> dict[str, list[dict[str, Any]]]:
        """The calls the witnesses disagree on, each with its span (``inspect``)."""
        return {"unrequested": [n.to_dict() for n in self.unrequested],
                "unexecuted": [n.to_dict() for n in self.unexecuted]}


_NO_READING = Reading()


@dataclass(frozen=True, slots=True)
class AgentRun:
    """One agent run: a root span and the tool calls below it, ordered by start time."""

    trace_id: int
    root_span_id: int
    agent: str | None
    calls: tuple[ToolCall, ...]
    root_name: str = ""
    start_ns: int = 0
    end_ns: int | None = None
    pending_calls: int = 0
    late_spans: int = 0
    dropped_calls: int = 0
    steps: int = 1
    root_attributes: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    outputs: RunOutputs | None = field(default=None, repr=False, compare=False)
    #: How the calls were read: requests and executions, matched (``Reading``).
    reading: Reading = field(default=_NO_READING, repr=False, compare=False)
    _derived: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def calls_by_name(self) -> Mapping[str, Sequence[ToolCall]]:
        """The calls grouped by tool name, in call order; computed once, shared by graders."""
        groups = self._derived.get("by_name")
        if groups is None:
            groups = {}
            for call in self.calls:
                group = groups.get(call.name)
                if group is None:
                    groups[call.name] = [call]
                else:
                    group.append(call)
            self._derived["by_name"] = groups
        return groups

    def first_call(self, name: str, *, last: bool = False) -> ToolCall | None:
        """The first (``last``: the last) call of the tool ``name``, or None: from the
        grouped calls when a grader already asked for them, else by a scan that stops there
        (a grader reading one call need not group the run)."""
        groups = self._derived.get("by_name")
        if groups is not None:
            group = groups.get(name)
            return None if not group else group[-1 if last else 0]
        for call in reversed(self.calls) if last else self.calls:
            if call.name == name:
                return call
        return None

    def argument_classes(self) -> Mapping[str, Mapping[Any, Sequence[int]]]:
        """The call indexes grouped by tool name, then into classes of calls with equal
        arguments and server, in call order; computed once, shared by graders.

        Calls share a class when they recorded the same argument text, read through the same
        envelope, from the same server, so a grader can decode and score one call per class
        (a run's calls repeat their arguments more often than not). Arguments recorded as
        anything but text are a class of their own call. Equal arguments written differently
        may fall in different classes: a class is a guarantee of equality, not its test.
        """
        classes = self._derived.get("argument_classes")
        if classes is None:
            classes = self._derived["argument_classes"] = _argument_classes(self.calls)
        return classes

    @property
    def final_output(self) -> str | None:
        """The run's final output (SEMANTICS 1), read from the spans on first use."""
        return self.outputs.final_output() if self.outputs is not None else None

    @property
    def assistant_texts(self) -> tuple[str, ...]:
        """The assistant text of each model call, in order, read on first use."""
        return self.outputs.assistant_texts() if self.outputs is not None else ()

    @property
    def trace_id_hex(self) -> str:
        return format(self.trace_id, "032x")

    @property
    def root_span_id_hex(self) -> str:
        return format(self.root_span_id, "016x")


class RunOutputs(Protocol):
    """What the model said in a run; computed lazily, only graders of outputs need it."""

    def final_output(self) -> str | None: ...

    def assistant_texts(self) -> tuple[str, ...]: ...


@dataclass(frozen=True, slots=True, init=False)
class GradeResult:
    """One grader's verdict on one run."""

    name: str
    type: str
    score: float
    passed: bool
    label: str
    explanation: str
    details: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None

    def __init__(self, name: str, type: str, score: float, passed: bool, label: str,
                 explanation: str, details: Mapping[str, Any] = _UNSET,
                 error: str | None = None) -> None:
        # The dataclass's own __init__, at half the cost (one result per grade): a frozen
        # dataclass sets each field through object.__setattr__, this through its slot.
        s = _RESULT_SLOTS
        s[0](self, name)
        s[1](self, type)
        s[2](self, score)
        s[3](self, passed)
        s[4](self, label)
        s[5](self, explanation)
        s[6](self, {} if details is _UNSET else details)
        s[7](self, error)

    @classmethod
    def failure(cls, name: str, type_: str, error: str, explanation: str) -> GradeResult:
        """The result of a grader that raised or met a grading-time configuration problem."""
        return cls(name, type_, 0.0, False, "error", explanation, {}, error)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "score": self.score,
            "passed": self.passed,
            "label": self.label,
            "explanation": self.explanation,
            "details": _jsonable(self.details),
            "error": self.error,
        }


#: The slot setters of GradeResult's fields, in order (the slots exist once the class does).
_RESULT_SLOTS: tuple[Callable[[GradeResult, Any], None], ...] = tuple(
    getattr(GradeResult, f.name).__set__ for f in fields(GradeResult))


class ResultsVerdict:
    """``passed``, ``score`` and ``failed`` of a report's grader results (runs, sessions)."""

    __slots__ = ()
    results: tuple[GradeResult, ...]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def score(self) -> float:
        """Mean of the graders' scores (1.0 when no grader applied)."""
        if not self.results:
            return 1.0
        return math.fsum(r.score for r in self.results) / len(self.results)

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.results if not r.passed)


@dataclass(frozen=True, slots=True)
class RunReport(ResultsVerdict):
    """A run and its verdicts."""

    run: AgentRun
    results: tuple[GradeResult, ...]
    #: The id of the run's case (``cases:``), None when it matched none.
    case: str | None = None
    #: The ids of the cases that all match this run (an input problem); empty otherwise.
    ambiguous: tuple[str, ...] = ()

    @property
    def agent(self) -> str | None:
        return self.run.agent

    def to_dict(self) -> dict[str, Any]:
        run = self.run
        return {
            "trace_id": run.trace_id_hex,
            "root_span_id": run.root_span_id_hex,
            "agent": run.agent,
            "tool_calls": len(run.calls),
            "pending_calls": run.pending_calls,
            "late_spans": run.late_spans,
            "reading": run.reading.to_dict(),
            "passed": self.passed,
            "results": [r.to_dict() for r in self.results],
        }


class Verdicts(Protocol):
    """What the log events and metrics of a run need: a ``RunReport``, or the verdicts a
    grading process sent back (``otel_tooleval.offload``)."""

    @property
    def agent(self) -> str | None: ...

    @property
    def results(self) -> Sequence[GradeResult]: ...

    @property
    def passed(self) -> bool: ...


# json.dumps with these options builds an encoder per call; one shared encoder writes the same.
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)
_C_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)
_ENCODE_STRING: Any = json.encoder.encode_basestring


def text_of(value: Any) -> str:
    """A value as text: a string as is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    if _C_MAKE_ENCODER is not None:
        # _COMPACT_JSON.encode without its Python layers (a third of the time for an
        # argument object): the C encoder it makes, made the same way, with a fresh memo
        # of the containers being written (circular references are refused as before).
        return "".join(_C_MAKE_ENCODER({}, str, _ENCODE_STRING, None, ":", ",", False, False,
                                       True)(value, 0))
    return _COMPACT_JSON.encode(value)


def _jsonable(value: Any) -> Any:
    cls = value.__class__     # exact types first: the Mapping ABC check is slow
    if cls is str or cls is int or cls is float or cls is bool or value is None:
        return value
    if cls is dict:
        return _jsonable_dict(value)
    if cls is list or cls is tuple:
        return _jsonable_list(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


# The two below are _jsonable's walk with plain leaves handled in line: details are mostly
# small dicts of strings and numbers, and a call per leaf was half the cost of a JSON report.

def _jsonable_dict(value: dict[Any, Any]) -> dict[str, Any]:
    out = {}
    for k, v in value.items():
        cls = v.__class__
        if not (cls is str or cls is int or cls is float or cls is bool or v is None):
            v = _jsonable_dict(v) if cls is dict else _jsonable(v)
        out[k if k.__class__ is str else str(k)] = v
    return out


def _jsonable_list(value: list[Any] | tuple[Any, ...]) -> list[Any]:
    out = []
    for v in value:
        cls = v.__class__
        if not (cls is str or cls is int or cls is float or cls is bool or v is None):
            v = _jsonable_dict(v) if cls is dict else _jsonable(v)
        out.append(v)
    return out
