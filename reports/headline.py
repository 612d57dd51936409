"""The headline figures of a portrait: latency, throughput, batch and power, the four dimensions.

The report's cards and the two-run comparison read the same figures from here.

Usage::

    figures = headline(portrait)
    figures["latency_p95_ms"], figures["peak_rps"], figures["power_w"]
    for f in FIGURES: print(f.label, figures[f.key])
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    unit: str
    better: str | None  # "lower" or "higher": which way a change is an improvement


FIGURES = (
    Figure("latency_p50_ms", "latency p50", "ms", "lower"),
    Figure("latency_p95_ms", "latency p95", "ms", "lower"),
    Figure("latency_p99_ms", "latency p99", "ms", "lower"),
    Figure("peak_rps", "peak throughput", "req/s", "higher"),
    Figure("mean_rps", "mean throughput", "req/s", "higher"),
    Figure("batch_mean", "batch mean", "items", None),
    Figure("batch_p99", "batch p99", "items", None),
    Figure("power_w", "average power", "W", "lower"),
    Figure("energy_per_request_j", "energy per request", "J", "lower"),
    Figure("error_rate", "request errors", "%", "lower"),
    Figure("unattributed_share", "time in no stage", "%", "lower"),
)


def batched_stage(portrait):
    """The stage whose batching matters most: the largest share among stages batching above 1."""
    batched = [s for s in portrait.stages if s.batch is not None]
    above_one = [s for s in batched if s.batch.max > 1]
    pool = above_one or batched
    return max(pool, key=lambda s: (s.share or 0.0, s.count)) if pool else None


def latency_source(portrait):
    """End-to-end request latency, else (no request spans) the stage with the largest share."""
    if portrait.requests is not None and portrait.requests.latency_ms is not None:
        return "requests", portrait.requests.latency_ms
    timed = [s for s in portrait.stages if s.latency_ms.count]
    if not timed:
        return None, None
    top = max(timed, key=lambda s: (s.share or 0.0, s.count))
    return top.name, top.latency_ms


def power(portrait) -> tuple[float | None, float | None]:
    """(Σ mean power_w over every sampled device, mean over hosts of each host's joules per request)."""
    watts = [m.mean for m in portrait.devices.metrics if m.metric == "power_w"]
    per_host: dict = {}
    for key, joules in portrait.devices.energy_per_request_j.items():
        host = key.rsplit("/", 1)[0]
        per_host[host] = per_host.get(host, 0.0) + joules
    energy = sum(per_host.values()) / len(per_host) if per_host else None
    return (sum(watts) if watts else None), energy


def headline(portrait) -> dict:
    """Every figure in FIGURES, None where the portrait cannot say."""
    _, latency = latency_source(portrait)
    traffic, batch = portrait.traffic, batched_stage(portrait)
    watts, energy = power(portrait)
    requests = portrait.requests
    return {
        "latency_p50_ms": latency.p50 if latency else None,
        "latency_p95_ms": latency.p95 if latency else None,
        "latency_p99_ms": latency.p99 if latency else None,
        "peak_rps": traffic.peak_rps if traffic else None,
        "mean_rps": traffic.mean_rps if traffic else None,
        "batch_mean": batch.batch.mean if batch else None,
        "batch_p99": batch.batch.p99 if batch else None,
        "power_w": watts,
        "energy_per_request_j": energy,
        "error_rate": requests.error_rate if requests else None,
        "unattributed_share": requests.unattributed_share if requests else None,
    }
