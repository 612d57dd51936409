"""An OpenAI-compatible HTTP server on 127.0.0.1 whose answers stream at set times, for tests that check
what ``loadprobe load --openai`` measures against what the server did (its own log of every request).

It counts one token per prompt word (a chat adds ``CHAT_TEMPLATE_TOKENS``), writes the first output
chunk ``first_ms`` after a request arrives and each later one ``gap_ms`` after the one before, packing
``tokens_per_chunk`` tokens into a chunk, and ends with the usage chunk (``include_usage``) and
``[DONE]``. Switches make it behave like servers that refuse ``ignore_eos``, send no usage, or stop
early. Real sockets and chunked HTTP/1.1; standard library only.

Usage::

    with OpenAIServer(first_ms=20, gap_ms=5) as server:
        run loadprobe load server.url --openai ...
        server.log    # [{"arrived_ns", "chunks_ns": [...], "prompt_tokens", "max_tokens", "output_tokens", ...}]
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHAT_TEMPLATE_TOKENS = 5


class OpenAIServer:
    def __init__(self, *, first_ms: float = 20.0, gap_ms: float = 5.0, tokens_per_chunk: int = 1,
                 accepts_ignore_eos: bool = True, sends_usage: bool = True, model: str = "tiny-test",
                 stop_after: int | None = None) -> None:
        self.first_ms, self.gap_ms, self.tokens_per_chunk = first_ms, gap_ms, tokens_per_chunk
        self.accepts_ignore_eos, self.sends_usage, self.model = accepts_ignore_eos, sends_usage, model
        self.stop_after = stop_after  # without ignore_eos, outputs end after this many tokens (an "EOS")
        self.log: list[dict] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def streamed(self) -> list[dict]:
        """The log of the streamed requests (``prepare``'s questions are not streamed)."""
        with self._lock:
            return [entry for entry in self.log if entry["stream"]]

    def __enter__(self) -> "OpenAIServer":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Each chunk leaves at once, as from any streaming server (Nagle would hold it for an ACK).
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                arrived = time.perf_counter_ns()
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                chat = self.path.endswith("/chat/completions")
                if not chat and not self.path.endswith("/completions"):
                    return self._json(404, {"error": {"message": f"no route {self.path}"}})
                if request.get("model") != server.model:
                    return self._json(404, {"error": {"message": f"The model `{request.get('model')}` does not "
                                                                 "exist."}})
                if "ignore_eos" in request and not server.accepts_ignore_eos:
                    return self._json(400, {"error": {"message": "Unrecognized request argument supplied: "
                                                                 "ignore_eos"}})
                text = request["messages"][-1]["content"] if chat else request["prompt"]
                prompt_tokens = len(text.split()) + (CHAT_TEMPLATE_TOKENS if chat else 0)
                asked = int(request["max_tokens"])
                output = asked if request.get("ignore_eos") or server.stop_after is None else min(
                    asked, server.stop_after)
                entry = {"arrived_ns": arrived, "chunks_ns": [], "prompt_tokens": prompt_tokens, "max_tokens": asked,
                         "output_tokens": output, "stream": bool(request.get("stream")), "chat": chat,
                         "request_id": self.headers.get("x-request-id")}
                with server._lock:
                    server.log.append(entry)
                usage = {"prompt_tokens": prompt_tokens, "completion_tokens": output,
                         "total_tokens": prompt_tokens + output}
                if not request.get("stream"):
                    return self._json(200, {"object": "text_completion", "usage": usage,
                                            "choices": [{"index": 0, "text": "x " * output}]})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                if chat:
                    self._event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
                due = arrived + server.first_ms * 1e6
                sent = 0
                while sent < output:
                    time.sleep(max(0.0, (due - time.perf_counter_ns()) / 1e9))
                    n = min(server.tokens_per_chunk, output - sent)
                    piece = " tok" * n
                    choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
                    sent += n
                    choice["finish_reason"] = "length" if sent == output else None
                    # timed before the write: once written, the client may read it before this thread runs again
                    entry["chunks_ns"].append(time.perf_counter_ns())
                    self._event({"object": "chunk", "choices": [choice], "usage": None})
                    due += server.gap_ms * 1e6
                if server.sends_usage and (request.get("stream_options") or {}).get("include_usage"):
                    self._event({"object": "chunk", "choices": [], "usage": usage})
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")

            def _event(self, data: dict) -> None:
                self._chunk(b"data: " + json.dumps(data).encode() + b"\n\n")

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _json(self, status: int, data: dict) -> None:
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler
