"""How sure a plan is: its figures resampled, each stage's engine *decided* or *a tie within noise*.

Usage (``planner.recommend`` does this)::

    draws = resample(profiles, ctx)                     # RESAMPLES (profiles, ctx) pairs, seeded: same input, same draws
    votes = stage_votes(choices, specs, draws)          # stage -> Counter(engine -> resamples that picked it)
    choices, verdicts = settle(choices, votes, ctx)     # ties broken by the stable rule; per-stage words
    intervals(option, draws)                            # {"p95_ms": [lo, hi], ...} for one option's line-up

The resampling is a parametric bootstrap of what the plan rests on: each stage's level -- its
recorded distribution, moved as a whole -- is redrawn from the sampling distribution of its mean
over ``n`` spans (normal, standard deviation ``sd / sqrt(n)``: the mean is what sizes an engine),
and, where the sizing rate is the recorded peak, the rate from a Poisson count of the arrivals in
the peak's bucket. Each draw is searched again (analytically; simulation would cost seconds a
draw). A stage whose engine wins in at least ``DECIDED_SHARE`` of the draws is decided; otherwise
the engines that won at least ``TIE_SHARE`` of them tie, and the tie is broken by figures that do
not move between recordings: the lower maximum power per unit (catalog), then the kind order
cpu, gpu, npu (a CPU needs no transfer; a GPU runs the framework's model as is), then the name.
So the same workload recorded again gives the same plan.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace

__all__ = ["DECIDED_SHARE", "RESAMPLES", "TIE_SHARE", "intervals", "resample", "settle", "stage_votes"]

RESAMPLES = 24  # draws: each is one analytic search, so the whole costs about as much as one simulation
DECIDED_SHARE = 0.9  # an engine that wins in this share of the draws is decided
TIE_SHARE = 0.1  # engines that win in at least this share tie when none is decided
_KIND_ORDER = {"cpu": 0, "gpu": 1, "npu": 2}


def resample(profiles: list, ctx, *, draws: int = RESAMPLES, seed: int = 0) -> list:
    """``draws`` (profiles, ctx) pairs with each stage's quantiles and (for a recorded peak) the rate redrawn."""
    rng = random.Random(seed)
    bucket = ctx.portrait.traffic.bucket_s if ctx.portrait.traffic is not None else None
    peak_count = ctx.rate * bucket if bucket and not ctx.targets.rate_given else None
    out = []
    for _ in range(draws):
        drawn = [_redraw(p, stage.count, rng) for p, stage in zip(profiles, ctx.stages)]
        rate = ctx.rate
        if peak_count and peak_count >= 1:
            rate = max(1.0, _poisson(peak_count, rng)) / bucket
        out.append((drawn, replace(ctx, targets=replace(ctx.targets, rate_rps=rate))))
    return out


def _redraw(profile, n: int, rng: random.Random):
    """One draw of a stage's profile: its distribution and batch fit moved by its mean's sampling error over ``n`` spans."""
    d = profile.distribution
    if n < 2 or d.mean_ms <= 0:
        return profile
    cv = d.sd_ms / d.mean_ms / math.sqrt(n)
    f = max(0.05, rng.gauss(1.0, cv)) if cv > 0 else 1.0
    scale = lambda v: None if v is None else v * f  # noqa: E731 - the fit moves with the level
    return replace(profile, distribution=d.scaled(f), fit_a_ms=scale(profile.fit_a_ms),
                   fit_b_ms=scale(profile.fit_b_ms))


def _poisson(mean: float, rng: random.Random) -> int:
    if mean > 50:  # normal approximation: exact enough, and constant time
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    k, p, limit = 0, 1.0, math.exp(-mean)
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def stage_votes(choices: list, specs, draws: list) -> list[Counter]:
    """For each stage, how many draws' searches put it on each engine."""
    from .placement import candidates
    from .search import search

    votes = [Counter() for _ in choices]
    for profiles, ctx in draws:
        redrawn = [candidates(stage, profile, specs, ctx) for stage, profile in zip(ctx.stages, profiles)]
        if any(not admissible for admissible, _ in redrawn):
            continue
        picks, _, _ = search(redrawn, profiles, specs, ctx)
        for vote, pick in zip(votes, picks):
            vote[pick["spec"].name] += 1
    return votes


