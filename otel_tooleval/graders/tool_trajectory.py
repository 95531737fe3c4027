"""The ``tool_trajectory`` grader (seeds/tool-trajectory.txt, agentv): which tools, in what order.

Three modes. ``any_order`` checks minimum counts of completed calls per tool. ``in_order`` finds
the expected calls as an ordered subsequence of the run, gaps allowed; ``exact`` compares the run
with the expected list position by position. Both sequence modes can check arguments (a partial
deep match) and per-call latency (``max_duration_ms``, one scoring aspect each).
"""

from __future__ import annotations

import datetime
import json
import math
import re
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
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
from ..ordered_match import ROW_BUDGET_BYTES, in_order_pairs
from ..values import decode_value, unwrap_arguments
from ..violations import violations
from .registry import ConfigProblems, GraderFamily, Problem, params_of, register

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


def args_match(expected: Any, actual: Any) -> bool:
    """SEMANTICS 3: partial deep equality without type coercion (but ``1 == 1.0``).

    Every key of an expected object must be present with a matching value (nested objects are
    partial too); lists need equal length and match element by element.
    """
    cls = expected.__class__   # exact types first: the config's dicts and strings
    if cls is str:
        return isinstance(actual, str) and expected == actual
    if cls is dict:
        if actual.__class__ is not dict and not isinstance(actual, Mapping):
            return False
        for key, value in expected.items():
            if key not in actual:
                return False
            if value.__class__ is str:      # the str case below, without a call
                got = actual[key]
                if not (got.__class__ is str or isinstance(got, str)) or value != got:
                    return False
            elif not args_match(value, actual[key]):
                return False
        return True
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            key in actual and args_match(value, actual[key]) for key, value in expected.items())
    if isinstance(expected, list):
        return (isinstance(actual, list) and len(actual) == len(expected)
                and all(args_match(e, a) for e, a in zip(expected, actual)))
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if isinstance(expected, (int, float)):
        return isinstance(actual, (int, float)) and expected == actual
    if expected is None:
        return actual is None
    return isinstance(actual, str) and expected == actual


@dataclass(frozen=True, slots=True)
class _Entry:
    index: int
    tool: str
    args: dict[str, Any] | None
    limit: float | None
    #: ``args`` as ``json.dumps`` writes it by default, when a call recording exactly that text
    #: is sure to match (``_args_text``): one string comparison instead of decoding the call's
    #: arguments. None when no such shortcut exists.
    text: str | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", _args_text(self.args))

    @property
    def what(self) -> str:
        return self.tool + (" with args" if self.args is not None else "")

    @property
    def label(self) -> str:
        return f"entry {self.index} ({self.what})"

    def matches(self, call: ToolCall) -> bool:
        return call.name == self.tool and self.args_hold(call)

    def args_hold(self, call: ToolCall) -> bool:
        """The arguments part of ``matches``, for a call of this entry's tool."""
        if self.args is None:
            return True
        raw = call.raw_arguments
        if raw.__class__ is str and raw == self.text and (
                call.envelope is None or call.envelope.arguments_from is None):
            return True
        # A span that recorded no arguments stands for a call with no arguments.
        actual = call.arguments
        return args_match(self.args, {} if actual is None else actual)

    def latency(self, call: ToolCall) -> tuple[int, int]:
        """(neutral, hit) of this entry's latency aspect when matched to ``call``."""
        if self.limit is None:
            return 0, 0
        duration = call.duration_ms
        if duration is None:
            return 1, 0
        return 0, int(duration <= self.limit)


def _args_text(args: Mapping[str, Any] | None) -> str | None:
    """The text whose decoding is sure to match ``args``: ``json.dumps(args)``.

    Decoding it gives back ``args`` itself (JSON values only, string keys: the config's
    validator saw to that), and ``args_match`` holds for equal values, unless the decoder
    unwraps it as a framework envelope (an object with a ``kwargs`` or ``type`` key), or a
    call's arguments are taken out of it as a generic one (``values.unwrap_arguments``):
    those get no shortcut. Agents written in Python record ``json.dumps`` text more often
    than not, so a matching call is usually found without decoding its arguments.
    """
    if args is None or "kwargs" in args or "type" in args or unwrap_arguments(args) is not args:
        return None
    try:
        return json.dumps(args)
    except (TypeError, ValueError):
        return None


