"""pytest plugin: capture the spans of the code under test and grade its agent runs.

Registered through the ``pytest11`` entry point, it adds the ``tooleval`` fixture, the
``@pytest.mark.tooleval(config, cases=..., case=...)`` marker and the ``tooleval_config`` ini
option::

    def test_agent(tooleval):
        run_my_agent()                         # traced through the global tracer provider,
        run_other_agent(tooleval.provider)     # or through a provider passed explicitly
        tooleval.assert_passed("graders.yaml", runs=2)

    @pytest.mark.tooleval("graders.yaml", cases="cases.yaml", case="weather-paris")
    def test_paris(tooleval):
        run_my_agent("What is the weather in Paris?")
        tooleval.assert_passed()               # graded by that case's expectations

With ``cases=`` (a case file or a list of case entries, docs/cases.md) each run is graded by
the case it matches, as ``grade --cases`` does; ``case="id"`` grades every run of the test by
that case, whatever its match rule says.

How spans are captured. OpenTelemetry lets the global tracer provider be set once per process,
and a ``ProxyTracer`` handed out before that (``trace.get_tracer(__name__)`` at import time)
binds itself to the first real provider for good. A provider swapped in per test and taken out
again would therefore keep receiving the spans of those tracers in later tests, and the next
test's provider would see nothing. So the global side is process-wide and routed instead:

* global still the default proxy: the plugin sets one SDK ``TracerProvider`` of its own as the
  global provider, on first use, for the rest of the process;
* global already an SDK ``TracerProvider`` (set by the application or a conftest): the plugin adds
  its router processor to it, once; the provider's own processors keep working as before;
* anything else (a no-op or foreign provider): global spans cannot be captured; the fixture warns
  and still captures what goes through ``tooleval.provider``.

The router forwards a span to a test's in-memory exporter only while that test's fixture is
active, so each test sees exactly the spans that *ended* during it, and nothing at all is
recorded between tests. ``tooleval.provider`` is a fresh SDK provider per test, exporting to the
same in-memory exporter, for code that takes a provider explicitly.
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

if TYPE_CHECKING:
    from .config import ToolEvalConfig
    from .model import RunReport

__all__ = ["ToolEval", "ToolEvalCaptureWarning", "describe_failures", "tooleval"]

ConfigSource = Union["ToolEvalConfig", Mapping[str, Any], str, "os.PathLike[str]"]
CasesSource = Union[str, "os.PathLike[str]", Sequence[Any]]

INI_OPTION = "tooleval_config"
MARKER = "tooleval"
TRACER_NAME = "otel_tooleval.pytest"
_MAX_NAMES = 20
_MARKER_KEYS = ("config", "cases", "case")


class ToolEvalCaptureWarning(pytest.PytestWarning):
    """Spans of code that uses the global tracer provider cannot be captured."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        INI_OPTION,
        "otel-tooleval grader config (YAML or JSON file, relative to the ini file) used by the "
        "tooleval fixture when neither the call nor a @pytest.mark.tooleval marker names one",
        type="string",
        default="",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(config, cases=None, case=None): the otel-tooleval grader config (path, "
        "YAML text or mapping) that the tooleval fixture grades this test's agent runs with; "
        "cases: a case file or list of cases, each run graded by the case it matches; "
        "case: the id of the case that grades every run of the test",
    )


# --------------------------------------------------------------------------- global capture


