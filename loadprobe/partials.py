"""Map one data file to mergeable partial aggregates; merge partials in any order.

A partial holds only sums, counts and HdrHistogram-bucket counts (``histogram.py``), all
exact integers except a few float sums kept as lists and added with ``math.fsum`` at the
end, so merging is associative and commutative: the same files give the same portrait
in-process, in a process pool or on Dask, in any order and any split. Memory is bounded
by one file plus the partial, whatever the dataset's size.

Usage::

    part = map_file(ref, Filters())
    total = merge([part, other_part])
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .dataset import FileRef, open_input
from .histogram import Histogram
from ._segments import iter_stream
from .schema import SCHEMA_KEY, SCHEMAS, SchemaVersionError, check_version

MAX_SHAPES = 10_000  # distinct shapes kept per stage; the rest are counted as "(other)"
SKEW_SAMPLE_SUFFIX = "00"  # requests whose id ends so are sampled for the cross-host clock check
_NS = 1_000_000_000
_SPAN_COLUMNS = ["ts_ns", "dur_ns", "stage", "span_id", "parent_id", "request_id", "batch", "shape",
                 "engine", "status", "queue_ns", "flops", "bytes", "tokens_in", "tokens_out"]
_REQUIRED_SPAN_COLUMNS = {"ts_ns", "dur_ns", "stage", "span_id", "parent_id", "request_id", "status"}
_SAMPLE_COLUMNS = ["ts_ns", "device", "metric", "value"]


@dataclass(frozen=True)
class Filters:
    """What the map step keeps: a time window in epoch ns, and whether to sample request ids
    for the cross-host clock check (only worth reading them when there are several hosts)."""

    since_ns: int | None = None
    until_ns: int | None = None
    sample_skew: bool = True
    read_threads: bool = False  # let Arrow decode columns in parallel (when one process maps alone)


@dataclass
class StagePartial:
    latency: Histogram = field(default_factory=Histogram)
    count: int = 0
    self_ns: int = 0
    in_request_ns: int = 0
    self_in_request_ns: int = 0
    statuses: Counter = field(default_factory=Counter)
    queue: Histogram = field(default_factory=Histogram)
    batch: Counter = field(default_factory=Counter)
    fit: list = field(default_factory=list)  # per file [n, Σb, Σb², Σl, Σbl, Σl²] with l in ms
    shapes: Counter = field(default_factory=Counter)
    shapes_overflow: int = 0
    engines: Counter = field(default_factory=Counter)
    flops: list = field(default_factory=list)  # per file Σflops
    bytes: list = field(default_factory=list)
    flops_dur_ns: int = 0
    bytes_dur_ns: int = 0
    tokens_in: Histogram = field(default_factory=Histogram)
    tokens_out: Histogram = field(default_factory=Histogram)
    offset_ns: int = 0  # Σ (start - parent's start) over spans whose parent is in the same file
    offset_n: int = 0

    def merge(self, o: StagePartial) -> StagePartial:
        self.latency.merge(o.latency)
        self.queue.merge(o.queue)
        self.tokens_in.merge(o.tokens_in)
        self.tokens_out.merge(o.tokens_out)
        self.count += o.count
        self.self_ns += o.self_ns
        self.in_request_ns += o.in_request_ns
        self.self_in_request_ns += o.self_in_request_ns
        self.offset_ns += o.offset_ns
        self.offset_n += o.offset_n
        self.statuses.update(o.statuses)
        self.batch.update(o.batch)
        self.fit += o.fit
        self.engines.update(o.engines)
        self.flops += o.flops
        self.bytes += o.bytes
        self.flops_dur_ns += o.flops_dur_ns
        self.bytes_dur_ns += o.bytes_dur_ns
        self.shapes.update(o.shapes)
        self.shapes_overflow += o.shapes_overflow
        if len(self.shapes) > MAX_SHAPES:
            keep = dict(sorted(self.shapes.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_SHAPES])
            self.shapes_overflow += sum(self.shapes.values()) - sum(keep.values())
            self.shapes = Counter(keep)
        return self


@dataclass
class Partial:
    """Everything the portrait needs from some set of files."""

    files: list = field(default_factory=list)
    skipped: dict = field(default_factory=dict)  # path -> reason
    rows: int = 0
    rows_filtered: int = 0
    null_durations: int = 0
    negative_durations: int = 0
    unjoined_children: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    stages: dict = field(default_factory=dict)  # name -> StagePartial
    requests: Histogram = field(default_factory=Histogram)
    request_count: int = 0
    request_statuses: Counter = field(default_factory=Counter)
    request_total_ns: int = 0
    request_self_ns: int = 0
    arrivals: Counter = field(default_factory=Counter)  # epoch second -> requests started
    root_arrivals: Counter = field(default_factory=Counter)  # epoch second -> root spans started
    host_arrivals: Counter = field(default_factory=Counter)  # (host, epoch second) -> requests started
    gaps: dict = field(default_factory=dict)  # run -> [n, Σgap_s, Σgap_s²] per file, as lists
    busy: Counter = field(default_factory=Counter)  # (host, stage, second) -> ns of stage time started then
    samples: dict = field(default_factory=dict)  # (host, device, metric) -> SamplePartial
    out_of_window: Counter = field(default_factory=Counter)  # run -> spans outside the run's own start/stop
    skew: dict = field(default_factory=dict)  # request id -> list of (host, start, end, is_root)

    def stage(self, name: str) -> StagePartial:
        part = self.stages.get(name)
        if part is None:
            part = self.stages[name] = StagePartial()
        return part

    def merge(self, o: Partial) -> Partial:
        self.files += o.files
        self.skipped.update(o.skipped)
        for name in ("rows", "rows_filtered", "null_durations", "negative_durations", "unjoined_children",
                     "request_count", "request_total_ns", "request_self_ns"):
            setattr(self, name, getattr(self, name) + getattr(o, name))
        self.first_ns = _pick(min, self.first_ns, o.first_ns)
        self.last_ns = _pick(max, self.last_ns, o.last_ns)
        for name, part in o.stages.items():
            self.stage(name).merge(part)
        self.requests.merge(o.requests)
        self.request_statuses.update(o.request_statuses)
        self.arrivals.update(o.arrivals)
        self.root_arrivals.update(o.root_arrivals)
        self.host_arrivals.update(o.host_arrivals)
        for run, values in o.gaps.items():
            self.gaps.setdefault(run, []).extend(values)
        self.busy.update(o.busy)
        for key, part in o.samples.items():
            self.samples.setdefault(key, SamplePartial()).merge(part)
        self.out_of_window.update(o.out_of_window)
        for rid, seen in o.skew.items():
            self.skew.setdefault(rid, []).extend(seen)
        return self


@dataclass
class SamplePartial:
    """One device metric on one host: per-second sums and counts, and the extremes."""

    per_second: Counter = field(default_factory=Counter)  # second -> Σvalue
    per_second_n: Counter = field(default_factory=Counter)
    count: int = 0
    max: float | None = None

    def merge(self, o: SamplePartial) -> SamplePartial:
        self.per_second.update(o.per_second)
        self.per_second_n.update(o.per_second_n)
        self.count += o.count
        self.max = _pick(max, self.max, o.max)
        return self


def _pick(fn, a, b):
    return b if a is None else a if b is None else fn(a, b)


def merge(partials) -> Partial:
    """Merge any number of partials (the reduce step)."""
    total = Partial()
    for part in partials:
        total.merge(part)
    return total


# -- map ------------------------------------------------------------------------------------


def map_file(ref: FileRef, filters: Filters = Filters(), run_window: tuple | None = None) -> Partial:
    """Read one file and return its partial; a file that cannot be used is recorded as skipped."""
    part = Partial()
    try:
        table = _read(ref, filters)
    except SchemaVersionError as exc:
        part.skipped[ref.path] = str(exc).split(": ", 1)[-1]
        return part
    except (pa.ArrowException, OSError, ValueError, KeyError) as exc:
        part.skipped[ref.path] = _reason(exc)
        return part
    part.files.append(ref.path)
    if ref.kind == "spans":
        _map_spans(part, table, ref, filters, run_window)
    else:
        _map_samples(part, table, ref, filters)
    return part


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
    if "magic bytes" in text or "Parquet file size is 0" in text or "footer" in text.lower():
        return "truncated or not a Parquet file"
    return text[:200]


def _read(ref: FileRef, filters: Filters = Filters()) -> pa.Table:
    wanted = _SPAN_COLUMNS if ref.kind == "spans" else _SAMPLE_COLUMNS
    source = open_input(ref)
    try:
        if ref.stream:
            table = pa.Table.from_batches(list(iter_stream(source)), schema=SCHEMAS[ref.kind])
        else:
            pf = pq.ParquetFile(source, pre_buffer=False)
            metadata = pf.schema_arrow.metadata or {}
            if SCHEMA_KEY in metadata:
                check_version(metadata[SCHEMA_KEY].decode(), ref.path)
            present = [c for c in wanted if c in pf.schema_arrow.names and not _all_null(pf, c)]
            known = _request_ids_known(pf) if ref.kind == "spans" and not filters.sample_skew else None
            if known is not None:  # the footer says every span has (or none has) a request id
                present.remove("request_id")
            table = pf.read(columns=present, use_threads=filters.read_threads)
            if known is not None:
                ids = pa.array([known] * table.num_rows, pa.bool_())
                table = table.append_column("request_id", pc.if_else(ids, pa.scalar("", pa.string()),
                                                                     pa.scalar(None, pa.string())))
    finally:
        if hasattr(source, "close"):
            source.close()
    required = _REQUIRED_SPAN_COLUMNS if ref.kind == "spans" else set(_SAMPLE_COLUMNS)
    missing = sorted(required - set(table.column_names))
    if missing:
        raise KeyError(f"missing column(s) {', '.join(missing)}")
    return table


def _all_null(pf: pq.ParquetFile, column: str) -> bool:
    """Whether the footer's statistics say a column holds only nulls (so it need not be read)."""
    meta = pf.metadata
    index = pf.schema_arrow.get_field_index(column)
    if meta.num_row_groups == 0 or column in _REQUIRED_SPAN_COLUMNS or index < 0:
        return False
    try:
        for i in range(meta.num_row_groups):
            chunk = meta.row_group(i).column(index)
            stats = chunk.statistics
            if stats is None or not stats.has_null_count or stats.null_count != chunk.num_values:
                return False
    except (IndexError, ValueError):
        return False
    return True