#: An expected string value whose only JSON spelling without escapes is itself in quotes.
_PLAIN = re.compile(r"[^\"'\\#\x00-\x1f]*")
#: Two string literals Python's parser would join into one ("a" "b"): a quote, whitespace or
#: line breaks, a quote. (A comment between them needs "#", a line continuation a backslash.)
_ADJACENT = re.compile(r'"[ \t\f\r\n\v]*"')


def _needles(args: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The quoted texts a call's argument text must hold to match ``args`` (``_differs``):
    each top-level string value free of quotes, backslashes, "#" and control characters."""
    if args is None:
        return ()
    return tuple(f'"{value}"' for value in args.values()
                 if value.__class__ is str and _PLAIN.fullmatch(value))


def _differs(needles: tuple[str, ...], raw: str) -> bool:
    """True when no decoding of the argument text ``raw`` can match the entry: one of its
    ``needles`` is missing, and ``raw`` is written so that every string value decoded from it
    (as JSON or as a Python literal, through an envelope or not) is either a run of its
    characters between two double quotes or holds a line break or a backslash, which no
    needle's value does (``_PLAIN``). That holds when ``raw`` has no escape but ``\\n`` (every
    backslash followed by an "n": in a string, a line break, or a backslash and an "n" in a
    raw Python string; outside one, text no decoder reads), no single quote, no "#" and no
    two adjacent string literals; otherwise False: decode. (A coding agent's file contents
    are written with ``\\n`` escapes: those calls are ruled out too.)
    """
    for needle in needles:
        if needle not in raw:
            return not (("\\" in raw and raw.count("\\") != raw.count("\\n")) or "'" in raw
                        or "#" in raw or (
                            # Two literals can be adjacent only where a quote is followed by a
                            # quote, a space or another whitespace character, none of which is
                            # printable: three scans in C before the regex (a third of its
                            # cost on a coding agent's arguments, where none of them is found).
                            ('""' in raw or '" ' in raw or not raw.isprintable())
                            and _ADJACENT.search(raw)))
    return False


# -- in_order: the largest ordered matching, best score among those -------------------------------
#
# A column of states over the expected entries, rolled over the calls (no full table). A state is
# (hits, front): among the largest matchings of that prefix, the Pareto front of (neutral,
# latency_hits, path) options. Score = (hits + latency_hits) / (E + L - neutral) is a ratio, not a
# sum, so no single number can rank partial matchings; but an option with at least as many
# neutral aspects and at least as many latency hits as another scores at least as well after any
# common continuation, so only the front is kept (one option unless pending calls were matched).
# Every largest matching extends largest matchings of its prefixes, so this is exact. Paths are
# shared linked tuples (entry, call, rest): memory stays linear in the number of entries.

_Path = tuple[int, int, Any] | None
_Option = tuple[int, int, _Path]
_State = tuple[int, tuple[_Option, ...]]


def _front(options: Sequence[_Option]) -> tuple[_Option, ...]:
    """The undominated options by ascending neutral count; earlier options win exact ties."""
    kept: list[_Option] = []
    for option in sorted(options, key=lambda o: (-o[0], -o[1])):
        if not kept or option[1] > kept[-1][1]:
            kept.append(option)
    kept.reverse()
    return tuple(kept)


def _better(a: _State, b: _State) -> _State:
    """The combination of two states; ``a`` wins ties (it uses earlier calls)."""
    if a is b:
        return a
    if a[0] != b[0]:
        return a if a[0] > b[0] else b
    fa, fb = a[1], b[1]
    if len(fa) == 1 and len(fb) == 1:
        (na, la, _), (nb, lb, _) = fa[0], fb[0]
        if na >= nb and la >= lb:
            return a
        if nb >= na and lb >= la:
            return b
    front = _front(fa + fb)
    if len(front) == len(fa) and all(x is y for x, y in zip(front, fa)):
        return a
    return a[0], front


def _extend(state: _State, entry: int, call: int, neutral: int, hit: int) -> _State:
    return state[0] + 1, tuple((n + neutral, lh + hit, (entry, call, path))
                               for n, lh, path in state[1])


def _by_tool(entries: Sequence[_Entry]) -> dict[str, list[_Entry]]:
    by_tool: dict[str, list[_Entry]] = {}
    for e in entries:
        by_tool.setdefault(e.tool, []).append(e)
    return by_tool


_PENDING = attrgetter("pending")
_FIRST = itemgetter(0)


def _in_order(entries: Sequence[_Entry], calls: Sequence[ToolCall],
              by_tool: Mapping[str, list[_Entry]],
              index: _Index | None = None) -> dict[int, ToolCall]:
    """Entry index -> matched call for the best largest in-order matching (``by_tool``:
    ``_by_tool(entries)``; ``index``: ``_pair_index(by_tool)``, built when needed if not given).

    Without latency limits every largest matching scores the same (hits / entries), so only
    the length counts and ``_in_order_bits`` finds it bit-parallel, choosing the very matching
    ``_in_order_settled`` would. With limits the choice weighs latency hits and neutral aspects
    too, which a length-only recurrence cannot see: those go through the sparse DPs over the
    matching (entry, call) pairs (``_sparse_settled``, ``_sparse_fronts``), the same matching
    as the column DPs below, which remain for runs where the pairs would be too many (entries
    without args, or whose args have no scalar value to index, against many calls of their tool)
    and for small runs without pending calls (``_COLUMNS_UPTO``), where the columns are short
    and the sparse DPs' lookups and steps cost more than they save.
    """
    if len(entries) == len(calls) and _diagonal(entries, calls):
        return dict(enumerate(calls))
    if all(e.limit is None for e in entries):
        return _in_order_bits(entries, calls, by_tool)
    pending = any(map(_PENDING, calls))
    if not pending and len(entries) * len(calls) <= _COLUMNS_UPTO:
        return _in_order_settled(entries, calls, by_tool)
    pairs = _matching_pairs(calls, by_tool, _pair_budget(len(entries), len(calls)), index)
    if pairs is not None:
        pairs = _in_band(pairs, len(entries), len(calls))
        if pending:
            return _sparse_fronts(entries, calls, pairs)
        return _sparse_settled(entries, calls, pairs)
    if not pending:
        return _in_order_settled(entries, calls, by_tool)
    return _in_order_fronts(entries, calls, by_tool)


def _diagonal(entries: Sequence[_Entry], calls: Sequence[ToolCall]) -> bool:
    """Whether every call matches the entry at its position, stopping at the first that does
    not. With as many calls as entries, the diagonal is then the only largest matching (a
    matching of all the entries and all the calls in order can pair them only position by
    position), so every tie-break agrees on it: a run that did exactly what its expected list
    says is matched in one pass, as ``exact`` mode would check it.
    """
    for e, call in zip(entries, calls):
        if call.name != e.tool:
            return False
        if e.args is None:
            continue
        raw = call.raw_arguments
        if raw.__class__ is str and raw == e.text and (
                call.envelope is None or call.envelope.arguments_from is None):
            continue                # _Entry.args_hold's shortcut, in line
        if not e.args_hold(call):
            return False
    return True


#: Up to this many (entry, call) cells, a run without pending calls goes through the column DP
#: (``_in_order_settled``): measured on tests/bench/peer_trajectories.py runs, the columns cost
#: 0.6x the sparse DP's at 10 x 10 and break even near 20 x 20. With pending calls the sparse
#: DP (``_sparse_fronts``) is as fast or faster at every size.
_COLUMNS_UPTO = 300


def _in_order_bits(entries: Sequence[_Entry], calls: Sequence[ToolCall],
                   by_tool: Mapping[str, list[_Entry]]) -> dict[int, ToolCall]:
    """``_in_order`` for entries without latency limits, through ``ordered_match``.

    An entry's mask over the calls: for a plain tool entry, every call of that tool (one mask
    per tool, shared); for an entry with arguments, the calls of its tool whose arguments
    match, found in one pass over those calls only.
    """
    positions: dict[str, list[int]] = {tool: [] for tool in by_tool}
    for j, call in enumerate(calls):
        found = positions.get(call.name)
        if found is not None:
            found.append(j)
    plain: dict[str, list[int]] = {}          # entry indices, per tool: without args
    with_args: dict[str, list[int]] = {}      # and with args
    for e in entries:
        (plain if e.args is None else with_args).setdefault(e.tool, []).append(e.index)
    masks: dict[Any, int] = {}                # by tool, or by tool and args: entries share
    budget = [ROW_BUDGET_BYTES]               # bytes of masks kept

    def mask_of(k: int) -> int:
        entry = entries[k]
        key = entry.tool if entry.args is None else _args_key(entry)
        mask = masks.get(key)
        if mask is not None:
            return mask
        where = positions[entry.tool]
        if entry.args is not None:
            where = [j for j in where if entry.args_hold(calls[j])]
        mask = _mask(where)
        size = len(where) and (where[-1] >> 3) + 1
        if key is not None and size <= budget[0]:
            budget[0] -= size
            masks[key] = mask
        return mask

    def first_match(lo: int, hi: int, j: int) -> int:
        call = calls[j]
        indices = plain.get(call.name, ())
        p = bisect_left(indices, lo)
        best = indices[p] if p < len(indices) and indices[p] < hi else hi
        indices = with_args.get(call.name, ())
        for p in range(bisect_left(indices, lo), len(indices)):
            k = indices[p]
            if k >= best:
                break
            if entries[k].args_hold(call):
                return k
        return best

    pairs = in_order_pairs(len(entries), len(calls), mask_of, first_match)
    return {k: calls[j] for k, j in pairs}


def _args_key(entry: _Entry) -> tuple[str, str] | None:
    """Entries with equal tool and args match the same calls: one mask for all of them."""
    try:
        return entry.tool, json.dumps(entry.args, sort_keys=True)
    except (TypeError, ValueError):
        return None


def _mask(positions: Sequence[int]) -> int:
    if not positions:
        return 0
    buf = bytearray((positions[-1] >> 3) + 1)
    for p in positions:
        buf[p >> 3] |= 1 << (p & 7)
    return int.from_bytes(buf, "little")


def _in_order_fronts(entries: Sequence[_Entry], calls: Sequence[ToolCall],
                     by_tool: Mapping[str, list[_Entry]]) -> dict[int, ToolCall]:
    """The general case: Pareto fronts, needed once a pending call makes an aspect neutral."""
    start: _State = (0, ((0, 0, None),))
    column: list[_State] = [start] * (len(entries) + 1)
    for j, call in enumerate(calls):
        entries_of_tool = by_tool.get(call.name)
        if entries_of_tool is None:
            continue            # a call no entry matches leaves the column as it was
        candidates = [e for e in entries_of_tool if e.args_hold(call)]
        if not candidates:
            continue
        matching = {e.index: e for e in candidates}
        first = candidates[0].index
        new = column[:first + 1]
        previous = new[-1]
        for i in range(first + 1, len(entries) + 1):
            # _better inlined for the common cases: same object, or different hit counts.
            above = column[i]
            if above is previous or above[0] > previous[0]:
                best = above
            elif above[0] < previous[0]:
                best = previous
            else:
                best = _better(above, previous)
            entry = matching.get(i - 1)
            if entry is not None:
                best = _better(best, _extend(column[i - 1], i - 1, j, *entry.latency(call)))
            new.append(best)
            previous = best
        column = new
    return _best_of_front(column[-1], entries, calls)


def _best_of_front(state: _State, entries: Sequence[_Entry], calls: Sequence[ToolCall]
                   ) -> dict[int, ToolCall]:
    """The matching of the best-scoring option of a final state's front (earlier options win
    ties), as entry index -> call."""
    hits, front = state
    aspects = len(entries) + sum(1 for e in entries if e.limit is not None)
    chosen = front[0]
    for option in front[1:]:
        if (hits + option[1]) * (aspects - chosen[0]) > (hits + chosen[1]) * (aspects - option[0]):
            chosen = option
    matched: dict[int, ToolCall] = {}
    path = chosen[2]
    while path is not None:
        entry_index, call_index, path = path
        matched[entry_index] = calls[call_index]
    return matched


def _in_order_settled(entries: Sequence[_Entry], calls: Sequence[ToolCall],
                      by_tool: Mapping[str, list[_Entry]]) -> dict[int, ToolCall]:
    """``_in_order`` for runs without pending calls, in plain integers.

    With no pending call every latency aspect of a matched entry is a hit or a miss, never
    neutral, so among the largest matchings the best score is the one with the most latency
    hits: states order by (hits, latency hits), packed into one int as hits * (E + 1) + lat.
    Ties keep the earlier calls, as ``_better`` does.
    """
    n = len(entries)
    scale = n + 1
    # column[i]: the best (key, path) over the first i entries and the calls so far. It never
    # decreases along i, so a call changes it only from a matching entry onwards, and only
    # while the raised value exceeds what was there: the rest is left as it was.
    column: list[tuple[int, _Path]] = [(0, None)] * (n + 1)
    for j, call in enumerate(calls):
        entries_of_tool = by_tool.get(call.name)
        if entries_of_tool is None:
            continue
        new = None
        for entry in entries_of_tool:       # ascending entry index
            if not entry.args_hold(call):
                continue
            if new is None:
                new = column[:]
            k = entry.index
            diagonal = column[k]            # the previous call's column: one call per entry
            key = diagonal[0] + scale
            if entry.limit is not None:     # a latency hit ranks above a miss
                duration = call.duration_ms
                key += duration is not None and duration <= entry.limit
            if key > new[k + 1][0]:         # strictly: ties keep the earlier calls
                new[k + 1] = raised = (key, (k, j, diagonal[1]))
                i = k + 2
                while i <= n and new[i][0] < key:
                    new[i] = raised
                    i += 1
        if new is not None:
            column = new
    matched: dict[int, ToolCall] = {}
    path = column[-1][1]
    while path is not None:
        entry_index, call_index, path = path
        matched[entry_index] = calls[call_index]
    return matched


# -- in_order with latency limits, sparse ----------------------------------------------------------
#
# The column DPs above keep, for every prefix of the entries, the first best state in the order
# (call, entry) of the pair that made it: a state changes only where a pair strictly improves
# it, calls in order and a call's entries in ascending order. So the state of a prefix is the
# first best over the pairs (entry k, call j) with k inside it, where a pair's value extends the
# state of the prefix before k as it stood before call j. Only the matching pairs are visited:
# candidate entries come from an index by tool and by one scalar argument of the entry (a
# partial match needs that very value in the call), and the column is kept as its steps (it
# only grows along the entries), read for all of a call's pairs before they are written.
# O(r log E) in the number r of matching pairs (plus list moves in C) instead of O(E) per
# matching call.

_SCALAR = (str, int, float, bool, type(None))
_ABSENT = object()
_INDEX = attrgetter("index")
_Pairs = list[tuple[int, list[_Entry]]]
_Group = tuple[dict[str, Any] | None, list[_Entry]]     # entries with equal args


def _pair_budget(entries: int, calls: int) -> int:
    """Most candidate pairs for which the sparse DPs beat the column DPs.

    A pair costs two bisections and a few list moves where the column DPs pay one short step
    per entry of the call's tool and a column copy: past about E x calls / 8 pairs, the
    candidates are nearly all the entries of the tool and the columns win.
    """
    return max(4 * (entries + calls), entries * calls // 8)


_Keyed = dict[str, dict[str, dict[Any, list[_Group]]]]
_Found = tuple[list[_Entry] | None, int]     # a call's matching entries, candidates examined
#: (tool -> key -> value -> groups, tool -> groups without a scalar, (tool, args text) -> the
#: matching entries of a call recording that text, once computed: None until then).
_Index = tuple[_Keyed, dict[str, list[_Group]], dict[tuple[str, str], _Found | None]]


def _pair_index(by_tool: Mapping[str, list[_Entry]]) -> _Index:
    """The index ``_matching_pairs`` looks candidates up in. It depends on the entries only,
    so a grader builds it once.

    An entry whose args hold a scalar at the top level can only match calls with that very
    value under that key (``args_match`` is partial but exact on scalars; Python's ``==`` and
    hash agree with it or are looser, as in ``True == 1``, and every candidate is confirmed),
    so entries are filed under the key of theirs that the fewest entries of their tool share.
    The others (no args, or only nested values) are candidates for every call of their tool.
    Entries with equal args form one group, confirmed once per call.

    The third part caches, per entry text (``_Entry.text``, the ``json.dumps`` of its args),
    what a call of that tool recording exactly that text matches: its arguments decode to that
    entry's args, whatever the call, so the answer is looked up once per grader and the
    calls that recorded it (most, where an expected list was written from real runs) are
    neither decoded nor compared again.
    """
    index: _Keyed = {}
    loose: dict[str, list[_Group]] = {}
    texts: dict[tuple[str, str], _Found | None] = {}
    for tool, group in by_tool.items():
        groups: dict[Any, _Group] = {}
        for e in group:
            if e.text is not None:
                texts[tool, e.text] = None
            same = _flat_key(e.args)
            made = groups.get(("entry", e.index) if same is None else same)
            if made is None:
                groups[("entry", e.index) if same is None else same] = (e.args, [e])
            else:
                made[1].append(e)
        scalars = {id(made): [item for item in made[0].items() if isinstance(item[1], _SCALAR)]
                   for made in groups.values() if made[0]}
        shared = Counter(item for items in scalars.values() for item in items)
        for made in groups.values():
            items = scalars.get(id(made))
            if not items:
                loose.setdefault(tool, []).append(made)
                continue
            key, value = min(items, key=shared.__getitem__)
            index.setdefault(tool, {}).setdefault(key, {}).setdefault(value, []).append(made)
    return index, loose, texts


_NONE: tuple[_Group, ...] = ()


def _candidates(keyed: dict[str, dict[Any, list[_Group]]] | None, free: Sequence[_Group],
                actual: Any) -> _Found:
    """The entries (ascending) of a call's tool that match its decoded arguments ``actual``
    (None: none do), and how many candidates were examined; ``keyed`` and ``free``: the
    tool's part of ``_pair_index``."""
    if actual is None:
        actual = {}     # a span that recorded no arguments: a call with none
    # The matching groups' entries: the one group's own list (read-only) when only one
    # matches, as it mostly does; a new list, sorted, when more do.
    found: list[_Entry] | None = None
    many = False
    examined = 0
    if keyed is not None and (actual.__class__ is dict or isinstance(actual, Mapping)):
        for key, buckets in keyed.items():
            value = actual.get(key, _ABSENT)
            if value is _ABSENT or not isinstance(value, _SCALAR):
                continue
            for args, entries in buckets.get(value, _NONE):
                examined += len(entries)
                if args_match(args, actual):
                    if found is None:
                        found = entries
                    else:
                        found, many = found + entries, True
    for args, entries in free:
        examined += len(entries)
        if args is None or args_match(args, actual):
            if found is None:
                found = entries
            else:
                found, many = found + entries, True
    if many:
        found.sort(key=_INDEX)      # type: ignore[union-attr]  # many: found is a list
    return found, examined


