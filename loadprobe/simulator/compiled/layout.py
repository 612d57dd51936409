"""The compiled loop's state: event kinds, table columns, the ``Arrays`` and the numba ``STATE`` over them.

Every table is a numpy array whose columns are named by the constants here (``lane_i[k,
L_BUSY]``: lane k's executions in progress); the compiled functions see the same arrays
through one ``STATE`` reference. Event kinds and attempt states have events.py's values (the
kind breaks heap ties as events.py's tuples do).

Usage (inside the package)::

    from .layout import L_BUSY, STATE, jit_helper

    @jit_helper(int64)
    def _busy(s, lane):
        return s.lane_i[lane, L_BUSY]
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit, typeof
from numba.core import types as nbtypes
from numba.experimental import structref

from ...route.policy import BUCKETS_PER_WINDOW

__all__ = ["Arrays", "STATE", "jit_helper", "make_state", "set_draws", "set_pool"]

# -- constants -----------------------------------------------------------------------------------------------
TIMEOUT, DONE, WAKE, SAMPLE, QUEUE_TIMEOUT = 0, 1, 2, 3, 4
QUEUED, RUNNING, OVER = 0, 1, 2
CLOSED, OPEN, HALF_OPEN = 0, 1, 2  # breaker states
RUN, MOVE, REJECT = 0, 1, 2  # steer()'s answers
ADMIT, EVICT = 0, 1  # admission()'s answers (and REJECT)
OK, REJECTED, TIMED_OUT, ERROR = 0, 1, 2, 3  # outcomes, in SimulationResult.outcomes' order
QUEUE_FULL, SHED, FAILOVER_CAP, BREAKER_OPEN = 0, 1, 2, 3  # reject reasons
REASONS = ("queue_full", "shed", "failover_cap", "breaker_open")
FINISHED, NEED_DRAWS, NEED_ROOM = 0, 1, 2  # why _loop returned
BUCKETS = BUCKETS_PER_WINDOW
W_REQUESTS, W_OTHER = 0, 1  # a window's two sums: requests, and moves / failures / retries

# columns of the state's tables
L_ENGINE, L_STAGE, L_BATCHED, L_BATCH_SIZE, L_LIMIT, L_BUSY, L_WAITING, L_ARMED, L_STREAM = range(9)  # lane_i
L_MAX_WAIT, L_TIMER_AT = range(2)  # lane_f
E_MAX_CONCURRENCY, E_MAX_QUEUE, E_BUSY, E_WAITING, E_EXECUTIONS, E_ITEMS, E_FIRST_LANE, E_END_LANE = range(8)
E_BUSY_S = 0  # eng_f
(S_LANE, S_FALLBACK, S_MAX_ATTEMPTS, S_QUEUE_OVER, S_OTHERWISE_REJECT, S_CAP, S_BREAKER, S_ERROR_STREAM,
 S_ENTERED, S_FAILOVERS, S_RETRIES, S_TIMEOUTS, S_ERRORS, S_LATENCIES, S_BREAKER_STATE, S_TRIAL,
 S_OPENED) = range(17)  # stage_i
S_TIMEOUT, S_MAX_RATIO, S_ERROR_RATE_OVER, S_MIN_REQUESTS, S_OPEN_S, S_OPENED_AT, S_ERROR_RATE = range(7)
A_REQUEST, A_STAGE, A_LANE, A_PRIORITY, A_STATE, A_OWN, A_SEQ, A_REFS, A_PREV, A_NEXT = range(10)  # att_i
A_ENQUEUED, A_DEADLINE = range(2)  # att_f
B_LANE, B_FIRST, B_SIZE, B_CUT = range(4)  # bat_i; B_FIRST links free batches
Q_HEAD, Q_TAIL, Q_LEN = range(3)  # queues[lane, priority]
H_SEQ, H_KIND, H_WHAT = range(3)  # heap_i
D_START, D_CAPACITY, D_POS, D_FILLED, D_NEED = range(5)  # draw_i: a stream's segment of draw_buf
(G_SEQ, G_NEXT_ARRIVAL, G_HEAP_SIZE, G_FREE_ATTEMPT, G_FREE_ATTEMPTS, G_FREE_BATCH, G_LOW_DRAWS, G_SAMPLES,
 G_LATENCIES, G_REJECT_KINDS, G_STOPPABLE, G_SHED_BY_PRIORITY, G_BUDGET, G_OUTSIDE_STREAM, G_ROOM,
 G_OUTCOMES) = range(16)  # g_i; then 4 outcomes, 4 reject counts, 4 reject orders
G_REJECTS = G_OUTCOMES + 4
G_REJECT_ORDER = G_REJECTS + 4
G_FIELDS = G_REJECT_ORDER + 4
G_NOW, G_END, G_LAST_DONE, G_BUDGET_RATIO = range(4)  # g_f

Arrays = namedtuple("Arrays", [
    "lane_i", "lane_f", "eng_i", "eng_f", "eng_lanes", "stage_i", "stage_f", "stage_latencies",
    "win_buckets", "win_totals", "win_index", "win_width", "queues", "att_i", "att_f", "bat_i", "bat_f",
    "heap_t", "heap_i", "arrivals", "req_entered", "req_attempt", "req_priority", "latencies",
    "sampled_at", "samples", "draw_buf", "draw_i", "g_i", "g_f"])
Arrays.__doc__ = """Everything the compiled loop reads and writes, on Python's side: numpy arrays whose columns
are named by the constants above. The compiled code sees the same arrays through a ``STATE``."""


def _empty_arrays() -> Arrays:
    """Arrays of the right dtypes and dimensions, empty: their numba types make up ``STATE``."""
    f1, i1 = np.zeros(0), np.zeros(0, dtype=np.int64)
    f2, i2 = np.zeros((0, 1)), np.zeros((0, 1), dtype=np.int64)
    f3, i3 = np.zeros((0, 1, 1)), np.zeros((0, 1, 1), dtype=np.int64)
    return Arrays(lane_i=i2, lane_f=f2, eng_i=i2, eng_f=f2, eng_lanes=i1, stage_i=i2, stage_f=f2,
                  stage_latencies=f2, win_buckets=f3, win_totals=f2, win_index=i1, win_width=f1, queues=i3,
                  att_i=i2, att_f=f2, bat_i=i2, bat_f=f1, heap_t=f1, heap_i=i2, arrivals=f1, req_entered=f1,
                  req_attempt=i1, req_priority=i1, latencies=f1, sampled_at=f1, samples=i3, draw_buf=f1,
                  draw_i=i2, g_i=i1, g_f=f1)


@structref.register
class _StateType(nbtypes.StructRef):
    """The compiled loop's state: a reference to a struct of the ``Arrays``.

    A reference, not a tuple: every call between compiled functions then passes one pointer
    rather than thirty arrays' worth of fields, which is what makes the calls cheap.
    """

    def preprocess_fields(self, fields):
        return tuple((name, nbtypes.unliteral(typ)) for name, typ in fields)


class _StateRef(structref.StructRefProxy):
    """A ``STATE`` held by Python between calls of the loop (its arrays are read through ``Arrays``)."""


structref.define_boxing(_StateType, _StateRef)
_ARRAY_TYPES = [typeof(array) for array in _empty_arrays()]
_TYPE_OF = dict(zip(Arrays._fields, _ARRAY_TYPES))
STATE = _StateType(list(_TYPE_OF.items()))


@njit(STATE(*_ARRAY_TYPES), cache=True)
def make_state(lane_i, lane_f, eng_i, eng_f, eng_lanes, stage_i, stage_f, stage_latencies, win_buckets, win_totals,
           win_index, win_width, queues, att_i, att_f, bat_i, bat_f, heap_t, heap_i, arrivals, req_entered,
           req_attempt, req_priority, latencies, sampled_at, samples, draw_buf, draw_i, g_i, g_f):
    """A STATE over these arrays (``make_state(*arrays)``)."""
    s = structref.new(STATE)
    s.lane_i, s.lane_f, s.eng_i, s.eng_f, s.eng_lanes = lane_i, lane_f, eng_i, eng_f, eng_lanes
    s.stage_i, s.stage_f, s.stage_latencies = stage_i, stage_f, stage_latencies
    s.win_buckets, s.win_totals, s.win_index, s.win_width = win_buckets, win_totals, win_index, win_width
    s.queues, s.att_i, s.att_f, s.bat_i, s.bat_f = queues, att_i, att_f, bat_i, bat_f
    s.heap_t, s.heap_i, s.arrivals, s.req_entered = heap_t, heap_i, arrivals, req_entered
    s.req_attempt, s.req_priority, s.latencies = req_attempt, req_priority, latencies
    s.sampled_at, s.samples, s.draw_buf, s.draw_i, s.g_i, s.g_f = sampled_at, samples, draw_buf, draw_i, g_i, g_f
    return s


@njit((STATE, _TYPE_OF["att_i"], _TYPE_OF["att_f"], _TYPE_OF["heap_t"], _TYPE_OF["heap_i"]), cache=True)
def set_pool(s, att_i, att_f, heap_t, heap_i):
    """Hand the loop a larger attempt pool and heap (``driver.grow``)."""
    s.att_i, s.att_f, s.heap_t, s.heap_i = att_i, att_f, heap_t, heap_i


@njit((STATE, _TYPE_OF["draw_buf"]), cache=True)
def set_draws(s, draw_buf):
    """Hand the loop a draw buffer laid out anew (``_Streams.refill``)."""
    s.draw_buf = draw_buf


def jit_helper(*args):
    """Compile a helper of the loop for ``(state, *args)``, now, for these types only.

    One signature each: called with constants, numba would otherwise compile a copy of the
    function per literal value, which multiplies the first compile's time (and compiling now is
    why every callee is defined above its callers). No Python wrapper: only compiled code calls them.
    """
    return njit((STATE, *args), cache=True, no_cpython_wrapper=True)

