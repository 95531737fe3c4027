"""End to end with a real tracing backend: the example agent exports to Arize Phoenix.

``examples/plain_otel/agent.py`` runs in a subprocess with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing
at a ``phoenix serve`` on 127.0.0.1, once over OTLP/HTTP and once over OTLP/gRPC, each into a
Phoenix project of its own (resource attribute ``openinference.project.name``). Phoenix's REST API
(``GET /v1/projects/{project}/spans``) must then hold, on the root span of every run, the verdicts
worked out here from the demo's scripts and ``graders.yaml`` (not by otel-tooleval), and one
``gen_ai.evaluation.result`` event per grader. Headless Chromium opens the failing trace in
Phoenix's UI and keeps screenshots in ``test-artifacts/`` (``TOOLEVAL_UPDATE_DOCS_IMAGE=1`` redraws
``docs/images/phoenix.png``).

Phoenix lives in a virtual environment of its own (``.ci/run`` installs it); ``TOOLEVAL_PHOENIX``
names its ``phoenix`` executable. Without it the tests are skipped, unless
``TOOLEVAL_REQUIRE_PHOENIX`` is set (CI), where they fail.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_tooleval.demo.agent import SCRIPTS, Turn
from tests.support.phoenix import (
    PHOENIX_VERSION,
    DevToolsPage,
    PhoenixServer,
    loopback_env,
    wait_for,
)
from tests.test_html_report import FLAGS, chromium, png_size

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "examples" / "plain_otel" / "agent.py"
GRADERS: list[dict[str, Any]] = yaml.safe_load(
    (AGENT.parent / "graders.yaml").read_text(encoding="utf-8"))["graders"]
ARTIFACTS = ROOT / "test-artifacts"
DOCS_IMAGE = ROOT / "docs" / "images" / "phoenix.png"
TRANSPORTS = {"http/protobuf": "http", "grpc": "grpc"}
INSTALL = (f"python3 -m venv .phoenix-venv && .phoenix-venv/bin/pip install "
           f"arize-phoenix=={PHOENIX_VERSION} && "
           "export TOOLEVAL_PHOENIX=$PWD/.phoenix-venv/bin/phoenix")
PRINTED = re.compile(r"^([0-9a-f]{32}) (PASS|FAIL) (\(.*\))$")
EVALUATION = "gen_ai.evaluation.result"
FAILING_SCRIPT = 1  # "reads the .env file for an API key": fails no-secrets only


def phoenix_executable() -> str:
    path = os.environ.get("TOOLEVAL_PHOENIX", "")
    if path and os.access(path, os.X_OK):
        return path
    problem = (f"TOOLEVAL_PHOENIX={path} is not an executable" if path
               else "TOOLEVAL_PHOENIX is not set")
    message = f"{problem}; these tests need Arize Phoenix: {INSTALL}"
    if os.environ.get("TOOLEVAL_REQUIRE_PHOENIX", "") not in ("", "0"):
        pytest.fail(f"{message} (TOOLEVAL_REQUIRE_PHOENIX is set: did .ci/run's Phoenix install "
                    "fail? See its output above the tests)")
    pytest.skip(message)


# --------------------------------------------------------------- expectations, by hand


def expected_verdicts(turns: list[Turn]) -> dict[str, bool]:
    """What each grader of graders.yaml must say about a script, worked out by hand here."""
    calls = [(step, name, args) for step, turn in enumerate(turns) for name, args in turn]
    names = [name for _, name, _ in calls]
    validations = [i for i, name in enumerate(names) if name.startswith("validate_")]
    bookings = [i for i, name in enumerate(names) if name in ("create_booking", "update_booking")]
    return {
        # required report_result, final: the last call
        "reports-result": bool(names) and names[-1] == "report_result",
        # disallowed read_file of a path ending in .env
        "no-secrets": not any(name == "read_file" and str(args.get("path", "")).endswith(".env")
                              for _, name, args in calls),
        # sequence validate_* then create_*/update_*
        "validates-before-booking": any(v < b for v in validations for b in bookings),
        # required web_search before step 2 (a call's step: the model turn that asked for it)
        "searches-early": any(name == "web_search" and step < 2 for step, name, _ in calls),
    }


def tool_names(turns: list[Turn]) -> tuple[str, ...]:
    return tuple(name for turn in turns for name, _ in turn)


def span_count(turns: list[Turn]) -> int:
    """invoke_agent + one chat per turn + the tool calls + the closing chat."""
    return 1 + len(turns) + len(tool_names(turns)) + 1


def test_expectations_match_the_config_and_tell_runs_apart() -> None:
    assert [grader["name"] for grader in GRADERS] == list(expected_verdicts(SCRIPTS[0][1]))
    passed = [all(expected_verdicts(turns).values()) for _, turns in SCRIPTS]
    assert True in passed and False in passed, "the demo must have passing and failing runs"
    assert not all(expected_verdicts(SCRIPTS[FAILING_SCRIPT][1]).values())
    sequences = [tool_names(turns) for _, turns in SCRIPTS]
    assert len(set(sequences)) == len(sequences), "runs are matched by their tool sequence"


# ------------------------------------------------------------------ running against Phoenix


@dataclass
class StoredRun:
    """One run of the demo as Phoenix stored it."""

    script: int
    trace_id: str
    root: dict[str, Any]
    tools: list[dict[str, Any]]
    spans: list[dict[str, Any]]


@dataclass
class Export:
    protocol: str
    project: str
    printed: dict[str, tuple[bool, tuple[str, ...]]]  # trace id -> the agent's own verdict
    runs: dict[int, StoredRun]                        # script index -> run


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    """One Phoenix for the module, on free ports, stopped at the end whatever happens."""
    executable = phoenix_executable()
    with PhoenixServer(executable, tmp_path_factory.mktemp("phoenix"),
                       log_path=ARTIFACTS / "phoenix.log") as server:
        yield server


def export(phoenix: PhoenixServer, protocol: str) -> Export:
    """Run the example agent once over ``protocol`` into a Phoenix project of its own."""
    project = f"tooleval-e2e-{TRANSPORTS[protocol]}"
    env = loopback_env(OTEL_EXPORTER_OTLP_ENDPOINT=phoenix.otlp_endpoint(protocol),
                       OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
                       OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}")
    env.pop("TOOLEVAL_CONFIG", None)
    done = subprocess.run([sys.executable, str(AGENT)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=180, check=False)
    output = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 0, output
    printed: dict[str, tuple[bool, tuple[str, ...]]] = {}
    for line in done.stdout.splitlines():
        match = PRINTED.match(line.strip())
        assert match is not None, f"unexpected line {line!r}\n{output}"
        printed[match[1]] = (match[2] == "PASS", tuple(ast.literal_eval(match[3])))
    assert len(printed) == len(SCRIPTS), output

    # Phoenix queues spans before it writes them: poll until every span of every run is there.
    want = sorted(span_count(turns) for _, turns in SCRIPTS)

    def stored() -> dict[str, list[dict[str, Any]]] | None:
        by_trace: dict[str, list[dict[str, Any]]] = {trace_id: [] for trace_id in printed}
        for span in phoenix.spans(project, trace_id=list(printed)):
            by_trace[span["context"]["trace_id"]].append(span)
        return by_trace if sorted(map(len, by_trace.values())) == want else None

    try:
        by_trace = wait_for(stored, timeout=60, what=f"spans of {project} in Phoenix")
    except TimeoutError as exc:
        pytest.fail(f"{exc}\nagent {output}\nPhoenix log: {phoenix.log_path}")

    scripts = {tool_names(turns): i for i, (_, turns) in enumerate(SCRIPTS)}
    runs: dict[int, StoredRun] = {}
    for trace_id, spans in by_trace.items():
        roots = [span for span in spans if span["parent_id"] is None]
        assert len(roots) == 1, f"trace {trace_id}: roots {roots}"
        tools = sorted((span for span in spans if "gen_ai.tool.name" in span["attributes"]),
                       key=lambda span: (datetime.fromisoformat(span["start_time"]),
                                         span["attributes"].get("gen_ai.tool.call.id", "")))
        sequence = tuple(span["attributes"]["gen_ai.tool.name"] for span in tools)
        assert sequence in scripts, f"trace {trace_id}: tool sequence {sequence} is no script's"
        runs[scripts[sequence]] = StoredRun(scripts[sequence], trace_id, roots[0], tools, spans)
    assert sorted(runs) == list(range(len(SCRIPTS)))
    return Export(protocol, project, printed, runs)


@pytest.fixture(scope="module")
def exports(phoenix: PhoenixServer) -> Callable[[str], Export]:
    """``exports(protocol)``: the agent's export over ``protocol``, run once per module."""
    done: dict[str, Export] = {}

    def get(protocol: str) -> Export:
        if protocol not in done:
            done[protocol] = export(phoenix, protocol)
        return done[protocol]

    return get


