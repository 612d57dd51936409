"""Plotly figure dicts for the load portrait: one function per chart, each None when it has no data.

The figures are plain ``{"data": [...], "layout": {...}}`` dicts, JSON-ready; colours of
text, grids and backgrounds are left to the page so one figure reads in light and dark.
Every string that came from the recorded service goes through :func:`text` first: Plotly
renders a subset of HTML in names and labels, and a stage called ``<b>x</b>`` must show
those characters, not bold text. Long series are averaged down to ``MAX_POINTS`` for
display; the statistics come from the portrait, never from these series.

Usage::

    fig = latency_cdfs(portrait)           # {"data": [...], "layout": {...}} or None
"""

from __future__ import annotations

import html
import math
from datetime import datetime

from loadprobe.analysis.timeline import ENGINE_REQUESTS, engine_series

MAX_POINTS = 2_000  # per trace, for display
MAX_STAGES = 12  # traces per chart; the rest are summed or left to the tables
MAX_LINES_PER_KIND = 4  # devices of one kind drawn one by one; more are drawn as a mean and a band
PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d",
           "#8e8cd8", "#2f9e9e", "#d6616b")
NEUTRAL = "#8c8c8c"  # end to end, unattributed time, "other"
PEAK, VALLEY = "#e45756", "#4c78a8"


def text(value) -> str:
    """A recorded string made safe for Plotly's HTML-like labels: shown as typed, never as markup."""
    return html.escape(str(value), quote=False)


def faint(colour: str, alpha: float = 0.3) -> str:
    """A palette colour as a translucent fill: device lines stay readable over the stage shading."""
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def colours(portrait) -> dict:
    """One colour per stage, by the portrait's stage order, so a stage looks the same in every chart."""
    return {s.name: PALETTE[i % len(PALETTE)] for i, s in enumerate(portrait.stages)}


def thin(values: list, max_points: int = MAX_POINTS) -> tuple[int, list]:
    """(factor, means of consecutive groups of ``factor`` values), at most ``max_points``; None stays a gap."""
    factor = max(1, math.ceil(len(values) / max_points))
    if factor == 1:
        return 1, list(values)
    out = []
    for i in range(0, len(values), factor):
        group = [v for v in values[i:i + factor] if v is not None]
        out.append(float(f"{sum(group) / len(group):.4g}") if group else None)
    return factor, out


def epoch_ms(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000


def figure(data: list, **layout) -> dict:
    # The legend sits above the plot: below, it collides with the x-axis title on narrow screens.
    base = {"margin": {"l": 60, "r": 20, "t": 10, "b": 50},
            "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"}, "hovermode": "closest"}
    base.update(layout)
    return {"data": data, "layout": base}


def axis(title: str, **extra) -> dict:
    return {"title": {"text": title}, "automargin": True, **extra}


def log_ticks(values) -> dict:
    """A log axis labelled at 1, 2 and 5 of each decade the values span (decades only past three), in full
    (0.2, 0.5, 1, 2, ... 500): Plotly's own log ticks label the minor digits alone ("2 3 ... 9 1"),
    and a "2" left of the first labelled decade reads as 2, not 0.2."""
    positive = [v for v in values if v and v > 0 and math.isfinite(v)]
    if not positive:
        return {"type": "log"}
    lo, hi = math.floor(math.log10(min(positive))), math.ceil(math.log10(max(positive)))
    steps = (1, 2, 5) if hi - lo <= 3 else (1,)  # over more decades, 1-2-5 crowds the axis: decades only
    ticks = [m * 10.0 ** e for e in range(lo, hi + 1) for m in steps]
    ticks = [t for t in ticks if min(positive) / 2.5 <= t <= max(positive) * 2.5]
    return {"type": "log", "tickmode": "array", "tickvals": ticks, "ticktext": [f"{t:,.12g}" for t in ticks]}


def root_stages(portrait) -> set:
    """Stages that start requests (no parent joined in their file): their time is the whole request."""
    return {s.name for s in portrait.stages if s.start_offset_ms is None}


# -- traffic ---------------------------------------------------------------------------------


