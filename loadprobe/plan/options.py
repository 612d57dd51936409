"""One option of a plan: its decisions assembled into engines, estimated, simulated, judged and priced.

Usage (``planner.recommend`` does this)::

    option = assemble("hybrid", decisions, specs, profiles, ctx, notes)   # analytic estimate, verdict, TCO
    simulate_option(option, ctx, profiles)     # the estimate replaced by simulated figures, judged again
    tune_option(option, ctx, profiles)         # the simulator's search over batch windows and failover caps
    ranking_cost(option)                       # what plans are ranked by: infinite when part of it is unknown
"""

from __future__ import annotations

import math

from .context import PlanContext, calls_per_request, delay_ms, service_name
from .placement import add_fallbacks
from ..estimate.queueing import EngineCapacity, Placement, estimate
from .result import Option
from .simulation import FAILED_SHARE_OK, FAILOVER_RATIOS, WINDOW_FACTORS, OptionCheck, tune
from .targets import STRESS
from .sizing import MAX_WINDOW_MS, cover_stage_p95, engine_limits, known_power
from ..simulator.servicetimes import HOST_STAGE

COVER_ROUNDS = 3

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
                            calls.get(d.stage, 1.0), d.service.p99_ms, d.service.mean_ms, d.service.busy_share)
                  for d in decisions]
    host = host_engine(engines, ctx)
    if host is not None:
        d = ctx.host.distribution
        placements.append(Placement(HOST_STAGE, host, d.p50_ms, d.p95_ms, 1, 0.0, 1.0, d.p99_ms, d.mean_ms))
    delay = delay_ms(ctx)
    python = None
    if ctx.interpreter is not None:  # the CPU work this plan keeps on the host carries the interpreter's time
        python = ctx.interpreter.for_plan(sum(p.calls * p.busy_ms / max(1, p.batch) for p in placements
                                              if engines[p.engine]["kind"] == "cpu"))
    est = estimate(placements, capacities, rate=ctx.rate, unattributed_ms=delay, interpreter=python)
    stress = estimate(placements, capacities, rate=ctx.targets.stress_rps, unattributed_ms=delay, interpreter=python)
    unknown = [n for n, e in engines.items() if e["power_w"] is None and e.get("measured_w") is None]
    notes = list(notes)
    if host is not None:
        notes.append(f"host CPU ({host}): {ctx.host.how}")
    if ctx.contention is not None:
        notes.append(f"CPU times: {ctx.contention.how}")
    if ctx.native_pools is not None:
        notes.append(f"CPU threads: {ctx.native_pools}")
    if ctx.steal is not None:
        notes.append(f"CPU steal: {ctx.steal}")
    if python is not None:
        notes.append(f"{ctx.interpreter.how}" + (f"; this plan keeps {python[1]:.3g} ms of it per request on the "
                                                  "host, with the CPU work it keeps there"
                                                  if abs(python[1] - ctx.interpreter.ms) > 1e-9 else ""))
    measured = [n for n, e in engines.items() if e.get("measured_w") is not None]
    if measured and not unknown:
        est.power_w = known_power(engines, est.utilisation)
        est.energy_per_request_j = est.power_w / ctx.rate if ctx.rate else None
    if measured:
        notes.append("power of " + ", ".join(measured) + " from the energy measured running these stages there "
                     "(idle power plus each stage's active energy at the rate), not from its maximum power")
    if unknown:
        est.power_w = known_power(engines, est.utilisation)
        est.energy_per_request_j = None
        notes.append("maximum power unknown for " + ", ".join(f"{n} ({engines[n]['device'] or engines[n]['kind']})"
                                                           for n in unknown)
                     + ": the power and energy shown leave it out" + (
                         f" ({ctx.host_power.note})" if ctx.host_power is not None and "cpu" in unknown else ""))
    cover_stage_p95(decisions, est, ctx)
    option = Option(name, decisions, engines, est, stress, None, None, notes,
                    host=(host, ctx.host) if host is not None else None)
    option.power_unknown = unknown
    option.interpreter = python
    maxima = [e["power_w"] for e in engines.values()]  # provisioned for full load: maxima, never what was measured
    option.provisioned_w = None if None in maxima else sum(maxima)
    judge(option, ctx)
    option.tco = price_option(option, ctx)
    return option


