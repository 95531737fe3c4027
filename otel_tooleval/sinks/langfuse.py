"""The Langfuse sink: each graded run's verdicts as Langfuse scores (``langfuse_scores``).

Configured under ``emit: langfuse:``; what the config leaves out comes from Langfuse's own
environment variables: the host from ``LANGFUSE_BASE_URL`` or ``LANGFUSE_HOST``, the key pair
from ``LANGFUSE_PUBLIC_KEY`` / ``LANGFUSE_SECRET_KEY`` (HTTP basic auth, as Langfuse's public API
takes them), the environment from ``LANGFUSE_TRACING_ENVIRONMENT``. The scores go through the
shared delivery engine (``sinks.delivery``): queued, batched, retried, never raising.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .delivery import Delivery, DeliverySettings
from .langfuse_scores import run_scores, session_scores

if TYPE_CHECKING:
    from ..model import RunReport
    from ..sessions.model import SessionReport

__all__ = ["SCORES_PATH", "LangfuseSink", "LangfuseSinkConfig"]

_log = logging.getLogger("otel_tooleval.sinks")

SCORES_PATH = "/api/public/scores"

#: The config field each environment variable fills, in the order they are read.
_FROM_ENVIRONMENT = (("host", ("LANGFUSE_BASE_URL", "LANGFUSE_HOST")),
                     ("public_key", ("LANGFUSE_PUBLIC_KEY",)),
                     ("secret_key", ("LANGFUSE_SECRET_KEY",)),
                     ("environment", ("LANGFUSE_TRACING_ENVIRONMENT",)))


class LangfuseSinkConfig(BaseModel):
    """``emit: langfuse:``: where and how the scores are sent."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(
        default="", description="the Langfuse base URL, e.g. https://cloud.langfuse.com; "
                                "default: LANGFUSE_BASE_URL, else LANGFUSE_HOST")
    public_key: str = Field(default="", description="default: LANGFUSE_PUBLIC_KEY")
    secret_key: str = Field(default="", repr=False,
                            description="default: LANGFUSE_SECRET_KEY")
    environment: str | None = Field(
        default=None, description="the scores' Langfuse environment; default: "
                                  "LANGFUSE_TRACING_ENVIRONMENT, else the server's default")
    request_format: Literal["list", "object"] = Field(
        default="list",
        description="list: up to batch_size scores per POST /api/public/scores, as a JSON list "
                    "(Langfuse servers that take score batches, as the langfuse 5 SDK sends "
                    "them); object: one score per POST (older self-hosted servers)")
    max_queue: int = Field(default=10_000, ge=1, description="scores held for sending; "
                                                               "more are dropped (counted)")
    batch_size: int = Field(default=100, ge=1, le=1000, description="scores per request")
    flush_interval_s: float = Field(default=1.0, gt=0, allow_inf_nan=False,
                                    description="longest wait for a batch to fill")
    timeout_s: float = Field(default=5.0, gt=0, allow_inf_nan=False,
                             description="per request")
    max_attempts: int = Field(default=5, ge=1, description="tries per batch (retries on "
                                                            "connection errors, 429 and 5xx)")
    retry_deadline_s: float = Field(default=60.0, gt=0, allow_inf_nan=False,
                                    description="no retry starts later than this after "
                                                "the first try")

    @model_validator(mode="before")
    @classmethod
    def _from_environment(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for name, variables in _FROM_ENVIRONMENT:
            if data.get(name) in (None, ""):
                value = next((os.environ[v] for v in variables if os.environ.get(v)), None)
                if value is not None:
                    data[name] = value
        return data

    @model_validator(mode="after")
    def _complete(self) -> LangfuseSinkConfig:
        for name, variables in _FROM_ENVIRONMENT[:3]:
            if not getattr(self, name):
                raise ValueError(f"emit.langfuse.{name} is not set (nor {' or '.join(variables)})")
        if not self.host.startswith(("http://", "https://")):
            raise ValueError(f"emit.langfuse.host must be an http(s) URL, got {self.host!r}")
        return self

    def delivery_settings(self) -> DeliverySettings:
        return DeliverySettings(
            max_queue=self.max_queue,
            batch_size=self.batch_size if self.request_format == "list" else 1,
            flush_interval_s=self.flush_interval_s, timeout_s=self.timeout_s,
            max_attempts=self.max_attempts, retry_deadline_s=self.retry_deadline_s)

    def build_sink(self) -> LangfuseSink:
        return LangfuseSink(self)


def _list_body(path: str, payloads: Any) -> Any:
    return list(payloads)


def refused_scores(status: int, body: bytes, size: int) -> tuple[int, str | None]:
    """How many scores of a batch a Langfuse answer refused: HTTP 207 (a partial acceptance)
    carries ``{"accepted": n, "rejected": n, "errors": [{"status", "message" or "error"}]}``;
    any other 2xx accepted the whole batch. A 207 without a readable count refused all of it
    (nothing is counted as sent that the server did not say it kept)."""
    if status != 207:
        return 0, None
    answer = json.loads(body)
    errors = answer.get("errors") if isinstance(answer, dict) else None
    first = errors[0] if isinstance(errors, list) and errors else None
    reason = None
    if isinstance(first, dict):
        text = first.get("error") or first.get("message")
        reason = (f"HTTP {first.get('status')}: " if first.get("status") else "") + (
            str(text)[:200] if text else "no message")
    rejected = answer.get("rejected") if isinstance(answer, dict) else None
    if isinstance(rejected, int) and not isinstance(rejected, bool):
        return rejected, reason
    accepted = answer.get("accepted") if isinstance(answer, dict) else None
    if isinstance(accepted, int) and not isinstance(accepted, bool):
        return size - accepted, reason
    if isinstance(errors, list):
        return len(errors), reason
    return size, "an HTTP 207 answer without counts"


def _object_body(path: str, payloads: Any) -> Any:
    return payloads[0]


class LangfuseSink:
    """Sends each run's (and session's) verdicts to Langfuse as scores."""

    name = "langfuse"

    def __init__(self, config: LangfuseSinkConfig) -> None:
        self.config = config
        token = base64.b64encode(f"{config.public_key}:{config.secret_key}".encode()).decode()
        self._delivery = Delivery(
            self.name, config.host, headers={"Authorization": f"Basic {token}"},
            settings=config.delivery_settings(),
            body=_list_body if config.request_format == "list" else _object_body,
            refused=refused_scores)
        self._build_failed = False

    def submit(self, report: RunReport) -> None:
        """Queue the run's scores; never blocks, never raises."""
        try:
            self._delivery.put_many(SCORES_PATH, run_scores(report, self.config.environment))
        except Exception:  # noqa: BLE001 - a sink never raises into the grading side
            self._failed()

    def submit_session(self, report: SessionReport) -> None:
        """Queue the session's scores (Langfuse scores sessions by id); never raises."""
        try:
            self._delivery.put_many(SCORES_PATH,
                                    session_scores(report, self.config.environment))
        except Exception:  # noqa: BLE001 - a sink never raises into the grading side
            self._failed()

    def _failed(self) -> None:
        self._delivery.count("dropped.build")
        if not self._build_failed:
            self._build_failed = True
            _log.exception("langfuse: a report could not be turned into scores")

    def shutdown(self, timeout_s: float) -> bool:
        return self._delivery.shutdown(timeout_s)

    def stats(self) -> dict[str, int]:
        """``sent`` and ``dropped.<reason>``, counted in scores."""
        return self._delivery.stats()
