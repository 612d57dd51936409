"""The view of a simulation.json: plans side by side, latency, stages, engines' queues over time.

Usage::

    view = simulation_view(json.load(open("simulation.json")))
    view["sections"], view["figures"]

Also the "Simulated plans" section of the portrait report (``simulation_section``) when
``loadprobe report`` is given a simulation.json.
"""

from __future__ import annotations

from . import figures as fig
from .units import ms, num, pct

MAX_TIMELINE_PLANS = 4  # queue-over-time charts drawn; the tables hold every plan


def simulation_view(sim: dict) -> dict:
    sections, figures = simulation_sections(sim)
    plans = list(sim["plans"])
    return {
        "title": "Simulated plans" if len(plans) > 1 else f"Simulated plan: {plans[0]}",
        "subtitle": f"{sim['requests']:,} requests, {sim['arrivals']}; service times: {sim['service_times']}; "
                    f"seed {sim['seed']} (source {sim['source']})",
        "sections": sections,
        "figures": figures,
    }


def simulation_sections(sim: dict) -> tuple[list, dict]:
    """The sections and their figures, for a page of their own or a portrait report."""
    plans = sim["plans"]
    figures = {"sim_latency": _latency(plans)}
    timelines = []
    for i, (name, r) in enumerate(list(plans.items())[:MAX_TIMELINE_PLANS]):
        key = f"sim_queue_{i}"
        figures[key] = _queues(name, r)
        timelines.append((key, f"Queue length of each engine of {name} over the simulated run"))
    figures = {k: v for k, v in figures.items() if v is not None}
    best = min(plans, key=lambda n: plans[n]["latency_ms"]["p95"] if plans[n]["latency_ms"]["p95"] is not None
               else float("inf"))
    reading = (f"{len(plans)} plan{'s' if len(plans) > 1 else ''} replayed under the same {sim['requests']:,} "
               f"arrivals ({sim['arrivals']}). Lowest p95: {best}. Figures are simulated, not measured.")
    sections = [
        _section("sim-plans", "Plans", reading, figures, [("sim_latency", "p50, p95 and p99 end-to-end latency of "
                                                                         "each plan (ms)")],
                 tables=[_plans_table(plans)]),
        _section("sim-stages", "Stages", "Per-stage latency from reaching the stage to leaving it, retries "
                 "included; failover is the share of the stage's attempts moved to its fallback.", figures, [],
                 tables=[_stages_table(plans)]),
        _section("sim-engines", "Engines", "Utilisation is busy slot-time over slots x the run; queue lengths are "
                 "read at 200 evenly spaced instants.", figures, timelines, tables=[_engines_table(plans)]),
    ]
    return sections, figures


def _section(id_: str, title: str, reading: str, figures: dict, charts: list, *, tables: list) -> dict:
    shown = [{"id": key, "label": label} for key, label in charts if key in figures]
    return {"id": id_, "title": title, "reading": reading, "charts": shown, "tables": tables}


def _plans_table(plans: dict) -> dict:
    rows = []
    for name, r in plans.items():
        n = r["requests"] or 1
        p, cost = r.get("power") or {}, r.get("tco")
        rows.append([name, ms(r["latency_ms"]["p50"]), ms(r["latency_ms"]["p95"]), ms(r["latency_ms"]["p99"]),
                     num(r["throughput_rps"]), pct(r["outcomes"]["rejected"] / n), pct(r["outcomes"]["timeout"] / n),
                     pct(max((s["failover_share"] for s in r["stages"].values()), default=0.0)),
                     num(p.get("mean_w")), num(p.get("energy_per_request_j")),
                     num(cost["total"]) + ("" if cost.get("comparable", not cost.get("purchase_unknown")) else " (lower bound)")
                     + (" rented" if cost.get("mode") == "rent" else "") if cost else "-"])
    return {"caption": "Each plan under the same arrivals",
            "headers": ["plan", "p50", "p95", "p99", "completed/s", "rejected", "timed out", "failover (max)",
                        "mean power W", "J per request", "cost of ownership"], "rows": rows}


def _stages_table(plans: dict) -> dict:
    rows = []
    for name, r in plans.items():
        for stage, s in r["stages"].items():
            rows.append([f"{name} / {stage}", ms(s["p50"]), ms(s["p95"]), ms(s["p99"]), f"{s['timeouts']:,}",
                         f"{s['retries']:,}", pct(s["failover_share"])])
    return {"caption": "Stages of each plan", "headers": ["plan / stage", "p50", "p95", "p99", "timeouts", "retries",
                                                          "failover"], "rows": rows, "collapsed": len(rows) > 24}


def _engines_table(plans: dict) -> dict:
    rows = []
    for name, r in plans.items():
        for engine, e in r["engines"].items():
            rows.append([f"{name} / {engine}", pct(e["utilisation"]), f"{e['executions']:,}", num(e["mean_batch"]),
                         num(e["queue_mean"]), f"{e['queue_max']:,}", num(e.get("power_w"))])
    return {"caption": "Engines of each plan", "headers": ["plan / engine", "utilisation", "executions", "mean batch",
                                                           "mean queue", "max queue", "power W"], "rows": rows}


def _latency(plans: dict) -> dict | None:
    names = [n for n, r in plans.items() if r["latency_ms"]["p50"] is not None]
    if not names:
        return None
    data = [{"type": "bar", "name": q, "x": [fig.text(n) for n in names],
             "y": [plans[n]["latency_ms"][q] for n in names], "marker": {"color": fig.PALETTE[i]}}
            for i, q in enumerate(("p50", "p95", "p99"))]
    return {"data": data, "layout": {"barmode": "group", "yaxis": {"title": {"text": "ms"}},
                                     "legend": {"orientation": "h"}}}


def _queues(name: str, r: dict) -> dict | None:
    timeline = r.get("timeline") or {}
    t = timeline.get("t_s") or []
    if not t:
        return None
    data = [{"type": "scatter", "mode": "lines", "name": fig.text(engine), "x": t, "y": e["queue"],
             "line": {"color": fig.PALETTE[i % len(fig.PALETTE)], "shape": "hv"}}
            for i, (engine, e) in enumerate(timeline["engines"].items())]
    return {"data": data, "layout": {"xaxis": {"title": {"text": "seconds since the first arrival"}},
                                     "yaxis": {"title": {"text": "requests queued"}}, "legend": {"orientation": "h"}}}
