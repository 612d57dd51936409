"""The compiled kernel's C library (``_mapkernel.c``), called through ctypes.

``kernel_c`` aggregates a file's spans with :func:`aggregate` here when the library
was built at install (setup.py; it needs a C compiler, and is skipped without one): the same
figures as ``kernel_numpy``, exact integers throughout, in a join, one pass over the rows and
a short pass per optional column instead of dozens of numpy passes plus a sort and a gather
per column. The float sums (batch fits, FLOPs, bytes, inter-arrival gaps) are added in
numpy's pairwise order, so they round as numpy's do; at import :data:`FLOAT_SUMS_AS_NUMPY`
checks that against the installed numpy, and where it fails ``kernel_c`` sums the
rows gathered here with numpy instead. tests/analysis/test_analyze_fast.py checks that both
kernels give identical partials and portraits.

Loading is an ``import`` plus a ``dlopen`` (about a millisecond), and each call releases the
GIL, so threads map files in parallel. Importing this module raises ImportError when the
library is missing or was built for another histogram layout; ``kernels`` then chooses numpy.

Usage (internal; ``kernels.c_library()`` loads it, ``kernel_c`` calls it)::

    from loadprobe.analysis import ckernel
    out = ckernel.aggregate(columns, n_stage=..., ...)   # columns: columns.SpanColumns
"""

from __future__ import annotations

import ctypes
import importlib.util

import numpy as np

from .memory import scratch
from .histogram import COUNTS_LEN, HIGHEST_TRACKABLE, _HALF_COUNT, _HALF_MAGNITUDE, _MASK

# Histogram statistics (rows, 6): [total, Σ(v >> 32), Σ(v & 0xffffffff), min, max, clamped];
# the exact sum is hi * 2**32 + lo.
H_TOTAL, H_SUM_HI, H_SUM_LO, H_MIN, H_MAX, H_CLAMPED = range(6)
# Per-stage integer sums: (stages, 6).
S_COUNT, S_SELF, S_IN_REQUEST, S_SELF_IN_REQUEST, S_OFFSET, S_OFFSET_N = range(6)
MAX_DEPTH = 64  # parent links followed from a span up to its root (kernel_numpy.MAX_DEPTH: the same)
ROOT = -2  # parent_row of a root span; -1: a parent not in the file
_BIG = np.iinfo(np.int64).max
_SMALL = np.iinfo(np.int64).min

_P = ctypes.c_void_p
_I = ctypes.c_int64
_HISTOGRAMS = ("latency", "queue", "tokens_in", "tokens_out", "request")
# Optional columns, as map_input and columns.SpanColumns name them.
_OPTIONAL = ("queue", "tokens_in", "tokens_out", "batch", "flops", "bytes")


class _Histogram(ctypes.Structure):
    _fields_ = [("counts", _P), ("stats", _P)]


class _Input(ctypes.Structure):  # map_input in _mapkernel.c, field for field
    _fields_ = [("n", _I), ("ts", _P), ("dur", _P), ("valid", _P), ("span_id", _P), ("parent", _P),
                ("has_req", _P), ("req_const", _I),
                ("stage", _P), ("status", _P), ("shape", _P), ("engine", _P),
                ("n_stage", _I), ("n_status", _I), ("n_shape", _I), ("n_engine", _I),
                *((key, _P) for key in _OPTIONAL), *((key + "_bits", _P) for key in _OPTIONAL),
                *((key + "_bit0", _I) for key in _OPTIONAL),
                ("sec_lo", _I), ("n_sec", _I), ("win_start", _I), ("win_stop", _I),
                ("id_lo", _I), ("id_size", _I)]


