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
        columns = [
            pa.array(start + epoch_offset_ns, pa.int64()),
            pa.array(np.array(t1, dtype=np.int64) - start, pa.int64()),
            _dictionary(stage),
            pa.array(sid, pa.int64()),
            pa.array([p or None for p in parent_sid], pa.int64()),
            pa.array([self._request_id(r) for r in request], pa.string()),
            pa.array([self._number(v, int) for v in batch], pa.int64()),
            _dictionary([self._shape(v) for v in shape]),
            _dictionary([None if v is None else str(v) for v in engine]),
            _dictionary(status),
            pa.array([self._number(v, int) for v in queue], pa.int64()),
            pa.array([self._number(v, float) for v in flops], pa.float64()),
            pa.array([self._number(v, float) for v in nbytes], pa.float64()),
            pa.nulls(len(start), pa.int64()),
            pa.nulls(len(start), pa.int64()),
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


def _dictionary(values) -> pa.DictionaryArray:
    return pa.array(values, pa.string()).dictionary_encode()


def samples_batch(rows: list[tuple]) -> pa.RecordBatch:
    """Rows of ``(ts_ns, device, metric, value)``."""
    ts, device, metric, value = zip(*rows) if rows else ((), (), (), ())
    return pa.RecordBatch.from_arrays(
        [pa.array(ts, pa.int64()), _dictionary(device), _dictionary(metric), pa.array(value, pa.float64())],
        schema=SAMPLES,
    )
