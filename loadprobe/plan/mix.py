"""The cheapest mix of device types, solved exactly: which engine runs each stage and how many units of each
accelerator to buy or rent, as one integer program (HiGHS, through ``scipy.optimize.milp``).

Usage (``search`` and ``planner`` do this)::

    mix = cheapest_mix(choices, ctx)                      # None: some device has no price or rate
    mix.picks, mix.units, mix.cost, mix.solve_s           # one candidate per stage, units per accelerator engine
    cheapest_mix(choices, ctx, devices={"nvidia-l4"})     # the best line-up of the host and one device type
    cheapest_mix(choices, ctx, cuts=[mix.key])            # the next best, that assignment excluded
    compare_single(choices, ctx)                          # the mix against every single-type line-up: the saving

The program, on the capacity model sizing uses: a binary ``x[s, c]`` for each stage ``s`` and each of its
admissible candidates ``c``, an integer ``n[e]`` for each accelerator engine ``e`` (up to its bound). Each
stage takes one candidate; at ``STRESS`` x the rate each accelerator's units carry its stages' busy time at
most ``lineup.SIZING_UTIL`` busy per unit, and a used engine has a unit; the host's cores carry what stays
on them with the service's own work; the provisioned power fits the budget. The cost is each unit's price
(bought) or its rate over the years (rented) plus, bought, each stage's electricity at its energy per item.
The optimum is exact for that model; latency is judged afterwards by the planner (``lineup.size``), which
may add units, and an assignment that still misses is cut off and the program solved again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .context import PlanContext, calls_per_request
from .lineup import SIZING_UTIL
from ..estimate.tco import HOURS_PER_YEAR, unit_figure

__all__ = ["Mix", "cheapest_mix", "compare_single", "unit_costs"]


@dataclass
class Mix:
    picks: list  # the chosen candidate of each stage, in stage order
    units: dict  # accelerator engine -> units
    cost: float  # the program's objective: units' price or rent, plus (bought) the stages' electricity
    solve_s: float  # wall time of the solver, every call of this search together

    @property
    def key(self) -> tuple:
        """The assignment, to cut off when the planner's judge finds it misses a target."""
        return tuple(id(p) for p in self.picks)


def unit_costs(ctx: PlanContext, engines) -> tuple[dict, list]:
    """Each accelerator engine's cost per unit over the plan's years (its purchase, or its rate x hours x years,
    as the plan is priced) and the devices with no figure for it."""
    pricing = ctx.constraints.pricing
    costs, unknown = {}, []
    for spec in engines:
        device = ctx.device(spec)
        amount, _ = unit_figure(device.id if device is not None else None, catalog=ctx.catalog,
                                rent=bool(pricing.rent), prices=pricing.prices, hourly_rates=pricing.hourly_rates)
        if amount is None:
            unknown.append(device.id if device is not None else spec.name)
        else:  # over the plan's years: a rate runs every hour of them
            costs[spec.name] = amount * HOURS_PER_YEAR * pricing.years if pricing.rent else amount
    return costs, unknown


