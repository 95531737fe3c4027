"""Bad input, generated: configs and trace files that are wrong in every way we can think of.

Property-based (hypothesis). Configs are valid ones (the docs' and examples/all_families.yaml)
mutated at random places: wrong types, unknown keys, missing keys, bad and unsafe regexes,
out-of-range numbers, extra nesting. Every one either loads or raises ConfigError naming where
the problem is; never another exception, never a hang. OTLP/JSON files are generated valid and
then corrupted (wrong types for ids, times and attributes, truncated lines, garbage): every
one is read, with each bad part reported with its file and line, and graded, in-process and
through ``otel-tooleval grade``; nothing crashes, nothing hangs.

Each case hypothesis found is kept below as a plain regression test (``test_found_*``).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import shutil
import signal
import string
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_tooleval.cli import main as cli_main
from otel_tooleval.config import ConfigError, load_config
from otel_tooleval.files import InputError, InputProblem, iter_traces, read_records
from otel_tooleval.graders.registry import format_loc
from otel_tooleval.grading import grade_records

ROOT = Path(__file__).resolve().parents[2]

# Keeps the whole file well under a minute on the 2-core CI machine; derandomized in CI so a
# landing never depends on the seed (run locally without CI=true to explore new seeds).
# TOOLEVAL_HYPOTHESIS_SCALE=10 explores ten times as many examples (not in CI).
SCALE = float(os.environ.get("TOOLEVAL_HYPOTHESIS_SCALE", "1"))


def examples(n: int) -> int:
    return max(1, int(n * SCALE))


SETTINGS: dict[str, Any] = {
    "deadline": None,
    "derandomize": bool(os.environ.get("CI")),
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much],
}


@contextlib.contextmanager
def no_hang(seconds: float = 20.0) -> Iterator[None]:
    """Turn a hang into a failure (main thread, POSIX): SIGALRM raises in the stuck frame."""
    if not hasattr(signal, "setitimer") or os.name != "posix":
        yield
        return

    def alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"did not finish within {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- valid configs to start from -----------------------------------------------------------------

BASE_CONFIGS: list[dict[str, Any]] = [
    yaml.safe_load((ROOT / "examples" / "all_families.yaml").read_text()),
    {  # docs/graders/tool_calls.md and docs/config.md, in full
        "graders": [{"name": "runs-tests", "type": "tool-calls", "agents": ["coder"], "config": {
            "required": ["create", {"name": "bash", "command": "npm test"},
                         {"name": "^upload$", "min_count": 2},
                         {"name": "^load_skill$", "before_step": 3},
                         {"name": "^validate$", "at_step": 0},
                         {"name": "^bash$", "command": "npm run build",
                          "result": "BUILD SUCCEEDED"},
                         {"name": "^report_result$", "final": True},
                         {"name": "^web_search$", "args": {"query": "release notes"}}],
            "disallowed": [{"name": "view", "path": "\\.env$"}],
            "sequence": ["^validate_.*", "^(create|update)_.*"]}}],
        "runs": {"root": "auto", "agents": None, "nested_agents": "merge",
                 "agent_span_names": [], "ignore_tools": ["final_result"],
                 "server_attributes": ["mcp.server.name"],
                 "ground_truth_attribute": "tooleval.ground_truth"},
        "limits": {"max_open_runs": 10000, "max_calls_per_run": 10000,
                   "max_spans_per_trace": 100000, "max_run_bytes": 16777216,
                   "run_ttl_seconds": 600, "tombstone_seconds": 60, "queue_size": 1024,
                   "max_match_chars": 8192, "grading_budget_ms": 1000},
        "emit": {"span_events": True, "root_attributes": True, "log_events": True,
                 "metrics": True, "include_values": False},
    },
    {"graders": [{"name": "workflow", "type": "tool_trajectory", "mode": "in_order",
                  "expected": [{"tool": "search", "args": {"query": "machine learning"}},
                               {"tool": "saveResults", "max_duration_ms": 500}],
                  "threshold": 1.0},
                 {"type": "tool_trajectory", "mode": "any_order",
                  "minimums": {"search": 1, "fetch": 2}}]},
    {"graders": [{"name": "research-agent picks search then fetch", "type": "agent",
                  "agent": "researcher", "runs": 1, "equal_function_sets": {
                      "classes": [{"name": "search",
                                   "members": ["brave.web_search", "google.search"]},
                                  {"name": "fetch", "members": ["http.get"]}],
                      "expect": [{"tool_selection.f1": {">=": 80}}]}}]},
    {"graders": {"capital": {"kind": "tool", "function": "contains",
                             "extractor": "last_assistant", "ground_truth": "Paris"},
                 "args": {"kind": "tool", "function": "exact_match",
                          "extractor": "tool_arguments",
                          "extractor_config": {"tool_name": "search", "occurrence": "all"},
                          "ground_truth": "[]"},
                 "marker": {"kind": "tool", "function": "regex_match",
                            "extractor": "after_marker",
                            "extractor_config": {"marker": "ANSWER:"},
                            "ground_truth": "^[A-Z]"},
                 "pattern": {"kind": "tool", "function": "ascii_printable_only",
                             "extractor": "pattern",
                             "extractor_config": {"pattern": "id=(?P<id>\\w+)", "group": "id"}}}},
    {"graders": [
        {"type": "tool-call-order", "strict": False, "tool_calls_order": ["search", "filter"]},
        {"type": "tool-call-count", "tool_calls_count": {"search": [">=", 1],
                                                          "delete": ["==", 0]}},
        {"type": "tool-call-args", "subset": True,
         "tool_calls": [{"name": "search", "args": {"query": "otel"}}]},
        {"type": "tool-call-output", "tool_outputs": [{"name": "display", "output": "done"}]},
        {"type": "tool-call-order", "config": {"strict": True},
         "evaluation_criteria": {"tool_calls_order": ["a", "b"]}},
    ]},
]


def test_base_configs_are_valid() -> None:
    for doc in BASE_CONFIGS:
        load_config(copy.deepcopy(doc))


# -- mutations -----------------------------------------------------------------------------------

REGEXES = ["(", "[", "*", "a{2,1}", "\\", "(?P<x>a)(?P<x>b)", "(a+)+$", "(\\w+\\s?)*$",
           "(.*,)+x", "(?i", "[z-a]", "\\k<nope>", ".*" * 50, "(" * 200 + ")" * 200]
JUNK = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
    | st.sampled_from(REGEXES),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(string.ascii_letters + "._-", max_size=8), inner, max_size=3),
    max_leaves=6)
NUMBERS = st.sampled_from([-1, 0, 1, 2**63, 10**400, -0.5, float("nan"), float("inf"), True,
                           "3", "", None])
UNKNOWN_KEYS = st.sampled_from(["nmae", "tpye", "confg", "extra", "max_duration", "mode2",
                                "exact", "name ", "", "0"])

Path_ = tuple[Any, ...]


def _children(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return list(node)
    if isinstance(node, list):
        return list(range(len(node)))
    return []


def _get(doc: Any, path: Path_) -> Any:
    for part in path:
        doc = doc[part]
    return doc


@st.composite
def _path(draw: st.DrawFn, doc: Any) -> Path_:
    path: Path_ = ()
    node = doc
    while True:
        keys = _children(node)
        if not keys or draw(st.integers(0, 3)) == 0:
            return path
        key = draw(st.sampled_from(keys))
        path += (key,)
        node = node[key]


@st.composite
def mutated_config(draw: st.DrawFn) -> tuple[Any, list[Path_]]:
    """A base config with one to three mutations; returns it and where each one was made."""
    doc: Any = copy.deepcopy(draw(st.sampled_from(BASE_CONFIGS)))
    paths: list[Path_] = []
    for _ in range(draw(st.integers(1, 3))):
        path = draw(_path(doc))
        kind = draw(st.sampled_from(
            ["junk", "number", "regex", "delete", "unknown_key", "wrap_list", "wrap_dict",
             "duplicate", "string"]))
        if not path:
            if kind in ("junk", "wrap_list"):
                doc = draw(JUNK) if kind == "junk" else [doc]
            elif isinstance(doc, dict):
                doc[draw(UNKNOWN_KEYS) or "x"] = draw(JUNK)
                path = (next(reversed(doc)),)
            paths.append(path)
            continue
        parent, key = _get(doc, path[:-1]), path[-1]
        value = parent[key]
        if kind == "junk":
            parent[key] = draw(JUNK)
        elif kind == "number":
            parent[key] = draw(NUMBERS)
        elif kind == "regex":
            parent[key] = draw(st.sampled_from(REGEXES))
        elif kind == "string":
            parent[key] = draw(st.text(max_size=6))
        elif kind == "delete":
            del parent[key]
            if isinstance(parent, list):   # the entries after it moved: name the list
                path = path[:-1]
        elif kind == "unknown_key" and isinstance(value, dict):
            unknown = draw(UNKNOWN_KEYS)
            value[unknown] = draw(JUNK)
            path += (unknown,)
        elif kind == "wrap_list":
            parent[key] = [value]
        elif kind == "wrap_dict":
            parent[key] = {"config": value}
        elif kind == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(value))
            path = (*path[:-1], len(parent) - 1)
        else:
            parent[key] = draw(JUNK)
        paths.append(path)
    return doc, paths


def _related(loc: Path_, path: Path_) -> bool:
    """A problem's location names the mutated place: one is a prefix of the other, or both are
    in the same grader entry (a deleted ``equal_function_sets`` shows at that entry's ``type``)."""
    n = min(len(loc), len(path))
    if loc[:n] == path[:n]:
        return True
    return len(loc) >= 2 and len(path) >= 2 and loc[:2] == path[:2]


def check_config(doc: Any, paths: list[Path_]) -> None:
    try:
        with no_hang():
            load_config(doc)
    except ConfigError as exc:
        message = str(exc)
        assert exc.problems, message
        for problem in exc.problems:
            assert problem.message, message
            if problem.loc:
                assert format_loc(problem.loc) in message, message
        assert any(_related(p.loc, path) for p in exc.problems for path in paths) or any(
            "duplicate grader name" in p.message for p in exc.problems), (paths, message)


@settings(max_examples=examples(400), **SETTINGS)
@given(mutated_config())
def test_mutated_configs_load_or_name_the_bad_field(case: tuple[Any, list[Path_]]) -> None:
    check_config(*case)


@settings(max_examples=examples(60), **SETTINGS)
@given(mutated_config())
def test_mutated_configs_as_yaml_text(case: tuple[Any, list[Path_]]) -> None:
    doc, paths = case
    try:
        text = yaml.safe_dump(doc, allow_unicode=True)
    except (yaml.YAMLError, ValueError, OverflowError):
        return
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        return
    if isinstance(parsed, str):   # a plain scalar would be taken for a path
        return
    check_config(text if "\n" in text else parsed, paths)


# -- OTLP/JSON documents -------------------------------------------------------------------------

def _hex(n: int) -> st.SearchStrategy[str]:
    return st.binary(min_size=n, max_size=n).filter(any).map(bytes.hex)


TEXTS = st.text(max_size=30) | st.sampled_from(
    ["npm test", "/app/.env", "BUILD SUCCEEDED", "Paris", "ANSWER: Lisbon", "id=abc"])
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False) | TEXTS, lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["query", "path", "command", "url", "content", "x"]),
                      inner, max_size=3), max_leaves=4)


