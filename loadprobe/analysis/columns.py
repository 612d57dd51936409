"""Arrow columns as numpy arrays, straight from Arrow's buffers: what the kernels aggregate.

``span_columns`` decodes a spans table into a ``SpanColumns``, the typed interface between
reading a file and aggregating it (``kernel_numpy``, ``kernel_c``): fixed-width
columns as arrays with nulls filled, text columns as dictionary codes and their names, and the
mostly-null optional columns as ``Sparse`` values plus Arrow's validity bitmap, uncopied.
numpy views come from ``np.frombuffer``: pyarrow's own ``to_numpy`` imports pandas when it is
installed, about 0.3 s of one core at the first file. Nulls are filled by the compiled
kernel's ``fill_nulls`` when its library was built (one pass), else by numpy.

Usage::

    ts = int_column(table, "ts_ns")
    cols = span_columns(table, ts, dur, valid, request_ids_known=None)
    cols.stage, cols.stage_names        # int32 codes (-1: null) and their strings
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa

from .kernels import c_library
from .memory import scratch

_COMPILED = c_library()  # chosen once, at import: its null fill, or None for numpy's


class Sparse(NamedTuple):
    """A mostly-null column, uncopied: which rows hold a value is the validity bitmap's business."""

    values: np.ndarray  # one per row; arbitrary where null
    bits: np.ndarray | None  # Arrow validity bitmap (uint8) of the rows; None: every row has a value
    first: int  # the bitmap's bit of the first row


class SpanColumns(NamedTuple):
    """A spans file's columns, its rows filtered (time window, impossible durations) already."""

    ts: np.ndarray  # int64 start, epoch ns
    dur: np.ndarray  # int64 duration in ns; 0 where not valid
    valid: np.ndarray  # bool: the span has a (non-negative) duration
    span_id: np.ndarray  # int64, 0 where null
    parent: np.ndarray  # int64 parent span id, 0 for a root
    has_request: np.ndarray | None  # bool: the span has a request id; None when request_ids_known says
    request_ids_known: bool | None  # None: has_request holds it; True/False: every span / none has one
    stage: np.ndarray  # int32 dictionary codes, -1 where null; *_names: the codes' strings
    stage_names: list
    status: np.ndarray
    status_names: list
    shape: np.ndarray
    shape_names: list
    engine: np.ndarray
    engine_names: list
    queue: Sparse | None  # queue_ns; None (here and below): absent, or null in every row
    tokens_in: Sparse | None
    tokens_out: Sparse | None
    batch: Sparse | None
    flops: Sparse | None  # float64
    bytes: Sparse | None  # float64


def span_columns(table: pa.Table, ts: np.ndarray, dur: np.ndarray, valid: np.ndarray,
                 request_ids_known: bool | None) -> SpanColumns:
    """The ``SpanColumns`` of a spans table whose start times, durations and their validity the
    caller decoded already (it filters rows by them first)."""
    codes = {name: dictionary_codes(table, name) for name in ("stage", "status", "shape", "engine")}
    return SpanColumns(
        ts=ts, dur=dur, valid=valid, span_id=int_column(table, "span_id", 0), parent=int_column(table, "parent_id", 0),
        has_request=validity(table.column("request_id")) if request_ids_known is None else None,
        request_ids_known=request_ids_known,
        stage=codes["stage"][0], stage_names=codes["stage"][1], status=codes["status"][0],
        status_names=codes["status"][1], shape=codes["shape"][0], shape_names=codes["shape"][1],
        engine=codes["engine"][0], engine_names=codes["engine"][1],
        queue=sparse_column(table, "queue_ns", np.int64), tokens_in=sparse_column(table, "tokens_in", np.int64),
        tokens_out=sparse_column(table, "tokens_out", np.int64), batch=sparse_column(table, "batch", np.int64),
        flops=sparse_column(table, "flops", np.float64), bytes=sparse_column(table, "bytes", np.float64))


def int_column(table: pa.Table, name: str, fill: int = -1) -> np.ndarray:
    """An int64 column as numpy, nulls replaced by ``fill`` (this thread's scratch array of that name)."""
    if name not in table.column_names:
        return np.full(table.num_rows, fill, dtype=np.int64)
    column = table.column(name)
    if column.type != pa.int64():
        column = column.cast(pa.int64())
    return with_fill(column.chunks, table.num_rows, fill, np.int64, key=name)


def float_column(table: pa.Table, name: str) -> np.ndarray:
    """A float64 column as numpy, nulls as NaN."""
    if name not in table.column_names:
        return np.full(table.num_rows, np.nan)
    column = table.column(name).cast(pa.float64())
    return with_fill(column.chunks, table.num_rows, np.nan, np.float64, np.float64)


