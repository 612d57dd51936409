"""The report's LLM section: time to first token and between tokens, goodput against its targets,
tokens over time, the prompt x output length map, the engine's batch and KV cache, prefill and decode.

All of it is drawn from the portrait's ``llm`` section (and, for the engine's series and the
phases, its timeline and stages); ``sections.py`` places it on the page.

Usage::

    figures = llm_figures(portrait)     # chart id -> Plotly figure; {} without an llm section
    llm_reading(portrait.llm)           # the section's one-paragraph reading
"""

from __future__ import annotations

from loadprobe.analysis.timeline import engine_series

from .figures import NEUTRAL, PALETTE, axis, cdf_traces, figure, log_ticks, text, thin
from .units import ms, num, pct

PHASES = ("prefill", "decode")  # the stage names an LLM engine's two phases go by (GenAI import, the sample)


def llm_reading(llm) -> str:
    who = "as the load client saw them" if llm.source == "client" else "as the service recorded them"
    parts = [f"{llm.requests:,} LLM requests, {who}"]
    if llm.ttft_ms is not None:
        parts.append(f"time to first token p50 {ms(llm.ttft_ms.p50)} ms, p99 {ms(llm.ttft_ms.p99)} ms")
    if llm.tpot_ms is not None:
        parts.append(f"time per output token p50 {ms(llm.tpot_ms.p50)} ms, p99 {ms(llm.tpot_ms.p99)} ms")
    if llm.output_tokens_per_s is not None:
        parts.append(f"{num(llm.output_tokens_per_s.mean)} output tokens/s (peak {num(llm.output_tokens_per_s.peak)})")
    split = llm.ttft_split_ms
    if split is not None:
        parts.append(f"in the engine, a first token waited {ms(split.queue_ms)} ms to be scheduled, "
                     f"{ms(split.prefill_ms)} ms in prefill and {ms(split.rest_ms)} ms elsewhere"
                     + (f", and the client {ms(split.outside_ms)} ms more" if split.outside_ms is not None else ""))
    if llm.engine is not None:
        parts.append("the engine " + engine_load(llm.engine))
    g = llm.goodput
    if g is not None:
        targets = f"TTFT ≤ {ms(g.ttft_ms)} ms" + (f" and TPOT ≤ {ms(g.tpot_ms)} ms" if g.tpot_ms is not None else "")
        given = " (targets not given: twice the recorded medians)" if g.derived else ""
        parts.append(f"goodput {pct(g.share, 1)} within {targets}{given}")
    return "; ".join(parts) + "."


def engine_load(engine) -> str:
    """``llm.engine`` in words: "ran 4.2 sequences at once on average (peak 8), 1.3 waiting (peak 6), ..."."""
    said = []
    for level, what in ((engine.running, "sequences at once on average"), (engine.waiting, "waiting"),
                        (engine.kv_cache_pct, "KV cache in use")):
        if level is not None:
            value, peak = (f"{num(level.mean)}%", f"{num(level.peak)}%") if level is engine.kv_cache_pct else \
                (num(level.mean), num(level.peak))
            said.append(f"{value} {what} (peak {peak})")
    source = {level.source for level in (engine.running, engine.waiting, engine.kv_cache_pct) if level is not None}
    where = "its scraped metrics" if source == {"scraped"} else "its requests' spans" if source == {"spans"} else \
        "its metrics and spans"
    return "ran " + ", ".join(said) + f", from {where}"


def llm_table(llm) -> dict:
    rows = [[name, f"{x.count:,}", ms(x.mean), ms(x.p50), ms(x.p90), ms(x.p95), ms(x.p99)]
            for name, x in (("time to first token", llm.ttft_ms), ("time per output token", llm.tpot_ms),
                            ("inter-token latency", llm.itl_ms), ("end to end", llm.e2e_ms)) if x is not None]
    return {"caption": "LLM latencies (ms)", "headers": ["", "count", "mean", "p50", "p90", "p95", "p99"],
            "rows": rows, "left": [0], "collapsed": False}


def llm_figures(portrait) -> dict:
    llm = portrait.llm
    if llm is None:
        return {}
    built = {"llm_latency": _latencies(llm), "llm_goodput": _goodput(llm), "llm_tokens": _tokens(llm),
             "llm_lengths": _lengths(llm), "llm_engine": _engine(portrait), "llm_phases": _phases(portrait)}
    return {k: v for k, v in built.items() if v is not None}


def _latencies(llm) -> dict | None:
    data = []
    for i, (name, cdf, lat) in enumerate((("time to first token", llm.ttft_cdf, llm.ttft_ms),
                                          ("time per output token", llm.tpot_cdf, llm.tpot_ms),
                                          ("inter-token latency", llm.itl_cdf, llm.itl_ms))):
        if cdf:
            data += cdf_traces(name, cdf, lat, PALETTE[i])
    if not data:
        return None
    xs = [x for trace in data for x in trace["x"]]
    return figure(data, xaxis=axis("latency (ms, log scale)", **log_ticks(xs)),
                  yaxis=axis("% at or below", range=[0, 100.5]), height=380)


