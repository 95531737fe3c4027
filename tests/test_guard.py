"""The live guard (``guard:``): each rule on real SDK spans, what is marked where, the callback,
``check_call``, and the config's errors.

Spans come from a real ``TracerProvider`` whose only processor is ``ToolEvalSpanProcessor``
wrapping ``SimpleSpanProcessor(InMemorySpanExporter())``; metrics go to an
``InMemoryMetricReader``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_tooleval import (
    ConfigError,
    GuardViolation,
    ToolEvalSpanProcessor,
    check_call,
    load_config,
)
from otel_tooleval.schema import config_schema

AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"}
GRADER = {"name": "order", "type": "tool-call-order", "tool_calls_order": ["search"]}


@dataclass
class Guarded:
    processor: ToolEvalSpanProcessor
    provider: TracerProvider
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    violations: list[GuardViolation] = field(default_factory=list)

    @property
    def tracer(self) -> Any:
        return self.provider.get_tracer("test-guard")

    def spans(self) -> list[ReadableSpan]:
        self.provider.force_flush()
        return list(self.exporter.get_finished_spans())

    def tool_spans(self) -> list[ReadableSpan]:
        return [s for s in self.spans() if "gen_ai.tool.name" in (s.attributes or {})]

    def rules(self) -> list[str | None]:
        """``tooleval.guard.rule`` of each exported tool span, in start order."""
        spans = sorted(self.tool_spans(), key=lambda s: s.start_time or 0)
        return [_str((s.attributes or {}).get("tooleval.guard.rule")) for s in spans]

    def counted(self) -> dict[tuple[str, str], int]:
        data = self.reader.get_metrics_data()
        out: dict[tuple[str, str], int] = {}
        for rm in data.resource_metrics if data is not None else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == "tooleval.guard.violations":
                        points: Any = metric.data.data_points
                        for p in points:
                            key = (str(p.attributes["tooleval.guard.rule"]),
                                   str(p.attributes["gen_ai.tool.name"]))
                            out[key] = out.get(key, 0) + int(p.value)
        return out

    def call(self, name: str, arguments: Any = None, *, at_start: bool = True) -> None:
        """One tool span; the name (and arguments) at its start, or only at its end."""
        attrs: dict[str, Any] = {"gen_ai.tool.name": name}
        if arguments is not None:
            attrs["gen_ai.tool.call.arguments"] = json.dumps(arguments)
        if at_start:
            with self.tracer.start_as_current_span(f"execute_tool {name}", attributes=attrs):
                pass
        else:
            with self.tracer.start_as_current_span(f"execute_tool {name}") as span:
                span.set_attributes(attrs)

    @contextmanager
    def run(self, agent: str = "helper") -> Iterator[None]:
        with self.tracer.start_as_current_span(f"invoke_agent {agent}",
                                               attributes={**AGENT, "gen_ai.agent.name": agent}):
            yield


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


@contextmanager
def guarded(guard: Mapping[str, Any], *, graders: bool = True,
            on_violation: Any = None, runs: Mapping[str, Any] | None = None
            ) -> Iterator[Guarded]:
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    config: dict[str, Any] = {"guard": dict(guard)}
    if runs is not None:
        config["runs"] = dict(runs)
    if graders:
        config["graders"] = [GRADER]
    holder: list[GuardViolation] = []
    processor = ToolEvalSpanProcessor(
        config, downstream=SimpleSpanProcessor(exporter),
        meter_provider=MeterProvider(metric_readers=[reader]),
        on_violation=on_violation if on_violation is not None else holder.append)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    g = Guarded(processor, provider, exporter, reader, holder)
    try:
        yield g
    finally:
        provider.shutdown()


# -- each rule, on real SDK spans ----------------------------------------------------------------


def test_disallowed_name_pattern_marks_the_span_adds_an_event_counts_and_calls_back() -> None:
    with guarded({"disallowed": ["^delete_", {"name": "drop"}]}) as g:
        with g.run():
            g.call("search", {"q": "x"})
            g.call("delete_user", {"id": 1})
            g.call("dropdb", {})
        spans = sorted(g.tool_spans(), key=lambda s: s.start_time or 0)
        assert g.rules() == [None, "disallowed", "disallowed"]
        marked = spans[1]
        assert (marked.attributes or {})["tooleval.guard.violation"] is True
        [event] = [e for e in marked.events if e.name == "tooleval.guard.violation"]
        assert event.attributes is not None
        assert event.attributes["tooleval.guard.rule"] == "disallowed"
        assert event.attributes["tooleval.guard.entry"] == 0
        assert event.attributes["gen_ai.tool.name"] == "delete_user"
        assert "guard.disallowed[0]" in str(event.attributes["tooleval.guard.explanation"])
        assert "tooleval.guard.violation" not in (spans[0].attributes or {})
        assert [(v.rule, v.tool, v.entry, v.at) for v in g.violations] == [
            ("disallowed", "delete_user", 0, "start"), ("disallowed", "dropdb", 1, "start")]
        assert g.violations[0].span_id == marked.context.span_id
        assert g.violations[0].trace_id == marked.context.trace_id
        assert g.counted() == {("disallowed", "delete_user"): 1, ("disallowed", "dropdb"): 1}


def test_disallowed_argument_conditions_as_in_tool_calls() -> None:
    entry = {"name": "^read_file$", "path": r"\.env$", "args": {"mode": "^w"}}
    with guarded({"disallowed": [entry]}) as g:
        with g.run():
            g.call("read_file", {"path": "app/.env", "mode": "r"})     # mode does not match
            g.call("read_file", {"path": "app/.env", "mode": "w"})     # both match
            g.call("read_file", {"path": "app/main.py", "mode": "w"})  # path does not match
            g.call("read_file", {"mode": "w"})                         # no path: no match
            g.call("read_file")                                        # no arguments at all
        assert g.rules() == [None, "disallowed", None, None, None]


@pytest.mark.parametrize(("unwrap", "rules"), [("auto", [None, "disallowed", "disallowed"]),
                                              ("off", [None, "disallowed", None])])
def test_argument_conditions_see_through_generic_envelopes_as_the_graders_do(
        unwrap: str, rules: list[str | None]) -> None:
    """A rule on ``country`` sees the arguments a JavaScript tool records as
    ``{"input": {...}, "options": null}`` (issue 27: the graders take such envelopes off by
    their shape); ``runs.unwrap: off`` keeps them on for the guard too."""
    entry = {"name": "^lookup$", "args": {"country": "^France$"}}
    with guarded({"disallowed": [entry]}, runs={"unwrap": unwrap}) as g:
        with g.run():
            g.call("lookup", {"country": "Spain"})
            g.call("lookup", {"country": "France"})
            g.call("lookup", {"input": {"country": "France"}, "options": None})
        assert g.rules() == rules


def test_allowed_names_and_patterns_match_the_whole_tool_name() -> None:
    with guarded({"allowed": ["search", "get_.*"]}) as g:
        with g.run():
            for name in ("search", "get_weather", "research", "search_and_delete", "forget_me"):
                g.call(name, {})
        assert g.rules() == [None, None, "allowed", "allowed", "allowed"]
        assert g.violations[0].explanation == "'research' is not in guard.allowed"


def test_max_calls_counts_every_call_of_the_run_and_flags_each_one_over() -> None:
    with guarded({"max_calls": 2}) as g:
        with g.run():
            for name in ("a", "b", "a", "c"):
                g.call(name, {})
        assert g.rules() == [None, None, "max_calls", "max_calls"]
        assert [(v.limit, v.count) for v in g.violations] == [(2, 3), (2, 4)]


def test_max_calls_per_tool_counts_each_named_tool_apart() -> None:
    with guarded({"max_calls_per_tool": {"search": 1, "fetch": 0}}) as g:
        with g.run():
            for name in ("search", "other", "search", "fetch", "other"):
                g.call(name, {})
        assert g.rules() == [None, None, "max_calls_per_tool", "max_calls_per_tool", None]
        assert [(v.tool, v.limit, v.count) for v in g.violations] == [
            ("search", 1, 2), ("fetch", 0, 1)]


def test_max_repeats_compares_arguments_by_value() -> None:
    with guarded({"max_repeats": 2}) as g:
        with g.run():
            g.call("fetch", {"url": "a", "n": 1})
            g.call("fetch", {"n": 1.0, "url": "a"})       # equal: key order, 1 == 1.0
            g.call("fetch", {"url": "a", "n": True})      # not equal: true is no number
            g.call("other", {"url": "a", "n": 1})         # another tool
            g.call("fetch", {"url": "a", "n": 1})         # the third identical call: a loop
        assert g.rules() == [None, None, None, None, "max_repeats"]
        [v] = g.violations
        assert (v.tool, v.limit, v.count) == ("fetch", 2, 3)


def test_counts_are_per_run() -> None:
    with guarded({"max_calls": 1}) as g:
        with g.tracer.start_as_current_span("POST /chat"):
            with g.run("first"):
                g.call("a", {})
            with g.run("second"):
                g.call("a", {})
                g.call("b", {})
        assert g.rules() == [None, None, "max_calls"]


def test_the_first_broken_rule_in_order_is_the_one_named() -> None:
    with guarded({"disallowed": ["^x$"], "allowed": ["y"], "max_calls": 0}) as g:
        with g.run():
            g.call("x", {})      # disallowed (also not allowed, also over max_calls)
            g.call("z", {})      # not allowed (also over max_calls)
            g.call("y", {})      # over max_calls
        assert g.rules() == ["disallowed", "allowed", "max_calls"]


# -- arguments set only at the end, spans recognisable only at the end ----------------------------


def test_arguments_known_only_at_the_end_are_checked_then_on_the_forwarded_copy() -> None:
    with guarded({"disallowed": ["^delete_", {"name": "^read$", "path": "secret"}],
                  "max_repeats": 1}) as g:
        with g.run():
            with g.tracer.start_as_current_span(
                    "execute_tool read", attributes={"gen_ai.tool.name": "read"}) as span:
                assert "tooleval.guard.violation" not in (span.attributes or {})
                span.set_attribute("gen_ai.tool.call.arguments", '{"path": "secret.txt"}')
            with g.tracer.start_as_current_span(
                    "execute_tool delete_me", attributes={"gen_ai.tool.name": "delete_me"}) as span:
                # a name rule: marked at start, on the live span
                assert (span.attributes or {})["tooleval.guard.rule"] == "disallowed"
        assert g.rules() == ["disallowed", "disallowed"]
        assert [v.at for v in g.violations] == ["end", "start"]
        read = min(g.tool_spans(), key=lambda s: s.start_time or 0)
        assert [e.name for e in read.events] == ["tooleval.guard.violation"]


def test_a_span_that_is_a_tool_call_only_at_its_end_is_checked_whole_then() -> None:
    with guarded({"max_calls": 1, "max_repeats": 1}) as g:
        with g.run():
            g.call("a", {"k": 1}, at_start=False)
            g.call("a", {"k": 1}, at_start=False)
        assert g.rules() == [None, "max_calls"]
        assert [v.at for v in g.violations] == ["end"]


def test_without_a_guard_section_nothing_is_marked() -> None:
    exporter = InMemorySpanExporter()
    processor = ToolEvalSpanProcessor({"graders": [GRADER]},
                                      downstream=SimpleSpanProcessor(exporter))
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("invoke_agent a", attributes=AGENT):
        assert check_call("anything", {}) is None
        with tracer.start_as_current_span("t", attributes={"gen_ai.tool.name": "x"}):
            pass
    provider.shutdown()
    assert not any(k.startswith("tooleval.guard") for s in exporter.get_finished_spans()
                   for k in (s.attributes or {}))


# -- faults ----------------------------------------------------------------------------------


def test_a_raising_callback_is_contained_and_logged_once(caplog: pytest.LogCaptureFixture
                                                           ) -> None:
    calls: list[str] = []

    def boom(violation: GuardViolation) -> None:
        calls.append(violation.tool)
        raise RuntimeError("callback failed")

    caplog.set_level(logging.ERROR)
    with guarded({"disallowed": ["bad"]}, on_violation=boom) as g:
        with g.run():
            g.call("bad", {})
            g.call("bad", {})
        assert calls == ["bad", "bad"]
        assert g.rules() == ["disallowed", "disallowed"]   # marked all the same
    logged = [r for r in caplog.records if "on_violation callback" in r.getMessage()]
    assert len(logged) == 1


def test_a_guard_failure_never_reaches_the_application(monkeypatch: pytest.MonkeyPatch) -> None:
    from otel_tooleval import guard as guard_module

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("guard bug")

    with guarded({"disallowed": ["bad"]}) as g:
        monkeypatch.setattr(guard_module.GuardRules, "check", broken)
        with g.run():
            g.call("bad", {})
            g.call("bad", {}, at_start=False)
            assert check_call("bad", {}) is None
        assert len(g.tool_spans()) == 2
        assert g.processor.stats()["runs"] == 1   # the run is still graded


# -- check_call ------------------------------------------------------------------------------


def test_check_call_answers_for_the_run_in_context_without_counting() -> None:
    with guarded({"disallowed": [{"name": "rm", "command": "-rf"}], "max_calls": 1,
                  "max_repeats": 1}) as g:
        assert check_call("rm", {"command": "rm -rf /"}) is None   # no span: no run
        with g.run():
            found = check_call("rm", {"command": "rm -rf /"})
            assert found is not None and (found.rule, found.at) == ("disallowed", "check")
            assert check_call("rm", {"command": "ls"}) is None
            assert check_call("rm") is None                   # no arguments: name rules only
            for _ in range(3):
                assert check_call("ls", {"a": 1}) is None     # asking counts nothing
            g.call("ls", {"a": 1})
            found = check_call("ls", {"a": 1})                 # would be call 2, a repeat
            assert found is not None and found.rule == "max_calls"
            found = check_call("other")
            assert found is not None and found.rule == "max_calls"
        assert g.violations == []                              # nothing marked by asking
        assert g.rules() == [None]


def test_check_call_from_inside_the_tool_span_gives_what_its_start_found() -> None:
    with guarded({"disallowed": ["^bad$", {"name": "late", "args": {"p": "x"}}]}) as g, g.run():
        with g.tracer.start_as_current_span(
                "execute_tool bad", attributes={"gen_ai.tool.name": "bad"}) as span:
            found = check_call("bad", {})
            assert found is not None
            assert (found.at, found.span_id) == ("start", span.get_span_context().span_id)
        with g.tracer.start_as_current_span(
                "execute_tool late", attributes={"gen_ai.tool.name": "late"}):
            # put off at start (no arguments): the hook's arguments decide
            assert check_call("late", {"p": "y"}) is None
            found = check_call("late", {"p": "x"})
            assert found is not None and found.at == "check"


def test_check_call_stops_answering_after_shutdown() -> None:
    with guarded({"disallowed": ["bad"]}) as g, g.run():
        assert check_call("bad") is not None
        g.processor.shutdown()
        assert check_call("bad") is None


# -- config ----------------------------------------------------------------------------------


def test_a_guard_alone_is_a_valid_config_and_every_field_loads() -> None:
    cfg = load_config({"guard": {
        "disallowed": ["^delete_", {"name": "bash", "command": "rm -rf", "args": {"x": "y"}}],
        "allowed": ["bash", "read_.*"], "max_calls": 10, "max_calls_per_tool": {"bash": 3},
        "max_repeats": 2}})
    assert cfg.graders == ()
    assert cfg.guard is not None and cfg.guard.active
    assert cfg.guard.disallowed[0].name == "^delete_"
    schema = config_schema()
    assert set(schema["properties"]["guard"]["properties"]) == {
        "disallowed", "allowed", "max_calls", "max_calls_per_tool", "max_repeats"}


@pytest.mark.parametrize(("guard", "where", "says"), [
    ({"max_call": 3}, "guard.max_call", "did you mean 'max_calls'"),
    ({"max_calls": -1}, "guard.max_calls", "greater than or equal to 0"),
    ({"max_repeats": 0}, "guard.max_repeats", "greater than or equal to 1"),
    ({"max_calls_per_tool": {"bash": -2}}, "guard.max_calls_per_tool", "bash: must be 0 or more"),
    ({"max_calls_per_tool": {"bash": "3"}}, "guard.max_calls_per_tool.bash", "integer"),
    ({"allowed": ["(unclosed"]}, "guard.allowed", "(unclosed"),
    ({"allowed": "bash"}, "guard.allowed", "list"),
    ({"disallowed": [{"name": "x", "result": "ok"}]}, "guard.disallowed[0]",
     "result is not supported in guard.disallowed"),
    ({"disallowed": [{"name": "x", "min_count": 2}]}, "guard.disallowed[0].min_count", ""),
    ({"disallowed": [{"name": "x", "pth": "y"}]}, "guard.disallowed[0].pth",
     "did you mean 'path'"),
    ({"disallowed": [{"command": "x"}]}, "guard.disallowed[0].name", "required"),
    ({"disallowed": [{"name": "(?P<x"}]}, "guard.disallowed[0].name", ""),
])
def test_config_errors_name_the_field(guard: dict[str, Any], where: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({"guard": guard})
    message = str(caught.value)
    assert where in message, message
    assert says in message, message