class _Output(ctypes.Structure):  # map_output in _mapkernel.c, field for field
    _fields_ = [("parent_row", _P), ("id_table", _P), ("child_sum", _P), ("sums", _P),
                ("statuses", _P), ("shapes", _P), ("engines", _P), ("busy", _P), ("busy_n", _P),
                ("request_sums", _P), ("request_statuses", _P), ("arrivals", _P), ("root_arrivals", _P),
                ("edges", _P), ("request_ts", _P),
                ("batch_rows", _P), ("flops_rows", _P), ("bytes_rows", _P),
                ("batch_bounds", _P), ("flops_bounds", _P), ("bytes_bounds", _P), ("sort_buffer", _P),
                ("batch_values", _P), ("batch_durs", _P), ("flops_durs", _P), ("bytes_durs", _P),
                ("flops_values", _P), ("bytes_values", _P),
                ("fit", _P), ("flops_sum", _P), ("bytes_sum", _P), ("flops_dur", _P), ("bytes_dur", _P),
                ("float_scratch", _P),
                *((name, _Histogram) for name in _HISTOGRAMS)]


_FILLS = {np.dtype(np.int64): ("lp_fill_nulls_i64", ctypes.c_int64), np.dtype(np.int32): ("lp_fill_nulls_i32", ctypes.c_int32),
          np.dtype(np.float64): ("lp_fill_nulls_f64", ctypes.c_double)}


def _load() -> ctypes.CDLL:
    spec = importlib.util.find_spec("loadprobe.analysis._cmapkernel")
    if spec is None or not spec.origin:
        raise ImportError("loadprobe's C map kernel was not built (it needs a C compiler at install)")
    lib = ctypes.CDLL(spec.origin)
    layout = np.zeros(9, dtype=np.int64)
    lib.lp_layout(_P(layout.ctypes.data))
    expected = [HIGHEST_TRACKABLE, _HALF_MAGNITUDE, _HALF_COUNT, _MASK, COUNTS_LEN, MAX_DEPTH,
                ctypes.sizeof(_Input), ctypes.sizeof(_Output), ROOT]
    if layout.tolist() != expected:
        raise ImportError(f"{spec.origin} was built from another version of loadprobe: reinstall it")
    lib.lp_map_spans.argtypes = [ctypes.POINTER(_Input), ctypes.POINTER(_Output)]
    lib.lp_map_spans.restype = None
    for name, ctype in _FILLS.values():
        getattr(lib, name).argtypes = [_P, _P, _I, ctype, _P, _I]
        getattr(lib, name).restype = None
    lib.lp_min_max.argtypes = [_P, _I, _P]
    lib.lp_min_max.restype = None
    lib.lp_gap_sums.argtypes = [_P, _I, _P, _P]
    lib.lp_gap_sums.restype = None
    lib.lp_sort_nearly_sorted.argtypes = [_P, _I, _I]
    lib.lp_sort_nearly_sorted.restype = ctypes.c_int
    return lib


_LIB = _load()


def _ptr(array: np.ndarray | None, dtype=None):
    """The address of a C-contiguous array of ``dtype`` (None for an absent column)."""
    if array is None:
        return None
    if dtype is not None and array.dtype != dtype or not array.flags.c_contiguous:
        raise TypeError(f"expected a C-contiguous {np.dtype(dtype)} array, got {array.dtype}")
    return array.ctypes.data


def fill_nulls(values: np.ndarray, bits: np.ndarray, bit_offset: int, fill, out: np.ndarray) -> None:
    """``out[i] = values[i]`` where Arrow's validity bitmap ``bits`` (from ``bit_offset``) is set, else ``fill``."""
    if out.dtype not in _FILLS or values.dtype != out.dtype or len(values) < len(out):
        raise TypeError("fill_nulls: values and out must share a dtype (int64, int32 or float64), values at least as long")
    name, ctype = _FILLS[out.dtype]
    getattr(_LIB, name)(_ptr(values), _ptr(bits, np.uint8), bit_offset, ctype(fill), _ptr(out), len(out))


def min_max(values: np.ndarray) -> tuple[int, int]:
    """(smallest, largest) of a non-empty int64 array, in one pass instead of numpy's two."""
    if not len(values):
        raise ValueError("min_max of an empty array")
    out = np.empty(2, dtype=np.int64)
    _LIB.lp_min_max(_ptr(values, np.int64), len(values), _ptr(out))
    return int(out[0]), int(out[1])