def _matching_pairs(calls: Sequence[ToolCall], by_tool: Mapping[str, list[_Entry]],
                    budget: int, index: _Index | None = None) -> _Pairs | None:
    """(call index, its matching entries in ascending order) for every call some entry
    matches; None once the candidates examined exceed ``budget``. ``index``:
    ``_pair_index(by_tool)``, built here when not given.
    """
    keyed_by_tool, loose, texts = _pair_index(by_tool) if index is None else index
    if loose:
        counts = Counter(call.name for call in calls)
        if sum(counts[tool] * sum(len(g[1]) for g in groups_of)
               for tool, groups_of in loose.items()) > budget:
            return None
    pairs: _Pairs = []
    examined = 0
    for j, call in enumerate(calls):
        tool = call.name
        raw = call.raw_arguments
        if raw.__class__ is str and texts:
            known = texts.get((tool, raw), _ABSENT)
            if known is not _ABSENT and (
                    call.envelope is None or call.envelope.arguments_from is None):
                if known is None:
                    known = texts[tool, raw] = _candidates(
                        keyed_by_tool.get(tool), loose.get(tool, _NONE), decode_value(raw))
                cached: _Found = known      # type: ignore[assignment]  # not _ABSENT here
                found, n = cached
                examined += n
                if examined > budget:
                    return None
                if found is not None:
                    pairs.append((j, found))
                continue
        keyed = keyed_by_tool.get(tool)
        free = loose.get(tool, _NONE)
        if keyed is None and not free:
            continue            # no entry of this tool: its arguments are not even decoded
        found, n = _candidates(keyed, free, call.arguments)
        examined += n
        if examined > budget:
            return None
        if found is not None:
            pairs.append((j, found))
    return pairs


