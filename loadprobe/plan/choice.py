"""Choosing between a plan's options and saying why: the recommendation, the scenario, the verdict.

Usage (``planner.recommend`` and ``search`` do this)::

    recommended, alternatives = select(options)           # the one rule below
    ranked = rank(options)                                 # best first, by the same rule
    name, why = name_scenario(portrait, targets, profiles)   # "online-api", "offline-bulk", ...
    verdict(recommended, alternatives, slo_ms)            # one paragraph comparing them

The rule, written once here: feasibility first (``Option.tier``: the SLO at the sizing rate,
the failed share at 1.5x it, the provisioned power against the budget); then, among the
options of the best tier, the lowest cost of ownership when every one of them has a known
cost -- otherwise, never counting an unknown as zero, the lowest provisioned power and then
the lowest p95, the unknown named; then the lower p95; then fewer accelerator units; then the
order the options were built in (the hybrid first). Among options that miss, the closest:
over the power budget, the least power; otherwise the lower p95, then the higher capacity. Costs and powers within ``COST_TIE``
and p95s within ``P95_TIE`` count as equal, so noise does not decide.
"""

from __future__ import annotations

import functools
import math

from .targets import Targets
from .options import ranking_cost
from .result import Option

__all__ = ["COST_TIE", "P95_TIE", "compare", "name_scenario", "rank", "select", "verdict"]

COST_TIE = 0.01  # costs (or provisioned powers) within 1% are the same
P95_TIE = 0.05  # p95s within 5% are the same: within a simulation's own noise at 3,000 requests


def rank(options: list) -> list:
    """``options`` best first, by the module's rule (stable: equal options keep their order)."""
    feasible = [o for o in options if o.feasible and o.estimate is not None]
    rest = [o for o in options if o not in feasible]
    if not feasible:
        return list(options)
    best_tier = min(o.tier for o in feasible)
    by_cost = all(ranking_cost(o) < math.inf for o in feasible if o.tier == best_tier)
    return sorted(feasible, key=functools.cmp_to_key(lambda a, b: compare(a, b, by_cost))) + rest


def compare(a: Option, b: Option, by_cost: bool) -> int:
    """-1 when ``a`` ranks before ``b``, 1 after, 0 equal; ``by_cost``: rank on cost (every cost known)."""
    if a.tier != b.tier:
        return -1 if a.tier < b.tier else 1
    if a.tier == 0:
        first = (ranking_cost(a), ranking_cost(b)) if by_cost else (_power(a), _power(b))
        order = _order(*first, COST_TIE)
        if order:
            return order
    if a.tier == 3:  # over the power budget: the closest to it first
        order = _order(_power(a), _power(b), COST_TIE)
        if order:
            return order
    order = _order(_p95(a), _p95(b), P95_TIE)
    if order or a.tier:
        return order or _order(-a.estimate.max_rps, -b.estimate.max_rps, COST_TIE)
    return (_units(a) > _units(b)) - (_units(a) < _units(b))


def _order(x: float, y: float, tie: float) -> int:
    if x == y or (math.isinf(x) and math.isinf(y)):
        return 0
    if math.isinf(x) or math.isinf(y) or abs(x - y) > tie * max(abs(x), abs(y), 1e-9):
        return -1 if x < y else 1
    return 0


def _power(o: Option) -> float:
    return o.provisioned_w if o.provisioned_w is not None else math.inf


def _p95(o: Option) -> float:
    return o.estimate.p95_ms if o.estimate is not None and o.estimate.p95_ms is not None else math.inf


def _units(o: Option) -> int:
    return sum(e["count"] for e in o.engines.values() if e["kind"] != "cpu")


def select(options: list) -> tuple[Option, list]:
    """The option to recommend and the others, by ``rank``; the recommended one's notes say why.

    A single-engine plan that places every stage exactly as the hybrid does is dropped (the
    hybrid's notes say so).
    """
    hybrid, kept = options[0], [options[0]]
    for o in options[1:]:
        same = o.feasible and hybrid.feasible and _placement(o) == _placement(hybrid)
        if same:
            hybrid.notes.append(f"the stage rules place every stage as the {o.name} plan does")
        else:
            kept.append(o)
    ranked = rank(kept)
    best = ranked[0]
    best.notes.append(_why_best(best, ranked[1:]))
    return best, [o for o in kept if o is not best]


def _placement(o: Option) -> list:
    return [(d.stage, d.engine, o.engines[d.engine]["count"]) for d in o.decisions]


def _why_best(best: Option, others: list) -> str:
    peers = [o for o in others if o.feasible and o.estimate is not None and o.tier == best.tier]
    if best.tier:
        return ("recommended as the closest to the targets: no plan meets them all "
                "(ranked by how far each misses, then p95, then capacity)")
    if not peers:
        return "recommended: the only plan that meets every target"
    if all(ranking_cost(o) < math.inf for o in [best, *peers]):
        return (f"recommended: the cheapest {_how_paid(best)} of the {len(peers) + 1} plans meeting every target "
                f"({ranking_cost(best):,.0f} vs {min(ranking_cost(o) for o in peers):,.0f} for the next)")
    unknown = sorted({u for o in [best, *peers] for u in (o.tco or {}).get("unknown", [])})
    return (f"recommended on known figures: {len(peers) + 1} plans meet every target but their costs cannot be "
            f"compared (unknown: {', '.join(unknown)}; give --price DEVICE=AMOUNT or a catalog entry), so the lowest "
            f"provisioned power ({_fmt_w(best.provisioned_w)}) ranks first, then the lower p95")


