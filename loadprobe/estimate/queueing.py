"""Analytic estimates of a plan at a given arrival rate: latency, capacity, power, energy.

Usage::

    est = estimate(assignments, engines, rate=120.0, unattributed_ms=1.5)
    est.p50_ms, est.p95_ms, est.max_rps, est.power_w, est.energy_per_request_j, est.utilisation

Each engine is an M/M/c queue (Erlang C) whose servers are its devices (CPU: cores) and whose
service time per request is the sum, over the stages it runs, of one execution's time
divided by the batch. A batching window adds half its length on average and all of it at
worst. A Python service's interpreter (``interpreter``: its worker processes and the interpreter CPU
each request needs) is one more queue: one request's Python runs at a time per process, so it
bounds capacity and adds its wait, while its time is already inside the stages' and the host
work's. End-to-end: the stages' medians add up for p50; for p95 the stages' mean times add
and their spreads combine as independent (root of the sum of squares); p99 likewise. These are
estimates, labelled as such everywhere they appear; ``loadprobe simulate`` replaces them
with a replay of the recorded traffic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

INTERPRETER = "python interpreter"
"""The name under which the interpreter's queue shows as a bottleneck and in ``offered``."""
Z95 = 1.6448536269514722  # standard normal quantile at 0.95
IDLE_POWER_SHARE = 0.3
"""An idle accelerator or CPU draws about this share of its TDP (assumption, stated in plans)."""


@dataclass(frozen=True)
class Placement:
    """One stage as placed: on which engine, its execution time and batching."""

    stage: str
    engine: str
    p50_ms: float  # one execution of ``batch`` items
    p95_ms: float
    batch: int
    window_ms: float
    calls: float = 1.0  # executions per request (an LLM's decode: once per generated token)
    p99_ms: float | None = None  # one execution's p99 (default: its p95)
    mean_ms: float | None = None  # its mean (default: its p50); a skewed stage's is well above its p50
    busy_share: float = 1.0  # of that, what keeps the engine busy: a CPU stage's work, not its waits

    @property
    def load_ms(self) -> float:
        return self.p50_ms if self.mean_ms is None else self.mean_ms

    @property
    def busy_ms(self) -> float:
        """What one execution loads its engine with (ms)."""
        return self.load_ms * self.busy_share


def lognormal_mean(p50: float, p95: float) -> float:
    """The mean of the lognormal through ``p50`` and ``p95`` (a hand-written pipeline's two figures); ``p50`` when
    not skewed."""
    if p50 <= 0 or p95 <= p50:
        return p50
    sigma = math.log(p95 / p50) / Z95
    return p50 * math.exp(sigma * sigma / 2)


@dataclass(frozen=True)
class EngineCapacity:
    name: str
    servers: int  # devices, or CPU cores
    power_w: float | None  # all its units at full load (TDP x count); None when unknown


@dataclass
class Estimate:
    rate_rps: float
    p50_ms: float | None  # None: the plan cannot carry this rate
    p95_ms: float | None
    max_rps: float
    power_w: float | None
    energy_per_request_j: float | None
    utilisation: dict = field(default_factory=dict)  # engine -> busy share at rate
    stage_p95_ms: dict = field(default_factory=dict)
    bottleneck: str | None = None  # the engine that saturates first
    p99_ms: float | None = None
    method: str = "analytic estimate (M/M/c per engine)"
    failed_share: float | None = None  # rejected or timed out (simulated estimates only)
    offered: dict = field(default_factory=dict)  # engine -> offered load per server at rate (above 1: saturated)
    stage_p99_ms: dict = field(default_factory=dict)  # simulated estimates only
    interpreter_wait_ms: tuple = (0.0, 0.0, 0.0)  # the wait for the Python interpreter at p50, p95, p99


def erlang_c(servers: int, load: float) -> float:
    """Probability that an arrival waits in an M/M/c queue with offered load ``load`` (< servers).

    Through the Erlang B recurrence, which stays finite for any number of servers.
    """
    if load <= 0:
        return 0.0
    b = 1.0
    for k in range(1, servers + 1):
        b = load * b / (k + load * b)
    return servers * b / (servers - load * (1 - b))


