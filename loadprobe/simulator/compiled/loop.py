"""events.py's ``Simulation`` in numba: the event loop, attempts and what each attempt's end means.

A port, method for method (``_run``, ``_shed``, ``_pump``, ``_start``, ``_on_done``,
``_on_timeout``, ``_attempt``, ``_enter``, ``_failed``, ``_succeeded``, ``run``), that asks
the ported policy core (``rules``, ``scheduling``) for every decision, as events.py asks
``loadprobe.route.policy``. Attempts are records in a pool with a free list, freed once no
pending event or running batch refers to them (``A_REFS``).

Draws: events.py draws every service time from a stream per (lane, batch size), errors from a
stream per stage and the time outside the stages from one more stream. This loop takes them
from buffers that Python fills by calling the very same samplers on the very same streams
(``driver.Streams``). Before each event every buffer holds at least what one event can take;
when one runs low ``run_events`` returns ``NEED_DRAWS``, Python refills, and the loop resumes
from its arrays. The attempt pool grows the same way (``NEED_ROOM``).

Usage (from Python, through ``driver.run``)::

    status = run_events(state)    # FINISHED, NEED_DRAWS or NEED_ROOM
"""

from __future__ import annotations

from numba import njit
from numba.types import boolean, int64

from .heap import next_seq, pop, push
from .layout import (A_DEADLINE, A_ENQUEUED, A_LANE, A_NEXT, A_OWN, A_PREV, A_PRIORITY, A_REFS, A_REQUEST, A_SEQ,
                     A_STAGE, A_STATE, B_CUT, B_FIRST, B_LANE, B_SIZE, D_FILLED, D_NEED, D_POS, D_START, DONE, E_BUSY,
                     E_BUSY_S, E_EXECUTIONS, E_ITEMS, E_WAITING, ERROR, EVICT, FINISHED, G_BUDGET, G_END,
                     G_FREE_ATTEMPT, G_FREE_ATTEMPTS, G_FREE_BATCH, G_HEAP_SIZE, G_LAST_DONE, G_LATENCIES, G_LOW_DRAWS,
                     G_NEXT_ARRIVAL, G_NOW, G_OUTCOMES, G_OUTSIDE_STREAM, G_REJECT_KINDS, G_REJECT_ORDER, G_REJECTS,
                     G_ROOM, G_SAMPLES, G_STOPPABLE, L_ARMED, L_BATCHED, L_ENGINE, L_STAGE, L_STREAM, L_WAITING, MOVE,
                     NEED_DRAWS, NEED_ROOM, OK, OVER, Q_HEAD, Q_LEN, QUEUE_FULL, QUEUE_TIMEOUT, QUEUED, REJECT,
                     REJECTED, RUNNING, S_ERROR_RATE, S_ERROR_STREAM, S_ENTERED, S_ERRORS, S_FAILOVERS, S_FALLBACK,
                     S_LANE, S_LATENCIES, S_RETRIES, S_TIMEOUT, S_TIMEOUTS, SAMPLE, SHED, STATE, TIMED_OUT, TIMEOUT,
                     W_REQUESTS, jit_helper)
from .rules import may_retry, record, release, steer, window_add
from .scheduling import admit, enqueue, evict_lowest, next_batch, remove, slot_end, slot_start, starts_now, woke

__all__ = ["run_events"]


# -- attempts, draws, rejects ------------------------------------------------------------------------------

@jit_helper(int64, int64, int64, int64, int64, int64)
def _new_attempt(s, request, stage, lane, priority, own, seq):
    """An attempt of ``request`` at ``stage`` on ``lane``, queued now, due ``timeout_ms`` from now."""
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


@jit_helper(int64)
def _free(s, a):
    s.att_i[a, A_NEXT] = s.g_i[G_FREE_ATTEMPT]
    s.g_i[G_FREE_ATTEMPT] = a
    s.g_i[G_FREE_ATTEMPTS] += 1


@jit_helper(int64)
def _over(s, a):
    """The attempt is over; its slot is reused once no pending event or running batch holds it."""
    s.att_i[a, A_STATE] = OVER
    if s.att_i[a, A_REFS] == 0:
        _free(s, a)


