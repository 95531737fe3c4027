"""Grade what is still buffered before the SDK's exit hooks shut logs and metrics down.

The SDK shuts its providers down from ``atexit`` hooks, last created first. The environment
configurator builds the tracer provider (and so our exporter) first, then the meter and logger
providers: at exit, logs and metrics are shut down *before* traces, and verdicts decided while
the tracer provider shuts down would find them closed. A hook registered after the providers
exist runs before theirs: it flushes the tracer provider (the batch processor hands its queue
to our exporter) and then our exporters and processors, so runs are graded, and their log
events and metrics recorded, while every provider still works.

Registered by the ``tooleval`` configurator after it built the providers, and by the
``opentelemetry_post_instrument`` entry point that ``opentelemetry-instrument`` runs after its
configurator, so the exporter route gets it too. Light on purpose: that entry point is loaded
in every auto-instrumented program that has otel-tooleval installed.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from typing import Any

__all__ = ["drain", "post_instrument", "register_drain", "track"]

_log = logging.getLogger(__name__)
_LIVE: weakref.WeakSet[Any] = weakref.WeakSet()   # objects with force_flush(timeout_millis)
_lock = threading.Lock()
_registered = False
DRAIN_SECONDS = 10.0


def track(component: Any) -> None:
    """Remember a live exporter (or processor) to flush at exit."""
    _LIVE.add(component)


def register_drain() -> None:
    """Register :func:`drain` with ``atexit`` once (it runs before hooks registered earlier)."""
    global _registered
    with _lock:
        if not _registered:
            atexit.register(drain)
            _registered = True


def post_instrument() -> None:
    """``opentelemetry_post_instrument`` entry point: register the drain if we are in use."""
    try:
        if len(_LIVE):
            register_drain()
    except Exception:  # noqa: BLE001 - never break the host's start-up
        _log.debug("otel-tooleval: post-instrument hook failed", exc_info=True)


def drain(timeout_seconds: float = DRAIN_SECONDS) -> bool:
    """Flush the global tracer provider, then every live exporter/processor, in one deadline."""
    deadline = time.monotonic() + timeout_seconds

    def left() -> int:
        return max(int((deadline - time.monotonic()) * 1000), 0)

    ok = True
    try:
        from opentelemetry import trace

        flush = getattr(trace.get_tracer_provider(), "force_flush", None)
        if callable(flush):
            ok = flush(left()) is not False
        for component in list(_LIVE):
            ok = component.force_flush(left()) is not False and ok
    except Exception:  # noqa: BLE001 - an exit hook must not raise
        _log.debug("otel-tooleval: flush at exit failed", exc_info=True)
        return False
    return ok