class _CaptureRouter(SpanProcessor):
    """Forwards each ending span to the processors of the tests capturing right now.

    Registered once with the global provider and never removed (the SDK has no way to remove a
    processor): with no test capturing it costs one empty-tuple loop per span.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: tuple[SpanProcessor, ...] = ()   # replaced whole: on_end reads no lock

    def attach(self, processor: SpanProcessor) -> None:
        with self._lock:
            self._active = (*self._active, processor)

    def detach(self, processor: SpanProcessor) -> None:
        with self._lock:
            self._active = tuple(p for p in self._active if p is not processor)

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        for processor in self._active:
            processor.on_end(span)

    def shutdown(self) -> None:
        return None     # shared by every test; the per-test processors are shut down per test

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True     # the per-test processors export synchronously


_ROUTER = _CaptureRouter()
_ROUTED: weakref.WeakSet[TracerProvider] = weakref.WeakSet()
_GLOBAL_LOCK = threading.Lock()


def _route_global_spans() -> bool:
    """Make the global tracer provider feed ``_ROUTER``; False when it cannot be done."""
    with _GLOBAL_LOCK:
        current = trace.get_tracer_provider()
        if isinstance(current, trace.ProxyTracerProvider):
            trace.set_tracer_provider(TracerProvider())
            current = trace.get_tracer_provider()   # whoever won the set-once race
        if not isinstance(current, TracerProvider):
            return False
        if current not in _ROUTED:
            current.add_span_processor(_ROUTER)
            _ROUTED.add(current)
        return True


# --------------------------------------------------------------------------- the fixture


class ToolEval:
    """The ``tooleval`` fixture: the spans one test produced, and their grading.

    Attributes:
        provider: an SDK ``TracerProvider`` of this test alone, for code that takes a provider
            (e.g. pydantic-ai's ``InstrumentationSettings(tracer_provider=...)``).
        tracer: a tracer of ``provider``.
        captures_global: whether spans made through the global tracer provider are captured.
    """

    def __init__(self, node: pytest.Item, pytest_config: pytest.Config) -> None:
        self._node = node
        self._pytest_config = pytest_config
        self._exporter = InMemorySpanExporter()
        self._processor = SimpleSpanProcessor(self._exporter)
        self.provider = TracerProvider(shutdown_on_exit=False)
        self.provider.add_span_processor(self._processor)
        self.tracer = self.provider.get_tracer(TRACER_NAME)
        self.captures_global = _route_global_spans()
        if self.captures_global:
            _ROUTER.attach(self._processor)
        else:
            warnings.warn(ToolEvalCaptureWarning(
                f"tooleval: the global tracer provider is a "
                f"{type(trace.get_tracer_provider()).__name__}, not an OpenTelemetry SDK "
                f"TracerProvider, so spans made through it are not captured; pass "
                f"tooleval.provider to the code under test instead"), stacklevel=2)

    def spans(self) -> tuple[ReadableSpan, ...]:
        """The spans that ended so far in this test, in the order they ended."""
        return self._exporter.get_finished_spans()

    def clear(self) -> None:
        """Forget the spans captured so far (to grade a later phase of the test alone)."""
        self._exporter.clear()

    def grade(self, config: ConfigSource | None = None, *, cases: CasesSource | None = None,
              case: str | None = None) -> list[RunReport]:
        """Grade every agent run in the captured spans.

        Args:
            config: a path (looked up next to the test file first), YAML text, a mapping or a
                loaded config; when None, the ``@pytest.mark.tooleval`` marker's, else the
                ``tooleval_config`` ini option's, else the file named by ``TOOLEVAL_CONFIG``.
            cases: eval cases added to the config's own ``cases:``: a case file (YAML, JSON,
                JSONL or another tool's eval set, looked up next to the test file first) or a
                list of case entries; when None, the marker's ``cases=``. Each run is graded
                by the case it matches (``RunReport.case``).
            case: the id of the case that grades every run, matched or not (its ``expect``
                merged into the configured graders, then its own graders); when None, the
                marker's ``case=``. An id that is no case fails the test, naming it.
        """
        __tracebackhide__ = True
        from .grading import grade_spans

        resolved, case = self._resolve(config, cases, case)
        return grade_spans(self.spans(), resolved, case=case)

    def assert_passed(self, config: ConfigSource | None = None, *,
                      runs: int | None = None, cases: CasesSource | None = None,
                      case: str | None = None) -> list[RunReport]:
        """Grade, and fail the test unless every grader passed on every run and no run
        matched two cases.

        Args:
            config, cases, case: as for :meth:`grade`.
            runs: the number of agent runs expected; when None, at least one.

        Returns:
            The reports, for further checks.

        Raises:
            AssertionError: listing every failing grader of every run with its explanation,
                and how many runs were found when that is not what was expected.
        """
        __tracebackhide__ = True
        reports = self.grade(config, cases=cases, case=case)
        message = describe_failures(reports, runs=runs, spans=len(self.spans()),
                                    captures_global=self.captures_global)
        if message is not None:
            raise AssertionError(message)
        return reports

    def close(self) -> None:
        """Stop capturing (called at teardown); the captured spans stay readable."""
        _ROUTER.detach(self._processor)
        self.provider.shutdown()

    def _resolve(self, config: ConfigSource | None, cases: CasesSource | None,
                 case: str | None) -> tuple[ToolEvalConfig, str | None]:
        """The config to grade with (the cases added) and the case that grades every run."""
        __tracebackhide__ = True
        marked = self._marker()
        loaded = self._resolve_config(config, marked)
        here = self._node.path.parent
        where = "the argument"
        if cases is None and "cases" in marked:
            cases, where = marked["cases"], _MARKED
        if cases is not None:
            loaded = _add_cases(loaded, cases, here, where)
        where = "the argument"
        if case is None and "case" in marked:
            case, where = marked["case"], _MARKED
        if case is not None:
            _check_case(loaded, case, where)
        return loaded, case

    def _resolve_config(self, config: ConfigSource | None,
                        marked: Mapping[str, Any]) -> ToolEvalConfig:
        __tracebackhide__ = True
        from .config import ConfigError, load_config

        base = self._node.path.parent
        where = "the argument"
        if config is None:
            config, where, base = self._default_config(marked)
        try:
            return load_config(_near(config, base))
        except ConfigError as exc:
            problem = str(exc)
        pytest.fail(f"tooleval: bad config in {where}: {problem}", pytrace=False)  # no chaining

    def _marker(self) -> dict[str, Any]:
        """The closest ``@pytest.mark.tooleval``'s config, cases and case (those it gives)."""
        __tracebackhide__ = True
        marker = self._node.get_closest_marker(MARKER)
        if marker is None:
            return {}
        unknown = sorted(set(marker.kwargs) - set(_MARKER_KEYS))
        configs = [*marker.args, *([marker.kwargs["config"]] if "config" in marker.kwargs
                                   else [])]
        if unknown or len(configs) > 1 or not (configs or set(marker.kwargs) & {"cases", "case"}):
            extra = f" (unknown: {', '.join(unknown)})" if unknown else ""
            pytest.fail("tooleval: @pytest.mark.tooleval takes exactly one config (a path, YAML "
                        "text or a mapping), positional or as config=, and optionally cases= "
                        f"and case={extra}", pytrace=False)
        marked = {k: v for k, v in marker.kwargs.items() if k != "config"}
        if configs:
            marked["config"] = configs[0]
        return marked

    def _default_config(self, marked: Mapping[str, Any]) -> tuple[ConfigSource, str, Path]:
        __tracebackhide__ = True
        if "config" in marked:
            return marked["config"], _MARKED, self._node.path.parent
        ini = self._pytest_config.getini(INI_OPTION)
        if isinstance(ini, str) and ini.strip():
            inipath = self._pytest_config.inipath
            base = inipath.parent if inipath is not None else self._pytest_config.rootpath
            return (base / ini.strip(), f"the {INI_OPTION} ini option", base)
        env = os.environ.get("TOOLEVAL_CONFIG")
        if env:
            return Path(env), "the TOOLEVAL_CONFIG environment variable", Path.cwd()
        pytest.fail(
            "tooleval: no grader config: pass one to tooleval.grade()/assert_passed(), mark "
            "the test with @pytest.mark.tooleval(config), or set the tooleval_config ini option",
            pytrace=False)


_MARKED = "the @pytest.mark.tooleval marker"


def _add_cases(config: ToolEvalConfig, cases: CasesSource, base: Path,
               where: str) -> ToolEvalConfig:
    """``config`` with ``cases`` after its own; a bad case set fails the test, saying where."""
    __tracebackhide__ = True
    from .config import ConfigError, with_cases

    if isinstance(cases, (str, os.PathLike)):
        text = os.fspath(cases)   # next to the test file first, as a config's path
        source: CasesSource = (os.fspath(base / text)
                               if not os.path.isabs(text) and _is_file(base / text) else text)
    elif isinstance(cases, (list, tuple)):
        source = cases
    else:
        pytest.fail(f"tooleval: bad cases in {where}: cases= takes a case file's path or a "
                    f"list of case entries, got {type(cases).__name__}", pytrace=False)
    try:
        return with_cases(config, source)
    except ConfigError as exc:
        problem = str(exc)
    pytest.fail(f"tooleval: bad cases in {where}: {problem}", pytrace=False)


def _check_case(config: ToolEvalConfig, case: Any, where: str) -> None:
    """Fail the test unless ``case`` is the id of one of the config's cases."""
    __tracebackhide__ = True
    if not isinstance(case, str):
        pytest.fail(f"tooleval: case= in {where} takes a case id (a string), got "
                    f"{type(case).__name__}", pytrace=False)
    if case in config.case_graders:
        return
    ids = [c.id for c in config.cases.cases] if config.cases is not None else []
    known = (f"the cases are: {', '.join(repr(i) for i in ids[:_MAX_NAMES])}"
             + (f" ... {len(ids) - _MAX_NAMES} more" if len(ids) > _MAX_NAMES else "")
             if ids else "there are no cases: give cases= or a config with cases:")
    pytest.fail(f"tooleval: unknown case {case!r} in {where}: {known}", pytrace=False)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):   # a name too long or with a NUL byte
        return False


