"""What makes the guard cheap, held to what it replaces: the compiled call reader against
``tool_call``, name rules remembered per tool name (and past the bound), and ``max_repeats``
counting argument texts, decoding only past the limit, with the same value equality.

Spans come from a real ``TracerProvider`` (``test_guard.guarded``) where a rule's outcome is
what is checked; the reader is compared with ``tool_call`` on records.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from otel_tooleval import ToolEvalSpanProcessor, check_call
from otel_tooleval import guard as guard_module
from otel_tooleval.conventions.calls import call_reader, tool_call
from otel_tooleval.conventions.registry import TOOL_CONVENTIONS
from otel_tooleval.guard import GuardConfig, GuardRules, GuardRun
from otel_tooleval.model import SpanEvent, SpanRecord
from otel_tooleval.values import decode_value
from tests.test_guard import guarded

# -- the call reader against tool_call -----------------------------------------------------------

_SCOPES = sorted({c.scope for c in TOOL_CONVENTIONS if c.scope} | {"", "my.app",
                                                                   "strands.agent.extra"})


def _spans() -> list[tuple[dict[str, Any], str, tuple[SpanEvent, ...]]]:
    """A span for every convention row (and its edge cases): attributes, name, events."""
    out: list[tuple[dict[str, Any], str, tuple[SpanEvent, ...]]] = []
    for conv in TOOL_CONVENTIONS:
        base: dict[str, Any] = {}
        if conv.when is not None:
            base[conv.when[0]] = conv.when[1]
        names = ["lookup", "Plugin-lookup", "finish", "(merged tools)", "fn.__call__"]
        for name in names:
            attrs = dict(base)
            if conv.name is not None:
                attrs[conv.name] = name
            span_name = name if conv.name is None else f"execute_tool {name}"
            out.append((attrs, span_name, ()))
            for i, key in enumerate(conv.arguments):
                out.append(({**attrs, key: json.dumps({"k": i})}, span_name, ()))
            out.append(({**attrs, "tool.synthesized": True}, span_name, ()))
            out.append(({**attrs, "tool.synthesized": False,
                         **{k: "{}" for k in conv.arguments[:1]}}, span_name, ()))
            for event, key in conv.argument_events:
                out.append((attrs, span_name, ((event, {key: '{"e": 1}'}),)))
        if conv.when is not None:
            out.append(({conv.when[0]: conv.when[1].upper() + "x"}, "other", ()))
            if conv.name is not None:   # the name without the condition
                out.append(({conv.name: "lookup", conv.when[0]: "other"}, "x", ()))
    out.append(({"gen_ai.tool.name": 42, "gen_ai.tool.call.arguments": "{}"}, "x", ()))
    out.append(({"tool.name": "a", "gen_ai.tool.name": "b", "input.value": "[1]"}, "x", ()))
    out.append(({"gen_ai.operation.name": "chat"}, "chat m", ()))
    return out


@pytest.mark.parametrize("scope", _SCOPES)
def test_the_compiled_reader_reads_what_tool_call_reads(scope: str) -> None:
    read = call_reader(scope)
    compared = 0
    for attrs, span_name, events in _spans():
        record = SpanRecord(1, 2, 0, span_name, 0, None, attrs, None, False, scope, events)
        want = tool_call(record, 0, 0, True, ())
        got = read(attrs, span_name, events)
        if want is None:
            assert got is None, (attrs, span_name)
            continue
        assert got is not None, (attrs, span_name)
        name, raw, unwrap = got
        assert (name, raw) == (want.name, want.raw_arguments), (attrs, span_name)
        assert unwrap is (want.envelope.arguments_from if want.envelope is not None else None)
        compared += 1
    assert compared > 50


def test_each_scope_has_its_own_reader() -> None:
    # ADK's row (its scope only) says "(merged tools)" is no call; elsewhere it is one.
    with guarded({"allowed": ["search"]}) as g, g.run():
        adk = g.provider.get_tracer("gcp.vertex.agent")
        for tracer in (adk, g.tracer, adk):
            with tracer.start_as_current_span("execute_tool (merged tools)",
                                              attributes={"gen_ai.tool.name": "(merged tools)"}):
                pass
    assert [v.tool for v in g.violations] == ["(merged tools)"]


def test_a_qualified_name_is_split_as_grading_splits_it() -> None:
    with guarded({"allowed": ["get_weather"]}) as g, g.run():
        kernel = g.provider.get_tracer("semantic_kernel.functions.kernel_function")
        for name in ("WeatherPlugin-get_weather", "WeatherPlugin-delete_city"):
            with kernel.start_as_current_span(f"execute_tool {name}",
                                              attributes={"gen_ai.tool.name": name}):
                pass
    assert [v.tool for v in g.violations] == ["delete_city"]


def test_ignored_tools_and_mapped_spans_are_read_as_grading_reads_them() -> None:
    seen: list[str] = []
    config = {"guard": {"allowed": ["search"]}, "runs": {"ignore_tools": ["final_.*"]},
              "conventions": [{"scope": "mine", "span_name": "^tool (?P<name>\\w+)$",
                               "tool": {"name": "span_name",
                                        "arguments_from_attributes": ["q"]}}]}
    processor = ToolEvalSpanProcessor(config, on_violation=lambda v: seen.append(v.tool))
    provider = TracerProvider()
    provider.add_span_processor(processor)
    try:
        mine, plain = provider.get_tracer("mine"), provider.get_tracer("plain")
        with plain.start_as_current_span("invoke_agent a", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}):
            with mine.start_as_current_span("tool search", attributes={"q": "x"}):
                pass
            with mine.start_as_current_span("tool delete", attributes={"q": "x"}):
                pass
            for name in ("final_result", "fetch"):
                with plain.start_as_current_span(f"execute_tool {name}",
                                                 attributes={"gen_ai.tool.name": name}):
                    pass
    finally:
        provider.shutdown()
    assert seen == ["delete", "fetch"]


# -- name rules, remembered per name ---------------------------------------------------------


def test_name_rules_past_the_remembered_names_are_still_applied() -> None:
    rules = GuardRules(GuardConfig.model_validate(
        {"allowed": ["keep", "keep_.*"], "disallowed": ["rm"]}))
    run = GuardRun()
    names = [f"tool{i}" for i in range(guard_module._MAX_REMEMBERED_NAMES + 50)]
    found = [rules.check(run, name, "{}") for name in names]
    assert all(f is not None and f.rule == "allowed" for f in found)
    assert len(rules._names) == guard_module._MAX_REMEMBERED_NAMES
    # Not remembered, still right: a pattern, an exact name, a disallowed substring.
    assert rules.check(run, "keep_it") is None
    assert rules.check(run, "keep") is None
    late = rules.check(run, "keep_rm")
    assert late is not None and late.rule == "disallowed"
    assert run.calls == len(names) + 3


@pytest.mark.parametrize(("allowed", "name", "ok"), [
    (["web-search"], "web-search", True),
    (["web-search"], "web-search2", False),
    (["web.search"], "webXsearch", True),     # a pattern: "." is any character
    (["get_.*", "a"], "get_", True),
    (["a"], "ab", False),
])
def test_exact_names_and_patterns_of_the_allow_list(allowed: list[str], name: str,
                                                    ok: bool) -> None:
    rules = GuardRules(GuardConfig.model_validate({"allowed": allowed}))
    assert (rules.check(GuardRun(), name) is None) is ok


def test_a_disallowed_entry_with_conditions_before_a_name_entry_is_tried_first() -> None:
    rules = GuardRules(GuardConfig.model_validate({"disallowed": [
        {"name": "bash", "command": "rm"}, "bash", {"name": "bash", "command": "ls"}]}))
    found = rules.check(GuardRun(), "bash", '{"command": "rm -rf"}')
    assert found is not None and found.entry == 0
    found = rules.check(GuardRun(), "bash", '{"command": "ls"}')
    assert found is not None and found.entry == 1     # the name entry comes before entry 2
    found = rules.check(GuardRun(), "bash")
    assert found is not None and found.entry == 1


# -- max_repeats: argument texts first, values only past the limit -----------------------------


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The argument values the guard decodes."""
    seen: list[Any] = []
    real = decode_value

    def counting(value: Any) -> Any:
        seen.append(value)
        return real(value)

    monkeypatch.setattr(guard_module, "decode_value", counting)
    return seen