def arrivals(portrait) -> dict | None:
    """Request rate over time, the mean as a dashed line, the peak and valley windows marked."""
    t = portrait.traffic
    if t is None or not t.series:
        return None
    factor, counts = thin([c for _, c in t.series])
    rates = [float(f"{c / t.bucket_s:.4g}") for c in counts]
    start = t.series[0][0] * 1000
    step = t.bucket_s * 1000
    data = [{"type": "scatter", "mode": "lines", "name": "requests per second", "x0": start, "dx": factor * step,
             "y": rates, "line": {"width": 1.5, "shape": "hv", "color": PALETTE[0]},
             "hovertemplate": "%{x}<br>%{y:.3g} req/s<extra></extra>"}]
    for label, window, colour in (("peak", t.peak_window, PEAK), ("valley", t.valley_window, VALLEY)):
        if window is None:
            continue
        middle = (epoch_ms(window.start) + epoch_ms(window.end)) / 2
        data.append({"type": "scatter", "mode": "markers+text", "name": f"{label} window ({t.bucket_s} s)",
                     "x": [middle], "y": [window.rate_per_s], "text": [f"{label} {window.rate_per_s:.3g}/s"],
                     "textposition": "top center", "marker": {"size": 10, "color": colour, "symbol": "diamond"},
                     "hovertemplate": f"{label}: %{{y:.3g}} req/s<br>{window.start} .. {window.end}<extra></extra>"})
    shapes = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": t.mean_rps, "y1": t.mean_rps,
               "line": {"dash": "dash", "width": 1, "color": NEUTRAL}}]
    for window, colour in ((t.peak_window, PEAK), (t.valley_window, VALLEY)):
        if window is not None:
            shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": epoch_ms(window.start),
                           "x1": epoch_ms(window.end), "y0": 0, "y1": 1, "fillcolor": colour, "opacity": 0.15,
                           "line": {"width": 0}, "layer": "below"})
    top = max([t.peak_rps, *(r for r in rates if r is not None)]) * 1.2 or 1  # room for the peak's label
    return figure(data, xaxis=axis("time (UTC)", type="date"), yaxis=axis("requests per second", range=[0, top]),
                   shapes=shapes)


def hour_of_day(portrait) -> dict | None:
    t = portrait.traffic
    if t is None or not t.hour_of_day:
        return None
    data = [{"type": "bar", "name": "mean rate", "x": [f"{h:02d}" for h in range(24)], "y": t.hour_of_day,
             "marker": {"color": PALETTE[0]}, "hovertemplate": "%{x}:00 UTC: %{y:.3g} req/s<extra></extra>"}]
    return figure(data, xaxis=axis("hour of day (UTC)", type="category"), yaxis=axis("mean requests per second"),
                  showlegend=False)


# -- stages ----------------------------------------------------------------------------------


def request_stages(portrait) -> list:
    """Stages inside requests with a self share, in the order they run (by mean start offset)."""
    roots = root_stages(portrait)
    stages = [s for s in portrait.stages if s.name not in roots and s.self_share is not None]
    return sorted(stages, key=lambda s: (s.start_offset_ms, s.name))


