"""The guard's fast start path gives the answers of its general one.

``GuardRules.start_check`` (the rules written for one rule set), the names the start hook counts
itself (``counted_only``), literal conditions tested as substrings, and the test that rules a
span out before its call is read (``TOOL_KEYS``): each against ``GuardRules.check``, the regex
search or the conventions' reader.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from otel_tooleval import ToolEvalSpanProcessor
from otel_tooleval.conventions.calls import TOOL_KEYS, call_reader
from otel_tooleval.conventions.registry import TOOL_CONVENTIONS
from otel_tooleval.graders.matching import max_match_chars
from otel_tooleval.guard import UNKNOWN, GuardConfig, GuardRules, GuardRun, _conditions_match
from tests.test_guard import guarded

# -- start_check against check --------------------------------------------------------------------

_CONFIGS: list[dict[str, Any]] = [
    {"max_calls": 4},
    {"allowed": ["search", "read_.*"], "max_calls_per_tool": {"search": 2}},
    {"disallowed": ["^delete_", {"name": "bash", "command": "rm -rf"},
                    {"name": "bash", "command": r"rm\s+-r"}, "bash"]},
    {"disallowed": [{"name": "bash", "command": "rm -rf", "path": "/tmp"}], "max_calls": 6},
    {"max_repeats": 1},
    {"max_repeats": 2, "max_calls_per_tool": {"fetch": 3}, "max_calls": 7},
    {"disallowed": ["^drop", {"name": "bash", "command": "rm -rf"}], "allowed": ["bash", "fetch",
     "search", "drop"], "max_calls": 5, "max_calls_per_tool": {"bash": 2}, "max_repeats": 1},
]

# (name, raw arguments or None: not recorded, unwrap)
_CALLS: list[tuple[str, Any, Callable[[Any], Any] | None]] = [
    ("search", '{"q": "a"}', None),
    ("bash", '{"command": "ls -la"}', None),
    ("bash", '{"command": "rm -rf /"}', None),
    ("bash", '{"command": "rm  -r x", "path": "/tmp/x"}', None),
    ("search", '{"q": "a"}', None),
    ("fetch", '{"a": 1, "b": 2}', None),
    ("fetch", '{"b": 2.0, "a": 1}', None),           # the same value, another text
    ("fetch", {"a": 1, "b": 2}, None),               # the same value, not a text
    ("search", None, None),                          # arguments not recorded yet
    ("delete_user", '{"id": 1}', None),
    ("read_file", '{"kwargs": {"path": "x"}}', lambda v: v["kwargs"]),
    ("read_file", '{"kwargs": {"path": "x"}}', lambda v: v["kwargs"]),
    ("drop", "[]", None),
    ("bash", '{"command": "echo rm -rf"}', None),
    ("search", '{"q": "a"}', None),
    ("fetch", '{"a": 1, "b": 2}', None),
]


@pytest.mark.parametrize("config", _CONFIGS)
def test_start_check_answers_as_check_and_counts_the_same(config: dict[str, Any]) -> None:
    general = GuardRules(GuardConfig.model_validate(config))
    fast = GuardRules(GuardConfig.model_validate(config))
    by_check, by_start = GuardRun(), GuardRun()
    found = []
    for _ in range(2):   # the second round: every name remembered, every limit passed
        for name, raw, unwrap in _CALLS:
            want = general.check(by_check, name, UNKNOWN if raw is None else raw, unwrap)
            got = fast.start_check(by_start, name, raw, unwrap)
            assert got == want, (config, name, raw)
            found.append(got)
    assert by_start.calls == by_check.calls == 2 * len(_CALLS)
    for name in {c[0] for c in _CALLS}:
        assert by_start.tool_calls(name) == by_check.tool_calls(name)
    assert any(f is not None for f in found)


def test_names_counted_only_are_those_with_nothing_but_max_calls() -> None:
    rules = GuardRules(GuardConfig.model_validate(
        {"disallowed": ["^delete_"], "allowed": ["search", "fetch", "delete_x"],
         "max_calls_per_tool": {"fetch": 2}, "max_calls": 3}))
    for name in ("search", "fetch", "delete_x", "other"):
        rules.for_name(name)
    assert rules.counted_only == {"search"}
    assert rules.call_limit == 3
    repeats = GuardRules(GuardConfig.model_validate({"max_repeats": 2}))
    repeats.for_name("search")
    assert repeats.counted_only == set()   # max_repeats reads every call's arguments


def test_a_name_counted_by_the_start_hook_breaks_max_calls_as_check_says() -> None:
    config = {"allowed": ["search", "fetch"], "max_calls": 2}
    rules = GuardRules(GuardConfig.model_validate(config))
    run = GuardRun()
    names = ["search", "fetch", "search", "search"]
    want = [rules.check(run, name, "{}") for name in names]
    with guarded(config) as g:
        with g.run():
            for name in names:
                g.call(name, {})
        assert g.rules() == [None if w is None else w.rule for w in want]
        assert [(v.rule, v.count, v.explanation) for v in g.violations] == [
            (w.rule, w.count, w.explanation) for w in want if w is not None]
        assert g.processor._guard is not None
        assert "search" in g.processor._guard.rules.counted_only


# -- literal conditions ---------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", ["rm -rf", "/etc/passwd", "DROP TABLE", "a=b,c:d"])
def test_a_literal_condition_answers_as_the_regex_search(pattern: str) -> None:
    rules = GuardRules(GuardConfig.model_validate(
        {"disallowed": [{"name": "bash", "command": pattern}]}))
    [conditions] = rules._conditions
    assert conditions[0][2] == pattern   # tested as a substring
    as_regex = tuple((key, regex, None) for key, regex, _ in conditions)
    limit = max_match_chars()
    middle = "x" * limit + pattern + "x" * limit     # past the searched head and tail
    values = [pattern, f"sudo {pattern} now", pattern[:-1], "", pattern.upper(), middle,
              "y" * (limit - len(pattern)) + pattern, pattern + "z" * (2 * limit)]
    for value in values:
        args = {"command": value}
        assert _conditions_match(conditions, args) is _conditions_match(as_regex, args), (
            pattern, value[:40], len(value))
    assert _conditions_match(conditions, {"command": middle}) is False
    assert _conditions_match(conditions, {"command": 1}) is False
    assert _conditions_match(conditions, {}) is False
    assert _conditions_match(conditions, [pattern]) is False


@pytest.mark.parametrize("pattern", [r"rm\s+-rf", "rm -rf.", "^rm", "a|b", "(rm)", "rm -r[f]"])
def test_a_pattern_with_regex_syntax_is_searched(pattern: str) -> None:
    rules = GuardRules(GuardConfig.model_validate(
        {"disallowed": [{"name": "bash", "command": pattern}]}))
    assert rules._conditions[0][0][2] is None


# -- spans ruled out by their attribute keys ------------------------------------------------------


def test_every_convention_row_tests_a_key_of_tool_keys() -> None:
    assert TOOL_KEYS is not None
    for conv in TOOL_CONVENTIONS:
        keys = {conv.name, conv.when[0] if conv.when else None} - {None}
        assert keys and keys <= TOOL_KEYS, conv


@pytest.mark.parametrize("scope", sorted({c.scope for c in TOOL_CONVENTIONS if c.scope} | {""}))
def test_a_span_without_tool_keys_is_no_call_in_any_scope(scope: str) -> None:
    assert TOOL_KEYS is not None
    read = call_reader(scope)
    others = {"gen_ai.operation.name": "execute_tool", "gen_ai.agent.name": "a",
              "input.value": '{"q": 1}', "gen_ai.tool.call.arguments": "{}",
              "tool_arguments": "{}", "tool.synthesized": False, "llm.model_name": "m"}
    assert TOOL_KEYS.isdisjoint(others)
    assert read(others, "execute_tool search", ()) is None
    # Each key, alone with them, can make a call: the test is not too wide.
    readable = [key for key in TOOL_KEYS
                if read({**others, key: _value_for(key)}, "execute_tool search", ())]
    assert readable


def _value_for(key: str) -> Any:
    for conv in TOOL_CONVENTIONS:
        if conv.when is not None and conv.when[0] == key:
            return conv.when[1]
    return "search"


def test_spans_without_tool_keys_never_reach_the_reader() -> None:
    with guarded({"allowed": ["search"]}) as g:
        guard = g.processor._guard
        assert guard is not None
        with g.run(), g.tracer.start_as_current_span(
                "chat m", attributes={"gen_ai.operation.name": "chat"}):
            pass
        assert guard.readers == {}   # no span was read for a call
        with g.run():
            g.call("search", {"q": "x"})
            g.call("fetch", json.loads("{}"))
        assert guard.readers != {}
        assert g.rules() == [None, "allowed"]


def test_with_a_conventions_mapping_no_span_is_ruled_out_by_its_keys() -> None:
    # A mapping's entry can make any span a tool call (test_guard_caches checks one by its
    # span name): then every span is read.
    with guarded({"allowed": ["search"]}) as g:
        assert g.processor._guard is not None
        assert g.processor._guard.no_call({"q": "x"}) is True
    processor = ToolEvalSpanProcessor({
        "guard": {"allowed": ["search"]},
        "conventions": [{"scope": "mine", "span_name": "^tool (?P<name>\\w+)$",
                         "tool": {"name": "span_name"}}]})
    try:
        assert processor._guard is not None
        assert processor._guard.no_call({"q": "x"}) is False
    finally:
        processor.shutdown()
