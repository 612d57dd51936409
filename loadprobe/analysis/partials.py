"""Map one data file to mergeable partial aggregates; merge partials in any order.

A partial holds only sums, counts and HdrHistogram-bucket counts (``histogram.py``), all
exact integers except a few float sums kept as lists and added with ``math.fsum`` at the
end, so merging is associative and commutative: the same files give the same portrait
in-process, in a process pool or on Dask, in any order and any split. Memory is bounded
by one file plus the partial, whatever the dataset's size.

Each file's spans are aggregated by numpy (``_aggregate_numpy``, the reference) or, when its
C library was built at install, by the compiled ``_mapkernel`` (``_aggregate_compiled``):
identical results, checked by tests/analysis/test_analyze_fast.py; ``Filters.kernel`` chooses.

Usage::

    part = map_file(ref, Filters())
    total = merge([part, other_part])
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .dataset import FileRef, open_input
from .histogram import Histogram
from .memory import scratch
from ..record.segments import iter_stream
from ..schema import SCHEMA_KEY, SCHEMAS, SchemaVersionError, check_version

MAX_SHAPES = 10_000  # distinct shapes kept per stage; the rest are counted as "(other)"
SKEW_SAMPLE_SUFFIX = "00"  # requests whose id ends so are sampled for the cross-host clock check
_NS = 1_000_000_000
_SPAN_COLUMNS = ["ts_ns", "dur_ns", "stage", "span_id", "parent_id", "request_id", "batch", "shape",
                 "engine", "status", "queue_ns", "flops", "bytes", "tokens_in", "tokens_out"]
_REQUIRED_SPAN_COLUMNS = {"ts_ns", "dur_ns", "stage", "span_id", "parent_id", "request_id", "status"}
_SAMPLE_COLUMNS = ["ts_ns", "device", "metric", "value"]
MAX_DEPTH = 64  # parent links followed from a span up to its root (as _mapkernel.MAX_DEPTH)
KERNELS = ("auto", "compiled", "numpy")  # how a file's spans are aggregated (Filters.kernel)


@dataclass(frozen=True)
class Filters:
    """What the map step keeps: a time window in epoch ns, and whether to sample request ids
    for the cross-host clock check (only worth reading them when there are several hosts)."""

    since_ns: int | None = None
    until_ns: int | None = None
    sample_skew: bool = True
    read_threads: bool = False  # let Arrow decode columns in parallel (when one process maps alone)
    kernel: str = "auto"  # "auto": compiled (C) when built, else numpy; "compiled"; "numpy"


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
        _add(self.statuses, o.statuses)
        _add(self.batch, o.batch)
        self.fit += o.fit
        _add(self.engines, o.engines)
        self.flops += o.flops
        self.bytes += o.bytes
        self.flops_dur_ns += o.flops_dur_ns
        self.bytes_dur_ns += o.bytes_dur_ns
        _add(self.shapes, o.shapes)
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
    request_queue_ns: int = 0  # queue time recorded by spans inside requests (waiting before a stage)
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
                     "request_count", "request_total_ns", "request_self_ns", "request_queue_ns"):
            setattr(self, name, getattr(self, name) + getattr(o, name))
        self.first_ns = _pick(min, self.first_ns, o.first_ns)
        self.last_ns = _pick(max, self.last_ns, o.last_ns)
        for name, part in o.stages.items():
            self.stage(name).merge(part)
        self.requests.merge(o.requests)
        _add(self.request_statuses, o.request_statuses)
        _add(self.arrivals, o.arrivals)
        _add(self.root_arrivals, o.root_arrivals)
        _add(self.host_arrivals, o.host_arrivals)
        for run, values in o.gaps.items():
            self.gaps.setdefault(run, []).extend(values)
        _add(self.busy, o.busy)
        for key, part in o.samples.items():
            self.samples.setdefault(key, SamplePartial()).merge(part)
        _add(self.out_of_window, o.out_of_window)
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
        _add(self.per_second, o.per_second)
        _add(self.per_second_n, o.per_second_n)
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


def map_file(ref: FileRef, filters: Filters = Filters(), run_window: tuple | None = None,
             into: Partial | None = None) -> Partial:
    """Read one file and return its partial; a file that cannot be used is recorded as skipped.
    With ``into``, the file is added to that partial (the same as merging its own partial into
    it, without building one) and ``into`` is returned."""
    return _map_read(ref, _read_or_reason(ref, filters), filters, run_window, Partial() if into is None else into)


def map_files(jobs, filters: Filters = Filters(), threads: int = 2, on_file=None) -> Partial:
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


def _read_or_reason(ref: FileRef, filters: Filters):
    """(table, known) of a file, or the reason it cannot be used (a string)."""
    try:
        return _read_table(ref, filters)
    except SchemaVersionError as exc:
        return str(exc).split(": ", 1)[-1]
    except (pa.ArrowException, OSError, ValueError, KeyError) as exc:
        return _reason(exc)


def _map_read(ref: FileRef, read, filters: Filters, run_window, part: Partial) -> Partial:
    if isinstance(read, str):
        part.skipped[ref.path] = read
        return part
    table, known = read
    part.files.append(ref.path)
    if ref.kind == "spans":
        _map_spans(part, table, ref, filters, run_window, known)
    else:
        _map_samples(part, table, ref, filters)
    return part


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
    if "magic bytes" in text or "Parquet file size is 0" in text or "footer" in text.lower():
        return "truncated or not a Parquet file"
    return text[:200]


def _read(ref: FileRef, filters: Filters = Filters()) -> pa.Table:
    """The file's table with every column analysis uses (``request_id`` always present)."""
    table, known = _read_table(ref, filters)
    if known is not None:
        import pyarrow.compute as pc  # here, not at import: it costs ~30 ms, and mapping rarely needs it

        ids = pa.array([known] * table.num_rows, pa.bool_())
        table = table.append_column("request_id", pc.if_else(ids, pa.scalar("", pa.string()),
                                                             pa.scalar(None, pa.string())))
    return table


