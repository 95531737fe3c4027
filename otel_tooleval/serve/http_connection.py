"""Connection limits uvicorn does not have, an accept loop that survives running out of file
descriptors, and a shutdown that loses nothing answered.

``_Acceptor`` accepts the listening socket's connections itself, in place of asyncio's server,
and hands each to uvicorn's protocol with ``loop.connect_accepted_socket``. A connection is
counted from ``accept`` on, before and while its TLS handshake runs: against
``--max-connections`` (beyond it, its requests are answered 503) and against its peer's share,
``--max-connections-per-peer`` (beyond it, it is closed at once, before any byte is read or any
handshake is done). Its ``--read-timeout`` runs from ``accept`` too: the handshake gets what is
left of it (asyncio's ``ssl_handshake_timeout``, 60 s by default, was the only bound before),
and the first request the rest. When ``accept`` fails for want of file descriptors or memory
(EMFILE, ENFILE, ENOBUFS, ENOMEM), accepting pauses and is retried with a growing pause, with
one counted WARNING: asyncio's own loop logged a traceback per attempt, thousands a second.

uvicorn's ``timeout_keep_alive`` only covers the idle time between requests and is re-armed
by every byte, so a client that trickles a request (slowloris) holds its connection forever.
``_connection_class`` subclasses uvicorn's h11 protocol to give each request an absolute
deadline from its first byte (or from the connection's acceptance) until it is fully received.
``_Server`` replaces uvicorn's start (the acceptor) and its shutdown (bounded by the caller's
deadline).
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import socket
import ssl
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import Server

from .decoding import _RETRY_AFTER_SECONDS
from .throttle import PeerLog, refusal_of

_log = logging.getLogger("otel_tooleval.serve")   # one logger for the whole service

_Asgi = Callable[[Any, Any, Any], Awaitable[None]]
_RECEIVED = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR)   # their_state: nothing to wait
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_ACCEPTS_PER_WAKE = 64          # accept() calls per readiness event, as asyncio bounds them
_FIRST_PAUSE = 0.05             # seconds; doubled after each failed retry...
_LONGEST_PAUSE = 1.0            # ...up to this
_EPISODE_GAP = 10.0             # a failure this long after the last one is warned again


_OVER_CAPACITY = b"too many connections; retry later\n"


async def _over_capacity(scope: Any, receive: Any, send: Any) -> None:
    """The answer to every request of a connection opened beyond ``--max-connections``."""
    await send({"type": "http.response.start", "status": 503, "headers": [
        (b"Content-Type", b"text/plain"), (b"Content-Length", b"%d" % len(_OVER_CAPACITY)),
        (b"Retry-After", b"%d" % _RETRY_AFTER_SECONDS), (b"Connection", b"close")]})
    await send({"type": "http.response.body", "body": _OVER_CAPACITY})


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The HTTP receiver's connection settings (``--read-timeout``, ``--max-connections``,
    ``--max-connections-per-peer``) and where its counters go."""

    read_timeout: float
    max_connections: int
    max_per_peer: int
    count: Callable[[str], None]


def peer_of(address: Any) -> str:
    """The peer whose share a connection from ``address`` counts against: its IPv4 address
    (an IPv4-mapped IPv6 one included), or the /64 of an IPv6 address, since one host
    commonly holds a whole /64."""
    host = str(address[0]) if isinstance(address, tuple) and address else "?"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return str(ip)


class _Release:
    """Gives back a connection's places (its peer's share, a place under the cap) once."""

    __slots__ = ("acceptor", "admitted", "peer")

    def __init__(self, acceptor: _Acceptor, peer: str, admitted: bool) -> None:
        self.acceptor: _Acceptor | None = acceptor
        self.peer, self.admitted = peer, admitted

    def __call__(self) -> None:
        acceptor, self.acceptor = self.acceptor, None
        if acceptor is not None:
            acceptor.release(self.peer, self.admitted)


_Admit = Callable[[bool, float, _Release], asyncio.Protocol]


