"""Trace-file readers (``otel_tooleval.files``): every format, gzip, stdin, bad input, streaming.

The golden files in tests/data/files/ are written by make_golden.py there from real SDK spans;
what each reader reads is compared with the SDK's own records of those spans, and graded.
"""

from __future__ import annotations

import base64
import gc
import gzip
import io
import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, cast

import pytest
from google.protobuf.json_format import MessageToDict

from otel_tooleval.config import load_config
from otel_tooleval.files import InputError, InputProblem, iter_traces, read_records
from otel_tooleval.grading import grade_records
from otel_tooleval.model import SpanRecord
from otel_tooleval.readers import json_input
from tests.data.files import make_golden

DATA = Path(__file__).parent / "data" / "files"
JSONL = DATA / "traces.otlp.jsonl"
PRETTY = DATA / "traces.otlp.json"
PROTO = DATA / "traces.otlp.pb"
VARINT = DATA / "traces.otlp.varint.pb"
JAEGER = DATA / "traces.jaeger.json"
JSONL_GZ = DATA / "traces.otlp.jsonl.gz"
OTLP_FILES = [JSONL, PRETTY, PROTO, VARINT, JSONL_GZ]
ALL_FILES = [*OTLP_FILES, JAEGER]

CONFIG = load_config({"graders": [
    {"name": "no-refunds", "type": "tool-calls",
     "config": {"disallowed": [{"name": "^refund$"}]}},
    {"name": "researched", "type": "tool-calls", "agents": ["researcher"],
     "config": {"required": [{"name": "^search$"}], "sequence": ["^search$", "^write_report$"]}},
    {"name": "tested", "type": "tool-calls", "agents": ["orchestrator"],
     "config": {"required": [{"name": "^run_tests$"}, {"name": "^notify$"}]}},
]})


@pytest.fixture(scope="module")
def expected() -> list[SpanRecord]:
    return make_golden.expected_records()


def read(source: Any, **kwargs: Any) -> tuple[list[SpanRecord], list[InputProblem]]:
    problems: list[InputProblem] = []
    records = list(read_records(source, on_problem=problems.append, **kwargs))
    return records, problems


def by_id(records: list[SpanRecord]) -> list[SpanRecord]:
    return sorted(records, key=lambda r: (r.trace_id, r.span_id))


def as_jaeger_keeps_it(records: list[SpanRecord]) -> list[SpanRecord]:
    """Jaeger has no array or map tags (JSON text instead) and no remote-parent flag."""
    def text(value: Any) -> Any:
        if isinstance(value, (tuple, dict)):
            return json.dumps(_listed(value), separators=(",", ":"))
        return value

    return [r._replace(attributes={k: text(v) for k, v in r.attributes.items()},
                       parent_remote=False) for r in records]


def _listed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _listed(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_listed(v) for v in value]
    return value


def reports(records: list[SpanRecord]) -> list[dict[str, Any]]:
    """Graded as ``otel-tooleval grade`` does: cut into traces as they complete, then graded."""
    out = [r.to_dict() for trace in iter_traces(records) for r in grade_records(trace, CONFIG)]
    return sorted(out, key=lambda d: (d["trace_id"], d["root_span_id"]))


# -- every format reads the same spans ----------------------------------------------------------

def test_the_golden_spans_cover_what_the_files_must_show(expected: list[SpanRecord]) -> None:
    names = {r.name for r in expected}
    assert "POST /v1/chat" not in names  # the support trace's root was never exported
    assert {"invoke_agent coder", "invoke_agent orchestrator"} <= names  # nested agents
    assert any(r.parent_remote for r in expected)
    assert {r.error for r in expected} == {None, "connection refused", "card declined"}
    fetch = next(r for r in expected if r.name == "execute_tool fetch_page" and not r.error)
    assert fetch.attributes["app.fetch.context"] == {"region": "eu-west-1", "attempt": 2,
                                                     "tags": ("a", "b")}
    assert len({r.trace_id for r in expected}) == 5


