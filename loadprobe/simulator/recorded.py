"""Service times from recorded data: each stage's own measured times, by batch size, on each engine.

Usage::

    from loadprobe.simulator import from_recording, simulate

    times = from_recording(config, "data/")          # {(stage, engine): sampler}
    times[("backbone", "npu0")].how                  # "measured on cpu ..., x 0.31 roofline estimate ..."
    result = simulate(config, arrivals, times)

The model is empirical: a sampler draws one of the stage's recorded self times (its span's
duration less its child spans', successful spans only) rather than a fitted distribution, so
the recorded tails, modes and outliers carry over unchanged.

- **Batch.** For a stage the plan batches, times are kept per recorded batch size and a batch of
  ``n`` draws from the recorded size nearest ``n``, times ``fit(n) / fit(nearest)`` when the
  sizes differ, where ``fit`` is the least-squares line through the per-size medians (in
  proportion to the size when only one size was recorded, or the line does not rise or crosses zero). For a
  stage the plan runs one request at a time, every recorded time is one request's execution,
  whatever its batch column says (a per-request batch counts boxes or tokens, not requests).
- **Engine.** On the engine the stage was recorded on (same kind, and the same catalog device
  when both are named), times are used as they are. On another engine every time is multiplied
  by the ratio of the roofline estimate (``loadprobe.estimate.servicetime``, the same estimate
  ``loadprobe recommend`` uses) to the measured median at the plan's batch size, so the
  recorded shape of the distribution is kept and only its level moves. ``how`` says which.
- Stages of the plan that were not recorded fall back to their ``service_time_ms``
  (``servicetimes.from_config``), and ``overrides`` win over both.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from .._errors import LoadprobeError
from ..pipeline.config import PipelineConfig
from .servicetimes import Overrides, ServiceTime, from_config

__all__ = ["Recorded", "RecordedTimes", "column", "from_recording", "outside_stages", "read_self_times"]

MAX_SAMPLES = 4096
"""Recorded times kept per stage, engine and batch size (a seeded uniform subsample beyond)."""


class RecordedTimes:
    """A sampler over recorded self times, ``(batch_size, rng) -> seconds``.

    ``by_batch`` maps a recorded batch size to its sorted times (seconds); ``pooled`` ignores the
    batch size; ``scale`` multiplies every draw (1 on the recorded engine).
    """

    def __init__(self, by_batch: Mapping[int, np.ndarray], *, batched: bool, scale: float = 1.0, how: str = "",
                 source: str = "measured") -> None:
        self.scale, self.how, self.source, self.batched = scale, how, source, batched
        self._sizes = sorted(by_batch)
        self._times = {b: (np.sort(by_batch[b]) * scale).tolist() for b in self._sizes}
        self._pooled = (np.sort(np.concatenate([by_batch[b] for b in self._sizes])) * scale).tolist()
        self._fit = _batch_fit({b: float(np.median(by_batch[b])) for b in self._sizes},
                               {b: len(by_batch[b]) for b in self._sizes})
        self._nearest: dict[int, tuple[list[float], float]] = {}
        self._arrays: dict[int, np.ndarray] = {}  # id of a list in _times or _pooled -> the same as an array

    @property
    def samples(self) -> int:
        return len(self._pooled)

    def median_s(self, batch: int = 1) -> float:
        """The median a batch of ``batch`` draws from (seconds)."""
        times, factor = self._for(batch)
        return times[len(times) // 2] * factor

    def _for(self, batch: int) -> tuple[list[float], float]:
        if not self.batched:
            return self._pooled, 1.0
        found = self._nearest.get(batch)
        if found is None:
            near = min(self._sizes, key=lambda b: (abs(b - batch), -b))
            factor = 1.0 if near == batch else self._fit(batch) / self._fit(near)
            found = self._nearest[batch] = (self._times[near], factor)
        return found

    def __call__(self, batch: int, rng: random.Random) -> float:
        times, factor = self._for(batch)
        return times[int(rng.random() * len(times))] * factor

    def draws(self, batch: int, rng: random.Random, n: int) -> np.ndarray:
        """The next ``n`` calls' draws at once: the same uniforms, indices and products, in numpy."""
        times, factor = self._for(batch)
        uniform = np.fromiter((rng.random() for _ in range(n)), dtype=float, count=n)
        table = self._arrays.get(id(times))
        if table is None:
            table = self._arrays[id(times)] = np.array(times, dtype=float)
        return table[(uniform * len(times)).astype(np.int64)] * factor

    def describe(self) -> dict:
        return {"source": self.source, "how": self.how, "samples": self.samples,
                "batch_sizes": self._sizes if self.batched else None, "p50_ms": self.median_s(1) * 1000}


