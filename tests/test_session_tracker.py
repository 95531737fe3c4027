"""``OpenSessions`` on its own, on a hand-driven clock: idle ends, eviction, what a session keeps."""

from __future__ import annotations

from otel_tooleval.sessions.model import SessionKey
from otel_tooleval.sessions.settings import SessionsConfig
from otel_tooleval.sessions.tracker import OpenSessions
from tests.support.runs import call, run_of


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def key(value: str) -> SessionKey:
    return SessionKey(value, "gen_ai.conversation.id")


def test_idle_ends_the_sessions_idle_for_idle_seconds_or_more_and_keeps_the_rest() -> None:
    clock = Clock()
    tracker = OpenSessions(SessionsConfig(idle_seconds=10), clock=clock)
    tracker.add(key("old"), run_of([call("a")]))
    clock.now += 5
    tracker.add(key("new"), run_of([call("a")]))
    clock.now += 4.5
    assert tracker.idle() == [] and len(tracker) == 2
    clock.now += 0.5                       # old: exactly idle_seconds
    assert [(s.key.value, s.ended) for s in tracker.idle()] == [("old", "idle")]
    assert len(tracker) == 1
    clock.now += 5
    assert [s.key.value for s in tracker.idle()] == ["new"] and len(tracker) == 0


def test_end_of_a_session_not_open_is_none() -> None:
    tracker = OpenSessions(SessionsConfig())
    assert tracker.end("nobody") is None
    tracker.add(key("a"), run_of([call("a")]))
    ended = tracker.end("a", "shutdown")
    assert ended is not None and ended.ended == "shutdown" and len(tracker) == 0


def test_a_session_keeps_its_resource_when_a_later_run_has_none() -> None:
    tracker = OpenSessions(SessionsConfig())
    tracker.add(key("a"), run_of([call("a")]), resource="r1")
    tracker.add(key("a"), run_of([call("b")]))
    (session,) = tracker.take_all("flush")
    assert session.resource == "r1" and len(session.runs) == 2


def test_outputs_are_kept_only_when_asked() -> None:
    run = run_of([call("a")], outputs=["done"])
    for options, final in (({"outputs": True}, "done"), ({}, None)):   # not by default
        tracker = OpenSessions(SessionsConfig(), **options)
        tracker.add(key("a"), run)
        (session,) = tracker.take_all("flush")
        assert session.runs[0].final_output == final


def test_evictions_are_counted_over_every_add() -> None:
    tracker = OpenSessions(SessionsConfig(max_open_sessions=1))
    for value in ("a", "b", "c"):
        tracker.add(key(value), run_of([call("a")]))
    assert tracker.counts["dropped.max_open_sessions"] == 2