#: How far the diagonal of ``_in_band``'s greedy matching may move in one step.
_REACH = 16


def _in_band(pairs: _Pairs, n_entries: int, n_calls: int) -> _Pairs:
    """``pairs`` without those that no largest matching can hold.

    A matching holding the pair (k, j) holds at most min(k, j) pairs before it and
    min(E - 1 - k, M - 1 - j) after it; when that bound is below the size S of some matching,
    the pair is in no largest one, and the sparse DPs choose the same matching without it
    (every state on the path of a largest matching is made of pairs of largest matchings
    only). The bound holds S exactly when S - M <= k - j <= E - S: a band along the diagonal.
    S comes from a greedy matching: for each call, its first entry past the last one taken,
    when the offset between entry and call moves by at most ``_REACH`` (any entry after
    ``_REACH`` calls without one). A run that follows its expected list closely keeps its
    pairs near the diagonal, and repeats of a value far away in the run are dropped here.
    """
    last = taken_at = -1
    size = 0
    for j, found in pairs:
        for e in found:
            k = e.index
            if k > last:
                if -_REACH <= (k - j) - (last - taken_at) <= _REACH or j - taken_at > _REACH:
                    last, taken_at = k, j
                    size += 1
                break
    low, high = size - n_calls, n_entries - size       # the band of k - j
    kept: _Pairs = []
    dropped = False
    for pair in pairs:
        j, found = pair
        if found[0].index - j >= low and found[-1].index - j <= high:
            kept.append(pair)
            continue
        dropped = True
        within = [e for e in found if low <= e.index - j <= high]
        if within:
            kept.append((j, within))
    return kept if dropped else pairs


