"""Differential test: ``trajectory_match`` against LangChain agentevals 0.0.9 itself.

Seeded random trajectories and references (a small tool vocabulary so names collide, nested
args, ints against floats, duplicates, parallel calls in one step, different lengths) go through
agentevals' real ``create_trajectory_match_evaluator`` (tests/data/peers/agentevals/run_peer.py,
in the peers' interpreter) and through our family by the normal path (a config, spans, a run).

Every verdict of ours is checked against an independent brute-force reading of PEER-GRADERS.md
section 1 (``oracle`` with no flags). A case hits a documented difference when the same oracle
with agentevals' behaviour switched on (first-come pairing, swapped args in subset and
unordered, Python ``==``, key paths that read ``None``) gives another verdict: those cases are
counted per difference, and there the peer must give the verdict of that model of it. On every
other case the peer's verdict and ours must be equal.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from otel_tooleval import grade_run, load_config
from tests.support.peers import run_peer
from tests.support.runs import call, run_of

PEER = Path(__file__).parent / "data" / "peers" / "agentevals"
MATCHERS = PEER / "matchers.py"
TOOLS = ("search", "fetch", "lookup")
MODES = ("strict", "unordered", "subset", "superset")
ARGS_MODES = ("exact", "ignore", "subset", "superset")
N_CASES = 600

Call = tuple[str, dict[str, Any]]
Steps = list[list[Call]]


# -- generation ---------------------------------------------------------------------------------

def _value(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.3:
        return rng.choice(["a", "b"])
    if roll < 0.5:
        return rng.choice([1, 2])
    if roll < 0.65:
        return rng.choice([1.0, 2.5])
    if roll < 0.72:
        return rng.choice([True, False])
    if roll < 0.86:
        return {"city": rng.choice(["x", "y"]), "zip": rng.choice([1, 1.0, "1"])}
    return [rng.choice([1, 2]), rng.choice(["a", {"k": 1}])]


def _args(rng: random.Random) -> dict[str, Any]:
    keys = rng.sample(["q", "n", "city", "filter", "items"], rng.randrange(0, 3))
    return {k: _value(rng) for k in keys}


def _mutate(rng: random.Random, c: Call) -> Call:
    name, args = c
    args = json.loads(json.dumps(args))
    roll = rng.random()
    if roll < 0.2 and args:
        del args[rng.choice(sorted(args))]
    elif roll < 0.4:
        args[rng.choice(["q", "n", "extra"])] = _value(rng)
    elif roll < 0.5:
        name = _tool(rng)
    elif roll < 0.9 and args:
        k = rng.choice(sorted(args))
        v = args[k]
        # a numerically equal value of another type: 1 -> 1.0 or true, 1.0 -> 1, true -> 1
        if type(v) is int:
            args[k] = v == 1 if v in (0, 1) and rng.random() < 0.5 else float(v)
        elif isinstance(v, (float, bool)):
            args[k] = int(v)
    else:
        args = _args(rng)
    return name, args


def _tool(rng: random.Random) -> str:
    return rng.choice(("search", "search", "search", "fetch", "lookup"))   # names collide


def _steps(rng: random.Random, n: int) -> Steps:
    calls = [(_tool(rng), _args(rng)) for _ in range(n)]
    steps: Steps = []
    for c in calls:
        if steps and rng.random() < 0.35:
            steps[-1].append(c)         # a parallel call in the same response
        else:
            steps.append([c])
    return steps


def _perturb(rng: random.Random, ref: Steps) -> Steps:
    out = [list(step) for step in ref]
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
        op = rng.choice([0, 0, 0, 1, 2, 3, 4, 5])
        flat = [(i, j) for i, s in enumerate(out) for j in range(len(s))]
        if op == 0 and flat:                         # change a call
            i, j = rng.choice(flat)
            out[i][j] = _mutate(rng, out[i][j])
        elif op == 1 and flat:                       # drop a call
            i, j = rng.choice(flat)
            del out[i][j]
        elif op == 2 and flat:                       # duplicate a call
            i, j = rng.choice(flat)
            out[i].insert(j, out[i][j])
        elif op == 3:                                # an extra call, a new step
            out.insert(rng.randrange(len(out) + 1), [(_tool(rng), _args(rng))])
        elif op == 4 and out:                        # reorder the calls of a step
            rng.shuffle(out[rng.randrange(len(out))])
        elif op == 5 and len(out) > 1:               # reorder steps
            rng.shuffle(out)
    for step in out:
        if rng.random() < 0.3:
            rng.shuffle(step)
    return [s for s in out if s]


def _overrides(rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for tool in TOOLS:
        roll = rng.random()
        if roll < 0.12:
            out[tool] = rng.choice(ARGS_MODES)
        elif roll < 0.22:
            out[tool] = rng.sample(["q", "city", "filter.city", "items.0", "items.1.k"],
                                   rng.randrange(1, 3))
        elif roll < 0.3:
            out[tool] = {"callable": rng.choice(["covers_city", "same_q"])}
    return out


def generate(seed: int, n: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    cases = []
    for _ in range(n):
        ref = _steps(rng, rng.randrange(0, 6))
        flat = rng.random() < 0.3
        if flat:
            ref = [[c] for step in ref for c in step]
        cases.append({"mode": rng.choice(MODES), "args_mode": rng.choice(ARGS_MODES),
                      "overrides": _overrides(rng), "ref": ref, "run": _perturb(rng, ref),
                      "flat": flat})
    return cases


# -- the two sides --------------------------------------------------------------------------------

def _message(step: list[Call], rng: random.Random) -> dict[str, Any]:
    if rng.random() < 0.5:       # OpenAI's shape, arguments as JSON text
        calls: list[dict[str, Any]] = [
            {"id": f"c{i}", "type": "function",
             "function": {"name": n, "arguments": json.dumps(a)}} for i, (n, a) in
            enumerate(step)]
    else:                        # LangChain's shape
        calls = [{"name": n, "args": a, "id": f"c{i}"} for i, (n, a) in enumerate(step)]
    return {"role": "assistant", "content": "", "tool_calls": calls}


def _messages(steps: Steps, rng: random.Random) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for step in steps:
        out.append(_message(step, rng))
        out.extend({"role": "tool", "content": "ok", "tool_call_id": f"c{i}"}
                   for i in range(len(step)))
    out.append({"role": "assistant", "content": "done"})
    return out


def peer_case(case: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    reference: Any = _messages(case["ref"], rng)
    if rng.random() < 0.3:
        reference = {"messages": reference}
    return {"mode": case["mode"], "args_mode": case["args_mode"],
            "overrides": case["overrides"], "outputs": _messages(case["run"], rng),
            "reference": reference}


def our_config(case: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "trajectory_match", "trajectory_match_mode": case["mode"],
                             "tool_args_match_mode": case["args_mode"]}
    if case["overrides"]:
        entry["tool_args_match_overrides"] = {
            tool: f"{MATCHERS}:{v['callable']}" if isinstance(v, dict) else v
            for tool, v in case["overrides"].items()}
    if case["flat"]:
        entry["reference_tool_calls"] = [{"name": n, "args": a}
                                         for step in case["ref"] for n, a in step]
    else:
        entry["reference_trajectory"] = _messages(case["ref"], rng)
    return {"graders": [entry]}


def ours(case: dict[str, Any], rng: random.Random) -> float:
    cfg = load_config(our_config(case, rng))
    calls = [call(n, a, "ok", step=s) for s, step in enumerate(case["run"]) for n, a in step]
    report = grade_run(run_of(calls, cfg.policy), cfg)
    assert report is not None
    result = report.results[0]
    assert result.label in ("pass", "fail"), result
    return result.score


# -- the oracle: PEER-GRADERS.md section 1, and agentevals' departures from it as flags ------------

_MISSING = object()


def value_equal(a: Any, b: Any) -> bool:
    """SEMANTICS' value equality, written independently of the library's."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(value_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(value_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _path(args: Any, path: str, peer: bool) -> Any:
    current = args
    for part in path.split("."):
        if peer:                         # agentevals: objects only, None ends the walk
            if not isinstance(current, dict):
                return None
            current = current.get(part)
            if current is None:
                return None
        elif isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            return _MISSING
    return current


