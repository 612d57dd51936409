"""The event loop of events.py compiled with numba: the same rules, the same draws, the same result, faster.

Usage (``simulate(..., loop="compiled")`` does this, and ``loop="auto"`` when numba imports)::

    from loadprobe.simulator.compiled import run
    sim = run(config, arrivals, priorities, samplers, seed=1, window_s=10.0)
    sim.outcomes, sim.stages[0].latencies, sim.engines["npu0"].busy_s   # what result.py reads

Why it exists: speed. ``events.Simulation`` spends ~3 us of CPython per stage visit (an attempt
object, a heap tuple, half a dozen method calls); this loop runs the very same algorithm over
numpy arrays in compiled code, ~0.2 us a visit. events.py is the reference: every rule here
mirrors a method there (the names match: ``_run``, ``_pump``, ``_ready_lane``, ``_take``,
``_start``, ``_on_done``, ``_failed``, ...), and tests/simulator/test_simulate_compiled.py checks over
many generated plans that the two give identical ``SimulationResult``s. Change one, change both.

What is mirrored, exactly:

- the heap: an array-based binary heap keyed ``(time, sequence, kind)`` with events.py's
  sequence numbers, so events due at the same instant pop in the same order (the kind breaks the
  one tie events.py has: an attempt's timeout and its queue timeout share time and sequence);
- engines and lanes: slots, lane limits, bounded priority queues, ``admission()`` (reject, or
  evict the newest lowest-priority attempt with ``shed.by: priority``), batching windows (wake
  events), batches on full / on ``max_wait_ms`` / when the engine's queue is full, one queue
  timeout per lane, async (cut at the batch's last deadline) and sync executors. A queue (lane,
  priority) is a doubly linked list through a pool of attempt records with a free list: taking
  from the head, shedding the tail and a timeout's removal from anywhere are O(1), and memory
  follows what is queued rather than ``max_queue`` (up to ten million) x lanes x priorities;
- the routing rules of ``loadprobe.route.policy`` -- ``steer``, ``FailoverCap``, ``Breaker``,
  ``RetryBudget`` and their ``SlidingWindow`` -- ported with the same float operations in the
  same order, so every decision and count is the same;
- the draws: events.py draws every service time from a stream per (lane, batch size), errors
  from a stream per stage and the time outside the stages from one more stream. This loop takes
  them from buffers that Python fills by calling the very same samplers on the very same
  streams, in blocks (``draw_block``). Before each event every buffer holds at least what one
  event can take (``need``); when one runs low the loop returns ``NEED_DRAWS``, Python refills,
  and the loop resumes from its arrays. The attempt pool grows the same way (``NEED_ROOM``).

How: the state is a numba structref over the ``Arrays`` (one pointer per call, where a tuple of
thirty arrays made every call ten times dearer), and each compiled function has one explicit
signature. They are cached on disk (numba ``cache=True``): the first run on a machine compiles
them (~10 s on a 2-core machine), later processes load them (~0.5 s; docs/simulate.md).
"""

from __future__ import annotations

import math
from collections import namedtuple
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
from numba import config as numba_config
from numba import njit, typeof
from numba.core import types as nbtypes
from numba.experimental import structref
from numba.types import boolean, float64, int64

from ..route.policy import BUCKETS_PER_WINDOW
from .events import SAMPLES, stream
from .servicetimes import draw_block

__all__ = ["CompiledRun", "run"]

# -- constants: event kinds and attempt states have events.py's values (the kind breaks heap ties) ---------
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
def _state(lane_i, lane_f, eng_i, eng_f, eng_lanes, stage_i, stage_f, stage_latencies, win_buckets, win_totals,
           win_index, win_width, queues, att_i, att_f, bat_i, bat_f, heap_t, heap_i, arrivals, req_entered,
           req_attempt, req_priority, latencies, sampled_at, samples, draw_buf, draw_i, g_i, g_f):
    """A STATE over these arrays (``_state(*arrays)``)."""
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
def _set_pool(s, att_i, att_f, heap_t, heap_i):
    """Hand the loop a larger attempt pool and heap (``_grow``)."""
    s.att_i, s.att_f, s.heap_t, s.heap_i = att_i, att_f, heap_t, heap_i


@njit((STATE, _TYPE_OF["draw_buf"]), cache=True)
def _set_draws(s, draw_buf):
    """Hand the loop a draw buffer laid out anew (``_Streams.refill``)."""
    s.draw_buf = draw_buf


def _helper(*args):
    """Compile a helper of the loop for ``(state, *args)``, now, for these types only.

    One signature each: called with constants, numba would otherwise compile a copy of the
    function per literal value, which multiplies the first compile's time (and compiling now is
    why every callee is defined above its callers). No Python wrapper: only compiled code calls them.
    """
    return njit((STATE, *args), cache=True, no_cpython_wrapper=True)


# -- the heap (heapq on (time, sequence, kind) tuples, as arrays) -------------------------------------------

@njit((float64, int64, int64, float64, int64, int64), cache=True, no_cpython_wrapper=True)
def _before(t1, s1, k1, t2, s2, k2):
    """Whether event 1 pops before event 2: by time, then sequence, then kind, as tuples compare."""
    if t1 != t2:
        return t1 < t2
    if s1 != s2:
        return s1 < s2
    return k1 < k2


@_helper(float64, int64, int64, int64)
def _push(s, when, seq, kind, what):
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


@_helper()
def _pop(s):
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


@_helper()
def _next_seq(s):
    seq = s.g_i[G_SEQ]
    s.g_i[G_SEQ] = seq + 1
    return seq


# -- the routing rules (policy.py: SlidingWindow, FailoverCap, Breaker, RetryBudget, admission, steer) ----

@_helper(int64)
def _advance(s, w):
    """SlidingWindow._advance: forget the buckets the clock has left; the current bucket's index."""
    index = math.floor(s.g_f[G_NOW] / s.win_width[w])
    last = s.win_index[w]
    if index > last:
        for step in range(last + 1, min(index, last + BUCKETS) + 1):
            bucket = step % BUCKETS
            for field in range(2):
                left = s.win_totals[w, field] - s.win_buckets[w, bucket, field]
                s.win_totals[w, field] = left if left > 0.0 else 0.0  # max(0.0, left)
                s.win_buckets[w, bucket, field] = 0.0
        s.win_index[w] = index
    return s.win_index[w] % BUCKETS


