"""Arize Phoenix: the verdicts as annotations, where Phoenix's UI shows evaluations.

Phoenix reads no ``gen_ai.evaluation.*`` event or ``tooleval.*`` attribute into its annotation
columns, filters (``annotations['no-secrets'].label == 'fail'``) or summaries; those show only
what arrives through its REST API. Per run this sink sends, with ``annotator_kind`` CODE:

- on the run's root span, one span annotation per grader, named after the grader: label
  ``pass`` / ``fail`` / ``error``, the grader's score and explanation, metadata with the
  grader's type and a summary of its details;
- on the trace, one trace annotation (``run_annotation``, ``tooleval`` by default) with the
  run's overall verdict and mean score;
- on each tool span a failing grader lists under ``details.violations``, a span annotation
  named after that grader with the reasons;
- per session (``submit_session``), a session annotation, where the server has the endpoint.

Every annotation carries the same ``identifier``: Phoenix keeps one annotation per (name,
span / trace / session, identifier), so a second delivery of a run updates rather than
duplicates. Delivery is ``sinks.delivery``'s: off the caller's thread, bounded, retried,
every drop counted.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from ..model import GradeResult, RunReport
from ..sessions.model import SessionReport
from ..violations import violations_of
from .base import details_summary
from .delivery import Delivery, DeliverySettings

__all__ = ["PhoenixSink", "PhoenixSinkConfig", "run_annotations", "session_annotation"]

_log = logging.getLogger("otel_tooleval.sinks")

SPAN_ANNOTATIONS = "/v1/span_annotations"
TRACE_ANNOTATIONS = "/v1/trace_annotations"
SESSION_ANNOTATIONS = "/v1/session_annotations"
ENDPOINT_VARIABLE = "PHOENIX_COLLECTOR_ENDPOINT"
API_KEY_VARIABLE = "PHOENIX_API_KEY"


class PhoenixSinkConfig(BaseModel):
    """``emit.phoenix``: annotate the graded runs in Arize Phoenix (``docs/phoenix.md``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str = Field(
        default="", validate_default=True,
        description="Phoenix's base URL (http://localhost:6006); default: "
                    "PHOENIX_COLLECTOR_ENDPOINT (a trailing /v1/traces is taken off)")
    api_key: SecretStr | None = Field(
        default=None, validate_default=True,
        description="sent as a bearer token; default: PHOENIX_API_KEY")
    headers: dict[str, str] = Field(default_factory=dict,
                                    description="extra request headers (never logged)")
    run_annotation: str = Field(
        default="tooleval", min_length=1,
        description="the name of the trace (and session) annotation of the overall verdict")
    identifier: str = Field(
        default="otel-tooleval", min_length=1,
        description="the identifier of every annotation: a repeat with it updates")
    violations: bool = Field(default=True, description="annotate the offending tool spans")
    sessions: bool = Field(default=True, description="annotate sessions (Phoenix sessions "
                                                     "are read from session.id)")
    max_queue: int = Field(default=10_000, ge=1, description="annotations held at most")
    batch_size: int = Field(default=100, ge=1, le=1000, description="annotations per POST")
    flush_interval_s: float = Field(default=1.0, gt=0, le=60, allow_inf_nan=False)
    timeout_s: float = Field(default=5.0, gt=0, le=300, allow_inf_nan=False,
                             description="per request")
    max_attempts: int = Field(default=5, ge=1, le=20)
    retry_deadline_s: float = Field(default=60.0, gt=0, le=3600, allow_inf_nan=False,
                                    description="a batch is retried for at most this long")

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        value = (value or os.environ.get(ENDPOINT_VARIABLE, "")).strip()
        if not value:
            raise ValueError(f"Phoenix's URL is needed: set emit.phoenix.endpoint or "
                             f"{ENDPOINT_VARIABLE}")
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"must be an http:// or https:// URL, not {value!r}")
        value = value.rstrip("/")
        return value.removesuffix("/v1/traces")

    @field_validator("api_key")
    @classmethod
    def _api_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None and os.environ.get(API_KEY_VARIABLE):
            return SecretStr(os.environ[API_KEY_VARIABLE])
        return value

    def settings(self) -> DeliverySettings:
        return DeliverySettings(
            max_queue=self.max_queue, batch_size=self.batch_size,
            flush_interval_s=self.flush_interval_s, timeout_s=self.timeout_s,
            max_attempts=self.max_attempts, retry_deadline_s=self.retry_deadline_s)

    def request_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        if self.api_key is not None:
            headers["Authorization"] = f"Bearer {self.api_key.get_secret_value()}"
        return headers

    def build_sink(self) -> PhoenixSink:
        return PhoenixSink(self)


def _label(result: GradeResult) -> Literal["pass", "fail", "error"]:
    if result.error is not None:
        return "error"
    return "pass" if result.passed else "fail"


def _annotation(name: str, label: str, score: float, explanation: str,
                metadata: dict[str, Any], identifier: str) -> dict[str, Any]:
    return {"name": name, "annotator_kind": "CODE", "identifier": identifier,
            "result": {"label": label, "score": score, "explanation": explanation},
            "metadata": metadata}


