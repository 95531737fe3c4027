"""The ``Sink`` protocol and ``build_sinks``: which backends an ``emit:`` section turns on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..model import RunReport
    from ..sessions.model import SessionReport

__all__ = ["SINK_FIELDS", "Sink", "build_sinks"]

#: The ``emit:`` fields that configure a sink, in the order the sinks are built. Each field's
#: model (``sinks.<name>.<Name>SinkConfig``) has ``build_sink() -> Sink``.
SINK_FIELDS: tuple[str, ...] = ("phoenix", "langfuse")


@runtime_checkable
class Sink(Protocol):
    """One backend the verdicts are delivered to."""

    name: str

    def submit(self, report: RunReport) -> None:
        """Queue a run's verdicts; never blocks, never raises (a full queue is a counted drop)."""

    def submit_session(self, report: SessionReport) -> None:
        """Queue a session's verdicts; a no-op where the backend has no sessions."""

    def shutdown(self, timeout_s: float) -> bool:
        """Deliver what is queued within ``timeout_s`` and stop; True when nothing was lost
        to the deadline."""

    def stats(self) -> dict[str, int]:
        """``sent`` and ``dropped.<reason>`` counts (queue_full, http_<status>, timeout,
        unreachable, shutdown, ...)."""


def build_sinks(emit_config: Any) -> list[Sink]:
    """The sinks an ``EmitConfig`` turns on (its ``SINK_FIELDS`` that are not None)."""
    sinks: list[Sink] = []
    for name in SINK_FIELDS:
        config = getattr(emit_config, name, None)
        if config is not None:
            sinks.append(config.build_sink())
    return sinks
