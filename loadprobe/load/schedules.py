"""Arrival schedules: when each request of a load run is due, as offsets in seconds -- no network.

Every schedule is a pure function of its arguments (seeded where random), so the same call
gives the same offsets in ``loadprobe load``, ``loadprobe simulate`` and the planner's
simulations. ``arrivals`` reads recorded arrival times (epoch ns) from a loadprobe recording
or a CSV/TSV/JSONL request log, and ``replay`` turns them into offsets.

Usage::

    from loadprobe.load.schedules import arrivals, poisson, replay

    offsets = poisson(200, duration=30, seed=1)                 # seconds from the start
    trace = arrivals("AzureLLMInferenceTrace_code.csv")         # epoch ns, from a log or data/
    offsets = replay(trace, speed=1.5)                          # the trace, 1.5x faster
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np

from .._errors import LoadprobeError

__all__ = ["DEFAULT_DURATION_S", "MAX_ARRIVALS", "arrivals", "bursty", "check_positive", "check_requests", "constant",
           "diurnal", "poisson", "replay"]

DEFAULT_DURATION_S = 10.0
"""How long a rate-driven schedule runs when neither a duration nor a request count is given."""

MAX_ARRIVALS = 10_000_000
"""The most arrivals one schedule holds (80 MB of offsets, minutes to simulate): refused before drawing."""

_MAX_PEAK_TO_MEAN = 20.0  # the diurnal curve's exp(k) / I0(k) reaches 20 at k ~ 64; numpy's i0 is exact there


def constant(rate: float, *, duration: float | None = None, requests: int | None = None) -> np.ndarray:
    """One request every ``1 / rate`` seconds: ``constant(100, duration=10)`` -> 1,000 offsets."""
    check_positive("--rate", rate)
    horizon = _horizon(duration, requests)
    _bounded("--rate", rate, horizon, requests)
    count = requests if horizon == math.inf else math.ceil(horizon * rate - 1e-9)
    return _cut(np.arange(count) / rate, duration, requests)


def poisson(rate: float, *, duration: float | None = None, requests: int | None = None,
            seed: int | None = None) -> np.ndarray:
    """Independent arrivals at mean ``rate`` per second (exponential gaps)."""
    check_positive("--rate", rate)
    rng = np.random.default_rng(seed)
    horizon = _horizon(duration, requests)
    _bounded("--rate", rate, horizon, requests)
    if horizon == math.inf:
        return np.cumsum(rng.exponential(1 / rate, check_requests(requests)))
    return _cut(_homogeneous(rng, rate, 0.0, horizon), duration, requests)


def diurnal(rate: float, *, duration: float | None = None, peak_to_mean: float = 2.0, requests: int | None = None,
            seed: int | None = None) -> np.ndarray:
    """A day's traffic compressed into the run: valley at the start and end, peak in the middle.

    The rate follows ``rate * exp(-k cos(2 pi t / duration)) / I0(k)``, a smooth one-peak
    curve whose mean is ``rate`` and whose peak is ``peak_to_mean`` times it (k is solved
    for). Arrivals are Poisson under that curve, drawn by thinning. With ``requests`` and
    no ``duration``, a day lasts ``requests / rate`` seconds and the curve repeats until
    that many have been drawn.
    """
    check_positive("--rate", rate)
    if not 1.0 <= peak_to_mean <= _MAX_PEAK_TO_MEAN:
        raise LoadprobeError(f"--peak-to-mean {peak_to_mean:g} is out of range; give a ratio from 1 "
                             f"(flat) to {_MAX_PEAK_TO_MEAN:g}, e.g. 2")
    rng = np.random.default_rng(seed)
    horizon = _horizon(duration, requests)
    day = check_requests(requests) / rate if horizon == math.inf else horizon
    k = _solve_k(peak_to_mean)
    scale = rate / float(np.i0(k))
    peak = scale * math.exp(k)
    _bounded("--rate", rate, horizon, requests, drawn=peak * horizon)  # thinning draws at the peak rate
    offsets, end = np.zeros(0), 0.0
    while end < horizon and (requests is None or len(offsets) < requests):
        start, end = end, min(horizon, end + day)
        candidates = _homogeneous(rng, peak, start, end)
        keep_p = scale * np.exp(-k * np.cos(2 * np.pi * candidates / day)) / peak
        offsets = np.concatenate([offsets, candidates[rng.random(len(candidates)) < keep_p]])
    return _cut(offsets, duration, requests)


def bursty(burst_rate: float, *, rate: float = 0.0, on_s: float = 1.0, off_s: float = 9.0,
           duration: float | None = None, requests: int | None = None, seed: int | None = None) -> np.ndarray:
    """On/off bursts (a two-state Markov-modulated Poisson process).

    Bursts last ``on_s`` seconds on average (exponentially distributed) at ``burst_rate``
    per second; the quiet spells between them last ``off_s`` on average at ``rate`` (0:
    silence). The mean rate is ``(burst_rate * on_s + rate * off_s) / (on_s + off_s)``.
    """
    check_positive("--burst-rate", burst_rate)
    check_positive("--on-s", on_s)
    check_positive("--off-s", off_s)
    if rate < 0 or not math.isfinite(rate):
        raise LoadprobeError(f"--rate {rate:g} is negative; with --bursty it is the rate between bursts (>= 0)")
    rng = np.random.default_rng(seed)
    horizon = _horizon(duration, requests)
    _bounded("--burst-rate", burst_rate, horizon, requests, drawn=max(burst_rate, rate) * horizon)
    if horizon != math.inf and 2 * horizon / (on_s + off_s) > MAX_ARRIVALS:  # a Python loop per spell
        raise LoadprobeError(f"--on-s {on_s:g} and --off-s {off_s:g} make ~{2 * horizon / (on_s + off_s):.3g} "
                             f"bursts and gaps in {horizon:g} s, more than {MAX_ARRIVALS:,}; give longer ones")
    on = rng.random() < on_s / (on_s + off_s)  # start in each state as often as the process is in it
    parts, t, count = [], 0.0, 0
    while t < horizon and (requests is None or count < requests):
        end = min(horizon, t + rng.exponential(on_s if on else off_s))
        times = _homogeneous(rng, burst_rate if on else rate, t, end)
        parts.append(times)
        count += len(times)
        t, on = end, not on
    return _cut(np.concatenate(parts) if parts else np.zeros(0), duration, requests)


def replay(times_ns, *, speed: float = 1.0, duration: float | None = None, requests: int | None = None) -> np.ndarray:
    """Offsets of recorded arrival times (epoch ns, from ``arrivals``), ``speed`` times faster.

    ``speed=1.5`` plays the trace's peak at 1.5x: the stress test before buying hardware.
    """
    check_positive("--speed", speed)
    times = np.sort(np.asarray(times_ns, dtype=np.int64))
    if len(times) == 0:
        raise LoadprobeError("the replay source has no arrivals; give a trace or data directory with requests")
    return _cut((times - times[0]) / 1e9 / speed, duration, requests)


def arrivals(source, *, preset: str | None = None, ts_col: str | None = None, ts_unit: str | None = None,
             ts_format: str | None = None, tokens: bool = False, service: str | None = None):
    """Sorted arrival times (epoch ns) of the requests in recorded data or a request log.

    ``source`` is a loadprobe data directory (or spans file): its root request spans are
    the arrivals. Anything else is a CSV/TSV/JSONL log, read by ``loadprobe.record.importer`` with
    the same presets, column options and timestamp rules as ``loadprobe import``.
    ``tokens=True`` returns ``(times, tokens_in, tokens_out)``, each request's prompt and output
    tokens in the same order (-1 where the source has none): what ``loadprobe load --openai`` asks.
    Recorded data is one service's, as ``loadprobe analyze`` takes it (``service``: its name, where the
    data holds several); with the load client's recording of its requests beside it, each request is
    replayed once, when the client sent it.
    """
    path = Path(source)
    if path.is_dir() or path.suffix in (".parquet", ".arrows"):
        found = _recorded_arrivals(str(source), service)
    else:
        from ..record.importer import import_log

        with tempfile.TemporaryDirectory(prefix="loadprobe-replay-") as scratch:
            import_log(path, scratch, preset=preset, ts_col=ts_col, ts_unit=ts_unit, ts_format=ts_format)
            found = _recorded_arrivals(scratch)
    return found if tokens else found[0]


REPLAY_ONE = ("a replay is of one service: give the service's own folder (DATA/HOST/SERVICE), or --service NAME "
              "(simulate --trace)")


def _recorded_arrivals(source: str, service: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start times of root spans, with their tokens in and out (-1: none), sorted by time; of request
    roots only, when the data has any (as analysis counts)."""
    # analysis's reader and its rule of one service: Parquet and unfinished streams, version-checked
    from ..analysis.services import recorded_service, span_tables, unreadable

    own, clients = recorded_service([source], service, how=REPLAY_ONE)
    requests, roots, skipped = [], [], {}
    for table in span_tables(clients or own, skipped):  # the load client's view when joined: each request once, as sent
        is_root = ~table.column("parent_id").is_valid().to_numpy(zero_copy_only=False)
        has_id = table.column("request_id").is_valid().to_numpy(zero_copy_only=False)
        columns = np.stack([_filled(table, name) for name in ("ts_ns", "tokens_in", "tokens_out")])
        roots.append(columns[:, is_root])
        requests.append(columns[:, is_root & has_id])
    found = np.concatenate(requests, axis=1) if requests else np.zeros((3, 0), np.int64)
    if found.shape[1] == 0 and roots:
        found = np.concatenate(roots, axis=1)
    if found.shape[1] == 0:
        raise LoadprobeError(f"{source}: no root spans to replay{unreadable(skipped)}; record requests with "
                             "loadprobe.request or give a request log")
    found = found[:, np.argsort(found[0], kind="stable")]
    return found[0], found[1], found[2]


