"""An engine's slots and queue (``loadprobe.route.policy.Slots``) in numba: admission, shedding, batches.

A port, function for function, of ``Slots`` -- ``starts_now``, ``admit``, ``enqueue``,
``remove``, ``evict_lowest``, ``take``, ``ready_lane``, ``next_batch``, ``woke``, ``start``
and ``end`` (here ``slot_start``, ``slot_end``) -- over the state's tables. A queue (lane,
priority) is a doubly linked list through the pool of attempt records: taking from the head,
shedding the tail and a timeout's removal from anywhere are O(1), and memory follows what is
queued rather than ``max_queue`` (up to ten million) x lanes x priorities. A lane's wake-up
(its batching window opens) is a WAKE event on the heap, as in events.py.

Usage (compiled code)::

    decision = admit(s, lane, priority)     # ADMIT | EVICT (evict_lowest first) | REJECT
    enqueue(s, lane, priority, attempt)
    lane, first, count = next_batch(s, engine)   # lane -1: nothing starts now
"""

from __future__ import annotations

import math

from numba.types import int64

from .heap import next_seq, push
from .layout import (A_ENQUEUED, A_LANE, A_NEXT, A_PREV, A_PRIORITY, ADMIT, E_BUSY, E_END_LANE, E_FIRST_LANE,
                     E_MAX_CONCURRENCY, E_MAX_QUEUE, E_WAITING, EVICT, G_NOW, G_SHED_BY_PRIORITY, L_BATCH_SIZE, L_BUSY,
                     L_ENGINE, L_LIMIT, L_MAX_WAIT, L_TIMER_AT, L_WAITING, Q_HEAD, Q_LEN, Q_TAIL, REJECT, WAKE,
                     jit_helper)

__all__ = ["admit", "enqueue", "evict_lowest", "next_batch", "remove", "slot_end", "slot_start", "starts_now",
           "woke"]


# -- admission -------------------------------------------------------------------------------------------

@jit_helper(int64)
def starts_now(s, lane):
    """Slots.starts_now: a free slot, the lane under its limit, nobody waiting ahead."""
    engine = s.lane_i[lane, L_ENGINE]
    return s.eng_i[engine, E_BUSY] < s.eng_i[engine, E_MAX_CONCURRENCY] and \
        s.lane_i[lane, L_BUSY] < s.lane_i[lane, L_LIMIT] and not s.eng_i[engine, E_WAITING]


@jit_helper(int64)
def _lowest_waiting(s, engine):
    """Slots.lowest_waiting: the lowest priority waiting on any of the engine's lanes, -1 when none waits."""
    lowest = -1
    for k in range(s.eng_i[engine, E_FIRST_LANE], s.eng_i[engine, E_END_LANE]):
        lane = s.eng_lanes[k]
        for priority in range(s.queues.shape[1]):
            if s.queues[lane, priority, Q_LEN]:
                if lowest < 0 or priority < lowest:
                    lowest = priority
                break
    return lowest


@jit_helper(int64, int64)
def admit(s, lane, priority):
    """Slots.admit (and admission()): ADMIT, EVICT (only after evict_lowest) or REJECT."""
    engine = s.lane_i[lane, L_ENGINE]
    if s.eng_i[engine, E_WAITING] < s.eng_i[engine, E_MAX_QUEUE] or starts_now(s, lane):
        return ADMIT
    lowest = _lowest_waiting(s, engine)
    if s.g_i[G_SHED_BY_PRIORITY] != 0 and lowest >= 0 and lowest < priority:
        return EVICT
    return REJECT


# -- the queue ---------------------------------------------------------------------------------------------

@jit_helper(int64, int64, int64)
def enqueue(s, lane, priority, a):
    """Slots.enqueue: attempt ``a`` waits at the tail of (lane, priority)."""
    tail = s.queues[lane, priority, Q_TAIL]
    s.att_i[a, A_PREV], s.att_i[a, A_NEXT] = tail, -1
    if tail >= 0:
        s.att_i[tail, A_NEXT] = a
    else:
        s.queues[lane, priority, Q_HEAD] = a
    s.queues[lane, priority, Q_TAIL] = a
    s.queues[lane, priority, Q_LEN] += 1
    s.lane_i[lane, L_WAITING] += 1
    s.eng_i[s.lane_i[lane, L_ENGINE], E_WAITING] += 1


