"""Turn merged partial aggregates into a Portrait: percentiles, shares, fits, devices, quality."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from datetime import datetime, timezone

import numpy as np

from . import roofline as rl
from .._errors import listed
from .bottlenecks import find_bottlenecks
from .dataset import describe_skipped
from .energy import build_energy
from .llm import build_llm
from .histogram import Histogram, latency_cdf
from .kernel_numpy import NS_PER_S
from .partials import Partial
from ..portrait import (
    PORTRAIT_VERSION,
    Batch,
    BatchFit,
    DataQuality,
    DeviceMetric,
    Devices,
    Percentiles,
    Portrait,
    Requests,
    Roofs,
    Shapes,
    Stage,
    StageUtilisation,
)
from .timeline import build_timeline
from .traffic import build_traffic, iso
from .._version import __version__

IDLE_UTIL_PCT = 5.0
SERVING_DEVICES = ("cpu", "process", "interpreter:")
"""Devices whose samples (but power) count only from the first to the last second a request arrived on their host:
the plans read them per request (host CPU, process CPU, interpreter CPU), and a model loading for seconds before the
first request, or a process idling after the last, is no request's work."""
DYNAMIC_SHAPE_TOP_SHARE = 0.9  # a stage whose commonest shape covers less than this has dynamic shapes
_RECORDER_COUNTERS = ("spans_recorded", "spans_written", "spans_dropped", "spans_dropped_cap", "spans_dropped_write",
                      "spans_dropped_invalid", "spans_lost", "samples_dropped", "samples_lost", "write_errors",
                      "extractor_errors", "invalid_values")
# Why spans recorded in a service never reached the disk, as the data-quality warning words it.
_LOSS_REASONS = (("spans_dropped_cap", "at the memory cap"), ("spans_dropped_write", "refused by the disk"),
                 ("spans_dropped_invalid", "with values that could not be stored"),
                 ("spans_lost", "unwritten when the recorder stopped"))

BATCH_SIZES_KEPT = 64  # batch sizes listed in a portrait, the commonest first; the rest are counted as "other"


def ranked(counter, n: int | None = None) -> list:
    """Most frequent first, ties by key: the same counts always list in the same order."""
    items = sorted(counter.items(), key=lambda kv: (-kv[1], str(kv[0])))
    return items if n is None else items[:n]


def percentiles(h: Histogram, scale: float = 1e-6) -> Percentiles | None:
    """Percentiles of a histogram, scaled (ns -> ms by default)."""
    if h.total == 0:
        return None
    p = h.percentiles((50, 90, 95, 99, 99.9))
    return Percentiles(p50=p[50] * scale, p90=p[90] * scale, p95=p[95] * scale, p99=p[99] * scale,
                       p999=p[99.9] * scale, max=h.max * scale, mean=h.mean * scale, count=h.total)


def roofs(device, precision: str | None) -> Roofs | None:
    """The roofline chart's roofs for a catalog ``device``; None without a memory bandwidth or peaks."""
    if device is None or not device.memory_bandwidth_bytes_per_s or not device.peak_flops:
        return None
    precision = precision or rl.DEFAULT_PRECISION.get(device.kind, "fp32")
    return Roofs(device=device.id, name=device.name, precision=precision,
                 peak_flops_per_s=dict(device.peak_flops),
                 memory_bandwidth_bytes_per_s=float(device.memory_bandwidth_bytes_per_s))


def build_portrait(part: Partial, runs: list, *, inputs: list, device=None, precision: str | None = None,
                   dataset_skipped: dict | None = None, slo_ttft_ms: float | None = None,
                   slo_tpot_ms: float | None = None) -> Portrait:
    """The portrait of everything in ``part``; ``device`` is a catalog Device for the roofline;
    ``slo_ttft_ms``/``slo_tpot_ms``: the LLM goodput targets (``llm.build_llm``)."""
    source = "requests" if part.arrivals else "root spans"
    traffic = build_traffic(part.arrivals or part.root_arrivals, source,
                            [g for values in part.gaps.values() for g in values])
    stages = [_stage(name, sp, part, device, precision) for name, sp in part.stages.items()]
    stages.sort(key=lambda s: (-(s.share or 0.0), -s.count, s.name))
    energy, stage_energy = build_energy(part)
    for stage in stages:
        for name, value in stage_energy.get(stage.name, {}).items():
            setattr(stage, name, value)
    requests = _requests(part)
    devices = _devices(part)
    quality = _quality(part, runs, dataset_skipped or {})
    quality.warnings += _steal_warnings(devices)
    portrait = Portrait(
        version=PORTRAIT_VERSION,
        loadprobe_version=__version__,
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        inputs=[str(i) for i in inputs],
        roofline_device=device.id if device is not None else None,
        traffic=traffic,
        stages=stages,
        requests=requests,
        devices=devices,
        bottlenecks=[],
        data_quality=quality,
        roofline_roofs=roofs(device, precision),
        timeline=build_timeline(part),
        energy=energy,
        llm=build_llm(part.llm, slo_ttft_ms, slo_tpot_ms, part.samples),
    )
    portrait.bottlenecks = find_bottlenecks(portrait)
    return portrait


