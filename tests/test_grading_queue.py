"""The grading queue (``grading_queue.py``, issue 31): a plain trace's root is forwarded by the
application thread unless something is queued or in the grading thread's hands; the grading
thread polls quickly right after an item, so runs that keep coming are graded young."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

from otel_tooleval import grading_queue
from tests.support.harness import Harness

CONFIG: dict[str, Any] = {"graders": [
    {"name": "no-delete", "type": "tool-calls", "config": {"disallowed": ["^delete$"]}}]}


class Threads(SpanProcessor):
    """A downstream that records which thread forwarded each span to it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.seen.append((span.name, threading.get_ident()))


def _idle_grading_thread(config: dict[str, Any]) -> tuple[Harness, Threads]:
    """A processor whose grading thread has graded one run and holds nothing, its downstream
    recording from then on."""
    threads = Threads()
    h = Harness(config, downstream=threads)
    try:
        h.agent_run(["search"], agent="a")
        assert h.flush() and h.processor._worker is not None
    except BaseException:
        h.close()
        raise
    threads.seen.clear()
    return h, threads


def _web_request(h: Harness) -> None:
    """A plain trace of one span (its local root)."""
    with h.tracer.start_as_current_span("GET /items", attributes={"http.request.method": "GET"}):
        pass


def test_a_plain_root_with_nothing_before_it_is_forwarded_by_the_application_thread() -> None:
    """A grading thread runs (the service hosts an agent), but holds nothing: the web request's
    root is forwarded inside its end(), not queued for a poll."""
    h, threads = _idle_grading_thread(CONFIG)
    try:
        _web_request(h)
        assert threads.seen == [("GET /items", threading.get_ident())]
    finally:
        h.close()


def test_a_plain_root_ending_while_the_grading_thread_holds_an_item_is_forwarded_after_it(
        ) -> None:
    """The queue is empty but the grading thread has an item in its hands (``_current``): a
    web request's root that ends then is queued behind it, forwarded by the grading thread,
    not by the application thread ahead of what it holds."""
    h, threads = _idle_grading_thread(CONFIG)
    try:
        h.processor._current = object()   # taken from the queue, not finished
        _web_request(h)
        h.processor._current = None
        assert h.flush()
        assert [name for name, _ in threads.seen] == ["GET /items"]
        assert threads.seen[0][1] == h.processor._worker.ident != threading.get_ident()
    finally:
        h.close()


def test_a_plain_root_ending_behind_a_queued_item_is_forwarded_after_it() -> None:
    """An item queued that the grading thread has not taken yet (it polls): a web request's
    root that ends then is queued behind it, not forwarded ahead of it."""
    h, threads = _idle_grading_thread(CONFIG)
    try:
        elsewhere = TracerProvider()   # a plain root ended before, queued (as roots are)
        with elsewhere.get_tracer("t").start_as_current_span("GET /first") as first:
            pass
        h.processor._queue.append(first)
        _web_request(h)
        assert h.flush()
        worker = h.processor._worker.ident
        assert threads.seen == [("GET /first", worker), ("GET /items", worker)]
    finally:
        h.close()


def test_the_grading_threads_current_item_is_set_before_the_pop() -> None:
    """Between the pop and the item becoming current an application thread would find neither
    a queued item nor a current one, and forward a plain root ahead of the run just taken."""
    h = Harness(CONFIG)
    processor = h.processor
    try:
        seen: list[Any] = []

        class Watched(deque[Any]):
            def popleft(self) -> Any:
                seen.append(processor._current)
                return super().popleft()

        processor._queue = Watched(["item"])
        assert processor._pop() == "item" and processor._current == "item"
        assert seen == [grading_queue._TAKING]
        assert processor._pop() is None and processor._current is None   # nothing queued
    finally:
        processor._queue = deque()
        h.close()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


class Waits(threading.Event):
    """The grading thread's wake event, recording how long each wait was for (and whether the
    thread counted itself asleep then), returning at once."""

    def __init__(self, owner: Any) -> None:
        super().__init__()
        self.owner = owner
        self.waits: list[tuple[float | None, bool]] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append((timeout, self.owner._sleeping))
        return False


def test_the_thread_polls_quickly_after_an_item_then_slowly_then_sleeps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(CONFIG)
    processor = h.processor
    clock = Clock()
    monkeypatch.setattr(grading_queue, "time", clock)
    waits = Waits(processor)
    processor._wake = waits
    try:
        processor._queue.append("run")
        assert processor._next() == "run"           # found without a wait: idle clock reset
        assert processor._next() is None            # idle from now (100.0)
        clock.now = 100.049
        assert processor._next() is None
        clock.now = 100.06
        assert processor._next() is None
        clock.now = 100.999
        assert processor._next() is None
        clock.now = 101.0
        assert processor._next() is None
        assert waits.waits == [(grading_queue._BUSY_POLL_SECONDS, False),
                               (grading_queue._BUSY_POLL_SECONDS, False),
                               (grading_queue._POLL_SECONDS, False),
                               (grading_queue._POLL_SECONDS, False),
                               (grading_queue._SWEEP_SECONDS, True)]
        assert processor._sleeping is False
        processor._queue.append("next")
        clock.now = 105.0
        assert processor._next() == "next"          # and the quick polls start again
        assert processor._next() is None
        assert waits.waits[-1] == (grading_queue._BUSY_POLL_SECONDS, False)
    finally:
        processor._queue.clear()
        h.close()


def test_with_a_grading_process_every_plain_root_goes_to_the_grading_thread() -> None:
    """``grading.mode: process``: the runs the grading process holds are in neither the queue
    nor ``_current``, so the hooks do not forward a plain root inline however empty those look
    (``span_hooks``' holder: ``_EVERY_ROOT``); ``_hand_over_plain`` queues it, as in 9fe1f83."""
    h, threads = _idle_grading_thread({**CONFIG, "grading": {"mode": "process"}})
    try:
        assert not h.processor._queue and h.processor._current is None
        _web_request(h)
        assert h.flush()
        assert threads.seen == [("GET /items", h.processor._worker.ident)]
    finally:
        h.close()