def _batch_fit(medians: Mapping[int, float], counts: Mapping[int, int]):
    """time(batch): the count-weighted least-squares line through the medians, when it rises."""
    sizes = sorted(medians)
    if len(sizes) >= 2:
        x = np.array(sizes, float)
        y = np.array([medians[b] for b in sizes])
        w = np.array([counts[b] for b in sizes], float)
        xm, ym = np.average(x, weights=w), np.average(y, weights=w)
        slope = float(np.sum(w * (x - xm) * (y - ym)) / np.sum(w * (x - xm) ** 2))
        intercept = ym - slope * xm
        if slope > 0 and intercept >= 0:
            return lambda b: intercept + slope * b
    # one size, or a line that does not rise or would make small batches free: in proportion
    per_item = sum(medians[b] / b * counts[b] for b in sizes) / sum(counts.values())
    return lambda b: per_item * b


class Recorded(NamedTuple):
    """What ``read_self_times`` finds: times per (stage, engine, batch), error shares, time outside stages."""

    times: dict[tuple[str, str, int], np.ndarray]  # seconds
    error_rates: dict[str, float]  # stage -> share of its spans with status error
    outside: np.ndarray | None  # seconds a request spent outside every stage: its root span's self time


ONE_SERVICE = "service times come from one service's recording: give the service's own folder (DATA/HOST/SERVICE)"


