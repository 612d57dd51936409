"""An LLM engine's load over its requests' window: its running batch, its queue, its KV cache (``llm.engine``).

Two sources, one meaning:

- **spans**: counted from the engine's own requests -- a request waits from the start of its recorded
  queue time until its prefill starts, and runs from then until its last output (a first token that
  ends its prefill, as the sample engine and vLLM's GenAI spans record). The mean is the time-weighted
  count over the window (Little's law: total time in the state / window); the peak, the most at once.
  Exact, so preferred wherever the engine's requests carry a first token.
- **scraped** (``--scrape``), for the rest and for the KV cache, which no span shows: the engine's own
  gauges (``timeline.ENGINE_SERIES``: vLLM's ``num_requests_running``/``num_requests_waiting``/
  ``kv_cache_usage_perc`` and their like), read every ``--every`` -- a request shorter than that may
  fall between two readings. The mean is over the seconds read inside the window, the engines' series
  summed (KV use: averaged, in percent); the peak is the highest reading (the busiest second, where
  several series are summed).

Usage::

    engine = build_engine(part.samples, service_requests, since_ns, until_ns)   # in llm.build_llm
"""

from __future__ import annotations

import numpy as np

from .timeline import engine_series, in_buckets, spread_per_second
from ..portrait import EngineLevel, EngineLoad, EngineSeries

_NS_PER_S = 1_000_000_000


def build_engine(samples: dict, requests, since_ns: int, until_ns: int) -> EngineLoad | None:
    """The engine's load from ``requests`` (``llm.LlmRequests`` of the engine's own spans, or None: over their
    own window), and from scraped ``samples`` ((host, device, metric) -> ``SamplePartial``: over ``since_ns``
    to ``until_ns``) for what the spans do not show; None when neither says anything."""
    counted = {} if requests is None else _counted(requests, int(requests.start.min()),
                                                   int((requests.start + requests.dur).max()))
    scraped = {kind: _scraped(samples, kind, since_ns, until_ns) for kind in ("running", "waiting", "kv_cache")}
    running = counted.get("running") or scraped["running"]
    waiting = counted.get("waiting") or scraped["waiting"]
    if running is None and waiting is None and scraped["kv_cache"] is None:
        return None
    return EngineLoad(running=running, waiting=waiting, kv_cache_pct=scraped["kv_cache"], series=counted.get("series"))


def _scraped(samples: dict, kind: str, since_ns: int, until_ns: int) -> EngineLevel | None:
    first, last = since_ns // _NS_PER_S, until_ns // _NS_PER_S
    per_second: dict = {}  # second -> [Σ series means, series]
    peaks = []
    for (_host, device, metric), sp in samples.items():
        if engine_series(device, metric) != kind:
            continue
        seconds = [s for s, n in sp.per_second_n.items() if n and first <= s <= last]
        for s in seconds:
            entry = per_second.setdefault(s, [0.0, 0])
            entry[0] += sp.per_second[s] / sp.per_second_n[s]
            entry[1] += 1
        if seconds and sp.max is not None:
            peaks.append(sp.max)
    if not per_second:
        return None
    scale = 100.0 if kind == "kv_cache" else 1.0
    values = [(total / n if kind == "kv_cache" else total) * scale for total, n in per_second.values()]
    peak = max(values)  # the busiest second; one series alone: its highest reading
    if len(peaks) == 1:
        peak = max(peak, peaks[0] * scale)
    return EngineLevel(mean=float(np.mean(values)), peak=float(peak), source="scraped")


def _counted(r, since_ns: int, until_ns: int) -> dict:
    """Running and waiting levels and their series from the engine's requests' spans (see the module)."""
    window = until_ns - since_ns
    timed = r.with_first
    if window <= 0 or not timed.any():
        return {}
    admitted = r.first - np.maximum(r.prefill, 0)  # the prefill's start: the first token ends it
    intervals = {"running": (admitted[timed], np.maximum(r.last[timed], r.first[timed]))}
    queued = timed & (r.queued >= 0)
    if queued.any():
        intervals["waiting"] = (admitted[queued] - r.queued[queued], admitted[queued])
    seconds = max(1, -(-window // _NS_PER_S))
    out, open_per_second = {}, []
    for kind, (a, b) in intervals.items():
        a, b = np.clip(a, since_ns, until_ns) - since_ns, np.clip(b, since_ns, until_ns) - since_ns
        out[kind] = EngineLevel(mean=float((b - a).sum()) / window, peak=float(most_at_once(a, b)), source="spans")
        # each interval's length spread over it: the seconds of each second it covers, the mean count open
        open_per_second.append(spread_per_second(a, b, (b - a) / _NS_PER_S, seconds))
    start, step, lines = in_buckets(since_ns, open_per_second)
    out["series"] = EngineSeries(start=start, bucket_s=step, running=lines[0],
                                 waiting=lines[1] if len(lines) > 1 else None)
    return out


def most_at_once(a: np.ndarray, b: np.ndarray) -> int:
    """The most intervals [a, b) open at one time (one ending as another starts: not both)."""
    if len(a) == 0:
        return 0
    times = np.concatenate([a, b])
    steps = np.concatenate([np.ones(len(a), np.int64), -np.ones(len(b), np.int64)])
    order = np.lexsort((steps, times))  # at equal times, ends first
    return int(max(np.cumsum(steps[order]).max(), 0))

