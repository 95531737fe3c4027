"""The ``otel-tooleval`` command line."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from ._version import __version__
from .config import ConfigError, ToolEvalConfig, load_config_file
from .graders.registry import CONFIGURATION_ERROR
from .guard import RULES
from .model import RunReport
from .readers.problems import InputProblem
from .readers.source import DEFAULT_MAX_LINE_BYTES, FORMATS
from .sinks import SINK_FIELDS

if TYPE_CHECKING:
    from .baseline import BaselineGate
    from .outputs.stream import ReportWriter
    from .sessions.model import SessionReport

__all__ = ["main"]

#: The config sections ``check`` prints after the graders.
SECTIONS = ("runs", "limits", "emit", "grading")


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo
    from .demo.agent import default_config_text

    if args.print_config:
        sys.stdout.write(default_config_text())
        return 0
    config = _load_config(args.config) if args.config else None
    run_demo(config, endpoint=args.endpoint)
    return 0


def _load_config(path: str, traces: Sequence[str] = (), **options: bool) -> ToolEvalConfig:
    """``load_config_file``, with one line instead of a list of unknown keys when the file is
    a trace file: the arguments swapped (``grade cfg.yaml --config traces.jsonl``)."""
    try:
        return load_config_file(path, **options)
    except ConfigError:
        from .readers.sniff import trace_kind

        head = b""
        if os.path.isfile(path):
            with contextlib.suppress(OSError), open(path, "rb") as fh:
                head = fh.read(64 * 1024)
        kind = trace_kind(head) if head else None
        if kind is None:
            raise
        fix = (f" try: otel-tooleval grade {path} --config {traces[0]}" if len(traces) == 1
               else "")
        raise _Swapped(f"{path} looks like traces ({kind}), not a config: are the arguments "
                       f"swapped?{fix}") from None


class _Swapped(Exception):
    """A config path that names a trace file; the message is the one line to print."""


def _check(args: argparse.Namespace) -> int:
    config = _load_config(args.config)
    doc: dict[str, object] = {
        "graders": [{"name": g.name, "type": g.type,
                     "agents": sorted(g.agents) if g.agents else None,
                     "params": _params(g.grader)} for g in config.graders],
    }
    for section in SECTIONS:   # every other section, defaults filled in
        doc[section] = getattr(config, section).model_dump(mode="json")
    if config.session_graders:
        sessions = config.sessions.model_dump(mode="json", exclude={"graders"})
        sessions["graders"] = [{"name": g.name, "type": g.type,
                                "agents": sorted(g.agents) if g.agents else None,
                                "params": _params(g.grader)} for g in config.session_graders]
        doc["sessions"] = sessions
    checked = f"{len(config.graders)} grader(s)"
    if config.guard is not None:
        doc["guard"] = config.guard.model_dump(mode="json")
    if config.guard_rules is not None:   # an active guard: a result of every run
        checked += f" and a guard ({', '.join(_guard_rules(doc['guard']))})"
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    print(f"{args.config}: {checked}, valid.", file=sys.stderr)
    return 0


def _guard_rules(guard: Any) -> list[str]:
    """The rules a normalised ``guard:`` section sets, in the order they are tried."""
    return [rule for rule in RULES if guard.get(rule) not in (None, [], {})]


def _grade(args: argparse.Namespace) -> int:
    from .aggregate import aggregate_passed
    from .files import InputError
    from .offline import grade_files

    if args.include_calls and args.format != "json":
        print("otel-tooleval: --include-calls needs --format json", file=sys.stderr)
        return 2
    if args.update_baseline and not args.baseline:
        print("otel-tooleval: --update-baseline needs --baseline FILE", file=sys.stderr)
        return 2
    config = _load_config(args.config, args.files)
    if args.cases:
        from .config import with_cases

        config = with_cases(config, args.cases)

    shown: list[str] = []
    lines = _ProblemLines()

    def problem(p: InputProblem) -> None:
        shown.append(str(p))
        lines.add(p)

    out_stream = sys.stdout
    writer = _writer(args, out_stream)
    gate = _baseline_gate(args)
    baseline_code = 0
    if config.cases is not None:
        writer.expect_cases()
        if gate is not None:
            gate.expect_cases()
    targets = None
    if args.to:
        from .sinks.targets import DeliveryTargets
        try:
            targets = DeliveryTargets.for_grade(config.emit, args.to)
        except ValueError as exc:
            print(f"otel-tooleval: {exc}", file=sys.stderr)
            return 2
    broken = _ConfigErrors()
    strict = args.strict_reading or config.runs.strict_reading
    misread: list[tuple[tuple[int, int, int], str]] = []

    def graded(report: RunReport, key: tuple[int, int, int]) -> None:
        # Each run is rendered (and spooled) now and dropped: memory stays flat in the runs.
        writer.add(report, key)
        if gate is not None:
            gate.add(report, key)
        broken.add(report, key)
        if targets is not None:
            targets.submit(report)
        if strict and not report.run.reading.agrees:
            run = report.run
            misread.append((key, f"trace {run.trace_id_hex} root {run.root_span_id_hex} "
                                 f"({run.agent}): " + "; ".join(run.reading.problems())))

    try:
        try:
            outcome = grade_files(args.files, config, input_format=args.input_format,
                                  group_by=args.group_by, on_problem=problem,
                                  on_report=graded, max_line_bytes=args.max_line_bytes)
        except InputError as exc:
            lines.close()
            print(f"otel-tooleval: {exc}", file=sys.stderr)
            return 2
        lines.close()
        if outcome.cases is not None:
            writer.add_cases(outcome.cases)
            if gate is not None:
                gate.add_cases(outcome.cases)
        if config.session_graders:
            writer.add_sessions(outcome.sessions)
            if gate is not None:
                gate.add_sessions(outcome.sessions)
            for session in outcome.sessions:
                broken.add_session(session)
                if targets is not None:
                    targets.submit_session(session)
        if args.output:
            try:
                with open(args.output, "w", encoding="utf-8") as fh:
                    writer.write(fh, outcome.aggregate, problems=shown)
            except OSError as exc:
                print(f"otel-tooleval: cannot write {args.output}: {exc.strerror or exc}",
                      file=sys.stderr)
                return 2
        else:
            writer.write(out_stream, outcome.aggregate, problems=shown)
        if gate is not None:
            baseline_code = gate.compare(outcome.aggregate, shown)
    finally:
        writer.close()
        if gate is not None:
            gate.close()
    usable = True
    if outcome.problems and not args.allow_input_problems:
        # Part of the input was not read: a gate must not pass on what it could not see.
        print(f"otel-tooleval: {len(outcome.problems)} input problem(s), the first at "
              f"{shown[0]} (--allow-input-problems to gate on what was read)", file=sys.stderr)
        usable = False
    runs = outcome.runs
    if runs == 0 and not args.allow_empty:
        # A gate never passes on nothing: an empty file, HTTP-only traces, a wrong convention.
        files = " ".join(args.files)
        print(f"otel-tooleval: read {outcome.spans} span(s), none was an agent run: nothing "
              f"to grade (see what was read: otel-tooleval inspect {files}; --allow-empty "
              "to pass on no runs)", file=sys.stderr)
        usable = False
    elif 0 < runs < args.min_runs:
        print(f"otel-tooleval: {runs} agent run(s) found, --min-runs asks for "
              f"{args.min_runs}", file=sys.stderr)
        usable = False
    if misread:
        # The two witnesses of the calls disagree: what was graded may not be what ran.
        misread.sort()
        print(f"otel-tooleval: {len(misread)} run(s) whose requested and executed calls "
              "disagree (--strict-reading):", file=sys.stderr)
        for _, line in misread[:10]:
            print(f"otel-tooleval:   {line}", file=sys.stderr)
        if len(misread) > 10:
            print(f"otel-tooleval:   and {len(misread) - 10} more", file=sys.stderr)
        usable = False
    if broken.count:
        # The config, not the agent, is wrong: that is a usage error, not a failed gate.
        print(f"otel-tooleval: {broken}", file=sys.stderr)
        usable = False
    if targets is not None:
        delivered, counts = targets.finish(args.delivery_timeout)
        for line in counts:
            print(f"otel-tooleval: --to {line}", file=sys.stderr)
        if not delivered and not args.allow_delivery_errors:
            print("otel-tooleval: not every verdict was delivered (--allow-delivery-errors "
                  "to gate on the grading alone)", file=sys.stderr)
            usable = False
    if not usable:
        return 2
    code = 0 if aggregate_passed(outcome.aggregate) else 1
    return max(code, baseline_code, gate.save()) if gate is not None else code


def _baseline_gate(args: argparse.Namespace) -> BaselineGate | None:
    from .baseline import BaselineGate

    return (BaselineGate(args.baseline, update=args.update_baseline) if args.baseline
            else None)


def _writer(args: argparse.Namespace, out_stream: TextIO) -> ReportWriter:
    from .outputs import HtmlWriter, JsonWriter, JunitWriter, TableWriter

    if args.format == "json":
        return JsonWriter(include_calls=args.include_calls)
    if args.format == "junit":
        return JunitWriter()
    if args.format == "html":
        return HtmlWriter()
    color = (args.output is None and out_stream.isatty() and not os.environ.get("NO_COLOR"))
    return TableWriter(color=color)


class _ProblemLines:
    """Input problems on stderr, capped per file: the first ``SHOWN`` of each file, then one
    line with the count of the rest (a file that is not what it seems gives one problem per
    line; the report itself lists them all, or its own first ones)."""

    SHOWN = 5

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, problem: InputProblem) -> None:
        n = self.counts[problem.path] = self.counts.get(problem.path, 0) + 1
        if n <= self.SHOWN:
            print(f"otel-tooleval: {problem}", file=sys.stderr)

    def close(self) -> None:
        """The count of each file's problems not shown."""
        for path, n in self.counts.items():
            if n > self.SHOWN:
                print(f"otel-tooleval: {path}: {n - self.SHOWN} more input problem(s) not "
                      f"shown ({n} in all)", file=sys.stderr)
        self.counts.clear()


