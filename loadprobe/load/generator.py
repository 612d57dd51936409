"""Send HTTP requests at intended times (open loop) and report lateness, errors and latency.

An arrival schedule is a pure function -- seeded, no network -- returning each request's
offset in seconds from the start. ``run()`` sends them with a minimal HTTP/1.1 keep-alive
client and measures every latency from the request's *intended* send time, so a server
that falls behind shows up as growing latency rather than as a politely slower client
(no coordinated omission; docs/load.md explains).

Usage::

    from loadprobe import load

    offsets = load.poisson(200, duration=30, seed=1)            # seconds from the start
    report = load.run("http://127.0.0.1:8000/infer", offsets, method="POST", body=b"{}")
    print(report.render())

    trace = load.arrivals("AzureLLMInferenceTrace_code.csv")     # epoch ns, from a log or data/
    report = load.run(url, load.replay(trace, speed=1.5))        # the trace, 1.5x faster
    report = load.run(url, concurrency=8, duration=10)           # closed loop, for comparison
"""

from __future__ import annotations

import array
import asyncio
import math
import os
import secrets
import select
import selectors
import socket
import tempfile
from collections import Counter, deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from time import perf_counter_ns
from urllib.parse import urlsplit

import numpy as np

from .._errors import LoadprobeError
from ..record.probe import record_span
from ..analysis.histogram import Histogram

__all__ = ["LoadReport", "arrivals", "bursty", "constant", "diurnal", "poisson", "replay", "run"]

DEFAULT_DURATION_S = 10.0
"""How long a rate-driven schedule runs when neither a duration nor a request count is given."""

MAX_ARRIVALS = 10_000_000
"""The most arrivals one schedule holds (80 MB of offsets, minutes to simulate): refused before drawing."""

_MAX_PEAK_TO_MEAN = 20.0  # the diurnal curve's exp(k) / I0(k) reaches 20 at k ~ 64; numpy's i0 is exact there


# -- schedules: pure functions of their arguments, offsets in seconds -----------------------


def constant(rate: float, *, duration: float | None = None, requests: int | None = None) -> np.ndarray:
    """One request every ``1 / rate`` seconds: ``constant(100, duration=10)`` -> 1,000 offsets."""
    _positive("--rate", rate)
    horizon = _horizon(duration, requests)
    _bounded("--rate", rate, horizon, requests)
    count = requests if horizon == math.inf else math.ceil(horizon * rate - 1e-9)
    return _cut(np.arange(count) / rate, duration, requests)


def poisson(rate: float, *, duration: float | None = None, requests: int | None = None,
            seed: int | None = None) -> np.ndarray:
    """Independent arrivals at mean ``rate`` per second (exponential gaps)."""
    _positive("--rate", rate)
    rng = np.random.default_rng(seed)
    horizon = _horizon(duration, requests)
    _bounded("--rate", rate, horizon, requests)
    if horizon == math.inf:
        return np.cumsum(rng.exponential(1 / rate, _count(requests)))
    return _cut(_homogeneous(rng, rate, 0.0, horizon), duration, requests)


def diurnal(rate: float, *, duration: float | None = None, peak_to_mean: float = 2.0, requests: int | None = None,
            seed: int | None = None) -> np.ndarray:
    """A day's traffic compressed into the run: valley at the start and end, peak in the middle.

    The rate follows ``rate * exp(-k cos(2 pi t / duration)) / I0(k)``, a smooth one-peak
    curve whose mean is ``rate`` and whose peak is ``peak_to_mean`` times it (k is solved
    for). Arrivals are Poisson under that curve, drawn by thinning. With ``requests`` and
    no ``duration``, a day lasts ``requests / rate`` seconds and the curve repeats until
    that many have been drawn.
    """
    _positive("--rate", rate)
    if not 1.0 <= peak_to_mean <= _MAX_PEAK_TO_MEAN:
        raise LoadprobeError(f"--peak-to-mean {peak_to_mean:g} is out of range; give a ratio from 1 "
                             f"(flat) to {_MAX_PEAK_TO_MEAN:g}, e.g. 2")
    rng = np.random.default_rng(seed)
    horizon = _horizon(duration, requests)
    day = _count(requests) / rate if horizon == math.inf else horizon
    k = _solve_k(peak_to_mean)
    scale = rate / float(np.i0(k))
    peak = scale * math.exp(k)
    _bounded("--rate", rate, horizon, requests, drawn=peak * horizon)  # thinning draws at the peak rate
    offsets, end = np.zeros(0), 0.0
    while end < horizon and (requests is None or len(offsets) < requests):
        start, end = end, min(horizon, end + day)
        candidates = _homogeneous(rng, peak, start, end)
        keep_p = scale * np.exp(-k * np.cos(2 * np.pi * candidates / day)) / peak
        offsets = np.concatenate([offsets, candidates[rng.random(len(candidates)) < keep_p]])
    return _cut(offsets, duration, requests)


