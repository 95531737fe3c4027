"""The OTLP/HTTP receiver: ``POST /v1/traces`` (protobuf and JSON) and ``GET /healthz``."""

from __future__ import annotations

import json
import logging
import math
import socket
import sys
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from .decoding import (
    _JSON,
    _PROTOBUF,
    _RETRY_AFTER_SECONDS,
    Refused,
    _decompress,
    _one_line,
    _response,
)
from .options import ListenError

if TYPE_CHECKING:
    from .server import ToolEvalServer

_log = logging.getLogger("otel_tooleval.serve")   # one logger for the whole service


def start_http(app: ToolEvalServer, host: str, port: int) -> tuple[Any, threading.Thread, int]:
    """A serving HTTP receiver for ``app`` on ``host:port``, its thread and the port it bound.

    Raises:
        ListenError: the address cannot be bound.
    """
    try:
        server = _HttpServer((host, port), _Handler, app)
    except OSError as exc:   # the server closed its socket
        raise ListenError(host, port, "--http", exc) from None
    thread = threading.Thread(target=server.serve_forever, name="otel-tooleval-http",
                              kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    return server, thread, server.server_address[1]


class _HttpServer(ThreadingHTTPServer):
    """``http.server`` with a deadline per request on every connection.

    A connection waiting for the client (for the next request on a keep-alive connection,
    for the rest of its headers or body) is shut down ``read_timeout`` seconds after the wait
    began, however slowly bytes trickle in, so no client holds a thread longer; the check runs
    in ``serve_forever``'s loop. ``close_waiting`` shuts down every waiting connection at once
    (shutdown). A connection whose request is being answered is not cut.
    """

    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 app: ToolEvalServer) -> None:
        self.app = app
        self.read_timeout = app.options.read_timeout
        self._waiting: dict[socket.socket, float] = {}   # connection -> deadline
        self._waiting_lock = threading.Lock()
        self._closing = False
        super().__init__(address, handler)

    def wait_for_client(self, conn: socket.socket) -> bool:
        """``conn`` now waits for its client; False when the server is closing."""
        with self._waiting_lock:
            if self._closing:
                return False
            self._waiting[conn] = time.monotonic() + self.read_timeout
            return True

    def take_request(self, conn: socket.socket) -> bool:
        """``conn`` has a whole request to answer; False when it was cut before."""
        with self._waiting_lock:
            return self._waiting.pop(conn, None) is not None

    def forget(self, conn: socket.socket) -> None:
        with self._waiting_lock:
            self._waiting.pop(conn, None)

    def service_actions(self) -> None:
        self._cut(time.monotonic())

    def close_waiting(self) -> None:
        with self._waiting_lock:
            self._closing = True
        self._cut(math.inf)

    def _cut(self, now: float) -> None:
        # Under the lock, so that a request is either taken or cut, never both.
        with self._waiting_lock:
            for conn in [c for c, deadline in self._waiting.items() if deadline <= now]:
                del self._waiting[conn]
                try:
                    conn.shutdown(socket.SHUT_RDWR)   # the reading thread sees the end
                except OSError:
                    pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):   # a client gone or too slow to read its answer
            _log.debug("otel-tooleval serve: connection from %s: %s", client_address[0],
                       _one_line(str(exc) or type(exc).__name__))
        else:
            _log.exception("otel-tooleval serve: request from %s failed", client_address[0])


