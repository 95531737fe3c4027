"""A tiny OTLP/HTTP (protobuf) trace receiver on 127.0.0.1, for recording what a framework
exports over OTLP exactly as it sends it.

Each POST to ``/v1/traces`` is one ``ExportTraceServiceRequest``, written as one OTLP/JSON line
(protobuf's ``json_format`` with the OTLP/JSON id rule: trace and span ids as lowercase hex),
the same format as ``otel_tooleval.OTLPJsonFileExporter`` writes.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _ids_to_hex(item: dict[str, Any]) -> None:
    for key in _ID_FIELDS:
        if isinstance(item.get(key), str):
            item[key] = base64.b64decode(item[key]).hex()


def otlp_json_line(body: bytes) -> str:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    doc = MessageToDict(request, use_integers_for_enums=True)
    for resource_spans in doc.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                _ids_to_hex(span)
                for link in span.get("links", ()):
                    _ids_to_hex(link)
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        encoding = (self.headers.get("Content-Encoding") or "").lower()
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        if self.path.rstrip("/") != "/v1/traces":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        with self.server.lock:  # type: ignore[attr-defined]
            with open(self.server.path, "a", encoding="utf-8") as handle:  # type: ignore[attr-defined]
                handle.write(otlp_json_line(body))
            self.server.requests += 1  # type: ignore[attr-defined]
        data = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def receive(path: Path) -> Iterator[tuple[str, ThreadingHTTPServer]]:
    """Receive OTLP/HTTP traces into ``path``; yield (the traces endpoint URL, the server)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.path = path  # type: ignore[attr-defined]
    server.lock = threading.Lock()  # type: ignore[attr-defined]
    server.requests = 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", server
    finally:
        server.shutdown()
        server.server_close()
