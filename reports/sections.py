"""The sections of the single-run report: for each, a one-line reading, its charts and its tables.

This is the page's content as plain data (strings, numbers, lists); the template lays it
out and escapes it, ``figures.py`` draws the charts. A section whose data the portrait
lacks says why in its reading instead of disappearing.

Usage::

    view = portrait_view(portrait, plans=json.load(open("plans.json")), pipeline_yaml=text)
    view["cards"], view["sections"], view["figures"]
"""

from __future__ import annotations

from . import figures as fig
from .headline import batched_stage, headline, latency_source
from .llm import llm_figures, llm_reading, llm_table
from .precision import precision_checks, precision_section
from .units import NONE, duration, ms, num, pct, si

MAX_SKIPPED_SHOWN = 100


def portrait_view(portrait, plans: dict | None = None, pipeline_yaml: str | None = None,
                  simulation: dict | None = None, align=()) -> dict:
    """Everything the portrait template shows; ``simulation`` is a simulation.json to add, ``align``
    loadprobe align verdicts (the plan's own are shown without it)."""
    p, q = portrait, portrait.data_quality
    figures = {**fig.portrait_figures(p), **llm_figures(p)}
    sections = [_traffic(p, figures), _shares(p, figures), _latency(p, figures), _batch(p, figures),
                _devices(p, figures), _energy(p, figures), _roofline(p, figures), _bottlenecks(p)]
    if p.llm is not None:
        sections.insert(1, _llm(p, figures))  # what an LLM service's users measure comes first
    if plans:
        sections.append(_plan(plans, pipeline_yaml))
    precision, precision_figures = precision_section(precision_checks(plans, align))
    if precision is not None:
        sections.append(precision)
        figures.update(precision_figures)
    if simulation:
        from .simulation import simulation_sections

        simulated, simulated_figures = simulation_sections(simulation)
        sections += simulated
        figures.update(simulated_figures)
    sections.append(_quality(p))
    services = ", ".join(q.services) or "unknown service"
    return {
        "title": f"Load portrait: {services}",
        "subtitle": f"{q.start or NONE} .. {q.end or NONE} UTC ({duration(q.span_s)}), {len(q.hosts)} host(s), "
                    f"{q.processes} process(es); portrait {p.version} by loadprobe {p.loadprobe_version}, "
                    f"{p.generated_at}",
        "cards": cards(p),
        "sections": sections,
        "figures": figures,
    }


def cards(p) -> list[dict]:
    """The four dimensions: latency, throughput, batch, power."""
    h = headline(p)
    source, _ = latency_source(p)
    t = p.traffic
    batch = batched_stage(p)
    timed = h["latency_p95_ms"] is not None
    latency = {"title": "Latency", "value": f"p95 {ms(h['latency_p95_ms'])} ms" if timed else "not recorded",
               "detail": f"p50 {ms(h['latency_p50_ms'])} ms · p99 {ms(h['latency_p99_ms'])} ms" if timed
               else "no span carries a duration",
               "note": "end to end, per request" if source == "requests" else
               (f"stage {source} (no request spans)" if source else "no timed spans")}
    throughput = {"title": "Throughput", "value": f"{num(h['peak_rps'])} req/s peak",
                  "detail": f"mean {num(h['mean_rps'])} req/s · peak/mean {num(t.peak_to_mean) if t else NONE}",
                  "note": f"peak over the busiest {t.bucket_s} s bucket" if t else "no arrivals"}
    batching = {"title": "Batch", "value": f"{num(h['batch_mean'])} mean" if batch else "not recorded",
                "detail": f"p99 {h['batch_p99']} · max {batch.batch.max}" if batch else "set batch= on @probe",
                "note": f"stage {batch.name}" if batch else "no stage recorded batch sizes"}
    measured = h["power_w"] is not None
    power = {"title": "Power", "value": f"{num(h['power_w'])} W average" if measured else "not measured",
             "detail": (f"{num(h['energy_per_request_j'])} J per request" if h["energy_per_request_j"] is not None
                        else "energy per request: -"),
             "note": "sum over the sampled devices" if measured else
             "no power readings: RAPL (CPU) or NVML (GPU) were not available where it was recorded"}
    return [latency, throughput, batching, power]


