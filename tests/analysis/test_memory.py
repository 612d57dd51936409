"""The map step's memory reuse (loadprobe/analysis/memory.py): per-thread scratch arrays, and the
allocator and huge-page settings it changes only while a map step runs."""

from __future__ import annotations

import ctypes
import sys
import threading

import numpy as np
import pytest

from loadprobe.analysis.memory import keep_freed_memory, scratch


def test_scratch_arrays_are_reused_per_thread_and_key():
    a = scratch("test-a", 100, np.int64)
    assert len(a) == 100 and a.dtype == np.int64
    a[:] = 7
    again = scratch("test-a", 50, np.int64)
    assert len(again) == 50 and np.shares_memory(a, again) and (again == 7).all()  # the same memory
    bigger = scratch("test-a", 1000, np.int64)
    assert len(bigger) == 1000 and not np.shares_memory(a, bigger)
    assert not np.shares_memory(scratch("test-b", 100, np.int64), bigger)  # keys are separate
    assert scratch("test-a", 10, np.int32).dtype == np.int32  # another dtype: a new array
    other = []
    thread = threading.Thread(target=lambda: other.append(scratch("test-a", 10, np.int32)))
    thread.start()
    thread.join()
    assert not np.shares_memory(other[0], scratch("test-a", 10, np.int32))  # threads never share
    assert (scratch("test-fill", 5, np.int32, fill=-1) == -1).all()  # a new array starts filled


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and prctl are Linux's")
def test_huge_pages_are_off_only_while_a_map_step_runs():
    libc = ctypes.CDLL(None)
    before = libc.prctl(42, 0, 0, 0, 0)  # PR_GET_THP_DISABLE
    if before != 0:
        pytest.skip("this process already has huge pages disabled, or the kernel lacks the switch")
    with keep_freed_memory():
        assert libc.prctl(42, 0, 0, 0, 0) == 1
        with keep_freed_memory():  # nested (or a concurrent map step): still off
            assert libc.prctl(42, 0, 0, 0, 0) == 1
        assert libc.prctl(42, 0, 0, 0, 0) == 1
    assert libc.prctl(42, 0, 0, 0, 0) == 0
