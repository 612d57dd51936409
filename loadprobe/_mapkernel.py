"""The map step's integer aggregation, compiled (optional: numba), in a few passes over a file's rows.

``partials._map_spans`` aggregates a file's spans either with numpy (the reference path,
always available) or, when numba is installed, with :func:`join_dense` and :func:`aggregate`
here: the same figures, exact integers throughout, in four passes over the rows instead of
dozens of numpy passes plus a sort and a gather per column. Float sums (batch fits, FLOPs,
bytes, inter-arrival gaps) are not computed here: both paths share the same numpy code for
them on the rows found here, so their rounding is identical. tests/test_analyze_fast.py
checks that both paths give identical partials and portraits. (The one theoretical
difference: the numpy path sums children's time and per-second busy time through float64,
exact below 2**53 ns — 104 days — per span or per second; here they are int64.)

Compiled functions are cached on disk (numba ``cache=True``): the first analysis on a
machine compiles them (about 5 s); later processes load them (about 1 s, mostly numba's own
start-up), which ``partials.warm_kernel`` does in a thread.

Usage (internal; ``partials`` decides when)::

    from loadprobe import _mapkernel
    parent_row, unjoined = _mapkernel.join_dense(span_id, parent, valid, lo, size)
    sums, statuses, ... = _mapkernel.aggregate(ts, dur, valid, parent, parent_row, ...)
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .histogram import COUNTS_LEN, HIGHEST_TRACKABLE, _HALF_COUNT, _HALF_MAGNITUDE, _MASK

_NS = 1_000_000_000
_BIG = np.iinfo(np.int64).max
_SMALL = np.iinfo(np.int64).min
_LOW32 = 0xFFFFFFFF
# Histogram accumulators: counts (rows, COUNTS_LEN) and stats (rows, 6) =
# [total, Σ(v >> 32), Σ(v & 0xffffffff), min, max, clamped]: the exact sum is hi * 2**32 + lo.
H_TOTAL, H_SUM_HI, H_SUM_LO, H_MIN, H_MAX, H_CLAMPED = range(6)
# Per-stage integer sums: (stages, 6).
S_COUNT, S_SELF, S_IN_REQUEST, S_SELF_IN_REQUEST, S_OFFSET, S_OFFSET_N = range(6)
MAX_DEPTH = 64  # parent links followed from a span up to its root (partials.MAX_DEPTH: the same)


try:  # a count-leading-zeros instruction; numba's intrinsic, with frexp as the fallback
    from numba.cpython.unsafe.numbers import leading_zeros

    @njit(cache=True, nogil=True, inline="always")
    def _floor_log2(x):
        return 63 - leading_zeros(np.uint64(x))
except ImportError:  # pragma: no cover - numba moved its intrinsic
    @njit(cache=True, nogil=True, inline="always")
    def _floor_log2(x):
        return math.frexp(np.float64(x))[1] - 1  # exact below 2**53


@njit(cache=True, nogil=True, inline="always")
def _record(counts, stats, row, v):
    c = v if v < HIGHEST_TRACKABLE else HIGHEST_TRACKABLE
    exponent = _floor_log2(c | _MASK)
    bucket = exponent - _HALF_MAGNITUDE
    counts[row, ((bucket + 1) << _HALF_MAGNITUDE) + ((c >> bucket) - _HALF_COUNT)] += 1
    stats[row, H_TOTAL] += 1
    stats[row, H_SUM_HI] += v >> 32
    stats[row, H_SUM_LO] += v & _LOW32
    if v < stats[row, H_MIN]:
        stats[row, H_MIN] = v
    if v > stats[row, H_MAX]:
        stats[row, H_MAX] = v
    if v > HIGHEST_TRACKABLE:
        stats[row, H_CLAMPED] += 1


def new_stats(rows: int) -> np.ndarray:
    stats = np.zeros((rows, 6), dtype=np.int64)
    stats[:, H_MIN] = _BIG
    stats[:, H_MAX] = _SMALL
    return stats


@njit(cache=True, nogil=True)
def fill_nulls(values, bits, bit_offset, fill, out):
    """``out[i] = values[i]`` where Arrow's validity bitmap ``bits`` (from ``bit_offset``) is set, else ``fill``."""
    n = len(out)
    i = 0
    while i < n and (bit_offset + i) & 7:  # up to a byte boundary of the bitmap
        j = bit_offset + i
        out[i] = values[i] if (bits[j >> 3] >> (j & 7)) & 1 else fill
        i += 1
    while i + 8 <= n:  # then 8 rows per bitmap byte: whole bytes valid or null are copied or filled
        b = bits[(bit_offset + i) >> 3]
        if b == 255:
            for k in range(8):
                out[i + k] = values[i + k]
        elif b == 0:
            for k in range(8):
                out[i + k] = fill
        else:
            for k in range(8):
                out[i + k] = fill + (values[i + k] - fill) * ((b >> k) & 1)
        i += 8
    while i < n:
        j = bit_offset + i
        out[i] = values[i] if (bits[j >> 3] >> (j & 7)) & 1 else fill
        i += 1