class _ConfigErrors:
    """The results of graders that met a configuration problem while grading: a count, the
    graders' names and the first by run order (runs come in the order graded)."""

    def __init__(self) -> None:
        self.count = 0
        self.names: set[str] = set()
        self.first: tuple[tuple[int, int, int], str] | None = None

    def add(self, report: RunReport, key: tuple[int, int, int]) -> None:
        for result in report.results:
            if result.error != CONFIGURATION_ERROR:
                continue
            self.count += 1
            self.names.add(result.name)
            if self.first is None or key < self.first[0]:
                where = (f"the first in trace {report.run.trace_id_hex} root "
                         f"{report.run.root_span_id_hex}: {result.name}: {result.explanation}")
                self.first = (key, where)

    def add_session(self, report: SessionReport) -> None:
        for result in report.results:
            if result.error != CONFIGURATION_ERROR:
                continue
            self.count += 1
            self.names.add(result.name)
            if self.first is None:
                where = (f"the first in session {report.key.value}: {result.name}: "
                         f"{result.explanation}")
                self.first = ((0, 0, 0), where)

    def __str__(self) -> str:
        """One line on them, or ''."""
        if self.first is None:
            return ""
        return (f"config problem found while grading ({self.count} result(s) of grader(s) "
                f"{', '.join(sorted(self.names))}), {self.first[1]}")


