"""``OTLPJsonFileExporter``: spans to a file as the OpenTelemetry Collector's ``file`` exporter
writes them, so a program (or a test suite) records traces without a collector and
``otel-tooleval grade`` reads them afterwards.

The format is OTLP/JSON: one ``ExportTraceServiceRequest`` per line, one line per ``export()``
call. The spans are encoded by the SDK's own OTLP protobuf encoder and rendered by protobuf's
``json_format``, which follows the OTLP/JSON rules (camelCase keys, 64-bit integers as strings,
enums as numbers with ``use_integers_for_enums``) but one: ids are bytes, which it writes as
base64, where OTLP/JSON wants lowercase hex. Those few fields are rewritten.

Also the ``opentelemetry_traces_exporter`` entry point ``tooleval_file``: built with no
arguments, it writes to ``TOOLEVAL_TRACES_FILE`` (default ``traces.jsonl`` in the working
directory at start-up). It records; it does not grade (docs/file-exporter.md says why and how
to grade live as well).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import weakref
from collections.abc import Sequence
from typing import IO, Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["DEFAULT_TRACES_FILE", "ENV_TRACES_FILE", "OTLPJsonFileExporter", "otlp_json_line"]

_log = logging.getLogger(__name__)

ENV_TRACES_FILE = "TOOLEVAL_TRACES_FILE"
DEFAULT_TRACES_FILE = "traces.jsonl"
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _hex(value: Any) -> Any:
    return base64.b64decode(value).hex() if isinstance(value, str) else value


def _ids_to_hex(item: dict[str, Any]) -> None:
    for key in _ID_FIELDS:
        if key in item:
            item[key] = _hex(item[key])


def otlp_json_line(spans: Sequence[ReadableSpan]) -> str:
    """``spans`` as one line of OTLP/JSON (an ``ExportTraceServiceRequest``), newline included."""
    doc = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource_spans in doc.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                _ids_to_hex(span)
                for link in span.get("links", ()):
                    _ids_to_hex(link)
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n"


def _reset_lock_after_fork(ref: weakref.ref[OTLPJsonFileExporter]) -> None:
    # A lock held by another thread at fork time would never be released in the child.
    exporter = ref()
    if exporter is not None:
        exporter._lock = threading.Lock()


class OTLPJsonFileExporter(SpanExporter):
    """Append each export as one OTLP/JSON line to a file, flushed at once.

    Safe to call from several threads (a ``BatchSpanProcessor``'s, the application's): each
    export is written as one whole line. Never raises into the application: a file that cannot
    be opened or written is logged once, and those exports return ``FAILURE``.

    Args:
        path: the file, created if missing and appended to. None (as the ``tooleval_file``
            entry point builds it) reads ``TOOLEVAL_TRACES_FILE``, default ``traces.jsonl``;
            a relative path is taken from the working directory at construction.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        if path is None:
            path = os.environ.get(ENV_TRACES_FILE, "").strip() or DEFAULT_TRACES_FILE
        self.path = os.path.abspath(os.fspath(path))
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._closed = False
        self._complained = False
        if hasattr(os, "register_at_fork"):
            ref = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: _reset_lock_after_fork(ref))

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed:
            return SpanExportResult.FAILURE
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            line = otlp_json_line(spans)
        except Exception as exc:  # noqa: BLE001 - never raise into the application
            self._complain("could not encode %d span(s) for %s: %s: %s", len(spans), self.path,
                           type(exc).__name__, exc)
            return SpanExportResult.FAILURE
        with self._lock:
            if self._closed:
                return SpanExportResult.FAILURE
            try:
                if self._file is None:
                    self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
                self._file.write(line)
                self._file.flush()
            except (OSError, ValueError) as exc:
                self._complain("cannot write traces to %s, spans are dropped: %s",
                               self.path, exc)
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def _complain(self, message: str, *args: object) -> None:
        if not self._complained:
            self._complained = True
            _log.error("otel-tooleval: " + message + " (logged once)", *args)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Every export is flushed as it is written: nothing is pending."""
        return True

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            handle, self._file = self._file, None
        if handle is not None:
            try:
                handle.close()
            except OSError as exc:
                _log.error("otel-tooleval: closing %s: %s", self.path, exc)
