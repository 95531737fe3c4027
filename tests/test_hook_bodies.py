"""The span hooks' bodies (``hook_bodies.py``): bound per processor as globals, not cells, and
the agent-name test of a plain span's end done by comparing strings."""

from __future__ import annotations

import builtins
import dis
from typing import Any

import pytest

from otel_tooleval import hook_bodies
from otel_tooleval.conventions.registry import AGENT_SPAN_PREFIXES
from otel_tooleval.hook_bodies import BOUND, bind, prefix_bounds
from tests.support.harness import Harness

CONFIG: dict[str, Any] = {"graders": [
    {"name": "no-delete", "type": "tool-calls", "config": {"disallowed": ["^delete$"]}}]}


def _names(prefixes: tuple[str, ...]) -> list[str]:
    """Names around each prefix: itself, longer, shorter, and with its last character one
    lower or higher (then longer), plus names far from any."""
    names = ["", "a", "GET /items", "render", "\U0010ffff", "zzz", "agent_run", "agent_run ["]
    for p in prefixes:
        last = ord(p[-1])
        for tail in ("", "x]", "\U0010ffff"):
            names += [p + tail, p[:-1] + chr(last - 1) + tail, p[:-1] + chr(last + 1) + tail]
        names += [p[:-1], p[:-2], p[:-1] + "\U0010ffff"]
    return names


@pytest.mark.parametrize("prefixes", [AGENT_SPAN_PREFIXES, ("agent_run [",), ("b", "ab["),
                                      ("x", "xy", "é["), ()])
def test_every_name_that_starts_with_a_prefix_is_within_the_bounds(
        prefixes: tuple[str, ...]) -> None:
    lo, hi = prefix_bounds(prefixes)
    for name in _names(prefixes):
        if name.startswith(prefixes) if prefixes else False:
            assert lo <= name < hi, (prefixes, name)
        if len(prefixes) == 1:   # one prefix: the bounds alone decide
            assert (lo <= name < hi) == name.startswith(prefixes), (prefixes, name)
    if not prefixes:
        assert not any(lo <= name < hi for name in _names(prefixes))


def test_a_prefix_without_bounds_is_refused() -> None:
    for prefixes in (("",), ("a", "b\U0010ffff")):
        with pytest.raises(ValueError, match="no bounds"):
            prefix_bounds(prefixes)


def test_the_agent_name_bounds_are_the_registrys() -> None:
    assert (hook_bodies.agent_lo, hook_bodies.agent_hi) == prefix_bounds(AGENT_SPAN_PREFIXES)
    assert hook_bodies.agent_prefixes == AGENT_SPAN_PREFIXES


def test_binding_without_a_declared_name_fails_there_not_in_a_hook() -> None:
    values = {name: None for name in BOUND}
    del values["traces"]
    with pytest.raises(TypeError, match="'traces'"):
        bind(values)


def _globals_read(function: Any) -> set[str]:
    return {i.argval for i in dis.get_instructions(function) if i.opname == "LOAD_GLOBAL"}


@pytest.mark.parametrize("config", [CONFIG, {**CONFIG, "guard": {"disallowed": ["^rm$"]}},
                                    {**CONFIG, "runs": {"agent_span_names": ["^bot$"]}}])
def test_each_processor_binds_every_name_its_hooks_read(config: dict[str, Any]) -> None:
    h = Harness(config)
    other = Harness(CONFIG)
    try:
        on_start, on_end = h.processor._hooks.on_start, h.processor._hooks.on_end
        env = on_end.__globals__
        assert on_start.__globals__ is env and env is not other.processor._hooks.on_end.__globals__
        for name in ("named_kind", "_plain", "plain_end", "on_start", "on_end"):
            unbound = _globals_read(env[name]) - env.keys() - vars(builtins).keys()
            assert not unbound, (name, unbound)
            assert env[name].__code__ is not getattr(hook_bodies, name).__code__
            assert env[name].__code__ is not other.processor._hooks.on_end.__globals__[
                name].__code__
        assert on_end.__code__.co_freevars == () and on_start.__code__.co_freevars == ()
        buffers = h.processor._buffers
        assert env["traces"] is buffers._traces and env["live"] is buffers._live
        assert env["on_end"] is on_end and env["holder"] is h.processor
    finally:
        other.close()
        h.close()