def bursty(burst_rate: float, *, rate: float = 0.0, on_s: float = 1.0, off_s: float = 9.0,
           duration: float | None = None, requests: int | None = None, seed: int | None = None) -> np.ndarray:
    """On/off bursts (a two-state Markov-modulated Poisson process).

    Bursts last ``on_s`` seconds on average (exponentially distributed) at ``burst_rate``
    per second; the quiet spells between them last ``off_s`` on average at ``rate`` (0:
    silence). The mean rate is ``(burst_rate * on_s + rate * off_s) / (on_s + off_s)``.
    """
    _positive("--burst-rate", burst_rate)
    _positive("--on-s", on_s)
    _positive("--off-s", off_s)
    if rate < 0 or not math.isfinite(rate):
        raise LoadprobeError(f"--rate {rate:g} is negative; with --bursty it is the rate between bursts (>= 0)")
    rng = np.random.default_rng(seed)
    horizon = _horizon(duration, requests)
    _bounded("--burst-rate", burst_rate, horizon, requests, drawn=max(burst_rate, rate) * horizon)
    if horizon != math.inf and 2 * horizon / (on_s + off_s) > MAX_ARRIVALS:  # a Python loop per spell
        raise LoadprobeError(f"--on-s {on_s:g} and --off-s {off_s:g} make ~{2 * horizon / (on_s + off_s):.3g} "
                             f"bursts and gaps in {horizon:g} s, more than {MAX_ARRIVALS:,}; give longer ones")
    on = rng.random() < on_s / (on_s + off_s)  # start in each state as often as the process is in it
    parts, t, count = [], 0.0, 0
    while t < horizon and (requests is None or count < requests):
        end = min(horizon, t + rng.exponential(on_s if on else off_s))
        times = _homogeneous(rng, burst_rate if on else rate, t, end)
        parts.append(times)
        count += len(times)
        t, on = end, not on
    return _cut(np.concatenate(parts) if parts else np.zeros(0), duration, requests)


def replay(times_ns, *, speed: float = 1.0, duration: float | None = None, requests: int | None = None) -> np.ndarray:
    """Offsets of recorded arrival times (epoch ns, from ``arrivals``), ``speed`` times faster.

    ``speed=1.5`` plays the trace's peak at 1.5x: the stress test before buying hardware.
    """
    _positive("--speed", speed)
    times = np.sort(np.asarray(times_ns, dtype=np.int64))
    if len(times) == 0:
        raise LoadprobeError("the replay source has no arrivals; give a trace or data directory with requests")
    return _cut((times - times[0]) / 1e9 / speed, duration, requests)


def arrivals(source, *, preset: str | None = None, ts_col: str | None = None, ts_unit: str | None = None,
             ts_format: str | None = None) -> np.ndarray:
    """Sorted arrival times (epoch ns) of the requests in recorded data or a request log.

    ``source`` is a loadprobe data directory (or spans file): its root request spans are
    the arrivals. Anything else is a CSV/TSV/JSONL log, read by ``loadprobe.record.importer`` with
    the same presets, column options and timestamp rules as ``loadprobe import``.
    """
    path = Path(source)
    if path.is_dir() or path.suffix in (".parquet", ".arrows"):
        return _recorded_arrivals(str(source))
    from ..record.importer import import_log

    with tempfile.TemporaryDirectory(prefix="loadprobe-replay-") as scratch:
        import_log(path, scratch, preset=preset, ts_col=ts_col, ts_unit=ts_unit, ts_format=ts_format)
        return _recorded_arrivals(scratch)


