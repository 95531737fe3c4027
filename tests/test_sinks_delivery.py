"""The sinks' delivery engine against a local HTTP server: batches, retries, deadlines, drops."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from otel_tooleval.sinks import Delivery, DeliverySettings, Sink, build_sinks

FAST = DeliverySettings(batch_size=10, flush_interval_s=0.05, timeout_s=1.0, max_attempts=4,
                        backoff_initial_s=0.01, backoff_max_s=0.05, retry_deadline_s=5.0)


class Receiver(ThreadingHTTPServer):
    """Answers each POST with the next planned status (the last one repeats); records bodies."""

    daemon_threads = True

    def __init__(self, plan: list[int | str]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.plan = plan
        self.bodies: list[Any] = []
        self.headers_seen: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.release = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def next_answer(self) -> int | str:
        return self.plan.pop(0) if len(self.plan) > 1 else self.plan[0]


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        answer = self.server.next_answer()
        if answer == "hang":
            self.server.release.wait(10)
            return
        self.server.bodies.append(json.loads(body))
        self.server.headers_seen.append(dict(self.headers))
        self.server.paths.append(self.path)
        status = int(answer)
        self.send_response(status)
        if status == 429:
            self.send_header("Retry-After", "0")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver(request: pytest.FixtureRequest) -> Iterator[Receiver]:
    server = Receiver(list(getattr(request, "param", [200])))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _delivered(server: Receiver) -> list[Any]:
    return [item for body in server.bodies for item in body["data"]]


def test_payloads_are_posted_in_batches_per_path(receiver: Receiver) -> None:
    delivery = Delivery("t", receiver.url + "/", {"Authorization": "Bearer s3cret"}, FAST)
    for i in range(25):
        assert delivery.put("/v1/a", {"i": i})
    delivery.put("/v1/b", {"i": "b"})
    assert delivery.shutdown(5.0)
    assert delivery.stats()["sent"] == 26
    assert sorted(item["i"] for body, path in zip(receiver.bodies, receiver.paths)
                  if path == "/v1/a" for item in body["data"]) == list(range(25))
    assert [body["data"] for body, path in zip(receiver.bodies, receiver.paths)
            if path == "/v1/b"] == [[{"i": "b"}]]
    assert max(len(body["data"]) for body in receiver.bodies) == 10
    assert all(h["Authorization"] == "Bearer s3cret" and h["Content-Type"] == "application/json"
               for h in receiver.headers_seen)


def test_a_custom_body_posts_one_payload_per_request(receiver: Receiver) -> None:
    settings = DeliverySettings(batch_size=1, flush_interval_s=0.01)
    delivery = Delivery("t", receiver.url, settings=settings, body=lambda path, items: items[0])
    delivery.put_many("/scores", [{"n": 1}, {"n": 2}])
    assert delivery.shutdown(5.0)
    assert receiver.bodies == [{"n": 1}, {"n": 2}]


@pytest.mark.parametrize("receiver", [[500, 503, 200], [429, 429, 200]], indirect=True)
def test_5xx_and_429_are_retried_until_sent(receiver: Receiver) -> None:
    delivery = Delivery("t", receiver.url, settings=FAST)
    delivery.put("/v1/a", {"i": 1})
    assert delivery.shutdown(5.0)
    stats = delivery.stats()
    assert stats["sent"] == 1 and stats["retries"] == 2
    assert not [k for k in stats if k.startswith("dropped.")]
    assert len(receiver.bodies) == 3


@pytest.mark.parametrize("receiver", [[500]], indirect=True)
def test_retries_end_at_max_attempts_and_the_drop_is_counted_by_status(
        receiver: Receiver) -> None:
    delivery = Delivery("t", receiver.url, settings=FAST)
    delivery.put_many("/v1/a", [{"i": 1}, {"i": 2}])
    assert delivery.shutdown(5.0)
    assert delivery.stats()["dropped.http_500"] == 2
    assert delivery.stats()["sent"] == 0
    assert len(receiver.bodies) == FAST.max_attempts


@pytest.mark.parametrize("receiver", [[422, 200]], indirect=True)
def test_other_4xx_is_not_retried(receiver: Receiver) -> None:
    delivery = Delivery("t", receiver.url, settings=FAST)
    delivery.put("/v1/a", {"i": 1})
    assert delivery.shutdown(5.0)
    assert delivery.stats()["dropped.http_422"] == 1
    assert "retries" not in delivery.stats()
    assert len(receiver.bodies) == 1


def test_retry_after_is_honoured_within_the_cap() -> None:
    from otel_tooleval.sinks.delivery import _retry_after
    assert _retry_after("3") == 3.0
    assert _retry_after("nonsense") is None
    assert _retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    delivery = Delivery("t", "http://127.0.0.1:9", settings=FAST)
    assert delivery._backoff(1, 30.0) == FAST.backoff_max_s
    assert 0 <= delivery._backoff(5, None) <= FAST.backoff_max_s


def test_an_unreachable_backend_costs_the_caller_nothing(
        caplog: pytest.LogCaptureFixture) -> None:
    delivery = Delivery("t", _closed_port(), {"Authorization": "Bearer s3cret"}, FAST)
    started = time.monotonic()
    for i in range(100):
        delivery.put("/v1/a", {"i": i})
    assert time.monotonic() - started < 0.5
    with caplog.at_level(logging.DEBUG, "otel_tooleval.sinks"):
        assert delivery.shutdown(5.0)
    stats = delivery.stats()
    assert stats["dropped.unreachable"] == 100 and stats["sent"] == 0
    assert "s3cret" not in caplog.text


@pytest.mark.parametrize("receiver", [["hang"]], indirect=True)
def test_a_hanging_backend_times_out_per_request(receiver: Receiver) -> None:
    settings = DeliverySettings(flush_interval_s=0.01, timeout_s=0.2, max_attempts=2,
                                backoff_initial_s=0.01, backoff_max_s=0.01)
    delivery = Delivery("t", receiver.url, settings=settings)
    delivery.put("/v1/a", {"i": 1})
    assert delivery.shutdown(5.0)
    assert delivery.stats()["dropped.timeout"] == 1


@pytest.mark.parametrize("receiver", [["hang"]], indirect=True)
def test_shutdown_stops_within_its_deadline_and_counts_what_is_left(receiver: Receiver) -> None:
    settings = DeliverySettings(batch_size=5, flush_interval_s=0.01, timeout_s=30.0)
    delivery = Delivery("t", receiver.url, settings=settings)
    delivery.put_many("/v1/a", [{"i": i} for i in range(12)])
    time.sleep(0.1)                        # the first batch is in flight, hanging
    started = time.monotonic()
    assert delivery.shutdown(0.5) is False
    assert time.monotonic() - started < 1.0
    # 7 still queued and the 5 of the request still open at the deadline
    assert delivery.stats()["dropped.shutdown"] == 12
    receiver.release.set()                 # the open request ends: not counted twice
    time.sleep(0.3)
    assert delivery.stats()["dropped.shutdown"] == 12 and delivery.stats()["sent"] == 0
    assert not delivery.put("/v1/a", {"late": True})
    assert delivery.stats()["dropped.shutdown"] == 13


@pytest.mark.parametrize("receiver", [["hang"]], indirect=True)
def test_requests_during_shutdown_get_only_what_is_left_of_its_deadline(
        receiver: Receiver) -> None:
    # the batch waits to fill (flush_interval_s) until shutdown sends it: its request starts
    # under the deadline and is given 0.5 s, not timeout_s
    settings = DeliverySettings(flush_interval_s=30, timeout_s=30)
    delivery = Delivery("t", receiver.url, settings=settings)
    delivery.put("/v1/a", {"i": 1})
    started = time.monotonic()
    assert delivery.shutdown(0.5) is False
    assert time.monotonic() - started < 0.7
    time.sleep(0.2)
    assert delivery._worker is not None and not delivery._worker.is_alive()
    assert delivery.stats()["dropped.shutdown"] == 1


@pytest.mark.parametrize("receiver", [[503]], indirect=True)
def test_shutdown_cuts_a_backoff_short(receiver: Receiver) -> None:
    settings = DeliverySettings(flush_interval_s=0.01, backoff_initial_s=30, backoff_max_s=30,
                                retry_deadline_s=300)
    delivery = Delivery("t", receiver.url, settings=settings)
    delivery.put("/v1/a", {"i": 1})
    time.sleep(0.2)
    started = time.monotonic()
    delivery.shutdown(0.5)
    assert time.monotonic() - started < 1.0
    time.sleep(0.1)
    assert delivery.stats()["dropped.shutdown"] == 1


def test_a_full_queue_drops_and_counts_without_blocking() -> None:
    settings = DeliverySettings(max_queue=5, flush_interval_s=10.0, batch_size=100)
    delivery = Delivery("t", _closed_port(), settings=settings)
    assert delivery.put_many("/v1/a", [{"i": i} for i in range(8)]) == 5
    assert not delivery.put("/v1/a", {"i": 9})
    assert delivery.stats()["dropped.queue_full"] == 4
    assert delivery.stats()["queued"] == 5
    delivery.shutdown(0.0)
    assert delivery.stats()["dropped.shutdown"] == 5


def test_a_payload_that_is_not_json_is_a_counted_drop(receiver: Receiver) -> None:
    circular: dict[str, Any] = {}
    circular["self"] = circular
    delivery = Delivery("t", receiver.url, settings=FAST)
    delivery.put("/v1/a", circular)
    delivery.put("/v1/b", {"fine": True})
    assert delivery.shutdown(5.0)
    assert delivery.stats()["dropped.encode"] == 1
    assert delivery.stats()["sent"] == 1


def test_build_sinks_is_empty_when_no_sink_is_configured() -> None:
    from otel_tooleval.config import EmitConfig
    assert build_sinks(EmitConfig()) == []

    class Fake:
        name = "fake"

        def submit(self, report: Any) -> None: ...
        def submit_session(self, report: Any) -> None: ...
        def shutdown(self, timeout_s: float) -> bool: return True
        def stats(self) -> dict[str, int]: return {}

    assert isinstance(Fake(), Sink)
