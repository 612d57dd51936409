"""Send HTTP requests at intended times (open loop) and report lateness, errors and latency.

``run()`` sends the offsets of a schedule (``loadprobe.load.schedules``) with the keep-alive
client of ``connections`` on the precise loop of ``timers``, and measures every latency from
the request's *intended* send time, so a server that falls behind shows up as growing latency
rather than as a politely slower client (no coordinated omission; docs/load.md explains).

Usage::

    from loadprobe import load

    report = load.run("http://127.0.0.1:8000/infer", load.poisson(200, duration=30, seed=1),
                      method="POST", body=b"{}")
    print(report.render())
    report = load.run(url, load.replay(load.arrivals("data/"), speed=1.5))   # a recording, 1.5x faster
    report = load.run(url, concurrency=8, duration=10)                       # closed loop, for comparison

With ``openai=`` (an ``openai.Workload``) each request is a streamed completion: the client times every
chunk that carries output and keeps the server's token counts (``openai.py``).
"""

from __future__ import annotations

import array
import asyncio
import dataclasses
import secrets
import socket
from collections import Counter
from time import perf_counter_ns

import numpy as np

from .._errors import LoadprobeError
from ..record.probe import record_span
from ..schema import FIRST_TOKEN, TOKEN
from .connections import Pool, Request, Target, http_target, os_reason, traceparent_line
from .report import LoadReport, load_report
from .schedules import DEFAULT_DURATION_S, check_positive, check_requests
from .timers import in_precise_loop

__all__ = ["run"]


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
        # Streamed answers (--openai): each request's output chunk times, at chunk_at[i]:chunk_at[i + 1] of
        # chunk_times, and the server's token counts (-1: not reported).
        self.chunk_at = array.array("q", [0])
        self.chunk_times = array.array("q")
        self.tokens_in = array.array("q")
        self.tokens_out = array.array("q")

    TIMED_OUT, FAILED = -1, -2

    def add(self, request: Request, status: int, done_ns: int, body_bytes: int, error: str | None) -> None:
        reader = request.stream
        if reader is not None:
            if error is None and 200 <= status < 300:
                error = reader.error or (None if reader.times else "no output streamed")
            self.chunk_times.extend(reader.times)
            self.tokens_in.append(-1 if reader.tokens_in is None else reader.tokens_in)
            self.tokens_out.append(len(reader.times) if reader.tokens_out is None else reader.tokens_out)
        elif self.tokens_in:  # a streamed request that got no answer to read
            self.tokens_in.append(-1)
            self.tokens_out.append(-1)
        self.chunk_at.append(len(self.chunk_times))
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

    def record(self, run_id: str, flush, streamed: bool) -> None:
        """One root span "client" per request, from its intended time to its end, under its x-request-id.

        A streamed request's root carries the server's token counts, and markers under it time its
        output (``schema.FIRST_TOKEN`` from the intended send time, then one ``schema.TOKEN`` per
        later chunk). Called after the run, so the recorder's conversions never compete with the sends;
        ``flush`` every so often keeps within the recorder's buffer cap.
        """
        spans = 0
        for i, (n, intended, sent, done, status) in enumerate(
                zip(self.number, self.intended, self.sent, self.done, self.status)):
            outcome = ("timeout" if status in (self.TIMED_OUT, 408, 504) else
                       "error" if status < 0 or status >= 400 else "ok")
            rid = f"{run_id}-{n}"
            tokens = {}
            if streamed:
                tokens = {"tokens_in": _known(self.tokens_in[i]), "tokens_out": _known(self.tokens_out[i])}
            root = record_span("client", intended, done, status=outcome, queue_ns=sent - intended if sent else None,
                               request_id=rid, **tokens)
            spans += 1
            times = self.chunk_times[self.chunk_at[i]:self.chunk_at[i + 1]] if streamed else ()
            if times and root is not None:
                record_span(FIRST_TOKEN, intended, times[0], request_id=rid, parent=root)
                for before, at in zip(times, times[1:]):
                    record_span(TOKEN, before, at, request_id=rid, parent=root)
                spans += len(times)
            if spans >= 20_000:
                flush()
                spans = 0


def _known(count: int) -> int | None:
    return None if count < 0 else count


class _Runner:
    """Issues requests -- released by the pacer (open loop) or as others finish (closed loop)."""

    def __init__(self, loop, pool: Pool, results: _Results, run_id: str, timeout: float) -> None:
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
        n = self.issued
        request = Request(n, f"{self.run_id}-{n}", intended_ns,
                          traceparent_line(self.run_id, n) if self.pool.target.traced else b"")
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

    def on_done(self, request: Request, status: int, done_ns: int, body_bytes: int, error: str | None) -> None:
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

    def _expire(self, request: Request) -> None:
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