@_helper(int64, int64)
def _add(s, w, field):
    bucket = _advance(s, w)
    s.win_buckets[w, bucket, field] += 1.0
    s.win_totals[w, field] += 1.0


@_helper(int64, float64)
def _within(s, w, ratio):
    """FailoverCap.try_move / RetryBudget.try_retry: one more within ratio x requests? If so, count it."""
    _advance(s, w)
    if s.win_totals[w, W_OTHER] + 1 > ratio * s.win_totals[w, W_REQUESTS]:
        return False
    _add(s, w, W_OTHER)
    return True


@_helper(int64)
def _breaker_state(s, stage):
    """Breaker._state_now: an open breaker turns half-open once open_s has passed."""
    if s.stage_i[stage, S_BREAKER_STATE] == OPEN and \
            s.g_f[G_NOW] - s.stage_f[stage, S_OPENED_AT] >= s.stage_f[stage, S_OPEN_S]:
        s.stage_i[stage, S_BREAKER_STATE] = HALF_OPEN
        s.stage_i[stage, S_TRIAL] = 0
    return s.stage_i[stage, S_BREAKER_STATE]


@_helper(int64)
def _breaker_allow(s, stage):
    state = _breaker_state(s, stage)
    if state == CLOSED:
        return True
    if state == HALF_OPEN and not s.stage_i[stage, S_TRIAL]:
        s.stage_i[stage, S_TRIAL] = 1
        return True
    return False


@_helper(int64)
def _breaker_open(s, stage):
    s.stage_i[stage, S_BREAKER_STATE] = OPEN
    s.stage_f[stage, S_OPENED_AT] = s.g_f[G_NOW]
    s.stage_i[stage, S_TRIAL] = 0
    s.stage_i[stage, S_OPENED] += 1


@_helper(int64, boolean)
def _breaker_record(s, stage, ok):
    state = _breaker_state(s, stage)
    w = s.stage_i[stage, S_BREAKER]
    if state == HALF_OPEN:
        if not s.stage_i[stage, S_TRIAL]:
            return  # let through before the breaker opened: a stale outcome
        s.stage_i[stage, S_TRIAL] = 0
        if ok:
            s.stage_i[stage, S_BREAKER_STATE] = CLOSED
            s.win_buckets[w, :, :] = 0.0  # SlidingWindow.clear(): its index stays
            s.win_totals[w, :] = 0.0
        else:
            _breaker_open(s, stage)
        return
    if state == OPEN:
        return
    _add(s, w, W_REQUESTS)
    if not ok:
        _add(s, w, W_OTHER)
        _advance(s, w)
        requests, failures = s.win_totals[w, W_REQUESTS], s.win_totals[w, W_OTHER]
        if requests >= s.stage_f[stage, S_MIN_REQUESTS] and failures / requests > s.stage_f[stage, S_ERROR_RATE_OVER]:
            _breaker_open(s, stage)


@_helper(int64)
def _lowest_waiting(s, engine):
    """The lowest priority waiting anywhere in the engine's queue, -1 when it is empty."""
    lowest = -1
    for k in range(s.eng_i[engine, E_FIRST_LANE], s.eng_i[engine, E_END_LANE]):
        lane = s.eng_lanes[k]
        for priority in range(s.queues.shape[1]):
            if s.queues[lane, priority, Q_LEN]:
                if lowest < 0 or priority < lowest:
                    lowest = priority
                break
    return lowest


@_helper(int64, int64)
def _admission(s, engine, priority):
    if s.eng_i[engine, E_WAITING] < s.eng_i[engine, E_MAX_QUEUE]:
        return ADMIT
    lowest = _lowest_waiting(s, engine)
    if s.g_i[G_SHED_BY_PRIORITY] != 0 and lowest >= 0 and lowest < priority:
        return EVICT
    return REJECT


@_helper(int64)
def _starts_now(s, lane):
    engine = s.lane_i[lane, L_ENGINE]
    return s.eng_i[engine, E_BUSY] < s.eng_i[engine, E_MAX_CONCURRENCY] and \
        s.lane_i[lane, L_BUSY] < s.lane_i[lane, L_LIMIT] and not s.eng_i[engine, E_WAITING]


@_helper(int64, int64)
def _can_admit(s, lane, priority):
    engine = s.lane_i[lane, L_ENGINE]
    if _starts_now(s, lane) or s.eng_i[engine, E_WAITING] < s.eng_i[engine, E_MAX_QUEUE]:
        return True
    return _admission(s, engine, priority) != REJECT


@_helper(int64, int64, int64)
def _steer(s, stage, lane, priority):
    """policy.steer: (RUN | MOVE | REJECT, reason)."""
    cap, breaker = s.stage_i[stage, S_CAP], s.stage_i[stage, S_BREAKER]
    ratio = s.stage_f[stage, S_MAX_RATIO]
    if cap >= 0:
        _add(s, cap, W_REQUESTS)
    if breaker >= 0 and not _breaker_allow(s, stage):
        if cap < 0 or not _within(s, cap, ratio):
            return REJECT, BREAKER_OPEN
        return MOVE, -1
    if cap >= 0:
        over_at = s.stage_i[stage, S_QUEUE_OVER]
        over = over_at >= 0 and s.eng_i[s.lane_i[lane, L_ENGINE], E_WAITING] > over_at
        away = not _can_admit(s, lane, priority)
        if over or away:
            if _within(s, cap, ratio):
                if breaker >= 0:
                    s.stage_i[stage, S_TRIAL] = 0  # Breaker.release()
                return MOVE, -1
            if s.stage_i[stage, S_OTHERWISE_REJECT] != 0 or away:
                if breaker >= 0:
                    s.stage_i[stage, S_TRIAL] = 0
                return REJECT, FAILOVER_CAP
    return RUN, -1


# -- attempts, queues, draws ---------------------------------------------------------------------------------

