"""Energy per stage and per request, from device power (or energy counters) and which stage ran where, when.

Two halves, like the rest of the analysis. The map step (``map_engine_busy``, only when a run
sampled power) adds, for every leaf stage span that names its engine, its time on that engine in
each second it overlaps (a batch's member spans share their execution's), its items and tokens,
and the union of the engine's busy intervals; the finish (``build_energy``) takes each device
whose power was sampled, second by second:

- the energy measured: an energy counter's joules (``energy_j``: NVML's total energy, RAPL's),
  each reading's split over the seconds its interval spans, preferred; else the mean ``power_w``
  times the share of the second the readings cover;
- the idle power: the mean power over seconds in which nothing ran on the device, in them or in
  the second before (a reading closes an interval that may have begun then); with fewer than
  ``MIN_IDLE_SECONDS`` of them, the intercept of power against the share of each fully covered
  second the device had work; ``idle_j`` = min(measured, idle power x the share covered);
- the rest, active energy, shared among the stages by their time on the device in that second
  (overlapping executions share); active energy in a second nothing ran is unattributed. So
  ``measured = idle + attributed + unattributed`` holds second by second.

A stage's energy per item is its attributed energy over its items (a batched execution's shared
equally by its items), per token where tokens are recorded, and per request over the requests that
arrived while the device was sampled; a request's energy is the sum over its stages (its bounds
the sums of theirs). Bounds: a seeded bootstrap over the seconds (each resample recomputes the
idle power and the attribution), widened by the energy of one sampling interval at each end.

Usage::

    energy, per_stage = build_energy(part)   # part: the merged Partial
    energy.devices["host/gpu0"].idle_w, per_stage["backbone"]["energy_per_item_j"].lo
"""

from __future__ import annotations

import functools
from collections import defaultdict

import numpy as np

from .columns import SpanColumns, sparse_filled
from .kernel_numpy import NS_PER_S, sum_by
from .partials import Partial, add_counts
from ..portrait import Bounds, DeviceEnergy, Energy
from ..schema import engine_device

MIN_IDLE_SECONDS = 2  # fewer seconds without work than this: the idle power comes from the intercept
FULL_COVER = 0.9  # a second whose readings cover less of it is left out of the intercept's fit
BOOTSTRAP_DRAWS = 200
BOUNDS = (2.5, 97.5)  # percentiles of the bootstrap: a 95% interval
SEED = 0  # the bootstrap is seeded: the same recording always gives the same bounds


# -- map step ------------------------------------------------------------------------------------


