"""A live OTLP/HTTP traces receiver: point an engine's OpenTelemetry exporter at it, get a loadprobe recording.

``POST /v1/traces`` takes ``application/x-protobuf`` or ``application/json`` bodies (gzip or
not), as OTLP/HTTP exporters send them; every span is converted by the importer's rule
(``otlp_spans.Converter``: requests, stages, attributes, GenAI phases) and written, per (host,
service) of its resource, into a run directory of the usual layout
``<output>/<host>/<service>/<pid>-<time>/`` (role ``received``; a resource without ``host.name`` is
taken to be this host): an Arrow stream per flush, Parquet per segment, run.json with the counters.
A crash loses at most one flush interval of what was settled, and the spans still held for their
trace's root or a first server span (bounded in rows and time: ``otlp_spans.MAX_HELD_ROWS``,
``MAX_HELD_S``, ``MAX_UNDECIDED_S``).

Bounds, as the recorder's: spans waiting in memory are capped at ``max_buffered_spans``; a
request that would pass the cap is answered 503 with ``Retry-After`` (OTLP exporters retry it)
and its spans are counted as refused; a body over ``max_body_bytes`` is answered 413; a body that
is not OTLP 400, with the reason. Nothing the receiver does blocks the sender beyond decoding its
request. ``stop()`` (or SIGINT/SIGTERM under ``loadprobe record --otlp``) writes what it holds,
turns every segment into Parquet and writes the final run.json.

Usage::

    from loadprobe.record.receiver import Receiver

    receiver = Receiver("data/", "127.0.0.1:4318").start()
    ...   # the engine runs with OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:4318/v1/traces
    receiver.stop()
    print(receiver.counters())
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from .._errors import LoadprobeError
from . import rundir
from .buffers import DEFAULT_MAX_BUFFERED_SPANS
from .otlp import decode_body, protobuf_available
from .otlp_spans import AttributeKeys, Converter
from .segments import SegmentWriter

TRACES_PATH = "/v1/traces"
DEFAULT_ADDRESS = "127.0.0.1:4318"  # OTLP/HTTP's own port
MAX_BODY_BYTES = 64 << 20
_HEX, _DECIMAL = re.compile(rb"[0-9a-fA-F]{1,15}"), re.compile(r"[0-9]{1,15}")
_DISCARD_BYTES = 1 << 30  # a refused body up to this is read and thrown away, so its sender reads the answer


def parse_address(address: str) -> tuple[str, int]:
    """``"127.0.0.1:4318"`` -> ("127.0.0.1", 4318); also ``http://127.0.0.1:4318/v1/traces`` (an
    exporter's endpoint, pasted), ``[::1]:4318``; ``":4318"`` listens on 127.0.0.1. LoadprobeError if not one."""
    text = str(address).strip()
    if "://" in text:
        text = text.split("://", 1)[1].split("/", 1)[0]
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise LoadprobeError(f"--otlp {address!r}: expected HOST:PORT, e.g. 127.0.0.1:4318")
    return host.strip("[]") or "127.0.0.1", int(port)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, bind: tuple[str, int], handler) -> None:
        if ":" in bind[0]:  # an IPv6 address
            self.address_family = socket.AF_INET6
        super().__init__(bind, handler)


class _Run:
    """One (host, service)'s run directory: its segment writer and counters."""

    def __init__(self, run_dir: Path, host: str, service: str, receiver: "Receiver") -> None:
        self.run_dir, self.host, self.service = run_dir, host, service
        self.writer = SegmentWriter(run_dir, "spans", rotate_bytes=receiver.rotate_bytes,
                                    rotate_interval_s=receiver.rotate_interval_s)
        self.pending: list = []  # tables waiting to be written (the disk refused them, or not yet flushed)
        self.spans_recorded = self.spans_dropped = self.write_errors = 0
        self.started_ns = time.time_ns()

    def info(self, receiver: "Receiver", stopped_ns: int | None) -> dict:
        return rundir.run_document(
            host=self.host, service=self.service, run_id=self.run_dir.name, role="received",
            started_ns=self.started_ns, stopped_ns=stopped_ns, pid=os.getpid(),
            process_started=receiver.process_started,
            settings={"flush_interval_s": receiver.flush_interval_s, "max_buffered_spans": receiver.max_buffered_spans,
                      "rotate_interval_s": receiver.rotate_interval_s, "rotate_bytes": receiver.rotate_bytes},
            counters={"spans_recorded": self.spans_recorded, "spans_dropped": self.spans_dropped,
                      "spans_written": self.writer.rows_written, "samples_written": 0, "samples_dropped": 0,
                      "files": self.writer.files_written, "write_errors": self.write_errors,
                      "extractor_errors": 0, "invalid_values": 0},
            receiver=receiver.counters(),
        )


