"""The arrival curve: request-rate series, peaks and valleys, burstiness, hour-of-day profile."""

from __future__ import annotations

import math
from datetime import datetime, timezone

import numpy as np

from ..portrait import Traffic, Window


def bucket_for(duration_s: float) -> int:
    """Per second up to 3 hours, per minute up to 2 days, per hour up to 90 days, per day beyond."""
    if duration_s <= 3 * 3600:
        return 1
    if duration_s <= 2 * 86400:
        return 60
    return 3600 if duration_s <= 90 * 86400 else 86400


def iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


FEWEST_INNER = 10
"""Arrivals the whole seconds between the first and the last must hold for the rates to be read from them alone: at
a request every few seconds, the edge seconds hold one each, and leaving them out would halve a 3-request rate."""


def build_traffic(arrivals: dict, source: str, gaps: list) -> Traffic | None:
    """``arrivals``: epoch second -> requests started; ``gaps``: [n, Σgap, Σgap²] per run and file.

    Computed from the seconds that have arrivals, never an array over every second of the span:
    spans far apart in time (two runs years apart, a stray timestamp) cost no more memory.
    """
    if not arrivals:
        return None
    seconds = np.fromiter(arrivals.keys(), dtype=np.int64, count=len(arrivals))
    per_second = np.fromiter(arrivals.values(), dtype=np.int64, count=len(arrivals))
    first, last = int(seconds.min()), int(seconds.max())
    duration = last - first + 1
    bucket = bucket_for(duration)
    n_buckets = -(-duration // bucket)
    counts = np.zeros(n_buckets, dtype=np.int64)
    np.add.at(counts, (seconds - first) // bucket, per_second)
    total = int(per_second.sum())
    # The traffic starts and ends inside its first and last seconds: with seconds between them, the rates
    # (mean, peak, valley, dispersion) are read from those whole seconds alone -- a constant 80 req/s read
    # 76 req/s, a valley of 8 and a dispersion of 3 with its part-filled edges counted.
    inner = (seconds > first) & (seconds < last)
    start, span = first + 1, duration - 2
    if duration < 3 or per_second[inner].sum() < FEWEST_INNER:  # too sparse to tell the edges' part: every second
        inner, start, span = np.ones(len(seconds), bool), first, duration
    mean_rps = float(per_second[inner].sum()) / span
    whole = np.zeros(-(-span // bucket), dtype=np.int64)
    np.add.at(whole, (seconds[inner] - start) // bucket, per_second[inner])
    if len(whole) > 1 and span % bucket:  # the last bucket is partial: peaks and valleys over whole ones
        whole = whole[:-1]
    peak_i, valley_i = int(np.argmax(whole)), int(np.argmin(whole))
    peak_rps = float(whole[peak_i]) / bucket

    def window(i: int) -> Window:
        at = start + i * bucket
        return Window(iso(at), iso(at + bucket), float(whole[i]) / bucket)

    hour_profile = None
    if duration >= 86400:
        sums = np.bincount((seconds // 3600) % 24, weights=per_second, minlength=24)
        hours = np.arange(first // 3600, last // 3600 + 1, dtype=np.int64)  # the seconds of each UTC hour in the span
        covered = np.minimum((hours + 1) * 3600, last + 1) - np.maximum(hours * 3600, first)
        spanned = np.bincount(hours % 24, weights=covered, minlength=24)
        hour_profile = [float(s / c) if c else None for s, c in zip(sums, spanned)]
    n = math.fsum(g[0] for g in gaps)
    cv = None
    if n > 1:
        mean_gap = math.fsum(g[1] for g in gaps) / n
        var = max(0.0, math.fsum(g[2] for g in gaps) / n - mean_gap * mean_gap)
        cv = math.sqrt(var) / mean_gap if mean_gap > 0 else None
    return Traffic(
        source=source,
        requests=total,
        duration_s=float(duration),
        bucket_s=bucket,
        series=[[first + i * bucket, int(c)] for i, c in enumerate(counts)],
        mean_rps=mean_rps,
        peak_rps=peak_rps,
        peak_to_mean=peak_rps / mean_rps if mean_rps else None,
        peak_window=window(peak_i),
        valley_window=window(valley_i),
        hour_of_day=hour_profile,
        interarrival_cv=cv,
        dispersion_index={"1s": _dispersion(seconds[inner] - start, per_second[inner], 1, span),
                          "60s": _dispersion(seconds[inner] - start, per_second[inner], 60, span)},
    )


def _dispersion(offsets: np.ndarray, counts: np.ndarray, size: int, duration: int) -> float | None:
    """Index of dispersion (variance / mean) of arrivals per whole ``size``-second window from the
    first second: 1 for Poisson, above for bursts. The windows without arrivals add (0 - mean)² each."""
    windows = duration // size
    keep = offsets < windows * size
    index, inverse = np.unique(offsets[keep] // size, return_inverse=True)
    sums = np.bincount(inverse, weights=counts[keep], minlength=len(index))
    if windows < 2 or not sums.sum():
        return None
    mean = sums.sum() / windows
    variance = (((sums - mean) ** 2).sum() + (windows - len(index)) * mean * mean) / windows
    return float(variance / mean)