def _load_matchers() -> dict[str, Callable[[Any, Any], bool]]:
    namespace: dict[str, Any] = {}
    exec(compile(MATCHERS.read_text(), str(MATCHERS), "exec"), namespace)  # noqa: S102
    return {k: namespace[k] for k in ("covers_city", "same_q")}


CALLABLES = _load_matchers()


def args_match(rule: Any, call_args: dict[str, Any], ref_args: dict[str, Any], *,
               pyeq: bool, peer_paths: bool) -> bool:
    eq: Callable[[Any, Any], bool] = (lambda a, b: a == b) if pyeq else value_equal
    if isinstance(rule, dict):
        return bool(CALLABLES[rule["callable"]](call_args, ref_args))
    if isinstance(rule, list):
        for p in rule:
            a, b = _path(call_args, p, peer_paths), _path(ref_args, p, peer_paths)
            if a is _MISSING or b is _MISSING:
                if not (a is _MISSING and b is _MISSING):
                    return False
            elif not (a == b if peer_paths else eq(a, b)):
                return False
        return True
    if rule == "ignore":
        return True
    if rule == "exact":
        return eq(call_args, ref_args)
    if rule == "subset":
        return all(k in ref_args and eq(ref_args[k], v) for k, v in call_args.items())
    return all(k in call_args and eq(call_args[k], v) for k, v in ref_args.items())