def cheapest_mix(choices, ctx: PlanContext, *, devices: set | None = None, cuts=()) -> Mix | None:
    """The cheapest assignment and units on the capacity model, or None: a device of the line-up has no price
    (rate), or no assignment fits the model. ``choices``: each stage's ``(admissible, excluded)``;
    ``devices``: keep only accelerators of these catalog ids (the host CPU always stays); ``cuts``: ``Mix.key``
    assignments excluded."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    keep = [[c for c in admissible if c["spec"].kind == "cpu" or devices is None or _device_id(ctx, c) in devices]
            for admissible, _ in choices]
    if any(not stage for stage in keep):
        return None
    accelerators = list({c["spec"].name: c["spec"] for stage in keep for c in stage
                         if c["spec"].kind != "cpu"}.values())
    costs, unknown = unit_costs(ctx, accelerators)
    if unknown:
        return None
    flat = [(s, c) for s, stage in enumerate(keep) for c in stage]
    nx, ne = len(flat), len(accelerators)
    index = {spec.name: nx + i for i, spec in enumerate(accelerators)}
    calls = calls_per_request(ctx)
    stress, pricing = ctx.targets.stress_rps, ctx.constraints.pricing
    busy = np.array([stress * calls.get(ctx.stages[s].name, 1.0) * c["per_item_s"] for s, c in flat])

    objective = np.zeros(nx + ne)
    for name, i in index.items():
        objective[i] = costs[name]
    if not pricing.rent:  # bought: each stage's electricity where it runs, at the sizing rate
        kwh = HOURS_PER_YEAR * pricing.years / 3.6e6 * pricing.price_per_kwh  # joules per second -> money
        for j, (s, c) in enumerate(flat):
            if c.get("energy") is not None:
                objective[j] += ctx.rate * calls.get(ctx.stages[s].name, 1.0) * c["energy"] * kwh

    rows, lower, upper = [], [], []

    def row(coefficients: dict, lo: float, hi: float) -> None:
        line = np.zeros(nx + ne)
        for k, v in coefficients.items():
            line[k] += v
        rows.append(line)
        lower.append(lo)
        upper.append(hi)

    for s in range(len(keep)):  # one engine per stage
        row({j: 1.0 for j, (t, _) in enumerate(flat) if t == s}, 1.0, 1.0)
    for spec in accelerators:  # units carry their stages at STRESS x the rate; a used engine has a unit
        mine = [j for j, (_, c) in enumerate(flat) if c["spec"].name == spec.name]
        row({**{j: busy[j] for j in mine}, index[spec.name]: -SIZING_UTIL}, -np.inf, 0.0)
        for j in mine:
            row({j: 1.0, index[spec.name]: -1.0}, -np.inf, 0.0)
    host = next((c["spec"] for stage in keep for c in stage if c["spec"].kind == "cpu"), None)
    if host is not None:  # the host's cores carry the stages kept on them and the service's own work
        own = stress * ctx.host.distribution.mean_ms / 1000.0 if ctx.host is not None else 0.0
        cores = ctx.cpu_cores[0] * host.count
        row({j: busy[j] for j, (_, c) in enumerate(flat) if c["spec"].kind == "cpu"}, -np.inf, max(0.0, cores - own))
    budget = ctx.targets.power_budget_w
    if budget:
        powers = {spec.name: getattr(ctx.device(spec), "max_power_w", None) for spec in accelerators}
        host_w = ctx.host_power.watts if ctx.host_power is not None and ctx.host_power.watts else 0.0
        hosts = host.count if host is not None else 1
        for name, watts in powers.items():
            if watts is None:  # unknown power cannot be held against a budget: the engine stays unused
                row({index[name]: 1.0}, 0.0, 0.0)
        row({index[n]: w for n, w in powers.items() if w is not None}, -np.inf, budget - host_w * hosts)
    for key in cuts:  # an assignment the judge found missing a target
        chosen = [j for j, (_, c) in enumerate(flat) if id(c) in set(key)]
        if len(chosen) == len(keep):
            row({j: 1.0 for j in chosen}, -np.inf, len(chosen) - 1)

    low = np.zeros(nx + ne)
    high = np.concatenate([np.ones(nx), [spec.limit for spec in accelerators]])
    started = time.perf_counter()
    result = milp(objective, integrality=np.ones(nx + ne), bounds=Bounds(low, high),
                  constraints=LinearConstraint(np.array(rows), lower, upper) if rows else None)
    solve_s = time.perf_counter() - started
    if not result.success or result.x is None:
        return None
    picks = [None] * len(keep)
    for j, (s, c) in enumerate(flat):
        if result.x[j] > 0.5:
            picks[s] = c
    units = {spec.name: int(round(result.x[index[spec.name]])) for spec in accelerators
             if round(result.x[index[spec.name]]) > 0}
    return Mix(picks, units, float(result.fun), solve_s)


def _device_id(ctx: PlanContext, candidate) -> str | None:
    device = ctx.device(candidate["spec"])
    return device.id if device is not None else None


def compare_single(choices, ctx: PlanContext) -> dict | None:
    """The cheapest mix against the best line-up of the host and one accelerator type (and the host alone), on
    the same program: each one's cost, the saving, the solve time. None when the line-up cannot be priced."""
    types = sorted({_device_id(ctx, c) for admissible, _ in choices for c in admissible
                    if c["spec"].kind != "cpu"} - {None})
    mix = cheapest_mix(choices, ctx)
    if mix is None:
        return None
    single, solve_s = {}, mix.solve_s
    for device in ["host CPU only", *types]:
        found = cheapest_mix(choices, ctx, devices=set() if device == "host CPU only" else {device})
        single[device] = None if found is None else round(found.cost, 2)
        solve_s += found.solve_s if found is not None else 0.0
    priced = {k: v for k, v in single.items() if v is not None}
    best = min(priced, key=priced.get) if priced else None
    # every single-type line-up is a mix too, so the saving is never below 0 but for the solver's tolerance
    saving = (max(0.0, (priced[best] - mix.cost) / priced[best]) if priced[best] > 0 else 0.0) if best else None
    return {"method": "integer program (HiGHS through scipy.optimize.milp) on the capacity model",
            "cost": round(mix.cost, 2),
            "units": {c["spec"].name: mix.units.get(c["spec"].name, 0) for c in mix.picks if c["spec"].kind != "cpu"},
            "stages": {stage.name: c["spec"].name for stage, c in zip(ctx.stages, mix.picks)},
            "single_type": single, "best_single": best,
            "saving": None if saving is None else round(saving, 4),
            "solve_s": round(solve_s, 4),
            "basis": "rented" if ctx.constraints.pricing.rent else "bought"}
