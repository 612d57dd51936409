"""The host's tail: p50, p99, p99.9 and max a recorder adds per call and per request, same run.

    python benchmarks/bench_tail.py [--rounds 5] [--loop-s 2] [--rate 500] [--http-s 10]

Three contenders, in rounds that interleave them (the order rotates each round) so that
whatever else runs on the machine hits all alike; every figure is the median over rounds
of that round's percentile, and "added" is a contender's figure minus recording off's:

- **off**: loadprobe imported and every probe in place, no recorder started (a probe is a
  plain call; the middleware passes requests through);
- **on**: ``loadprobe.start()`` with its defaults (flush every 1 s, device sampling on),
  the flusher converting and writing in the background as in a service;
- **otel**: the same functions in OpenTelemetry SDK spans (``start_as_current_span``)
  with a ``BatchSpanProcessor`` (default settings but a 65,536-span queue, as in
  bench_probe.py) and an exporter that discards.

Part 1, **tight loop**: one thread calls a one-stage probed function inside a request as
fast as it can for ``--loop-s`` seconds per contender and round, timing every call on its
own (two ``perf_counter_ns()`` reads around it; the reads are in every contender alike).
Nothing else runs in the process but the contender's own background threads, so the
spread over off is what recording adds: the flusher's hold of the GIL shows directly.

Part 2, **service**: a FastAPI app with 4 probed stages of pure-Python work under
``LoadprobeMiddleware`` (otel: the same stages in spans under a root-span ASGI wrapper),
each contender a uvicorn server on 127.0.0.1 in a subprocess of its own, all three up for
the whole run; ``loadprobe.load.run`` sends an open-loop Poisson schedule at ``--rate``
for ``--http-s`` seconds per round to one of them at a time. Two latencies per request:

- **server-side**: an outermost ASGI wrapper, outside every middleware, times each
  request from the moment the app is called to the last body message handed to uvicorn.
  It leaves out the network and the client, which share the 2 cores and are noisier than
  what is measured, so it isolates the added cost best; it misses a wait for the GIL
  before the event loop reads the request.
- **client-side**: what ``loadprobe load`` reports, from each request's intended send time
  to its answer; it includes that wait, and everything else.

Prints a table and, with ``--json``, the figures as JSON.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from time import perf_counter_ns

import numpy as np

import loadprobe
from loadprobe import probe, request

CONTENDERS = ("off", "on", "otel")
QUANTILES = (("p50", 50), ("p99", 99), ("p99.9", 99.9), ("max", 100))


def summarize(lat_ns: np.ndarray) -> dict:
    return {name: float(np.percentile(lat_ns, q)) for name, q in QUANTILES} | {"n": int(len(lat_ns))}


def otel_tracer():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Discard(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard(), max_queue_size=1 << 16))
    return provider, provider.get_tracer("bench-tail")


# -- part 1: a tight loop of probed calls ------------------------------------------------


def work(x):
    return x


probed = probe("stage")(work)


def timed_loop(fn, seconds: float) -> np.ndarray:
    """Call ``fn`` back to back for ``seconds``; every call's own nanoseconds."""
    lat = array.array("q")
    append, clock = lat.append, perf_counter_ns
    end = clock() + int(seconds * 1e9)
    i = 0
    while True:
        for _ in range(1000):
            t0 = clock()
            fn(i)
            append(clock() - t0)
        i += 1
        if clock() >= end:
            return np.frombuffer(lat, dtype=np.int64)


def loop_round(name: str, seconds: float, out: str) -> dict:
    gc.collect()
    if name == "on":
        loadprobe.start(out, service="bench-tail")
        loadprobe.flush()  # the recorder's imports and files are ready before timing
        try:
            with request():
                lat = timed_loop(probed, seconds)
        finally:
            stats = loadprobe.stop()
        extra = {"spans_written": stats.spans_written, "spans_dropped": stats.spans_dropped}
    elif name == "otel":
        provider, tracer = otel_tracer()

        def spanned(x):
            with tracer.start_as_current_span("stage"):
                return work(x)

        try:
            with tracer.start_as_current_span("request"):
                lat = timed_loop(spanned, seconds)
        finally:
            provider.shutdown()
        extra = {}
    else:
        with request():  # a plain call, as is every probe with no recorder
            lat = timed_loop(probed, seconds)
        extra = {}
    return summarize(lat) | extra


