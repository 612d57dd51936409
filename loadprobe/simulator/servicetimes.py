"""Service-time samplers of the simulator: one callable per (stage, engine), ``(batch_size, rng) -> seconds``.

Usage::

    times = from_config(config)                                   # each stage's service_time_ms
    times = from_config(config, {"head": exponential(2.0),        # a stage on every engine it may run on
                                 "backbone": {"gpu0": constant(4.0)}})  # or on one engine
    times[("backbone", "npu0")](4, random.Random(0))              # seconds for one batch of 4
    draw_block(times[("backbone", "npu0")], 4, random.Random(0), 1000)  # the next 1000 of them, an array

``service_time_ms`` is the time of one execution (one batch, or one request when unbatched), so
the samplers built from it ignore the batch size; an override may use it.

The simulator hands every (lane, batch size) its own ``random.Random`` stream, and a sampler's
draws must depend on nothing but the stream it is handed: the compiled event loop fetches them
ahead, in blocks, so the order of calls across streams differs from the Python loop's while each
stream's sequence stays the same. A sampler may offer ``draws(batch, rng, n)``, returning the
array of its next ``n`` draws from ``rng`` (exactly what ``n`` calls would return), to make those
blocks cheap; ``draw_block`` falls back to calling it ``n`` times.
"""

from __future__ import annotations

import math
import random
import weakref
from collections.abc import Callable, Mapping

import numpy as np

from .._errors import LoadprobeError
from ..pipeline.config import PipelineConfig
from ..estimate.distribution import Distribution
from ..estimate.queueing import Z95

__all__ = ["HOST_STAGE", "ServiceTime", "config_distribution", "constant", "draw_block", "empirical", "exponential",
           "from_config", "lognormal", "parse_override", "with_host"]

HOST_STAGE = "(host work)"
"""The stage the simulator runs a file's ``host:`` work as (no plan stage can have this name)."""

ServiceTime = Callable[[int, random.Random], float]