def _filled(table, name: str) -> np.ndarray:
    """An integer column as int64, -1 where it is null or absent."""
    if name not in table.column_names:
        return np.full(table.num_rows, -1, dtype=np.int64)
    column = table.column(name)
    return column.fill_null(-1).to_numpy().astype(np.int64) if column.null_count else column.to_numpy().astype(np.int64)


def check_positive(option: str, value: float) -> None:
    """Refuse a rate, duration or timeout that is not a positive finite number, naming its option."""
    if not (value > 0 and math.isfinite(value)):
        raise LoadprobeError(f"{option} {value:g} must be a positive number")


def _horizon(duration: float | None, requests: int | None) -> float:
    """The schedule's length: the duration; unbounded (until ``requests``) when only they are given."""
    if duration is not None:
        check_positive("--duration", duration)
        return float(duration)
    return DEFAULT_DURATION_S if requests is None else math.inf


def _bounded(option: str, rate: float, horizon: float, requests: int | None, drawn: float | None = None) -> None:
    """Refuse a schedule that would draw more than MAX_ARRIVALS arrivals (``drawn``, by default
    ``rate`` over ``horizon``, or ``requests`` when only they end it) before drawing it."""
    if horizon == math.inf:
        if check_requests(requests) > MAX_ARRIVALS:
            raise LoadprobeError(f"--requests {requests:,} is more than the {MAX_ARRIVALS:,} arrivals one schedule "
                                 "holds; give fewer, or run it in parts")
        return
    drawn = rate * horizon if drawn is None else drawn
    if drawn > MAX_ARRIVALS:
        raise LoadprobeError(f"{option} {rate:g}/s for {horizon:g} s is about {drawn:.3g} arrivals, more than the "
                             f"{MAX_ARRIVALS:,} one schedule holds; lower {option} or --duration (rate x duration "
                             f"<= {MAX_ARRIVALS:,})")


def check_requests(requests: int | None) -> int | None:
    """``requests`` itself, refused when it is below 1 (None: no count given)."""
    if requests is not None and requests < 1:
        raise LoadprobeError(f"--requests {requests} must be at least 1")
    return requests


def _cut(offsets: np.ndarray, duration: float | None, requests: int | None) -> np.ndarray:
    check_requests(requests)
    if duration is not None:
        offsets = offsets[offsets < duration]
    return offsets[:requests] if requests is not None else offsets


def _homogeneous(rng: np.random.Generator, rate: float, start: float, end: float) -> np.ndarray:
    """Poisson arrivals on [start, end): a Poisson count, placed uniformly (same law, one draw each)."""
    if rate <= 0 or end <= start:
        return np.zeros(0)
    return np.sort(rng.uniform(start, end, rng.poisson(rate * (end - start))))


def _solve_k(peak_to_mean: float) -> float:
    """k with exp(k) / I0(k) = peak_to_mean (increasing in k), by bisection."""
    lo, hi = 0.0, 80.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if math.exp(mid) / float(np.i0(mid)) < peak_to_mean:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2

