"""The ``tool_trajectory`` grader (seeds/tool-trajectory.txt, agentv): which tools, in what order.

Three modes. ``any_order`` checks minimum counts of completed calls per tool. ``in_order`` finds
the expected calls as an ordered subsequence of the run, gaps allowed; ``exact`` compares the run
with the expected list position by position. Both sequence modes can check arguments (a partial
deep match) and per-call latency (``max_duration_ms``, one scoring aspect each).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping, Sequence
from itertools import compress, filterfalse, islice
from operator import attrgetter, itemgetter, not_
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ..model import AgentRun, GradeResult, ToolCall
from ..violations import violations
from .in_order import _by_tool, _in_order, _Index, _pair_index
from .lazy_details import _Details, _Later
from .registry import ConfigProblems, GraderFamily, Problem, params_of, register
from .trajectory_entries import _differs, _Entry, _needles, args_match

__all__ = ["ExpectedCall", "ToolTrajectoryGrader", "ToolTrajectoryParams", "args_match"]

TYPE = "tool_trajectory"
ALIASES = ("tool-trajectory",)

Mode = Literal["any_order", "in_order", "exact"]
NonNegative = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]
UnitInterval = Annotated[float, Field(strict=True, ge=0, le=1, allow_inf_nan=False)]


def _json_like(value: Any, path: str = "") -> None:
    """Reject expected argument values that no decoded JSON could ever equal (YAML dates...)."""
    at = f"at {path}: " if path else ""
    if isinstance(value, Mapping):
        for key, sub in value.items():
            if not isinstance(key, str):
                raise PydanticCustomError(
                    "args_key", "{at}keys must be strings, got {kind}",
                    {"at": at, "kind": type(key).__name__})
            _json_like(sub, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            _json_like(sub, f"{path}[{i}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{at}{value} is not a JSON number")
    elif isinstance(value, (datetime.date, datetime.time)):
        raise ValueError(f"{at}YAML read this as a {type(value).__name__}; quote it to compare "
                         "with the text the tool received")
    elif value is not None and not isinstance(value, (str, int, float, bool)):
        raise ValueError(f"{at}{type(value).__name__} is not a JSON value")


class ExpectedCall(BaseModel):
    """One entry of ``expected``: a tool, optionally its arguments and a latency limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: StrictStr = Field(min_length=1)
    args: Literal["any"] | dict[str, Any] = Field(
        default="any", description="a partial deep match of the call's arguments, or 'any'")
    max_duration_ms: NonNegative | None = None

    @model_validator(mode="before")
    @classmethod
    def _mapping(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise PydanticCustomError(
                "expected_type", "an expected call must be a mapping with a 'tool' key, "
                "e.g. {tool: search}")
        return value

    @field_validator("args", mode="before")
    @classmethod
    def _args(cls, value: Any) -> Any:
        if value == "any":
            return value
        if not isinstance(value, Mapping):
            raise PydanticCustomError(
                "args_type", "must be a mapping of argument values (checked as a partial match) "
                "or the word 'any'")
        _json_like(value)
        return dict(value)


class ToolTrajectoryParams(BaseModel):
    """One ``tool_trajectory`` entry, as agentv writes it (``name`` and ``type`` aside)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Mode
    minimums: dict[StrictStr, Annotated[StrictInt, Field(ge=1)]] | None = None
    expected: list[ExpectedCall] | None = None
    threshold: UnitInterval = 1.0


_TYPOS = {"name": "unknown key; an expected call names its tool with 'tool:'"}


def _mode_problems(params: ToolTrajectoryParams) -> list[Problem]:
    """What each mode needs and forbids; located at the key concerned."""
    problems = []
    if params.mode == "any_order":
        if params.minimums is None:
            problems.append(Problem(("minimums",), "required key is missing: any_order mode "
                                                   "needs minimum counts per tool"))
        elif not params.minimums:
            problems.append(Problem(("minimums",), "must name at least one tool"))
        if params.expected is not None:
            problems.append(Problem(("expected",), "only used by in_order and exact modes; "
                                                   "any_order takes minimums"))
    else:
        if params.expected is None:
            problems.append(Problem(("expected",), f"required key is missing: {params.mode} "
                                                   "mode needs a list of expected calls"))
        elif not params.expected:
            problems.append(Problem(("expected",), "must list at least one expected call"))
        if params.minimums is not None:
            problems.append(Problem(("minimums",), "only used by any_order mode"))
    return problems


_FIRST = itemgetter(0)
_PENDING = attrgetter("pending")


#: What ``_positions`` returns: each position's kind, the hits, latency hits and neutral
#: aspects, and the (entry, call) pairs over their limit.
_Positions = tuple[bytearray, int, int, int, list[tuple[int, ToolCall]]]
#: What each sequence mode returns to ``_sequence``: hits, latency hits, neutral aspects, the
#: pairs over their limit, the first unmatched items' descriptions and their number, and the
#: ``entries`` rows and ``violations``, written out when read.
#: A sequence mode's tallies: hits, latency hits, neutral aspects, the slow (entry, call)
#: pairs, the unmatched labels named and their number, the rows' maker, and the violations'
#: maker (None when there are none to write).
_Tallies = tuple[int, int, int, list[tuple[int, ToolCall]], list[str], int, "_Later",
                 "_Later | None"]


class ToolTrajectoryGrader:
    """Grades a run against minimums (any_order) or an expected call list (in_order, exact).

    Violations: in ``exact`` mode the calls out of place (another tool, or other arguments,
    than the entry at their position) and the calls beyond the expected ones; in both sequence
    modes a matched call over its ``max_duration_ms``.

    The result's ``details`` list every entry, and in ``exact`` mode a violation per call out
    of place: those are written out when the details are read (``_Details``), as a report
    does, not when only the verdict and explanation are, as a live run does. Everything else
    is kept to what the run needs: explanations from counts and the first few items
    (``_LISTED``), violation reasons formatted once per entry and kept.
    """

    type = TYPE
    names_calls = True

    def __init__(self, name: str, params: ToolTrajectoryParams, include_values: bool) -> None:
        self.name = name
        self.params = params
        self.include_values = include_values
        self.entries = tuple(
            _Entry(i, e.tool, None if e.args == "any" else dict(e.args), e.max_duration_ms)
            for i, e in enumerate(params.expected or ()))
        self.by_tool = _by_tool(self.entries)
        self._index: _Index | None = None         # _pair_index(by_tool), on first use
        self.exact = params.mode == "exact"
        self.threshold = params.threshold
        self._templates = self._row_templates()
        self._tools = tuple(e.tool for e in self.entries)
        # exact mode's loop reads these per position: (args_text, limit) per entry.
        self._texts = tuple(e.text for e in self.entries)
        self._limits = tuple(e.limit for e in self.entries)
        self._needles = tuple(_needles(e.args) for e in self.entries)
        self._limited = tuple(e for e in self.entries if e.limit is not None)
        self._assertions = len(self._limited)     # latency aspects: one per limited entry
        # Violation reasons per entry, formatted on first use: (other tool, other args, slow).
        self._reasons: list[tuple[str, str, str] | None] = [None] * len(self.entries)
        # The explanations' parts per entry: its label, exact mode's "position i expected
        # ..., got ", and the explanation of a grade with nothing to report.
        self._labels = tuple(e.label for e in self.entries)
        self._misplaced = tuple(f"position {e.index} expected {e.what}, got "
                                for e in self.entries)
        tail = ", all latency limits met" if self._assertions else ""
        self._all_met = (f"All {len(self.entries)} expected calls "
                         f"{'in place' if self.exact else 'matched in order'}{tail}.")
        # any_order: (tool, minimum) pairs, and the tools alone; None in the sequence modes.
        self._minimums = (tuple((params.minimums or {}).items())
                          if params.mode == "any_order" else None)
        self._minimum_tools = tuple(params.minimums or ())
        # The explanation's tail under a threshold below 1 (after the score), else "".
        self._threshold_text = (f" threshold {self.threshold:g}." if self.threshold < 1.0
                                else "")

    def grade(self, run: AgentRun) -> GradeResult:
        details: Mapping[str, Any]
        if self._minimums is not None:
            score, summary, details = self._any_order(run.calls, self._minimums)
        else:
            score, summary, details = self._sequence(run.calls)
        passed = score >= self.threshold
        if self._threshold_text:
            summary += f" Score {score:.2f} {'>=' if passed else '<'}{self._threshold_text}"
        return GradeResult(self.name, TYPE, score, passed, "pass" if passed else "fail",
                           summary, details)

    def _any_order(self, calls: Sequence[ToolCall], minimums: tuple[tuple[str, int], ...],
                   ) -> tuple[float, str, Mapping[str, Any]]:
        """``any_order`` mode: the completed calls of each tool counted. On a short run in C
        (``list.count`` per tool over the names), the per-tool rows written out when the
        details are read; else in one pass that builds the rows as it counts (as cheap as
        counting alone there, and from cold caches, as a live grade runs, one function with
        plain loops costs less than helpers and comprehensions would)."""
        tools: list[dict[str, Any]] | _Later
        lazy = len(calls) * len(minimums) <= _COUNT_EACH_UPTO
        short = []
        if lazy:
            names = list(map(_NAME, calls))
            if any(map(_PENDING, calls)):
                names = list(compress(names, map(not_, map(_PENDING, calls))))
            for (tool, minimum), count in zip(minimums, map(names.count, self._minimum_tools)):
                if count < minimum:
                    short.append(f"{tool} ({count} of {minimum})")
            tools = _Later(self._any_order_rows, calls, minimums)
        else:
            tools = self._any_order_rows(calls, minimums)
            for row in tools:
                if not row["met"]:
                    short.append(f"{row['tool']} ({row['count']} of {row['minimum']})")
        total = len(minimums)
        met = total - len(short)
        details = {"mode": "any_order", "threshold": self.threshold, "tools": tools,
                   "met": met, "total": total}
        if not short:
            summary = f"All {total} tools met their minimum counts of completed calls."
        else:
            summary = (f"{len(short)} of {total} tools below their minimum count of "
                       f"completed calls: {_listing(short)}.")
        return met / total, summary, _Details(details) if lazy else details

    @staticmethod
    def _any_order_rows(calls: Sequence[ToolCall], minimums: tuple[tuple[str, int], ...],
                        ) -> list[dict[str, Any]]:
        """The ``tools`` rows of an ``any_order`` grade: each tool's completed calls and
        its pending ones."""
        completed: dict[str, list[int]] = {tool: [] for tool, _ in minimums}
        pending = dict.fromkeys(completed, 0)
        for call in calls:
            positions = completed.get(call.name)
            if positions is None:
                continue
            if call.pending:
                pending[call.name] += 1
            else:
                positions.append(call.index)
        rows = []
        for tool, minimum in minimums:
            positions = completed[tool]
            count = len(positions)
            rows.append({"tool": tool, "minimum": minimum, "count": count,
                         "met": count >= minimum, "calls": positions, "pending": pending[tool]})
        return rows

    def _reason(self, e: _Entry) -> tuple[str, str, str]:
        reasons = self._reasons[e.index]
        if reasons is None:
            tool = repr(e.tool)
            slow = "" if e.limit is None else (f"over the {e.limit:g} ms limit of entry "
                                              f"{e.index} ({tool})")
            reasons = self._reasons[e.index] = (
                f"another tool than entry {e.index} ({tool})",
                f"arguments differ from entry {e.index} ({tool})", slow)
        return reasons

    def _sequence(self, calls: Sequence[ToolCall]) -> tuple[float, str, Mapping[str, Any]]:
        """Both sequence modes: the tallies, then the explanation and the details, whose
        ``entries`` and ``violations`` are written out when first read (``_Details``)."""
        exact = self.exact
        hits, latency_hits, neutral, slow, unmatched, unmatched_n, rows, offending = (
            self._exact(calls) if exact else self._in_order(calls))
        total = len(self.entries)
        n_calls = len(calls)
        assertions = self._assertions
        sequence_aspects = max(total, n_calls) if exact else total
        aspects = sequence_aspects + assertions - neutral
        score = (hits + latency_hits) / aspects
        details: dict[str, Any] = {
            "mode": self.params.mode, "threshold": self.threshold,
            "hits": hits, "expected": total, "actual": n_calls, "aspects": aspects,
            "latency": {"assertions": assertions, "hits": latency_hits,
                        "misses": assertions - latency_hits - neutral, "neutral": neutral},
            "entries": rows,
        }
        problems: list[str] = []
        if exact:
            beyond = calls[total:]
            details["extra_calls"] = list(map(_INDEX, beyond)) if beyond else []
            if unmatched_n:
                problems.append(_bounded(unmatched, unmatched_n))
            if total > n_calls:
                problems.append("missing " + _bounded(self._labels[n_calls:n_calls + _LISTED],
                                                      total - n_calls))
            if beyond:
                problems.append(f"{len(beyond)} extra call(s) at " + _bounded(
                    [f"#{c.index}" for c in beyond[:_LISTED]], len(beyond)))
            head = f"{hits} of {total} expected calls in place"
            flagged = unmatched_n + len(slow) + len(beyond)
        else:
            if unmatched_n:
                problems.append("no in-order match for " + _bounded(unmatched, unmatched_n))
            head = f"{hits} of {total} expected calls matched in order"
            flagged = len(slow)
        if flagged:
            details["violations"] = offending
        if slow:
            labels = self._labels
            shown = []
            for i, call in slow[:_LISTED]:
                shown.append(f"{labels[i]} at call #{call.index}")
            problems.append("over the latency limit: " + _bounded(shown, len(slow)))
        if neutral:
            problems.append(f"{neutral} latency check(s) left out: matched call still pending")
        if not problems:
            summary = self._all_met
        else:
            summary = f"{head}; " + "; ".join(problems) + "."
        return score, summary, _Details(details)

    def _positions(self, calls: Sequence[ToolCall], n: int) -> _Positions:
        """The first ``n`` entries, each against the call at its position: each position's
        kind (0: out of place, 1: in place, 2: in place but over its latency limit), the hits,
        latency hits and neutral latency aspects, and the (entry, call) pairs over their limit,
        in order.

        One loop over (tool, call) pairs that compares the names itself: measured against
        listing the calls' names first and visiting only the positions where the tools agree
        (``compress``), it costs 15-25% less at every size, from warm caches and from cold
        (10 calls 2.8 against 3.7 µs, 1,000 calls 145 against 174; the listing and the
        indexing of ``calls`` cost more than the comparisons they save)."""
        entries = self.entries
        kinds = bytearray(n)
        hits = latency_hits = neutral = 0
        slow: list[tuple[int, ToolCall]] = []
        texts = self._texts
        limits = self._limits
        i = -1
        for tool, call in zip(self._tools, calls):      # n pairs: n = min(entries, calls)
            i += 1
            if call.name != tool:
                continue
            # _Entry.args_hold's text shortcut, in line: most calls in place recorded exactly
            # their entry's json.dumps text; otherwise the rest of args_hold below.
            text = texts[i]
            raw = call.raw_arguments
            if text is None or raw != text or raw.__class__ is not str or (
                    call.envelope is not None and call.envelope.arguments_from is not None):
                # No shortcut: decode and compare, as args_hold does.
                args = entries[i].args
                if args is not None:
                    needles = self._needles[i]
                    if needles and raw.__class__ is str and (
                            call.envelope is None or call.envelope.arguments_from is None
                    ) and _differs(needles, raw):
                        continue        # sure not to match: no decoding needed
                    actual = call.arguments
                    if not args_match(args, {} if actual is None else actual):
                        continue
            hits += 1
            kinds[i] = 1
            limit = limits[i]
            if limit is not None:
                end = call.end_ns        # ToolCall.duration_ms, in line
                if call.pending or end is None:
                    neutral += 1
                elif (end - call.start_ns) / 1e6 <= limit:
                    latency_hits += 1
                else:
                    kinds[i] = 2
                    slow.append((i, call))
        return kinds, hits, latency_hits, neutral, slow

    def _exact(self, calls: Sequence[ToolCall]) -> _Tallies:
        """``exact`` mode: each entry against the call at its position (``_positions``), from
        whose kinds the rows and the violations are written out when read."""
        n = min(len(self.entries), len(calls))
        kinds, hits, latency_hits, neutral, slow = self._positions(calls, n)
        unmatched_n = n - hits
        unmatched: list[str] = []
        if unmatched_n:
            misplaced = self._misplaced
            tools = self._tools
            at = -1
            for _ in range(min(unmatched_n, _LISTED)):
                at = kinds.find(0, at + 1)
                name = calls[at].name
                unmatched.append(misplaced[at] + (f"{name} with other args" if name == tools[at]
                                                  else name))
        # The violations' maker only where there are some (out of place, slow or beyond).
        return (hits, latency_hits, neutral, slow, unmatched, unmatched_n,
                _Later(self._exact_rows, calls, kinds),
                _Later(self._exact_violations, calls, kinds)
                if unmatched_n or slow or len(calls) > n else None)

    def _exact_rows(self, calls: Sequence[ToolCall], kinds: bytearray) -> list[dict[str, Any]]:
        """The ``entries`` rows of an ``exact`` grade (``_exact``'s record of it)."""
        include_values = self.include_values
        rows = []
        for i, (e, template, call, kind) in enumerate(zip(self.entries, self._templates,
                                                          calls, kinds)):
            row = template.copy()
            row["actual_tool"] = call.name
            if kind:
                row["call"] = call.index
                if include_values:
                    row["arguments"] = call.arguments
                if e.limit is not None:
                    duration = row["duration_ms"] = call.duration_ms
                    if duration is None:
                        row["latency"] = "neutral"
                    elif kind == 1:
                        row["latency"] = "hit"
            rows.append(row)
        # Entries without a call at their position read as their templates.
        rows.extend(template.copy() for template in self._templates[len(kinds):])
        return rows

    def _exact_violations(self, calls: Sequence[ToolCall],
                          kinds: bytearray) -> list[dict[str, Any]]:
        """The ``violations`` of an ``exact`` grade: each call out of place or over its
        entry's limit, in order, then the calls beyond the expected ones."""
        entries = self.entries
        reasons = self._reasons
        out = []
        for i in compress(range(len(kinds)), kinds.translate(_FLAGGED)):
            e = entries[i]
            call = calls[i]
            name = call.name
            why = reasons[i] or self._reason(e)
            out.append({"call": call.index, "span_id": format(call.span_id, "016x")
                        if call.span_id else None, "tool": name,
                        "reason": why[2] if kinds[i] == 2 else why[name == e.tool]})
        total = len(entries)
        out += violations((c, f"extra call beyond the {total} expected") for c in calls[total:])
        return out

    def _in_order(self, calls: Sequence[ToolCall]) -> _Tallies:
        """``in_order`` mode: the best largest in-order matching, and its latency verdicts;
        the rows and the violations are written out when read.

        A run of as many calls as entries, every call in place, is matched by the module's
        ``_in_order`` on the diagonal in one pass (``_diagonal``). Checking it here with
        exact's ``_positions`` instead, as was tried, costs more at every size (7.8 against 7.0
        µs at 10 calls, 20.4 against 16.7 at 50, 304 against 225 at 1,000: its extra passes
        over the calls for the names).
        """
        entries = self.entries
        index = self._index
        if index is None and self._assertions:
            index = self._index = _pair_index(self.by_tool)
        matched = _in_order(entries, calls, self.by_tool, index)
        latency_hits = neutral = 0
        slow = []
        if self._assertions:
            limits = self._limits
            # The matching was written from its last pair back: reversed, ascending entries.
            for k, call in reversed(matched.items()):
                limit = limits[k]
                if limit is None:
                    continue
                end = call.end_ns           # ToolCall.duration_ms, in line
                if call.pending or end is None:
                    neutral += 1
                elif (end - call.start_ns) / 1e6 <= limit:
                    latency_hits += 1
                else:
                    slow.append((k, call))
            slow.sort(key=_FIRST)           # in one pass when already ascending
        hits = len(matched)
        unmatched_n = len(entries) - hits
        unmatched: list[str] = []
        if unmatched_n:
            labels = self._labels
            unmatched = list(map(labels.__getitem__, islice(
                filterfalse(matched.__contains__, range(len(entries))), _LISTED)))
        return (hits, latency_hits, neutral, slow, unmatched, unmatched_n,
                _Later(self._in_order_rows, matched),
                _Later(self._in_order_violations, slow) if slow else None)

    def _in_order_rows(self, matched: dict[int, ToolCall]) -> list[dict[str, Any]]:
        """The ``entries`` rows of an ``in_order`` grade, from its matching."""
        get = matched.get
        include_values = self.include_values
        rows = []
        for e, template in zip(self.entries, self._templates):
            row = template.copy()
            call = get(e.index)
            if call is not None:
                row["call"] = call.index
                if include_values:
                    row["arguments"] = call.arguments
                limit = e.limit
                if limit is not None:
                    duration = row["duration_ms"] = call.duration_ms
                    if duration is None:
                        row["latency"] = "neutral"
                    elif duration <= limit:
                        row["latency"] = "hit"
            rows.append(row)
        return rows

    def _in_order_violations(self, slow: list[tuple[int, ToolCall]]) -> list[dict[str, Any]]:
        """The ``violations`` of an ``in_order`` grade: the matched calls over their limit."""
        entries = self.entries
        reasons = self._reasons
        return violations((call, (reasons[k] or self._reason(entries[k]))[2])
                          for k, call in slow)

    def _row_templates(self) -> tuple[dict[str, Any], ...]:
        """Each entry's row as it reads without a matching call, in the order of its keys:
        a grade copies it and sets what the run changes (a dict copy costs a third of
        building the row anew)."""
        templates = []
        for e in self.entries:
            row: dict[str, Any] = {"index": e.index, "tool": e.tool,
                                   "args_checked": e.args is not None, "call": None}
            if self.exact:
                row["actual_tool"] = None
            if e.limit is not None:
                row.update(max_duration_ms=e.limit, duration_ms=None, latency="miss")
            if self.include_values:
                row.update(expected_args=e.args, arguments=None)
            templates.append(row)
        return tuple(templates)



_INDEX = attrgetter("index")
_NAME = attrgetter("name")
#: Up to this many (call, tool) comparisons, ``any_order`` counts each tool's completed calls
#: by ``list.count`` (a pass in C per tool); past them its one pass in Python costs less
#: (measured on tests/bench/peer_trajectories.py runs with six tools: 1.2 against 1.8 µs at 10
#: calls; as much at 100, and a tenth more from cold caches).
_COUNT_EACH_UPTO = 200
#: ``_exact``'s position kinds to flags: out of place (0) and over the limit (2) are violations.
_FLAGGED = bytes((1, 0, 1)) + bytes(253)
#: How many items an explanation names before "and N more".
_LISTED = 3


def _got(entry: _Entry, actual: str) -> str:
    return f"{actual} with other args" if actual == entry.tool else actual


def _listing(items: Sequence[str], limit: int = _LISTED) -> str:
    return _bounded(items[:limit], len(items), limit)


def _bounded(first: Sequence[str], total: int, limit: int = _LISTED) -> str:
    """``first`` (the first ``limit`` of ``total`` items) and how many more there are."""
    shown = ", ".join(first)
    return shown + (f" and {total - limit} more" if total > limit else "")


def _build(entry: Mapping[str, Any], name: str, include_values: bool) -> ToolTrajectoryGrader:
    params = params_of(ToolTrajectoryParams, entry, _TYPOS)
    problems = _mode_problems(params)
    if problems:
        raise ConfigProblems(problems)
    return ToolTrajectoryGrader(name, params, include_values)


def _schema() -> dict[str, Any]:
    schema = ToolTrajectoryParams.model_json_schema()
    schema["title"] = TYPE
    schema["properties"]["type"] = {"enum": [TYPE, *ALIASES]}
    schema["required"] = ["type", *schema.get("required", [])]
    schema["allOf"] = [
        {"if": {"properties": {"mode": {"const": "any_order"}}},
         "then": {"required": ["minimums"], "not": {"required": ["expected"]}},
         "else": {"required": ["expected"], "not": {"required": ["minimums"]}}},
    ]
    return schema


register(GraderFamily(TYPE, ALIASES, _build, schema=_schema))
