"""Two portraits side by side: the deltas of the headline figures, per-stage changes, overlaid charts.

For before/after a change, or a recorded run against a replay on other hardware. Changes
are B relative to A; a figure with a direction ("lower latency is better") is marked
better or worse.

Usage::

    view = comparison_view(before, after, labels=("before", "after"))
    view["deltas"], view["stages"], view["figures"]
"""

from __future__ import annotations

from . import figures as fig
from .headline import FIGURES, headline, latency_source
from .sections import cards
from .units import NONE, duration, ms, num, pct

A_COLOUR, B_COLOUR = fig.PALETTE[0], fig.PALETTE[1]


def comparison_view(a, b, labels: tuple[str, str] = ("A", "B")) -> dict:
    la, lb = labels
    ha, hb = headline(a), headline(b)
    deltas = [_delta(f, ha[f.key], hb[f.key]) for f in FIGURES]
    figures = {k: v for k, v in {
        "cmp_latency": _latency(a, b, labels), "cmp_stage_p95": _stage_p95(a, b, labels),
        "cmp_shares": _shares(a, b, labels), "cmp_arrivals": _arrivals(a, b, labels)}.items() if v is not None}
    headline_section = {"id": "deltas", "title": "Headline figures", "reading": _reading(deltas, la, lb), "charts": []}
    sections = [
        headline_section,
        {"id": "sides", "title": "Side by side", "reading": f"{la} on the left, {lb} on the right.", "charts": []},
        _charts("latency", "Latency", f"End-to-end latency of {la} and {lb}, and each stage's p95.", figures,
                [("cmp_latency", f"Cumulative latency distribution of {la} and {lb} (log axis)"),
                 ("cmp_stage_p95", f"p95 latency of each stage, {la} against {lb}")]),
        _charts("shares", "Where request time goes", f"A mean request's time split by stage, {la} above {lb}.",
                figures, [("cmp_shares", f"Mean request time by stage (self time), {la} and {lb}")]),
        _charts("traffic", "Request rate", f"Requests per second from each run's start, {la} and {lb} overlaid.",
                figures, [("cmp_arrivals", f"Requests per second against seconds since the start, {la} and {lb}")]),
        {"id": "stages", "title": "Stages", "reading": f"Per-stage latency and share, {la} against {lb} "
                                                          "(change is B relative to A).", "charts": []},
    ]
    return {
        "title": f"Load portraits compared: {la} vs {lb}",
        "subtitle": f"A = {la} ({_span(a)}); B = {lb} ({_span(b)})",
        "labels": labels,
        "deltas": deltas,
        "cards": [cards(a), cards(b)],
        "stages": _stage_rows(a, b),
        "sections": sections,
        "figures": figures,
    }


def _span(p) -> str:
    q = p.data_quality
    return f"{q.start or NONE}, {duration(q.span_s)}, {q.rows:,} spans, {', '.join(q.services) or 'unknown service'}"


def _charts(id_, title, reading, figures, charts) -> dict:
    return {"id": id_, "title": title, "reading": reading,
            "charts": [{"id": cid, "label": label} for cid, label in charts if cid in figures]}


def format_figure(unit: str, value) -> str:
    if value is None:
        return NONE
    if unit == "ms":
        return f"{ms(value)} ms"
    if unit == "%":
        return pct(value)
    return f"{num(value)} {unit}"


def _delta(f, a, b) -> dict:
    row = {"label": f.label, "a": format_figure(f.unit, a), "b": format_figure(f.unit, b), "change": NONE,
           "relative": NONE, "verdict": None}
    if a is None or b is None:
        return row
    change = b - a
    row["change"] = (f"{100 * change:+.2f} pts" if f.unit == "%" else
                     "0" if change == 0 else f"{change:+.3g} {f.unit}")
    if a:
        row["relative"] = f"{100 * change / abs(a):+.1f}%"
    if f.better and change:
        improved = change < 0 if f.better == "lower" else change > 0
        row["verdict"] = "better" if improved else "worse"
    return row


def _reading(deltas: list, la: str, lb: str) -> str:
    moved = [d for d in deltas if d["verdict"] is not None]
    if not moved:
        return f"No headline figure that has a better direction differs between {la} and {lb}."
    parts = [f"{d['label']} {d['a']} -> {d['b']} ({d['relative'] if d['relative'] != NONE else d['change']}, "
             f"{d['verdict']})" for d in moved[:4]]
    return f"{lb} against {la}: " + "; ".join(parts) + "."


