"""Fixtures shared by the suites: OTLP to a receiver on 127.0.0.1, and the repository fence."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

from tests.support import confine
from tests.support.otlp_receiver import OtlpReceiver

confine.install()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # A processor a test left unshut is shut down by its provider's exit hook after pytest's
    # summary, where its once-per-processor "saw no span" warning (registration.py) is the
    # test's leftover, not a finding: tests/test_registration.py checks the warning itself.
    logging.getLogger("otel_tooleval.processor").setLevel(logging.ERROR)


@pytest.fixture(autouse=True)
def stays_in_the_repository() -> Iterator[None]:
    """Fails a test that reads a sibling of the checkout: a clone has none beside it."""
    confine.take_escapes()
    yield
    escaped = confine.take_escapes()
    if escaped:
        pytest.fail(f"the test read outside the repository: {sorted(set(escaped))[:5]}; "
                    "copy what it needs into tests/data/", pytrace=False)


@pytest.fixture
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Exporters talk to 127.0.0.1 directly: no proxies, no inherited OTEL_* settings."""
    for name in list(os.environ):
        if name.lower() in ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy") or name.startswith("OTEL_") or name == "TOOLEVAL_CONFIG":
            monkeypatch.delenv(name)
    # requests lets these override an exporter's certificate_file (its session's verify): a
    # machine that sets them would make the TLS tests trust the system CAs, not the test CA.
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def receiver(loopback_only: None) -> Iterator[OtlpReceiver]:
    """A real OTLP gRPC + HTTP receiver on 127.0.0.1, stopped after the test."""
    with OtlpReceiver() as rx:
        yield rx