def _covers(a_side: Sequence[Call], b_side: Sequence[Call],
            match: Callable[[Call, Call], bool], greedy: bool) -> bool:
    """Every element of ``b_side`` paired with a distinct one of ``a_side`` (same name,
    ``match(a, b)``): agentevals' first-come loop, or an exhaustive search."""
    if greedy:
        used: set[int] = set()
        for b in b_side:
            for i, a in enumerate(a_side):
                if i not in used and a[0] == b[0] and match(a, b):
                    used.add(i)
                    break
            else:
                return False
        return True

    def search(k: int, used: frozenset[int]) -> bool:
        if k == len(b_side):
            return True
        b = b_side[k]
        return any(search(k + 1, used | {i}) for i, a in enumerate(a_side)
                   if i not in used and a[0] == b[0] and match(a, b))

    return search(0, frozenset())


def oracle(case: dict[str, Any], *, greedy: bool = False, swap: bool = False,
           pyeq: bool = False, peer_paths: bool = False) -> float:
    """The verdict by PEER-GRADERS.md (no flags) or with agentevals' departures switched on."""
    overrides, default = case["overrides"], case["args_mode"]

    def rule_match(call_args: dict[str, Any], ref_args: dict[str, Any], name: str) -> bool:
        return args_match(overrides.get(name, default), call_args, ref_args, pyeq=pyeq,
                          peer_paths=peer_paths)

    def correct(call_: Call, ref: Call) -> bool:
        return rule_match(call_[1], ref[1], ref[0])

    def swapped(ref_side: Call, call_side: Call) -> bool:
        # agentevals' subset direction: a reference call in the call's place and vice versa
        return rule_match(ref_side[1], call_side[1], ref_side[0])

    calls = [c for step in case["run"] for c in step]
    refs = [c for step in case["ref"] for c in step]
    mode = case["mode"]
    if mode == "strict":
        ok = len(case["run"]) == len(case["ref"]) and all(
            len(s) == len(r) and _covers(r, s, lambda rc, c: correct(c, rc), greedy)
            for s, r in zip(case["run"], case["ref"]))
        return 1.0 if ok else 0.0
    superset = _covers(calls, refs, correct, greedy)
    if swap:
        subset = _covers(refs, calls, swapped, greedy)
    else:
        subset = _covers(refs, calls, lambda r, c: correct(c, r), greedy)
    ok = {"superset": superset, "subset": subset, "unordered": superset and subset}[mode]
    return 1.0 if ok else 0.0


