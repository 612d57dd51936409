"""What the router adds per request and stage, and how many requests/s it carries on one core.

    python benchmarks/bench_router.py [--rounds 31] [--requests 2000] [--concurrency 64] [--sync]

Peer, measured in the same run: the same three no-op executors awaited directly in a chain
(``await a(x); await b(y); await c(z)``). Overhead: the median over interleaved rounds of
(router per request - chain per request) / 3 stages, one request at a time. Throughput:
``--concurrency`` tasks submitting back to back for ``--requests`` each, the process pinned
to one core. Both run with a loadprobe recorder (every stage recorded, as in a service) and
without one. ``--sync`` also measures plain-function executors, which run on the engines'
worker threads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time

import loadprobe
from loadprobe import pipeline
from loadprobe.route import Router

PLAN = """
version: 1
service: bench
engines:
  cpu: {kind: cpu, max_concurrency: 64, max_queue: 100000}
  gpu: {kind: gpu, max_concurrency: 64, max_queue: 100000}
stages:
  - {name: decode, engine: cpu, timeout_ms: 1000}
  - {name: model, engine: gpu, timeout_ms: 1000}
  - {name: post, engine: cpu, timeout_ms: 1000}
"""


async def a(x):
    return x


async def b(x):
    return x


async def c(x):
    return x


def a_sync(x):
    return x


def b_sync(x):
    return x


def c_sync(x):
    return x


async def chain(x):
    return await c(await b(await a(x)))


async def per_request_ns(submit, n: int) -> float:
    t0 = time.perf_counter_ns()
    for i in range(n):
        await submit(i)
    return (time.perf_counter_ns() - t0) / n


async def throughput(submit, concurrency: int, n: int) -> float:
    async def worker():
        for i in range(n):
            await submit(i)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return concurrency * n / (time.perf_counter() - t0)


async def measure(args, sync: bool) -> dict:
    fns = (a_sync, b_sync, c_sync) if sync else (a, b, c)
    executors = {"decode": {"cpu": fns[0]}, "model": {"gpu": fns[1]}, "post": {"cpu": fns[2]}}
    router = Router(pipeline.loads(PLAN), executors)
    async with router:
        for _ in range(3):  # warm up
            await per_request_ns(router.submit, args.requests // 4)
        chain_ns, router_ns = [], []
        for _ in range(args.rounds):
            chain_ns.append(await per_request_ns(chain, args.requests))
            router_ns.append(await per_request_ns(router.submit, args.requests))
        rps_router = statistics.median([await throughput(router.submit, args.concurrency, args.requests // 8)
                                        for _ in range(5)])
        rps_chain = statistics.median([await throughput(chain, args.concurrency, args.requests // 8)
                                       for _ in range(5)])
        ok = router.metrics()["requests"]
    diffs = [r - c for r, c in zip(router_ns, chain_ns)]
    return {
        "executors": "sync (worker threads)" if sync else "async",
        "chain_us_per_request": statistics.median(chain_ns) / 1000,
        "router_us_per_request": statistics.median(router_ns) / 1000,
        "overhead_us_per_stage": statistics.median(diffs) / 3 / 1000,
        "router_rps": rps_router,
        "chain_rps": rps_chain,
        "requests_ok": ok["ok"], "requests_failed": ok["failed"] + ok["rejected"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--sync", action="store_true", help="also measure sync executors")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core, as the target says
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for recording in (False, True):
            if recording:
                loadprobe.start(tmp, service="bench", sample_devices=False)
            for sync in ((False, True) if args.sync else (False,)):
                row = asyncio.run(measure(args, sync))
                row["recording"] = recording
                results.append(row)
                print(json.dumps(row), flush=True)
            if recording:
                stats = loadprobe.current().stats()
                loadprobe.stop()
                print(json.dumps({"spans_recorded": stats.spans_recorded, "spans_dropped": stats.spans_dropped}))
    print(f"python {sys.version.split()[0]}, one core")


if __name__ == "__main__":
    main()
