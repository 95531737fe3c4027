"""The OTLP/HTTP receiver on uvicorn: ``POST /v1/traces`` (protobuf and JSON), ``GET /healthz``.

uvicorn runs the connections on an asyncio loop in a thread of its own (no signal handlers:
the process owns those); ``_OtlpHttpApp`` is a plain ASGI callable. Everything that decides
whether a body is read at all (draining, buffers full, ``--max-body-bytes``, the in-flight
byte budget) is decided on the request's headers, so a refused body is never buffered; the
CPU work (decompress, parse, ingest) runs in a pool of ``workers`` threads so that the loop
keeps accepting connections and timing them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .decoding import _JSON, _PROTOBUF, _RETRY_AFTER_SECONDS, Refused, _decompress, _one_line
from .receiver_app import ReceiverApp
from .security import HTTP_CHALLENGE, authorized, refusal_reason, uvicorn_ssl_options
from .settings import ListenError
from .throttle import refusal_of

_log = logging.getLogger("otel_tooleval.serve")   # one logger for the whole service

# The package is installed from a clone (it is not on PyPI): the hint is what works there.
MISSING_UVICORN = ("the OTLP/HTTP receiver needs uvicorn: pip install -e '.[serve]' in the "
                   "otel-tooleval clone (or pip install 'uvicorn>=0.30,<1'), or pass --http off")
_MAX_HEADER_BYTES = 64 * 1024   # request line and headers together
_HEALTH_PATHS = ("/healthz", "/readyz", "/")
_GRPC_CODES = {400: 3, 401: 16, 411: 3, 413: 8, 429: 8, 503: 14}   # google.rpc.Code of an HTTP answer


@dataclass(frozen=True, slots=True)
class _Answer:
    status: int
    payload: bytes
    content_type: str
    retry: bool = False   # Retry-After
    close: bool = False   # the body was not read (whole): the connection ends after this
    challenge: bool = False   # 401: WWW-Authenticate names the Bearer scheme


def _error(status: int, message: str, content_type: str, *, retry: bool = False,
           close: bool = False) -> _Answer:
    """An error answer as OTLP/HTTP specifies: a google.rpc.Status in the request's encoding."""
    from google.rpc import status_pb2

    code = _GRPC_CODES.get(status, 2)
    message = _one_line(message)
    if content_type == _JSON:
        payload = json.dumps({"code": code, "message": message}).encode()
    else:
        payload = status_pb2.Status(code=code, message=message).SerializeToString()
        content_type = _PROTOBUF
    return _Answer(status, payload, content_type, retry, close)


