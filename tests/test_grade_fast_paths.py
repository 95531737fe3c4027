"""The shortcuts taken to keep a grade's fixed cost low give what the long way gives (issue 19).

Each test compares a shortcut with the computation it stands for: the argument-text match of
tool_trajectory with decoding and ``args_match``, ``text_of`` with the JSON encoder it bypasses,
``AgentRun.first_call`` with the grouped calls, bounded explanations with the full counts.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from types import SimpleNamespace
from typing import Any

import pytest

import otel_tooleval.graders.tool_trajectory  # noqa: F401  (registers the family)
from otel_tooleval import load_config
from otel_tooleval.graders.trajectory_entries import _differs, _Entry, _needles, args_match
from otel_tooleval.model import _COMPACT_JSON, GradeResult, ToolCall, text_of
from otel_tooleval.values import decode_value
from tests.support.runs import call, grade, run_of

# Expected args and the text a span recorded; every pair's text is json.dumps of the args, so
# the text shortcut applies unless decoding would read the text differently.
ENVELOPES = [
    {"type": "tool", "data": {"content": "x"}},        # a LangChain ToolMessage: unwrapped
    {"args": [], "kwargs": {"path": "a.py"}},          # smolagents' envelope: unwrapped
]
PLAIN = [{"path": "a.py"}, {"q": "é ü", "n": 1, "x": 1.5, "b": True, "z": None},
         {"nested": {"a": [1, 2, {"b": "c"}]}}, {}]


def _exact(expected: list[dict[str, Any]]) -> dict[str, Any]:
    return {"graders": [{"type": "tool_trajectory", "mode": "exact", "expected": expected}]}


@pytest.mark.parametrize("args", ENVELOPES + PLAIN)
def test_argument_text_equal_to_the_expected_json_matches_as_decoding_does(
        args: dict[str, Any]) -> None:
    text = json.dumps(args)
    expected = args_match(args, decode_value(text))
    assert expected is (args not in ENVELOPES)      # envelopes decode to something else
    result = grade(_exact([{"tool": "t", "args": args}]), [call("t", text)])
    assert result.details["hits"] == int(expected)


def test_argument_text_of_a_call_read_through_an_envelope_is_decoded() -> None:
    entry = _Entry(0, "t", {"a": 1}, None)
    assert entry.text == '{"a": 1}'
    plain = ToolCall("t", 0, raw_arguments='{"a": 1}')
    unwrapping = ToolCall("t", 0, raw_arguments='{"a": 1}', envelope=SimpleNamespace(
        arguments_from=lambda value: {"b": 2}, result_from=None))
    assert entry.args_hold(plain)
    assert not entry.args_hold(unwrapping)


class _Odd:
    def __str__(self) -> str:
        return "odd"


@pytest.mark.parametrize("value", [
    {"a": [1, 2.5, None, True, "é\n\"\\"], "b": {"c": ()}}, [1, (2, 3)], 5, 1.0, None, False,
    {1: "int key", 2.5: "float key", None: "none", False: "bool"}, [_Odd()], [math.inf, -0.0],
    {"deep": [[[[{"x": "y"}]]]]}, "a string stays as it is",
])
def test_text_of_writes_what_the_json_encoder_writes(value: Any) -> None:
    assert text_of(value) == (value if isinstance(value, str) else _COMPACT_JSON.encode(value))


def test_text_of_refuses_a_circular_value_as_the_encoder_does() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        _COMPACT_JSON.encode(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        text_of(loop)
    assert text_of([loop[:0], {"k": [1]}]) == '[[],{"k":[1]}]'    # and works after it


def test_first_call_is_the_grouped_calls_first_and_last() -> None:
    rng = random.Random(3)
    for _ in range(50):
        names = [rng.choice("abc") for _ in range(rng.randrange(0, 8))]
        for last in (False, True):
            scanned = run_of([call(n) for n in names])
            grouped = run_of([call(n) for n in names])
            groups = grouped.calls_by_name()
            for name in "abcd":
                group = groups.get(name)
                want = None if not group else group[-1 if last else 0].index
                for run in (scanned, grouped):
                    found = run.first_call(name, last=last)
                    assert (None if found is None else found.index) == want


def test_grade_result_keeps_its_dataclass_behaviour() -> None:
    a = GradeResult("n", "t", 0.5, False, "fail", "why")
    b = GradeResult(name="n", type="t", score=0.5, passed=False, label="fail",
                    explanation="why")
    assert a == b and a.details == {} and a.error is None
    assert a.details is not b.details                        # a fresh dict each
    # A custom grader may pass None: kept as given, as the generated __init__ did.
    none = GradeResult("n", "t", 1.0, True, "pass", "", None)  # type: ignore[arg-type]
    assert none.to_dict()["details"] is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.score = 1.0  # type: ignore[misc]
    c = dataclasses.replace(a, score=1.0, details={"k": 1}, error="E")
    assert (c.score, c.details, c.error, c.name) == (1.0, {"k": 1}, "E", "n")
    assert [f.name for f in dataclasses.fields(GradeResult)] == [
        "name", "type", "score", "passed", "label", "explanation", "details", "error"]


def test_exact_explanation_names_three_of_each_problem_and_counts_the_rest() -> None:
    expected = [{"tool": t, "max_duration_ms": 1} for t in "abcdefgh"]
    calls = [call("z", duration_ms=5) for _ in range(3)] + [
        call(t, duration_ms=5) for t in "defgh"] + [call("y") for _ in range(5)]
    result = grade(_exact(expected), calls)
    assert result.explanation == (
        "5 of 8 expected calls in place; position 0 expected a, got z, position 1 expected b, "
        "got z, position 2 expected c, got z; 5 extra call(s) at #8, #9, #10 and 2 more; over "
        "the latency limit: entry 3 (d) at call #3, entry 4 (e) at call #4, entry 5 (f) at "
        "call #5 and 2 more.")
    reasons = [v["reason"] for v in result.details["violations"]]
    assert reasons == ([f"another tool than entry {i} ({t!r})" for i, t in enumerate("abc")]
                       + [f"over the 1 ms limit of entry {i} ({t!r})"
                          for i, t in enumerate("defgh", 3)]
                       + ["extra call beyond the 8 expected"] * 5)
    fewer = grade(_exact(expected), [call("a"), call("b")])
    assert fewer.explanation == (
        "2 of 8 expected calls in place; missing entry 2 (c), entry 3 (d), entry 4 (e) and 3 "
        "more.")


# -- the tool grader (letta functions) ----------------------------------------------------------

def test_printable_check_at_c_speed_agrees_with_the_character_loop() -> None:
    from otel_tooleval.graders.tool_graders import _all_printable, _is_printable
    texts = [chr(cp) for cp in range(0x3100)] + ["", "a\nb\r\n", "tab\there", "\x7f", "ok ~",
                                                  "é", "\n", "\r\r", "a\x00b", "\ud800", "\u2028"]
    rng = random.Random(19)
    alphabet = "ab ~\n\r\t\x7f\x1fé€\u00a0\u2028\U0001f30d"
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
              for _ in range(2000)]
    for text in texts:
        assert _all_printable(text) is all(_is_printable(ch) for ch in text), repr(text)


def test_whitespace_only_check_is_what_strip_leaves_empty() -> None:
    for cp in range(0x3100):
        for text in (chr(cp), chr(cp) * 3, f" {chr(cp)}\n"):
            assert (not text or text.isspace()) is (not text.strip()), hex(cp)


def _letta(function: str, **more: Any) -> dict[str, Any]:
    return {"graders": [{"name": "g", "kind": "tool", "function": function,
                         "extractor": "tool_arguments",
                         "extractor_config": {"tool_name": "t"}, **more}]}


@pytest.mark.parametrize(("function", "config_truth"), [
    ("exact_match", '{"q": 1}'), ("exact_match", "nope"), ("contains", '"q"'),
    ("contains", "absent"), ("regex_match", "q.?"), ("regex_match", "^z"),
    ("ascii_printable_only", None)])
def test_kept_explanations_are_what_a_fresh_grader_writes(function: str,
                                                          config_truth: str | None) -> None:
    more = {} if config_truth is None else {"ground_truth": config_truth}
    kept = load_config(_letta(function, **more)).graders[0].grader
    runs = [([call("t", '{"q": 1}')], {}), ([call("t", '{"q": "é\\u0007"}')], {}),
            ([call("t", '{"q": 2}')], {"root_attrs": {"tooleval.ground_truth": "q\\\""}}),
            ([call("t", '{"q": 1}')], {"root_attrs": {"tooleval.ground_truth": '{"q":1}'}})]
    if config_truth is None:
        runs = runs[:2]
    for _ in range(3):
        for calls, extra in runs:
            fresh = load_config(_letta(function, **more)).graders[0].grader
            assert kept.grade(run_of(calls, **extra)) == fresh.grade(run_of(calls, **extra))


def test_kept_explanations_are_bounded() -> None:
    from otel_tooleval import load_config
    from otel_tooleval.graders.tool_graders import _SAID_KEPT
    grader = load_config(_letta("ascii_printable_only")).graders[0].grader
    for n in range(1, 2 * _SAID_KEPT):
        result = grader.grade(run_of([call("t", json.dumps({"q": "é" * n}))]))
        assert result.explanation.startswith(
            f"The submission (the arguments of call #0 (t)) holds {n} character(s) outside "
            "printable ASCII (first at offset 6)")
    assert len(grader._said) <= _SAID_KEPT


def _json_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return rng.choice([0, 1, -1, 10**20, True, False, None])
    if kind == 1:
        return rng.choice([0.0, -0.0, 1.5, 1e300, 1.0, math.inf, -math.inf, math.nan])
    if kind in (2, 3, 4, 5):
        return rng.choice(["", "a", "é", "NaN", "\ud800", "x\ny", '"q"', "1"])
    if kind in (6, 7):
        return {rng.choice("abc"): _json_value(rng, depth + 1) for _ in range(rng.randrange(4))}
    return [_json_value(rng, depth + 1) for _ in range(rng.randrange(4))]


def test_exact_match_on_the_truths_compact_text_is_the_json_comparison() -> None:
    from otel_tooleval.graders.tool_graders import (
        _json_or_none,
        _same_json,
        _truth_compact,
        _truth_json,
    )
    rng = random.Random(19)
    for _ in range(3000):
        value = _json_value(rng)
        truth = json.dumps(value, ensure_ascii=rng.random() < 0.5)
        compact = _truth_compact(truth)
        theirs = _truth_json(truth)
        if not isinstance(theirs, (dict, list)):
            assert compact is None
            continue
        for text in (text_of(value), text_of(theirs), json.dumps(value), compact):
            if text is None or text != compact:
                continue
            mine = _json_or_none(text)      # the long way
            assert _same_json(mine, theirs), (truth, text)
    # a NaN is not equal to itself: no shortcut, the long way says "not equal"
    assert _truth_compact('{"x": NaN}') is None
    assert not _same_json(_json_or_none('{"x":NaN}'), _truth_json('{"x": NaN}'))
    assert _truth_compact('"text"') is None and _truth_compact("plain") is None


def test_matches_checks_the_budget_and_bounds_as_search_does() -> None:
    from otel_tooleval.graders.matching import (
        BudgetExceeded,
        compile_user,
        grading_limits,
        matches,
        search,
    )
    pattern = compile_user("^ab|cd$|x")
    for text in ("abz", "zcd", "zz", "a" * 50 + "x", "x" + "a" * 50, "q" * 40 + "ab" + "q" * 40):
        with grading_limits(max_match_chars=20):
            assert matches(pattern, text) is (search(pattern, text) is not None), text
    with grading_limits(budget_ms=1e-9) as clock:
        clock.spent = True
        with pytest.raises(BudgetExceeded):
            matches(pattern, "abz")
        with pytest.raises(BudgetExceeded):
            search(pattern, "abz")


class _Text(str):
    """A str subclass: decoding leaves it as it is, so it matches no expected object."""


def test_exact_mode_in_place_verdicts_are_the_entries_own_args_hold() -> None:
    # exact mode checks the argument text in line; every position's verdict must be what
    # _Entry.args_hold gives, including the cases the in-line check leaves to it.
    from otel_tooleval import load_config
    rng = random.Random(19)
    shapes: list[dict[str, Any] | None] = [None, *PLAIN, *ENVELOPES, {"path": "b.py"}]
    unwrap = SimpleNamespace(arguments_from=lambda value: {"path": "a.py"}, result_from=None)
    for _ in range(40):
        expected = [{"tool": "t", **({} if a is None else {"args": a})}
                    for a in rng.choices(shapes, k=12)]
        grader = load_config(_exact(expected)).graders[0].grader
        calls = []
        for i in range(12):
            args = rng.choice(shapes)
            raw: Any = None if args is None else json.dumps(args)
            if rng.random() < 0.3:
                raw = rng.choice(TRICKY)
            if raw is not None and rng.random() < 0.2:
                raw = _Text(raw)
            calls.append(ToolCall("t", i, raw_arguments=raw,
                                  envelope=unwrap if rng.random() < 0.2 else None))
        _, _, details = grader._sequence(calls)
        held = [e.args_hold(c) for e, c in zip(grader.entries, calls)]
        assert details["hits"] == sum(held)
        assert [row.get("call") is not None for row in details["entries"]] == held


# Argument texts whose decoding could match {"path": "a.py"} without holding '"a.py"', or holds
# it in other ways: Python literals, joined string literals, escapes, envelopes, comments.
TRICKY = [
    '{"path": "a.py"}', "{'path': 'a.py'}", '{"path": "a" ".py"}', '{"path": "a"\n".py"}',
    '{"path": "a"\t\f".py"}', '{"path": ("a" ".py")}', '{"path": """a.py"""}',
    '{"path": b"a.py"}', '{"path": r"a.py"}', '{"path": "a\\u002epy"}', '{"path": "a\\x2epy"}',
    '{"path": "a" # c\n ".py"}', '{"path": "a" \\\n ".py"}', '{"path": "a.py",}',
    '{"path": "b.py", "path": "a.py"}', '{"args": [], "kwargs": {"path": "a.py"}}',
    '{"args": [], "kwargs": {"path": "a" ".py"}}',
    '{"type": "tool", "data": {"content": "{\'path\': \'a.py\'}"}}',
    '{"type": "tool", "data": {"content": {"path": "a.py"}}}', '  {"path": "a.py"}  ',
    '{"path": "b.py"}', '{"path": ""}', '{"path": "", "q": "é ü"}', '{"q": "é ü", "n": 1}',
    '{"path": "a.py", "x": [1, {"y": "z"}]}', "not json", "", "[]", '{"path": 1}',
]


@pytest.mark.parametrize("raw", TRICKY)
def test_argument_text_ruled_out_without_decoding_never_matches(raw: str) -> None:
    # _differs rules a call out from its text alone; decoding must agree wherever it does.
    ruled_out = 0
    for args in [*PLAIN, *ENVELOPES, {"path": "a.py"}, {"path": "a.py", "q": "é ü"},
                 {"path": ""}, {"path": "a#b"}, {"path": 'a"b'}, {"x": [1, {"y": "z"}]}]:
        decoded = decode_value(raw)
        holds = args_match(args, {} if decoded is None else decoded)
        if _differs(_needles(args), raw):
            ruled_out += 1
            assert not holds, (args, raw)
    assert ruled_out or not raw.startswith('{"path": "b')


def test_argument_text_ruled_out_only_when_written_plainly() -> None:
    needles = _needles({"path": "a.py", "n": 1, "q": "x'y"})
    assert needles == ('"a.py"',)
    assert _differs(needles, '{"path": "b.py"}')
    assert not _differs(needles, '{"path": "a.py"}')
    for raw in ['{"path": "a" ".py"}', "{'path': 'b.py'}", '{"path": "a\\u002epy"}',
                '{"path": "b.py"} # x']:
        assert not _differs(needles, raw), raw


@pytest.mark.parametrize("gap", ["", " ", "\t", "\f", "\r", "\n", "\v", " \n\t "])
def test_adjacent_literals_across_any_whitespace_are_decoded(gap: str) -> None:
    # Python's parser joins "a" and ".py" across these gaps (not across a vertical tab, which
    # _ADJACENT still counts, to be safe): the text must be decoded, whichever of _differs'
    # scans (a quote after a quote or a space, or a character that is not printable) finds
    # the gap.
    raw = '{"path": "a"' + gap + '".py"}'
    assert not _differs(_needles({"path": "a.py"}), raw)
    assert args_match({"path": "a.py"}, decode_value(raw)) == ("\v" not in gap)


def test_adjacency_prescan_agrees_with_the_regex_alone() -> None:
    # The scans in C before _ADJACENT are a shortcut: on random texts over the characters
    # that matter, _differs answers what the regex alone would.
    import re
    adjacent = re.compile(r'"[ \t\f\r\n\v]*"')
    rng = random.Random(19)
    alphabet = ['"', " ", "\t", "\n", "\v", "\f", "\r", "a", ":", ",", "{", "}", "\\", "n",
                "'", "#", "é", "\x00"]
    needles = ('"zz"',)
    for _ in range(20_000):
        raw = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 12)))
        expected = not (("\\" in raw and raw.count("\\") != raw.count("\\n")) or "'" in raw
                        or "#" in raw or adjacent.search(raw))
        assert _differs(needles, raw) == expected, repr(raw)


# Argument texts with "\n" escapes (a coding agent's file contents), and with backslashes that
# are other escapes, or "\n" where it is not a line break, or raw Python strings.
LINE_BREAKS = [
    '{"path": "a.py", "content": "x = 1\\n"}', '{"path": "b.py", "content": "x = 1\\n"}',
    '{"path": "a\\n.py"}', '{"path": "a.py\\n"}', "{\"path\": r\"a\\n.py\"}",
    '{"path": "a\\\\n.py"}', '{"path": "a\\\\\\n.py"}', '{"content": "\\n", "path": "b.py"}',
    '{"path": "a\\u002epy", "c": "\\n"}', '{"path": "a\\n" ".py"}', '{"path":\\n"a.py"}',
    '{"type": "tool", "data": {"content": "{\\n\\"path\\": \\"a.py\\"}"}}',
    '{"type": "tool", "data": {"content": "{\\n}"}, "path": "b.py"}',
    '{"args": [], "kwargs": {"path": "a.py", "c": "\\n"}}', '{"path": "b.py", "c": "\\N"}',
]


@pytest.mark.parametrize("raw", LINE_BREAKS)
def test_argument_text_with_line_break_escapes_ruled_out_only_when_decoding_agrees(
        raw: str) -> None:
    for args in [*PLAIN, *ENVELOPES, {"path": "a.py"}, {"path": "a.py", "content": "x = 1\n"},
                 {"path": "a\n.py"}, {"path": "a\\n.py"}, {"content": "\n"}]:
        decoded = decode_value(raw)
        if _differs(_needles(args), raw):
            assert not args_match(args, {} if decoded is None else decoded), (args, raw)


def test_file_contents_with_line_breaks_are_ruled_out_without_decoding() -> None:
    needles = _needles({"path": "a.py", "content": "x = 1\n"})
    assert needles == ('"a.py"',)
    assert _differs(needles, '{"path": "b.py", "content": "x = 1\\n"}')
    assert not _differs(needles, '{"path": "a.py", "content": "x = 2\\n"}')
    for raw in ['{"path": "b.py", "content": "\\\\n"}', '{"path": "b.py", "c": "\\t"}',
                '{"path": "b.py", "c": "\\"a.py\\""}', '{"path": "b.py", "c": "\\N"}']:
        assert not _differs(needles, raw), raw
