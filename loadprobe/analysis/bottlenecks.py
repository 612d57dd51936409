"""Ranked bottleneck verdicts, each with the measured figures that support it.

Every rule reads only the portrait; its ``score`` is the share of request time (or of
the run) it concerns, so verdicts from different rules sort on one scale.
"""

from __future__ import annotations

from ..portrait import Portrait, Verdict

DOMINANT_SHARE = 0.4
LOW_ACCELERATOR_UTIL = 30.0
BUSY_CPU_UTIL = 80.0
BURSTY_PEAK_TO_MEAN = 3.0
ERROR_RATE = 0.01
UNATTRIBUTED_SHARE = 0.2


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def find_bottlenecks(p: Portrait) -> list[Verdict]:
    verdicts: list[Verdict] = []
    util = {}  # device -> mean util over the run (all hosts)
    for m in p.devices.metrics:
        if m.metric == "util_pct":
            util.setdefault(m.device, []).append(m.mean)
    util = {d: sum(v) / len(v) for d, v in util.items()}
    gpus = {d: u for d, u in util.items() if d.startswith(("gpu", "npu"))}
    cpu = util.get("cpu")

    for stage in p.stages:
        share = stage.self_share if stage.self_share is not None else stage.share
        if share is None or share < DOMINANT_SHARE:
            continue
        if stage.start_offset_ms is None and not stage.engines and stage.child_ms_mean:
            continue  # a request root with stages: its own time is the unattributed-time verdict's

        evidence = {"stage": stage.name, "self_share": share, "p95_ms": stage.latency_ms.p95,
                    "engines": stage.engines}
        on_cpu = not stage.engines or "cpu" in stage.engines
        if on_cpu and cpu is not None and cpu >= BUSY_CPU_UTIL:
            evidence["cpu_util_pct"] = cpu
            title = f"CPU-bound {stage.name}"
            message = (f"{stage.name} takes {_pct(share)} of request time at {cpu:.0f}% CPU")
            if gpus:
                gpu, gu = min(gpus.items(), key=lambda kv: kv[1])
                evidence[f"{gpu}_util_pct"] = gu
                message += f" while {gpu} sits at {gu:.0f}%"
            advice = (f"{message}: a faster accelerator will not help until {stage.name} gets more CPU cores, "
                      "moves to the accelerator, or runs in parallel with inference")
        else:
            title = f"{stage.name} dominates request time"
            advice = (f"{stage.name} takes {_pct(share)} of request time (p95 {stage.latency_ms.p95:.1f} ms): "
                      "it sets the latency budget; look at its batch and engine first")
        verdicts.append(Verdict("dominant_stage", title, share, evidence, advice))

    for device, u in sorted(gpus.items()):
        if u < LOW_ACCELERATOR_UTIL:
            idle = max((v for k, v in p.devices.idle_share.items() if k.endswith("/" + device)), default=None)
            verdicts.append(Verdict(
                "underused_accelerator", f"{device} mostly idle", 1 - u / 100,
                {"device": device, "util_pct_mean": u, "idle_share": idle},
                f"{device} averages {u:.0f}% utilisation: it is provisioned for a peak the load rarely reaches; "
                "batch more, share it between services, or size down"))

    for stage in p.stages:
        roof = stage.intensity.roofline if stage.intensity else None
        if roof is None or roof.bound != "memory":
            continue
        share = stage.share or 0.0
        verdicts.append(Verdict(
            "memory_bound", f"memory-bound {stage.name}", share,
            {"stage": stage.name, "flops_per_byte": stage.intensity.flops_per_byte,
             "ridge_flops_per_byte": roof.ridge_flops_per_byte, "device": roof.device,
             "pct_of_roof": roof.pct_of_roof},
            f"{stage.name} does {stage.intensity.flops_per_byte:.1f} FLOP per byte, under {roof.device}'s ridge of "
            f"{roof.ridge_flops_per_byte:.0f}: memory bandwidth, not peak FLOP/s, decides its speed"))

    for stage in p.stages:
        q = stage.queue_ms
        if q is None or q.p50 is None or stage.latency_ms.p50 is None:
            continue
        if q.p95 > stage.latency_ms.p50:
            share = stage.share or 0.0
            verdicts.append(Verdict(
                "queueing", f"requests queue before {stage.name}", share,
                {"stage": stage.name, "queue_p95_ms": q.p95, "service_p50_ms": stage.latency_ms.p50},
                f"before {stage.name}, p95 queueing ({q.p95:.1f} ms) exceeds its median service time "
                f"({stage.latency_ms.p50:.1f} ms): add concurrency or capacity for this stage"))

    t = p.traffic
    if t is not None and t.peak_to_mean and t.peak_to_mean >= BURSTY_PEAK_TO_MEAN:
        verdicts.append(Verdict(
            "bursty_arrivals", "bursty arrivals", min(1.0, 1 - 1 / t.peak_to_mean),
            {"peak_to_mean": t.peak_to_mean, "peak_rps": t.peak_rps, "mean_rps": t.mean_rps,
             "bucket_s": t.bucket_s, "dispersion_index_1s": t.dispersion_index.get("1s"),
             "interarrival_cv": t.interarrival_cv},
            f"peak {t.peak_rps:.1f} req/s is {t.peak_to_mean:.1f}x the mean {t.mean_rps:.1f} req/s "
            f"(per {t.bucket_s} s): capacity sized for the mean will queue at peaks; "
            "size for the peak, absorb it with dynamic batching, or shift deferrable work to valleys"))

    r = p.requests
    if r is not None and r.error_rate + r.timeout_rate >= ERROR_RATE:
        verdicts.append(Verdict(
            "errors", "failing requests", r.error_rate + r.timeout_rate,
            {"error_rate": r.error_rate, "timeout_rate": r.timeout_rate, "requests": r.count},
            f"{_pct(r.error_rate)} of requests fail and {_pct(r.timeout_rate)} time out"))
    if r is not None and r.outside_server_share is not None and r.outside_server_share >= UNATTRIBUTED_SHARE:
        verdicts.append(Verdict(
            "outside_server", "request time outside the server", r.outside_server_share,
            {"outside_server_share": r.outside_server_share, "joined_requests": r.joined_requests},
            f"{_pct(r.outside_server_share)} of request time, as the load client saw it, is outside the server's "
            "spans: the network, connections and the client's own queueing; check the client's lateness and "
            "the path to the server before the server's stages"))
    # In the server: the time in no stage, less what is outside the server when a load client was joined.
    inside = None if r is None or r.unattributed_share is None else r.unattributed_share - (r.outside_server_share or 0)
    if inside is not None and inside >= UNATTRIBUTED_SHARE:
        joined = r.outside_server_share is not None
        evidence = {"unattributed_share": r.unattributed_share}
        if joined:
            evidence["outside_server_share"] = r.outside_server_share
        verdicts.append(Verdict(
            "unattributed_time", "request time outside any probe", inside, evidence,
            f"{_pct(inside)} of request time is in no probed stage{' of the server' if joined else ''}: add @probe "
            "to the code between stages (I/O, serialisation, waiting) before trusting the shares"))

    for stage in p.stages:
        if stage.shapes is not None and stage.shapes.dynamic_shape and stage.shapes.distinct > 1:
            verdicts.append(Verdict(
                "dynamic_shapes", f"dynamic shapes in {stage.name}", (stage.share or 0.0) * 0.5,
                {"stage": stage.name, "distinct_shapes": stage.shapes.distinct,
                 "top_shape_share": stage.shapes.top_share},
                f"{stage.name} sees {stage.shapes.distinct} input shapes (the commonest covers "
                f"{_pct(stage.shapes.top_share)}): fixed-shape accelerators would recompile or pad; "
                "keep it on an engine with native dynamic shapes"))

    verdicts.sort(key=lambda v: (-v.score, v.kind, v.title))
    return verdicts