class _OtlpHttpApp:
    """The ASGI callable: routes, backpressure on the headers, the body read within limits."""

    def __init__(self, app: ReceiverApp, pool: ThreadPoolExecutor) -> None:
        self.app = app
        self.pool = pool
        self.max_body = app.options.max_body_bytes
        self.max_inflight = app.options.max_inflight_bytes
        self.inflight = 0   # bytes of bodies being read, decoded and ingested (loop thread only)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        client = scope["client"][0] if scope.get("client") else "?"
        headers = {name.decode("latin-1"): value.decode("latin-1")
                   for name, value in scope["headers"]}
        path, method = scope["path"], scope["method"]
        has_body = "transfer-encoding" in headers or headers.get("content-length", "0") != "0"
        if path in _HEALTH_PATHS and method in ("GET", "HEAD"):
            status, doc = self.app.health()
            await _send(send, _Answer(status, json.dumps(doc).encode(), _JSON, close=has_body))
            return
        if path != "/v1/traces":
            await _send(send, _error(404, "serve receives traces only, at /v1/traces", _JSON,
                                     close=has_body))
            return
        if method != "POST":
            await _send(send, _error(405, "use POST for /v1/traces", _JSON, close=has_body))
            return
        content_type = (headers.get("content-type") or _PROTOBUF).split(";")[0].strip()
        authorization = headers.get("authorization")
        if not authorized(self.app.tokens, authorization):   # before anything about the body
            self.app._count("refused_unauthenticated")
            _log.warning("otel-tooleval serve: request from %s refused: 401 %s", client,
                         refusal_reason(authorization), extra=refusal_of("http-401"))
            refusal = _error(401, "a valid bearer token is required (Authorization: Bearer "
                                  "TOKEN)", content_type if content_type == _JSON else _PROTOBUF,
                             close=has_body)
            await _send(send, dataclasses.replace(refusal, challenge=True))
            return
        answer = self._admit(headers, content_type)
        if answer is not None:
            self._log_refused(client, answer)
            await _send(send, answer)
            return
        length_text = headers.get("content-length")
        reserved = [int(length_text) if length_text is not None else 0]   # grows if chunked
        self.inflight += reserved[0]
        try:
            body = await self._receive(receive, content_type, reserved, length_text is None)
            if body is None:   # the client went away, or was cut by --read-timeout
                return
            answer = body if isinstance(body, _Answer) else await (
                asyncio.get_running_loop().run_in_executor(
                    self.pool, self._decode_and_ingest, body, content_type,
                    headers.get("content-encoding")))
        finally:
            self.inflight -= reserved[0]
        self._log_refused(client, answer)
        await _send(send, answer)

    def _admit(self, headers: dict[str, str], content_type: str) -> _Answer | None:
        """The answer when the body is not to be read, decided on the headers alone."""
        if content_type not in (_PROTOBUF, _JSON):
            return _error(415, f"unsupported Content-Type {content_type!r}: use {_PROTOBUF} or "
                               f"{_JSON}", _JSON, close=True)
        try:
            self.app.admit()
        except Refused as refused:
            return _error(refused.status, str(refused), content_type, retry=True, close=True)
        length_text = headers.get("content-length")
        if length_text is None:
            if "transfer-encoding" not in headers:
                return _error(411, "a Content-Length header is required", content_type,
                              close=True)
            return None   # chunked: the limits are enforced while reading
        length = int(length_text)   # h11 has checked it is a number
        if length > self.max_body:
            return _error(413, f"body of {length} bytes is over the limit of {self.max_body}",
                          content_type, close=True)
        if self.inflight and self.inflight + length > self.max_inflight:
            self.app._count("refused_inflight")
            return _error(429, f"{self.inflight} bytes of requests in flight; retry later",
                          content_type, retry=True, close=True)
        return None

    async def _receive(self, receive: Any, content_type: str, reserved: list[int],
                       chunked: bool) -> bytes | _Answer | None:
        """The whole body; an answer when a chunked body goes past a limit (its bytes are
        added to ``reserved`` and the in-flight count as they come); None when the
        connection ends first."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if chunked and chunk:
                if size > self.max_body:
                    return _error(413, f"body over the limit of {self.max_body} bytes",
                                  content_type, close=True)
                if self.inflight + len(chunk) > self.max_inflight and self.inflight > reserved[0]:
                    self.app._count("refused_inflight")
                    return _error(429, f"{self.inflight} bytes of requests in flight; retry "
                                       "later", content_type, retry=True, close=True)
                self.inflight += len(chunk)
                reserved[0] += len(chunk)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _decode_and_ingest(self, body: bytes, content_type: str,
                           encoding: str | None) -> _Answer:
        """Decompress, parse and ingest one body (a pool thread)."""
        try:
            body = _decompress(body, encoding, self.max_body)
            rejected, message = self.app.ingest_body(body, content_type)
        except Refused as refused:
            return _error(refused.status, str(refused), content_type, retry=refused.retry)
        except Exception as exc:  # noqa: BLE001 - answer, never crash the server
            _log.exception("otel-tooleval serve: export failed")
            return _error(500, f"{type(exc).__name__}: {exc}", content_type)
        from .decoding import _response

        response = _response(rejected, message)
        if content_type == _JSON:
            from google.protobuf import json_format

            return _Answer(200, json.dumps(json_format.MessageToDict(response)).encode(), _JSON)
        return _Answer(200, response.SerializeToString(), _PROTOBUF)

    def _log_refused(self, client: str, answer: _Answer) -> None:
        # One line per rejected request; 429/503 are counted in /healthz (they come in floods).
        if answer.status >= 400 and not answer.retry:
            _log.warning("otel-tooleval serve: request from %s refused: %d %s", client,
                         answer.status, _one_line(_message_of(answer)),
                         extra=refusal_of(f"http-{answer.status}"))


def _message_of(answer: _Answer) -> str:
    if answer.content_type == _JSON:
        try:
            return str(json.loads(answer.payload).get("message", ""))
        except ValueError:
            return ""
    from google.rpc import status_pb2

    return str(status_pb2.Status.FromString(answer.payload).message)


async def _send(send: Any, answer: _Answer) -> None:
    headers = [(b"Content-Type", answer.content_type.encode()),
               (b"Content-Length", b"%d" % len(answer.payload))]
    if answer.retry:
        headers.append((b"Retry-After", b"%d" % _RETRY_AFTER_SECONDS))
    if answer.close:
        headers.append((b"Connection", b"close"))
    if answer.challenge:
        headers.append((HTTP_CHALLENGE[0].encode(), HTTP_CHALLENGE[1].encode()))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.payload})


class HttpReceiver:
    """A serving uvicorn in its own thread and event loop; ``close`` stops it within a bound."""

    def __init__(self, app: ReceiverApp, sock: socket.socket) -> None:
        import uvicorn

        from .http_connection import ConnectionLimits, _Server

        options = app.options
        self.pool = ThreadPoolExecutor(max_workers=options.workers,
                                       thread_name_prefix="otel-tooleval-http")
        self.asgi = _OtlpHttpApp(app, self.pool)
        limits = ConnectionLimits(options.read_timeout, options.max_connections,
                                  options.peer_share(), app._count)
        self.config = uvicorn.Config(
            self.asgi, http="h11", ws="none", lifespan="off", interface="asgi3", log_config=None,
            access_log=False, proxy_headers=False, server_header=False, backlog=options.backlog,
            timeout_keep_alive=options.idle_timeout,  # type: ignore[arg-type]
            h11_max_incomplete_event_size=_MAX_HEADER_BYTES, **uvicorn_ssl_options(app.tls))
        certificates = app.certificates
        if certificates is not None:
            # uvicorn's SSLContext, made now rather than when serving starts, so that every
            # handshake passes through the certificates' reload hook; reloads build theirs
            # with uvicorn's own factory and settings.
            from uvicorn.config import create_ssl_context

            config = self.config
            config.load()
            assert config.ssl is not None
            config.ssl.sni_callback = certificates.sni_callback
            certificates.http_builder = lambda tls: create_ssl_context(
                certfile=tls.cert, keyfile=tls.key, password=None,
                ssl_version=config.ssl_version, cert_reqs=config.ssl_cert_reqs,
                ca_certs=tls.client_ca, ciphers=config.ssl_ciphers)
        self.server = _Server(self.config, limits)
        self.sock = sock
        self.port = int(sock.getsockname()[1])
        self._started = threading.Event()
        self.server.on_started = self._started.set
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="otel-tooleval-http",
                                       daemon=True)

    def start(self) -> None:
        self.thread.start()
        if not self._started.wait(30):
            raise RuntimeError("the OTLP/HTTP receiver did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self.server.serve(sockets=[self.sock]))
        finally:
            self._started.set()   # start() does not wait for a server that failed
            self.loop.close()

    def begin_close(self, grace: float, hard: float) -> None:
        """Stop accepting and close idle connections; requests in flight get ``grace``
        seconds (see ``_Server``)."""
        self.server.grace, self.server.hard = grace, hard
        self.server.should_exit = True   # read by uvicorn's loop within 0.1 s

    def wait_closed(self, timeout: float) -> bool:
        self.thread.join(timeout)
        self.pool.shutdown(wait=False)
        return not self.thread.is_alive()


def _listen(host: str, port: int, backlog: int) -> socket.socket:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def start_http(app: ReceiverApp, host: str, port: int) -> HttpReceiver:
    """A serving HTTP receiver for ``app`` on ``host:port`` (``.port`` tells which).

    Raises:
        ListenError: the address cannot be bound.
        RuntimeError: uvicorn is not installed.
    """
    try:
        import uvicorn  # noqa: F401
    except ImportError:
        raise RuntimeError(MISSING_UVICORN) from None
    try:
        sock = _listen(host, port, app.options.backlog)
    except OSError as exc:
        raise ListenError(host, port, "--http", exc) from None
    receiver = HttpReceiver(app, sock)
    receiver.start()
    return receiver
