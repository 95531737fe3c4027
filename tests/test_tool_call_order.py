"""``tool-call-order`` (seeds/tool-call-order.txt, SEMANTICS 3) and the LCS behind it."""

from __future__ import annotations

import itertools
import random
import tracemalloc
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_tooleval.graders.tool_call_order  # noqa: F401  (registers the family)
from otel_tooleval import grade_spans
from otel_tooleval import lcs as lcs_module
from otel_tooleval.graders.registry import REGISTRY
from otel_tooleval.lcs import lcs, lcs_length, lcs_pairs
from tests.support.errors import assert_config_error, assert_schema_agrees
from tests.support.runs import call, grade


def order(expected: list[str], **options: Any) -> dict[str, Any]:
    return {"graders": [{"type": "tool-call-order", "tool_calls_order": expected, **options}]}


def sdk(config: dict[str, Any], criteria: dict[str, Any] | None = None,
        type_: str = "ToolCallOrderEvaluator", **entry: Any) -> dict[str, Any]:
    """The page's shape: ``ToolCallOrderEvaluator(id=..., config={...})`` + criteria."""
    body: dict[str, Any] = {"type": type_, "config": config, **entry}
    if criteria is not None:
        body["evaluation_criteria"] = criteria
    return {"graders": [body]}


def calls(*names: str) -> list[dict[str, Any]]:
    return [call(n, {}) for n in names]


# -- the LCS ----------------------------------------------------------------------------------------

