"""Span recognition under every convention of SEMANTICS 1, and run cutting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval.conventions import decode_value, is_agent_span, is_model_span, tool_name_of
from otel_tooleval.model import SpanRecord
from otel_tooleval.trajectory import RunPolicy, build_run, find_runs
from otel_tooleval.user_regex import compile_user


@pytest.fixture(params=["imported", "compiled"])
def classify(request: pytest.FixtureRequest) -> Any:
    """``span_kind`` as imported, and written out again from the tables by a fresh
    ``_compile_span_kind()`` (the import-time one runs before any test can look at it)."""
    from otel_tooleval.conventions.kinds import _compile_span_kind, span_kind

    return span_kind if request.param == "imported" else _compile_span_kind()

FIXTURES = Path(__file__).resolve().parent / "data" / "spans"   # recorded runs, kept in the repo


def one_call(attrs: dict[str, Any], *, error: str | None = None) -> Any:
    root = SpanRecord(1, 1, 0, "invoke_agent a", 0, 100, {"gen_ai.operation.name": "invoke_agent"})
    tool = SpanRecord(1, 2, 1, "tool", 10, 20, attrs, error=error)
    run = build_run(root, [tool], RunPolicy())
    assert len(run.calls) == 1, attrs
    return run.calls[0]


@pytest.mark.parametrize(("attrs", "name", "args", "result", "call_id"), [
    # OTel GenAI semconv (pydantic-ai, Strands, ADK, OpenLLMetry)
    ({"gen_ai.tool.name": "get_weather", "gen_ai.tool.call.arguments": '{"city": "Paris"}',
      "gen_ai.tool.call.result": '{"temp_c": 21.0}', "gen_ai.tool.call.id": "call_1"},
     "get_weather", {"city": "Paris"}, {"temp_c": 21.0}, "call_1"),
    # pydantic-ai's older attributes
    ({"gen_ai.tool.name": "t", "tool_arguments": '{"a": 1}', "tool_response": "done"},
     "t", {"a": 1}, "done", None),
    # OpenInference (LangChain, OpenAI Agents, CrewAI): JSON input, ToolMessage output
    ({"tool.name": "convert", "openinference.span.kind": "TOOL", "input.value": '{"celsius": 21.0}',
      "output.value": '{"type": "tool", "data": {"content": "69.8", "tool_call_id": "x"}}'},
     "convert", {"celsius": 21.0}, "69.8", "x"),
    # OpenInference bare-string input stays a string
    ({"tool.name": "lookup_city", "input.value": "paris", "output.value": "Paris, FR"},
     "lookup_city", "paris", "Paris, FR", None),
    # smolagents: the args/kwargs envelope is unwrapped to the kwargs
    ({"tool.name": "web_search", "input.value":
      '{"args": [], "kwargs": {"query": "otel", "limit": 3}}', "output.value": "[]"},
     "web_search", {"query": "otel", "limit": 3}, [], None),
    # Traceloop / OpenLLMetry entity spans
    ({"traceloop.span.kind": "tool", "traceloop.entity.name": "send_mail",
      "traceloop.entity.input": '{"args": [], "kwargs": {"to": "a@b.c"}}',
      "traceloop.entity.output": '"sent"'},
     "send_mail", {"to": "a@b.c"}, "sent", None),
    # UiPath SDK: Python-literal input.value, parsed safely
    ({"tool.name": "Invoice", "input.value": "{'amount': 12, 'paid': True, 'tags': ('a',)}",
      "output.value": "{'status': 'ok'}", "tool.id": "u-1"},
     "Invoice", {"amount": 12, "paid": True, "tags": ["a"]}, {"status": "ok"}, "u-1"),
    # unparsable text stays text
    ({"tool.name": "t", "input.value": "{not json", "output.value": "plain words"},
     "t", "{not json", "plain words", None),
])
def test_tool_call_conventions(attrs: dict[str, Any], name: str, args: Any, result: Any,
                               call_id: str | None) -> None:
    c = one_call(attrs)
    assert (c.name, c.arguments, c.result, c.has_result, c.call_id) == (
        name, args, result, True, call_id)


def test_only_objects_arrays_and_json_strings_are_decoded() -> None:
    assert decode_value("1.50") == "1.50"
    assert decode_value("true") == "true"
    assert decode_value('"quoted"') == "quoted"
    assert decode_value("[1, 2]") == [1, 2]


@pytest.mark.parametrize("text", ['{"a": 1} trailing', "[1] [2]", '{"a": 1}{"b": 2}'])
def test_a_json_value_with_text_after_it_stays_the_recorded_text(text: str) -> None:
    assert decode_value(text) == text
    assert decode_value(f" {text} ") == f" {text} "


def test_a_span_recorded_open_then_ended_reads_as_ended_in_either_order() -> None:
    # An exporter retried: the file holds the tool span once still open and once ended.
    root = SpanRecord(1, 1, 0, "invoke_agent a", 0, 100, {"gen_ai.operation.name": "invoke_agent"})
    attrs = {"gen_ai.tool.name": "t", "gen_ai.tool.call.arguments": "{}"}
    opened = SpanRecord(1, 2, 1, "execute_tool t", 10, None, attrs)
    ended = SpanRecord(1, 2, 1, "execute_tool t", 10, 30,
                       {**attrs, "gen_ai.tool.call.result": '{"ok": true}'})
    for spans in ([root, opened, ended], [root, ended, opened]):
        ((found_root, members),) = find_runs(spans, RunPolicy())
        assert [s.end_ns for s in members if s.span_id == 2] == [30]
        (c,) = build_run(found_root, [m for m in members if m is not found_root],
                         RunPolicy()).calls
        assert (c.pending, c.result, c.duration_ms) == (False, {"ok": True}, 0.00002)


def test_python_literals_are_never_evaluated() -> None:
    hostile = "{'a': __import__('os').system('echo pwned')}"
    assert decode_value(hostile) == hostile


def test_traceloop_entity_name_only_counts_on_tool_spans() -> None:
    assert tool_name_of({"traceloop.span.kind": "task", "traceloop.entity.name": "x"}) is None
    assert tool_name_of({"traceloop.span.kind": "tool", "traceloop.entity.name": "x"}) == "x"


def test_synthesized_calls_are_not_calls() -> None:
    attrs = {"tool.name": "made_up", "tool.synthesized": True}
    assert tool_name_of(attrs) is None
    root = SpanRecord(1, 1, 0, "r", 0, 100, {"openinference.span.kind": "AGENT"})
    assert build_run(root, [SpanRecord(1, 2, 1, "t", 1, 2, attrs)], RunPolicy()).calls == ()


def test_error_status_is_the_result() -> None:
    c = one_call({"gen_ai.tool.name": "t"}, error="TimeoutError: slow")
    assert (c.has_result, c.result, c.error) == (True, "TimeoutError: slow", "TimeoutError: slow")


@pytest.mark.parametrize(("attrs", "agent", "model"), [
    ({"gen_ai.operation.name": "invoke_agent"}, True, False),
    ({"gen_ai.operation.name": "invoke_workflow"}, True, False),
    ({"openinference.span.kind": "AGENT"}, True, False),
    ({"traceloop.span.kind": "agent"}, True, False),
    ({"traceloop.span.kind": "workflow"}, True, False),
    ({"gen_ai.operation.name": "chat"}, False, True),
    ({"gen_ai.operation.name": "text_completion"}, False, True),
    ({"gen_ai.operation.name": "generate_content"}, False, True),
    ({"openinference.span.kind": "LLM"}, False, True),
    ({"traceloop.span.kind": "llm"}, False, True),
    ({"traceloop.span.kind": "chat"}, False, True),      # SEMANTICS 1 "Steps": llm/chat
    ({"openinference.span.kind": "CHAIN"}, False, False),
    ({"http.method": "GET"}, False, False),
    # OpenLLMetry's older model-call marker (0.47 and before: no gen_ai.operation.name).
    ({"llm.request.type": "chat", "gen_ai.system": "openai"}, False, True),
    ({"llm.request.type": "completion"}, False, True),
    ({"llm.request.type": "embedding", "gen_ai.system": "openai"}, False, False),
    ({"llm.request.type": "rerank"}, False, False),
    # gen_ai.system with gen_ai.request.model marks nothing: OpenLLMetry's CrewAI / OpenAI
    # Agents instrumentations write both on agent spans (the agent's model).
    ({"gen_ai.system": "crewai", "gen_ai.request.model": "gpt-4o"}, False, False),
    ({"gen_ai.system": "openai_agents", "gen_ai.request.model": "gpt-4o",
      "traceloop.span.kind": "agent"}, True, False),
    # Haystack: the step span, and its model call known by its response's key.
    ({"haystack.agent.step": 0}, False, True),
    ({"haystack.agent.step.llm.output": '{"replies": []}'}, False, True),
    ({"haystack.tool.name": "t", "haystack.agent.step.tool.output": "x"}, False, False),
])
def test_agent_and_model_markers(attrs: dict[str, Any], agent: bool, model: bool) -> None:
    assert (is_agent_span(attrs), is_model_span(attrs)) == (agent, model)


def test_order_is_start_then_end_then_span_id_never_arrival() -> None:
    root = SpanRecord(1, 1, 0, "r", 0, 1000, {"gen_ai.operation.name": "invoke_agent"})
    t = {"gen_ai.tool.name": "t"}
    # given in end order; the run must come out in start order
    spans = [SpanRecord(1, 9, 1, "c", 30, 35, {"gen_ai.tool.name": "c"}),
             SpanRecord(1, 5, 1, "b2", 20, 50, {"gen_ai.tool.name": "b2"}),
             SpanRecord(1, 4, 1, "b1", 20, 40, {"gen_ai.tool.name": "b1"}),
             SpanRecord(1, 3, 1, "a2", 10, 15, {"gen_ai.tool.name": "a2"}),
             SpanRecord(1, 2, 1, "a1", 10, 15, {"gen_ai.tool.name": "a1"}),
             SpanRecord(1, 7, 1, "x", 5, 6, t)]
    run = build_run(root, spans, RunPolicy())
    assert [c.name for c in run.calls] == ["t", "a1", "a2", "b1", "b2", "c"]
    assert [c.index for c in run.calls] == [0, 1, 2, 3, 4, 5]


def test_pending_and_duration() -> None:
    root = SpanRecord(1, 1, 0, "r", 0, 100, {"gen_ai.operation.name": "invoke_agent"})
    spans = [SpanRecord(1, 2, 1, "a", 10, 30_000_010, {"gen_ai.tool.name": "a"}),
             SpanRecord(1, 3, 1, "b", 20, None, {"gen_ai.tool.name": "b", "gen_ai.tool.call.result": "x"}),
             SpanRecord(1, 4, 1, "c", 20, 90, {"gen_ai.tool.name": "c"})]
    root = SpanRecord(1, 1, 0, "r", 0, 100, {"gen_ai.operation.name": "invoke_agent"})
    run = build_run(root, spans, RunPolicy())
    by = {c.name: c for c in run.calls}
    # ended after the root ended: pending, as when reading stored traces
    assert by["a"].pending and by["a"].duration_ms is None
    assert by["b"].pending and not by["b"].has_result
    assert not by["c"].pending and by["c"].duration_ms == pytest.approx(70 / 1e6)
    assert run.pending_calls == 2


def test_ignore_tools() -> None:
    root = SpanRecord(1, 1, 0, "r", 0, 100, {"gen_ai.operation.name": "invoke_agent"})
    spans = [SpanRecord(1, 2 + i, 1, n, i, i + 1, {"gen_ai.tool.name": n})
             for i, n in enumerate(["search", "final_result", "final_answer"])]
    policy = RunPolicy(ignore_tools=(compile_user("final_result"), compile_user("final_a.*")))
    assert [c.name for c in build_run(root, spans, policy).calls] == ["search"]


def test_server_from_attributes_and_mcp_names() -> None:
    root = SpanRecord(1, 1, 0, "r", 0, 100, {"gen_ai.operation.name": "invoke_agent"})
    spans = [SpanRecord(1, 2, 1, "a", 1, 2, {"gen_ai.tool.name": "search", "mcp.server.name": "brave"}),
             SpanRecord(1, 3, 1, "b", 3, 4, {"gen_ai.tool.name": "mcp__fs__read_file"}),
             SpanRecord(1, 4, 1, "c", 5, 6, {"gen_ai.tool.name": "local"})]
    calls = build_run(root, spans, RunPolicy()).calls
    assert [(c.name, c.server) for c in calls] == [
        ("search", "brave"), ("mcp__fs__read_file", "fs"), ("local", None)]


def test_final_output_precedence() -> None:
    model = SpanRecord(1, 2, 1, "chat", 1, 2, {
        "gen_ai.operation.name": "chat",
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
            {"type": "text", "content": "from the model"}]}])})
    for attrs, expected in [
        ({"final_result": "from pydantic-ai"}, "from pydantic-ai"),
        ({"output.value": "plain output"}, "plain output"),
        ({"traceloop.entity.output": "entity out"}, "entity out"),
        ({"gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": "root msg"}]}])},
         "root msg"),
        ({}, "from the model"),
    ]:
        root = SpanRecord(1, 1, 0, "r", 0, 100, {"gen_ai.operation.name": "invoke_agent", **attrs})
        run = build_run(root, [model], RunPolicy())
        assert run.final_output == expected
        assert run.assistant_texts == ("from the model",)


# -- recorded fixtures --------------------------------------------------------------------------

def load_fixture(name: str) -> list[SpanRecord]:
    out = []
    for s in json.loads((FIXTURES / name).read_text()):
        out.append(SpanRecord(
            int(s["trace_id"], 16), int(s["span_id"], 16),
            int(s["parent_span_id"], 16) if s["parent_span_id"] else 0,
            s["name"], s["start"], s["end"], s["attributes"], scope=s["scope"]))
    return out


def test_pydantic_ai_fixture() -> None:
    runs = find_runs(load_fixture("pydantic_ai_weather.json"), RunPolicy())
    assert len(runs) == 1
    run = build_run(*runs[0], RunPolicy())
    assert run.agent == "weather_agent"
    assert [(c.name, c.arguments, c.step) for c in run.calls] == [
        ("lookup_city", {"query": "paris"}, 0), ("get_weather", {"city": "Paris"}, 1),
        ("get_weather", {"city": "Lyon"}, 2), ("convert_temp", {"celsius": 21.0}, 2)]
    assert [c.call_id for c in run.calls] == ["call_1", "call_2", "call_3", "call_4"]
    assert run.calls[1].result == {"city": "Paris", "temp_c": 21.0}
    assert run.calls[3].result == "69.8", "scalars stay the recorded text"
    assert run.final_output == "Paris 21C (69.8F), Lyon 18C"
    assert run.steps == 4


def test_langgraph_openinference_fixture() -> None:
    runs = find_runs(load_fixture("langgraph_openinference_weather.json"), RunPolicy())
    assert len(runs) == 1, "nested AGENT nodes are merged into the outer run"
    run = build_run(*runs[0], RunPolicy())
    assert run.agent == "weather_agent"
    # The tool spans record a lone string argument bare ("paris"); the model's request
    # ({"query": "paris"}) stands for it (reconcile rule 5, a lesser form).
    assert [(c.name, c.arguments) for c in run.calls] == [
        ("lookup_city", {"query": "paris"}), ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Lyon"}), ("convert_temp", {"celsius": 21.0})]
    assert run.calls[0].result == "Paris, FR"
    assert run.calls[1].result == {"city": "Paris", "temp_c": 21.0}
    assert all(c.call_id for c in run.calls), "ids come from the recorded ToolMessage"
    assert [c.step for c in run.calls] == [0, 1, 2, 2]
    assert run.final_output == "Paris 21C (69.8F), Lyon 18C"


# -- run cutting (SEMANTICS 1) ------------------------------------------------------------------

def span(sid: int, parent: int, name: str, start: int, end: int, **attrs: Any) -> SpanRecord:
    return SpanRecord(7, sid, parent, name, start, end, attrs)


AGENT = {"gen_ai.operation.name": "invoke_agent"}
CHAIN = {"openinference.span.kind": "CHAIN"}


def roots(records: list[SpanRecord], policy: RunPolicy | None = None) -> list[str]:
    return [r.name for r, _ in find_runs(records, policy or RunPolicy())]


def test_framework_local_root_is_one_run_with_nested_agents() -> None:
    records = [span(1, 0, "graph", 0, 100, **CHAIN),
               span(2, 1, "agent", 1, 10, **{"openinference.span.kind": "AGENT"}),
               span(3, 1, "tool", 11, 12, **{"tool.name": "t"}),
               span(4, 1, "agent", 13, 20, **{"openinference.span.kind": "AGENT"})]
    assert roots(records) == ["graph"]


def test_sibling_agent_runs_under_a_plain_root() -> None:
    records = [span(1, 0, "GET /x", 0, 100, **{"http.method": "GET"}),
               span(2, 1, "invoke_agent a", 1, 10, **AGENT),
               span(3, 2, "t1", 2, 3, **{"gen_ai.tool.name": "t1"}),
               span(4, 1, "invoke_agent b", 11, 20, **AGENT),
               span(5, 4, "inner", 12, 19, **AGENT),
               span(6, 5, "t2", 13, 14, **{"gen_ai.tool.name": "t2"})]
    runs = find_runs(records, RunPolicy())
    assert [r.name for r, _ in runs] == ["invoke_agent a", "invoke_agent b"]
    calls = [[c.name for c in build_run(r, m, RunPolicy()).calls] for r, m in runs]
    assert calls == [["t1"], ["t2"]]
    separate = RunPolicy(nested_agents="separate")
    assert roots(records, separate) == ["invoke_agent a", "invoke_agent b", "inner"]


def test_plain_root_with_tools_is_a_run_without_tools_is_not() -> None:
    assert roots([span(1, 0, "job", 0, 10), span(2, 1, "t", 1, 2, **{"tool.name": "t"})]) == ["job"]
    assert roots([span(1, 0, "GET /health", 0, 10), span(2, 1, "db", 1, 2)]) == []


def test_remote_parent_makes_a_local_root() -> None:
    rec = SpanRecord(7, 1, 99, "invoke_agent a", 0, 10, AGENT, parent_remote=True)
    assert roots([rec, span(2, 1, "t", 1, 2, **{"tool.name": "t"})]) == ["invoke_agent a"]


def test_root_modes() -> None:
    records = [span(1, 0, "GET /x", 0, 100),
               span(2, 1, "invoke_agent a", 1, 10, **AGENT),
               span(3, 2, "t", 2, 3, **{"tool.name": "t"}),
               span(4, 1, "my_planner", 11, 20),
               span(5, 4, "u", 12, 13, **{"tool.name": "u"})]
    assert roots(records) == ["invoke_agent a"]
    assert roots(records, RunPolicy(root="local_root")) == ["GET /x"]
    assert roots(records, RunPolicy(root="agent")) == ["invoke_agent a"]
    assert roots(records, RunPolicy(root="pattern", root_pattern=compile_user("planner"))) == [
        "my_planner"]
    named = RunPolicy(agent_span_names=(compile_user("^my_planner$"),))
    assert roots(records, named) == ["invoke_agent a", "my_planner"]


def test_framework_span_below_a_plain_root_is_one_run() -> None:
    # HTTP -> LangGraph graph (CHAIN) -> agent nodes (AGENT) + tools: the graph is the run.
    records = [span(1, 0, "POST /chat", 0, 100, **{"http.request.method": "POST"}),
               span(2, 1, "LangGraph", 1, 50, **CHAIN),
               span(3, 2, "agent", 2, 10, **{"openinference.span.kind": "AGENT"}),
               span(4, 2, "tools", 11, 20, **CHAIN),
               span(5, 4, "lookup", 12, 13, **{"tool.name": "lookup"}),
               span(6, 2, "agent", 21, 30, **{"openinference.span.kind": "AGENT"}),
               span(7, 1, "RunnableSequence", 51, 60, **CHAIN),     # no agent below: not a run
               span(8, 7, "calc", 52, 53, **{"tool.name": "calc"})]
    runs = find_runs(records, RunPolicy())
    assert [r.name for r, _ in runs] == ["LangGraph"]
    assert [c.name for c in build_run(*runs[0], RunPolicy()).calls] == ["lookup"]


def test_span_kind_over_every_marker_combination(classify: Any) -> None:
    """The hot path's one-call classifier against the marker table of SEMANTICS 1."""
    import itertools

    from otel_tooleval.conventions import AGENT, MODEL, TOOL

    values = {"gen_ai.operation.name": [None, "invoke_agent", "chat", "execute_tool",
                                        "invoke_workflow", "generate_content"],
              "openinference.span.kind": [None, "AGENT", "LLM", "TOOL", "CHAIN"],
              "traceloop.span.kind": [None, "tool", "agent", "llm", "workflow", "task"],
              "gen_ai.tool.name": [None, "t"], "tool.name": [None, "u"],
              "traceloop.entity.name": [None, "e"], "tool.synthesized": [None, True]}
    for combo in itertools.product(*values.values()):
        attrs = {k: v for k, v in zip(values, combo, strict=True) if v is not None}
        agent = (attrs.get("gen_ai.operation.name") in ("invoke_agent", "invoke_workflow")
                 or attrs.get("openinference.span.kind") == "AGENT"
                 or attrs.get("traceloop.span.kind") in ("agent", "workflow"))
        model = (attrs.get("gen_ai.operation.name") in ("chat", "text_completion",
                                                        "generate_content")
                 or attrs.get("openinference.span.kind") == "LLM"
                 or attrs.get("traceloop.span.kind") in ("llm", "chat"))
        # A span-named convention (DSPy: a TOOL-kind span without tool.name) counts as a tool
        # span on the hot path; its scope decides later whether it is a call.
        expected = ((TOOL if tool_name_of(attrs, "span name") is not None else 0)
                    | (AGENT if agent else 0) | (MODEL if model else 0))
        assert classify(attrs) == expected, attrs


