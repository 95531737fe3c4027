"""``grading.mode: process``: graders in a child process, verdicts identical to the thread's.

Real child processes (``sys.executable``), real SDK providers with in-memory exporters; the
faults are real too: the child is killed, stopped (SIGSTOP: a hang), or cannot load the config.
"""

from __future__ import annotations

import enum
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from otel_tooleval import ConfigError, ToolEvalSpanProcessor, grader, load_config
from otel_tooleval.config import config_from_mapping
from otel_tooleval.offload import GradingProcess, process_unavailable
from otel_tooleval.worker import encode, plain, read_frame
from tests.bench.bench_overhead import CONFIG as EVERY_FAMILY
from tests.support.harness import Harness

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _config(base: dict[str, Any], **grading: Any) -> dict[str, Any]:
    return {**base, "grading": {"mode": "process", **grading}}


def _offload(h: Harness) -> GradingProcess:
    offload = h.processor._offload
    assert offload is not None
    return offload


def _wait_ready(h: Harness, timeout: float = 30.0) -> GradingProcess:
    """Start the grading process (it starts with the first run) and wait until it answers."""
    offload = _offload(h)
    deadline = time.monotonic() + timeout
    h.agent_run(["search"], agent="warm-up")
    while not offload.ready:
        assert time.monotonic() < deadline, "the grading process did not start"
        time.sleep(0.02)
    assert h.flush()
    return offload


def _workload(h: Harness) -> None:
    """Runs that pass and fail, with arguments, results and a nested agent."""
    with h.agent("coder"):   # passes every grader of EVERY_FAMILY
        h.tool("read_file", {"path": "src/app/main.py"}, {"content": "def main(): ..."})
        h.tool("search", {"query": "def main"}, ["src/app/main.py:1"])
        h.tool("write_file", {"path": "src/app/main.py", "content": "..."}, {"ok": True})
        h.tool("run_tests", {"selector": "tests"}, {"passed": 1})
        h.tool("run_tests", {"selector": "tests"}, {"passed": 1})
        h.tool("bash", {"command": "ls -la src/app"}, "main.py\n__init__.py\n")
    h.agent_run(["search", "delete_file"], agent="coder")
    with h.agent("outer"):
        h.tool("read_file", {"path": "x.py"}, {"content": "def main"})
        with h.agent("inner"):
            h.tool("search", {"query": "def main"}, ["a.py:1"])
    h.agent_run([], agent="idle")


def _roots(h: Harness) -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    return sorted((
        (s.name, dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events])
        for s in h.finished() if s.parent is None and s.attributes
        and "gen_ai.agent.name" in s.attributes and s.attributes["gen_ai.agent.name"] != "warm-up"
    ), key=repr)


def _logs(h: Harness) -> list[tuple[Any, ...]]:
    """Log events, each with the name of the span whose context it is in (ids differ)."""
    names = {s.context.span_id: s.name for s in h.finished()}
    return sorted(
        (r.log_record.event_name, names[r.log_record.span_id],
         tuple(sorted(dict(r.log_record.attributes or {}).items())))
        for r in h.logs.get_finished_logs()
        if (r.log_record.attributes or {}).get("gen_ai.agent.name") != "warm-up")


def _points(h: Harness, name: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(sorted(dict(p.attributes).items())),
                   getattr(p, "sum", None), getattr(p, "value", None))
                  for p in h.metric_points(name)
                  if dict(p.attributes).get("gen_ai.agent.name") != "warm-up")