def _inspect(args: argparse.Namespace) -> int:
    from .files import InputError
    from .inspection import inspect_files
    from .outputs.inspect_report import render_inspect_json, render_inspect_table

    config = (_load_config(args.config, allow_no_graders=True) if args.config else None)
    if args.cases:
        from .config import with_cases
        from .inspection import default_config

        config = with_cases(config if config is not None else default_config(), args.cases)
    shown: list[str] = []
    lines = _ProblemLines()

    def problem(p: InputProblem) -> None:
        shown.append(str(p))
        lines.add(p)

    try:
        found = inspect_files(args.files, config, input_format=args.input_format,
                              on_problem=problem, max_line_bytes=args.max_line_bytes)
    except InputError as exc:
        lines.close()
        print(f"otel-tooleval: {exc}", file=sys.stderr)
        return 2
    lines.close()
    render = render_inspect_json if args.format == "json" else render_inspect_table
    sys.stdout.write(render(found, shown))
    return 0


def _diff(args: argparse.Namespace) -> int:
    from .diff import DiffInputError
    from .diff_inputs import diff_inputs
    from .outputs.diff_report import RENDERERS

    if args.cases and not args.config:
        print("otel-tooleval diff: --cases needs --config FILE (they grade trace files)",
              file=sys.stderr)
        return 2
    config = None
    if args.config:
        config = _load_config(args.config, [args.baseline, args.candidate])
        if args.cases:
            from .config import with_cases

            config = with_cases(config, args.cases)
    try:
        report = diff_inputs(args.baseline, args.candidate, config, threshold=args.threshold,
                             fail_on=args.fail_on)
    except DiffInputError as exc:
        print(f"otel-tooleval diff: {exc}", file=sys.stderr)
        return 2
    text = RENDERERS[args.format](report)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            print(f"otel-tooleval diff: cannot write {args.output}: {exc.strerror or exc}",
                  file=sys.stderr)
            return 2
    else:
        sys.stdout.write(text)
    return 1 if report.failed else 0


