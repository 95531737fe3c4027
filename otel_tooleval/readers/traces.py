"""Cutting a stream of span records into traces, holding only the traces still open."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Generator, Iterable, Iterator

from ..model import SpanRecord

__all__ = ["iter_traces"]


def iter_traces(records: Iterable[SpanRecord], *, idle_spans: int = 100_000,
                rootless_idle_spans: int | None = None) -> Iterator[list[SpanRecord]]:
    """Group a stream of records by trace id; yield each trace's records once it looks complete.

    The collector writes a trace's spans in batches over time, in the order they ended, so a
    trace's local root (no parent, or a remote one) usually comes last. A trace is yielded once
    one of its local roots has been seen and none of its records has arrived among the last
    ``idle_spans`` records; a trace with no local root at all (its root was lost) once it has
    been idle for ``rootless_idle_spans`` records (default ten times ``idle_spans``). Whatever
    is still open at the end is yielded then, in the order of their last records.

    Memory grows with the records of open traces (at most ``idle_spans`` records of traces
    whose root has been seen), not with the input. A trace whose records are spread further
    apart than that is split, and each part is graded alone: its late spans then start a new,
    rootless group. The default, 100,000 records, covers several seconds of a busy collector
    (the SDK's batch processor sends at least every 5 s, the collector's every 0.2 s), which
    is how far apart the batches of one trace normally arrive.

    Raises:
        ValueError: ``idle_spans`` or ``rootless_idle_spans`` below 1.
    """
    if idle_spans < 1:
        raise ValueError("idle_spans must be at least 1")
    rootless_idle = 10 * idle_spans if rootless_idle_spans is None else rootless_idle_spans
    if rootless_idle < 1:
        raise ValueError("rootless_idle_spans must be at least 1")
    return _iter_traces(records, idle_spans, rootless_idle)


def _iter_traces(records: Iterable[SpanRecord], idle: int, rootless_idle: int
                 ) -> Iterator[list[SpanRecord]]:
    # Open traces in order of their last record (oldest first), so the next one to go idle
    # is always at the front. ``due``: the earliest position at which the front trace can be
    # idle; it only grows (a front trace that gets a record moves back), so the front is
    # looked at only when that position is reached, not for every record.
    rooted: OrderedDict[int, list[SpanRecord]] = OrderedDict()
    rootless: OrderedDict[int, list[SpanRecord]] = OrderedDict()
    last_seen: dict[int, int] = {}
    rooted_due = rootless_due = 0
    for position, record in enumerate(records, 1):
        trace_id = record.trace_id
        spans = rooted.get(trace_id)
        if spans is not None:
            rooted.move_to_end(trace_id)
        else:
            spans = rootless.pop(trace_id, None)
            if spans is None:
                spans = []
            if record.parent_id == 0 or record.parent_remote:
                rooted[trace_id] = spans
                if len(rooted) == 1:
                    rooted_due = position + idle
            else:
                rootless[trace_id] = spans
                if len(rootless) == 1:
                    rootless_due = position + rootless_idle
        spans.append(record)
        last_seen[trace_id] = position
        if position >= rooted_due and rooted:
            rooted_due = yield from _idle_traces(rooted, last_seen, position, idle)
        if position >= rootless_due and rootless:
            rootless_due = yield from _idle_traces(rootless, last_seen, position, rootless_idle)
    # At the end: every trace still open, in the order of its last record.
    for trace_id in sorted([*rooted, *rootless], key=last_seen.__getitem__):
        spans = rooted.get(trace_id)
        yield spans if spans is not None else rootless[trace_id]


def _idle_traces(traces: OrderedDict[int, list[SpanRecord]], last_seen: dict[int, int],
                 position: int, idle: int) -> Generator[list[SpanRecord], None, int]:
    """Yield the traces idle for ``idle`` records at ``position`` (oldest first); return the
    position at which the next one can be idle."""
    while traces:
        oldest = next(iter(traces))
        due = last_seen[oldest] + idle
        if position < due:
            return due
        del last_seen[oldest]
        yield traces.pop(oldest)
    return 0
