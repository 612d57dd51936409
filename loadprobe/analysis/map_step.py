"""The map step: each data file becomes a partial (read, decode, aggregate), files in parallel.

A file is read (``reading``), its rows filtered to the time window and its impossible spans
counted and left out, its columns decoded (``columns``), and aggregated by the kernel
``Filters.kernel`` names (``kernel_c`` or ``kernel_numpy``, resolved once by
``kernels``); device samples are summed per second here. Memory is bounded by one file plus
the partial, whatever the dataset's size. ``parallel`` runs this in threads, processes or
on Dask.

Usage::

    part = map_file(ref, Filters())
    total = map_files([(ref, run_window), ...], Filters(kernel="numpy"), threads=2)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from . import kernel_c, kernel_numpy
from .cpu_time import map_cpu
from .columns import (arrow_mask, arrow_rows, booleans, dictionary_codes, float_column, int_column, span_columns,
                      validity)
from .dataset import FileRef
from .energy import energy_by_second, map_engine_busy
from .kernel_numpy import NS_PER_S, sum_by
from .kernels import resolve_kernel
from .llm import map_llm, marker_rows
from .partials import Partial, SamplePartial, add_counts, merge, pick
from .reading import UnreadableFile, read_data_file
from .requestjoin import ClientRequests, is_load_client, join_client

SKEW_SAMPLE_SUFFIX = "00"  # requests whose id ends so are sampled for the cross-host clock check
_NULL_DURATION = -(2**62)  # what a null dur_ns decodes as, before it is told from a negative one
_KERNELS = {"c": kernel_c, "numpy": kernel_numpy}  # Filters.kernel -> its module


@dataclass(frozen=True)
class Filters:
    """What the map step keeps: a time window in epoch ns, and whether to sample request ids
    for the cross-host clock check (only worth reading them when there are several hosts).
    ``kernel`` ("auto", "c" or "numpy") is resolved as the Filters are made
    (``kernels.resolve_kernel``): every file mapped with them is aggregated by that kernel."""

    since_ns: int | None = None
    until_ns: int | None = None
    sample_skew: bool = True
    read_threads: bool = False  # let Arrow decode columns in parallel (when one process maps alone)
    kernel: str = "auto"  # "auto": C when built, else numpy; "c"; "numpy"
    energy: bool = True  # map each span's time on its engine (energy.py); analyze: only when power was sampled
    client: ClientRequests | None = None  # the load client's requests, joined to the server's (requestjoin.py)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kernel", resolve_kernel(self.kernel))


def map_file(ref: FileRef, filters: Filters | None = None, run_window: tuple | None = None,
             into: Partial | None = None) -> Partial:
    """Read one file and return its partial; a file that cannot be used is recorded as skipped.
    With ``into``, the file is added to that partial (the same as merging its own partial into
    it, without building one) and ``into`` is returned."""
    filters = Filters() if filters is None else filters
    part = Partial() if into is None else into
    try:
        # The join needs the server's request ids, and an LLM request's views pair by them: the load client's
        # files (one root per request, and its markers) always keep theirs.
        joining = filters.client is not None and not is_load_client(ref.service)
        read = read_data_file(ref, request_ids=filters.sample_skew or joining or is_load_client(ref.service),
                              use_threads=filters.read_threads)
    except UnreadableFile as exc:
        part.skipped[ref.path] = exc.reason
        return part
    part.files.append(ref.path)
    if ref.kind == "spans":
        map_spans(part, read.table, ref, filters, run_window, read.request_ids_known)
    else:
        _map_samples(part, read.table, ref, filters)
    return part


def map_files(jobs, filters: Filters | None = None, threads: int = 2, on_file=None) -> Partial:
    """``map_file`` over ``(ref, run_window)`` pairs, ``threads`` files at once, merged into one
    partial; ``on_file()`` is called (from a map thread) as each file is done.

    Arrow's decoding and the compiled kernel release the GIL, so on two cores two files overlap
    almost fully. Each thread adds its files straight into its own partial (``map_file(into=)``),
    and those are merged at the end: building a partial per file and handing it to one merging
    thread cost Python work under the GIL twice, and made that thread a third contender for it
    (about 5% slower at 100M spans, and more variable). Merging is exact and order-free, so the
    result does not depend on which thread mapped which file. At most ``threads`` files are in
    memory at once.
    """
    from concurrent.futures import ThreadPoolExecutor

    filters = Filters() if filters is None else filters
    local = threading.local()
    totals: list[Partial] = []
    lock = threading.Lock()

    def work(job) -> None:
        total = getattr(local, "total", None)
        if total is None:
            total = local.total = Partial()
            with lock:
                totals.append(total)
        map_file(job[0], filters, job[1], into=total)
        if on_file is not None:
            with lock:
                on_file()

    pool = ThreadPoolExecutor(threads, thread_name_prefix="loadprobe-map")
    try:
        for future in [pool.submit(work, job) for job in jobs]:
            future.result()  # raises what a job raised
    except BaseException:  # an error or Ctrl-C: drop the files not started yet, do not map them
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return merge(totals)


def map_spans(part: Partial, table: pa.Table, ref: FileRef, filters: Filters, run_window,
              request_ids_known: bool | None = None) -> None:
    """Add a spans table (read from ``ref``) to ``part``: rows outside the time window are
    counted as filtered and spans with negative durations as impossible, both left out;
    ``request_ids_known``: as ``reading.DataFile`` has it (None: the table has ``request_id``)."""
    ts = int_column(table, "ts_ns")
    part.rows += len(ts)
    if filters.since_ns is not None or filters.until_ns is not None:
        keep = np.ones(len(ts), dtype=bool)
        if filters.since_ns is not None:
            keep &= ts >= filters.since_ns
        if filters.until_ns is not None:
            keep &= ts < filters.until_ns
        if not keep.all():
            part.rows_filtered += int((~keep).sum())
            table = table.filter(arrow_mask(keep))
            ts = ts[keep]
    if len(ts) == 0:
        return
    dur = int_column(table, "dur_ns", fill=_NULL_DURATION)
    if "dur_ns" in table.column_names and not table.column("dur_ns").null_count and dur.min() >= 0:
        valid = np.ones(len(ts), dtype=bool)  # the usual case: every duration present and sane
    else:
        null_dur = dur == _NULL_DURATION
        negative = (dur < 0) & ~null_dur
        part.null_durations += int(null_dur.sum())
        if negative.any():  # impossible spans: left out entirely, counted and reported
            part.negative_durations += int(negative.sum())
            table = table.filter(arrow_mask(~negative))
            ts, dur, null_dur = ts[~negative], dur[~negative], null_dur[~negative]
            if len(ts) == 0:
                return
        valid = dur >= 0
        dur = np.where(valid, dur, 0)

    cols = span_columns(table, ts, dur, valid, request_ids_known)
    markers = marker_rows(cols)
    map_llm(part.llm, cols, markers, "client" if is_load_client(ref.service) else "service", ref.run_id,
            table.column("request_id") if "request_id" in table.column_names else None)
    if markers is not None:  # token markers time the output; they are no stage of work
        keep = ~markers
        table, ts, dur, valid = table.filter(arrow_mask(keep)), ts[keep], dur[keep], valid[keep]
        if len(ts) == 0:
            return
        cols = span_columns(table, ts, dur, valid, request_ids_known)
    map_cpu(part, table, cols)
    joined = None
    if filters.client is not None and not is_load_client(ref.service):
        cols, joined = join_client(part, table, cols, filters.client, ref.host)
    gaps_before = len(part.gaps.get(ref.run_id, ()))
    self_before = part.request_self_ns
    _KERNELS[filters.kernel].aggregate(part, cols, ref, run_window)
    if filters.client is not None and is_load_client(ref.service):  # the client's own time, kept apart from
        part.client_self_ns += part.request_self_ns - self_before  # that of requests only the server saw
    if joined is not None and not joined.left and ref.run_id in part.gaps:
        # Every request of the file is the client's: its gaps are the client's, not these (which the
        # kernels took from whatever root spans are left, background work).
        del part.gaps[ref.run_id][gaps_before:]
        if not part.gaps[ref.run_id]:
            del part.gaps[ref.run_id]
    if filters.energy:
        map_engine_busy(part, cols, ref.host)
    if request_ids_known is None:
        _sample_for_skew(part, table, ts, ts + dur, cols.parent == 0, ref.host)


def _sample_for_skew(part: Partial, table, ts, ends, roots, host: str) -> None:
    import pyarrow.compute as pc  # here, not at import: it costs ~30 ms, and mapping rarely needs it

    ids = table.column("request_id")
    flags = pc.ends_with(ids, SKEW_SAMPLE_SUFFIX)  # null where the id is
    sampled = booleans(flags) & validity(flags)
    if not sampled.any():
        return
    rows = np.flatnonzero(sampled)[:20_000]
    id_values = ids.take(arrow_rows(rows)).to_pylist()
    seen: dict = {}
    for rid, start, end, root in zip(id_values, ts[rows].tolist(), ends[rows].tolist(), roots[rows].tolist()):
        lo, hi, has_root = seen.get(rid, (start, end, False))
        seen[rid] = (min(lo, start), max(hi, end), has_root or root)
    for rid, (lo, hi, root) in seen.items():
        part.skew.setdefault(rid, []).append((host, lo, hi, root))


def _map_samples(part: Partial, table: pa.Table, ref: FileRef, filters: Filters) -> None:
    ts = int_column(table, "ts_ns")
    keep = np.ones(len(ts), dtype=bool)
    if filters.since_ns is not None:
        keep &= ts >= filters.since_ns
    if filters.until_ns is not None:
        keep &= ts < filters.until_ns
    table = table.filter(arrow_mask(keep)) if not keep.all() else table
    ts = ts[keep]
    if len(ts) == 0:
        return
    device_codes, devices = dictionary_codes(table, "device")
    metric_codes, metrics = dictionary_codes(table, "metric")
    values = float_column(table, "value")
    seconds = ts // NS_PER_S
    pair = device_codes * max(1, len(metrics)) + metric_codes
    for key in np.unique(pair):
        rows = (pair == key) & ~np.isnan(values)
        if not rows.any():
            continue
        device, metric = devices[key // max(1, len(metrics))], metrics[key % max(1, len(metrics))]
        sp = part.samples.setdefault((ref.host, str(device), str(metric)), SamplePartial())
        v = values[rows]
        secs, sums = sum_by(seconds[rows], v)
        _, counts = sum_by(seconds[rows], np.ones(len(v)))
        if metric == "energy_j":  # an interval's joules go to the seconds it spans, not the one it ended in
            secs, joules, covered = energy_by_second(ts[rows], v)
            add_counts(sp.per_second, dict(zip(secs.tolist(), joules.tolist())))
            add_counts(sp.per_second_covered, dict(zip(secs.tolist(), covered.tolist())))
        else:
            add_counts(sp.per_second, dict(zip(secs.tolist(), sums.tolist())))
        add_counts(sp.per_second_n, dict(zip(secs.tolist(), counts.astype(np.int64).tolist())))
        sp.count += int(len(v))
        sp.max = pick(max, sp.max, float(v.max()))
