"""The grading process (``grading.mode: process``): grades runs sent by a live processor.

Started by ``otel_tooleval.offload.GradingProcess`` as ``python -I -c ...`` (isolated: an
auto-instrumented parent's ``PYTHONPATH`` hooks and ``OTEL_*`` set-up do not follow it in),
it talks over its standard input and output in frames: a 4-byte little-endian length, a
1-byte codec (``M`` marshal, ``P`` pickle: marshal is several times faster for the plain
tuples, dicts and strings a run is made of, pickle takes anything else) and the payload.

Parent to child: ``("init", document, source, full)`` once, then ``("runs", [job, ...])`` batches;
a job is ``(job id, root record, tool records, model records, dropped calls)`` where each
record is a ``SpanRecord`` as a plain tuple (its events as ``(name, attributes dict)`` pairs). Runs always go as marshal frames: values the
SDK kept as subclasses of the plain types (an application's ``str`` enums) are sent as the
plain type (:func:`plain`), because a pickled one would need the application's class, which
the child cannot import. Child to parent: ``("ready", pid)`` or
``("error", message)`` after the init, then one ``("graded", [(job id, verdict, error), ...])``
per batch, in the order received. A verdict is None when no grader applied to the run (or
``error`` says why it could not be graded), else ``(root attributes, events, agent,
results, passed, case, ambiguous)``: what the parent puts on the root copy and in the log
events and metrics, and the run's case id (None when it matched none) and the ids of the
cases that all matched it (``RunReport.case``/``ambiguous``, for an ``on_report`` callback),
so that it decodes and builds nothing more than that. A result's ``details`` carry only what
the metrics read (``tool_selection_counts``) unless ``full`` asked for all of them (the parent
has an ``on_report`` callback, which gets whole reports).

Nothing but frames goes to the parent's pipe: file descriptor 1 is pointed at standard
error before anything runs, so a stray ``print`` cannot corrupt the stream. End of input
ends the process.
"""

from __future__ import annotations

import marshal
import os
import pickle
import struct
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any

from .config import config_from_mapping
from .emit.span import root_attributes, span_events
from .grading import grade_run
from .model import SpanRecord
from .trajectory import run_from
from .values import as_text

__all__ = ["Verdict", "encode", "grade_job", "plain", "read_frame", "send", "verdict_of"]

_HEADER = struct.Struct("<I")
_MARSHAL = b"M"
_PICKLE = b"P"

#: ``(root attributes or None, events or None, agent, results as tuples, passed, case id or
#: None, ambiguous case ids)``
Verdict = tuple[Any, Any, Any, Any, bool, Any, Any]


def plain(value: Any) -> Any:
    """``value`` with subclasses of str, int, float and bytes (an application's ``str``
    enums, say, which the SDK keeps as attribute values) made the plain types, in lists,
    tuples and dicts too, and other mappings made dicts: what an OTLP exporter would send of
    them. Other objects are left."""
    cls = value.__class__
    if cls in _PLAIN_TYPES or value is None:
        return value
    if cls is tuple or cls is list:
        return cls(plain(v) for v in value)
    if cls is dict:
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, str):
        return as_text(value)
    if isinstance(value, int):   # bool cannot be subclassed: an int subclass
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, bytes):
        return bytes(memoryview(value))
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):   # an event's attributes that were not the SDK's dict
        return {plain(k): plain(v) for k, v in value.items()}
    return value


_PLAIN_TYPES = frozenset((str, int, float, bool, bytes))


def encode(message: Any, *, plain_only: bool = False) -> bytes:
    """One frame: length, codec, payload.

    With ``plain_only`` (runs going to the child, which cannot import the application's
    classes) what marshal refuses is made plain (:func:`plain`) instead of pickled;
    TypeError when even that is not marshalable.
    """
    try:
        body = _MARSHAL + marshal.dumps(message)
    except ValueError as exc:   # an object marshal does not know
        if plain_only:
            try:
                body = _MARSHAL + marshal.dumps(plain(message))
            except ValueError:
                raise TypeError(f"not plain data: {exc}") from None
        else:   # details of a custom shape, from the child
            body = _PICKLE + pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(body)) + body


def send(stream: IO[bytes], message: Any, *, plain_only: bool = False) -> None:
    """Write one frame to a buffered binary stream and flush it (both ends use this)."""
    stream.write(encode(message, plain_only=plain_only))
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next message from a buffered binary stream; EOFError at the end of input."""
    header = stream.read(4)
    if len(header) < 4:
        raise EOFError
    (size,) = _HEADER.unpack(header)
    body = stream.read(size)
    if len(body) < size:
        raise EOFError
    if body[:1] == _MARSHAL:
        return marshal.loads(body[1:])
    return pickle.loads(body[1:])   # our own child's frames, over a private pipe


def verdict_of(report: Any, emit: Any, full: bool = False) -> Verdict | None:
    """What the parent needs of a ``RunReport`` (None: no grader applied to the run)."""
    if report is None:
        return None
    run = report.run
    end = run.end_ns or 0
    marks = emit.violation_marks
    return (
        root_attributes(report) if emit.root_attributes else None,
        [(name, attrs) for name, attrs, _ in span_events(report, end)] if emit.span_events
        else None,
        run.agent,
        [(r.name, r.type, r.score, r.passed, r.label, r.explanation,
          r.details if full else _metric_details(r.details, marks and not r.passed), r.error)
         for r in report.results],
        report.passed,
        report.case,
        tuple(report.ambiguous),
    )


def _metric_details(details: Any, violations: bool = False) -> Any:
    """What the parent reads of a result's details: the counts the metrics record and, for a
    failing result with violation marks on, the calls it lists (``details.violations``)."""
    if not details:
        return {}
    out: dict[str, Any] = {}
    counts = details.get("tool_selection_counts")
    if counts is not None:
        out["tool_selection_counts"] = counts
    if violations and "violations" in details:
        out["violations"] = details["violations"]
    return out


def grade_job(job: Sequence[Any], config: Any) -> Any:
    """The ``RunReport`` of one job (None when no grader applies), as the thread would."""
    _, root, tools, models, dropped = job
    make = SpanRecord._make
    run = run_from(make(root), [make(t) for t in tools], [make(m) for m in models],
                   config.policy, dropped_calls=dropped)
    return grade_run(run, config)


def serve(inp: IO[bytes], out: IO[bytes]) -> int:
    """Answer init and batches until the end of input."""
    try:
        _, document, source, full = read_frame(inp)
    except EOFError:
        return 0
    try:
        config = config_from_mapping(document, source, allow_no_graders=True)
    except Exception as exc:   # the parent grades on its thread and says why, once
        send(out, ("error", f"{type(exc).__name__}: {exc}"))
        return 1
    send(out, ("ready", os.getpid()))
    emit = config.emit
    while True:
        try:
            _, jobs = read_frame(inp)
        except EOFError:
            return 0
        answers = []
        for job in jobs:
            verdict, error = None, None
            try:
                verdict = verdict_of(grade_job(job, config), emit, full)
            except Exception as exc:   # a bad record: the run is forwarded ungraded
                error = f"{type(exc).__name__}: {exc}"
            answers.append((job[0], verdict, error))
        send(out, ("graded", answers))


def main() -> int:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)            # stray prints go to standard error, never into the frames
    sys.stdout = sys.stderr
    try:
        return serve(sys.stdin.buffer, out)
    except (BrokenPipeError, KeyboardInterrupt):
        return 0             # the parent went away: nobody is left to answer


if __name__ == "__main__":   # pragma: no cover - run as a child process
    sys.exit(main())
