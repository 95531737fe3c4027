"""`otel-tooleval inspect` and `grade --include-calls` (docs/inspect.md), over files written from
real SDK spans."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from otel_tooleval.cli import main
from otel_tooleval.config import config_from_mapping
from otel_tooleval.inspection import default_config, session_of
from tests.data.files import make_golden

ROOT = Path(__file__).resolve().parents[1]

DATA = Path(__file__).resolve().parent / "data/files"
JSONL = DATA / "traces.otlp.jsonl"
MS = make_golden.MS
T0 = make_golden.BASE
# A config with a grader: inspect reads only its runs: section.
GRADERS = "graders:\n  - {name: any, type: tool-call-count, tool_calls_count: {nope: ['==', 0]}}\n"

Span = Callable[..., trace.Span]


class Recorder:
    """Spans from a real TracerProvider with fixed ids and explicit times."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(id_generator=make_golden.FixedIds())
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def start(self, scope: str, name: str, at_ms: float, parent: trace.Span | None = None,
              attrs: dict[str, Any] | None = None, kind: SpanKind = SpanKind.INTERNAL,
              ) -> trace.Span:
        ctx = trace.set_span_in_context(parent) if parent is not None else None
        return self.provider.get_tracer(scope).start_span(
            name, context=ctx, kind=kind, attributes=attrs, start_time=T0 + int(at_ms * MS))

    def span(self, scope: str, name: str, at_ms: float, end_ms: float,
             parent: trace.Span | None = None, attrs: dict[str, Any] | None = None,
             error: str | None = None, kind: SpanKind = SpanKind.INTERNAL) -> trace.Span:
        span = self.start(scope, name, at_ms, parent, attrs, kind)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=T0 + int(end_ms * MS))
        return span

    def write(self, path: Path) -> Path:
        """The finished spans as the collector's file exporter writes them (OTLP/JSON lines)."""
        self.provider.force_flush()
        spans: list[ReadableSpan] = list(self.exporter.get_finished_spans())
        doc = make_golden.otlp_dict(encode_spans(spans), enums_as_numbers=True)
        path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
        return path


def end(span: trace.Span, at_ms: float) -> None:
    span.end(end_time=T0 + int(at_ms * MS))