def _stage_rows(a, b) -> dict:
    names = [s.name for s in a.stages] + [s.name for s in b.stages if a.stage(s.name) is None]
    rows = []
    for name in names:
        sa, sb = a.stage(name), b.stage(name)
        row = [name]
        for attr in ("p50", "p95", "p99"):
            va = getattr(sa.latency_ms, attr) if sa else None
            vb = getattr(sb.latency_ms, attr) if sb else None
            row += [ms(va), ms(vb), f"{100 * (vb - va) / va:+.1f}%" if va and vb is not None else NONE]
        row += [pct(sa.self_share) if sa else NONE, pct(sb.self_share) if sb else NONE]
        rows.append(row)
    return {"caption": "Per-stage latency (ms) and self share of request time",
            "headers": ["stage", "p50 A", "p50 B", "change", "p95 A", "p95 B", "change", "p99 A", "p99 B", "change",
                        "self share A", "self share B"], "rows": rows}


def _latency(a, b, labels) -> dict | None:
    data = []
    for p, label, colour in ((a, labels[0], A_COLOUR), (b, labels[1], B_COLOUR)):
        source, lat = latency_source(p)
        if source == "requests":
            cdf = p.requests.latency_cdf
        else:
            stage = p.stage(source) if source else None
            cdf = stage.latency_cdf if stage else None
        if cdf:
            data += fig.cdf_traces(fig.text(label), cdf, lat, colour)
    if not data:
        return None
    xs = [x for trace in data for x in trace["x"]]
    return fig.figure(data, xaxis=fig.axis("latency (ms, log scale)", **fig.log_ticks(xs)),
                       yaxis=fig.axis("% of requests at or below", range=[0, 100.5]), height=380)


def _stage_p95(a, b, labels) -> dict | None:
    names = [s.name for s in a.stages] + [s.name for s in b.stages if a.stage(s.name) is None]
    names = names[:fig.MAX_STAGES]
    if not names:
        return None
    data = []
    for p, label, colour in ((a, labels[0], A_COLOUR), (b, labels[1], B_COLOUR)):
        values = [p.stage(n).latency_ms.p95 if p.stage(n) else None for n in names]
        data.append({"type": "bar", "name": fig.text(label), "x": [fig.text(n) for n in names], "y": values,
                     "marker": {"color": colour},
                     "hovertemplate": "%{fullData.name} %{x}: p95 %{y:.3g} ms<extra></extra>"})
    return fig.figure(data, barmode="group", xaxis=fig.axis("stage"), yaxis=fig.axis("p95 latency (ms)"))


def _shares(a, b, labels) -> dict | None:
    rows = []
    for p, label in ((a, labels[0]), (b, labels[1])):
        r = p.requests
        if r is None or r.unattributed_share is None or r.latency_ms is None:
            continue
        rows.append((fig.text(label), {s.name: s.self_share * r.latency_ms.mean for s in fig.request_stages(p)},
                     r.unattributed_share * r.latency_ms.mean))
    if not rows:
        return None
    names = []
    for _, per_stage, _ in rows:
        names += [n for n in per_stage if n not in names]
    colour = {n: fig.PALETTE[i % len(fig.PALETTE)] for i, n in enumerate(names)}
    y = [label for label, _, _ in rows]
    data = [{"type": "bar", "orientation": "h", "name": fig.text(n), "y": y, "x": [per.get(n) for _, per, _ in rows],
             "marker": {"color": colour[n]}, "hovertemplate": "%{fullData.name}: %{x:.3g} ms<extra></extra>"}
            for n in names[:fig.MAX_STAGES]]
    data.append({"type": "bar", "orientation": "h", "name": "in no probed stage", "y": y,
                 "x": [rest for _, _, rest in rows], "marker": {"color": "#bab0ac"},
                 "hovertemplate": "%{fullData.name}: %{x:.3g} ms<extra></extra>"})
    return fig.figure(data, barmode="stack", xaxis=fig.axis("time per request (ms, mean)", rangemode="tozero"),
                       yaxis=fig.axis("", autorange="reversed"), height=300)


def _arrivals(a, b, labels) -> dict | None:
    data = []
    for p, label, colour in ((a, labels[0], A_COLOUR), (b, labels[1], B_COLOUR)):
        t = p.traffic
        if t is None or not t.series:
            continue
        factor, counts = fig.thin([c for _, c in t.series])
        data.append({"type": "scatter", "mode": "lines", "name": fig.text(label), "x0": 0, "dx": factor * t.bucket_s,
                     "y": [c / t.bucket_s for c in counts], "line": {"color": colour, "width": 1.5, "shape": "hv"},
                     "hovertemplate": "%{fullData.name}: %{y:.3g} req/s at %{x:.0f} s<extra></extra>"})
    if not data:
        return None
    return fig.figure(data, xaxis=fig.axis("seconds since the run's first arrival"),
                       yaxis=fig.axis("requests per second", rangemode="tozero"))