def _threshold(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number >= 0")
    return value


def _schema(args: argparse.Namespace) -> int:
    from .schema import config_schema

    json.dump(config_schema(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def _params(grader: object) -> object:
    """A grader's resolved options as plain data (pydantic models and dataclasses unfolded)."""
    params = getattr(grader, "params", None)
    if params is None:
        params = getattr(grader, "spec", None)
    return _plain(params)


def _plain(value: object) -> object:
    if hasattr(value, "model_dump"):
        return value.model_dump(exclude_none=True, mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@contextlib.contextmanager
def _serve_logging(level: str) -> Iterator[None]:
    """Log records of the package (serve's one line per graded run at INFO, problems at
    WARNING and above) to stderr as bare messages, as the other serve lines are printed;
    uvicorn's warnings (``uvicorn.error``: bytes that are not HTTP, named by sender) the same
    way, under the same level, and other libraries' warnings (the OTel SDK's exporters) as
    Python's last-resort handler would print them. Every line has its control and bidi
    characters escaped (``serve.log_lines``); refusal and forwarding-failure lines are
    throttled (``serve.throttle``), and a last line says how many were left out."""
    from .serve.log_lines import EscapingFormatter
    from .serve.throttle import RefusalThrottle

    root = logging.getLogger()
    package = logging.getLogger("otel_tooleval")
    uvicorn_log = logging.getLogger("uvicorn.error")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(EscapingFormatter("%(message)s"))
    throttle = RefusalThrottle()
    handler.addFilter(throttle)
    previous = package.level, uvicorn_log.level, uvicorn_log.propagate
    # On the root logger: the package's records reach it, and so do the SDK's, which would
    # otherwise go to logging.lastResort unescaped.
    root.addHandler(handler)
    package.setLevel(level.upper())
    # uvicorn's INFO lines (its own start and stop) are not serve's: WARNING at the least.
    uvicorn_log.addHandler(handler)
    uvicorn_log.setLevel(max(logging.WARNING, logging.getLevelName(level.upper())))
    uvicorn_log.propagate = False
    try:
        yield
    finally:
        summary = throttle.summary()
        if summary is not None:
            print(summary, file=sys.stderr, flush=True)
        root.removeHandler(handler)
        uvicorn_log.removeHandler(handler)
        package.setLevel(previous[0])
        uvicorn_log.setLevel(previous[1])
        uvicorn_log.propagate = previous[2]


def _serve(args: argparse.Namespace) -> int:
    with _serve_logging("warning" if args.quiet else args.log_level):
        return _serve_logged(args)


def _serve_logged(args: argparse.Namespace) -> int:
    from .serve import options_from_args
    from .serve.process import run

    try:
        options = options_from_args(
            _load_config(args.config), grpc=None if args.grpc == "off" else args.grpc,
            http=None if args.http == "off" else args.http, forward=args.forward,
            forward_protocol=args.forward_protocol, decision_wait=args.decision_wait,
            max_buffered_spans=args.max_buffered_spans,
            max_buffered_bytes=args.max_buffered_bytes, max_body_bytes=args.max_body_bytes,
            shutdown_timeout=args.shutdown_timeout, read_timeout=args.read_timeout,
            tls_cert=args.tls_cert, tls_key=args.tls_key, tls_client_ca=args.tls_client_ca,
            bearer_token_file=args.bearer_token_file, insecure_bind=args.insecure_bind,
            forward_timeout=args.forward_timeout, forward_workers=args.forward_workers,
            idle_timeout=args.idle_timeout, max_connections=args.max_connections,
            max_connections_per_peer=args.max_connections_per_peer,
            backlog=args.backlog, max_inflight_bytes=args.max_inflight_bytes,
            max_concurrent_rpcs=args.max_concurrent_rpcs,
            max_connection_age=args.max_connection_age, workers=args.workers,
            metrics=args.metrics)
    except ValueError as exc:
        print(f"otel-tooleval serve: {exc}", file=sys.stderr)
        return 2
    return run(options)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return value


def _positive(text: str) -> int:
    value = _count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


def _max_line_bytes(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--max-line-bytes", type=_positive, default=DEFAULT_MAX_LINE_BYTES, metavar="N",
        help="the longest JSON line or single JSON document read; a longer one is unreadable "
             f"input, exit 2 (default {DEFAULT_MAX_LINE_BYTES}: 64 MiB)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otel-tooleval",
        description="Grade what AI agents do with their tools, live, inside OpenTelemetry.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="run a scripted agent and grade it live",
        description="Run a scripted agent (no model, no network) under a ToolEvalSpanProcessor "
                    "and print its verdicts; with an OTLP endpoint the trace and its verdicts "
                    "go there too (search tooleval.passed=false in Jaeger). --print-config "
                    "shows the config it grades with, a start for your own.")
    demo.add_argument("--config", help="grader config (default: the embedded demo config)")
    demo.add_argument("--endpoint", help="OTLP endpoint (default: OTEL_EXPORTER_OTLP_ENDPOINT)")
    demo.add_argument("--print-config", action="store_true",
                      help="print the embedded demo config and exit")
    demo.set_defaults(func=_demo)
    check = sub.add_parser(
        "check", help="validate a config and print the normalised graders",
        description="Validate a config file and print it normalised, as JSON: each grader with "
                    "its options resolved and every section with its defaults filled in. Exit "
                    "0 when valid, 2 with every problem and its location (graders[0].config...) "
                    "when not.")
    check.add_argument("config", help="the config file (YAML or JSON)")
    check.set_defaults(func=_check)
    grade = sub.add_parser(
        "grade", help="grade exported trace files (a CI gate)",
        description="Grade the agent runs in exported traces: OTLP/JSON (the collector's file "
                    "exporter, JSON lines or one document), OTLP protobuf, Jaeger JSON; gzip "
                    "is detected. Exit 0 when every run and aggregate gate passed, 1 when one "
                    "failed, 2 for bad usage, a bad config, unreadable input, or no agent "
                    "run found (fewer than --min-runs).")
    grade.add_argument("files", nargs="+", metavar="FILE", help="trace files; - for stdin")
    grade.add_argument("--config", "-c", required=True, help="grader config (YAML or JSON)")
    grade.add_argument("--format", "-f", choices=["table", "json", "junit", "html"],
                       default="table",
                       help="the report: table (default), json (one document, docs/grade.md), "
                            "junit (one testcase per run and grader, for CI), html (one "
                            "self-contained page)")
    grade.add_argument("--output", "-o", help="write the report here instead of stdout")
    grade.add_argument("--cases", metavar="FILE",
                       help="eval cases (YAML, JSON or JSONL), added to the config's cases: "
                            "each run graded by its case's expectations (docs/cases.md)")
    grade.add_argument("--input-format", choices=list(FORMATS), help="skip format detection")
    _max_line_bytes(grade)
    grade.add_argument("--allow-input-problems", action="store_true",
                       help="exit by the verdicts even when malformed parts of the input were "
                            "skipped (default: exit 2)")
    grade.add_argument("--group-by", metavar="ATTRIBUTE",
                       help="root-span attribute grouping runs for the aggregate gates")
    grade.add_argument("--allow-empty", action="store_true",
                       help="exit by the verdicts even when no agent run was found "
                            "(default: exit 2, a gate never passes on nothing)")
    grade.add_argument("--min-runs", type=_count, default=1, metavar="N",
                       help="exit 2 when fewer than N agent runs were found (default 1)")
    grade.add_argument("--strict-reading", action="store_true",
                       help="exit 2 when a run's model requests and tool spans disagree (an "
                            "unrequested execution, an unexecuted request); config: "
                            "runs.strict_reading")
    grade.add_argument("--to", action="append", choices=SINK_FIELDS, metavar="BACKEND",
                       help=f"also deliver the verdicts to a backend ({', '.join(SINK_FIELDS)}; "
                            "repeatable): settings from the config's emit section, else the "
                            "backend's environment variables")
    grade.add_argument("--allow-delivery-errors", action="store_true",
                       help="exit on the grading alone when --to could not deliver everything")
    grade.add_argument("--delivery-timeout", type=float, default=60.0, metavar="SECONDS",
                       help="how long --to may take after grading (default 60)")
    grade.add_argument("--include-calls", action="store_true",
                       help="with --format json: each run's tool calls too (docs/inspect.md)")
    grade.add_argument("--baseline", metavar="FILE",
                       help="also compare with this grade --format json file as "
                            "'otel-tooleval diff' does (its table on stderr); exit 1 on a "
                            "per-case regression, 2 when FILE is not a grade document "
                            "(docs/diff.md)")
    grade.add_argument("--update-baseline", action="store_true",
                       help="with --baseline: write this run's grade JSON over FILE (created "
                            "when missing; regressions are shown, not failed)")
    grade.set_defaults(func=_grade)
    inspect = sub.add_parser(
        "inspect", help="show the runs, calls and unused spans read from trace files",
        description="Read trace files as grade does and show what was found: each run with "
                    "its calls (and the convention that recognised each), then the spans not "
                    "used, by instrumentation scope and by attributes that look like tool, "
                    "agent or model markers. Exit 0 when the input was read (even with no "
                    "run), 2 when a file is unreadable. See docs/inspect.md.")
    inspect.add_argument("files", nargs="+", metavar="FILE", help="trace files; - for stdin")
    inspect.add_argument("--config", "-c",
                         help="config whose runs: section cuts the runs (default: defaults)")
    inspect.add_argument("--cases", metavar="FILE",
                         help="eval cases (as grade --cases): which case each run matched and "
                              "why, the nearest case for a run with none (docs/cases.md)")
    inspect.add_argument("--format", "-f", choices=["table", "json"], default="table")
    inspect.add_argument("--input-format", choices=list(FORMATS), help="skip format detection")
    _max_line_bytes(inspect)
    inspect.set_defaults(func=_inspect)
    serve = sub.add_parser(
        "serve", help="an OTLP trace receiver that grades agent runs and forwards the traces",
        description="Receive OTLP traces (gRPC, and HTTP with protobuf or JSON), grade the agent "
                    "runs in them, and forward every span (run roots with their verdicts), "
                    "plus log events and metrics, to the next OTLP endpoint. SIGTERM drains "
                    "and forwards everything accepted. GET /healthz on the HTTP port tells "
                    "readiness and counts. One line per graded run on stderr.")
    serve.add_argument("--config", "-c", required=True, help="grader config (YAML or JSON)")
    serve.add_argument("--grpc", default="127.0.0.1:4317", metavar="HOST:PORT",
                       help="OTLP/gRPC listen address, or 'off' (default 127.0.0.1:4317)")
    serve.add_argument("--http", default="127.0.0.1:4318", metavar="HOST:PORT",
                       help="OTLP/HTTP listen address, or 'off' (default 127.0.0.1:4318)")
    serve.add_argument("--forward", metavar="URL",
                       help="next OTLP endpoint (default OTEL_EXPORTER_OTLP_ENDPOINT; with "
                            "neither, nowhere: runs are graded and their verdicts logged); "
                            "'none' forwards nowhere on purpose")
    serve.add_argument("--forward-protocol", choices=["grpc", "http/protobuf"],
                       help="default OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else "
                       "OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf")
    serve.add_argument("--decision-wait", type=float, default=5.0, metavar="SECONDS",
                       help="wait after a trace's local root arrives, for late children "
                            "(default 5)")
    serve.add_argument("--max-buffered-spans", type=int, default=500_000, metavar="N",
                       help="spans held at once before senders are told to retry "
                            "(default 500000)")
    serve.add_argument("--max-buffered-bytes", type=int, default=512 * 1024 * 1024,
                       metavar="N",
                       help="memory that spans held for grading may take (estimated per span "
                            "from its attributes, events and encoded size) before senders are "
                            "told to retry (default 512 MiB)")
    serve.add_argument("--max-body-bytes", type=int, default=20 * 1024 * 1024, metavar="N",
                       help="largest request body, after decompression (default 20 MiB)")
    serve.add_argument("--shutdown-timeout", type=float, default=30.0, metavar="SECONDS",
                       help="time to drain on SIGTERM (default 30)")
    serve.add_argument("--read-timeout", type=float, default=30.0, metavar="SECONDS",
                       help="HTTP: time a request gets to arrive whole, headers and body, "
                            "from its first byte (or from connecting); then the connection is "
                            "closed unanswered (default 30)")
    serve.add_argument("--forward-timeout", type=float, metavar="SECONDS",
                       help="time for one request to the next hop (default "
                            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, else OTEL_EXPORTER_OTLP_TIMEOUT, "
                            "in ms, else 10 s)")
    serve.add_argument("--forward-workers", type=int, default=2, metavar="N",
                       help="threads sending to the next hop, each with its own connection "
                            "(default 2)")
    security = serve.add_argument_group("TLS and authentication (docs/serve.md)")
    security.add_argument("--tls-cert", metavar="FILE",
                          help="PEM certificate chain: both receivers speak TLS (with --tls-key); "
                               "SIGHUP re-reads it and the key")
    security.add_argument("--tls-key", metavar="FILE", help="PEM private key of --tls-cert")
    security.add_argument("--tls-client-ca", metavar="FILE",
                          help="mTLS: clients must present a certificate signed by this CA")
    security.add_argument("--bearer-token-file", metavar="FILE",
                          help="accepted bearer tokens, one a line (# comments); requests "
                               "need 'Authorization: Bearer TOKEN'; SIGHUP re-reads it")
    security.add_argument("--insecure-bind", action="store_true",
                          help="allow an address beyond loopback without TLS and a token "
                               "(or client certificates)")
    serve.add_argument("--idle-timeout", type=float, default=60.0, metavar="SECONDS",
                       help="an idle keep-alive HTTP connection, or an idle gRPC connection, "
                            "is closed after this (default 60)")
    serve.add_argument("--max-connections", type=int, default=1024, metavar="N",
                       help="HTTP connections open at once; the requests of those beyond are "
                            "answered 503 with Retry-After (default 1024)")
    serve.add_argument("--max-connections-per-peer", type=int, metavar="N",
                       help="HTTP connections one client address (IPv6: its /64) may hold "
                            "open at once, TLS handshakes included; those beyond are closed "
                            "unanswered (default: a quarter of --max-connections)")
    serve.add_argument("--backlog", type=int, default=2048, metavar="N",
                       help="listen backlog of the HTTP socket (default 2048)")
    serve.add_argument("--max-inflight-bytes", type=int, default=64 * 1024 * 1024, metavar="N",
                       help="HTTP request bodies being read and decoded at once; a request "
                            "that would go past it is answered 429 unread (default 64 MiB)")
    serve.add_argument("--max-concurrent-rpcs", type=int, default=128, metavar="N",
                       help="gRPC exports in progress at once; beyond, RESOURCE_EXHAUSTED "
                            "with RetryInfo (default 128)")
    serve.add_argument("--max-connection-age", type=float, default=0.0, metavar="SECONDS",
                       help="gRPC: a connection is asked to reconnect after this, to spread "
                            "load behind a balancer (default 0: never)")
    serve.add_argument("--metrics", metavar="HOST:PORT",
                       help="serve its own and the grading metrics for Prometheus to scrape "
                            "on http://HOST:PORT/metrics (the prometheus extra; loopback "
                            "unless --insecure-bind; docs/prometheus.md)")
    serve.add_argument("--workers", type=int, default=8, metavar="N",
                       help="threads that decode and ingest requests, per receiver "
                            "(default 8)")
    verbosity = serve.add_mutually_exclusive_group()
    verbosity.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                           default="info",
                           help="stderr log level (default info: one line per graded run)")
    verbosity.add_argument("--quiet", "-q", action="store_true",
                           help="no line per graded run (--log-level warning)")
    serve.set_defaults(func=_serve)
    diff = sub.add_parser(
        "diff", help="per-case regressions between two grade --format json files (or two "
                     "trace files and a config)",
        description="Compare two grade --format json documents, a baseline and a candidate "
                    "(or trace files, graded with --config first, told apart by content): "
                    "cases paired by id (documents without cases: runs by agent and first "
                    "user message), each grader's score before and after, regressed, improved "
                    "or same. Exit 0 when no case regressed, 1 when one did (--fail-on mean: "
                    "when the mean delta fell), 2 on input problems (a file that is neither a "
                    "grade document nor traces that grade cleanly). See docs/diff.md.")
    diff.add_argument("baseline", metavar="BASELINE",
                      help="grade --format json of the baseline, or its trace file")
    diff.add_argument("candidate", metavar="CANDIDATE",
                      help="grade --format json of the candidate, or its trace file")
    diff.add_argument("--threshold", type=_threshold, default=0.0, metavar="T",
                      help="a score must fall by more than T to regress (and rise by more "
                           "than T to improve); default 0: any drop")
    diff.add_argument("--fail-on", choices=["case", "mean"], default="case",
                      help="exit 1 on any regressed case (default), or on a mean delta "
                           "below -T")
    diff.add_argument("--format", "-f", choices=["table", "json", "markdown", "junit"],
                      default="table",
                      help="table (default), json, markdown (a pull-request comment), junit")
    diff.add_argument("--output", "-o", help="write the report here instead of stdout")
    diff.add_argument("--config", "-c",
                      help="grader config: a side that is a trace file is graded with it, as "
                           "grade does, before the comparison")
    diff.add_argument("--cases", metavar="FILE",
                      help="with --config: eval cases added to the config's (as grade --cases)")
    diff.set_defaults(func=_diff)
    schema = sub.add_parser(
        "schema", help="print the JSON Schema of the config file (for editors)",
        description="Print the JSON Schema of the config file. Save it and point your editor at "
                    "it with a first line '# yaml-language-server: $schema=tooleval.schema.json'.")
    schema.set_defaults(func=_schema)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ConfigError, _Swapped) as exc:
        print(f"otel-tooleval: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:   # e.g. `otel-tooleval schema | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
