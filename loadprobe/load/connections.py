"""HTTP/1.1 keep-alive connections for the load client: the request bytes, the response parser, the pool.

One request at a time per connection (no pipelining); responses are parsed as bytes arrive --
Content-Length, chunked, or until the server closes -- on asyncio's protocol callbacks, so a
response costs no task switch. The pool reuses an idle connection, opens more up to a cap, and
queues the rest in order.

Usage (``loadprobe.load.client.run`` does this)::

    target = http_target("http://127.0.0.1:8000/infer", "POST", [], b"{}")
    pool = Pool(loop, target, address, cap=256)
    pool.on_done = lambda request, status, done_ns, body_bytes, error: ...
    pool.submit(Request(1, "run-1", intended_ns))
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Callable
from urllib.parse import urlsplit

from .._errors import LoadprobeError
from ..schema import client_trace_id

__all__ = ["Connection", "Pool", "Request", "Target", "http_target", "os_reason", "traceparent_line"]


@dataclass(frozen=True)
class Target:
    """Where requests go and their bytes, built once: a send only joins the head, an id and a tail."""

    url: str
    host: str
    port: int
    head: bytes  # the request up to the x-request-id value
    tails: tuple  # after it, one per body (request n takes n mod len): Content-Length, end of headers, body
    head_only: bool  # a HEAD request: responses describe a body they do not carry
    body_of: Callable[[int], bytes] | None = None  # request n's body, made as it is sent (``tails`` unused)
    stream: Callable | None = None  # makes a reader fed each 2xx answer's body as it arrives (openai.StreamReader)
    traced: bool = True  # each request carries a W3C traceparent (``Request.trace``); False when a header gave one

    def tail(self, n: int) -> bytes:
        """What follows request ``n``'s id: Content-Length, the end of the headers, its body."""
        if self.body_of is None:
            return self.tails[n % len(self.tails)]
        body = self.body_of(n)
        return b"\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)


def http_target(url: str, method: str, headers: list[str] | tuple = (), body=b"", body_of=None,
                stream=None) -> Target:
    """The target of ``url``; LoadprobeError for what HTTP/1.1 cannot send (https, a bad header, a bad port).
    ``body_of(n)``, when given, makes request n's body as it is sent, instead of ``body``; ``stream``: see Target."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        why = "https is not supported (send through a plain-HTTP port or a local proxy)" \
            if parts.scheme == "https" else "expected http://HOST[:PORT]/PATH"
        raise LoadprobeError(f"URL {url!r}: {why}")
    try:
        port = parts.port or 80
    except ValueError:
        raise LoadprobeError(f"URL {url!r}: the port is not a number from 1 to 65535") from None
    if not method.isalpha():
        raise LoadprobeError(f"--method {method!r} is not an HTTP method; e.g. GET or POST")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    lines = [f"{method.upper()} {path} HTTP/1.1"]
    names = set()
    for header in headers:
        name, sep, value = header.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not name or any(c in header for c in "\r\n") or " " in name:
            raise LoadprobeError(f"--header {header!r}: expected NAME:VALUE, e.g. --header 'Authorization: Bearer x'")
        if name.lower() in ("x-request-id", "content-length", "transfer-encoding"):
            raise LoadprobeError(f"--header {name}: set by loadprobe load itself (request ids, --body); leave it out")
        names.add(name.lower())
        lines.append(f"{name}: {value}")
    if "host" not in names:
        lines.append(f"Host: {parts.netloc.rsplit('@', 1)[-1]}")
    bodies = [_as_bytes(b) for b in body] if isinstance(body, (list, tuple)) else [_as_bytes(body)]
    if not bodies:
        raise LoadprobeError("the list of request bodies is empty; give at least one")
    sized = any(bodies) or method.upper() not in ("GET", "HEAD", "DELETE", "OPTIONS")
    tails = tuple((f"\r\nContent-Length: {len(b)}".encode() if sized else b"") + b"\r\n\r\n" + b for b in bodies)
    try:
        head = ("\r\n".join(lines) + "\r\nx-request-id: ").encode("latin-1")
    except UnicodeEncodeError:
        raise LoadprobeError(f"URL {url!r} or a --header holds characters HTTP headers cannot carry; "
                             "percent-encode the URL (e.g. %C3%A9) and keep headers to Latin-1") from None
    return Target(url, parts.hostname, port, head, tails, method.upper() == "HEAD", body_of, stream,
                  traced="traceparent" not in names)


def traceparent_line(run_id: str, n: int) -> bytes:
    """The traceparent header line of request ``n`` of run ``run_id``: its trace id names the request
    (``schema.client_trace_id``), its parent span id is ``n``, sampled -- so that a server tracing with
    OpenTelemetry records it, under an id the analysis pairs with the client's x-request-id."""
    return b"\r\ntraceparent: 00-%s-%016x-01" % (client_trace_id(run_id, n).encode(), n)


