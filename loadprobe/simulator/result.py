"""``simulate()`` and its ``SimulationResult``: what a pipeline.yaml does with a given arrival schedule.

Usage::

    from loadprobe import load, pipeline
    from loadprobe.simulator import simulate

    config = pipeline.load("pipeline.yaml")
    result = simulate(config, load.poisson(200, duration=60, seed=1), seed=1)
    result.outcomes, result.latency_ms["p95"], result.stages["backbone"]["failover_share"]
    print(result.render())
    simulate(config, arrivals, seed=1, loop="compiled")   # the same result from the numba event loop
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from .._errors import LoadprobeError
from .._table import text_table
from ..analysis.histogram import Histogram
from ..pipeline.config import PipelineConfig
from .events import Simulation
from .servicetimes import Overrides, from_config, with_host

__all__ = ["COMPILED_FROM", "LOOPS", "SimulationResult", "compiled_available", "simulate"]

LOOPS = ("auto", "python", "compiled")
COMPILED_FROM = 50_000
"""Arrivals from which ``loop="auto"`` loads the compiled loop for a run, in a process that has not
loaded it yet: loading costs about half a second, what the Python loop takes for some 50,000
arrivals. Once loaded, every run gets it. So a short run, or ``loadprobe recommend``'s series of
3,000-arrival runs (18 of them: the load would cost more than it saves), stays on the Python
loop, which gives the same result (docs/simulate.md)."""


@dataclass
class SimulationResult:
    """Counts and latencies of one simulated run; times in milliseconds.

    ``latency_ms`` and each stage's ``p50``/``p95``/``p99``/``mean`` are over the requests that
    completed (end to end, and the time from reaching a stage to leaving it, retries included).
    A stage's ``failover_share`` is moved attempts over the stage's attempts; utilisation is busy
    slot-time over ``max_concurrency`` x the run's length (first arrival to last event).

    ``power``: each engine draws ``power_w`` x ``count`` (the catalog TDP when the file gives no
    power) times 30% idle + 70% x its utilisation; ``energy_per_request_j`` is that mean power
    x the run's length / completed requests. ``tco`` is ``loadprobe.estimate.tco`` at that mean power with
    the catalog (or given) prices of every engine's device. ``timeline`` holds each engine's
    queue length and busy slots read at 200 evenly spaced instants.
    """

    requests: int
    outcomes: dict[str, int]  # ok, rejected, timeout, error
    latency_ms: dict[str, float | None]
    stages: dict[str, dict[str, Any]]
    engines: dict[str, dict[str, Any]]
    rejects: dict[str, int]  # reason -> requests
    timeouts: int  # attempts that timed out, retried or not
    errors: int  # attempts whose executor raised (error_rates), retried or not
    throughput_rps: float
    duration_s: float
    power: dict[str, Any] = field(default_factory=dict)  # mean_w, energy_per_request_j, per engine, unknown
    tco: dict[str, Any] | None = None
    timeline: dict[str, Any] = field(default_factory=dict)  # t_s, and per engine queue / busy samples
    seed: int = 0
    method: str = field(default="discrete-event simulation")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        """The result as a terminal table."""
        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f}"

        o, lat = self.outcomes, self.latency_ms
        lines = [f"{self.requests:,} requests in {self.duration_s:.1f} s: {o['ok']:,} ok, {o['rejected']:,} rejected, "
                 f"{o['timeout']:,} timed out, {o['error']:,} failed; {self.throughput_rps:,.1f} rps completed",
                 f"latency ms: p50 {ms(lat['p50'])}  p95 {ms(lat['p95'])}  p99 {ms(lat['p99'])}",
                 ""]
        lines += text_table(["stage", "p50 ms", "p95 ms", "p99 ms", "timeouts", "retries", "failover"],
                            [[name, ms(s["p50"]), ms(s["p95"]), ms(s["p99"]), f"{s['timeouts']:,}", f"{s['retries']:,}",
                              f"{s['failover_share']:.1%}"] for name, s in self.stages.items()], numbers_right=True)
        lines.append("")
        lines += text_table(["engine", "utilisation", "executions", "mean batch"],
                            [[name, f"{e['utilisation']:.1%}", f"{e['executions']:,}",
                              "-" if e["mean_batch"] is None else f"{e['mean_batch']:.2f}"]
                             for name, e in self.engines.items()], numbers_right=True)
        if self.rejects:
            lines += ["", "rejects: " + ", ".join(f"{k} {v:,}" for k, v in sorted(self.rejects.items()))]
        p = self.power
        if p.get("mean_w") is not None:
            energy = p["energy_per_request_j"]
            lines += ["", f"power {p['mean_w']:.0f} W mean, " + ("-" if energy is None else f"{energy:.3g}")
                      + " J/request" + (f" (unknown for {', '.join(p['unknown'])})" if p["unknown"] else "")]
        if self.tco:
            lines.append(f"cost of ownership over {self.tco['years']:g} years: {self.tco['total']:,.0f}"
                         + (f" (no price for {', '.join(self.tco['purchase_unknown'])})"
                            if self.tco["purchase_unknown"] else ""))
        return "\n".join(lines)


def on_cores(config: PipelineConfig) -> PipelineConfig:
    """``config`` with each cpu engine's slots no more than its planned cores (``cores`` x ``count``) can keep
    busy: CPU work in slots past the cores shares them and runs no faster in sum, so a plan's 8 slots on 2 cores
    carry what 2 do -- as ``recommend`` sized it. Where its stages also wait (``service_time_ms.cpu_share`` below
    1: an await on a downstream call), a core carries 1 / cpu_share executions at once (their mean, weighted by
    each stage's mean time). Slots stay as they are where no cores are given."""
    engines = {}
    for name, e in config.engines.items():
        if e.kind == "cpu" and e.cores:
            cores = e.cores * e.count
            slots = max(cores, math.ceil(cores / _cpu_share(config, name) - 1e-9))
            if slots < e.max_concurrency:
                # The slots past them wait in the queue: as many requests are admitted as the runtime admits.
                e = replace(e, max_concurrency=slots, max_queue=e.max_queue + e.max_concurrency - slots)
        engines[name] = e
    return replace(config, engines=engines) if engines != dict(config.engines) else config


def _cpu_share(config: PipelineConfig, engine: str) -> float:
    """The share of the time its stages' executions on ``engine`` use a core: their ``cpu_share`` weighted by their
    mean times (1 where a stage gives none)."""
    weights = [((s.service_time_ms.mean or s.service_time_ms.p50 or 0.0) if s.service_time_ms else 0.0,
                s.service_time_ms.cpu_share if s.service_time_ms else 1.0)
               for s in config.stages if s.engine == engine]
    total = sum(w for w, _ in weights)
    return sum(w * share for w, share in weights) / total if total > 0 else 1.0


def simulate(config: PipelineConfig, arrivals_s: Sequence[float], service_times: Overrides | None = None, *,
             seed: int = 0, priorities: Sequence[int] | None = None, window_s: float | None = None, catalog=None,
             price_per_kwh: float = 0.15, years: float = 3.0, prices: Mapping[str, float] | None = None,
             rent: bool = False, hourly_rates: Mapping[str, float] | None = None,
             error_rates: Mapping[str, float] | None = None, executors: str = "async",
             outside=None, loop: str = "auto") -> SimulationResult:
    """Run the requests arriving at ``arrivals_s`` (seconds) through ``config``; same inputs, same result.

    ``service_times`` overrides the stages' ``service_time_ms``: ``{stage: sampler}`` or
    ``{stage: {engine: sampler}}`` (see ``servicetimes.from_config``), or a complete
    ``{(stage, engine): sampler}`` as ``from_recording`` returns.
    ``priorities`` (one per arrival, higher first) matter with ``routing.shed.by: priority``.
    ``window_s`` is the window of the failover caps and the retry budget, as in ``Router``
    (default: the file's ``routing.window_s``, else 10 s).
    ``error_rates`` ({stage: share of executions that raise}; ``read_self_times`` gives the
    recorded ones) and ``executors`` ("async": a timed-out execution is stopped; "sync": it keeps
    its slot until it ends, as threads do) follow the router. ``outside`` samples the time a
    request spends outside every stage (``recorded.outside_stages``), added to its end-to-end
    latency as a delay that holds no engine; without it, a file's ``calibration.handoff_ms`` (per
    stage) is that delay. A file with a ``host:`` section runs that work as a first stage on its
    CPU engine (``servicetimes.with_host``) instead, and ``outside`` is not added again. ``catalog``
    (default: the built-in one), ``prices`` ({device: price}), ``price_per_kwh`` and ``years`` feed the
    power and cost figures; ``rent`` prices the plan by hourly rates (``hourly_rates``, else the catalog's).

    ``loop`` picks the event loop, which never changes the result: "python" (events.py, the
    reference), "compiled" (compiled/, numba; ``pip install 'loadprobe[fast]'``), or "auto":
    compiled when numba imports and the run has ``COMPILED_FROM`` arrivals or more, or the compiled
    loop is loaded in this process already; else Python.
    """
    if executors not in ("async", "sync"):
        raise LoadprobeError(f"executors must be 'async' or 'sync', not {executors!r}")
    if loop not in LOOPS:
        raise LoadprobeError(f"loop must be one of {', '.join(map(repr, LOOPS))}, not {loop!r}")
    stage_names = {s.name for s in config.stages}
    for name, rate in (error_rates or {}).items():
        if name in stage_names and not 0.0 <= rate <= 1.0:
            raise LoadprobeError(f"error rate of stage {name!r} is {rate!r}; give a share between 0 and 1")
    if catalog is None:
        from ..catalog import load_catalog

        catalog = load_catalog()
    times = np.asarray(arrivals_s, dtype=float)
    order = np.argsort(times, kind="stable")
    if priorities is not None:
        if len(priorities) != len(times):
            raise ValueError(f"{len(priorities)} priorities for {len(times)} arrivals; give one per arrival")
        priorities = np.asarray(priorities)[order].tolist()
    times = times[order]
    if config.host is not None:  # the host stage is the time outside the stages
        outside = None
    if outside is None and config.calibration is not None and config.calibration.handoff_ms > 0:
        # the runtime's own delay, measured by loadprobe verify --calibrate: once per stage a request passes
        from .servicetimes import constant

        outside = constant(config.calibration.handoff_ms * len(config.stages))
    config = on_cores(with_host(config))
    options = dict(seed=seed, window_s=config.window_s if window_s is None else window_s, error_rates=error_rates,
                   executors=executors, outside=outside)
    samplers = _samplers(config, service_times)
    compiled = _compiled_loop(loop, len(times))
    if compiled is not None:
        sim = compiled.run(config, times, priorities, samplers, **options)
    else:
        sim = Simulation(config, times.tolist(), priorities, samplers, **options).run()
    start = float(times[0]) if len(times) else 0.0
    duration = max(sim.end - start, 0.0)
    stages = {}
    for s in sim.stages:
        attempts = s.entered + s.retries
        stages[s.name] = {**_summary(s.latencies), "requests": s.entered, "timeouts": s.timeouts, "errors": s.errors,
                          "retries": s.retries, "failovers": s.failovers,
                          "failover_share": s.failovers / attempts if attempts else 0.0,
                          "breaker_opened": s.breaker_opened}
    busy_span = max(sim.end, sim.last_done) - start  # executions of sync executors may outlast the requests
    engines = {}
    for name, e in sim.engines.items():
        queue, busy = sim.samples[name]
        engines[name] = {"utilisation": e.busy_s / (e.max_concurrency * busy_span) if busy_span else 0.0,
                         "executions": e.executions,
                         "mean_batch": e.items / e.executions if e.executions else None,
                         "queue_mean": float(np.mean(queue)) if queue else 0.0,
                         "queue_max": max(queue, default=0)}
    timeline = {"t_s": [round(t - start, 6) for t in sim.sampled_at],
                "engines": {name: {"queue": q, "busy": b} for name, (q, b) in sim.samples.items()}}
    power = _power(config, engines, duration, sim.outcomes["ok"], catalog)
    return SimulationResult(
        requests=len(times), outcomes=dict(sim.outcomes), latency_ms=_summary(sim.latencies), stages=stages,
        engines=engines, rejects=dict(sim.rejects), timeouts=sum(s.timeouts for s in sim.stages), errors=sum(s.errors for s in sim.stages),
        throughput_rps=sim.outcomes["ok"] / duration if duration else 0.0, duration_s=duration,
        power=power, tco=_cost(config, power, catalog, dict(rent=rent, prices=prices or {}, hourly_rates=hourly_rates or {},
                                                            years=years, price_per_kwh=price_per_kwh)),
        timeline=timeline,
        seed=seed)


def compiled_available() -> bool:
    """Whether the compiled event loop can run here (numba installed); imports it if so."""
    return _import_compiled() is not None


_COMPILED: dict[str, Any] = {}  # "module" once compiled/ was imported (None: it cannot be), "error"


def _import_compiled():
    from .._imports import load_once

    # Any failure -- numba missing, or one that cannot compile here -- leaves the work to Python.
    return load_once(_COMPILED, f"{__package__}.compiled")


def _compiled_loop(loop: str, arrivals: int):
    """The compiled loop's package for this run, or None for events.py (see ``simulate``'s ``loop``)."""
    if loop == "python":
        return None
    if loop == "compiled":
        module = _import_compiled()
        if module is None:
            raise LoadprobeError("loop='compiled' needs numba, which does not import here "
                                 f"({_COMPILED['error']}): pip install 'loadprobe[fast]', or use loop='python'")
        return module
    if "module" not in _COMPILED and arrivals < COMPILED_FROM:
        return None  # not loaded yet, and not worth loading for this run
    return _import_compiled()


def _power(config: PipelineConfig, engines: dict, duration: float, ok: int, catalog) -> dict[str, Any]:
    """Mean power per engine at its simulated utilisation, and the energy of one completed request."""
    from ..estimate.queueing import IDLE_POWER_SHARE

    per_engine, unknown = {}, []
    for name, spec in config.engines.items():
        unit = spec.power_w
        if unit is None:
            device = catalog.find(spec.device)
            unit = device.tdp_w if device is not None else None
        if unit is None:
            unknown.append(name)
            continue
        util = engines[name]["utilisation"]
        per_engine[name] = unit * spec.count * (IDLE_POWER_SHARE + (1 - IDLE_POWER_SHARE) * min(1.0, util))
        engines[name]["power_w"] = per_engine[name]
    mean = sum(per_engine.values()) if per_engine else None
    energy = mean * duration / ok if mean is not None and ok else None
    return {"mean_w": mean, "energy_per_request_j": energy, "engines_w": per_engine, "unknown": unknown}


def _cost(config: PipelineConfig, power: dict, catalog, pricing: dict) -> dict[str, Any] | None:
    """The plan's cost by the planner's own rule (``estimate.tco.price_line_up``), bought at the simulated mean
    power or rented; ``pricing``: rent, prices, hourly_rates, years, price_per_kwh."""
    from ..estimate.tco import price_line_up

    if power["mean_w"] is None and not pricing["rent"]:
        return None
    return price_line_up([(name, e.device, e.kind, e.count) for name, e in config.engines.items()], catalog=catalog,
                         power_w=power["mean_w"], power_unknown=power["unknown"], **pricing)


def _samplers(config: PipelineConfig, given) -> dict:
    pairs = [k for k in given or () if isinstance(k, tuple)]
    if not pairs:
        return from_config(config, given)
    if len(pairs) != len(given):
        raise LoadprobeError("service_times mixes (stage, engine) keys with stage names; give one form: "
                             "{(stage, engine): sampler} or {stage: sampler or {engine: sampler}}")
    runs_on = {(s.name, e) for s in config.stages for e in s.runs_on}
    stray = sorted(f"{s}@{e}" for s, e in pairs if (s, e) not in runs_on)
    if stray:
        raise LoadprobeError(f"service times given for {', '.join(stray)}, which the plan never runs; it runs "
                             f"{', '.join(f'{s}@{e}' for s, e in sorted(runs_on))}")
    by_pair = dict(given)
    return from_config(config, measured=lambda stage, engine: by_pair.get((stage.name, engine)))


def _summary(latencies_s: list[float]) -> dict[str, float | None]:
    """p50, p95, p99 (to HdrHistogram's 0.1%, as loadprobe reports them everywhere) and the exact mean, ms."""
    if not len(latencies_s):
        return {"p50": None, "p95": None, "p99": None, "mean": None}
    values = np.asarray(latencies_s)
    hist = Histogram()
    hist.record(np.round(values * 1e9).astype(np.int64))
    found = hist.percentiles((50, 95, 99))
    return {"p50": found[50] / 1e6, "p95": found[95] / 1e6, "p99": found[99] / 1e6,
            "mean": float(values.mean()) * 1000}