def _any_value() -> st.SearchStrategy[dict[str, Any]]:
    scalar = st.one_of(
        TEXTS.map(lambda s: {"stringValue": s}),
        JSON_VALUES.map(lambda v: {"stringValue": json.dumps(v)}),
        st.integers(-(2**63), 2**63 - 1).map(lambda i: {"intValue": str(i)}),
        st.integers(-(2**53), 2**53).map(lambda i: {"intValue": i}),
        st.floats(allow_nan=False, allow_infinity=False).map(lambda f: {"doubleValue": f}),
        st.sampled_from(["Infinity", "-Infinity", "NaN", "1.5"]).map(
            lambda f: {"doubleValue": f}),                  # protobuf JSON's spelling
        st.booleans().map(lambda b: {"boolValue": b}),
        st.binary(max_size=8).map(lambda b: {"bytesValue": __import__("base64")
                                              .b64encode(b).decode()}),
        st.builds(dict),
    )
    return st.recursive(scalar, lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda vs: {"arrayValue": {"values": vs}}),
        st.lists(st.tuples(st.text(max_size=5), inner), max_size=3).map(
            lambda kvs: {"kvlistValue": {"values": [{"key": k, "value": v} for k, v in kvs]}}),
    ), max_leaves=4)


ATTR_KEYS = st.sampled_from([
    "gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result", "gen_ai.tool.call.id", "gen_ai.agent.name", "agent.name",
    "gen_ai.output.messages", "tool.name", "input.value", "output.value", "tool.synthesized",
    "openinference.span.kind", "traceloop.span.kind", "traceloop.entity.name",
    "tooleval.ground_truth", "final_result", "mcp.server.name", "llm.output_messages.0.message.content",
    "other"])