def dp_lcs(a: list[Any], b: list[Any]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def assert_common_subsequence(a: list[Any], b: list[Any], pairs: list[tuple[int, int]]) -> None:
    assert all(a[i] == b[j] for i, j in pairs)
    assert all(p[0] < q[0] and p[1] < q[1] for p, q in itertools.pairwise(pairs))


@pytest.mark.parametrize(("leaf", "mask_bytes"), [(64, 8), (1, 8), (2, 0), (3, 0)])
def test_bit_parallel_lcs_agrees_with_the_plain_dp(monkeypatch: pytest.MonkeyPatch, leaf: int,
                                                   mask_bytes: int) -> None:
    # Small leaves force Hirschberg's recursion; a zero mask budget forces masks rebuilt per use.
    monkeypatch.setattr(lcs_module, "_LEAF_ROWS", leaf)
    monkeypatch.setattr(lcs_module, "_MASK_BYTES_PER_ITEM", mask_bytes)
    if not mask_bytes:
        monkeypatch.setattr(lcs_module, "_MASK_BYTES_MIN", 0)
    rng = random.Random(leaf * 100 + mask_bytes)
    for _ in range(400):
        alphabet = rng.randint(1, 6)
        a = [f"t{rng.randrange(alphabet)}" for _ in range(rng.randint(0, 40))]
        b = [f"t{rng.randrange(alphabet)}" for _ in range(rng.randint(0, 40))]
        want = dp_lcs(a, b)
        assert lcs_length(a, b) == want, (a, b)
        pairs = lcs_pairs(a, b)
        assert len(pairs) == want, (a, b, pairs)
        assert_common_subsequence(a, b, pairs)


def test_lcs_on_medium_inputs_with_many_distinct_items() -> None:
    rng = random.Random(7)
    for alphabet, n, m in ((20, 700, 900), (400, 800, 600), (2, 150, 900)):
        a = [rng.randrange(alphabet) for _ in range(n)]
        b = [rng.randrange(alphabet) for _ in range(m)]
        want = dp_lcs(a, b)
        assert lcs_length(a, b) == lcs_length(b, a) == want
        pairs = lcs_pairs(a, b)
        assert len(pairs) == want
        assert_common_subsequence(a, b, pairs)


def test_lcs_edge_cases() -> None:
    assert lcs_length([], ["a"]) == 0 and lcs_pairs(["a"], []) == []
    assert lcs(["a", "b", "c"], ["a", "b", "c"]) == ["a", "b", "c"]
    assert lcs(["A", "B", "C", "D"], ["A", "X", "B", "D"]) == ["A", "B", "D"]
    assert lcs_pairs(["x", "y"], ["y", "x", "y"]) in ([(0, 1), (1, 2)],)
    assert lcs_length(("a",) * 300, ("a",) * 200) == 200


def test_uipath_flaw_10k_by_10k_lcs_is_exact_in_small_memory() -> None:
    """UiPath fills a 10,000 x 10,000 table (70 s, 1.4 GB). Ours is exact and small (about
    1 MiB measured; the bound leaves room for other Python versions)."""
    rng = random.Random(11)
    actual = [f"tool_{rng.randrange(40)}" for _ in range(10_000)]
    # Drop every 7th call and put unknown tools in: the LCS is exactly the calls kept.
    kept = [name for i, name in enumerate(actual) if i % 7]
    expected: list[str] = []
    for i, name in enumerate(kept):
        expected.append(name)
        if i % 5 == 0:
            expected.append(f"other_{i}")
    expected = expected[:10_000]
    kept_in_expected = sum(1 for name in expected if name.startswith("tool_"))
    tracemalloc.start()
    try:
        length = lcs_length(expected, actual)
        pairs = lcs_pairs(expected, actual)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert length == len(pairs) == kept_in_expected
    assert_common_subsequence(expected, actual, pairs)
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MiB"


def test_10k_by_10k_with_as_many_distinct_tools_as_calls() -> None:
    # Match masks for 10,000 distinct names would be quadratic; the budget keeps them linear.
    rng = random.Random(3)
    a = [f"t{rng.randrange(10_000)}" for _ in range(10_000)]
    b = [f"t{rng.randrange(10_000)}" for _ in range(10_000)]
    tracemalloc.start()
    try:
        pairs = lcs_pairs(a, b)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(pairs) == lcs_length(a, b) > 0
    assert_common_subsequence(a, b, pairs)
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MiB"


def test_match_masks_stay_within_a_linear_budget() -> None:
    # One mask per distinct name would take about 14 MiB here; the budget keeps under 3 MiB.
    rng = random.Random(4)
    a = [f"t{rng.randrange(20_000)}" for _ in range(20_000)]
    b = [f"t{rng.randrange(20_000)}" for _ in range(20_000)]
    tracemalloc.start()
    try:
        length = lcs_length(a, b)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert length == lcs_length(b, a) > 0
    assert peak < 6 * 2**20, f"peak {peak / 2**20:.1f} MiB"


# -- the page's worked examples ---------------------------------------------------------------------

def test_scoring_algorithm_example_is_0_75() -> None:
    r = grade(order(["A", "B", "C", "D"]), calls("A", "X", "B", "D"))
    assert (r.score, r.passed, r.label) == (0.75, False, "fail")
    assert r.details["lcs"] == ["A", "B", "D"]
    assert r.details["unmatched_expected"] == [2]
    assert "3 of 4" in r.explanation and "'C' (expected position 2)" in r.explanation


def test_basic_order_validation_perfect_match() -> None:
    config = sdk({"name": "ToolCallOrderEvaluator", "strict": False},
                 {"tool_calls_order": ["validate_user", "check_inventory", "create_order"]},
                 id="order-check-1")
    r = grade(config, calls("validate_user", "check_inventory", "create_order"))
    assert (r.score, r.passed, r.label) == (1.0, True, "pass")
    # "Details includes: actual order, expected order, and LCS"
    assert r.details["actual_tool_calls_order"] == ["validate_user", "check_inventory",
                                                    "create_order"]
    assert r.details["expected_tool_calls_order"] == r.details["actual_tool_calls_order"]
    assert r.details["lcs"] == r.details["actual_tool_calls_order"]
    assert r.details["evaluator_id"] == "order-check-1"
    assert r.details["evaluator_name"] == "ToolCallOrderEvaluator"


def test_strict_order_validation() -> None:
    config = sdk({"name": "ToolCallOrderEvaluator", "strict": True},
                 {"tool_calls_order": ["authenticate_user", "verify_permissions",
                                       "access_resource"]}, id="order-strict")
    r = grade(config, calls("authenticate_user", "verify_permissions", "access_resource"))
    assert (r.score, r.passed) == (1.0, True)
    r = grade(config, calls("authenticate_user", "access_resource"))
    assert (r.score, r.passed) == (0.0, False)
    assert "call #1 is 'access_resource' where 'verify_permissions' was expected" in r.explanation


def test_partial_credit_with_lcs() -> None:
    config = sdk({"name": "ToolCallOrderEvaluator", "strict": False},
                 {"tool_calls_order": ["search", "filter", "sort", "display"]}, id="order-lcs")
    r = grade(config, calls("search", "filter", "display"))
    assert r.score == 0.75
    assert r.details["lcs"] == ["search", "filter", "display"]
    assert r.details["lcs_calls"] == [0, 1, 2]


def test_database_transaction_sequence_strict() -> None:
    expected = ["begin_transaction", "validate_data", "update_records", "commit_transaction"]
    config = sdk({"name": "ToolCallOrderEvaluator", "strict": True},
                 {"tool_calls_order": expected}, id="db-transaction")
    assert grade(config, calls(*expected)).score == 1.0
    swapped = ["begin_transaction", "update_records", "validate_data", "commit_transaction"]
    assert grade(config, calls(*swapped)).score == 0.0


def test_api_integration_workflow() -> None:
    expected = ["get_api_token", "fetch_user_data", "enrich_data", "post_to_webhook",
                "log_result"]
    config = sdk({"name": "ToolCallOrderEvaluator", "strict": False},
                 {"tool_calls_order": expected}, id="api-workflow")
    r = grade(config, calls(*expected))
    assert (r.score, r.passed) == (1.0, True)


def test_using_default_criteria() -> None:
    config = sdk({"name": "ToolCallOrderEvaluator", "strict": False,
                  "default_evaluation_criteria": {"tool_calls_order": ["init", "process",
                                                                       "cleanup"]}},
                 id="order-default")
    assert grade(config, calls("init", "process", "cleanup")).score == 1.0
    assert grade(config, calls("init", "cleanup")).score == pytest.approx(2 / 3)


def test_evaluation_criteria_win_over_the_default() -> None:
    config = sdk({"default_evaluation_criteria": {"tool_calls_order": ["x"]}},
                 {"tool_calls_order": ["a", "b"]})
    assert grade(config, calls("a", "b")).score == 1.0


def test_justification_details_example() -> None:
    r = grade(order(["tool1", "tool2", "tool3", "tool4"]), calls("tool1", "tool2", "tool3"))
    assert r.details["actual_tool_calls_order"] == ["tool1", "tool2", "tool3"]
    assert r.details["expected_tool_calls_order"] == ["tool1", "tool2", "tool3", "tool4"]
    assert r.details["lcs"] == ["tool1", "tool2", "tool3"]
    assert r.score == 0.75


# -- the rules of the page and of SEMANTICS 3 ---------------------------------------------------------

def test_extra_tools_non_strict_uses_lcs_strict_scores_zero() -> None:
    actual = calls("a", "noise", "b", "c")
    assert grade(order(["a", "b", "c"]), actual).score == 1.0
    r = grade(order(["a", "b", "c"], strict=True), actual)
    assert r.score == 0.0
    assert "call #1 is 'noise' where 'b' was expected" in r.explanation


def test_strict_extra_call_after_the_sequence_fails() -> None:
    r = grade(order(["a", "b"], strict=True), calls("a", "b", "c"))
    assert r.score == 0.0
    assert "call #2 ('c') comes after the whole expected sequence" in r.explanation


def test_strict_run_that_stops_early() -> None:
    r = grade(order(["a", "b", "c"], strict=True), calls("a", "b"))
    assert r.score == 0.0
    assert "stopped after 2 calls; 'c' was expected next" in r.explanation


def test_empty_actual_scores_zero() -> None:
    for strict in (False, True):
        r = grade(order(["a"], strict=strict), [])
        assert (r.score, r.passed, r.label) == (0.0, False, "fail")
        assert "no tool calls" in r.explanation
        assert r.details["lcs"] == []


def test_names_are_case_sensitive_and_exact() -> None:
    assert grade(order(["Search"]), calls("search")).score == 0.0
    assert grade(order(["search"]), calls("web_search")).score == 0.0
    assert grade(order(["mcp__brave__search"]), calls("mcp__brave__search")).score == 1.0


def test_repeated_calls_are_listed_repeatedly() -> None:
    assert grade(order(["fetch", "fetch", "save"]), calls("fetch", "save")).score == (
        pytest.approx(2 / 3))
    assert grade(order(["fetch", "fetch", "save"]), calls("fetch", "fetch", "save")).score == 1.0


def test_pending_calls_count_for_order() -> None:
    actual = [call("a", {}), call("b", {}, pending=True)]
    r = grade(order(["a", "b"], strict=True), actual)
    assert (r.score, r.passed) == (1.0, True)
    r = grade(order(["a", "b"]), actual)
    assert (r.score, r.details["lcs"], r.details["lcs_calls"]) == (1.0, ["a", "b"], [0, 1])


def test_threshold_beside_the_options_and_in_config() -> None:
    actual = calls("A", "X", "B", "D")
    assert grade(order(["A", "B", "C", "D"], threshold=0.75), actual).passed
    assert not grade(order(["A", "B", "C", "D"], threshold=0.8), actual).passed
    nested = sdk({"threshold": 0.5}, {"tool_calls_order": ["A", "B", "C", "D"]})
    r = grade(nested, actual)
    assert (r.score, r.passed, r.label) == (0.75, True, "pass")


@pytest.mark.parametrize("type_", ["tool-call-order", "ToolCallOrderEvaluator",
                                   "uipath-tool-call-order", "tool_call_order"])
def test_type_ids_and_evaluator_names(type_: str) -> None:
    config = {"graders": [{"type": type_, "tool_calls_order": ["a"]}]}
    r = grade(config, calls("a"))
    assert (r.type, r.score) == ("tool-call-order", 1.0)


def test_long_runs_explanations_stay_short() -> None:
    names = [f"t{i}" for i in range(200)]
    r = grade(order(names), calls(*names[::2]))
    assert r.score == 0.5
    assert "and 97 more" in r.explanation
    assert len(r.explanation) < 300


def test_uipath_sdk_spans_through_the_real_sdk() -> None:
    """Spans shaped as the UiPath SDK records them: ``tool.name`` under an agent root."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("uipath-like")
    with tracer.start_as_current_span("agent run"):
        for name in ("search", "filter", "display"):
            with tracer.start_as_current_span(name, attributes={
                    "tool.name": name, "input.value": "{'q': 'x'}", "output.value": "ok"}):
                pass
        with tracer.start_as_current_span("made up", attributes={
                "tool.name": "sort", "tool.synthesized": True}):
            pass
    reports = grade_spans(exporter.get_finished_spans(),
                          order(["search", "filter", "sort", "display"]))
    assert len(reports) == 1
    (result,) = reports[0].results
    assert result.score == 0.75
    assert result.details["actual_tool_calls_order"] == ["search", "filter", "display"]


def page_spans(*names: str) -> list[ReadableSpan]:
    """The page's ``mock_spans``, built exactly as it builds them: no span context, no parent."""
    return [ReadableSpan(name=n, start_time=i, end_time=i + 1, attributes={"tool.name": n})
            for i, n in enumerate(names)]


# seeds/tool-call-order.txt, "Examples": every example passes its mock spans (ReadableSpans with
# no context) as the execution's agent_trace, so the whole list is one run and grade_spans
# must grade it as one (it graded nothing before 0.6.1).
@pytest.mark.parametrize(("section", "strict", "actual", "expected", "score"), [
    ("Basic Tool Call Order Validation", False,
     ["validate_user", "check_inventory", "create_order"],
     ["validate_user", "check_inventory", "create_order"], 1.0),
    ("Strict Order Validation", True,
     ["authenticate_user", "verify_permissions", "access_resource"],
     ["authenticate_user", "verify_permissions", "access_resource"], 1.0),
    ("Partial Credit with LCS", False, ["search", "filter", "display"],
     ["search", "filter", "sort", "display"], 0.75),
    ("Database Transaction Sequence", True,
     ["begin_transaction", "validate_data", "update_records", "commit_transaction"],
     ["begin_transaction", "validate_data", "update_records", "commit_transaction"], 1.0),
    ("API Integration Workflow", False,
     ["get_api_token", "fetch_user_data", "enrich_data", "post_to_webhook", "log_result"],
     ["get_api_token", "fetch_user_data", "enrich_data", "post_to_webhook", "log_result"], 1.0),
])
def test_page_examples_with_the_pages_own_mock_spans(section: str, strict: bool,
                                                     actual: list[str], expected: list[str],
                                                     score: float) -> None:
    config = sdk({"name": "ToolCallOrderEvaluator", "strict": strict},
                 {"tool_calls_order": expected}, id=section)
    reports = grade_spans(page_spans(*actual), config)
    assert len(reports) == 1, section
    (result,) = reports[0].results
    assert result.score == score, section
    assert result.details["actual_tool_calls_order"] == actual
    if section == "Partial Credit with LCS":
        assert result.details["lcs"] == ["search", "filter", "display"]


def test_page_default_criteria_example_with_the_pages_own_mock_spans() -> None:
    # seeds/tool-call-order.txt, "Using Default Criteria": evaluation_criteria=None.
    config = sdk({"name": "ToolCallOrderEvaluator", "strict": False,
                  "default_evaluation_criteria": {"tool_calls_order": ["init", "process",
                                                                       "cleanup"]}},
                 id="order-default")
    (report,) = grade_spans(page_spans("init", "process", "cleanup"), config)
    assert report.results[0].score == 1.0


def test_context_less_spans_are_one_run_beside_the_traced_ones() -> None:
    # Context-less spans keep their list order (ties by start and end) and never mix with the
    # runs of real traces given in the same call.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("agent run"), tracer.start_as_current_span(
            "x", attributes={"tool.name": "x"}):
        pass
    loose = [ReadableSpan(name=n, start_time=5, end_time=6, attributes={"tool.name": n})
             for n in ("b", "a")] + [ReadableSpan(name="pending", start_time=7,
                                                  attributes={"tool.name": "c"})]
    reports = grade_spans([*exporter.get_finished_spans(), *loose], order(["b", "a", "c"]))
    assert sorted(r.results[0].details["actual_tool_calls_order"] for r in reports) == [
        ["b", "a", "c"], ["x"]]
    (mine,) = [r for r in reports if r.results[0].score == 1.0]
    assert mine.run.pending_calls == 1