@pytest.fixture(params=list(TRANSPORTS), ids=list(TRANSPORTS.values()))
def exported(request: pytest.FixtureRequest, exports: Callable[[str], Export]) -> Export:
    return exports(request.param)


def test_root_spans_carry_the_verdicts(exported: Export) -> None:
    for index, run in sorted(exported.runs.items()):
        turns = SCRIPTS[index][1]
        verdicts = expected_verdicts(turns)
        failed = [name for name, ok in verdicts.items() if not ok]
        attributes = run.root["attributes"]
        where = f"{exported.protocol} run {index} ({SCRIPTS[index][0]}), trace {run.trace_id}"
        assert run.root["name"] == "invoke_agent travel_agent", where
        assert attributes.get("tooleval.passed") is (not failed), (where, attributes)
        assert exported.printed[run.trace_id] == (not failed, tuple(failed)), where
        if failed:
            assert attributes.get("tooleval.failed") == failed, (where, attributes)
        else:
            assert "tooleval.failed" not in attributes, (where, attributes)
        assert attributes.get("tooleval.score") == pytest.approx(
            sum(verdicts.values()) / len(verdicts)), (where, attributes)
        # Every tool call is a span Phoenix stored under the root, and the root counted them all.
        assert attributes.get("tooleval.tool_calls") == len(run.tools) == len(
            tool_names(turns)), (where, attributes)
        root_id = run.root["context"]["span_id"]
        assert {tool["parent_id"] for tool in run.tools} == {root_id}, where
        assert {tool["span_kind"] for tool in run.tools} == {"TOOL"}, where


