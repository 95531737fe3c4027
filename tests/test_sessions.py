"""Sessions: runs of one conversation graded together, live and by ``grade``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_tooleval import ToolEvalSpanProcessor, load_config
from otel_tooleval.cli import main
from otel_tooleval.config import ConfigError
from otel_tooleval.file_exporter import OTLPJsonFileExporter
from otel_tooleval.sessions import SessionReport
from tests.support.harness import Harness
from tests.support.otlp_receiver import OtlpReceiver

TURNS = ["search", "book", "pay"]
SESSION_GRADERS = [
    {"name": "flow", "type": "tool-call-order", "strict": True,
     "tool_calls_order": ["search", "book", "pay"]},
    {"name": "adk", "type": "tool_trajectory_avg_score",
     "expected_invocations": [[{"name": "search"}], [{"name": "book"}], [{"name": "pay"}]]},
    {"name": "per-turn", "type": "tool_trajectory", "mode": "in_order",
     "turns": [{"expected": [{"tool": "search"}]}, {"expected": [{"tool": "book"}]},
               {"expected": [{"tool": "pay"}]}]},
]


def config(**sessions: Any) -> dict[str, Any]:
    return {"graders": [{"name": "some-call", "type": "tool-calls",
                         "config": {"required": ["."]}}],
            "sessions": {"graders": SESSION_GRADERS, **sessions}}


def conversation(h: Harness, key: str, tools: list[str], *, attribute: str =
                 "gen_ai.conversation.id", agent: str = "travel") -> None:
    for tool in tools:
        with h.agent(agent, **{attribute: key}):
            h.tool(tool)


def session_spans(h: Harness) -> list[Any]:
    return [s for s in h.finished() if s.attributes and "tooleval.session.passed" in s.attributes]


# -- live: the three ways a session ends ------------------------------------------------------

def test_explicit_end_grades_the_three_turns_as_one_session() -> None:
    got: list[SessionReport] = []
    h = Harness(config(), on_session=got.append)
    try:
        conversation(h, "c-1", TURNS)
        h.processor.end_session("c-1")
        assert h.flush()
        (report,) = got
        assert report.passed and report.ended == "end_session"
        assert [r.name for r in report.results] == ["flow", "adk", "per-turn"]
        (span,) = session_spans(h)
        attrs = dict(span.attributes)
        assert span.name == "session travel"
        assert attrs["gen_ai.conversation.id"] == "c-1"
        assert attrs["tooleval.session.key"] == "gen_ai.conversation.id"
        assert attrs["tooleval.session.runs"] == 3
        assert attrs["tooleval.session.passed"] is True
        roots = {(s.context.trace_id, s.context.span_id) for s in h.by_name("invoke_agent travel")}
        assert {(link.context.trace_id, link.context.span_id) for link in span.links} == roots
        assert span.context.trace_id not in {t for t, _ in roots}   # a trace of its own
        events = [e for e in span.events if e.name == "gen_ai.evaluation.result"]
        assert [e.attributes["gen_ai.evaluation.name"] for e in events] == ["flow", "adk",
                                                                            "per-turn"]
    finally:
        h.close()


def test_failing_session_is_marked_and_logged_with_its_key() -> None:
    got: list[SessionReport] = []
    h = Harness(config(), on_session=got.append)
    try:
        conversation(h, "c-2", ["search", "pay", "book"])
        h.processor.end_session("c-2")
        assert h.flush()
        (span,) = session_spans(h)
        assert span.attributes["tooleval.session.passed"] is False
        assert set(span.attributes["tooleval.session.failed"]) == {"flow", "adk", "per-turn"}
        adk = next(r for r in got[0].results if r.name == "adk")
        assert adk.score == pytest.approx(1 / 3)    # mean of the runs' scores: 1, 0, 0
        logs = [r.log_record for r in h.logs.get_finished_logs()
                if r.log_record.attributes.get("gen_ai.conversation.id") == "c-2"]
        assert len(logs) == 3
        assert all(r.trace_id == span.context.trace_id for r in logs)
        points = h.metric_points("tooleval.sessions")
        assert [dict(p.attributes) for p in points] == [{
            "gen_ai.agent.name": "travel", "tooleval.session.key": "gen_ai.conversation.id",
            "tooleval.passed": False}]
    finally:
        h.close()


def test_idle_session_ends_on_its_own() -> None:
    got: list[SessionReport] = []
    h = Harness(config(idle_seconds=0.2), on_session=got.append)
    try:
        conversation(h, "c-3", TURNS, attribute="session.id")
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            time.sleep(0.05)
        (report,) = got
        assert report.ended == "idle" and report.passed
        assert report.key.attribute == "session.id"
    finally:
        h.close()


def test_shutdown_grades_open_sessions() -> None:
    got: list[SessionReport] = []
    h = Harness(config(), on_session=got.append)
    conversation(h, "c-4", TURNS)
    assert not got
    assert h.processor.shutdown()
    (report,) = got
    assert report.ended == "shutdown" and report.passed
    assert len(h.spans.get_finished_spans()) >= 1


def test_run_count_other_than_invocations_is_an_error_naming_both() -> None:
    got: list[SessionReport] = []
    h = Harness(config(), on_session=got.append)
    try:
        conversation(h, "c-5", ["search", "book"])
        h.processor.end_session("c-5")
        assert h.flush()
        adk = next(r for r in got[0].results if r.name == "adk")
        assert adk.label == "error" and adk.error == "run_count_mismatch"
        assert "2 runs" in adk.explanation and "3 invocations" in adk.explanation
    finally:
        h.close()


def test_session_key_from_a_tool_span_when_the_root_has_none() -> None:
    got: list[SessionReport] = []
    h = Harness(config(), on_session=got.append)
    try:
        for tool in TURNS:
            with h.agent("travel"), h.tracer.start_as_current_span(
                    f"execute_tool {tool}", attributes={"gen_ai.tool.name": tool,
                                                        "session.id": "s-9"}):
                pass
        h.processor.end_session("s-9")
        assert h.flush()
        assert got and got[0].key.value == "s-9" and len(got[0].runs) == 3
    finally:
        h.close()


# -- bounds and threads --------------------------------------------------------------------------

def test_a_session_of_1000_runs_keeps_bounded_memory() -> None:
    got: list[SessionReport] = []
    cfg = {"sessions": {"max_session_calls": 100, "graders": [
        {"name": "count", "type": "tool-call-count", "tool_calls_count": {"search": [">=", 1]}}]}}
    # on_report off: the harness would keep every RunReport
    h = Harness(cfg, on_session=got.append, on_report=lambda report: None)
    try:
        big = "x" * 2000
        tracemalloc.start()
        for n in range(1000):
            with h.agent("chat", **{"gen_ai.conversation.id": "long"}):
                h.tool("search", {"q": big, "n": n})
            if n == 199:   # (not force_flush: a flush ends every open session)
                assert h.processor._drain(time.monotonic() + 10)
                h.spans.clear()
                before = tracemalloc.get_traced_memory()[0]
        assert h.processor._drain(time.monotonic() + 10)
        h.spans.clear()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        stats = h.processor.stats()
        assert stats["sessions.dropped.max_session_calls"] == 900
        # 800 more runs after the cap: only their ids are kept, not their 2 KB arguments.
        assert after - before < 800 * 2000 // 2
        h.processor.end_session("long")
        assert h.flush()
        (report,) = got
        assert len(report.runs) == 1000 and report.tool_calls == 100
        assert report.dropped_calls == 900
    finally:
        h.close()


def test_max_session_runs_keeps_the_first_runs_and_counts_the_rest() -> None:
    got: list[SessionReport] = []
    h = Harness(config(max_session_runs=3), on_session=got.append)
    try:
        conversation(h, "c-5", TURNS + ["search", "pay"])
        assert h.processor._drain(time.monotonic() + 10)
        stats = h.processor.stats()
        assert stats["sessions.dropped.max_session_runs"] == 2
        h.processor.end_session("c-5")
        assert h.flush()
        (report,) = got
        # The first three turns are kept, so the per-turn expectations still line up.
        assert len(report.runs) == 3 and report.dropped_runs == 2 and report.passed
        assert [c.name for r in report.runs for c in r.calls] == TURNS
        assert report.to_dict()["dropped_runs"] == 2
        (span,) = session_spans(h)
        assert span.attributes["tooleval.session.dropped_runs"] == 2
        assert span.attributes["tooleval.session.runs"] == 3
        points = h.metric_points("tooleval.sessions.dropped")
        assert [(dict(p.attributes), p.value) for p in points] == [
            ({"reason": "max_session_runs"}, 2)]
    finally:
        h.close()


def test_grade_reports_runs_over_max_session_runs_as_an_input_problem(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    write_conversations(trace, {"one": TURNS + ["pay"]})
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps(config(max_session_runs=3)))
    assert main(["grade", str(trace), "--config", str(cfg), "--format", "json"]) == 2
    captured = capsys.readouterr()
    (session,) = json.loads(captured.out)["sessions"]
    assert session["runs"] == 3 and session["dropped_runs"] == 1 and session["passed"]
    assert "sessions.max_session_runs (3)" in captured.err
    assert main(["grade", str(trace), "--config", str(cfg), "--format", "json",
                 "--allow-input-problems"]) == 0


def test_grade_reports_calls_over_max_session_calls_as_an_input_problem(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    write_conversations(trace, {"one": TURNS})
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps(config(max_session_calls=2)))
    assert main(["grade", str(trace), "--config", str(cfg), "--format", "json"]) == 2
    captured = capsys.readouterr()
    (session,) = json.loads(captured.out)["sessions"]
    assert session["tool_calls"] == 2 and session["dropped_calls"] == 1
    assert "1 tool call(s) not kept in their sessions" in captured.err
    assert "sessions.max_session_calls (2)" in captured.err


def test_max_open_sessions_ends_the_least_recent_early() -> None:
    got: list[SessionReport] = []
    h = Harness(config(max_open_sessions=2), on_session=got.append)
    try:
        for key in ("a", "b", "c"):
            conversation(h, key, ["search"])
        assert h.processor._drain(time.monotonic() + 10)
        assert [(r.key.value, r.ended) for r in got] == [("a", "evicted")]
        assert h.processor.stats()["sessions.dropped.max_open_sessions"] == 1
        points = h.metric_points("tooleval.sessions.dropped")
        assert [(dict(p.attributes), p.value) for p in points] == [
            ({"reason": "max_open_sessions"}, 1)]
    finally:
        h.close()


def test_interleaved_sessions_on_16_threads_do_not_mix() -> None:
    got: list[SessionReport] = []
    cfg = {"sessions": {"graders": [
        {"name": "own-tools-only", "type": "tool-calls",
         "config": {"disallowed": ["^other"], "required": ["^mine$"]}}]}}
    h = Harness(cfg, on_session=got.append)
    try:
        start = threading.Barrier(16)

        def talk(k: int) -> None:
            start.wait()
            for _ in range(10):
                with h.agent(f"agent-{k}", **{"gen_ai.conversation.id": f"t-{k}"}):
                    h.tool("mine", {"thread": k})
                time.sleep(0)

        threads = [threading.Thread(target=talk, args=(k,)) for k in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert h.flush()
        assert sorted(r.key.value for r in got) == sorted(f"t-{k}" for k in range(16))
        for report in got:
            k = int(report.key.value.split("-")[1])
            assert report.agent == f"agent-{k}" and len(report.runs) == 10
            view = [c.arguments for run in report.runs for c in run.calls]
            assert view == [{"thread": k}] * 10
            assert report.passed
    finally:
        h.close()


# -- over OTLP to a real receiver ----------------------------------------------------------------

def test_session_span_and_links_over_otlp(receiver: OtlpReceiver) -> None:
    exporter = OTLPSpanExporter(endpoint=receiver.grpc_endpoint, insecure=True)
    processor = ToolEvalSpanProcessor(config(), SimpleSpanProcessor(exporter))
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests")
    for tool in ["search", "pay", "book"]:
        agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "travel",
                 "gen_ai.conversation.id": "otlp-1"}
        with (tracer.start_as_current_span("invoke_agent travel", attributes=agent),
              tracer.start_as_current_span(f"execute_tool {tool}",
                                           attributes={"gen_ai.tool.name": tool})):
            pass
    processor.end_session("otlp-1")
    assert provider.force_flush(10_000)

    def session_span() -> Any:
        for request in receiver.trace_requests:
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        if span.name == "session travel":
                            return span
        return None

    assert receiver.wait_for(lambda: session_span() is not None)
    span = session_span()
    attrs = {a.key: a.value for a in span.attributes}
    assert attrs["tooleval.session.passed"].bool_value is False
    assert attrs["gen_ai.conversation.id"].string_value == "otlp-1"
    roots = {(s["trace_id"], s["span_id"]) for s in receiver.spans()
             if s["name"] == "invoke_agent travel"}
    assert len(roots) == 3
    assert {(link.trace_id.hex(), link.span_id.hex()) for link in span.links} == roots
    assert [e.name for e in span.events] == ["gen_ai.evaluation.result"] * 3
    provider.shutdown()


# -- grade ---------------------------------------------------------------------------------------

def write_conversations(path: Path, talks: dict[str, list[str]]) -> None:
    exporter = OTLPJsonFileExporter(path)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    for key, tools in talks.items():
        for tool in tools:
            agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "travel",
                     "gen_ai.conversation.id": key}
            with (tracer.start_as_current_span("invoke_agent travel", attributes=agent),
                  tracer.start_as_current_span(f"execute_tool {tool}",
                                               attributes={"gen_ai.tool.name": tool})):
                pass
    provider.shutdown()


@pytest.fixture
def traces(tmp_path: Path) -> tuple[Path, Path, Path]:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    # One conversation split across two files; another failing.
    write_conversations(first, {"good": ["search", "book"], "bad": ["pay"]})
    write_conversations(second, {"good": ["pay"], "bad": ["book", "search"]})
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps(config()))
    return first, second, cfg


def test_grade_json_has_sessions_across_files(traces: tuple[Path, Path, Path],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    first, second, cfg = traces
    code = main(["grade", str(first), str(second), "--config", str(cfg), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    assert len(doc["runs"]) == 6 and all(r["passed"] for r in doc["runs"])
    by_key = {s["session"]: s for s in doc["sessions"]}
    assert by_key["good"]["passed"] is True and by_key["good"]["runs"] == 3
    assert by_key["good"]["agent"] == "travel"
    assert by_key["bad"]["passed"] is False
    assert [r["name"] for r in by_key["bad"]["results"]] == ["flow", "adk", "per-turn"]
    assert doc["aggregate"]["sessions"] == {"sessions": 2, "passed": 1, "failed": 1}


@pytest.mark.parametrize("fmt,needle", [("table", "gen_ai.conversation.id=bad"),
                                        ("junit", 'classname="travel session gen_ai.'
                                                  'conversation.id=bad"'[0:0] +
                                         'classname="travel session gen_ai.conversation.id=bad"'),
                                        ("html", "gen_ai.conversation.id=good")])
def test_grade_every_format_shows_sessions(traces: tuple[Path, Path, Path], fmt: str,
                                           needle: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    first, second, cfg = traces
    assert main(["grade", str(first), str(second), "--config", str(cfg), "--format",
                 fmt]) == 1
    out = capsys.readouterr().out
    assert needle in out
    if fmt == "table":
        assert "1 of 2 sessions passed" in out


def test_grade_passes_when_every_session_passes(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    write_conversations(trace, {"one": TURNS})
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps(config()))
    assert main(["grade", str(trace), "--config", str(cfg), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["sessions"][0]["passed"] is True


def test_inspect_shows_sessions(traces: tuple[Path, Path, Path],
                                capsys: pytest.CaptureFixture[str]) -> None:
    first, second, _cfg = traces
    assert main(["inspect", str(first), str(second), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    sessions = {s["session"]: s for s in doc["sessions"]}
    assert sessions["good"]["runs"] == 3 and sessions["bad"]["runs"] == 3
    assert main(["inspect", str(first), str(second)]) == 0
    assert "gen_ai.conversation.id=good" in capsys.readouterr().out


# -- config ----------------------------------------------------------------------------------

def test_expected_invocations_refused_in_per_run_graders() -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"graders": [{"type": "tool_trajectory_avg_score",
                                  "expected_invocations": [[{"name": "a"}]]}]})
    assert "graders[0].expected_invocations" in str(err.value)
    assert "sessions.graders" in str(err.value)


@pytest.mark.parametrize("sessions,where", [
    ({"graders": [{"type": "tool_trajectory", "turns": []}]}, "sessions.graders[0].turns"),
    ({"graders": [{"type": "tool_trajectory", "mode": "in_order",
                   "turns": [{"expected": [{"tool": "a"}], "name": "x"}]}]},
     "sessions.graders[0].turns[0].name"),
    ({"graders": [{"type": "tool_trajectory", "mode": "in_order",
                   "turns": [{"expected": [{"nam": "a"}]}]}]},
     "sessions.graders[0].turns[0].expected[0]"),
    ({"graders": [{"type": "tool_trajectory_avg_score", "expected_invocations": [],
                   }]}, "sessions.graders[0].expected_invocations"),
    ({"graders": [{"type": "tool_trajectory_avg_score", "expected_invocations": [[]],
                   "expected_tool_use": []}]}, "sessions.graders[0].expected_tool_use"),
    ({"keys": [], "graders": []}, "sessions.keys"),
    ({"idle_seconds": 0}, "sessions.idle_seconds"),
    ({"max_open_sessions": 0}, "sessions.max_open_sessions"),
    ({"graders": [{"type": "tool-calls", "config": {"required": ["a"]}, "turns": "x"}]},
     "sessions.graders[0].turns"),
])
def test_session_config_errors_name_the_field(sessions: dict[str, Any], where: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"graders": [{"type": "tool-calls", "config": {"required": ["a"]}}],
                     "sessions": sessions})
    assert where in str(err.value)


def test_a_config_with_session_graders_only_loads() -> None:
    cfg = load_config({"sessions": {"graders": [{"type": "tool-call-order",
                                                 "tool_calls_order": ["a"]}]}})
    assert not cfg.graders and len(cfg.session_graders) == 1


def test_the_docs_example_runs(tmp_path: Path) -> None:
    page = (Path(__file__).parent.parent / "docs" / "sessions.md").read_text()
    (tmp_path / "example.py").write_text(page.split("```python\n", 1)[1].split("```", 1)[0])
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["conv-42", "False", "False", "3"]


def test_max_open_sessions_ends_the_least_recently_active_not_the_first_created() -> None:
    # a is created first but is busy again after b: b is the idle one that a new session evicts.
    got: list[SessionReport] = []
    h = Harness(config(max_open_sessions=2), on_session=got.append)
    try:
        for key in ("a", "b", "a", "c"):
            conversation(h, key, ["search"])
            assert h.processor._drain(time.monotonic() + 10)
        assert [(r.key.value, r.ended) for r in got] == [("b", "evicted")]
    finally:
        h.close()
