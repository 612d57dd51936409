"""Log-bucketed histograms with HdrHistogram's bucket scheme, recorded a numpy array at a time.

Counts live in a plain int64 array laid out exactly like HdrHistogram's ``counts`` array
(3 significant digits, unit 1, values up to about 73 minutes in nanoseconds), so two
histograms merge by adding arrays, in any order, with identical results, and a
histogram can be handed to any HdrHistogram implementation. Any recorded value is
reported within 0.1% (``RELATIVE_ERROR``).

Usage::

    h = Histogram()
    h.record(np.array([1_000, 2_000_000, 35_000_000]))
    h.value_at_percentile(99)      # ~35_000_000
    merged = h.merged(other)
"""

from __future__ import annotations

import math

import numpy as np

SIGNIFICANT_DIGITS = 3
HIGHEST_TRACKABLE = 2**42  # ns: about 73 minutes; larger values are clamped and counted
_SUB_BUCKET_COUNT = 2 ** math.ceil(math.log2(2 * 10**SIGNIFICANT_DIGITS))  # 2048
_HALF_MAGNITUDE = int(math.log2(_SUB_BUCKET_COUNT)) - 1  # 10
_HALF_COUNT = _SUB_BUCKET_COUNT // 2
_MASK = _SUB_BUCKET_COUNT - 1
RELATIVE_ERROR = 1.0 / _HALF_COUNT  # ~0.1%: the width of a sub-bucket relative to its value


def _bucket_count(highest: int) -> int:
    smallest_untrackable = _SUB_BUCKET_COUNT
    buckets = 1
    while smallest_untrackable <= highest:
        smallest_untrackable <<= 1
        buckets += 1
    return buckets


COUNTS_LEN = (_bucket_count(HIGHEST_TRACKABLE) + 1) * _HALF_COUNT


def bucket_index(values: np.ndarray) -> np.ndarray:
    """HdrHistogram counts-array index of each value (int64, >= 0, clamped to HIGHEST_TRACKABLE)."""
    v = np.minimum(np.asarray(values, dtype=np.int64), HIGHEST_TRACKABLE)
    # floor(log2(v | mask)) is exact through frexp for values below 2**53.
    exponent = np.frexp((v | _MASK).astype(np.float64))[1] - 1
    bucket = exponent - _HALF_MAGNITUDE
    sub = v >> bucket
    return ((bucket + 1) << _HALF_MAGNITUDE) + (sub - _HALF_COUNT)


def _lowest_value(index: np.ndarray | int):
    index = np.asarray(index, dtype=np.int64)
    bucket = (index >> _HALF_MAGNITUDE) - 1
    sub = (index & (_HALF_COUNT - 1)) + _HALF_COUNT
    low = bucket < 0
    sub = np.where(low, sub - _HALF_COUNT, sub)
    bucket = np.where(low, 0, bucket)
    return sub << bucket, bucket


def highest_equivalent(index) -> np.ndarray:
    """The largest value that lands in bucket ``index`` (what HdrHistogram reports for percentiles)."""
    low, bucket = _lowest_value(index)
    return low + (np.int64(1) << bucket) - 1


def midpoint(index) -> np.ndarray:
    low, bucket = _lowest_value(index)
    return low + ((np.int64(1) << bucket) >> 1)