DEPARTURES = {"first-come pairing": {"greedy": True},
              "subset/superset args swapped": {"swap": True},
              "true == 1": {"pyeq": True},
              "key paths read None": {"peer_paths": True}}


def test_trajectory_match_agrees_with_the_oracle() -> None:
    """Our half of the differential test: it needs no peer, so it runs everywhere."""
    cases = generate(seed=17, n=N_CASES)
    ours_rng = random.Random(2)
    for k, case in enumerate(cases):
        assert ours(case, ours_rng) == oracle(case), (k, case)
    # both verdicts occur, in every mode
    assert {(c["mode"], oracle(c)) for c in cases} == {(m, v) for m in MODES for v in (0.0, 1.0)}


def test_trajectory_match_agrees_with_agentevals() -> None:
    cases = generate(seed=17, n=N_CASES)
    rng = random.Random(1)
    peer_cases = [peer_case(c, rng) for c in cases]
    verdicts = run_peer(PEER / "run_peer.py", peer_cases)
    ours_rng = random.Random(2)
    hits: Counter[str] = Counter()
    same = 0
    for k, (case, peer) in enumerate(zip(cases, verdicts)):
        score = ours(case, ours_rng)
        rule = oracle(case)
        assert score == rule, (k, case)
        model = oracle(case, greedy=True, swap=True, pyeq=True, peer_paths=True)
        assert "score" in peer, (k, peer)
        if model == rule:
            assert peer["score"] == score, (k, case, peer)
            same += 1
            continue
        # A documented difference: the peer follows its own rules, we follow PEER-GRADERS.md.
        assert peer["score"] == model, (k, case, peer)
        labels = [label for label, flags in DEPARTURES.items() if oracle(case, **flags) != rule]
        hits.update(labels or ["several together"])
    print(f"\nagentevals: {same} of {len(cases)} cases equal; documented differences: "
          + ", ".join(f"{label} {n}" for label, n in sorted(hits.items())))
    assert same >= len(cases) // 2
    # The generator reaches every difference, and the modes and args rules all occur.
    assert {"first-come pairing", "subset/superset args swapped", "true == 1"} <= set(hits)
    assert {c["mode"] for c in cases} == set(MODES)
    assert sum(1 for v in verdicts if v["score"] == 1.0) > len(cases) // 5


def test_oracle_sees_what_it_should() -> None:
    """The oracle's flags each change a verdict where they should (a test of the test)."""
    first_come = {"mode": "superset", "args_mode": "subset", "overrides": {},
                  "ref": [[("s", {"a": 1})], [("s", {"a": 1, "b": 2})]],
                  "run": [[("s", {"a": 1})], [("s", {"b": 2})]], "flat": False}
    assert oracle(first_come) == 1.0
    assert oracle(first_come, swap=True) == 1.0          # superset mode: nothing swapped
    assert oracle({**first_come, "mode": "subset"}, swap=True) == 0.0
    greedy_case = {**first_come, "args_mode": "superset",
                   "ref": [[("s", {})], [("s", {"a": 1})]],
                   "run": [[("s", {"a": 1})], [("s", {"b": 2})]]}
    assert oracle(greedy_case) == 1.0
    assert oracle(greedy_case, greedy=True) == 0.0
    bools = {"mode": "unordered", "args_mode": "exact", "overrides": {}, "flat": True,
             "ref": [[("s", {"a": 1})]], "run": [[("s", {"a": True})]]}
    assert (oracle(bools), oracle(bools, pyeq=True)) == (0.0, 1.0)
