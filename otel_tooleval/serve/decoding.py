"""Request bodies: decompression within a size limit, parsing, the refusal and answer messages."""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"
_RETRY_AFTER_SECONDS = 1
_INFLATE_CHUNK = 64 * 1024


def _pb() -> Any:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    return trace_service_pb2


class Refused(Exception):
    """A request is not accepted: ``retry`` tells "try again later" from "bad request"."""

    def __init__(self, message: str, *, retry: bool = False, status: int = 400) -> None:
        super().__init__(message)
        self.retry = retry
        self.status = status



_ID_FIELDS = {"traceId": 16, "spanId": 8, "parentSpanId": 8}


def _json_ids(node: Any, path: str) -> None:
    """OTLP/JSON carries ids as hex; protobuf's JSON mapping wants base64. Converted in place."""
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}" if path else key
            size = _ID_FIELDS.get(key)
            if size is not None and isinstance(value, str):
                if value == "":
                    continue
                try:
                    raw = bytes.fromhex(value)
                except ValueError:
                    raise ValueError(f"{where}: {value!r} is not hex") from None
                node[key] = base64.b64encode(raw).decode()
            elif isinstance(value, (dict, list)):
                _json_ids(value, where)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _json_ids(value, f"{path}[{i}]")


def parse_request(body: bytes, content_type: str) -> Any:
    """An ExportTraceServiceRequest from an OTLP/HTTP body.

    Raises:
        ValueError: the body does not parse; the message names the field or position.
    """
    request = _pb().ExportTraceServiceRequest()
    if content_type == _JSON:
        from google.protobuf import json_format

        try:
            doc = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not JSON: {exc}") from None
        except RecursionError:   # the parser recurses per level: [[[[… 100k deep
            raise ValueError("JSON nested too deeply") from None
        if not isinstance(doc, dict):
            raise ValueError("the JSON body must be an object with resourceSpans")
        try:
            _json_ids(doc, "")
            json_format.ParseDict(doc, request, ignore_unknown_fields=True)
        except RecursionError:
            raise ValueError("JSON nested too deeply for an ExportTraceServiceRequest") from None
        except (json_format.ParseError, TypeError, AttributeError) as exc:
            raise ValueError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                             ) from None
        return request
    from google.protobuf.message import DecodeError

    try:
        request.ParseFromString(body)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise ValueError(f"not an ExportTraceServiceRequest: {exc}") from None
    return request




def _response(rejected: int, message: str) -> Any:
    response = _pb().ExportTraceServiceResponse()
    if rejected:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    return response


def _one_line(text: str, limit: int = 300) -> str:
    """``text`` for a log line or an error answer: one line, at most ``limit`` characters
    (parser messages can quote the body)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _decompress(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The body as sent, inflated: every gzip member (RFC 1952 allows several, and senders
    that concatenate compressed chunks produce them), never more than ``limit`` bytes out.

    Raises:
        Refused: 415 for an unknown encoding; 400 for data that does not inflate, a stream
            that did not end (a cut-off body must not be answered 200 for what it lost) or
            bytes after the end; 413 past ``limit``.
    """
    encoding = (encoding or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding not in ("gzip", "deflate"):
        raise Refused(f"unsupported Content-Encoding {encoding!r}", status=415)
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    out = bytearray()
    inflater = zlib.decompressobj(wbits)
    pos = 0
    chunk = b""
    # Input goes in by chunks so that what is left after a member is never a copy of the
    # whole rest of the body (many tiny members would make that quadratic).
    while True:
        if not chunk:
            if pos >= len(body):
                break
            chunk = body[pos:pos + _INFLATE_CHUNK]
            pos += len(chunk)
        if inflater.eof:   # another member follows
            if encoding == "deflate":
                raise Refused("bytes after the end of the deflate stream")
            chunk = chunk.lstrip(b"\0")   # zero padding between members, as gzip(1) allows
            if not chunk:
                continue
            inflater = zlib.decompressobj(wbits)
        try:
            out += inflater.decompress(chunk, limit - len(out) + 1)
        except zlib.error as exc:
            raise Refused(f"body is not valid {encoding}: {exc}") from None
        if len(out) > limit:
            raise Refused(f"decompressed body is over the limit of {limit} bytes", status=413)
        chunk = inflater.unused_data if inflater.eof else b""
    if not inflater.eof:
        raise Refused(f"the {encoding} stream does not end: the body is cut off")
    return bytes(out)