@pytest.mark.parametrize("path", OTLP_FILES, ids=lambda p: p.name)
def test_each_otlp_file_reads_the_sdk_spans(path: Path, expected: list[SpanRecord]) -> None:
    records, _ = read(path)
    assert by_id(records) == expected


def test_every_otlp_attribute_type_is_read(expected: list[SpanRecord]) -> None:
    records, _ = read(JSONL)
    search = next(r for r in records if r.name == "execute_tool search")
    assert search.attributes["app.retry.counts"] == (0, 1, 2)
    assert search.attributes["app.weights"] == (0.5, 1.5)
    assert search.attributes["app.flags"] == (True, False)
    assert search.attributes["app.score"] == 0.75
    assert search.attributes["app.cached"] is False
    fetch = next(r for r in records if r.name == "execute_tool fetch_page" and not r.error)
    assert fetch.attributes["app.fetch.digest"] == b"\x00\x01\xfe\xff"
    chat = next(r for r in records if r.name == "chat gpt-4o")
    assert chat.attributes["gen_ai.usage.input_tokens"] == 812
    assert chat.scope == "example.agent"


def test_jaeger_file_reads_the_sdk_spans_as_jaeger_keeps_them(
        expected: list[SpanRecord]) -> None:
    records, _ = read(JAEGER)
    assert by_id(records) == as_jaeger_keeps_it(expected)
    assert all(r.scope in ("example.agent", "example.tools") for r in records)
    # Translation tags are fields of the record, not attributes.
    assert not any({"otel.scope.name", "otel.status_code", "error", "span.kind"}
                   & r.attributes.keys() for r in records)


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: p.name)
def test_each_format_grades_the_same_runs(path: Path, expected: list[SpanRecord]) -> None:
    records, _ = read(path)
    assert reports(records) == reports(expected)


def test_the_runs_graded_from_files(expected: list[SpanRecord]) -> None:
    runs = {d["agent"]: d for d in reports(read(JSONL)[0])}
    assert set(runs) == {"researcher", "orchestrator", "support", "planner"}  # /health is none
    support = next(r for r in expected if r.name == "invoke_agent support")
    # The trace whose root is missing is a run rooted at its top span, not dropped.
    assert runs["support"]["root_span_id"] == format(support.span_id, "016x")
    assert [x["passed"] for x in runs["support"]["results"]] == [False]
    # The nested coder's calls belong to the orchestrator; notify ended after the root.
    assert (runs["orchestrator"]["tool_calls"], runs["orchestrator"]["pending_calls"]) == (5, 1)
    assert {x["name"]: x["passed"] for x in runs["orchestrator"]["results"]} == {
        "no-refunds": True, "tested": False}
    assert runs["researcher"]["passed"] and runs["planner"]["passed"]


# -- malformed input is reported with file and line; the rest is read ---------------------------

def test_malformed_lines_are_reported_with_path_and_line() -> None:
    records, problems = read(JSONL)
    assert [(p.path, p.line) for p in problems] == [(str(JSONL), 2), (str(JSONL), 4),
                                                    (str(JSONL), 8)]
    assert problems[0].message.startswith(
        "resourceSpans[0].scopeSpans[0].spans[2]: traceId 'not-a-trace-id' is not")
    assert problems[1].message.startswith("invalid JSON")
    assert "metrics document" in problems[2].message
    assert str(problems[1]).startswith(f"{JSONL}:4: invalid JSON")
    assert len(records) == 26  # every good span, including those on the line with the bad one


def test_a_message_that_does_not_parse_is_reported_and_the_rest_read() -> None:
    records, problems = read(PROTO)
    assert len(problems) == 1
    assert problems[0].line is None
    assert problems[0].message.startswith("message 3 at byte ")
    assert len(records) == 26


def test_a_bad_jaeger_span_is_reported_with_its_json_path() -> None:
    records, problems = read(JAEGER)
    assert len(records) == 26
    assert [(p.path, p.line) for p in problems] == [(str(JAEGER), None)]
    assert problems[0].message.startswith("data[0].spans[8]: spanID 'zz'")