def sort_in_place(values: np.ndarray) -> None:
    """Sorts an int64 array in place: by insertion while that stays cheap (arrays nearly in
    order, such as a file's request start times), else with numpy."""
    if values.dtype != np.int64 or not values.flags.c_contiguous or not values.flags.writeable:
        raise TypeError("sort_in_place: a writable, C-contiguous int64 array")
    if not _LIB.lp_sort_nearly_sorted(_ptr(values), len(values), 8 * len(values)):
        values.sort(kind="stable")


def gap_sums(times: np.ndarray) -> tuple[float, float]:
    """(Σg, Σg²) over the gaps g between consecutive sorted int64 times, in seconds: the same
    floats as ``g = np.diff(times) / 1e9; g.sum(), (g * g).sum()``."""
    times = np.ascontiguousarray(times, dtype=np.int64)
    out = np.empty(2, dtype=np.float64)
    _LIB.lp_gap_sums(_ptr(times), len(times), _ptr(scratch("gaps", max(len(times) - 1, 1), np.float64)), _ptr(out))
    return float(out[0]), float(out[1])


def _sums_as_numpy() -> bool:
    """Whether the kernel's float sums equal this numpy's, bit for bit (checked once, at import,
    on every regime of numpy's pairwise summation). Should a numpy ever add in another order,
    ``kernel_c`` computes the float sums with numpy instead, and partials stay identical."""
    times = np.cumsum(np.arange(1, 1200, dtype=np.int64) ** 3 % 1_000_003 + 17)
    for n in (2, 9, 17, 129, 137, 1031, len(times)):
        gaps = np.diff(times[:n]) / 1e9
        if gap_sums(times[:n]) != (float(gaps.sum()), float((gaps * gaps).sum())):
            return False
    return True


def new_stats(rows: int) -> np.ndarray:
    stats = np.zeros((rows, 6), dtype=np.int64)
    stats[:, H_MIN] = _BIG
    stats[:, H_MAX] = _SMALL
    return stats


def _rows(arrays: list) -> ctypes.Array:
    """C pointers to histograms' counts arrays (each int64, COUNTS_LEN long), one per row."""
    for a in arrays:
        if a.dtype != np.int64 or a.shape != (COUNTS_LEN,) or not a.flags.c_contiguous or not a.flags.writeable:
            raise TypeError(f"expected a writable int64 counts array of {COUNTS_LEN}")
    return (_P * max(1, len(arrays)))(*(a.ctypes.data for a in arrays))