def test_identical_texts_are_counted_without_decoding(decodes: list[Any]) -> None:
    rules = GuardRules(GuardConfig.model_validate({"max_repeats": 3}))
    run = GuardRun()
    text = '{"url": "a", "n": 1}'
    assert [rules.check(run, "fetch", text) for _ in range(3)] == [None] * 3
    assert decodes == []
    loop = rules.check(run, "fetch", text)
    assert loop is not None and (loop.rule, loop.count) == ("max_repeats", 4)
    assert decodes == [text]            # once, past the limit
    loop = rules.check(run, "fetch", text)
    assert loop is not None and loop.count == 5
    assert decodes == [text]


def test_past_the_limit_equal_values_with_other_texts_share_a_count(decodes: list[Any]) -> None:
    rules = GuardRules(GuardConfig.model_validate({"max_repeats": 2}))
    run = GuardRun()
    assert rules.check(run, "f", '{"a": 1, "b": [true]}') is None
    assert rules.check(run, "f", '{"b": [true], "a": 1.0}') is None
    assert decodes == []
    loop = rules.check(run, "f", '{"a":1,"b":[true]}')
    assert loop is not None and loop.count == 3
    assert len(decodes) == 3            # each distinct text, once
    assert rules.check(run, "f", '{"a": 1, "b": [1]}') is None     # true is no 1
    assert rules.check(run, "g", '{"a": 1, "b": [true]}') is None  # another tool
    assert len(decodes) == 4


