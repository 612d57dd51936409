"""The compiled kernel: a file's span columns aggregated into a partial by ``_mapkernel.c``.

The same figures as ``kernel_numpy`` (tests/analysis/test_analyze_fast.py checks every
count, bucket and float), through ``ckernel.aggregate``: a join, one pass over the rows and
a short pass per optional column, off the GIL. Here the kernel's per-stage arrays become the
partial's counters and histograms. A file whose per-file tables would be too large for the
kernel's dense layout (or that has 2**31 rows) is handed to ``kernel_numpy`` whole.

Usage (``map_step`` calls it when ``Filters.kernel`` is "c")::

    aggregate(part, cols, ref, run_window)   # cols: columns.SpanColumns of one file
"""

from __future__ import annotations

from itertools import repeat
from typing import NamedTuple

import numpy as np

from . import kernel_numpy
from .columns import SpanColumns
from .dataset import FileRef
from .histogram import Histogram
from .kernel_numpy import NS_PER_S, RUN_WINDOW_SLACK_NS, Grouped, StageRows, count_values, record_gaps
from .kernels import c_library
from .partials import Partial, add_counts, pick

_C = c_library()  # the ckernel module, loaded once at import; None where it was not built
_DENSE_CELLS = 1 << 23  # largest per-file table (stages x seconds, stages x shapes) the compiled path allocates
_DENSE_IDS = 4  # the compiled join's id table may be this many times the row count (plus 2**20)


class FloatSums(NamedTuple):
    """The float sums per stage, added by the kernel in numpy's order (``ckernel.FLOAT_SUMS_AS_NUMPY``)."""

    fit: np.ndarray  # (stages, 5): Σb, Σb², Σl, Σbl, Σl² with l in ms
    flops_sum: np.ndarray
    bytes_sum: np.ndarray
    flops_dur: np.ndarray  # ns
    bytes_dur: np.ndarray


def aggregate(part: Partial, cols: SpanColumns, ref: FileRef, run_window) -> None:
    """Add every figure of one file's spans to ``part``; ``run_window``: the run's (start, stop) or None."""
    k = _C
    # None in a worker whose library does not load (a Dask worker on another machine, resolved
    # "c" on the client): numpy maps the file there, to the same partial.
    done = None if k is None else _integer_figures(k, part, cols, ref, run_window)
    if done is None:
        kernel_numpy.aggregate(part, cols, ref, run_window)
        return
    arrivals, grouped, sums = done
    if len(arrivals) == 0:  # no requests: root spans are the arrivals
        arrivals = cols.ts[cols.parent == 0]
    if k.FLOAT_SUMS_AS_NUMPY:
        _float_sums(part, cols, grouped, sums)
    else:  # this numpy adds in another order than the kernel: numpy sums the rows it gathered
        kernel_numpy.batch_and_float_sums(part, cols, grouped)
    # Start times of spans written in end order are nearly sorted already: the kernel's
    # insertion sort, in place (its own scratch array).
    if len(arrivals):
        k.sort_in_place(arrivals)
    record_gaps(part, ref.run_id, arrivals, k.gap_sums if k.FLOAT_SUMS_AS_NUMPY else None)


