"""The router under a 10x slowdown of one engine at 1.5x load: do accepted requests stay in their
timeouts, and do the other engines keep their throughput?

    python benchmarks/bench_router_faults.py [--seconds 6] [--rate 750]

The inspection line in miniature, with async executors that sleep for their service time:
``pre`` on "cpu" (2 ms, 4 slots), ``model`` on "npu0" (4 ms, 2 slots: 500/s, so the default
750/s is 1.5x its capacity) with a capped fallback to "gpu0", and ``post`` on "gpu0" (1 ms).
Open-loop arrivals at ``--rate`` run twice, same process: once as is ("normal") and once with
npu0's executor 10x slower ("npu0 10x slow"). Reported per run: outcomes, the p99 latency of
accepted requests against the sum of the stage timeouts, each stage's p99 against its own
timeout, and executions per second on each engine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import numpy as np

from loadprobe import pipeline
from loadprobe.route import Rejected, Router

PLAN = """
version: 1
service: faults
engines:
  cpu: {kind: cpu, max_concurrency: 4, max_queue: 64}
  npu0: {kind: npu, max_concurrency: 2, max_queue: 16}
  gpu0: {kind: gpu, max_concurrency: 2, max_queue: 32}
stages:
  - {name: pre, engine: cpu, timeout_ms: 50}
  - name: model
    engine: npu0
    timeout_ms: 100
    fallback: {engine: gpu0, when: {queue_len_over: 8}, max_ratio: 0.3, otherwise: reject}
    breaker: {error_rate_over: 0.5, window_s: 2, min_requests: 20, open_s: 1}
  - {name: post, engine: gpu0, timeout_ms: 50}
routing:
  shed: {by: priority}
"""
TIMEOUTS_MS = {"pre": 50, "model": 100, "post": 50}


def sleeper(ms: float, counter: dict, engine: str, stage: str):
    async def run(x):
        start = time.perf_counter()
        await asyncio.sleep(ms * counter["slow"].get(engine, 1.0) / 1000)
        counter["executions"][engine] = counter["executions"].get(engine, 0) + 1
        counter["stage_ms"].setdefault(stage, []).append((time.perf_counter() - start) * 1000)
        return x

    return run


async def one_run(rate: float, seconds: float, slow: dict) -> dict:
    counter = {"slow": slow, "executions": {}, "stage_ms": {}}
    executors = {"pre": {"cpu": sleeper(2, counter, "cpu", "pre")},
                 "model": {"npu0": sleeper(4, counter, "npu0", "model"),
                           "gpu0": sleeper(4, counter, "gpu0", "model")},
                 "post": {"gpu0": sleeper(1, counter, "gpu0", "post")}}
    outcomes = {"ok": 0, "rejected": 0, "timeout": 0, "error": 0}
    latencies = []
    router = Router(pipeline.loads(PLAN), executors)

    async def request(i: int, due: float) -> None:
        try:
            await router.submit(i, priority=i % 2)
        except Rejected:
            outcomes["rejected"] += 1
            return
        except TimeoutError:
            outcomes["timeout"] += 1
            return
        except Exception:
            outcomes["error"] += 1
            return
        outcomes["ok"] += 1
        latencies.append((time.perf_counter() - due) * 1000)

    async with router:
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        tasks = []
        n = int(rate * seconds)
        for i in range(n):  # open loop: every request leaves at its time, whatever the backlog
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(loop.create_task(request(i, due)))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
        metrics = router.metrics()
    return {
        "submitted": n,
        "outcomes": outcomes,
        "accepted_p50_ms": float(np.percentile(latencies, 50)) if latencies else None,
        "accepted_p99_ms": float(np.percentile(latencies, 99)) if latencies else None,
        "timeouts_sum_ms": sum(TIMEOUTS_MS.values()),
        "stage_p99_ms": {s: round(float(np.percentile(v, 99)), 2) for s, v in counter["stage_ms"].items()},
        "executions_per_s": {e: round(c / elapsed, 1) for e, c in sorted(counter["executions"].items())},
        "failover_share": metrics["stages"]["model"]["failover_share"],
        "breaker_opened": metrics["stages"]["model"]["breaker_opened"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rate", type=float, default=750.0)
    args = parser.parse_args()
    runs = {"normal": asyncio.run(one_run(args.rate, args.seconds, {})),
            "npu0 10x slow": asyncio.run(one_run(args.rate, args.seconds, {"npu0": 10.0}))}
    print(json.dumps(runs, indent=2))
    normal, slow = runs["normal"]["executions_per_s"], runs["npu0 10x slow"]["executions_per_s"]
    print(f"cpu executions/s: normal {normal.get('cpu')}, slowed {slow.get('cpu')} "
          f"({100 * (slow.get('cpu', 0) / normal['cpu'] - 1):+.1f}%)")


if __name__ == "__main__":
    main()
