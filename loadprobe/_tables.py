"""Turn drained span and sample tuples into Arrow record batches (flusher thread only).

The hot path stores raw values -- perf_counter readings, the caller's shape objects, a
parent frame tuple -- and leaves every conversion to this module, off the service's path.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import _probe
from .schema import SAMPLES, SPANS

_NO_EXTRAS = (None, None, None, None, None, None)


class SpanConverter:
    """Converts span tuples of one process; keeps a cache of formatted shapes.

    ``run_tag`` prefixes generated request ids so they are unique across processes.
    """

    def __init__(self, run_tag: str) -> None:
        self.run_tag = run_tag
        self.invalid_values = 0  # extras of the wrong type, written as null
        self._shapes: dict = {}

    def batch(self, rows: list[tuple], epoch_offset_ns: int) -> pa.RecordBatch:
        """``epoch_offset_ns`` = time.time_ns() - perf_counter_ns(), read at flush time.

        Plain records -- ``(t0, t1, span_id, parent_frame, stage_id)`` -- go first and take
        only C-level conversions; records with a status or extras follow and get per-value
        checks, which only they need.
        """
        plain = [r for r in rows if len(r) == 5]
        full = [r for r in rows if len(r) != 5]
        columns = list(zip(*plain)) if plain else [(), (), (), (), ()]
        if full:
            f = list(zip(*full))
            columns = [a + b for a, b in zip(columns, f[:5])]
        t0, t1, sid, parent, stage = columns
        n, n_plain = len(t0), len(plain)
        request, parent_sid = zip(*parent) if parent else ((), ())
        start = np.array(t0, dtype=np.int64)
        parents = np.array(parent_sid, dtype=np.int64)
        if full:
            status = _dictionary(["ok"] * n_plain + [s if type(s) is str else str(s) for s in f[5]])
            extras = [e or _NO_EXTRAS for e in f[6]]
            batch, shape, engine, flops, nbytes, queue = zip(*extras)
            has_extras = any(e is not _NO_EXTRAS for e in extras)
        else:
            status = _dictionary(["ok"]) if n == 0 else pa.DictionaryArray.from_arrays(
                _int64(np.zeros(n, dtype=np.int32), None, pa.int32(), np.int32), _strings(["ok"]))
            has_extras = False

        def extra(build, values, convert, kind):
            if not has_extras:
                return pa.nulls(n, kind)
            tail = build([convert(v) for v in values])
            return pa.concat_arrays([pa.nulls(n_plain, tail.type), tail]) if n_plain else tail

        columns = [
            _int64(start + epoch_offset_ns),
            _int64(np.array(t1, dtype=np.int64) - start),
            _stages(np.array(stage, dtype=np.int32)),
            _int64(np.array(sid, dtype=np.int64)),
            _int64(parents, parents != 0),
            self._request_ids(request),
            extra(_ints, batch if full else (), lambda v: self._number(v, int), pa.int64()),
            extra(_dictionary, shape if full else (), self._shape, SPANS.field("shape").type),
            extra(_dictionary, engine if full else (), lambda v: None if v is None else str(v),
                  SPANS.field("engine").type),
            status,
            extra(_ints, queue if full else (), lambda v: self._number(v, int), pa.int64()),
            extra(_floats, flops if full else (), lambda v: self._number(v, float), pa.float64()),
            extra(_floats, nbytes if full else (), lambda v: self._number(v, float), pa.float64()),
            pa.nulls(n, pa.int64()),
            pa.nulls(n, pa.int64()),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=SPANS)

    def _request_ids(self, request: tuple) -> pa.Array:
        """Generated ids (negative span ids) become ``<run_tag>-<n>`` in one vectorised step;
        ids the user gave are written as they are (``str()`` of them)."""
        kinds = set(map(type, request))
        if kinds <= {int, type(None)}:
            try:
                ints = np.array([0 if r is None else r for r in request], dtype=np.int64)
            except OverflowError:
                ints = None
            if ints is not None and (ints <= 0).all():  # all generated (or absent): the common case
                prefix, separator = _strings([self.run_tag + "-", ""])  # pa.scalar() would import pandas
                return pc.binary_join_element_wise(prefix, pc.cast(_int64(-ints, ints < 0), pa.string()), separator)
        return _strings([self._request_id(r) for r in request])

    def _request_id(self, value) -> str | None:
        if value is None or isinstance(value, str):
            return value
        if type(value) is int and value < 0:
            return f"{self.run_tag}-{-value}"
        return str(value)

    def _number(self, value, kind):
        if value is None:
            return None
        try:
            return kind(value)
        except (TypeError, ValueError, OverflowError):
            self.invalid_values += 1
            return None

    def _shape(self, value) -> str | None:
        """``(4, 3, 640, 640)`` -> ``"4x3x640x640"``; several inputs -> ``"4x3x640x640,4x10"``."""
        if value is None or isinstance(value, str):
            return value
        try:
            key = value if isinstance(value, tuple) else tuple(value)
            text = self._shapes.get(key)
            if text is None:
                text = _format_shape(key)
                if len(self._shapes) < 65536:
                    self._shapes[key] = text
            return text
        except Exception:  # whatever a shape callable returned that is not a shape
            self.invalid_values += 1
            return None


def _is_sequence(value) -> bool:
    return isinstance(value, (tuple, list)) or (
        hasattr(value, "__len__") and hasattr(value, "__getitem__") and not isinstance(value, (str, bytes)))


def _format_shape(dims: tuple) -> str:
    """Dims joined by ``x``; several inputs (a sequence of shapes) joined by ``,``; None as ``?``."""
    if any(_is_sequence(d) for d in dims):
        return ",".join(_format_shape(tuple(d)) if _is_sequence(d) else _dim(d) for d in dims)
    return "x".join(_dim(d) for d in dims)


def _dim(d) -> str:
    if d is None:
        return "?"
    if isinstance(d, str):
        return d
    return str(int(d))


# Columns are assembled from numpy buffers rather than with pa.array(): pa.array() asks
# whether pandas is installed and imports it if so, and a recording service must never
# pay for pandas (tests/test_packaging.py checks it with pandas installed).


def _validity(valid: np.ndarray) -> tuple:
    if valid.all():
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), int(len(valid) - valid.sum())


def _int64(values: np.ndarray, valid: np.ndarray | None = None, kind=pa.int64(), dtype=np.int64) -> pa.Array:
    values = np.ascontiguousarray(values, dtype=dtype)
    bitmap, nulls = _validity(valid) if valid is not None else (None, 0)
    return pa.Array.from_buffers(kind, len(values), [bitmap, pa.py_buffer(values)], null_count=nulls)


def _ints(values: list) -> pa.Array:
    try:
        return _int64(np.array(values, dtype=np.int64))
    except TypeError:  # some are None
        valid = np.array([v is not None for v in values], dtype=bool)
        return _int64(np.array([0 if v is None else v for v in values], dtype=np.int64), valid)


def _floats(values: list) -> pa.Array:
    data = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    valid = np.array([v is not None for v in values], dtype=bool)
    return _int64(data, valid, pa.float64(), np.float64)


def _strings(values: list) -> pa.Array:
    valid = np.array([v is not None for v in values], dtype=bool)
    encoded = [v.encode("utf-8") if v is not None else b"" for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int32, count=len(encoded)), out=offsets[1:])
    bitmap, nulls = _validity(valid)
    return pa.Array.from_buffers(pa.string(), len(encoded),
                                 [bitmap, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))], null_count=nulls)


def _stages(ids: np.ndarray) -> pa.DictionaryArray:
    """Stage ids from the probe's registry -> a dictionary column of just the stages present."""
    names = _probe.stage_names()
    if ids.size == 0:
        return _dictionary([])
    present = np.flatnonzero(np.bincount(ids))
    remap = np.zeros(int(ids.max()) + 1, dtype=np.int32)
    remap[present] = np.arange(len(present), dtype=np.int32)
    return pa.DictionaryArray.from_arrays(_int64(remap[ids], None, pa.int32(), np.int32),
                                          _strings([names[i] for i in present]))


def _dictionary(values) -> pa.DictionaryArray:
    codes: dict = {}
    indices = np.array([-1 if v is None else codes.setdefault(v, len(codes)) for v in values], dtype=np.int32)
    valid = indices >= 0
    return pa.DictionaryArray.from_arrays(_int64(np.maximum(indices, 0), valid, pa.int32(), np.int32),
                                          _strings(list(codes)))


def samples_batch(rows: list[tuple]) -> pa.RecordBatch:
    """Rows of ``(ts_ns, device, metric, value)``."""
    ts, device, metric, value = zip(*rows) if rows else ((), (), (), ())
    return pa.RecordBatch.from_arrays(
        [_int64(np.array(ts, dtype=np.int64)), _dictionary(device), _dictionary(metric),
         _int64(np.array(value, dtype=np.float64), None, pa.float64(), np.float64)],
        schema=SAMPLES,
    )