def settle(choices: list, votes: list, ctx) -> tuple[list, list]:
    """Each stage's choices narrowed to the tie-break winner where the draws tie; and for each stage, in words,
    whether its engine is decided or a tie and how it was broken."""
    settled, words = [], []
    for stage, (admissible, excluded), vote in zip(ctx.stages, choices, votes):
        total = sum(vote.values())
        if not total or len(admissible) < 2:
            settled.append((admissible, excluded))
            words.append({"state": "decided", "why": "only one engine can run it" if len(admissible) < 2
                          else "no draw could be searched"})
            continue
        top, wins = vote.most_common(1)[0]
        shares = {name: n / total for name, n in vote.items()}
        tally = ", ".join(f"{name} {share:.0%}" for name, share in sorted(shares.items()))
        if wins / total >= DECIDED_SHARE:
            settled.append((admissible, excluded))
            words.append({"state": "decided", "engine": top, "shares": shares,
                          "why": f"decided: {top} wins in {wins} of {total} resampled recordings ({tally})"})
            continue
        tied = [c for c in admissible if shares.get(c["spec"].name, 0.0) >= TIE_SHARE]
        winner = min(tied, key=_stable_key)
        names = sorted({c["spec"].name for c in tied})
        settled.append(([c for c in admissible if c["spec"].name == winner["spec"].name], excluded))
        words.append({"state": "tie", "engine": winner["spec"].name, "tied": names, "shares": shares,
                      "why": f"a tie within noise between {', '.join(names)} ({tally} of {total} resampled "
                             f"recordings); broken by the stable rule -- lower maximum power per unit, then cpu, gpu, "
                             f"npu, then name: {winner['spec'].name}"})
    return settled, words


def _stable_key(candidate) -> tuple:
    device = candidate["device"]
    power = device.max_power_w if device is not None and device.max_power_w is not None else math.inf
    spec = candidate["spec"]
    if spec.kind == "cpu" and not spec.device:
        power = 0.0  # the host is there in every plan: using it adds no power to provision
    return (power, _KIND_ORDER.get(spec.kind, 9), spec.name)


def intervals(option, draws: list, *, rebuild) -> dict:
    """The option's p50, p95, capacity and cost over the draws, as [lo, hi] (5th and 95th percentiles).

    ``rebuild(profiles, ctx)`` assembles the option's line-up (its placements and counts) analytically,
    for the point figures (``rebuild(None, None)``) or one draw. Each draw moves the option's own
    figures (simulated, where they were) by its ratio to the analytic point, so a band brackets
    the figure the tables print.
    """
    point = rebuild(None, None)
    if point is None or point.estimate is None or option.estimate is None:
        return {}
    now = {"p50_ms": option.estimate.p50_ms, "p95_ms": option.estimate.p95_ms, "max_rps": option.estimate.max_rps,
           "cost": (option.tco or {}).get("total")}
    base = _figures(point)
    bands: dict[str, list] = {key: [] for key in now}
    for profiles, ctx in draws:
        again = rebuild(profiles, ctx)
        if again is None or again.estimate is None:
            continue
        for key, value in _figures(again).items():
            if value is not None and base.get(key) and now.get(key) is not None and math.isfinite(value):
                bands[key].append(now[key] * value / base[key])
    return {key: _band(values, now[key]) for key, values in bands.items() if values}


def _figures(option) -> dict:
    est = option.estimate
    return {"p50_ms": est.p50_ms, "p95_ms": est.p95_ms, "max_rps": est.max_rps, "cost": (option.tco or {}).get("total")}


def _band(values: list, point: float) -> list:
    """The 5th and 95th percentiles of ``values``, widened to hold ``point`` (the figure the tables print)."""
    values = sorted(values)
    at = lambda q: values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]  # noqa: E731
    return [min(at(0.05), point), max(at(0.95), point)]
