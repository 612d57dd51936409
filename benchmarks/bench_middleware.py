"""Microseconds the ASGI middleware adds to one HTTP request, against named peers, same run.

    python benchmarks/bench_middleware.py [--rounds 30] [--requests 2000] [--http 3000]

One FastAPI app (``GET /items/{item_id}`` returning a small JSON document) is wrapped
four ways: not at all; loadprobe's LoadprobeMiddleware with a recorder writing Parquet;
OpenTelemetry's ASGI middleware with the SDK and a batch processor (exporter discards);
a prometheus_client middleware observing a request-latency Histogram labelled by
method, route and status. Two measurements:

- **in-process**: the app is called directly through the ASGI interface (real FastAPI
  routing, validation and JSON), rounds interleaved; per-request median, minus the
  plain app's. This isolates the middleware's own cost.
- **over HTTP**: one uvicorn server on 127.0.0.1 serves all four under path prefixes; a
  client in another process sends keep-alive requests in interleaved rounds and
  reports the median latency of each, minus the plain one.

Needs ``pip install 'loadprobe[demo,bench]' opentelemetry-instrumentation-asgi``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import loadprobe
from loadprobe.instrumentation.asgi import LoadprobeMiddleware


def make_app():
    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/items/{item_id}")
    async def item(item_id: int):
        return {"item": item_id, "ok": True}

    return app


def otel_app():
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Discard(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard(), max_queue_size=1 << 16))
    return OpenTelemetryMiddleware(make_app(), tracer_provider=provider)


def prometheus_app():
    from prometheus_client import CollectorRegistry, Histogram

    latency = Histogram("http_request_seconds", "request latency", ["method", "route", "status"],
                        registry=CollectorRegistry())
    inner = make_app()

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return await inner(scope, receive, send)
        start = time.perf_counter()
        status = [500]

        async def noting(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await inner(scope, receive, noting)
        finally:
            route = getattr(scope.get("route"), "path", "(unmatched)")
            latency.labels(scope["method"], route, str(status[0])).observe(time.perf_counter() - start)

    return app


VARIANTS = {
    "plain": make_app,
    "loadprobe": lambda: LoadprobeMiddleware(make_app()),
    "opentelemetry": otel_app,
    "prometheus_client": prometheus_app,
}


def scope_for(i: int) -> dict:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": f"/items/{i}", "raw_path": f"/items/{i}".encode(), "root_path": "",
        "query_string": b"", "headers": [(b"host", b"bench"), (b"x-request-id", f"r{i}".encode())],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
    }


async def drive(app, n: int) -> float:
    """Seconds per request, calling the app directly ``n`` times."""

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        pass

    start = time.perf_counter()
    for i in range(n):
        await app(scope_for(i), receive, send)
    return (time.perf_counter() - start) / n


def in_process(rounds: int, n: int) -> dict:
    apps = {name: factory() for name, factory in VARIANTS.items()}
    times: dict[str, list[float]] = {name: [] for name in apps}

    async def run():
        for app in apps.values():
            await drive(app, 200)  # warm up: routes compiled, caches filled
        for _ in range(rounds):
            for name, app in apps.items():
                times[name].append(await drive(app, n))

    asyncio.run(run())
    return {name: statistics.median(values) * 1e6 for name, values in times.items()}


CLIENT = textwrap.dedent("""
    import http.client, json, statistics, sys, time
    port, rounds, n, names = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(",")
    conn = http.client.HTTPConnection("127.0.0.1", port)
    lat = {name: [] for name in names}
    for r in range(rounds + 1):
        for name in names:
            samples = []
            for i in range(n):
                t0 = time.perf_counter()
                conn.request("GET", f"/{name}/items/{i}", headers={"x-request-id": f"{name}-{r}-{i}"})
                conn.getresponse().read()
                samples.append(time.perf_counter() - t0)
            if r:  # round 0 warms up
                lat[name].append(statistics.median(samples))
    print(json.dumps({name: statistics.median(v) * 1e6 for name, v in lat.items()}))
""")


def over_http(rounds: int, n: int) -> dict:
    import uvicorn

    apps = {name: factory() for name, factory in VARIANTS.items()}

    async def dispatch(scope, receive, send):
        if scope["type"] == "lifespan":
            message = await receive()
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        prefix, _, rest = scope["path"][1:].partition("/")
        sub = dict(scope, path="/" + rest, raw_path=("/" + rest).encode())
        await apps[prefix](sub, receive, send)

    server = uvicorn.Server(uvicorn.Config(dispatch, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        out = subprocess.run([sys.executable, "-c", CLIENT, str(port), str(rounds), str(n), ",".join(apps)],
                             capture_output=True, text=True, check=True, timeout=600)
        return json.loads(out.stdout)
    finally:
        server.should_exit = True
        thread.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--requests", type=int, default=2000, help="per round, in-process")
    parser.add_argument("--http", type=int, default=300, help="requests per round over HTTP")
    parser.add_argument("--http-rounds", type=int, default=10)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        rec = loadprobe.start(tmp, service="bench", sample_devices=False)
        direct = in_process(args.rounds, args.requests)
        http = over_http(args.http_rounds, args.http)
        stats = loadprobe.stop()
    print(f"spans recorded {stats.spans_recorded:,}, dropped {stats.spans_dropped:,}")
    for title, figures in (("in-process (ASGI call)", direct), ("over HTTP (uvicorn, keep-alive)", http)):
        base = figures["plain"]
        print(f"\n{title}: plain request {base:.1f} µs")
        print(f"{'middleware':<20}{'µs/request':>12}{'added µs':>10}{'x loadprobe':>13}")
        added_lp = figures["loadprobe"] - base
        for name, value in figures.items():
            added = value - base
            ratio = f"{added / added_lp:.1f}" if name != "plain" and added_lp > 0 else ""
            print(f"{name:<20}{value:>12.1f}{added:>10.1f}{ratio:>13}")


if __name__ == "__main__":
    main()
