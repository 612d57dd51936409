"""How the map step avoids fresh memory: fresh pages cost a fault and zeroing each.

A numpy array of a few MiB is fresh memory: the kernel maps it in and zeroes it page by
page, and glibc's allocator hands it back to the kernel when it is freed, so the next file
pays again. At a million spans per file that was a tenth of the map step's CPU. Two remedies:

- ``scratch``: each map thread keeps one array per purpose and reuses it for its next file.
  A thread holds at most one file's worth (about 130 MiB at a million spans), released when
  the thread ends (the map step's pool threads end with it).
- ``keep_freed_memory``: while the map step runs, glibc keeps freed blocks under 32 MiB for
  reuse instead of returning them (the many smaller temporaries of numpy code), and the
  process takes no transparent huge pages (numpy asks for them on large arrays; a fresh huge
  page is zeroed whole, 2 MiB, even when a fraction of it is written). Afterwards the
  allocator's documented defaults and the huge-page setting are restored and free memory is
  handed back. Elsewhere than Linux with glibc it does nothing.

Usage (internal)::

    out = scratch("parent_id", n, np.int64)  # uninitialised, len(out) == n
    with keep_freed_memory():
        ...
"""

from __future__ import annotations

import contextlib
import ctypes
import threading

import numpy as np

_LOCAL = threading.local()
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
_PR_SET_THP_DISABLE, _PR_GET_THP_DISABLE = 41, 42  # prctl (linux/prctl.h)
_DEFAULT_THRESHOLD = 128 * 1024  # both thresholds' documented defaults
_KEEP_BELOW = 32 * 1024 * 1024  # the largest mmap threshold glibc accepts on 64-bit
_KEEP_FREE = 1024 * 1024 * 1024  # free memory kept at the top of a heap before trimming
_LOCK = threading.Lock()
_DEPTH = 0  # nested or concurrent map steps: the settings are restored when the last ends
_THP_BEFORE = None  # the process's huge-page setting before the first map step, to restore


def scratch(key: str, n: int, dtype, fill=None) -> np.ndarray:
    """An array of ``n`` items of ``dtype`` for ``key``, reused by this thread's next call with
    the same key (so a caller must be done with it by then). Uninitialised, except that a newly
    allocated one is set to ``fill`` when given (callers that keep it so may rely on it)."""
    arrays = _LOCAL.__dict__.setdefault("arrays", {})
    array = arrays.get(key)
    if array is None or len(array) < n or array.dtype != np.dtype(dtype):
        array = np.empty(max(n, 1), dtype=dtype) if fill is None else np.full(max(n, 1), fill, dtype=dtype)
        arrays[key] = array
    return array[:n]


def _glibc():
    try:
        libc = ctypes.CDLL(None)
        return libc if all(hasattr(libc, name) for name in ("mallopt", "malloc_trim", "prctl")) else None
    except OSError:  # pragma: no cover - no C library to open (not on Linux or macOS)
        return None


@contextlib.contextmanager
def keep_freed_memory():
    """Within the block, glibc reuses freed memory instead of returning it to the kernel, and
    new memory comes in plain pages, not transparent huge pages (about 4% less CPU measured)."""
    global _DEPTH, _THP_BEFORE
    libc = _glibc()
    with _LOCK:
        _DEPTH += 1
        if libc is not None and _DEPTH == 1:
            libc.mallopt(_M_MMAP_THRESHOLD, _KEEP_BELOW)
            libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_FREE)
            _THP_BEFORE = libc.prctl(_PR_GET_THP_DISABLE, 0, 0, 0, 0)  # -1 where the kernel lacks it
            if _THP_BEFORE == 0:
                libc.prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0)
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if libc is not None and _DEPTH == 0:
                libc.mallopt(_M_MMAP_THRESHOLD, _DEFAULT_THRESHOLD)
                libc.mallopt(_M_TRIM_THRESHOLD, _DEFAULT_THRESHOLD)
                if _THP_BEFORE == 0:
                    libc.prctl(_PR_SET_THP_DISABLE, 0, 0, 0, 0)
                libc.malloc_trim(0)
