"""The arrival curve: request-rate series, peaks and valleys, burstiness, hour-of-day profile."""

from __future__ import annotations

import math
from datetime import datetime, timezone

import numpy as np

from .portrait import Traffic, Window


def bucket_for(duration_s: float) -> int:
    """Per second up to 3 hours, per minute up to 2 days, per hour beyond."""
    if duration_s <= 3 * 3600:
        return 1
    if duration_s <= 2 * 86400:
        return 60
    return 3600


def iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def build_traffic(arrivals: dict, source: str, gaps: list) -> Traffic | None:
    """``arrivals``: epoch second -> requests started; ``gaps``: [n, Σgap, Σgap²] per run and file."""
    if not arrivals:
        return None
    first, last = min(arrivals), max(arrivals)
    per_second = np.zeros(last - first + 1, dtype=np.int64)
    for second, n in arrivals.items():
        per_second[second - first] += n
    duration = len(per_second)
    bucket = bucket_for(duration)
    n_buckets = math.ceil(duration / bucket)
    padded = np.zeros(n_buckets * bucket, dtype=np.int64)
    padded[:duration] = per_second
    counts = padded.reshape(n_buckets, bucket).sum(axis=1)
    total = int(per_second.sum())
    mean_rps = total / duration
    # The last bucket may be partial: peaks and valleys are read over whole buckets when there are any.
    whole = counts[:-1] if n_buckets > 1 and duration % bucket else counts
    peak_i, valley_i = int(np.argmax(whole)), int(np.argmin(whole))
    peak_rps = float(whole[peak_i]) / bucket

    def window(i: int) -> Window:
        start = first + i * bucket
        return Window(iso(start), iso(start + bucket), float(whole[i]) / bucket)

    hour_profile = None
    if duration >= 86400:
        hours = ((first + np.arange(duration)) // 3600) % 24
        sums = np.bincount(hours, weights=per_second, minlength=24)
        seconds = np.bincount(hours, minlength=24)
        hour_profile = [float(s / c) if c else None for s, c in zip(sums, seconds)]
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
        dispersion_index={"1s": _dispersion(per_second), "60s": _dispersion(_rebucket(per_second, 60))},
    )


def _rebucket(per_second: np.ndarray, size: int) -> np.ndarray:
    whole = len(per_second) // size
    return per_second[: whole * size].reshape(whole, size).sum(axis=1) if whole else per_second[:0]


def _dispersion(counts: np.ndarray) -> float | None:
    """Index of dispersion (variance / mean) of counts per window: 1 for Poisson, above for bursts."""
    if len(counts) < 2 or counts.mean() == 0:
        return None
    return float(counts.var() / counts.mean())