def _read_table(ref: FileRef, filters: Filters = Filters()) -> tuple[pa.Table, bool | None]:
    """(table, known): ``known`` is None when ``request_id`` was read, else what the footer says:
    True if every span has a request id, False if none has (the column is then not decoded)."""
    wanted = _SPAN_COLUMNS if ref.kind == "spans" else _SAMPLE_COLUMNS
    source = open_input(ref)
    known = None
    try:
        if ref.stream:
            table = pa.Table.from_batches(list(iter_stream(source)), schema=SCHEMAS[ref.kind])
            # Arrow's IPC reader trusts what it reads; the Parquet reader checks dictionary
            # indices itself. The compiled kernel indexes its tables by them: check them here.
            table.validate(full=True)
        else:
            # Local files are memory-mapped: pages come straight from the page cache, no copies.
            pf = pq.ParquetFile(source, pre_buffer=False, memory_map=isinstance(source, str))
            schema, meta = pf.schema_arrow, pf.metadata  # each access builds a new object: once
            if SCHEMA_KEY in (schema.metadata or {}):
                check_version(schema.metadata[SCHEMA_KEY].decode(), ref.path)
            names = set(schema.names)
            present = [c for c in wanted if c in names and not _all_null(meta, schema, c)]
            known = _request_ids_known(meta, schema) if ref.kind == "spans" and not filters.sample_skew else None
            if known is not None:  # the footer says every span has (or none has) a request id
                present.remove("request_id")
            table = pf.read(columns=present, use_threads=filters.read_threads)
    finally:
        if hasattr(source, "close"):
            source.close()
    required = _REQUIRED_SPAN_COLUMNS if ref.kind == "spans" else set(_SAMPLE_COLUMNS)
    missing = sorted(required - set(table.column_names) - ({"request_id"} if known is not None else set()))
    if missing:
        raise ValueError(f"missing column(s) {', '.join(missing)}; not a loadprobe {ref.kind} file")
    return _conformed(table, SCHEMAS[ref.kind]), known


def _conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with its numeric columns in the data format's types; ValueError naming the first
    column that cannot be (text where a number belongs, fractions or values out of range).

    Other integer and float widths are cast exactly; text columns may be plain or dictionary
    strings (UTF-8), or integers (``_codes`` names them by their text). Checked once here, as a
    file is read, so that the map step only ever sees the types it expects.
    """
    for i, name in enumerate(table.column_names):
        expected, actual = schema.field(name).type, table.schema.field(i).type
        _check_utf8(table.column(i), name)
        if actual == expected:
            continue
        numeric = pa.types.is_integer(expected) or pa.types.is_floating(expected)
        if not numeric:
            if not (pa.types.is_dictionary(actual) or pa.types.is_string(actual) or pa.types.is_large_string(actual)
                    or pa.types.is_integer(actual)):
                raise ValueError(f"column {name!r} holds {actual}, expected strings")
            continue
        if not (pa.types.is_integer(actual) or pa.types.is_floating(actual) or pa.types.is_null(actual)):
            raise ValueError(f"column {name!r} holds {actual}, expected {expected}")
        try:
            table = table.set_column(i, name, table.column(i).cast(expected))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise ValueError(f"column {name!r} holds {actual} values that are not {expected} "
                             "(fractions, NaN or out of range)") from None
    return table


def _check_utf8(column: pa.ChunkedArray, name: str) -> None:
    """ValueError unless a text column's strings (a dictionary column's dictionaries) are UTF-8:
    readers decode them later, far from the file. About 4 ms per million request ids."""
    for chunk in column.chunks:
        values = chunk.dictionary if pa.types.is_dictionary(chunk.type) else chunk
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            try:
                values.validate(full=True)
            except pa.ArrowInvalid:
                raise ValueError(f"column {name!r} holds text that is not UTF-8") from None


def _all_null(meta: pq.FileMetaData, schema: pa.Schema, column: str) -> bool:
    """Whether the footer's statistics say a column holds only nulls (so it need not be read)."""
    index = schema.get_field_index(column)
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