def _attr(key: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"key": key, "value": value}


@st.composite
def otlp_document(draw: st.DrawFn) -> dict[str, Any]:
    """One valid ExportTraceServiceRequest: a few traces of agent, model and tool spans."""
    spans: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 2))):
        trace_id = draw(_hex(16))
        root_id = draw(_hex(8))
        start = draw(st.integers(1, 2**62))
        ids = [root_id]
        root_attrs = [_attr("gen_ai.operation.name", {"stringValue": "invoke_agent"}),
                      _attr("gen_ai.agent.name", {"stringValue": draw(
                          st.sampled_from(["researcher", "coder", ""]))})]
        if draw(st.booleans()):
            root_attrs.append(_attr("final_result", {"stringValue": draw(TEXTS)}))
        if draw(st.booleans()):
            root_attrs.append(_attr("tooleval.ground_truth", {"stringValue": draw(TEXTS)}))
        spans.append({"traceId": trace_id, "spanId": root_id, "name": "invoke_agent a",
                      "startTimeUnixNano": str(start),
                      "endTimeUnixNano": str(start + 10**9), "attributes": root_attrs})
        for k in range(draw(st.integers(0, 4))):
            sid = draw(_hex(8))
            parent = draw(st.sampled_from(ids))
            ids.append(sid)
            kind = draw(st.sampled_from(["tool", "tool", "chat", "other"]))
            attrs: list[dict[str, Any]] = []
            if kind == "tool":
                name = draw(st.sampled_from(["search", "fetch", "bash", "view", "mcp__s__t",
                                             "display", ""]))
                attrs += [_attr("gen_ai.operation.name", {"stringValue": "execute_tool"}),
                          _attr("gen_ai.tool.name", {"stringValue": name}),
                          _attr("gen_ai.tool.call.arguments",
                                {"stringValue": json.dumps(draw(JSON_VALUES))})]
                if draw(st.booleans()):
                    attrs.append(_attr("gen_ai.tool.call.result",
                                       {"stringValue": json.dumps(draw(JSON_VALUES))}))
            elif kind == "chat":
                attrs += [_attr("gen_ai.operation.name", {"stringValue": "chat"}),
                          _attr("gen_ai.output.messages", {"stringValue": json.dumps(
                              [{"role": "assistant", "parts": [
                                  {"type": "text", "content": draw(TEXTS)}]}])})]
            for key, value in draw(st.lists(st.tuples(ATTR_KEYS, _any_value()), max_size=2)):
                attrs.append(_attr(key, value))
            s = start + 1 + k * 1000
            span: dict[str, Any] = {
                "traceId": trace_id, "spanId": sid, "parentSpanId": parent,
                "name": f"{kind} {k}", "startTimeUnixNano": str(s), "attributes": attrs}
            if draw(st.integers(0, 5)):
                span["endTimeUnixNano"] = str(s + draw(st.integers(0, 10**10)))
            if draw(st.integers(0, 4)) == 0:
                span["status"] = {"code": 2, "message": draw(TEXTS)}
            if draw(st.integers(0, 5)) == 0:
                span["flags"] = draw(st.sampled_from([0x100, 0x300, 1]))
            spans.append(span)
    return {"resourceSpans": [{"resource": {"attributes": []},
                               "scopeSpans": [{"scope": {"name": "test"}, "spans": spans}]}]}