def test_span_kind_reads_every_key_of_the_tables_alone_and_among_others(classify: Any) -> None:
    """Each key the classifier reads, alone, with a value of every row, with None and among
    unrelated keys, against the tables read slowly; a span without any of them is nothing."""
    from otel_tooleval.conventions import AGENT, MODEL, TOOL
    from otel_tooleval.conventions.registry import MARKERS, TOOL_CONVENTIONS

    def slow(attrs: dict[str, Any]) -> int:
        kind = 0
        for m in MARKERS:
            value = attrs.get(m.key)
            if value in m.agents:
                kind |= AGENT
            if value in m.models:
                kind |= MODEL
            if m.present and m.key in attrs:
                kind |= m.present
        for row in TOOL_CONVENTIONS:
            if row.name is None and row.when is not None and attrs.get(row.when[0]) == row.when[1]:
                kind |= TOOL
        if tool_name_of(attrs, "span name") is not None:
            kind |= TOOL
        return kind

    cases: list[dict[str, Any]] = [{}, {"http.method": "GET", "http.status_code": 200}]
    for m in MARKERS:
        cases += [{m.key: v} for v in (*m.agents, *m.models, "other", None, 3)]
    for row in TOOL_CONVENTIONS:
        if row.name is not None:
            cases += [{row.name: "t"}, {row.name: None}]
        if row.when is not None:
            cases += [{row.when[0]: row.when[1]}, {row.when[0]: row.when[1], "tool.name": "t"}]
            if row.name is not None:
                cases.append({row.name: "t", row.when[0]: row.when[1]})
    for attrs in cases:
        for extra in ({}, {"http.url": "https://example.test", "db.system": "x"}):
            both = {**extra, **attrs}
            if "tool.synthesized" not in both:
                assert classify(both) == slow(both), both
            assert classify({**both, "tool.synthesized": True}) == slow(both) & ~TOOL, both



