"""The ``Sink`` protocol and ``build_sinks``: which backends an ``emit:`` section turns on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..model import RunReport
    from ..sessions.model import SessionReport

__all__ = ["SINK_FIELDS", "Sink", "build_sinks", "details_summary"]

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


def details_summary(details: Mapping[str, Any], count_suffix: str = "", max_keys: int = 20,
                    max_text: int = 200) -> dict[str, Any]:
    """A grader's details, small, for a backend's metadata: scalars as they are (text cut to
    ``max_text`` characters), a list or mapping as its length under ``key + count_suffix``
    (``violations`` becomes how many), at most ``max_keys`` keys; anything else is left out."""
    out: dict[str, Any] = {}
    for key, value in details.items():
        if len(out) >= max_keys:
            break
        if value is None or isinstance(value, (bool, int, float)):
            out[str(key)] = value
        elif isinstance(value, str):
            out[str(key)] = value if len(value) <= max_text else value[:max_text - 1] + "…"
        elif isinstance(value, (list, tuple, Mapping)):
            out[f"{key}{count_suffix}"] = len(value)
    return out