def _request_ids_known(meta: pq.FileMetaData, schema: pa.Schema) -> bool | None:
    """True if no span lacks a request id, False if none has one, None if mixed or unknown.

    The request id strings are the costliest column to decode; when only their presence
    matters, the footer's null counts answer without reading them.
    """
    index = schema.get_field_index("request_id")
    if index < 0:
        return None
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


def request_id_ranges(refs) -> list | None:
    """``(host, lowest, highest)`` request id of every local Parquet span file, from footers only.

    None when some file's range is unknown (a stream, a remote file, no statistics): then
    nothing can be ruled out. Request ids compare as UTF-8 bytes, as Parquet orders them.
    """
    out = []
    for ref in refs:
        if ref.kind != "spans":
            continue
        if ref.stream or ref.filesystem_uri is not None:
            return None
        try:
            pf = pq.ParquetFile(open_input(ref), pre_buffer=False)
            index = pf.schema_arrow.get_field_index("request_id")
            if index < 0:
                continue  # no request ids at all: nothing to share
            meta = pf.metadata
            for i in range(meta.num_row_groups):
                chunk = meta.row_group(i).column(index)
                stats = chunk.statistics
                if stats is None or not stats.has_null_count:
                    return None
                if stats.null_count == chunk.num_values:
                    continue
                if not stats.has_min_max:
                    return None
                lo, hi = stats.min, stats.max
                lo = lo.encode() if isinstance(lo, str) else bytes(lo)
                hi = hi.encode() if isinstance(hi, str) else bytes(hi)
                out.append((ref.host, lo, hi))
        except (pa.ArrowException, OSError, ValueError, KeyError, IndexError):
            continue  # unreadable: the map step skips it too
    return out


def hosts_may_share_request_ids(refs) -> bool:
    """Whether two hosts' span files may hold the same request id (the cross-host clock check
    compares such requests). False only when the footers' id ranges prove they cannot: then
    the ids need not be decoded, and the check finds nothing, exactly as if they had been."""
    ranges = request_id_ranges(refs)
    return True if ranges is None else _ranges_overlap_across_hosts(ranges)


def _ranges_overlap_across_hosts(ranges: list) -> bool:
    """Whether any two ``(host, lo, hi)`` ranges of different hosts intersect."""
    # Sweep by lower bound: a range meets an earlier one of another host iff that one's upper
    # bound reaches its lower bound. Keep the largest upper bound of the two best hosts so far.
    ranges = sorted(ranges, key=lambda r: (r[1], r[2]))
    top: list = []  # [(hi, host)] of at most 2 distinct hosts, largest first
    for host, lo, hi in ranges:
        if any(top_host != host and top_hi >= lo for top_hi, top_host in top):
            return True
        best = max([hi] + [t[0] for t in top if t[1] == host])
        top = sorted([t for t in top if t[1] != host] + [(best, host)], reverse=True)[:2]
    return False


# Columns become numpy arrays straight from Arrow's buffers (np.frombuffer): pyarrow's own
# to_numpy imports pandas when it is installed, about 0.3 s of one core at the first file.


def _ints(table: pa.Table, name: str, fill: int = -1) -> np.ndarray:
    """An int64 column as numpy, nulls replaced by ``fill``."""
    if name not in table.column_names:
        return np.full(table.num_rows, fill, dtype=np.int64)
    column = table.column(name)
    if column.type != pa.int64():
        column = column.cast(pa.int64())
    return _with_fill(column.chunks, table.num_rows, fill, np.int64, key=name)