def _stage(name: str, sp, part: Partial, device, precision) -> Stage:
    total_request_ns = part.request_total_ns
    statuses = sp.statuses
    n = max(1, sum(statuses.values()))
    latency = percentiles(sp.latency) or Percentiles(count=0)
    timed = sp.latency.total
    intensity = rl.intensity(math.fsum(sp.flops) if sp.flops else None,
                             math.fsum(sp.bytes) if sp.bytes else None, sp.flops_dur_ns, sp.bytes_dur_ns)
    if intensity is not None and device is not None:
        intensity.roofline = rl.place(intensity, device, precision)
    return Stage(
        name=name,
        count=sp.count,
        latency_ms=latency,
        share=sp.in_request_ns / total_request_ns if total_request_ns else None,
        self_share=sp.self_in_request_ns / total_request_ns if total_request_ns else None,
        self_ms_mean=sp.self_ns / timed / 1e6 if timed else None,
        child_ms_mean=(sp.latency.sum - sp.self_ns) / timed / 1e6 if timed else None,
        queue_ms=percentiles(sp.queue),
        error_rate=statuses.get("error", 0) / n,
        timeout_rate=statuses.get("timeout", 0) / n,
        cancelled_rate=statuses.get("cancelled", 0) / n,
        engines=dict(ranked(sp.engines)),
        batch=_batch(sp),
        shapes=_shapes(sp),
        intensity=intensity,
        tokens_in=percentiles(sp.tokens_in, 1.0),
        tokens_out=percentiles(sp.tokens_out, 1.0),
        start_offset_ms=sp.offset_ns / sp.offset_n / 1e6 if sp.offset_n else None,
        latency_cdf=latency_cdf(sp.latency),
        cpu_share=sp.cpu_ns / sp.cpu_own_ns if sp.cpu_own_ns else None,
        cpu_spans=sp.cpu_spans or None,
    )


def _batch(sp) -> Batch | None:
    if not sp.batch:
        return None
    sizes = np.array(sorted(sp.batch), dtype=np.int64)
    counts = np.array([sp.batch[s] for s in sizes], dtype=np.int64)
    total = counts.sum()
    cumulative = np.cumsum(counts)

    def pct(p: float) -> int:
        return int(sizes[np.searchsorted(cumulative, max(1, int(p / 100 * total + 0.5)))])

    n, sb, sbb, sl, sbl, sll = (math.fsum(f[i] for f in sp.fit) for i in range(6))
    fit = None
    denominator = n * sbb - sb * sb
    if n >= 2 and denominator > 0:
        b = (n * sbl - sb * sl) / denominator
        a = (sl - b * sb) / n
        ss_tot = sll - sl * sl / n
        ss_res = sll - a * sl - b * sbl  # residual sum of squares of the least-squares line
        r2 = max(0.0, min(1.0, 1 - ss_res / ss_tot)) if ss_tot > 0 else None
        fit = BatchFit(a_ms=a, b_ms_per_item=b, r2=r2, n=int(n))
    kept = dict(ranked(sp.batch, BATCH_SIZES_KEPT))
    return Batch(mean=float((sizes * counts).sum() / total), p50=pct(50), p99=pct(99), max=int(sizes[-1]),
                 distribution={str(s): c for s, c in kept.items()}, fit=fit,
                 other=int(total) - sum(kept.values()), other_sizes=len(sizes) - len(kept))


def _shapes(sp) -> Shapes | None:
    if not sp.shapes:
        return None
    total = sum(sp.shapes.values()) + sp.shapes_overflow
    top, top_count = ranked(sp.shapes, 1)[0]
    distinct = len(sp.shapes) + (1 if sp.shapes_overflow else 0)
    share = top_count / total
    return Shapes(distinct=distinct, top=top, top_share=share, dynamic_shape=share < DYNAMIC_SHAPE_TOP_SHARE,
                  top_shapes=[[s, c] for s, c in ranked(sp.shapes, 10)])