async def _run(target: Target, offsets, concurrency, duration, requests, timeout, connections, run_id,
               results: _Results) -> tuple[np.ndarray | None, int, int]:
    """(intended send times or None in closed loop, start and end as perf_counter_ns)."""
    loop = asyncio.get_running_loop()
    try:
        info = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise LoadprobeError(f"URL {target.url!r}: cannot resolve {target.host!r} ({exc.strerror}); "
                             "check the host name") from None
    address = info[0][4][:2]  # resolved once: new connections must not wait for DNS
    pool = Pool(loop, target, address, connections)
    runner = _Runner(loop, pool, results, run_id, timeout)
    pool.on_done = runner.on_done
    try:
        pool.idle.append(await pool.connect())  # fail now, in one line, if nothing listens there
    except OSError as exc:
        raise LoadprobeError(f"cannot connect to {target.host}:{target.port} for {target.url} "
                             f"({os_reason(exc)}); is the server running and the URL right?") from None
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


def run(url: str, offsets=None, *, concurrency: int | None = None, duration: float | None = None,
        requests: int | None = None, method: str = "GET", body: bytes | str | list = b"", headers=(),
        timeout: float = 10.0, connections: int = 256, record: str | None = None, mode: str | None = None,
        seed: int | None = None, precise: bool = True, scrape=(), openai=None) -> LoadReport:
    """Send the requests at ``offsets`` (seconds from the start) to ``url``; return what happened.

    With ``offsets=None`` and ``concurrency=N`` it runs closed loop instead: N workers send
    back to back for ``duration`` seconds (default 10) or ``requests`` requests. ``timeout``
    counts from the intended send time; ``connections`` caps the keep-alive connections.
    ``record`` writes the client's view -- one root span "client" per request, under its
    x-request-id -- as a loadprobe run in that directory. ``body`` is bytes or text, or a
    list of them sent in turn (request n carries body n mod len). ``precise=False`` uses asyncio's
    stock event loop, whose timers wake up to 1 ms late: for benchmarks only. ``mode`` and
    ``seed`` only label the report. ``scrape``: sampler sources (``record.scrape.ScrapeSource``,
    the server's Prometheus endpoints) sampled into the recording meanwhile; needs ``record``.
    ``openai``: an ``openai.Workload`` (``openai.prepare``): each request is a streamed completion of the
    asked lengths, POSTed to ``url``, and the report and recording time its output.
    Raises LoadprobeError on bad input or when the server cannot be reached at all.
    """
    if openai is None:
        target = http_target(url, method, list(headers), body)
    else:
        from .openai import StreamReader

        headers = list(headers)
        if not any(h.partition(":")[0].strip().lower() == "content-type" for h in headers):
            headers.append("Content-Type: application/json")
        target = http_target(url, "POST", headers, body_of=openai.body, stream=StreamReader)
    check_positive("--timeout", timeout)
    if connections < 1:
        raise LoadprobeError(f"--connections {connections} must be at least 1")
    if offsets is None:
        if concurrency is None or concurrency < 1:
            raise LoadprobeError("--concurrency must be at least 1; or give a schedule (--rate, --replay ...)")
        if duration is None and requests is None:
            duration = DEFAULT_DURATION_S
        if duration is not None:
            check_positive("--duration", duration)
        check_requests(requests)
        connections = max(connections, concurrency)
    else:
        offsets = np.sort(np.asarray(offsets, dtype=np.float64))
        if len(offsets) == 0:
            raise LoadprobeError("the schedule is empty; give a longer --duration or a higher rate")
    run_id = secrets.token_hex(4)
    results = _Results()
    from ..record import recorder  # the client view is recorded like a service's own spans
    from ..schema import LOAD_CLIENT_SERVICE  # (pyarrow: only when recording)

    own_recorder = record is not None and recorder.current() is None
    if scrape and not own_recorder:
        raise LoadprobeError("--scrape records the server's metrics beside the client's view: give --record DIR too"
                             if record is None else "--scrape needs a recording of its own; this process records "
                             "already (loadprobe.start)")
    if record is not None:
        # Started before the first send, so run.json's start precedes every span; the spans
        # themselves are recorded after the last answer (see _Results.record).
        scrape = list(scrape)
        recorder.start(record, service=LOAD_CLIENT_SERVICE, sample_devices=False, sample_interpreter=False,
                        tags={"url": url, "mode": mode or "load", "run": run_id}, more_sources=scrape,
                        **({"sample_interval_s": min(s.interval_s for s in scrape)} if scrape else {}))
        recorder.flush()  # the recorder's imports and files are set up now, not during the first sends
    interrupted = False
    started_ns = perf_counter_ns()
    try:
        due_ns, start_ns, end_ns = in_precise_loop(_run(target, offsets, concurrency, duration, requests, timeout,
                                                        connections, run_id, results), precise)
    except KeyboardInterrupt:  # Ctrl-C: what finished is reported (and recorded), then the caller stops
        interrupted, due_ns, start_ns, end_ns = True, None, started_ns, perf_counter_ns()
    finally:
        if record is not None:
            results.record(run_id, recorder.flush, streamed=openai is not None)
        if own_recorder:
            recorder.stop()
    report = load_report(url, mode or ("closed loop" if offsets is None else "schedule"), run_id, seed, due_ns,
                         results, start_ns, end_ns, None if record is None else str(record), openai)
    return dataclasses.replace(report, interrupted=True) if interrupted else report
