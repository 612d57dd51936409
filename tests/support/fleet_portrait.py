"""The portrait of a large fleet recording, synthesised at the largest shape the analysis produces.

``benchmarks/gen_portrait.py`` writes it from the command line (bench_report.py renders it);
tests/reports/test_report_html.py checks the report of it stays small. Usage::

    from tests.support.fleet_portrait import fleet_portrait
    portrait = fleet_portrait(spans=100_000_000, hours=24, hosts=8, gpus=4, stages=12)

Recording and analysing 100M spans takes minutes; what sizes the HTML report is only the
portrait's shape, so this builds that shape directly, with loadprobe's own finalising
pieces wherever they apply: the arrival curve (``traffic.build_traffic`` over per-second
arrivals following a diurnal curve with bursts), per-stage HdrHistogram latency
percentiles and display CDFs (``finalize.percentiles``/``latency_cdf`` over lognormal
samples), batch sizes and fits, roofline placements against the NVIDIA L4
(``roofline.place``), per-host device metrics (CPU utilisation and power, memory, and each
GPU's utilisation, memory and power), the display timeline at the bucket size
``timeline.bucket_seconds`` picks for that many series over that span, and the bottleneck
verdicts (``bottlenecks.find_bottlenecks``). Span counts are ``spans``, spread over
requests of ``stages`` + 1 spans each. Deterministic for a seed.
"""

from __future__ import annotations

import math

import numpy as np

from loadprobe._version import __version__
from loadprobe.analysis import roofline as rl
from loadprobe.analysis.bottlenecks import find_bottlenecks
from loadprobe.analysis.finalize import latency_cdf, percentiles, roofs
from loadprobe.analysis.histogram import Histogram
from loadprobe.analysis.timeline import bucket_seconds
from loadprobe.analysis.traffic import build_traffic, iso
from loadprobe.catalog import load_catalog
from loadprobe.portrait import (PORTRAIT_VERSION, Batch, BatchFit, DataQuality, DeviceMetric, Devices, DeviceSeries,
                                Portrait, Requests, Shapes, Stage, StageSeries, StageUtilisation, Timeline)

T0 = 1_796_198_400  # 2026-12-02T08:00:00Z
STAGE_NAMES = ["decode", "resize", "normalize", "backbone", "neck", "head", "nms", "track", "postprocess",
               "serialize", "audit-log", "cache-write", "enrich", "rerank", "filter", "respond"]
SAMPLES_PER_HISTOGRAM = 200_000


