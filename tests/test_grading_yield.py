"""The grading thread gives the interpreter lock back to the application between two graders
(docs/performance.md, "Grading beside the application"), unless half the queue waits."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from otel_tooleval import GradeResult, processor
from otel_tooleval.graders.registry import REGISTRY, GraderFamily, register
from tests.support.harness import Harness

TWO_MORE = [
    {"name": "uses-search", "type": "tool-calls", "config": {"required": ["^search$"]}},
    {"name": "no-delete", "type": "tool-calls", "config": {"disallowed": ["^delete$"]}},
]


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr(processor, "_give_way",
                        lambda: seen.append(threading.current_thread().name))
    return seen


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    opened = threading.Event()

    class Gated:
        type = "test-gated"

        def __init__(self, name: str) -> None:
            self.name = name

        def grade(self, run: object) -> GradeResult:
            opened.wait(10)
            return GradeResult(self.name, self.type, 1.0, True, "pass", "ok")

    register(GraderFamily("test-gated", (), lambda entry, name, iv: Gated(name)))
    yield opened
    opened.set()
    REGISTRY.pop("test-gated", None)


def test_the_grading_thread_gives_way_between_two_graders(pauses: list[str]) -> None:
    h = Harness({"graders": [{"name": "uses-read", "type": "tool-calls",
                              "config": {"required": ["^read$"]}}, *TWO_MORE]})
    try:
        h.agent_run(["search", "delete"])
        assert h.flush()
        # three graders: two pauses, both on the grading thread, none before the first
        assert pauses == ["otel-tooleval-grader"] * 2
        assert h.processor.stats()["runs"] == 1
    finally:
        h.close()


def test_no_pause_while_half_the_queue_waits(pauses: list[str],
                                             gate: threading.Event) -> None:
    h = Harness({"graders": [{"type": "test-gated"}, *TWO_MORE],
                 "limits": {"queue_size": 4}})
    try:
        h.agent_run(["search"], agent="a0")   # taken, held in its first grader
        _until(lambda: h.processor._current is not None)
        h.agent_run(["search"], agent="a1")
        h.agent_run(["search"], agent="a2")   # two of four waiting: no pause for a0
        gate.set()
        _until(lambda: h.processor.stats().get("runs") == 3)
        # a0: none (two queued); a1: two (one queued); a2: two (none queued)
        assert len(pauses) == 4
        assert h.flush()
    finally:
        h.close()


def _until(done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not done():
        assert time.monotonic() < deadline
        time.sleep(0.005)