class _Acceptor:
    """The listening socket's accept loop: counts every connection from ``accept`` (see the
    module's docstring), and pauses, with one WARNING, when ``accept`` runs out of resources.

    ``admit(over_capacity, accepted_at, release)`` makes a connection's protocol; the protocol
    calls ``release`` when its connection is lost. Loop thread only.
    """

    def __init__(self, sock: socket.socket, admit: _Admit, tls: ssl.SSLContext | None,
                 limits: ConnectionLimits) -> None:
        self.sock, self.admit, self.tls, self.limits = sock, admit, tls, limits
        self.loop = asyncio.get_running_loop()
        self.admitted = 0                      # connections under --max-connections
        self.peers: Counter[str] = Counter()   # every open connection, by peer
        self.handshakes: set[asyncio.Task[None]] = set()
        self._pause = _FIRST_PAUSE
        self._last_failure: float | None = None
        self._resume: asyncio.TimerHandle | None = None
        self.closed = False

    def start(self) -> None:
        self.loop.add_reader(self.sock.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(_ACCEPTS_PER_WAKE):
            try:
                conn, address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:   # gone before it was accepted
                continue
            except OSError as exc:
                self._back_off(exc)
                return
            self._pause = _FIRST_PAUSE
            self._take(conn, address)

    def _back_off(self, exc: OSError) -> None:
        """Stop watching the socket for a while: Linux reports it readable again at once, and
        asyncio's loop retried (and logged a traceback) as fast as it could."""
        self.loop.remove_reader(self.sock.fileno())
        self.limits.count("accept_errors")
        now = self.loop.time()
        if self._last_failure is None or now - self._last_failure > _EPISODE_GAP:
            self._pause = _FIRST_PAUSE
            busiest = max(self.peers.items(), key=lambda item: item[1], default=("-", 0))
            name = errno.errorcode.get(exc.errno or 0, "error")
            hint = (" (ulimit -n, --max-connections, --max-connections-per-peer)"
                    if exc.errno in _OUT_OF_RESOURCES else "")
            _log.warning("otel-tooleval serve: cannot accept HTTP connections: %s (%s) with %d "
                         "open, the most from one peer %d (%s); accepting paused and retried "
                         "every %g s at most until some close%s", exc.strerror or exc, name,
                         sum(self.peers.values()), busiest[1], busiest[0], _LONGEST_PAUSE, hint,
                         extra=refusal_of("http-accept"))
        else:
            self._pause = min(self._pause * 2, _LONGEST_PAUSE)
        self._last_failure = now
        self._resume = self.loop.call_later(self._pause, self._listen_again)

    def _listen_again(self) -> None:
        self._resume = None
        if not self.closed:
            self.start()

    def _take(self, conn: socket.socket, address: Any) -> None:
        conn.setblocking(False)
        peer = peer_of(address)
        limits = self.limits
        if self.peers[peer] >= limits.max_per_peer:
            conn.close()   # before any byte is read or any handshake is done
            limits.count("refused_peer_connections")
            _log.warning("otel-tooleval serve: connection from %s refused: it holds %d "
                         "connections, its share (--max-connections-per-peer); closed", peer,
                         self.peers[peer], extra=refusal_of("http-peer"))
            return
        self.peers[peer] += 1
        admitted = self.admitted < limits.max_connections
        if admitted:
            self.admitted += 1
        else:
            limits.count("refused_connections")   # its requests are answered 503
        task = self.loop.create_task(self._connect(conn, peer, _Release(self, peer, admitted),
                                                   self.loop.time()))
        self.handshakes.add(task)
        task.add_done_callback(self.handshakes.discard)

    async def _connect(self, conn: socket.socket, peer: str, release: _Release,
                       accepted_at: float) -> None:
        """The connection handed to its protocol: at once, or once its TLS handshake is done
        within ``--read-timeout`` of ``accept``."""
        try:
            await self.loop.connect_accepted_socket(
                lambda: self.admit(not release.admitted, accepted_at, release), conn,
                ssl=self.tls,
                ssl_handshake_timeout=self.limits.read_timeout if self.tls else None)
        except ConnectionAbortedError:   # asyncio's handshake timeout
            release()
            self.limits.count("refused_slow")
            _log.warning("otel-tooleval serve: connection from %s dropped: TLS handshake not "
                         "done within --read-timeout %gs; connection closed", peer,
                         self.limits.read_timeout, extra=refusal_of("http-slow"))
        except (OSError, asyncio.CancelledError):   # a failed handshake; shutdown
            release()   # asyncio has closed the connection

    def release(self, peer: str, admitted: bool) -> None:
        left = self.peers[peer] - 1
        if left > 0:
            self.peers[peer] = left
        else:
            del self.peers[peer]
        if admitted:
            self.admitted -= 1

    def close(self) -> None:
        """Stop accepting; handshakes under way are cut."""
        if self.closed:
            return
        self.closed = True
        if self._resume is not None:
            self._resume.cancel()
        else:
            self.loop.remove_reader(self.sock.fileno())
        self.sock.close()
        for task in list(self.handshakes):
            task.cancel()

    async def wait_closed(self) -> None:
        if self.handshakes:
            await asyncio.wait(list(self.handshakes))


def _connection_class(limits: ConnectionLimits) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a receipt deadline per request, and the places its
    connection holds given back when it ends."""

    read_timeout = limits.read_timeout

    class _Connection(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        over_capacity = False
        accepted_at: float | None = None
        release: Callable[[], None] = staticmethod(lambda: None)

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            # uvicorn's own warnings of this connection name the sender, and are throttled
            self.logger = PeerLog(self.logger, self.client)  # type: ignore[assignment]
            if self.over_capacity:
                self.app = _over_capacity   # answered 503, then closed
            # a connection that sends nothing is closed as a slow one, the time of its TLS
            # handshake included
            accepted_at = self.loop.time() if self.accepted_at is None else self.accepted_at
            self._arm(accepted_at + read_timeout - self.loop.time())

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self.release()
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
                self._arm(read_timeout)

        def _arm(self, delay: float) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(max(delay, 0.0), self._expired)

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
            limits.count("refused_slow")
            _log.warning("otel-tooleval serve: request from %s dropped: %s not received within "
                         "--read-timeout %gs; connection closed", host, part, read_timeout,
                         extra=refusal_of("http-slow"))
            self.transport.abort()   # not answered: the sender retries

    return _Connection


class _Server(Server):
    """uvicorn's server, accepting through ``_Acceptor``, with a shutdown bounded by
    ``grace`` seconds.

    Listeners close, idle connections (keep-alive, half-sent headers) close at once, requests
    in flight get ``grace`` seconds to finish; connections still mid-request then are cut
    (never answered, so the sender retries), and the requests already being decoded are waited
    for up to ``hard`` seconds more, so that nothing is ingested after the caller moves on.
    """

    grace = 5.0
    hard = 5.0
    on_started: Callable[[], None] = staticmethod(lambda: None)
    acceptor: _Acceptor | None = None

    def __init__(self, config: Config, limits: ConnectionLimits) -> None:
        super().__init__(config)
        self.limits = limits
        self.connection_class = _connection_class(limits)

    def _admit(self, over_capacity: bool, accepted_at: float,
               release: _Release) -> asyncio.Protocol:
        connection = self.connection_class(config=self.config, server_state=self.server_state,
                                           app_state=self.lifespan.state)
        connection.over_capacity = over_capacity   # type: ignore[attr-defined]
        connection.accepted_at = accepted_at   # type: ignore[attr-defined]
        connection.release = release   # type: ignore[attr-defined]
        return connection

    async def startup(self, sockets: Any = None) -> None:
        # uvicorn's startup, with the acceptor in place of loop.create_server (lifespan is
        # off; uvicorn's started line is not serve's)
        await self.lifespan.startup()
        assert sockets is not None and len(sockets) == 1
        self.servers = []
        self.acceptor = _Acceptor(sockets[0], self._admit, self.config.ssl, self.limits)
        self.acceptor.start()
        self.started = True
        self.on_started()

    async def shutdown(self, sockets: Any = None) -> None:
        loop = asyncio.get_running_loop()
        if self.acceptor is not None:
            self.acceptor.close()
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
        if self.acceptor is not None:
            await self.acceptor.wait_closed()