WRONG = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**20), 10**20), st.floats(),
    st.text(max_size=40), st.lists(st.integers(), max_size=2), st.builds(dict),
    st.sampled_from(["zz" * 16, "0" * 32, "0" * 16, "AAAAAAAAAAA=", "1e9", "-5", "NaN",
                     "9" * 5000, "", "0x10"]),
    st.sampled_from([{"intValue": "abc"}, {"intValue": "9" * 5000}, {"doubleValue": "x"},
                     {"boolValue": []}, {"bytesValue": "!!!"}, {"arrayValue": 5},
                     {"arrayValue": {"values": [5]}}, {"kvlistValue": {"values": [{}]}},
                     {"kvlistValue": {"values": [{"key": [], "value": {}}]}},
                     {"stringValue": None}, {"stringValue": 5}, {"unknownValue": 1}]),
)


@st.composite
def corrupted_document(draw: st.DrawFn) -> Any:
    doc: Any = copy.deepcopy(draw(otlp_document()))   # drawn values may be shared: copy first
    for _ in range(draw(st.integers(1, 4))):
        path = draw(_path(doc))
        if not path:
            if draw(st.integers(0, 4)) == 0:
                doc = copy.deepcopy(draw(WRONG))
            continue
        parent, key = _get(doc, path[:-1]), path[-1]
        if draw(st.integers(0, 3)) == 0:
            del parent[key]
        else:
            parent[key] = copy.deepcopy(draw(WRONG))
    return doc


