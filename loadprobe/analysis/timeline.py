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
ENGINE_SERIES = {
    "num_requests_running": "running", "requests_processing": "running",
    "num_requests_waiting": "waiting", "requests_deferred": "waiting", "num_requests_swapped": "swapped",
    "kv_cache_usage_perc": "kv_cache", "gpu_cache_usage_perc": "kv_cache", "cpu_cache_usage_perc": "kv_cache",
    "kv_cache_usage_ratio": "kv_cache"}
"""Scraped series (``--scrape``) the report charts beside the devices, by the name after the engine's
prefix (``vllm:``, ``llamacpp:``): its running, waiting and swapped requests, and its KV-cache use (a
fraction, whatever the name says)."""
ENGINE_REQUESTS = ("running", "waiting", "swapped")


def engine_series(device: str, metric: str) -> str | None:
    """What a scraped engine series counts -- ``"running"``, ``"waiting"``, ``"swapped"`` (requests) or
    ``"kv_cache"`` -- else None: ``("scrape:h:8000", 'vllm:num_requests_running{model_name="m"}')`` -> ``"running"``."""
    if not device.startswith("scrape:"):
        return None
    # by the name after the engine's prefix: ...:per_s and other derived series end otherwise
    return ENGINE_SERIES.get(metric.split("{", 1)[0].rsplit(":", 1)[-1])
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


def points_per_second(at_ns: np.ndarray, amounts: np.ndarray, seconds: int) -> np.ndarray:
    """Per second of ``seconds`` from 0, the amounts at times ``at_ns`` (clipped into the range)."""
    index = np.clip(at_ns // 1_000_000_000, 0, seconds - 1).astype(np.int64)
    return np.bincount(index, weights=amounts, minlength=seconds)[:seconds]


def spread_per_second(a_ns: np.ndarray, b_ns: np.ndarray, amounts: np.ndarray, seconds: int) -> np.ndarray:
    """Per second of ``seconds``, the amounts each spread evenly over [a, b] (a point where a == b).

    The running total F(t) = sum over intervals of rate * clip(t - a, 0, b - a) is piecewise linear,
    its slope rising by each rate at a and falling at b: cumulative sums over the sorted breakpoints
    give F at every second's edge in O((n + seconds) log n)."""
    point = b_ns <= a_ns
    out = points_per_second(a_ns[point], amounts[point], seconds)
    a, b, amount = a_ns[~point], b_ns[~point], amounts[~point]
    if len(a) == 0:
        return out
    rate = amount / (b - a)
    times = np.concatenate([a, b]).astype(np.float64)
    slopes = np.concatenate([rate, -rate])
    order = np.argsort(times, kind="stable")
    times, slopes = times[order], slopes[order]
    slope_sum, intercept_sum = np.cumsum(slopes), np.cumsum(slopes * times)
    edges = np.arange(seconds + 1, dtype=np.float64) * 1e9
    k = np.searchsorted(times, edges, side="right") - 1
    total = np.where(k >= 0, slope_sum[np.maximum(k, 0)] * edges - intercept_sum[np.maximum(k, 0)], 0.0)
    return out + np.diff(total)


def in_buckets(origin_ns: int, per_second: list) -> tuple[int, int, list]:
    """Per-second arrays from ``origin_ns`` as display buckets: (epoch second of the first bucket, its width,
    each array's bucket means to 6 decimals). Widths from the ladder, buckets on multiples of their width."""
    first = origin_ns // 1_000_000_000
    step = bucket_seconds(first, first + len(per_second[0]) - 1, len(per_second))
    shift = first % step
    padded = [np.concatenate([np.zeros(shift), x]) for x in per_second]
    buckets = -(-len(padded[0]) // step)
    means = [np.pad(x, (0, buckets * step - len(x))).reshape(buckets, step).sum(axis=1) / step for x in padded]
    return first - shift, step, [[round(float(v), 6) for v in m] for m in means]


def _display(value: float) -> float:
    return float(f"{value:.4g}")