def _section(id_: str, title: str, reading: str, figures: dict, charts: list, **extra) -> dict:
    shown = [{"id": cid, "label": label} for cid, label in charts if cid in figures]
    return {"id": id_, "title": title, "reading": reading, "charts": shown, **extra}


def _traffic(p, figures) -> dict:
    t = p.traffic
    if t is None:
        return _section("traffic", "Request rate", "No request arrivals in this data.", figures, [])
    noun = "requests" if t.source == "requests" else "root spans"
    reading = (f"{t.requests:,} {noun} over {duration(t.duration_s)}: mean {num(t.mean_rps)}/s, "
               f"peak {num(t.peak_rps)}/s ({num(t.peak_to_mean)}x the mean, per {t.bucket_s} s)")
    if t.peak_window is not None:
        reading += f" at {t.peak_window.start}"
    if t.valley_window is not None:
        reading += f", quietest {num(t.valley_window.rate_per_s)}/s"
    cv = t.interarrival_cv
    if cv is not None:
        reading += ("; arrivals are bursty" if cv > 1.2 else "; arrivals are more regular than random" if cv < 0.8
                    else "; arrivals look random (Poisson-like)") + f" (inter-arrival CV {cv:.2f})"
    charts = [("arrivals", "Requests per second over time, with the peak and valley windows marked")]
    if t.hour_of_day:
        charts.append(("hours", "Mean request rate by hour of day (UTC)"))
    return _section("traffic", "Request rate", reading + ".", figures, charts)


def _llm(p, figures) -> dict:
    return _section("llm", "LLM serving", llm_reading(p.llm), figures, [
        ("llm_latency", "Time to first token, time per output token and inter-token latency (CDFs, log scale)"),
        ("llm_goodput", "Goodput: the share of requests within both targets as one target moves, the other held "
                        "(circles: the targets held to)"),
        ("llm_tokens", "Output and prompt tokens per second over time"),
        ("llm_lengths", "Requests by prompt and output length (power-of-two bins; area: requests)"),
        ("llm_engine", "The engine's running and waiting requests and its KV-cache use: its scraped metrics, else "
                       "counted from its spans (mean per bucket)"),
        ("llm_phases", "Time in prefill and in decode, per engine")], tables=[llm_table(p.llm)])


def _shares(p, figures) -> dict:
    r = p.requests
    stages = fig.request_stages(p)
    if r is None:
        reading = "No request spans, so request time cannot be split: wrap requests in loadprobe.request()."
    elif r.unattributed_share is None:
        reading = "Request durations were not recorded (imported arrival-only data), so request time cannot be split."
    elif not stages:
        reading = "Requests have no probed stages inside them: all their time is unattributed."
    else:
        top = max(stages, key=lambda s: s.self_share)
        mean = r.latency_ms.mean if r.latency_ms else None
        queued = f", {pct(r.queued_share, 0)} is spent queued before a stage" if r.queued_share else ""
        reading = (f"A mean request takes {ms(mean)} ms: {top.name} is the largest part ({pct(top.self_share, 0)})"
                   f"{queued}, and {pct(r.unattributed_share, 0)} of the time is in no probed stage"
                   + (f" ({pct(r.outside_server_share, 0)} outside the server, as the load client saw it: network, "
                      "connections, its own queueing)." if r.outside_server_share is not None else "."))
    return _section("shares", "Where request time goes", reading, figures,
                    [("shares", "A mean request's time split by stage (self time), in run order, then the time queued "
                                "before stages and the time in no probed stage")])