def aggregate(c, *, n_stage: int, n_status: int, n_shape: int, n_engine: int, sec_lo: int, n_sec: int,
              win_start: int, win_stop: int, parent_row: np.ndarray | None, id_lo: int, id_size: int,
              hists: dict) -> dict:
    """Everything integer about a file's spans (``c``: its ``columns.SpanColumns``).

    ``parent_row``: each row's parent row, int32 (ROOT for a root, -1: not in the file), or None to
    join through a dense table of ``id_size`` ids from ``id_lo``. ``hists``: name -> (counts
    arrays, one per row (per stage; one for "request"), stats array (rows, 6) from
    :func:`new_stats`): the kernel adds each value's bucket count straight into the counts
    arrays (a ``Histogram``'s own) and its totals to ``stats``. The optional columns
    (``c.queue``, ``.tokens_in``, ``.tokens_out``, ``.batch``, ``.flops``, ``.bytes``): None
    (absent) or a ``columns.Sparse`` (values, Arrow validity bitmap as uint8 or None for all
    valid, its first bit). Returns the arrays ``_mapkernel.c``'s map_output names; the batch
    sizes, FLOPs and bytes present come grouped by stage, in row order within a stage, with each
    row's duration: KEY_values, KEY_durs and KEY_bounds (stages + 1), and their float sums per
    stage ("fit", "flops_sum", "bytes_sum", "flops_dur", "bytes_dur"), the same floats numpy's
    sums give. The large ones are this thread's scratch arrays (``memory.scratch``): valid
    until its next call.
    """
    n = len(c.ts)
    i64, flag, i32, f64 = np.dtype(np.int64), np.dtype(np.bool_), np.dtype(np.int32), np.dtype(np.float64)
    optional = {key: getattr(c, key) or (None, None, 0) for key in _OPTIONAL}
    known = c.request_ids_known
    args = _Input(n, _ptr(c.ts, i64), _ptr(c.dur, i64), _ptr(c.valid, flag), _ptr(c.span_id, i64),
                  _ptr(c.parent, i64), _ptr(c.has_request, flag) if known is None else None,
                  -1 if known is None else int(known),
                  _ptr(c.stage, i32), _ptr(c.status, i32), _ptr(c.shape, i32), _ptr(c.engine, i32),
                  n_stage, n_status, n_shape, n_engine,
                  *(_ptr(values, f64 if key in ("flops", "bytes") else i64) for key, (values, _, _) in optional.items()),
                  *(_ptr(bits, np.uint8) for _, bits, _ in optional.values()),
                  *(first for _, _, first in optional.values()),
                  sec_lo, n_sec, win_start, win_stop, id_lo, id_size if parent_row is None else 0)
    zeros = lambda *shape: np.zeros(shape, dtype=np.int64)  # noqa: E731
    out = {"sums": zeros(n_stage, 6), "statuses": zeros(n_stage, n_status), "shapes": zeros(n_stage, n_shape),
           "engines": zeros(n_stage, n_engine), "busy": zeros(n_stage, n_sec), "busy_n": zeros(n_stage, n_sec),
           "request_sums": zeros(4), "request_statuses": zeros(n_status), "arrivals": zeros(n_sec),
           "root_arrivals": zeros(n_sec), "edges": zeros(5), "request_ts": scratch("request_ts", n, np.int64),
           "fit": np.zeros((n_stage, 5)), "flops_sum": np.zeros(n_stage), "bytes_sum": np.zeros(n_stage),
           "flops_dur": zeros(n_stage), "bytes_dur": zeros(n_stage)}
    for key, dtype in (("batch", np.int64), ("flops", np.float64), ("bytes", np.float64)):
        m = n if getattr(c, key) is not None else 0
        out[key + "_bounds"] = zeros(n_stage + 1)
        out[key + "_values"] = scratch(key + "_values", m, dtype)
        out[key + "_durs"] = scratch(key + "_durs", m, np.int64)
    if parent_row is None:
        parent_row = scratch("parent_row", n, np.int32)
        table = scratch("id_table", id_size, np.int32)  # any contents: the kernel checks every hit
    elif parent_row.dtype != np.int32:
        raise TypeError("aggregate: parent_row must be int32")
    else:
        table = None
    rows = {key + "_rows": scratch(key + "_rows", n if getattr(c, key) is not None else 0, np.int32)
            for key in ("batch", "flops", "bytes")}
    arrays = {**out, **rows, "parent_row": parent_row, "id_table": table, "child_sum": scratch("child_sum", n, np.int64),
              "sort_buffer": scratch("sort_buffer", n, np.int32),
              "float_scratch": scratch("float_scratch", 3 * n if c.batch is not None else 0, np.float64)}
    rows_of = {name: _rows(hists[name][0]) for name in _HISTOGRAMS}  # kept alive through the call
    results = _Output(*(_ptr(arrays[name]) for name, _ in _Output._fields_[:-len(_HISTOGRAMS)]),
                      *(_Histogram(ctypes.addressof(rows_of[name]), _ptr(hists[name][1], i64)) for name in _HISTOGRAMS))
    _LIB.lp_map_spans(ctypes.byref(args), ctypes.byref(results))
    out["request_ts"] = out["request_ts"][:out["edges"][4]]
    for key in ("batch", "flops", "bytes"):
        m = int(out[key + "_bounds"][-1])
        out[key + "_values"], out[key + "_durs"] = out[key + "_values"][:m], out[key + "_durs"][:m]
    return out


FLOAT_SUMS_AS_NUMPY = _sums_as_numpy()