def test_malformed_first_line_of_json_lines_is_reported_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"resourceSpans": [\n' + JSONL.read_bytes())
    records, problems = read(path)
    assert len(records) == 26
    assert [p.line for p in problems] == [1, 3, 5, 9]


def test_two_malformed_first_lines_still_read_as_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"{oops\n{\n" + JSONL.read_bytes())
    records, problems = read(path)
    assert len(records) == 26
    assert [p.line for p in problems] == [1, 2, 4, 6, 10]


def test_a_bad_span_in_a_single_document_names_its_json_path(tmp_path: Path) -> None:
    doc = json.loads(PRETTY.read_bytes())
    doc["resourceSpans"][0]["scopeSpans"][1]["spans"][0]["spanId"] = ""
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc, indent=1))
    records, problems = read(path)
    assert len(records) == 25
    assert [(p.line, p.message) for p in problems] == [
        (None, ("resourceSpans[0].scopeSpans[1].spans[0]: spanId '' is not an id of 8 bytes "
                "(hex or base64); span skipped")),
    ]


def test_truncated_proto_keeps_what_came_before(tmp_path: Path) -> None:
    path = tmp_path / "t.pb"
    path.write_bytes(VARINT.read_bytes()[:-40])
    records, problems = read(path)
    assert 0 < len(records) < 26
    assert len(problems) == 1 and "truncated" in problems[0].message


def test_truncated_gzip_keeps_what_came_before(tmp_path: Path) -> None:
    big = JSONL.read_bytes() * 40
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(big)[:-200])
    records, problems = read(path)
    assert len(records) > 26
    assert "cannot read further" in problems[-1].message


# -- gzip, stdin, streams, format override -------------------------------------------------------

@pytest.mark.parametrize("path", [PROTO, JAEGER, PRETTY], ids=lambda p: p.name)
def test_gzip_is_detected_for_any_format(path: Path, tmp_path: Path) -> None:
    zipped = tmp_path / (path.name + ".gz")
    zipped.write_bytes(gzip.compress(path.read_bytes()))
    assert read(zipped) == (read(path)[0], [
        InputProblem(str(zipped), p.line, p.message) for p in read(path)[1]])


def test_dash_reads_standard_input(monkeypatch: pytest.MonkeyPatch,
                                   expected: list[SpanRecord]) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(JSONL_GZ.read_bytes())))
    records, problems = read("-")
    assert by_id(records) == expected
    assert [(p.path, p.line) for p in problems] == [("<stdin>", 2), ("<stdin>", 4),
                                                    ("<stdin>", 8)]


def test_dash_without_standard_input_is_an_input_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", None)
    with pytest.raises(InputError, match="^<stdin>: there is no standard input"):
        read("-")


def test_a_binary_stream_is_read_and_left_open(expected: list[SpanRecord]) -> None:
    stream = io.BytesIO(PROTO.read_bytes())
    records, _ = read(stream)
    assert by_id(records) == expected
    assert not stream.closed


def test_format_override() -> None:
    assert len(read(JSONL, input_format="otlp-json")[0]) == 26
    assert len(read(JAEGER, input_format="jaeger-json")[0]) == 26
    assert len(read(PROTO, input_format="otlp-proto")[0]) == 26
    records, problems = read(PRETTY, input_format="jaeger-json")
    assert records == []
    assert problems[0].message == "an OTLP/JSON document where Jaeger JSON was expected; skipped"
    records, problems = read(JAEGER, input_format="otlp-json")
    assert records == [] and "Jaeger JSON document" in problems[0].message
    with pytest.raises(InputError, match="traces.otlp.json: unknown format"):
        read(PRETTY, input_format="otlp-proto")
    with pytest.raises(InputError, match=r"traces.otlp.pb: not JSON \(first byte 0x00\)"):
        read(PROTO, input_format="otlp-json")
    with pytest.raises(ValueError, match="unknown input format 'zipkin'"):
        read(JSONL, input_format="zipkin")


# -- unreadable input -----------------------------------------------------------------------------