def read_self_times(data) -> Recorded:
    """Successful spans' self times (seconds) per (stage, engine, batch), each stage's error share, and
    the self times of the most common kind of root span (a request's time outside every stage).

    ``data``: a directory, file or list of them, as ``loadprobe analyze`` takes: one service's (a load client's
    recording beside it is left aside: its spans are the requests seen from outside, not the service's times).
    Spans without an engine count as ``cpu``; without a batch as 1. Children are subtracted within their run.
    """
    # analysis's reader and its rule of one service: Parquet and unfinished streams, version-checked
    from ..analysis.services import recorded_service, span_tables, unreadable

    paths = data if isinstance(data, (list, tuple)) else [data]
    own, _ = recorded_service(paths, how=ONE_SERVICE)
    groups: dict[tuple[str, str, int], list[np.ndarray]] = {}
    roots: dict[str, list[np.ndarray]] = {}
    spans: dict[str, int] = {}
    errors: dict[str, int] = {}
    skipped: dict[str, str] = {}
    for run in own:
        tables = list(span_tables([run], skipped))  # bad files passed over, as by analyze
        if not tables:
            continue
        columns = {name: np.concatenate([column(t, name) for t in tables])
                   for name in ("stage", "engine", "batch", "dur_ns", "span_id", "parent_id", "status", "queue_ns")}
        # A child's queue wait (a batcher's window) is inside its parent's span but not in its own
        # duration: it is neither the parent's own work nor time outside the stages.
        self_ns = _self_ns(columns["dur_ns"] + np.maximum(columns["queue_ns"], 0), columns["span_id"],
                           columns["parent_id"], own=columns["dur_ns"])
        stage, status = columns["stage"], columns["status"]
        ok = (status == "ok") & (self_ns >= 0)
        for name in np.unique(stage):
            mine = stage == name
            spans[name] = spans.get(name, 0) + int(mine.sum())
            errors[name] = errors.get(name, 0) + int((mine & (status == "error")).sum())
        root = ok & (columns["parent_id"] < 0)
        for name in np.unique(stage[root]):
            roots.setdefault(str(name), []).append(self_ns[root & (stage == name)] / 1e9)
        times = self_ns[ok] / 1e9
        codes = [np.unique(columns[name][ok], return_inverse=True) for name in ("stage", "engine", "batch")]
        key = (codes[0][1].astype(np.int64) * len(codes[1][0]) + codes[1][1]) * len(codes[2][0]) + codes[2][1]
        order = np.argsort(key, kind="stable")
        key, times = key[order], times[order]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else []
        for start, end in zip(starts, np.r_[starts[1:], len(key)].astype(int) if len(key) else []):
            at = order[start]
            group = (str(codes[0][0][codes[0][1][at]]), str(codes[1][0][codes[1][1][at]]),
                     int(codes[2][0][codes[2][1][at]]))
            groups.setdefault(group, []).append(times[start:end])
    if not spans:  # nothing to draw from: the plan's own times must not stand in for "recorded" ones unsaid
        raise LoadprobeError(f"{', '.join(map(str, paths))}: no spans to draw service times from"
                             f"{unreadable(skipped)}; give the folder the service recorded into")
    rng = np.random.default_rng(0)

    def kept(parts: list[np.ndarray]) -> np.ndarray:
        times = np.concatenate(parts)
        return rng.choice(times, MAX_SAMPLES, replace=False) if len(times) > MAX_SAMPLES else times

    out = {key: kept(parts) for key, parts in groups.items()}
    common = max(roots, key=lambda name: sum(len(p) for p in roots[name]), default=None)
    return Recorded(out, {name: errors[name] / spans[name] for name in spans if spans[name]},
                    kept(roots[common]) if common is not None else None)


def column(table, name: str) -> np.ndarray:
    """One column of a spans table as numpy: strings (stage, engine, status) as an object array, engine
    null as "cpu"; integers with the reader's defaults for nulls and absent columns (batch 1, parent -1,
    duration -1, queue 0)."""
    n = table.num_rows
    if name not in table.column_names:
        return np.full(n, {"engine": "cpu", "batch": 1, "status": "ok", "parent_id": -1, "dur_ns": -1,
                           "queue_ns": 0}.get(name, ""),
                       dtype=object if name in ("engine", "status", "stage") else np.int64)
    col = table.column(name)
    if name in ("stage", "engine", "status"):
        if name == "engine":
            col = col.cast("string").fill_null("cpu")
        encoded = col.cast("string").combine_chunks().dictionary_encode()
        words = np.asarray(encoded.dictionary.to_pylist(), dtype=object)
        return words[encoded.indices.to_numpy(zero_copy_only=False)]
    fill = {"batch": 1, "parent_id": -1, "dur_ns": -1, "queue_ns": 0}.get(name, 0)
    return col.fill_null(fill).to_numpy().astype(np.int64)


def _self_ns(dur: np.ndarray, span_id: np.ndarray, parent_id: np.ndarray, own: np.ndarray | None = None) -> np.ndarray:
    """Each span's ``own`` duration (default ``dur``) less the ``dur`` of its direct children."""
    order = np.argsort(span_id)
    ids = span_id[order]
    has_parent = parent_id >= 0
    where = np.searchsorted(ids, parent_id[has_parent])
    where = np.clip(where, 0, len(ids) - 1)
    found = ids[where] == parent_id[has_parent]
    child_total = np.zeros(len(ids), np.int64)
    np.add.at(child_total, where[found], np.maximum(dur[has_parent][found], 0))
    out = (dur if own is None else own).copy()
    out[order] -= child_total
    return out


