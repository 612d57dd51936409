"""Turn drained span and sample tuples into Arrow record batches (flusher thread only).

The hot path stores raw values -- perf_counter readings, the caller's shape objects, a
parent frame tuple -- and leaves every conversion to this module, off the service's path.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .stages import stage_names
from ..schema import SAMPLES, SPANS

SLICE_ROWS = 128  # records read per slice of per-row Python work; the flusher yields the GIL between slices


def _no_pause() -> None:
    pass


class SpanConverter:
    """Converts span tuples of one process; keeps a cache of formatted shapes.

    ``run_tag`` prefixes generated request ids so they are unique across processes.
    """

    def __init__(self, run_tag: str) -> None:
        self.run_tag = run_tag
        self.invalid_values = 0  # extras of the wrong type, written as null
        self._shapes: dict = {}

    def batch(self, rows: list[tuple], epoch_offset_ns: int, pause=None) -> pa.RecordBatch:
        """``epoch_offset_ns`` = time.time_ns() - perf_counter_ns(), read at flush time.

        Records are ``(t0, t1, span_id, parent_frame, stage_id)``, plus ``status`` and an
        extras tuple (or None) when a span has them, plus its thread CPU in ns when it was sampled
        for it. The per-row Python work -- reading the tuples,
        formatting user request ids, statuses and extras -- runs in slices of at most
        ``SLICE_ROWS`` rows with ``pause()`` called between slices (the recorder passes a
        short sleep), so the flusher never holds the GIL for long in one go: a host thread
        that wants it waits one slice at most, not the interpreter's 5 ms switch interval.
        What follows the slices works on whole numpy/Arrow columns, no per-row Python.
        """
        n = len(rows)
        pause = pause or _no_pause
        t0, t1, sid, parents = (np.empty(n, dtype=np.int64) for _ in range(4))
        stage = np.empty(n, dtype=np.int32)
        request: list = []
        generated = np.zeros(n, dtype=np.int64)  # -request id where all are generated (the common case)
        all_generated = True
        status = _Codes()
        extra_at: list[int] = []  # rows with extras, and their converted values
        extra_values: list[tuple] = []
        cpu_at: list[int] = []  # rows sampled for their thread's CPU, and its ns
        cpu_values: list[int] = []
        for at in range(0, n, SLICE_ROWS):
            if at:
                pause()
            chunk = rows[at:at + SLICE_ROWS]
            end = at + len(chunk)
            columns = list(zip(*chunk))  # the first five fields of every record (zip stops at the shortest)
            t0[at:end], t1[at:end], sid[at:end], stage[at:end] = columns[0], columns[1], columns[2], columns[4]
            frames = list(zip(*columns[3]))  # (request id, span id[, cpu timed]): the first two
            req, parents[at:end] = frames[0], frames[1]
            request += req
            if all_generated:
                all_generated = self._generated(req, generated[at:end])
            if set(map(len, chunk)) == {5}:
                status.repeat("ok", len(chunk))
                continue
            status.add(["ok" if len(r) == 5 else r[5] if type(r[5]) is str else str(r[5]) for r in chunk])
            for i, r in enumerate(chunk, at):
                if len(r) != 5 and r[6]:
                    extra_at.append(i)
                    extra_values.append(self._extras(r[6]))
                if len(r) == 8:
                    cpu_at.append(i)
                    cpu_values.append(r[7])
        pause()
        start = t0
        columns = [_int64(start + epoch_offset_ns), _int64(t1 - start), _stages(stage)]
        pause()
        columns += [_int64(sid), _int64(parents, parents != 0)]
        columns.append(self._request_ids(request, generated if all_generated else None, pause))
        pause()
        columns += self._extra_columns(n, extra_at, extra_values, pause)
        columns.insert(9, status.array())
        columns.append(_sparse_int64(n, cpu_at, cpu_values))
        return pa.RecordBatch.from_arrays(columns, schema=SPANS)

    @staticmethod
    def _generated(request: tuple, out: np.ndarray) -> bool:
        """Whether every id of a slice is generated (negative int) or absent; fills ``out`` with -id."""
        if not set(map(type, request)) <= {int, type(None)}:
            return False
        try:
            ints = np.array([0 if r is None else r for r in request], dtype=np.int64)
        except OverflowError:
            return False
        if not (ints <= 0).all():
            return False
        out[:] = -ints
        return True

    def _extras(self, extras: tuple) -> tuple:
        batch, shape, engine, flops, nbytes, queue, tokens_in, tokens_out = extras
        return (self._number(batch, int), self._shape(shape), None if engine is None else str(engine),
                self._number(queue, int), self._number(flops, float), self._number(nbytes, float),
                self._number(tokens_in, int), self._number(tokens_out, int))

    def _extra_columns(self, n: int, at: list, values: list, pause) -> list:
        """batch, shape, engine, (status goes here), queue_ns, flops, bytes, tokens_in, tokens_out: null but
        where a row has extras."""
        kinds = (pa.int64(), SPANS.field("shape").type, SPANS.field("engine").type, pa.int64(), pa.float64(),
                 pa.float64(), pa.int64(), pa.int64())
        if not at:
            return [pa.nulls(n, kind) for kind in kinds]
        where = np.array(at, dtype=np.int64)
        out = []
        for column, kind in enumerate(kinds):
            pause()
            vals = [v[column] for v in values]
            if column in (1, 2):
                codes = _Codes()
                for i in range(0, len(vals), SLICE_ROWS):
                    codes.add(vals[i:i + SLICE_ROWS])
                    pause()
                out.append(codes.array(n, where))
            else:
                dtype = np.float64 if column in (4, 5) else np.int64
                valid = np.array([v is not None for v in vals], dtype=bool)
                data = np.zeros(n, dtype=dtype)
                data[where] = np.array([0 if v is None else v for v in vals], dtype=dtype)
                mask = np.zeros(n, dtype=bool)
                mask[where] = valid
                out.append(_int64(data, mask, kind, dtype))
        return out

    def _request_ids(self, request: list, generated: np.ndarray | None, pause=None) -> pa.Array:
        """Generated ids (negative span ids) become ``<run_tag>-<n>`` in one vectorised step;
        ids the user gave are written as they are (``str()`` of them), formatted a slice at a time."""
        if generated is not None:
            pause = pause or _no_pause
            prefix, separator = _strings([self.run_tag + "-", ""])  # pa.scalar() would import pandas
            ids = pc.cast(_int64(generated, generated > 0), pa.string())
            pause()
            return pc.binary_join_element_wise(prefix, ids, separator)
        pause = pause or _no_pause
        encoded: list = []
        lengths, valid = [], []
        for at in range(0, len(request), SLICE_ROWS):
            pause()
            text = [self._request_id(r) for r in request[at:at + SLICE_ROWS]]
            part = [b"" if t is None else t.encode("utf-8") for t in text]
            encoded += part
            lengths.append(np.fromiter(map(len, part), dtype=np.int32, count=len(part)))
            valid.append(np.array([t is not None for t in text], dtype=bool))
        pause()
        return _strings_from(encoded, lengths, valid)

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


def _sparse_int64(n: int, at: list[int], values: list[int]) -> pa.Array:
    """An int64 column of ``n`` rows, null but at rows ``at``."""
    if not at:
        return pa.nulls(n, pa.int64())
    data, mask = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    data[at], mask[at] = values, True
    return _int64(data, mask)


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


def _strings_from(encoded: list, lengths: list, valid: list) -> pa.Array:
    """A string column from its values already encoded (b"" for null), with per-slice lengths and validity."""
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    if encoded:
        np.cumsum(np.concatenate(lengths), out=offsets[1:])
    bitmap, nulls = _validity(np.concatenate(valid)) if valid else (None, 0)
    return pa.Array.from_buffers(pa.string(), len(encoded),
                                 [bitmap, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))], null_count=nulls)


class _Codes:
    """A dictionary column built a slice at a time: codes shared across slices, indices per slice."""

    def __init__(self) -> None:
        self.codes: dict = {}
        self.parts: list[np.ndarray] = []

    def add(self, values) -> None:
        codes = self.codes
        self.parts.append(np.array([-1 if v is None else codes.setdefault(v, len(codes)) for v in values],
                                   dtype=np.int32))

    def repeat(self, value, count: int) -> None:
        self.parts.append(np.full(count, self.codes.setdefault(value, len(self.codes)), dtype=np.int32))

    def array(self, n: int | None = None, where: np.ndarray | None = None) -> pa.DictionaryArray:
        indices = np.concatenate(self.parts) if self.parts else np.empty(0, dtype=np.int32)
        if where is not None:  # values of some rows only: the others are null
            full = np.full(n, -1, dtype=np.int32)
            full[where] = indices
            indices = full
        valid = indices >= 0
        return pa.DictionaryArray.from_arrays(_int64(np.maximum(indices, 0), valid, pa.int32(), np.int32),
                                              _strings(list(self.codes)))


def _stages(ids: np.ndarray) -> pa.DictionaryArray:
    """Stage ids from the probe's registry -> a dictionary column of just the stages present."""
    names = stage_names()
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
