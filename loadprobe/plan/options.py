"""One option of a plan: its decisions assembled into engines, estimated, simulated, judged and priced.

Usage (``planner.recommend`` does this)::

    option = assemble("hybrid", decisions, specs, profiles, ctx, notes)   # analytic estimate, verdict, TCO
    simulate_option(option, ctx, profiles)     # the estimate replaced by simulated figures, judged again
    tune_option(option, ctx, profiles)         # the simulator's search over batch windows and failover caps
    ranking_cost(option)                       # what plans are ranked by: infinite when part of it is unknown
"""

from __future__ import annotations

import math
from dataclasses import asdict

from .context import PlanContext, calls_per_request, service_name, unattributed_ms
from .placement import add_fallbacks
from ..estimate.queueing import EngineCapacity, Placement, estimate
from .result import Option, Plan
from .simulation import FAILED_SHARE_OK, FAILOVER_RATIOS, STRESS, WINDOW_FACTORS, OptionCheck, tune
from .sizing import MAX_WINDOW_MS, cover_stage_p95, engine_limits, known_power

__all__ = ["assemble", "judge", "option_check", "price_option", "ranking_cost", "simulate_option", "tune_option"]


def assemble(name: str, decisions: list, specs, profiles, ctx: PlanContext, notes: list, *,
              fallbacks: bool = True) -> Option:
    """Engines, limits, fallbacks, the estimate at the sizing rate and at ``STRESS`` times it, and the cost."""
    engines = engine_limits(decisions, specs, ctx)
    if fallbacks:
        add_fallbacks(decisions, engines, specs, profiles, ctx)
    capacities = {n: EngineCapacity(n, e["servers"], e["power_w"]) for n, e in engines.items()}
    calls = calls_per_request(ctx)
    placements = [Placement(d.stage, d.engine, d.service.p50_ms, d.service.p95_ms, d.batch, d.window_ms,
                            calls.get(d.stage, 1.0), d.service.p99_ms) for d in decisions]
    unattributed = unattributed_ms(ctx.portrait)
    est = estimate(placements, capacities, rate=ctx.rate, unattributed_ms=unattributed)
    stress = estimate(placements, capacities, rate=ctx.rate * STRESS, unattributed_ms=unattributed)
    host_unknown = [n for n, e in engines.items() if e["power_w"] is None and e["kind"] == "cpu" and not e["device"]]
    accel_unknown = [n for n, e in engines.items() if e["power_w"] is None and n not in host_unknown]
    notes = list(notes)
    if host_unknown or accel_unknown:
        est.power_w = known_power(engines, est.utilisation)
        est.energy_per_request_j = est.power_w / ctx.rate if est.power_w else None
    if host_unknown:
        notes.append("host CPU power unknown (no RAPL reading, no catalog device): left out of every plan alike")
    if accel_unknown:
        notes.append("power unknown for " + ", ".join(f"{n} ({engines[n]['device'] or engines[n]['kind']})"
                                                   for n in accel_unknown)
                     + ": the catalog has no TDP; the power shown leaves it out")
        est.energy_per_request_j = None
    cover_stage_p95(decisions, est, ctx)
    option = Option(name, decisions, engines, est, stress, None, None, notes)
    judge(option, ctx)
    option.tco = price_option(option, ctx)
    return option


def option_check(option: Option, ctx: PlanContext, profiles) -> OptionCheck:
    """The option as a pipeline the simulator can replay (``simulation.OptionCheck``)."""
    stub = Plan(service_name(ctx.portrait), "", "", ctx.constraints, ctx.rate, ctx.slo_ms, option, [], "")
    return OptionCheck(stub, option, {p.name: p for p in profiles}, calls_per_request(ctx),
                       unattributed_ms(ctx.portrait))


def simulate_option(option: Option, ctx: PlanContext, profiles) -> None:
    """Replace the option's analytic latency figures (at the rate and at ``STRESS`` x) with simulated ones, and re-judge.

    When a stage's simulated p95 shows its timeout too short to cover queueing, the timeout is
    raised and the simulation run again, once. A plan the queueing model already finds
    saturated keeps that verdict: the simulation would only count how much it rejects.
    """
    if not option.feasible or option.estimate is None or option.estimate.p95_ms is None:
        return
    check = option_check(option, ctx, profiles)
    analytic = option.estimate
    option.estimate = check.estimate(analytic, ctx.rate)
    if cover_stage_p95(option.decisions, option.estimate, ctx):
        option.estimate = check.estimate(analytic, ctx.rate)
    option.stress = check.estimate(option.stress, ctx.rate * STRESS)
    judge(option, ctx)


