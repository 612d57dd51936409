"""Choosing between a plan's options and saying why: the recommendation, the scenario, the verdict.

Usage (``planner.recommend`` does this)::

    recommended, alternatives = select(options)           # the cheapest to own that meets the targets
    name, why = name_scenario(portrait, constraints, profiles, slo_ms)   # "online-api", "offline-bulk", ...
    verdict(recommended, alternatives, slo_ms)            # one paragraph comparing them
"""

from __future__ import annotations

import math

from .constraints import Constraints
from .options import ranking_cost
from .result import Option

__all__ = ["name_scenario", "select", "verdict"]


def select(options: list) -> tuple[Option, list]:
    """The option to recommend: the cheapest to own among those meeting the SLO and power budget.

    The rule-based hybrid comes first; a single-engine plan replaces it only when it is
    cheaper over the plan's lifetime by more than 1%, and the hybrid's notes say so. A
    single-engine plan that places every stage exactly as the hybrid does is dropped.
    """
    hybrid, rest = options[0], []
    for o in options[1:]:
        same = o.feasible and [(d.stage, d.engine) for d in o.decisions] == \
            [(d.stage, d.engine) for d in hybrid.decisions]
        if same:
            hybrid.notes.append(f"the stage rules place every stage as the {o.name} plan does")
        else:
            rest.append(o)
    ok = [o for o in [hybrid, *rest] if o.feasible and o.meets_slo is not False]
    best = hybrid
    if hybrid in ok:
        cheaper = [o for o in ok if ranking_cost(o) < 0.99 * ranking_cost(hybrid)]
        if cheaper:
            best = min(cheaper, key=ranking_cost)
            best.notes.append(f"recommended over the stage-by-stage hybrid: it also meets the targets and costs "
                              f"{ranking_cost(best):,.0f} vs {hybrid.tco['total']:,.0f}"
                              + ("" if hybrid.tco.get("comparable") else " or more") + " to own")
    elif ok:
        best = min(ok, key=lambda o: (ranking_cost(o), o.estimate.p95_ms or math.inf))
        best.notes.append("recommended because the stage-by-stage hybrid misses the SLO or the power budget")
    return best, [o for o in [hybrid, *rest] if o is not best]


def name_scenario(portrait, constraints: Constraints, profiles, slo) -> tuple[str, str]:
    """The four dimensions -> online API, offline bulk, edge/power-bound, LLM split, or mixed."""
    traffic, req = portrait.traffic, portrait.requests
    batch_means = [p.batch_mean for p in profiles if p.batch_mean]
    batch = max(batch_means) if batch_means else 1.0
    p95 = req.latency_ms.p95 if req is not None and req.latency_ms else None
    facts = [f"latency p95 {p95:.3g} ms" if p95 else "no request latency",
             f"peak {traffic.peak_rps:.3g} req/s (mean {traffic.mean_rps:.3g}, peak/mean "
             f"{traffic.peak_to_mean or 0:.3g})" if traffic else "no traffic series",
             f"largest mean batch {batch:.3g}",
             f"power budget {constraints.power_budget_w:g} W" if constraints.power_budget_w else "no power budget"]
    found = []
    names = {p.name.lower() for p in profiles}
    intensities = [p.flops_per_byte for p in profiles if p.flops_per_byte]
    llm = any("prefill" in n for n in names) and any("decode" in n or "token" in n for n in names)
    if llm or any(p.name for p in profiles if getattr(p, "tokens", False)):
        found.append(("llm-prefill-decode-split", "prefill is compute-heavy and decode bandwidth-bound "
                      f"({max(intensities):.3g} vs {min(intensities):.3g} FLOP/byte)" if intensities else
                      "prefill and decode stages"))
    if constraints.power_budget_w is not None and constraints.power_budget_w <= 150:
        found.append(("edge-power-bound", f"a {constraints.power_budget_w:g} W power budget"))
    if (slo is None or slo >= 1000) and batch >= 8:
        found.append(("offline-bulk", f"large batches ({batch:.3g}) and a loose latency target"))
    elif slo is not None and slo < 1000:
        found.append(("online-api", f"a {slo:.3g} ms p95 target with batches of {batch:.3g}"))
    if not found:
        found.append(("online-api", "request/response traffic"))
    name = found[0][0] if len(found) == 1 else "mixed"
    return name, "; ".join(reason for _, reason in found) + " -- from " + ", ".join(facts)


def verdict(rec: Option, alternatives: list, slo) -> str:
    """How the recommendation compares with each alternative -- latency, targets, cost -- in one paragraph."""
    parts = []
    est = rec.estimate
    if est is not None and est.p95_ms is not None:
        parts.append(f"The {rec.name} plan is estimated at p95 {est.p95_ms:.3g} ms"
                     + (f" against a {slo:.3g} ms SLO ({'met' if rec.meets_slo else 'NOT met'})" if slo else "")
                     + f", capacity {est.max_rps:.3g} req/s.")
    elif est is not None:
        parts.append(f"The {rec.name} plan cannot carry the sizing rate: capacity {est.max_rps:.3g} req/s, "
                     f"saturating {est.bottleneck}.")
    for alt in alternatives:
        if not alt.feasible:
            parts.append(f"{alt.name}: infeasible ({'; '.join(alt.notes)}).")
            continue
        missing = sorted(set(_unknowns(rec) + _unknowns(alt)))
        if missing:
            parts.append(f"vs {alt.name}: cost not comparable (no price or power figure for {', '.join(missing)}: "
                         "give --price DEVICE=AMOUNT or a catalog entry)"
                         + ("" if alt.meets_slo is not False else f"; {alt.name} misses the targets") + ".")
            continue
        rec_total, alt_total = rec.tco["total"], alt.tco["total"]
        same = abs(rec_total - alt_total) <= 0.01 * max(rec_total, alt_total, 1.0)
        word = "about the same cost" if same else "cheaper" if rec_total < alt_total else "dearer"
        reason = ""
        if word == "dearer":
            reason = (f", but {alt.name} misses the targets" if alt.meets_slo is False else
                      f", and {alt.name} also meets the targets: prefer it if its lower cost matters more than "
                      f"{rec.name}'s lower latency")
        parts.append(f"vs {alt.name}: {word} to own ({rec_total:,.0f} vs {alt_total:,.0f}){reason}.")
    return " ".join(parts)


def _unknowns(option: Option) -> list:
    if not option.tco:
        return ["(no estimate)"]
    return list(option.tco.get("purchase_unknown", [])) + list(option.tco.get("power_unknown", []))
