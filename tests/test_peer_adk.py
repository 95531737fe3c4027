"""Differential test against Google ADK's ``tool_trajectory_avg_score`` (google-adk 2.13.0).

ADK's ``[eval]`` extra is too large to install in every CI run, so its verdicts were recorded
once: ``tests/data/peers/adk/record.py`` (the command is at its top) generated the cases and
ran them through ADK's real evaluation API into ``verdicts.json``. Here every case goes through
our family, built from span records as live runs are.

Each case is classified by predicates on its inputs, one per documented difference
(docs/differences.md); outside them our verdict must equal ADK's. Inside them it must equal
ADK's verdict on the case with that difference's inputs neutralised (``adk_value_equality``),
or, for the config differences, be a load-time error naming the field.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from otel_tooleval import ConfigError, grade_run, load_config
from otel_tooleval.graders.tool_call_checks import same_value
from otel_tooleval.model import GradeResult
from tests.support.runs import call, run_of

VERDICTS = Path(__file__).resolve().parent / "data/peers/adk/verdicts.json"
DOC: dict[str, Any] = json.loads(VERDICTS.read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = DOC["cases"]

_KNOWN = {"threshold", "match_type", "matchType", "ignore_args", "ignoreArgs",
          "include_intermediate_responses_in_final", "includeIntermediateResponsesInFinal"}


def criterion_of(case: dict[str, Any]) -> Any:
    return (case.get("criteria") or {}).get("tool_trajectory_avg_score", 1.0)


def threshold_of(case: dict[str, Any]) -> Any:
    c = criterion_of(case)
    return c.get("threshold") if isinstance(c, dict) else c


def ignores_args(case: dict[str, Any]) -> bool:
    c = criterion_of(case)
    return isinstance(c, dict) and bool(c.get("ignore_args", c.get("ignoreArgs", False)))


# -- the documented differences, as predicates on a case ------------------------------------------

def no_threshold(case: dict[str, Any]) -> bool:
    """ADK refuses an object criterion without threshold; so do we (not a difference)."""
    return isinstance(criterion_of(case), dict) and "threshold" not in criterion_of(case)


def threshold_out_of_range(case: dict[str, Any]) -> bool:
    t = threshold_of(case)
    return isinstance(t, (int, float)) and not 0 <= t <= 1


def misspelled_key(case: dict[str, Any]) -> bool:
    c = criterion_of(case)
    return isinstance(c, dict) and bool(set(c) - _KNOWN)


def true_equals_one(case: dict[str, Any]) -> bool:
    """Some expected use and call of the same tool whose args Python finds equal and value
    equality does not (``True == 1``) or the other way round."""
    if ignores_args(case):
        return False
    for e in case["expected"]:
        for c in case["calls"]:
            if c["name"] == e["name"] and "args" in e and (
                    (e["args"] == c["args"]) != same_value(e["args"], c["args"])):
                return True
    return False


def args_left_out(case: dict[str, Any]) -> bool:
    """An expected use without args (ADK's None, which equals no call's args; ours {}) and a
    call of that tool with no args."""
    if ignores_args(case):
        return False
    return any("args" not in e and any(c["name"] == e["name"] and not c["args"]
                                       for c in case["calls"]) for e in case["expected"])


CONFIG_DIFFERENCES = {"threshold outside [0, 1]": threshold_out_of_range,
                      "misspelled criterion key": misspelled_key}
VALUE_DIFFERENCES = {"true == 1": true_equals_one, "expected args left out": args_left_out}


def ours(case: dict[str, Any]) -> GradeResult:
    entry: dict[str, Any] = {"type": "tool_trajectory_avg_score",
                             "expected_tool_use": case["expected"]}
    if "criteria" in case:
        entry["criteria"] = case["criteria"]
    config = load_config({"graders": [entry]})
    run = run_of([call(c["name"], c["args"]) for c in case["calls"]], config.policy)
    report = grade_run(run, config)
    assert report is not None
    (result,) = report.results
    return result


def same_verdict(result: GradeResult, verdict: dict[str, Any]) -> bool:
    return math.isclose(result.score, verdict["score"]) and result.passed == verdict["passed"]


def test_the_recording_is_adk_2_13_0_and_covers_every_mode() -> None:
    assert DOC["adk_version"] == "2.13.0"
    assert len(CASES) >= 300
    assert VERDICTS.stat().st_size < 300_000
    graded = [c for c in CASES if "score" in c["adk"]]
    assert {c["adk"]["score"] for c in graded} == {0.0, 1.0}


def test_our_verdicts_equal_adk_outside_the_documented_differences() -> None:
    counts: Counter[str] = Counter()
    for case in CASES:
        where = f"case {case['id']}: {json.dumps(case)}"
        if no_threshold(case):
            assert "error" in case["adk"], where
            with pytest.raises(ConfigError, match=r"tool_trajectory_avg_score\.threshold: "
                                                  "required key is missing"):
                ours(case)
            counts["both refuse: no threshold"] += 1
            continue
        assert "error" not in case["adk"], where
        config_rule = [name for name, holds in CONFIG_DIFFERENCES.items() if holds(case)]
        if config_rule:
            with pytest.raises(ConfigError) as info:
                ours(case)
            word = "threshold" if config_rule[0].startswith("threshold") else "unknown key"
            assert word in str(info.value), (where, str(info.value))
            counts[f"we refuse, ADK grades: {config_rule[0]}"] += 1
            continue
        result = ours(case)
        # Always: what ADK gives once the differences' inputs are neutralised.
        assert same_verdict(result, case["adk_value_equality"]), (where, result)
        rules = [name for name, holds in VALUE_DIFFERENCES.items() if holds(case)]
        if not rules:
            assert case["adk"] == case["adk_value_equality"], where   # the predicates are
            assert same_verdict(result, case["adk"]), (where, result)  # complete
            counts["equal to ADK"] += 1
        elif same_verdict(result, case["adk"]):
            counts[f"equal to ADK although {' + '.join(rules)}"] += 1
        else:
            counts[f"differs (documented): {' + '.join(rules)}"] += 1
    print("\nADK differential:", dict(sorted(counts.items())))
    assert counts["equal to ADK"] >= len(CASES) // 2
    # Each documented difference has recorded cases where ADK goes wrong and we do not.
    for name in VALUE_DIFFERENCES:
        assert any(k.startswith("differs") and name in k for k in counts), (name, counts)
    for name in CONFIG_DIFFERENCES:
        assert counts[f"we refuse, ADK grades: {name}"] > 0


def test_adk_cases_where_the_original_goes_wrong() -> None:
    """One recorded case per difference, with ADK's wrong verdict spelled out."""
    below_zero = next(c for c in CASES if threshold_of(c) == -0.5)
    assert below_zero["adk"] == {"score": 0.0, "status": "PASSED", "passed": True}
    misspelled = next(c for c in CASES if isinstance(criterion_of(c), dict)
                      and "match_typ" in criterion_of(c))
    # ADK ignored match_typ: IN_ORDER and graded EXACT.
    assert misspelled["adk"]["passed"] is False
    with pytest.raises(ConfigError, match=r"match_typ: unknown key \(did you mean "
                                          "'match_type'\\?\\)"):
        ours(misspelled)
    bools = [c for c in CASES if true_equals_one(c) and c["adk"] != c["adk_value_equality"]]
    assert bools and all(same_verdict(ours(c), c["adk_value_equality"]) for c in bools)
