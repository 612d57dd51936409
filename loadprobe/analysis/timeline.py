"""Down-sample device metrics and stage activity onto shared time buckets, for display.

The report draws utilisation, memory and power (and a scraped engine's running and waiting requests
and KV-cache use) over time with the stages' activity on the same axis, so both are cut into the same buckets: the smallest step of a fixed ladder that
keeps every series at or under ``MAX_POINTS`` points (and all of them together under
``MAX_TOTAL_POINTS``). Built from the merged per-second aggregates the map step already
keeps (``Partial.samples`` and ``Partial.busy``), so it costs the map step nothing and is
identical for any merge order. Values are rounded to 4 significant digits: they are for
the eye; the statistics in ``devices`` and ``stages`` are computed from the full data.

Usage::

    timeline = build_timeline(merged_partial)     # a portrait.Timeline, or None without data
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..portrait import DeviceSeries, StageSeries, Timeline

MAX_POINTS = 2_000  # per series
MAX_TOTAL_POINTS = 200_000  # over all series: a fleet's many hosts get coarser buckets
METRICS = ("util_pct", "used_bytes", "mem_used_bytes", "power_w")  # what the report charts
ENGINE_REQUESTS = frozenset({"num_requests_running", "num_requests_waiting", "num_requests_swapped",
                             "requests_processing", "requests_deferred"})
ENGINE_KV_CACHE = frozenset({"kv_cache_usage_perc", "gpu_cache_usage_perc", "cpu_cache_usage_perc",
                             "kv_cache_usage_ratio"})
"""Scraped series (``--scrape``) the report charts beside the devices, by the name after the engine's
prefix (``vllm:``, ``llamacpp:``): its running and waiting requests, and its KV-cache use (a fraction)."""


def engine_series(device: str, metric: str) -> str | None:
    """``"requests"`` or ``"kv_cache"`` for a scraped engine series the report charts, else None:
    ``("scrape:h:8000", 'vllm:num_requests_running{model_name="m"}')`` -> ``"requests"``."""
    if not device.startswith("scrape:"):
        return None
    name = metric.split("{", 1)[0].rsplit(":", 1)[-1]  # ...:per_s and other derived series end otherwise
    if name in ENGINE_REQUESTS:
        return "requests"
    return "kv_cache" if name in ENGINE_KV_CACHE else None
_LADDER = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def bucket_seconds(first: int, last: int, series: int) -> int:
    """The smallest ladder step giving each of ``series`` series few enough points from ``first`` to ``last``."""
    limit = max(1, min(MAX_POINTS, MAX_TOTAL_POINTS // max(1, series)))
    for step in _LADDER:
        if last // step - first // step + 1 <= limit:
            return step
    days = 86400 * -(-(last - first + 1) // (86400 * limit))  # whole days beyond the ladder
    return days if last // days - first // days + 1 <= limit else days * 2


def build_timeline(part) -> Timeline | None:
    """The display timeline of a merged partial; None when it has neither samples nor spans."""
    devices = {key: sp for key, sp in sorted(part.samples.items())
               if (key[2] in METRICS or engine_series(key[1], key[2])) and sp.per_second_n}
    busy: dict = defaultdict(dict)  # stage -> {second: ns}, summed over hosts
    for (_host, stage, second), ns in part.busy.items():
        seconds = busy[stage]
        seconds[second] = seconds.get(second, 0) + ns
    seconds = [s for sp in devices.values() for s in (min(sp.per_second_n), max(sp.per_second_n))]
    seconds += [s for per_stage in busy.values() for s in (min(per_stage), max(per_stage))]
    if not seconds:
        return None
    first, last = min(seconds), max(seconds)
    step = bucket_seconds(first, last, len(devices) + len(busy))
    origin = first // step
    buckets = last // step - origin + 1
    out = Timeline(start=origin * step, bucket_s=step, buckets=buckets)
    for (host, device, metric), sp in devices.items():
        secs = np.array(sorted(s for s, n in sp.per_second_n.items() if n), dtype=np.int64)
        means = np.array([sp.per_second[s] / sp.per_second_n[s] for s in secs.tolist()], dtype=np.float64)
        index = secs // step - origin
        sums = np.bincount(index, weights=means, minlength=buckets)
        counts = np.bincount(index, minlength=buckets)
        values = [_display(s / c) if c else None for s, c in zip(sums.tolist(), counts.tolist())]
        out.device_series.append(DeviceSeries(host=host, device=device, metric=metric, values=values))
    for stage in sorted(busy):
        secs = np.fromiter(busy[stage].keys(), dtype=np.int64, count=len(busy[stage]))
        ns = np.fromiter(busy[stage].values(), dtype=np.int64, count=len(busy[stage]))
        total = np.zeros(buckets, dtype=np.int64)
        np.add.at(total, secs // step - origin, ns)  # integer sums: exact in any order
        busy_share = [_display(t / (step * 1e9)) for t in total.tolist()]
        out.stage_series.append(StageSeries(stage=str(stage), busy=busy_share))
    return out


def _display(value: float) -> float:
    return float(f"{value:.4g}")