def test_span_kind_of_keys_of_two_conventions_on_one_span(classify: Any) -> None:
    """A GenAI key (tested first) together with a key of another convention (tested only behind
    the set tests), ``tool.synthesized`` among them or not: the bits of the two keys apart
    (each checked against the tables above), ORed, the tool bit taken off when synthesized
    or when a marker value makes the span a model call."""
    from otel_tooleval.conventions import MODEL, TOOL
    from otel_tooleval.conventions.registry import MARKERS, TOOL_CONVENTIONS

    def cases(genai: bool) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for m in MARKERS:
            if m.key.startswith("gen_ai.") == genai:
                found += [{m.key: v} for v in (*m.agents, *m.models, "other")]
                if m.present:
                    found.append({m.key: "x"})
        for row in TOOL_CONVENTIONS:
            keys = [k for k in (row.name, row.when[0] if row.when else None) if k is not None]
            if keys and keys[0].startswith("gen_ai.") == genai:
                found.append({**({row.name: "t"} if row.name else {}),
                              **({row.when[0]: row.when[1]} if row.when else {})})
        return found

    presence = {m.key for m in MARKERS if m.present}

    def model_by_value(attrs: dict[str, Any]) -> bool:
        return any(classify({k: v}) & MODEL for k, v in attrs.items() if k not in presence)

    genai, others = cases(True), cases(False)
    assert genai and others
    for first in genai:
        for second in others:
            both = {**first, **second}
            expected = classify(first) | classify(second)
            if model_by_value(both):
                expected &= ~TOOL   # a model span is never a call (presence marks aside)
            if "tool.synthesized" not in both:
                assert classify(both) == expected, both
            assert classify({**both, "tool.synthesized": True}) == expected & ~TOOL, both