def _how_paid(o: Option) -> str:
    return "to rent" if (o.tco or {}).get("mode") == "rent" else "to own"


def _fmt_w(w) -> str:
    return "unknown" if w is None else f"{w:.0f} W"


def name_scenario(portrait, targets: Targets, profiles) -> tuple[str, str]:
    """The four dimensions -> online API, offline bulk, edge/power-bound, LLM split, or mixed."""
    slo, budget_w = targets.p95_ms, targets.power_budget_w
    traffic, req = portrait.traffic, portrait.requests
    batch_means = [p.batch_mean for p in profiles if p.batch_mean]
    batch = max(batch_means) if batch_means else 1.0
    p95 = req.latency_ms.p95 if req is not None and req.latency_ms else None
    facts = [f"latency p95 {p95:.3g} ms" if p95 else "no request latency",
             f"peak {traffic.peak_rps:.3g} req/s (mean {traffic.mean_rps:.3g}, peak/mean "
             f"{traffic.peak_to_mean or 0:.3g})" if traffic else "no traffic series",
             f"largest mean batch {batch:.3g}",
             f"power budget {budget_w:g} W" if budget_w else "no power budget"]
    found = []
    names = {p.name.lower() for p in profiles}
    intensities = [p.flops_per_byte for p in profiles if p.flops_per_byte]
    llm = any("prefill" in n for n in names) and any("decode" in n or "token" in n for n in names)
    if llm or any(p.name for p in profiles if getattr(p, "tokens", False)):
        found.append(("llm-prefill-decode-split", "prefill is compute-heavy and decode bandwidth-bound "
                      f"({max(intensities):.3g} vs {min(intensities):.3g} FLOP/byte)" if intensities else
                      "prefill and decode stages"))
    if budget_w is not None and budget_w <= 150:
        found.append(("edge-power-bound", f"a {budget_w:g} W power budget"))
    if (slo is None or slo >= 1000) and batch >= 8:
        found.append(("offline-bulk", f"large batches ({batch:.3g}) and a loose latency target"))
    elif slo is not None and slo < 1000:
        found.append(("online-api", f"a {slo:.3g} ms p95 target with batches of {batch:.3g}"))
    if not found:
        found.append(("online-api", "request/response traffic"))
    name = found[0][0] if len(found) == 1 else "mixed"
    return name, "; ".join(reason for _, reason in found) + " -- from " + ", ".join(facts)


def verdict(rec: Option, alternatives: list, slo) -> str:
    """How the recommendation compares with each alternative -- targets, cost or power, latency -- in one
    paragraph; by the same rule and figures as the tables."""
    parts = []
    est = rec.estimate
    if est is not None and est.p95_ms is not None:
        parts.append(f"The {rec.name} plan is estimated at p95 {est.p95_ms:.3g} ms"
                     + (f" against a {slo:.3g} ms SLO" if slo else "")
                     + f", capacity {est.max_rps:.3g} req/s; it " + ("meets every target." if rec.tier == 0 else
                                                                     "misses: " + "; ".join(rec.judged) + "."))
    elif est is not None:
        parts.append(f"The {rec.name} plan cannot carry the sizing rate: capacity {est.max_rps:.3g} req/s, "
                     f"saturating {est.bottleneck}.")
    for alt in alternatives:
        if not alt.feasible or alt.estimate is None:
            parts.append(f"{alt.name}: infeasible ({'; '.join(alt.notes)}).")
            continue
        if alt.tier > rec.tier:
            parts.append(f"vs {alt.name}: it misses where {rec.name} does not ({'; '.join(alt.judged)}).")
            continue
        known = ranking_cost(rec) < math.inf and ranking_cost(alt) < math.inf
        if known:
            a, b = ranking_cost(rec), ranking_cost(alt)
            word = "about the same cost" if not _order(a, b, COST_TIE) else "cheaper" if a < b else "dearer"
            text = f"{word} {_how_paid(rec)} ({a:,.0f} vs {b:,.0f})"
        else:
            unknown = sorted(set((rec.tco or {}).get("unknown", []) + (alt.tco or {}).get("unknown", [])))
            a, b = _power(rec), _power(alt)
            word = ("about the same" if not _order(a, b, COST_TIE) else "less" if a < b else "more")
            text = (f"cost not comparable (unknown: {', '.join(unknown)}); {word} provisioned power "
                    f"({_fmt_w(rec.provisioned_w)} vs {_fmt_w(alt.provisioned_w)})")
        p95 = _order(_p95(rec), _p95(alt), P95_TIE)
        text += ("" if not p95 or math.isinf(_p95(alt)) else
                 f", {'lower' if p95 < 0 else 'higher'} p95 ({_p95(rec):.3g} vs {_p95(alt):.3g} ms)")
        parts.append(f"vs {alt.name}: {text}.")
    return " ".join(parts)