def _request_ids_known(pf: pq.ParquetFile) -> bool | None:
    """True if no span lacks a request id, False if none has one, None if mixed or unknown.

    The request id strings are the costliest column to decode; when only their presence
    matters, the footer's null counts answer without reading them.
    """
    meta = pf.metadata
    index = pf.schema_arrow.get_field_index("request_id")
    nulls = total = 0
    for i in range(meta.num_row_groups):
        chunk = meta.row_group(i).column(index)
        stats = chunk.statistics
        if stats is None or not stats.has_null_count:
            return None
        nulls += stats.null_count
        total += chunk.num_values
    if nulls == 0:
        return True
    return False if nulls == total else None


def _ints(table: pa.Table, name: str, fill: int = -1) -> np.ndarray:
    """An int64 column as numpy, nulls replaced by ``fill``."""
    if name not in table.column_names:
        return np.full(table.num_rows, fill, dtype=np.int64)
    column = table.column(name)
    if column.null_count:
        column = pc.fill_null(column, fill)
    return column.to_numpy().astype(np.int64, copy=False)


def _floats(table: pa.Table, name: str) -> np.ndarray:
    if name not in table.column_names:
        return np.full(table.num_rows, np.nan)
    column = table.column(name).cast(pa.float64())
    if column.null_count:
        column = pc.fill_null(column, np.nan)
    return column.to_numpy()


