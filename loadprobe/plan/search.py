"""The hybrid plan's search: the cheapest assignment of stages to their admissible engines that meets the targets.

Usage (``planner.recommend`` does this)::

    picks, summary, met = search(choices, profiles, specs, ctx)   # one candidate per stage, in words, met or not
"""

from __future__ import annotations

import itertools
import math

from .choice import compare, rank
from .context import PlanContext
from .lineup import size

__all__ = ["MAX_COMBINATIONS", "MAX_CUTS", "search"]

MAX_COMBINATIONS = 4096
MAX_CUTS = 8  # integer programs solved again after their assignment missed a target


def search(choices, profiles, specs, ctx: PlanContext) -> tuple[list, str, bool]:
    """Rule 6, the hybrid: the best assignment of stages to engines by ``choice.rank``'s rule, each sized
    (``lineup``).

    Every combination of each stage's admissible engines is sized and estimated when there are
    at most ``MAX_COMBINATIONS``. Beyond, the cheapest mix is solved as an integer program
    (``mix.cheapest_mix``) and sized; an assignment that misses a target is cut off and the program
    solved again, up to ``MAX_CUTS`` times. Where the line-up cannot be priced, a coordinate descent
    from each stage's fastest engine moves one stage at a time while that improves the plan.
    Returns the picks, the search in words and whether the best meets every target.
    """
    lists = [candidates for candidates, _ in choices]
    total = math.prod(len(c) for c in lists)
    blank = [""] * len(lists)

    def option(combo):
        return size("search", list(combo), blank, specs, profiles, ctx, [], fallbacks=False)

    if total <= MAX_COMBINATIONS:
        combos = [list(c) for c in itertools.product(*lists)]
        options = [option(c) for c in combos]
        best_option = rank(options)[0]
        best = combos[options.index(best_option)]
        met = sum(o.tier == 0 for o in options)
        how = f"searched all {len(combos)} stage-to-engine combinations, each sized"
    elif (solved := _solved(choices, ctx, option)) is not None:
        best, best_option, how = solved
        met = int(best_option.tier == 0)
    else:
        best = [min(c, key=lambda x: x["per_item_s"]) for c in lists]
        best_option, tried = option(best), 1
        for _ in range(len(lists) * 4):  # passes are few in practice; bounded anyway
            improved = False
            for i, candidates in enumerate(lists):
                for c in candidates:
                    if c is best[i]:
                        continue
                    trial = best[:i] + [c] + best[i + 1:]
                    trial_option = option(trial)
                    tried += 1
                    by_cost = all(o.tco and o.tco.get("comparable") for o in (trial_option, best_option))
                    if compare(trial_option, best_option, by_cost) < 0:
                        best, best_option, improved = trial, trial_option, True
            if not improved:
                break
        met = int(best_option.tier == 0)
        how = (f"{total:,} combinations are too many to search and some device has no price or rate for an "
               f"integer program: a coordinate descent from each stage's fastest engine tried {tried}")
    ok = best_option.tier == 0
    summary = (f"{how}; " + (f"{met} meet" if total <= MAX_COMBINATIONS else "the best " + ("meets" if ok else "misses"))
               + f" every target at {ctx.rate:.3g} req/s" + (f" within {ctx.slo_ms:g} ms p95" if ctx.slo_ms else "")
               + "; ranked as every plan is (see the recommendation's note)")
    return best, summary, ok


def _solved(choices, ctx: PlanContext, option) -> tuple | None:
    """The integer program's cheapest mix, sized and judged; the next best while it misses a target. None when
    the line-up cannot be priced or the capacity model admits no assignment."""
    from .mix import cheapest_mix

    cuts, tried, solve_s, closest = [], [], 0.0, None
    for _ in range(MAX_CUTS):
        mix = cheapest_mix(choices, ctx, cuts=cuts)
        if mix is None:
            break
        solve_s += mix.solve_s
        sized = option(mix.picks)
        tried.append(sized)
        if closest is None or rank([sized, closest[1]])[0] is sized:
            closest = (mix.picks, sized)
        if sized.tier == 0:
            break
        cuts.append(mix.key)
    if closest is None:
        return None
    total = math.prod(len(c) for c, _ in choices)
    how = (f"{total:,} combinations: the cheapest mix solved as an integer program (HiGHS, {solve_s:.3g} s in all) "
           f"and sized; {len(tried)} assignment{'s' * (len(tried) != 1)} tried, each that missed a target cut off")
    return closest[0], closest[1], how