def test_str_enum_attribute_values_read_as_their_characters() -> None:
    """The SDK keeps a str subclass as it is; OTLP sends its characters, and so do we (not
    ``Tool.SEARCH``, its ``__str__``), for names, call ids, servers and agent names."""
    import enum

    class V(str, enum.Enum):
        SEARCH = "search"
        ID = "call_1"
        SERVER = "files"
        AGENT = "coder"

    assert tool_name_of({"gen_ai.tool.name": V.SEARCH}) == "search"
    root = SpanRecord(1, 1, 0, "invoke_agent", 0, 10,
                      {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": V.AGENT})
    tool = SpanRecord(1, 2, 1, "execute_tool", 1, 2,
                      {"gen_ai.tool.name": V.SEARCH, "gen_ai.tool.call.id": V.ID,
                       "mcp.server.name": V.SERVER})
    run = build_run(root, [tool], RunPolicy())
    (call,) = run.calls
    assert (call.name, call.call_id, call.server, run.agent) == ("search", "call_1", "files",
                                                                 "coder")
    assert all(type(v) is str for v in (call.name, call.call_id, call.server, run.agent))


def test_str_enum_marker_values_classify_on_the_hot_path(classify: Any) -> None:
    """Microsoft Agent Framework sets ``gen_ai.operation.name`` to a str-subclass enum live;
    offline (through OTLP) it is its characters. Both must classify the span the same way."""
    import enum

    from otel_tooleval.conventions import AGENT, MODEL

    class Op(str, enum.Enum):
        CHAT = "chat"
        INVOKE = "invoke_agent"

    assert classify({"gen_ai.operation.name": Op.CHAT}) == MODEL
    assert classify({"gen_ai.operation.name": Op.INVOKE}) == AGENT
    assert classify({"openinference.span.kind": {"not": "a string"}}) == 0


def test_the_tables_are_derived_from_the_convention_modules() -> None:
    from otel_tooleval.conventions import (
        CONVENTIONS,
        MARKER_KEYS,
        TOOL_CONVENTIONS,
        genai,
        haystack,
        openinference,
        traceloop,
    )

    # The general conventions come last: the frameworks' own rows (scoped or keyed) first.
    assert CONVENTIONS[-3:] == (genai.CONVENTION, openinference.CONVENTION,
                                traceloop.CONVENTION)
    assert haystack.CONVENTION in CONVENTIONS
    assert [t for c in CONVENTIONS for t in c.tools] == list(TOOL_CONVENTIONS)
    assert {"gen_ai.operation.name", "openinference.span.kind", "traceloop.span.kind",
            "haystack.component.type", "mlflow.spanType"} <= set(MARKER_KEYS)
    assert len({c.name for c in CONVENTIONS}) == len(CONVENTIONS)


# -- framework conventions (issue 15): the rules each recording in tests/data/frameworks needs --

def _run(*records: SpanRecord) -> Any:
    runs = find_runs(list(records), RunPolicy())
    assert len(runs) == 1, [r.name for r, _ in runs]
    return build_run(*runs[0], RunPolicy())


def test_setup_operations_are_no_run() -> None:
    # AutoGen and OpenLLMetry record `create_agent` as a trace of its own.
    setup = span(1, 0, "create_agent weather_agent", 0, 10, **{
        "gen_ai.operation.name": "create_agent", "gen_ai.agent.name": "weather_agent"})
    assert find_runs([setup], RunPolicy()) == []
    # ... while an agent run that made no call is still a run.
    idle = span(2, 0, "invoke_agent a", 0, 10, **{"gen_ai.operation.name": "invoke_agent"})
    assert [r.span_id for r, _ in find_runs([idle], RunPolicy())] == [2]


def test_agent_name_from_the_agent_span_below_a_framework_root() -> None:
    # CrewAI: the root is the crew's chain, named with an instance UUID; the agent is below.
    root = span(1, 0, "Crew_22f34754-1c2b-4a55-9d3e-0123456789ab.kickoff", 0, 100,
                **{"openinference.span.kind": "CHAIN"})
    agent = span(2, 1, "weather_agent._execute_core", 1, 99, **{
        "openinference.span.kind": "AGENT", "graph.node.id": "weather_agent"})
    tool = span(3, 2, "lookup.run", 2, 3, **{"tool.name": "lookup"})
    assert _run(root, agent, tool).agent == "weather_agent"
    # Without the agent span, never a name that changes with every crew instance.
    assert _run(root, tool).agent == "Crew.kickoff"


def test_an_agent_root_keeps_its_own_name_over_nested_agents() -> None:
    root = span(1, 0, "invoke_agent boss", 0, 100, **{"gen_ai.operation.name": "invoke_agent"})
    inner = span(2, 1, "invoke_agent helper", 1, 99, **{
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"})
    assert _run(root, inner).agent == "invoke_agent boss"


def test_older_openllmetry_model_spans_are_steps_and_never_calls() -> None:
    # OpenLLMetry 0.47's openai.chat (llm.request.type=chat) counts the steps; a Traceloop tool
    # span keeps its tool bit, and a model span carrying tool keys is no call.
    from otel_tooleval.conventions import MODEL, TOOL, span_kind

    chat = {"llm.request.type": "chat", "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o"}
    assert span_kind(chat) == MODEL
    assert span_kind({**chat, "gen_ai.tool.name": "x"}) == MODEL
    assert span_kind({"traceloop.span.kind": "tool", "traceloop.entity.name": "t",
                      "gen_ai.system": "openai"}) == TOOL
    root = span(1, 0, "weather_agent.agent", 0, 100, **{"traceloop.span.kind": "agent",
                                                         "traceloop.entity.name": "a"})
    records = [root]
    for turn in range(3):
        t = turn * 30
        records += [span(10 + turn, 1, "openai.chat", t + 1, t + 10, **chat),
                    span(20 + turn, 1, f"t{turn}.tool", t + 11, t + 12, **{
                        "traceloop.span.kind": "tool", "traceloop.entity.name": f"t{turn}"})]
    run = _run(*records)
    assert [(c.name, c.step) for c in run.calls] == [("t0", 0), ("t1", 1), ("t2", 2)]
    assert run.steps == 3


def test_a_generic_agent_root_takes_the_one_named_agent_below_it() -> None:
    # OpenAI Agents through OpenInference: the root is the SDK's trace span (AGENT, named by
    # the workflow only); the agent spans below it name one agent.
    root = span(1, 0, "Agent workflow", 0, 100, **{"openinference.span.kind": "AGENT"})
    agent = span(2, 1, "weather_agent", 1, 99, **{"openinference.span.kind": "AGENT",
                                                  "agent.name": "weather_agent"})
    again = span(3, 1, "weather_agent", 50, 98, **{"openinference.span.kind": "AGENT",
                                                   "agent.name": "weather_agent"})
    other = span(4, 1, "triage", 60, 97, **{"openinference.span.kind": "AGENT",
                                            "agent.name": "triage"})
    unnamed = span(5, 1, "step", 70, 96, **{"openinference.span.kind": "AGENT"})
    assert _run(root, agent).agent == "weather_agent"
    assert _run(root, agent, again, unnamed).agent == "weather_agent"
    # Two distinct agents below (a handoff): the root keeps its own name.
    assert _run(root, agent, other).agent == "Agent workflow"
    assert _run(root, unnamed).agent == "Agent workflow"
    # A root named by an attribute, or in the semconv's invoke_agent <name> form, keeps it.
    named = span(1, 0, "Agent workflow", 0, 100, **{"openinference.span.kind": "AGENT",
                                                    "agent.name": "boss"})
    assert _run(named, agent).agent == "boss"
    semconv = span(1, 0, "invoke_agent boss", 0, 100, **AGENT)
    assert _run(semconv, agent).agent == "invoke_agent boss"
    bare = span(1, 0, "invoke_agent", 0, 100, **AGENT)
    assert _run(bare, agent).agent == "weather_agent"


def test_a_model_span_inside_another_is_one_response() -> None:
    # LlamaIndex: preparation + outer + inner LLM span per response count as one step.
    root = span(1, 0, "invoke_agent a", 0, 100, **{"gen_ai.operation.name": "invoke_agent"})
    records = [root]
    sid = 10
    for turn in range(2):
        t = turn * 40
        records += [
            span(sid, 1, "OpenAILike._prepare_chat_with_tools", t + 1, t + 2, **{
                "openinference.span.kind": "LLM"}),
            span(sid + 1, 1, "OpenAILike.astream_chat", t + 3, t + 20, **{
                "openinference.span.kind": "LLM"}),
            span(sid + 2, sid + 1, "OpenAILike.astream_chat", t + 4, t + 19, **{
                "openinference.span.kind": "LLM"}),
            span(sid + 3, 1, "FunctionTool.acall", t + 21, t + 22, **{"tool.name": f"t{turn}"})]
        sid += 10
    run = _run(*records)
    assert [(c.name, c.step) for c in run.calls] == [("t0", 0), ("t1", 1)]
    assert run.steps == 2


@pytest.mark.parametrize(("scope", "attrs", "name", "args", "result"), [
    # LlamaIndex: {"kwargs": ...} and the ToolOutput's raw_output
    ("openinference.instrumentation.llama_index",
     {"tool.name": "w", "input.value": '{"kwargs": {"city": "Paris"}}',
      "output.value": '{"blocks": [], "tool_name": "w", "raw_input": {}, '
                      '"raw_output": {"temp_c": 21.0}, "is_error": false}'},
     "w", {"city": "Paris"}, {"temp_c": 21.0}),
    # ADK: a non-dict return value in {"result": ...}; its 1.x keys
    ("gcp.vertex.agent", {"gen_ai.tool.name": "c", "gcp.vertex.agent.tool_call_args":
                          '{"q": 1}', "gcp.vertex.agent.tool_response": '{"result": "Paris"}'},
     "c", {"q": 1}, "Paris"),
    # ADK: the tool's own dict with "result" beside another key stays whole
    ("gcp.vertex.agent", {"gen_ai.tool.name": "c", "gcp.vertex.agent.tool_call_args": "{}",
                          "gcp.vertex.agent.tool_response": '{"result": 1, "status": "ok"}'},
     "c", {}, {"result": 1, "status": "ok"}),
    # Strands (latest semconv): content blocks with the value as JSON text
    ("strands.telemetry.tracer", {"gen_ai.tool.name": "g", "gen_ai.tool.call.arguments": "{}",
                                  "gen_ai.tool.call.result": '[{"text": "{\\"a\\": 1}"}]'},
     "g", {}, {"a": 1}),
    # OpenLLMetry's LangChain callback envelope and serialised ToolMessage
    ("opentelemetry.instrumentation.langchain",
     {"gen_ai.tool.name": "g", "gen_ai.tool.call.arguments":
      '{"input_str": "{\'city\': \'Lyon\'}", "tags": [], "inputs": {"city": "Lyon"}}',
      "gen_ai.tool.call.result": '{"output": {"lc": 1, "type": "constructor", "kwargs": '
                                 '{"content": "{\\"temp_c\\": 18.0}", "type": "tool"}}}'},
     "g", {"city": "Lyon"}, {"temp_c": 18.0}),
    # Semantic Kernel: Plugin-function names; the plugin is the server
    ("semantic_kernel.functions.kernel_function",
     {"gen_ai.tool.name": "WeatherPlugin-get_weather", "gen_ai.tool.call.result":
      "{'city': 'Paris'}"}, "get_weather", None, {"city": "Paris"}),
    # DSPy: the span's name is the tool's
    ("openinference.instrumentation.dspy",
     {"openinference.span.kind": "TOOL", "input.value": '{"kwargs": {"q": "x"}}',
      "output.value": '"done"'}, "lookup_city", {"q": "x"}, "done"),
    # MLflow and Langfuse: the span's name too, their own markers
    ("mlflow.tracing.provider", {"mlflow.spanType": '"TOOL"', "mlflow.spanInputs": '{"a": 1}',
                                 "mlflow.spanOutputs": '"Paris"'}, "lookup_city", {"a": 1},
     "Paris"),
    ("langfuse-sdk", {"langfuse.observation.type": "tool", "langfuse.observation.input":
                      '{"args": [], "kwargs": {"a": 1}}', "langfuse.observation.output": "ok"},
     "lookup_city", {"a": 1}, "ok"),
    # Haystack: its own keys
    ("haystack", {"haystack.tool.name": "h", "haystack.agent.step.tool.input": '{"a": 1}',
                  "haystack.agent.step.tool.output": "ok"}, "h", {"a": 1}, "ok"),
])
def test_framework_tool_rows(scope: str, attrs: dict[str, Any], name: str, args: Any,
                             result: Any) -> None:
    root = SpanRecord(1, 1, 0, "invoke_agent a", 0, 100, {"gen_ai.operation.name": "invoke_agent"})
    span_name = "lookup_city.__call__" if "dspy" in scope else "lookup_city"
    tool = SpanRecord(1, 2, 1, span_name, 10, 20, attrs, scope=scope)
    (call,) = build_run(root, [tool], RunPolicy()).calls
    assert (call.name, call.arguments, call.result) == (name, args, result)
    if scope.startswith("semantic_kernel"):
        assert call.server == "WeatherPlugin"


def test_an_envelope_shape_is_taken_off_by_shape_unless_unwrap_is_off() -> None:
    # Issue 27: a lone {"result": ...} is an envelope whatever the framework (here the general
    # GenAI convention); with runs.unwrap: off only a framework's own envelopes are taken off.
    root = SpanRecord(1, 1, 0, "invoke_agent a", 0, 100, {"gen_ai.operation.name": "invoke_agent"})
    tool = SpanRecord(1, 2, 1, "t", 10, 20, {"gen_ai.tool.name": "t",
                                             "gen_ai.tool.call.result": '{"result": 1}'},
                      scope="pydantic-ai")
    (call,) = build_run(root, [tool], RunPolicy()).calls
    assert call.result == 1
    (call,) = build_run(root, [tool], RunPolicy(unwrap=False)).calls
    assert call.result == {"result": 1}


def test_bookkeeping_tools_are_no_calls() -> None:
    root = SpanRecord(1, 1, 0, "invoke_agent a", 0, 100, {"gen_ai.operation.name": "invoke_agent"})
    merged = SpanRecord(1, 2, 1, "execute_tool (merged)", 10, 20,
                        {"gen_ai.tool.name": "(merged tools)"}, scope="gcp.vertex.agent")
    finish = SpanRecord(1, 3, 1, "finish.__call__", 30, 40, {"openinference.span.kind": "TOOL"},
                        scope="openinference.instrumentation.dspy")
    assert build_run(root, [merged, finish], RunPolicy()).calls == ()


def test_final_output_inside_a_frameworks_result_object() -> None:
    # CrewAI's CrewOutput and DSPy's ReAct prediction, as OpenInference records them.
    crew = SpanRecord(1, 1, 0, "Crew.kickoff", 0, 9, {"output.value": json.dumps(
        {"raw": "done", "pydantic": None, "json_dict": None, "tasks_output": []})})
    react = SpanRecord(1, 1, 0, "ReAct.forward", 0, 9, {"output.value": json.dumps(
        {"trajectory": {}, "reasoning": "r", "answer": "42"})})
    other = SpanRecord(1, 1, 0, "x", 0, 9, {"output.value": json.dumps({"raw": "kept whole"})})
    assert build_run(crew, [], RunPolicy()).final_output == "done"
    assert build_run(react, [], RunPolicy()).final_output == "42"
    assert build_run(other, [], RunPolicy()).final_output == '{"raw": "kept whole"}'


def _message(cls: str, content: Any, **kwargs: Any) -> dict[str, Any]:
    """A LangChain message in its serialised constructor form."""
    return {"lc": 1, "type": "constructor", "id": ["langchain_core", "messages", cls],
            "kwargs": {"content": content, **kwargs}}


def test_final_output_that_is_a_conversation_is_its_last_assistant_text() -> None:
    # A graph's whole state (LangGraph.js through OpenInference JS), an OpenAI message list,
    # LangChain's own dict form: the last assistant message with text.
    state = {"messages": [
        _message("HumanMessage", "weather?"),
        _message("AIMessage", "", type="ai", tool_calls=[{"name": "x", "args": {}}]),
        _message("ToolMessage", "Paris", tool_call_id="c"),
        _message("AIMessage", "Paris 21C", type="ai"),
        _message("AIMessage", "", type="ai")]}
    openai = [{"role": "user", "content": "weather?"},
              {"role": "assistant", "content": [{"type": "text", "text": "Lyon 18C"}]},
              {"role": "tool", "tool_call_id": "c", "content": "x"}]
    langchain = [{"type": "human", "data": {"content": "q"}},
                 {"type": "ai", "data": {"content": "a"}}]
    for value, expected in [(state, "Paris 21C"), (openai, "Lyon 18C"), (langchain, "a"),
                            ({"history": openai}, "Lyon 18C")]:
        for key in ("output.value", "traceloop.entity.output"):
            root = SpanRecord(1, 1, 0, "r", 0, 9, {key: json.dumps(value)})
            assert build_run(root, [], RunPolicy()).final_output == expected, (value, key)
    # Not a conversation: an object with more beside the list, a list with a non-message.
    for value in [{"messages": openai, "answer": 1}, [*openai, "text"], [{"role": "user"}]]:
        root = SpanRecord(1, 1, 0, "r", 0, 9, {"output.value": json.dumps(value)})
        assert build_run(root, [], RunPolicy()).final_output == json.dumps(value)


def test_final_output_recorded_as_a_json_string_literal_is_its_text() -> None:
    # A return value JSON-encoded (OpenLLMetry's traceloop.entity.output), as a tool
    # result recorded so is decoded; plain text and other JSON stay as recorded.
    for key in ("output.value", "traceloop.entity.output"):
        for recorded, expected in [(json.dumps("Paris 21C"), "Paris 21C"),
                                   ("Paris 21C", "Paris 21C"), ('{"a": 1}', '{"a": 1}'),
                                   ("69.8", "69.8")]:
            root = SpanRecord(1, 1, 0, "r", 0, 9, {key: recorded})
            assert build_run(root, [], RunPolicy()).final_output == expected


def test_final_output_from_a_llamaindex_stop_event_and_an_adk_1x_response() -> None:
    stop = ("StopEvent(result=AgentOutput(response=ChatMessage(role=<MessageRole.ASSISTANT: "
            "'assistant'>, additional_kwargs={}, blocks=[TextBlock(block_type='text', "
            "text=\"it's 21C\")]), tool_calls=[], raw=None, current_agent_name='a'))")
    root = SpanRecord(1, 1, 0, "FunctionAgent.run", 0, 9, {"output.value": stop,
                                                           "openinference.span.kind": "CHAIN"})
    assert build_run(root, [], RunPolicy()).final_output == "it's 21C"
    adk_root = SpanRecord(1, 1, 0, "invocation", 0, 99, {}, scope="gcp.vertex.agent")
    call_llm = SpanRecord(1, 2, 1, "call_llm", 1, 9, {"gcp.vertex.agent.llm_request": "{}",
                                                      "gcp.vertex.agent.llm_response": json.dumps(
        {"content": {"parts": [{"text": "Paris 21C"}], "role": "model"}})},
        scope="gcp.vertex.agent")
    assert build_run(adk_root, [call_llm], RunPolicy()).final_output == "Paris 21C"


def test_an_mcp_call_tool_result_is_its_content() -> None:
    root = SpanRecord(1, 1, 0, "invoke_agent a", 0, 100, {"gen_ai.operation.name": "invoke_agent"})
    result = {"content": [{"type": "text", "text": '{"temp_c": 21}'}], "isError": False}
    tool = SpanRecord(1, 2, 1, "execute_tool w", 10, 20, {
        "gen_ai.tool.name": "w", "mcp.server.name": "weather",
        "gen_ai.tool.call.result": json.dumps(result)})
    failed = SpanRecord(1, 3, 1, "execute_tool w", 30, 40, {
        "gen_ai.tool.name": "w", "gen_ai.tool.call.result": json.dumps(
            {"content": [{"type": "text", "text": "no such city"}], "isError": True})})
    first, second = build_run(root, [tool, failed], RunPolicy()).calls
    assert (first.result, first.server) == ({"temp_c": 21}, "weather")
    assert second.result == "no such city"


def test_a_str_enum_operation_under_an_http_root_is_the_same_run_live_and_offline() -> None:
    """Microsoft Agent Framework's live spans carry `gen_ai.operation.name` as a str enum; under
    an HTTP request span the run's root must still be the agent span, as offline."""
    import enum

    from otel_tooleval import grade_spans
    from tests.support.harness import Harness

    class Op(str, enum.Enum):
        INVOKE = "invoke_agent"
        CHAT = "chat"
        TOOL = "execute_tool"

    config = {"graders": [{"type": "tool-call-order", "tool_calls_order": ["a", "b"]}]}
    h = Harness(config)
    try:
        with h.tracer.start_as_current_span("POST /ask", attributes={"http.method": "POST"}):  # noqa: SIM117 - nested as the spans are
            with h.tracer.start_as_current_span("invoke_agent weather_agent", attributes={
                    "gen_ai.operation.name": Op.INVOKE, "gen_ai.agent.name": "weather_agent"}):
                for step, name in enumerate(["a", "b"]):
                    with h.tracer.start_as_current_span("chat m", attributes={
                            "gen_ai.operation.name": Op.CHAT}):
                        pass
                    with h.tracer.start_as_current_span(f"execute_tool {name}", attributes={
                            "gen_ai.operation.name": Op.TOOL, "gen_ai.tool.name": name}):
                        pass
        assert h.flush()
        (live,) = h.reports
        (offline,) = grade_spans(h.finished(), config)
        for report in (live, offline):
            assert (report.run.root_name, report.run.agent) == (
                "invoke_agent weather_agent", "weather_agent")
            assert [(c.name, c.step) for c in report.run.calls] == [("a", 0), ("b", 1)]
            assert report.passed
    finally:
        h.close()


def test_text_with_leading_space_before_no_opener_stays_the_recorded_text() -> None:
    assert decode_value("  1.50") == "  1.50"
    assert decode_value("\ttrue ") == "\ttrue "
    assert decode_value('  {"a": 1}  ') == {"a": 1}


def test_spans_no_local_root_reaches_go_to_on_detached_or_nowhere() -> None:
    root = SpanRecord(1, 1, 0, "invoke_agent a", 0, 100, {"gen_ai.operation.name": "invoke_agent"})
    tool = SpanRecord(1, 2, 1, "execute_tool t", 10, 20,
                      {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"})
    loop_a = SpanRecord(1, 3, 4, "x", 10, 20, {})     # 3 and 4 name each other as parent
    loop_b = SpanRecord(1, 4, 3, "y", 10, 20, {})
    detached: list[list[SpanRecord]] = []
    runs = find_runs([root, tool, loop_a, loop_b], RunPolicy(), on_detached=detached.append)
    assert [r.span_id for r, _ in runs] == [1]
    assert [sorted(s.span_id for s in group) for group in detached] == [[3, 4]]
    assert [r.span_id for r, _ in find_runs([root, tool, loop_a, loop_b], RunPolicy())] == [1]


def test_indexed_texts_reads_every_assistant_text_in_order_until_the_list_ends() -> None:
    from otel_tooleval.conventions.genai import indexed_texts

    attrs = {"m.0.role": "user", "m.0.content": "hi",
             "m.1.role": "assistant", "m.1.content": "one",
             "m.2.role": "assistant", "m.2.content": "",
             "m.3.role": "assistant", "m.3.content": 7,
             "m.4.content": "two",                                # no role: the model's
             "m.5.role": "ai", "m.5.content": "three",
             "m.7.role": "assistant", "m.7.content": "after the end"}
    assert indexed_texts(attrs, "m", "role", "content") == ["one", "two", "three"]
    assert indexed_texts({"m.0.role": "user", "m.0.content": "x"}, "m", "role", "content") == []


def test_row_picker_written_for_a_scope_picks_the_first_row_that_fits() -> None:
    """``tool_row`` keeps one picker per scope, written once: a fresh one, for every scope a
    row names (and one no row names), picks what a loop over the rows picks."""
    from otel_tooleval.conventions.calls import _row_picker
    from tests.test_run_cost import SCOPES, cases, reference_row

    for scope in SCOPES:
        pick = _row_picker(scope)
        for attrs in cases():
            assert pick(attrs) is reference_row(attrs, scope), (scope, attrs)


def test_pending_calls_of_a_run_whose_model_recorded_its_calls() -> None:
    """One call still running when the run ended, among calls the model's response lists:
    one pending call (each counted once)."""
    asked = [{"role": "assistant", "parts": [
        {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"q": "a"}},
        {"type": "tool_call", "id": "c2", "name": "lookup", "arguments": {"q": "b"}}]}]
    root = SpanRecord(1, 1, 0, "invoke_agent a", 0, 100, {"gen_ai.operation.name": "invoke_agent"})
    model = SpanRecord(1, 2, 1, "chat", 5, 9, {"gen_ai.operation.name": "chat",
                                                "gen_ai.output.messages": json.dumps(asked)})
    done = SpanRecord(1, 3, 1, "execute_tool lookup", 10, 20, {
        "gen_ai.tool.name": "lookup", "gen_ai.tool.call.id": "c1"})
    late = SpanRecord(1, 4, 1, "execute_tool lookup", 30, 150, {
        "gen_ai.tool.name": "lookup", "gen_ai.tool.call.id": "c2"})
    run = build_run(root, [model, done, late], RunPolicy())
    assert [c.call_id for c in run.calls] == ["c1", "c2"]
    assert run.pending_calls == 1


def test_the_run_outputs_read_what_the_run_was_asked() -> None:
    asked = [{"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}]
    root = SpanRecord(1, 1, 0, "invoke_agent a", 0, 100, {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.input.messages": json.dumps(asked)})
    run = build_run(root, [], RunPolicy())
    assert run.outputs.first_user_message() == "Weather in Paris?"


def test_langchain_text_reads_the_last_ai_text_of_generations_and_of_a_state() -> None:
    from otel_tooleval.conventions.openinference import langchain_text

    generations = {"generations": [[{"text": "first"}], [{"text": ""}, {"text": "last"}]]}
    assert langchain_text(json.dumps(generations)) == "last"
    state = {"messages": [
        {"type": "human", "data": {"content": "Weather in Paris?"}},
        {"type": "ai", "data": {"content": "Paris: 21C"}},
        {"type": "tool", "data": {"content": "21", "tool_call_id": "c1"}}]}
    assert langchain_text(state) == "Paris: 21C"
    # A message whose type is given only inside its data.
    assert langchain_text({"messages": [{"data": {"type": "ai", "content": "streamed"}}]}) \
        == "streamed"


def test_tool_message_call_id_of_an_output_that_is_no_tool_message() -> None:
    from otel_tooleval.conventions.openinference import tool_message_call_id

    keys = ("output.value",)
    message = {"type": "tool", "data": {"content": "21", "tool_call_id": "call_7"}}
    assert tool_message_call_id({"output.value": json.dumps(message)}, keys) == "call_7"
    # A list of tool messages (a batch) names no one call.
    assert tool_message_call_id({"output.value": json.dumps([message])}, keys) is None


def test_final_output_of_a_framework_output_key_and_an_output_event() -> None:
    from otel_tooleval.conventions.texts import final_output_of

    def root(attrs: dict[str, Any], events: tuple[Any, ...] = ()) -> SpanRecord:
        return SpanRecord(1, 1, 0, "run", 0, 100, attrs, events=events)

    # Text as recorded, not JSON-quoted; a result object's answer; any other value as JSON.
    assert final_output_of(root({"mlflow.spanOutputs": "Paris: 21C"}), []) == "Paris: 21C"
    crew = {"raw": "Paris: 21C", "tasks_output": [], "token_usage": {}}
    assert final_output_of(root({"mlflow.spanOutputs": json.dumps(crew)}), []) == "Paris: 21C"
    assert final_output_of(root({"mlflow.spanOutputs": '{"temp_c": 21}'}), []) \
        == '{"temp_c": 21}'
    # An output event holding a value that is neither text nor messages: its JSON.
    event = ("gen_ai.choice", {"message": '{"temp_c": 21}'})
    assert final_output_of(root({}, (event,)), []) == '{"temp_c": 21}'


def test_content_blocks_of_an_mcp_call_result() -> None:
    from otel_tooleval.conventions.envelopes import content_blocks

    result = {"content": [{"type": "text", "text": '{"temp_c": 21}'}], "isError": False}
    assert content_blocks(result) == {"temp_c": 21}


def test_a_final_output_message_with_content_parts_under_content() -> None:
    from otel_tooleval.conventions.envelopes import conversation_answer

    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": [{"type": "text", "content": "Paris: 21C"}]}]
    assert conversation_answer(messages) == "Paris: 21C"


def test_a_user_convention_without_a_span_name_regex_names_by_the_span_name() -> None:
    from otel_tooleval.conventions.spec import TOOL
    from otel_tooleval.conventions.user import UserConvention

    entry = UserConvention(label="tools", kind=TOOL, equals=(("app.kind", "tool"),))
    assert entry.name_group("lookup_weather") == "lookup_weather"


_HUMAN = {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "HumanMessage"],
          "kwargs": {"content": "Weather in Paris?"}}


@pytest.mark.parametrize("attrs", [
    # OpenAI Responses input: content parts of type input_text.
    {"input.value": json.dumps([{"role": "user", "content": [
        {"type": "input_text", "text": "Weather in Paris?"}]}])},
    # LangChain's serialised HumanMessage (its kind in ``id``, its text under ``kwargs``).
    {"input.value": json.dumps({"messages": [_HUMAN]})},
    # OpenInference's flattened input messages.
    {"llm.input_messages.0.message.role": "system",
     "llm.input_messages.0.message.content": "Be brief.",
     "llm.input_messages.1.message.role": "user",
     "llm.input_messages.1.message.content": "Weather in Paris?"},
    # Plain text as the agent's input, surrounding whitespace dropped.
    {"input.value": "  Weather in Paris?\n"},
    # OpenLLMetry's flattened prompt.
    {"gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "Be brief.",
     "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": "Weather in Paris?"},
    # LangChain's message dump: the text under ``data``.
    {"input.value": json.dumps([{"type": "human", "data": {"content": "Weather in Paris?"}}])},
    # A framework's input object holding the prompt under ``query``.
    {"input.value": json.dumps({"query": "Weather in Paris?", "top_k": 3})},
    # Text parts of one message, joined as they are.
    {"input.value": json.dumps([{"role": "user", "content": [
        {"type": "text", "text": "Weather in "}, {"type": "text", "text": "Paris?"}]}])},
    # LangChain's (role, text) pairs: the user's, not the system's.
    {"input.value": json.dumps([["system", "Be brief."], ["user", "Weather in Paris?"]])},
    # A framework's input object holding the text under ``input`` or ``message``.
    {"input.value": json.dumps({"input": "Weather in Paris?"})},
    {"input.value": json.dumps({"message": "Weather in Paris?", "session": "s1"})},
    # An attribute no convention names, whose name says input, holding the messages.
    {"acme.input": json.dumps([{"role": "user", "content": "Weather in Paris?"}])},
], ids=["responses-input-text", "langchain-constructor", "openinference-flattened", "text",
        "openllmetry-flattened", "langchain-data", "query", "text-parts", "langchain-pairs",
        "input-key", "message-key", "input-named-attribute"])
def test_what_a_run_was_asked_in_each_input_shape(attrs: dict[str, Any]) -> None:
    root = SpanRecord(1, 1, 0, "agent", 0, 100, {"openinference.span.kind": "AGENT", **attrs})
    assert build_run(root, [], RunPolicy()).outputs.first_user_message() == "Weather in Paris?"


def test_what_a_run_was_asked_from_the_user_message_event_of_the_root_or_a_nested_model() -> None:
    asked = ("gen_ai.user.message", {"content": "Weather in Paris?"})
    agent = {"gen_ai.operation.name": "invoke_agent"}
    root = SpanRecord(1, 1, 0, "invoke_agent a", 0, 100, agent, events=(asked,))
    assert build_run(root, [], RunPolicy()).outputs.first_user_message() == "Weather in Paris?"
    # The event on a model span nested in the model span the run counts (a wrapper's).
    root = SpanRecord(1, 1, 0, "invoke_agent a", 0, 100, agent)
    chat = {"gen_ai.operation.name": "chat"}
    wrapper = SpanRecord(1, 2, 1, "chat m", 10, 50, chat)
    inner = SpanRecord(1, 3, 2, "chat m", 11, 49, chat, events=(asked,))
    run = build_run(root, [wrapper, inner], RunPolicy())
    assert run.steps == 1
    assert run.outputs.first_user_message() == "Weather in Paris?"


def test_a_tool_span_marked_not_synthesized_is_a_call() -> None:
    assert one_call({"gen_ai.tool.name": "lookup", "tool.synthesized": False}).name == "lookup"


def test_dspy_prediction_and_langchain_callback_envelopes() -> None:
    from otel_tooleval.conventions.envelopes import dspy_prediction, langchain_callback_inputs

    assert dspy_prediction({"trajectory": {}, "reasoning": "r", "answer": "Paris"}) == "Paris"
    assert dspy_prediction({"trajectory": {}, "reasoning": "r", "answer": None}) is None
    assert dspy_prediction({"answer": "Paris"}) is None          # no ReAct prediction
    # The tool's inputs when the envelope has any, else its input_str.
    assert langchain_callback_inputs({"input_str": "Paris", "inputs": {"city": "Paris"}}) \
        == {"city": "Paris"}
    assert langchain_callback_inputs({"input_str": "Paris", "inputs": {}}) == "Paris"


def test_assistant_texts_skip_the_other_roles_between_them() -> None:
    from otel_tooleval.conventions.genai import texts_from_messages

    messages = [{"role": "assistant", "parts": [{"type": "text", "content": "Looking."}]},
                {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1"}]},
                {"role": "assistant", "content": "Paris: 21C"}]
    assert texts_from_messages(json.dumps(messages)) == ["Looking.", "Paris: 21C"]


def test_a_span_exported_twice_keeps_its_first_ended_record() -> None:
    root = SpanRecord(1, 1, 0, "invoke_agent a", 0, 100, {"gen_ai.operation.name": "invoke_agent"})
    first = SpanRecord(1, 2, 1, "execute_tool lookup", 10, 20, {"gen_ai.tool.name": "lookup"})
    again = first._replace(attributes={"gen_ai.tool.name": "lookup_retry"})
    [(found_root, members)] = find_runs([root, first, again], RunPolicy())
    assert found_root == root
    assert members == [root, first]   # the root among its members, and one lookup


def test_agent_names_match_the_root_pattern_by_span_name_or_agent_name() -> None:
    policy = RunPolicy(root="pattern", root_pattern=compile_user("^support"))
    assert policy.named_agent({}, "support agent")
    assert policy.named_agent({"agent.name": "support-bot"}, "run")
    assert policy.is_agent({"gen_ai.agent.name": "support-bot"}, "run")
    assert not policy.named_agent({"agent.name": "billing"}, "run")
    named = RunPolicy(root="agent", agent_span_names=(compile_user("^support"),))
    assert named.local_root_is_run({}, "support agent", "my.scope", had_agent_runs=False,
                                   has_tool_calls=False)
    assert not named.local_root_is_run({}, "my.scope", "support.scope", had_agent_runs=False,
                                       has_tool_calls=False)


def test_conversation_answer_reads_text_parts_typed_or_not_and_skips_the_others() -> None:
    from otel_tooleval.conventions.envelopes import conversation_answer

    said = [{"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [{"type": "reasoning", "text": "Look it up. "},
                                              {"type": "output_text", "text": "Paris: 21C"}]}]
    assert conversation_answer(said) == "Paris: 21C"
    untyped = [{"role": "assistant", "content": [{"text": "Paris: 21C"}]}]
    assert conversation_answer(untyped) == "Paris: 21C"


def test_assistant_texts_of_a_list_with_items_that_are_no_messages() -> None:
    from otel_tooleval.conventions.genai import texts_from_messages

    assert texts_from_messages(["noise", {"role": "assistant", "content": "Paris"}]) == ["Paris"]


def test_model_and_root_texts_of_langchain_outputs_and_json_results() -> None:
    from otel_tooleval.conventions.texts import assistant_text_of, final_output_of

    model = SpanRecord(1, 2, 1, "ChatOpenAI", 0, 10, {
        "openinference.span.kind": "LLM",
        "output.value": json.dumps({"generations": [[{"text": "Paris: 21C"}]]})})
    assert assistant_text_of(model) == "Paris: 21C"
    root = SpanRecord(1, 1, 0, "agent run", 0, 100, {"final_result": '{"temp_c": 21}'})
    assert final_output_of(root, []) == '{"temp_c": 21}'


def test_tool_call_from_keeps_the_index_it_is_given() -> None:
    from otel_tooleval.conventions.calls import tool_call_from

    record = SpanRecord(1, 2, 1, "execute_tool lookup", 10, 20, {"gen_ai.tool.name": "lookup"})
    found = tool_call_from(record, index=3, step=1, pending=False)
    assert found is not None and (found.index, found.step) == (3, 1)


def test_run_policy_roots_and_dropped_calls() -> None:
    # ``root: local_root``: every local root is a run, agent or not.
    assert RunPolicy(root="local_root").local_root_is_run(
        {}, "GET /", "", had_agent_runs=True, has_tool_calls=False)
    root = SpanRecord(1, 1, 0, "invoke_agent a", 0, 100, {"gen_ai.operation.name": "invoke_agent"})
    assert build_run(root, [], RunPolicy(), dropped_calls=2).dropped_calls == 2
    # A span whose parent is not in the trace (not exported) starts a run of its own.
    orphan = SpanRecord(1, 5, 99, "invoke_agent b", 0, 100,
                        {"gen_ai.operation.name": "invoke_agent"})
    assert [r.span_id for r, _ in find_runs([orphan], RunPolicy())] == [5]
