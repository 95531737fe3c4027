"""``serve`` with TLS, mTLS and bearer tokens (issue 16, finding 6), and the forwarder's
``OTEL_EXPORTER_OTLP_*`` settings: real OTLP exporters in, a real OTLP receiver out.

Certificates are made at test time with trustme (a CA, a server certificate for 127.0.0.1 and
localhost, a client certificate); no key is stored in the repository.
"""

from __future__ import annotations

import hmac
import http.client
import logging
import os
import signal
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_tooleval import load_config
from otel_tooleval.cli import main
from otel_tooleval.serve import ServeOptions, ToolEvalServer, options_from_args, security
from otel_tooleval.serve.forwarder import _Forwarder
from otel_tooleval.serve.next_hop import next_hop
from otel_tooleval.serve.security import (
    TokenStore,
    authorized,
    check_exposure,
    load_tls,
    uvicorn_ssl_options,
)
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.serve_process import serve_process
from tests.test_serve import CONFIG, EXPECTED, _free_port, body_of, demo_spans, roots

HTTP_WIRED = True   # the HTTP receiver takes the TLS settings and the token check
"""The HTTP receiver takes ``uvicorn_ssl_options`` and ``authorized`` once it runs on uvicorn;
the step that wires them sets this to True, and the HTTP tests below run."""

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
TOKENS = "# serve tokens\n\nalpha-token-00001\n  beta-token-000002  \n# retired: gamma\n"


@dataclass(frozen=True)
class Pki:
    ca: str            # PEM of the CA that signed the server and client certificates
    cert: str          # server certificate chain, for 127.0.0.1 and localhost
    key: str
    client_cert: str   # a client certificate signed by ``ca``
    client_key: str
    other_ca: str      # a CA that signed nothing here
    other_cert: str    # a client certificate signed by ``other_ca``
    other_key: str

    def read(self, name: str) -> bytes:
        return Path(getattr(self, name)).read_bytes()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    where = tmp_path_factory.mktemp("pki")
    ca, other = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("agent@example.com")
    stranger = other.issue_cert("stranger@example.com")
    files: dict[str, Any] = {
        "ca": ca.cert_pem, "cert": server.cert_chain_pems[0], "key": server.private_key_pem,
        "client_cert": client.cert_chain_pems[0], "client_key": client.private_key_pem,
        "other_ca": other.cert_pem, "other_cert": stranger.cert_chain_pems[0],
        "other_key": stranger.private_key_pem}
    for name, blob in files.items():
        blob.write_to_path(str(where / f"{name}.pem"))
        if name.endswith("key"):
            (where / f"{name}.pem").chmod(0o600)   # a private key, as serve wants it
    return Pki(**{name: str(where / f"{name}.pem") for name in files})


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    path.write_text(TOKENS)
    path.chmod(0o600)   # a secret, as serve wants it
    return path


@pytest.fixture
def secured(receiver: OtlpReceiver) -> Iterator[Callable[..., ToolEvalServer]]:
    """Servers on 127.0.0.1 (gRPC; HTTP once it is wired), forwarding to ``receiver``."""
    started: list[ToolEvalServer] = []

    def make(**options: Any) -> ToolEvalServer:
        opts = ServeOptions(load_config(CONFIG), grpc="127.0.0.1:0",
                            http="127.0.0.1:0" if HTTP_WIRED else None,
                            forward=receiver.http_endpoint,
                            **{"decision_wait": 0.2, "emit_telemetry": False, **options})
        server = ToolEvalServer(opts)
        started.append(server.start())
        return server

    yield make
    for server in started:
        server.stop(timeout=5)


def grpc_exporter(server: ToolEvalServer, pki: Pki | None = None, *, client: bool = False,
                  token: str | None = None) -> GrpcExporter:
    credentials = None
    if pki is not None:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=pki.read("ca"),
            private_key=pki.read("client_key") if client else None,
            certificate_chain=pki.read("client_cert") if client else None)
    return GrpcExporter(endpoint=f"localhost:{server.grpc_port}", insecure=pki is None,
                        credentials=credentials,
                        headers={"authorization": f"Bearer {token}"} if token else None,
                        timeout=3)


def export(exporter: Any, spans: list[Any]) -> SpanExportResult:
    try:
        return exporter.export(spans)  # type: ignore[no-any-return]
    finally:
        exporter.shutdown()


# -- the token store ----------------------------------------------------------------------------

def test_token_file_lines_and_the_header_forms(token_file: Path) -> None:
    store = TokenStore(str(token_file))
    assert len(store) == 2   # comments and blank lines skipped, spaces around a token trimmed
    for header in ("Bearer alpha-token-00001", "bearer beta-token-000002", "BEARER   alpha-token-00001"):
        assert store.check(header), header
    for header in (None, "", "Bearer", "Bearer ", "alpha-token-00001", "Basic alpha-token-00001",
                   "Bearer alpha-token-", "Bearer alpha-token-000012", "Bearer alpha-token-00001 x",
                   "Bearer gamma", "Bearer # serve tokens", "Bearer\talpha-token-00001",
                   "Bearer ålpha"):
        assert not store.check(header), header
    assert authorized(None, None) and authorized(store, "Bearer beta-token-000002")
    assert not authorized(store, "Bearer nope")


