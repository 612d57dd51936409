"""OpenTelemetry traces in: OTLP trace messages, as JSON or protobuf, decoded into plain span records.

What this reads, one ``ExportTraceServiceRequest`` at a time (memory is bounded by one message):

- OTLP/JSON lines, as the OpenTelemetry Collector's file exporter (and the SDKs' JSON file
  exporters) write them: one message per line, ids in hex, enums as integers, 64-bit integers as
  strings (the OTLP/JSON encoding); a file holding one JSON message is read too;
- OTLP protobuf, as the file exporter writes it with ``format: proto``: each message after its
  length as 4 bytes, big-endian; a file holding one bare message (a saved HTTP body) is read too;
- either gzip-compressed (told by its first bytes, not its name);
- an OTLP/HTTP request body (``decode_body``), for the live receiver.

A span becomes an ``OtlpSpan``: the ids as integers (the low 63 bits of the 8-byte span id, so
that they fit loadprobe's int64 ``span_id`` and stay positive), its resource's ``service.name``
and ``host.name``, and its attributes as a plain dict. ``starts_request`` is the one rule for
which spans are requests: a span without a parent, or whose parent lives in another process.

Usage::

    from loadprobe.record import otlp

    kind = otlp.sniff("traces.jsonl")           # "json", "proto" or None (not OTLP)
    for spans in otlp.read_file("traces.jsonl"):   # one list per message
        for span in spans:
            print(span.service, span.name, span.end_ns - span.start_ns, span.attributes)

Standard library only for JSON; protobuf needs ``opentelemetry-proto`` (``pip install 'loadprobe[otlp]'``).
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import zlib
from typing import Iterator, NamedTuple

from .._errors import LoadprobeError

MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""The largest message read: a length prefix beyond it is a damaged file, not a message."""
_PLAUSIBLE_PREFIX = 64 * 1024 * 1024  # to tell a file by its first bytes: exporters send messages of a few MiB

SPAN_KIND_SERVER, SPAN_KIND_CONSUMER = 2, 5
STATUS_ERROR = 2
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200  # SpanFlags: whether the parent is in another process
_ID_BITS = (1 << 63) - 1
INVALID_PARENT = -1  # a parent id that is no id: the span cannot be placed, it is left out and counted
_KINDS = {"SPAN_KIND_UNSPECIFIED": 0, "SPAN_KIND_INTERNAL": 1, "SPAN_KIND_SERVER": 2, "SPAN_KIND_CLIENT": 3,
          "SPAN_KIND_PRODUCER": 4, "SPAN_KIND_CONSUMER": 5}
_STATUSES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
_GZIP_MAGIC = b"\x1f\x8b"
_PROTO_FIRST = 0x0A  # a message's first byte: field 1 (resource_spans), length-delimited


class OtlpSpan(NamedTuple):
    """One OTLP span, decoded. Times are epoch nanoseconds; ``parent_id`` 0 when it has none."""

    service: str | None
    host: str | None
    trace_id: str  # 32 lowercase hex digits
    span_id: int
    parent_id: int
    flags: int
    kind: int
    name: str
    start_ns: int
    end_ns: int
    status: int  # 0 unset, 1 ok, 2 error
    status_message: str
    attributes: dict

    @property
    def starts_request(self) -> bool:
        """Whether this span is a request of its service: it has no parent, or its parent is in another
        process -- as the span's flags say when the exporter set them, else as its kind says (a server
        or consumer span is where a call from elsewhere arrives)."""
        if not self.parent_id:
            return True
        if self.flags & _HAS_IS_REMOTE:
            return bool(self.flags & _IS_REMOTE)
        return self.kind in (SPAN_KIND_SERVER, SPAN_KIND_CONSUMER)


def span_id_of(raw: bytes) -> int:
    """loadprobe's int64 span id of an 8-byte OTLP span id (its low 63 bits); 0 for none."""
    return int.from_bytes(raw[-8:], "big") & _ID_BITS if raw else 0


# -- files -------------------------------------------------------------------------------------------------