@st.composite
def jsonl_file(draw: st.DrawFn) -> tuple[bytes, set[int]]:
    """A JSON-lines file, and the line numbers that were damaged as text (not parseable)."""
    lines: list[bytes] = []
    broken: set[int] = set()
    for number in range(1, draw(st.integers(1, 4)) + 1):
        kind = draw(st.sampled_from(["valid", "valid", "corrupted", "truncated", "garbage",
                                     "blank", "nested"]))
        if kind == "valid":
            line = json.dumps(draw(otlp_document())).encode()
        elif kind == "corrupted":
            line = json.dumps(draw(corrupted_document()), allow_nan=True).encode()
        elif kind == "truncated":
            text = json.dumps(draw(otlp_document())).encode()
            line = text[:draw(st.integers(1, max(1, len(text) - 1)))]
            broken.add(number)
        elif kind == "garbage":
            line = draw(st.binary(min_size=1, max_size=60)).replace(b"\n", b" ")
            try:
                json.loads(line)
            except ValueError:
                # a line of whitespace is a blank line; a BOM is dropped from the first
                if (line.removeprefix(b"\xef\xbb\xbf") if number == 1 else line).strip():
                    broken.add(number)
        elif kind == "nested":
            depth = draw(st.integers(1, 100_000))
            line = b"[" * depth + b"]" * depth
        else:
            line = b"   "
        lines.append(line)
    return b"\n".join(lines) + b"\n", broken


_ENTRIES = [
    *BASE_CONFIGS[0]["graders"],
    *BASE_CONFIGS[1]["graders"],
    *BASE_CONFIGS[2]["graders"],
    *BASE_CONFIGS[3]["graders"],
    *BASE_CONFIGS[5]["graders"],
    *BASE_CONFIGS[4]["graders"].values(),
    {"kind": "tool", "function": "regex_match", "extractor": "all_assistant"},
    {"kind": "tool", "function": "contains", "extractor": "span_attribute",
     "extractor_config": {"attribute": "other"}, "ground_truth": "x"},
]
GRADE_CONFIG = {"graders": [{**e, "name": f"g{i}", "agents": None} for i, e in
                            enumerate(_ENTRIES)]}
for _e in GRADE_CONFIG["graders"]:
    _e.pop("agents")
    _e.pop("agent", None)
CONFIG = load_config(GRADE_CONFIG)


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tooleval-bad-input-"))
    (path / "graders.json").write_text(json.dumps(GRADE_CONFIG))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def read_and_grade(path: Path) -> tuple[list[InputProblem], int, int]:
    """Read and grade a file in-process; (problems, spans, runs)."""
    problems: list[InputProblem] = []
    spans = runs = 0
    records = read_records(str(path), on_problem=problems.append)

    def counted() -> Iterator[Any]:
        nonlocal spans
        for record in records:
            spans += 1
            yield record

    for trace in iter_traces(counted()):
        for report in grade_records(trace, CONFIG):
            runs += 1
            assert report.to_dict()["results"] is not None
            json.dumps(report.to_dict())
    return problems, spans, runs


