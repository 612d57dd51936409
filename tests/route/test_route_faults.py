"""The router under faults, in process and bounded in time: a hung, a failing and a 10x slower
engine, and load at 1.5x capacity. Every submitted request ends exactly once, the failover share
stays within max_ratio (exact: the cap is checked and counted under one lock; the test's window
covers the whole run), queues stay within max_queue, breakers open and recover, retries stay
within the budget, and the other engines keep serving."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

from loadprobe import pipeline
from loadprobe.route import Rejected, Router

PLAN = """
version: 1
service: faults
engines:
  cpu: {kind: cpu, max_concurrency: 4, max_queue: 64}
  npu: {kind: npu, max_concurrency: 2, max_queue: 8}
  gpu: {kind: gpu, max_concurrency: 2, max_queue: 8}
stages:
  - {name: pre, engine: cpu, timeout_ms: 1000}
  - name: model
    engine: npu
    timeout_ms: 60
    retry: {max_attempts: 2}
    fallback: {engine: gpu, when: {queue_len_over: 4}, max_ratio: 0.3, otherwise: reject}
    breaker: {error_rate_over: 0.5, window_s: 1, min_requests: 5, open_s: 0.2}
  - {name: post, engine: cpu, timeout_ms: 1000}
routing:
  retry: {budget_ratio: 0.1, max_attempts: 1}
  shed: {by: priority}
"""
MAX_RATIO, BUDGET = 0.3, 0.1
SERVICE_S = 0.004  # the npu's normal time per request


class Npu:
    """A sync executor (so it runs on worker threads, where a hang cannot be cancelled)."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, x):
        self.calls += 1
        if self.mode == "hang":
            self.release.wait(30)
        elif self.mode == "error":
            raise RuntimeError("npu fault")
        time.sleep(SERVICE_S * (10 if self.mode == "slow" else 1))
        return ("npu", x)


async def gpu(x):
    await asyncio.sleep(SERVICE_S)
    return ("gpu", x)


def make_router(npu: Npu) -> Router:
    config = pipeline.loads(PLAN)
    return Router(config, {"pre": {"cpu": lambda x: x}, "model": {"npu": npu, "gpu": gpu},
                           "post": {"cpu": lambda x: x}}, window_s=3600)


async def drive(router: Router, n: int, interval_s: float, priority=lambda i: 0) -> list:
    """Open-loop load: ``n`` requests, one every ``interval_s``; every outcome, in submission order."""
    tasks = []
    for i in range(n):
        tasks.append(asyncio.create_task(router.submit(i, priority=priority(i))))
        await asyncio.sleep(interval_s)
    async with asyncio.timeout(20):  # bounded: a lost request fails the test instead of hanging it
        return await asyncio.gather(*tasks, return_exceptions=True)


def check_accounting(metrics: dict, outcomes: list) -> Counter:
    """Each request ended exactly once, as a result, a Rejected or its error; the router agrees."""
    kinds = Counter("ok" if isinstance(o, tuple) else "rejected" if isinstance(o, Rejected)
                    else type(o).__name__ for o in outcomes)
    assert sum(kinds.values()) == len(outcomes)
    assert set(kinds) <= {"ok", "rejected", "TimeoutError", "RuntimeError"}, kinds
    counts = metrics["requests"]
    assert counts["submitted"] == len(outcomes) and counts["in_flight"] == 0
    assert counts["ok"] == kinds["ok"] and counts["rejected"] == kinds["rejected"]
    assert counts["failed"] == len(outcomes) - kinds["ok"] - kinds["rejected"]
    return kinds


def check_bounds(metrics: dict, n: int) -> dict:
    for name, engine in metrics["engines"].items():
        assert engine["peak_queue_len"] <= engine["max_queue"], name
    model = metrics["stages"]["model"]
    assert model["failover_share"] <= MAX_RATIO
    assert model["failovers"] <= MAX_RATIO * (n + model["retries"])  # moved share of the stage's attempts
    assert metrics["retries"]["allowed"] <= BUDGET * n
    assert metrics["engines"]["cpu"]["errors"] == 0  # the cpu stages kept serving
    return metrics


