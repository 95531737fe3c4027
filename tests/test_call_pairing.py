"""The pairing behind tool-call-args and tool-call-output (``graders.call_pairing``): the
matching on classes of entries gives exactly the pairs of the entry-by-entry search it replaced
(kept here as the oracle), and the lookups give exactly the calls the predicate accepts."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import pytest

from otel_tooleval import load_config
from otel_tooleval.graders import call_pairing, tool_call_checks
from otel_tooleval.graders.call_pairing import ArgsIndex, json_key, max_matching
from otel_tooleval.graders.tool_call_checks import _args_match, output_text, same_value
from otel_tooleval.model import AgentRun
from tests.support.runs import call, run_of


def oracle_matching(candidates: Sequence[Sequence[int]]) -> list[int | None]:
    """The entry-by-entry search (breadth-first augmenting paths) as it was before classes:
    every entry searched, every candidate list scanned in full by every entry it reaches."""
    paired: list[int | None] = [None] * len(candidates)
    owner: dict[int, int] = {}
    for root, mine in enumerate(candidates):
        free = next((c for c in mine if c not in owner), None)
        if free is not None:
            paired[root], owner[free] = free, root
            continue
        reached: dict[int, int] = {}
        queue = [root]
        end = None
        for entry in queue:
            for c in candidates[entry]:
                if c in reached:
                    continue
                reached[c] = entry
                if c not in owner:
                    end = c
                    break
                queue.append(owner[c])
            if end is not None:
                break
        while end is not None:
            entry = reached[end]
            previous = paired[entry]
            paired[entry], owner[end] = end, entry
            end = None if entry == root else previous
    return paired


def random_candidates(rng: random.Random) -> list[list[int]]:
    """Entries in classes sharing one list object; lists drawn so that they overlap a lot."""
    calls = rng.randrange(0, 14)
    lists = []
    for _ in range(rng.randrange(1, 7)):
        members = [c for c in range(calls) if rng.random() < rng.choice((0.15, 0.4, 0.8))]
        if rng.random() < 0.2:
            rng.shuffle(members)               # any order: candidates are tried as given
        lists.append(members)
    return [rng.choice(lists) for _ in range(rng.randrange(1, 16))]


@pytest.fixture(params=["classes", "plain below the bound"])
def matching(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways max_matching runs: on classes (every size), and entry by entry (few entries)."""
    if request.param == "classes":
        monkeypatch.setattr(call_pairing, "PLAIN_ENTRIES", 0)
    return str(request.param)