def test_tokens_are_compared_in_constant_time_with_every_token(
        token_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token_file.write_text("".join(f"seven-tokens-{i:04d}\n" for i in range(7)))
    store = TokenStore(str(token_file))
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(security.hmac, "compare_digest", counting)
    for header, ok in (("Bearer seven-tokens-0000", True),
                       ("Bearer seven-tokens-0006", True),
                       ("Bearer seven-tokens-0009", False), ("Bearer s", False)):
        calls.clear()
        assert store.check(header) is ok
        assert len(calls) == 7, "every token compared, no early exit on a match"
        assert {b for _, b in calls} == {f"seven-tokens-{i:04d}".encode()
                                         for i in range(7)}


@pytest.mark.parametrize("text, problem", [("", "holds no token"),
                                           ("# only a comment\n\n", "holds no token"),
                                           ("good-token-000001\nbad token\n",
                                            "line 2 is not a token")])
def test_a_token_file_without_tokens_is_refused_naming_it(tmp_path: Path, text: str,
                                                          problem: str) -> None:
    path = tmp_path / "tokens"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"--bearer-token-file {path}: {problem}") as caught:
        TokenStore(str(path))
    assert "bad token" not in str(caught.value)   # the message never quotes a token
    with pytest.raises(ValueError, match=f"--bearer-token-file {tmp_path / 'none'}: cannot read"):
        TokenStore(str(tmp_path / "none"))


def test_reload_takes_the_new_tokens_and_a_bad_file_keeps_the_old(
        token_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = TokenStore(str(token_file))
    token_file.write_text("new-token-0000004\n")
    assert store.reload()
    assert store.check("Bearer new-token-0000004") and not store.check("Bearer alpha-token-00001")
    caplog.set_level(logging.INFO, logger="otel_tooleval")
    caplog.clear()
    token_file.write_text("# emptied by mistake\n")
    assert not store.reload()
    assert store.check("Bearer new-token-0000004")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(token_file) in warnings[0].getMessage()
    token_file.unlink()
    assert not store.reload() and store.check("Bearer new-token-0000004")


# -- TLS settings -------------------------------------------------------------------------------

def test_tls_settings_checked_at_startup_naming_the_flag_and_file(pki: Pki, tmp_path: Path
                                                                  ) -> None:
    assert load_tls(None, None, None) is None
    with pytest.raises(ValueError, match="^--tls-key: --tls-cert was given without it"):
        load_tls(pki.cert, None, None)
    with pytest.raises(ValueError, match="^--tls-cert: --tls-key was given without it"):
        load_tls(None, pki.key, None)
    with pytest.raises(ValueError, match="^--tls-client-ca: needs --tls-cert"):
        load_tls(None, None, pki.ca)
    missing = str(tmp_path / "missing.pem")
    with pytest.raises(ValueError, match=f"^--tls-cert {missing}: cannot read it"):
        load_tls(missing, pki.key, None)
    with pytest.raises(ValueError, match=f"^--tls-key {missing}: cannot read it"):
        load_tls(pki.cert, missing, None)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ValueError, match=f"^--tls-cert {garbage}: not a PEM certificate"):
        load_tls(str(garbage), pki.key, None)
    with pytest.raises(ValueError, match=f"^--tls-key {pki.client_key}: not the PEM private key"):
        load_tls(pki.cert, pki.client_key, None)   # the client's key, not the server's
    with pytest.raises(ValueError, match=f"^--tls-client-ca {garbage}: not a PEM certificate"):
        load_tls(pki.cert, pki.key, str(garbage))
    tls = load_tls(pki.cert, pki.key, pki.ca)
    assert tls is not None
    assert uvicorn_ssl_options(tls) == {"ssl_certfile": pki.cert, "ssl_keyfile": pki.key,
                                        "ssl_ca_certs": pki.ca,
                                        "ssl_cert_reqs": ssl.CERT_REQUIRED}
    assert uvicorn_ssl_options(load_tls(pki.cert, pki.key, None)) == {
        "ssl_certfile": pki.cert, "ssl_keyfile": pki.key}
    assert uvicorn_ssl_options(None) == {}


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["serve", "--config", str(CONFIG), "--forward", "none", *args])
    return code, capsys.readouterr().err


def test_cli_bad_tls_or_token_file_is_exit_2_with_one_line(
        pki: Pki, tmp_path: Path, capsys: pytest.CaptureFixture[str], loopback_only: None
) -> None:
    missing = tmp_path / "missing.pem"
    empty = tmp_path / "empty"
    empty.write_text("\n# nothing\n")
    for args, needle in (
            (["--tls-cert", pki.cert], "--tls-key: --tls-cert was given without it"),
            (["--tls-cert", str(missing), "--tls-key", pki.key], f"--tls-cert {missing}:"),
            (["--tls-cert", pki.cert, "--tls-key", pki.other_key], f"--tls-key {pki.other_key}"),
            (["--tls-client-ca", pki.ca], "--tls-client-ca: needs --tls-cert"),
            (["--bearer-token-file", str(empty)], f"--bearer-token-file {empty}: holds no"),
            (["--bearer-token-file", str(missing)], f"--bearer-token-file {missing}: cannot"),
            (["--forward-workers", "0"], "--forward-workers: must be at least 1")):
        code, err = _cli(args, capsys)
        assert code == 2, (args, err)
        assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err


# -- who may listen where -----------------------------------------------------------------------