def _with_fill(chunks, n: int, fill, dtype, out_dtype=np.int64, key: str | None = None) -> np.ndarray:
    """Fixed-width Arrow chunks (of ``dtype``) as one ``out_dtype`` array, nulls set to ``fill``:
    one copy from Arrow's buffers, no intermediate arrays; none (a read-only view) for a
    single chunk without nulls. With ``key``, the copy goes to this thread's scratch array of
    that name (``_memory.scratch``), valid until the thread maps its next file."""
    chunks = [chunk for chunk in chunks if len(chunk)]
    if len(chunks) == 1 and not chunks[0].null_count and np.dtype(dtype) == np.dtype(out_dtype):
        return _values(chunks[0], dtype)
    out = np.empty(n, dtype=out_dtype) if key is None else scratch(key, n, out_dtype)
    compiled = compiled_kernel()
    pos = 0
    for chunk in chunks:
        m = len(chunk)
        seg = out[pos:pos + m]
        pos += m
        validity, data = chunk.buffers()[:2]
        if data is None or (validity is None and chunk.null_count):  # all null, no buffers
            seg[:] = fill
            continue
        values = _values(chunk, dtype)
        if chunk.null_count and compiled is not None and values.dtype == seg.dtype:
            compiled.fill_nulls(values, np.frombuffer(validity, dtype=np.uint8), chunk.offset, fill, seg)
            continue
        seg[:] = values
        if chunk.null_count:
            np.putmask(seg, ~_bits(validity, chunk.offset, m), fill)
    return out


def _floats(table: pa.Table, name: str) -> np.ndarray:
    """A float64 column as numpy, nulls as NaN."""
    if name not in table.column_names:
        return np.full(table.num_rows, np.nan)
    column = table.column(name).cast(pa.float64())
    return _with_fill(column.chunks, table.num_rows, np.nan, np.float64, np.float64)


def _values(chunk: pa.Array, dtype) -> np.ndarray:
    """A fixed-width Arrow array's values as a read-only numpy view (arbitrary where null)."""
    size = np.dtype(dtype).itemsize
    return np.frombuffer(chunk.buffers()[1], dtype=dtype, count=len(chunk), offset=chunk.offset * size)


def _bits(buffer, offset: int, n: int) -> np.ndarray:
    """``n`` bits of an Arrow bitmap (validity or booleans) from bit ``offset``, as bools."""
    return np.unpackbits(np.frombuffer(buffer, dtype=np.uint8), count=offset + n, bitorder="little")[offset:].view(bool)


def _arrow_mask(mask: np.ndarray) -> pa.Array:
    """A numpy bool array as an Arrow one (for ``filter``), without ``pa.array``: it imports pandas."""
    bits = np.packbits(mask, bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, pa.py_buffer(bits)])


def _arrow_rows(rows: np.ndarray) -> pa.Array:
    """Row numbers as an Arrow int64 array (for ``take``), without ``pa.array``."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(rows), [None, pa.py_buffer(rows)])


def _is_valid(column: pa.ChunkedArray) -> np.ndarray:
    """Whether each row of a column holds a value."""
    return _concat([np.ones(len(c), dtype=bool) if not c.null_count
                    else _bits(c.buffers()[0], c.offset, len(c)) if c.buffers()[0] is not None
                    else np.zeros(len(c), dtype=bool) for c in column.chunks])


def _booleans(column: pa.ChunkedArray) -> np.ndarray:
    """A boolean column's values as numpy bools (False where there is no data buffer)."""
    return _concat([_bits(c.buffers()[1], c.offset, len(c)) if c.buffers()[1] is not None
                    else np.zeros(len(c), dtype=bool) for c in column.chunks])


