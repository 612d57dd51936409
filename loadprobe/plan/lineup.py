"""What to buy: the fewest units of each accelerator that carry the rate within every target.

Usage (``planner`` and ``search`` do this)::

    option = size("hybrid", picks, whys, specs, profiles, ctx, notes)    # an Option with its counts set
    option.sizing                        # "2 x nvidia-l4 (gpu0): 1 carries ... ; ..." -- the reason, in words
    option = size(..., start={"gpu0": 3})  # again, from (and never below) given counts: a simulation asked for more

An accelerator's ``EngineSpec.max_count`` bounds its units (the count the team gave, else
``constraints.MAX_SIZED_UNITS``); a CPU's hosts stay as given. Growing follows InferLine's order --
add units until the targets hold, then cut cost: each round, every accelerator whose offered
load at ``STRESS`` x the rate is above ``SIZING_UTIL`` per unit jumps to the count that brings it
there; when none is but a target is still missed (queueing, a batch wait), the busiest one gets
a unit -- none when the busiest engine is the host CPU or at its bound, and no more once a
round brings the option no closer to its targets: units elsewhere would not relieve it. Once the targets hold, each engine gives back units one at a time while they still
hold. Every count is judged by ``options.judge`` -- the one definition of meeting the targets.
"""

from __future__ import annotations

import math
from dataclasses import replace

from .context import PlanContext
from ..estimate.queueing import INTERPRETER
from .options import assemble
from .targets import STRESS
from .sizing import make_decision

__all__ = ["MAX_ROUNDS", "SIZING_UTIL", "describe", "size"]

SIZING_UTIL = 0.85  # an accelerator's units are sized so that at STRESS x the rate each is at most this busy
MAX_ROUNDS = 16  # growth rounds; each jumps, so a few suffice in practice


def size(name: str, picks: list, whys: list, specs, profiles, ctx: PlanContext, notes: list, *,
         fallbacks: bool = True, start: dict | None = None):
    """The option with each stage on its pick and the fewest accelerator units meeting the targets (or, when
    no count within the bounds meets them, the count closest to them); ``option.sizing`` says how."""
    used = {p["spec"].name for p in picks}
    bounds = {s.name: s.limit for s in specs if s.kind != "cpu" and s.name in used}
    counts = {s.name: s.count for s in specs}
    counts.update({n: max(1, min(bounds[n], (start or {}).get(n, 1))) for n in bounds})
    floors = dict(counts)  # units are given back down to where the sizing started, never below
    built: dict = {}

    def build(trial: dict):
        key = tuple(sorted(trial.items()))
        if key not in built:
            sized = {s.name: replace(s, count=trial[s.name]) for s in specs}
            decisions = [make_decision(stage, profile, dict(pick, spec=sized[pick["spec"].name]), why,
                                       ctx.budget_ms(stage), ctx)
                         for stage, profile, pick, why in zip(ctx.stages, profiles, picks, whys)]
            built[key] = assemble(name, decisions, list(sized.values()), profiles, ctx, notes, fallbacks=fallbacks)
        return built[key]

    option = build(counts)
    for _ in range(MAX_ROUNDS):
        if option.tier in (0, 3) or not bounds:  # met, or over the power budget: more units only add power
            break
        grown = _grow(option, counts, bounds)
        if grown == counts:
            break
        trial = build(grown)
        if not _helped(trial, option):  # the shortfall is elsewhere (the host CPU, a batch wait): stop buying
            break
        counts, option = grown, trial
    if option.tier == 0:
        for engine in sorted(bounds, key=lambda n: -counts[n]):
            while counts[engine] > floors[engine]:
                trial = build({**counts, engine: counts[engine] - 1})
                if trial.tier != 0:
                    break
                counts, option = {**counts, engine: counts[engine] - 1}, trial
    option.sizing = describe(option, ctx)
    return option


def _grow(option, counts: dict, bounds: dict) -> dict:
    """The next counts to try: jump each overloaded accelerator to its sizing count, else one more of the busiest."""
    offered = (option.stress.offered if option.stress is not None and option.stress.offered
               else {n: STRESS * x for n, x in option.estimate.offered.items()})
    grown = dict(counts)
    for engine, bound in bounds.items():
        load = offered.get(engine, 0.0)
        need = math.ceil(counts[engine] * load / SIZING_UTIL - 1e-9)
        if need > counts[engine]:
            grown[engine] = min(bound, need)
    if grown == counts:  # no unit is overloaded, yet a target is missed: one more of the busiest, if it may grow
        busiest = max(offered, key=lambda n: (offered[n], n), default=None)
        if busiest in bounds and counts[busiest] < bounds[busiest] and offered[busiest] > 0:
            grown[busiest] = counts[busiest] + 1
    return grown


def _helped(new, old) -> bool:
    """Whether more units brought the option closer to its targets: a better tier, or more capacity or a lower p95."""
    if new.tier != old.tier:
        return new.tier < old.tier
    before, after = old.estimate, new.estimate
    if before.p95_ms is None or after.p95_ms is None:
        return after.max_rps > 1.01 * before.max_rps
    return after.p95_ms < 0.99 * before.p95_ms or (new.stress.max_rps > 1.01 * old.stress.max_rps
                                                  and old.stress.max_rps <= old.stress.rate_rps)


def describe(option, ctx: PlanContext) -> str:
    """What to buy, in words, by the option's current verdict: each accelerator's units, its bound and its busy
    share at STRESS x the rate, and what stops more units from helping when the targets are missed."""
    used = {d.engine for d in option.decisions}
    counts = {n: e["count"] for n, e in option.engines.items()}
    bounds = {s.name: s.limit for s in ctx.constraints.lineup.engines if s.kind != "cpu" and s.name in used}
    if not bounds:
        return "no accelerator: every stage runs on the host CPU"
    offered = option.stress.offered if option.stress is not None else {}
    parts = []
    for engine in sorted(bounds):
        e = option.engines.get(engine)
        if e is None:
            continue
        load = offered.get(engine)
        parts.append(f"{counts[engine]} x {e['device'] or e['kind']} ({engine}, at most {bounds[engine]})"
                     + (f", {min(load, 9.99):.0%} busy per unit at {STRESS:g}x" if load is not None else ""))
    verdict = ("the fewest units that meet every target at " if option.tier == 0 else
               "no count within the bounds meets every target at ")
    limit = ""
    if option.tier and offered:
        busiest = max(offered, key=lambda n: (offered[n], n))
        e = option.engines.get(busiest, {})
        if busiest == INTERPRETER:
            limit = (f"; the Python interpreter is {min(offered[busiest], 9.99):.0%} busy at {STRESS:g}x and units do "
                     "not help: run more worker processes (each runs one request's Python at a time)")
        elif e.get("kind") == "cpu":
            limit = (f"; the host CPU ({busiest}) is {min(offered[busiest], 9.99):.0%} busy at {STRESS:g}x and units "
                     "are not bought for it: give more hosts (--engines cpux2) or cores (--cpu-cores)")
        elif counts.get(busiest, 0) >= bounds.get(busiest, 0):
            limit = f"; {busiest} is at its bound of {bounds.get(busiest)}: allow more (--engines KIND:DEVICExN)"
    return (f"{'; '.join(parts)}: {verdict}{ctx.rate:.3g} req/s and {STRESS:g}x it (each accelerator sized to at "
            f"most {SIZING_UTIL:.0%} busy at {STRESS:g}x, then units given back while the targets still hold){limit}")