def _latency(p, figures) -> dict:
    source, lat = latency_source(p)
    if lat is None:
        reading = "No span carries a duration (imported arrival-only data)."
    else:
        who = "End to end" if source == "requests" else f"For {source}"
        reading = f"{who}: p50 {ms(lat.p50)} ms, p95 {ms(lat.p95)} ms, p99 {ms(lat.p99)} ms"
        roots = fig.root_stages(p)
        tails = [s for s in p.stages if s.name not in roots and s.latency_ms.count >= 20 and s.latency_ms.p50]
        if tails:
            wide = max(tails, key=lambda s: (s.latency_ms.p99 / s.latency_ms.p50, s.name))
            reading += (f"; the widest tail is {wide.name}'s: p99 {ms(wide.latency_ms.p99)} ms is "
                        f"{wide.latency_ms.p99 / wide.latency_ms.p50:.1f}x its p50")
        reading += "."
    rows = []
    for s in p.stages:
        lat_s = s.latency_ms
        rows.append([s.name, f"{s.count:,}", ms(lat_s.p50), ms(lat_s.p95), ms(lat_s.p99), pct(s.share),
                     pct(s.self_share), pct(s.cpu_share), pct(s.error_rate + s.timeout_rate),
                     ", ".join(s.engines) or NONE,
                     f"{num(s.batch.mean)} / {s.batch.p99}" if s.batch else NONE,
                     ("dynamic" if s.shapes.dynamic_shape else "fixed") if s.shapes else NONE])
    table = {"caption": "Every stage, by share of request time",
             "headers": ["stage", "spans", "p50 ms", "p95 ms", "p99 ms", "share", "self share", "CPU share", "errors",
                         "engine", "batch mean / p99", "shapes"], "rows": rows, "left": [9, 11]}
    return _section("latency", "Latency by stage", reading, figures,
                    [("latency", "Cumulative latency distribution of each stage on a log axis, "
                                 "p50, p95 and p99 marked")], tables=[table])


def _batch(p, figures) -> dict:
    stage = batched_stage(p)
    if stage is None:
        reading = "No stage recorded batch sizes: pass batch= to @probe where a stage runs batches."
    else:
        b = stage.batch
        reading = f"{stage.name} runs batches of {num(b.mean)} on average (p99 {b.p99}, max {b.max})"
        if b.fit is not None:
            r2 = "n/a" if b.fit.r2 is None else f"{b.fit.r2:.2f}"
            reading += (f"; each extra item adds {num(b.fit.b_ms_per_item)} ms to a {num(b.fit.a_ms)} ms base "
                        f"(r² {r2}, {b.fit.n:,} spans)")
        reading += "."
    return _section("batch", "Batch sizes", reading, figures,
                    [("batch", "How often each batch size ran, per batched stage"),
                     ("batch_fit", "Span latency against batch size: the least-squares fit of each batched stage")])


def _devices(p, figures) -> dict:
    util = [m for m in p.devices.metrics if m.metric == "util_pct" and m.device != "memory"]
    if not util and p.timeline is None:
        reading = ("No device samples in this data (recorded with sample_devices=False or imported), and no "
                   "stage activity over time (a portrait before 1.2 has none: re-run loadprobe analyze).")
    else:
        parts = []
        if util:
            busiest = max(util, key=lambda m: (m.mean, m.host, m.device))
            idle = p.devices.idle_share.get(f"{busiest.host}/{busiest.device}")
            parts.append(f"The busiest device, {busiest.host}/{busiest.device}, "
                         f"averaged {busiest.mean:.0f}% utilisation "
                         f"(p95 {busiest.p95:.0f}%)" + (f", idle {pct(idle, 0)} of the sampled seconds"
                                                         if idle is not None else ""))
        watts = [m for m in p.devices.metrics if m.metric == "power_w"]
        parts.append(f"{num(sum(m.mean for m in watts))} W drawn on average" if watts else
                     "no power readings (RAPL or NVML were not available)")
        if p.timeline is None:
            parts.append("no series over time (a portrait before 1.2: re-run loadprobe analyze)")
        reading = "; ".join(parts) + "."
        reading = reading[0].upper() + reading[1:]
    rows = [[m.host, m.device, m.metric, *(metric_value(m.metric, v) for v in (m.mean, m.p95, m.max)), f"{m.seconds:,}"]
            for m in p.devices.metrics]
    tables = [{"caption": f"Device metrics (per-second means over the sampled seconds), {len(rows)} rows",
               "headers": ["host", "device", "metric", "mean", "p95", "max", "seconds"], "rows": rows,
               "left": [1, 2], "collapsed": len(rows) > 20}] if rows else []
    step = f" ({p.timeline.bucket_s} s buckets)" if p.timeline else ""
    return _section("devices", "Devices over time", reading, figures,
                    [("devices", f"Device utilisation, memory and power over time{step}, "
                                 "with each stage's activity (spans in progress) shaded")], tables=tables)