def _concat(parts: list) -> np.ndarray:
    """One array of ``parts`` (numpy arrays), without a copy when there is one."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def _sparse(table: pa.Table, name: str, dtype) -> tuple[np.ndarray, np.ndarray | None, int] | None:
    """A mostly-null column as (values, bits, first bit): raw values (arbitrary where null) and
    which rows have one, as an Arrow validity bitmap (uint8; None: every row) from bit ``first``;
    None when the column is absent or all null. No fill, no full-size cast, no copy of a single
    chunk (``_present`` turns the bitmap into bools)."""
    if name not in table.column_names:
        return None
    column = table.column(name)
    if column.null_count == len(column):
        return None
    arrow_type = pa.from_numpy_dtype(dtype)
    chunks = [c if c.type == arrow_type else c.cast(arrow_type) for c in column.chunks if len(c)]
    if len(chunks) == 1:
        validity = chunks[0].buffers()[0]
        bits = None if not chunks[0].null_count else np.frombuffer(validity, dtype=np.uint8)
        return _values(chunks[0], dtype), bits, chunks[0].offset
    values = [np.zeros(len(c), dtype=dtype) if c.buffers()[1] is None or (c.buffers()[0] is None and c.null_count)
              else _values(c, dtype) for c in chunks]  # all-null chunks may come without buffers
    present = _is_valid(pa.chunked_array(chunks, arrow_type))
    return _concat(values), np.packbits(present, bitorder="little"), 0


def _filled(sparse: tuple | None, n: int, fill: int) -> np.ndarray:
    """A ``_sparse`` int column as one array of ``n`` values, ``fill`` where null (or all, if absent)."""
    if sparse is None:
        return np.full(n, fill, dtype=np.int64)
    return np.where(_present(sparse, n), sparse[0], fill)


def _present(sparse: tuple, n: int) -> np.ndarray:
    """Whether each of the ``n`` rows of a ``_sparse`` column has a value."""
    _, bits, first = sparse
    return np.ones(n, dtype=bool) if bits is None else _bits(bits, first, n)


def _codes(table: pa.Table, name: str) -> tuple[np.ndarray, list]:
    """Dictionary codes (int32, -1 for null) and the dictionary's values as strings, for a string column."""
    if name not in table.column_names:
        return np.full(table.num_rows, -1, dtype=np.int32), []
    column = table.column(name)
    if not pa.types.is_dictionary(column.type):
        import pyarrow.compute as pc

        column = pc.dictionary_encode(column)
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    if not chunks:
        return np.zeros(0, dtype=np.int32), []
    first = chunks[0].dictionary
    # Row groups of one Parquet file usually share the same dictionary: unify only when they do not.
    if any(c.dictionary is not first and not c.dictionary.equals(first) for c in chunks[1:]):
        column = column.unify_dictionaries() if isinstance(column, pa.ChunkedArray) else column
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    dictionary = chunks[0].dictionary.to_pylist()
    if not pa.types.is_string(chunks[0].dictionary.type):
        dictionary = [str(value) for value in dictionary]  # names are strings whatever was recorded
    index_type = chunks[0].indices.type
    n = sum(len(c) for c in chunks)
    # Dictionary indices are always integers of 8 to 64 bits.
    dtype = np.dtype(f"{'i' if pa.types.is_signed_integer(index_type) else 'u'}{index_type.bit_width // 8}")
    return _with_fill([c.indices for c in chunks], n, -1, dtype, np.int32, key=name), dictionary


_KERNEL: dict = {}  # "module" once ckernel.py was tried (None: its C library does not load here), "error"


def _load_kernel():
    """(``_mapkernel``, None) when its C library loads here, else (None, why not)."""
    from .._optional import load_once

    return load_once(_KERNEL, f"{__package__}.ckernel", errors=(ImportError, OSError)), _KERNEL["error"]


def compiled_kernel():
    """The compiled map kernel (``_mapkernel``), or None when it was not built here."""
    return _load_kernel()[0]


def kernel_available() -> bool:
    """Whether the compiled map step loads here (its C library was built at install)."""
    return compiled_kernel() is not None


def _kernel(filters: Filters):
    """The compiled aggregation module, or None for the numpy path (``Filters.kernel``): "auto"
    falls back to numpy when the C kernel is not built; "compiled" raises then."""
    if filters.kernel == "numpy":
        return None
    module, error = _load_kernel()
    if module is None and filters.kernel == "compiled":
        raise ImportError(f"the compiled map step is unavailable: {error}")
    return module