def tight_loop(rounds: int, seconds: float) -> dict:
    per_round: dict[str, list[dict]] = {name: [] for name in CONTENDERS}
    with tempfile.TemporaryDirectory() as out:
        for name in CONTENDERS:
            loop_round(name, 0.2, out)  # warm up: imports, caches
        for r in range(rounds):
            order = CONTENDERS[r % 3:] + CONTENDERS[:r % 3]
            for name in order:
                per_round[name].append(loop_round(name, seconds, out))
    return per_round


# -- part 2: a FastAPI service under open-loop load -------------------------------------


def spin(n: int) -> int:
    total = 0
    for k in range(n):
        total += k * k
    return total


def build_service(variant: str):
    """The ASGI app of one contender, wrapped in the server-side timer."""
    from fastapi import FastAPI

    from loadprobe.instrumentation.asgi import LoadprobeMiddleware

    def decode(i):
        return spin(150) + i

    def backbone(x):
        return spin(400) + x

    def nms(x):
        return spin(150) + x

    def encode(x):
        return {"id": x, "boxes": [[1, 2, 3, 4]] * 4}

    stages = [decode, backbone, nms, encode]
    if variant == "otel":
        provider, tracer = otel_tracer()

        def in_span(fn, stage):
            def wrapper(x):
                with tracer.start_as_current_span(stage):
                    return fn(x)
            return wrapper

        stages = [in_span(fn, fn.__name__) for fn in stages]
    else:
        stages = [probe(fn.__name__)(fn) for fn in stages]
    decode, backbone, nms, encode = stages

    app = FastAPI()

    @app.get("/infer/{item}")
    async def infer(item: int):
        return encode(nms(backbone(decode(item))))

    if variant == "otel":
        async def root(scope, receive, send):  # the counterpart of LoadprobeMiddleware: one root span
            if scope["type"] != "http":
                return await app(scope, receive, send)
            with tracer.start_as_current_span("GET /infer/{item}"):
                await app(scope, receive, send)
        inner = root
    else:
        inner = LoadprobeMiddleware(app)
    return Timer(inner)


class Timer:
    """Outermost ASGI wrapper: every request's time from the call to its last body message."""

    def __init__(self, app) -> None:
        self.app = app
        self.lat = array.array("q")

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] == "/_lat":  # hand over and reset; not timed
            body, self.lat = self.lat.tobytes(), array.array("q")
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = perf_counter_ns()
        lat = self.lat

        async def timed_send(message):
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                lat.append(perf_counter_ns() - t0)

        await self.app(scope, receive, timed_send)


def serve(variant: str, port_file: str) -> None:
    import uvicorn

    with tempfile.TemporaryDirectory() as out:
        if variant == "on":
            loadprobe.start(out, service="bench-tail-service")
        app = build_service(variant)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                               access_log=False, lifespan="off"))

        async def main():
            task = asyncio.ensure_future(server.serve())
            while not server.started:
                await asyncio.sleep(0.01)
            port = server.servers[0].sockets[0].getsockname()[1]
            with open(port_file + ".tmp", "w") as handle:
                handle.write(str(port))
            os.replace(port_file + ".tmp", port_file)
            await task

        try:
            asyncio.run(main())
        except KeyboardInterrupt:  # the harness's SIGINT: uvicorn has closed, now finish the files
            pass
        if variant == "on":
            stats = loadprobe.stop()
            print(json.dumps({"spans_written": stats.spans_written, "spans_dropped": stats.spans_dropped}),
                  flush=True)


def fetch(port: int, path: str) -> bytes:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path)
    body = conn.getresponse().read()
    conn.close()
    return body


