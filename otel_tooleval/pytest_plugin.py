"""pytest plugin: capture the spans of the code under test and grade its agent runs.

Registered through the ``pytest11`` entry point, it adds the ``tooleval`` fixture, the
``@pytest.mark.tooleval(config)`` marker and the ``tooleval_config`` ini option::

    def test_agent(tooleval):
        run_my_agent()                         # traced through the global tracer provider,
        run_other_agent(tooleval.provider)     # or through a provider passed explicitly
        tooleval.assert_passed("graders.yaml", runs=2)

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

INI_OPTION = "tooleval_config"
MARKER = "tooleval"
TRACER_NAME = "otel_tooleval.pytest"
_MAX_NAMES = 20


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
        f"{MARKER}(config): the otel-tooleval grader config (path, YAML text or mapping) that "
        "the tooleval fixture grades this test's agent runs with",
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

    def grade(self, config: ConfigSource | None = None) -> list[RunReport]:
        """Grade every agent run in the captured spans.

        Args:
            config: a path (looked up next to the test file first), YAML text, a mapping or a
                loaded config; when None, the ``@pytest.mark.tooleval`` marker's, else the
                ``tooleval_config`` ini option's, else the file named by ``TOOLEVAL_CONFIG``.
        """
        from .grading import grade_spans

        return grade_spans(self.spans(), self._resolve_config(config))

    def assert_passed(self, config: ConfigSource | None = None, *,
                      runs: int | None = None) -> list[RunReport]:
        """Grade, and fail the test unless every grader passed on every run.

        Args:
            config: as for :meth:`grade`.
            runs: the number of agent runs expected; when None, at least one.

        Returns:
            The reports, for further checks.

        Raises:
            AssertionError: listing every failing grader of every run with its explanation,
                and how many runs were found when that is not what was expected.
        """
        __tracebackhide__ = True
        reports = self.grade(config)
        message = describe_failures(reports, runs=runs, spans=len(self.spans()),
                                    captures_global=self.captures_global)
        if message is not None:
            raise AssertionError(message)
        return reports

    def close(self) -> None:
        """Stop capturing (called at teardown); the captured spans stay readable."""
        _ROUTER.detach(self._processor)
        self.provider.shutdown()

    def _resolve_config(self, config: ConfigSource | None) -> ToolEvalConfig:
        __tracebackhide__ = True
        from .config import ConfigError, load_config

        base = self._node.path.parent
        where = "the argument"
        if config is None:
            config, where, base = self._default_config()
        try:
            return load_config(_near(config, base))
        except ConfigError as exc:
            problem = str(exc)
        pytest.fail(f"tooleval: bad config in {where}: {problem}", pytrace=False)  # no chaining

    def _default_config(self) -> tuple[ConfigSource, str, Path]:
        __tracebackhide__ = True
        marker = self._node.get_closest_marker(MARKER)
        if marker is not None:
            values = [*marker.args, *marker.kwargs.values()]
            if len(values) != 1 or set(marker.kwargs) - {"config"}:
                pytest.fail("tooleval: @pytest.mark.tooleval takes exactly one config "
                            "(a path, YAML text or a mapping), positional or as config=",
                            pytrace=False)
            return values[0], "the @pytest.mark.tooleval marker", self._node.path.parent
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

    They fail when a run failed, when ``runs`` is given and differs from the number of runs,
    or when ``runs`` is None and there is no run at all (a test that grades nothing must not
    pass by accident).
    """
    failed = [r for r in reports if not r.passed]
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
        lines.append(f"run {number} of {len(reports)} {'passed' if report.passed else 'FAILED'}: "
                     + _run_summary(report))
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
    return (f"agent {run.agent!r}, trace {run.trace_id_hex}, {calls}"
            + (f" ({', '.join(names)})" if names else ""))
