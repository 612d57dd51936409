"""Plans side by side: read a pipeline.yaml or a plans.json, and hold and print their simulations.

Usage::

    plans = read_plans("plan/plans.json")          # [("hybrid", PipelineConfig), ("all-gpu", ...), ...]
    comparison = simulate_plans(plans, offsets, source="plan/plans.json", arrivals="poisson 200/s",
                                data="data/")      # recorded service times, errors, time outside stages
    comparison = Comparison(source="plan/plans.json", arrivals="poisson 200/s", requests=12000, seed=1,
                            service_times="...", results={name: simulate(config, offsets) for name, config in plans})
    print(comparison.render())
    json.dumps(comparison.to_dict())               # simulation.json
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import LoadprobeError
from ..formats import SIMULATION
from ..pipeline.config import PipelineConfig
from ..pipeline.plans import read_plans_json
from .._table import text_table
from .result import SimulationResult

__all__ = ["Comparison", "read_plans", "simulate_plans"]

VERSION = SIMULATION.value


def read_plans(path: str | Path) -> list[tuple[str, PipelineConfig]]:
    """``[(name, config)]``: one plan for a pipeline.yaml, every feasible option of a plans.json."""
    from ..pipeline import files as pipeline

    path = Path(path)
    if path.suffix != ".json":
        config = pipeline.load(path)
        return [(config.service if path.name == "pipeline.yaml" else path.stem, config)]
    document = read_plans_json(path)
    plans = []
    for option in [document["recommended"], *document.get("alternatives", [])]:
        if not isinstance(option, dict) or not option.get("pipeline"):
            continue  # an infeasible option has nothing to run
        name = str(option.get("name", f"plan {len(plans) + 1}"))
        plans.append((name, pipeline.loads(json.dumps(option["pipeline"]), source=f"{path} option {name!r}")))
    if not plans:
        raise LoadprobeError(f"{path}: no option carries a pipeline (written by a loadprobe older than 0.9?); "
                             "run loadprobe recommend again")
    return plans


def planned_rent(path: str | Path) -> bool:
    """Whether a plans.json's plans were priced rented (its ``constraints.rent``), so that their simulation is
    priced the same way; a pipeline.yaml says nothing of it: bought."""
    if Path(path).suffix != ".json":
        return False
    return bool((read_plans_json(Path(path)).get("constraints") or {}).get("rent"))


def simulate_plans(plans: list, offsets, *, source: str, arrivals: str, seed: int = 0, data=None,
                   overrides: list = (), errors: bool = True, outside: bool = True, portrait=None,
                   **options) -> Comparison:
    """Every ``(name, config)`` of ``plans`` under the same arrival ``offsets`` (seconds).

    ``data``: recorded spans to draw service times, error rates and time outside the stages from
    (default: each stage's ``service_time_ms``); ``overrides``: ``(stage, engine or None, sampler)``,
    an engine's applying only to plans that run the stage there; ``portrait`` (or a function
    returning it) for the roofline scaling; further ``options`` go to ``simulate``.
    """
    from .recorded import from_recording, outside_stages, read_self_times
    from .result import simulate

    recorded = read_self_times(data) if data is not None else None
    error_rates = recorded.error_rates if recorded and errors else None
    outside_sampler = outside_stages(recorded) if recorded and outside else None
    results = {}
    for name, config in plans:
        given = _overrides_for(config, overrides)
        try:
            times = from_recording(config, data, given, portrait=portrait, recorded=recorded) if recorded \
                else given or None
            rates = {s.name: error_rates[s.recorded_name] for s in config.stages if s.recorded_name in error_rates} \
                if error_rates is not None else None  # recorded by the recording's names, simulated by the plan's
            results[name] = simulate(config, offsets, times, seed=seed, error_rates=rates,
                                     outside=outside_sampler, **options)
        except LoadprobeError as exc:  # what a plan lacks (a service time, say) is said of its file
            raise LoadprobeError(f"{source}" + (f", plan {name!r}" if len(plans) > 1 else "") + f": {exc}") from None
    described = (f"recorded in {data}" if recorded else
                 "each stage's service_time_ms (its recorded distribution where the file keeps one, else the "
                 "lognormal through p50 and p95)")
    if overrides:
        described += f"; given for {', '.join(sorted({stage for stage, _, _ in overrides}))}"
    hosted = [name for name, config in plans if config.host is not None]
    if hosted:
        described += "; the service's own work outside the stages from the plan's host: section, on its CPU engine"
    if outside_sampler and len(hosted) < len(plans):
        described += f"; plus {outside_sampler.how}" + (" (plans without a host: section)" if hosted else "")
    return Comparison(source=source, arrivals=arrivals, requests=len(offsets), seed=seed, service_times=described,
                      results=results, interpreter={name: interpreter_bound(config, offsets) for name, config in plans
                                                    if config.interpreter is not None})


def interpreter_bound(config: PipelineConfig, offsets) -> dict:
    """A plan's ``interpreter:`` bound against the schedule's mean rate: a queue the simulator does not run."""
    python = config.interpreter
    span = float(offsets[-1] - offsets[0]) if len(offsets) > 1 else 0.0
    rate = (len(offsets) - 1) / span if span > 0 else None
    share = rate / python.max_rps if rate is not None else None
    note = (f"its interpreter carries at most {python.max_rps:.4g} req/s ({python.processes} worker process"
            f"{'es' if python.processes != 1 else ''} x {python.ms_per_request:.3g} ms of Python per request)")
    if share is not None:
        note += (f"; this schedule's mean {rate:.4g} req/s is {share:.0%} of it"
                 + (": past it, requests would queue for the interpreter, which this simulation of the engines "
                    "does not show; run more worker processes" if share > 1 else ""))
    return {"max_rps": python.max_rps, "mean_rate_rps": rate, "share": share, "note": note}


def _overrides_for(config: PipelineConfig, overrides) -> dict:
    """The overrides that apply to this plan: per stage, or per engine it runs the stage on."""
    out: dict = {}
    for stage, engine, sampler in overrides:
        if engine is None:
            out[stage] = sampler
        elif any(s.name == stage and engine in s.runs_on for s in config.stages):
            out.setdefault(stage, {})[engine] = sampler
    return out


@dataclass
class Comparison:
    """The simulations of one schedule through one or more plans; the first plan is the reference."""

    source: str
    arrivals: str
    requests: int
    seed: int
    service_times: str
    results: dict[str, SimulationResult]
    interpreter: dict = field(default_factory=dict)  # plan -> its interpreter bound (``interpreter_bound``)

    def to_dict(self) -> dict[str, Any]:
        return {"version": VERSION, "source": self.source, "arrivals": self.arrivals, "requests": self.requests,
                "seed": self.seed, "service_times": self.service_times, "method": "discrete-event simulation",
                "plans": {name: r.to_dict() for name, r in self.results.items()},
                **({"interpreter": self.interpreter} if self.interpreter else {})}

    def render(self) -> str:
        """Each plan's own tables when there is one; otherwise one row per plan, then each plan's stages."""
        head = f"{self.requests:,} requests, {self.arrivals}, seed {self.seed}; service times: {self.service_times}"
        bounds = [f"{name}: {bound['note']}" for name, bound in self.interpreter.items()]
        if len(self.results) == 1:
            return "\n".join([head, *bounds, "", next(iter(self.results.values())).render()])
        rows = []
        for name, r in self.results.items():
            done = r.outcomes["ok"]
            rows.append([name, _ms(r.latency_ms["p50"]), _ms(r.latency_ms["p95"]), _ms(r.latency_ms["p99"]),
                         f"{r.throughput_rps:.1f}", _pct(r.outcomes["rejected"] / r.requests if r.requests else 0),
                         _pct(r.outcomes["timeout"] / r.requests if r.requests else 0),
                         _pct(max((s["failover_share"] for s in r.stages.values()), default=0.0)),
                         "-" if r.power.get("mean_w") is None else f"{r.power['mean_w']:.0f}",
                         "-" if r.power.get("energy_per_request_j") is None or not done
                         else f"{r.power['energy_per_request_j']:.3g}",
                         "-" if not r.tco else f"{r.tco['total']:,.0f}" + ("" if r.tco["comparable"] else "+")])
        lines = [head, *bounds, ""]
        lines += text_table(["plan", "p50 ms", "p95 ms", "p99 ms", "done/s", "rejected", "timed out", "failover",
                             "power W", "J/request", "cost"], rows)
        priced = next((r.tco for r in self.results.values() if r.tco), None)
        if priced:
            how = "rented" if priced["mode"] == "rent" else "bought"
            lines.append(f"(cost: {priced['years']:g} years, {how}; + where a price, rate or power is unknown, the "
                         "total is a lower bound)")
        for name, r in self.results.items():
            util = ", ".join(f"{e} {v['utilisation']:.0%}" for e, v in r.engines.items())
            lines.append(f"{name}: utilisation {util}")
        return "\n".join(lines)


def _ms(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def _pct(value: float) -> str:
    return f"{value:.1%}"
