"""The server half of the fidelity check: the Router behind a minimal HTTP/1.1 server, in a subprocess.

``tests/support/fidelity.py`` starts it (``server_process``) and drives it with the
``loadprobe load`` client; it prints its port, serves ``/infer`` (one ``Router.submit`` per
request), ``/results`` (what each request did, the router's metrics, what each execution
took) and ``/stop``. Every executor sleeps for a draw of ``fidelity.service_times`` (paired
draws: each lane's own stream, as the simulator draws).

Usage::

    python -m tests.support.fidelity_server PIPELINE.yaml --scale 10 --seed 1 --first-offset 0.0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import numpy as np

from .fidelity import OwnStream, service_times


class _Http(asyncio.Protocol):
    """A minimal HTTP/1.1 server connection: keep-alive, one request at a time, as the load client sends.

    Cheaper per request than a full ASGI server, which matters here: the router's timers share
    this event loop, and every microsecond spent parsing HTTP during a burst delays them.
    """

    def __init__(self, handle, tasks: set) -> None:
        self.handle, self.tasks = handle, tasks
        self.buffer = b""
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            lines = self.buffer[:end].split(b"\r\n")
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get(b"content-length", b"0"))
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length:]
            path = lines[0].split(b" ")[1].decode()
            task = asyncio.get_running_loop().create_task(self.handle(path, headers, self.reply))
            self.tasks.add(task)  # the loop keeps only weak references to tasks
            task.add_done_callback(self.tasks.discard)

    def reply(self, status: int, body: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 %d %s\r\nContent-Length: %d\r\nContent-Type: text/plain\r\n\r\n%s"
                                 % (status, _REASONS.get(status, b"Status"), len(body), body))

    def connection_lost(self, exc) -> None:
        self.transport = None


_REASONS = {200: b"OK", 404: b"Not Found", 500: b"Internal Server Error", 503: b"Service Unavailable",
            504: b"Gateway Timeout"}


def serve(plan_path: str, scale: float, seed: int, first_offset: float) -> None:
    """The Router behind the minimal server on 127.0.0.1: prints the port, serves /infer, /results, /stop."""
    import gc
    import threading

    from loadprobe import pipeline
    from loadprobe.load.timers import event_loop as _event_loop, timer_slack as _timer_slack  # the load client's precise timers: sleeps wake on time
    from loadprobe.route import Rejected, Router

    config = pipeline.load(plan_path)
    samplers = service_times(config, scale)
    drawn: list[float] = []
    overslept: list[float] = []
    durations: dict[str, list[float]] = {}  # "stage/engine/batch" -> what each execution took, in start order

    def executor(stage: str, engine: str, batched: bool):
        draw = OwnStream(samplers[(stage, engine)], seed, stage, engine)

        async def run(payload):
            items = payload if batched else [payload]
            t = draw(len(items))
            drawn.append(t)
            taken = durations.setdefault(f"{stage}/{engine}/{len(items)}", [])
            slot = len(taken)
            taken.append(t)  # stays t if the router stops the execution at its deadline
            clock = asyncio.get_running_loop().time
            start = clock()
            await asyncio.sleep(t)
            taken[slot] = clock() - start
            overslept.append(taken[slot] - t)
            for item in items:
                item["path"].append(engine)  # one entry per stage the request passed
            return payload

        return run

    executors = {s.name: {e: executor(s.name, e, s.batch is not None)
                          for e in [s.engine] + ([s.fallback.engine] if s.fallback else [])} for s in config.stages}
    state: dict = {"router": None, "origin": None}
    records: list[list] = []
    stop = asyncio.Event()

    async def start_router() -> Router:
        # Built at the first request, its clock's zero where the simulator's is (the schedule's
        # start), so that the sliding windows of the failover cap and the retry budget step together.
        origin = time.perf_counter() - first_offset
        router = Router(config, executors, clock=lambda: time.perf_counter() - origin)
        state["router"], state["origin"] = router, origin
        await router.__aenter__()  # `async with router`, left in main() when the server stops
        return router

    async def handle(path: str, headers: dict, reply) -> None:
        if path == "/infer":
            rid = headers.get(b"x-request-id", b"0-0").decode()
            index = int(rid.rsplit("-", 1)[1]) - 1  # loadprobe load numbers requests from 1 in schedule order
            router = state["router"] or await start_router()
            payload = {"path": []}
            submitted = time.perf_counter()
            status, outcome, reason = 200, "ok", None
            try:
                await router.submit(payload)
            except Rejected as exc:
                status, outcome, reason = 503, "rejected", exc.reason
            except TimeoutError:
                status, outcome = 504, "timeout"
            except Exception as exc:  # noqa: BLE001 - counted; the comparison fails on it
                status, outcome, reason = 500, "error", repr(exc)
            done = time.perf_counter()
            records.append([index, submitted - state["origin"], done - submitted, outcome, reason, payload["path"]])
            reply(status, b"ok" if status == 200 else outcome.encode())
        elif path == "/results":
            router = state["router"]
            reply(200, json.dumps({
                "records": records, "metrics": router.metrics() if router else None, "durations": durations,
                "drawn_mean_ms": float(np.mean(drawn)) * 1000 if drawn else None,
                "overslept_ms": _summary_ms(overslept)}).encode())
        elif path == "/stop":
            reply(200, b"")
            stop.set()
        else:
            reply(200 if path == "/ping" else 404, b"")

    async def main() -> None:
        tasks: set = set()
        server = await asyncio.get_running_loop().create_server(lambda: _Http(handle, tasks), "127.0.0.1", 0,
                                                                backlog=4096)
        print(server.sockets[0].getsockname()[1], flush=True)
        await stop.wait()
        server.close()
        if state["router"] is not None:
            await state["router"].__aexit__(None, None, None)

    for thread in threading.enumerate():  # anything reading the recording started in the background: done first
        if thread is not threading.main_thread():
            thread.join(30)
    gc.collect()
    gc.freeze()  # what is alive now is never scanned again: shorter collector pauses during the run
    loop = _event_loop(True)
    _timer_slack(1)
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def _summary_ms(values_s: list[float]) -> dict | None:
    if not values_s:
        return None
    v = np.asarray(values_s) * 1000
    return {"mean": float(v.mean()), "p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)),
            "max": float(v.max())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", help="the pipeline.yaml to serve")
    parser.add_argument("--scale", type=float, default=10.0, help="service times x this")
    parser.add_argument("--seed", type=int, default=1, help="the service-time draws' streams")
    parser.add_argument("--first-offset", type=float, default=0.0,
                        help="the schedule's first send time: the router's clock starts there, as the simulator's")
    args = parser.parse_args(argv)
    serve(args.plan, args.scale, args.seed, args.first_offset)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