def _near(config: ConfigSource, base: Path) -> ConfigSource:
    """A relative path that names a file next to ``base`` becomes that file; others unchanged."""
    if not isinstance(config, (str, os.PathLike)):
        return config
    text = os.fspath(config)
    if "\n" in text:
        return config            # YAML text
    candidate = Path(text)
    if candidate.is_absolute():
        return config
    try:
        return base / candidate if (base / candidate).is_file() else config
    except (OSError, ValueError):   # a name too long or with a NUL byte: YAML text after all
        return config


@pytest.fixture
def tooleval(request: pytest.FixtureRequest) -> Iterator[ToolEval]:
    """Capture this test's spans in memory and grade its agent runs (see :class:`ToolEval`)."""
    capture = ToolEval(request.node, request.config)
    try:
        yield capture
    finally:
        capture.close()


# --------------------------------------------------------------------------- the message


def describe_failures(reports: Sequence[RunReport], *, runs: int | None = None,
                      spans: int | None = None, captures_global: bool = True) -> str | None:
    """The assertion message for these reports, or None when they pass.

    They fail when a run failed or matched two or more cases (``RunReport.ambiguous``), when
    ``runs`` is given and differs from the number of runs, or when ``runs`` is None and there
    is no run at all (a test that grades nothing must not pass by accident).
    """
    failed = [r for r in reports if not r.passed or r.ambiguous]
    count_ok = len(reports) == runs if runs is not None else bool(reports)
    if not failed and count_ok:
        return None
    found = f"{len(reports)} agent run{'' if len(reports) == 1 else 's'}"
    in_spans = f" in {spans} captured span{'' if spans == 1 else 's'}" if spans is not None else ""
    heads: list[str] = []
    if not count_ok:
        expected = f"expected {runs}" if runs is not None else "expected at least one"
        heads.append(f"{expected} agent run{'' if runs in (1, None) else 's'}, found {len(reports)}"
                     f"{in_spans}")
    if failed:
        heads.append(f"{len(failed)} of {found} failed")
    lines = ["tooleval: " + "; ".join(heads)]
    if spans == 0:
        lines.append("  no span was captured: does the code under test trace through the global "
                     "tracer provider" + (" (not captured here, see the warning)"
                                          if not captures_global else "")
                     + " or through tooleval.provider?")
    for number, report in enumerate(reports, 1):
        verdict = "passed" if report.passed and not report.ambiguous else "FAILED"
        lines.append(f"run {number} of {len(reports)} {verdict}: " + _run_summary(report))
        if report.ambiguous:
            lines.append(f"  - it matches {len(report.ambiguous)} cases ("
                         + ", ".join(repr(c) for c in report.ambiguous)
                         + "): a run belongs to one case; it was graded by the shared graders")
        for result in report.results:
            if result.passed:
                continue
            label = f"error ({result.error})" if result.error else result.label
            lines.append(f"  - {result.name} [{result.type}] {label}, score {result.score:.2f}: "
                         f"{result.explanation}")
    return "\n".join(lines)


def _run_summary(report: RunReport) -> str:
    run = report.run
    names = [call.name for call in run.calls[:_MAX_NAMES]]
    if len(run.calls) > _MAX_NAMES:
        names.append(f"... {len(run.calls) - _MAX_NAMES} more")
    pending = f", {run.pending_calls} pending" if run.pending_calls else ""
    calls = f"{len(run.calls)} tool call{'' if len(run.calls) == 1 else 's'}{pending}"
    case = f"case {report.case!r}, " if report.case is not None else ""
    return (f"{case}agent {run.agent!r}, trace {run.trace_id_hex}, {calls}"
            + (f" ({', '.join(names)})" if names else ""))