def host_engine(engines: dict, ctx: PlanContext) -> str | None:
    """The engine the host's own work outside the stages (``context.host_work``) runs on: the host CPU; None
    when there is no such work."""
    if ctx.host is None:
        return None
    return next((n for n, e in engines.items() if e["kind"] == "cpu" and not e["device"]), None)


def option_check(option: Option, ctx: PlanContext, profiles) -> OptionCheck:
    """The option as a pipeline the simulator can replay (``simulation.OptionCheck``)."""
    return OptionCheck(service_name(ctx.portrait), ctx.targets, option, {p.name: p for p in profiles},
                       calls_per_request(ctx), delay_ms(ctx))


def simulate_option(option: Option, ctx: PlanContext, profiles) -> None:
    """Replace the option's analytic latency figures (at the rate and at ``STRESS`` x) with simulated ones, and re-judge.

    When a stage's simulated p95 or p99, at the rate or at ``STRESS`` x it, shows its timeout too
    short to cover queueing, the timeout is raised and both simulations run again (at most
    ``COVER_ROUNDS`` times). A plan the queueing model already finds
    saturated keeps that verdict: the simulation would only count how much it rejects.
    """
    if not option.feasible or option.estimate is None or option.estimate.p95_ms is None:
        return
    analytic, analytic_stress = option.estimate, option.stress
    check = option_check(option, ctx, profiles)
    option.estimate = check.estimate(analytic, ctx.rate)
    option.stress = check.estimate(analytic_stress, ctx.targets.stress_rps)
    # Timeouts cover the queueing the simulation found, at the rate and at the stress rate. Fewer
    # timeouts mean fewer retries and a different tail, so the cover is checked again, a few times.
    for _ in range(COVER_ROUNDS):
        raised = cover_stage_p95(option.decisions, option.estimate, ctx)
        raised = cover_stage_p95(option.decisions, option.stress, ctx, rate=ctx.targets.stress_rps) or raised
        if not raised:
            break
        check = option_check(option, ctx, profiles)  # a fresh pipeline: the checked one holds the old timeouts
        option.estimate = check.estimate(analytic, ctx.rate)
        option.stress = check.estimate(analytic_stress, ctx.targets.stress_rps)
    judge(option, ctx)


def tune_option(option: Option, ctx: PlanContext, profiles) -> None:
    """The simulator's small search over batch windows and failover caps; the winner's settings are kept."""
    if not option.feasible or option.estimate is None or option.estimate.p95_ms is None:
        return
    check = option_check(option, ctx, profiles)
    trials, best, (at, over) = tune(check)
    option.tuning = trials
    if len(trials) == 1:
        return
    tried = (f"tuned by simulation: tried {len(trials)} settings (batch windows x "
             f"{'/'.join(f'{f:g}' for f in WINDOW_FACTORS)}"
             + (", failover caps as planned/" + "/".join(f"{r:.0%}" for r in FAILOVER_RATIOS if r is not None)
                if any(d.fallback for d in option.decisions) else "")
             + f") at {ctx.rate:.3g} and {ctx.targets.stress_rps:.3g} req/s; kept the one that meets the targets "
             f"with the fewest failed requests at {STRESS:g}x, then the lowest p95 there, then the planned settings")
    for d in option.decisions:
        if d.batch > 1 and best["window_factor"] != 1.0:
            d.window_ms = round(min(MAX_WINDOW_MS, d.window_ms * best["window_factor"]), 3)
            d.why["batch"] = f"{d.why.get('batch', '')}; window x {best['window_factor']:g}, {tried}".lstrip("; ")
        if d.fallback and best["failover_max_ratio"] is not None and best["failover_max_ratio"] != d.fallback["max_ratio"]:
            d.fallback["max_ratio"] = best["failover_max_ratio"]
            d.why["fallback"] = f"{d.why.get('fallback', '')}; cap set to {best['failover_max_ratio']:.0%}, {tried}"
    option.estimate = check.estimate(option.estimate, ctx.rate, result=at)
    option.stress = check.estimate(option.stress, ctx.targets.stress_rps, result=over)
    judge(option, ctx)