def _timeless(value: Any) -> Any:
    """Details without measured durations (the two sides' spans took different times)."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k != "duration_ms"}
    if isinstance(value, (list, tuple)):
        return [_timeless(v) for v in value]
    return value


@pytest.fixture
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[Harness, Harness]]:
    """The same config graded on a thread and in a process."""
    options = getattr(request, "param", {})
    thread = Harness(EVERY_FAMILY, **options)
    process = Harness(_config(EVERY_FAMILY), **options)
    yield thread, process
    thread.close()
    process.close()


@pytest.mark.parametrize("pair", [{}, {"on_report": None}], indirect=True,
                         ids=["on_report", "no_callback"])
def test_process_mode_emits_what_the_thread_emits(pair: tuple[Harness, Harness]) -> None:
    thread, process = pair
    _wait_ready(process)
    thread.agent_run(["search"], agent="warm-up")   # the same on both sides (left out below)
    for h in pair:
        _workload(h)
        assert h.flush()
    assert _offload(process).starts == 1
    roots = _roots(process)
    assert [name for name, _, _ in roots] == [
        "invoke_agent coder", "invoke_agent coder", "invoke_agent idle", "invoke_agent outer"]
    assert roots == _roots(thread)
    assert any(a["tooleval.passed"] is False for _, a, _ in roots)
    assert any(a["tooleval.passed"] is True for _, a, _ in roots)
    assert _logs(process) == _logs(thread) and _logs(process)
    for metric in ("gen_ai.evaluation.score", "tooleval.runs",
                   "tooleval.tool_selection.true_positives"):
        assert _points(process, metric) == _points(thread, metric), metric
        assert _points(process, metric), metric
    assert process.processor.stats() == thread.processor.stats()
    # counted against the verdicts themselves, not only the thread (a bug both share passes)
    verdicts = [s.attributes["tooleval.passed"] for s in process.finished()
                if s.attributes and "tooleval.passed" in s.attributes]   # the warm-up's too
    stats = process.processor.stats()
    assert stats["runs"] == len(verdicts) == len(roots) + 1
    assert stats["runs.failed"] == verdicts.count(False) > 0
    if thread.reports:   # whole reports for the callback, details included
        def reports(h: Harness) -> list[str]:
            ids = {f"{s.context.span_id:016x}": s.name for s in h.finished()}
            texts = []
            for r in h.reports:
                text = str(_timeless({**r.to_dict(), "trace_id": None,
                                      "root_span_id": ids[r.run.root_span_id_hex]}))
                # span ids in details (violations) differ between the two harnesses too
                texts.append(re.sub(r"'([0-9a-f]{16})'",
                                    lambda m: repr(ids.get(m.group(1), m.group(1))), text))
            return sorted(texts)
        assert reports(process) == reports(thread)
        assert any(r.results[0].details for r in process.reports)
    else:
        assert not process.reports


def test_calls_kept_in_span_events_are_graded_by_the_process_as_on_the_thread() -> None:
    # Strands' default telemetry: the arguments, result and answer only in span events.
    config = {"graders": [
        {"name": "args", "type": "tool_trajectory", "mode": "in_order",
         "expected": [{"tool": "get_weather", "args": {"city": "Paris"}}]},
        {"name": "output", "type": "tool-call-output",
         "tool_outputs": [{"name": "get_weather", "output": "21"}]},
        {"name": "answer", "kind": "tool", "function": "contains",
         "extractor": "last_assistant", "ground_truth": "Paris 21C"}]}
    results = []
    for h in (Harness(config), Harness(_config(config))):
        try:
            if h.processor._offload is not None:
                _wait_ready(h)
            tracer = h.provider.get_tracer("strands.telemetry.tracer")
            with tracer.start_as_current_span("invoke_agent weather", attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": "weather"}) as root:
                with tracer.start_as_current_span("execute_tool get_weather", attributes={
                        "gen_ai.tool.name": "get_weather"}) as tool:
                    tool.add_event("gen_ai.tool.message", {"content": '{"city": "Paris"}'})
                    tool.add_event("gen_ai.choice", {"message": '[{"text": "21"}]'})
                root.add_event("gen_ai.choice", {"message": "Paris 21C\n"})
            assert h.flush()
            (span,) = h.by_name("invoke_agent weather")
            results.append([dict(e.attributes or {}) for e in span.events
                            if e.name == "gen_ai.evaluation.result"])
            assert span.attributes is not None and span.attributes["tooleval.passed"] is True
            assert not h.processor._reported   # no batch fell back to the thread
        finally:
            h.close()
    thread, process = results
    assert process == thread and len(process) == 3


def test_sessions_are_graded_in_process_mode_as_on_the_thread() -> None:
    # Runs go to the grading process; their sessions are filed and graded in this process.
    from tests.test_sessions import TURNS, conversation
    from tests.test_sessions import config as session_config

    outcomes = []
    for h_config in (session_config(), _config(session_config())):
        got: list[Any] = []
        h = Harness(h_config, on_session=got.append)
        try:
            offload = h.processor._offload
            if offload is not None:
                _wait_ready(h)
                handed: list[int] = []
                submit = offload.submit
                offload.submit = (  # type: ignore[method-assign]
                    lambda *a, _h=handed, _s=submit, **k: _h.append(1) or _s(*a, **k))
            conversation(h, "p-1", TURNS)
            conversation(h, "p-2", ["pay", "search"])
            h.processor.end_session("p-1")
            assert h.flush()
            if offload is not None:
                assert len(handed) == 5              # every run of both sessions went there
                assert not h.processor._reported     # and none fell back to the thread
            roots = [s for s in h.finished() if s.name == "invoke_agent travel"]
            assert len(roots) == 5 and all(s.attributes is not None
                                            and s.attributes["tooleval.passed"] for s in roots)
            outcomes.append(sorted(
                (r.key.value, r.ended, r.passed, [(x.name, x.score) for x in r.results])
                for r in got))
        finally:
            h.close()
    thread, process = outcomes
    assert process == thread
    assert [(key, ended, passed) for key, ended, passed, _ in process] == [
        ("p-1", "end_session", True), ("p-2", "flush", False)]


def test_runs_before_the_process_is_ready_are_graded_on_the_thread() -> None:
    h = Harness(_config(EVERY_FAMILY))
    processor = h.processor
    offload = processor._offload
    assert offload is not None
    sent: list[bool] = []        # what offload.available() answered, run by run
    on_thread: list[int] = []    # runs the thread graded itself
    available, grade = offload.available, processor._grade

    def available_spy() -> bool:
        sent.append(available())
        return sent[-1]

    def grade_spy(*args: Any) -> Any:
        on_thread.append(1)
        return grade(*args)

    offload.available = available_spy  # type: ignore[method-assign]
    processor._grade = grade_spy  # type: ignore[method-assign]
    try:
        for _ in range(20):   # the child takes ~0.5 s to start: these do not wait for it
            h.agent_run(["read_file", "search"], agent="early")
        assert h.flush()
        assert h.processor.stats()["runs"] == 20
        assert len(h.reports) == 20
        # The first run starts the child, so it was not ready for it; every run it was not
        # ready for was graded here, once, and the others went to it.
        assert len(sent) == 20 and sent[0] is False
        assert len(on_thread) == sent.count(False)
        assert offload.starts == 1
    finally:
        h.close()


def test_a_killed_process_has_its_runs_graded_here_and_is_started_again() -> None:
    h = Harness(_config(EVERY_FAMILY))
    try:
        offload = _wait_ready(h)
        first = offload._proc
        assert first is not None
        first.send_signal(signal.SIGSTOP)   # its runs pile up unanswered...
        for _ in range(30):
            h.agent_run(["read_file", "search"], agent="a")
        deadline = time.monotonic() + 10
        while len(offload._in_flight) < 30 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(offload._in_flight) == 30
        first.kill()                        # ... and are lost with it
        assert h.flush()
        stats = h.processor.stats()
        assert stats["runs"] == 31 and not any(k.startswith("dropped") for k in stats)
        roots = [s for s in h.by_name("invoke_agent a") if "tooleval.passed" in s.attributes]
        assert len(roots) == 30   # each graded once, none forwarded twice
        assert len(h.by_name("invoke_agent a")) == 30
        h.agent_run(["read_file"], agent="b")   # the next run starts a new process
        deadline = time.monotonic() + 30
        while not offload.ready and time.monotonic() < deadline:
            h.agent_run(["read_file"], agent="b")
            time.sleep(0.05)
        assert offload.ready and offload._proc is not first and offload.starts == 2
    finally:
        h.close()


def test_a_hung_process_is_ended_and_its_runs_forwarded_ungraded() -> None:
    h = Harness(_config(EVERY_FAMILY, process_timeout_seconds=0.3))
    try:
        offload = _wait_ready(h)
        proc = offload._proc
        assert proc is not None
        proc.send_signal(signal.SIGSTOP)   # alive, answering nothing
        for _ in range(5):
            h.agent_run(["search"], agent="stuck")
        assert h.flush(), "the hang is detected within the flush (sweep every second)"
        # wait(), not poll(): poll() answers None while another thread is reaping it
        assert proc.wait(5) is not None, "the hung process was ended"
        stats = h.processor.stats()
        assert stats["dropped.grading_process"] == 5 and stats["runs"] == 1
        stuck = h.by_name("invoke_agent stuck")
        assert len(stuck) == 5 and not any("tooleval.passed" in s.attributes for s in stuck)
        drops = [p for p in h.metric_points("tooleval.runs.dropped")
                 if p.attributes.get("reason") == "grading_process"]
        assert drops and drops[0].value == 5
    finally:
        h.close()


def test_shutdown_ends_the_process() -> None:
    h = Harness(_config(EVERY_FAMILY))
    offload = _wait_ready(h)
    proc = offload._proc
    assert proc is not None
    h.agent_run(["search"], agent="last")
    assert h.processor.shutdown(10_000)
    assert proc.wait(5) == 0
    (root,) = h.by_name("invoke_agent last")
    assert root.attributes["tooleval.failed"]   # graded: it misses what EVERY_FAMILY wants
    h.close()


@grader(name="always-half")
def _half(run: Any, submission: str | None) -> float:
    return 0.5


def test_custom_python_graders_stay_on_the_thread(caplog: pytest.LogCaptureFixture) -> None:
    config = _config({"graders": [{"name": "half", "kind": "tool", "function": "always-half"}]})
    with caplog.at_level(logging.WARNING, logger="otel_tooleval.offload"):
        h = Harness(config)
    try:
        assert "grader 'half' runs custom Python code" in caplog.text
        h.agent_run(["search"], agent="c")
        assert h.flush()
        assert h.reports[0].results[0].score == 0.5
        assert _offload(h)._proc is None and _offload(h).starts == 0
    finally:
        h.close()


def test_a_config_the_process_cannot_load_leaves_grading_on_the_thread(
        caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(_config(EVERY_FAMILY))
    try:
        offload = _offload(h)
        offload._config = config_from_mapping({}, allow_no_graders=True)
        object.__setattr__(offload._config, "document", {"graders": [{"type": "nope"}]})
        with caplog.at_level(logging.WARNING, logger="otel_tooleval.offload"):
            for _ in range(20):
                h.agent_run(["search"], agent="x")
                time.sleep(0.05)
            # The child's refusal arrives when it has started, which a loaded machine delays
            # past the loop above (seen in CI): wait for it rather than for a fixed time.
            deadline = time.monotonic() + 60
            while not offload.disabled and time.monotonic() < deadline:
                time.sleep(0.05)
            assert h.flush()
        assert "could not load the config" in caplog.text and "unknown grader type" in caplog.text
        assert offload.disabled and not offload.ready and offload.starts == 1
        assert h.processor.stats()["runs"] == 20
    finally:
        h.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_leaves_the_process_to_the_parent() -> None:
    h = Harness(_config(EVERY_FAMILY))
    try:
        offload = _wait_ready(h)
        parents = offload._proc
        pid = os.fork()
        if pid == 0:   # the child: no grading process of its own yet, grades all the same
            code = 1
            try:
                mine = _offload(h)
                assert mine._proc is None and not mine.ready and mine.starts == 0
                before = h.processor.stats()["runs"]
                h.agent_run(["search"], agent="in-child")
                assert h.flush()
                assert h.processor.stats()["runs"] == before + 1
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        h.agent_run(["search"], agent="in-parent")
        assert h.flush()
        assert offload._proc is parents and parents.poll() is None
        (root,) = h.by_name("invoke_agent in-parent")
        assert "tooleval.passed" in root.attributes
    finally:
        h.close()


def test_grading_section_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"grading\.mode"):
        load_config({"grading": {"mode": "fork"}})
    with pytest.raises(ConfigError, match=r"grading\.process_timeout_seconds"):
        load_config({"grading": {"process_timeout_seconds": 0}})
    assert load_config({"graders": [{"type": "tool-call-order", "tool_calls_order": ["a"]}]}).grading.mode == "thread"


def test_process_unavailable_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config(_config(EVERY_FAMILY))
    assert process_unavailable(config) is None
    monkeypatch.setattr(sys, "executable", "")
    assert "sys.executable" in (process_unavailable(config) or "")


def test_frames_fall_back_to_pickle_and_end_cleanly() -> None:
    import io

    plain = encode(("runs", [(1, (1, 2), [], [], 0)]))
    assert plain[4:5] == b"M"
    odd = encode(("graded", [(1, ({"k": frozenset({1})}, None, None, [], True), None)]))
    assert odd[4:5] in (b"M", b"P")
    custom = encode(("x", ValueError("kept")))
    assert custom[4:5] == b"P"
    stream = io.BytesIO(plain + custom + custom[:7])
    assert read_frame(stream) == ("runs", [(1, (1, 2), [], [], 0)])
    assert read_frame(stream)[1].args == ("kept",)
    with pytest.raises(EOFError):
        read_frame(stream)   # a frame cut short


def test_runs_go_to_the_child_as_plain_data() -> None:
    import io

    class Tool(str, enum.Enum):   # an application's type: the child could not unpickle it
        SEARCH = "search"

    class Level(enum.IntEnum):
        HIGH = 3

    message = ("runs", [(1, (Tool.SEARCH, [Level.HIGH, 2.5], {"k": Tool.SEARCH}), [], [], 0)])
    frame = encode(message, plain_only=True)
    assert frame[4:5] == b"M"
    got = read_frame(io.BytesIO(frame))
    assert got == ("runs", [(1, ("search", [3, 2.5], {"k": "search"}), [], [], 0)])
    assert type(got[1][0][1][0]) is str and type(got[1][0][1][1][0]) is int
    assert plain(message) == got and plain("x") == "x"
    with pytest.raises(TypeError, match="not plain data"):
        encode(("runs", [object()]), plain_only=True)


def test_no_thread_to_read_the_answers_means_grading_on_the_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The verdict thread cannot start (no new thread): the child is ended at once, and every
    run is graded on the thread; none waits for answers nobody reads."""
    started: list[Any] = []
    start = threading.Thread.start

    def refuse(self: threading.Thread) -> None:
        if self.name == "otel-tooleval-verdicts":
            raise RuntimeError("can't start new thread")
        start(self)

    original_popen = subprocess.Popen

    def popen(*args: Any, **kwargs: Any) -> Any:
        started.append(original_popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(threading.Thread, "start", refuse)
    monkeypatch.setattr(subprocess, "Popen", popen)
    h = Harness(_config(EVERY_FAMILY))
    try:
        for _ in range(3):
            h.agent_run(["search"], agent="z")
        assert h.flush()
        stats = h.processor.stats()
        assert stats["runs"] == 3 and not any(k.startswith("dropped") for k in stats)
        assert len(h.reports) == 3
        roots = h.by_name("invoke_agent z")
        assert len(roots) == 3 and all("tooleval.passed" in (r.attributes or {}) for r in roots)
        offload = _offload(h)
        assert offload.disabled and "no thread" in offload.disabled and offload.starts == 1
        assert len(started) == 1 and started[0].wait(5) is not None   # ended, not left
    finally:
        h.close()


def test_the_processor_never_raises_when_the_process_cannot_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(_config(EVERY_FAMILY))
    try:
        monkeypatch.setattr(sys, "executable", "/nonexistent/python")
        for _ in range(3):
            h.agent_run(["search"], agent="y")
        assert h.flush()
        assert h.processor.stats()["runs"] == 3
        assert _offload(h).disabled and "cannot start" in (_offload(h).disabled or "")
    finally:
        h.close()


def test_a_processor_built_in_code_keeps_the_default_thread() -> None:
    processor = ToolEvalSpanProcessor(EVERY_FAMILY)
    assert processor._offload is None
    processor.shutdown()


def test_application_types_in_attribute_values_are_graded_by_the_process() -> None:
    """Values the SDK keeps as they are though they are subclasses of str or int (a class
    defined in a function, an application's enum): neither marshal nor pickle could send
    them (before: the error ended the grading thread, and the batch's roots were never
    forwarded; an importable enum would have been pickled and crashed the child, whose
    restarts are limited). They go as the plain values, and the process grades the runs."""
    h = Harness(_config(EVERY_FAMILY))
    try:
        offload = _wait_ready(h)
        on_thread: list[int] = []
        grade = h.processor._grade

        def grade_spy(*args: Any) -> Any:
            on_thread.append(1)
            return grade(*args)

        h.processor._grade = grade_spy  # type: ignore[method-assign]

        class Local(str):
            pass

        class Tool(str, enum.Enum):
            SEARCH = "search"

        with h.agent("odd"), h.tracer.start_as_current_span(
                "execute_tool search", attributes={"gen_ai.tool.name": Tool.SEARCH,
                                                   "gen_ai.tool.call.arguments": Local("{}")}):
            pass
        assert h.flush()
        h.agent_run(["search"], agent="after")
        assert h.flush()
        for name in ("invoke_agent odd", "invoke_agent after"):
            (root,) = h.by_name(name)
            assert "tooleval.passed" in (root.attributes or {})
        (odd,) = [r for r in h.reports if r.run.agent == "odd"]
        assert [c.name for c in odd.run.calls] == ["search"]
        stats = h.processor.stats()
        assert stats["runs"] == 3 and not any(k.startswith("dropped") for k in stats)
        assert on_thread == []   # both graded by the process, which lives on
        assert offload.ready and offload.starts == 1 and not offload._in_flight
    finally:
        h.close()


class _Gates(SpanProcessor):
    """A downstream whose ``on_end`` holds the span named ``gate<n>`` until ``release[n]``."""

    def __init__(self, inner: SpanProcessor, n: int) -> None:
        self.inner = inner
        self.entered = [threading.Event() for _ in range(n)]
        self.release = [threading.Event() for _ in range(n)]

    def on_end(self, span: ReadableSpan) -> None:
        if span.name.startswith("gate"):
            i = int(span.name[4:])
            self.entered[i].set()
            self.release[i].wait(30)
        self.inner.on_end(span)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.inner.shutdown()


def test_a_full_flight_below_one_batch_sends_what_it_waits_for() -> None:
    """``limits.queue_size`` below a batch (64): runs in flight up to it, none sent yet, and
    more queued. The grading thread sends them before it waits for room. (Before, it waited
    for answers to runs it had not sent, until ``process_timeout_seconds`` ended the child as
    hung and the runs were forwarded ungraded.)"""
    config = _config({**EVERY_FAMILY, "limits": {"queue_size": 4}}, process_timeout_seconds=2)
    h = Harness(config)
    try:
        offload = _wait_ready(h)
        gates = _Gates(h.processor.downstream, 2)   # type: ignore[arg-type]
        h.processor.downstream = gates
        # Each gate is a local root that is no run: the grading thread forwards it, and waits.
        with h.tracer.start_as_current_span("gate0"):
            pass
        assert gates.entered[0].wait(10)
        for _ in range(3):
            h.agent_run(["search"], agent="burst")
        with h.tracer.start_as_current_span("gate1"):
            pass
        gates.release[0].set()                  # three runs to the outbox, then held again
        assert gates.entered[1].wait(10)
        for _ in range(4):
            h.agent_run(["search"], agent="burst")
        gates.release[1].set()                  # the 4th fills the flight, the 5th waits
        assert h.processor.force_flush(20_000)
        stats = h.processor.stats()
        assert stats["runs"] == 8 and not any(k.startswith("dropped") for k in stats), stats
        roots = h.by_name("invoke_agent burst")
        assert len(roots) == 7 and all("tooleval.passed" in (r.attributes or {}) for r in roots)
        assert offload.ready and offload.starts == 1
    finally:
        for gate in (gates.release if "gates" in locals() else ()):
            gate.set()
        h.close()


def _stopped_with_a_batch_larger_than_the_pipe(
        h: Harness) -> tuple[GradingProcess, subprocess.Popen[bytes]]:
    """A ready grading process stopped (SIGSTOP: it reads nothing more), then a run whose
    batch is larger than the pipe, so that the grading thread's write blocks."""
    offload = _wait_ready(h)
    proc = offload._proc
    assert proc is not None
    proc.send_signal(signal.SIGSTOP)
    h.agent_run(["search"], agent="big", args={"blob": "x" * 1_000_000})
    return offload, proc


def test_shutdown_is_bounded_while_a_batch_is_stuck_in_a_full_pipe() -> None:
    """The grading process stops reading (SIGSTOP: a hang) and a batch larger than the pipe
    holds the grading thread in its write. ``shutdown`` still returns by its deadline, the
    run counted and its root forwarded ungraded. (Before, closing the pipe waited for that
    write, for ever.)"""
    h = Harness(_config(EVERY_FAMILY))
    proc = None
    try:
        offload, proc = _stopped_with_a_batch_larger_than_the_pipe(h)
        deadline = time.monotonic() + 10
        while (offload._outbox or not offload._in_flight) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert offload._in_flight and not offload._outbox   # sent: the write has begun
        done: list[bool] = []
        closer = threading.Thread(target=lambda: done.append(h.processor.shutdown(1_000)),
                                  daemon=True)
        started = time.monotonic()
        closer.start()
        closer.join(10)
        assert done == [False], "shutdown did not return within its deadline"
        assert time.monotonic() - started < 1 + 2.0
        assert h.processor.stats()["dropped.shutdown"] == 1
        (root,) = h.by_name("invoke_agent big")
        assert "tooleval.passed" not in (root.attributes or {})
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()   # unblocks the stuck write if shutdown did not
        h.close()


def test_a_hung_process_is_ended_while_a_batch_is_stuck_in_a_full_pipe() -> None:
    """The grading process hangs (SIGSTOP) with a batch larger than the pipe on its way: the
    grading thread is stuck in the write, yet the process is ended after
    ``process_timeout_seconds`` as for any hang, the run forwarded ungraded and counted.
    (Before, only the stuck grading thread checked for a hang: nothing ended it.)"""
    h = Harness(_config(EVERY_FAMILY, process_timeout_seconds=0.5))
    proc = None
    try:
        _, proc = _stopped_with_a_batch_larger_than_the_pipe(h)
        assert h.flush(), "the hang is detected within the flush"
        assert proc.wait(5) is not None, "the hung process was ended"   # see above: wait()
        stats = h.processor.stats()
        assert stats["dropped.grading_process"] == 1 and stats["runs"] == 1
        (root,) = h.by_name("invoke_agent big")
        assert "tooleval.passed" not in (root.attributes or {})
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        h.close()
