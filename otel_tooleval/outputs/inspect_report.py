"""``otel-tooleval inspect``: the table (a terminal, a CI log) and the JSON document."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from ..case_inspection import CaseFinding
from ..inspection import InspectedRun, Inspection, hints, suggested_conventions
from ..model import Reading, ToolCall, text_of
from ..suggestion import suggestion_yaml
from .calls import call_status, call_to_dict
from .json_doc import json_text
from .text import one_line, shorten

__all__ = ["inspect_document", "render_inspect_json", "render_inspect_table"]

_INDENT = "    "
_WIDTH = 100
_VALUE_CHARS = 80
_MAX_PROBLEMS = 50
_MAX_CASES = 500


def _run_dict(item: InspectedRun) -> dict[str, Any]:
    run = item.run
    out = {
        "trace_id": run.trace_id_hex,
        "root_span_id": run.root_span_id_hex,
        "root_name": run.root_name,
        "agent": run.agent,
        "session": item.session,
        "graded": not item.excluded,
        "calls": [{**call_to_dict(call), "convention": convention}
                  for call, convention in zip(run.calls, item.conventions, strict=True)],
        "reading": {**run.reading.to_dict(), **run.reading.notes()},
    }
    if item.case is not None:
        out["case"] = item.case.to_dict()
    return out


def inspect_document(found: Inspection, problems: Sequence[str]) -> dict[str, Any]:
    """The JSON document of ``inspect --format json`` as plain data."""
    unrecognised = found.unrecognised
    doc: dict[str, Any] = {
        "files": found.files,
        "spans": found.spans,
        "traces": found.traces,
        "traces_without_runs": found.traces_without_runs,
        "runs": [_run_dict(item) for item in found.runs],
        "sessions": found.sessions(),
        "unrecognised": {
            "spans": unrecognised.spans,
            "in_runs": unrecognised.in_runs,
            "scopes": dict(unrecognised.scopes.most_common()),
            "candidate_attributes": {
                key: {"spans": entry.spans, "sample": entry.sample,
                      "scopes": dict(entry.scopes.most_common())}
                for key, entry in sorted(unrecognised.keys.items(),
                                         key=lambda kv: (-kv[1].spans, kv[0]))},
            "hints": hints(unrecognised),
            "suggested_conventions": suggested_conventions(unrecognised),
        },
        "problems": list(problems),
    }
    cases = found.cases()
    if cases is not None:
        doc["cases"] = cases
    return doc


def render_inspect_json(found: Inspection, problems: Sequence[str]) -> str:
    """One JSON document (one line) and a newline; values in full."""
    return json_text(inspect_document(found, problems)) + "\n"


def _value(value: Any) -> str:
    return shorten(one_line(text_of(value)), _VALUE_CHARS)


def _call_lines(n: int, call: ToolCall, convention: str | None) -> list[str]:
    status = call_status(call)
    if status == "error":
        status = f"error: {shorten(one_line(call.error or ''), _VALUE_CHARS)}"
    ms = call.duration_ms
    took = f"{ms:.1f} ms" if ms is not None else "-"
    head = (f"{_INDENT}{n:>3}. {one_line(call.name)}  [{status}]  step {call.step}  {took}  "
            f"span {call.span_id:016x}  via {convention or '?'}")
    lines = [head, f"{_INDENT}       arguments: {_value(call.arguments)}"]
    if call.has_result:
        lines.append(f"{_INDENT}       result:    {_value(call.result)}")
    return lines


def _run_lines(i: int, item: InspectedRun) -> list[str]:
    run = item.run
    agent = one_line(run.agent) if run.agent is not None else "(unnamed)"
    head = (f"run {i}  agent={agent}  trace={run.trace_id_hex}  root={run.root_span_id_hex} "
            f"{one_line(run.root_name)!r}")
    if item.session is not None:
        head += f"  session={one_line(item.session)}"
    if item.excluded:
        head += "  (not graded: agent not in runs.agents)"
    lines = [head]
    if not run.calls:
        lines.append(f"{_INDENT}(no tool calls)")
    for n, (call, convention) in enumerate(zip(run.calls, item.conventions, strict=True), 1):
        lines.extend(_call_lines(n, call, convention))
    lines.extend(_reading_lines(run.reading))
    if item.case is not None:
        lines.extend(_case_lines(item.case))
    return lines


def _case_lines(finding: CaseFinding) -> list[str]:
    """Which case the run matched and why; for none, the nearest case and what it needs."""
    message = ("(none recorded)" if finding.first_user_message is None
               else repr(shorten(one_line(finding.first_user_message), _VALUE_CHARS)))
    if finding.status == "matched":
        return [f"{_INDENT}case: {one_line(finding.cases[0])}  by {one_line(finding.why[0])}"]
    if finding.status == "ambiguous":
        lines = [(f"{_INDENT}case: ambiguous, {len(finding.cases)} cases match "
                 "(an input problem: make their matches exclusive):")]
        lines.extend(f"{_INDENT}  {one_line(why)}" for why in finding.why)
        return lines
    lines = [f"{_INDENT}case: no case  first user message: {message}"]
    near = finding.nearest
    if near is not None:
        lines.append(f"{_INDENT}  nearest case: {one_line(near.case)} (similarity "
                     f"{near.similarity:.2f}), would match with {one_line(near.needs)}")
    for key, value in finding.attributes.items():
        have = "not carried" if value is None else repr(shorten(one_line(value), _VALUE_CHARS))
        lines.append(f"{_INDENT}  attribute {one_line(key)} (cases match on it): {have}")
    return lines


def _reading_lines(reading: Reading) -> list[str]:
    """How the calls were read: the two witnesses' counts, and each call they disagree on
    with its span."""
    lines = [(f"{_INDENT}reading: {reading.source}  requested={reading.requested} "
             f"executed={reading.executed} matched={reading.matched} "
             f"unrequested={len(reading.unrequested)} unexecuted={len(reading.unexecuted)}")]
    if not reading.recorded and reading.calls_from == "auto":
        lines.append(f"{_INDENT}  no model response recorded here asks for a call (content "
                     "capture off?): the calls are read from the tool spans alone")
    for note in reading.unrequested:
        lines.append(f"{_INDENT}  unrequested: {one_line(note.name)}  span {note.span_id:016x}"
                     f"  step {note.step}  (executed, no response asked for it: not graded)")
    for note in reading.unexecuted:
        lines.append(f"{_INDENT}  unexecuted:  {one_line(note.name)}  call id "
                     f"{one_line(note.call_id or '-')}  requested by model span "
                     f"{note.span_id:016x}  step {note.step}  (no tool span executed it)")
    return lines


def _unrecognised_lines(found: Inspection) -> list[str]:
    u = found.unrecognised
    head = (f"spans not used: {u.spans} ({u.in_runs} inside runs, "
            f"{u.spans - u.in_runs} in no run)")
    lines = [head]
    if not u.spans:
        return lines
    lines.append(f"{_INDENT}by instrumentation scope:")
    width = min(max(len(one_line(s)) for s in u.scopes), 50)
    lines.extend(f"{_INDENT * 2}{shorten(one_line(scope), 50):<{width}}  {count}"
                 for scope, count in u.scopes.most_common())
    if u.keys:
        lines.append(f"{_INDENT}attributes that look like tool, agent or model markers "
                     "(spans, a sample value):")
        ranked = sorted(u.keys.items(), key=lambda kv: (-kv[1].spans, kv[0]))
        width = min(max(len(one_line(k)) for k in u.keys), 50)
        lines.extend(f"{_INDENT * 2}{shorten(one_line(key), 50):<{width}}  {entry.spans:>5}  "
                     f"{_value(entry.sample)}" for key, entry in ranked)
    advice = hints(u)
    if advice:
        lines.append(f"{_INDENT}hints:")
        for text in advice:
            lines.extend(textwrap.wrap(one_line(text), _WIDTH, initial_indent=_INDENT * 2 + "- ",
                                       subsequent_indent=_INDENT * 2 + "  ",
                                       break_on_hyphens=False))
    suggested = suggested_conventions(u)
    if suggested:
        lines.append(f"{_INDENT}suggested mapping (review it, then add it to the config):")
        lines.extend(_INDENT * 2 + line for line in suggestion_yaml(suggested).splitlines())
    return lines


def _cases_lines(found: Inspection, cases: Sequence[dict[str, Any]]) -> list[str]:
    """The cases: counts, then each case with the runs it matched, or ``missing``."""
    matched = sum(1 for c in cases if c["status"] == "matched")
    statuses = [item.case.status for item in found.runs if item.case is not None]
    lines = [(f"cases ({len(cases)}): {matched} matched a run, {len(cases) - matched} missing; "
             f"runs: {statuses.count('no case')} with no case, "
             f"{statuses.count('ambiguous')} ambiguous")]
    for entry in cases[:_MAX_CASES]:
        runs = ", ".join(f"run {r['run']}" for r in entry["runs"][:10])
        if len(entry["runs"]) > 10:
            runs += f" and {len(entry['runs']) - 10} more"
        lines.append(f"{_INDENT}{one_line(entry['id'])}  "
                     + (runs if entry["runs"] else "missing: no run matched it"))
    if len(cases) > _MAX_CASES:
        lines.append(f"{_INDENT}… and {len(cases) - _MAX_CASES} more (--format json lists all)")
    return lines


def render_inspect_table(found: Inspection, problems: Sequence[str]) -> str:
    """A header, each run with its calls, the spans not used, the input problems."""
    graded = len(found.graded_runs)
    excluded = len(found.runs) - graded
    head = (f"{len(found.files)} file(s), {found.spans} spans read, {found.traces} traces "
            f"({found.traces_without_runs} without a run), {graded} runs")
    if excluded:
        head += f" (and {excluded} not graded: agent not in runs.agents)"
    head += f", {len(problems)} input problem(s)"
    lines = [head, ""]
    for i, item in enumerate(found.runs, 1):
        lines.extend(_run_lines(i, item))
        lines.append("")
    sessions = found.sessions()
    if sessions:
        lines.append(f"sessions ({len(sessions)}):")
        lines.extend(f"{_INDENT}{one_line(str(s['attribute']))}={one_line(s['session'])}  "
                     f"agent={one_line(s['agent'] or '(unnamed)')}  runs={s['runs']}  "
                     f"calls={s['tool_calls']}" for s in sessions)
        lines.append("")
    cases = found.cases()
    if cases is not None:
        lines.extend(_cases_lines(found, cases))
        lines.append("")
    lines.extend(_unrecognised_lines(found))
    if problems:
        lines.append("")
        lines.append(f"input problems ({len(problems)}):")
        lines.extend(f"{_INDENT}{one_line(p)}" for p in problems[:_MAX_PROBLEMS])
        if len(problems) > _MAX_PROBLEMS:
            lines.append(f"{_INDENT}… and {len(problems) - _MAX_PROBLEMS} more")
    return "\n".join(lines) + "\n"