@_helper(int64, int64, int64, int64, int64, int64)
def _new_attempt(s, request, stage, lane, priority, own, seq):
    a = s.g_i[G_FREE_ATTEMPT]
    s.g_i[G_FREE_ATTEMPT] = s.att_i[a, A_NEXT]
    s.g_i[G_FREE_ATTEMPTS] -= 1
    ai = s.att_i
    ai[a, A_REQUEST], ai[a, A_STAGE], ai[a, A_LANE], ai[a, A_PRIORITY] = request, stage, lane, priority
    ai[a, A_STATE], ai[a, A_OWN], ai[a, A_SEQ], ai[a, A_REFS] = QUEUED, own, seq, 0
    ai[a, A_PREV], ai[a, A_NEXT] = -1, -1
    now = s.g_f[G_NOW]
    s.att_f[a, A_ENQUEUED] = now
    s.att_f[a, A_DEADLINE] = now + s.stage_f[stage, S_TIMEOUT]
    return a


@_helper(int64)
def _free(s, a):
    s.att_i[a, A_NEXT] = s.g_i[G_FREE_ATTEMPT]
    s.g_i[G_FREE_ATTEMPT] = a
    s.g_i[G_FREE_ATTEMPTS] += 1


@_helper(int64)
def _over(s, a):
    """The attempt is over; its slot is reused once no pending event or running batch holds it."""
    s.att_i[a, A_STATE] = OVER
    if s.att_i[a, A_REFS] == 0:
        _free(s, a)


@_helper(int64)
def _unref(s, a):
    s.att_i[a, A_REFS] -= 1
    if s.att_i[a, A_REFS] == 0 and s.att_i[a, A_STATE] == OVER:
        _free(s, a)


@_helper(int64, int64, int64)
def _enqueue(s, lane, priority, a):
    tail = s.queues[lane, priority, Q_TAIL]
    s.att_i[a, A_PREV], s.att_i[a, A_NEXT] = tail, -1
    if tail >= 0:
        s.att_i[tail, A_NEXT] = a
    else:
        s.queues[lane, priority, Q_HEAD] = a
    s.queues[lane, priority, Q_TAIL] = a
    s.queues[lane, priority, Q_LEN] += 1


@_helper(int64)
def _unlink(s, a):
    lane, priority = s.att_i[a, A_LANE], s.att_i[a, A_PRIORITY]
    prev, after = s.att_i[a, A_PREV], s.att_i[a, A_NEXT]
    if prev >= 0:
        s.att_i[prev, A_NEXT] = after
    else:
        s.queues[lane, priority, Q_HEAD] = after
    if after >= 0:
        s.att_i[after, A_PREV] = prev
    else:
        s.queues[lane, priority, Q_TAIL] = prev
    s.queues[lane, priority, Q_LEN] -= 1


@_helper(int64)
def _draw(s, k):
    """The next draw of stream ``k``; flags the buffers for a refill once it holds less than one event may take."""
    d = s.draw_i
    pos = d[k, D_POS]
    value = s.draw_buf[d[k, D_START] + pos]
    d[k, D_POS] = pos + 1
    if d[k, D_FILLED] - pos - 1 < d[k, D_NEED]:
        s.g_i[G_LOW_DRAWS] = 1
    return value


@_helper(int64, int64)
def _reject(s, request, reason):
    g = s.g_i
    if g[G_REJECTS + reason] == 0:  # rejects keep the order reasons first occurred in, as a dict does
        g[G_REJECT_ORDER + reason] = g[G_REJECT_KINDS]
        g[G_REJECT_KINDS] += 1
    g[G_REJECTS + reason] += 1
    g[G_OUTCOMES + REJECTED] += 1
    s.g_f[G_END] = s.g_f[G_NOW]


# -- an engine (events.py: _run, _evict_lowest, _pump, _ready_lane, _take, _start) ----------------------------

@_helper(int64)
def _arm(s, lane):
    """One queue timeout per lane, for its oldest queued attempt (the lowest sequence)."""
    oldest = -1
    for priority in range(s.queues.shape[1]):
        if s.queues[lane, priority, Q_LEN]:
            head = s.queues[lane, priority, Q_HEAD]
            if oldest < 0 or s.att_i[head, A_SEQ] < s.att_i[oldest, A_SEQ]:
                oldest = head
    _push(s, s.att_f[oldest, A_DEADLINE], s.att_i[oldest, A_SEQ], QUEUE_TIMEOUT, oldest)
    s.att_i[oldest, A_REFS] += 1
    s.lane_i[lane, L_ARMED] = 1


@_helper(int64)
def _take(s, lane):
    """Up to a batch of the lane's queued attempts, highest priority first, oldest first: (first, count), linked."""
    size = s.lane_i[lane, L_BATCH_SIZE]
    first, last, count = -1, -1, 0
    for priority in range(s.queues.shape[1] - 1, -1, -1):
        while count < size and s.queues[lane, priority, Q_LEN] != 0:
            a = s.queues[lane, priority, Q_HEAD]
            _unlink(s, a)
            if last < 0:
                first = a
            else:
                s.att_i[last, A_NEXT] = a
            last = a
            count += 1
        if count == size:
            break
    s.att_i[last, A_NEXT] = -1
    s.lane_i[lane, L_WAITING] -= count
    s.eng_i[s.lane_i[lane, L_ENGINE], E_WAITING] -= count
    return first, count


@_helper(int64)
def _ready_lane(s, engine):
    """The lane to start next: highest priority waiting, then oldest; a batch waits out its window."""
    best, best_priority, best_oldest = -1, -1, 0.0
    now = s.g_f[G_NOW]
    for k in range(s.eng_i[engine, E_FIRST_LANE], s.eng_i[engine, E_END_LANE]):
        lane = s.eng_lanes[k]
        if not s.lane_i[lane, L_WAITING] or s.lane_i[lane, L_BUSY] >= s.lane_i[lane, L_LIMIT]:
            continue
        top, oldest = -1, 0.0
        for priority in range(s.queues.shape[1]):
            if s.queues[lane, priority, Q_LEN]:
                enqueued = s.att_f[s.queues[lane, priority, Q_HEAD], A_ENQUEUED]
                if top < 0 or enqueued < oldest:
                    oldest = enqueued
                top = priority
        if s.lane_i[lane, L_WAITING] < s.lane_i[lane, L_BATCH_SIZE] and \
                s.eng_i[engine, E_WAITING] < s.eng_i[engine, E_MAX_QUEUE]:
            opens = oldest + s.lane_f[lane, L_MAX_WAIT]
            if now < opens:
                if opens < s.lane_f[lane, L_TIMER_AT]:
                    s.lane_f[lane, L_TIMER_AT] = opens
                    _push(s, opens, _next_seq(s), WAKE, lane)
                continue
        # key (highest priority, -oldest), the first lane winning ties
        if best < 0 or top > best_priority or (top == best_priority and -oldest > -best_oldest):
            best, best_priority, best_oldest = lane, top, oldest
    return best