class _Constant:
    """Always the same seconds (``constant``): a class so that blocks of draws are one ``np.full``."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, batch: int, rng: random.Random) -> float:
        return self.seconds

    def draws(self, batch: int, rng: random.Random, n: int) -> np.ndarray:
        return np.full(n, self.seconds, dtype=float)


def constant(ms: float) -> ServiceTime:
    """Always ``ms`` milliseconds."""
    return _Constant(ms / 1000.0)


def exponential(mean_ms: float) -> ServiceTime:
    """Exponential with mean ``mean_ms`` (an M/M/c server)."""
    rate = 1000.0 / mean_ms
    return lambda batch, rng: rng.expovariate(rate)


def draw_block(sampler: ServiceTime, batch: int, rng: random.Random, n: int) -> np.ndarray:
    """The next ``n`` draws of ``sampler`` for ``batch`` from ``rng``: what ``n`` calls would return, in order."""
    block = getattr(sampler, "draws", None)
    if block is not None:
        return np.asarray(block(batch, rng, n), dtype=float)
    return np.fromiter((sampler(batch, rng) for _ in range(n)), dtype=float, count=n)


class _Buffered:
    """Draws made by numpy in blocks, seeded from the stream ``rng``: a draw costs a list pop.

    Each stream keeps its own blocks (its first block small, the next ones larger, up to
    ``BLOCK``), seeded from that stream when needed, so a sampler shared by several streams (a
    lane's batch sizes, or several lanes) gives each the same sequence whatever the order of the
    calls, and a new stream (a new run) starts afresh. ``make(generator, n)`` returns ``n`` seconds.
    """

    FIRST_BLOCK, BLOCK = 64, 4096

    def __init__(self, make) -> None:
        self.make = make
        # The stream drawn from last and its buffer are attributes: the common case costs no lookup.
        # Every stream's [weak reference, buffer, next block size] is kept by id; the weak
        # reference's callback forgets it with the stream (before its id can be reused).
        self.rng: random.Random | None = None
        self.left: list[float] = []
        self.entry: list | None = None
        self.streams: dict[int, list] = {}

    def _switch(self, rng: random.Random) -> None:
        key = id(rng)
        entry = self.streams.get(key)
        if entry is None or entry[0]() is not rng:
            entry = self.streams[key] = [weakref.ref(rng, lambda _, key=key, streams=self.streams:
                                                     streams.pop(key, None)), [], self.FIRST_BLOCK]
        self.rng, self.left, self.entry = rng, entry[1], entry

    def _refill(self, rng: random.Random) -> None:
        block = self.entry[2]
        self.left.extend(self.make(np.random.default_rng(rng.getrandbits(64)), block).tolist())
        self.entry[2] = min(block * 4, self.BLOCK)

    def __call__(self, batch: int, rng: random.Random) -> float:
        if rng is not self.rng:
            self._switch(rng)
        left = self.left
        if not left:
            self._refill(rng)
        return left.pop()

    def draws(self, batch: int, rng: random.Random, n: int) -> np.ndarray:
        """The next ``n`` calls' draws at once (each block is popped from its end, as the calls do)."""
        if rng is not self.rng:
            self._switch(rng)
        out: list[float] = []
        while len(out) < n:
            if not self.left:
                self._refill(rng)
            take = min(n - len(out), len(self.left))
            chunk = self.left[-take:]
            del self.left[-take:]
            chunk.reverse()
            out += chunk
        return np.array(out, dtype=float)


def lognormal(p50_ms: float, p95_ms: float | None = None) -> ServiceTime:
    """The lognormal whose median is ``p50_ms`` and 95th percentile ``p95_ms`` (constant without a p95)."""
    if p95_ms is None or p95_ms <= p50_ms or p50_ms <= 0:
        return constant(p50_ms if p50_ms > 0 else (p95_ms or 0.0))
    mu, sigma = math.log(p50_ms / 1000.0), math.log(p95_ms / p50_ms) / Z95
    return _Buffered(lambda generator, n: generator.lognormal(mu, sigma, n))


def empirical(distribution: Distribution) -> ServiceTime:
    """Draws from a recorded distribution (``estimate.distribution``, ms): its quantiles, tail and mean kept."""
    if distribution.values[0] == distribution.values[-1]:
        return constant(distribution.values[0])
    return _Buffered(lambda generator, n: distribution.sample(generator, n) / 1000.0)


def config_distribution(st, scale: float = 1.0) -> Distribution | None:
    """A pipeline stage's ``service_time_ms`` as a distribution, times ``scale``: its recorded ``cdf`` at its
    ``mean``; None for a file that gives only p50 and p95 (drawn from the lognormal through them)."""
    if st is None or not st.cdf:
        return None
    found = Distribution.from_cdf(st.cdf, st.mean)
    return found.scaled(scale) if found is not None else None


def parse_override(text: str) -> tuple[str, str | None, ServiceTime]:
    """``"STAGE[@ENGINE]=lognormal:P50:P95"`` (or ``constant:MS``, ``exponential:MEAN``), milliseconds.

    Returns ``(stage, engine or None, sampler)``; a LoadprobeError says what was expected.
    """
    target, _, spec = str(text).partition("=")
    stage, _, engine = target.partition("@")
    kind, *numbers = spec.split(":")
    makers = {"constant": (constant, 1), "exponential": (exponential, 1), "lognormal": (lognormal, 2)}
    usage = ("write STAGE[@ENGINE]=constant:MS, exponential:MEAN_MS or lognormal:P50_MS:P95_MS, "
             "e.g. --service-time backbone@npu0=lognormal:3:5")
    if not stage.strip() or kind not in makers or len(numbers) != makers[kind][1]:
        raise LoadprobeError(f"--service-time {text!r}: {usage}")
    try:
        values = [float(n) for n in numbers]
    except ValueError:
        raise LoadprobeError(f"--service-time {text!r}: the times must be numbers of milliseconds; {usage}") from None
    if not all(v > 0 and math.isfinite(v) for v in values) or (kind == "lognormal" and values[1] < values[0]):
        raise LoadprobeError(f"--service-time {text!r}: times must be positive milliseconds (and p95 >= p50)")
    return stage.strip(), engine.strip() or None, makers[kind][0](*values)


Overrides = Mapping[str, "ServiceTime | Mapping[str, ServiceTime]"]


def with_host(config: PipelineConfig) -> PipelineConfig:
    """The plan as the simulator runs it: the service's own work outside every stage (``host:``, as ``loadprobe
    recommend`` measured it) is a first stage, ``HOST_STAGE``, on its CPU engine, so it takes cores as it did
    when recorded. A file without ``host:`` is returned as it is."""
    if config.host is None:
        return config
    from dataclasses import replace

    from ..pipeline.config import StageConfig

    stage = StageConfig(name=HOST_STAGE, engine=config.host.engine, timeout_ms=3_600_000.0,
                        service_time_ms=config.host.work_ms)
    return replace(config, stages=(stage,) + tuple(config.stages), host=None)


def from_config(config: PipelineConfig, overrides: Overrides | None = None, *,
                measured: Callable[[object, str], ServiceTime | None] | None = None) -> dict[tuple[str, str], ServiceTime]:
    """A sampler for every (stage, engine) a request may run on: its own engine and its fallback's.

    ``overrides`` maps a stage to a sampler (every engine) or to ``{engine: sampler}``; then
    ``measured(stage, engine)`` is asked (recorded times, see ``recorded.from_recording``); the
    rest come from the stage's ``service_time_ms``: its recorded distribution (``cdf`` at its
    ``mean``, as ``loadprobe recommend`` writes it), else the lognormal through its p50 and p95 (a
    file written by hand), used on the fallback engine too, since the file gives one figure per
    stage, and multiplied by the stage's ``calibration`` scale where ``loadprobe verify --calibrate``
    measured one.
    """
    overrides = overrides or {}
    config = with_host(config)
    unknown = sorted(set(overrides) - {s.name for s in config.stages})
    if unknown:
        raise LoadprobeError(f"service times given for unknown stages: {', '.join(unknown)}; the stages are: "
                             f"{', '.join(s.name for s in config.stages)}")
    out: dict[tuple[str, str], ServiceTime] = {}
    for stage in config.stages:
        given = overrides.get(stage.name)
        stray = sorted(set(given) - set(stage.runs_on)) if isinstance(given, Mapping) else []
        if stray:
            raise LoadprobeError(f"service times given for stage {stage.name!r} on {', '.join(stray)}, which it "
                                 f"never runs on; its engines are {', '.join(stage.runs_on)}")
        for engine in stage.runs_on:
            sampler = given.get(engine) if isinstance(given, Mapping) else given
            if sampler is None and measured is not None:
                sampler = measured(stage, engine)
            if sampler is None:
                st = stage.service_time_ms
                if st is None or (st.p50 is None and st.p95 is None):
                    raise LoadprobeError(
                        f"stage {stage.name!r} has no service_time_ms (p50, p95) for engine {engine!r}"
                        + (" and was not recorded" if measured is not None else "")
                        + f"; add it to the pipeline file or pass service_times={{{stage.name!r}: sampler}}")
                scale = config.calibration.scale(stage.name) if config.calibration is not None else 1.0
                recorded = config_distribution(st, scale)
                p50, p95 = (None if v is None else v * scale for v in (st.p50, st.p95))
                sampler = (empirical(recorded) if recorded is not None else
                           lognormal(p50, p95) if p50 is not None else constant(p95))
            out[(stage.name, engine)] = sampler
    return out