def inspect_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["inspect", *args, "--format", "json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


@pytest.fixture
def config_file(tmp_path: Path) -> Callable[[str], str]:
    def write(text: str) -> str:
        path = tmp_path / "tooleval.yaml"
        path.write_text(text)
        return str(path)
    return write


@pytest.fixture
def own_conventions(tmp_path: Path) -> Iterator[tuple[Path, dict[str, int]]]:
    """One agent run with a call under each of the project's tool conventions."""
    rec = Recorder()
    root = rec.start("example.agent", "invoke_agent helper", 0, attrs={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper",
        "gen_ai.conversation.id": "conv-7", "session.id": "not-this-one"})
    rec.span("example.agent", "chat gpt-4o", 1, 2, root, {"gen_ai.operation.name": "chat"})
    ids = {}
    ids["search"] = rec.span("example.tools", "execute_tool search", 3, 8, root, {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
        "gen_ai.tool.call.arguments": '{"q": "otel"}',
        "gen_ai.tool.call.result": '["a", "b"]'}).get_span_context().span_id
    rec.span("example.agent", "chat gpt-4o", 9, 10, root, {"gen_ai.operation.name": "chat"})
    ids["lookup"] = rec.span("openinference.instrumentation.langchain", "lookup", 11, 12.5, root, {
        "openinference.span.kind": "TOOL", "tool.name": "lookup",
        "input.value": '{"id": 3}', "output.value": "x" * 300}).get_span_context().span_id
    ids["fetch"] = rec.span("traceloop", "fetch.tool", 13, 14, root, {
        "traceloop.span.kind": "tool", "traceloop.entity.name": "fetch",
        "traceloop.entity.input": '{"url": "u"}'},
        error="timed out").get_span_context().span_id
    late = rec.start("example.tools", "execute_tool notify", 15, root, {
        "gen_ai.tool.name": "notify", "gen_ai.tool.call.arguments": "{}"})
    ids["notify"] = late.get_span_context().span_id
    end(root, 20)
    end(late, 25)   # after the root: pending
    yield rec.write(tmp_path / "own.jsonl"), ids


def test_inspect_lists_every_call_with_the_convention_that_read_it(
        own_conventions: tuple[Path, dict[str, int]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = own_conventions
    code, doc = inspect_json(capsys, str(path))
    assert code == 0
    assert (doc["spans"], doc["traces"]) == (7, 1)
    [run] = doc["runs"]
    assert (run["agent"], run["root_name"], run["session"]) == (
        "helper", "invoke_agent helper", "conv-7")
    assert len(run["trace_id"]) == 32 and len(run["root_span_id"]) == 16
    calls = run["calls"]
    assert [(c["name"], c["convention"], c["status"], c["step"]) for c in calls] == [
        ("search", "gen_ai", "ok", 0), ("lookup", "openinference", "ok", 1),
        ("fetch", "traceloop", "error", 1), ("notify", "gen_ai", "pending", 1)]
    assert [c["span_id"] for c in calls] == [format(ids[c["name"]], "016x") for c in calls]
    search, lookup, fetch, notify = calls
    assert search["arguments"] == {"q": "otel"} and search["result"] == ["a", "b"]
    assert search["duration_ms"] == 5.0 and search["error"] is None
    assert lookup["result"] == "x" * 300, "JSON keeps values in full"
    assert fetch["error"] == "timed out"
    assert notify["duration_ms"] is None and notify["result"] is None
    assert doc["unrecognised"]["spans"] == 0, "model calls and the root are recognised"


def test_inspect_table_shows_runs_calls_and_cuts_long_values(
        own_conventions: tuple[Path, dict[str, int]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = own_conventions
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 file(s), 7 spans read, 1 traces (0 without a run), 1 runs, "
                          "0 input problem(s)")
    assert "agent=helper" in out and "session=conv-7" in out
    assert f"span {ids['lookup']:016x}  via openinference" in out
    assert "[error: timed out]" in out and "[pending]" in out
    assert "x" * 79 + "…" in out and "x" * 81 not in out


def write_acme(rec: Recorder, parent: trace.Span | None = None) -> None:
    """What an unknown framework writes: its own names for everything."""
    run = rec.start("acme", "acme.agent.run", 100, parent,
                    {"acme.agent.name": "planner", "acme.agent.max_steps": 4})
    rec.span("acme", "acme.agent.step.tool", 101, 103, run, {
        "acme.tool.name": "weather", "acme.agent.step.tool.input": '{"city": "Oslo"}',
        "acme.agent.step.tool.output": "sunny"})
    end(run, 110)


def test_inspect_names_the_scope_and_attributes_of_an_unknown_framework(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = Recorder()
    write_acme(rec)
    path = rec.write(tmp_path / "acme.jsonl")
    code, doc = inspect_json(capsys, str(path))
    assert code == 0, "no run is no failure for a diagnostic"
    assert doc["runs"] == [] and doc["traces"] == 1
    unrecognised = doc["unrecognised"]
    assert (unrecognised["spans"], unrecognised["in_runs"]) == (2, 0)
    assert unrecognised["scopes"] == {"acme": 2}
    candidates = unrecognised["candidate_attributes"]
    assert candidates["acme.tool.name"] == {"spans": 1, "sample": "weather",
                                                "scopes": {"acme": 1}}
    assert candidates["acme.agent.step.tool.input"]["sample"] == '{"city": "Oslo"}'
    assert "acme.agent.step.tool.output" in candidates
    assert candidates["acme.agent.name"]["spans"] == 1
    [hint] = unrecognised["hints"]
    assert "`acme`" in hint and "`acme.tool.name`" in hint
    assert "`conventions:` mapping" in hint and "suggested mapping" in hint
    assert hint.index("`acme.tool.name`") < hint.index("`acme.agent.name`"), \
        "the tool name, the key a mapping needs first, comes first"


def test_inspect_table_of_an_unknown_framework(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    rec = Recorder()
    write_acme(rec)
    assert main(["inspect", str(rec.write(tmp_path / "h.jsonl"))]) == 0
    out = capsys.readouterr().out
    assert "0 runs" in out and "spans not used: 2 (0 inside runs, 2 in no run)" in out
    assert "        acme  2" in out
    assert "acme.tool.name" in out and "weather" in out
    flat = " ".join(out.split())   # the hints are wrapped to the terminal's width
    assert "spans of scope `acme` (2) carry" in flat and "suggested mapping" in flat
    assert "    suggested mapping (review it, then add it to the config):\n" in out
    assert "        conventions:\n        - scope: acme\n" in out


def test_unknown_tool_spans_inside_a_run_are_counted_as_inside(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The surprising verdict: a run with no calls, because its tools speak another dialect."""
    rec = Recorder()
    root = rec.start("example.agent", "invoke_agent planner", 99, attrs={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"})
    write_acme(rec, root)
    end(root, 120)
    code, doc = inspect_json(capsys, str(rec.write(tmp_path / "mixed.jsonl")))
    assert code == 0
    [run] = doc["runs"]
    assert run["agent"] == "planner" and run["calls"] == []
    assert (doc["unrecognised"]["spans"], doc["unrecognised"]["in_runs"]) == (2, 2)
    assert "acme.tool.name" in doc["unrecognised"]["candidate_attributes"]


def test_an_http_only_trace_has_no_run_and_no_candidates(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = Recorder()
    server = rec.start("example.http", "GET /health", 0, kind=SpanKind.SERVER, attrs={
        "http.request.method": "GET", "user_agent.original": "curl/8.5"})
    rec.span("example.db", "SELECT 1", 1, 2, server, {"db.system": "postgresql"},
             kind=SpanKind.CLIENT)
    end(server, 3)
    code, doc = inspect_json(capsys, str(rec.write(tmp_path / "http.jsonl")))
    assert code == 0
    assert doc["runs"] == [] and doc["traces_without_runs"] == 1
    assert doc["unrecognised"]["scopes"] == {"example.http": 1, "example.db": 1}
    assert doc["unrecognised"]["candidate_attributes"] == {}, "a user agent is no agent"
    assert doc["unrecognised"]["hints"] == []


def test_runs_root_from_the_config_decides_the_runs(
        tmp_path: Path, config_file: Callable[[str], str],
        capsys: pytest.CaptureFixture[str]) -> None:
    rec = Recorder()
    server = rec.start("example.http", "POST /chat", 0, kind=SpanKind.SERVER)
    rec.span("example.tools", "execute_tool search", 1, 2, server, {"gen_ai.tool.name": "search"})
    end(server, 3)
    path = str(rec.write(tmp_path / "plain.jsonl"))
    _, doc = inspect_json(capsys, path)
    assert [r["root_name"] for r in doc["runs"]] == ["POST /chat"], "auto: the local root"
    _, doc = inspect_json(capsys, path, "--config",
                          config_file(GRADERS + "runs: {root: agent}\n"))
    assert doc["runs"] == []
    assert doc["unrecognised"]["candidate_attributes"]["gen_ai.tool.name"]["spans"] == 1
    [hint] = doc["unrecognised"]["hints"]
    assert "`gen_ai.tool.name` is read by otel-tooleval" in hint and "runs.root" in hint


def test_runs_agents_marks_runs_that_grade_would_skip(
        config_file: Callable[[str], str], capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = inspect_json(capsys, str(JSONL), "-c",
                             config_file(GRADERS + "runs: {agents: [support]}\n"))
    assert code == 0
    assert {r["agent"]: r["graded"] for r in doc["runs"]} == {
        "researcher": False, "orchestrator": False, "support": True, "planner": False}
    assert main(["inspect", str(JSONL), "-c",
                 config_file(GRADERS + "runs: {agents: [support]}\n")]) == 0
    assert "1 runs (and 3 not graded: agent not in runs.agents)" in capsys.readouterr().out


def test_input_problems_are_listed_with_file_and_line(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    code = main(["inspect", str(JSONL), "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, "what could be read was read"
    doc = json.loads(captured.out)
    assert any(p.startswith(f"{JSONL}:4: invalid JSON") for p in doc["problems"])
    assert f"{JSONL}:2:" in captured.err
    assert len(doc["runs"]) == 4 and doc["traces"] == 5


def test_a_missing_or_unreadable_file_exits_two(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.jsonl"
    assert main(["inspect", str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("not json\nnor this\n")
    assert main(["inspect", str(garbage)]) == 2
    assert f"{garbage}:1: invalid JSON" in capsys.readouterr().err
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"resourceMetrics": []}\n{"resourceLogs": []}\n')
    assert main(["inspect", str(metrics), "-f", "json"]) == 2
    captured = capsys.readouterr()
    assert f"{metrics}: no span could be read" in captured.err and captured.out == ""


def test_the_default_config_cuts_runs_as_an_empty_config_does() -> None:
    built = default_config()
    loaded = config_from_mapping({"graders": [{"type": "tool-call-order", "tool_calls_order": ["a"]}]})
    assert built.graders == ()
    assert (built.policy, built.runs, built.limits) == (loaded.policy, loaded.runs, loaded.limits)


def test_session_is_the_first_present_key() -> None:
    assert session_of({"session.id": "s", "gen_ai.conversation.id": "c"}) == "c"
    assert session_of({"session.id": "s", "gen_ai.conversation.id": ""}) == "s"
    assert session_of({}) is None


def test_grade_include_calls_adds_the_calls_to_the_json(
        config_file: Callable[[str], str], capsys: pytest.CaptureFixture[str]) -> None:
    cfg = config_file(GRADERS)
    main(["grade", str(JSONL), "-c", cfg, "-f", "json", "--allow-input-problems"])
    plain = json.loads(capsys.readouterr().out)
    assert all("calls" not in run for run in plain["runs"])
    main(["grade", str(JSONL), "-c", cfg, "-f", "json", "--allow-input-problems",
          "--include-calls"])
    doc = json.loads(capsys.readouterr().out)
    researcher = next(r for r in doc["runs"] if r["agent"] == "researcher")
    assert len(researcher["calls"]) == researcher["tool_calls"] == 4
    assert researcher["calls"][2] == {
        "step": 1, "name": "fetch_page", "arguments": {"url": "https://example.invalid/"},
        "result": "connection refused", "status": "error", "error": "connection refused",
        "duration_ms": 2.0, "span_id": "00f067aa0ba90206",
        "violation": False, "violation_graders": []}
    # the same call objects as inspect's, less the convention (inspect grades nothing)
    main(["inspect", str(JSONL), "-f", "json"])
    inspected = json.loads(capsys.readouterr().out)
    calls = next(r for r in inspected["runs"] if r["agent"] == "researcher")["calls"]
    assert [{k: v for k, v in c.items() if k != "convention"} for c in calls] == \
        [{k: v for k, v in c.items() if not k.startswith("violation")}
         for c in researcher["calls"]]


def test_include_calls_without_json_is_bad_usage(config_file: Callable[[str], str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grade", str(JSONL), "-c", config_file(GRADERS), "--include-calls"]) == 2
    captured = capsys.readouterr()
    assert "--include-calls needs --format json" in captured.err and captured.out == ""


def test_inspects_suggested_mapping_of_an_unknown_framework_loads_and_grades(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = Recorder()
    write_acme(rec)
    path = rec.write(tmp_path / "acme.jsonl")
    _, doc = inspect_json(capsys, str(path))
    suggested = doc["unrecognised"]["suggested_conventions"]
    assert suggested == [
        {"scope": "acme", "span_name": r"^acme\.agent\.run$",
         "run": {"agent_name": "acme.agent.name"}},
        {"scope": "acme", "span_name": r"^acme\.agent\.step\.tool$",
         "tool": {"name": "acme.tool.name", "arguments": ["acme.agent.step.tool.input"],
                  "result": ["acme.agent.step.tool.output"]}}]
    config = tmp_path / "tooleval.yaml"
    config.write_text(yaml.safe_dump({"graders": [{"type": "tool-calls", "config": {
        "required": [{"name": "weather", "args": {"city": "Oslo"}}]}}],
        "conventions": suggested}))
    assert main(["grade", str(path), "--config", str(config), "--format", "json",
                 "--include-calls"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["agent"] == "planner" and run["passed"]
    assert [(c["name"], c["arguments"], c["result"]) for c in run["calls"]] == [
        ("weather", {"city": "Oslo"}, "sunny")]
    # Read with it, nothing is left to suggest.
    assert main(["inspect", str(path), "--config", str(config), "--format", "json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["unrecognised"]["suggested_conventions"] == []
    assert [c["convention"] for c in again["runs"][0]["calls"]] == ["conventions[1]"]


def test_the_suggested_mapping_reads_the_logfire_recording(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logfire = ROOT / "tests/data/frameworks/logfire/traces.jsonl"
    _, doc = inspect_json(capsys, str(logfire))
    suggested = doc["unrecognised"]["suggested_conventions"]
    config = tmp_path / "tooleval.yaml"
    config.write_text(yaml.safe_dump({"graders": [{"type": "tool-call-order", "strict": True,
        "tool_calls_order": ["lookup_city", "get_weather", "get_weather", "convert_temp"]}],
        "conventions": suggested}))
    assert main(["grade", str(logfire), "--config", str(config), "--format", "json",
                 "--include-calls"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["agent"] == "weather_agent"
    assert [(c["arguments"], c["step"]) for c in run["calls"]] == [
        ({"query": "paris"}, 0), ({"city": "Paris"}, 1), ({"city": "Lyon"}, 2),
        ({"celsius": 21}, 2)]