def _flat_key(args: dict[str, Any] | None) -> tuple[Any, ...] | None:
    """Equal for args that match the same calls: flat scalars, compared with their types
    (``True == 1`` to Python, not to ``args_match``); None for nested ones."""
    if args is None:
        return (None,)          # not (): {} does not match a call whose arguments are text
    key: list[Any] = []
    for name, value in args.items():
        if not isinstance(value, _SCALAR):
            return None
        key += (name, value.__class__, value)
    return tuple(key)


def _sparse_settled(entries: Sequence[_Entry], calls: Sequence[ToolCall],
                    pairs: _Pairs) -> dict[int, ToolCall]:
    """``_in_order_settled``'s matching from the matching pairs only.

    A state is one int: its key (hits * (E + 1) + latency hits) times ``width``, plus a
    tie-break that is larger for an earlier call, then a smaller entry (the pair that made it),
    so the first best is simply the largest. The column, the best state of every prefix of
    the entries, only grows along the entries: it is kept as its steps, ``starts`` (ascending
    prefix lengths) with strictly ascending ``values``. A pair raising the prefixes from k + 1
    on replaces the steps it exceeds, each removed once.
    """
    n, m = len(entries), len(calls)
    scale = n + 1
    width = (m + 1) * scale
    starts, values = [0], [0]
    # The pairs that made a step, three ints each in one flat list (no object per pair): the
    # entry, the call and the position of the pair before it on the path (-1: none);
    # ``steps`` holds each step's position.
    trail: list[int] = []
    steps = [-1]
    made: list[int] = []                    # (first, value, before, entry) per pair of a call
    for j, found in pairs:
        call = calls[j]
        end = call.end_ns                   # ToolCall.duration_ms, in line
        duration = None if call.pending or end is None else (end - call.start_ns) / 1e6
        tie = (m - j) * scale + n
        if len(found) == 1:                 # one pair: read and written at once
            e = found[0]
            k = e.index
            if k >= starts[-1]:
                # The pair extends the best state of all: a new last step (what the general
                # path below comes to when k is past the last step's start), as most pairs of
                # a run that follows its expected list closely do.
                key = values[-1] // width + scale
                limit = e.limit
                if limit is not None and duration is not None and duration <= limit:
                    key += 1
                before = steps[-1]
                steps.append(len(trail))
                trail += (k, j, before)
                starts.append(k + 1)
                values.append(key * width + tie - k)
                continue
            at = bisect_right(starts, k) - 1
            key = values[at] // width + scale
            limit = e.limit
            if limit is not None and duration is not None and duration <= limit:
                key += 1
            made = [k + 1, key * width + tie - k, steps[at], k]
        else:
            made = []
            for e in found:                 # all read before any is written: one call each
                k = e.index
                at = bisect_right(starts, k) - 1
                key = values[at] // width + scale
                limit = e.limit
                if limit is not None and duration is not None and duration <= limit:
                    key += 1
                made += (k + 1, key * width + tie - k, steps[at], k)
        for p in range(0, len(made), 4):
            first, value = made[p], made[p + 1]
            at = bisect_right(starts, first) - 1
            if values[at] >= value:
                continue
            if starts[at] != first:
                at += 1
            end = bisect_left(values, value, at)
            step = len(trail)
            trail += (made[p + 3], j, made[p + 2])
            if end == at:
                starts.insert(at, first)
                values.insert(at, value)
                steps.insert(at, step)
            else:
                starts[at], values[at], steps[at] = first, value, step
                if end > at + 1:
                    del starts[at + 1:end], values[at + 1:end], steps[at + 1:end]
    matched: dict[int, ToolCall] = {}
    step = steps[-1]
    while step >= 0:
        matched[trail[step]] = calls[trail[step + 1]]
        step = trail[step + 2]
    return matched


