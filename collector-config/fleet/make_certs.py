"""The fleet's TLS files and bearer token, made once into a directory (the ``certs`` service).

    python make_certs.py DIR HOST...

Writes, unless ``DIR/token`` is already there: ``ca.pem`` (a CA made here), ``server.pem`` and
``server-key.pem`` (the graders' certificate for each HOST, ``localhost`` and ``127.0.0.1``,
signed by that CA) and ``token`` (one random bearer token, on one line). ``serve`` reads
``--tls-cert``/``--tls-key``/``--bearer-token-file`` from them; tier 1 reads ``ca.pem`` to
verify the graders and ``token`` (the ``bearertokenauth`` extension) to present. They live in a
Docker volume, never in the repository; for production, bring certificates from your own CA.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    import trustme

    if len(argv) < 2:
        print("usage: make_certs.py DIR HOST...", file=sys.stderr)
        return 2
    out, hosts = Path(argv[0]), argv[1:]
    out.mkdir(parents=True, exist_ok=True)
    if (out / "token").exists():
        print(f"make_certs: {out} already holds the fleet's certificates and token; kept")
        return 0
    ca = trustme.CA(organization_name="otel-tooleval fleet")
    leaf = ca.issue_cert(*hosts, "localhost", "127.0.0.1")
    ca.cert_pem.write_to_path(str(out / "ca.pem"))
    (out / "server.pem").write_bytes(b"".join(pem.bytes() for pem in leaf.cert_chain_pems))
    key = out / "server-key.pem"
    leaf.private_key_pem.write_to_path(str(key))
    os.chmod(key, 0o600)   # serve runs as root in its container
    token = out / "token"
    token.write_text(secrets.token_urlsafe(32))
    os.chmod(token, 0o644)   # the collector image runs as uid 10001 and reads it
    print(f"make_certs: CA, certificate for {', '.join(hosts)} and a bearer token in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
