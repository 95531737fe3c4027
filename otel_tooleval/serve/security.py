"""TLS and bearer-token authentication for the two receivers, and who may listen where.

The pieces each receiver needs:

- ``TlsSettings`` (``--tls-cert``, ``--tls-key``, ``--tls-client-ca``), checked at startup by
  ``load_tls``; ``uvicorn_ssl_options`` turns them into ``uvicorn.Config`` keyword arguments;
  ``Certificates`` gives the gRPC server credentials (mTLS when a client CA is set) and
  re-reads the certificate and key on SIGHUP for both receivers;
- ``TokenStore`` (``--bearer-token-file``): the accepted tokens (``MIN_TOKEN_LENGTH``
  characters or more), compared in constant time, re-read on SIGHUP from a file that held
  still while it was read (``read_steady``); ``authorized`` is the check a receiver runs on the ``Authorization``
  header (HTTP) or ``authorization`` metadata (gRPC) before it reads a body;
  ``grpc_auth_interceptor`` runs it for gRPC;
- ``check_exposure``: an address other than loopback needs TLS and authentication.

Every file is read only when it is a regular file of bounded size (``local_files``). The token
file and the key are secrets: one that anyone may write is refused (anyone could add their own
token or key, as ``ssh`` refuses such keys), and one the group or others may read is taken with
one WARNING line naming the flag, the file and its mode.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import logging
import os
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..local_files import FileRefused, LocalFile, access_problem, read_local_file
from .throttle import refusal_of

_log = logging.getLogger("otel_tooleval.serve")   # one logger for the whole service

HTTP_CHALLENGE = ("WWW-Authenticate", 'Bearer realm="otel-tooleval"')
"""The header of a 401 answer (RFC 6750 section 3)."""

_PRINTABLE = frozenset(chr(c) for c in range(0x21, 0x7F))   # visible ASCII, no space

MIN_TOKEN_LENGTH = 16
"""The shortest bearer token taken: a shorter line is refused (at startup, exit 2; on SIGHUP,
the tokens in use stay). It also keeps a line cut short by a writer from passing as a token."""

MAX_TOKEN_FILE_BYTES = 1024 * 1024
MAX_PEM_BYTES = 8 * 1024 * 1024   # a certificate chain, a key, a CA bundle

QUIET_SECONDS = 1.0
"""A file not changed for this long is taken as read; one changed more recently is read again
after ``SETTLE_SECONDS`` and taken when both reads agree, for up to ``STEADY_SECONDS``."""
SETTLE_SECONDS = 0.1
STEADY_SECONDS = 2.0

_warned: set[tuple[str, str, int]] = set()   # (flag, path, mode) already warned about
_warned_lock = threading.Lock()


def _refused(flag: str, path: str, exc: FileRefused) -> ValueError:
    return ValueError(f"{flag} {path}: {exc.reason}")


def _refuse_open_access(flag: str, path: str, file: LocalFile, what: str) -> None:
    """Refuse a secret file anyone may write (``access_problem``)."""
    refusal, _ = access_problem(file.after, what)
    if refusal is not None:
        raise ValueError(f"{flag} {path}: {refusal}")


def _warn_open_access(flag: str, path: str, file: LocalFile) -> None:
    """One WARNING line, once per file and mode, for a secret file others may read; called
    once the file was taken, so that a refused file gets its one refusal line only."""
    _, warning = access_problem(file.after, "")
    if warning is not None:
        key = (flag, path, file.after.st_mode)
        with _warned_lock:
            if key in _warned:
                return
            _warned.add(key)
        _log.warning("otel-tooleval serve: %s %s: %s", flag, path, warning)


def read_steady(flag: str, path: str, max_bytes: int) -> LocalFile:
    """The file at ``path`` as it stands when nobody is writing it.

    A file rewritten in place (opened with truncation, then written, maybe in several
    writes) can be read empty or cut short. A read is taken when nothing about the file
    changed while it was read (``LocalFile.steady``), the path still names that file, and
    either it was last changed more than ``QUIET_SECONDS`` ago or a second read
    ``SETTLE_SECONDS`` later gives the same file and bytes.

    Raises:
        ValueError: the file cannot be read (``read_local_file``), or it kept changing for
            ``STEADY_SECONDS``; the message names the flag and the file.
    """
    deadline = time.monotonic() + STEADY_SECONDS
    previous: LocalFile | None = None
    while True:
        try:
            got = read_local_file(path, max_bytes=max_bytes)
            now = os.stat(path)
        except FileRefused as exc:
            raise _refused(flag, path, exc) from None
        except OSError:   # removed or renamed away just now: read it again
            now = None
        same_file = now is not None and (now.st_dev, now.st_ino) == (got.after.st_dev,
                                                                     got.after.st_ino)
        if got.steady and same_file:
            changed_ns = max(got.after.st_mtime_ns, got.after.st_ctime_ns)
            if time.time_ns() - changed_ns > QUIET_SECONDS * 1e9 or (
                    previous is not None and previous.data == got.data
                    and previous.identity == got.identity):
                return got
            previous = got
        else:
            previous = None
        if time.monotonic() >= deadline:
            raise ValueError(f"{flag} {path}: kept changing while being read for "
                             f"{STEADY_SECONDS:g} s (is it still being written?)")
        time.sleep(SETTLE_SECONDS)


# -- TLS --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TlsSettings:
    """Server certificate chain and key (PEM files); ``client_ca`` set means mTLS: clients
    must present a certificate signed by that CA."""

    cert: str
    key: str
    client_ca: str | None = None


class _EncryptedKey(Exception):
    pass


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key.
    raise _EncryptedKey


def _readable(path: str, flag: str) -> LocalFile:
    """A regular file of at most ``MAX_PEM_BYTES``; the key, one only its owner may write."""
    try:
        file = read_local_file(path, max_bytes=MAX_PEM_BYTES)
    except FileRefused as exc:
        raise _refused(flag, path, exc) from None
    if flag == "--tls-key":
        _refuse_open_access(flag, path, file, "their own key")
    return file


def load_tls(cert: str | None, key: str | None, client_ca: str | None) -> TlsSettings | None:
    """TLS settings from the flags, each file read and loaded once as the servers will.

    Raises:
        ValueError: one of ``--tls-cert``/``--tls-key`` without the other, ``--tls-client-ca``
            without them, a file that cannot be read or loaded, that is not a regular file or
            is larger than ``MAX_PEM_BYTES``, or a key anyone may write (the message names the
            flag and the file). A key the group or others may read is a WARNING line.
    """
    if cert is None and key is None:
        if client_ca is not None:
            raise ValueError("--tls-client-ca: needs --tls-cert and --tls-key (the server "
                             "must speak TLS to ask for client certificates)")
        return None
    if cert is None or key is None:
        given, missing = ("--tls-cert", "--tls-key") if key is None else ("--tls-key",
                                                                           "--tls-cert")
        raise ValueError(f"{missing}: {given} was given without it; pass both or neither")
    files = {flag: _readable(path, flag) for flag, path in (
        ("--tls-cert", cert), ("--tls-key", key), ("--tls-client-ca", client_ca))
        if path is not None}
    _load_pem(cert, key, client_ca)
    _warn_open_access("--tls-key", key, files["--tls-key"])
    return TlsSettings(cert, key, client_ca)


def _load_pem(cert: str, key: str, client_ca: str | None) -> None:
    """Load the files as the servers will (the checks of ``load_tls`` on what they hold)."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        probe.load_verify_locations(cafile=cert)
    except (ssl.SSLError, ValueError) as exc:
        raise ValueError(f"--tls-cert {cert}: not a PEM certificate ({exc})") from None
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        server.load_cert_chain(cert, key, password=_no_password)
    except _EncryptedKey:
        raise ValueError(f"--tls-key {key}: the key is encrypted; give an unencrypted PEM "
                         "key (readable by the serve user only)") from None
    except ssl.SSLError as exc:
        raise ValueError(f"--tls-key {key}: not the PEM private key of --tls-cert {cert} "
                         f"({exc.reason or exc})") from None
    if client_ca is not None:
        try:
            probe.load_verify_locations(cafile=client_ca)
        except (ssl.SSLError, ValueError) as exc:
            raise ValueError(f"--tls-client-ca {client_ca}: not a PEM certificate ({exc})"
                             ) from None