@_helper(int64, int64, int64)
def _start(s, lane, first, count):
    engine = s.lane_i[lane, L_ENGINE]
    s.eng_i[engine, E_BUSY] += 1
    s.lane_i[lane, L_BUSY] += 1
    s.eng_i[engine, E_EXECUTIONS] += 1
    s.eng_i[engine, E_ITEMS] += count
    now = s.g_f[G_NOW]
    end = now + _draw(s, s.lane_i[lane, L_STREAM] + count - 1)
    last_deadline = s.att_f[first, A_DEADLINE]
    a = first
    while a >= 0:
        s.att_i[a, A_STATE] = RUNNING
        if s.att_f[a, A_DEADLINE] > last_deadline:
            last_deadline = s.att_f[a, A_DEADLINE]
        a = s.att_i[a, A_NEXT]
    cut = s.g_i[G_STOPPABLE] != 0 and end > last_deadline  # nobody waits past the last deadline: it is stopped
    done = last_deadline if cut else end
    a = first
    while a >= 0:
        if s.att_f[a, A_DEADLINE] < done and s.att_i[a, A_SEQ] >= 0:  # times out while running
            _push(s, s.att_f[a, A_DEADLINE], s.att_i[a, A_SEQ], TIMEOUT, a)
            s.att_i[a, A_REFS] += 1
        s.att_i[a, A_REFS] += 1  # held by the batch until it is done
        a = s.att_i[a, A_NEXT]
    b = s.g_i[G_FREE_BATCH]
    if b < 0:
        raise RuntimeError("the compiled simulator ran out of batch records")
    s.g_i[G_FREE_BATCH] = s.bat_i[b, B_FIRST]
    s.bat_i[b, B_LANE], s.bat_i[b, B_FIRST], s.bat_i[b, B_SIZE], s.bat_i[b, B_CUT] = lane, first, count, cut
    s.bat_f[b] = now
    _push(s, done, _next_seq(s), DONE, b)


@_helper(int64)
def _pump(s, engine):
    while s.eng_i[engine, E_WAITING] != 0 and s.eng_i[engine, E_BUSY] < s.eng_i[engine, E_MAX_CONCURRENCY]:
        lane = _ready_lane(s, engine)
        if lane < 0:
            return
        first, count = _take(s, lane)
        _start(s, lane, first, count)


@_helper(int64)
def _evict_lowest(s, engine):
    """Shed the newest attempt of the lowest priority waiting (the first such lane of the engine's)."""
    found, lowest = -1, -1
    for k in range(s.eng_i[engine, E_FIRST_LANE], s.eng_i[engine, E_END_LANE]):
        lane = s.eng_lanes[k]
        for priority in range(s.queues.shape[1]):
            if s.queues[lane, priority, Q_LEN]:
                if found < 0 or priority < lowest:
                    found, lowest = lane, priority
                break
    victim = s.queues[found, lowest, Q_TAIL]
    _unlink(s, victim)
    s.lane_i[found, L_WAITING] -= 1
    s.eng_i[engine, E_WAITING] -= 1
    request, index, own = s.att_i[victim, A_REQUEST], s.att_i[victim, A_STAGE], s.att_i[victim, A_OWN]
    _over(s, victim)
    if own != 0 and s.stage_i[index, S_BREAKER] >= 0:
        s.stage_i[index, S_TRIAL] = 0  # Breaker.release()
    _reject(s, request, SHED)


@_helper(int64, int64, int64, int64, int64)
def _run(s, lane, request, index, priority, own):
    engine = s.lane_i[lane, L_ENGINE]
    e = s.eng_i
    starts_now = not e[engine, E_WAITING] and e[engine, E_BUSY] < e[engine, E_MAX_CONCURRENCY] and \
        s.lane_i[lane, L_BUSY] < s.lane_i[lane, L_LIMIT]
    if starts_now and not s.lane_i[lane, L_BATCHED]:
        # without the queue; an async execution ends by its own deadline, so it needs no timeout event
        seq = -1 if s.g_i[G_STOPPABLE] else _next_seq(s)
        a = _new_attempt(s, request, index, lane, priority, own, seq)
        _start(s, lane, a, 1)
        return
    if not starts_now and e[engine, E_WAITING] >= e[engine, E_MAX_QUEUE]:
        if _admission(s, engine, priority) == REJECT:
            if own != 0 and s.stage_i[index, S_BREAKER] >= 0:
                s.stage_i[index, S_TRIAL] = 0  # Breaker.release()
            _reject(s, request, QUEUE_FULL)
            return
        _evict_lowest(s, engine)
    a = _new_attempt(s, request, index, lane, priority, own, _next_seq(s))
    _enqueue(s, lane, priority, a)
    s.lane_i[lane, L_WAITING] += 1
    e[engine, E_WAITING] += 1
    if not s.lane_i[lane, L_ARMED]:
        _arm(s, lane)
    _pump(s, engine)


# -- the router's decisions and the loop (events.py: _attempt, _enter, _failed, _succeeded, _on_done, run) ---

@_helper(int64, int64)
def _attempt(s, request, index):
    lane = s.stage_i[index, S_LANE]
    priority = s.req_priority[request]
    if s.stage_i[index, S_CAP] < 0 and s.stage_i[index, S_BREAKER] < 0:
        _run(s, lane, request, index, priority, 1)
        return
    action, reason = _steer(s, index, lane, priority)
    if action == REJECT:
        _reject(s, request, reason)
    elif action == MOVE:
        s.stage_i[index, S_FAILOVERS] += 1
        _run(s, s.stage_i[index, S_FALLBACK], request, index, priority, 0)
    else:
        _run(s, lane, request, index, priority, 1)


@_helper(int64, int64)
def _enter(s, request, index):
    s.req_entered[request] = s.g_f[G_NOW]
    s.req_attempt[request] = 1
    s.stage_i[index, S_ENTERED] += 1
    if s.stage_i[index, S_CAP] < 0 and s.stage_i[index, S_BREAKER] < 0:
        _run(s, s.stage_i[index, S_LANE], request, index, s.req_priority[request], 1)
    else:
        _attempt(s, request, index)


