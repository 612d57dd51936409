"""The routing rules of ``loadprobe.route.policy`` (rules.py, windows.py) in numba: steering, breakers, retries.

A port, function for function, of ``StageRules`` (``steer``, ``record``, ``release``,
``may_retry``) and of the ``SlidingWindow`` counts behind ``FailoverCap``, ``Breaker`` and
``RetryBudget``, with the same float operations in the same order, so every decision and every
count is the policy core's. A window is row ``w`` of ``win_buckets``/``win_totals`` (two sums:
requests, and moves, failures or retries); a stage's cap and breaker windows and the budget's
are numbered in ``driver.build``. tests/simulator/test_simulate_compiled.py holds the port to
the Python simulator, which asks the policy core itself.

Usage (compiled code)::

    action, reason = steer(s, stage, lane, priority)      # RUN | MOVE | REJECT, a reject reason
    record(s, stage, False)                               # an own-engine attempt failed
    if may_retry(s, stage, attempt): ...
"""

from __future__ import annotations

import math

from numba.types import boolean, float64, int64

from .layout import (BREAKER_OPEN, BUCKETS, CLOSED, E_WAITING, FAILOVER_CAP, G_BUDGET, G_BUDGET_RATIO, G_NOW,
                     HALF_OPEN, L_ENGINE, MOVE, OPEN, QUEUE_FULL, REJECT, RUN, S_BREAKER, S_BREAKER_STATE, S_CAP,
                     S_ERROR_RATE_OVER, S_MAX_ATTEMPTS, S_MAX_RATIO, S_MIN_REQUESTS, S_OPEN_S, S_OPENED, S_OPENED_AT,
                     S_OTHERWISE_REJECT, S_QUEUE_OVER, S_TRIAL, W_OTHER, W_REQUESTS, jit_helper)
from .scheduling import admit

__all__ = ["may_retry", "overflowed", "record", "release", "steer", "window_add"]


# -- SlidingWindow, RatioBudget.try_take (the failover cap, the retry budget) -------------------------------

@jit_helper(int64)
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


@jit_helper(int64, int64)
def window_add(s, w, field):
    """SlidingWindow.add(field): count one (a request, or a move, failure or retry)."""
    bucket = _advance(s, w)
    s.win_buckets[w, bucket, field] += 1.0
    s.win_totals[w, field] += 1.0


@jit_helper(int64, float64)
def _within(s, w, ratio):
    """RatioBudget.try_take: one more within ratio x requests? If so, count it."""
    _advance(s, w)
    if s.win_totals[w, W_OTHER] + 1 > ratio * s.win_totals[w, W_REQUESTS]:
        return False
    window_add(s, w, W_OTHER)
    return True


# -- Breaker ---------------------------------------------------------------------------------------------

@jit_helper(int64)
def _breaker_state(s, stage):
    """Breaker._state_now: an open breaker turns half-open once open_s has passed."""
    if s.stage_i[stage, S_BREAKER_STATE] == OPEN and \
            s.g_f[G_NOW] - s.stage_f[stage, S_OPENED_AT] >= s.stage_f[stage, S_OPEN_S]:
        s.stage_i[stage, S_BREAKER_STATE] = HALF_OPEN
        s.stage_i[stage, S_TRIAL] = 0
    return s.stage_i[stage, S_BREAKER_STATE]


@jit_helper(int64)
def _breaker_allow(s, stage):
    state = _breaker_state(s, stage)
    if state == CLOSED:
        return True
    if state == HALF_OPEN and not s.stage_i[stage, S_TRIAL]:
        s.stage_i[stage, S_TRIAL] = 1
        return True
    return False


@jit_helper(int64)
def _breaker_open(s, stage):
    s.stage_i[stage, S_BREAKER_STATE] = OPEN
    s.stage_f[stage, S_OPENED_AT] = s.g_f[G_NOW]
    s.stage_i[stage, S_TRIAL] = 0
    s.stage_i[stage, S_OPENED] += 1


@jit_helper(int64, boolean)
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
    window_add(s, w, W_REQUESTS)
    if not ok:
        window_add(s, w, W_OTHER)
        _advance(s, w)
        requests, failures = s.win_totals[w, W_REQUESTS], s.win_totals[w, W_OTHER]
        if requests >= s.stage_f[stage, S_MIN_REQUESTS] and failures / requests > s.stage_f[stage, S_ERROR_RATE_OVER]:
            _breaker_open(s, stage)


# -- StageRules --------------------------------------------------------------------------------------------

@jit_helper(int64, boolean)
def record(s, stage, ok):
    """StageRules.record: an attempt that ran on the stage's own engine ended (ok, or an error or timeout)."""
    if s.stage_i[stage, S_BREAKER] >= 0:
        _breaker_record(s, stage, ok)


@jit_helper(int64)
def release(s, stage):
    """StageRules.release: an attempt steered to the stage's own engine never ran there (Breaker.release)."""
    if s.stage_i[stage, S_BREAKER] >= 0:
        s.stage_i[stage, S_TRIAL] = 0


@jit_helper(int64)
def overflowed(s, stage):
    """StageRules.overflowed: the stage's own engine cannot take the attempt: MOVE within the cap, else REJECT."""
    release(s, stage)
    cap = s.stage_i[stage, S_CAP]
    if cap < 0:
        return REJECT, QUEUE_FULL
    if _within(s, cap, s.stage_f[stage, S_MAX_RATIO]):
        return MOVE, -1
    return REJECT, FAILOVER_CAP


@jit_helper(int64, int64, int64)
def steer(s, stage, lane, priority):
    """StageRules.steer: (RUN | MOVE | REJECT, reason)."""
    cap, breaker = s.stage_i[stage, S_CAP], s.stage_i[stage, S_BREAKER]
    ratio = s.stage_f[stage, S_MAX_RATIO]
    if cap >= 0:
        window_add(s, cap, W_REQUESTS)
    if breaker >= 0 and not _breaker_allow(s, stage):
        if cap < 0 or not _within(s, cap, ratio):
            return REJECT, BREAKER_OPEN
        return MOVE, -1
    if cap >= 0:
        if admit(s, lane, priority) == REJECT:
            return overflowed(s, stage)
        over_at = s.stage_i[stage, S_QUEUE_OVER]
        if over_at >= 0 and s.eng_i[s.lane_i[lane, L_ENGINE], E_WAITING] > over_at:
            if _within(s, cap, ratio):
                release(s, stage)
                return MOVE, -1
            if s.stage_i[stage, S_OTHERWISE_REJECT] != 0:
                release(s, stage)
                return REJECT, FAILOVER_CAP
    return RUN, -1


@jit_helper(int64, int64)
def may_retry(s, stage, attempt):
    """StageRules.may_retry: another attempt after attempt number ``attempt`` failed, within the budget?"""
    if attempt >= s.stage_i[stage, S_MAX_ATTEMPTS]:
        return False
    budget = s.g_i[G_BUDGET]
    return budget < 0 or _within(s, budget, s.g_f[G_BUDGET_RATIO])
