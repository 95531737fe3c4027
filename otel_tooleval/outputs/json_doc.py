"""``grade --format json``: the one document of ARCHITECTURE.md."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from ..model import RunReport
from ..violations import flagged_calls
from .calls import call_to_dict
from .spool import DEFAULT_SPOOL_BYTES
from .stream import ReportWriter

__all__ = ["JsonWriter", "json_text", "render_json", "run_json"]

#: What a JSON string may hold raw (json escapes only C0 controls, quote and backslash) that
#: a terminal, an editor or a reader acts on: DEL and the C1 controls (CSI \x9b is ESC[), the
#: bidirectional overrides and isolates, the line and paragraph separators, lone surrogates
#: (not UTF-8) and the two non-characters: the set ``outputs.text`` escapes in one-line fields.
_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
                     "\ufffe\uffff]")


def render_json(reports: Sequence[RunReport], aggregate: Mapping[str, Any], *,
                include_calls: bool = False) -> str:
    """``{"runs": [RunReport.to_dict(), ...], "aggregate": aggregate}`` and a newline.

    With ``include_calls`` each run also has ``calls``: every tool call as
    :func:`calls.call_to_dict` gives it (``grade --include-calls``), plus ``violation`` (a
    failing grader lists the call under ``details.violations``) and ``violation_graders``
    (their names; empty when none), as the exported tool spans carry them.

    One run per line, so line tools (``grep``, ``head``, diffs) work on the document; that
    layout also keeps json's C encoder (indentation would take the pure-Python one, four
    times slower). Keys keep the order of ``to_dict`` and of ``aggregate``. Text is not
    ASCII-escaped, except what a terminal or a reader would act on (DEL, C1 controls, bidi
    overrides and isolates, line and paragraph separators) and lone surrogates (JSON input may
    hold them; UTF-8 cannot), which are written as ``\\uXXXX`` escapes: the output always
    encodes, shows as it is, and parses back to the same strings.
    A non-finite number, which JSON cannot express, is written as null.
    """
    runs = ",\n".join(run_json(report, include_calls) for report in reports)
    return ((f'{{"runs": [\n{runs}\n],\n' if runs else '{"runs": [],\n')
            + f'"aggregate": {json_text(aggregate)}}}\n')


def run_json(report: RunReport, include_calls: bool = False, *, with_case: bool = False) -> str:
    """One run's line of :func:`render_json`; ``with_case`` adds its ``case`` (id or null)."""
    doc = _run_dict(report, include_calls)
    if with_case:
        doc["case"] = report.case
    return _escape_unsafe(_dumps(doc))


class JsonWriter(ReportWriter):
    """:func:`render_json`, written as the runs come (``outputs.stream``)."""

    def __init__(self, *, include_calls: bool = False,
                 memory_bytes: int = DEFAULT_SPOOL_BYTES) -> None:
        super().__init__(memory_bytes=memory_bytes)
        self.include_calls = include_calls

    def part(self, report: RunReport, key: tuple[Any, ...]) -> str:
        return run_json(report, self.include_calls, with_case=self.cases is not None)

    def write(self, out: TextIO, aggregate: Mapping[str, Any], *,
              problems: Sequence[str] = ()) -> None:
        out.write('{"runs": [')
        separator = "\n"
        for _key, text in self.spool:
            out.write(separator)
            out.write(text)
            separator = ",\n"
        out.write("\n],\n" if self.runs else "],\n")
        if self.sessions is not None:
            parts = ",\n".join(json_text(s.to_dict()) for s in self.sessions)
            out.write(f'"sessions": [\n{parts}\n],\n' if parts else '"sessions": [],\n')
        if self.cases is not None:
            parts = ",\n".join(json_text(c) for c in self.cases)
            out.write(f'"cases": [\n{parts}\n],\n' if parts else '"cases": [],\n')
        out.write(f'"aggregate": {json_text(aggregate)}}}\n')


def json_text(value: Any) -> str:
    """``value`` as one line of JSON, written as :func:`render_json` writes its parts."""
    return _escape_unsafe(_dumps(value))


def _run_dict(report: RunReport, include_calls: bool) -> dict[str, Any]:
    doc = report.to_dict()
    if include_calls:
        flagged = flagged_calls(report.results)
        calls = doc["calls"] = [call_to_dict(call) for call in report.run.calls]
        for position, call in enumerate(calls):
            graders = flagged.get(position, [])
            call["violation"] = bool(graders)
            call["violation_graders"] = graders
    return doc


def _escape_unsafe(text: str) -> str:
    # A C loop, true for almost every report (json already escaped the C0 controls): the
    # regex scan, far slower, only for the rest.
    if text.isprintable():
        return text
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


# json.dumps with options builds an encoder per call; shared encoders write the same text.
_STRICT = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=str)
_LENIENT = json.JSONEncoder(ensure_ascii=False, default=str)


def _dumps(value: Any) -> str:
    try:
        return _STRICT.encode(value)
    except ValueError:      # NaN or infinity somewhere: rare, so only then walk the value
        return _LENIENT.encode(_finite(value))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