def test_unreadable_inputs_raise_input_error_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(InputError, match=f"^{missing}: cannot read: No such file"):
        read(missing)
    with pytest.raises(InputError, match=f"^{tmp_path}: cannot read"):
        read(tmp_path)
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(bytes(range(200, 256)) * 10)
    with pytest.raises(InputError, match=f"^{garbage}: unknown format"):
        read(garbage)
    not_gzip = tmp_path / "bad.gz"
    not_gzip.write_bytes(b"\x1f\x8b\x08\x00" + b"garbage" * 20)
    with pytest.raises(InputError, match=f"^{not_gzip}: not gzip-decodable"):
        read(not_gzip)
    zstd = tmp_path / "t.zst"
    zstd.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 20)
    with pytest.raises(InputError, match="zstd"):
        read(zstd)


def test_a_broken_single_document_names_file_and_line(tmp_path: Path) -> None:
    text = PRETTY.read_text().splitlines()
    text[30] = text[30] + ","  # a stray comma
    path = tmp_path / "doc.json"
    path.write_text("\n".join(text))
    with pytest.raises(InputError, match=rf"^{path}:3[12]: invalid JSON"):
        read(path)


def test_a_single_malformed_line_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "one.json"
    path.write_text('\n\n{"resourceSpans": [}\n')
    with pytest.raises(InputError, match=rf"^{path}:3: invalid JSON"):
        read(path)


