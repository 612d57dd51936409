"""The hybrid plan's search: the cheapest assignment of stages to their admissible engines that meets the targets.

Usage (``planner.recommend`` does this)::

    picks, summary, met = search(choices, profiles, specs, ctx)   # one candidate per stage, in words, met or not
"""

from __future__ import annotations

import math

from .context import PlanContext
from .options import assemble, ranking_cost
from .sizing import make_decision

__all__ = ["MAX_COMBINATIONS", "search"]

MAX_COMBINATIONS = 4096


def search(choices, profiles, specs, ctx: PlanContext) -> tuple[list, str, bool]:
    """The hybrid: the cheapest assignment of stages to engines that meets the SLO and power budget.

    Every combination of each stage's admissible engines is estimated when there are at most
    ``MAX_COMBINATIONS``; beyond, a coordinate descent from each stage's fastest engine moves
    one stage at a time while that improves the plan. Ties in cost go to the lower estimated
    p95, so an engine the line-up already pays for is used when it helps; among plans that
    miss the targets, the lower p95 and then the higher capacity win.
    """
    import itertools

    lists = [candidates for candidates, _ in choices]
    total = math.prod(len(c) for c in lists)

    def key(combo) -> tuple:
        decisions = [make_decision(stage, profile, c, "", ctx.budget_ms(stage), ctx)
                     for stage, profile, c in zip(ctx.stages, profiles, combo)]
        option = assemble("search", decisions, specs, profiles, ctx, [], fallbacks=False)
        ok = option.meets_slo is not False
        cost = ranking_cost(option)
        p95 = option.estimate.p95_ms if option.estimate.p95_ms is not None else math.inf
        return (not ok, cost if ok else 0.0, p95, -option.estimate.max_rps)

    tried = met = 0
    best = best_key = None
    if total <= MAX_COMBINATIONS:
        for combo in itertools.product(*lists):
            k = key(combo)
            tried += 1
            met += not k[0]
            if best_key is None or _better(k, best_key):
                best, best_key = list(combo), k
        how = f"searched all {tried} stage-to-engine combinations"
    else:
        best = [min(c, key=lambda x: x["per_item_s"]) for c in lists]
        best_key = key(best)
        tried = 1
        for _ in range(len(lists) * 4):  # passes are few in practice; bounded anyway
            improved = False
            for i, candidates in enumerate(lists):
                for c in candidates:
                    if c is best[i]:
                        continue
                    trial = best[:i] + [c] + best[i + 1:]
                    k = key(trial)
                    tried += 1
                    if _better(k, best_key):
                        best, best_key, improved = trial, k, True
            if not improved:
                break
        met = int(not best_key[0])
        how = (f"{total:,} combinations are too many to search: a coordinate descent from each stage's fastest "
               f"engine tried {tried}")
    ok = not best_key[0]
    summary = (f"{how}; " + (f"{met} meet" if total <= MAX_COMBINATIONS else "the best " + ("meets" if ok else "misses"))
               + f" the targets at {ctx.rate:.3g} req/s" + (f" within {ctx.slo_ms:g} ms p95" if ctx.slo_ms else "")
               + "; the cheapest to own is recommended, ties to the lower p95")
    return best, summary, ok


def _better(a: tuple, b: tuple) -> bool:
    """(misses targets, cost, p95, -capacity) ordering, costs within 0.5% counting as equal."""
    if a[0] != b[0]:
        return a[0] < b[0]
    if a[1] != b[1] and not (math.isinf(a[1]) and math.isinf(b[1])):
        if math.isinf(a[1]) or math.isinf(b[1]) or abs(a[1] - b[1]) > 0.005 * max(abs(a[1]), abs(b[1]), 1.0):
            return a[1] < b[1]
    if a[2] != b[2]:
        return a[2] < b[2]
    return a[3] < b[3]