def test_beyond_loopback_needs_tls_and_a_token_or_insecure_bind(
        pki: Pki, token_file: Path, loopback_only: None) -> None:
    tls = load_tls(pki.cert, pki.key, None)
    mtls = load_tls(pki.cert, pki.key, pki.ca)
    for address in ("0.0.0.0:4317", "[::]:4317", "192.0.2.10:4317", "example.invalid:4317"):
        for settings, tokens in ((None, False), (tls, False), (None, True)):
            with pytest.raises(ValueError, match=r"--grpc .*listening beyond loopback needs"):
                check_exposure({"--grpc": address, "--http": None}, tls=settings,
                               tokens=tokens, insecure_bind=False)
        check_exposure({"--grpc": address}, tls=tls, tokens=True, insecure_bind=False)
        check_exposure({"--grpc": address}, tls=mtls, tokens=False, insecure_bind=False)
        check_exposure({"--grpc": address}, tls=None, tokens=False, insecure_bind=True)
    for address in ("127.0.0.1:4317", "localhost:4317", "[::1]:4317", ":4317", "127.9.9.9:1"):
        check_exposure({"--http": address}, tls=None, tokens=False, insecure_bind=False)
    with pytest.raises(ValueError, match="^--http 0.0.0.0:4318: .* needs --tls-cert/--tls-key "
                                         "and --bearer-token-file .*--insecure-bind"):
        options_from_args(str(CONFIG), grpc=None, http="0.0.0.0:4318", forward="none",
                          forward_protocol="grpc", decision_wait=1.0)
    options = options_from_args(str(CONFIG), grpc="0.0.0.0:0", http=None, forward="none",
                                forward_protocol="grpc", decision_wait=1.0, tls_cert=pki.cert,
                                tls_key=pki.key, bearer_token_file=str(token_file))
    assert options.tls_cert == pki.cert and options.bearer_token_file == str(token_file)