def _goodput(llm) -> dict | None:
    g = llm.goodput
    if g is None or not g.by_ttft:
        return None
    data = []
    for i, (name, curve, held) in enumerate((("TTFT target", g.by_ttft, g.ttft_ms), ("TPOT target", g.by_tpot, g.tpot_ms))):
        if not curve:
            continue
        other = "TPOT" if name.startswith("TTFT") else "TTFT"
        axis_name = "x" if i == 0 else "x2"
        data.append({"type": "scatter", "mode": "lines", "name": f"moving the {name} ({other} held)",
                     "x": [c[0] for c in curve], "y": [round(100 * c[1], 3) for c in curve], "xaxis": axis_name,
                     "line": {"color": PALETTE[i], "width": 2, "shape": "hv"},
                     "hovertemplate": f"{name} %{{x:.3g}} ms: %{{y:.3g}}% good<extra></extra>"})
        data.append({"type": "scatter", "mode": "markers", "name": f"{name} held to", "showlegend": False,
                     "x": [held], "y": [round(100 * g.share, 3)], "xaxis": axis_name,
                     "marker": {"color": PALETTE[i], "size": 10, "symbol": "circle-open", "line": {"width": 2}},
                     "hovertemplate": f"{name} {ms(held)} ms: %{{y:.3g}}% good<extra></extra>"})
    return figure(data, xaxis=axis("TTFT target (ms)", domain=[0, 0.47]),
                  xaxis2=axis("TPOT target (ms)", domain=[0.53, 1], anchor="y"),
                  yaxis=axis("goodput (% of requests)", range=[0, 100.5]), height=360)


def _tokens(llm) -> dict | None:
    s = llm.tokens_series
    if s is None or not s.output_per_s:
        return None
    data = []
    for i, (name, values) in enumerate((("output tokens/s", s.output_per_s), ("prompt tokens/s", s.input_per_s))):
        factor, shown = thin(values)
        data.append({"type": "scatter", "mode": "lines", "name": name, "x0": s.start * 1000,
                     "dx": factor * s.bucket_s * 1000, "y": shown, "line": {"color": PALETTE[i], "width": 2},
                     "hovertemplate": f"{name}: %{{y:.4g}}<extra></extra>"})
    return figure(data, xaxis=axis("time (UTC)", type="date"), yaxis=axis("tokens per second", rangemode="tozero"),
                  height=320)


def _lengths(llm) -> dict | None:
    if not llm.lengths:
        return None
    most = max(n for _, _, n in llm.lengths)
    points = {"type": "scatter", "mode": "markers", "name": "requests",
              "x": [max(a, 1) for a, _, _ in llm.lengths], "y": [max(b, 1) for _, b, _ in llm.lengths],
              "text": [f"{n:,} requests: prompt {a:,}-{max(2 * a - 1, a):,}, output {b:,}-{max(2 * b - 1, b):,} tokens"
                       for a, b, n in llm.lengths],
              "marker": {"size": [8 + 32 * (n / most) ** 0.5 for _, _, n in llm.lengths], "color": PALETTE[0],
                         "opacity": 0.7},
              "hovertemplate": "%{text}<extra></extra>"}
    return figure([points], xaxis=axis("prompt tokens (bin from, log scale)", **log_ticks(points["x"])),
                  yaxis=axis("output tokens (bin from, log scale)", **log_ticks(points["y"])), height=360,
                  showlegend=False)


def _engine(portrait) -> dict | None:
    """The engine's running and waiting requests and its KV-cache use: its scraped metrics, else as counted
    from its spans (``llm.engine.series``)."""
    tl, counted = portrait.timeline, portrait.llm.engine.series if portrait.llm.engine is not None else None
    lines = [(s.metric.split("{")[0], tl.start, tl.bucket_s, s.values, engine_series(s.device, s.metric) == "kv_cache")
             for s in (tl.device_series if tl else []) if engine_series(s.device, s.metric)]
    if not lines and counted is not None:
        lines = [(f"{name} (from spans)", counted.start, counted.bucket_s, values, False)
                 for name, values in (("running", counted.running), ("waiting", counted.waiting)) if values is not None]
    if not lines:
        return None
    data = []
    for i, (name, start_s, bucket_s, values, kv) in enumerate(lines):
        factor, values = thin([None if v is None else (100 * v if kv else v) for v in values])
        data.append({"type": "scatter", "mode": "lines", "name": text(name) + (" (%)" if kv else ""),
                     "x0": start_s * 1000, "dx": factor * bucket_s * 1000, "y": values,
                     "yaxis": "y2" if kv else "y", "line": {"color": PALETTE[i % len(PALETTE)], "width": 2},
                     "hovertemplate": "%{fullData.name}: %{y:.3g}<extra></extra>"})
    return figure(data, xaxis=axis("time (UTC)", type="date"), yaxis=axis("requests", rangemode="tozero"),
                  yaxis2=axis("KV cache (%)", overlaying="y", side="right", range=[0, 100.5], showgrid=False),
                  height=320)


def _phases(portrait) -> dict | None:
    """Prefill and decode time per engine: the two phases, and the devices they ran on."""
    stages = [s for s in portrait.stages if s.name.lower() in PHASES and s.latency_ms.mean is not None]
    if not stages:
        return None
    engines = sorted({e for s in stages for e in s.engines} or {"(no engine recorded)"})
    data = []
    for i, s in enumerate(stages):
        spans = sum(s.engines.values()) or s.count
        seconds = [s.latency_ms.mean * s.count / 1e3 * (s.engines.get(e, 0) / spans if s.engines else 1)
                   for e in engines]
        data.append({"type": "bar", "name": text(s.name), "x": [text(e) for e in engines], "y": seconds,
                     "marker": {"color": PALETTE[i] if i < 2 else NEUTRAL},
                     "hovertemplate": "%{fullData.name} on %{x}: %{y:.3g} s<extra></extra>"})
    return figure(data, barmode="group", xaxis=axis("engine"), yaxis=axis("time in the phase (s)"), height=320)