def test_empty_input_has_no_spans_and_no_problems(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n  \n")
    assert read(path) == ([], [])


# -- shapes: base64 ids, older OTLP, remote flags, Jaeger variants -------------------------------

def test_protobuf_canonical_json_with_base64_ids(expected: list[SpanRecord]) -> None:
    spans = make_golden.build_spans()
    doc = MessageToDict(make_golden.encode(spans))  # ids in base64, enums by name
    first = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(first["traceId"]) == 24
    records, problems = read(io.BytesIO(json.dumps(doc).encode()))
    assert (by_id(records), problems) == (expected, [])


def test_hex_ids_are_not_taken_for_base64() -> None:
    # 24 hex digits is valid base64 too; a trace id of 24 characters is read as base64.
    hex_like = "0123456789abcdef01234567"
    assert len(base64.b64decode(hex_like)) == 18  # not 16 bytes: not an id either way
    span = {"traceId": hex_like, "spanId": "00f067aa0ba90201", "name": "x",
            "startTimeUnixNano": "1"}
    _, problems = read(io.BytesIO(json.dumps(_request([span])).encode()))
    assert "traceId '0123456789abcdef01234567' is not an id of 16 bytes" in problems[0].message


def _request(spans: list[dict[str, Any]], key: str = "scopeSpans",
             scope_key: str = "scope") -> dict[str, Any]:
    return {"resourceSpans": [{"resource": {}, key: [{scope_key: {"name": "lib"},
                                                      "spans": spans}]}]}


def _span(**fields: Any) -> dict[str, Any]:
    return {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
            "name": "s", "startTimeUnixNano": 1000, "endTimeUnixNano": "2000", **fields}


def test_other_json_shapes_of_otlp_requests() -> None:
    request = _request([_span()])
    lines = [
        json.dumps({"result": request}),  # Jaeger's api_v3 (and its gRPC gateway) wrap it
        json.dumps([request, request]),   # a list of requests
        "5",
        json.dumps({"resourceSpans": {"not": "a list"}}),
        json.dumps({"unrelated": True}),
        "{}",
    ]
    records, problems = read(io.BytesIO("\n".join(lines).encode()))
    assert len(records) == 3
    assert [(p.line, p.message) for p in problems] == [
        (3, "not a JSON object; skipped"),
        (4, "resourceSpans is not a list"),
        (5, "neither OTLP/JSON (resourceSpans) nor Jaeger JSON (data[].spans); skipped")]


def test_older_instrumentation_library_spans() -> None:
    doc = _request([_span()], "instrumentationLibrarySpans", "instrumentationLibrary")
    records, problems = read(io.BytesIO(json.dumps(doc).encode()))
    assert problems == []
    assert (records[0].scope, records[0].start_ns, records[0].end_ns) == ("lib", 1000, 2000)


@pytest.mark.parametrize(("flags", "remote"), [(0x300, True), (0x100, False), (0x200, False),
                                               (0x301, True), (None, False)])
def test_remote_parent_needs_both_flag_bits(flags: int | None, remote: bool) -> None:
    span = _span(parentSpanId="eee19b7ec3c1b173")
    if flags is not None:
        span["flags"] = flags
    records, _ = read(io.BytesIO(json.dumps(_request([span])).encode()))
    assert records[0].parent_remote is remote
    assert records[0].is_local_root is remote


@pytest.mark.parametrize("code", [2, "STATUS_CODE_ERROR"])
def test_error_status_in_either_enum_form(code: Any) -> None:
    span = _span(status={"code": code}, events=[
        {"name": "exception", "attributes": [
            {"key": "exception.type", "value": {"stringValue": "Timeout"}}]}])
    records, _ = read(io.BytesIO(json.dumps(_request([span])).encode()))
    assert records[0].error == "Timeout"
    ok = _span(status={"code": 1, "message": "fine"})
    records, _ = read(io.BytesIO(json.dumps(_request([ok])).encode()))
    assert records[0].error is None


def test_any_value_shapes() -> None:
    attrs = [
        {"key": "i", "value": {"intValue": 7}},
        {"key": "s_int", "value": {"intValue": "-9007199254740993"}},
        {"key": "d", "value": {"doubleValue": "Infinity"}},
        {"key": "b", "value": {"boolValue": True}},
        {"key": "empty", "value": {}},
        {"key": "kv", "value": {"kvlistValue": {"values": [
            {"key": "nested", "value": {"arrayValue": {"values": [{"intValue": "1"}, {}]}}}]}}},
        {"key": "raw", "value": {"bytesValue": "AAH+/w=="}},
    ]
    records, _ = read(io.BytesIO(json.dumps(_request([_span(attributes=attrs)])).encode()))
    assert records[0].attributes == {"i": 7, "s_int": -9007199254740993, "d": float("inf"),
                                     "b": True, "kv": {"nested": (1, None)},
                                     "raw": b"\x00\x01\xfe\xff"}


def _jaeger_span(span_id: str, parent: str | None = None, process: str = "p1",
                 **fields: Any) -> dict[str, Any]:
    refs = [{"refType": "CHILD_OF", "traceID": "ab" * 16, "spanID": parent}] if parent else []
    return {"traceID": "ab" * 16, "spanID": span_id, "operationName": f"op {span_id}",
            "references": refs, "startTime": 5, "duration": 3, "tags": [], "logs": [],
            "processID": process, **fields}


def test_jaeger_remote_parent_from_another_process_and_tag_types() -> None:
    tags = [{"key": "n", "type": "int64", "value": "12"}, {"key": "f", "type": "float64",
                                                           "value": 1.5},
            {"key": "ok", "type": "bool", "value": "true"}, {"key": "s", "type": "STRING",
                                                             "value": "x"},
            {"key": "bin", "type": "binary", "value": "AAH+/w=="},
            {"key": "otel.library.name", "type": "string", "value": "old.lib"},
            {"key": "error", "type": "bool", "value": True},
            {"key": "error.message", "type": "string", "value": "boom"}]
    trace: dict[str, Any] = {"traceID": "ab" * 16, "spans": [
        _jaeger_span("0000000000000001"),
        _jaeger_span("0000000000000002", "0000000000000001", "p2", tags=tags),
        _jaeger_span("0000000000000003", "0000000000000002", "p2"),
    ], "processes": {"p1": {"serviceName": "a"}, "p2": {"serviceName": "b"}}}
    records, problems = read(io.BytesIO(json.dumps(trace).encode()))  # a bare trace object
    assert problems == []
    root, child, grandchild = records
    assert (root.parent_id, root.start_ns, root.end_ns) == (0, 5000, 8000)
    assert child.parent_remote and not grandchild.parent_remote
    assert child.attributes == {"n": 12, "f": 1.5, "ok": True, "s": "x",
                                "bin": b"\x00\x01\xfe\xff", "error.message": "boom"}
    assert (child.error, child.scope) == ("boom", "old.lib")
    listed, _ = read(io.BytesIO(json.dumps([trace]).encode()))
    assert listed == records
    # The UI's own shape embeds each span's process instead of naming it.
    for span in trace["spans"]:
        span["process"] = trace["processes"][span.pop("processID")]
    embedded, _ = read(io.BytesIO(json.dumps({"data": [trace]}).encode()))
    assert [r.parent_remote for r in embedded] == [False, True, False]


def test_a_jaeger_operation_name_that_is_no_string_skips_its_span_reported() -> None:
    spans = [_jaeger_span("0000000000000001", operationName=True), _jaeger_span("0000000000000002")]
    records, problems = read(io.BytesIO(json.dumps({"data": [{"spans": spans}]}).encode()))
    assert [r.name for r in records] == ["op 0000000000000002"]
    assert len(problems) == 1 and "operationName is not a string" in problems[0].message


def test_jaeger_tags_without_a_type_keep_their_json_value() -> None:
    span = _jaeger_span("0000000000000001", tags=[{"key": "n", "value": 3},
                                                  {"key": "s", "value": "x"}])
    records, _ = read(io.BytesIO(json.dumps({"data": [{"spans": [span]}]}).encode()))
    assert records[0].attributes == {"n": 3, "s": "x"}


# -- both JSON parsers give the same ---------------------------------------------------------------

def test_the_standard_library_parser_gives_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = read(JSONL)
    monkeypatch.setattr(json_input, "loads", json.loads)
    slow = read(JSONL)
    assert slow[0] == fast[0]
    assert [(p.line, p.message.split(":")[0]) for p in slow[1]] == [
        (p.line, p.message.split(":")[0]) for p in fast[1]]


def test_the_collector_is_paused_per_document_and_restored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    states: list[bool] = []

    def loads(data: bytes) -> Any:
        states.append(gc.isenabled())
        return json.loads(data)

    monkeypatch.setattr(json_input, "loads", loads)
    assert gc.isenabled()
    assert len(read(JSONL)[0]) == 26
    assert gc.isenabled() and not any(states[1:])  # [0]: the first line, telling the format
    gc.disable()
    try:
        read(JSONL)
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()


# -- streaming ------------------------------------------------------------------------------------

class CountingStream(io.RawIOBase):
    def __init__(self, data: bytes) -> None:
        self.inner = io.BytesIO(data)
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self.inner.readinto(buffer)
        self.read_bytes += n
        return n


def test_json_lines_are_read_as_a_stream() -> None:
    line = JSONL.read_bytes().splitlines()[0] + b"\n"
    data = line * (8 * 1024 * 1024 // len(line))
    stream = CountingStream(data)
    records = read_records(cast(BinaryIO, stream))
    next(records)
    assert stream.read_bytes < 3 * 1024 * 1024 < len(data)


def _trace(trace_id: int, size: int, root_last: bool = True) -> list[SpanRecord]:
    root = SpanRecord(trace_id, 1, 0, "root", 0, 10)
    children = [SpanRecord(trace_id, i, 1, f"c{i}", 1, 2) for i in range(2, size + 1)]
    return [*children, root] if root_last else [root, *children]


def _interleave(*traces: list[SpanRecord]) -> Iterator[SpanRecord]:
    longest = max(len(t) for t in traces)
    for i in range(longest):
        for t in traces:
            if i < len(t):
                yield t[i]


def test_iter_traces_groups_interleaved_traces() -> None:
    a, b, c = _trace(1, 5), _trace(2, 3), _trace(3, 4, root_last=False)
    groups = list(iter_traces(_interleave(a, b, c), idle_spans=1000))
    assert sorted(sorted(g) for g in groups) == sorted([sorted(a), sorted(b), sorted(c)])


def test_iter_traces_yields_a_trace_once_its_root_is_seen_and_it_went_idle() -> None:
    seen: list[int] = []

    def stream() -> Iterator[SpanRecord]:
        for i, record in enumerate([*_trace(1, 3), *_trace(2, 50)]):
            seen.append(i)
            yield record

    groups = iter_traces(stream(), idle_spans=10)
    first = next(groups)
    assert {r.trace_id for r in first} == {1}
    assert len(seen) == 3 + 10  # ten records of trace 2 after trace 1's last one
    assert [r.trace_id for g in groups for r in g] == [2] * 50


def test_iter_traces_waits_for_the_root_however_long() -> None:
    slow = _trace(1, 5)
    records = [*slow[:-1], *(r for t in range(2, 40) for r in _trace(t, 3)), slow[-1]]
    groups = list(iter_traces(records, idle_spans=5, rootless_idle_spans=10_000))
    assert sorted(next(g for g in groups if g[0].trace_id == 1)) == sorted(slow)


def test_iter_traces_splits_a_trace_spread_further_than_idle_spans() -> None:
    records = [*_trace(1, 3), *_trace(2, 20), SpanRecord(1, 99, 1, "late", 3, 4)]
    groups = list(iter_traces(records, idle_spans=10))
    assert [len(g) for g in groups if g[0].trace_id == 1] == [3, 1]


def test_iter_traces_lets_rootless_traces_go_after_a_longer_wait() -> None:
    orphan = [SpanRecord(1, i, 77, "orphan", 0, 1) for i in range(2, 5)]
    records = [*orphan, *(r for t in range(2, 30) for r in _trace(t, 3))]
    order = [g[0].trace_id for g in iter_traces(records, idle_spans=3, rootless_idle_spans=30)]
    assert order.index(1) < len(order) - 5  # went before the end, once 30 records passed
    assert [g for g in iter_traces(orphan)] == [orphan]  # and at the end otherwise


def test_iter_traces_memory_follows_open_traces_not_the_input() -> None:
    opened: list[int] = []

    def stream() -> Iterator[SpanRecord]:
        for t in range(1, 2001):
            for record in _trace(t, 10):
                yield record
                opened.append(t)

    most_held = 0
    consumed = 0
    for group in iter_traces(stream(), idle_spans=50):
        consumed += len(group)
        most_held = max(most_held, len(opened) - consumed)
    assert consumed == 20_000
    assert most_held <= 50 + 10


def _reference_traces(records: list[SpanRecord], idle: int, rootless_idle: int
                      ) -> list[list[SpanRecord]]:
    """iter_traces' rule, written the slow and obvious way."""
    open_: dict[int, tuple[list[SpanRecord], bool]] = {}
    last: dict[int, int] = {}
    out = []
    for position, record in enumerate(records, 1):
        spans, rooted = open_.get(record.trace_id, ([], False))
        spans.append(record)
        open_[record.trace_id] = (spans, rooted or record.is_local_root)
        last[record.trace_id] = position
        for trace_id in sorted(open_, key=last.__getitem__):
            spans, rooted = open_[trace_id]
            if position - last[trace_id] >= (idle if rooted else rootless_idle):
                out.append(open_.pop(trace_id)[0])
    out.extend(open_[t][0] for t in sorted(open_, key=last.__getitem__))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_iter_traces_agrees_with_the_obvious_rule(seed: int) -> None:
    rng = random.Random(seed)
    records = []
    for _ in range(rng.randrange(50, 400)):
        trace_id = rng.randrange(1, 30)
        parent = 0 if rng.random() < 0.08 else rng.choice([5, 6, 7])
        records.append(SpanRecord(trace_id, rng.randrange(1, 1 << 60), parent, "s", 0, 1,
                                  parent_remote=parent == 7 and rng.random() < 0.5))
    idle, rootless_idle = rng.randrange(1, 40), rng.randrange(1, 120)
    got = list(iter_traces(records, idle_spans=idle, rootless_idle_spans=rootless_idle))
    want = _reference_traces(records, idle, rootless_idle)
    assert sorted(map(tuple, got)) == sorted(map(tuple, want))
    assert sum(map(len, got)) == len(records)


def test_iter_traces_rejects_a_zero_window() -> None:
    with pytest.raises(ValueError, match="idle_spans"):
        iter_traces([], idle_spans=0)