def estimate(placements: list[Placement], engines: dict[str, EngineCapacity], *, rate: float,
             unattributed_ms: float = 0.0, interpreter: tuple[int, float] | None = None) -> Estimate:
    """The plan at ``rate``; ``interpreter``: (worker processes, interpreter ms per request) of a Python service."""
    work: dict[str, float] = {}  # engine -> seconds of service per request
    for p in placements:
        work[p.engine] = work.get(p.engine, 0.0) + p.calls * p.busy_ms / 1000.0 / max(1, p.batch)
    # The interpreter: (processes, seconds per request), a queue of its own that loads no engine.
    lock_wait = (interpreter[0], interpreter[1] / 1000.0) if interpreter is not None and interpreter[1] > 0 else None
    capacity = {e: engines[e].servers / w for e, w in work.items() if w > 0}
    if lock_wait is not None:
        capacity[INTERPRETER] = lock_wait[0] / lock_wait[1]
    max_rps = min(capacity.values()) if capacity else math.inf
    bottleneck = min(capacity, key=capacity.get) if capacity else None
    offered = {e: rate * w / engines[e].servers for e, w in work.items()}
    util = {e: min(1.0, load) for e, load in offered.items()}
    if lock_wait is not None:
        offered[INTERPRETER] = rate * lock_wait[1] / lock_wait[0]
    power = _power(engines, util)
    if rate >= max_rps:
        return Estimate(rate, None, None, max_rps, power, None, util, {}, bottleneck, offered=offered)
    # Each visit of a request to an engine queues there. Waits are per engine, shared out over the
    # stages it runs in proportion to their visits, so an engine running k stages adds its wait once.
    visits: dict[str, float] = {}
    for p in placements:
        visits[p.engine] = visits.get(p.engine, 0.0) + p.calls
    waits = {e: _wait(engines[e].servers, rate, w) for e, w in work.items()}
    p50 = mean_total = unattributed_ms
    spread = spread99 = 0.0
    lock = (0.0, 0.0, 0.0, 0.0)
    if lock_wait is not None:  # waiting for the interpreter: its wait only, its time is in the stages'
        lock = _wait(lock_wait[0], rate, lock_wait[1])
        p50, mean_total = p50 + lock[0], mean_total + lock[1]
        spread, spread99 = (lock[2] - lock[1]) ** 2, (lock[3] - lock[1]) ** 2
    stage_p95 = {}
    for p in placements:
        share = p.calls / visits[p.engine] if visits[p.engine] else 0.0
        median_wait, mean_wait, p95_wait, p99_wait = (w * share for w in waits[p.engine])
        # A batch fills from this stage's own executions: calls x rate of them per second.
        stage_rate = rate * p.calls
        window_mean = min(p.window_ms, 1000.0 * (p.batch - 1) / stage_rate) / 2 if p.batch > 1 else 0.0
        windows = p.calls * window_mean
        p50 += p.calls * p.p50_ms + windows + median_wait
        mean_stage = p.calls * p.load_ms + windows + mean_wait
        mean_total += mean_stage
        stage_p95[p.stage] = p.calls * p.p95_ms + p.calls * p.window_ms + p95_wait
        spread += (stage_p95[p.stage] - mean_stage) ** 2
        spread99 += (p.calls * (p.p99_ms or p.p95_ms) + p.calls * p.window_ms + p99_wait - mean_stage) ** 2
    p95 = max(mean_total + math.sqrt(spread), p50)
    p99 = max(mean_total + math.sqrt(spread99), p95)
    energy = power / rate if power is not None and rate > 0 else None
    return Estimate(rate, p50, p95, max_rps, power, energy, util, stage_p95, bottleneck, p99_ms=p99, offered=offered,
                    interpreter_wait_ms=(lock[0], lock[2], lock[3]))


def _wait(servers: int, rate: float, work_s: float) -> tuple[float, float, float, float]:
    """Median, mean, p95 and p99 queueing delay (ms) on one engine: P(wait > t) = C exp(-drain t)."""
    load = rate * work_s
    if load <= 0:
        return 0.0, 0.0, 0.0, 0.0
    c = erlang_c(servers, load)
    drain = (servers - load) / work_s  # per second
    quantile = lambda q: math.log(c / (1 - q)) / drain if c > 1 - q else 0.0  # noqa: E731
    return 1000.0 * quantile(0.5), 1000.0 * c / drain, 1000.0 * quantile(0.95), 1000.0 * quantile(0.99)


def _power(engines: dict[str, EngineCapacity], util: dict[str, float]) -> float | None:
    total = 0.0
    for name, engine in engines.items():
        if engine.power_w is None:
            return None
        busy = util.get(name, 0.0)
        total += engine.power_w * (IDLE_POWER_SHARE + (1 - IDLE_POWER_SHARE) * busy)
    return total
