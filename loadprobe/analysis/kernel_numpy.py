"""The numpy kernel: a file's span columns aggregated into a partial (the reference path).

Every figure a partial holds of a file's spans: per-stage latency histograms, self time
(children joined to parents within the file), statuses, shapes, engines, queue times,
tokens, batch sizes and fits, FLOPs and bytes, busy time per second, request counts,
arrivals and their gaps. ``kernel_c`` computes the same in C and must equal this to
the last bit; the grouping and float-sum helpers here are shared with it.

Usage::

    aggregate(part, cols, ref, run_window)   # cols: columns.SpanColumns of one file
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .columns import SpanColumns, sparse_filled, sparse_present
from .dataset import FileRef
from .partials import Partial, add_counts, pick

NS_PER_S = 1_000_000_000
MAX_DEPTH = 64  # parent links followed from a span up to its root (as ckernel.MAX_DEPTH)
RUN_WINDOW_SLACK_NS = 5 * NS_PER_S  # spans this far outside their run's start/stop are counted as outside
_DENSE_RANGE = 1 << 22  # keys spanning less than this are counted with bincount, not a sort


class StageRows(NamedTuple):
    """The rows of one optional column (batch, FLOPs or bytes) that hold a value, grouped by stage."""

    values: np.ndarray
    durations: np.ndarray  # each row's duration, ns
    bounds: np.ndarray  # stage code c's rows are [bounds[c], bounds[c + 1]), in row order


class Grouped(NamedTuple):
    """What the compiled kernel gathers for the float sums, when numpy is to add them."""

    batch: StageRows
    flops: StageRows
    bytes: StageRows


def aggregate(part: Partial, cols: SpanColumns, ref: FileRef, run_window) -> None:
    """Add every figure of one file's spans to ``part``; ``run_window``: the run's (start, stop) or None."""
    has_request = cols.has_request
    if has_request is None:
        has_request = np.full(len(cols.ts), cols.request_ids_known, dtype=bool)
    _integer_figures(part, cols, has_request, ref, run_window)
    roots = cols.parent == 0
    requests = roots & has_request
    arrivals = cols.ts[requests] if requests.any() else cols.ts[roots]
    batch_and_float_sums(part, cols)
    # Start times of spans written in end order are nearly sorted already: timsort ("stable").
    record_gaps(part, ref.run_id, np.sort(arrivals, kind="stable"))


def _integer_figures(part: Partial, c: SpanColumns, has_request: np.ndarray, ref: FileRef, run_window) -> None:
    ts, dur, valid, span_id, parent = c.ts, c.dur, c.valid, c.span_id, c.parent
    stage_codes, stage_names = c.stage, c.stage_names
    status_codes, status_names = c.status, c.status_names

    part.first_ns = pick(min, part.first_ns, int(ts.min()))
    ends = ts + dur
    part.last_ns = pick(max, part.last_ns, int(ends.max()))
    if run_window is not None:
        start, stop = run_window
        outside = (ts < start - RUN_WINDOW_SLACK_NS) | ((ends > stop + RUN_WINDOW_SLACK_NS) if stop else False)
        if outside.any():
            part.out_of_window[ref.run_id] += int(outside.sum())

    # Self time: a span's duration minus its direct children's, children joined within the file.
    child = (parent != 0) & valid
    order = np.argsort(span_id, kind="stable")
    sorted_ids = span_id[order]
    pos = np.searchsorted(sorted_ids, parent[child])
    pos_clipped = np.minimum(pos, len(sorted_ids) - 1)
    found = sorted_ids[pos_clipped] == parent[child]
    part.unjoined_children += int((~found).sum())
    queued = queued_ns(c)
    queued[~child] = 0
    child_sum = np.bincount(order[pos_clipped[found]], weights=(dur + queued)[child][found], minlength=len(ts))
    part.request_queue_ns += int(queued[child][found][has_request[child][found]].sum())
    self_ns = np.maximum(dur - child_sum.astype(np.int64), 0)
    # Where each child starts after its root (the request) starts: orders a request's stages as
    # they run, nested ones too. Parent links are followed at most MAX_DEPTH times (ids may cycle).
    offset = np.full(len(ts), -1, dtype=np.int64)
    child_rows = np.flatnonzero(child)[found]
    parent_row = np.full(len(ts), -1, dtype=np.int64)
    parent_row[child_rows] = order[pos_clipped[found]]
    root = parent_row[child_rows]
    for _ in range(MAX_DEPTH):
        up = parent_row[root]
        moving = up >= 0
        if not moving.any():
            break
        root = np.where(moving, up, root)
    offset[child_rows] = np.maximum(ts[child_rows] - ts[root], 0)

    queue, tokens_in, tokens_out = (sparse_filled(s, len(ts), -1) for s in (c.queue, c.tokens_in, c.tokens_out))
    shape_codes, shape_names = c.shape, c.shape_names
    engine_codes, engine_names = c.engine, c.engine_names
    seconds = ts // NS_PER_S

    # Rows grouped by stage once (a radix sort of small codes), so each stage works on its
    # own contiguous slice instead of masking every column once per stage. Columns that hold
    # nothing in this file (all null) are neither gathered nor scanned.
    order = np.argsort(stage_codes.astype(np.int16 if len(stage_names) < 2**15 else np.int64), kind="stable")
    bounds = np.searchsorted(stage_codes[order], np.arange(len(stage_names) + 1))
    columns = {"dur": dur, "valid": valid, "self": self_ns, "req": has_request, "status": status_codes,
               "sec": seconds, "offset": offset, "queue": queue, "tin": tokens_in, "tout": tokens_out,
               "shape": shape_codes, "engine": engine_codes}
    absent = {"offset": -1, "queue": -1, "tin": -1, "tout": -1, "shape": -1, "engine": -1}
    g = {}
    for key, values in columns.items():
        if key in absent and not (values != absent[key]).any():
            continue
        g[key] = values[order]
    for code, name in enumerate(stage_names):
        lo, hi = int(bounds[code]), int(bounds[code + 1])
        if lo == hi:
            continue
        s = {k: v[lo:hi] for k, v in g.items()}
        sp = part.stage(str(name))
        ok = s["valid"]
        all_ok = bool(ok.all())
        d = s["dur"] if all_ok else s["dur"][ok]
        sp.count += hi - lo
        sp.latency.record(d)
        sp.self_ns += int((s["self"] if all_ok else s["self"][ok]).sum())
        inreq = ok & s["req"]
        sp.in_request_ns += int(s["dur"][inreq].sum())
        sp.self_in_request_ns += int(s["self"][inreq].sum())
        add_counts(sp.statuses, count_codes(s["status"], status_names))
        if "offset" in s:
            joined = s["offset"] >= 0
            sp.offset_ns += int(s["offset"][joined].sum())
            sp.offset_n += int(joined.sum())
        if "queue" in s:
            sp.queue.record(s["queue"][s["queue"] >= 0])
        if "shape" in s:
            add_counts(sp.shapes, count_codes(s["shape"], shape_names))
            sp.trim_shapes()
        if "engine" in s:
            add_counts(sp.engines, count_codes(s["engine"], engine_names))
        if "tin" in s:
            sp.tokens_in.record(s["tin"][s["tin"] >= 0])
        if "tout" in s:
            sp.tokens_out.record(s["tout"][s["tout"] >= 0])
        secs, busy = sum_by(s["sec"] if all_ok else s["sec"][ok], d)
        add_counts(part.busy, {(ref.host, str(name), sec): v for sec, v in zip(secs.tolist(), busy.tolist())})

    roots = parent == 0
    requests = roots & has_request
    r_ok = requests & valid
    part.request_count += int(requests.sum())
    part.requests.record(dur[r_ok])
    part.request_total_ns += int(dur[r_ok].sum())
    part.request_self_ns += int(self_ns[r_ok].sum())
    add_counts(part.request_statuses, count_codes(status_codes[requests], status_names))
    arrivals = count_values(seconds[requests])
    add_counts(part.arrivals, arrivals)
    add_counts(part.host_arrivals, {(ref.host, sec): n for sec, n in arrivals.items()})
    add_counts(part.root_arrivals, count_values(seconds[roots]))


def batch_and_float_sums(part: Partial, c: SpanColumns, grouped: Grouped | None = None) -> None:
    """Batch sizes and the float sums (batch fit, FLOPs, bytes) per stage, over the few rows that
    carry them. ``grouped``: those rows as the compiled kernel gathered them, when numpy is to
    add them (``kernel_c``); None: found here."""
    names = c.stage_names
    stage, valid, dur = c.stage, c.valid, c.dur

    def by_stage(key: str, values, mask):
        """(stage partial, values, durations) per stage with rows, in row order."""
        if grouped is not None:
            values, durations, bounds = getattr(grouped, key)
            for code in np.flatnonzero(np.diff(bounds)).tolist():
                lo, hi = bounds[code], bounds[code + 1]
                yield part.stage(str(names[code])), values[lo:hi], durations[lo:hi]
            return
        rows = np.flatnonzero(mask())
        if rows.size == 0:
            return
        codes = stage[rows]
        present = np.flatnonzero(np.bincount(codes + 1, minlength=len(names) + 1)[1:])
        for code in present.tolist():
            mine = rows if len(present) == 1 and codes[0] == code else rows[codes == code]
            yield part.stage(str(names[code])), values[mine], dur[mine]

    if c.batch is not None:
        batch = c.batch.values
        rows = lambda: valid & sparse_present(c.batch, len(valid)) & (batch >= 0)  # noqa: E731
        for sp, b, durations in by_stage("batch", batch, rows):
            add_counts(sp.batch, count_values(b))
            bf, lf = b.astype(np.float64), durations / 1e6
            sp.fit.append([float(len(b)), float(bf.sum()), float((bf * bf).sum()), float(lf.sum()),
                           float((bf * lf).sum()), float((lf * lf).sum())])
    # Float sums are per file (deterministic for the file) and added with fsum when finalised.
    for key in ("flops", "bytes"):
        sparse = getattr(c, key)
        if sparse is None:
            continue
        values = sparse.values
        rows = lambda: valid & sparse_present(sparse, len(valid)) & ~np.isnan(values)  # noqa: E731
        for sp, v, durations in by_stage(key, values, rows):
            (sp.flops if key == "flops" else sp.bytes).append(float(v.sum()))
            if key == "flops":
                sp.flops_dur_ns += int(durations.sum())
            else:
                sp.bytes_dur_ns += int(durations.sum())


def record_gaps(part: Partial, run_id: str, arrivals: np.ndarray, gap_sums=None) -> None:
    """The file's inter-arrival gaps (``arrivals`` sorted) as [n, Σg, Σg²] in seconds, for its run;
    ``gap_sums(arrivals)``: the compiled kernel's (the same floats, off the GIL), else numpy's."""
    if len(arrivals) <= 1:
        return
    if gap_sums is not None:
        gap_sum, gap_squares = gap_sums(arrivals)
    else:
        gaps = np.diff(arrivals) / 1e9
        gap_sum, gap_squares = float(gaps.sum()), float((gaps * gaps).sum())
    part.gaps.setdefault(run_id, []).append([float(len(arrivals) - 1), gap_sum, gap_squares])


def count_codes(codes: np.ndarray, names: list) -> dict:
    """Rows per dictionary code (-1, null, left out), under the codes' names."""
    codes = codes[codes >= 0]
    if codes.size == 0:
        return {}
    counts = np.bincount(codes, minlength=len(names))
    return {str(names[i]): int(c) for i, c in enumerate(counts) if c}


