"""The planner's simulations: every option replayed through ``loadprobe.simulate``, and a small tuning search.

Usage (``planner.recommend`` does this)::

    check = OptionCheck("svc", targets, option, profiles, calls, delay_ms=0.2)
    est = check.estimate(rate=300)                   # an Estimate whose figures are simulated
    trials, best, runs = tune(check)                 # what it tried, the settings it keeps, their runs

How an option is simulated, so that the table compares like with like:

- arrivals: ``SIM_REQUESTS`` Poisson arrivals at the rate (seed 0, the same for every option);
- service times: each decision's estimate (the stage's recorded distribution at the estimate's
  mean, per execution of a full batch: ``estimate.distribution``), a smaller batch scaled by the
  stage's batch->latency fit -- the same distribution pipeline.yaml keeps for ``loadprobe simulate``
  and ``loadprobe verify``; a stage run ``n = calls``
  times per request (decode, once per token) takes ``n x mean + sqrt(n) x (draw - mean)``: the
  sum of ``n`` independent executions has that mean and variance, without drawing ``n`` times;
- slots: an engine's servers (devices, or cores), not its ``max_concurrency``: a slot beyond
  the hardware shares it rather than adding to it, which a fixed service time cannot show;
- time spent outside every stage (the request spans' own time: HTTP, framework) is the host's work,
  which the file keeps as ``host:`` and the simulator runs as a first stage on the host CPU engine
  (``simulator.servicetimes.with_host``), so it takes cores as it did when recorded; the time
  outside the server (a joined load client's) and a calibrated hand-off delay are added to each
  latency;
- power and capacity stay those of the analytic model, from the simulated utilisation.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, replace

from ..estimate.queueing import Estimate
from .targets import Targets

SIM_REQUESTS = 3000
"""Arrivals per simulation: p95 within a few percent at this count, and fast enough to run a dozen."""
FAILED_SHARE_OK = 0.01
"""A plan that rejects or times out more than this share of requests does not meet its targets."""
WINDOW_FACTORS = (0.5, 1.0, 2.0)
FAILOVER_RATIOS = (None, 0.1, 0.3)  # None: each stage's cap as planned


@dataclass
class OptionCheck:
    """One option as a pipeline, ready to simulate at any rate."""

    service: str
    targets: Targets  # the sizing rate and latency targets: the pipeline's slo, what tune judges by
    option: object
    profiles: dict  # stage name -> StageProfile
    calls: dict  # stage name -> executions per request
    delay_ms: float = 0.0  # added to every latency: time outside the server, the runtime's hand-off (context.delay_ms)

    @functools.cached_property
    def _pipeline(self):
        """The option's pipeline (built and validated once), its engines' slots set to their servers.

        Its stages carry their recorded names again: the planner knows stages by those (profiles,
        samplers, the estimate's per-stage figures), the file by plan names (pipeline.names)."""
        from .files import to_pipeline

        config = to_pipeline(self.option, service=self.service, targets=self.targets)
        engines = {name: replace(e, max_concurrency=max(1, int(self.option.engines[name]["servers"])))
                   for name, e in config.engines.items()}
        stages = tuple(replace(s, name=s.recorded_name, recorded=None) for s in config.stages)
        return replace(config, engines=engines, stages=stages)

    def config(self, *, window_factor: float = 1.0, max_ratio: float | None = None):
        config = self._pipeline
        if window_factor == 1.0 and max_ratio is None:
            return config
        stages = []
        for s in config.stages:
            if s.batch is not None and window_factor != 1.0:
                s = replace(s, batch=replace(s.batch, max_wait_ms=round(s.batch.max_wait_ms * window_factor, 3)))
            if s.fallback is not None and max_ratio is not None:
                s = replace(s, fallback=replace(s.fallback, max_ratio=max_ratio))
            stages.append(s)
        return replace(config, stages=tuple(stages))

    @functools.cached_property
    def _samplers(self) -> dict:
        out = {}
        for d in self.option.decisions:
            profile, calls = self.profiles[d.stage], self.calls.get(d.stage, 1.0)
            out[(d.stage, d.engine)] = _sampler(d.service.distribution, d.batch, profile, calls)
            if d.fallback:  # its service time there is one item's: a batch of them takes d.batch times it
                there = d.fallback["service"].distribution.scaled(d.batch)
                out[(d.stage, d.fallback["engine"])] = _sampler(there, d.batch, profile, calls)
        host = self.option.host
        if host is not None:
            from ..simulator import empirical
            from ..simulator.servicetimes import HOST_STAGE

            engine, work = host
            out[(HOST_STAGE, engine)] = empirical(work.distribution)
        return out

    def samplers(self) -> dict:
        """Each (stage, engine)'s service-time sampler; they draw only from the rng they are
        handed, so one set serves every simulation of the option."""
        return self._samplers

    def run(self, rate: float, config=None):
        from ..load.schedules import poisson
        from ..simulator import simulate

        arrivals = poisson(rate, requests=SIM_REQUESTS, seed=0)
        return simulate(config or self.config(), arrivals, self.samplers(), seed=0)

    def estimate(self, analytic: Estimate, rate: float, config=None, result=None) -> Estimate:
        """``analytic`` with its latency figures, utilisation and stage p95s replaced by a simulation's."""
        return as_estimate(analytic, result or self.run(rate, config), self.delay_ms)


def as_estimate(analytic: Estimate, result, delay_ms: float) -> Estimate:
    """``analytic`` with a simulation's latency: the simulator runs the engines; the fixed delay and the wait
    for a Python service's interpreter (a queue the simulator does not run) are added from ``analytic``."""
    lat = result.latency_ms
    failed = (result.outcomes["rejected"] + result.outcomes["timeout"] + result.outcomes["error"]) / result.requests
    shift = lambda v, wait: None if v is None else v + delay_ms + wait  # noqa: E731
    lock = analytic.interpreter_wait_ms
    return replace(analytic, p50_ms=shift(lat["p50"], lock[0]), p95_ms=shift(lat["p95"], lock[1]),
                   p99_ms=shift(lat["p99"], lock[2]),
                   utilisation={n: e["utilisation"] for n, e in result.engines.items()},
                   stage_p95_ms={n: s["p95"] for n, s in result.stages.items() if s["p95"] is not None},
                   stage_p99_ms={n: s["p99"] for n, s in result.stages.items() if s["p99"] is not None},
                   failed_share=failed,
                   method=f"discrete-event simulation of {result.requests:,} Poisson arrivals "
                          f"at {analytic.rate_rps:.3g} req/s")


def tune(check: OptionCheck) -> tuple[list[dict], dict, tuple]:
    """Batch windows x failover caps, each simulated at the sizing rate and at 1.5x; the best that meets the
    check's targets.

    Best: meets the latency targets (``Targets.latency_misses``) with at most ``FAILED_SHARE_OK`` failed
    at the rate, then the fewest failed at 1.5x, then the lowest p95 at 1.5x, then the planned
    settings. Returns every trial, the winning settings and the winner's two simulations (at the
    rate, at 1.5x). The planned settings are always among the trials.
    """
    targets = check.targets
    batched = any(d.batch > 1 for d in check.option.decisions)
    fallbacks = any(d.fallback for d in check.option.decisions)
    windows = WINDOW_FACTORS if batched else (1.0,)
    ratios = FAILOVER_RATIOS if fallbacks else (None,)
    trials, runs = [], []
    for window, ratio in itertools.product(windows, ratios):
        config = check.config(window_factor=window, max_ratio=ratio)
        at, over = check.run(targets.rate_rps, config), check.run(targets.stress_rps, config)
        failed = _failed(at)
        seen = {q: _plus(at.latency_ms[q], check.delay_ms) for q in ("p50", "p95", "p99")}
        meets = failed <= FAILED_SHARE_OK and seen["p95"] is not None and not targets.latency_misses(**seen)
        trials.append({"window_factor": window, "failover_max_ratio": ratio, "meets_targets": meets,
                       "p95_ms": _plus(at.latency_ms["p95"], check.delay_ms), "failed_share": failed,
                       "stress_p95_ms": _plus(over.latency_ms["p95"], check.delay_ms),
                       "stress_failed_share": _failed(over)})
        runs.append((at, over))
    key = lambda t: (not t["meets_targets"], round(t["stress_failed_share"], 3),  # noqa: E731
                     t["stress_p95_ms"] if t["stress_p95_ms"] is not None else math.inf,
                     abs(math.log(t["window_factor"])), t["failover_max_ratio"] is not None)
    best = min(range(len(trials)), key=lambda i: key(trials[i]))
    return trials, trials[best], runs[best]


def _failed(result) -> float:
    o = result.outcomes
    return (o["rejected"] + o["timeout"] + o["error"]) / result.requests if result.requests else 0.0


def _plus(value, extra: float):
    return None if value is None else value + extra


def _sampler(distribution, batch: int, profile, calls: float):
    """Seconds for ``k`` requests' executions: the distribution at a full batch, scaled by the fit, summed over calls."""
    from ..simulator import empirical

    base = empirical(distribution)
    mean_s = distribution.mean_ms / 1000.0
    full = profile.measured_ms(batch) if profile is not None else 1.0
    factors = {k: (profile.measured_ms(k) / full if profile is not None and full > 0 else k / batch)
               for k in range(1, batch + 1)}
    if calls <= 1.0:
        return lambda k, rng: base(k, rng) * factors.get(k, 1.0)
    spread = math.sqrt(calls)
    return lambda k, rng: max(0.0, calls * mean_s + spread * (base(k, rng) - mean_s)) * factors.get(k, 1.0)