class _Handler(BaseHTTPRequestHandler):
    server: _HttpServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.read_timeout)   # each operation, writes too

    def finish(self) -> None:
        self.server.forget(self.connection)
        super().finish()

    def handle_one_request(self) -> None:
        if not self.server.wait_for_client(self.connection):
            self.close_connection = True
            return
        super().handle_one_request()

    def do_GET(self) -> None:
        if not self.server.take_request(self.connection):
            self.close_connection = True
            return
        if self.path.split("?")[0] not in ("/healthz", "/readyz", "/"):
            self._reply(404, b'{"error": "not found"}', _JSON)
            return
        status, doc = self.server.app.health()
        self._reply(status, json.dumps(doc).encode(), _JSON)

    def do_POST(self) -> None:
        app = self.server.app
        if self.path.split("?")[0] != "/v1/traces":
            self._discard_body()
            self._reply(404, b'{"error": "serve receives traces only, at /v1/traces"}', _JSON)
            return
        content_type = (self.headers.get("Content-Type") or _PROTOBUF).split(";")[0].strip()
        if content_type not in (_PROTOBUF, _JSON):
            self._discard_body()
            self._error(415, f"unsupported Content-Type {content_type!r}: use {_PROTOBUF} "
                             f"or {_JSON}", _JSON)
            return
        length_text = self.headers.get("Content-Length")
        if length_text is None or not length_text.isdigit():
            self.close_connection = True
            self._error(411, "a Content-Length header is required", content_type)
            return
        length = int(length_text)
        limit = app.options.max_body_bytes
        if length > limit:
            self.close_connection = True   # the body is not read
            self._error(413, f"body of {length} bytes is over the limit of {limit}",
                        content_type)
            return
        try:
            body = self.rfile.read(length)
        except OSError as exc:   # the socket timeout (TimeoutError) among them
            body, reason = b"", str(exc) or type(exc).__name__
        else:
            reason = f"{len(body)} of {length} bytes"
        if len(body) < length or not self.server.take_request(self.connection):
            self.close_connection = True   # not answered: the sender retries
            _log.warning("otel-tooleval serve: request from %s dropped: body not received "
                         "within --read-timeout %gs (%s)", self.client_address[0],
                         self.server.read_timeout, _one_line(reason))
            return
        try:
            body = _decompress(body, self.headers.get("Content-Encoding"), limit)
        except Refused as refused:
            self._error(refused.status, str(refused), content_type)
            return
        try:
            rejected, message = app.export(body, content_type)
        except Refused as refused:
            self._error(refused.status, str(refused), content_type,
                        retry_after=refused.retry)
            return
        except Exception as exc:  # noqa: BLE001 - answer, never crash the server
            _log.exception("otel-tooleval serve: export failed")
            self._error(500, f"{type(exc).__name__}: {exc}", content_type)
            return
        response = _response(rejected, message)
        if content_type == _JSON:
            from google.protobuf import json_format

            self._reply(200, json.dumps(json_format.MessageToDict(response)).encode(), _JSON)
        else:
            self._reply(200, response.SerializeToString(), _PROTOBUF)

    def _discard_body(self) -> None:
        length = self.headers.get("Content-Length")
        if length and length.isdigit() and int(length) <= self.server.app.options.max_body_bytes:
            self.rfile.read(int(length))
        else:
            self.close_connection = True

    def _error(self, status: int, message: str, content_type: str, *,
               retry_after: bool = False) -> None:
        """An error answer as OTLP/HTTP specifies: a google.rpc.Status in the request's
        encoding."""
        from google.rpc import status_pb2

        message = _one_line(message)
        if not retry_after:   # one line per rejected request; 429/503 are counted in stats
            _log.warning("otel-tooleval serve: request from %s refused: %d %s",
                         self.client_address[0], status, message)
        code = {400: 3, 413: 8, 429: 8, 503: 14}.get(status, 2)
        if content_type == _JSON:
            payload = json.dumps({"code": code, "message": message}).encode()
        else:
            payload = status_pb2.Status(code=code, message=message).SerializeToString()
        headers = {"Retry-After": str(_RETRY_AFTER_SECONDS)} if retry_after else {}
        self._reply(status, payload, content_type, headers)

    def _reply(self, status: int, payload: bytes, content_type: str,
               headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        return   # no access log on stderr

    def log_error(self, format: str, *args: Any) -> None:
        # http.server's own rejections (a bad request line, a header timeout): one line.
        _log.info("otel-tooleval serve: connection from %s: %s", self.client_address[0],
                  _one_line(format % args))
