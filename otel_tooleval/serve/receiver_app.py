"""What the receivers need of the service they feed: ``ReceiverApp``.

``ToolEvalServer`` (server.py) starts the receivers and is what they are given; typing them
against this protocol instead of the server class keeps ``serve/`` free of an import circle
(server imports the receivers, the receivers import only what sits below them).
"""

from __future__ import annotations

from typing import Any, Protocol

from .security import Certificates, TlsSettings, TokenStore
from .settings import ServeOptions


class ReceiverApp(Protocol):
    """The service as the gRPC and HTTP receivers see it (``ToolEvalServer`` is one)."""

    options: ServeOptions
    tls: TlsSettings | None
    tokens: TokenStore | None
    certificates: Certificates | None

    def _count(self, key: str, n: int = 1) -> None:
        """Add ``n`` to the counter ``key`` (thread-safe)."""

    def admit(self) -> None:
        """Raise ``Refused`` when no request may be read now (starting, draining, full)."""

    def ingest_body(self, body: bytes, content_type: str) -> tuple[int, str]:
        """Parse and ingest a body that ``admit`` let in; raise ``Refused`` otherwise."""

    def export(self, body: bytes, content_type: str) -> tuple[int, str]:
        """``admit`` then ``ingest_body``: the receivers' common path."""

    def health(self) -> tuple[int, dict[str, Any]]:
        """``GET /healthz``: the status code and the document."""
