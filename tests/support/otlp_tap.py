"""An OTLP/HTTP endpoint for tests that keeps what an exporter sent, read independently of loadprobe
(by the OpenTelemetry protobuf classes), and passes each request on to a receiver when given one.

Usage::

    tap = OtlpTap().start()                  # tap.endpoint: give it to the engine at its start
    tap.forward_to = receiver.endpoint        # while a test records; None: kept here only
    tap.spans("llm_request")                 # [{"trace_id", "span_id", "start_ns", "end_ns", "attributes"}]
    tap.stop()
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class OtlpTap:
    def __init__(self) -> None:
        self.forward_to: str | None = None
        self.answers: list[int] = []  # the receiver's status for each request passed on
        self._spans: list[dict] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    def start(self) -> "OtlpTap":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def spans(self, name: str | None = None) -> list[dict]:
        with self._lock:
            return [s for s in self._spans if name is None or s["name"] == name]

    def clear(self) -> None:
        with self._lock:
            self._spans.clear()
            self.answers.clear()

    def _keep(self, body: bytes) -> None:
        message = ExportTraceServiceRequest.FromString(body)
        kept = []
        for resource in message.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    attributes = {}
                    for pair in span.attributes:
                        which = pair.value.WhichOneof("value")
                        attributes[pair.key] = getattr(pair.value, which) if which else None
                    kept.append({"name": span.name, "trace_id": span.trace_id.hex(), "span_id": span.span_id,
                                 "start_ns": span.start_time_unix_nano, "end_ns": span.end_time_unix_nano,
                                 "attributes": attributes})
        with self._lock:
            self._spans += kept

    def _handler(self):
        tap = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                tap._keep(body)
                status, answer = 200, b""
                if tap.forward_to:
                    request = urllib.request.Request(tap.forward_to, data=body, headers={
                        "Content-Type": self.headers.get("Content-Type") or "application/x-protobuf"})
                    try:
                        with urllib.request.urlopen(request, timeout=30) as response:
                            status, answer = response.status, response.read()
                    except urllib.error.HTTPError as exc:
                        status, answer = exc.code, exc.read()
                    tap.answers.append(status)
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:
                pass

        return Handler
