"""``ToolEvalServer``: the receivers, grading and forwarding of one ``serve`` process."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from .._version import __version__
from ..model import RunReport, SpanRecord
from ..readers.otlp_proto import record_from_proto
from ..sessions.model import SessionReport
from ..tail import BuffersFull, SpanSize, TailGrader
from .decoding import _JSON, Refused, parse_request
from .forwarder import _Forwarder
from .grpc_receiver import start_grpc, stop_grpc
from .http_receiver import HttpReceiver, start_http
from .metrics import MetricsEndpoint, serve_instruments
from .security import Certificates, TokenStore, load_tls
from .settings import ListenError, ServeOptions, parse_address
from .spans import (
    TRACE_BYTES,
    _annotate,
    _encode_held,
    _encode_session,
    _Held,
    _mark,
    _resource_of,
    span_size,
)

_log = logging.getLogger("otel_tooleval.serve")   # one logger for the whole service

_DROP_REASONS = ("late_span", "max_spans_per_trace", "max_open_runs", "shutdown")   # tail's


class ToolEvalServer:
    """The ``serve`` service: receivers, grading and forwarding, in this process.

    ``start()`` binds the ports (``grpc_port``/``http_port`` tell which, for port 0), or
    raises ``ListenError`` after stopping what it had started; ``stop()`` drains as SIGTERM
    does. Usable as a context manager. ``on_report`` is called with every graded run, on the
    grading thread, after the run's log line; ``on_session`` likewise with every graded
    session (``sessions:`` in the config: a run's report is filed under its session, across
    traces; a session ends when idle or at ``stop()``, and its span is forwarded).
    """

    def __init__(self, options: ServeOptions, *, meter_provider: Any = None,
                 logger_provider: Any = None,
                 on_report: Callable[[RunReport], None] | None = None,
                 on_session: Callable[[SessionReport], None] | None = None) -> None:
        self.options = options
        self.config = options.config
        # TLS and bearer tokens of both receivers; ValueError names a bad flag or file.
        self.tls = load_tls(options.tls_cert, options.tls_key, options.tls_client_ca)
        self.tokens = (TokenStore(options.bearer_token_file) if options.bearer_token_file
                       else None)
        self.certificates = Certificates(self.tls) if self.tls is not None else None
        self._providers: list[Any] = []
        self.metrics_endpoint: MetricsEndpoint | None = None
        if options.metrics:
            if meter_provider is not None:
                raise ValueError("--metrics: serve scrapes a MeterProvider of its own; pass "
                                 "no meter_provider with it (or add a PrometheusMetricReader "
                                 "to yours)")
            self.metrics_endpoint = MetricsEndpoint()
        forwarding = options.emit_telemetry and options.forward != "none"
        if (forwarding and (meter_provider is None or logger_provider is None)
                or self.metrics_endpoint is not None):
            meter_provider, logger_provider = self._telemetry(meter_provider, logger_provider,
                                                              forwarding)
        self.counts: Counter[str] = Counter()
        self._count_lock = threading.Lock()
        self._on_report_callback = on_report
        self._on_session_callback = on_session
        self.forwarder = _Forwarder(options)
        self.tail: TailGrader[Any] = TailGrader(   # items: (rs, ss, i, span), held: _Held
            self.config,
            forward=self._forward_held,
            annotate=self._annotate,
            decision_wait=options.decision_wait,
            max_spans=options.max_buffered_spans,
            max_bytes=options.max_buffered_bytes,
            meter_provider=meter_provider,
            logger_provider=logger_provider,
            on_report=self._on_report,
            forward_session=self._forward_session,
            resource_of=_resource_of,
            on_session=self._on_session,
            name="otel-tooleval-serve-grader",
            mark=self._mark,
            trace_bytes=TRACE_BYTES,
        )
        self.ready = False
        self.draining = False
        self._grpc_server: Any = None
        self._http: HttpReceiver | None = None
        self.grpc_port: int | None = None
        self.http_port: int | None = None
        self._stopped = threading.Event()
        self._shortfall: list[str] = []
        if meter_provider is not None:   # serve's own or the embedder's, never the global
            serve_instruments(meter_provider, self.stats,
                              {"buffered_bytes": options.max_buffered_bytes,
                               "queued_bytes": options.max_queued_bytes}, __version__)

    def _telemetry(self, meter_provider: Any, logger_provider: Any,
                   forwarding: bool) -> tuple[Any, Any]:
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource

        from ..providers import otlp_exporters

        readers: list[Any] = []
        log_exporter: Any = None
        if forwarding:
            target = self.options.forward
            endpoint = target if "://" in target else f"http://{target}"
            _, metric_exporter, log_exporter = otlp_exporters(self.options.forward_protocol,
                                                              endpoint)
            readers.append(PeriodicExportingMetricReader(metric_exporter,
                                                         export_interval_millis=10_000))
        if self.metrics_endpoint is not None:
            readers.append(self.metrics_endpoint.reader)
        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME")
                                    or "otel-tooleval-serve"})
        # shutdown_on_exit=False: ``stop`` shuts them down within its deadline; the SDK's
        # atexit hook would do it again, unbounded, at the end of the process.
        if meter_provider is None:
            meter_provider = MeterProvider(resource=resource, metric_readers=readers,
                                           shutdown_on_exit=False)
            self._providers.append(meter_provider)
        if logger_provider is None and log_exporter is not None:
            logger_provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
            logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter))
            self._providers.append(logger_provider)
        return meter_provider, logger_provider

    # -- lifecycle ----------------------------------------------------------------------------

    def reload(self) -> bool:
        """What SIGHUP does: re-read the bearer token file and the TLS files, each kept as it
        was when its files do not load (one WARNING line says why). True when all reloaded
        (and when there is nothing to reload)."""
        ok = True
        if self.tokens is not None:
            ok = self.tokens.reload() and ok
        if self.certificates is not None:
            ok = self.certificates.reload() and ok
        return ok

    def start(self) -> ToolEvalServer:
        try:
            if self.options.grpc:
                self._start_grpc(*parse_address(self.options.grpc, 4317))
            if self.options.http:
                self._start_http(*parse_address(self.options.http, 4318))
            if self.metrics_endpoint is not None and self.options.metrics:
                host, port = parse_address(self.options.metrics, 9464)
                try:
                    self.metrics_endpoint.listen(host, port)
                except OSError as exc:
                    raise ListenError(host, port, "--metrics", exc) from None
        except BaseException:
            self.stop(timeout=1.0)   # nothing was accepted: only threads to end
            raise
        self.ready = True
        return self

    def __enter__(self) -> ToolEvalServer:  # noqa: PYI034 - start() returns self
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _start_grpc(self, host: str, port: int) -> None:
        self._grpc_server, self.grpc_port = start_grpc(self, host, port)

    def _start_http(self, host: str, port: int) -> None:
        self._http = start_http(self, host, port)
        self.http_port = self._http.port

    def _close_listeners(self, grace: float, deadline: float) -> None:
        """Both receivers at once: no new connections, idle ones closed, requests in flight
        given ``grace`` seconds, then cut unanswered (the senders retry them). Returns when
        no receiver can ingest any more."""
        http, self._http = self._http, None
        if http is not None:
            # Requests cut at ``grace`` whose bodies were already being decoded finish first.
            http.begin_close(grace, hard=max(deadline - time.monotonic() - grace, 0.0))
        if self._grpc_server is not None:
            stop_grpc(self._grpc_server, grace)
            self._grpc_server = None
        if http is not None:
            http.wait_closed(max(deadline - time.monotonic(), 0.0) + 1.0)

    def stop(self, timeout: float | None = None) -> bool:
        """Stop accepting, decide and grade every open trace, forward everything, stop.

        Returns by the deadline (``timeout``, default ``options.shutdown_timeout``; the
        listeners may take a second more to close), whatever the next hop does: what could not
        be delivered by then is given up and told by ``undelivered()``. True when everything
        accepted was graded and forwarded, and serve's own log events and metrics exported.
        """
        if self._stopped.is_set():
            return True
        deadline = time.monotonic() + (self.options.shutdown_timeout if timeout is None
                                       else timeout)
        self.draining = True
        # Requests in flight get up to 5 s, at most a third of the time: grading and
        # forwarding what was answered 200 need the rest.
        self._close_listeners(min(5.0, max(deadline - time.monotonic(), 0.0) / 3), deadline)
        graded = self.tail.shutdown(max(deadline - time.monotonic(), 0.0))
        # Every verdict is recorded now: the providers export while the forwarder drains.
        telemetry = self._stop_telemetry(deadline)
        forwarded = self.forwarder.drain(deadline)
        exported = telemetry.wait(max(deadline - time.monotonic(), 0.0))
        self._shortfall = self._tell_shortfall(graded, exported)
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
        self.ready = False
        self._stopped.set()
        return graded and forwarded and exported

    def _stop_telemetry(self, deadline: float) -> threading.Event:
        """Shut serve's own meter and logger providers down on a daemon thread (the OTLP
        exporters' retries and timeouts are their own; a next hop that never answers would
        hold them past the deadline); the event is set when they are done."""
        done = threading.Event()
        providers = list(self._providers)
        self._providers.clear()

        from opentelemetry.sdk.metrics import MeterProvider

        def shut() -> None:
            for provider in providers:
                try:
                    millis = max(deadline - time.monotonic(), 0.0) * 1000
                    if isinstance(provider, MeterProvider):   # its last collection included
                        provider.shutdown(timeout_millis=millis)
                    else:   # LoggerProvider.shutdown takes no timeout: flush first
                        provider.force_flush(timeout_millis=millis)
                        provider.shutdown()
                except Exception:  # noqa: BLE001
                    _log.exception("otel-tooleval serve: telemetry shutdown failed")
            done.set()

        if providers:
            threading.Thread(target=shut, name="otel-tooleval-serve-telemetry-stop",
                             daemon=True).start()
        else:
            done.set()
        return done

    def _tell_shortfall(self, graded: bool, exported: bool) -> list[str]:
        parts = []
        undelivered = self.forwarder.undelivered
        if undelivered["queued"] or undelivered["in_flight"]:
            parts.append(f"{undelivered['queued'] + undelivered['in_flight']} spans not "
                         f"forwarded ({undelivered['queued']} queued, "
                         f"{undelivered['in_flight']} in flight, unanswered at the deadline)")
        if not graded:
            dropped = self.tail.stats().get("dropped.shutdown", 0)
            parts.append(f"{dropped} traces not graded (forwarded as they were)")
        if not exported:
            parts.append("serve's log events and metrics not all exported")
        return parts

    def undelivered(self) -> list[str]:
        """After ``stop``: what it did not deliver by its deadline, in words (each a part of
        the line ``serve`` prints at the end); empty when everything was."""
        return list(self._shortfall)

    def wait(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    # -- intake -------------------------------------------------------------------------------

    def full(self) -> bool:
        return self.tail.full() or self.forwarder.full()

    def _count(self, key: str, n: int = 1) -> None:
        with self._count_lock:
            self.counts[key] += n

    def ingest(self, request: Any, body: bytes | None) -> tuple[int, str]:
        """Take one ExportTraceServiceRequest; returns (rejected spans, error message).

        ``body`` is the request's own protobuf encoding, forwarded as it is when no span of
        it is held back. Held spans (possible run roots) are kept encoded, with their
        resource and scope, and the rest of the request is forwarded at once. Each span is
        counted against ``--max-buffered-bytes`` at what keeping it costs (``span_size``).

        Raises:
            Refused: 429 (retry) when the buffers hold something and this request, counted
                as if all its spans were held, would take them past the byte bound; nothing
                of it is kept or forwarded.
        """
        triples: list[tuple[SpanRecord, Any, SpanSize]] = []
        held: list[tuple[Any, int]] = []
        rejected: list[tuple[Any, int]] = []
        message = ""
        for rs in request.resource_spans:
            resource_size = rs.resource.ByteSize() + len(rs.schema_url)
            for ss in rs.scope_spans:
                scope_name = ss.scope.name
                headers = resource_size + ss.scope.ByteSize() + len(ss.schema_url)
                for i, span in enumerate(ss.spans):
                    try:
                        record = record_from_proto(span, scope_name)
                    except (ValueError, TypeError) as exc:
                        rejected.append((ss, i))
                        message = message or f"span {span.name!r}: {exc}"
                        continue
                    triples.append((record, (rs, ss, i, span), span_size(span, record, headers)))
        headers_of: dict[int, bytes] = {}

        def hold(item: Any) -> _Held:
            rs, ss, i, span = item
            held.append((ss, i))
            resource = headers_of.get(id(rs))
            if resource is None:
                copy = type(rs)()
                copy.resource.CopyFrom(rs.resource)
                copy.schema_url = rs.schema_url
                resource = headers_of[id(rs)] = copy.SerializeToString()
            scope = headers_of.get(id(ss))
            if scope is None:
                copy = type(ss)()
                copy.scope.CopyFrom(ss.scope)
                copy.schema_url = ss.schema_url
                scope = headers_of[id(ss)] = copy.SerializeToString()
            return _Held(resource, scope, span.SerializeToString())

        accepted = len(triples)
        try:
            forward_now = self.tail.accept(triples, hold, refuse_over=True)
        except BuffersFull:
            self._count("refused_full")
            raise Refused("buffers are full; retry later", retry=True, status=429) from None
        removed = held + rejected
        if removed:
            by_scope: dict[int, tuple[Any, list[int]]] = {}
            for ss, i in removed:
                by_scope.setdefault(id(ss), (ss, []))[1].append(i)
            for ss, drop in by_scope.values():
                for i in sorted(drop, reverse=True):
                    del ss.spans[i]
            body = None
        passing = accepted - len(held)
        if passing:
            self.forwarder.put(body if body is not None else request.SerializeToString(),
                               passing)
        evicted = [item for item in forward_now if isinstance(item, _Held)]
        if evicted:
            self.forwarder.put(*_encode_held(evicted))
        self._count("accepted_spans", accepted)
        self._count("accepted_requests")
        if rejected:
            self._count("rejected_spans", len(rejected))
        return len(rejected), message

    def _on_report(self, report: RunReport) -> None:
        """Count and log one graded run (grading thread), then the caller's ``on_report``."""
        passed = report.passed
        with self._count_lock:   # graded == passed + failed in every stats() read
            self.counts["runs_graded"] += 1
            self.counts["runs_passed" if passed else "runs_failed"] += 1
        run = report.run
        _log.info("otel-tooleval serve: run agent=%s trace=%s root=%s %s",
                  _agent_text(run.agent), run.trace_id_hex, run.root_span_id_hex,
                  "PASS" if passed else f"FAIL (failed: {', '.join(report.failed)})")
        if self._on_report_callback is not None:
            self._on_report_callback(report)

    def _on_session(self, report: SessionReport) -> None:
        """Count and log one graded session (grading thread), then the caller's callback."""
        passed = report.passed
        with self._count_lock:
            self.counts["sessions_graded"] += 1
            self.counts["sessions_passed" if passed else "sessions_failed"] += 1
        _log.info("otel-tooleval serve: session agent=%s %s=%s runs=%d ended=%s %s",
                  _agent_text(report.agent), report.key.attribute,
                  _agent_text(report.key.value), len(report.runs), report.ended,
                  "PASS" if passed else f"FAIL (failed: {', '.join(report.failed)})")
        if self._on_session_callback is not None:
            self._on_session_callback(report)

    def _forward_session(self, span: Any) -> None:
        """A graded session's span, to the next hop like the roots (before the forwarder
        drains: ``stop`` ends the sessions in ``tail.shutdown``)."""
        self.forwarder.put(_encode_session(span), 1)

    def _forward_held(self, items: list[Any]) -> None:
        self.forwarder.put(*_encode_held(items))

    def _annotate(self, item: Any, record: SpanRecord, report: RunReport) -> Any:
        return _annotate(item, record, report, self.config)

    def _mark(self, item: Any, record: SpanRecord, graders: Sequence[str]) -> Any:
        return _mark(item, graders)

    def export(self, body: bytes, content_type: str) -> tuple[int, str]:
        """Check, parse and ingest one request body (the receivers' common path).

        Raises:
            Refused: draining, full (retry), or a body that does not parse (bad request).
        """
        self.admit()
        return self.ingest_body(body, content_type)

    def admit(self) -> None:
        """Whether a request may be read at all: not while starting or draining (503), nor
        while the buffers are full (429).

        Raises:
            Refused: with ``retry`` set.
        """
        if self.draining or not self.ready:
            raise Refused("the server is shutting down" if self.draining else
                          "the server is starting; retry", retry=True, status=503)
        if self.full():
            self._count("refused_full")
            raise Refused("buffers are full; retry later", retry=True, status=429)

    def ingest_body(self, body: bytes, content_type: str) -> tuple[int, str]:
        """Parse and ingest a body that ``admit`` let in; a request that was being read when
        draining began is taken (the listeners wait for it before the traces are decided).

        Raises:
            Refused: full (retry), or a body that does not parse (bad request).
        """
        if self.full():
            self._count("refused_full")
            raise Refused("buffers are full; retry later", retry=True, status=429)
        try:
            request = parse_request(body, content_type)
        except ValueError as exc:
            self._count("refused_malformed")
            raise Refused(f"malformed ExportTraceServiceRequest: {exc}") from None
        return self.ingest(request, body if content_type != _JSON else None)

    def stats(self) -> dict[str, Any]:
        """Counters (flat); ``runs_graded``/``runs_passed``/``runs_failed`` always present,
        ``sessions_graded``/``sessions_passed``/``sessions_failed`` with ``sessions:``."""
        with self._count_lock:
            out: dict[str, Any] = {"runs_graded": 0, "runs_passed": 0, "runs_failed": 0,
                                   **self.counts}
        if self.tail.sessions is not None:
            for key in ("sessions_graded", "sessions_passed", "sessions_failed"):
                out.setdefault(key, 0)
        out.update(self.tail.stats())
        out.update(self.forwarder.counts)
        out["queued_bytes"] = self.forwarder.queued_bytes
        out["ready"] = self.ready and not self.draining
        return out

    def health(self) -> tuple[int, dict[str, Any]]:
        """``GET /healthz``: 200 while accepting, 503 while starting or draining; the counters
        and drops by reason."""
        ready = self.ready and not self.draining
        stats = self.stats()
        dropped = dict.fromkeys(_DROP_REASONS, 0)
        dropped.update({k.removeprefix("dropped."): v for k, v in stats.items()
                        if k.startswith("dropped.")})
        doc = {"status": "ready" if ready else ("draining" if self.draining else "starting"),
               **{k: v for k, v in stats.items() if isinstance(v, (int, float))},
               "dropped": dropped}
        return (200 if ready else 503), doc



def _agent_text(agent: str | None) -> str:
    """The agent name (or session id) for a ``key=value`` log line: ``-`` when unknown, quoted
    (a JSON string, ASCII) when it has spaces, quotes, ``=`` or unprintable characters
    (controls, bidi overrides), so that a ``ToolEvalServer`` logging to a handler of its
    embedder's does not write them raw either."""
    if not agent:
        return "-"
    if not agent.isprintable() or any(c.isspace() or c in "\"'=" for c in agent):
        return json.dumps(agent)   # ASCII: controls and bidi characters as \uXXXX
    return agent