def _map_spans(part: Partial, table: pa.Table, ref: FileRef, filters: Filters, run_window,
               known: bool | None = None) -> None:
    ts = _ints(table, "ts_ns")
    part.rows += len(ts)
    if filters.since_ns is not None or filters.until_ns is not None:
        keep = np.ones(len(ts), dtype=bool)
        if filters.since_ns is not None:
            keep &= ts >= filters.since_ns
        if filters.until_ns is not None:
            keep &= ts < filters.until_ns
        if not keep.all():
            part.rows_filtered += int((~keep).sum())
            table = table.filter(_arrow_mask(keep))
            ts = ts[keep]
    if len(ts) == 0:
        return
    dur = _ints(table, "dur_ns", fill=-(2**62))
    if "dur_ns" in table.column_names and not table.column("dur_ns").null_count and dur.min() >= 0:
        valid = np.ones(len(ts), dtype=bool)  # the usual case: every duration present and sane
    else:
        null_dur = dur == -(2**62)
        negative = (dur < 0) & ~null_dur
        part.null_durations += int(null_dur.sum())
        if negative.any():  # impossible spans: left out entirely, counted and reported
            part.negative_durations += int(negative.sum())
            table = table.filter(_arrow_mask(~negative))
            ts, dur, null_dur = ts[~negative], dur[~negative], null_dur[~negative]
            if len(ts) == 0:
                return
        valid = dur >= 0
        dur = np.where(valid, dur, 0)

    c = {"ts": ts, "dur": dur, "valid": valid, "span_id": _ints(table, "span_id", 0),
         "parent": _ints(table, "parent_id", 0),
         "batch": _sparse(table, "batch", np.int64), "flops": _sparse(table, "flops", np.float64),
         "bytes": _sparse(table, "bytes", np.float64),
         "known": known}
    for key, column in (("queue", "queue_ns"), ("tin", "tokens_in"), ("tout", "tokens_out")):
        c[key] = _sparse(table, column, np.int64)  # None: absent or all null
    if known is None:
        c["req"] = _is_valid(table.column("request_id"))
    for key, column in (("stage", "stage"), ("status", "status"), ("shape", "shape"), ("engine", "engine")):
        c[key], c[key + "_names"] = _codes(table, column)

    kernel = _kernel(filters)
    compiled = None if kernel is None else _aggregate_compiled(kernel, part, c, ref, run_window)
    if compiled is None:
        if known is not None:
            c["req"] = np.full(len(ts), known, dtype=bool)
        _aggregate_numpy(part, c, ref, run_window)
        roots = c["parent"] == 0
        requests = roots & c["req"]
        arrivals_ts = ts[requests] if requests.any() else ts[roots]
        grouped = None
    else:
        arrivals_ts, grouped = compiled
        roots = None
        if len(arrivals_ts) == 0:
            roots = c["parent"] == 0
            arrivals_ts = ts[roots]
    _batch_and_float_sums(part, c, grouped)

    # Start times of spans written in end order are nearly sorted already: the compiled
    # kernel's insertion sort (its own scratch array), else timsort ("stable") on a copy.
    if compiled is not None and len(arrivals_ts):
        kernel.sort_in_place(arrivals_ts)
    else:
        arrivals_ts = np.sort(arrivals_ts, kind="stable")
    if len(arrivals_ts) > 1:
        if compiled is not None and kernel.FLOAT_SUMS_AS_NUMPY:  # the same floats, off the GIL
            gap_sum, gap_squares = kernel.gap_sums(arrivals_ts)
        else:
            gaps = np.diff(arrivals_ts) / 1e9
            gap_sum, gap_squares = float(gaps.sum()), float((gaps * gaps).sum())
        part.gaps.setdefault(ref.run_id, []).append([float(len(arrivals_ts) - 1), gap_sum, gap_squares])
    if known is None:
        _sample_for_skew(part, table, ts, ts + dur, c["parent"] == 0 if roots is None else roots, ref.host)


def _aggregate_numpy(part: Partial, c: dict, ref: FileRef, run_window) -> None:
    """The reference path: every integer figure of the file's spans with numpy."""
    ts, dur, valid, span_id, parent = c["ts"], c["dur"], c["valid"], c["span_id"], c["parent"]
    has_request = c["req"]
    stage_codes, stage_names = c["stage"], c["stage_names"]
    status_codes, status_names = c["status"], c["status_names"]

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
    # A child's recorded queue time (in a batcher, a pool) was spent inside its parent too, so it is
    # not the parent's own time either.
    queued = np.zeros(len(ts), dtype=np.int64) if c["queue"] is None else np.maximum(_filled(c["queue"], len(ts), 0), 0)
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

    queue, tokens_in, tokens_out = (_filled(c[k], len(ts), -1) for k in ("queue", "tin", "tout"))
    shape_codes, shape_names = c["shape"], c["shape_names"]
    engine_codes, engine_names = c["engine"], c["engine_names"]
    seconds = ts // _NS

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
        _add(sp.statuses, _count_codes(s["status"], status_names))
        if "offset" in s:
            joined = s["offset"] >= 0
            sp.offset_ns += int(s["offset"][joined].sum())
            sp.offset_n += int(joined.sum())
        if "queue" in s:
            sp.queue.record(s["queue"][s["queue"] >= 0])
        if "shape" in s:
            _add(sp.shapes, _count_codes(s["shape"], shape_names))
            if len(sp.shapes) > MAX_SHAPES:
                sp.merge(StagePartial())  # trims to the cap
        if "engine" in s:
            _add(sp.engines, _count_codes(s["engine"], engine_names))
        if "tin" in s:
            sp.tokens_in.record(s["tin"][s["tin"] >= 0])
        if "tout" in s:
            sp.tokens_out.record(s["tout"][s["tout"] >= 0])
        secs, busy = _sum_by(s["sec"] if all_ok else s["sec"][ok], d)
        _add(part.busy, {(ref.host, str(name), sec): v for sec, v in zip(secs.tolist(), busy.tolist())})

    roots = parent == 0
    requests = roots & has_request
    r_ok = requests & valid
    part.request_count += int(requests.sum())
    part.requests.record(dur[r_ok])
    part.request_total_ns += int(dur[r_ok].sum())
    part.request_self_ns += int(self_ns[r_ok].sum())
    _add(part.request_statuses, _count_codes(status_codes[requests], status_names))
    arrivals = _counts(seconds[requests])
    _add(part.arrivals, arrivals)
    _add(part.host_arrivals, {(ref.host, sec): n for sec, n in arrivals.items()})
    _add(part.root_arrivals, _counts(seconds[roots]))