def _energy(p, figures) -> dict:
    """Energy per stage with its bounds, and each device's split: idle, attributed to stages, unattributed."""
    e = p.energy
    if e is None or not e.devices:
        return _section("energy", "Energy", "No device power was sampled (NVML or RAPL were not available), so "
                        "there is no energy per stage.", figures, [])
    stages = [s for s in p.stages if s.energy_per_item_j is not None]
    parts = []
    if e.request_j is not None:
        parts.append(f"A request takes {num(e.request_j.mean)} J on the sampled devices "
                     f"(95% interval {num(e.request_j.lo)} to {num(e.request_j.hi)})")
    if stages:
        top = max(stages, key=lambda s: (s.energy_per_request_j.mean if s.energy_per_request_j else 0.0, s.name))
        if top.energy_per_request_j is not None:
            parts.append(f"{top.name} the most, {num(top.energy_per_request_j.mean)} J per request")
    idle = sum(d.idle_j for d in e.devices.values())
    measured = sum(d.measured_j for d in e.devices.values())
    if measured > 0:
        parts.append(f"{pct(idle / measured, 0)} of the energy measured was idle power, drawn whatever the load")
    reading = "; ".join(parts) + "." if parts else "Power was sampled, but no stage span named a sampled engine."

    def bounds(b, digits="{:.3g}"):
        return "-" if b is None else f"{digits.format(b.mean)} ({digits.format(b.lo)} to {digits.format(b.hi)})"

    tables = [{"caption": "Energy per stage (J, with 95% intervals)",
               "headers": ["stage", "per item", "per request", "per token"],
               "rows": [[s.name, bounds(s.energy_per_item_j), bounds(s.energy_per_request_j),
                         bounds(s.energy_per_token_j)] for s in stages], "left": [0]},
              {"caption": "Energy per device: measured = idle + attributed + unattributed (J)",
               "headers": ["device", "measured", "idle W", "idle", "attributed", "unattributed", "source"],
               "rows": [[key, num(d.measured_j), "-" if d.idle_w is None else num(d.idle_w), num(d.idle_j),
                         num(sum(d.attributed_j.values())), num(d.unattributed_j), f"{d.source}, idle from {d.idle_from}"]
                        for key, d in sorted(e.devices.items())], "left": [0, 6]}]
    return _section("energy", "Energy", reading, figures,
                    [("energy", "Energy per item by stage, with 95% intervals (bootstrap over the sampled seconds)")],
                    tables=tables)


def _roofline(p, figures) -> dict:
    stages = [s for s in p.stages if s.intensity is not None and s.intensity.flops_per_byte]
    roofs = p.roofline_roofs
    if not stages:
        reading = ("No stage recorded both FLOPs and bytes: pass flops= and bytes= to @probe to place stages "
                   "on a roofline.")
    elif roofs is None:
        reading = ("No roofline device was chosen, so the stages are shown without roofs: "
                   "run loadprobe analyze --device ID (e.g. nvidia-l4; `loadprobe catalog` lists them).")
    else:
        placed = [s for s in stages if s.intensity.roofline is not None]
        top = max(placed or stages, key=lambda s: (s.share or 0.0, s.name))
        reading = f"Against {roofs.name} at {roofs.precision}: "
        if top.intensity.roofline is not None:
            r = top.intensity.roofline
            reading += (f"{top.name} is {r.bound}-bound at {num(top.intensity.flops_per_byte)} FLOP/byte "
                        f"(ridge {num(r.ridge_flops_per_byte)})")
            if r.pct_of_roof is not None:
                reading += f", reaching {num(r.pct_of_roof, 2)}% of its roof"
        else:
            reading += f"{top.name} runs at {num(top.intensity.flops_per_byte)} FLOP/byte"
        reading += "."
    rows = [[s.name, num(s.intensity.flops_per_byte), si(s.intensity.achieved_flops_per_s, "FLOP/s"),
             si(s.intensity.achieved_bytes_per_s, "B/s"),
             s.intensity.roofline.bound if s.intensity.roofline else NONE,
             f"{num(s.intensity.roofline.pct_of_roof, 2)}%" if s.intensity.roofline and
             s.intensity.roofline.pct_of_roof is not None else NONE] for s in stages]
    tables = [{"caption": "Stages with FLOPs and bytes", "headers": ["stage", "FLOP/byte", "achieved", "memory traffic",
                                                                     "bound", "of roof"], "rows": rows}] if rows else []
    return _section("roofline", "Roofline", reading, figures,
                    [("roofline", "Each stage's arithmetic intensity and achieved FLOP/s against the device's "
                                  "compute and memory roofs (log-log)")], tables=tables)