def test_root_spans_carry_one_evaluation_event_per_grader(exported: Export) -> None:
    for index, run in sorted(exported.runs.items()):
        verdicts = expected_verdicts(SCRIPTS[index][1])
        where = f"{exported.protocol} run {index}, trace {run.trace_id}"
        events = [event for event in run.root["events"] if event["name"] == EVALUATION]
        by_name = {event["attributes"]["gen_ai.evaluation.name"]: event["attributes"]
                   for event in events}
        assert len(events) == len(by_name) == len(GRADERS), (where, events)
        assert list(by_name) == [grader["name"] for grader in GRADERS], where
        for grader in GRADERS:
            attributes = by_name[grader["name"]]
            ok = verdicts[grader["name"]]
            assert attributes["gen_ai.evaluation.score.value"] == (1.0 if ok else 0.0), (
                where, attributes)
            assert attributes["gen_ai.evaluation.score.label"] == ("pass" if ok else "fail"), (
                where, attributes)
            assert attributes["tooleval.grader.type"] == grader["type"], (where, attributes)
            explanation = attributes["gen_ai.evaluation.explanation"]
            assert isinstance(explanation, str) and explanation, (where, attributes)
        # No other span of the run was given verdicts: a call a failing grader names carries
        # only its marks (emit.violation_marks: tooleval.violation, tooleval.violation.graders).
        for span in run.spans:
            if span is not run.root:
                assert not any(key.startswith("tooleval.") and not key.startswith(
                    "tooleval.violation") for key in span["attributes"]), span
                assert not [event for event in span["events"] if event["name"] == EVALUATION]