async def recover(router: Router, npu: Npu) -> None:
    """Heal the npu; keep sending single requests until the breaker has closed (bounded)."""
    npu.mode = "ok"
    npu.release.set()
    async with asyncio.timeout(10):
        while router.metrics()["stages"]["model"]["breaker"] != "closed":
            try:
                await router.submit("probe")
            except (Rejected, TimeoutError):
                pass
            await asyncio.sleep(0.01)
    assert await router.submit("after") == ("npu", "after")


def break_and_heal(npu: Npu):
    """150 requests at 2 ms intervals against the broken npu, then heal it until the breaker closes.

    Returns every outcome, the metrics taken before healing, and the outcomes counted by kind
    (after checking that each request ended exactly once and every bound held).
    """
    router = make_router(npu)

    async def main():
        async with router:
            outcomes = await drive(router, 150, 0.002)
            during = router.metrics()
            await recover(router, npu)
            return outcomes, during

    outcomes, metrics = asyncio.run(main())
    kinds = check_accounting(metrics, outcomes)
    check_bounds(metrics, len(outcomes))
    return outcomes, metrics, kinds


def test_a_hung_engine_times_out_opens_its_breaker_and_recovers():
    npu = Npu()
    npu.mode = "hang"
    outcomes, metrics, kinds = break_and_heal(npu)
    assert metrics["stages"]["model"]["breaker"] in ("open", "half_open")
    assert metrics["stages"]["model"]["breaker_opened"] >= 1
    assert kinds["TimeoutError"] >= 1 and kinds["rejected"] >= 1
    moved = [o for o in outcomes if isinstance(o, tuple) and o[0] == "gpu"]
    assert kinds["ok"] == len(moved) > 0  # only the fallback served, and within its cap
    assert metrics["engines"]["gpu"]["errors"] == 0


def test_a_failing_engine_opens_its_breaker_with_retries_inside_the_budget():
    npu = Npu()
    npu.mode = "error"
    outcomes, metrics, kinds = break_and_heal(npu)
    assert kinds["RuntimeError"] >= 1 and metrics["stages"]["model"]["breaker_opened"] >= 1
    assert 0 < metrics["retries"]["allowed"] <= BUDGET * len(outcomes) and metrics["retries"]["denied"] > 0
    # once open, the npu is left alone: far fewer calls than attempts
    assert npu.calls < len(outcomes)
    assert metrics["rejects"].get("breaker_open", 0) + metrics["rejects"].get("failover_cap", 0) > 0


def test_a_10x_slower_engine_moves_a_capped_share_and_keeps_its_queue_bounded():
    npu = Npu()
    npu.mode = "slow"  # 40 ms: 50 requests/s on two slots, offered 200/s
    router = make_router(npu)

    async def main():
        async with router:
            return await drive(router, 200, 0.005)

    outcomes = asyncio.run(main())
    metrics = router.metrics()
    kinds = check_accounting(metrics, outcomes)
    check_bounds(metrics, len(outcomes))
    assert metrics["stages"]["model"]["failovers"] > 0
    assert metrics["rejects"].get("failover_cap", 0) > 0  # past the cap: rejected fast, not piled on the gpu
    assert kinds["ok"] > 0


def test_load_at_one_and_a_half_times_capacity_sheds_low_priority_first():
    npu = Npu()
    router = make_router(npu)
    # capacity: 2 slots / 4 ms = 500 requests/s on the npu, plus the capped fallback; offer 1.5x that
    capacity = 2 / SERVICE_S / (1 - MAX_RATIO)

    async def main():
        async with router:
            return await drive(router, 600, 1 / (1.5 * capacity), priority=lambda i: i % 2)

    outcomes = asyncio.run(main())
    metrics = router.metrics()
    check_accounting(metrics, outcomes)
    check_bounds(metrics, len(outcomes))
    failed = Counter(i % 2 for i, o in enumerate(outcomes) if not isinstance(o, tuple))
    assert failed[1] <= failed[0]  # high priority (1) never loses more than low (0)
    assert metrics["engines"]["npu"]["requests"] > 0 and metrics["engines"]["gpu"]["requests"] > 0