@njit(cache=True, nogil=True)
def join_dense(span_id, parent, valid, lo, size):
    """Row of each valid child's parent (-1: none or not in the file) through a dense id table.

    Among rows sharing a span id the first row wins, as with a stable sort. ``size`` is
    max(span_id) - lo + 1; the caller keeps it small (a few times the row count).
    """
    n = len(span_id)
    table = np.full(size, -1, dtype=np.int32)  # row numbers: a file holds fewer than 2**31 rows
    for i in range(n - 1, -1, -1):
        table[span_id[i] - lo] = i
    out = np.full(n, -1, dtype=np.int64)
    unjoined = 0
    for i in range(n):
        p = parent[i]
        if p == 0 or not valid[i]:
            continue
        k = p - lo
        row = table[k] if 0 <= k < size else -1
        if row < 0:
            unjoined += 1
        else:
            out[i] = row
    return out, unjoined


@njit(cache=True, nogil=True)
def aggregate(ts, dur, valid, parent, parent_row, has_req, req_const, stage, n_stage, status, n_status,
              shape, n_shape, engine, n_engine, queue, tin, tout, batch_v, batch_p, flops_v, flops_p,
              bytes_v, bytes_p, sec_lo, n_sec, win_start, win_stop, lat, lat_st, q, q_st, ti, ti_st, to, to_st,
              req, req_st):
    """Everything integer about a file's spans, in two passes. Histogram arrays are filled in place.

    Returns (sums (stages, 6), statuses (stages, n_status), shapes, engines, busy ns and busy
    row counts (stages, n_sec), request [count, Σdur, Σself], request statuses, arrivals and
    root arrivals per second, [first ns, last ns, spans outside the run window], request start
    times in row order, and for batch, FLOPs and bytes the rows that carry one, grouped by
    stage in row order: (rows, bounds (stages + 1)) each).
    """
    n = len(ts)
    has_b, has_f, has_y = len(batch_v) > 0, len(flops_v) > 0, len(bytes_v) > 0
    child_sum = np.zeros(n, dtype=np.int64)
    nb = np.zeros(n_stage + 1, dtype=np.int64)
    nf = np.zeros(n_stage + 1, dtype=np.int64)
    ny = np.zeros(n_stage + 1, dtype=np.int64)
    n_req = 0
    for i in range(n):
        p = parent_row[i]
        if p >= 0:
            child_sum[p] += dur[i]
        if parent[i] == 0 and (has_req[i] if req_const < 0 else req_const == 1):
            n_req += 1
        k = stage[i]
        if k >= 0 and valid[i]:
            if has_b and batch_p[i] and batch_v[i] >= 0:
                nb[k + 1] += 1
            if has_f and flops_p[i] and not math.isnan(flops_v[i]):
                nf[k + 1] += 1
            if has_y and bytes_p[i] and not math.isnan(bytes_v[i]):
                ny[k + 1] += 1
    b_bounds, f_bounds, y_bounds = np.cumsum(nb), np.cumsum(nf), np.cumsum(ny)
    b_rows = np.empty(b_bounds[-1], dtype=np.int64)
    f_rows = np.empty(f_bounds[-1], dtype=np.int64)
    y_rows = np.empty(y_bounds[-1], dtype=np.int64)
    b_next, f_next, y_next = b_bounds[:-1].copy(), f_bounds[:-1].copy(), y_bounds[:-1].copy()
    req_ts = np.empty(n_req, dtype=np.int64)
    n_req = 0
    sums = np.zeros((n_stage, 6), dtype=np.int64)
    statuses = np.zeros((n_stage, n_status), dtype=np.int64)
    shapes = np.zeros((n_stage, n_shape), dtype=np.int64)
    engines = np.zeros((n_stage, n_engine), dtype=np.int64)
    busy = np.zeros((n_stage, n_sec), dtype=np.int64)
    busy_n = np.zeros((n_stage, n_sec), dtype=np.int64)
    req_sums = np.zeros(3, dtype=np.int64)
    req_statuses = np.zeros(n_status, dtype=np.int64)
    arrivals = np.zeros(n_sec, dtype=np.int64)
    root_arrivals = np.zeros(n_sec, dtype=np.int64)
    edges = np.zeros(3, dtype=np.int64)
    first = _BIG
    last = _SMALL
    outside = 0
    has_q, has_ti, has_to = len(queue) > 0, len(tin) > 0, len(tout) > 0
    check_window = win_start != _SMALL
    check_stop = win_stop != _SMALL
    for i in range(n):
        t = ts[i]
        d = dur[i]
        ok = valid[i]
        end = t + d
        if t < first:
            first = t
        if end > last:
            last = end
        if check_window and (t < win_start or (check_stop and end > win_stop)):
            outside += 1
        own = d - child_sum[i]
        if own < 0:
            own = 0
        in_request = has_req[i] if req_const < 0 else req_const == 1
        sec = t // _NS - sec_lo
        k = stage[i]
        if k >= 0:
            sums[k, S_COUNT] += 1
            if ok:
                if has_b and batch_p[i] and batch_v[i] >= 0:
                    b_rows[b_next[k]] = i
                    b_next[k] += 1
                if has_f and flops_p[i] and not math.isnan(flops_v[i]):
                    f_rows[f_next[k]] = i
                    f_next[k] += 1
                if has_y and bytes_p[i] and not math.isnan(bytes_v[i]):
                    y_rows[y_next[k]] = i
                    y_next[k] += 1
                _record(lat, lat_st, k, d)
                sums[k, S_SELF] += own
                busy[k, sec] += d
                busy_n[k, sec] += 1
                if in_request:
                    sums[k, S_IN_REQUEST] += d
                    sums[k, S_SELF_IN_REQUEST] += own
            s = status[i]
            if s >= 0:
                statuses[k, s] += 1
            p = parent_row[i]
            if p >= 0:
                for _ in range(MAX_DEPTH):  # up to the request's root (bounded: ids may form a cycle)
                    up = parent_row[p]
                    if up < 0:
                        break
                    p = up
                off = t - ts[p]
                sums[k, S_OFFSET] += off if off > 0 else 0
                sums[k, S_OFFSET_N] += 1
            if has_q and queue[i] >= 0:
                _record(q, q_st, k, queue[i])
            if has_ti and tin[i] >= 0:
                _record(ti, ti_st, k, tin[i])
            if has_to and tout[i] >= 0:
                _record(to, to_st, k, tout[i])
            c = shape[i]
            if c >= 0:
                shapes[k, c] += 1
            c = engine[i]
            if c >= 0:
                engines[k, c] += 1
        if parent[i] == 0:
            root_arrivals[sec] += 1
            if in_request:
                req_sums[0] += 1
                req_ts[n_req] = t
                n_req += 1
                arrivals[sec] += 1
                s = status[i]
                if s >= 0:
                    req_statuses[s] += 1
                if ok:
                    _record(req, req_st, 0, d)
                    req_sums[1] += d
                    req_sums[2] += own
    edges[0] = first
    edges[1] = last
    edges[2] = outside
    return (sums, statuses, shapes, engines, busy, busy_n, req_sums, req_statuses, arrivals, root_arrivals, edges,
            req_ts, (b_rows, b_bounds), (f_rows, f_bounds), (y_rows, y_bounds))


def new_histogram_arrays(rows: int):
    return np.zeros((rows, COUNTS_LEN), dtype=np.int64), new_stats(rows)
