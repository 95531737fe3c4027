"""Regressions found in review: pending calls under non-root runs, shutdown past its deadline,
TTL of active runs, root modes live vs offline, long-lived roots, caps made visible, the real
smolagents envelope, grading-time argument errors, score histogram buckets."""

from __future__ import annotations

import threading
import time

from opentelemetry import trace

from otel_tooleval import GradeResult, grade_spans
from otel_tooleval.graders.registry import REGISTRY, GraderFamily, register
from otel_tooleval.values import decode_value
from tests.support.harness import AGENT, Harness
from tests.support.runs import call, grade

NO_DELETE = {"graders": [{"name": "no-delete", "type": "tool-calls",
                          "config": {"disallowed": ["^delete$"]}}]}


def test_pending_call_under_http_root_is_not_lost_when_it_ends_before_grading() -> None:
    h = Harness(NO_DELETE)
    jobs: list = []
    h.processor._submit = lambda job: (jobs.append(job), True)[1]  # grading thread busy
    http = h.tracer.start_span("GET /x")
    root = h.tracer.start_span("invoke_agent a", context=trace.set_span_in_context(http),
                               attributes=AGENT)
    slow = h.tracer.start_span("execute_tool delete", context=trace.set_span_in_context(root),
                               attributes={"gen_ai.tool.name": "delete"})
    root.end()
    slow.end()                      # ends after the root, before the run is graded
    for job in jobs:
        h.processor._grade_and_forward(job)
    http.end()
    (report,) = h.reports
    assert [(c.name, c.pending) for c in report.run.calls] == [("delete", True)]
    assert not report.passed
    h.close()


def test_shutdown_past_its_deadline_still_exports_every_root() -> None:
    gate = threading.Event()

    class Blocking:
        type = "blk"

        def __init__(self, name: str) -> None:
            self.name = name

        def grade(self, run: object) -> GradeResult:
            gate.wait(10)
            return GradeResult(self.name, "blk", 1.0, True, "pass", "ok")

    register(GraderFamily("blk", (), lambda e, n, iv: Blocking(n)))
    try:
        h = Harness({"graders": [{"type": "blk"}]})
        h.agent_run(["search"])
        h.agent_run(["search"])
        assert h.processor.shutdown(200) is False
        gate.set()
        time.sleep(0.3)
        roots = [s for s in h.finished() if s.name.startswith("invoke_agent")]
        assert len(roots) == 2      # forwarded (ungraded) before the downstream shut down
    finally:
        gate.set()
        REGISTRY.pop("blk", None)


def test_active_run_longer_than_ttl_is_still_graded() -> None:
    h = Harness({**NO_DELETE, "limits": {"run_ttl_seconds": 0.5}})
    h.agent_run(["x"])              # starts the sweeping grading thread
    with h.agent("long"):
        for _ in range(15):
            h.tool("search")
            time.sleep(0.1)
    h.flush()
    assert sorted(r.run.agent for r in h.reports) == ["agent", "long"]
    h.close()


def test_root_pattern_live_matches_offline() -> None:
    cfg = {**NO_DELETE, "runs": {"root": "planner"}}
    h = Harness(cfg)
    with h.tracer.start_as_current_span("GET /x"):
        with h.agent("planner"):
            h.tool("search")
        with h.agent("other"):
            h.tool("search")
    h.flush()
    live = sorted(r.run.agent for r in h.reports)
    offline = sorted(r.run.agent for r in grade_spans(h.finished(), cfg))
    assert live == offline == ["planner"]
    h.close()


def test_runs_under_a_long_lived_root_keep_being_graded() -> None:
    h = Harness({**NO_DELETE, "limits": {"max_spans_per_trace": 50}})
    with h.tracer.start_as_current_span("GET /stream"):
        for i in range(20):
            h.agent_run(["search", "search"], agent=f"a{i}")
            h.flush()
    assert [len(r.run.calls) for r in h.reports] == [2] * 20
    h.close()


def test_call_past_the_cap_is_visible_on_the_verdict() -> None:
    h = Harness({**NO_DELETE, "limits": {"max_calls_per_run": 3}})
    h.agent_run(["search"] * 3 + ["delete"])
    h.flush()
    (report,) = h.reports
    assert report.run.dropped_calls == 1
    (root,) = [s for s in h.finished() if s.name.startswith("invoke_agent")]
    assert root.attributes["tooleval.dropped_calls"] == 1
    h.close()


def test_real_smolagents_envelope_is_unwrapped() -> None:
    raw = '{"args": [], "sanitize_inputs_outputs": true, "kwargs": {"query": "otel"}}'
    assert decode_value(raw) == {"query": "otel"}


def test_command_missing_is_an_error_for_every_name_matching_call() -> None:
    cfg = {"graders": [{"type": "tool-calls", "config": {
        "required": [{"name": "^bash$", "command": "npm test", "at_step": 0}]}}]}
    r = grade(cfg, [call("bash", {"command": "npm test"}, "ok", step=0),
                    call("bash", {"cmd": "x"}, "ok", step=1)])
    assert r.label == "error"
    seq = {"graders": [{"type": "tool-calls", "config": {
        "sequence": [{"name": "^bash$", "command": "a"}]}}]}
    assert grade(seq, [call("bash", {"command": "a"}), call("bash", {"cmd": "x"})]).label == \
        grade(seq, [call("bash", {"cmd": "x"}), call("bash", {"command": "a"})]).label


def test_score_histogram_buckets_resolve_scores_in_0_1() -> None:
    h = Harness(NO_DELETE)
    h.agent_run(["search"])
    h.flush()
    (p,) = h.metric_points("gen_ai.evaluation.score")
    assert max(b for b in p.explicit_bounds) <= 1.0
    h.close()


def test_local_root_mode_with_separate_nested_agents_matches_offline() -> None:
    cfg = {**NO_DELETE, "runs": {"root": "local_root", "nested_agents": "separate"}}
    h = Harness(cfg)
    with h.tracer.start_as_current_span("job"), h.agent("a"):
        h.tool("search")
        with h.agent("b"):
            h.tool("delete")
    h.flush()
    live = sorted(r.run.root_name for r in h.reports)
    offline = sorted(r.run.root_name for r in grade_spans(h.finished(), cfg))
    assert live == offline == ["invoke_agent a", "invoke_agent b", "job"]
    h.close()


def test_many_threads_each_run_graded_once_with_its_own_calls() -> None:
    h = Harness(NO_DELETE)

    def worker(n: int) -> None:
        for i in range(25):
            h.agent_run([f"t{n}"] * (1 + i % 3), agent=f"w{n}-{i}")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert h.flush()
    assert len(h.reports) == 200
    for report in h.reports:
        n, i = report.run.agent.removeprefix("w").split("-")
        assert [c.name for c in report.run.calls] == [f"t{n}"] * (1 + int(i) % 3)
    ids = [s.context.span_id for s in h.finished()]
    assert len(ids) == len(set(ids)) == 200 + sum(2 * (1 + i % 3) for i in range(25)) * 8
    h.close()
