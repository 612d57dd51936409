"""``simulate()`` and its ``SimulationResult``: what a pipeline.yaml does with a given arrival schedule.

Usage::

    from loadprobe import load, pipeline
    from loadprobe.simulate import simulate

    config = pipeline.load("pipeline.yaml")
    result = simulate(config, load.poisson(200, duration=60, seed=1), seed=1)
    result.outcomes, result.latency_ms["p95"], result.stages["backbone"]["failover_share"]
    print(result.render())
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..histogram import Histogram
from ..pipeline import PipelineConfig
from .events import Simulation
from .servicetimes import Overrides, from_config

__all__ = ["SimulationResult", "simulate"]


@dataclass
class SimulationResult:
    """Counts and latencies of one simulated run; times in milliseconds.

    ``latency_ms`` and each stage's ``p50``/``p95``/``p99``/``mean`` are over the requests that
    completed (end to end, and the time from reaching a stage to leaving it, retries included).
    A stage's ``failover_share`` is moved attempts over the stage's attempts; utilisation is busy
    slot-time over ``max_concurrency`` x the run's length (first arrival to last event).
    """

    requests: int
    outcomes: dict[str, int]  # ok, rejected, timeout
    latency_ms: dict[str, float | None]
    stages: dict[str, dict[str, Any]]
    engines: dict[str, dict[str, Any]]
    rejects: dict[str, int]  # reason -> requests
    timeouts: int  # attempts that timed out, retried or not
    throughput_rps: float
    duration_s: float
    seed: int = 0
    method: str = field(default="discrete-event simulation")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        """The result as a terminal table."""
        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f}"

        o, lat = self.outcomes, self.latency_ms
        lines = [f"{self.requests} requests in {self.duration_s:.1f} s: {o['ok']} ok, {o['rejected']} rejected, "
                 f"{o['timeout']} timed out; {self.throughput_rps:.1f} rps completed",
                 f"latency ms: p50 {ms(lat['p50'])}  p95 {ms(lat['p95'])}  p99 {ms(lat['p99'])}",
                 "",
                 f"{'stage':<20} {'p50':>8} {'p95':>8} {'p99':>8} {'timeouts':>9} {'retries':>8} {'failover':>9}"]
        for name, s in self.stages.items():
            lines.append(f"{name:<20} {ms(s['p50']):>8} {ms(s['p95']):>8} {ms(s['p99']):>8} {s['timeouts']:>9} "
                         f"{s['retries']:>8} {s['failover_share']:>8.1%}")
        lines += ["", f"{'engine':<20} {'utilisation':>11} {'executions':>11} {'mean batch':>11}"]
        for name, e in self.engines.items():
            batch = "-" if e["mean_batch"] is None else f"{e['mean_batch']:.2f}"
            lines.append(f"{name:<20} {e['utilisation']:>10.1%} {e['executions']:>11} {batch:>11}")
        if self.rejects:
            lines += ["", "rejects: " + ", ".join(f"{k} {v}" for k, v in sorted(self.rejects.items()))]
        return "\n".join(lines)


def simulate(config: PipelineConfig, arrivals_s: Sequence[float], service_times: Overrides | None = None, *,
             seed: int = 0, priorities: Sequence[int] | None = None, window_s: float = 10.0) -> SimulationResult:
    """Run the requests arriving at ``arrivals_s`` (seconds) through ``config``; same inputs, same result.

    ``service_times`` overrides the stages' ``service_time_ms`` (see ``servicetimes.from_config``).
    ``priorities`` (one per arrival, higher first) matter with ``routing.shed.by: priority``.
    ``window_s`` is the window of the failover caps and the retry budget, as in ``Router``.
    """
    times = np.asarray(arrivals_s, dtype=float)
    order = np.argsort(times, kind="stable")
    if priorities is not None:
        if len(priorities) != len(times):
            raise ValueError(f"{len(priorities)} priorities for {len(times)} arrivals; give one per arrival")
        priorities = np.asarray(priorities)[order].tolist()
    times = times[order]
    sim = Simulation(config, times.tolist(), priorities, from_config(config, service_times), seed=seed,
                     window_s=window_s).run()
    start = float(times[0]) if len(times) else 0.0
    duration = max(sim.end - start, 0.0)
    stages = {}
    for s in sim.stages:
        attempts = s.entered + s.retries
        stages[s.name] = {**_summary(s.latencies), "requests": s.entered, "timeouts": s.timeouts,
                          "retries": s.retries, "failovers": s.failovers,
                          "failover_share": s.failovers / attempts if attempts else 0.0,
                          "breaker_opened": s.breaker.opened_count if s.breaker else 0}
    engines = {}
    for name, e in sim.engines.items():
        engines[name] = {"utilisation": e.busy_s / (e.max_concurrency * duration) if duration else 0.0,
                         "executions": e.executions,
                         "mean_batch": e.items / e.executions if e.executions else None}
    return SimulationResult(
        requests=len(times), outcomes=dict(sim.outcomes), latency_ms=_summary(sim.latencies), stages=stages,
        engines=engines, rejects=dict(sim.rejects), timeouts=sum(s.timeouts for s in sim.stages),
        throughput_rps=sim.outcomes["ok"] / duration if duration else 0.0, duration_s=duration, seed=seed)


def _summary(latencies_s: list[float]) -> dict[str, float | None]:
    """p50, p95, p99 (to HdrHistogram's 0.1%, as loadprobe reports them everywhere) and the exact mean, ms."""
    if not latencies_s:
        return {"p50": None, "p95": None, "p99": None, "mean": None}
    values = np.asarray(latencies_s)
    hist = Histogram()
    hist.record(np.round(values * 1e9).astype(np.int64))
    found = hist.percentiles((50, 95, 99))
    return {"p50": found[50] / 1e6, "p95": found[95] / 1e6, "p99": found[99] / 1e6,
            "mean": float(values.mean()) * 1000}