def test_cli_refuses_a_public_bind_with_one_line(capsys: pytest.CaptureFixture[str],
                                                 loopback_only: None) -> None:
    code, err = _cli(["--grpc", "0.0.0.0:4317", "--http", "off"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("otel-tooleval serve: --grpc 0.0.0.0:4317: listening beyond "
                          "loopback needs --tls-cert/--tls-key and --bearer-token-file"), err


# -- gRPC receiver: TLS, mTLS, bearer tokens, real OTLP exporters ------------------------------

def test_grpc_tls_with_a_real_exporter(pki: Pki, receiver: OtlpReceiver,
                                       secured: Callable[..., ToolEvalServer]) -> None:
    server = secured(tls_cert=pki.cert, tls_key=pki.key)
    spans = demo_spans()
    assert export(grpc_exporter(server, pki), spans) == SpanExportResult.SUCCESS
    assert receiver.wait_for(lambda: len(roots(receiver)) == len(EXPECTED))
    # Plaintext to a TLS port does not get in.
    assert export(grpc_exporter(server), spans) == SpanExportResult.FAILURE
    assert server.stats()["accepted_spans"] == len(spans)


def test_grpc_mtls_refuses_clients_without_a_certificate_of_the_ca(
        pki: Pki, receiver: OtlpReceiver, secured: Callable[..., ToolEvalServer]) -> None:
    server = secured(tls_cert=pki.cert, tls_key=pki.key, tls_client_ca=pki.ca)
    spans = demo_spans()
    assert export(grpc_exporter(server, pki), spans) == SpanExportResult.FAILURE
    stranger = GrpcExporter(
        endpoint=f"localhost:{server.grpc_port}", insecure=False, timeout=3,
        credentials=grpc.ssl_channel_credentials(pki.read("ca"), pki.read("other_key"),
                                                 pki.read("other_cert")))
    assert export(stranger, spans) == SpanExportResult.FAILURE
    assert server.stats().get("accepted_spans", 0) == 0
    assert export(grpc_exporter(server, pki, client=True), spans) == SpanExportResult.SUCCESS
    assert receiver.wait_for(lambda: len(receiver.spans()) == len(spans))


@pytest.fixture
def rotating(tmp_path: Path) -> Callable[[trustme.CA | None], dict[str, Any]]:
    """Server certificate files that a test replaces as cert-manager does; ``issue(ca)``
    writes a new certificate of ``ca`` (a new CA when None) for 127.0.0.1 and localhost, and
    returns the paths and the CA's PEM."""
    paths = {"cert": str(tmp_path / "cert.pem"), "key": str(tmp_path / "key.pem")}

    def issue(ca: trustme.CA | None = None) -> dict[str, Any]:
        ca = ca or trustme.CA()
        leaf = ca.issue_cert("127.0.0.1", "localhost")
        leaf.cert_chain_pems[0].write_to_path(paths["cert"])
        leaf.private_key_pem.write_to_path(paths["key"])
        os.chmod(paths["key"], 0o600)   # a private key, as serve wants it
        return {**paths, "ca_pem": ca.cert_pem.bytes(), "ca": ca}

    return issue


def _grpc_status(port: int, ca_pem: bytes, client: tuple[bytes, bytes] | None = None
                 ) -> grpc.StatusCode:
    credentials = grpc.ssl_channel_credentials(
        ca_pem, *(client if client is not None else (None, None)))
    return _raw_export(port, (), body_of(demo_spans()), credentials)


def _https_status(port: int, ca_pem: bytes) -> int | str:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    conn = http.client.HTTPSConnection("localhost", port, timeout=5, context=context)
    try:
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        response.read()
        return response.status
    except ssl.SSLError as exc:
        return exc.reason or "ssl error"
    finally:
        conn.close()


def test_reloaded_certificates_serve_new_handshakes_and_a_bad_reload_keeps_them(
        rotating: Callable[..., dict[str, Any]], secured: Callable[..., ToolEvalServer],
        caplog: pytest.LogCaptureFixture) -> None:
    _http_wired()
    first = rotating()
    server = secured(tls_cert=first["cert"], tls_key=first["key"])
    grpc_port, http_port = server.grpc_port or 0, server.http_port or 0
    assert _grpc_status(grpc_port, first["ca_pem"]) == grpc.StatusCode.OK
    assert _https_status(http_port, first["ca_pem"]) == 200
    second = rotating()                     # the files replaced by a certificate of a new CA
    assert _https_status(http_port, second["ca_pem"]) == "CERTIFICATE_VERIFY_FAILED"
    assert server.reload()
    assert _grpc_status(grpc_port, second["ca_pem"]) == grpc.StatusCode.OK
    assert _grpc_status(grpc_port, first["ca_pem"]) == grpc.StatusCode.UNAVAILABLE
    assert _https_status(http_port, second["ca_pem"]) == 200
    assert _https_status(http_port, first["ca_pem"]) == "CERTIFICATE_VERIFY_FAILED"
    # a key that is not the certificate's: the reload fails, the certificates in use stay
    Path(second["key"]).write_bytes(trustme.CA().issue_cert("localhost").private_key_pem.bytes())
    caplog.set_level(logging.WARNING, logger="otel_tooleval.serve")
    assert not server.reload()
    warnings = [r.getMessage() for r in caplog.records if "not reloaded" in r.getMessage()]
    assert len(warnings) == 1 and "--tls-key" in warnings[0] and second["key"] in warnings[0]
    assert _grpc_status(grpc_port, second["ca_pem"]) == grpc.StatusCode.OK
    assert _https_status(http_port, second["ca_pem"]) == 200
    assert server.certificates is not None and server.certificates.reloads == 1


def test_a_changed_client_ca_waits_for_a_restart_and_the_certificate_still_rotates(
        pki: Pki, rotating: Callable[..., dict[str, Any]], tmp_path: Path,
        secured: Callable[..., ToolEvalServer], caplog: pytest.LogCaptureFixture) -> None:
    """mTLS: a reload rotates the server certificate with the client CA as it was; a changed
    client CA waits for a restart, with a WARNING (a client resuming an older TLS session
    would skip the new CA's check): the old CA's clients still get in and the new CA's do
    not, on both receivers, and the server certificate still rotates."""
    _http_wired()
    files = rotating()
    client_ca = tmp_path / "client-ca.pem"
    client_ca.write_bytes(pki.read("ca"))
    server = secured(tls_cert=files["cert"], tls_key=files["key"], tls_client_ca=str(client_ca))
    port = server.grpc_port or 0
    ours = (pki.read("client_key"), pki.read("client_cert"))
    stranger = (pki.read("other_key"), pki.read("other_cert"))

    def https(ca_pem: bytes, cert: str, key: str) -> int | str:
        context = ssl.create_default_context(cadata=ca_pem.decode())
        context.load_cert_chain(cert, key)
        conn = http.client.HTTPSConnection("localhost", server.http_port or 0, timeout=5,
                                           context=context)
        try:
            conn.request("GET", "/healthz")
            response = conn.getresponse()
            response.read()
            return response.status
        except OSError as exc:          # TLS 1.3: the refusal comes after the handshake
            return type(exc).__name__
        finally:
            conn.close()

    def who_gets_in(ca_pem: bytes) -> tuple[bool, bool]:
        grpc_in = (_grpc_status(port, ca_pem, ours) == grpc.StatusCode.OK,
                   _grpc_status(port, ca_pem, stranger) == grpc.StatusCode.OK)
        http_in = (https(ca_pem, pki.client_cert, pki.client_key) == 200,
                   https(ca_pem, pki.other_cert, pki.other_key) == 200)
        assert grpc_in == http_in
        return grpc_in

    assert who_gets_in(files["ca_pem"]) == (True, False)
    second = rotating()                                  # a new server certificate, same CA
    assert server.reload()
    assert who_gets_in(second["ca_pem"]) == (True, False)
    client_ca.write_bytes(pki.read("other_ca"))
    third = rotating()
    caplog.set_level(logging.WARNING, logger="otel_tooleval.serve")
    assert server.reload()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"--tls-client-ca {client_ca} changed" in warnings[0]
    assert "until a restart" in warnings[0]
    assert who_gets_in(third["ca_pem"]) == (True, False)


def test_files_replaced_during_a_reload_fail_it(
        rotating: Callable[..., dict[str, Any]], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Each file is read once and those bytes are checked again: a pair that stops matching
    between the check of the paths and the read (a rotation half done) fails the reload."""
    files = rotating()
    certificates = security.Certificates(load_tls(files["cert"], files["key"], None))
    assert certificates.reload()
    checked = security._load_pem

    def torn(cert: str, key: str, client_ca: str | None) -> Any:
        if cert.startswith("/proc/self/fd/") or "otel-tooleval-tls-" in cert:  # the bytes read
            raise ValueError("--tls-key: not the key of --tls-cert")
        return checked(cert, key, client_ca)

    monkeypatch.setattr(security, "_load_pem", torn)
    caplog.set_level(logging.WARNING, logger="otel_tooleval.serve")
    assert not certificates.reload()
    assert "changed while being read; send SIGHUP again" in caplog.text
    assert certificates.reloads == 1


def test_a_reload_writes_the_key_to_no_disk_and_elsewhere_leaves_no_copy(
        rotating: Callable[..., dict[str, Any]], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """The bytes read are loaded from anonymous in-memory files (Linux); without
    ``memfd_create``, from 0600 files in a private temporary directory, removed after."""
    import tempfile

    files = rotating()
    certificates = security.Certificates(load_tls(files["cert"], files["key"], None))

    def no_disk(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the key went to a temporary file")

    with monkeypatch.context() as patch:
        patch.setattr(security.tempfile, "TemporaryDirectory", no_disk)
        assert certificates.reload()
    monkeypatch.delattr(os, "memfd_create")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    made: list[str] = []
    real = os.open

    def watched(path: Any, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        if str(path).endswith(".pem") and flags & os.O_CREAT:   # written, not read
            made.append(f"{path} {mode:o}")
        return real(path, flags, mode, **kwargs)

    monkeypatch.setattr(security.os, "open", watched)
    assert certificates.reload()
    assert len(made) == 2 and all(m.endswith(" 600") for m in made)
    assert list(scratch.iterdir()) == []


def _raw_export(port: int, metadata: tuple[tuple[str, str], ...], body: bytes,
                credentials: Any = None) -> grpc.StatusCode:
    target = f"localhost:{port}"
    channel = (grpc.secure_channel(target, credentials) if credentials is not None
               else grpc.insecure_channel(target))
    with channel:
        try:
            channel.unary_unary(EXPORT)(body, metadata=metadata, timeout=5)
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def test_grpc_bearer_token_required_and_refusals_logged_without_the_token(
        pki: Pki, token_file: Path, receiver: OtlpReceiver,
        secured: Callable[..., ToolEvalServer], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="otel_tooleval")
    server = secured(tls_cert=pki.cert, tls_key=pki.key, bearer_token_file=str(token_file))
    spans = demo_spans()
    credentials = grpc.ssl_channel_credentials(pki.read("ca"))
    port = server.grpc_port or 0
    body = body_of(spans)
    for metadata in ((), (("authorization", "Bearer wrong-token"),),
                     (("authorization", "Basic alpha-token-00001"),),
                     (("authorization", "alpha-token-00001"),)):
        assert _raw_export(port, metadata, body, credentials) == \
            grpc.StatusCode.UNAUTHENTICATED, metadata
    assert export(grpc_exporter(server, pki), spans) == SpanExportResult.FAILURE
    assert export(grpc_exporter(server, pki, token="nope"), spans) == SpanExportResult.FAILURE
    assert server.stats().get("accepted_spans", 0) == 0, "refused spans were accepted"
    ours = [r for r in caplog.records if r.name == "otel_tooleval.serve"]   # not the exporter's
    refusals = [r.getMessage() for r in ours if "UNAUTHENTICATED" in r.getMessage()]
    assert len(refusals) == 6 and all(r.levelno == logging.WARNING for r in ours
                                      if "UNAUTHENTICATED" in r.getMessage())
    assert not [m for m in refusals if "wrong-token" in m or "nope" in m or "alpha" in m]
    time.sleep(0.5)
    assert not receiver.spans(), "nothing refused was forwarded"
    assert export(grpc_exporter(server, pki, token="beta-token-000002"), spans) == \
        SpanExportResult.SUCCESS
    assert receiver.wait_for(lambda: len(roots(receiver)) == len(EXPECTED))
    assert server.stats()["accepted_spans"] == len(spans)


def test_grpc_bearer_token_over_plaintext_on_loopback(
        token_file: Path, secured: Callable[..., ToolEvalServer]) -> None:
    server = secured(bearer_token_file=str(token_file))
    body = body_of(demo_spans())
    assert _raw_export(server.grpc_port or 0, (), body) == grpc.StatusCode.UNAUTHENTICATED
    assert _raw_export(server.grpc_port or 0, (("authorization", "bearer alpha-token-00001"),),
                       body) == grpc.StatusCode.OK


def test_sighup_reloads_the_token_file_and_the_certificates(
        pki: Pki, token_file: Path, receiver: OtlpReceiver) -> None:
    port = _free_port()
    credentials = grpc.ssl_channel_credentials(pki.read("ca"))
    accepted: list[int] = []

    def status(token: str) -> grpc.StatusCode:
        spans = demo_spans()   # new trace ids each time: every accepted run is graded
        code = _raw_export(port, (("authorization", f"Bearer {token}"),), body_of(spans),
                           credentials)
        if code == grpc.StatusCode.OK:
            accepted.append(len(spans))
        return code

    def after_sighup(predicate: Callable[[], bool]) -> bool:
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while not predicate():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    with serve_process(
            "--config", str(CONFIG), "--grpc", f"127.0.0.1:{port}", "--http", "off",
            "--forward", receiver.http_endpoint, "--decision-wait", "0.2", "--tls-cert",
            pki.cert, "--tls-key", pki.key, "--bearer-token-file", str(token_file)
    ) as (process, lines):
        assert status("alpha-token-00001") == grpc.StatusCode.OK
        assert status("fresh-token-00003") == grpc.StatusCode.UNAUTHENTICATED
        token_file.write_text("fresh-token-00003\n")
        assert after_sighup(lambda: status("fresh-token-00003") == grpc.StatusCode.OK)
        assert status("alpha-token-00001") == grpc.StatusCode.UNAUTHENTICATED
        token_file.write_text("")   # a bad reload keeps the tokens in use
        assert after_sighup(lambda: any("not reloaded" in line for line in lines))
        assert status("fresh-token-00003") == grpc.StatusCode.OK
        # A burst of SIGHUPs (each arriving while the last reload may still run) then SIGTERM:
        # the reloads run one after another outside the handler, and serve still drains.
        token_file.write_text("fresh-token-00003\n")
        for _ in range(50):
            process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while sum("certificates reloaded from" in line for line in lines) < 3:
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        assert status("fresh-token-00003") == grpc.StatusCode.OK
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    assert process.returncode == 0, "".join(lines)
    warning = [line for line in lines if "not reloaded" in line]
    assert len(warning) == 1 and str(token_file) in warning[0] and "fresh" not in warning[0]
    # SIGHUP re-reads the TLS files too: each time, they loaded
    assert sum("certificates reloaded from" in line for line in lines) >= 3, "".join(lines)
    assert len(accepted) == 4 and f"{sum(accepted)} spans accepted" in "".join(lines)
    assert receiver.wait_for(lambda: len(roots(receiver)) == 4 * len(EXPECTED))


# -- HTTP receiver (run once the uvicorn receiver takes the settings: HTTP_WIRED) ---------------

def _http_wired() -> None:
    if not HTTP_WIRED:
        pytest.skip("HTTP receiver wiring pending")


def _https_get(port: int, path: str, pki: Pki) -> int:
    context = ssl.create_default_context(cafile=pki.ca)
    conn = http.client.HTTPSConnection("localhost", port, timeout=5, context=context)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_http_tls_with_a_real_exporter(pki: Pki, receiver: OtlpReceiver,
                                       secured: Callable[..., ToolEvalServer]) -> None:
    _http_wired()
    server = secured(tls_cert=pki.cert, tls_key=pki.key)
    url = f"https://localhost:{server.http_port}/v1/traces"
    spans = demo_spans()
    assert export(HttpExporter(endpoint=url, certificate_file=pki.ca, timeout=3), spans) == \
        SpanExportResult.SUCCESS
    assert receiver.wait_for(lambda: len(roots(receiver)) == len(EXPECTED))
    plain = HttpExporter(endpoint=f"http://localhost:{server.http_port}/v1/traces", timeout=3)
    assert export(plain, spans) == SpanExportResult.FAILURE


def test_http_mtls_refuses_clients_without_a_certificate_of_the_ca(
        pki: Pki, receiver: OtlpReceiver, secured: Callable[..., ToolEvalServer]) -> None:
    _http_wired()
    server = secured(tls_cert=pki.cert, tls_key=pki.key, tls_client_ca=pki.ca)
    url = f"https://localhost:{server.http_port}/v1/traces"
    spans = demo_spans()
    assert export(HttpExporter(endpoint=url, certificate_file=pki.ca, timeout=3), spans) == \
        SpanExportResult.FAILURE
    assert export(HttpExporter(endpoint=url, certificate_file=pki.ca, timeout=3,
                               client_certificate_file=pki.other_cert,
                               client_key_file=pki.other_key), spans) == SpanExportResult.FAILURE
    assert server.stats().get("accepted_spans", 0) == 0
    assert export(HttpExporter(endpoint=url, certificate_file=pki.ca, timeout=3,
                               client_certificate_file=pki.client_cert,
                               client_key_file=pki.client_key), spans) == SpanExportResult.SUCCESS
    assert receiver.wait_for(lambda: len(receiver.spans()) == len(spans))


def test_http_bearer_token_required_and_healthz_open(
        pki: Pki, token_file: Path, receiver: OtlpReceiver,
        secured: Callable[..., ToolEvalServer], caplog: pytest.LogCaptureFixture) -> None:
    _http_wired()
    caplog.set_level(logging.INFO, logger="otel_tooleval")
    server = secured(tls_cert=pki.cert, tls_key=pki.key, bearer_token_file=str(token_file))
    port = server.http_port or 0
    url = f"https://localhost:{port}/v1/traces"
    spans = demo_spans()
    context = ssl.create_default_context(cafile=pki.ca)
    for headers in ({}, {"Authorization": "Bearer wrong-token"},
                    {"Authorization": "Basic alpha-token-00001"}):
        conn = http.client.HTTPSConnection("localhost", port, timeout=5, context=context)
        conn.request("POST", "/v1/traces", body=body_of(spans),
                     headers={"Content-Type": "application/x-protobuf", **headers})
        response = conn.getresponse()
        response.read()
        conn.close()
        assert response.status == 401, headers
        assert response.getheader("WWW-Authenticate", "").startswith("Bearer")
    assert export(HttpExporter(endpoint=url, certificate_file=pki.ca, timeout=3,
                               headers={"authorization": "Bearer nope"}), spans) == \
        SpanExportResult.FAILURE
    assert server.stats().get("accepted_spans", 0) == 0
    assert not [r for r in caplog.records if "wrong-token" in r.getMessage()]
    assert _https_get(port, "/healthz", pki) == 200   # health stays open without a token
    assert export(HttpExporter(endpoint=url, certificate_file=pki.ca, timeout=3,
                               headers={"authorization": "Bearer alpha-token-00001"}), spans) == \
        SpanExportResult.SUCCESS
    assert receiver.wait_for(lambda: len(roots(receiver)) == len(EXPECTED))


# -- the forwarder: OTEL_EXPORTER_OTLP_* settings and worker threads ---------------------------

def _forward_through(server_options: dict[str, Any], spans: list[Any]) -> ToolEvalServer:
    opts = ServeOptions(load_config(CONFIG), grpc="127.0.0.1:0", http=None, decision_wait=0.1,
                        emit_telemetry=False, **server_options)
    server = ToolEvalServer(opts).start()
    assert export(GrpcExporter(endpoint=f"127.0.0.1:{server.grpc_port}", insecure=True,
                               timeout=5), spans) == SpanExportResult.SUCCESS
    return server


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_forwarder_sends_env_headers_explicit_ones_winning(
        protocol: str, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-generic=ignored,x-tenant=generic")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                       "X-Tenant=team%20a,x-api-key=k%3Dv%2C1, x-override=env")
    target = receiver.http_endpoint if protocol != "grpc" else receiver.grpc_endpoint
    spans = demo_spans()
    server = _forward_through({"forward": target, "forward_protocol": protocol,
                               "forward_headers": {"X-Override": "explicit"}}, spans)
    try:
        assert receiver.wait_for(lambda: len(receiver.spans()) == len(spans))
    finally:
        server.stop(timeout=5)
    for seen in receiver.headers_seen:
        assert seen["x-tenant"] == "team a" and seen["x-api-key"] == "k=v,1"
        assert seen["x-override"] == "explicit"
        assert "x-generic" not in seen   # the traces variable replaces the generic one whole


def test_forwarder_tls_and_mtls_to_the_next_hop_from_env(
        pki: Pki, loopback_only: None, monkeypatch: pytest.MonkeyPatch) -> None:
    spans = demo_spans()
    with OtlpReceiver(tls_cert=pki.cert, tls_key=pki.key, client_ca=pki.ca) as hop:
        assert hop.http_endpoint.startswith("https://")
        # No CA: the next hop's certificate does not verify, so nothing gets through.
        server = _forward_through({"forward": hop.http_endpoint, "forward_timeout": 2}, spans)
        time.sleep(0.5)
        assert server.stats().get("forward_retries", 0) >= 1 and not hop.spans()
        server.stop(timeout=0.5)
        # The CA, but no client certificate: the mTLS next hop refuses the handshake.
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", pki.ca)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", pki.other_ca)   # traces var wins
        server = _forward_through({"forward": hop.http_endpoint, "forward_timeout": 2}, spans)
        time.sleep(0.5)
        assert server.stats().get("forward_retries", 0) >= 1 and not hop.spans()
        server.stop(timeout=0.5)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", pki.client_cert)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", pki.client_key)
        for protocol, target in (("http/protobuf", hop.http_endpoint),
                                 ("grpc", f"https://localhost:{hop.grpc_endpoint.split(':')[1]}")):
            hop.clear()
            server = _forward_through({"forward": target, "forward_protocol": protocol}, spans)
            try:
                assert hop.wait_for(lambda: len(hop.spans()) == len(spans)), protocol
            finally:
                server.stop(timeout=5)
            assert server.stats()["forwarded_spans"] == len(spans)


def test_forwarder_grpc_target_without_scheme_follows_insecure(
        pki: Pki, loopback_only: None, monkeypatch: pytest.MonkeyPatch) -> None:
    spans = demo_spans()
    with OtlpReceiver(tls_cert=pki.cert, tls_key=pki.key) as hop:
        target = f"localhost:{hop.grpc_endpoint.split(':')[1]}"
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "true")
        server = _forward_through({"forward": target, "forward_protocol": "grpc"}, spans)
        time.sleep(0.5)
        assert not hop.spans() and server.stats().get("forward_retries", 0) >= 1
        server.stop(timeout=0.5)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "false")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", pki.ca)
        server = _forward_through({"forward": target, "forward_protocol": "grpc"}, spans)
        try:
            assert hop.wait_for(lambda: len(hop.spans()) == len(spans))
        finally:
            server.stop(timeout=5)


def test_forwarder_gzip_from_env(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
                                 ) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    spans = demo_spans()
    server = _forward_through({"forward": receiver.http_endpoint}, spans)
    try:
        assert receiver.wait_for(lambda: len(receiver.spans()) == len(spans))
    finally:
        server.stop(timeout=5)
    assert {seen.get("content-encoding") for seen in receiver.headers_seen} == {"gzip"}


def test_next_hop_settings_precedence_and_errors(pki: Pki, tmp_path: Path) -> None:
    opts = ServeOptions(load_config(CONFIG), forward="none")
    assert next_hop(opts, {}).timeout == 10.0
    assert next_hop(opts, {"OTEL_EXPORTER_OTLP_TIMEOUT": "2500"}).timeout == 2.5
    assert next_hop(opts, {"OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
                           "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "750"}).timeout == 0.75
    assert next_hop(opts, {"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": " "}).timeout == 10.0
    explicit = ServeOptions(load_config(CONFIG), forward="none", forward_timeout=4.0)
    assert next_hop(explicit, {"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "750"}).timeout == 4.0
    hop = next_hop(opts, {"OTEL_EXPORTER_OTLP_INSECURE": "TRUE",
                          "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip"})
    assert hop.insecure is True and hop.gzip
    assert not hop.grpc_tls("host:4317") and hop.grpc_tls("https://host:4317")
    assert not next_hop(opts, {}).grpc_tls("host:4317")   # as before: plaintext
    assert next_hop(opts, {"OTEL_EXPORTER_OTLP_CERTIFICATE": pki.ca}).grpc_tls("host:4317")
    missing = tmp_path / "none.pem"
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("no certificate here\n")
    for env, needle in (
            ({"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "soon"}, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"),
            ({"OTEL_EXPORTER_OTLP_TIMEOUT": "0"}, "OTEL_EXPORTER_OTLP_TIMEOUT"),
            ({"OTEL_EXPORTER_OTLP_INSECURE": "yes"}, "OTEL_EXPORTER_OTLP_INSECURE"),
            ({"OTEL_EXPORTER_OTLP_COMPRESSION": "br"}, "OTEL_EXPORTER_OTLP_COMPRESSION"),
            ({"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": str(missing)},
             f"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE {missing}: cannot read"),
            ({"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": pki.client_cert},
             "OTEL_EXPORTER_OTLP_CLIENT_KEY"),
            ({"OTEL_EXPORTER_OTLP_CERTIFICATE": str(garbage)},
             f"^OTEL_EXPORTER_OTLP_CERTIFICATE {garbage}: not a PEM certificate"),
            ({"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE": pki.client_cert,
              "OTEL_EXPORTER_OTLP_CLIENT_KEY": pki.other_key},
             (f"^OTEL_EXPORTER_OTLP_CLIENT_KEY {pki.other_key}: not the PEM key of "
              f"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE {pki.client_cert}"))):
        with pytest.raises(ValueError, match=needle):
            next_hop(opts, env)


def test_cli_bad_forwarder_env_is_exit_2_naming_the_variable(
        capsys: pytest.CaptureFixture[str], loopback_only: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "/nonexistent/ca.pem")
    code, err = _cli(["--grpc", "off", "--http", "off"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE /nonexistent/ca.pem: cannot read" in err


class _SlowHop(ThreadingHTTPServer):
    """A next hop that answers after ``delay`` and counts requests in progress at once."""

    daemon_threads = True

    def __init__(self, delay: float, fail_first: int = 0) -> None:
        self.delay = delay
        self.fail_first = fail_first
        self.lock = threading.Lock()
        self.active = self.peak = self.received = 0
        self.ports: set[int] = set()
        super().__init__(("127.0.0.1", 0), _SlowHandler)


class _SlowHandler(BaseHTTPRequestHandler):
    server: _SlowHop
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        hop = self.server
        with hop.lock:
            hop.active += 1
            hop.peak = max(hop.peak, hop.active)
            hop.ports.add(self.client_address[1])
            fail = hop.fail_first > 0
            hop.fail_first -= 1
        time.sleep(hop.delay)
        with hop.lock:
            hop.active -= 1
            hop.received += 0 if fail else 1
        self.send_response(503 if fail else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.mark.parametrize("workers", [1, 3])
def test_forward_workers_send_at_once_and_count_exactly(workers: int, loopback_only: None
                                                        ) -> None:
    hop = _SlowHop(delay=0.1, fail_first=2)   # two 503s: retried by the worker that took them
    thread = threading.Thread(target=hop.serve_forever, daemon=True)
    thread.start()
    try:
        forwarder = _Forwarder(ServeOptions(
            load_config(CONFIG), forward=f"http://127.0.0.1:{hop.server_address[1]}",
            forward_workers=workers))
        for i in range(12):
            forwarder.put(b"x" * (i + 1), i + 1)
        assert forwarder.drain(time.monotonic() + 30)
    finally:
        hop.shutdown()
        hop.server_close()
    assert forwarder.counts["forwarded_spans"] == sum(range(1, 13))
    assert forwarder.counts["forwarded_requests"] == hop.received == 12
    assert forwarder.counts["forward_retries"] == 2 and forwarder.queued_bytes == 0
    assert hop.peak == workers and len(hop.ports) == workers   # one connection per worker


def test_forward_drain_at_the_deadline_counts_every_span_once(loopback_only: None) -> None:
    port = _free_port()   # nothing listens: every attempt fails and is retried
    forwarder = _Forwarder(ServeOptions(load_config(CONFIG), forward=f"http://127.0.0.1:{port}",
                                        forward_workers=3, forward_timeout=1))
    for i in range(10):
        forwarder.put(b"y" * 10, i + 1)
    time.sleep(0.3)
    assert not forwarder.drain(time.monotonic() + 0.2)
    assert forwarder.counts["forward_failed_spans"] == sum(range(1, 11))
    assert forwarder.counts["forwarded_spans"] == 0 and forwarder.queued_bytes == 0
