"""The sinks an ``emit:`` section turns on, as one: fed by the processor, the exporter and
serve on their grading threads, shut down within their deadline, never raising into them."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .base import Sink, build_sinks

__all__ = ["SinkSet"]

_log = logging.getLogger("otel_tooleval.sinks")
_R = TypeVar("_R")


class SinkSet:
    """Several sinks behind one ``submit`` / ``submit_session`` / ``shutdown`` / ``stats``."""

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self.sinks = tuple(sinks)
        self._reported: set[str] = set()

    @classmethod
    def from_emit(cls, emit_config: Any) -> SinkSet | None:
        """The sinks ``emit_config`` turns on; None when it turns none on."""
        sinks = build_sinks(emit_config)
        return cls(sinks) if sinks else None

    def chain(self, callback: Callable[[_R], None] | None, session: bool = False,
              ) -> Callable[[_R], None]:
        """A callback that feeds the sinks, then calls ``callback`` (a caller's ``on_report``
        or ``on_session``; its exceptions are its caller's to handle, as before)."""
        submit: Callable[[Any], None] = self.submit_session if session else self.submit

        def fed(report: _R) -> None:
            submit(report)
            if callback is not None:
                callback(report)
        return fed

    def submit(self, report: Any) -> None:
        for sink in self.sinks:
            try:
                sink.submit(report)
            except Exception:  # noqa: BLE001 - a sink must not break grading
                self._report(sink, "submit")

    def submit_session(self, report: Any) -> None:
        for sink in self.sinks:
            try:
                sink.submit_session(report)
            except Exception:  # noqa: BLE001
                self._report(sink, "submit_session")

    def shutdown(self, timeout_s: float) -> bool:
        """Shut every sink down at once, all within ``timeout_s``."""
        return self.closing(time.monotonic() + timeout_s)()

    def closing(self, deadline: float) -> Callable[[], bool]:
        """Start shutting the sinks down (each on a thread of its own, by ``deadline``); the
        returned call waits for them, no later than the deadline, and says whether all ended
        with nothing lost."""
        outcome: dict[str, bool] = {}
        threads = []
        for sink in self.sinks:
            def close(sink: Sink = sink) -> None:
                try:
                    outcome[sink.name] = sink.shutdown(max(0.0, deadline - time.monotonic()))
                except Exception:  # noqa: BLE001
                    self._report(sink, "shutdown")
            thread = threading.Thread(target=close, daemon=True,
                                      name=f"otel-tooleval-{sink.name}-shutdown")
            try:
                thread.start()
            except RuntimeError:   # no new threads at interpreter exit
                close()
                continue
            threads.append(thread)

        def wait() -> bool:
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
            return all(outcome.get(sink.name, False) for sink in self.sinks)
        return wait

    def stats(self) -> dict[str, int]:
        """Each sink's counts, as ``sinks.<name>.<count>``."""
        out: dict[str, int] = {}
        for sink in self.sinks:
            try:
                counts = sink.stats()
            except Exception:  # noqa: BLE001
                self._report(sink, "stats")
                continue
            out.update({f"sinks.{sink.name}.{key}": n for key, n in counts.items()})
        return out

    def _report(self, sink: Sink, where: str) -> None:
        key = f"{sink.name}.{where}"
        if key not in self._reported:
            self._reported.add(key)
            _log.exception("otel-tooleval: sink %s: %s failed; continuing", sink.name, where)