@jit_helper(int64)
def _unref(s, a):
    s.att_i[a, A_REFS] -= 1
    if s.att_i[a, A_REFS] == 0 and s.att_i[a, A_STATE] == OVER:
        _free(s, a)


@jit_helper(int64)
def _draw(s, k):
    """The next draw of stream ``k``; flags the buffers for a refill once it holds less than one event may take."""
    d = s.draw_i
    pos = d[k, D_POS]
    value = s.draw_buf[d[k, D_START] + pos]
    d[k, D_POS] = pos + 1
    if d[k, D_FILLED] - pos - 1 < d[k, D_NEED]:
        s.g_i[G_LOW_DRAWS] = 1
    return value


@jit_helper(int64, int64)
def _reject(s, request, reason):
    g = s.g_i
    if g[G_REJECTS + reason] == 0:  # rejects keep the order reasons first occurred in, as a dict does
        g[G_REJECT_ORDER + reason] = g[G_REJECT_KINDS]
        g[G_REJECT_KINDS] += 1
    g[G_REJECTS + reason] += 1
    g[G_OUTCOMES + REJECTED] += 1
    s.g_f[G_END] = s.g_f[G_NOW]


# -- an engine (events.py: _arm, _start, _pump, _shed, _run) -------------------------------------------------

@jit_helper(int64)
def _arm(s, lane):
    """One queue timeout per lane, for its oldest queued attempt (the lowest sequence)."""
    oldest = -1
    for priority in range(s.queues.shape[1]):
        if s.queues[lane, priority, Q_LEN]:
            head = s.queues[lane, priority, Q_HEAD]
            if oldest < 0 or s.att_i[head, A_SEQ] < s.att_i[oldest, A_SEQ]:
                oldest = head
    push(s, s.att_f[oldest, A_DEADLINE], s.att_i[oldest, A_SEQ], QUEUE_TIMEOUT, oldest)
    s.att_i[oldest, A_REFS] += 1
    s.lane_i[lane, L_ARMED] = 1


@jit_helper(int64, int64, int64)
def _start(s, lane, first, count):
    """Run the linked attempts from ``first`` (their slot taken): draw the time, schedule the end and timeouts."""
    engine = s.lane_i[lane, L_ENGINE]
    s.eng_i[engine, E_EXECUTIONS] += 1
    s.eng_i[engine, E_ITEMS] += count
    now = s.g_f[G_NOW]
    end = now + _draw(s, s.lane_i[lane, L_STREAM] + count - 1)
    last_deadline = s.att_f[first, A_DEADLINE]  # policy.last_deadline
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
            push(s, s.att_f[a, A_DEADLINE], s.att_i[a, A_SEQ], TIMEOUT, a)
            s.att_i[a, A_REFS] += 1
        s.att_i[a, A_REFS] += 1  # held by the batch until it is done
        a = s.att_i[a, A_NEXT]
    b = s.g_i[G_FREE_BATCH]
    if b < 0:
        raise RuntimeError("the compiled simulator ran out of batch records")
    s.g_i[G_FREE_BATCH] = s.bat_i[b, B_FIRST]
    s.bat_i[b, B_LANE], s.bat_i[b, B_FIRST], s.bat_i[b, B_SIZE], s.bat_i[b, B_CUT] = lane, first, count, cut
    s.bat_f[b] = now
    push(s, done, next_seq(s), DONE, b)


@jit_helper(int64)
def _pump(s, engine):
    while True:
        lane, first, count = next_batch(s, engine)
        if lane < 0:
            return
        _start(s, lane, first, count)


@jit_helper(int64)
def _shed(s, engine):
    victim = evict_lowest(s, engine)
    request, index, own = s.att_i[victim, A_REQUEST], s.att_i[victim, A_STAGE], s.att_i[victim, A_OWN]
    _over(s, victim)
    if own != 0:
        release(s, index)
    _reject(s, request, SHED)