_DENSE_CELLS = 1 << 23  # largest per-file table (stages x seconds, stages x shapes) the compiled path allocates
_DENSE_IDS = 4  # the compiled join's id table may be this many times the row count (plus 2**20)


def _aggregate_compiled(k, part: Partial, c: dict, ref: FileRef, run_window):
    """The same figures as ``_aggregate_numpy`` through ``_mapkernel``; None (nothing done) when a
    per-file table would be too large for it (or the file has 2**31 rows), so the numpy path runs
    instead. Returns (request start times, what ``_batch_and_float_sums`` takes as ``grouped``)."""
    ts, dur, valid, parent = c["ts"], c["dur"], c["valid"], c["parent"]
    n = len(ts)
    n_stage, n_status = len(c["stage_names"]), len(c["status_names"])
    n_shape, n_engine = len(c["shape_names"]), len(c["engine_names"])
    first, last = k.min_max(ts)
    sec_lo = first // _NS
    n_sec = last // _NS - sec_lo + 1
    if max(n_stage * n_sec, n_stage * n_shape, n_stage * n_engine, n_sec) > _DENSE_CELLS or n >= 2**31:
        return None  # (the kernel numbers rows with int32)
    span_id = c["span_id"]
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
    new = [name for name in dict.fromkeys(map(str, c["stage_names"])) if name not in part.stages]
    stages = [part.stage(str(name)) for name in c["stage_names"]]
    hists = {"latency": ([sp.latency.counts for sp in stages], k.new_stats(n_stage)),
             "request": ([part.requests.counts], k.new_stats(1))}
    for key, column in (("queue", "queue"), ("tokens_in", "tin"), ("tokens_out", "tout")):
        present = c[column] is not None
        hists[key] = ([getattr(sp, key).counts for sp in stages] if present else [], k.new_stats(n_stage if present else 0))
    small = np.iinfo(np.int64).min
    if run_window is not None:
        start, stop = run_window
        win_start, win_stop = start - 5 * _NS, (stop + 5 * _NS) if stop else small
    else:
        win_start = win_stop = small
    out = k.aggregate(c, n_stage=n_stage, n_status=n_status, n_shape=n_shape, n_engine=n_engine, sec_lo=sec_lo,
                      n_sec=n_sec, win_start=win_start, win_stop=win_stop, parent_row=parent_row, id_lo=id_lo,
                      id_size=id_size, hists=hists)
    sums, statuses, shapes, engines = out["sums"], out["statuses"], out["shapes"], out["engines"]
    busy, busy_n, edges = out["busy"], out["busy_n"], out["edges"]
    part.unjoined_children += int(edges[3])

    part.first_ns = _pick(min, part.first_ns, int(edges[0]))
    part.last_ns = _pick(max, part.last_ns, int(edges[1]))
    if edges[2]:
        part.out_of_window[ref.run_id] += int(edges[2])

    def record(h: Histogram, stats, row: int) -> None:
        st = stats[row].tolist()
        h.add_recorded(st[k.H_TOTAL], (st[k.H_SUM_HI] << 32) + st[k.H_SUM_LO], st[k.H_MIN], st[k.H_MAX],
                       st[k.H_CLAMPED])

    status_names, shape_names, engine_names = c["status_names"], c["shape_names"], c["engine_names"]
    secs = np.arange(sec_lo, sec_lo + n_sec)
    busy_keys: list = []
    busy_values: list = []
    for code, (name, sp) in enumerate(zip(c["stage_names"], stages)):
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
        if c["queue"] is not None:
            record(sp.queue, hists["queue"][1], code)
        if n_shape:
            _add_dense(sp.shapes, shapes[code], shape_names)
            if len(sp.shapes) > MAX_SHAPES:
                sp.merge(StagePartial())  # trims to the cap
        if n_engine:
            _add_dense(sp.engines, engines[code], engine_names)
        if c["tin"] is not None:
            record(sp.tokens_in, hists["tokens_in"][1], code)
        if c["tout"] is not None:
            record(sp.tokens_out, hists["tokens_out"][1], code)
        present = np.flatnonzero(busy_n[code])
        busy_keys += zip(repeat(ref.host), repeat(str(name)), secs[present].tolist())
        busy_values += busy[code][present].tolist()
    _add(part.busy, zip(busy_keys, busy_values))
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
    _add(part.arrivals, zip(seconds, counts))
    _add(part.host_arrivals, zip(zip(repeat(ref.host), seconds), counts))
    present = np.flatnonzero(root_arrivals)
    _add(part.root_arrivals, zip(secs[present].tolist(), root_arrivals[present].tolist()))
    grouped = {key: (out[key + "_values"], out[key + "_durs"], out[key + "_bounds"]) for key in ("batch", "flops", "bytes")}
    if k.FLOAT_SUMS_AS_NUMPY:
        grouped["sums"] = {key: out[key] for key in ("fit", "flops_sum", "bytes_sum", "flops_dur", "bytes_dur")}
    return out["request_ts"], grouped