def count_values(values: np.ndarray) -> dict:
    """Occurrences of each distinct integer value."""
    if values.size == 0:
        return {}
    lo = int(values.min())
    if int(values.max()) - lo < _DENSE_RANGE:
        counts = np.bincount(values - lo)
        keys = np.flatnonzero(counts)
        return dict(zip((keys + lo).tolist(), counts[keys].tolist()))
    keys, counts = np.unique(values, return_counts=True)
    return dict(zip(keys.tolist(), counts.tolist()))


def sum_by(keys: np.ndarray, values: np.ndarray):
    """(distinct keys, sum of values per key); integer values are summed exactly."""
    if keys.size == 0:
        return keys, values
    lo = int(keys.min())
    if int(keys.max()) - lo < _DENSE_RANGE:
        inverse = keys - lo
        present = np.flatnonzero(np.bincount(inverse))
        uniq = present + lo
        remap = np.zeros(int(inverse.max()) + 1, dtype=np.int64)
        remap[present] = np.arange(len(present))
        inverse = remap[inverse]
    else:
        uniq, inverse = np.unique(keys, return_inverse=True)
    if np.issubdtype(values.dtype, np.integer):
        # bincount sums in float64: exact while each per-key sum stays below 2**53 ns (104 days)
        sums = np.rint(np.bincount(inverse, weights=values, minlength=len(uniq))).astype(np.int64)
    else:
        sums = np.bincount(inverse, weights=values, minlength=len(uniq))
    return uniq, sums


def children_ns(c, span_ids: np.ndarray) -> np.ndarray:
    """For the spans ``span_ids`` of a file, the time their direct children in it took of them: durations and
    recorded queue times -- what own (self) time leaves out, for the spans the kernels do not cover (the client
    join's server roots, the spans sampled for CPU). int64, one per id."""
    order = np.argsort(span_ids, kind="stable")
    ids = span_ids[order]
    child = np.flatnonzero((c.parent != 0) & c.valid)
    at = np.minimum(np.searchsorted(ids, c.parent[child]), len(ids) - 1)
    found = ids[at] == c.parent[child]
    weights = (c.dur + queued_ns(c))[child[found]]
    return np.bincount(order[at[found]], weights=weights, minlength=len(ids)).astype(np.int64)


def queued_ns(c) -> np.ndarray:
    """Each span's recorded queue time, 0 where none: spent inside its parent (a batcher, a pool), so like its
    duration it is not the parent's own time -- the rule for own (self) time, in the kernels and ``children_ns``."""
    if c.queue is None:
        return np.zeros(len(c.ts), dtype=np.int64)
    return np.maximum(sparse_filled(c.queue, len(c.ts), 0), 0)