def map_engine_busy(part: Partial, c: SpanColumns, host: str) -> None:
    """Add each stage span's time per (engine, second) it overlaps, its items and its tokens, to ``part``.

    Only spans that name an engine and have no children in the file count: a parent's time is its
    children's (counting both would charge the device twice). A root span counts when it names an
    engine (``@probe("model", engine="gpu0")`` called outside any request). A batched execution
    comes either as one span per member (the same start, end and ``batch`` on each, as
    ``record_span`` and the Router write them) or as one span with ``batch`` items: spans sharing stage, engine, start and end are one execution, whose time
    and items they share equally.
    """
    rows = (c.engine >= 0) & (c.stage >= 0) & c.valid & (c.dur > 0)
    if not rows.any():
        return
    rows &= ~np.isin(c.span_id, c.parent[c.parent != 0])
    index = np.flatnonzero(rows)
    if not len(index):
        return
    start, dur = c.ts[index], c.dur[index]
    end = start + dur
    pair = c.engine[index].astype(np.int64) * (len(c.stage_names) + 1) + c.stage[index]
    n = len(index)
    items = sparse_filled(c.batch, len(c.ts), 1)[index]
    items = np.where(items > 0, items, 1).astype(np.float64)
    tokens = (np.maximum(sparse_filled(c.tokens_in, len(c.ts), 0)[index], 0)
              + np.maximum(sparse_filled(c.tokens_out, len(c.ts), 0)[index], 0))
    members = np.ones(n)
    batched = items > 1  # only a batch's member spans can share an execution
    if batched.any():
        members[batched] = _members(pair[batched], start[batched], dur[batched])
    items /= members

    rep, second, overlap = _per_second(start, end)
    _add(part.engine_busy, host, c, pair[rep], second, overlap / members[rep])
    _add(part.engine_items, host, c, pair, start // NS_PER_S, items, exact=False)
    if tokens.any():
        _add(part.engine_tokens, host, c, pair, np.zeros(n, dtype=np.int64), tokens, with_second=False)
    # The time the engine had any work at all: the union of its spans (the power's busy time).
    engines = c.engine[index]
    found = {}
    for code in np.unique(engines).tolist():
        lo, hi = _union(start[engines == code], end[engines == code])
        _, sec, ns = _per_second(lo, hi)
        secs, sums = np.unique(sec, return_inverse=True)
        totals = np.bincount(sums, weights=ns.astype(np.float64))
        name = c.engine_names[code]
        found.update({(host, name, k): int(v) for k, v in zip(secs.tolist(), np.rint(totals).tolist())})
    add_counts(part.engine_union, found)


def _per_second(start: np.ndarray, end: np.ndarray):
    """Each interval cut at second boundaries: (its index, the second, ns of it in that second)."""
    first, last = start // NS_PER_S, (end - 1) // NS_PER_S
    crossing = np.flatnonzero(last != first)
    if not len(crossing):  # the usual case: every interval within one second
        return np.arange(len(start)), first, end - start
    repeat = last - first + 1
    rep = np.repeat(np.arange(len(start)), repeat)
    second = first[rep] + (np.arange(len(rep)) - np.repeat(np.cumsum(repeat) - repeat, repeat))
    overlap = np.minimum(end[rep], (second + 1) * NS_PER_S) - np.maximum(start[rep], second * NS_PER_S)
    return rep, second, overlap


def _union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals, as disjoint (starts, ends)."""
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    return s[new], np.maximum.reduceat(e, np.flatnonzero(new)) if len(s) else e


def _members(pair: np.ndarray, start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """For each span, how many spans share its execution (the same stage, engine, start and duration)."""
    order = np.lexsort((dur, start, pair))
    p, s, d = pair[order], start[order], dur[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (p[1:] != p[:-1]) | (s[1:] != s[:-1]) | (d[1:] != d[:-1])
    group = np.cumsum(new) - 1
    sizes = np.bincount(group)
    out = np.empty(len(order), dtype=np.float64)
    out[order] = sizes[group]
    return out


def _add(target, host: str, c: SpanColumns, pair, second, values, with_second: bool = True,
         exact: bool = True) -> None:
    """Sum ``values`` by (pair, second) into ``target`` under (host, engine, stage[, second]) keys
    (as whole numbers unless ``exact`` is False: a batch's items shared by its member spans)."""
    lo = int(second.min())
    width = int(second.max()) - lo + 1
    uniq, sums = sum_by(pair * width + (second - lo), values.astype(np.float64))
    sums = np.rint(sums).astype(np.int64) if exact else sums
    p, seconds = np.divmod(uniq, width)
    engine, stage = np.divmod(p, len(c.stage_names) + 1)
    engines = np.array(c.engine_names, dtype=object)[engine].tolist()
    stages = np.array(c.stage_names + [None], dtype=object)[stage].tolist()
    if with_second:
        found = dict(zip(zip([host] * len(uniq), engines, stages, (seconds + lo).tolist()), sums.tolist()))
    else:
        found = dict(zip(zip([host] * len(uniq), engines, stages), sums.tolist()))
    add_counts(target, found)


def energy_by_second(ts: np.ndarray, joules: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Energy-counter readings (``energy_j``: joules since the reading before) per second: (seconds,
    joules in each, seconds of each the readings cover).

    A reading covers the interval since the one before, which may begin in an earlier second: its
    joules are split over the seconds that interval spans, in proportion to the time in each, so a
    second's energy lines up with the spans that ran in it. The first reading of a file, and one
    after a pause over five intervals long, is taken to cover one typical interval.
    """
    order = np.argsort(ts, kind="stable")
    t, v = ts[order], joules[order]
    gaps = np.diff(t)
    typical = int(np.median(gaps)) if len(gaps) else NS_PER_S
    begin = np.concatenate([[t[0] - typical], t[:-1]])
    paused = (t - begin) > 5 * typical
    begin[paused] = t[paused] - typical
    begin = np.minimum(begin, t - 1)
    rep, second, ns = _per_second(begin, t)
    secs, inverse = np.unique(second, return_inverse=True)
    return (secs, np.bincount(inverse, weights=v[rep] * ns / (t - begin)[rep]),
            np.bincount(inverse, weights=ns / NS_PER_S))


# -- finish ----------------------------------------------------------------------------------------


def build_energy(part: Partial) -> tuple[Energy | None, dict]:
    """The portrait's ``energy`` section and, per stage, its ``energy_per_item_j`` / ``_request_j`` /
    ``_token_j`` Bounds; (None, {}) when no device power was sampled."""
    devices = sorted({(h, d) for (h, d, m) in part.samples if m in ("power_w", "energy_j")})
    if not devices:
        return None, {}
    sampled: dict = defaultdict(set)  # host -> its devices with any samples: what an engine name resolves to
    for host, device, _metric in part.samples:
        sampled[host].add(device)
    device_of = functools.cache(lambda host, engine: engine_device(engine, sampled[host]))
    busy, items = _by_device(part.engine_busy, device_of), _by_device(part.engine_items, device_of)
    union: dict = defaultdict(lambda: defaultdict(float))  # (host, device) -> second -> ns it had work
    for (host, engine, second), ns in part.engine_union.items():
        union[(host, device_of(host, engine))][second] += ns
    tokens: dict = defaultdict(float)
    for (host, engine, stage), t in part.engine_tokens.items():
        tokens[(host, device_of(host, engine), stage)] += t
    out = Energy()
    draws: dict = defaultdict(lambda: np.zeros((3, BOOTSTRAP_DRAWS)))  # stage -> attributed, items, requests
    totals: dict = defaultdict(lambda: np.zeros(3))
    requests: dict = {}  # (stage, host) -> (requests, their draws): a host's requests, once whatever its devices
    stage_tokens: dict = defaultdict(float)
    edges: dict = {}  # stage -> relative energy of the recording's edge intervals, on its devices
    rng = np.random.default_rng(SEED)
    for host, device in devices:
        found = _device(part, host, device, busy.get((host, device), {}), items.get((host, device), {}),
                        union.get((host, device), {}), rng)
        if found is None:
            continue
        out.devices[f"{host}/{device}"], stage_draws, stage_totals, edge = found
        for stage, d in stage_draws.items():
            draws[stage][:2] += d[:2]
            totals[stage][:2] += stage_totals[stage][:2]
            seen = requests.get((stage, host))
            if seen is None or stage_totals[stage][2] > seen[0]:
                requests[(stage, host)] = (stage_totals[stage][2], d[2])
            stage_tokens[stage] += tokens.get((host, device, stage), 0.0)
            edges[stage] = max(edges.get(stage, 0.0), edge)
    for (stage, _host), (n, d) in requests.items():
        totals[stage][2] += n
        draws[stage][2] += d
    per_stage = {}
    for stage, (attributed, n_items, n_requests) in totals.items():
        d, t, edge = draws[stage], stage_tokens[stage], edges[stage]
        per_stage[stage] = {
            "energy_per_item_j": _bounds(attributed / n_items if n_items else None, _ratio(d[0], d[1]), edge),
            "energy_per_request_j": _bounds(attributed / n_requests if n_requests else None, _ratio(d[0], d[2]),
                                            edge),
            "energy_per_token_j": _bounds(attributed / t if t else None, d[0] / t if t else None, edge),
        }
    request = [v["energy_per_request_j"] for v in per_stage.values() if v["energy_per_request_j"]]
    if request:
        out.request_j = Bounds(mean=sum(b.mean for b in request), lo=sum(b.lo for b in request),
                               hi=sum(b.hi for b in request))
    return out, per_stage


def _by_device(counter, device_of) -> dict:
    """(host, engine, stage, second) -> value, regrouped as (host, device) -> stage -> {second: value}."""
    out: dict = defaultdict(lambda: defaultdict(dict))
    for (host, engine, stage, second), value in counter.items():
        seconds = out[(host, device_of(host, engine))][stage]
        seconds[second] = seconds.get(second, 0) + value
    return out


def _measured(part: Partial, host: str, device: str) -> tuple[dict, dict, str, float] | None:
    """Mean watts per sampled second, the share of each second the samples cover, the source, and
    the sampling interval in seconds. A second at the recording's edges is covered in part: its
    energy is the mean power times that share, and the spans in it ran in that share too."""
    counter = part.samples.get((host, device, "energy_j"))
    power = part.samples.get((host, device, "power_w"))
    if counter is not None and counter.per_second_covered:
        covered = {s: min(1.0, t) for s, t in counter.per_second_covered.items() if t > 0}
        readings = sum(counter.per_second_n.values())
        return ({s: counter.per_second[s] / t for s, t in covered.items()}, covered, "energy counter",
                sum(covered.values()) / max(1, readings))
    if power is None or not power.per_second_n:
        return None
    n = {s: k for s, k in power.per_second_n.items() if k}
    full = float(np.median(list(n.values())))  # readings in a second the sampler covered throughout
    return ({s: power.per_second[s] / n[s] for s in n}, {s: min(1.0, k / full) for s, k in n.items()},
            "power samples", 1.0 / full)


def _device(part: Partial, host: str, device: str, busy: dict, items: dict, union: dict, rng):
    measured = _measured(part, host, device)
    if measured is None:
        return None
    watts, cover, source, interval_s = measured
    seconds = np.array(sorted(watts), dtype=np.int64)
    listed = seconds.tolist()
    p = np.array([watts[s] for s in listed])
    c = np.array([cover[s] for s in listed])
    e = p * c  # joules in each second
    stages = sorted(busy)
    # (stages, seconds), also when no stage ran on the device: its energy is then idle and unattributed
    b = np.array([[busy[st].get(s, 0) / NS_PER_S for s in listed] for st in stages]).reshape(len(stages), len(listed))
    it = np.array([[items.get(st, {}).get(s, 0) for s in listed] for st in stages]).reshape(len(stages), len(listed))
    arrivals = np.array([part.host_arrivals.get((host, s), 0) for s in listed], dtype=float)
    total_busy = b.sum(axis=0)
    worked = np.array([union.get(s, 0.0) / NS_PER_S for s in listed])
    earlier = np.concatenate([[0.0], worked[:-1]])
    earlier[1:][np.diff(seconds) != 1] = 0.0  # the second before was not sampled: nothing known ran then
    # A reading closes an interval that may have begun in the second before: that one must be idle too.
    idle_mask = (worked == 0) & (total_busy == 0) & (earlier == 0)
    share = np.divide(b, total_busy, out=np.zeros_like(b), where=total_busy > 0)
    fraction = np.minimum(1.0, np.divide(worked, c, out=np.zeros_like(c), where=c > 0))

    def split(weights):
        """(idle_w, how, attributed per stage, unattributed, idle_j) for the seconds weighted by ``weights``."""
        idle_w, how = _idle(p, fraction, c, idle_mask, weights)
        idle_j = np.minimum(e, idle_w * c) if idle_w is not None else np.zeros_like(e)
        active = (e - idle_j) * weights
        return (idle_w, how, (share * active).sum(axis=1), float(active[total_busy == 0].sum()),
                float((idle_j * weights).sum()))

    n = len(e)
    idle_w, how, attributed, unattributed, idle_j = split(np.ones(n))
    draws = np.zeros((len(stages), 3, BOOTSTRAP_DRAWS))
    for k in range(BOOTSTRAP_DRAWS):
        w = np.bincount(rng.integers(0, n, n), minlength=n).astype(float)
        draws[:, 0, k] = split(w)[2]
        draws[:, 1, k] = it @ w
        draws[:, 2, k] = arrivals @ w
    # The first and last sampling intervals may hold energy from outside the seconds the spans cover.
    edge = 2 * interval_s * float(p.mean()) / max(float(e.sum()), 1e-12)
    energy = DeviceEnergy(
        measured_j=float(e.sum()), idle_w=idle_w, idle_from=how, idle_j=idle_j,
        attributed_j={st: float(a) for st, a in zip(stages, attributed)}, unattributed_j=unattributed,
        source=source, seconds=n, sampling_interval_s=interval_s)
    totals = {st: np.array([attributed[i], it[i].sum(), arrivals.sum()]) for i, st in enumerate(stages)}
    return energy, {st: draws[i] for i, st in enumerate(stages)}, totals, edge


def _idle(p, fraction, cover, idle_mask, weights) -> tuple[float | None, str]:
    """The idle power (W) of the weighted seconds and where it came from."""
    w_idle = (weights * cover)[idle_mask]
    if w_idle.sum() >= MIN_IDLE_SECONDS:
        return float((p[idle_mask] * w_idle).sum() / w_idle.sum()), "seconds without work"
    # Only seconds the readings cover throughout: in one covered in part (a recording's first or
    # last), spans ran in the part no reading covers too, and the busy fraction is not the power's.
    used = (weights > 0) & (cover >= FULL_COVER)
    x, y, w = fraction[used], p[used], weights[used]
    if len(np.unique(x)) >= 3:
        xm, ym = np.average(x, weights=w), np.average(y, weights=w)
        var = np.average((x - xm) ** 2, weights=w)
        slope = np.average((x - xm) * (y - ym), weights=w) / var if var > 0 else 0.0
        return float(min(max(ym - slope * xm, 0.0), y.min())), "intercept of power against busy time"
    return None, "unknown: the device never rested and its load never changed"


def _ratio(num, den):
    return np.divide(num, den, out=np.full_like(num, np.nan), where=den > 0)


def _bounds(mean: float | None, draws, edge: float) -> Bounds | None:
    """The figure with its bootstrap interval, widened by ``edge`` (a relative error) either side."""
    if mean is None:
        return None
    values = np.asarray(draws)[np.isfinite(draws)] if draws is not None else np.array([])
    lo, hi = np.percentile(values, BOUNDS) if len(values) else (mean, mean)
    mean = float(mean)
    return Bounds(mean=mean, lo=float(min(lo, mean)) * (1 - edge), hi=float(max(hi, mean)) * (1 + edge))