def _requests(part: Partial) -> Requests | None:
    if not part.request_count:
        return None
    n = max(1, sum(part.request_statuses.values()))
    # With the load client's recording joined, a client span's own time is the time outside the server
    # (the own time of a request only the server saw -- a health check -- is the server's); the server
    # span's own time is in no probed stage too.
    total = part.request_total_ns
    own = part.client_self_ns / total if total else None
    joined = part.client_requests > 0 and part.joined_requests > 0
    return Requests(
        count=part.request_count,
        latency_ms=percentiles(part.requests),
        error_rate=part.request_statuses.get("error", 0) / n,
        timeout_rate=part.request_statuses.get("timeout", 0) / n,
        unattributed_share=(part.request_self_ns + part.joined_server_self_ns) / total if total else None,
        latency_cdf=latency_cdf(part.requests),
        queued_share=part.request_queue_ns / part.request_total_ns if part.request_total_ns else None,
        joined_requests=part.joined_requests if part.client_requests else None,
        outside_server_share=own if joined else None,
    )


def _per_second(sp) -> dict:
    return {s: sp.per_second[s] / sp.per_second_n[s] for s in sp.per_second if sp.per_second_n.get(s)}


def _serving_seconds(part: Partial) -> dict[str, tuple[int, int]]:
    """Each host's first second a request arrived, and the last second any span ended (``SERVING_DEVICES``): the
    last requests' work runs on after their arrival (seconds, for an LLM's answers)."""
    out: dict[str, tuple[int, int]] = {}
    ended = part.last_ns // NS_PER_S if part.last_ns is not None else None
    for (host, second), n in part.host_arrivals.items():
        if n:
            first, last = out.get(host, (second, second))
            out[host] = (min(first, second), max(last, second))
    return {host: (first, max(last, ended if ended is not None else last)) for host, (first, last) in out.items()}


def _while_serving(series: dict, first: int, last: int) -> tuple[dict, int]:
    """(samples, seconds) of a ``SERVING_DEVICES`` series: the seconds from ``first`` to ``last``, and where that
    window has seconds inside it, only their samples stand for it -- its edge seconds also hold what came before
    the first request and after the last (a model loading at full CPU until the traffic starts)."""
    window = {s: v for s, v in series.items() if first <= s <= last}
    if not window:
        return series, len(series)
    inner = {s: v for s, v in window.items() if first < s < last}
    return inner or window, len(window)


def _devices(part: Partial) -> Devices:
    out = Devices()
    util: dict = {}  # (host, device) -> {second: util}
    serving = _serving_seconds(part)
    for (host, device, metric), sp in sorted(part.samples.items()):
        series = _per_second(sp)
        seconds = len(series)
        if host in serving and device.startswith(SERVING_DEVICES) and metric != "power_w":
            series, seconds = _while_serving(series, *serving[host])
        if not series or metric == "energy_j":  # counter deltas: the energy section sums them
            continue
        values = np.array(list(series.values()))
        out.metrics.append(DeviceMetric(host=host, device=device, metric=metric, mean=float(values.mean()),
                                        p95=float(np.percentile(values, 95)), max=float(sp.max),
                                        seconds=seconds))
        if metric == "util_pct":
            util[(host, device)] = series
            out.idle_share[f"{host}/{device}"] = float((values < IDLE_UTIL_PCT).mean())
        if metric == "power_w":
            requests = sum(part.host_arrivals.get((host, s), 0) for s in series)  # served by this host
            if requests:
                out.energy_per_request_j[f"{host}/{device}"] = float(values.sum()) / requests
    busy = defaultdict(dict)
    for (host, stage, second), ns in part.busy.items():
        busy[(host, stage)][second] = ns
    for (host, stage), seconds in sorted(busy.items()):
        for (u_host, device), series in sorted(util.items()):
            if u_host != host:
                continue
            weights = [(ns, series[s]) for s, ns in seconds.items() if s in series]
            total = sum(w for w, _ in weights)
            if total:
                out.utilisation_by_stage.append(StageUtilisation(
                    stage=stage, host=host, device=device, util_pct=sum(w * u for w, u in weights) / total))
    return out


def _steal_warnings(devices: Devices) -> list[str]:
    """A warning for each host whose CPU the hypervisor took ``STEAL_WARN_PCT`` or more of while serving."""
    return [f"host {m.host}: the hypervisor took {m.mean:.0f}% of its CPU time while serving (CPU steal; "
            f"{m.p95:.0f}% in the 95th-percentile second), so the span times include pauses while other virtual "
            "machines ran, and rise and fall with their load; for figures to plan on, record on dedicated cores, or "
            "compare only runs with like steal"
            for m in devices.stolen_cpu()]