class Receiver:
    """Receives OTLP/HTTP traces on ``address`` and records them under ``output_dir`` (see the module)."""

    def __init__(self, output_dir: str | os.PathLike = "loadprobe-data", address: str = DEFAULT_ADDRESS, *,
                 attributes=(), service: str | None = None, host: str | None = None, flush_interval_s: float = 1.0,
                 max_buffered_spans: int = DEFAULT_MAX_BUFFERED_SPANS, rotate_interval_s: float = 60.0,
                 rotate_bytes: int = 64 << 20, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.output_dir = Path(output_dir)
        self.bind = parse_address(address)
        self.converter = Converter(AttributeKeys.parse(attributes), service=service and rundir.safe_name(service),
                                   host=host and rundir.safe_name(host), unnamed_host=rundir.host_name())
        self.flush_interval_s, self.max_buffered_spans = flush_interval_s, max_buffered_spans
        self.rotate_interval_s, self.rotate_bytes, self.max_body_bytes = rotate_interval_s, rotate_bytes, max_body_bytes
        import psutil  # as the recorder: run_is_dead tells a reused pid by the process's start time

        self.process_started = psutil.Process().create_time()
        self.run_id = rundir.recorded_run_id(os.getpid(), time.time_ns())
        self.runs: dict[tuple[str, str], _Run] = {}
        self._lock = threading.Lock()  # the converter and the runs' pending tables
        self._write_lock = threading.Lock()  # one flush at a time
        self._wake = threading.Event()
        self._stopping = False
        self._server: _Server | None = None
        self._threads: list[threading.Thread] = []
        self._exports = self._refused_spans = self._bad_requests = self._lost_unplaced = self._flush_errors = 0
        self._unplaced: list = []  # ((host, service), table) converted, not yet handed to a run

    # -- life ------------------------------------------------------------------------------------------

    def start(self) -> "Receiver":
        if self._server is not None:  # started already (``with loadprobe.receive_otlp(...)``)
            return self
        try:
            self._server = _Server(self.bind, _handler(self))
        except OSError as exc:
            raise LoadprobeError(f"--otlp {self.bind[0]}:{self.bind[1]}: cannot listen there ({exc.strerror or exc}); "
                                 "choose another address or stop what uses it") from None
        self._threads = [threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                          name="loadprobe-otlp-server", daemon=True),
                         threading.Thread(target=self._flush_loop, name="loadprobe-otlp-flusher", daemon=True)]
        for thread in self._threads:
            thread.start()
        if not protobuf_available():
            self._warn("loadprobe: opentelemetry-proto is not installed: OTLP/HTTP protobuf exports will be refused "
                       "(400); pip install 'loadprobe[otlp]', or export OTLP/JSON (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
                       "=http/json)")
        return self

    @property
    def address(self) -> tuple[str, int]:
        """Where it listens (the port the system chose, when it was given port 0)."""
        return self._server.server_address[:2] if self._server else self.bind

    @property
    def endpoint(self) -> str:
        host, port = self.address
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}{TRACES_PATH}"

    def flush(self) -> None:
        """Write everything received so far (segments stay open)."""
        with self._write_lock:
            self._write(final=False)

    def stop(self) -> None:
        """Stop listening, write what is held, finish every segment as Parquet, write the final run.json."""
        if self._server is None:
            return
        with self._lock:
            self._stopping = True
        self._server.shutdown()
        self._server.server_close()
        self._wake.set()
        for thread in self._threads:
            thread.join(30)
        with self._write_lock:
            self._write(final=True)
        self._server = None

    def __enter__(self) -> "Receiver":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def counters(self) -> dict:
        """Exports taken (OTLP/HTTP requests answered 200), OTLP spans received, spans refused (503: each
        retry counts again), bad requests (400/404/405/411/413/415), spans lost (no run folder could be
        made) and spans left out (no valid id, bad times)."""
        return {"exports": self._exports, "spans_lost": self._lost_unplaced, "spans_received": self.converter.spans, "spans_refused": self._refused_spans,
                "bad_requests": self._bad_requests, "spans_skipped": dict(self.converter.skipped)}

    # -- receiving -------------------------------------------------------------------------------------

    def receive(self, body: bytes, content_type: str) -> tuple[int, str]:
        """One request's body: (HTTP status, reason). Called by the server's threads."""
        try:
            spans = decode_body(body, content_type, "request body")
        except LoadprobeError as exc:
            self.count_bad_request()
            return 400, str(exc)
        with self._lock:
            if self._stopping:  # the last write has begun or is about to: nothing may arrive after it
                return 503, "the receiver is stopping"
            # What waits to be written; rows the converter holds for their root are bounded apart (MAX_HELD_ROWS)
            waiting = self.converter.ready_rows + sum(t.num_rows for _, t in self._unplaced) + \
                sum(t.num_rows for run in self.runs.values() for t in run.pending)
            if waiting + len(spans) > self.max_buffered_spans and waiting:
                self._refused_spans += len(spans)
                self._wake.set()
                return 503, f"{waiting:,} spans wait to be written; retry"
            self._exports += 1
            self._unplaced += self.converter.add(spans)  # run folders are made by the writer, not here
        return 200, ""

    def count_bad_request(self) -> None:
        with self._lock:  # the server's threads count at once
            self._bad_requests += 1

    def _run(self, group: tuple[str, str]) -> _Run:
        """The group's run, its folder made on first use; OSError when the folder cannot be made."""
        run = self.runs.get(group)
        if run is None:
            host, service = (rundir.safe_name(name) for name in group)
            run_dir = rundir.create(rundir.run_path(self.output_dir, host, service, self.run_id))
            run = _Run(run_dir, host, service, self)
            self._write_run_json(run, None)
            with self._lock:  # receive() counts the runs' pending rows meanwhile
                self.runs[group] = run
        return run

    def _place(self, final: bool) -> None:
        """Hand every converted table to its run; a run whose folder cannot be made keeps its tables
        waiting (the memory cap still holds: senders are told to retry) until the last write drops them."""
        with self._lock:
            unplaced, self._unplaced = self._unplaced + list(self.converter.drain(final=final)), []
        kept = []
        for group, table in unplaced:
            try:
                run = self._run(group)
                with self._lock:
                    run.pending.append(table)
            except OSError as exc:
                if final:
                    self._lost_unplaced += table.num_rows
                    self._warn(f"loadprobe: cannot make a run folder under {self.output_dir} ({exc}); "
                               f"{table.num_rows:,} received spans are lost")
                else:
                    kept.append((group, table))
        with self._lock:
            self._unplaced[:0] = kept

    # -- writing ---------------------------------------------------------------------------------------

    def _flush_loop(self) -> None:
        while not self._stopping:
            self._wake.wait(self.flush_interval_s)
            self._wake.clear()
            if self._stopping:
                break
            try:
                with self._write_lock:
                    self._write(final=False)
            except Exception as exc:  # a bug here must not stop the writing: say it once, go on
                self._flush_errors += 1
                if self._flush_errors == 1:
                    self._warn(f"loadprobe: the OTLP receiver's writer failed ({exc!r}); it keeps going")

    def _write(self, final: bool) -> None:
        self._place(final)
        with self._lock:
            runs = list(self.runs.values())
        for run in runs:
            with self._lock:
                tables, run.pending = run.pending, []
            kept = []
            for table in tables:
                if kept:
                    kept.append(table)
                    continue
                try:  # one batch per table (the converter's columns are single chunks): a retry never doubles rows
                    for batch in table.combine_chunks().to_batches():
                        run.writer.write(batch)
                    run.spans_recorded += table.num_rows
                except OSError:
                    run.write_errors += 1
                    kept.append(table)
            if final:
                run.writer.close()
                run.spans_dropped += sum(t.num_rows for t in kept)  # the disk refused them to the end
                kept = []
            else:
                try:
                    run.writer.rotate_if_due()
                except OSError:
                    run.write_errors += 1  # the stream stays; the next rotation or the stop finishes it
            with self._lock:
                run.pending[:0] = kept
            self._write_run_json(run, time.time_ns() if final else None)

    @staticmethod
    def _warn(message: str) -> None:
        import sys

        print(message, file=sys.stderr)

    def _write_run_json(self, run: _Run, stopped_ns: int | None) -> None:
        info = run.info(self, stopped_ns)
        try:
            rundir.write_run_json(run.run_dir, info, room=True)
        except OSError:
            rundir.rewrite_in_place(run.run_dir, info)  # a full disk still takes the counters in place