def _earlier(a: _Option, b: _Option) -> bool:
    """Whether ``a``'s last pair comes first in (call, entry) order."""
    pa, pb = a[2], b[2]
    if pa is None or pb is None:
        return pb is not None or pa is None
    return (pa[1], pa[0]) < (pb[1], pb[0])


def _merge(a: _State, b: _State) -> _State:
    """The combination of two prefix states: the most hits, then the Pareto front of their
    options; of two options with equal aspects, the one whose last pair comes first. ``a``
    itself when nothing of ``b`` enters it."""
    if a is b:
        return a
    if a[0] != b[0]:
        return a if a[0] > b[0] else b
    fa, fb = a[1], b[1]
    if len(fa) == 1 and len(fb) == 1:
        (na, la, _), (nb, lb, _) = fa[0], fb[0]
        if na == nb and la == lb:
            return a if _earlier(fa[0], fb[0]) else b
        if na >= nb and la >= lb:
            return a
        if nb >= na and lb >= la:
            return b
    points: dict[tuple[int, int], _Option] = {}
    for option in fa + fb:
        point = option[0], option[1]
        other = points.get(point)
        if other is None or _earlier(option, other):
            points[point] = option
    front = _front(list(points.values()))
    if len(front) == len(fa) and all(x is y for x, y in zip(front, fa)):
        return a
    return a[0], front