def _overall(results: tuple[GradeResult, ...], passed: bool) -> tuple[str, str]:
    if any(r.error is not None for r in results):
        label = "error"
    else:
        label = "pass" if passed else "fail"
    failed = [r.name for r in results if not r.passed]
    explanation = (f"failed: {', '.join(failed)}" if failed
                   else f"{len(results)} of {len(results)} graders passed")
    return label, explanation


def run_annotations(report: RunReport, config: PhoenixSinkConfig,
                    ) -> list[tuple[str, dict[str, Any]]]:
    """A run's annotations as (path, payload) pairs for Phoenix's REST API."""
    run = report.run
    identifier = config.identifier
    root = run.root_span_id_hex
    trace = run.trace_id_hex
    context = {"trace_id": trace, "agent": run.agent, "case": report.case}
    out: list[tuple[str, dict[str, Any]]] = []
    for result in report.results:
        metadata = {"source": "otel-tooleval", "grader_type": result.type,
                    "passed": result.passed,
                    "details": details_summary(result.details, "_count"), **context}
        if result.error is not None:
            metadata["error"] = result.error
        out.append((SPAN_ANNOTATIONS, {
            "span_id": root, **_annotation(result.name, _label(result), result.score,
                                           result.explanation, metadata, identifier)}))
        if config.violations:
            out.extend(_violation_annotations(result, context, identifier))
    label, explanation = _overall(report.results, report.passed)
    out.append((TRACE_ANNOTATIONS, {"trace_id": trace, **_annotation(
        config.run_annotation, label, report.score, explanation,
        {"source": "otel-tooleval", "root_span_id": root, "graders": len(report.results),
         "failed": list(report.failed), "tool_calls": len(run.calls), **context},
        identifier)}))
    return out


def _violation_annotations(result: GradeResult, context: Mapping[str, Any],
                           identifier: str) -> list[tuple[str, dict[str, Any]]]:
    """One span annotation per offending tool span of a failing result, its reasons joined."""
    by_span: dict[str, list[Mapping[str, Any]]] = {}
    for entry in violations_of(result):
        span_id = entry.get("span_id")
        if isinstance(span_id, str) and len(span_id) == 16:
            by_span.setdefault(span_id, []).append(entry)
    out = []
    for span_id, entries in by_span.items():
        reasons = list(dict.fromkeys(str(e.get("reason") or "violation") for e in entries))
        metadata = {"source": "otel-tooleval", "grader_type": result.type, "violation": True,
                    "tool": entries[0].get("tool"), "call": entries[0].get("call"), **context}
        out.append((SPAN_ANNOTATIONS, {"span_id": span_id, **_annotation(
            result.name, "fail", 0.0, "; ".join(reasons), metadata, identifier)}))
    return out


def session_annotation(report: SessionReport, config: PhoenixSinkConfig,
                       ) -> tuple[str, dict[str, Any]]:
    """A session's overall verdict as a session annotation (session id: the key's value)."""
    label, explanation = _overall(report.results, report.passed)
    graders = {r.name: {"label": _label(r), "score": r.score} for r in report.results}
    return SESSION_ANNOTATIONS, {"session_id": report.key.value, **_annotation(
        config.run_annotation, label, report.score, explanation,
        {"source": "otel-tooleval", "session_attribute": report.key.attribute,
         "agent": report.agent, "runs": len(report.runs), "graders": graders,
         "ended": report.ended}, config.identifier)}


class PhoenixSink:
    """Annotations to Phoenix's REST API, delivered by one ``Delivery`` (``sinks.delivery``)."""

    name = "phoenix"

    def __init__(self, config: PhoenixSinkConfig) -> None:
        self.config = config
        # sync=false: Phoenix queues the insert and answers at once (its default)
        self._delivery = Delivery(self.name, config.endpoint, config.request_headers(),
                                  config.settings())

    def submit(self, report: RunReport) -> None:
        try:
            pairs = run_annotations(report, self.config)
        except Exception:  # noqa: BLE001 - a report this sink cannot read is a counted drop
            self._delivery.count("dropped.build")
            _log.debug("phoenix: a run's annotations could not be built", exc_info=True)
            return
        self._put(pairs)

    def submit_session(self, report: SessionReport) -> None:
        if not self.config.sessions:
            return
        try:
            pair = session_annotation(report, self.config)
        except Exception:  # noqa: BLE001 - as in submit
            self._delivery.count("dropped.build")
            return
        self._put([pair])

    def _put(self, pairs: list[tuple[str, dict[str, Any]]]) -> None:
        by_path: dict[str, list[dict[str, Any]]] = {}
        for path, payload in pairs:
            by_path.setdefault(path, []).append(payload)
        for path, payloads in by_path.items():
            self._delivery.put_many(path, payloads)

    def shutdown(self, timeout_s: float) -> bool:
        return self._delivery.shutdown(timeout_s)

    def stats(self) -> dict[str, int]:
        return self._delivery.stats()

