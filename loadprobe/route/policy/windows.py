"""The rules that count over a sliding window: the failover cap and the retry budget (one ``RatioBudget``), the breaker.

Each is told what happened and when (through the ``clock`` it was given) and answers yes or
no; every threshold comes from the pipeline's config, the objects only keep counts. They are
thread-safe: one instance per stage (or per router) is shared by every task and thread.

Usage::

    cap = FailoverCap(ratio=0.3, window_s=10)   # a RatioBudget, as RetryBudget is
    cap.note_request()                 # every request of the stage
    if overloaded and cap.try_take():  # True while moved <= 30% of the window's requests
        ...

    breaker = Breaker(error_rate_over=0.5, window_s=10, min_requests=20, open_s=5)
    if breaker.allow():                # False while open; one trial at a time when half-open
        breaker.record(ok=True)        # ... or breaker.release() if the trial never ran

    budget = RetryBudget(ratio=0.1, window_s=10)
    budget.note_request()
    if budget.try_take(): ...          # retries stay within 10% of the window's requests
"""

from __future__ import annotations

import enum
import math
import threading
import time
from collections.abc import Callable

__all__ = ["BUCKETS_PER_WINDOW", "Breaker", "BreakerState", "Clock", "FailoverCap", "RatioBudget", "RetryBudget",
           "SlidingWindow"]

Clock = Callable[[], float]

# How finely a window slides: it forgets its oldest 1/20 at a time. A resolution, not a rule:
# the thresholds compared against the window's counts all come from the config.
BUCKETS_PER_WINDOW = 20


class SlidingWindow:
    """Sums of a few quantities over the last ``window_s`` seconds (not thread-safe by itself).

    ``add(0)`` counts one of quantity 0, ``add(2, 0.004)`` adds 0.004 to quantity 2;
    ``totals()`` gives the sums over the window. The window moves in steps of
    ``window_s / BUCKETS_PER_WINDOW``, so memory and time per call stay constant.
    """

    __slots__ = ("_clock", "_width", "_buckets", "_totals", "_index")

    def __init__(self, window_s: float, fields: int, clock: Clock = time.monotonic) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be more than 0, not {window_s!r}")
        self._clock = clock
        self._width = window_s / BUCKETS_PER_WINDOW
        self._buckets = [[0.0] * fields for _ in range(BUCKETS_PER_WINDOW)]
        self._totals = [0.0] * fields
        self._index = math.floor(clock() / self._width)

    def _advance(self) -> list[float]:
        index = math.floor(self._clock() / self._width)
        if index > self._index:
            for step in range(self._index + 1, min(index, self._index + BUCKETS_PER_WINDOW) + 1):
                bucket = self._buckets[step % BUCKETS_PER_WINDOW]
                for i, value in enumerate(bucket):
                    # max(): float sums may drift a hair below zero as values leave the window
                    self._totals[i] = max(0.0, self._totals[i] - value)
                    bucket[i] = 0.0
            self._index = index
        return self._buckets[self._index % BUCKETS_PER_WINDOW]

    def add(self, field: int, value: float = 1.0) -> None:
        self._advance()[field] += value
        self._totals[field] += value

    def totals(self) -> list[float]:
        self._advance()
        return list(self._totals)

    def clear(self) -> None:
        for bucket in self._buckets:
            bucket[:] = [0.0] * len(bucket)
        self._totals[:] = [0.0] * len(self._totals)