@_helper(int64, boolean)
def _failed(s, a, error):
    """An attempt timed out (or raised): tell the breaker, then retry within max_attempts and the budget."""
    request, index, own = s.att_i[a, A_REQUEST], s.att_i[a, A_STAGE], s.att_i[a, A_OWN]
    _over(s, a)
    if error:
        s.stage_i[index, S_ERRORS] += 1
    else:
        s.stage_i[index, S_TIMEOUTS] += 1
    if own != 0 and s.stage_i[index, S_BREAKER] >= 0:
        _breaker_record(s, index, False)
    budget = s.g_i[G_BUDGET]
    if s.req_attempt[request] >= s.stage_i[index, S_MAX_ATTEMPTS] or \
            (budget >= 0 and not _within(s, budget, s.g_f[G_BUDGET_RATIO])):
        s.g_i[G_OUTCOMES + (ERROR if error else TIMED_OUT)] += 1
        s.g_f[G_END] = s.g_f[G_NOW]
        return
    s.req_attempt[request] += 1
    s.stage_i[index, S_RETRIES] += 1
    _attempt(s, request, index)


@_helper(int64)
def _succeeded(s, a):
    request, index, own = s.att_i[a, A_REQUEST], s.att_i[a, A_STAGE], s.att_i[a, A_OWN]
    _over(s, a)
    if own != 0 and s.stage_i[index, S_BREAKER] >= 0:
        _breaker_record(s, index, True)
    now = s.g_f[G_NOW]
    k = s.stage_i[index, S_LATENCIES]
    s.stage_latencies[index, k] = now - s.req_entered[request]
    s.stage_i[index, S_LATENCIES] = k + 1
    if index + 1 < s.stage_i.shape[0]:
        _enter(s, request, index + 1)
    else:
        s.g_i[G_OUTCOMES + OK] += 1
        s.g_f[G_END] = now
        outside = s.g_i[G_OUTSIDE_STREAM]
        extra = _draw(s, outside) if outside >= 0 else 0.0
        k = s.g_i[G_LATENCIES]
        s.latencies[k] = now - s.arrivals[request] + extra
        s.g_i[G_LATENCIES] = k + 1


@_helper(int64)
def _on_done(s, b):
    lane, first, cut = s.bat_i[b, B_LANE], s.bat_i[b, B_FIRST], s.bat_i[b, B_CUT]
    now = s.g_f[G_NOW]
    s.g_f[G_LAST_DONE] = now
    engine = s.lane_i[lane, L_ENGINE]
    s.eng_i[engine, E_BUSY] -= 1
    s.lane_i[lane, L_BUSY] -= 1
    s.eng_f[engine, E_BUSY_S] += now - s.bat_f[b]
    if s.eng_i[engine, E_WAITING]:
        _pump(s, engine)  # the slot is reused before the members move on, as in the router
    stage = s.lane_i[lane, L_STAGE]
    rate, errors = s.stage_f[stage, S_ERROR_RATE], s.stage_i[stage, S_ERROR_STREAM]
    a = first
    while a >= 0:
        after = s.att_i[a, A_NEXT]
        if s.att_i[a, A_STATE] == RUNNING:  # else timed out while running (a sync executor)
            if cut:
                _failed(s, a, False)
            elif rate != 0.0 and _draw(s, errors) < rate:
                _failed(s, a, True)
            else:
                _succeeded(s, a)
        a = after
    a = first
    while a >= 0:  # the batch lets go of its members
        after = s.att_i[a, A_NEXT]
        _unref(s, a)
        a = after
    s.bat_i[b, B_FIRST] = s.g_i[G_FREE_BATCH]
    s.g_i[G_FREE_BATCH] = b


@_helper(int64)
def _on_timeout(s, a):
    if s.att_i[a, A_STATE] == QUEUED:
        lane = s.att_i[a, A_LANE]
        _unlink(s, a)
        s.lane_i[lane, L_WAITING] -= 1
        s.eng_i[s.lane_i[lane, L_ENGINE], E_WAITING] -= 1
    _failed(s, a, False)


@_helper()
def _sample(s):
    k = s.g_i[G_SAMPLES]
    s.sampled_at[k] = s.g_f[G_NOW]
    for engine in range(s.eng_i.shape[0]):
        s.samples[k, engine, 0] = s.eng_i[engine, E_WAITING]
        s.samples[k, engine, 1] = s.eng_i[engine, E_BUSY]
    s.g_i[G_SAMPLES] = k + 1


@njit((STATE,), cache=True)
def _loop(s):
    """Simulation.run, until the run is over (FINISHED) or Python must refill draws or grow the pool."""
    g, arrivals = s.g_i, s.arrivals
    n = arrivals.shape[0]
    while True:
        if g[G_LOW_DRAWS]:
            return NEED_DRAWS
        if g[G_FREE_ATTEMPTS] < g[G_ROOM] or 2 * g[G_HEAP_SIZE] > s.heap_t.shape[0]:
            return NEED_ROOM
        i = g[G_NEXT_ARRIVAL]
        if i < n and (g[G_HEAP_SIZE] == 0 or arrivals[i] < s.heap_t[0]):
            s.g_f[G_NOW] = arrivals[i]
            if g[G_BUDGET] >= 0:
                _add(s, g[G_BUDGET], W_REQUESTS)
            _enter(s, i, 0)
            g[G_NEXT_ARRIVAL] = i + 1
            continue
        if g[G_HEAP_SIZE] == 0:
            return FINISHED
        now, _, kind, what = _pop(s)
        s.g_f[G_NOW] = now
        if kind == DONE:
            _on_done(s, what)
        elif kind == TIMEOUT:
            if s.att_i[what, A_STATE] != OVER:
                _on_timeout(s, what)
            _unref(s, what)
        elif kind == QUEUE_TIMEOUT:
            lane = s.att_i[what, A_LANE]
            s.lane_i[lane, L_ARMED] = 0
            if s.att_i[what, A_STATE] == QUEUED:
                _on_timeout(s, what)
            if s.lane_i[lane, L_WAITING] != 0 and s.lane_i[lane, L_ARMED] == 0:
                _arm(s, lane)
            _unref(s, what)
        elif kind == SAMPLE:
            _sample(s)
        else:
            lane = what
            if s.lane_f[lane, L_TIMER_AT] == now:
                s.lane_f[lane, L_TIMER_AT] = math.inf
            _pump(s, s.lane_i[lane, L_ENGINE])


