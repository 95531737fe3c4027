"""Connection limits uvicorn does not have, and a shutdown that loses nothing answered.

uvicorn's ``timeout_keep_alive`` only covers the idle time between requests and is re-armed
by every byte, so a client that trickles a request (slowloris) holds its connection forever.
``_connection_class`` subclasses uvicorn's h11 protocol to give each request an absolute
deadline from its first byte (or from the connection's opening) until it is fully received,
and to answer connections beyond the cap. ``_Server`` replaces uvicorn's shutdown with one
bounded by the caller's deadline.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import Server

from .decoding import _RETRY_AFTER_SECONDS
from .throttle import PeerLog, refusal_of

_log = logging.getLogger("otel_tooleval.serve")   # one logger for the whole service

_Asgi = Callable[[Any, Any, Any], Awaitable[None]]
_RECEIVED = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR)   # their_state: nothing to wait


_OVER_CAPACITY = b"too many connections; retry later\n"


async def _over_capacity(scope: Any, receive: Any, send: Any) -> None:
    """The answer to every request of a connection opened beyond ``--max-connections``."""
    await send({"type": "http.response.start", "status": 503, "headers": [
        (b"Content-Type", b"text/plain"), (b"Content-Length", b"%d" % len(_OVER_CAPACITY)),
        (b"Retry-After", b"%d" % _RETRY_AFTER_SECONDS), (b"Connection", b"close")]})
    await send({"type": "http.response.body", "body": _OVER_CAPACITY})


def _connection_class(read_timeout: float, max_connections: int,
                      on_over_capacity: Callable[[], None]) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a receipt deadline per request and a connection cap."""

    class _Connection(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            # uvicorn's own warnings of this connection name the sender, and are throttled
            self.logger = PeerLog(self.logger, self.client)  # type: ignore[assignment]
            if len(self.connections) > max_connections:
                self.app = _over_capacity   # answered 503, then closed
                on_over_capacity()
            self._arm()   # a connection that sends nothing is closed as a slow one

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._track()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.trailing_data[0]:   # a pipelined request already begun
                self._track()

        def _track(self) -> None:
            if self.conn.their_state in _RECEIVED:
                self._disarm()
            elif self._deadline is None and not self.transport.is_closing():
                self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(read_timeout, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            host = self.client[0] if self.client else "?"
            part = "body" if self.conn.their_state is h11.SEND_BODY else "request headers"
            _log.warning("otel-tooleval serve: request from %s dropped: %s not received within "
                         "--read-timeout %gs; connection closed", host, part, read_timeout,
                         extra=refusal_of("http-slow"))
            self.transport.abort()   # not answered: the sender retries

    return _Connection


class _Server(Server):
    """uvicorn's server with a shutdown bounded by ``grace`` seconds.

    Listeners close, idle connections (keep-alive, half-sent headers) close at once, requests
    in flight get ``grace`` seconds to finish; connections still mid-request then are cut
    (never answered, so the sender retries), and the requests already being decoded are waited
    for up to ``hard`` seconds more, so that nothing is ingested after the caller moves on.
    """

    grace = 5.0
    hard = 5.0
    on_started: Callable[[], None] = staticmethod(lambda: None)

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets=sockets)
        self.on_started()

    async def shutdown(self, sockets: Any = None) -> None:
        loop = asyncio.get_running_loop()
        for server in self.servers:
            server.close()
        state = self.server_state
        for connection in list(state.connections):
            try:
                connection.shutdown()   # idle: closed now; in flight: closed after its answer
            except h11.LocalProtocolError:
                connection.transport.abort()
        end = loop.time() + self.grace
        while (state.connections or state.tasks) and loop.time() < end:
            await asyncio.sleep(0.02)
        if state.connections:
            _log.warning("otel-tooleval serve: %d HTTP connection(s) cut at shutdown, their "
                         "requests not answered", len(state.connections))
        for connection in list(state.connections):
            connection.transport.abort()
        end = loop.time() + self.hard
        while state.tasks and loop.time() < end:   # bodies being decoded and ingested
            await asyncio.sleep(0.02)
        for server in self.servers:
            await server.wait_closed()
