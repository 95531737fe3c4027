"""A run's calls from two witnesses: the model's requests matched to the tool spans.

Each trace here is built by hand: one agent root, model (chat) spans that record the calls
their response requested (GenAI ``gen_ai.output.messages``) and the results handed back
(``gen_ai.input.messages``), and tool spans (``execute_tool``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval import load_config
from otel_tooleval.cli import main
from otel_tooleval.conventions import MODEL, TOOL, span_kind
from otel_tooleval.emit.span import root_attributes
from otel_tooleval.grading import grade_records
from otel_tooleval.model import RunReport, SpanRecord

TRACE = 0xABC
ROOT = 1


def _root(end: int = 1000) -> SpanRecord:
    return SpanRecord(TRACE, ROOT, 0, "invoke_agent weather_agent", 0, end,
                      {"gen_ai.operation.name": "invoke_agent",
                       "gen_ai.agent.name": "weather_agent"})


def _model(sid: int, start: int, calls: list[tuple[str, dict[str, Any], str | None]] | None,
           results: dict[str, Any] | None = None, **extra: Any) -> SpanRecord:
    attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", **extra}
    if calls is not None:
        parts = [{"type": "tool_call", "name": n, "arguments": a,
                  **({"id": i} if i else {})} for n, a, i in calls]
        attrs["gen_ai.output.messages"] = json.dumps(
            [{"role": "assistant", "parts": parts or [{"type": "text", "content": "done"}]}])
    if results:
        attrs["gen_ai.input.messages"] = json.dumps(
            [{"role": "tool", "parts": [{"type": "tool_call_response", "id": i, "response": r}
                                        for i, r in results.items()]}])
    return SpanRecord(TRACE, sid, ROOT, "chat", start, start + 5, attrs)


def _tool(sid: int, start: int, name: str, args: dict[str, Any] | None,
          result: Any = "ok", call_id: str | None = None, **extra: Any) -> SpanRecord:
    attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                             **extra}
    if args is not None:
        attrs["gen_ai.tool.call.arguments"] = json.dumps(args)
    if result is not None:
        attrs["gen_ai.tool.call.result"] = json.dumps(result)
    if call_id is not None:
        attrs["gen_ai.tool.call.id"] = call_id
    return SpanRecord(TRACE, sid, ROOT, f"execute_tool {name}", start, start + 3, attrs)


def _grade(records: list[SpanRecord], config: dict[str, Any] | None = None) -> RunReport:
    (report,) = grade_records(records, load_config(config or {"graders": GR}))
    return report


def _calls(report: RunReport) -> list[tuple[str, Any]]:
    return [(c.name, c.arguments) for c in report.run.calls]


#: A grader that passes every run here (a config needs one).
GR: list[dict[str, Any]] = [{"type": "tool-calls", "config": {"disallowed": ["^nope$"]}}]

PARIS, LYON, TEMP = {"city": "Paris"}, {"city": "Lyon"}, {"celsius": 21}


def _parallel(start_lyon: int, start_temp: int) -> list[SpanRecord]:
    """One response requests get_weather(Lyon) then convert_temp; the tools start at the
    given times."""
    return [_root(),
            _model(10, 10, [("get_weather", LYON, "c1"), ("convert_temp", TEMP, "c2")]),
            _tool(20, start_lyon, "get_weather", LYON, call_id="c1"),
            _tool(21, start_temp, "convert_temp", TEMP, call_id="c2"),
            _model(11, 100, [])]


def test_calls_of_one_response_are_in_the_order_it_lists_them() -> None:
    # convert_temp started first (same millisecond, other clock): the response's order wins.
    report = _grade(_parallel(start_lyon=51, start_temp=50))
    assert _calls(report) == [("get_weather", LYON), ("convert_temp", TEMP)]
    assert [c.index for c in report.run.calls] == [0, 1]
    reading = report.run.reading
    assert (reading.requested, reading.executed, reading.matched) == (2, 2, 2)
    assert reading.agrees and reading.source == "requests+executions"


def test_executed_keeps_start_order() -> None:
    report = _grade(_parallel(51, 50), {"graders": GR, "runs": {"calls_from": "executed"}})
    assert _calls(report) == [("convert_temp", TEMP), ("get_weather", LYON)]
    assert report.run.reading.source == "executions"


def test_a_model_span_with_tool_keys_is_never_a_call() -> None:
    chat = {"gen_ai.operation.name": "chat", "gen_ai.tool.name": "get_weather, convert_temp",
            "gen_ai.tool.call.arguments": "{}"}
    assert span_kind(chat) == MODEL
    oi_llm = {"openinference.span.kind": "LLM", "tool.name": "get_weather"}
    assert span_kind(oi_llm) & (TOOL | MODEL) == MODEL
    # ADK copies gcp.vertex.agent.llm_request onto its tool spans: a presence mark, no model
    # call declared, so the tool span stays a call.
    assert span_kind({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "x",
                      "gcp.vertex.agent.llm_request": "{}"}) & TOOL
    records = _parallel(50, 51)
    records[1] = _model(10, 10, [("get_weather", LYON, "c1"), ("convert_temp", TEMP, "c2")],
                        **{"gen_ai.tool.name": "get_weather, convert_temp"})
    report = _grade(records)
    assert [c.name for c in report.run.calls] == ["get_weather", "convert_temp"]
    assert report.run.steps == 2


def test_match_by_name_and_equal_arguments_without_ids() -> None:
    records = [_root(),
               _model(10, 10, [("get_weather", PARIS, None), ("get_weather", LYON, None)]),
               _tool(20, 50, "get_weather", LYON), _tool(21, 50, "get_weather", PARIS),
               _model(11, 100, [])]
    report = _grade(records)
    assert _calls(report) == [("get_weather", PARIS), ("get_weather", LYON)]
    assert report.run.reading.matched == 2


def test_match_by_name_in_order_within_the_step_takes_the_requests_arguments() -> None:
    # The tool spans record no arguments: matched by name within the step, in order, the
    # arguments are the request's.
    records = [_root(),
               _model(10, 10, [("get_weather", PARIS, None), ("get_weather", LYON, None)]),
               _tool(20, 50, "get_weather", None), _tool(21, 60, "get_weather", None),
               _model(11, 100, [])]
    report = _grade(records)
    assert _calls(report) == [("get_weather", PARIS), ("get_weather", LYON)]
    assert report.run.reading.matched == 2


def _bare(sid: int, start: int, name: str, recorded: str) -> SpanRecord:
    """A tool span whose arguments are recorded as they are, not as a JSON object."""
    return _tool(sid, start, name, None, **{"gen_ai.tool.call.arguments": recorded})


def test_arguments_recorded_in_a_lesser_form_are_the_requests() -> None:
    # OpenInference JS records a one-field input bare ("Lyon"): matched to the request whose
    # object holds that value (not by start order: Lyon's span started first), whose
    # arguments stand; a number recorded as text and a list of the values in order too.
    records = [_root(),
               _model(10, 10, [("get_weather", PARIS, None), ("get_weather", LYON, None),
                               ("convert_temp", TEMP, None), ("span", {"a": 1, "b": "x"},
                                                              None)]),
               _bare(20, 50, "get_weather", "Lyon"), _bare(21, 51, "get_weather", "Paris"),
               _bare(22, 52, "convert_temp", "21"), _bare(23, 53, "span", '[1, "x"]'),
               _model(11, 100, [])]
    report = _grade(records)
    assert _calls(report) == [("get_weather", PARIS), ("get_weather", LYON),
                              ("convert_temp", TEMP), ("span", {"a": 1, "b": "x"})]
    reading = report.run.reading
    assert (reading.requested, reading.executed, reading.matched) == (4, 4, 4)


def test_arguments_that_are_no_lesser_form_of_the_request_stay_as_recorded() -> None:
    # Other values than the request's, or an object of other names: the execution's stand
    # (matched by name within the step, the disagreement is the grader's to see).
    records = [_root(),
               _model(10, 10, [("get_weather", PARIS, None), ("convert_temp", TEMP, None)]),
               _bare(20, 50, "get_weather", "Marseille"),
               _tool(21, 51, "convert_temp", {"degrees": 21}),
               _model(11, 100, [])]
    assert _calls(_grade(records)) == [("get_weather", "Marseille"),
                                       ("convert_temp", {"degrees": 21})]


def test_missing_result_is_the_result_handed_back() -> None:
    records = [_root(),
               _model(10, 10, [("lookup_city", {"query": "paris"}, "c1")]),
               _tool(20, 50, "lookup_city", {"query": "paris"}, result=None, call_id="c1"),
               _model(11, 100, [], results={"c1": "Paris"})]
    (call,) = _grade(records).run.calls
    assert call.has_result and call.result == "Paris"


def test_unrequested_execution_is_reported_and_left_out() -> None:
    # A synthetic answer tool the model never asked for, after a response that was recorded.
    records = [*_parallel(50, 51), _tool(30, 110, "final_answer", {"text": "done"})]
    report = _grade(records)
    assert [c.name for c in report.run.calls] == ["get_weather", "convert_temp"]
    reading = report.run.reading
    assert [(n.name, n.span_id) for n in reading.unrequested] == [("final_answer", 30)]
    assert not reading.agrees and "final_answer" in reading.problems()[0]


def test_unexecuted_request_is_a_pending_call() -> None:
    records = _parallel(50, 51)
    del records[3]   # convert_temp never ran
    report = _grade(records)
    assert [(c.name, c.pending) for c in report.run.calls] == [
        ("get_weather", False), ("convert_temp", True)]
    assert report.run.pending_calls == 1
    assert [(n.name, n.call_id, n.span_id) for n in report.run.reading.unexecuted] == [
        ("convert_temp", "c2", 10)]


def test_unexecuted_request_whose_result_came_back_is_completed() -> None:
    records = _parallel(50, 51)
    del records[3]
    records[-1] = _model(11, 100, [], results={"c2": "69.8"})
    call = _grade(records).run.calls[1]
    assert (call.name, call.pending, call.result) == ("convert_temp", False, "69.8")


def test_without_recorded_requests_the_tool_spans_are_read_as_before() -> None:
    records = [_root(), _model(10, 10, None), _tool(21, 50, "convert_temp", TEMP),
               _tool(20, 51, "get_weather", LYON), _model(11, 100, None)]
    report = _grade(records)
    assert [c.name for c in report.run.calls] == ["convert_temp", "get_weather"]
    reading = report.run.reading
    assert (reading.recorded, reading.requested, reading.executed) == (False, 0, 2)
    assert reading.agrees and reading.source == "executions"


def test_responses_of_text_only_read_the_tool_spans_alone() -> None:
    # An agent that drives its tools from the model's text (ReAct): no structured request.
    records = [_root(), _model(10, 10, []), _tool(20, 50, "get_weather", LYON),
               _model(11, 100, [])]
    report = _grade(records)
    assert [c.name for c in report.run.calls] == ["get_weather"]
    assert report.run.reading.agrees


def test_execution_after_an_unrecorded_response_stays_a_call() -> None:
    # A sub-agent whose model spans record nothing: its tool calls are kept, not unrequested.
    records = [*_parallel(50, 51), _model(12, 60, None), _tool(30, 70, "lookup_city", None)]
    report = _grade(records)
    assert "lookup_city" in [c.name for c in report.run.calls]
    assert report.run.reading.unrequested == ()


def test_calls_from_requested_grades_a_model_client_only_agent() -> None:
    records = [_root(), _model(10, 10, [("get_weather", LYON, "c1")]),
               _model(11, 100, [], results={"c1": {"temp_c": 18}})]
    report = _grade(records, {"graders": GR, "runs": {"calls_from": "requested"}})
    (call,) = report.run.calls
    assert (call.name, call.arguments, call.result, call.pending) == (
        "get_weather", LYON, {"temp_c": 18}, False)
    assert report.run.reading.source == "requests"


def test_ignore_tools_applies_to_requests() -> None:
    records = _parallel(50, 51)
    del records[3]
    report = _grade(records, {"graders": GR, "runs": {"ignore_tools": ["convert_temp"]}})
    assert [c.name for c in report.run.calls] == ["get_weather"]
    assert report.run.reading.agrees


def test_root_attributes_and_json_say_what_was_read() -> None:
    report = _grade([*_parallel(50, 51), _tool(30, 110, "final_answer", {})])
    attrs = root_attributes(report)
    assert {k: v for k, v in attrs.items() if k.startswith("tooleval.reading.")} == {
        "tooleval.reading.requested": 2, "tooleval.reading.executed": 3,
        "tooleval.reading.matched": 2, "tooleval.reading.unrequested": 1,
        "tooleval.reading.unexecuted": 0, "tooleval.reading.source": "requests+executions"}
    assert report.to_dict()["reading"] == {
        "requested": 2, "executed": 3, "matched": 2, "unrequested": 1, "unexecuted": 0,
        "source": "requests+executions"}


def test_strict_reading_config_adds_a_failing_result() -> None:
    records = [*_parallel(50, 51), _tool(30, 110, "final_answer", {})]
    report = _grade(records, {"graders": GR, "runs": {"strict_reading": True}})
    result = report.results[-1]
    assert (result.name, result.passed, result.error) == (
        "tooleval.reading", False, "reading_disagreement")
    assert _grade(_parallel(50, 51), {"graders": GR, "runs": {"strict_reading": True}}
                  ).passed


def _otlp_file(path: Path, records: list[SpanRecord]) -> Path:
    def value(v: Any) -> dict[str, Any]:
        return {"stringValue": v} if isinstance(v, str) else {"intValue": str(v)}

    spans = [{"traceId": f"{r.trace_id:032x}", "spanId": f"{r.span_id:016x}",
              **({"parentSpanId": f"{r.parent_id:016x}"} if r.parent_id else {}),
              "name": r.name, "startTimeUnixNano": str(r.start_ns),
              "endTimeUnixNano": str(r.end_ns),
              "attributes": [{"key": k, "value": value(v)} for k, v in r.attributes.items()]}
             for r in records]
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}) + "\n")
    return path


@pytest.mark.parametrize("strict", [["--strict-reading"], []])
def test_grade_strict_reading_exits_2_naming_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], strict: list[str]) -> None:
    trace = _otlp_file(tmp_path / "t.json",
                       [*_parallel(50, 51), _tool(30, 110, "final_answer", {})])
    config = tmp_path / "c.yaml"
    config.write_text("graders:\n  - type: tool-calls\n    config: {disallowed: ['^nope$']}\n")
    code = main(["grade", str(trace), "-c", str(config), *strict])
    err = capsys.readouterr().err
    if strict:
        assert code == 2
        assert f"{TRACE:032x}" in err and "final_answer" in err and "disagree" in err
    else:
        assert code == 0 and "disagree" not in err


def test_inspect_names_the_spans_the_witnesses_disagree_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _otlp_file(tmp_path / "t.json",
                       [*_parallel(50, 51), _tool(30, 110, "final_answer", {})])
    assert main(["inspect", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "requested=2 executed=3 matched=2 unrequested=1 unexecuted=0" in out
    assert f"unrequested: final_answer  span {30:016x}" in out
    assert main(["inspect", str(trace), "--format", "json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["reading"]["unrequested"] == [
        {"name": "final_answer", "span_id": f"{30:016x}", "call_id": None, "step": 1}]


def _step_trace() -> list[SpanRecord]:
    """A framework's step spans marked as the model turn (no content of their own), each
    holding its model call as a nested model span that records the response, then the step's
    tool spans (Haystack's ``haystack.agent.step`` / ``.llm`` / ``.tool``, by shape). The
    second response's calls start in the reverse of its order."""
    step = {"gen_ai.operation.name": "chat"}

    def inner(sid: int, parent: int, start: int, calls: list[tuple[str, Any, str]]
              ) -> SpanRecord:
        record = _model(sid, start, calls)
        return SpanRecord(TRACE, sid, parent, "llm", start, start + 5, record.attributes)

    def tool(sid: int, parent: int, start: int, name: str, args: Any) -> SpanRecord:
        record = _tool(sid, start, name, args)
        return SpanRecord(TRACE, sid, parent, record.name, start, start + 3, record.attributes)

    return [_root(),
            SpanRecord(TRACE, 10, ROOT, "step", 10, 40, step),
            inner(11, 10, 11, [("lookup_city", {"query": "paris"}, "c0")]),
            tool(12, 10, 20, "lookup_city", {"query": "paris"}),
            SpanRecord(TRACE, 20, ROOT, "step", 50, 90, step),
            inner(21, 20, 51, [("get_weather", LYON, "c1"), ("convert_temp", TEMP, "c2")]),
            tool(22, 20, 60, "convert_temp", TEMP),
            tool(23, 20, 61, "get_weather", LYON),
            SpanRecord(TRACE, 30, ROOT, "step", 100, 120, step),
            inner(31, 30, 101, [])]


def test_a_step_span_reads_its_response_from_the_model_span_nested_in_it(
        tmp_path: Path) -> None:
    # A model span inside another counts no step of its own; where the outer one records no
    # response, the nested one's is the step's (docs/conventions.md, "Two witnesses").
    report = _grade(_step_trace())
    assert report.run.steps == 3
    assert [(c.name, c.step) for c in report.run.calls] == [
        ("lookup_city", 0), ("get_weather", 1), ("convert_temp", 1)]
    reading = report.run.reading
    assert (reading.source, reading.requested, reading.executed, reading.matched) == (
        "requests+executions", 3, 3, 3)
    assert [c.call_id for c in report.run.calls] == ["c0", "c1", "c2"]
    # Live, the hooks keep the nested model spans as they keep every model span.
    from tests.support.replay import replay_file
    (live,) = replay_file(_otlp_file(tmp_path / "t.json", _step_trace()), {"graders": GR})
    assert [(c.name, c.step, c.call_id) for c in live.run.calls] == [
        (c.name, c.step, c.call_id) for c in report.run.calls]
    assert live.run.reading == reading


def test_a_model_span_that_records_its_response_is_not_read_from_its_nested_ones() -> None:
    # An outer model span that records the response itself (as a wrapper's LLM span around a
    # client instrumentation's may): its own is the step's, the nested one is not read again.
    records = _step_trace()[:4]
    outer = records[1]
    records[1] = SpanRecord(TRACE, 10, ROOT, "step", 10, 40, {
        **outer.attributes, **_model(10, 10, [("lookup_city", {"query": "paris"}, "c0")]
                                     ).attributes})
    report = _grade(records)
    reading = report.run.reading
    assert (reading.requested, reading.executed, reading.matched) == (1, 1, 1)
    assert report.run.steps == 1


def test_two_responses_nested_in_one_step_are_read_in_start_order() -> None:
    # A step that called the model twice: one step, the requests of both responses.
    records = _step_trace()[:4]
    records.insert(3, SpanRecord(TRACE, 13, 10, "llm", 15, 18, _model(
        13, 15, [("get_weather", PARIS, "c9")]).attributes))
    records.append(SpanRecord(TRACE, 14, 10, "execute_tool get_weather", 25, 28,
                              _tool(14, 25, "get_weather", PARIS).attributes))
    report = _grade(records)
    assert report.run.steps == 1
    assert [(c.name, c.step, c.call_id) for c in report.run.calls] == [
        ("lookup_city", 0, "c0"), ("get_weather", 0, "c9")]
    reading = report.run.reading
    assert (reading.requested, reading.executed, reading.matched) == (2, 2, 2)
