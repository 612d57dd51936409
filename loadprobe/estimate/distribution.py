"""One execution's time as the recording saw it: a quantile table with the recorded mean.

Usage::

    d = Distribution.of_stage(portrait.stage("nms"))     # self time per execution, as recorded
    d.mean_ms, d.quantile(0.95), d.p50_ms
    d.scaled(0.3)                     # the same shape at another level (another engine, another batch)
    d.sample(np.random.default_rng(0), 1000)              # ms, drawn by inverse transform
    d.to_cdf()                        # [[ms, fraction <= ms], ...]: what pipeline.yaml keeps
    Distribution.from_cdf(cdf, mean_ms=1.2)               # and reads back

Why the recorded quantiles and not a fitted shape: inference stages are heavy-tailed and often
multi-modal (NMS over a box count that varies, a cache hit or miss, a prompt's length). The
lognormal through a p50 of 0.11 ms and a p95 of 43 ms has a mean of 77 ms where the recording's
mean was 8.3 ms; and the mean is what loads an engine, so capacity would be off by as much. The
table keeps the recorded shape (bulk and tail) and is scaled so that its mean is the recorded
mean exactly (sums of durations, not a histogram's midpoints).

The table is a quantile function through points ``(fraction, ms)`` from fraction 0 to 1,
geometric between them (linear in log ms): a draw is ``exp(np.interp(u, fractions, log values))``
for a uniform ``u``, and the mean is the exact integral of that function. Geometric, because a
recorded CDF is sparse in the tail (one point at 0.993 and the next at the maximum) and a
heavy tail's quantile function is convex there: a straight line would spread that last 0.7% of
the mass evenly up to the maximum and overstate the mean (by a third, on a lognormal with sigma
1.6).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

__all__ = ["CDF_MAX_POINTS", "CDF_TOLERANCE", "Distribution", "Figures"]

FLOOR_MS = 1e-9  # values are kept above 0 so that their logarithm exists

CDF_TOLERANCE = 0.02
"""A plan's file keeps the fewest points that reproduce every point of the table within 2%."""
CDF_MAX_POINTS = 64