def _recorded_arrivals(source: str) -> np.ndarray:
    """Start times of root spans; of request roots only, when the data has any (as analysis counts)."""
    from ..analysis.reading import read_spans  # analysis's reader: Parquet and unfinished streams, version-checked

    requests, roots = [], []
    for span_file in read_spans([source]):  # bad files skipped, as analyze skips them
        table = span_file.table
        ts = table.column("ts_ns").to_numpy()
        is_root = ~table.column("parent_id").is_valid().to_numpy(zero_copy_only=False)
        has_id = table.column("request_id").is_valid().to_numpy(zero_copy_only=False)
        roots.append(ts[is_root])
        requests.append(ts[is_root & has_id])
    found = np.concatenate(requests) if requests else np.zeros(0, np.int64)
    if len(found) == 0 and roots:
        found = np.concatenate(roots)
    if len(found) == 0:
        raise LoadprobeError(f"{source}: no root spans to replay; record requests with loadprobe.request "
                             "or give a request log")
    return np.sort(found.astype(np.int64))


def _positive(option: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise LoadprobeError(f"{option} {value:g} must be a positive number")


def _horizon(duration: float | None, requests: int | None) -> float:
    """The schedule's length: the duration; unbounded (until ``requests``) when only they are given."""
    if duration is not None:
        _positive("--duration", duration)
        return float(duration)
    return DEFAULT_DURATION_S if requests is None else math.inf


def _bounded(option: str, rate: float, horizon: float, requests: int | None, drawn: float | None = None) -> None:
    """Refuse a schedule that would draw more than MAX_ARRIVALS arrivals (``drawn``, by default
    ``rate`` over ``horizon``, or ``requests`` when only they end it) before drawing it."""
    if horizon == math.inf:
        if _count(requests) > MAX_ARRIVALS:
            raise LoadprobeError(f"--requests {requests:,} is more than the {MAX_ARRIVALS:,} arrivals one schedule "
                                 "holds; give fewer, or run it in parts")
        return
    drawn = rate * horizon if drawn is None else drawn
    if drawn > MAX_ARRIVALS:
        raise LoadprobeError(f"{option} {rate:g}/s for {horizon:g} s is about {drawn:.3g} arrivals, more than the "
                             f"{MAX_ARRIVALS:,} one schedule holds; lower {option} or --duration (rate x duration "
                             f"<= {MAX_ARRIVALS:,})")


def _count(requests: int | None) -> int:
    if requests is not None and requests < 1:
        raise LoadprobeError(f"--requests {requests} must be at least 1")
    return requests


def _cut(offsets: np.ndarray, duration: float | None, requests: int | None) -> np.ndarray:
    _count(requests)
    if duration is not None:
        offsets = offsets[offsets < duration]
    return offsets[:requests] if requests is not None else offsets


def _homogeneous(rng: np.random.Generator, rate: float, start: float, end: float) -> np.ndarray:
    """Poisson arrivals on [start, end): a Poisson count, placed uniformly (same law, one draw each)."""
    if rate <= 0 or end <= start:
        return np.zeros(0)
    return np.sort(rng.uniform(start, end, rng.poisson(rate * (end - start))))


def _solve_k(peak_to_mean: float) -> float:
    """k with exp(k) / I0(k) = peak_to_mean (increasing in k), by bisection."""
    lo, hi = 0.0, 80.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if math.exp(mid) / float(np.i0(mid)) < peak_to_mean:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


# -- the HTTP/1.1 client: one request at a time per keep-alive connection -------------------


@dataclass(frozen=True)
class _Target:
    url: str
    host: str
    port: int
    head: bytes  # the request up to the x-request-id value
    tails: tuple  # after it, one per body (request n takes n mod len): Content-Length, end of headers, body
    head_only: bool  # a HEAD request: responses describe a body they do not carry


def _target(url: str, method: str, headers: list[str] | tuple = (), body=b"") -> _Target:
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
    return _Target(url, parts.hostname, port, head, tails, method.upper() == "HEAD")


def _as_bytes(body) -> bytes:
    return body.encode() if isinstance(body, str) else bytes(body)


def _reason(exc: OSError) -> str:
    """``Connection refused`` rather than asyncio's ``Connect call failed ('127.0.0.1', 1)``."""
    return os.strerror(exc.errno) if exc.errno else str(exc) or type(exc).__name__


class _Request:
    """One request's life: due, written, answered or failed."""

    __slots__ = ("number", "rid", "intended_ns", "sent_ns", "timer", "conn", "done")

    def __init__(self, number: int, rid: str, intended_ns: int) -> None:
        self.number = number
        self.rid = rid
        self.intended_ns = intended_ns
        self.sent_ns = 0
        self.timer = None
        self.conn = None
        self.done = False


_HEAD, _BODY, _CHUNK_SIZE, _CHUNK_DATA, _TRAILERS, _UNTIL_CLOSE = range(6)
_MAX_HEAD = 65_536


class _Connection(asyncio.Protocol):
    """A keep-alive connection that parses responses as bytes arrive (Content-Length, chunked, or to close)."""

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.transport = None
        self.request: _Request | None = None
        self.buf = bytearray()
        self.state = _HEAD
        self.status = 0
        self.remaining = 0
        self.body_bytes = 0
        self.keep_alive = True
        self.no_body = pool.target.head_only

    def connection_made(self, transport) -> None:
        self.transport = transport

    def send(self, request: _Request) -> None:
        request.conn = self
        self.request = request
        self.state, self.body_bytes = _HEAD, 0
        tails = self.pool.target.tails
        data = b"".join((self.pool.target.head, request.rid.encode(), tails[request.number % len(tails)]))
        request.sent_ns = perf_counter_ns()
        self.transport.write(data)

    def data_received(self, data: bytes) -> None:
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
                request, self.request = self.request, None
                self.pool.on_done(request, 0, perf_counter_ns(), 0, f"connection {reason.lower()}")
        self.pool.lost(self)


class _Pool:
    """Keep-alive connections to one address: reuses an idle one, opens another (up to ``cap``) when all are busy.

    Requests beyond the cap wait in order for the next free connection; their wait shows as
    send lateness, which is the truth about this client.
    """

    def __init__(self, loop, target: _Target, address: tuple, cap: int) -> None:
        self.loop, self.target, self.address, self.cap = loop, target, address, cap
        self.on_done = None  # (request, status, done_ns, body_bytes, error) -> None: the runner's
        self.idle: list[_Connection] = []
        self.all: set[_Connection] = set()
        self.opening = 0
        self.waiting: deque[_Request] = deque()
        self.tasks: set = set()
        self.closed = False

    async def connect(self) -> _Connection:
        _, conn = await self.loop.create_connection(lambda: _Connection(self), *self.address)
        self.all.add(conn)
        return conn

    def submit(self, request: _Request) -> None:
        if self.idle:
            self.idle.pop().send(request)
            return
        self.waiting.append(request)
        self._grow()

    def release(self, conn: _Connection) -> None:
        waiting = self.waiting
        while waiting:
            request = waiting.popleft()
            if not request.done:  # timed out while waiting: skip it
                conn.send(request)
                return
        self.idle.append(conn)

    def lost(self, conn: _Connection) -> None:
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
                    self.on_done(request, 0, perf_counter_ns(), 0, f"connect failed ({_reason(exc).lower()})")
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


# -- running a schedule ---------------------------------------------------------------------


class _Results:
    """Every finished request, in completion order, in compact arrays (a long run stays small)."""

    def __init__(self) -> None:
        self.number = array.array("q")  # n of the x-request-id "<run>-<n>"
        self.intended = array.array("q")
        self.sent = array.array("q")  # 0: never written (timed out waiting, or no connection)
        self.done = array.array("q")
        self.status = array.array("i")  # HTTP status; TIMED_OUT or FAILED when there was no response
        self.errors: Counter = Counter()
        self.body_bytes = 0

    TIMED_OUT, FAILED = -1, -2

    def add(self, request: _Request, status: int, done_ns: int, body_bytes: int, error: str | None) -> None:
        self.number.append(request.number)
        self.intended.append(request.intended_ns)
        self.sent.append(request.sent_ns)
        self.done.append(done_ns)
        self.body_bytes += body_bytes
        if error is not None:
            self.errors[error] += 1
            status = self.TIMED_OUT if error == "timeout" else self.FAILED
        elif status >= 400:
            self.errors[f"http {status}"] += 1
        self.status.append(status)

    def record(self, run_id: str, flush) -> None:
        """One root span "client" per request, from its intended time to its end, under its x-request-id.

        Called after the run, so the recorder's conversions never compete with the sends;
        ``flush`` every so often keeps within the recorder's buffer cap.
        """
        for i, (n, intended, sent, done, status) in enumerate(
                zip(self.number, self.intended, self.sent, self.done, self.status)):
            outcome = ("timeout" if status in (self.TIMED_OUT, 408, 504) else
                       "error" if status < 0 or status >= 400 else "ok")
            record_span("client", intended, done, status=outcome, queue_ns=sent - intended if sent else None,
                        request_id=f"{run_id}-{n}")
            if i % 20_000 == 19_999:
                flush()


class _Runner:
    """Issues requests -- released by the pacer (open loop) or as others finish (closed loop)."""

    def __init__(self, loop, pool: _Pool, results: _Results, run_id: str, timeout: float) -> None:
        self.loop, self.pool, self.results, self.run_id, self.timeout = loop, pool, results, run_id, timeout
        self.issued = 0
        self.outstanding = 0
        self.issuing = True
        self.finished = loop.create_future()
        self.due_ns = None
        self.closed_loop = False
        self.limit = None  # closed loop: requests to send in all, if capped

    def issue(self, intended_ns: int) -> None:
        self.issued += 1
        request = _Request(self.issued, f"{self.run_id}-{self.issued}", intended_ns)
        self.outstanding += 1
        request.timer = self.loop.call_at(self.loop.time() + self.timeout, self._expire, request)
        self.pool.submit(request)
        if self.limit is not None and self.issued >= self.limit:
            self.issuing = False

    def release(self, upto: int) -> None:
        """Open loop: send every scheduled request before index ``upto`` (they are due)."""
        due = self.due_ns
        for i in range(self.issued, upto):
            self.issue(int(due[i]))

    def on_done(self, request: _Request, status: int, done_ns: int, body_bytes: int, error: str | None) -> None:
        if request.done:
            return
        request.done = True
        request.timer.cancel()
        self.outstanding -= 1
        self.results.add(request, status, done_ns, body_bytes, error)
        if self.closed_loop and self.issuing:
            self.issue(perf_counter_ns())  # the worker goes straight on: its intended time is now
        else:
            self.maybe_finish()

    def stop_issuing(self) -> None:
        self.issuing = False
        self.maybe_finish()

    def maybe_finish(self) -> None:
        if not self.issuing and self.outstanding == 0 and not self.finished.done():
            self.finished.set_result(None)

    def _expire(self, request: _Request) -> None:
        conn = request.conn
        if conn is not None and conn.request is request:
            conn.request = None
            conn.transport.abort()  # the answer may still come: this connection cannot be reused
        self.on_done(request, 0, perf_counter_ns(), 0, "timeout")


async def _pace(due_ns: np.ndarray, release, done) -> None:
    """Sleep to each intended time and release the requests then due (all of them, if running late)."""
    i, n = 0, len(due_ns)
    while i < n:
        wait = int(due_ns[i]) - perf_counter_ns()
        if wait > 0:
            await asyncio.sleep(wait / 1e9)
        upto = max(i + 1, int(np.searchsorted(due_ns, perf_counter_ns(), side="right")))
        release(upto)
        i = upto
    done()


class _PreciseEpollSelector(selectors.EpollSelector):
    """epoll that wakes within microseconds of a timer instead of up to a millisecond late.

    epoll_wait takes its timeout in whole milliseconds, rounded up, so asyncio's timers --
    hence every send -- would be up to 1 ms late. select() takes microseconds, and an epoll
    descriptor is itself readable when any descriptor it watches is: wait in select() on
    it, then collect the events with a zero-timeout epoll_wait.
    """

    def select(self, timeout=None):
        if timeout is not None and timeout > 0:
            try:
                select.select([self.fileno()], [], [], timeout)
            except ValueError:  # descriptor number past select()'s limit (1024): plain epoll
                return super().select(timeout)
            timeout = 0
        return super().select(timeout)


def _event_loop(precise: bool) -> asyncio.AbstractEventLoop:
    if precise and hasattr(selectors, "EpollSelector"):  # kqueue and others already take finer timeouts
        return asyncio.SelectorEventLoop(_PreciseEpollSelector())
    return asyncio.new_event_loop()


def _in_loop(coro, precise: bool):
    """Run ``coro`` to the end on a fresh loop (asyncio.run with our selector; Python 3.10 has no Runner)."""
    loop = _event_loop(precise)
    slack = _timer_slack(1) if precise else None
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:  # interrupted (Ctrl-C): let the run's own cleanup run
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
            if slack is not None:
                _timer_slack(slack)


def _timer_slack(ns: int) -> int | None:
    """Set this thread's timer slack (Linux wakes sleepers up to 50 us late by default); returns the old one.

    Best effort: None where prctl is not available.
    """
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
        old = prctl(30, 0, 0, 0, 0)  # PR_GET_TIMERSLACK
        if old < 0 or prctl(29, ns, 0, 0, 0) != 0:  # PR_SET_TIMERSLACK
            return None
        return old
    except (OSError, AttributeError):
        return None


async def _run(target: _Target, offsets, concurrency, duration, requests, timeout, connections, run_id,
               results: _Results) -> tuple[np.ndarray | None, int, int]:
    """(intended send times or None in closed loop, start and end as perf_counter_ns)."""
    loop = asyncio.get_running_loop()
    try:
        info = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise LoadprobeError(f"URL {target.url!r}: cannot resolve {target.host!r} ({exc.strerror}); "
                             "check the host name") from None
    address = info[0][4][:2]  # resolved once: new connections must not wait for DNS
    pool = _Pool(loop, target, address, connections)
    runner = _Runner(loop, pool, results, run_id, timeout)
    pool.on_done = runner.on_done
    try:
        pool.idle.append(await pool.connect())  # fail now, in one line, if nothing listens there
    except OSError as exc:
        raise LoadprobeError(f"cannot connect to {target.host}:{target.port} for {target.url} "
                             f"({_reason(exc)}); is the server running and the URL right?") from None
    pacer = due_ns = None
    try:
        if offsets is None:
            runner.closed_loop, runner.limit = True, requests
            start_ns = perf_counter_ns()
            if duration is not None:
                loop.call_later(duration, runner.stop_issuing)
            for _ in range(concurrency if requests is None else min(concurrency, requests)):
                runner.issue(perf_counter_ns())
        else:
            start_ns = perf_counter_ns() + 20_000_000  # a short lead: the first sends are not late for start-up
            due_ns = runner.due_ns = start_ns + np.round(offsets * 1e9).astype(np.int64)
            pacer = loop.create_task(_pace(due_ns, runner.release, runner.stop_issuing))
        await runner.finished
        return due_ns, start_ns, perf_counter_ns()
    finally:
        if pacer is not None:
            pacer.cancel()
        pool.close()
        await asyncio.sleep(0)  # let the transports' close callbacks run before the loop goes


# -- the report -----------------------------------------------------------------------------


@dataclass
class LoadReport:
    """What a load run did. ``render()`` is the text ``loadprobe load`` prints; ``to_dict()`` its ``--json``.

    Latencies count from each request's intended send time (closed loop: its actual send);
    lateness is actual send time minus intended time. Times in milliseconds.
    """

    url: str
    mode: str
    run_id: str
    seed: int | None
    scheduled: int | None  # None in closed loop: there is no schedule
    sent: int
    responses: int
    elapsed_s: float
    intended_rate: float | None  # requests per second
    achieved_rate: float | None
    lateness_ms: dict | None  # p50, p99, max; None in closed loop
    latency_ms: dict | None  # p50, p90, p99, p999, max of responses of any status
    errors: dict = field(default_factory=dict)  # kind ("http 503", "timeout", "connection reset") -> count
    statuses: dict = field(default_factory=dict)  # HTTP status -> responses
    body_bytes: int = 0
    record_dir: str | None = None

    def to_dict(self) -> dict:
        return asdict(self) | {"succeeded": self.succeeded}

    @property
    def succeeded(self) -> int:
        """Responses with a 2xx or 3xx status: the requests the server actually served."""
        return sum(n for code, n in self.statuses.items() if 200 <= int(code) < 400)

    def failure(self) -> str | None:
        """Why the run failed as a whole (requests were sent, none succeeded), or None."""
        if not self.sent or self.succeeded:
            return None
        answers = ", ".join(f"{n:,} answered {code}" for code, n in sorted(self.statuses.items()))
        errors = ", ".join(f"{n:,} {kind}" for kind, n in sorted(self.errors.items(), key=lambda e: -e[1]))
        return (f"no request of {self.sent:,} succeeded ({'; '.join(x for x in (answers, errors) if x)}): check the "
                "URL, --method and the body the server expects")

    def render(self) -> str:
        def ms(values: dict | None) -> str:
            return "  ".join(f"{k} {v:,.3f}" for k, v in values.items()) + " ms" if values else "none"

        def rate(value: float | None) -> str:
            return "n/a" if value is None else f"{value:,.1f} req/s"

        seed = f", seed {self.seed}" if self.seed is not None else ""
        lines = [f"loadprobe load: {self.mode} -> {self.url} (run {self.run_id}{seed}), {self.elapsed_s:,.2f} s"]
        if self.scheduled is None:
            lines.append(f"  sent      {self.sent:,}, {rate(self.achieved_rate)} (closed loop)")
        else:
            lines.append(f"  sent      {self.sent:,} of {self.scheduled:,} scheduled, {rate(self.achieved_rate)} "
                         f"(intended {rate(self.intended_rate)})")
            lines.append(f"  lateness  {ms(self.lateness_ms)}   (actual - intended send time)")
        since = "intended send time" if self.scheduled is not None else "send time"
        lines.append(f"  latency   {ms(self.latency_ms)}   ({self.responses:,} responses, from {since})")
        statuses = ", ".join(f"{code}: {count:,}" for code, count in sorted(self.statuses.items()))
        lines.append(f"  statuses  {statuses or 'none'}")
        errors = ", ".join(f"{kind}: {count:,}" for kind, count in sorted(self.errors.items(), key=lambda e: -e[1]))
        lines.append(f"  errors    {errors or 'none'}")
        if self.record_dir:
            lines.append(f"  recorded  {self.record_dir} (loadprobe analyze {self.record_dir})")
        return "\n".join(lines)


def _report(url, mode, run_id, seed, due_ns, results: _Results, start_ns, end_ns, record_dir) -> LoadReport:
    intended, sent, done, status = (np.frombuffer(a, dtype=a.typecode == "i" and np.int32 or np.int64)
                                    for a in (results.intended, results.sent, results.done, results.status))
    written, answered = sent > 0, status > 0
    codes, counts = np.unique(status[answered], return_counts=True)
    return LoadReport(
        url=url, mode=mode, run_id=run_id, seed=seed,
        scheduled=None if due_ns is None else len(due_ns),
        sent=int(written.sum()),
        responses=int(answered.sum()),
        elapsed_s=(end_ns - start_ns) / 1e9,
        intended_rate=None if due_ns is None else _rate(due_ns),
        achieved_rate=_rate(sent[written]),
        lateness_ms=None if due_ns is None else _percentiles(sent[written] - intended[written],
                                                             {"p50": 50, "p99": 99, "max": None}),
        latency_ms=_percentiles(done[answered] - intended[answered],
                                {"p50": 50, "p90": 90, "p99": 99, "p999": 99.9, "max": None}),
        errors=dict(results.errors),
        statuses={int(c): int(n) for c, n in zip(codes, counts)},
        body_bytes=results.body_bytes,
        record_dir=record_dir,
    )


def _percentiles(values_ns: np.ndarray, which: dict) -> dict | None:
    """Milliseconds at each percentile (None: the maximum), to HdrHistogram's 0.1% as analysis reports them."""
    if len(values_ns) == 0:
        return None
    hist = Histogram()
    hist.record(np.maximum(values_ns, 0))
    found = hist.percentiles(tuple(p for p in which.values() if p is not None))
    return {name: (hist.max if p is None else found[p]) / 1e6 for name, p in which.items()}


def _rate(times_ns: np.ndarray) -> float | None:
    """Requests per second between the first and the last of ``times_ns``."""
    if len(times_ns) < 2:
        return None
    span = int(times_ns.max()) - int(times_ns.min())
    return (len(times_ns) - 1) * 1e9 / span if span > 0 else None


# -- entry point ----------------------------------------------------------------------------


def run(url: str, offsets=None, *, concurrency: int | None = None, duration: float | None = None,
        requests: int | None = None, method: str = "GET", body: bytes | str | list = b"", headers=(),
        timeout: float = 10.0, connections: int = 256, record: str | None = None, mode: str | None = None,
        seed: int | None = None, precise: bool = True) -> LoadReport:
    """Send the requests at ``offsets`` (seconds from the start) to ``url``; return what happened.

    With ``offsets=None`` and ``concurrency=N`` it runs closed loop instead: N workers send
    back to back for ``duration`` seconds (default 10) or ``requests`` requests. ``timeout``
    counts from the intended send time; ``connections`` caps the keep-alive connections.
    ``record`` writes the client's view -- one root span "client" per request, under its
    x-request-id -- as a loadprobe run in that directory. ``body`` is bytes or text, or a
    list of them sent in turn (request n carries body n mod len). ``precise=False`` uses asyncio's
    stock event loop, whose timers wake up to 1 ms late: for benchmarks only. ``mode`` and
    ``seed`` only label the report.
    Raises LoadprobeError on bad input or when the server cannot be reached at all.
    """
    target = _target(url, method, list(headers), body)
    _positive("--timeout", timeout)
    if connections < 1:
        raise LoadprobeError(f"--connections {connections} must be at least 1")
    if offsets is None:
        if concurrency is None or concurrency < 1:
            raise LoadprobeError("--concurrency must be at least 1; or give a schedule (--rate, --replay ...)")
        if duration is None and requests is None:
            duration = DEFAULT_DURATION_S
        if duration is not None:
            _positive("--duration", duration)
        _count(requests)
        connections = max(connections, concurrency)
    else:
        offsets = np.sort(np.asarray(offsets, dtype=np.float64))
        if len(offsets) == 0:
            raise LoadprobeError("the schedule is empty; give a longer --duration or a higher rate")
    run_id = secrets.token_hex(4)
    results = _Results()
    import loadprobe

    own_recorder = record is not None and loadprobe.current() is None
    if record is not None:
        # Started before the first send, so run.json's start precedes every span; the spans
        # themselves are recorded after the last answer (see _Results.record).
        loadprobe.start(record, service="loadprobe-load", sample_devices=False,
                        tags={"url": url, "mode": mode or "load", "run": run_id})
        loadprobe.flush()  # the recorder's imports and files are set up now, not during the first sends
    try:
        due_ns, start_ns, end_ns = _in_loop(_run(target, offsets, concurrency, duration, requests, timeout,
                                                 connections, run_id, results), precise)
    finally:
        if record is not None:
            results.record(run_id, loadprobe.flush)
        if own_recorder:
            loadprobe.stop()
    return _report(url, mode or ("closed loop" if offsets is None else "schedule"), run_id, seed, due_ns, results,
                   start_ns, end_ns, None if record is None else str(record))
