"""OTLP protobuf files: a sequence of length-delimited ``ExportTraceServiceRequest`` messages.

The collector's file exporter (``format: proto``) puts each message's size before it as a
4-byte big-endian unsigned integer. Protobuf's own delimited streams (``writeDelimitedTo``,
``parseDelimitedFrom``) use a varint instead; which one a file uses is found by trying the
first message both ways.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

from ..model import SpanRecord
from .problems import BAD_SHAPE, InputError, describe
from .source import DEFAULT_MAX_LINE_BYTES, READ_ERRORS, pushback

if TYPE_CHECKING:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

__all__ = ["proto_records", "record_from_proto"]

_new = tuple.__new__  # SpanRecord._make without its length check
_MAX_MESSAGE = 1 << 28  # 256 MiB: larger sizes are garbage, not a message
_MAX_EMPTY_RUN = 1024   # empty messages in a row taken for zeros, not messages
_REMOTE = 0x300
_STATUS_ERROR = 2


def _request_class() -> type[ExportTraceServiceRequest]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    return ExportTraceServiceRequest


def _decode_error() -> type[Exception]:
    error: type[Exception] = importlib.import_module("google.protobuf.message").DecodeError
    return error


def _read_exact(stream: IO[bytes], size: int) -> bytes:
    chunks = []
    while size > 0:
        chunk = stream.read(min(size, 1 << 24))
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _read_varint(stream: IO[bytes]) -> tuple[int | None, bytes]:
    """A varint and the bytes it took; None at the end of input or for a broken varint."""
    value, shift, taken = 0, 0, bytearray()
    while len(taken) < 10:
        byte = stream.read(1)
        if not byte:
            return None, bytes(taken)
        taken += byte
        value |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return value, bytes(taken)
        shift += 7
    return None, bytes(taken)


def _parse(request_class: type[ExportTraceServiceRequest], body: bytes
           ) -> ExportTraceServiceRequest | None:
    message = request_class()
    try:
        message.ParseFromString(body)
    except (_decode_error(), RuntimeError, ValueError):
        return None
    return message


def _frame_size(stream: IO[bytes], framing: str) -> tuple[int | None, bytes]:
    if framing == "be32":
        header = _read_exact(stream, 4)
        return (int.from_bytes(header, "big") if len(header) == 4 else None), header
    return _read_varint(stream)


def _detect(stream: IO[bytes], name: str, request_class: type[ExportTraceServiceRequest],
            limit: int) -> tuple[str, IO[bytes]]:
    """``be32`` or ``varint``, and the stream with what was tried put back."""
    taken = b""
    over = ""
    for framing in ("be32", "varint"):
        stream = pushback(taken, stream)
        try:
            size, header = _frame_size(stream, framing)
            body = b""
            if size is not None and limit < size <= _MAX_MESSAGE:
                over = (f", or its first message is longer than {limit} bytes, the limit "
                        f"(--max-line-bytes N raises it)")
            elif size is not None and size <= _MAX_MESSAGE:
                body = _read_exact(stream, size)
        except READ_ERRORS as exc:
            raise InputError(f"{name}: cannot read: {exc}") from None
        if size is not None and len(body) == size:
            message = _parse(request_class, body)
            # An empty first message proves nothing when the other framing was over the limit.
            if message is not None and (size == 0 and not over or len(message.resource_spans)):
                return framing, pushback(header + body, stream)
        taken = header + body
    raise InputError(f"{name}: unknown format: neither JSON (OTLP/JSON or Jaeger) nor "
                     f"length-delimited OTLP protobuf (ExportTraceServiceRequest){over}")


def proto_records(stream: IO[bytes], name: str, report: Callable[[str], None], *,
                  max_message_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[SpanRecord]:
    """Every span of every message; a message that does not parse is reported and skipped.

    Raises:
        InputError: the first message cannot be read either way (not OTLP protobuf); a
            message longer than ``max_message_bytes`` (``--max-line-bytes``), before it is read.
    """
    limit = max_message_bytes
    request_class = _request_class()
    framing, stream = _detect(stream, name, request_class, limit)
    offset, number, empty = 0, 0, 0
    while True:
        number += 1
        try:
            size, header = _frame_size(stream, framing)
            if size is None:
                if header:
                    report(f"message {number} at byte {offset}: truncated size; input ends")
                return
            if size > _MAX_MESSAGE:
                report(f"message {number} at byte {offset}: size {size} is not plausible; "
                       f"the rest of the input is skipped")
                return
            if size > limit:
                raise InputError(f"{name}: message {number} at byte {offset}: longer than "
                                 f"{limit} bytes ({size}), the limit (--max-line-bytes N "
                                 f"raises it)")
            if size == 0:
                # No exporter writes an empty batch; a run of them is zeros (a file
                # preallocated, or left by a crash), read 4 bytes at a time otherwise: a
                # gzip bomb of zeros took minutes per GiB.
                empty += 1
                if empty == _MAX_EMPTY_RUN:
                    report(f"message {number - empty + 1} at byte "
                           f"{offset - len(header) * (empty - 1)}: {empty} empty messages in "
                           f"a row (zero bytes, not messages); the rest of the input is "
                           f"skipped")
                    return
                offset += len(header)
                continue
            empty = 0
            body = _read_exact(stream, size)
        except READ_ERRORS as exc:
            report(f"message {number} at byte {offset}: cannot read further: {exc}")
            return
        if len(body) < size:
            report(f"message {number} at byte {offset}: truncated ({len(body)} of {size} "
                   f"bytes); input ends")
            return
        message = _parse(request_class, body)
        where = f"message {number} at byte {offset}"
        offset += len(header) + size
        if message is None:
            report(f"{where}: not an ExportTraceServiceRequest; skipped")
            continue
        yield from _message_records(message, where, report)


def _message_records(message: ExportTraceServiceRequest, where: str,
                     report: Callable[[str], None]) -> list[SpanRecord]:
    out: list[SpanRecord] = []
    for ri, rs in enumerate(message.resource_spans):
        for si, ss in enumerate(rs.scope_spans):
            scope = ss.scope.name
            for pi, span in enumerate(ss.spans):
                try:
                    out.append(record_from_proto(span, scope))
                except BAD_SHAPE as exc:
                    report(f"{where}: resource_spans[{ri}].scope_spans[{si}].spans[{pi}]: "
                           f"{describe(exc)}; span skipped")
    return out


def record_from_proto(span: Any, scope: str) -> SpanRecord:
    """The SpanRecord of one protobuf ``Span``; ValueError for an invalid id."""
    trace_id, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
    if len(trace_id) != 16 or len(span_id) != 8 or (parent and len(parent) != 8):
        raise _bad_id(trace_id, span_id, parent)
    tid, sid = _from_bytes(trace_id, "big"), _from_bytes(span_id, "big")
    pid = _from_bytes(parent, "big") if parent else 0
    if not (tid and sid and (pid or not parent)):
        raise _bad_id(trace_id, span_id, parent)
    status = span.status
    error = None
    events = span.events
    if status.code == _STATUS_ERROR:
        error = status.message or _exception_text(events) or "error"
    return _new(SpanRecord, (
        tid,
        sid,
        pid,
        span.name,
        span.start_time_unix_nano,
        span.end_time_unix_nano or None,
        _attributes(span.attributes),
        error,
        bool(pid) and span.flags & _REMOTE == _REMOTE,
        scope,
        tuple([(e.name, _attributes(e.attributes)) for e in events]) if events else (),
    ))


_from_bytes = int.from_bytes


def _bad_id(trace_id: bytes, span_id: bytes, parent: bytes) -> ValueError:
    for what, raw, size in (("trace_id", trace_id, 16), ("span_id", span_id, 8),
                            ("parent_span_id", parent, 8)):
        if (raw or what != "parent_span_id") and (len(raw) != size or not any(raw)):
            return ValueError(f"invalid {what} {raw.hex()!r}")
    return ValueError("invalid ids")


def _attributes(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in items:
        value = kv.value
        text = value.string_value   # "" for any other kind: then look which one it is
        if text:
            out[kv.key] = text
            continue
        kind = value.WhichOneof("value")
        if kind == "string_value":
            out[kv.key] = text
        elif kind is not None:
            out[kv.key] = any_value(value)
    return out


def _exception_text(events: Any) -> str | None:
    for event in events:
        if event.name == "exception":
            attrs = _attributes(event.attributes)
            message = attrs.get("exception.message") or attrs.get("exception.type")
            if message:
                return str(message)
    return None


def any_value(value: Any) -> Any:
    """A protobuf ``AnyValue`` as the same Python value the OTLP/JSON reader gives."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return value.int_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "double_value":
        return value.double_value
    if kind == "array_value":
        return tuple(any_value(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return bytes(value.bytes_value)
    return None