def tune_option(option: Option, ctx: PlanContext, profiles) -> None:
    """The simulator's small search over batch windows and failover caps; the winner's settings are kept."""
    if not option.feasible or option.estimate is None or option.estimate.p95_ms is None:
        return
    check = option_check(option, ctx, profiles)
    trials, best, (at, over) = tune(check, ctx.rate, ctx.slo_ms, ctx.constraints.slo_p99_ms)
    option.tuning = trials
    if len(trials) == 1:
        return
    tried = (f"tuned by simulation: tried {len(trials)} settings (batch windows x "
             f"{'/'.join(f'{f:g}' for f in WINDOW_FACTORS)}"
             + (", failover caps as planned/" + "/".join(f"{r:.0%}" for r in FAILOVER_RATIOS if r is not None)
                if any(d.fallback for d in option.decisions) else "")
             + f") at {ctx.rate:.3g} and {ctx.rate * STRESS:.3g} req/s; kept the one that meets the targets with the "
             f"fewest failed requests at {STRESS:g}x, then the lowest p95 there, then the planned settings")
    for d in option.decisions:
        if d.batch > 1 and best["window_factor"] != 1.0:
            d.window_ms = round(min(MAX_WINDOW_MS, d.window_ms * best["window_factor"]), 3)
            d.why["batch"] = f"{d.why.get('batch', '')}; window x {best['window_factor']:g}, {tried}".lstrip("; ")
        if d.fallback and best["failover_max_ratio"] is not None and best["failover_max_ratio"] != d.fallback["max_ratio"]:
            d.fallback["max_ratio"] = best["failover_max_ratio"]
            d.why["fallback"] = f"{d.why.get('fallback', '')}; cap set to {best['failover_max_ratio']:.0%}, {tried}"
    option.estimate = check.estimate(option.estimate, ctx.rate, result=at)
    option.stress = check.estimate(option.stress, ctx.rate * STRESS, result=over)
    judge(option, ctx)


def judge(option: Option, ctx: PlanContext) -> None:
    """Whether the option meets the SLO, p99 target and power budget, by its current estimate; notes why not.

    Called again once the estimate is simulated: the notes of the earlier verdict are replaced.
    """
    est, engines = option.estimate, option.engines
    for note in option.judged:
        option.notes.remove(note)
    notes = []
    meets = None
    if est.p95_ms is None:  # saturated: it cannot carry the sizing rate, SLO or not
        meets = False
        notes.append(f"cannot carry {ctx.rate:.3g} req/s: capacity {est.max_rps:.3g} req/s ({est.bottleneck} saturates)")
    elif ctx.slo_ms is not None:
        meets = est.p95_ms <= ctx.slo_ms
    if est.failed_share is not None and est.failed_share > FAILED_SHARE_OK:
        meets = False
        notes.append(f"rejects or times out {est.failed_share:.1%} of requests at {ctx.rate:.3g} req/s (simulated)")
    elif est.failed_share is not None and meets is None:
        meets = True
    p99_target = ctx.constraints.slo_p99_ms
    if p99_target is not None and est.p99_ms is not None:
        if est.p99_ms > p99_target:
            meets = False
            notes.append(f"misses the p99 target: {est.p99_ms:.3g} ms > {p99_target:g} ms")
        elif meets is None:
            meets = True
    accel_unknown = [n for n, e in engines.items() if e["power_w"] is None and (e["kind"] != "cpu" or e["device"])]
    budget = ctx.constraints.power_budget_w
    if budget and est.power_w and est.power_w > budget:
        notes.append(f"over the power budget: {est.power_w:.0f} W > {budget:g} W")
        meets = False
    elif budget and accel_unknown:
        notes.append(f"the {budget:g} W power budget cannot be checked without those power figures")
        meets = False
    option.meets_slo = meets
    option.notes.extend(notes)
    option.judged = notes


def price_option(option: Option, ctx: PlanContext) -> dict | None:
    """The option's cost of ownership (``tco``), with what could not be priced; None without an estimate."""
    from ..estimate.tco import tco

    est = option.estimate
    if est is None:
        return None
    # Engines without a power figure (a host CPU without RAPL) are left out of every plan alike.
    power = known_power(option.engines, est.utilisation) or 0.0
    purchase, unknown = 0.0, []
    for name, engine in option.engines.items():
        if engine["kind"] == "cpu" and not engine["device"]:
            continue  # the host is common to every plan
        price = ctx.constraints.prices.get(engine["device"]) if engine["device"] else None
        if price is None and engine["device"]:
            price = ctx.catalog.get(engine["device"]).price_usd
        if price is None:
            unknown.append(engine["device"] or name)
        else:
            purchase += price * engine["count"]
    cost = tco(power_w=power, price_per_kwh=ctx.constraints.price_per_kwh, years=ctx.constraints.years,
               purchase=purchase)
    out = asdict(cost) if hasattr(cost, "__dataclass_fields__") else dict(cost)
    out["purchase_unknown"] = unknown
    out["power_unknown"] = [n for n, e in option.engines.items()
                            if e["power_w"] is None and not (e["kind"] == "cpu" and not e["device"])]
    # Unknown is not free: a plan with a device of unknown price or power ranks as costing more
    # than any plan whose cost is known, and its total is shown as a lower bound.
    out["comparable"] = not unknown and not out["power_unknown"]
    return out


def ranking_cost(option: Option) -> float:
    """The lifetime cost used to rank plans: infinite when part of it is unknown."""
    if not option.tco or not option.tco.get("comparable"):
        return math.inf
    return option.tco["total"]