class _Refused(Exception):
    """A request answered with ``status`` and ``reason`` before its body was taken."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def _handler(receiver: Receiver):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: exporters send one request after another

        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            try:
                if self.path.split("?", 1)[0] != TRACES_PATH:
                    self._skip_body()
                    raise _Refused(404, f"only {TRACES_PATH} is received here")
                body = self._unpacked(self._body())
            except _Refused as refused:
                receiver.count_bad_request()
                return self._answer(refused.status, str(refused))
            content_type = self.headers.get("Content-Type") or "application/x-protobuf"
            status, reason = receiver.receive(body, content_type)
            self._answer(status, reason, json="json" in content_type.lower())

        def do_GET(self) -> None:  # noqa: N802
            self._answer(405, f"POST OTLP traces to {TRACES_PATH}")

        def _body(self) -> bytes:
            """The request's body as sent: by Content-Length or chunked (the JavaScript exporter's way)."""
            limit = receiver.max_body_bytes
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                parts, size = [], 0
                while True:
                    size_text = self.rfile.readline(1024).split(b";", 1)[0].strip()
                    if not _HEX.fullmatch(size_text):
                        self.close_connection = True
                        raise _Refused(400, "a chunked body whose chunk size cannot be read")
                    chunk = int(size_text, 16)
                    if chunk == 0:
                        while self.rfile.readline(1024).strip():  # trailers, then the blank line
                            pass
                        return b"".join(parts)
                    size += chunk
                    if size > limit:
                        self.close_connection = True
                        raise _Refused(413, f"a body over {limit:,} bytes")
                    parts.append(self.rfile.read(chunk))
                    self.rfile.readline(8)  # the CRLF after each chunk
            length = (self.headers.get("Content-Length") or "").strip()
            if not _DECIMAL.fullmatch(length):
                self.close_connection = True  # nothing says where this body ends
                raise _Refused(411, "send a Content-Length or a chunked body")
            if int(length) > limit:
                self._discard(int(length))  # read, not kept: a client cut off mid-send sees a reset, not the 413
                raise _Refused(413, f"a body over {limit:,} bytes")
            return self.rfile.read(int(length))

        def _unpacked(self, body: bytes) -> bytes:
            """``body`` un-gzipped, never past the body limit (a small gzip can unpack to gigabytes)."""
            encoding = (self.headers.get("Content-Encoding") or "").lower().strip()
            if encoding in ("", "identity"):
                return body
            if encoding != "gzip":
                raise _Refused(415, f"Content-Encoding {encoding!r}: send gzip or none")
            inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                out = inflate.decompress(body, receiver.max_body_bytes + 1)
            except zlib.error as exc:
                raise _Refused(400, f"not gzip: {exc}") from None
            if len(out) > receiver.max_body_bytes:
                raise _Refused(413, f"a body over {receiver.max_body_bytes:,} bytes once unpacked")
            if not inflate.eof:
                raise _Refused(400, "a gzip body cut short")
            return out

        def _skip_body(self) -> None:
            length = (self.headers.get("Content-Length") or "").strip()
            if _DECIMAL.fullmatch(length):
                self._discard(int(length))
            else:
                self.close_connection = True  # chunked or unknown: the next request cannot be found

        def _discard(self, length: int) -> None:
            if length > _DISCARD_BYTES:
                self.close_connection = True
                return
            while length > 0:
                chunk = self.rfile.read(min(length, 1 << 20))
                if not chunk:
                    break
                length -= len(chunk)

        def _answer(self, status: int, reason: str, json: bool = False) -> None:
            # An empty ExportTraceServiceResponse: no bytes in protobuf, {} in JSON.
            body = (b"{}" if json else b"") if status == 200 else reason.encode("utf-8", "replace")
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if json and status == 200 else
                             "application/x-protobuf" if status == 200 else "text/plain; charset=utf-8")
            if status == 503:
                self.send_header("Retry-After", "1")
            if self.close_connection:
                self.send_header("Connection", "close")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args) -> None:  # noqa: A002 - quiet: counters say what happened
            pass

    return Handler
