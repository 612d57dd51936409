"""The compiled loop's event heap: heapq on events.py's ``(time, sequence, kind)`` tuples, as arrays.

A binary heap over ``heap_t`` (times) and ``heap_i`` (sequence, kind, what), ordered as
Python compares the tuples, so events due at the same instant pop in events.py's order (the
kind breaks the one tie events.py has: an attempt's timeout and its queue timeout share a time
and a sequence). ``what`` indexes an attempt, a batch or a lane, by kind.

Usage (compiled code)::

    push(s, when, next_seq(s), DONE, batch)
    now, seq, kind, what = pop(s)
"""

from __future__ import annotations

from numba import njit
from numba.types import float64, int64

from .layout import G_HEAP_SIZE, G_SEQ, H_KIND, H_SEQ, H_WHAT, jit_helper

__all__ = ["next_seq", "pop", "push"]


@njit((float64, int64, int64, float64, int64, int64), cache=True, no_cpython_wrapper=True)
def _before(t1, s1, k1, t2, s2, k2):
    """Whether event 1 pops before event 2: by time, then sequence, then kind, as tuples compare."""
    if t1 != t2:
        return t1 < t2
    if s1 != s2:
        return s1 < s2
    return k1 < k2


@jit_helper(float64, int64, int64, int64)
def push(s, when, seq, kind, what):
    size = s.g_i[G_HEAP_SIZE]
    if size == s.heap_t.shape[0]:
        raise RuntimeError("the compiled simulator's event heap is full")
    t, h = s.heap_t, s.heap_i
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if not _before(when, seq, kind, t[parent], h[parent, H_SEQ], h[parent, H_KIND]):
            break
        t[i] = t[parent]
        h[i, H_SEQ], h[i, H_KIND], h[i, H_WHAT] = h[parent, H_SEQ], h[parent, H_KIND], h[parent, H_WHAT]
        i = parent
    t[i] = when
    h[i, H_SEQ], h[i, H_KIND], h[i, H_WHAT] = seq, kind, what
    s.g_i[G_HEAP_SIZE] = size + 1


@jit_helper()
def pop(s):
    t, h = s.heap_t, s.heap_i
    when, seq, kind, what = t[0], h[0, H_SEQ], h[0, H_KIND], h[0, H_WHAT]
    size = s.g_i[G_HEAP_SIZE] - 1
    s.g_i[G_HEAP_SIZE] = size
    if size > 0:  # the last entry sifts down from the root
        lt, ls, lk, lw = t[size], h[size, H_SEQ], h[size, H_KIND], h[size, H_WHAT]
        i = 0
        while True:
            child = 2 * i + 1
            if child >= size:
                break
            right = child + 1
            if right < size and _before(t[right], h[right, H_SEQ], h[right, H_KIND],
                                        t[child], h[child, H_SEQ], h[child, H_KIND]):
                child = right
            if not _before(t[child], h[child, H_SEQ], h[child, H_KIND], lt, ls, lk):
                break
            t[i] = t[child]
            h[i, H_SEQ], h[i, H_KIND], h[i, H_WHAT] = h[child, H_SEQ], h[child, H_KIND], h[child, H_WHAT]
            i = child
        t[i] = lt
        h[i, H_SEQ], h[i, H_KIND], h[i, H_WHAT] = ls, lk, lw
    return when, seq, kind, what


@jit_helper()
def next_seq(s):
    seq = s.g_i[G_SEQ]
    s.g_i[G_SEQ] = seq + 1
    return seq