def judge(option: Option, ctx: PlanContext) -> None:
    """How far the option is from its targets, by its current estimates (``Option.tier``), with a note for each miss.

    Feasible (tier 0) means: it carries the sizing rate within its latency targets (p95; p50, p99 where set) failing
    at most ``FAILED_SHARE_OK`` of requests, does so at ``STRESS`` x the rate too, and its
    provisioned power -- every unit's maximum, summed -- fits the power budget. Called again once
    the estimate is simulated: the notes of the earlier verdict are replaced.
    """
    est, stress = option.estimate, option.stress
    for note in option.judged:
        option.notes.remove(note)
    notes, tier = [], 0

    def miss(level: int, note: str) -> None:
        nonlocal tier
        tier = max(tier, level)
        notes.append(note)

    if est.p95_ms is None:  # saturated: it cannot carry the sizing rate, SLO or not
        miss(4, f"cannot carry {ctx.rate:.3g} req/s: capacity {est.max_rps:.3g} req/s ({est.bottleneck} saturates)")
    else:
        for name, value, target in ctx.targets.latency_misses(p50=est.p50_ms, p95=est.p95_ms, p99=est.p99_ms):
            miss(2, f"misses the {name} target: {value:.3g} ms > {target:.3g} ms at {ctx.rate:.3g} req/s")
        if est.failed_share is not None and est.failed_share > FAILED_SHARE_OK:
            miss(2, f"rejects or times out {est.failed_share:.1%} of requests at {ctx.rate:.3g} req/s (simulated)")
        peak = ctx.targets.stress_rps
        # the queueing model's capacity bounds what a finite simulation can show: at or past it, queues grow
        if stress is None or stress.p95_ms is None or stress.max_rps <= peak:
            capacity = f"capacity {stress.max_rps:.3g} req/s, {stress.bottleneck} saturates" if stress else "no estimate"
            miss(1, f"cannot carry {STRESS:g}x the rate ({peak:.3g} req/s): {capacity}")
        elif stress.failed_share is not None and stress.failed_share > FAILED_SHARE_OK:
            miss(1, f"fails {stress.failed_share:.1%} of requests at {STRESS:g}x the rate ({peak:.3g} req/s, simulated), "
                    f"more than the {FAILED_SHARE_OK:.0%} allowed")
    budget = ctx.targets.power_budget_w
    if budget and option.power_unknown:
        miss(3, f"the {budget:g} W power budget cannot be checked: no maximum power for "
                f"{', '.join(option.power_unknown)}" + ("; give --cpu-power-w" if "cpu" in option.power_unknown else ""))
    elif budget and option.provisioned_w is not None and option.provisioned_w > budget:
        parts = ", ".join(f"{n} {e['power_w']:.3g} W" for n, e in option.engines.items())
        miss(3, f"over the power budget: {option.provisioned_w:.0f} W provisioned ({parts}: each unit's maximum) > "
                f"{budget:g} W")
    option.tier = tier
    option.meets_slo = tier == 0
    option.notes.extend(notes)
    option.judged = notes


def price_option(option: Option, ctx: PlanContext) -> dict | None:
    """The option's cost (``tco``) by the one pricing rule (``estimate.tco.price_line_up``), bought or rented as
    the plan's pricing says (``Pricing.decided``); bought, electricity is counted for every engine whose
    power is known, the host CPU included, at its utilisation in this plan. None without an estimate."""
    from ..estimate.tco import price_line_up

    est = option.estimate
    if est is None:
        return None
    pricing = ctx.constraints.pricing
    return price_line_up([(n, e["device"], e["kind"], e["count"]) for n, e in option.engines.items()],
                         catalog=ctx.catalog, rent=bool(pricing.rent), prices=pricing.prices,
                         hourly_rates=pricing.hourly_rates, years=pricing.years, price_per_kwh=pricing.price_per_kwh,
                         power_w=None if pricing.rent else known_power(option.engines, est.utilisation),
                         power_unknown=option.power_unknown)


def ranking_cost(option: Option) -> float:
    """The lifetime cost plans are ranked by when every plan compared has one; infinite when part is unknown."""
    if not option.tco or not option.tco.get("comparable"):
        return math.inf
    return option.tco["total"]