def fleet_portrait(*, spans: int = 100_000_000, hours: float = 24, hosts: int = 8, gpus: int = 4, stages: int = 12,
                   seed: int = 1) -> Portrait:
    """A portrait shaped like a fleet's ``spans``-span recording over ``hours``."""
    rng = np.random.default_rng(seed)
    duration = int(hours * 3600)
    n_requests = spans // (stages + 1)
    arrivals = _arrivals(rng, duration, n_requests)
    mean_gap = duration / n_requests
    traffic = build_traffic(arrivals, "requests", [[n_requests - 1.0, (n_requests - 1) * mean_gap,
                                                    (n_requests - 1) * 2.3 * mean_gap * mean_gap]])
    device = load_catalog().get("nvidia-l4")
    names = (STAGE_NAMES * (1 + stages // len(STAGE_NAMES)))[:stages]
    names = [n if names.count(n) == 1 else f"{n}-{i}" for i, n in enumerate(names)]
    shares = rng.dirichlet(np.ones(stages)) * 0.9
    root_latency = Histogram()
    root_latency.record((rng.lognormal(math.log(40e6), 0.5, SAMPLES_PER_HISTOGRAM)).astype(np.int64))
    stage_list = [_root("POST /infer", n_requests, root_latency)]
    offset = 0.5
    for i, name in enumerate(names):
        batched = name in ("backbone", "head")
        stage_list.append(_stage(rng, name, n_requests, shares[i], offset, device, batched=batched))
        offset += 40 * shares[i]
    stage_list.sort(key=lambda s: (-(s.share or 0.0), -s.count, s.name))
    host_names = [f"infer-{i + 1:02d}" for i in range(hosts)]
    devices, timeline = _devices(rng, host_names, gpus, names, duration, n_requests)
    portrait = Portrait(
        version=PORTRAIT_VERSION, loadprobe_version=__version__, generated_at=iso(T0 + duration + 600),
        inputs=[f"synthetic fleet: {spans:,} spans"], roofline_device=device.id, traffic=traffic, stages=stage_list,
        requests=Requests(count=n_requests, latency_ms=percentiles(root_latency), error_rate=0.002,
                          timeout_rate=0.0005, unattributed_share=0.1, latency_cdf=latency_cdf(root_latency)),
        devices=devices, bottlenecks=[], data_quality=_quality(spans, duration, host_names),
        roofline_roofs=roofs(device, None), timeline=timeline)
    for stage in portrait.stages:  # percentiles came from a sample: counts are the fleet's
        stage.latency_ms.count = stage.count
    portrait.requests.latency_ms.count = n_requests
    portrait.bottlenecks = find_bottlenecks(portrait)
    return portrait


def _arrivals(rng, duration: int, total: int) -> dict:
    t = np.arange(duration)
    curve = 1 + 0.6 * np.sin(2 * np.pi * (t / 86400 - 0.3)) + 0.1 * np.sin(2 * np.pi * t / 1800)
    for start in rng.integers(0, duration, size=max(1, duration // 7200)):
        curve[start:start + 120] *= 2.5  # two-minute bursts
    rate = curve / curve.sum() * total
    counts = rng.poisson(rate)
    return {T0 + int(s): int(c) for s, c in zip(t.tolist(), counts.tolist()) if c}


def _root(name: str, count: int, h: Histogram) -> Stage:
    return Stage(name=name, count=count, latency_ms=percentiles(h), share=1.0, self_share=0.1, self_ms_mean=4.0,
                 child_ms_mean=36.0, queue_ms=None, error_rate=0.002, timeout_rate=0.0005, cancelled_rate=0.0,
                 engines={}, batch=None, shapes=None, intensity=None, latency_cdf=latency_cdf(h))


def _stage(rng, name: str, count: int, share: float, offset_ms: float, device, batched: bool) -> Stage:
    h = Histogram()
    median_ns = max(20_000.0, share * 40e6)
    h.record(rng.lognormal(math.log(median_ns), rng.uniform(0.3, 1.2), SAMPLES_PER_HISTOGRAM).astype(np.int64))
    batch = intensity = shapes = None
    engine = "gpu0" if batched else "cpu"
    if batched:
        sizes = np.minimum(rng.geometric(0.25, SAMPLES_PER_HISTOGRAM), 64)
        values, counts = np.unique(sizes, return_counts=True)
        scale = count / SAMPLES_PER_HISTOGRAM
        distribution = {str(int(v)): int(c * scale) for v, c in zip(values, counts)}
        batch = Batch(mean=float(sizes.mean()), p50=int(np.percentile(sizes, 50)), p99=int(np.percentile(sizes, 99)),
                      max=int(sizes.max()), distribution=distribution,
                      fit=BatchFit(a_ms=median_ns / 2e6, b_ms_per_item=median_ns / 8e6, r2=0.81, n=count))
        flops, nbytes = 8.7e9 * count, 3e7 * count
        busy_s = h.mean * count / 1e9
        intensity = rl.intensity(flops, nbytes, int(busy_s * 1e9), int(busy_s * 1e9))
        intensity.roofline = rl.place(intensity, device)
        shapes = Shapes(distinct=3, top="4x3x640x640", top_share=0.97, dynamic_shape=False,
                        top_shapes=[["4x3x640x640", int(count * 0.97)], ["8x3x640x640", int(count * 0.03)]])
    elif name == "nms":
        shapes = Shapes(distinct=8400, top="112x4", top_share=0.01, dynamic_shape=True,
                        top_shapes=[[f"{n}x4", count // 100] for n in range(100, 110)])
    return Stage(name=name, count=count, latency_ms=percentiles(h), share=share, self_share=share,
                 self_ms_mean=h.mean / 1e6, child_ms_mean=0.0, queue_ms=percentiles(h) if batched else None,
                 error_rate=0.001, timeout_rate=0.0, cancelled_rate=0.0, engines={engine: count}, batch=batch,
                 shapes=shapes, intensity=intensity, start_offset_ms=offset_ms, latency_cdf=latency_cdf(h))


def _devices(rng, hosts: list, gpus: int, stages: list, duration: int, n_requests: int):
    per_host = [("cpu", "util_pct", 55, 20), ("cpu", "power_w", 180, 40), ("memory", "used_bytes", 9e10, 5e9)]
    for g in range(gpus):
        per_host += [(f"gpu{g}", "util_pct", 45, 30), (f"gpu{g}", "mem_used_bytes", 1.6e10, 2e9),
                     (f"gpu{g}", "power_w", 55, 15)]
    series_count = len(hosts) * len(per_host) + len(stages) + 1
    step = bucket_seconds(T0, T0 + duration - 1, series_count)
    buckets = (T0 + duration - 1) // step - T0 // step + 1
    wave = 1 + 0.6 * np.sin(2 * np.pi * ((T0 // step * step + np.arange(buckets) * step) / 86400 - 0.3))
    devices = Devices()
    timeline = Timeline(start=T0 // step * step, bucket_s=step, buckets=buckets)
    for host in hosts:
        for device, metric, level, spread in per_host:
            values = np.maximum(0.0, level * wave + rng.normal(0, spread / 3, buckets))
            if metric == "util_pct":
                values = np.minimum(values, 100.0)
            timeline.device_series.append(DeviceSeries(host=host, device=device, metric=metric,
                                                       values=[float(f"{v:.4g}") for v in values]))
            devices.metrics.append(DeviceMetric(host=host, device=device, metric=metric, mean=float(values.mean()),
                                                p95=float(np.percentile(values, 95)), max=float(values.max()),
                                                seconds=duration))
            if metric == "util_pct":
                devices.idle_share[f"{host}/{device}"] = float((values < 5).mean())
            if metric == "power_w":
                joules = float(values.mean()) * duration
                devices.energy_per_request_j[f"{host}/{device}"] = joules / (n_requests / len(hosts))
        for stage in stages[:4]:
            devices.utilisation_by_stage.append(StageUtilisation(stage=stage, host=host, device="gpu0",
                                                                 util_pct=float(rng.uniform(20, 80))))
    for stage in ["POST /infer", *stages]:
        busy = np.maximum(0.0, rng.uniform(0.5, 6) * wave + rng.normal(0, 0.2, buckets))
        timeline.stage_series.append(StageSeries(stage=stage, busy=[float(f"{v:.4g}") for v in busy]))
    return devices, timeline


def _quality(spans: int, duration: int, hosts: list) -> DataQuality:
    return DataQuality(files_read=spans // 1_000_000 + len(hosts) * 24, files_skipped=[], rows=spans, rows_filtered=0,
                       null_durations=0, negative_durations=0, unjoined_children=spans // 10_000,
                       recorder={"spans_dropped": 0, "samples_dropped": 0, "write_errors": 0, "extractor_errors": 0,
                                 "invalid_values": 0},
                       start=iso(T0), end=iso(T0 + duration), span_s=float(duration), hosts=hosts,
                       services=["vision"], processes=len(hosts) * 4, clock_warnings=[], warnings=[])