# -- Python's side: build the arrays, feed draws, grow the pool, read the result -----------------------------

@dataclass
class _StageTotals:
    name: str
    entered: int
    failovers: int
    retries: int
    timeouts: int
    errors: int
    breaker_opened: int
    latencies: np.ndarray  # seconds


@dataclass
class _EngineTotals:
    name: str
    max_concurrency: int
    busy_s: float
    executions: int
    items: int


@dataclass
class CompiledRun:
    """What a run leaves, under the names ``events.Simulation`` uses (result.py reads either)."""

    stages: list
    engines: dict
    samples: dict  # engine -> (queue lengths, busy slots) at each sample
    sampled_at: list
    outcomes: dict
    rejects: dict
    latencies: np.ndarray
    end: float
    last_done: float
    refills: int = 0  # times the loop stopped for more draws (for tests and benchmarks)
    growths: int = 0  # times it stopped for a larger attempt pool


class _Streams:
    """The run's random streams and the samplers drawing from them, feeding ``draw_buf`` block by block.

    Stream ``k`` owns the segment ``draw_buf[start:start + capacity]``; the loop consumes it from
    ``pos`` to ``filled`` and asks for more once fewer than ``need`` are left (what one event may
    take). A refill moves what is left to the segment's start and appends a block of the
    sampler's next draws: the first block about what a quarter of the run would take (``hint``),
    each next one 4x larger, up to ``MAX_BLOCK``; streams about to run low are topped up at the
    same time. So a short run draws little ahead and a long one comes back to Python rarely.
    """

    FIRST_BLOCK, MAX_BLOCK = 32, 1 << 16

    def __init__(self) -> None:
        self.samplers: list = []  # (sampler, batch, rng) per stream
        self.need: list[int] = []
        self.block: list[int] = []

    def add(self, sampler, batch: int, rng, need: int, hint: int) -> int:
        """A stream of ``sampler``'s draws for ``batch``; one event takes at most ``need`` of them."""
        need = max(1, need)
        self.samplers.append((sampler, batch, rng))
        self.need.append(need)
        self.block.append(max(self.FIRST_BLOCK, 2 * need, min(hint, self.MAX_BLOCK)))
        return len(self.samplers) - 1

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``draw_buf`` and ``draw_i``, laid out, empty: the first ``refill`` fills every stream."""
        draw_i = np.zeros((len(self.samplers), 5), dtype=np.int64)
        draw_i[:, D_NEED] = self.need
        draw_i[:, D_CAPACITY] = np.add(self.need, self.block)
        draw_i[:, D_START] = np.cumsum(draw_i[:, D_CAPACITY]) - draw_i[:, D_CAPACITY]
        return np.zeros(max(int(draw_i[:, D_CAPACITY].sum()), 1)), draw_i

    def refill(self, arrays: Arrays) -> Arrays:
        draw_i, buf = arrays.draw_i, arrays.draw_buf
        left = draw_i[:, D_FILLED] - draw_i[:, D_POS]
        soon = np.flatnonzero(left < draw_i[:, D_NEED] + np.asarray(self.block) // 4)
        for k in soon:
            if draw_i[k, D_FILLED]:  # not the first block: a longer one
                self.block[k] = min(self.block[k] * 4, self.MAX_BLOCK)
        wanted = np.add(self.need, self.block)
        if (wanted > draw_i[:, D_CAPACITY]).any():  # some segments grow: lay the buffer out anew
            capacity = np.maximum(wanted, draw_i[:, D_CAPACITY])
            start = np.cumsum(capacity) - capacity
            grown = np.zeros(int(capacity.sum()))
            for k in range(len(capacity)):
                kept = buf[draw_i[k, D_START] + draw_i[k, D_POS]:draw_i[k, D_START] + draw_i[k, D_FILLED]]
                grown[start[k]:start[k] + len(kept)] = kept
            draw_i[:, D_FILLED] -= draw_i[:, D_POS]
            draw_i[:, D_POS] = 0
            draw_i[:, D_START], draw_i[:, D_CAPACITY] = start, capacity
            buf = grown
            arrays = arrays._replace(draw_buf=buf)
        for k in soon:
            start, pos, filled = draw_i[k, D_START], draw_i[k, D_POS], draw_i[k, D_FILLED]
            kept = filled - pos
            buf[start:start + kept] = buf[start + pos:start + filled]
            sampler, batch, rng = self.samplers[k]
            more = int(draw_i[k, D_CAPACITY]) - kept
            buf[start + kept:start + kept + more] = draw_block(sampler, batch, rng, more)
            draw_i[k, D_POS], draw_i[k, D_FILLED] = 0, kept + more
        arrays.g_i[G_LOW_DRAWS] = 0
        return arrays


def _uniform(batch: int, rng) -> float:
    """An executor-error draw: events.py's ``error_stream.random()``."""
    return rng.random()


def _grow(arrays: Arrays) -> Arrays:
    """Twice the attempt pool (the new records join the free list) and a heap to match."""
    att_i, att_f = arrays.att_i, arrays.att_f
    old = att_i.shape[0]
    new = 2 * old
    att_i = np.concatenate([att_i, np.zeros((old, att_i.shape[1]), dtype=np.int64)])
    att_f = np.concatenate([att_f, np.zeros((old, att_f.shape[1]))])
    att_i[old:, A_NEXT] = np.arange(old + 1, new + 1)
    att_i[new - 1, A_NEXT] = arrays.g_i[G_FREE_ATTEMPT]
    arrays.g_i[G_FREE_ATTEMPT] = old
    arrays.g_i[G_FREE_ATTEMPTS] += old
    heap_t, heap_i = arrays.heap_t, arrays.heap_i
    if 4 * arrays.g_i[G_HEAP_SIZE] > heap_t.shape[0] or heap_t.shape[0] < 2 * new:
        size = max(2 * heap_t.shape[0], 2 * new)
        heap_t = np.concatenate([heap_t, np.zeros(size - heap_t.shape[0])])
        heap_i = np.concatenate([heap_i, np.zeros((size - heap_i.shape[0], 3), dtype=np.int64)])
    return arrays._replace(att_i=att_i, att_f=att_f, heap_t=heap_t, heap_i=heap_i)