def stage_shares(portrait) -> dict | None:
    """A mean request's time split by stage self time, in run order, with unattributed time last."""
    r = portrait.requests
    if r is None or r.unattributed_share is None:
        return None
    stages = request_stages(portrait)
    top = sorted(stages, key=lambda s: -s.self_share)[:MAX_STAGES]
    shown = [s for s in stages if s in top]
    mean_ms = r.latency_ms.mean if r.latency_ms is not None else None
    scale, unit = (mean_ms, "ms") if mean_ms else (100.0, "%")
    colour = colours(portrait)
    parts = [(text(s.name), s.self_share, colour[s.name]) for s in shown]
    rest = sum(s.self_share for s in stages if s not in top)
    if rest > 0:
        parts.append((f"{len(stages) - len(top)} other stages", rest, NEUTRAL))
    if r.queued_share:
        parts.append(("queued before a stage", r.queued_share, "#d4a6c8"))
    parts.append(("in no probed stage", r.unattributed_share, "#bab0ac"))
    data = [{"type": "bar", "orientation": "h", "name": name, "y": ["mean request"], "x": [share * scale],
             "customdata": [f"{100 * share:.1f}%"], "text": [f"{100 * share:.0f}%"], "textposition": "inside",
             "insidetextanchor": "middle", "marker": {"color": c},
             "hovertemplate": f"%{{fullData.name}}: %{{x:.3g}} {unit} (%{{customdata}})<extra></extra>"}
            for name, share, c in parts]
    title = "time per request (ms, mean)" if unit == "ms" else "share of request time (%)"
    return figure(data, barmode="stack", xaxis=axis(title, rangemode="tozero"), yaxis=axis("", showticklabels=False),
                   height=260,
                   legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom", "traceorder": "normal"})


def latency_cdfs(portrait) -> dict | None:
    """Per-stage latency CDFs on a log axis, p50/p95/p99 marked, end to end in grey.

    With requests recorded, their end-to-end line stands for the root stages (which are the requests).
    """
    colour = colours(portrait)
    data = []
    r = portrait.requests
    skip = set()
    if r is not None and r.latency_cdf:
        data += cdf_traces("end to end (requests)", r.latency_cdf, r.latency_ms, NEUTRAL, dash="dash")
        skip = root_stages(portrait)
    stages = [s for s in portrait.stages if s.latency_cdf and s.name not in skip][:MAX_STAGES]
    for s in stages:
        data += cdf_traces(text(s.name), s.latency_cdf, s.latency_ms, colour[s.name])
    if not data:
        return None
    xs = [x for trace in data for x in trace["x"]]
    return figure(data, xaxis=axis("latency (ms, log scale)", **log_ticks(xs)),
                   yaxis=axis("% of spans at or below", range=[0, 100.5]), height=420)


def cdf_traces(name: str, cdf: list, lat, colour: str, dash: str = "solid") -> list:
    line = {"type": "scatter", "mode": "lines", "name": name, "legendgroup": name, "x": [p[0] for p in cdf],
            "y": [round(100 * p[1], 4) for p in cdf], "line": {"color": colour, "width": 2, "dash": dash},
            "hovertemplate": "%{fullData.name}<br>%{y:.3g}% at or below %{x:.3g} ms<extra></extra>"}
    levels = (("p50", 50), ("p95", 95), ("p99", 99))
    marks = [(label, getattr(lat, label), level) for label, level in levels if lat is not None and getattr(lat, label)]
    if not marks:
        return [line]
    points = {"type": "scatter", "mode": "markers", "name": name, "legendgroup": name, "showlegend": False,
              "x": [v for _, v, _ in marks], "y": [lvl for _, _, lvl in marks], "text": [m for m, _, _ in marks],
              "marker": {"color": colour, "size": 8, "symbol": "circle-open", "line": {"width": 2}},
              "hovertemplate": "%{fullData.name} %{text}: %{x:.3g} ms<extra></extra>"}
    return [line, points]


# -- batches ---------------------------------------------------------------------------------


def batched_stages(portrait) -> list:
    batched = [s for s in portrait.stages if s.batch is not None]
    return ([s for s in batched if s.batch.max > 1] or batched)[:MAX_STAGES]


def batch_sizes(portrait) -> dict | None:
    """How often each batch size ran, per batched stage, as a share of its spans; sizes beyond the
    portrait's commonest ones end in one "other" bar, so the chart never hides a tail."""
    colour = colours(portrait)
    stages = batched_stages(portrait)
    tail = [s for s in stages if s.batch.other]
    other = (f"other ({sum(s.batch.other_sizes for s in tail)} sizes, up to {max(s.batch.max for s in tail)})"
             if tail else None)
    data = []
    for s in stages:
        sizes = sorted((int(k), v) for k, v in s.batch.distribution.items())
        total = (sum(v for _, v in sizes) + s.batch.other) or 1
        xs, ys = [k for k, _ in sizes], [v for _, v in sizes]
        if other is not None:  # a category axis: the sizes as labels, then the tail
            xs = [str(k) for k in xs] + [other]
            ys = ys + [s.batch.other]
        data.append({"type": "bar", "name": text(s.name), "x": xs,
                     "y": [round(100 * v / total, 4) for v in ys], "customdata": ys,
                     "marker": {"color": colour[s.name]},
                     "hovertemplate": "%{fullData.name}: batch %{x}, %{y:.3g}% (%{customdata} spans)<extra></extra>"})
    if not data:
        return None
    if other is not None:
        order = sorted({int(k) for s in stages for k in s.batch.distribution})
        xaxis = axis("batch size", type="category", categoryorder="array",
                     categoryarray=[str(k) for k in order] + [other])
    else:  # whole sizes only: one size (a constant 112) must not get ticks at 111.6 ... 112.4
        sizes = sorted({int(k) for s in stages for k in s.batch.distribution})
        xaxis = axis("batch size", tickmode="array", tickvals=_whole_ticks(sizes), tickformat="d")
    return figure(data, barmode="group", xaxis=xaxis, yaxis=axis("% of spans"))


def _whole_ticks(sizes: list[int], most: int = 16) -> list[int]:
    """At most ``most`` whole-number ticks: every size when few, else a round step from 0."""
    if len(sizes) <= most and sizes[-1] - sizes[0] < 4 * most:
        return sizes
    step = next(s for s in (1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 50, 64, 100, 128, 250, 256, 500, 1000, 10**9)
                if (sizes[-1] - sizes[0]) / s <= most)
    return list(range(sizes[0] - sizes[0] % step, sizes[-1] + step, step))


def batch_fits(portrait) -> dict | None:
    """The least-squares batch -> latency line of each batched stage, its mean batch marked."""
    colour = colours(portrait)
    data = []
    for s in batched_stages(portrait):
        fit = s.batch.fit
        if fit is None:
            continue
        xs = [1, max(2, s.batch.max)]
        r2 = "n/a" if fit.r2 is None else f"{fit.r2:.2f}"
        name = f"{text(s.name)}: {fit.a_ms:.3g} + {fit.b_ms_per_item:.3g} ms/item (r² {r2})"
        data.append({"type": "scatter", "mode": "lines", "name": name, "legendgroup": s.name, "x": xs,
                     "y": [fit.a_ms + fit.b_ms_per_item * x for x in xs], "line": {"color": colour[s.name], "width": 2},
                     "hovertemplate": "batch %{x}: %{y:.3g} ms<extra></extra>"})
        data.append({"type": "scatter", "mode": "markers", "name": f"{text(s.name)} mean batch", "legendgroup": s.name,
                     "showlegend": False, "x": [s.batch.mean], "y": [fit.a_ms + fit.b_ms_per_item * s.batch.mean],
                     "marker": {"color": colour[s.name], "size": 10},
                     "hovertemplate": "%{fullData.name}: %{x:.3g} -> %{y:.3g} ms<extra></extra>"})
    if not data:
        return None
    return figure(data, xaxis=axis("batch size", rangemode="tozero"),
                  yaxis=axis("span latency (ms)", rangemode="tozero"))


# -- devices ---------------------------------------------------------------------------------

_ROWS = (("utilisation (%)", lambda s: s.metric == "util_pct" and s.device != "memory", 1.0),
         ("memory (GB)", lambda s: s.metric in ("used_bytes", "mem_used_bytes"), 1e-9),
         ("power (W)", lambda s: s.metric == "power_w", 1.0),
         ("engine requests", lambda s: engine_series(s.device, s.metric) in ENGINE_REQUESTS, 1.0),
         ("KV cache (%)", lambda s: engine_series(s.device, s.metric) == "kv_cache", 100.0))


def device_timeline(portrait) -> dict | None:
    """Utilisation, memory and power over time in stacked panels (and a scraped engine's requests and
    KV-cache use), stage activity shaded under the first."""
    tl = portrait.timeline
    if tl is None:
        return None
    rows = []
    for title, shown, scale in _ROWS:
        series = [s for s in tl.device_series if shown(s)]
        if series:
            rows.append((title, series, scale))
    activity = _activity(portrait)
    if not rows and not activity:
        return None
    if not rows:
        rows = [("", [], 1.0)]
    gap = 0.07
    height = (1 - gap * (len(rows) - 1)) / len(rows)
    start, step = tl.start * 1000, tl.bucket_s * 1000
    data, layout = [], {}
    axis_names = ["y"] + [f"y{i + 3}" for i in range(len(rows) - 1)]  # y2 is the activity overlay
    for i, ((title, series, scale), yref) in enumerate(zip(rows, axis_names)):
        top = 1 - i * (height + gap)
        layout["yaxis" if yref == "y" else f"yaxis{yref[1:]}"] = axis(title, domain=[max(0.0, top - height), top],
                                                                       anchor="x", rangemode="tozero")
        data += _device_traces(series, scale, yref, {"x0": start, "dx": step}, first_colour=6 * i)
        if any(s.metric == "power_w" for s in series):
            data += _idle_lines(portrait, yref, start, start + step * tl.buckets)
    if activity:
        colour = colours(portrait)
        layout["yaxis2"] = axis("stage activity", overlaying="y", side="right",
                                 rangemode="tozero", showgrid=False)
        shaded = []
        for name, busy in activity:
            factor, values = thin(busy)
            shaded.append({"type": "scatter", "mode": "lines", "name": f"{text(name)} (activity)",
                           "x0": start, "dx": factor * step, "y": values, "yaxis": "y2", "stackgroup": "activity",
                           "line": {"width": 0, "color": colour.get(name, NEUTRAL)},
                           "fillcolor": faint(colour.get(name, NEUTRAL)),
                           "hovertemplate": "%{fullData.name}: %{y:.3g} in progress<extra></extra>"})
        data = shaded + data  # drawn first: the device lines stay on top of the shading
    bottom = axis_names[-1]
    layout["xaxis"] = axis("time (UTC)", type="date", anchor=bottom)
    return figure(data, height=200 + 170 * len(rows), **layout)


def _device_traces(series: list, scale: float, yref: str, x: dict, first_colour: int) -> list:
    """A line per device; a fleet's many devices of one kind (gpu0..gpu7 on 8 hosts) become their
    mean with a min-max band, which stays readable where 64 lines would not."""
    kinds: dict = {}
    for s in series:
        # gpu0..gpu7 are one kind; a scraped endpoint's series are a kind each (running is not waiting)
        kind = f"{s.device} {s.metric.split('{', 1)[0]}" if s.device.startswith("scrape:") else \
            s.device.rstrip("0123456789") or s.device
        kinds.setdefault(kind, []).append(s)
    out = []
    for k, (kind, members) in enumerate(kinds.items()):
        if len(members) <= MAX_LINES_PER_KIND:
            for j, s in enumerate(members):
                factor, values = thin([None if v is None else v * scale for v in s.values])
                out.append({"type": "scatter", "mode": "lines", "name": text(f"{s.host}/{s.device} {s.metric}"),
                            "x0": x["x0"], "dx": x["dx"] * factor, "y": values, "yaxis": yref, "connectgaps": False,
                            "line": {"width": 2, "color": PALETTE[(first_colour + k + j) % len(PALETTE)]},
                            "hovertemplate": "%{fullData.name}: %{y:.3g}<extra></extra>"})
            continue
        columns = [[v * scale for v in bucket if v is not None] for bucket in zip(*(s.values for s in members))]
        lows = thin([min(c) if c else None for c in columns])[1]
        highs = thin([max(c) if c else None for c in columns])[1]
        factor, means = thin([sum(c) / len(c) if c else None for c in columns])
        colour = PALETTE[(first_colour + k) % len(PALETTE)]
        name = text(f"{kind} {members[0].metric}: mean of {len(members)} (band: min to max)")
        common = {"type": "scatter", "mode": "lines", "x0": x["x0"], "dx": x["dx"] * factor, "yaxis": yref,
                  "legendgroup": name, "connectgaps": False}
        out += [{**common, "name": f"{name} max", "y": highs, "line": {"width": 0, "color": colour},
                 "showlegend": False, "hovertemplate": "max %{y:.3g}<extra></extra>"},
                {**common, "name": f"{name} min", "y": lows, "line": {"width": 0, "color": colour}, "showlegend": False,
                 "fill": "tonexty", "opacity": 0.3, "hovertemplate": "min %{y:.3g}<extra></extra>"},
                {**common, "name": name, "y": means, "line": {"width": 2, "color": colour},
                 "hovertemplate": "mean %{y:.3g}<extra></extra>"}]
    return out


def _idle_lines(portrait, yref: str, start: float, end: float) -> list:
    """A dashed line at each device's estimated idle power (portrait.energy): what it draws doing nothing."""
    energy = portrait.energy
    if energy is None:
        return []
    return [{"type": "scatter", "mode": "lines", "name": text(f"{key} idle ({d.idle_w:.3g} W)"), "x": [start, end],
             "y": [d.idle_w, d.idle_w], "yaxis": yref, "line": {"width": 1.5, "dash": "dash", "color": NEUTRAL},
             "hovertemplate": "%{fullData.name}<extra></extra>"}
            for key, d in sorted(energy.devices.items()) if d.idle_w is not None]


def energy_per_stage(portrait) -> dict | None:
    """Each stage's energy per item on its sampled devices, with its 95% interval as error bars."""
    stages = [s for s in portrait.stages if s.energy_per_item_j is not None]
    if not stages:
        return None
    colour = colours(portrait)
    data = [{"type": "bar", "name": text(s.name), "x": [text(s.name)], "y": [s.energy_per_item_j.mean],
             "marker": {"color": colour[s.name]},
             "error_y": {"type": "data", "symmetric": False, "array": [s.energy_per_item_j.hi - s.energy_per_item_j.mean],
                         "arrayminus": [s.energy_per_item_j.mean - s.energy_per_item_j.lo]},
             "hovertemplate": (f"%{{x}}: %{{y:.3g}} J per item ({s.energy_per_item_j.lo:.3g} to "
                               f"{s.energy_per_item_j.hi:.3g})<extra></extra>")} for s in stages]
    return figure(data, showlegend=False, yaxis=axis("energy per item (J)", rangemode="tozero"),
                  xaxis=axis("stage"))


def _activity(portrait) -> list:
    """(stage, busy series) for the stages inside requests (all stages if none), the busiest first."""
    tl = portrait.timeline
    roots = root_stages(portrait)
    series = [s for s in tl.stage_series if s.stage not in roots] or list(tl.stage_series)
    series.sort(key=lambda s: (-sum(s.busy), s.stage))
    out = [(s.stage, s.busy) for s in series[:8]]
    if len(series) > 8:
        rest = [sum(values) for values in zip(*(s.busy for s in series[8:]))]
        out.append((f"{len(series) - 8} other stages", rest))
    return out


# -- roofline --------------------------------------------------------------------------------


def roofline(portrait) -> dict | None:
    """Each stage at its arithmetic intensity and achieved FLOP/s, under the roofline device's roofs."""
    stages = [s for s in portrait.stages if s.intensity is not None and s.intensity.flops_per_byte
              and s.intensity.achieved_flops_per_s]
    if not stages:
        return None
    roofs = portrait.roofline_roofs
    xs = [s.intensity.flops_per_byte for s in stages]
    data = []
    if roofs is not None:
        bandwidth = roofs.memory_bandwidth_bytes_per_s
        ridges = [peak / bandwidth for peak in roofs.peak_flops_per_s.values() if peak]
        lo, hi = min(xs + ridges) / 10, max(xs + ridges) * 10
        by_peak: dict = {}  # precisions sharing a peak (fp16 and bf16, say) share one roof
        for precision, peak in roofs.peak_flops_per_s.items():
            if peak:
                by_peak.setdefault(peak, []).append(precision)
        for peak, precisions in sorted(by_peak.items()):
            ridge = peak / bandwidth
            x = [lo] + ([ridge] if lo < ridge < hi else []) + [hi]
            chosen = roofs.precision in precisions
            data.append({"type": "scatter", "mode": "lines", "name": f"{text(roofs.name)} {'/'.join(precisions)} roof",
                         "x": x, "y": [min(peak, v * bandwidth) for v in x],
                         "line": {"color": "#e45756" if chosen else NEUTRAL, "width": 2.5 if chosen else 1,
                                  "dash": "solid" if chosen else "dot"},
                         "hovertemplate": "%{fullData.name}<br>%{x:.3g} FLOP/byte: %{y:.3s}FLOP/s<extra></extra>"})
    colour = colours(portrait)
    for s in stages:
        data.append({"type": "scatter", "mode": "markers+text", "name": text(s.name), "x": [s.intensity.flops_per_byte],
                     "y": [s.intensity.achieved_flops_per_s], "text": [text(s.name)], "textposition": "top center",
                     "marker": {"size": 12, "color": colour[s.name]},
                     "hovertemplate": "%{fullData.name}: %{x:.3g} FLOP/byte, %{y:.3s}FLOP/s achieved<extra></extra>"})
    # Half a decade of room above the highest point or roof: a stage's name sits on top of its marker,
    # and Plotly's autorange clipped it (and the top tick) otherwise.
    ys = [y for trace in data for y in trace["y"] if y and y > 0]
    y_range = [math.log10(min(ys)) - 0.5, math.log10(max(ys)) + 0.5]
    xs = [x for trace in data for x in trace["x"]]
    no_roofs = [] if roofs is not None else [{  # said on the chart itself, not only in the text above it
        "text": "no roofs: no device chosen (loadprobe analyze --device ID)", "showarrow": False,
        "xref": "paper", "yref": "paper", "x": 0, "y": 1, "xanchor": "left", "yanchor": "top"}]
    return figure(data, xaxis=axis("arithmetic intensity (FLOP/byte, log)", **log_ticks(xs)),
                  yaxis=axis("FLOP/s (log)", type="log", exponentformat="SI", range=y_range), height=440,
                  annotations=no_roofs)


def portrait_figures(portrait) -> dict:
    """Every chart of the single-run report, by id; charts without data are left out."""
    built = {"arrivals": arrivals(portrait), "hours": hour_of_day(portrait), "shares": stage_shares(portrait),
             "latency": latency_cdfs(portrait), "batch": batch_sizes(portrait), "batch_fit": batch_fits(portrait),
             "devices": device_timeline(portrait), "energy": energy_per_stage(portrait), "roofline": roofline(portrait)}
    return {k: v for k, v in built.items() if v is not None}