def from_recording(config: PipelineConfig, data, overrides: Overrides | None = None, *, catalog=None,
                   portrait=None, recorded=None) -> dict[tuple[str, str], ServiceTime]:
    """A sampler for every (stage, engine) of ``config``, from the spans recorded under ``data``.

    ``portrait`` (of the same data, or a function returning it; computed when needed and not given) supplies the stage
    profiles the roofline scaling starts from; ``catalog`` the devices (default: the built-in one);
    ``recorded`` is ``read_self_times(data)`` when already read (several plans, one recording).
    """
    from ..catalog import load_catalog
    from ..estimate.servicetime import StageProfile, estimate_target, recorded_host_cpu, service_time
    from ..schema import engine_kind

    recorded = (recorded or read_self_times(data)).times
    catalog = catalog or load_catalog()
    found: dict[str, object] = {"portrait": portrait}

    def measured(stage, engine: str) -> ServiceTime | None:
        mine = {(e, b): t for (s, e, b), t in recorded.items() if s == stage.recorded_name}
        if not mine:
            return None
        kinds: dict[str, int] = {}
        for (e, _), t in mine.items():
            kinds[engine_kind(e)] = kinds.get(engine_kind(e), 0) + len(t)
        spec = config.engines[engine]
        # Times recorded on the engine's own kind are used as they are; otherwise the kind most recorded is scaled.
        rec_kind = spec.kind if spec.kind in kinds else max(kinds, key=kinds.get)
        by_batch: dict[int, list[np.ndarray]] = {}
        for (e, b), t in mine.items():
            if engine_kind(e) == rec_kind:
                by_batch.setdefault(b, []).append(t)
        times = {b: np.concatenate(parts) for b, parts in by_batch.items()}
        batched = stage.batch is not None
        sampler = RecordedTimes(times, batched=batched)
        recorded_at = f"{sampler.samples} recorded times on {rec_kind}"
        if spec.kind == rec_kind and (spec.kind == "cpu" or not spec.device):
            sampler.how = f"measured: {recorded_at}"
            return sampler
        if found["portrait"] is None:
            from ..analysis.run import analyze

            found["portrait"] = analyze(data if isinstance(data, (list, tuple)) else [data])
        elif callable(found["portrait"]):
            found["portrait"] = found["portrait"]()
        device_id = _recorded_device(found["portrait"], catalog, rec_kind)
        if spec.kind == rec_kind and device_id in (None, spec.device):
            sampler.how = f"measured: {recorded_at}" + (f" ({device_id})" if device_id else "")
            return sampler
        profile = StageProfile.of(found["portrait"].stage(stage.recorded_name),
                                  recorded_device=catalog.get(device_id) if device_id else None)
        target = estimate_target(spec.kind, catalog.get(spec.device) if spec.device else None, profile,
                                 recorded_host_cpu(found["portrait"]))
        batch = stage.batch.size if batched else 1
        est = service_time(profile, target=target, kind=spec.kind,
                           precision=stage.precision or ("fp32" if spec.kind == "cpu" else "fp16"), batch=batch)
        base = profile.measured_ms(batch)
        ratio = est.p50_ms / base if base > 0 else 1.0
        return RecordedTimes(times, batched=batched, scale=ratio, source=est.source,
                             how=f"{recorded_at} x {ratio:.3g} on {engine}: {est.how}")

    return from_config(config, overrides, measured=measured)


def _recorded_device(portrait, catalog, kind: str) -> str | None:
    """The catalog device the data was recorded on, when it is of ``kind``."""
    device = catalog.find(portrait.roofline_device)
    return portrait.roofline_device if device is not None and device.kind == kind else None


def outside_stages(recorded: Recorded) -> RecordedTimes | None:
    """A sampler of the recorded time each request spent outside every stage (HTTP, framework), or None."""
    if recorded.outside is None or not len(recorded.outside):
        return None
    return RecordedTimes({1: recorded.outside}, batched=False,
                         how=f"{len(recorded.outside):,} recorded request times outside every stage")