def run(config, arrivals_s, priorities, service_times, *, seed: int, window_s: float,
        error_rates=None, executors: str = "async", outside=None) -> CompiledRun:
    """``events.Simulation(...).run()``, compiled: the same arguments, the same counts and latencies.

    The compiled code sees the same arrays as ``arrays`` through a STATE (with NUMBA_DISABLE_JIT=1,
    for debugging, the loop runs as plain Python over a namespace of them).
    """
    arrays, streams = _build(config, arrivals_s, priorities, service_times, seed=seed, window_s=window_s,
                             error_rates=error_rates, executors=executors, outside=outside)
    state = _state(*arrays) if not numba_config.DISABLE_JIT else SimpleNamespace(**arrays._asdict())
    refills = growths = 0
    while True:
        status = _loop(state)
        if status == FINISHED:
            break
        if status == NEED_DRAWS:
            refills += 1
            before = arrays.draw_buf
            arrays = streams.refill(arrays)
            if arrays.draw_buf is not before:
                _set_draws(state, arrays.draw_buf)
        else:
            growths += 1
            arrays = _grow(arrays)
            _set_pool(state, arrays.att_i, arrays.att_f, arrays.heap_t, arrays.heap_i)
    return _totals(config, arrays, refills, growths)


def _build(config, arrivals_s, priorities, service_times, *, seed, window_s, error_rates, executors, outside):
    arrivals = np.array(arrivals_s, dtype=np.float64)  # a copy: writable and contiguous, as STATE says
    n = len(arrivals)
    engine_names = list(config.engines)
    engine_index = {name: k for k, name in enumerate(engine_names)}
    stages = list(config.stages)
    routing = config.routing
    default_attempts = routing.retry.max_attempts if routing and routing.retry else 1

    # lanes in events.py's order: each stage's own engine, then its fallback's
    lanes = []  # (stage index, engine name)
    for index, st in enumerate(stages):
        lanes.append((index, st.engine))
        if st.fallback:
            lanes.append((index, st.fallback.engine))
    max_batch = max((st.batch.size if st.batch else 1) for st in stages) if stages else 1
    room = max_batch + 2  # attempts one event may create: one per member of a batch, or one arrival's

    streams = _Streams()
    lane_i = np.zeros((len(lanes), 9), dtype=np.int64)
    lane_f = np.zeros((len(lanes), 2))
    for k, (index, engine) in enumerate(lanes):
        st, spec = stages[index], config.engines[engine]
        size = st.batch.size if st.batch else 1
        limit = min(st.max_concurrency or spec.max_concurrency, spec.max_concurrency)
        lane_i[k, [L_ENGINE, L_STAGE, L_BATCHED, L_BATCH_SIZE, L_LIMIT]] = \
            engine_index[engine], index, st.batch is not None, size, limit
        lane_f[k, L_MAX_WAIT] = st.batch.max_wait_ms / 1000 if st.batch else 0.0
        lane_f[k, L_TIMER_AT] = math.inf
        sampler = service_times[(st.name, engine)]
        queue = max(spec.max_queue, 1)
        for batch in range(1, size + 1):
            # one event starts at most `limit` executions on a lane, and at most (queued + new) // batch of size batch
            stream_id = streams.add(sampler, batch, stream(seed, "service", k, batch),
                                    need=min(limit, (queue + room) // batch), hint=n // (4 * size))
            if batch == 1:
                lane_i[k, L_STREAM] = stream_id

    eng_i = np.zeros((len(engine_names), 8), dtype=np.int64)
    eng_lanes = []
    for e, name in enumerate(engine_names):
        spec = config.engines[name]
        mine = [k for k, (_, engine) in enumerate(lanes) if engine == name]
        eng_i[e, [E_MAX_CONCURRENCY, E_MAX_QUEUE, E_FIRST_LANE, E_END_LANE]] = \
            spec.max_concurrency, spec.max_queue, len(eng_lanes), len(eng_lanes) + len(mine)
        eng_lanes += mine

    windows: list[float] = []  # widths

    def window(seconds: float) -> int:
        if not seconds > 0:  # as SlidingWindow refuses it
            raise ValueError(f"window_s must be more than 0, not {seconds!r}")
        windows.append(seconds / BUCKETS_PER_WINDOW)
        return len(windows) - 1

    stage_i = np.zeros((len(stages), 17), dtype=np.int64)
    stage_f = np.zeros((len(stages), 7))
    lane_of = {}
    for k, (index, engine) in enumerate(lanes):
        lane_of.setdefault(index, []).append(k)
    for index, st in enumerate(stages):
        fallback, b = st.fallback, st.breaker
        own = lane_of[index]
        stage_i[index, S_LANE] = own[0]
        stage_i[index, S_FALLBACK] = own[1] if fallback else -1
        stage_i[index, S_MAX_ATTEMPTS] = st.retry.max_attempts if st.retry else default_attempts
        stage_i[index, S_QUEUE_OVER] = fallback.when.queue_len_over if fallback and fallback.when else -1
        stage_i[index, S_OTHERWISE_REJECT] = (fallback.otherwise if fallback else "reject") == "reject"
        stage_i[index, S_CAP] = window(window_s) if fallback else -1
        stage_f[index, S_MAX_RATIO] = fallback.max_ratio if fallback else 0.0
        stage_i[index, S_BREAKER] = window(b.window_s) if b else -1
        if b:
            stage_f[index, [S_ERROR_RATE_OVER, S_MIN_REQUESTS, S_OPEN_S]] = b.error_rate_over, b.min_requests, b.open_s
        stage_f[index, S_TIMEOUT] = st.timeout_ms / 1000
        rate = (error_rates or {}).get(st.name, 0.0)
        stage_f[index, S_ERROR_RATE] = rate
        batch = max(stages[index].batch.size if stages[index].batch else 1, 1)
        stage_i[index, S_ERROR_STREAM] = streams.add(_uniform, 1, stream(seed, "errors", index), need=batch,
                                                     hint=int(n * rate) // 4) if rate else -1

    g_i = np.zeros(G_FIELDS, dtype=np.int64)
    g_f = np.zeros(4)
    g_i[G_BUDGET] = window(window_s) if routing and routing.retry else -1
    g_f[G_BUDGET_RATIO] = routing.retry.budget_ratio if routing and routing.retry else 0.0
    g_i[G_SHED_BY_PRIORITY] = bool(routing and routing.shed and routing.shed.by == "priority")
    g_i[G_STOPPABLE] = executors == "async"
    g_i[G_OUTSIDE_STREAM] = streams.add(outside, 1, stream(seed, "outside"), need=max_batch,
                                        hint=n // 4) if outside is not None else -1
    g_i[G_ROOM] = room

    if priorities is not None:
        levels, ranks = np.unique(np.asarray(priorities), return_inverse=True)  # the order is all that matters
        req_priority = np.ascontiguousarray(ranks.reshape(-1), dtype=np.int64)
        levels = max(len(levels), 1)
    else:
        req_priority, levels = np.zeros(n, dtype=np.int64), 1
    queues = np.full((len(lanes), levels, 3), -1, dtype=np.int64)
    queues[:, :, Q_LEN] = 0

    pool = 1024
    att_i = np.zeros((pool, 10), dtype=np.int64)
    att_i[:, A_NEXT] = np.arange(1, pool + 1)
    att_i[-1, A_NEXT] = -1
    g_i[G_FREE_ATTEMPT], g_i[G_FREE_ATTEMPTS] = 0, pool
    # a batch record per busy slot, and the one whose members are moving on as it ends
    slots = int(sum(spec.max_concurrency for spec in config.engines.values()))
    bat_i = np.zeros((slots + 1, 4), dtype=np.int64)
    bat_i[:, B_FIRST] = np.arange(1, len(bat_i) + 1)
    bat_i[-1, B_FIRST] = -1
    heap_size = SAMPLES + len(bat_i) + 2 * pool + 4 * len(lanes) + 64
    heap_t, heap_i = np.zeros(heap_size), np.zeros((heap_size, 3), dtype=np.int64)
    sampled_at = np.zeros(SAMPLES)
    if n:  # the 200 sample events, pushed first (sequences 0-199): in time order, already a heap
        step = max(float(arrivals[-1]) - float(arrivals[0]), 1e-9) / SAMPLES
        first = float(arrivals[0])
        heap_t[:SAMPLES] = [first + k * step for k in range(SAMPLES)]
        heap_i[:SAMPLES, H_SEQ] = np.arange(SAMPLES)
        heap_i[:SAMPLES, H_KIND] = SAMPLE
        heap_i[:SAMPLES, H_WHAT] = -1
        g_i[G_HEAP_SIZE] = g_i[G_SEQ] = SAMPLES
    g_i[G_FREE_BATCH] = 0
    draw_buf, draw_i = streams.arrays()
    arrays = Arrays(
        lane_i=lane_i, lane_f=lane_f, eng_i=eng_i, eng_f=np.zeros((len(engine_names), 1)),
        eng_lanes=np.array(eng_lanes, dtype=np.int64), stage_i=stage_i, stage_f=stage_f,
        stage_latencies=np.zeros((len(stages), n)),
        win_buckets=np.zeros((len(windows), BUCKETS, 2)), win_totals=np.zeros((len(windows), 2)),
        # SlidingWindow starts at the bucket of the clock's time when it is made: 0.0
        win_index=np.array([math.floor(0.0 / width) for width in windows], dtype=np.int64),
        win_width=np.array(windows, dtype=np.float64), queues=queues, att_i=att_i, att_f=np.zeros((pool, 2)),
        bat_i=bat_i, bat_f=np.zeros(len(bat_i)), heap_t=heap_t, heap_i=heap_i, arrivals=arrivals,
        req_entered=np.zeros(n), req_attempt=np.zeros(n, dtype=np.int64), req_priority=req_priority,
        latencies=np.zeros(n), sampled_at=sampled_at,
        samples=np.zeros((SAMPLES, len(engine_names), 2), dtype=np.int64),
        draw_buf=draw_buf, draw_i=draw_i, g_i=g_i, g_f=g_f)
    arrays.g_i[G_LOW_DRAWS] = 1  # nothing drawn yet: the first refill fills every stream
    return streams.refill(arrays), streams


def _totals(config, s: Arrays, refills: int, growths: int) -> CompiledRun:
    stages = [_StageTotals(name=st.name, entered=int(row[S_ENTERED]), failovers=int(row[S_FAILOVERS]),
                           retries=int(row[S_RETRIES]), timeouts=int(row[S_TIMEOUTS]), errors=int(row[S_ERRORS]),
                           breaker_opened=int(row[S_OPENED]), latencies=s.stage_latencies[k, :row[S_LATENCIES]])
              for k, (st, row) in enumerate(zip(config.stages, s.stage_i))]
    engines = {name: _EngineTotals(name=name, max_concurrency=int(s.eng_i[e, E_MAX_CONCURRENCY]),
                                   busy_s=float(s.eng_f[e, E_BUSY_S]), executions=int(s.eng_i[e, E_EXECUTIONS]),
                                   items=int(s.eng_i[e, E_ITEMS]))
               for e, name in enumerate(config.engines)}
    taken = int(s.g_i[G_SAMPLES])
    samples = {name: (s.samples[:taken, e, 0].tolist(), s.samples[:taken, e, 1].tolist())
               for e, name in enumerate(config.engines)}
    g = s.g_i
    outcomes = {name: int(g[G_OUTCOMES + k]) for k, name in enumerate(("ok", "rejected", "timeout", "error"))}
    seen = sorted((int(g[G_REJECT_ORDER + k]), k) for k in range(len(REASONS)) if g[G_REJECTS + k])
    rejects: dict[str, Any] = {REASONS[k]: int(g[G_REJECTS + k]) for _, k in seen}
    return CompiledRun(stages=stages, engines=engines, samples=samples, sampled_at=s.sampled_at[:taken].tolist(),
                       outcomes=outcomes, rejects=rejects, latencies=s.latencies[:int(g[G_LATENCIES])],
                       end=float(s.g_f[G_END]), last_done=float(s.g_f[G_LAST_DONE]), refills=refills,
                       growths=growths)