def uvicorn_ssl_options(tls: TlsSettings | None) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.Config``: ``ssl_certfile``, ``ssl_keyfile``, and for
    mTLS ``ssl_ca_certs`` with ``ssl_cert_reqs=ssl.CERT_REQUIRED``; ``{}`` without TLS."""
    if tls is None:
        return {}
    options: dict[str, Any] = {"ssl_certfile": tls.cert, "ssl_keyfile": tls.key}
    if tls.client_ca is not None:
        options.update(ssl_ca_certs=tls.client_ca, ssl_cert_reqs=ssl.CERT_REQUIRED)
    return options


def _grpc_certificates(tls: TlsSettings) -> Any:
    """The files of ``tls`` as a gRPC ``ServerCertificateConfiguration`` (read now)."""
    import grpc

    pair = (Path(tls.key).read_bytes(), Path(tls.cert).read_bytes())
    roots = Path(tls.client_ca).read_bytes() if tls.client_ca is not None else None
    return grpc.ssl_server_certificate_configuration([pair], root_certificates=roots)


class Certificates:
    """The TLS files of a running ``serve``, re-read by ``reload()`` (SIGHUP): new handshakes
    take the new certificate and key; connections already open keep theirs.

    The same paths are read again (rotate by replacing the files: cert-manager, certbot and
    Kubernetes secret volumes do), each file once: the bytes read are checked as at startup
    (``load_tls``) and are what both receivers then load, so a file replaced in the middle of a
    reload cannot give them a pair that was not checked. A reload that fails keeps the
    certificates in use and logs one WARNING line naming the flag and the file.

    The client CA (``--tls-client-ca``) is not reloaded: the one loaded at startup stays, with
    a WARNING when its file has changed, until a restart takes it. A client that resumes a TLS
    session made before a change would otherwise get in without its certificate being checked
    against the new CA (OpenSSL looks a resumed session up in the context the connection
    started on, and Python cannot turn TLS 1.2 session caching off).

    - gRPC: ``grpc_credentials()`` are dynamic credentials whose fetcher, which grpcio calls
      before each new connection's handshake, hands over a reloaded configuration once;
    - HTTP: uvicorn builds its ``SSLContext`` at startup; ``sni_callback`` is installed on it,
      and OpenSSL calls it in every handshake (with or without SNI), where it moves the
      connection to the newest context built by ``reload()`` with ``http_builder`` (set by
      the HTTP receiver: uvicorn's own context factory with its settings).
    """

    def __init__(self, tls: TlsSettings) -> None:
        self.tls = tls
        #: Builds the HTTP receiver's SSLContext from settings; None without an HTTP receiver.
        self.http_builder: Any = None
        self.http_context: ssl.SSLContext | None = None   # None: the one made at startup
        self._grpc_pending: Any = None
        self._lock = threading.Lock()
        self.reloads = 0
        self._client_ca = (Path(tls.client_ca).read_bytes() if tls.client_ca is not None
                           else None)

    def grpc_credentials(self) -> Any:
        """Server credentials for the gRPC receiver (mTLS with a client CA)."""
        import grpc

        return grpc.dynamic_ssl_server_credentials(
            _grpc_certificates(self.tls), self._fetch_grpc,
            require_client_authentication=self.tls.client_ca is not None)

    def _fetch_grpc(self) -> Any:
        with self._lock:
            pending, self._grpc_pending = self._grpc_pending, None
        return pending

    def sni_callback(self, ssl_object: Any, server_name: str | None,
                     context: ssl.SSLContext) -> None:
        newest = self.http_context
        if newest is not None and ssl_object.context is not newest:
            ssl_object.context = newest

    def reload(self) -> bool:
        """Re-read the files. True when the new ones are in use for new handshakes; on
        failure the ones in use stay, one WARNING line says why, and False is returned."""
        with self._lock:
            try:
                grpc_config, http = self._load()
            except (ValueError, OSError, ssl.SSLError) as exc:
                _log.warning("otel-tooleval serve: certificates not reloaded, the previous "
                             "ones stay: %s", exc)
                return False
            self._grpc_pending = grpc_config
            if http is not None:
                self.http_context = http
            self.reloads += 1
        _log.info("otel-tooleval serve: certificates reloaded from %s and %s", self.tls.cert,
                  self.tls.key)
        return True

    def _load(self) -> tuple[Any, ssl.SSLContext | None]:
        """The gRPC configuration and the HTTP context of the certificate and key as they
        are now, each file read once, with the client CA loaded at startup. Raises ValueError
        naming the flag and the file."""
        import grpc

        tls = self.tls
        load_tls(tls.cert, tls.key, None)           # the checks, naming flag and file
        blobs = {flag: _read(flag, path) for flag, path in (("--tls-cert", tls.cert),
                                                            ("--tls-key", tls.key))}
        if tls.client_ca is not None and self._client_ca is not None and _read(
                "--tls-client-ca", tls.client_ca) != self._client_ca:
            _log.warning("otel-tooleval serve: --tls-client-ca %s changed: the client CA "
                         "loaded at startup stays until a restart (a client resuming an "
                         "older TLS session would not be checked against a new one)",
                         tls.client_ca)
        with _private_files(blobs["--tls-cert"], blobs["--tls-key"],
                            self._client_ca) as (cert, key, client_ca):
            try:
                _load_pem(cert, key, None)   # in-memory files: their mode says nothing
            except ValueError:
                raise ValueError(f"--tls-cert {tls.cert} and --tls-key {tls.key}: changed "
                                 "while being read; send SIGHUP again") from None
            http = (self.http_builder(TlsSettings(cert, key, client_ca))
                    if self.http_builder is not None else None)
        grpc_config = grpc.ssl_server_certificate_configuration(
            [(blobs["--tls-key"], blobs["--tls-cert"])], root_certificates=self._client_ca)
        return grpc_config, http


def _read(flag: str, path: str) -> bytes:
    try:
        return read_local_file(path, max_bytes=MAX_PEM_BYTES).data
    except FileRefused as exc:
        raise _refused(flag, path, exc) from None


@contextlib.contextmanager
def _private_files(cert: bytes, key: bytes, client_ca: bytes | None
                   ) -> Iterator[tuple[str, str, str | None]]:
    """Paths that read as these bytes, for the loaders that take only paths (OpenSSL's):
    anonymous in-memory files (``memfd_create``, Linux) where there are, so that the key never
    touches a disk; elsewhere 0600 files in a private temporary directory, removed on exit."""
    blobs = [cert, key] + ([client_ca] if client_ca is not None else [])
    if hasattr(os, "memfd_create"):
        fds = []
        try:
            for blob in blobs:
                fd = os.memfd_create("otel-tooleval-tls", os.MFD_CLOEXEC)
                fds.append(fd)
                os.write(fd, blob)
            paths = [f"/proc/self/fd/{fd}" for fd in fds]
            yield paths[0], paths[1], paths[2] if client_ca is not None else None
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="otel-tooleval-tls-") as where:
        paths = []
        for name, blob in zip(("cert.pem", "key.pem", "client-ca.pem"), blobs):
            path = os.path.join(where, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(blob)
            paths.append(path)
        yield paths[0], paths[1], paths[2] if client_ca is not None else None


# -- bearer tokens ----------------------------------------------------------------------------

def _read_tokens(path: str) -> tuple[bytes, ...]:
    """The tokens of a token file: one a line; blank lines and ``#`` comments skipped.

    The file is read when it holds still (``read_steady``), so a reload during an in-place
    rewrite does not take the half written so far.

    Raises:
        ValueError: the file cannot be read, is not a regular file of at most
            ``MAX_TOKEN_FILE_BYTES``, kept changing, anyone may write it, holds no token, or a
            line is not a token or is shorter than ``MIN_TOKEN_LENGTH`` (the message names the
            file and line, never the token). A file the group or others may read is taken,
            with one WARNING line.
    """
    flag = "--bearer-token-file"
    file = read_steady(flag, path, MAX_TOKEN_FILE_BYTES)
    _refuse_open_access(flag, path, file, "their own token")
    try:
        text = file.data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{flag} {path}: cannot read it (not UTF-8 text)") from None
    tokens: list[bytes] = []
    for number, line in enumerate(text.splitlines(), 1):
        token = line.strip()
        if not token or token.startswith("#"):
            continue
        if not set(token) <= _PRINTABLE:
            raise ValueError(f"{flag} {path}: line {number} is not a token (visible ASCII "
                             "characters without spaces)")
        if len(token) < MIN_TOKEN_LENGTH:
            raise ValueError(f"{flag} {path}: line {number} is shorter than "
                             f"{MIN_TOKEN_LENGTH} characters (a short token can be guessed; "
                             "make one with: openssl rand -hex 32)")
        tokens.append(token.encode("ascii"))
    if not tokens:
        raise ValueError(f"{flag} {path}: holds no token (one a line; blank lines and lines "
                         "starting with # are skipped)")
    _warn_open_access(flag, path, file)
    return tuple(tokens)


class TokenStore:
    """The bearer tokens of ``--bearer-token-file``; ``reload()`` re-reads the file (SIGHUP).

    Raises:
        ValueError: from the constructor, when the file gives no tokens (see ``_read_tokens``).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._tokens = _read_tokens(path)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._tokens)

    def check(self, authorization: str | None) -> bool:
        """True when ``authorization`` is ``Bearer <token>`` with a token of the file.

        The scheme is case-insensitive (RFC 7235 section 2.1); one or more spaces follow it.
        The candidate is compared with every token by ``hmac.compare_digest``, without
        stopping at a match, so the time taken does not tell which token matched or how much
        of one did.
        """
        if not authorization:
            return False
        scheme, _, credentials = authorization.partition(" ")
        candidate = credentials.lstrip(" ")
        if scheme.lower() != "bearer" or not candidate or not set(candidate) <= _PRINTABLE:
            return False
        given = candidate.encode("ascii")
        matched = False
        for token in self._tokens:   # a snapshot: reload() swaps the tuple whole
            matched |= hmac.compare_digest(given, token)
        return matched

    def reload(self) -> bool:
        """Re-read the file. On failure the tokens in use stay, one WARNING line names the
        file and the reason, and False is returned."""
        with self._lock:
            try:
                tokens = _read_tokens(self.path)
            except ValueError as exc:
                _log.warning("otel-tooleval serve: bearer tokens not reloaded, the previous "
                             "ones stay: %s", exc)
                return False
            self._tokens = tokens
        _log.info("otel-tooleval serve: %d bearer tokens reloaded from %s", len(tokens),
                  self.path)
        return True


def authorized(tokens: TokenStore | None, authorization: str | None) -> bool:
    """The receivers' check: no token file means everyone; else ``tokens.check``. Run it on
    the ``Authorization`` header before reading a body; a refusal is HTTP 401 with
    ``HTTP_CHALLENGE`` (``/healthz`` stays open) or gRPC ``UNAUTHENTICATED``."""
    return tokens is None or tokens.check(authorization)


def refusal_reason(authorization: str | None) -> str:
    """What a refusal log line says: never the token."""
    return "no bearer token" if not authorization else "bearer token not accepted"


def grpc_auth_interceptor(tokens: TokenStore, *, pool: Any = None,
                          count: Callable[[], None] | None = None) -> Any:
    """A gRPC server interceptor: calls without ``authorization: Bearer <token>`` metadata of
    ``tokens`` end with UNAUTHENTICATED before their handler runs (nothing of them is
    accepted), with one WARNING line naming the peer, never the token, and ``count()``.

    The refusal is decided on the metadata and answered without reading the message: a stream
    handler that never asks for it (a unary one would run only once the whole message was in,
    so a sender that sends none would hold a thread, and a big one would be read whole first),
    on ``pool`` (grpcio's ``experimental_thread_pool``), threads of the refusals' own, so it
    does not wait behind the exports in the server's pool.
    """
    import grpc

    def refuser(reason: str) -> Any:
        def refuse(requests: Any, context: Any) -> bytes:
            if count is not None:
                count()
            _log.warning("otel-tooleval serve: gRPC request from %s refused: "
                         "UNAUTHENTICATED %s", context.peer(), reason,
                         extra=refusal_of("grpc-unauthenticated"))
            context.abort(grpc.StatusCode.UNAUTHENTICATED, reason)
            raise AssertionError("not reached: abort raises")

        if pool is not None:
            refuse.experimental_thread_pool = pool  # type: ignore[attr-defined]
        return grpc.stream_unary_rpc_method_handler(refuse)

    refusals = {reason: refuser(reason) for reason in (refusal_reason(None),
                                                       refusal_reason("?"))}

    class BearerAuthInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
        def intercept_service(self, continuation: Any, details: Any) -> Any:
            values = [value for key, value in details.invocation_metadata or ()
                      if key == "authorization"]
            authorization = (values[0] if len(values) == 1 and isinstance(values[0], str)
                             else None)
            if tokens.check(authorization):
                return continuation(details)
            return refusals[refusal_reason(authorization)]

    return BearerAuthInterceptor()


# -- exposure ---------------------------------------------------------------------------------

def is_loopback(host: str) -> bool:
    """True when every address ``host`` resolves to is a loopback address; a name that does
    not resolve is not loopback."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(
        ipaddress.ip_address(str(a).split("%", 1)[0]).is_loopback for a in addresses)


def check_exposure(addresses: dict[str, str | None], *, tls: TlsSettings | None,
                   tokens: bool, insecure_bind: bool) -> None:
    """Refuse to listen beyond loopback without TLS and authentication.

    ``addresses`` maps a flag (``--grpc``) to its ``HOST:PORT`` (None when off). Outside
    loopback, serve needs TLS and a way to tell senders apart: bearer tokens, or client
    certificates (``--tls-client-ca``). ``insecure_bind`` lifts the rule.

    Raises:
        ValueError: one line naming the flag, the address and what is missing.
    """
    if insecure_bind:
        return
    from .settings import parse_address

    missing = [what for what, ok in (("--tls-cert/--tls-key", tls is not None),
                                     ("--bearer-token-file (or --tls-client-ca)",
                                      tokens or (tls is not None and tls.client_ca is not None)))
               if not ok]
    if not missing:
        return
    for flag, address in addresses.items():
        if address and not is_loopback(parse_address(address, 0)[0]):
            raise ValueError(f"{flag} {address}: listening beyond loopback needs "
                             f"{' and '.join(missing)}; pass --insecure-bind to listen "
                             "without them (on a network you trust)")
