"""The ``tool_trajectory`` grader's grading code as it was before issue 19's third round on it
(docs/performance-log.md, "tool_trajectory's fixed cost from cold caches"), kept as an oracle:
tests/test_tool_trajectory_oracle.py checks that the current grader gives the very same results
(score, explanation, details) on generated runs. Not used by the library."""

# Its methods keep their old signatures, which differ from the ones they override.
# mypy: ignore-errors

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import compress, filterfalse, islice
from operator import eq
from typing import Any

from otel_tooleval.graders.tool_trajectory import (
    _FIRST,
    _FLAGGED,
    _INDEX,
    _LISTED,
    _NAME,
    TYPE,
    ToolTrajectoryGrader,
    _bounded,
    _Details,
    _differs,
    _Entry,
    _got,
    _in_order,
    _Later,
    _listing,
    _pair_index,
    args_match,
)
from otel_tooleval.model import AgentRun, GradeResult, ToolCall
from otel_tooleval.violations import violations


class OracleGrader(ToolTrajectoryGrader):
    """A ``ToolTrajectoryGrader`` grading with the code of before the rework."""

    def grade(self, run: AgentRun) -> GradeResult:
        details: Mapping[str, Any]
        if self.params.mode == "any_order":
            score, summary, details = self._any_order(run)
        else:
            score, summary, details = self._sequence(run.calls)
        threshold = self.threshold
        passed = score >= threshold
        if threshold < 1.0:
            summary += f" Score {score:.2f} {'>=' if passed else '<'} threshold {threshold:g}."
        return GradeResult(self.name, TYPE, score, passed, "pass" if passed else "fail",
                           summary, details)

    def _any_order(self, run: AgentRun) -> tuple[float, str, dict[str, Any]]:
        minimums = self.params.minimums or {}
        completed: dict[str, list[int]] = {tool: [] for tool in minimums}
        pending: dict[str, int] = dict.fromkeys(minimums, 0)
        for call in run.calls:
            positions = completed.get(call.name)
            if positions is None:
                continue
            if call.pending:
                pending[call.name] += 1
            else:
                positions.append(call.index)
        tools = []
        short: list[str] = []
        for tool, minimum in minimums.items():
            positions = completed[tool]
            count = len(positions)
            if count < minimum:
                short.append(f"{tool} ({count} of {minimum})")
            tools.append({"tool": tool, "minimum": minimum, "count": count,
                          "met": count >= minimum, "calls": positions, "pending": pending[tool]})
        total = len(tools)
        met = total - len(short)
        if not short:
            summary = f"All {total} tools met their minimum counts of completed calls."
        else:
            summary = (f"{len(short)} of {total} tools below their minimum count of "
                       f"completed calls: {_listing(short)}.")
        return met / total, summary, {"mode": "any_order", "threshold": self.threshold,
                                      "tools": tools, "met": met, "total": total}

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
        tally = _Tally()
        if self.exact:
            rows, offending = self._exact(calls, tally)
        else:
            rows, offending = self._in_order(calls, tally)
        entries = self.entries
        total = len(entries)
        n_calls = len(calls)
        hits = tally.hits
        exact = self.exact
        assertions = self._assertions
        sequence_aspects = max(total, n_calls) if exact else total
        aspects = sequence_aspects + assertions - tally.neutral
        score = (hits + tally.latency_hits) / aspects
        details: dict[str, Any] = {
            "mode": self.params.mode, "threshold": self.threshold,
            "hits": hits, "expected": total, "actual": n_calls, "aspects": aspects,
            "latency": {"assertions": assertions, "hits": tally.latency_hits,
                        "misses": assertions - tally.latency_hits - tally.neutral,
                        "neutral": tally.neutral},
            "entries": rows,
        }
        problems: list[str] = []
        slow = tally.slow
        if exact:
            beyond = calls[total:]
            details["extra_calls"] = list(map(_INDEX, beyond))
            if tally.unmatched_n:
                problems.append(_bounded(tally.unmatched, tally.unmatched_n))
            if total > n_calls:
                problems.append("missing " + _bounded(
                    [e.label for e in entries[n_calls:n_calls + _LISTED]], total - n_calls))
            if beyond:
                problems.append(f"{len(beyond)} extra call(s) at " + _bounded(
                    [f"#{c.index}" for c in beyond[:_LISTED]], len(beyond)))
            head = f"{hits} of {total} expected calls in place"
            flagged = tally.unmatched_n + len(slow) + len(beyond)
        else:
            if tally.unmatched_n:
                problems.append("no in-order match for "
                                + _bounded(tally.unmatched, tally.unmatched_n))
            head = f"{hits} of {total} expected calls matched in order"
            flagged = len(slow)
        if flagged:
            details["violations"] = offending
        if slow:
            problems.append("over the latency limit: " + _bounded(
                [f"{entries[i].label} at call #{call.index}" for i, call in slow[:_LISTED]],
                len(slow)))
        if tally.neutral:
            problems.append(f"{tally.neutral} latency check(s) left out: matched call still "
                            "pending")
        if not problems:
            tail = ", all latency limits met" if assertions else ""
            summary = (f"All {total} expected calls {'in place' if exact else 'matched in order'}"
                       f"{tail}.")
        else:
            summary = f"{head}; " + "; ".join(problems) + "."
        return score, summary, _Details(details)

    def _exact(self, calls: Sequence[ToolCall], tally: _Tally) -> tuple[_Later, _Later]:
        """``exact`` mode: each entry against the call at its position. Only the positions
        where the tools agree are visited; ``kinds`` records each position's verdict (0: out
        of place, 1: in place, 2: in place but over its latency limit), from which the rows
        and the violations are written out when read."""
        entries = self.entries
        n = min(len(entries), len(calls))
        names = list(map(_NAME, calls[:n]))
        kinds = bytearray(n)
        hits = latency_hits = neutral = 0
        slow = tally.slow
        texts = self._texts
        limits = self._limits
        for i in compress(range(n), map(eq, self._tools, names)):
            call = calls[i]
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
        unmatched_n = n - hits
        if unmatched_n:
            at = -1
            for _ in range(min(unmatched_n, _LISTED)):
                at = kinds.find(0, at + 1)
                e = entries[at]
                tally.unmatched.append(f"position {at} expected {e.what}, "
                                       f"got {_got(e, names[at])}")
        tally.add(hits, latency_hits, neutral, unmatched_n)
        return (_Later(self._exact_rows, calls, names, kinds),
                _Later(self._exact_violations, calls, names, kinds))

    def _exact_rows(self, calls: Sequence[ToolCall], names: list[str],
                    kinds: bytearray) -> list[dict[str, Any]]:
        """The ``entries`` rows of an ``exact`` grade (``_exact``'s record of it)."""
        include_values = self.include_values
        rows = []
        for i, (e, template, name, kind) in enumerate(zip(self.entries, self._templates,
                                                          names, kinds)):
            row = template.copy()
            row["actual_tool"] = name
            if kind:
                call = calls[i]
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
        rows.extend(template.copy() for template in self._templates[len(names):])
        return rows

    def _exact_violations(self, calls: Sequence[ToolCall], names: list[str],
                          kinds: bytearray) -> list[dict[str, Any]]:
        """The ``violations`` of an ``exact`` grade: each call out of place or over its
        entry's limit, in order, then the calls beyond the expected ones."""
        entries = self.entries
        reasons = self._reasons
        out = []
        for i in compress(range(len(kinds)), kinds.translate(_FLAGGED)):
            e = entries[i]
            call = calls[i]
            name = names[i]
            why = reasons[i] or self._reason(e)
            out.append({"call": call.index, "span_id": format(call.span_id, "016x")
                        if call.span_id else None, "tool": name,
                        "reason": why[2] if kinds[i] == 2 else why[name == e.tool]})
        total = len(entries)
        out += violations((c, f"extra call beyond the {total} expected") for c in calls[total:])
        return out

    def _in_order(self, calls: Sequence[ToolCall], tally: _Tally) -> tuple[_Later, _Later]:
        """``in_order`` mode: the best largest in-order matching, and its latency verdicts;
        the rows and the violations are written out when read."""
        index = self._index
        if index is None and self._assertions:
            index = self._index = _pair_index(self.by_tool)
        matched = _in_order(self.entries, calls, self.by_tool, index)
        latency_hits = neutral = 0
        slow = tally.slow
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
        unmatched_n = len(self.entries) - hits
        if unmatched_n:
            entries = self.entries
            tally.unmatched += [entries[k].label for k in islice(
                filterfalse(matched.__contains__, range(len(entries))), _LISTED)]
        tally.add(hits, latency_hits, neutral, unmatched_n)
        return (_Later(self._in_order_rows, matched),
                _Later(self._in_order_violations, slow))

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



class _Tally:
    """What a sequence mode's grade adds up to, for the details and the explanation."""

    __slots__ = ("hits", "latency_hits", "neutral", "slow", "unmatched", "unmatched_n")

    def __init__(self) -> None:
        self.slow: list[tuple[int, ToolCall]] = []   # (entry, call) over the limit, in order
        self.unmatched: list[str] = []       # the first _LISTED of unmatched_n

    def add(self, hits: int, latency_hits: int, neutral: int, unmatched_n: int) -> None:
        self.hits, self.latency_hits, self.neutral = hits, latency_hits, neutral
        self.unmatched_n = unmatched_n

