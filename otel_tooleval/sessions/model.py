"""Sessions: the runs of one conversation, kept compact, and their verdicts.

A session is every graded run whose spans carry the same session key (``keys.session_key``).
What a session keeps of a run is a :class:`SessionRun`: the run's tool calls with their raw
argument and result values (decoded again only if a grader reads them), the ids that link the
session to the run's root span, and the run's final output and assistant texts only when a
session grader reads outputs. No span, record or ``AgentRun`` is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..model import AgentRun, GradeResult, ResultsVerdict, ToolCall

__all__ = ["Session", "SessionKey", "SessionReport", "SessionRun", "compact_run"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class SessionKey:
    """A session's key: its value, and the attribute it was read from."""

    value: str
    attribute: str


@dataclass(frozen=True, slots=True)
class SessionRun:
    """What a session keeps of one run."""

    trace_id: int
    root_span_id: int
    agent: str | None
    start_ns: int
    end_ns: int | None
    calls: tuple[ToolCall, ...]
    steps: int = 1
    pending_calls: int = 0
    dropped_calls: int = 0
    final_output: str | None = None
    assistant_texts: tuple[str, ...] = ()
    root_attributes: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)

    def as_run(self) -> AgentRun:
        """This run alone, as the graders of one run see it (turn-aware session graders)."""
        return AgentRun(self.trace_id, self.root_span_id, self.agent, self.calls, "",
                        self.start_ns, self.end_ns, self.pending_calls, 0, self.dropped_calls,
                        self.steps, self.root_attributes, _SessionOutputs((self,)))


def _compact_call(call: ToolCall) -> ToolCall:
    # The raw values only: a decoded copy would double what a call holds.
    return ToolCall(call.name, call.index, call.raw_arguments, call.raw_result, call.has_result,
                    call.call_id, call.span_id, call.start_ns, call.end_ns, call.step,
                    call.pending, call.error, call.server, envelope=call.envelope)


def compact_run(run: AgentRun, *, outputs: bool, max_calls: int | None = None) -> SessionRun:
    """The part of ``run`` a session keeps; ``outputs``: its final output and assistant texts
    too. At most ``max_calls`` calls are kept (the rest are counted in ``dropped_calls``)."""
    calls = run.calls if max_calls is None else run.calls[:max(max_calls, 0)]
    return SessionRun(
        run.trace_id, run.root_span_id, run.agent, run.start_ns, run.end_ns,
        tuple(_compact_call(c) for c in calls), run.steps, run.pending_calls,
        run.dropped_calls + len(run.calls) - len(calls),
        run.final_output if outputs else None,
        run.assistant_texts if outputs else (),
        dict(run.root_attributes) if outputs else _EMPTY)


@dataclass(slots=True)
class Session:
    """An open or ended session: its key and its runs (in the order they arrived).

    ``resource`` is the OpenTelemetry resource of the runs' spans (live processor only: the
    session span is exported under it). ``ended`` says why the session ended.
    """

    key: SessionKey
    runs: list[SessionRun] = field(default_factory=list)
    calls: int = 0
    last_seen: float = 0.0
    resource: Any = None
    ended: str = ""
    dropped_runs: int = 0

    @property
    def agent(self) -> str | None:
        """The agent of the session's first run."""
        ordered = self.ordered_runs()
        return ordered[0].agent if ordered else None

    def ordered_runs(self) -> list[SessionRun]:
        """The runs in run order: by start time, then trace id and root span id."""
        return sorted(self.runs, key=lambda r: (r.start_ns, r.trace_id, r.root_span_id))

    def as_run(self) -> AgentRun:
        """The session seen as one run: every call in run order, ``index`` and ``step``
        counted across the session, ``run_index`` and ``run_step`` kept (``ToolCall``)."""
        runs = self.ordered_runs()
        calls: list[ToolCall] = []
        offset = 0
        for k, run in enumerate(runs):
            for call in run.calls:
                calls.append(ToolCall(
                    call.name, len(calls), call.raw_arguments, call.raw_result,
                    call.has_result, call.call_id, call.span_id, call.start_ns, call.end_ns,
                    offset + call.step, call.pending, call.error, call.server,
                    envelope=call.envelope, run_index=k, run_step=call.step))
            offset += max(run.steps, 1)
        first, last = runs[0], runs[-1]
        ends = [r.end_ns for r in runs if r.end_ns is not None]
        return AgentRun(
            first.trace_id, first.root_span_id, self.agent, tuple(calls), "session",
            first.start_ns, max(ends) if ends else None,
            sum(r.pending_calls for r in runs), 0,
            sum(r.dropped_calls for r in runs), offset,
            last.root_attributes, _SessionOutputs(tuple(runs)))


class _SessionOutputs:
    """What the model said over a session: the last run's final output, every run's texts."""

    __slots__ = ("runs",)

    def __init__(self, runs: tuple[SessionRun, ...]) -> None:
        self.runs = runs

    def final_output(self) -> str | None:
        return self.runs[-1].final_output if self.runs else None

    def assistant_texts(self) -> tuple[str, ...]:
        return tuple(t for r in self.runs for t in r.assistant_texts)


@dataclass(frozen=True, slots=True)
class SessionReport(ResultsVerdict):
    """A session and its verdicts."""

    key: SessionKey
    agent: str | None
    runs: tuple[SessionRun, ...]
    results: tuple[GradeResult, ...]
    dropped_calls: int = 0
    ended: str = ""
    dropped_runs: int = 0

    @property
    def tool_calls(self) -> int:
        return sum(len(r.calls) for r in self.runs)

    def sort_key(self) -> tuple[int, str]:
        return (self.runs[0].start_ns if self.runs else 0, self.key.value)

    def to_dict(self) -> dict[str, Any]:
        """The session's entry in ``grade --format json``'s top-level ``sessions`` list."""
        return {
            "session": self.key.value,
            "attribute": self.key.attribute,
            "agent": self.agent,
            "runs": len(self.runs),
            "tool_calls": self.tool_calls,
            "dropped_calls": self.dropped_calls,
            "dropped_runs": self.dropped_runs,
            "traces": [format(r.trace_id, "032x") for r in self.runs[:_TRACES_LISTED]],
            "passed": self.passed,
            "results": [r.to_dict() for r in self.results],
        }


#: Trace ids a session's JSON entry lists (the first ones, in run order).
_TRACES_LISTED = 100