def sniff(path) -> str | None:
    """``"json"`` or ``"proto"`` when the file at ``path`` holds OTLP traces, else None (a CSV or
    JSONL log, or not readable: the caller's reader says why)."""
    name = str(path).lower()
    try:
        with _open(path) as handle:
            head = handle.read(65536)
    except (OSError, EOFError, zlib.error):
        return None
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{":  # a byte-order mark some tools write, then JSON
        return "json" if b'"resourceSpans"' in head or b'"resource_spans"' in head else None
    if name.endswith((".pb", ".pb.gz", ".binpb", ".binpb.gz", ".otlp", ".otlp.gz", ".proto", ".proto.gz")):
        return "proto"
    bare = head[:1] == bytes([_PROTO_FIRST]) and _binary(head[:256])  # 0x0A is also a newline: text is no message
    # A length prefix, then a message; a plausible length only (blank lines would read as 168 MB).
    prefixed = len(head) > 4 and head[4] == _PROTO_FIRST and int.from_bytes(head[:4], "big") <= _PLAUSIBLE_PREFIX
    return "proto" if bare or prefixed else None


CUT_SHORT = "a message cut short at the end of the file"


def _binary(data: bytes) -> bool:
    """Whether ``data`` holds control bytes that text does not (a message's lengths and ids do)."""
    return any(b < 0x09 or 0x0E <= b < 0x20 for b in data)


def read_file(path, kind: str | None = None, skipped: dict | None = None) -> Iterator[list[OtlpSpan]]:
    """The spans of each message in the OTLP file at ``path`` (``kind``: "json" or "proto", else sniffed).

    A last message cut short (a file still being written) is counted in ``skipped[CUT_SHORT]``
    when ``skipped`` is given, else refused. Raises LoadprobeError naming the file (and the line
    or byte offset) on anything that is not OTLP.
    """
    where = str(path)
    kind = kind or sniff(path)
    if kind not in ("json", "proto"):
        raise LoadprobeError(f"{where}: not an OTLP traces file; expected OTLP/JSON lines or OTLP protobuf")
    decode = _proto_decoder(where) if kind == "proto" else None
    try:
        with _open(path) as handle:
            if kind == "json":
                yield from _json_messages(handle, where, skipped)
            else:
                for offset, data in _proto_messages(handle, where, skipped):
                    yield decode(data, f"{where}, byte {offset}")
    except EOFError as exc:  # gzip ended before its end marker: a compressed file still being written
        _cut_short(skipped, where, f"the compressed file ends early ({exc})")
    except (OSError, gzip.BadGzipFile, zlib.error) as exc:
        raise LoadprobeError(f"{where}: cannot read it ({exc}); check the file (gzip-compressed if it starts "
                             "so)") from None


def decode_body(body: bytes, content_type: str, where: str = "request") -> list[OtlpSpan]:
    """The spans of one OTLP/HTTP request body: ``application/x-protobuf`` or ``application/json``
    (already un-gzipped). Raises LoadprobeError on a body that is not an OTLP traces message."""
    if "json" in content_type.lower():
        try:
            document = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise LoadprobeError(f"{where}: not valid JSON ({exc})") from None
        return json_spans(document, where)
    return _proto_decoder(where)(body, where)


def _open(path):
    """The file as binary, through gzip when its first bytes say it is compressed."""
    with open(path, "rb") as handle:
        compressed = handle.read(2) == _GZIP_MAGIC
    return gzip.open(path, "rb") if compressed else open(path, "rb")


def _cut_short(skipped: dict | None, where: str, why: str) -> None:
    if skipped is None:
        raise LoadprobeError(f"{where}: {why}; was it cut short while being written?")
    skipped[CUT_SHORT] = skipped.get(CUT_SHORT, 0) + 1


def _json_messages(handle, where: str, skipped: dict | None) -> Iterator[list[OtlpSpan]]:
    """JSON lines; when the first line is not a whole message, the whole file as one JSON document."""
    first = handle.readline(MAX_MESSAGE_BYTES + 1)
    if first.startswith(b"\xef\xbb\xbf"):
        first = first[3:]
    try:
        documents = [json.loads(first)] if first.strip() else []
    except (ValueError, RecursionError):
        documents = None
    if documents is None:  # a message spread over lines (pretty-printed): one document
        rest = handle.read(MAX_MESSAGE_BYTES)
        if handle.read(1):
            raise LoadprobeError(f"{where}: one JSON document over {MAX_MESSAGE_BYTES >> 20} MiB; "
                                 "write OTLP/JSON lines (one message per line) instead")
        try:
            yield json_spans(json.loads(first + rest), where)
        except (ValueError, RecursionError) as exc:
            raise LoadprobeError(f"{where}: not valid JSON ({exc}); expected OTLP/JSON, one message per line") \
                from None
        return
    for document in documents:
        yield json_spans(document, f"{where}, line 1")
    number = 1
    while line := handle.readline(MAX_MESSAGE_BYTES + 1):
        number += 1
        if len(line) > MAX_MESSAGE_BYTES:
            raise LoadprobeError(f"{where}, line {number}: a line over {MAX_MESSAGE_BYTES >> 20} MiB; expected one "
                                 "OTLP/JSON message per line")
        if not line.strip():
            continue
        try:
            document = json.loads(line)
        except (ValueError, RecursionError) as exc:
            if not line.endswith(b"\n") and not handle.read(1):  # the last line, unfinished
                _cut_short(skipped, f"{where}, line {number}", "the last line is not a whole JSON message")
                return
            raise LoadprobeError(f"{where}, line {number}: not valid JSON ({exc}); "
                                 "expected one OTLP/JSON message per line") from None
        yield json_spans(document, f"{where}, line {number}")


def _proto_messages(handle, where: str, skipped: dict | None) -> Iterator[tuple[int, bytes]]:
    """(byte offset, message) of each length-prefixed message; a bare message is the whole file."""
    head = handle.peek(1)[:1]
    if head == bytes([_PROTO_FIRST]):
        data = handle.read(MAX_MESSAGE_BYTES + 1)
        if len(data) > MAX_MESSAGE_BYTES:
            raise LoadprobeError(f"{where}: one protobuf message over {MAX_MESSAGE_BYTES >> 20} MiB; "
                                 "write it length-prefixed, one message at a time")
        yield 0, data
        return
    offset = 0
    while prefix := handle.read(4):
        if len(prefix) < 4:
            _cut_short(skipped, f"{where}, byte {offset}", "the file ends inside a length prefix")
            return
        size = int.from_bytes(prefix, "big")
        if size > MAX_MESSAGE_BYTES:
            raise LoadprobeError(f"{where}, byte {offset}: a message of {size:,} bytes; expected OTLP protobuf, "
                                 "each message after its length as 4 bytes big-endian")
        data = handle.read(size)
        if len(data) < size:
            _cut_short(skipped, f"{where}, byte {offset}",
                       f"the file ends inside a message ({len(data):,} of {size:,} bytes)")
            return
        yield offset, data
        offset += 4 + size


# -- OTLP/JSON ---------------------------------------------------------------------------------------------


def json_spans(document, where: str) -> list[OtlpSpan]:
    """The spans of one OTLP/JSON ``ExportTraceServiceRequest`` (or ``TracesData``), decoded."""
    if not isinstance(document, dict):
        raise LoadprobeError(f"{where}: a JSON {type(document).__name__}, expected an OTLP message "
                             "(an object with resourceSpans)")
    spans: list[OtlpSpan] = []
    try:
        for resource_spans in _get(document, "resourceSpans", "resource_spans") or ():
            resource = _attributes(_get(_get(resource_spans, "resource") or {}, "attributes") or ())
            service, host = _text(resource.get("service.name")), _text(resource.get("host.name"))
            scopes = _get(resource_spans, "scopeSpans", "scope_spans") or \
                _get(resource_spans, "instrumentationLibrarySpans", "instrumentation_library_spans") or ()
            for scope in scopes:
                for span in _get(scope, "spans") or ():
                    spans.append(_json_span(span, service, host))
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        raise LoadprobeError(f"{where}: not an OTLP traces message ({exc}); expected the OTLP/JSON encoding "
                             "of ExportTraceServiceRequest") from None
    return spans


def _json_span(span: dict, service, host) -> OtlpSpan:
    status = _get(span, "status") or {}
    return OtlpSpan(
        service=service, host=host,
        trace_id=_id(_get(span, "traceId", "trace_id"), 16).hex(),
        span_id=span_id_of(_id(_get(span, "spanId", "span_id"), 8)),
        parent_id=_parent_of(_id(_get(span, "parentSpanId", "parent_span_id"), 8, invalid=None)),
        flags=int(_get(span, "flags") or 0),
        kind=_enum(_get(span, "kind"), _KINDS),
        name=str(_get(span, "name") or ""),
        start_ns=int(_get(span, "startTimeUnixNano", "start_time_unix_nano") or 0),
        end_ns=int(_get(span, "endTimeUnixNano", "end_time_unix_nano") or 0),
        status=_enum(_get(status, "code"), _STATUSES),
        status_message=str(_get(status, "message") or ""),
        attributes=_attributes(_get(span, "attributes") or ()),
    )


def _get(message: dict, name: str, other: str | None = None):
    """A field by its lowerCamelCase JSON name or, as protobuf's JSON parsers also accept, its proto name."""
    value = message.get(name)
    return message.get(other) if value is None and other is not None else value


def _id(value, size: int, invalid=b""):
    """An id of ``size`` bytes: hex as OTLP/JSON writes it, or base64 as protobuf's generic JSON mapping
    does; b"" when absent, ``invalid`` when neither (a span with an invalid id is left out and counted)."""
    if value is None or value == "":
        return b""
    if not isinstance(value, str):
        return invalid
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        try:
            raw = base64.b64decode(value, validate=True)
        except ValueError:
            return invalid
    return raw if len(raw) == size else invalid


def _parent_of(raw: bytes | None) -> int:
    """The parent's span id: 0 for none, INVALID_PARENT when one is given but is not an id."""
    if raw is None or (raw and len(raw) != 8):
        return INVALID_PARENT
    return span_id_of(raw)


def _enum(value, names: dict) -> int:
    return names.get(value, 0) if isinstance(value, str) and not value.isdigit() else int(value or 0)


def _attributes(pairs) -> dict:
    return {pair["key"]: _json_value(pair.get("value") or {}) for pair in pairs}


def _json_value(value: dict):
    """An AnyValue as a Python value (int64 strings as int, lists and key-value lists as list and dict)."""
    for key, read in _JSON_VALUES:
        if key in value:
            return read(value[key])
    return None


_SPECIAL_DOUBLES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _double(value) -> float:
    """A double: a JSON number, or the strings OTLP/JSON uses for NaN and the infinities."""
    return _SPECIAL_DOUBLES[value] if value in _SPECIAL_DOUBLES else float(value)


_JSON_VALUES = (
    ("stringValue", str), ("intValue", int), ("doubleValue", _double), ("boolValue", bool),
    ("arrayValue", lambda array: [_json_value(v) for v in (array.get("values") or ())]),
    ("kvlistValue", lambda kv: _attributes(kv.get("values") or ())),
    ("bytesValue", base64.b64decode),
    ("string_value", str), ("int_value", int), ("double_value", _double), ("bool_value", bool),
)


# -- OTLP protobuf -----------------------------------------------------------------------------------------


def protobuf_available() -> bool:
    """Whether OTLP protobuf can be decoded here (``opentelemetry-proto`` installed)."""
    from importlib.util import find_spec

    try:
        return find_spec("opentelemetry.proto.collector.trace.v1.trace_service_pb2") is not None
    except ImportError:  # a parent package missing
        return False


def _proto_decoder(where: str):
    """A function decoding one protobuf message into spans; a LoadprobeError when protobuf is missing."""
    try:
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    except ImportError:
        raise LoadprobeError(f"{where}: reading OTLP protobuf needs the opentelemetry-proto package; "
                             "pip install 'loadprobe[otlp]' (or export OTLP/JSON)") from None

    def decode(data: bytes, at: str) -> list[OtlpSpan]:
        try:
            message = ExportTraceServiceRequest.FromString(data)
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise LoadprobeError(f"{at}: not an OTLP traces message ({exc}); expected a protobuf "
                                 "ExportTraceServiceRequest") from None
        return _proto_spans(message)

    return decode


def _proto_spans(message) -> list[OtlpSpan]:
    spans = []
    for resource_spans in message.resource_spans:
        resource = _proto_attributes(resource_spans.resource.attributes)
        service, host = _text(resource.get("service.name")), _text(resource.get("host.name"))
        for scope in resource_spans.scope_spans:
            for span in scope.spans:
                spans.append(OtlpSpan(
                    service=service, host=host, trace_id=span.trace_id.hex() if len(span.trace_id) == 16 else "",
                    span_id=span_id_of(span.span_id) if len(span.span_id) == 8 else 0,
                    parent_id=_parent_of(span.parent_span_id), flags=span.flags, kind=span.kind, name=span.name,
                    start_ns=span.start_time_unix_nano, end_ns=span.end_time_unix_nano, status=span.status.code,
                    status_message=span.status.message, attributes=_proto_attributes(span.attributes)))
    return spans


def _proto_attributes(pairs) -> dict:
    return {pair.key: _proto_value(pair.value) for pair in pairs}


def _proto_value(value):
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_proto_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return _proto_attributes(value.kvlist_value.values)
    return getattr(value, which) if which else None


def _text(value) -> str | None:
    return None if value is None or value == "" else str(value)