@pytest.fixture(params=["looked up", "compared"])
def lookup(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways tool-call-args finds candidates: by lookup (``ArgsIndex``), by comparing."""
    monkeypatch.setattr(tool_call_checks, "COMPARED_PER_ITEM",
                        -1 if request.param == "looked up" else 10**9)
    return str(request.param)


@pytest.mark.parametrize("seed", range(600))
def test_max_matching_pairs_exactly_as_the_entry_by_entry_search(seed: int, matching: str
                                                                  ) -> None:
    candidates = random_candidates(random.Random(seed))
    assert max_matching(candidates) == oracle_matching(candidates)
    # Sharing is a speed-up only: the same lists as separate objects pair alike.
    assert max_matching([list(c) for c in candidates]) == oracle_matching(candidates)


def test_max_matching_prefers_earlier_calls_and_moves_entries_along_the_shortest_path(
        matching: str) -> None:
    # Entry 0 takes call 0 first; entry 2 (only call 0) then moves it to call 1, and entry 1
    # to call 2 along the way.
    found = max_matching([[0, 1], [1, 2], [0]])
    assert found == oracle_matching([[0, 1], [1, 2], [0]]) == [1, 2, 0]


def test_max_matching_on_many_alike_entries_is_a_maximum() -> None:
    # 300 entries of three classes over 200 calls: each class one third of the calls, and a
    # fourth class of entries that fits anywhere but comes first.
    thirds = [list(range(k, 200, 3)) for k in range(3)]
    anywhere = list(range(200))
    candidates = [anywhere] * 50 + [thirds[i % 3] for i in range(250)]
    found = max_matching(candidates)
    assert found == oracle_matching(candidates)
    assert sum(p is not None for p in found) == 200


# -- json_key ---------------------------------------------------------------------------------------

def random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.randrange(9 if depth < 2 else 6)
    if roll == 0:
        return rng.choice([0, 1, 2, -0.0])
    if roll == 1:
        return rng.choice([0.0, 1.0, 2.5, float("inf")])
    if roll == 2:
        return rng.choice([True, False])
    if roll == 3:
        return rng.choice(["", "1", "a", "true"])
    if roll == 4:
        return None
    if roll == 5:
        return rng.choice(["b", 1])
    if roll == 6:
        items = [random_value(rng, depth + 1) for _ in range(rng.randrange(3))]
        return tuple(items) if rng.random() < 0.2 else items
    return {k: random_value(rng, depth + 1) for k in rng.sample(["x", "y", "z"], rng.randrange(3))}


@pytest.mark.parametrize("seed", range(300))
def test_json_key_is_equal_exactly_when_the_values_are(seed: int) -> None:
    rng = random.Random(seed)
    a, b = random_value(rng), random_value(rng)
    if rng.random() < 0.3:
        b = json.loads(json.dumps(a))          # the same value read back: tuples become lists
    assert (json_key(a) == json_key(b)) == same_value(a, b)


@pytest.mark.parametrize("value", [
    float("nan"), {"n": float("nan")}, [1, float("nan")], {1: "a"}, {"a": {2: "b"}},
    type("Text", (str,), {})("a"), {"a": type("Number", (int,), {})(1)}, object(),
])
def test_json_key_declines_what_it_cannot_vouch_for(value: Any) -> None:
    assert json_key(value) is None


# -- the graders against the predicate and the oracle -----------------------------------------------

ARGS_POOL: list[Any] = [
    {"n": 1}, {"n": 1.0}, {"n": True}, {"n": "1"}, {"p": "a"}, {"p": "a", "q": [1, {"r": None}]},
    {"q": [1, {"r": None}]}, {}, None, '{"n":1}', '{ "p" : "a" }', '{"n": NaN, "p": "a"}',
    "not json", '{"p": "a", "n": 1}', [1],
]
EXPECTED_ARGS: list[dict[str, Any]] = [
    {"n": 1}, {"n": 1.0}, {"n": True}, {"n": "1"}, {"p": "a"}, {"q": [1, {"r": None}]},
    {"p": "a", "q": [1, {"r": None}]}, {}, {"p": "a", "n": 1},
]


def predicate_candidates(run: AgentRun, name: str, args: dict[str, Any], subset: bool
                         ) -> list[int]:
    return [c.index for c in run.calls if c.name == name
            and _args_match(args, {} if c.arguments is None else c.arguments, subset)]


@pytest.mark.parametrize("subset", [False, True])
@pytest.mark.parametrize("seed", range(150))
def test_args_pairs_as_the_predicate_and_the_oracle(seed: int, subset: bool, lookup: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(call_pairing, "PLAIN_ENTRIES", 0)
    rng = random.Random(seed)
    calls = [call(rng.choice("ab"), rng.choice(ARGS_POOL), pending=rng.random() < 0.1)
             for _ in range(rng.randrange(0, 14))]
    expected = [{"name": rng.choice("ab"), "args": rng.choice(EXPECTED_ARGS)}
                for _ in range(rng.randrange(1, 12))]
    grader = load_config({"graders": [{"type": "tool-call-args", "subset": subset,
                                       "tool_calls": expected}]}).graders[0].grader
    run = run_of(calls)
    result = grader.grade(run)
    candidates = [predicate_candidates(run, e["name"], e["args"], subset) for e in expected]
    paired = oracle_matching(candidates)
    assert [(row["matching_calls"], row["call"]) for row in result.details["expected"]] == \
        list(zip(candidates, paired))
    assert result.score == sum(p is not None for p in paired) / len(expected)


def test_args_index_looks_up_instead_of_asking_the_predicate() -> None:
    asked: list[Any] = []

    def matches(expected: Any, actual: Any) -> bool:
        asked.append(actual)
        return _args_match(expected, actual, False)

    run = run_of([call("t", {"k": i % 7, "v": [i % 7]}) for i in range(70)]
                 + [call("t", '{"k": NaN}')])
    for subset in (False, True):
        index = ArgsIndex(run, ["t"], subset, matches)
        wanted = {"k": 3, "v": [3]}
        found = index.candidates("t", wanted, json_key(wanted))
        assert list(found) == list(range(3, 70, 7))
    assert len(asked) == 2                      # only the NaN call, once per mode


OUTPUT_POOL: list[Any] = ["ok", {"content": "ok"}, ["a"], {"content": ["a"]}, '"ok"', None,
                          {"content": "x"}, "x"]


@pytest.mark.parametrize("seed", range(150))
def test_output_pairs_as_the_predicate_and_the_oracle(seed: int,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(call_pairing, "PLAIN_ENTRIES", 0)
    rng = random.Random(seed)
    calls = [call(rng.choice("ab"), {}, rng.choice(OUTPUT_POOL), pending=rng.random() < 0.15)
             for _ in range(rng.randrange(0, 14))]
    expected = [{"name": rng.choice("ab"), "output": rng.choice(["ok", '["a"]', "x", "y"])}
                for _ in range(rng.randrange(1, 12))]
    grader = load_config({"graders": [{"type": "tool-call-output",
                                       "tool_outputs": expected}]}).graders[0].grader
    run = run_of(calls)
    result = grader.grade(run)
    candidates = [[c.index for c in run.calls if c.name == e["name"] and not c.pending
                   and output_text(c) == e["output"]] for e in expected]
    paired = oracle_matching(candidates)
    assert [(row["matching_calls"], row["call"]) for row in result.details["expected"]] == \
        list(zip(candidates, paired))
    assert result.score == sum(p is not None for p in paired) / len(expected)


def test_rows_of_alike_entries_share_a_copy_never_the_runs_lists(lookup: str) -> None:
    expected = [{"name": "t", "args": {"k": 1}}] * 3
    grader = load_config({"graders": [{"type": "tool-call-args",
                                       "tool_calls": expected}]}).graders[0].grader
    run = run_of([call("t", {"k": 1}), call("t", {"k": 1})])
    rows = grader.grade(run).details["expected"]
    rows[0]["matching_calls"].append(99)        # a consumer editing its result
    again = grader.grade(run).details["expected"]
    assert [row["matching_calls"] for row in again] == [[0, 1]] * 3
    assert [row["call"] for row in again] == [0, 1, None]