def _as_bytes(body) -> bytes:
    return body.encode() if isinstance(body, str) else bytes(body)


def os_reason(exc: OSError) -> str:
    """``Connection refused`` rather than asyncio's ``Connect call failed ('127.0.0.1', 1)``."""
    return os.strerror(exc.errno) if exc.errno else str(exc) or type(exc).__name__


class Request:
    """One request's life: due, written, answered or failed."""

    __slots__ = ("number", "rid", "trace", "intended_ns", "sent_ns", "timer", "conn", "done", "stream")

    def __init__(self, number: int, rid: str, intended_ns: int, trace: bytes = b"") -> None:
        self.number = number
        self.rid = rid
        self.trace = trace  # header lines after the x-request-id: its traceparent (``traceparent_line``)
        self.intended_ns = intended_ns
        self.sent_ns = 0
        self.timer = None
        self.conn = None
        self.done = False
        self.stream = None  # the answer's stream reader, when the target streams (Target.stream)


_HEAD, _BODY, _CHUNK_SIZE, _CHUNK_DATA, _TRAILERS, _UNTIL_CLOSE = range(6)
_MAX_HEAD = 65_536


class Connection(asyncio.Protocol):
    """A keep-alive connection that parses responses as bytes arrive (Content-Length, chunked, or to close)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport = None
        self.request: Request | None = None
        self.buf = bytearray()
        self.state = _HEAD
        self.status = 0
        self.remaining = 0
        self.body_bytes = 0
        self.keep_alive = True
        self.no_body = pool.target.head_only
        self.reader = None  # the current answer's stream reader, fed its body as it arrives
        self.now = 0  # when the bytes being parsed arrived

    def connection_made(self, transport) -> None:
        self.transport = transport

    def send(self, request: Request) -> None:
        request.conn = self
        self.request = request
        self.state, self.body_bytes = _HEAD, 0
        target = self.pool.target
        data = b"".join((target.head, request.rid.encode(), request.trace, target.tail(request.number)))
        request.sent_ns = perf_counter_ns()
        self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self.now = perf_counter_ns()
        buf = self.buf
        buf += data
        if self.request is None:  # bytes nobody asked for: the stream can no longer be trusted
            self.transport.abort()
            return
        try:
            while buf and self._step(buf):
                pass
        except (ValueError, IndexError):
            self._fail("bad response")

    def _step(self, buf: bytearray) -> bool:
        """Parse what the buffer holds for the current state; False when more bytes are needed."""
        state = self.state
        if state == _HEAD:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    raise ValueError("response head too long")
                return False
            lines = bytes(buf[:end]).split(b"\r\n")
            del buf[:end + 4]
            if not lines[0].startswith(b"HTTP/1."):
                raise ValueError("not an HTTP/1.x response")
            self.status = status = int(lines[0][9:12])
            length, chunked, self.keep_alive = None, False, not lines[0].startswith(b"HTTP/1.0")
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"transfer-encoding":
                    chunked = b"chunked" in value.lower()
                elif name == b"connection":
                    self.keep_alive = b"close" not in value.lower()
            if 100 <= status < 200:  # interim (100 Continue): the real response follows
                return True
            stream = self.pool.target.stream
            self.reader = self.request.stream = stream() if stream is not None and 200 <= status < 300 else None
            if self.no_body or status in (204, 304):
                self._complete()
            elif chunked:
                self.state = _CHUNK_SIZE
            elif length is not None:
                self.state, self.remaining = _BODY, length
                if length == 0:
                    self._complete()
            else:
                self.state, self.keep_alive = _UNTIL_CLOSE, False
        elif state == _BODY or state == _CHUNK_DATA:
            take = min(self.remaining, len(buf))
            if self.reader is not None:  # a chunk's data, without the CRLF that ends it
                data = take if state == _BODY else min(take, max(0, self.remaining - 2))
                self.reader.feed(bytes(buf[:data]), self.now)
            del buf[:take]
            self.remaining -= take
            self.body_bytes += take
            if self.remaining:
                return False
            if state == _BODY:
                self._complete()
            else:
                self.body_bytes -= 2  # the CRLF after the chunk's data
                self.state = _CHUNK_SIZE
        elif state == _CHUNK_SIZE:
            end = buf.find(b"\r\n")
            if end < 0:
                return False
            size = int(bytes(buf[:end]).split(b";")[0], 16)
            del buf[:end + 2]
            self.state, self.remaining = (_TRAILERS, 0) if size == 0 else (_CHUNK_DATA, size + 2)
        elif state == _TRAILERS:
            end = buf.find(b"\r\n")
            if end < 0:
                return False
            del buf[:end + 2]
            if end == 0:  # the empty line after the trailers ends the message
                self._complete()
        else:  # _UNTIL_CLOSE: the body is whatever arrives before the server closes
            if self.reader is not None:
                self.reader.feed(bytes(buf), self.now)
            self.body_bytes += len(buf)
            buf.clear()
            return False
        return True

    def _complete(self) -> None:
        request, self.request = self.request, None
        self.state = _HEAD
        if request is None:
            return
        done_ns = perf_counter_ns()
        status, body_bytes, pool = self.status, self.body_bytes, self.pool
        if self.keep_alive and not self.buf:
            pool.release(self)  # may send the next request on this connection at once
        else:
            self.transport.close()
            pool.replace()
        pool.on_done(request, status, done_ns, body_bytes, None)

    def _fail(self, kind: str) -> None:
        request, self.request = self.request, None
        self.transport.abort()
        if request is not None:
            self.pool.on_done(request, 0, perf_counter_ns(), 0, kind)

    def connection_lost(self, exc) -> None:
        if self.request is not None:
            if self.state == _UNTIL_CLOSE:
                self._complete()
            else:
                reason = getattr(exc, "strerror", None) or ("reset" if exc else "closed by the server")
                reason = reason.lower().removeprefix("connection ")  # "Connection reset by peer": said once
                request, self.request = self.request, None
                self.pool.on_done(request, 0, perf_counter_ns(), 0, f"connection {reason}")
        self.pool.lost(self)


class Pool:
    """Keep-alive connections to one address: reuses an idle one, opens another (up to ``cap``) when all are busy.

    Requests beyond the cap wait in order for the next free connection; their wait shows as
    send lateness, which is the truth about this client.
    """

    def __init__(self, loop, target: Target, address: tuple, cap: int) -> None:
        self.loop, self.target, self.address, self.cap = loop, target, address, cap
        self.on_done = None  # (request, status, done_ns, body_bytes, error) -> None: the runner's
        self.idle: list[Connection] = []
        self.all: set[Connection] = set()
        self.opening = 0
        self.waiting: deque[Request] = deque()
        self.tasks: set = set()
        self.closed = False

    async def connect(self) -> Connection:
        _, conn = await self.loop.create_connection(lambda: Connection(self), *self.address)
        self.all.add(conn)
        return conn

    def submit(self, request: Request) -> None:
        if self.idle:
            self.idle.pop().send(request)
            return
        self.waiting.append(request)
        self._grow()

    def release(self, conn: Connection) -> None:
        waiting = self.waiting
        while waiting:
            request = waiting.popleft()
            if not request.done:  # timed out while waiting: skip it
                conn.send(request)
                return
        self.idle.append(conn)

    def lost(self, conn: Connection) -> None:
        self.all.discard(conn)
        if conn in self.idle:
            self.idle.remove(conn)
        self._grow()

    def replace(self) -> None:
        """A connection the server closed after its response: open the next one now, not when it is due.

        Without this, a server that closes every connection (HTTP/1.0, ``Connection: close``)
        would make every send wait for a connect.
        """
        if not self.closed and len(self.all) + self.opening < self.cap:
            self._open()

    def _grow(self) -> None:
        """Open a connection for the requests waiting, if the cap allows and none is on its way for them.

        At most max(4, open connections) are opened at once: opening costs the loop time, and
        opening one per waiting request at a high rate snowballs (each open delays responses,
        so more requests wait, so more opens). The pool can still double per connect time.
        """
        busy = len(self.all) + self.opening
        if (len(self.waiting) > self.opening and busy < self.cap and self.opening < max(4, len(self.all))
                and not self.closed):
            self._open()

    def _open(self) -> None:
        self.opening += 1
        task = self.loop.create_task(self._open_one())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _open_one(self) -> None:
        try:
            conn = await self.connect()
        except OSError as exc:
            self.opening -= 1
            # The request that asked for this connection fails; the next one waiting tries again.
            while self.waiting:
                request = self.waiting.popleft()
                if not request.done:
                    self.on_done(request, 0, perf_counter_ns(), 0, f"connect failed ({os_reason(exc).lower()})")
                    break
            self._grow()
            return
        self.opening -= 1
        if self.closed:
            conn.transport.close()
            return
        self.release(conn)
        self._grow()

    def close(self) -> None:
        self.closed = True
        for task in self.tasks:
            task.cancel()
        for conn in list(self.all):
            conn.transport.close()