def _codes(table: pa.Table, name: str) -> tuple[np.ndarray, list]:
    """Dictionary codes (-1 for null) and the dictionary's values, for a string column."""
    if name not in table.column_names:
        return np.full(table.num_rows, -1, dtype=np.int64), []
    column = table.column(name)
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    column = column.unify_dictionaries() if isinstance(column, pa.ChunkedArray) else column
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    if not chunks:
        return np.zeros(0, dtype=np.int64), []
    dictionary = chunks[0].dictionary.to_pylist()
    codes = np.concatenate([pc.fill_null(c.indices, -1).to_numpy().astype(np.int64, copy=False)
                            for c in chunks]) if chunks else np.zeros(0, dtype=np.int64)
    return codes, dictionary


def _map_spans(part: Partial, table: pa.Table, ref: FileRef, filters: Filters, run_window) -> None:
    ts = _ints(table, "ts_ns")
    part.rows += len(ts)
    keep = np.ones(len(ts), dtype=bool)
    if filters.since_ns is not None:
        keep &= ts >= filters.since_ns
    if filters.until_ns is not None:
        keep &= ts < filters.until_ns
    if not keep.all():
        part.rows_filtered += int((~keep).sum())
        table = table.filter(pa.array(keep))
        ts = ts[keep]
    if len(ts) == 0:
        return
    dur = _ints(table, "dur_ns", fill=-(2**62))
    null_dur = dur == -(2**62)
    negative = (dur < 0) & ~null_dur
    part.null_durations += int(null_dur.sum())
    if negative.any():  # impossible spans: left out entirely, counted and reported
        part.negative_durations += int(negative.sum())
        table = table.filter(pa.array(~negative))
        ts, dur, null_dur = ts[~negative], dur[~negative], null_dur[~negative]
        if len(ts) == 0:
            return
    valid = dur >= 0
    dur = np.where(valid, dur, 0)

    span_id = _ints(table, "span_id", 0)
    parent = _ints(table, "parent_id", 0)
    has_request = table.column("request_id").is_valid().to_numpy(zero_copy_only=False)
    stage_codes, stage_names = _codes(table, "stage")
    status_codes, status_names = _codes(table, "status")

    part.first_ns = _pick(min, part.first_ns, int(ts.min()))
    ends = ts + dur
    part.last_ns = _pick(max, part.last_ns, int(ends.max()))
    if run_window is not None:
        start, stop = run_window
        outside = (ts < start - 5 * _NS) | ((ends > stop + 5 * _NS) if stop else False)
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
    child_sum = np.bincount(order[pos_clipped[found]], weights=dur[child][found], minlength=len(ts))
    self_ns = np.maximum(dur - child_sum.astype(np.int64), 0)
    # Where each child starts within its parent: orders a request's stages as they run.
    offset = np.full(len(ts), -1, dtype=np.int64)
    child_rows = np.flatnonzero(child)[found]
    offset[child_rows] = np.maximum(ts[child_rows] - ts[order[pos_clipped[found]]], 0)

    batch = _ints(table, "batch")
    queue = _ints(table, "queue_ns")
    flops, nbytes = _floats(table, "flops"), _floats(table, "bytes")
    tokens_in, tokens_out = _ints(table, "tokens_in"), _ints(table, "tokens_out")
    shape_codes, shape_names = _codes(table, "shape")
    engine_codes, engine_names = _codes(table, "engine")
    seconds = ts // _NS

    # Rows grouped by stage once (a radix sort of small codes), so each stage works on its
    # own contiguous slice instead of masking every column once per stage. Columns that hold
    # nothing in this file (all null) are neither gathered nor scanned.
    order = np.argsort(stage_codes.astype(np.int16 if len(stage_names) < 2**15 else np.int64), kind="stable")
    bounds = np.searchsorted(stage_codes[order], np.arange(len(stage_names) + 1))
    columns = {"dur": dur, "valid": valid, "self": self_ns, "req": has_request, "status": status_codes,
               "sec": seconds, "offset": offset, "batch": batch, "queue": queue, "tin": tokens_in, "tout": tokens_out,
               "shape": shape_codes, "engine": engine_codes, "flops": flops, "bytes": nbytes}
    absent = {"offset": -1, "batch": -1, "queue": -1, "tin": -1, "tout": -1, "shape": -1, "engine": -1}
    g = {}
    for key, values in columns.items():
        if key in absent and not (values != absent[key]).any():
            continue
        if key in ("flops", "bytes") and np.isnan(values).all():
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
        sp.statuses.update(_count_codes(s["status"], status_names))
        if "offset" in s:
            joined = s["offset"] >= 0
            sp.offset_ns += int(s["offset"][joined].sum())
            sp.offset_n += int(joined.sum())
        if "queue" in s:
            sp.queue.record(s["queue"][s["queue"] >= 0])
        if "batch" in s:
            b_rows = ok & (s["batch"] >= 0)
            if b_rows.any():
                b = s["batch"][b_rows]
                sp.batch.update(_counts(b))
                bf, lf = b.astype(np.float64), s["dur"][b_rows] / 1e6
                sp.fit.append([float(len(b)), float(bf.sum()), float((bf * bf).sum()), float(lf.sum()),
                               float((bf * lf).sum()), float((lf * lf).sum())])
        if "shape" in s:
            sp.shapes.update(_count_codes(s["shape"], shape_names))
            if len(sp.shapes) > MAX_SHAPES:
                sp.merge(StagePartial())  # trims to the cap
        if "engine" in s:
            sp.engines.update(_count_codes(s["engine"], engine_names))
        # Float sums are per file (deterministic for the file) and added with fsum when finalised.
        for key, sums in (("flops", sp.flops), ("bytes", sp.bytes)):
            if key in s:
                rows = ok & ~np.isnan(s[key])
                if rows.any():
                    sums.append(float(s[key][rows].sum()))
                    if key == "flops":
                        sp.flops_dur_ns += int(s["dur"][rows].sum())
                    else:
                        sp.bytes_dur_ns += int(s["dur"][rows].sum())
        if "tin" in s:
            sp.tokens_in.record(s["tin"][s["tin"] >= 0])
        if "tout" in s:
            sp.tokens_out.record(s["tout"][s["tout"] >= 0])
        secs, busy = _sum_by(s["sec"] if all_ok else s["sec"][ok], d)
        part.busy.update({(ref.host, str(name), sec): v for sec, v in zip(secs.tolist(), busy.tolist())})

    roots = parent == 0
    requests = roots & has_request
    r_ok = requests & valid
    part.request_count += int(requests.sum())
    part.requests.record(dur[r_ok])
    part.request_total_ns += int(dur[r_ok].sum())
    part.request_self_ns += int(self_ns[r_ok].sum())
    part.request_statuses.update(_count_codes(status_codes[requests], status_names))
    arrivals = _counts(seconds[requests])
    part.arrivals.update(arrivals)
    part.host_arrivals.update({(ref.host, sec): n for sec, n in arrivals.items()})
    part.root_arrivals.update(_counts(seconds[roots]))
    arrivals_ts = np.sort(ts[requests] if requests.any() else ts[roots])
    if len(arrivals_ts) > 1:
        gaps = np.diff(arrivals_ts) / 1e9
        part.gaps.setdefault(ref.run_id, []).append([float(len(gaps)), float(gaps.sum()), float((gaps * gaps).sum())])
    _sample_for_skew(part, table, ts, ends, roots, ref.host)