def with_fill(chunks, n: int, fill, dtype, out_dtype=np.int64, key: str | None = None) -> np.ndarray:
    """Fixed-width Arrow chunks (of ``dtype``) as one ``out_dtype`` array, nulls set to ``fill``:
    one copy from Arrow's buffers, no intermediate arrays; none (a read-only view) for a
    single chunk without nulls. With ``key``, the copy goes to this thread's scratch array of
    that name (``memory.scratch``), valid until the thread maps its next file."""
    chunks = [chunk for chunk in chunks if len(chunk)]
    if len(chunks) == 1 and not chunks[0].null_count and np.dtype(dtype) == np.dtype(out_dtype):
        return _values(chunks[0], dtype)
    out = np.empty(n, dtype=out_dtype) if key is None else scratch(key, n, out_dtype)
    pos = 0
    for chunk in chunks:
        m = len(chunk)
        seg = out[pos:pos + m]
        pos += m
        validity_buffer, data = chunk.buffers()[:2]
        if data is None or (validity_buffer is None and chunk.null_count):  # all null, no buffers
            seg[:] = fill
            continue
        values = _values(chunk, dtype)
        if chunk.null_count and _COMPILED is not None and values.dtype == seg.dtype:
            _COMPILED.fill_nulls(values, np.frombuffer(validity_buffer, dtype=np.uint8), chunk.offset, fill, seg)
            continue
        seg[:] = values
        if chunk.null_count:
            np.putmask(seg, ~_bits(validity_buffer, chunk.offset, m), fill)
    return out


def dictionary_codes(table: pa.Table, name: str) -> tuple[np.ndarray, list]:
    """Dictionary codes (int32, -1 for null) and the dictionary's values as strings, for a string column."""
    if name not in table.column_names:
        return np.full(table.num_rows, -1, dtype=np.int32), []
    column = table.column(name)
    if not pa.types.is_dictionary(column.type):
        import pyarrow.compute as pc  # here, not at import: it costs ~30 ms, and mapping rarely needs it

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
    return with_fill([c.indices for c in chunks], n, -1, dtype, np.int32, key=name), dictionary


def sparse_column(table: pa.Table, name: str, dtype) -> Sparse | None:
    """A mostly-null column as ``Sparse``; None when it is absent or all null. No fill, no
    full-size cast, no copy of a single chunk (``sparse_present`` turns the bitmap into bools)."""
    if name not in table.column_names:
        return None
    column = table.column(name)
    if column.null_count == len(column):
        return None
    arrow_type = pa.from_numpy_dtype(dtype)
    chunks = [c if c.type == arrow_type else c.cast(arrow_type) for c in column.chunks if len(c)]
    if len(chunks) == 1:
        validity_buffer = chunks[0].buffers()[0]
        bits = None if not chunks[0].null_count else np.frombuffer(validity_buffer, dtype=np.uint8)
        return Sparse(_values(chunks[0], dtype), bits, chunks[0].offset)
    values = [np.zeros(len(c), dtype=dtype) if c.buffers()[1] is None or (c.buffers()[0] is None and c.null_count)
              else _values(c, dtype) for c in chunks]  # all-null chunks may come without buffers
    present = validity(pa.chunked_array(chunks, arrow_type))
    return Sparse(_concat(values), np.packbits(present, bitorder="little"), 0)


def sparse_present(sparse: Sparse, n: int) -> np.ndarray:
    """Whether each of the ``n`` rows of a ``Sparse`` column has a value."""
    _, bits, first = sparse
    return np.ones(n, dtype=bool) if bits is None else _bits(bits, first, n)


def sparse_filled(sparse: Sparse | None, n: int, fill: int) -> np.ndarray:
    """A ``Sparse`` int column as one array of ``n`` values, ``fill`` where null (or all, if absent)."""
    if sparse is None:
        return np.full(n, fill, dtype=np.int64)
    return np.where(sparse_present(sparse, n), sparse.values, fill)


def validity(column: pa.ChunkedArray) -> np.ndarray:
    """Whether each row of a column holds a value."""
    return _concat([np.ones(len(c), dtype=bool) if not c.null_count
                    else _bits(c.buffers()[0], c.offset, len(c)) if c.buffers()[0] is not None
                    else np.zeros(len(c), dtype=bool) for c in column.chunks])


def booleans(column: pa.ChunkedArray) -> np.ndarray:
    """A boolean column's values as numpy bools (False where there is no data buffer)."""
    return _concat([_bits(c.buffers()[1], c.offset, len(c)) if c.buffers()[1] is not None
                    else np.zeros(len(c), dtype=bool) for c in column.chunks])


def arrow_mask(mask: np.ndarray) -> pa.Array:
    """A numpy bool array as an Arrow one (for ``filter``), without ``pa.array``: it imports pandas."""
    bits = np.packbits(mask, bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, pa.py_buffer(bits)])


def arrow_rows(rows: np.ndarray) -> pa.Array:
    """Row numbers as an Arrow int64 array (for ``take``), without ``pa.array``."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(rows), [None, pa.py_buffer(rows)])


def _values(chunk: pa.Array, dtype) -> np.ndarray:
    """A fixed-width Arrow array's values as a read-only numpy view (arbitrary where null)."""
    size = np.dtype(dtype).itemsize
    return np.frombuffer(chunk.buffers()[1], dtype=dtype, count=len(chunk), offset=chunk.offset * size)


def _bits(buffer, offset: int, n: int) -> np.ndarray:
    """``n`` bits of an Arrow bitmap (validity or booleans) from bit ``offset``, as bools."""
    return np.unpackbits(np.frombuffer(buffer, dtype=np.uint8), count=offset + n, bitorder="little")[offset:].view(bool)


def _concat(parts: list) -> np.ndarray:
    """One array of ``parts`` (numpy arrays), without a copy when there is one."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.zeros(0, dtype=bool)