class Distribution:
    """A quantile table (``fractions`` from 0 to 1, ``values`` in ms, both non-decreasing)."""

    __slots__ = ("fractions", "values", "mean_ms", "_logs")

    def __init__(self, fractions, values) -> None:
        f = np.asarray(fractions, dtype=float)
        v = np.maximum.accumulate(np.maximum(np.asarray(values, dtype=float), FLOOR_MS))
        if len(f) == 0 or len(f) != len(v) or f[0] != 0.0 or f[-1] != 1.0 or np.any(np.diff(f) < 0):
            raise ValueError("a quantile table runs from fraction 0 to 1, non-decreasing, one value per fraction")
        self.fractions, self.values, self._logs = f, v, np.log(v)
        self.mean_ms = float(np.sum(np.diff(f) * _log_mean(v[:-1], v[1:]))) if len(f) > 1 else float(v[0])

    @classmethod
    def constant(cls, ms: float) -> Distribution:
        return cls((0.0, 1.0), (ms, ms))

    @classmethod
    def lognormal(cls, mean_ms: float, cv: float) -> Distribution:
        """The lognormal with mean ``mean_ms`` and coefficient of variation ``cv`` (its 0.01% ends at the 0.01st
        and 99.99th percentiles): for a time whose mean and spread were recorded but not its shape."""
        if cv <= 0 or mean_ms <= 0:
            return cls.constant(max(0.0, mean_ms))
        sigma = math.sqrt(math.log1p(cv * cv))
        fractions = np.concatenate([[0.0, 0.001], np.linspace(0.01, 0.99, 99), [0.999, 1.0]])
        z = [NormalDist().inv_cdf(min(max(u, 1e-4), 1 - 1e-4)) for u in fractions]
        return cls(fractions, np.exp(sigma * np.array(z))).with_mean(mean_ms)

    @classmethod
    def from_cdf(cls, cdf, mean_ms: float | None = None) -> Distribution | None:
        """From ``[[ms, fraction <= ms], ...]`` (a portrait's ``latency_cdf``, a plan's ``cdf``), scaled so that its
        mean is ``mean_ms`` when given; None for an empty or unusable CDF."""
        points = sorted((float(ms), float(f)) for ms, f in cdf or () if math.isfinite(ms) and math.isfinite(f))
        points = [(ms, min(1.0, max(0.0, f))) for ms, f in points]
        if not points:
            return None
        if points[0][1] > 0.0:  # below the first point: the lowest bucket, at its top
            points.insert(0, (points[0][0], 0.0))
        values = [ms for ms, _ in points]
        fractions = list(np.maximum.accumulate([f for _, f in points]))
        fractions[-1] = 1.0  # the last point is the maximum
        return cls(fractions, values).with_mean(mean_ms)

    @classmethod
    def from_percentiles(cls, p, mean_ms: float | None = None) -> Distribution | None:
        """From a portrait's ``Percentiles`` (p50 ... max) when no CDF was recorded: the lower half at its median."""
        known = [(q, getattr(p, name)) for q, name in ((0.5, "p50"), (0.9, "p90"), (0.95, "p95"), (0.99, "p99"),
                                                        (0.999, "p999"), (1.0, "max")) if getattr(p, name) is not None]
        if p is None or not known:
            return None
        fractions = [0.0] + [q for q, _ in known]
        values = [known[0][1]] + [v for _, v in known]
        if fractions[-1] != 1.0:
            fractions.append(1.0)
            values.append(values[-1])
        return cls(fractions, values).with_mean(mean_ms if mean_ms is not None else p.mean)

    @classmethod
    def of_stage(cls, stage, *, total: bool = False) -> Distribution:
        """A portrait stage's self time per execution: its recorded CDF with its percentiles (p50 ... p99.9, which
        fill the CDF's sparse tail), scaled to its exact mean self time; its total time (children included)
        with ``total`` or where no self time was recorded; 0 ms for a stage with no timed span."""
        lat = stage.latency_ms
        mean = lat.mean if lat is not None else None
        if not total and stage.self_ms_mean is not None:
            mean = stage.self_ms_mean
        points = list(stage.latency_cdf or [])
        if points and lat is not None:
            points += [[getattr(lat, name), q] for q, name in ((0.5, "p50"), (0.9, "p90"), (0.95, "p95"),
                                                                (0.99, "p99"), (0.999, "p999"))
                       if getattr(lat, name) is not None]
        found = cls.from_cdf(points, mean) or cls.from_percentiles(lat, mean)
        return found if found is not None else cls.constant(mean or 0.0)

    def with_mean(self, mean_ms: float | None) -> Distribution:
        """The same shape scaled to ``mean_ms`` (itself when None; a constant when it has no level to scale)."""
        if mean_ms is None or not math.isfinite(mean_ms):
            return self
        if self.mean_ms <= 0:
            return Distribution.constant(max(0.0, mean_ms))
        return self.scaled(mean_ms / self.mean_ms)

    def capped_to_mean(self, mean_ms: float) -> Distribution:
        """The distribution of ``min(x, c)`` whose mean is ``mean_ms`` (at most its own): the upper tail cut, the
        lower quantiles kept. For a time that holds work and waits (a request's own time), the waits are
        the long part: what is left when they are cut off is the work."""
        if mean_ms >= self.mean_ms:
            return self
        grid = np.linspace(0.0, 1.0, 1025)
        values = np.exp(np.interp(grid, self.fractions, self._logs))
        lo, hi = 0.0, float(values[-1])
        for _ in range(60):  # bisection on the cap: the mean of min(x, c) rises with c
            cap = (lo + hi) / 2
            lo, hi = (cap, hi) if Distribution(grid, np.minimum(values, cap)).mean_ms < mean_ms else (lo, cap)
        return Distribution(grid, np.minimum(values, hi)).with_mean(mean_ms)

    def scaled(self, factor: float) -> Distribution:
        return Distribution(self.fractions, self.values * max(0.0, factor))

    def quantile(self, q: float) -> float:
        return float(np.exp(np.interp(q, self.fractions, self._logs)))

    @property
    def p50_ms(self) -> float:
        return self.quantile(0.5)

    @property
    def p95_ms(self) -> float:
        return self.quantile(0.95)

    @property
    def p99_ms(self) -> float:
        return self.quantile(0.99)

    @property
    def sd_ms(self) -> float:
        """The standard deviation (exact for the piecewise-linear table)."""
        f, v = self.fractions, self.values
        second = float(np.sum(np.diff(f) * _log_mean(v[:-1] ** 2, v[1:] ** 2)))
        return math.sqrt(max(0.0, second - self.mean_ms ** 2))

    def sample(self, generator: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws (ms) from ``generator``."""
        return np.exp(np.interp(generator.random(n), self.fractions, self._logs))

    def to_cdf(self, tolerance: float = CDF_TOLERANCE, max_points: int = CDF_MAX_POINTS) -> list[list[float]]:
        """``[[ms, fraction], ...]``: the table with every point dropped that its neighbours reproduce within
        ``tolerance`` (at most ``max_points`` kept), so a jump between two modes or a long tail keeps its
        points and a smooth bulk needs few; ``from_cdf(to_cdf(), mean_ms)`` keeps the mean exactly."""
        f, logs = self.fractions, self._logs
        keep = list(range(len(f)))
        limit = np.log1p(tolerance)
        while len(keep) > 2:
            k = np.array(keep)
            left, mid, right = k[:-2], k[1:-1], k[2:]
            span = np.where(f[right] > f[left], f[right] - f[left], 1.0)
            guess = logs[left] + (logs[right] - logs[left]) * (f[mid] - f[left]) / span
            error = np.abs(guess - logs[mid])
            worst_kept = int(np.argmin(error))
            if error[worst_kept] > limit and len(keep) <= max_points:
                break
            del keep[worst_kept + 1]
        return [[float(f"{self.values[i]:.6g}"), float(f"{f[i]:.6g}")] for i in keep]

    def __eq__(self, other) -> bool:
        return isinstance(other, Distribution) and np.array_equal(self.fractions, other.fractions) and \
            np.array_equal(self.values, other.values)

    def __hash__(self) -> int:
        return hash((self.fractions.tobytes(), self.values.tobytes()))

    def __repr__(self) -> str:
        return f"Distribution(mean {self.mean_ms:.4g} ms, p50 {self.p50_ms:.4g}, p95 {self.p95_ms:.4g}, " \
               f"max {self.values[-1]:.4g})"


class Figures:
    """``mean_ms``, ``p50_ms``, ``p95_ms`` and ``p99_ms`` of an object's ``distribution`` (a mixin)."""

    distribution: Distribution

    @property
    def mean_ms(self) -> float:
        """What loads an engine: capacity and sizing use the mean, never a median."""
        return self.distribution.mean_ms

    @property
    def p50_ms(self) -> float:
        return self.distribution.p50_ms

    @property
    def p95_ms(self) -> float:
        return self.distribution.p95_ms

    @property
    def p99_ms(self) -> float:
        return self.distribution.p99_ms


def _log_mean(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The mean of ``exp`` along a straight line from ``log a`` to ``log b``: ``(b - a) / ln(b / a)``, ``a`` where equal."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ratio = np.log(b / a)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(ratio > 1e-12, (b - a) / np.where(ratio > 1e-12, ratio, 1.0), (a + b) / 2.0)
    return out