def test_schema_describes_both_shapes_and_agrees_with_load_config() -> None:
    schema = REGISTRY["tool-call-order"].schema
    assert schema is not None
    document = schema()
    good = [
        {"type": "tool-call-order", "strict": True, "tool_calls_order": ["a"]},
        {"type": "ToolCallOrderEvaluator", "id": "x", "config": {"name": "n", "strict": False},
         "evaluation_criteria": {"tool_calls_order": ["a"]}},
        {"type": "tool-call-order",
         "config": {"default_evaluation_criteria": {"tool_calls_order": ["a"]}}},
    ]
    bad = [
        {"type": "tool-call-order", "strict": "yes", "tool_calls_order": ["a"]},
        {"type": "tool-call-order", "tool_calls_order": []},
        {"type": "tool-call-order", "config": {"strict": True}},
        {"type": "tool-call-order", "tool_calls_order": ["a"], "subset": True},
    ]
    assert_schema_agrees(document, good, bad)


# -- load-time errors ---------------------------------------------------------------------------

def entry(**body: Any) -> dict[str, Any]:
    return {"graders": [{"type": "tool-call-order", **body}]}


@pytest.mark.parametrize(("config", "where", "words"), [
    (order([]), "graders[0].tool_calls_order", "must not be empty"),
    (sdk({"strict": False}, {"tool_calls_order": []}),
     "graders[0].evaluation_criteria.tool_calls_order", "must not be empty"),
    (sdk({"default_evaluation_criteria": {"tool_calls_order": []}}),
     "graders[0].config.default_evaluation_criteria.tool_calls_order", "must not be empty"),
    (entry(strict=True), "graders[0].tool_calls_order", "required key is missing"),
    (sdk({"strict": True}), "graders[0].evaluation_criteria", "required key is missing"),
    (sdk({}, {}), "graders[0].evaluation_criteria.tool_calls_order", "required key is missing"),
    (order(["a"], strict="yes"), "graders[0].strict", "valid boolean"),
    (sdk({"strict": 1}, {"tool_calls_order": ["a"]}), "graders[0].config.strict",
     "valid boolean"),
    (order(["a"], threshold=1.5), "graders[0].threshold", "less than or equal to 1"),
    (order(["a"], threshold=True), "graders[0].threshold", "valid number"),
    (order(["a", 3]), "graders[0].tool_calls_order[1]", "valid string"),
    (order(["a", ""]), "graders[0].tool_calls_order[1]", "at least 1 character"),
    (order("a"), "graders[0].tool_calls_order", "valid list"),
    (order(["a"], mode="lcs"), "graders[0].mode", "unknown key"),
    (order(["a"], subset=True), "graders[0].subset", "unknown key"),
    (order(["a"], tool_calls=[]), "graders[0].tool_calls", "belongs to tool-call-args"),
    (entry(toolCallsOrder=["a"]), "graders[0].toolCallsOrder", "write tool_calls_order"),
    (sdk({"tool_calls_order": ["a"]}), "graders[0].config.tool_calls_order",
     "goes beside type or in evaluation_criteria"),
    (sdk({}, {"tool_calls_order": ["a"], "strict": True}),
     "graders[0].evaluation_criteria.strict", "unknown key"),
    (sdk({}, {"tool_calls_order": ["a"]}, tool_calls_order=["b"]),
     "graders[0].tool_calls_order", "given twice"),
    (sdk({"strict": True}, {"tool_calls_order": ["a"]}, strict=False),
     "graders[0].strict", "given twice"),
    (sdk({"default_evaluation_criteria": {"tool_calls_order": ["a"]}},
         default_evaluation_criteria={"tool_calls_order": ["a"]}),
     "graders[0].default_evaluation_criteria", "given twice"),
    (sdk({"name": 5}, {"tool_calls_order": ["a"]}), "graders[0].config.name", "valid string"),
    (sdk({}, {"tool_calls_order": ["a"]}, id=7), "graders[0].id", "valid string"),
])
def test_load_time_errors_name_the_field(config: object, where: str, words: str) -> None:
    assert_config_error(config, where, words)


def test_no_calls_lists_up_to_three_expected_names_and_counts_the_rest() -> None:
    assert grade(order(["a", "b", "c"]), []).explanation == (
        "The run made no tool calls; 3 were expected in order ('a', 'b', 'c').")
    assert grade(order(["a", "b", "c", "d", "e"]), []).explanation == (
        "The run made no tool calls; 5 were expected in order ('a', 'b', 'c' and 2 more).")