def _add_dense(target: Counter, counts: np.ndarray, names: list) -> None:
    """Adds counts made per dictionary code to ``target`` under the codes' names (``_codes``'s
    strings), as ``_count_codes`` does."""
    present = np.flatnonzero(counts)
    _add(target, zip(map(names.__getitem__, present.tolist()), counts[present].tolist()))


def _add(target: Counter, source) -> None:
    """``target.update(source)`` for counts (``source``: a mapping, or (key, count) pairs with
    distinct keys), about twice as fast: ``Counter.update`` loops in Python over a non-empty
    counter, and this runs under the GIL for every file mapped."""
    if not target:
        dict.update(target, source)
        return
    get = target.get
    pairs = source.items() if isinstance(source, dict) else source
    dict.update(target, {key: get(key, 0) + value for key, value in pairs})


def _batch_and_float_sums(part: Partial, c: dict, grouped: dict | None = None) -> None:
    """Batch sizes and the float sums (batch fit, FLOPs, bytes) per stage, over the few rows that
    carry them. ``grouped``: what the compiled path gathered: per key, those rows' values and
    durations grouped by stage with the stages' bounds, and under "sums" (when the kernel adds
    as this numpy does: ``_mapkernel.FLOAT_SUMS_AS_NUMPY``) their float sums per stage, equal
    to the last bit to what the numpy code below computes; None: all gathered here."""
    names = c["stage_names"]
    if grouped is not None and "sums" in grouped:
        sums = grouped["sums"]
        for key in ("batch", "flops", "bytes"):
            values, _, bounds = grouped[key]
            for code in np.flatnonzero(np.diff(bounds)).tolist():
                sp = part.stage(str(names[code]))
                if key == "batch":
                    lo, hi = bounds[code], bounds[code + 1]
                    _add(sp.batch, _counts(values[lo:hi]))
                    sp.fit.append([float(hi - lo), *sums["fit"][code].tolist()])
                elif key == "flops":
                    sp.flops.append(float(sums["flops_sum"][code]))
                    sp.flops_dur_ns += int(sums["flops_dur"][code])
                else:
                    sp.bytes.append(float(sums["bytes_sum"][code]))
                    sp.bytes_dur_ns += int(sums["bytes_dur"][code])
        return

    stage, valid, dur = c["stage"], c["valid"], c["dur"]

    def by_stage(key: str, values, mask):
        """(stage partial, values, durations) per stage with rows, in row order."""
        if grouped is not None:
            values, durations, bounds = grouped[key]
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

    if c["batch"] is not None:
        batch = c["batch"][0]
        rows = lambda: valid & _present(c["batch"], len(valid)) & (batch >= 0)  # noqa: E731
        for sp, b, durations in by_stage("batch", batch, rows):
            _add(sp.batch, _counts(b))
            bf, lf = b.astype(np.float64), durations / 1e6
            sp.fit.append([float(len(b)), float(bf.sum()), float((bf * bf).sum()), float(lf.sum()),
                           float((bf * lf).sum()), float((lf * lf).sum())])
    # Float sums are per file (deterministic for the file) and added with fsum when finalised.
    for key in ("flops", "bytes"):
        if c[key] is None:
            continue
        values = c[key][0]
        rows = lambda: valid & _present(c[key], len(valid)) & ~np.isnan(values)  # noqa: E731
        for sp, v, durations in by_stage(key, values, rows):
            (sp.flops if key == "flops" else sp.bytes).append(float(v.sum()))
            if key == "flops":
                sp.flops_dur_ns += int(durations.sum())
            else:
                sp.bytes_dur_ns += int(durations.sum())


def _sample_for_skew(part: Partial, table, ts, ends, roots, host: str) -> None:
    import pyarrow.compute as pc  # here, not at import (see _read)

    ids = table.column("request_id")
    flags = pc.ends_with(ids, SKEW_SAMPLE_SUFFIX)  # null where the id is
    sampled = _booleans(flags) & _is_valid(flags)
    if not sampled.any():
        return
    rows = np.flatnonzero(sampled)[:20_000]
    id_values = ids.take(_arrow_rows(rows)).to_pylist()
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
    table = table.filter(_arrow_mask(keep)) if not keep.all() else table
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
        _add(sp.per_second, dict(zip(secs.tolist(), sums.tolist())))
        _add(sp.per_second_n, dict(zip(secs.tolist(), counts.astype(np.int64).tolist())))
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
