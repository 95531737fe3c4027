"""``grade --baseline FILE [--update-baseline]``: grade and diff against a baseline in one step.

The graded runs are also written, as they come, to a JSON report (``grade --format json``'s
document, whatever format the report itself is in); at the end that document is compared with
the baseline file as ``otel-tooleval diff`` would, and the diff's table goes to stderr.
``--update-baseline`` then writes the document over the baseline file, when the input was
usable (a gate that exits 2 leaves the baseline as it was).
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from .diff import DiffInputError, compare, load_side, read_side
from .outputs.diff_report import render_diff_table
from .outputs.json_doc import JsonWriter

if TYPE_CHECKING:
    from .model import RunReport
    from .sessions.model import SessionReport

__all__ = ["BaselineGate"]


class BaselineGate:
    """Feeds a JSON report beside grade's own and settles the comparison at the end.

    Args:
        path: the baseline file (grade JSON).
        update: write the new document over ``path`` (a missing file is then created, and the
            comparison, when there is one, is shown but does not fail the gate).
        err: where the diff's table and problems are written.
    """

    def __init__(self, path: str, *, update: bool = False, err: TextIO | None = None) -> None:
        self.path = path
        self.update = update
        self.err = err if err is not None else sys.stderr
        self.json = JsonWriter()
        self.document: str | None = None

    def add(self, report: RunReport, key: tuple[Any, ...]) -> None:
        self.json.add(report, key)

    def add_sessions(self, sessions: Sequence[SessionReport]) -> None:
        self.json.add_sessions(sessions)

    def expect_cases(self) -> None:
        """Cases are configured: this run's document carries them, as ``grade``'s does."""
        self.json.expect_cases()

    def add_cases(self, cases: list[dict[str, Any]]) -> None:
        self.json.add_cases(cases)

    def close(self) -> None:
        self.json.close()

    def compare(self, aggregate: Mapping[str, Any], problems: Sequence[str] = ()) -> int:
        """Render this run's document and compare it with the baseline, the diff's table on
        ``err``: 0 no regression (or ``update``), 1 a regressed case, 2 a baseline that cannot
        be read or compared (then, with ``update``, the file is left as it is: remove it to
        start a new baseline)."""
        text = io.StringIO()
        self.json.write(text, aggregate, problems=problems)
        self.document = text.getvalue()
        if self.update and not os.path.exists(self.path):
            return 0                            # the first baseline
        try:
            report = compare(load_side(self.path),
                             read_side("(this run)", json.loads(self.document)))
        except DiffInputError as exc:
            print(f"otel-tooleval: --baseline: {exc}", file=self.err)
            self.document = None                # a file not understood is not overwritten
            return 2
        self.err.write(render_diff_table(report))
        return 1 if report.failed and not self.update else 0

    def save(self) -> int:
        """With ``update``, the document of :meth:`compare` written over the baseline: 0, or 2
        when it cannot be written. Called only when the grade's input was usable."""
        if not self.update or self.document is None:
            return 0
        try:
            with open(self.path, "w", encoding="utf-8") as fh:
                fh.write(self.document)
        except OSError as exc:
            print(f"otel-tooleval: cannot write the baseline {self.path}: "
                  f"{exc.strerror or exc}", file=self.err)
            return 2
        print(f"otel-tooleval: baseline {self.path} updated", file=self.err)
        return 0
