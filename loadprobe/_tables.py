"""Turn drained span and sample tuples into Arrow record batches (flusher thread only).

The hot path stores raw values -- perf_counter readings, the caller's shape objects, a
parent frame tuple -- and leaves every conversion to this module, off the service's path.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

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
        """``epoch_offset_ns`` = time.time_ns() - perf_counter_ns(), read at flush time."""
        plain = [r for r in rows if len(r) == 5]
        full = [r for r in rows if len(r) != 5]
        t0, t1, sid, parent, stage = (list(c) for c in zip(*plain)) if plain else ([], [], [], [], [])
        status: list = ["ok"] * len(plain)
        extras: list = [_NO_EXTRAS] * len(plain)
        if full:
            f_t0, f_t1, f_sid, f_parent, f_stage, f_status, f_extras = zip(*full)
            t0 += f_t0
            t1 += f_t1
            sid += f_sid
            parent += f_parent
            stage += f_stage
            status += f_status
            extras += [e or _NO_EXTRAS for e in f_extras]
        request, parent_sid = zip(*parent) if parent else ((), ())
        start = np.array(t0, dtype=np.int64)
        batch, shape, engine, flops, nbytes, queue = zip(*extras) if extras else ((),) * 6
        n = len(start)
        columns = [
            _int64(start + epoch_offset_ns),
            _int64(np.array(t1, dtype=np.int64) - start),
            _dictionary(stage),
            _int64(np.array(sid, dtype=np.int64)),
            _ints([p or None for p in parent_sid]),
            _strings([self._request_id(r) for r in request]),
            _ints([self._number(v, int) for v in batch]),
            _dictionary([self._shape(v) for v in shape]),
            _dictionary([None if v is None else str(v) for v in engine]),
            _dictionary(status),
            _ints([self._number(v, int) for v in queue]),
            _floats([self._number(v, float) for v in flops]),
            _floats([self._number(v, float) for v in nbytes]),
            pa.nulls(n, pa.int64()),
            pa.nulls(n, pa.int64()),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=SPANS)

    def _request_id(self, value) -> str | None:
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, int):
            return f"{self.run_tag}-{value}"
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
        except (TypeError, ValueError):
            self.invalid_values += 1
            return None


def _format_shape(dims: tuple) -> str:
    if dims and all(not isinstance(d, (int, np.integer)) for d in dims):
        return ",".join(_format_shape(tuple(d)) for d in dims)
    return "x".join(str(int(d)) if d is not None else "?" for d in dims)


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
