"""The ``sessions:`` section of the config file."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from .keys import DEFAULT_KEYS

__all__ = ["SessionsConfig"]


class SessionsConfig(BaseModel):
    """How runs are grouped into sessions, when a session ends, and its graders.

    ``graders`` holds entries of any family (resolved as ``graders:`` entries are); they see
    the session's calls in run order, or, with ``turns:`` (any family) or ADK's
    ``expected_invocations``, each run against its own expectation (docs/sessions.md).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    keys: list[StrictStr] = Field(
        default_factory=lambda: list(DEFAULT_KEYS), min_length=1,
        description="span attributes holding the session key; the first present wins "
                    "(the run's root first, then its other spans)")
    graders: list[Any] = Field(
        default_factory=list, description="graders of whole sessions (any family; turns:)")
    idle_seconds: float = Field(
        default=300.0, gt=0, allow_inf_nan=False,
        description="live: a session with no new run for this long ends and is graded")
    max_open_sessions: int = Field(
        default=1000, ge=1, description="open sessions kept at once; past it the least "
                                        "recently active one ends early (counted)")
    max_session_calls: int = Field(
        default=10_000, ge=1, description="tool calls kept per session; later calls are "
                                          "dropped (counted)")
    max_session_runs: int = Field(
        default=10_000, ge=1, description="runs kept per session; later runs are dropped "
                                          "(counted in the session's dropped_runs)")