def metric_value(metric: str, value) -> str:
    """A device metric in its unit: bytes and bytes/s with SI prefixes, the rest as plain figures."""
    if metric.endswith("_bytes"):
        return si(value, "B")
    if metric.endswith("_bps"):
        return si(value, "B/s")
    return num(value)


def evidence_value(value) -> str:
    if isinstance(value, float):
        return num(value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {evidence_value(v)}" for k, v in value.items()) or NONE
    if isinstance(value, (list, tuple)):
        return ", ".join(evidence_value(v) for v in value) or NONE
    return NONE if value is None else str(value)


# What each kind of verdict's score measures (docs/metrics.md, bottlenecks): a bare "67%" says nothing.
SCORE_MEANS = {"dominant_stage": "of request time in the stage itself", "memory_bound": "of request time",
               "queueing": "of request time", "unattributed_time": "of request time outside every stage",
               "dynamic_shapes": "weight: half the stage's share of request time",
               "underused_accelerator": "of the device's time idle", "errors": "of requests failed or timed out",
               "bursty_arrivals": "burstiness: 1 - mean/peak rate"}


def _bottlenecks(p) -> dict:
    verdicts = [{"title": v.title, "kind": v.kind, "score": pct(v.score, 0),
                 "score_means": SCORE_MEANS.get(v.kind, "weight"), "advice": v.advice,
                 "evidence": [(k.replace("_", " "), evidence_value(x)) for k, x in v.evidence.items()]}
                for v in p.bottlenecks]
    reading = (f"{len(verdicts)} verdict(s), most important first: {verdicts[0]['title']}." if verdicts
               else "No bottleneck rule fired on this data.")
    return {"id": "bottlenecks", "title": "Bottlenecks", "reading": reading, "charts": [], "verdicts": verdicts}


def _band(band) -> str:
    """A figure's interval over resampled recordings (plans.json ``intervals``), as " [lo-hi]"."""
    return f" [{ms(band[0])}-{ms(band[1])}]" if band else ""


def _plan(plans: dict, pipeline_yaml: str | None) -> dict:
    recommended = plans.get("recommended") or {}
    stages = []
    for d in recommended.get("stages") or []:
        fallback = d.get("fallback")
        service = d.get("service_time_ms") or {}
        stages.append({
            "cells": [d.get("stage"), d.get("engine", NONE) + (f" ({d['device']})" if d.get("device") else ""),
                      d.get("precision", NONE), str(d.get("batch", NONE)), num(d.get("window_ms")),
                      num(d.get("timeout_ms")), str(d.get("max_concurrency", NONE)),
                      f"{fallback.get('engine')} up to {pct(fallback.get('max_ratio'), 0)}" if fallback else NONE,
                      f"{ms(service.get('p50_ms'))} ({service.get('source', NONE)})"],
            "why": [(k.replace("_", " "), evidence_value(v)) for k, v in (d.get("why") or {}).items()],
        })
    options = []
    for o in [recommended, *(plans.get("alternatives") or [])]:
        if not o:
            continue
        est = o.get("estimate") or {}
        tco = o.get("tco") or {}
        feasible = o.get("feasible", True) and est
        cost = NONE if not tco or tco.get("total") is None else (
            num(tco["total"]) if tco.get("comparable", True) else f">= {num(tco['total'])}")
        options.append([o.get("name", NONE) + (" (recommended)" if o is recommended else ""),
                        {True: "yes", False: "no"}.get(o.get("meets_slo"), NONE) if feasible else "infeasible",
                        ms(est.get("p50_ms")), ms(est.get("p95_ms")) + _band((o.get("intervals") or {}).get("p95_ms")),
                        ms(est.get("p99_ms")), num(est.get("max_rps")),
                        num(o.get("provisioned_power_w")), num(est.get("power_w")),
                        num(est.get("energy_per_request_j")), cost,
                        "; ".join(([o["sizing"]] if o.get("sizing") else []) + (o.get("notes") or [])) or NONE])
    constraints = plans.get("constraints") or {}
    years = constraints.get("years")
    reading = plans.get("verdict") or f"Recommended plan: {recommended.get('name', NONE)}."
    return {
        "id": "plan", "title": "Recommended plan", "reading": reading, "charts": [],
        "scenario": f"{plans.get('scenario', NONE)}: {plans.get('scenario_why', '')}",
        "estimates_are": plans.get("estimates_are"),
        "stage_headers": ["stage", "engine", "precision", "batch", "window ms", "timeout ms", "concurrency",
                          "fallback", "service p50 ms"],
        "stages": stages,
        "option_headers": ["plan", "meets targets", "p50 ms", "p95 ms", "p99 ms", "max req/s", "max W", "mean W",
                           "J/request",
                           f"{num(years)}-year cost" if years else "cost", "notes"],
        "options": options,
        "pricing": _pricing(plans, [recommended, *(plans.get("alternatives") or [])], constraints.get("basis_why")),
        "sizing": (f"at {num(plans.get('sizing_rate_rps'))} req/s" + (f": {plans['sizing_why']}" if plans.get("sizing_why")
                                                                     else "")) if plans.get("sizing_rate_rps") else "",
        "pipeline_yaml": pipeline_yaml,
    }


def _pricing(plans: dict, options: list, basis_why: str | None) -> list[str]:
    """What each plan's cost holds, and every price or rate used with its source and date."""
    lines = [f"Costs are {basis_why}."] if basis_why else []
    lines += [f"{o.get('name', NONE)}: {o['tco']['includes']}." for o in options
              if o and isinstance(o.get("tco"), dict) and o["tco"].get("includes")]
    figures = sorted({str(note) for o in options if o and isinstance(o.get("tco"), dict)
                      for note in (o["tco"].get("figures") or {}).values()})
    lines += [f"Figure used: {note}." for note in figures]
    mix = plans.get("mix")
    if isinstance(mix, dict) and mix.get("cost") is not None:
        from loadprobe.plan.files import mix_text

        text = mix_text(mix)
        lines.append(text[0].upper() + text[1:] + ".")
    return lines


def _quality(p) -> dict:
    q = p.data_quality
    drops = sum(q.recorder.get(k, 0) for k in ("spans_dropped", "spans_lost", "samples_dropped", "samples_lost"))
    unknown = len(q.counters_unknown)
    issues = len(q.files_skipped) + len(q.warnings) + len(q.clock_warnings)
    reading = (f"{q.rows:,} spans from {q.files_read} file(s) of {q.processes} process(es) on {len(q.hosts)} host(s) "
               f"over {duration(q.span_s)}; ")
    reading += ("nothing skipped, dropped or suspicious." if not issues and not drops
                else f"{issues} warning(s), {drops:,} record(s) lost by the recorder"
                + (f" ({unknown} run(s) without final counters: their loss is unknown)." if unknown else "."))
    facts = [("time span", f"{q.start or NONE} .. {q.end or NONE} UTC ({duration(q.span_s)})"),
             ("hosts", ", ".join(q.hosts) or NONE), ("services", ", ".join(q.services) or NONE),
             ("processes", str(q.processes)), ("files read", f"{q.files_read:,}"),
             ("files skipped", f"{len(q.files_skipped):,}"), ("span rows", f"{q.rows:,}"),
             ("rows outside --since/--until", f"{q.rows_filtered:,}"),
             ("spans without a duration", f"{q.null_durations:,}"),
             ("negative durations (ignored)", f"{q.negative_durations:,}"),
             ("children whose parent is in another file", f"{q.unjoined_children:,}")]
    facts += [(f"recorder: {k.replace('_', ' ')}", f"{v:,}") for k, v in sorted(q.recorder.items())]
    facts.append(("inputs", ", ".join(p.inputs) or NONE))
    return {"id": "quality", "title": "Data quality", "reading": reading, "charts": [], "facts": facts,
            "warnings": list(q.warnings) + list(q.clock_warnings),
            "skipped": [(s.get("path"), s.get("reason")) for s in q.files_skipped[:MAX_SKIPPED_SHOWN]],
            "skipped_more": max(0, len(q.files_skipped) - MAX_SKIPPED_SHOWN)}