def _sample_for_skew(part: Partial, table, ts, ends, roots, host: str) -> None:
    ids = table.column("request_id")
    sampled = pc.fill_null(pc.ends_with(ids, SKEW_SAMPLE_SUFFIX), False).to_numpy(zero_copy_only=False)
    if not sampled.any():
        return
    rows = np.flatnonzero(sampled)[:20_000]
    id_values = ids.take(pa.array(rows)).to_pylist()
    seen: dict = {}
    for rid, start, end, root in zip(id_values, ts[rows].tolist(), ends[rows].tolist(), roots[rows].tolist()):
        lo, hi, has_root = seen.get(rid, (start, end, False))
        seen[rid] = (min(lo, start), max(hi, end), has_root or root)
    for rid, (lo, hi, root) in seen.items():
        part.skew.setdefault(rid, []).append((host, lo, hi, root))


def _map_samples(part: Partial, table: pa.Table, ref: FileRef, filters: Filters) -> None:
    ts = _ints(table, "ts_ns")
    keep = np.ones(len(ts), dtype=bool)
    if filters.since_ns is not None:
        keep &= ts >= filters.since_ns
    if filters.until_ns is not None:
        keep &= ts < filters.until_ns
    table = table.filter(pa.array(keep)) if not keep.all() else table
    ts = ts[keep]
    if len(ts) == 0:
        return
    device_codes, devices = _codes(table, "device")
    metric_codes, metrics = _codes(table, "metric")
    values = _floats(table, "value")
    seconds = ts // _NS
    pair = device_codes * max(1, len(metrics)) + metric_codes
    for key in np.unique(pair):
        rows = (pair == key) & ~np.isnan(values)
        if not rows.any():
            continue
        device, metric = devices[key // max(1, len(metrics))], metrics[key % max(1, len(metrics))]
        sp = part.samples.setdefault((ref.host, str(device), str(metric)), SamplePartial())
        v = values[rows]
        secs, sums = _sum_by(seconds[rows], v)
        _, counts = _sum_by(seconds[rows], np.ones(len(v)))
        sp.per_second.update(dict(zip(secs.tolist(), sums.tolist())))
        sp.per_second_n.update(dict(zip(secs.tolist(), counts.astype(np.int64).tolist())))
        sp.count += int(len(v))
        sp.max = _pick(max, sp.max, float(v.max()))


def _count_codes(codes: np.ndarray, names: list) -> dict:
    codes = codes[codes >= 0]
    if codes.size == 0:
        return {}
    counts = np.bincount(codes, minlength=len(names))
    return {str(names[i]): int(c) for i, c in enumerate(counts) if c}


_DENSE_RANGE = 1 << 22  # keys spanning less than this are counted with bincount, not a sort


def _counts(values: np.ndarray) -> dict:
    if values.size == 0:
        return {}
    lo = int(values.min())
    if int(values.max()) - lo < _DENSE_RANGE:
        counts = np.bincount(values - lo)
        keys = np.flatnonzero(counts)
        return dict(zip((keys + lo).tolist(), counts[keys].tolist()))
    keys, counts = np.unique(values, return_counts=True)
    return dict(zip(keys.tolist(), counts.tolist()))


def _sum_by(keys: np.ndarray, values: np.ndarray):
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