@jit_helper(int64, int64, int64, int64, int64)
def _run(s, lane, request, index, priority, own):
    engine = s.lane_i[lane, L_ENGINE]
    if not s.lane_i[lane, L_BATCHED] and starts_now(s, lane):
        # without the queue; an async execution ends by its own deadline, so it needs no timeout event
        seq = -1 if s.g_i[G_STOPPABLE] else next_seq(s)
        a = _new_attempt(s, request, index, lane, priority, own, seq)
        slot_start(s, lane)
        _start(s, lane, a, 1)
        return
    decision = admit(s, lane, priority)
    if decision == REJECT:
        if own != 0:
            release(s, index)
        _reject(s, request, QUEUE_FULL)
        return
    if decision == EVICT:
        _shed(s, engine)
    a = _new_attempt(s, request, index, lane, priority, own, next_seq(s))
    enqueue(s, lane, priority, a)
    if not s.lane_i[lane, L_ARMED]:
        _arm(s, lane)
    _pump(s, engine)


# -- the router's decisions (events.py: _attempt, _enter, _failed, _succeeded) -----------------------------

@jit_helper(int64, int64)
def _attempt(s, request, index):
    lane = s.stage_i[index, S_LANE]
    priority = s.req_priority[request]
    action, reason = steer(s, index, lane, priority)
    if action == REJECT:
        _reject(s, request, reason)
    elif action == MOVE:
        s.stage_i[index, S_FAILOVERS] += 1
        _run(s, s.stage_i[index, S_FALLBACK], request, index, priority, 0)
    else:
        _run(s, lane, request, index, priority, 1)


@jit_helper(int64, int64)
def _enter(s, request, index):
    s.req_entered[request] = s.g_f[G_NOW]
    s.req_attempt[request] = 1
    s.stage_i[index, S_ENTERED] += 1
    _attempt(s, request, index)


@jit_helper(int64, boolean)
def _failed(s, a, error):
    """An attempt timed out (or raised): tell the breaker, then retry within max_attempts and the budget."""
    request, index, own = s.att_i[a, A_REQUEST], s.att_i[a, A_STAGE], s.att_i[a, A_OWN]
    _over(s, a)
    if error:
        s.stage_i[index, S_ERRORS] += 1
    else:
        s.stage_i[index, S_TIMEOUTS] += 1
    if own != 0:
        record(s, index, False)
    if not may_retry(s, index, s.req_attempt[request]):
        s.g_i[G_OUTCOMES + (ERROR if error else TIMED_OUT)] += 1
        s.g_f[G_END] = s.g_f[G_NOW]
        return
    s.req_attempt[request] += 1
    s.stage_i[index, S_RETRIES] += 1
    _attempt(s, request, index)


@jit_helper(int64)
def _succeeded(s, a):
    request, index, own = s.att_i[a, A_REQUEST], s.att_i[a, A_STAGE], s.att_i[a, A_OWN]
    _over(s, a)
    if own != 0:
        record(s, index, True)
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


# -- events (events.py: _on_done, _on_timeout, _sample, run) ------------------------------------------------

@jit_helper(int64)
def _on_done(s, b):
    lane, first, cut = s.bat_i[b, B_LANE], s.bat_i[b, B_FIRST], s.bat_i[b, B_CUT]
    now = s.g_f[G_NOW]
    s.g_f[G_LAST_DONE] = now
    engine = s.lane_i[lane, L_ENGINE]
    slot_end(s, lane)
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


@jit_helper(int64)
def _on_timeout(s, a):
    if s.att_i[a, A_STATE] == QUEUED:
        remove(s, a)
    _failed(s, a, False)


@jit_helper()
def _sample(s):
    k = s.g_i[G_SAMPLES]
    s.sampled_at[k] = s.g_f[G_NOW]
    for engine in range(s.eng_i.shape[0]):
        s.samples[k, engine, 0] = s.eng_i[engine, E_WAITING]
        s.samples[k, engine, 1] = s.eng_i[engine, E_BUSY]
    s.g_i[G_SAMPLES] = k + 1


@njit((STATE,), cache=True)
def run_events(s):
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
                window_add(s, g[G_BUDGET], W_REQUESTS)  # PipelineRules.note_request
            _enter(s, i, 0)
            g[G_NEXT_ARRIVAL] = i + 1
            continue
        if g[G_HEAP_SIZE] == 0:
            return FINISHED
        now, _, kind, what = pop(s)
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
            woke(s, what)
            _pump(s, s.lane_i[what, L_ENGINE])