class Histogram:
    """Counts of non-negative integers (nanoseconds, tokens, batch sizes) in HdrHistogram buckets."""

    __slots__ = ("counts", "total", "sum", "min", "max", "clamped")

    def __init__(self) -> None:
        self.counts = np.zeros(COUNTS_LEN, dtype=np.int64)
        self.total = 0
        self.sum = 0  # exact: Python int
        self.min: int | None = None
        self.max: int | None = None
        self.clamped = 0

    def record(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.int64)
        if values.size == 0:
            return
        self.counts += np.bincount(bucket_index(values), minlength=COUNTS_LEN)
        self._note(values)

    def add_recorded(self, total: int, value_sum: int, lo: int, hi: int, clamped: int) -> None:
        """Account for values whose bucket counts were added to ``counts`` directly (the compiled
        map step writes there): how many, their exact sum, min, max and how many were clamped.
        With those counts, the same result as ``record``."""
        if total == 0:
            return
        self.total += int(total)
        self.sum += int(value_sum)
        self.min = int(lo) if self.min is None else min(self.min, int(lo))
        self.max = int(hi) if self.max is None else max(self.max, int(hi))
        self.clamped += int(clamped)

    def _note(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        self.total += int(values.size)
        # Exact: int64 partial sums over chunks small enough not to overflow, then Python ints.
        self.sum += sum(int(c.sum(dtype=np.int64)) for c in np.array_split(values, max(1, values.size >> 16)))
        lo, hi = int(values.min()), int(values.max())
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)
        self.clamped += int((values > HIGHEST_TRACKABLE).sum())

    def merge(self, other: Histogram) -> Histogram:
        """Add ``other`` into this histogram (associative and commutative); returns self."""
        self.counts += other.counts
        self.total += other.total
        self.sum += other.sum
        self.clamped += other.clamped
        for name, pick in (("min", min), ("max", max)):
            mine, theirs = getattr(self, name), getattr(other, name)
            setattr(self, name, theirs if mine is None else mine if theirs is None else pick(mine, theirs))
        return self

    def merged(self, other: Histogram) -> Histogram:
        return self.copy().merge(other)

    def copy(self) -> Histogram:
        h = Histogram()
        h.counts = self.counts.copy()
        h.total, h.sum, h.min, h.max, h.clamped = self.total, self.sum, self.min, self.max, self.clamped
        return h

    def value_at_percentile(self, percentile: float) -> int | None:
        """HdrHistogram's definition: the highest value equivalent to the rank-th smallest value."""
        if self.total == 0:
            return None
        rank = max(1, int(percentile / 100.0 * self.total + 0.5))
        index = int(np.searchsorted(np.cumsum(self.counts), min(rank, self.total)))
        value = int(highest_equivalent(index))
        return min(value, self.max) if self.max is not None else value

    def percentiles(self, percentiles=(50, 90, 95, 99, 99.9)) -> dict[float, int | None]:
        if self.total == 0:
            return {p: None for p in percentiles}
        cumulative = np.cumsum(self.counts)
        out = {}
        for p in percentiles:
            rank = min(max(1, int(p / 100.0 * self.total + 0.5)), self.total)
            index = int(np.searchsorted(cumulative, rank))
            out[p] = min(int(highest_equivalent(index)), self.max)
        return out

    @property
    def mean(self) -> float | None:
        return self.sum / self.total if self.total else None

    def cdf(self, max_points: int = 200) -> list[tuple[int, float]]:
        """At most ``max_points`` ``(value, fraction of values <= value)`` pairs, for plotting.

        Points are bucket tops (capped at ``max``) of the buckets reached by evenly spaced
        ranks and by log-spaced values between ``min`` and ``max``: the bulk and the tail
        both keep their shape on a log axis. Computed from the counts alone, so merged
        histograms give the same points in any merge order.
        """
        if self.total == 0:
            return []
        cumulative = np.cumsum(self.counts)
        half = max(1, max_points // 2)
        ranks = np.ceil(np.linspace(1, self.total, half)).astype(np.int64)
        by_rank = np.searchsorted(cumulative, ranks)
        lo, hi = max(1, self.min or 1), max(1, self.max or 1)
        values = np.unique(np.geomspace(lo, hi, max_points - half).astype(np.int64))
        by_value = bucket_index(values)
        picked = np.unique(np.concatenate([by_rank, by_value]))
        picked = picked[self.counts[picked] > 0] if len(picked) else picked
        tops = np.minimum(highest_equivalent(picked), self.max)
        return [(int(v), float(c) / self.total) for v, c in zip(tops.tolist(), cumulative[picked].tolist())]

    def count_below(self, value: int) -> int:
        """How many recorded values are below ``value`` (to bucket precision)."""
        return int(self.counts[: int(bucket_index(np.array([value]))[0])].sum())

    def to_hdr(self):
        """The same counts as an ``hdrh`` HdrHistogram (``pip install hdrhistogram``), e.g. to encode it."""
        from hdrh.histogram import HdrHistogram

        h = HdrHistogram(1, HIGHEST_TRACKABLE, SIGNIFICANT_DIGITS)
        for index in np.flatnonzero(self.counts):
            h.record_value(int(midpoint(index)), int(self.counts[index]))
        return h

    def __getstate__(self):
        nz = np.flatnonzero(self.counts)  # sparse on the wire: most buckets are empty
        return (nz, self.counts[nz], self.total, self.sum, self.min, self.max, self.clamped)

    def __setstate__(self, state) -> None:
        nz, values, self.total, self.sum, self.min, self.max, self.clamped = state
        self.counts = np.zeros(COUNTS_LEN, dtype=np.int64)
        self.counts[nz] = values


def latency_cdf(h: Histogram) -> list | None:
    """The display CDF of a duration histogram: ``[[ms, fraction <= ms], ...]``, at most 200 points."""
    points = h.cdf(200)
    return [[ns * 1e-6, fraction] for ns, fraction in points] if points else None
