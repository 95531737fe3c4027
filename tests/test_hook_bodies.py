"""The span hooks' bodies (``hook_bodies.py``): bound per processor as their globals, not as a
closure's cells."""

from __future__ import annotations

import builtins
import dis
from typing import Any

import pytest

from otel_tooleval import hook_bodies
from otel_tooleval.hook_bodies import BOUND, bind
from tests.support.harness import Harness

CONFIG: dict[str, Any] = {"graders": [
    {"name": "no-delete", "type": "tool-calls", "config": {"disallowed": ["^delete$"]}}]}


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
        assert env["live_pop"].__self__ is buffers._live   # the plain end's one pop
        assert env["on_end"] is on_end and env["holder"] is h.processor
    finally:
        other.close()
        h.close()