def check_file(path: Path, data: bytes, broken: set[int]) -> None:
    path.write_bytes(data)
    n_lines = data.count(b"\n")
    try:
        with no_hang():
            problems, _, _ = read_and_grade(path)
    except InputError as exc:
        # The whole input is unreadable: the reason names the file, and the line where there
        # are lines (a binary file that is not protobuf has none).
        assert str(exc).startswith(str(path)), str(exc)
        assert "\n" not in str(exc), str(exc)
        if "invalid JSON" in str(exc):
            assert re.match(re.escape(str(path)) + r":\d+: ", str(exc)), str(exc)
        return
    for problem in problems:
        assert problem.path == str(path)
        if problem.line is None:   # read as protobuf (binary garbage first): a byte offset
            assert re.search(r"at byte \d+", problem.message), problem
        else:
            assert 1 <= problem.line <= n_lines, problem
        assert problem.message and "\n" not in problem.message, problem
        assert str(path) in str(problem)
    reported = {p.line for p in problems}
    if None not in reported:      # read as JSON lines: every line broken as text is named
        assert broken <= reported, (broken, problems)


@settings(max_examples=examples(150), **SETTINGS)
@given(data=jsonl_file())
def test_generated_otlp_files_are_read_or_reported_by_line(
        workdir: Path, data: tuple[bytes, set[int]]) -> None:
    check_file(workdir / "traces.jsonl", *data)


@settings(max_examples=examples(60), **SETTINGS)
@given(doc=otlp_document())
def test_valid_otlp_documents_read_without_problems(workdir: Path, doc: dict[str, Any]) -> None:
    path = workdir / "valid.jsonl"
    path.write_text(json.dumps(doc) + "\n")
    with no_hang():
        problems, spans, _ = read_and_grade(path)
    assert problems == []
    assert spans == sum(len(ss["spans"]) for rs in doc["resourceSpans"]
                        for ss in rs["scopeSpans"])


@settings(max_examples=examples(40), **SETTINGS)
@given(data=jsonl_file(), fmt=st.sampled_from(["json", "junit", "table", "html"]))
def test_grade_cli_exits_cleanly_on_generated_files(
        workdir: Path, data: tuple[bytes, set[int]], fmt: str) -> None:
    path = workdir / "cli.jsonl"
    path.write_bytes(data[0])
    out, err = io.StringIO(), io.StringIO()
    with no_hang(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(["grade", str(path), "-c", str(workdir / "graders.json"), "-f", fmt])
    assert code in (0, 1, 2), code
    lines = err.getvalue().splitlines()
    if code == 2:
        assert lines, "exit 2 without a reason"
        # Exit 2 for what was read: nothing to grade, or a config the drawn calls do not fit.
        gate = [line for line in lines if "none was an agent run" in line
                or "config problem found while grading" in line]
        assert all("otel-tooleval inspect " + str(path) in line for line in gate
                   if "none was an agent run" in line), gate
        read = [line for line in lines if line not in gate]
        assert all(str(path) in line for line in read), lines
        # a line, or for input read as protobuf (binary first bytes) a byte offset, or for a
        # compressed file cut short (gzip magic, then nothing whole) the whole file's reason
        assert gate or any(re.search(re.escape(str(path)) + r":\d+: ", line) or re.search(
            r"at byte \d+|unknown format|not (gzip|zstd)-decodable", line)
            for line in read), lines
    if fmt == "json" and out.getvalue().strip():
        json.loads(out.getvalue())


# -- cases hypothesis found, kept as plain regression tests --------------------------------------

def _span(span_id: str, parent: str | None, attrs: list[dict[str, Any]],
          **fields: Any) -> dict[str, Any]:
    span = {"traceId": "ab" * 16, "spanId": span_id, "name": f"s {span_id}",
            "startTimeUnixNano": "10", "endTimeUnixNano": "20", "attributes": attrs, **fields}
    if parent:
        span["parentSpanId"] = parent
    return span


def _file(workdir: Path, *spans: dict[str, Any]) -> Path:
    path = workdir / "found.jsonl"
    doc = {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "t"}, "spans": list(spans)}]}]}
    path.write_text(json.dumps(doc) + "\n")
    return path


ROOT_ATTRS = [_attr("gen_ai.operation.name", {"stringValue": "invoke_agent"})]
TOOL_ATTRS = [_attr("gen_ai.operation.name", {"stringValue": "execute_tool"}),
              _attr("gen_ai.tool.name", {"stringValue": "search"})]