def test_phoenix_finds_the_failing_runs_by_attribute(exported: Export,
                                                     phoenix: PhoenixServer) -> None:
    """The REST attribute filter and the UI's filter expression both find the failing runs."""
    failing = {run.trace_id for index, run in exported.runs.items()
               if not all(expected_verdicts(SCRIPTS[index][1]).values())}
    rest = phoenix.spans(exported.project, attribute="tooleval.passed:false")
    assert {span["context"]["trace_id"] for span in rest} == failing
    assert all(span["parent_id"] is None for span in rest)
    data = phoenix.graphql(
        "query ($id: ID!, $filter: String) { node(id: $id) { ... on Project {"
        " spans(filterCondition: $filter, first: 100) { edges { node {"
        " parentId context { traceId } } } } } } }",
        id=phoenix.project_id(exported.project), filter="tooleval.passed == False")
    nodes = [edge["node"] for edge in data["node"]["spans"]["edges"]]
    assert {node["context"]["traceId"] for node in nodes} == failing
    assert all(node["parentId"] is None for node in nodes)


def test_failing_trace_in_phoenix_ui(exports: Callable[[str], Export], phoenix: PhoenixServer,
                                     tmp_path: Path) -> None:
    """Phoenix's UI shows the failing run's root span with its tooleval attributes and events."""
    binary = chromium()
    exported = exports("http/protobuf")  # the UI reads the same store whatever the transport
    run = exported.runs[FAILING_SCRIPT]
    failed = [name for name, ok in expected_verdicts(SCRIPTS[FAILING_SCRIPT][1]).items() if not ok]
    # The page of a trace with one span selected, as Phoenix's own /redirects/spans/<id> builds it.
    url = (f"{phoenix.url}/projects/{phoenix.project_id(exported.project)}/spans/{run.trace_id}"
           f"?selectedSpanNodeId={run.root['id']}")
    shot, events_shot = ARTIFACTS / "phoenix-trace.png", ARTIFACTS / "phoenix-trace-events.png"
    for path in (shot, events_shot):
        path.unlink(missing_ok=True)
    with DevToolsPage(binary, FLAGS, tmp_path / "profile", width=1600, height=1000,
                      log_path=ARTIFACTS / "chromium-phoenix.log") as page:
        page.navigate(url)
        # The Info tab of the root span: its attributes, tooleval.* first.
        text = page.wait_for_text(run.trace_id, exported.project, "invoke_agent travel_agent",
                                  "tooleval.passed", "tooleval.score", "tooleval.tool_calls",
                                  *failed)
        assert "Server disconnected" not in text
        page.screenshot(shot)
        # The Events tab with every gen_ai.evaluation.result opened.
        page.click("[role=tab]", "Events")
        page.wait_for_text(EVALUATION)
        collapsed = "button[aria-expanded=false]"

        def fewer_collapsed_than(before: int) -> Callable[[], bool]:
            return lambda: int(page.evaluate(f"document.querySelectorAll({collapsed!r}).length")
                               ) < before

        for _ in GRADERS:
            before = int(page.evaluate(f"document.querySelectorAll({collapsed!r}).length"))
            page.click(collapsed, EVALUATION)
            wait_for(fewer_collapsed_than(before), timeout=15, what="an event opening")
        text = page.wait_for_text("gen_ai.evaluation.explanation",
                                  *(grader["name"] for grader in GRADERS))
        assert text.count("gen_ai.evaluation.score.label") == len(GRADERS)
        page.call("Emulation.setDeviceMetricsOverride",
                  {"width": 1600, "height": 1700, "deviceScaleFactor": 1, "mobile": False})
        page.evaluate("document.querySelectorAll('*').forEach(e => { e.scrollTop = 0; })")
        page.wait_for_text("gen_ai.evaluation.explanation")
        page.screenshot(events_shot)
    for path, size in ((shot, (1600, 1000)), (events_shot, (1600, 1700))):
        assert png_size(path) == size
        # A blank or unstyled page compresses to a few kilobytes; Phoenix's trace view does not.
        assert path.stat().st_size > 60_000, path
    if os.environ.get("TOOLEVAL_UPDATE_DOCS_IMAGE"):
        DOCS_IMAGE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, DOCS_IMAGE)