def _quality(part: Partial, runs: list, dataset_skipped: dict) -> DataQuality:
    recorder = Counter()
    not_final = []  # runs whose loss cannot be known: no run.json, or one its recorder never finished
    for run in runs:
        counters = run.info.get("counters") or {}
        if run.span_files and (not counters or run.info.get("stopped_ns") is None):
            not_final.append(run.run_dir)
        for name in _RECORDER_COUNTERS:
            value = counters.get(name)
            if isinstance(value, int):
                recorder[name] += value
    skipped = {**dataset_skipped, **part.skipped}
    warnings = []
    if skipped:
        warnings.append(f"{len(skipped)} file(s) skipped: {describe_skipped(skipped)} (all in files_skipped)")
    if part.negative_durations:
        warnings.append(f"{part.negative_durations} span(s) with negative durations ignored")
    if part.null_durations:
        warnings.append(f"{part.null_durations} span(s) without a duration (imported arrival-only data): "
                        "latency figures cover the others")
    lost = recorder["spans_dropped"] + recorder["spans_lost"]
    if lost:
        reasons = [f"{recorder[name]:,} {why}" for name, why in _LOSS_REASONS if recorder[name]]
        if not reasons:  # run.json of a recorder before 0.1 gave no reason
            reasons = [f"{recorder['spans_dropped']:,} dropped"]
        warnings.append(f"the recorder lost {lost:,} span(s): {', '.join(reasons)}; rates and counts are lower bounds")
    if not_final:
        warnings.append(f"{len(not_final)} run(s) left no final counters (no run.json, or its recorder did not stop: "
                        f"still running, killed or out of disk), so their loss is unknown: {listed(not_final)}")
    if recorder["write_errors"]:
        warnings.append(f"{recorder['write_errors']} write error(s) while recording")
    if part.client_requests and part.joined_requests < part.client_requests:
        unseen = part.client_requests - part.joined_requests
        warnings.append(f"{unseen:,} of the load client's {part.client_requests:,} requests have no span in the "
                        "server's recording (failed before it, not recorded, or outside its files): each is counted "
                        "once, from the client's side")
    if part.repeated_roots:
        warnings.append(f"{part.repeated_roots:,} server span(s) with no parent in the server's recording joined a load "
                        "client request that another such span had joined already: each request is counted once, but "
                        "the server's stages under both count in it (a span opened without the request's context -- "
                        "a background task, an OpenTelemetry span started with no parent -- makes a second root); "
                        "give it the request's context")
    if part.unjoined_children and part.unjoined_children > 0.01 * max(1, part.rows):
        warnings.append(f"{part.unjoined_children} span(s) whose parent is in another file: self time is approximate")
    span = ((part.last_ns - part.first_ns) / 1e9) if part.first_ns is not None else 0.0
    return DataQuality(
        files_read=len(part.files),
        files_skipped=[{"path": p, "reason": r} for p, r in sorted(skipped.items())],
        rows=part.rows,
        rows_filtered=part.rows_filtered,
        null_durations=part.null_durations,
        negative_durations=part.negative_durations,
        unjoined_children=part.unjoined_children,
        recorder=dict(recorder),
        counters_unknown=sorted(not_final),
        start=iso(part.first_ns / 1e9) if part.first_ns is not None else None,
        end=iso(part.last_ns / 1e9) if part.last_ns is not None else None,
        span_s=span,
        hosts=sorted({r.host for r in runs}),
        services=sorted({r.service for r in runs}),
        processes=sum(1 for r in runs if r.span_files),
        clock_warnings=_clock_warnings(part),
        warnings=warnings,
        host_hardware=_host_hardware(runs),
    )


def _host_hardware(runs) -> dict:
    """What each host is, from its runs' run.json (the first run of a host that says)."""
    hosts: dict = {}
    for run in runs:
        hw = run.info.get("hardware") if isinstance(run.info, dict) else None
        if not isinstance(hw, dict) or run.host in hosts:
            continue
        cpu = hw.get("cpu") or {}
        hosts[run.host] = {
            "cpu_model": cpu.get("model"),
            "logical_cores": cpu.get("logical_cores"),
            "memory_bytes": hw.get("memory_bytes"),
            "gpus": [g.get("name") for g in hw.get("gpus") or [] if isinstance(g, dict)],
        }
    return dict(sorted(hosts.items()))


def _clock_warnings(part: Partial) -> list[str]:
    out = [f"run {run}: {n} span(s) outside the run's own start/stop time: its clock was stepped while recording"
           for run, n in sorted(part.out_of_window.items())]
    offsets = defaultdict(list)  # (root host, other host) -> how far children fall outside their root
    for seen in part.skew.values():
        roots = [s for s in seen if s[3]]
        if len(roots) != 1:
            continue
        root_host, start, end, _ = roots[0]
        for host, lo, hi, is_root in seen:
            if host != root_host and not is_root:
                offsets[(root_host, host)].append(max(start - lo, hi - end, 0))
    for (a, b), values in sorted(offsets.items()):
        median = float(np.median(values))
        if median > 1_000_000:  # 1 ms: children must lie inside their request
            out.append(f"host {b}'s clock differs from host {a}'s by at least {median / 1e6:.1f} ms "
                       f"({len(values)} shared requests); cross-host timings between them are unreliable")
    return out