def test_found_a_kvlist_or_array_where_a_span_kind_marker_belongs(workdir: Path) -> None:
    """conventions.span_kind looked marker values up in a dict: a kvlist (a dict) raised
    TypeError: unhashable type, and ``grade`` crashed. A non-string marker marks nothing."""
    kvlist = {"kvlistValue": {"values": [{"key": "k", "value": {"stringValue": "v"}}]}}
    array_of_kvlists = {"arrayValue": {"values": [{"kvlistValue": {"values": []}}]}}
    path = _file(workdir,
                 _span("00000000000000a1", None, ROOT_ATTRS),
                 _span("00000000000000a2", "00000000000000a1",
                       [*TOOL_ATTRS, _attr("traceloop.span.kind", kvlist)]),
                 _span("00000000000000a3", "00000000000000a1",
                       [_attr("gen_ai.operation.name", array_of_kvlists),
                        _attr("openinference.span.kind", kvlist)]))
    problems, spans, runs = read_and_grade(path)
    assert (problems, spans, runs) == ([], 3, 1)


def _valid_line() -> bytes:
    doc = {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "t"}, "spans": [
        _span("00000000000000b1", None, ROOT_ATTRS),
        _span("00000000000000b2", "00000000000000b1", TOOL_ATTRS)]}]}]}
    return json.dumps(doc).encode()


@pytest.mark.parametrize("first", [
    b'ue"}}]}]}]}',                       # the tail of a line cut by a rotation
    b"null",                              # JSON, but no document
    b"\x00" * 40,                         # zeros left by a crash
    b"\xff\xfe garbage \x01\x02",         # binary garbage
])
def test_found_a_bad_first_line_made_a_json_lines_file_protobuf(workdir: Path,
                                                                first: bytes) -> None:
    """The format was told by the first byte only: a JSON-lines file whose first line was
    damaged was read as protobuf, every good line after it was lost, and the reason named no
    line. Now the damaged line is reported by its number and the rest is graded."""
    path = workdir / "first-line.jsonl"
    path.write_bytes(first + b"\n" + _valid_line() + b"\n" + _valid_line() + b"\n")
    problems, spans, runs = read_and_grade(path)
    assert [p.line for p in problems] == [1], problems
    assert (spans, runs) == (4, 1)   # the same span twice (an exporter's retry) is one run


def test_found_binary_input_is_still_protobuf(workdir: Path) -> None:
    path = workdir / "binary.bin"
    path.write_bytes(b"\x00\x00\x00\x05\x0a\x03\x01\x02\x03")
    problems: list[InputProblem] = []
    assert list(read_records(str(path), on_problem=problems.append)) == []
    assert problems and all(p.line is None and "byte" in p.message for p in problems)


def test_found_nested_too_deeply_names_the_line(workdir: Path) -> None:
    """Two unreadable lines, the first nested too deeply: the reason named the file but no
    line (the nesting error has no position); now it names the first line."""
    path = workdir / "nested.jsonl"
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000 + b"\n{not json\n")
    with pytest.raises(InputError, match=re.escape(f"{path}:1: ") + "invalid JSON"):
        read_and_grade(path)


@pytest.mark.parametrize("name", [True, 3, {"a": 1}, ["x"]], ids=["bool", "int", "object", "list"])
def test_a_span_name_that_is_no_string_is_reported_by_line_and_an_event_name_ignored(
        workdir: Path, name: Any) -> None:
    """Found by ``test_generated_otlp_files_are_read_or_reported_by_line``: a span whose name was
    ``true`` reached the agent naming (``_UUID.sub``) and raised TypeError. The span is now
    skipped and reported on its line, the others read; an event name that is no string names
    no event."""
    def line(span_name: Any, event_name: Any) -> str:
        span = {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": span_name,
                "startTimeUnixNano": "1", "endTimeUnixNano": "2",
                "attributes": [{"key": "gen_ai.operation.name",
                                "value": {"stringValue": "invoke_agent"}}],
                "events": [{"name": event_name, "timeUnixNano": "1"}]}
        return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})

    path = workdir / "span-name.jsonl"
    path.write_text(line(name, "x") + "\n" + line("invoke_agent a", name) + "\n")
    problems, spans, runs = read_and_grade(path)
    assert [(p.line, "name is not a string; span skipped" in p.message) for p in problems] == [
        (1, True)]
    assert (spans, runs) == (1, 1)
    (record,) = read_records(str(path), on_problem=lambda p: None)
    assert record.events == (("", {}),)