@jit_helper(int64)
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


@jit_helper(int64)
def remove(s, a):
    """Slots.remove: a waiting attempt leaves the queue (it timed out there)."""
    lane = s.att_i[a, A_LANE]
    _unlink(s, a)
    s.lane_i[lane, L_WAITING] -= 1
    s.eng_i[s.lane_i[lane, L_ENGINE], E_WAITING] -= 1


@jit_helper(int64)
def evict_lowest(s, engine):
    """Slots.evict_lowest: remove and return the newest attempt of the lowest priority (the first such lane's)."""
    found, lowest = -1, -1
    for k in range(s.eng_i[engine, E_FIRST_LANE], s.eng_i[engine, E_END_LANE]):
        lane = s.eng_lanes[k]
        for priority in range(s.queues.shape[1]):
            if s.queues[lane, priority, Q_LEN]:
                if found < 0 or priority < lowest:
                    found, lowest = lane, priority
                break
    victim = s.queues[found, lowest, Q_TAIL]
    remove(s, victim)
    return victim


@jit_helper(int64)
def _take(s, lane):
    """Slots.take: up to a batch of the lane's attempts, highest priority then oldest first: (first, count), linked."""
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


# -- what starts next --------------------------------------------------------------------------------------

@jit_helper(int64)
def _ready_lane(s, engine):
    """Slots.ready_lane: highest priority waiting, then oldest; a batch waits out its window (a WAKE event)."""
    best, best_priority, best_oldest = -1, -1, 0.0
    now = s.g_f[G_NOW]
    full = s.eng_i[engine, E_WAITING] >= s.eng_i[engine, E_MAX_QUEUE]
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
        if s.lane_i[lane, L_WAITING] < s.lane_i[lane, L_BATCH_SIZE] and not full:
            opens = oldest + s.lane_f[lane, L_MAX_WAIT]
            if now < opens:
                if opens < s.lane_f[lane, L_TIMER_AT]:
                    s.lane_f[lane, L_TIMER_AT] = opens
                    push(s, opens, next_seq(s), WAKE, lane)
                continue
        # key (highest priority, -oldest), the first lane winning ties
        if best < 0 or top > best_priority or (top == best_priority and -oldest > -best_oldest):
            best, best_priority, best_oldest = lane, top, oldest
    return best


@jit_helper(int64)
def slot_start(s, lane):
    """Slots.start: an execution of ``lane`` takes a slot."""
    s.eng_i[s.lane_i[lane, L_ENGINE], E_BUSY] += 1
    s.lane_i[lane, L_BUSY] += 1


@jit_helper(int64)
def slot_end(s, lane):
    """Slots.end: an execution of ``lane`` gives its slot back."""
    s.eng_i[s.lane_i[lane, L_ENGINE], E_BUSY] -= 1
    s.lane_i[lane, L_BUSY] -= 1


@jit_helper(int64)
def next_batch(s, engine):
    """Slots.next_batch: (lane, first attempt, count) of the next execution, its slot taken; lane -1: none now."""
    if s.eng_i[engine, E_WAITING] == 0 or s.eng_i[engine, E_BUSY] >= s.eng_i[engine, E_MAX_CONCURRENCY]:
        return -1, -1, 0
    lane = _ready_lane(s, engine)
    if lane < 0:
        return -1, -1, 0
    first, count = _take(s, lane)
    slot_start(s, lane)
    return lane, first, count


@jit_helper(int64)
def woke(s, lane):
    """Slots.woke: the lane's wake-up due now has come."""
    if s.lane_f[lane, L_TIMER_AT] == s.g_f[G_NOW]:
        s.lane_f[lane, L_TIMER_AT] = math.inf