def service(rounds: int, rate: float, seconds: float) -> tuple[dict, dict]:
    from loadprobe import load

    procs, ports = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in CONTENDERS:
            port_file = os.path.join(tmp, f"{name}.port")
            procs[name] = subprocess.Popen([sys.executable, __file__, "--serve", name, "--port-file", port_file],
                                           stdout=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 60
            while not os.path.exists(port_file):
                if time.monotonic() > deadline or procs[name].poll() is not None:
                    raise SystemExit(f"server {name} did not start")
                time.sleep(0.05)
            ports[name] = int(open(port_file).read())
        server_side: dict[str, list[dict]] = {name: [] for name in CONTENDERS}
        client_side: dict[str, list[dict]] = {name: [] for name in CONTENDERS}
        try:
            for name in CONTENDERS:  # warm up each server: routes, imports, the recorder's first flush
                load.run(f"http://127.0.0.1:{ports[name]}/infer/1", load.poisson(rate, duration=1.0, seed=0))
                fetch(ports[name], "/_lat")
            for r in range(rounds):
                order = CONTENDERS[r % 3:] + CONTENDERS[:r % 3]
                for name in order:
                    report = load.run(f"http://127.0.0.1:{ports[name]}/infer/1",
                                      load.poisson(rate, duration=seconds, seed=r + 1))
                    lat = np.frombuffer(fetch(ports[name], "/_lat"), dtype=np.int64)
                    server_side[name].append(summarize(lat))
                    ms = report.latency_ms
                    client_side[name].append({"p50": ms["p50"] * 1e6, "p99": ms["p99"] * 1e6,
                                              "p99.9": ms["p999"] * 1e6, "max": ms["max"] * 1e6,
                                              "n": report.responses, "errors": sum(report.errors.values()),
                                              "late_p99": report.lateness_ms["p99"] * 1e6})
        finally:
            for name, proc in procs.items():
                proc.send_signal(2)  # SIGINT: uvicorn shuts down, the recorder finishes its files
            for name, proc in procs.items():
                try:
                    out, _ = proc.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    out = ""
                if name == "on" and out.strip():
                    server_side["on_stats"] = json.loads(out.strip().splitlines()[-1])
    return server_side, client_side


# -- report ------------------------------------------------------------------------------


def medians(per_round: dict) -> dict:
    return {name: {q: statistics.median(r[q] for r in rows) for q, _ in QUANTILES}
            for name, rows in per_round.items() if name in CONTENDERS}


def table(title: str, per_round: dict, unit: float = 1e3) -> str:
    med = medians(per_round)
    off = med["off"]
    lines = [title, f"{'':<6}" + "".join(f"{q:>12}" for q, _ in QUANTILES) + "   added (µs): "
             + "  ".join(q for q, _ in QUANTILES)]
    for name in CONTENDERS:
        figures = "".join(f"{med[name][q] / unit:>12.1f}" for q, _ in QUANTILES)
        added = "  ".join(f"{(med[name][q] - off[q]) / unit:+.1f}" for q, _ in QUANTILES)
        lines.append(f"{name:<6}{figures}   {added}")
    maxima = {name: [round(r["max"] / unit) for r in per_round[name]] for name in CONTENDERS}
    lines.append(f"per-round max (µs): {maxima}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--loop-s", type=float, default=2.0, help="seconds per contender and round, tight loop")
    parser.add_argument("--rate", type=float, default=500.0, help="requests per second, service")
    parser.add_argument("--http-s", type=float, default=10.0, help="seconds per contender and round, service")
    parser.add_argument("--skip-loop", action="store_true")
    parser.add_argument("--skip-service", action="store_true")
    parser.add_argument("--json", metavar="PATH", help="also write every round's figures here")
    parser.add_argument("--serve", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--port-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve, args.port_file)

    result: dict = {"python": sys.version.split()[0], "args": vars(args)}
    if not args.skip_loop:
        loop = tight_loop(args.rounds, args.loop_s)
        result["tight_loop"] = loop
        print(table(f"tight loop: ns per call -> µs, median over {args.rounds} rounds of {args.loop_s} s "
                    f"(calls per round: {[r['n'] for r in loop['on']]} on)", loop))
        print(f"  on: spans written {[r['spans_written'] for r in loop['on']]}, "
              f"dropped {[r['spans_dropped'] for r in loop['on']]}")
    if not args.skip_service:
        server_side, client_side = service(args.rounds, args.rate, args.http_s)
        result["service_server_side"], result["service_client_side"] = server_side, client_side
        print()
        print(table(f"service, server-side (Timer around the app), {args.rate:g} req/s x {args.http_s:g} s, "
                    f"median over {args.rounds} rounds", server_side))
        print(f"  on: {server_side.get('on_stats')}")
        print(table("service, client-side (loadprobe load, from intended send time)", client_side))
        print("  client errors: " + str({n: [r["errors"] for r in client_side[n]] for n in CONTENDERS})
              + "  send lateness p99 µs: " + str({n: [round(r["late_p99"] / 1e3) for r in client_side[n]]
                                                   for n in CONTENDERS}))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
