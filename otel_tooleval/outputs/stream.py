"""Writing a ``grade`` report while its runs are graded, each run dropped once it is rendered.

Every format has a writer (``JsonWriter``, ``JunitWriter``, ``TableWriter``, ``HtmlWriter``)
that renders each run's part as the run is given to :meth:`ReportWriter.add`, keeps the part in
a :class:`spool.SortedSpool` (memory, then a temporary file) under the run's sort key, and writes
the whole document at :meth:`ReportWriter.write`, once the aggregate is known. The documents are
the same, byte for byte, as the ``render_*`` functions give for the sorted list of runs; memory
holds no ``RunReport`` or ``AgentRun`` past ``add``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from ..model import RunReport
from ..sessions.model import SessionReport
from .spool import DEFAULT_SPOOL_BYTES, SortedSpool

__all__ = ["ReportWriter", "run_key"]


def run_key(report: RunReport) -> tuple[int, int, int]:
    """The order of runs in every report: start time, then trace id and root span id."""
    run = report.run
    return (run.start_ns, run.trace_id, run.root_span_id)


class ReportWriter:
    """The base of the streamed writers: counts, the spool, and the order of runs.

    ``add(report, key)`` files the run under ``key`` (any tuple of comparable values; runs are
    written in key order, ties in the order they were added); without ``key``, in the order
    added. :meth:`close` removes the spool's file.
    """

    def __init__(self, *, memory_bytes: int = DEFAULT_SPOOL_BYTES) -> None:
        self.spool = SortedSpool(memory_bytes)
        self.runs = 0
        self.failed = 0
        #: The graded sessions, given once the input has ended (None: no ``sessions:``).
        self.sessions: Sequence[SessionReport] | None = None
        #: The cases (``CaseTally.result``), known before the first run when ``cases:`` is
        #: configured (``expect_cases``) and filled once the input has ended; else None.
        self.cases: list[dict[str, Any]] | None = None

    def expect_cases(self) -> None:
        """Cases are configured: each run's part carries its ``case``."""
        self.cases = []

    def add_cases(self, cases: list[dict[str, Any]]) -> None:
        """The cases to write after the runs."""
        self.cases = cases

    def add_sessions(self, sessions: Sequence[SessionReport]) -> None:
        """The sessions to write after the runs (``sessions:`` configured)."""
        self.sessions = sessions

    def add(self, report: RunReport, key: tuple[Any, ...] = ()) -> None:
        full = (*key, self.runs)    # the position breaks ties, as a stable sort would
        self.runs += 1
        if not report.passed:
            self.failed += 1
        self.spool.add(full, self.part(report, full))

    def part(self, report: RunReport, key: tuple[Any, ...]) -> str:
        """The run's rendered part; what else the writer must remember of it, it takes here."""
        raise NotImplementedError

    def write(self, out: TextIO, aggregate: Mapping[str, Any], *,
              problems: Sequence[str] = ()) -> None:
        """The whole document, to ``out``."""
        raise NotImplementedError

    def close(self) -> None:
        self.spool.close()