def _sparse_fronts(entries: Sequence[_Entry], calls: Sequence[ToolCall],
                   pairs: _Pairs) -> dict[int, ToolCall]:
    """``_in_order_fronts``'s matching from the matching pairs only.

    The column is kept as its steps, as in ``_sparse_settled``; a prefix state is the merge
    (``_merge``, order-free) of the pairs inside it. A new pair's state merges into the steps
    from k + 1 on and stops at the first one it leaves unchanged: every later step holds the
    options that absorbed it there, or better ones.
    """
    starts = [0]
    states: list[_State] = [(0, ((0, 0, None),))]
    for j, found in pairs:
        duration = calls[j].duration_ms
        made: list[tuple[int, _State]] = []
        for e in found:
            k = e.index
            hits, front = states[bisect_right(starts, k) - 1]
            if e.limit is None:
                neutral = hit = 0
            elif duration is None:
                neutral, hit = 1, 0
            else:
                neutral, hit = 0, int(duration <= e.limit)
            if len(front) == 1:
                n0, h0, rest = front[0]
                made.append((k + 1, (hits + 1, ((n0 + neutral, h0 + hit, (k, j, rest)),))))
            else:
                made.append((k + 1, _extend((hits, front), k, j, neutral, hit)))
        for first, state in made:
            at = bisect_right(starts, first) - 1
            merged = _merge(states[at], state)
            if merged is states[at]:
                continue
            if starts[at] != first:         # split the step at first
                at += 1
                starts.insert(at, first)
                states.insert(at, merged)
            else:
                states[at] = merged
            end, hits = at + 1, state[0]
            while end < len(states) and states[end][0] < hits:
                end += 1                    # fewer hits: the new state replaces them whole
            del starts[at + 1:end], states[at + 1:end]
            end = at + 1
            while end < len(states):        # as many hits: merged, until one absorbs it
                now = states[end]
                merged = _merge(now, state)
                if merged is now:
                    break
                if merged is state and states[end - 1] is state:
                    del starts[end], states[end]
                else:
                    states[end] = merged
                    end += 1
    return _best_of_front(states[-1], entries, calls)


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


class _Later(partial[Any]):
    """A value of ``_Details`` worked out on first read: the call of a function."""

    __slots__ = ()


class _Details(Mapping[str, Any]):
    """The details of a sequence-mode grade, read-only: the keys and values of a plain dict
    in the same order, but the values held as ``_Later`` (the per-entry ``entries`` rows and
    the ``violations``, one dict per entry or call) are worked out on first read and kept. A
    live run reads the explanation and at most the violations, so a grade builds no rows;
    ``dict()``, ``to_dict()`` and a pickle give the plain dict."""

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def __getitem__(self, key: str) -> Any:
        value = self._values[key]
        if value.__class__ is _Later:
            value = self._values[key] = value()
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __repr__(self) -> str:
        return repr(dict(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (dict(self),)


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
