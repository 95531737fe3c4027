"""How the forwarder reaches the next hop: the ``OTEL_EXPORTER_OTLP_*`` settings it honours.

As the OTLP exporter specification says, each setting is read from the traces variable
(``OTEL_EXPORTER_OTLP_TRACES_HEADERS``) if it is set, else from the generic one
(``OTEL_EXPORTER_OTLP_HEADERS``); the two are never merged, and an empty value counts as
unset. ``ServeOptions.forward_headers`` and ``ServeOptions.forward_timeout`` (the flag
``--forward-timeout``) win over the variables.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

from .settings import ServeOptions

_PREFIXES = ("OTEL_EXPORTER_OTLP_TRACES_", "OTEL_EXPORTER_OTLP_")
DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class NextHop:
    """The forwarder's connection settings, resolved once at startup."""

    headers: dict[str, str] = field(default_factory=dict)
    certificate: str | None = None          # CA bundle that verifies the next hop
    client_certificate: str | None = None   # with client_key: mTLS to the next hop
    client_key: str | None = None
    insecure: bool | None = None            # gRPC, a target without a scheme
    gzip: bool = False
    timeout: float = DEFAULT_TIMEOUT        # seconds

    def grpc_tls(self, target: str) -> bool:
        """Whether the gRPC channel to ``target`` uses TLS: ``https://`` yes, ``http://`` no;
        without a scheme, ``OTEL_EXPORTER_OTLP_INSECURE`` tells, and when it is unset, TLS
        when a certificate setting is given (plaintext otherwise, as serve always did)."""
        if "://" in target:
            return urlsplit(target).scheme == "https"
        if self.insecure is not None:
            return not self.insecure
        return bool(self.certificate or self.client_certificate)

    def ssl_context(self) -> ssl.SSLContext:
        """A client context for HTTPS: the system CAs or ``certificate``, and the client
        certificate when one is set."""
        context = ssl.create_default_context(cafile=self.certificate)
        if self.client_certificate and self.client_key:
            context.load_cert_chain(self.client_certificate, self.client_key)
        return context

    def grpc_credentials(self) -> object:
        import grpc

        def read(path: str | None) -> bytes | None:
            return Path(path).read_bytes() if path else None

        return grpc.ssl_channel_credentials(root_certificates=read(self.certificate),
                                            private_key=read(self.client_key),
                                            certificate_chain=read(self.client_certificate))


def _setting(environ: Mapping[str, str], name: str) -> tuple[str, str] | None:
    for prefix in _PREFIXES:
        value = environ.get(prefix + name, "").strip()
        if value:
            return prefix + name, value
    return None


def _file(environ: Mapping[str, str], name: str) -> str | None:
    found = _setting(environ, name)
    if found is None:
        return None
    variable, path = found
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise ValueError(f"{variable} {path}: cannot read it ({exc.strerror or exc})") from None
    return path


def _check_loads(env: Mapping[str, str], hop: NextHop) -> None:
    """Load the certificate files once, so that a bad one stops serve at startup."""

    def named(name: str) -> str:
        found = _setting(env, name)
        return f"{found[0]} {found[1]}" if found else name

    if hop.certificate:
        try:
            ssl.create_default_context(cafile=hop.certificate)
        except (ssl.SSLError, ValueError) as exc:
            raise ValueError(f"{named('CERTIFICATE')}: not a PEM certificate ({exc})") from None
    if hop.client_certificate and hop.client_key:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(hop.client_certificate,
                                                                   hop.client_key)
        except (ssl.SSLError, ValueError) as exc:
            raise ValueError(f"{named('CLIENT_KEY')}: not the PEM key of "
                             f"{named('CLIENT_CERTIFICATE')} ({exc})") from None


def next_hop(options: ServeOptions, environ: Mapping[str, str] | None = None) -> NextHop:
    """The settings from ``options`` and the environment (``os.environ`` by default).

    Raises:
        ValueError: a value that cannot be used; the message names the variable.
    """
    from opentelemetry.util.re import parse_env_headers

    env = os.environ if environ is None else environ
    found = _setting(env, "HEADERS")
    # As the SDK reads them: W3C baggage-like "k=v,k2=v2", URL-decoded, keys lower-cased.
    headers = dict(parse_env_headers(found[1], liberal=True)) if found else {}
    headers.update({k.lower(): v for k, v in options.forward_headers.items()})
    certificate = _file(env, "CERTIFICATE")
    client_certificate = _file(env, "CLIENT_CERTIFICATE")
    client_key = _file(env, "CLIENT_KEY")
    if bool(client_certificate) != bool(client_key):
        missing = "CLIENT_KEY" if client_certificate else "CLIENT_CERTIFICATE"
        raise ValueError(f"OTEL_EXPORTER_OTLP_{missing}: needed with "
                         f"OTEL_EXPORTER_OTLP_{'CLIENT_CERTIFICATE' if client_key else 'CLIENT_KEY'}"
                         " (set both, or their TRACES_ forms)")
    insecure = None
    found = _setting(env, "INSECURE")
    if found is not None:
        if found[1].lower() not in ("true", "false"):
            raise ValueError(f"{found[0]}: {found[1]!r} is not true or false")
        insecure = found[1].lower() == "true"
    gzip = False
    found = _setting(env, "COMPRESSION")
    if found is not None:
        if found[1].lower() not in ("gzip", "none"):
            raise ValueError(f"{found[0]}: {found[1]!r} is not gzip or none")
        gzip = found[1].lower() == "gzip"
    timeout = options.forward_timeout
    found = _setting(env, "TIMEOUT")
    if timeout is None and found is not None:
        try:
            timeout = float(found[1]) / 1000.0   # milliseconds, as the specification says
        except ValueError:
            timeout = -1.0
        if not timeout > 0:
            raise ValueError(f"{found[0]}: {found[1]!r} is not a number of milliseconds > 0")
    hop = NextHop(headers, certificate, client_certificate, client_key, insecure, gzip,
                  DEFAULT_TIMEOUT if timeout is None else timeout)
    _check_loads(env, hop)
    return hop


def split_target(target: str) -> SplitResult:
    """The forward URL, ``http://`` assumed when it has no scheme."""
    return urlsplit(target if "://" in target else f"http://{target}")