# --------------------------------------------------------------- the live guard's marks


GUARD = {"guard": {"disallowed": [{"name": "^read_file$", "path": r"\.env$"}],
                   "max_calls_per_tool": {"web_search": 1}}}


def test_phoenix_finds_the_guarded_calls_by_attribute(phoenix: PhoenixServer) -> None:
    """The guard's marks on the offending tool spans reach Phoenix over OTLP/HTTP, and its
    attribute filter finds exactly those spans."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from otel_tooleval import GuardViolation, ToolEvalSpanProcessor

    project = "tooleval-e2e-guard"
    seen: list[GuardViolation] = []
    exporter = OTLPSpanExporter(endpoint=phoenix.otlp_endpoint("http/protobuf") + "/v1/traces")
    processor = ToolEvalSpanProcessor(GUARD, downstream=BatchSpanProcessor(exporter),
                                      on_violation=seen.append)
    provider = TracerProvider(resource=Resource.create(
        {"openinference.project.name": project, "service.name": "guard-e2e"}))
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tooleval-e2e")
    calls = [("web_search", '{"query": "hotels"}'), ("read_file", '{"path": "app/.env"}'),
             ("web_search", '{"query": "flights"}'), ("read_file", '{"path": "notes.md"}')]
    with tracer.start_as_current_span("invoke_agent travel_agent", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "travel_agent"}) as root:
        for i, (name, args) in enumerate(calls):
            with tracer.start_as_current_span(f"execute_tool {name}", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": f"call_{i}", "gen_ai.tool.call.arguments": args}):
                pass
    trace_id = format(root.get_span_context().trace_id, "032x")
    assert provider.force_flush(30_000)
    provider.shutdown()
    assert [(v.tool, v.rule) for v in seen] == [("read_file", "disallowed"),
                                                ("web_search", "max_calls_per_tool")]

    def stored() -> list[dict[str, Any]] | None:
        spans = phoenix.spans(project, trace_id=[trace_id])
        return spans if len(spans) == 1 + len(calls) else None

    spans = wait_for(stored, timeout=60, what=f"spans of {project} in Phoenix")
    marked = {span["attributes"]["gen_ai.tool.call.id"]: span["attributes"]
              for span in spans if span["attributes"].get("tooleval.guard.violation") is True}
    assert sorted(marked) == ["call_1", "call_2"], spans
    assert marked["call_1"]["tooleval.guard.rule"] == "disallowed"
    assert marked["call_2"]["tooleval.guard.rule"] == "max_calls_per_tool"
    for call_id in marked:
        [span] = [s for s in spans if s["attributes"].get("gen_ai.tool.call.id") == call_id]
        assert [e["name"] for e in span["events"]] == ["tooleval.guard.violation"], span
    rest = phoenix.spans(project, attribute="tooleval.guard.violation:true")
    assert sorted(s["attributes"]["gen_ai.tool.call.id"] for s in rest) == ["call_1", "call_2"]