def _integer_figures(k, part: Partial, c: SpanColumns, ref: FileRef, run_window):
    """What ``kernel_numpy._integer_figures`` adds, through the kernel; None (nothing done) when a
    per-file table would be too large for it. Returns (request start times, the rows of the
    float sums grouped by stage, the kernel's float sums)."""
    ts, valid, parent = c.ts, c.valid, c.parent
    n = len(ts)
    n_stage, n_status = len(c.stage_names), len(c.status_names)
    n_shape, n_engine = len(c.shape_names), len(c.engine_names)
    first, last = k.min_max(ts)
    sec_lo = first // NS_PER_S
    n_sec = last // NS_PER_S - sec_lo + 1
    if max(n_stage * n_sec, n_stage * n_shape, n_stage * n_engine, n_sec) > _DENSE_CELLS or n >= 2**31:
        return None  # (the kernel numbers rows with int32)
    span_id = c.span_id
    id_lo, id_hi = k.min_max(span_id)
    id_size = id_hi - id_lo + 1
    parent_row = None  # joined in the kernel through a dense table of ids
    if id_size > _DENSE_IDS * n + (1 << 20):  # sparse ids: join through a sort, as the numpy path does
        child = (parent != 0) & valid
        order = np.argsort(span_id, kind="stable")
        sorted_ids = span_id[order]
        pos = np.minimum(np.searchsorted(sorted_ids, parent[child]), n - 1)
        found = sorted_ids[pos] == parent[child]
        part.unjoined_children += int((~found).sum())
        parent_row = np.where(parent == 0, k.ROOT, -1).astype(np.int32)
        parent_row[np.flatnonzero(child)[found]] = order[pos[found]]

    # The kernel adds bucket counts straight into the partial's histograms (so none are zeroed,
    # filled and added per file): every stage of the dictionary gets its StagePartial first, and
    # those new here that no row used are dropped again below.
    new = [name for name in dict.fromkeys(map(str, c.stage_names)) if name not in part.stages]
    stages = [part.stage(str(name)) for name in c.stage_names]
    hists = {"latency": ([sp.latency.counts for sp in stages], k.new_stats(n_stage)),
             "request": ([part.requests.counts], k.new_stats(1))}
    for key in ("queue", "tokens_in", "tokens_out"):
        present = getattr(c, key) is not None
        hists[key] = ([getattr(sp, key).counts for sp in stages] if present else [],
                      k.new_stats(n_stage if present else 0))
    small = np.iinfo(np.int64).min
    if run_window is not None:
        start, stop = run_window
        win_start, win_stop = start - RUN_WINDOW_SLACK_NS, (stop + RUN_WINDOW_SLACK_NS) if stop else small
    else:
        win_start = win_stop = small
    out = k.aggregate(c, n_stage=n_stage, n_status=n_status, n_shape=n_shape, n_engine=n_engine, sec_lo=sec_lo,
                      n_sec=n_sec, win_start=win_start, win_stop=win_stop, parent_row=parent_row, id_lo=id_lo,
                      id_size=id_size, hists=hists)
    sums, statuses, shapes, engines = out["sums"], out["statuses"], out["shapes"], out["engines"]
    busy, busy_n, edges = out["busy"], out["busy_n"], out["edges"]
    part.unjoined_children += int(edges[3])

    part.first_ns = pick(min, part.first_ns, int(edges[0]))
    part.last_ns = pick(max, part.last_ns, int(edges[1]))
    if edges[2]:
        part.out_of_window[ref.run_id] += int(edges[2])

    def record(h: Histogram, stats, row: int) -> None:
        st = stats[row].tolist()
        h.add_recorded(st[k.H_TOTAL], (st[k.H_SUM_HI] << 32) + st[k.H_SUM_LO], st[k.H_MIN], st[k.H_MAX],
                       st[k.H_CLAMPED])

    status_names, shape_names, engine_names = c.status_names, c.shape_names, c.engine_names
    secs = np.arange(sec_lo, sec_lo + n_sec)
    busy_keys: list = []
    busy_values: list = []
    for code, (name, sp) in enumerate(zip(c.stage_names, stages)):
        row = sums[code].tolist()
        if row[k.S_COUNT] == 0:
            continue
        sp.count += row[k.S_COUNT]
        record(sp.latency, hists["latency"][1], code)
        sp.self_ns += row[k.S_SELF]
        sp.in_request_ns += row[k.S_IN_REQUEST]
        sp.self_in_request_ns += row[k.S_SELF_IN_REQUEST]
        _add_dense(sp.statuses, statuses[code], status_names)
        sp.offset_ns += row[k.S_OFFSET]
        sp.offset_n += row[k.S_OFFSET_N]
        if c.queue is not None:
            record(sp.queue, hists["queue"][1], code)
        if n_shape:
            _add_dense(sp.shapes, shapes[code], shape_names)
            sp.trim_shapes()
        if n_engine:
            _add_dense(sp.engines, engines[code], engine_names)
        if c.tokens_in is not None:
            record(sp.tokens_in, hists["tokens_in"][1], code)
        if c.tokens_out is not None:
            record(sp.tokens_out, hists["tokens_out"][1], code)
        present = np.flatnonzero(busy_n[code])
        busy_keys += zip(repeat(ref.host), repeat(str(name)), secs[present].tolist())
        busy_values += busy[code][present].tolist()
    add_counts(part.busy, zip(busy_keys, busy_values))
    for name in new:
        if part.stages[name].count == 0:  # in the dictionary, not in the rows: nothing recorded
            del part.stages[name]

    request_sums = out["request_sums"].tolist()
    part.request_count += request_sums[0]
    record(part.requests, hists["request"][1], 0)
    part.request_total_ns += request_sums[1]
    part.request_self_ns += request_sums[2]
    part.request_queue_ns += request_sums[3]
    _add_dense(part.request_statuses, out["request_statuses"], status_names)
    arrivals, root_arrivals = out["arrivals"], out["root_arrivals"]
    present = np.flatnonzero(arrivals)
    seconds, counts = secs[present].tolist(), arrivals[present].tolist()
    add_counts(part.arrivals, zip(seconds, counts))
    add_counts(part.host_arrivals, zip(zip(repeat(ref.host), seconds), counts))
    present = np.flatnonzero(root_arrivals)
    add_counts(part.root_arrivals, zip(secs[present].tolist(), root_arrivals[present].tolist()))
    grouped = Grouped(*(StageRows(out[key + "_values"], out[key + "_durs"], out[key + "_bounds"])
                        for key in ("batch", "flops", "bytes")))
    sums = FloatSums(*(out[key] for key in FloatSums._fields))
    return out["request_ts"], grouped, sums


def _float_sums(part: Partial, c: SpanColumns, grouped: Grouped, sums: FloatSums) -> None:
    """What ``kernel_numpy.batch_and_float_sums`` adds, from the kernel's sums (equal to the last
    bit to numpy's) and the batch sizes it gathered."""
    names = c.stage_names
    for key in ("batch", "flops", "bytes"):
        values, _, bounds = getattr(grouped, key)
        for code in np.flatnonzero(np.diff(bounds)).tolist():
            sp = part.stage(str(names[code]))
            if key == "batch":
                lo, hi = bounds[code], bounds[code + 1]
                add_counts(sp.batch, count_values(values[lo:hi]))
                sp.fit.append([float(hi - lo), *sums.fit[code].tolist()])
            elif key == "flops":
                sp.flops.append(float(sums.flops_sum[code]))
                sp.flops_dur_ns += int(sums.flops_dur[code])
            else:
                sp.bytes.append(float(sums.bytes_sum[code]))
                sp.bytes_dur_ns += int(sums.bytes_dur[code])


def _add_dense(target, counts: np.ndarray, names: list) -> None:
    """Adds counts made per dictionary code to ``target`` under the codes' names (as
    ``kernel_numpy.count_codes`` counts them)."""
    present = np.flatnonzero(counts)
    add_counts(target, zip(map(names.__getitem__, present.tolist()), counts[present].tolist()))
