"""The terminal summary of a load portrait: the few tables a person reads first.

Usage::

    from loadprobe.reports.summary import render
    print(render(portrait))
"""

from __future__ import annotations

from .._table import text_table
from .llm import engine_load
from .units import ms as _ms, pct as _pct


def render(portrait) -> str:
    p = portrait
    out: list[str] = []
    q = p.data_quality
    out.append(f"load portrait: {q.rows:,} spans from {q.processes} process(es) on {len(q.hosts)} host(s), "
               f"{q.start} .. {q.end} ({q.span_s:,.0f} s)")
    t = p.traffic
    if t is not None:
        out.append(f"traffic ({t.source}): {t.requests:,} over {t.duration_s:,.0f} s; mean {t.mean_rps:.2f}/s, "
                   f"peak {t.peak_rps:.2f}/s per {t.bucket_s} s (peak/mean {t.peak_to_mean or 0:.1f}); "
                   f"inter-arrival CV {t.interarrival_cv if t.interarrival_cv is not None else float('nan'):.2f}, "
                   f"dispersion {t.dispersion_index.get('1s') or 0:.1f} (1 s)")
    r = p.requests
    if r is not None and r.latency_ms is not None:
        lat = r.latency_ms
        out.append(f"requests: p50 {_ms(lat.p50)} ms, p95 {_ms(lat.p95)} ms, p99 {_ms(lat.p99)} ms; "
                   f"errors {_pct(r.error_rate)}, timeouts {_pct(r.timeout_rate)}, "
                   + (f"queued before stages {_pct(r.queued_share)}, " if r.queued_share else "")
                   + f"outside any stage {_pct(r.unattributed_share)}"
                   + ("" if r.outside_server_share is None else
                      f" (outside the server {_pct(r.outside_server_share)}, as the load client saw it; "
                      f"{r.joined_requests:,} of {r.count:,} requests joined to the server's spans)"))
    if p.stages:
        rows = []
        for s in p.stages:
            lat = s.latency_ms
            batch = f"{s.batch.mean:.1f}/{s.batch.p99}" if s.batch else "-"
            engine = ",".join(list(s.engines)[:2]) or "-"
            roof = s.intensity.roofline if s.intensity and s.intensity.roofline else None
            rows.append([s.name, f"{s.count:,}", _ms(lat.p50), _ms(lat.p95), _ms(lat.p99), _pct(s.share),
                         _pct(s.self_share), _pct(s.cpu_share), batch, "dyn" if s.shapes and s.shapes.dynamic_shape else
                         ("fixed" if s.shapes else "-"), engine, roof.bound if roof else "-"])
        out.append("")
        out += text_table(["stage", "count", "p50 ms", "p95 ms", "p99 ms", "share", "self", "cpu", "batch mean/p99",
                           "shapes", "engine", "roofline"], rows, numbers_right=True)
    if p.llm is not None:
        out += [""] + llm_lines(p.llm)
    else:  # tokens without the markers of an LLM request's output: the counts alone (an imported trace)
        for s in p.stages:
            if s.tokens_in is not None or s.tokens_out is not None:
                parts = [f"{label} p50 {t.p50:,.0f}, p99 {t.p99:,.0f}, max {t.max:,.0f}"
                         for label, t in (("in", s.tokens_in), ("out", s.tokens_out)) if t is not None]
                out.append(f"tokens ({s.name}): " + "; ".join(parts))
    util = [m for m in p.devices.metrics if m.metric in ("util_pct", "power_w")]
    if util:
        out.append("")
        out += text_table(["host", "device", "metric", "mean", "p95", "max"],
                          [[m.host, m.device, m.metric, f"{m.mean:.1f}", f"{m.p95:.1f}", f"{m.max:.1f}"] for m in util],
                          numbers_right=True)
    if p.bottlenecks:
        out.append("")
        out.append("bottlenecks:")
        for i, v in enumerate(p.bottlenecks[:6], 1):
            out.append(f"  {i}. {v.title}: {v.advice}")
    for warning in q.warnings + q.clock_warnings:
        out.append(f"warning: {warning}")
    return "\n".join(out)


def llm_lines(llm) -> list[str]:
    """The LLM headline: TTFT, TPOT, ITL and E2E, tokens and their rates, goodput against its targets."""
    seen = "as the load client saw them" if llm.source == "client" else "as the service recorded them"
    out = [f"LLM: {llm.requests:,} requests, {seen}"]
    rows = [[name, f"{x.count:,}", _ms(x.mean), _ms(x.p50), _ms(x.p90), _ms(x.p99)]
            for name, x in (("TTFT", llm.ttft_ms), ("TPOT", llm.tpot_ms), ("ITL", llm.itl_ms), ("E2E", llm.e2e_ms))
            if x is not None]
    if rows:
        out += text_table(["", "count", "mean ms", "p50 ms", "p90 ms", "p99 ms"], rows, numbers_right=True)
    split = llm.ttft_split_ms
    if split is not None:
        outside = (f"; the client waited {_ms(split.outside_ms)} ms more (network, HTTP front end; "
                   f"{split.paired:,} requests paired by id)" if split.outside_ms is not None else "")
        out.append(f"TTFT in the engine: queue {_ms(split.queue_ms)} ms, prefill {_ms(split.prefill_ms)} ms, "
                   f"rest {_ms(split.rest_ms)} ms (means){outside}")
    tokens = [f"{label} mean {t.mean:,.1f}, p99 {t.p99:,.0f}, max {t.max:,}"
              for label, t in (("prompt", llm.tokens_in), ("output", llm.tokens_out)) if t is not None]
    rates = [f"{label} {r.mean:,.1f}/s (peak {r.peak:,.0f}/s)"
             for label, r in (("output", llm.output_tokens_per_s), ("prompt", llm.input_tokens_per_s)) if r is not None]
    if tokens:
        out.append("tokens: " + "; ".join(tokens) + ("; " + ", ".join(rates) if rates else ""))
    if llm.engine is not None:
        out.append("engine: " + engine_load(llm.engine))
    g = llm.goodput
    if g is not None:
        targets = f"TTFT <= {_ms(g.ttft_ms)} ms" + (f" and TPOT <= {_ms(g.tpot_ms)} ms" if g.tpot_ms is not None else "")
        derived = (f" (targets not given: {', '.join(name.split('_')[0].upper() for name in g.derived)} at twice "
                   "the median; set --slo-ttft-ms/--slo-tpot-ms)") if g.derived else ""
        rate = f", {g.rps:,.2f} req/s" if g.rps is not None else ""
        out.append(f"goodput: {_pct(g.share)} of requests ({g.requests:,}{rate}) within {targets}{derived}")
    return out