def test_a_question_past_the_limit_leaves_the_counts_right() -> None:
    # check_call (record=False) works out the value classes; later calls must still count
    # into them, and a text first seen in a question must still be counted when called.
    with guarded({"max_repeats": 1}) as g, g.run():
        g.call("f", {"a": 1})
        found = check_call("f", {"a": 1.0})
        assert found is not None and (found.rule, found.count) == ("max_repeats", 2)
        assert check_call("f", '{"a": 2}') is None
        g.call("f", {"a": 2})
        g.call("f", {"a": 1.0})
        g.call("f", {"a": 2.0})
        assert check_call("f", {"a": 3}) is None
        assert g.rules() == [None, None, "max_repeats", "max_repeats"]
        assert [v.count for v in g.violations] == [2, 2]


def test_values_and_texts_mix_in_one_count() -> None:
    rules = GuardRules(GuardConfig.model_validate({"max_repeats": 2}))
    run = GuardRun()
    assert rules.check(run, "f", {"q": "x"}) is None       # a value (one attribute per key)
    assert rules.check(run, "f", '{"q": "x"}') is None
    loop = rules.check(run, "f", {"q": "x"})
    assert loop is not None and loop.count == 3
    loop = rules.check(run, "f", ' {"q": "x"} ')
    assert loop is not None and loop.count == 4


def test_arguments_in_an_envelope_are_compared_unwrapped() -> None:
    # LlamaIndex's {"kwargs": {...}} is unwrapped before values are compared.
    rules = GuardRules(GuardConfig.model_validate({"max_repeats": 1}))
    run = GuardRun()
    unwrap = next(c for c in TOOL_CONVENTIONS if c.convention == "llamaindex").arguments_from
    assert rules.check(run, "f", '{"kwargs": {"q": 1}}', unwrap) is None
    loop = rules.check(run, "f", '{"q": 1.0}', unwrap)
    assert loop is not None and loop.count == 2
