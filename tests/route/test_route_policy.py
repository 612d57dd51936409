"""loadprobe.route.policy and canary: the routing rules as pure objects, on a fake clock."""

from __future__ import annotations

import threading

import pytest

from loadprobe.route.canary import CanarySplit
from loadprobe.route.policy import (Admission, Breaker, BreakerState, FailoverCap, RetryBudget, SlidingWindow,
                                    admission)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_sliding_window_forgets_what_left_the_window():
    clock = Clock()
    window = SlidingWindow(10, 2, clock)
    window.add(0)
    window.add(1, 2.5)
    clock.now += 5
    window.add(0)
    assert window.totals() == [2, 2.5]
    clock.now += 6  # the first adds are now more than 10 s old
    assert window.totals() == [1, 0]
    clock.now += 1000  # a long idle gap clears everything
    assert window.totals() == [0, 0]
    with pytest.raises(ValueError):
        SlidingWindow(0, 1, clock)


def test_failover_cap_never_passes_its_ratio():
    clock = Clock()
    cap = FailoverCap(0.3, 10, clock)
    moved = 0
    for i in range(1000):
        cap.note_request()
        if cap.try_move():  # every request asks: only 30% may go
            moved += 1
        assert moved <= 0.3 * (i + 1)
    assert moved == 300
    assert cap.share() == pytest.approx(0.3)
    # the window slides: after it has passed, the old moves no longer count
    clock.now += 11
    cap.note_request()
    cap.note_request()
    cap.note_request()
    assert cap.share() == 0 and cap.try_move() is False  # 1 of 3 would be 33%
    cap.note_request()
    assert cap.try_move() is True  # 1 of 4


def test_failover_cap_is_counted_once_across_threads():
    cap = FailoverCap(0.25, 3600)
    moved = []

    def worker() -> None:
        n = 0
        for _ in range(5000):
            cap.note_request()
            n += cap.try_move()
        moved.append(n)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(moved) == cap.moved_total <= 0.25 * 8 * 5000
    assert sum(moved) >= 0.25 * 8 * 5000 - 8  # and the cap is used, not starved


def test_breaker_opens_on_error_share_and_recovers_through_half_open():
    clock = Clock()
    breaker = Breaker(error_rate_over=0.5, window_s=10, min_requests=4, open_s=5, clock=clock)
    for ok in (False, False, False):
        assert breaker.allow()
        breaker.record(ok)
    assert breaker.state is BreakerState.CLOSED  # 3 failures, but fewer than min_requests
    breaker.record(False)
    assert breaker.state is BreakerState.OPEN and breaker.opened_count == 1
    assert not breaker.allow()
    clock.now += 5
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.allow() and not breaker.allow()  # one trial at a time
    breaker.record(False)  # the trial failed: open again
    assert breaker.state is BreakerState.OPEN and breaker.opened_count == 2
    clock.now += 5
    assert breaker.allow()
    breaker.release()  # the trial never reached the engine: another may try
    assert breaker.allow()
    breaker.record(True)
    assert breaker.state is BreakerState.CLOSED
    # a fresh window: one failure after recovery does not reopen it
    breaker.record(False)
    assert breaker.state is BreakerState.CLOSED


def test_breaker_stays_closed_at_or_below_its_error_share():
    clock = Clock()
    breaker = Breaker(error_rate_over=0.5, window_s=10, min_requests=2, open_s=5, clock=clock)
    for i in range(100):
        breaker.record(i % 2 == 0)  # exactly 50% failures: not above
    assert breaker.state is BreakerState.CLOSED
    # failures that left the window do not count
    clock.now += 11
    breaker.record(False)
    assert breaker.state is BreakerState.CLOSED  # 1 request: below min_requests


def test_retry_budget_bounds_retries_by_requests():
    clock = Clock()
    budget = RetryBudget(0.1, 10, clock)
    allowed = 0
    for _ in range(200):
        budget.note_request()
        allowed += budget.try_retry()
        allowed += budget.try_retry()  # every request would retry twice
    assert allowed == 20 == budget.retries_total
    assert budget.denied_total == 400 - 20
    clock.now += 11
    assert not budget.try_retry()  # a new window with no requests has no budget


def test_admission_sheds_only_for_a_strictly_higher_priority():
    full = dict(waiting=4, max_queue=4)
    assert admission(waiting=3, max_queue=4, priority=0, lowest_waiting=0, shed_by="priority") is Admission.ADMIT
    assert admission(**full, priority=1, lowest_waiting=0, shed_by="priority") is Admission.EVICT
    assert admission(**full, priority=0, lowest_waiting=0, shed_by="priority") is Admission.REJECT
    assert admission(**full, priority=5, lowest_waiting=0, shed_by="none") is Admission.REJECT
    assert admission(waiting=0, max_queue=0, priority=5, lowest_waiting=None, shed_by="priority") is Admission.REJECT


def test_canary_split_sends_exactly_its_weight():
    split = CanarySplit(0.05)
    sent = [split.take() for _ in range(1000)]
    assert sum(sent) == 50 and sent.index(True) == 19
    assert not any(CanarySplit(0).take() for _ in range(10))
    assert all(CanarySplit(1).take() for _ in range(10))