class RatioBudget:
    """At most ``ratio`` x the requests of a sliding window may take something extra, counting it.

    One rule for two budgets: the failover cap (a stage's requests moved to its fallback, one
    instance per stage) and the retry budget (retries, service-wide, one per pipeline). Extra
    work is allowed only if, counting it, taken <= ratio x requests in the window -- retries and
    moves multiply load exactly when an engine is failing. Thread-safe: the check and the count
    happen under one lock, so concurrent callers can never together pass the ratio.
    """

    _REQUESTS, _TAKEN = 0, 1

    def __init__(self, ratio: float, window_s: float, clock: Clock = time.monotonic) -> None:
        self.ratio = ratio
        self.window_s = window_s
        self._window = SlidingWindow(window_s, 2, clock)
        self._lock = threading.Lock()
        self.taken_total = 0
        self.denied_total = 0

    def note_request(self) -> None:
        """Count one request (whether it takes anything or not)."""
        with self._lock:
            self._window.add(self._REQUESTS)

    def try_take(self) -> bool:
        """Whether one more move (or retry) fits now; if so it is counted."""
        with self._lock:
            requests, taken = self._window.totals()
            if taken + 1 > self.ratio * requests:
                self.denied_total += 1
                return False
            self._window.add(self._TAKEN)
            self.taken_total += 1
            return True

    def share(self) -> float:
        """Taken / requests over the current window (0 when there were none)."""
        with self._lock:
            requests, taken = self._window.totals()
        return taken / requests if requests else 0.0


FailoverCap = RatioBudget
"""A stage's failover cap: ``RatioBudget(fallback.max_ratio, ...)``; ``try_take()`` moves one request."""

RetryBudget = RatioBudget
"""The pipeline's retry budget: ``RatioBudget(retry.budget_ratio, ...)``; ``try_take()`` allows one retry."""


class BreakerState(str, enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Breaker:
    """A circuit breaker: closed, open for ``open_s`` when failures pass a share, then half-open.

    Closed: every request may go; outcomes are counted over ``window_s``, and once there
    are at least ``min_requests`` and the failed share is above ``error_rate_over`` it
    opens. Open: nothing goes until ``open_s`` has passed. Half-open: one trial request at
    a time; its success closes the breaker (with a fresh window), its failure opens it again.
    A caller that was allowed through must end with ``record(ok)`` or, if the request never
    reached the engine, ``release()``.
    """

    _REQUESTS, _FAILURES = 0, 1

    def __init__(self, error_rate_over: float, window_s: float, min_requests: int, open_s: float,
                 clock: Clock = time.monotonic) -> None:
        self.error_rate_over = error_rate_over
        self.window_s = window_s
        self.min_requests = min_requests
        self.open_s = open_s
        self._clock = clock
        self._window = SlidingWindow(window_s, 2, clock)
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._opened_at = 0.0
        self._trial = False  # a half-open trial is in flight
        self.opened_count = 0

    @property
    def state(self) -> BreakerState:
        with self._lock:
            return self._state_now()

    def _state_now(self) -> BreakerState:
        if self._state is BreakerState.OPEN and self._clock() - self._opened_at >= self.open_s:
            self._state = BreakerState.HALF_OPEN
            self._trial = False
        return self._state

    def allow(self) -> bool:
        """Whether a request may go to the engine now (a half-open trial counts as in flight)."""
        with self._lock:
            state = self._state_now()
            if state is BreakerState.CLOSED:
                return True
            if state is BreakerState.HALF_OPEN and not self._trial:
                self._trial = True
                return True
            return False

    def release(self) -> None:
        """An allowed request did not reach the engine after all (e.g. its queue was full)."""
        with self._lock:
            self._trial = False

    def record(self, ok: bool) -> None:
        """The outcome of an allowed request: ``ok=False`` for an error or a timeout."""
        with self._lock:
            state = self._state_now()
            if state is BreakerState.HALF_OPEN:
                if not self._trial:
                    return  # a request let through before the breaker opened: its outcome is stale
                self._trial = False
                if ok:
                    self._state = BreakerState.CLOSED
                    self._window.clear()
                else:
                    self._open()
                return
            if state is BreakerState.OPEN:
                return
            self._window.add(self._REQUESTS)
            if not ok:
                self._window.add(self._FAILURES)
                requests, failures = self._window.totals()
                if requests >= self.min_requests and failures / requests > self.error_rate_over:
                    self._open()

    def _open(self) -> None:
        self._state = BreakerState.OPEN
        self._opened_at = self._clock()
        self._trial = False
        self.opened_count += 1
