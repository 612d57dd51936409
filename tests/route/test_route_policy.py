"""loadprobe.route.policy and canary: the routing rules as pure objects, on a fake clock."""

from __future__ import annotations

import threading

import pytest

from loadprobe.route.policy import (Admission, Breaker, BreakerState, CanarySplit, FailoverCap, LaneQueue, RetryBudget,
                                    SlidingWindow, admission)


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
        if cap.try_take():  # every request asks: only 30% may go
            moved += 1
        assert moved <= 0.3 * (i + 1)
    assert moved == 300
    assert cap.share() == pytest.approx(0.3)
    # the window slides: after it has passed, the old moves no longer count
    clock.now += 11
    cap.note_request()
    cap.note_request()
    cap.note_request()
    assert cap.share() == 0 and cap.try_take() is False  # 1 of 3 would be 33%
    cap.note_request()
    assert cap.try_take() is True  # 1 of 4


def test_failover_cap_is_counted_once_across_threads():
    cap = FailoverCap(0.25, 3600)
    moved = []

    def worker() -> None:
        n = 0
        for _ in range(5000):
            cap.note_request()
            n += cap.try_take()
        moved.append(n)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(moved) == cap.taken_total <= 0.25 * 8 * 5000
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
        allowed += budget.try_take()
        allowed += budget.try_take()  # every request would retry twice
    assert allowed == 20 == budget.taken_total
    assert budget.denied_total == 400 - 20
    clock.now += 11
    assert not budget.try_take()  # a new window with no requests has no budget


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


# -- the policy core's engine model and stage rules: what the Router and the simulator both ask ------------

PLAN = """
version: 1
service: rules
engines:
  npu: {kind: npu, max_concurrency: 1, max_queue: 3}
  gpu: {kind: gpu, max_concurrency: 2, max_queue: 8}
stages:
  - name: backbone
    engine: npu
    timeout_ms: 100
    batch: {size: 3, max_wait_ms: 10}
    precision: int8
    input: {shape: [3, 640, 640], dynamic: false}
    fallback: {engine: gpu, when: {queue_len_over: 1}, max_ratio: 0.5, otherwise: queue}
    breaker: {error_rate_over: 0.5, window_s: 10, min_requests: 2, open_s: 5}
  - {name: head, engine: npu, timeout_ms: 50, retry: {max_attempts: 3}}
routing:
  retry: {budget_ratio: 0.5, max_attempts: 2}
  shed: {by: priority}
"""


class Item:
    """What the core queues: anything with a priority, when it was enqueued and its deadline."""

    def __init__(self, priority: int, enqueued: float, deadline: float = 1.0) -> None:
        self.priority, self.enqueued, self.deadline = priority, enqueued, deadline

    def __repr__(self) -> str:
        return f"Item({self.priority}, {self.enqueued})"


def engine_model(shed_by: str = "priority"):
    from loadprobe import pipeline
    from loadprobe.route.policy import Lane, Slots

    config = pipeline.loads(PLAN)
    wakes = []
    slots = Slots(config.engines["npu"], shed_by=shed_by, wake=lambda lane, when: wakes.append((lane.stage, when)))
    batched = slots.add(Lane(config.stages[0], slots.max_concurrency))
    single = slots.add(Lane(config.stages[1], slots.max_concurrency))
    return slots, batched, single, wakes


def test_slots_admit_until_full_then_shed_only_for_a_higher_priority():
    from loadprobe.route.policy import Admission

    slots, batched, single, _ = engine_model()
    assert slots.starts_now(single) and slots.admit(single, 0) is Admission.ADMIT
    old, new = Item(0, 0.0), Item(0, 0.1)
    slots.enqueue(single, old)
    slots.enqueue(batched, Item(1, 0.2))
    slots.enqueue(single, new)
    assert slots.waiting == 3 == slots.peak_waiting and not slots.starts_now(single)
    assert slots.admit(single, 0) is Admission.REJECT  # full; equal priorities keep their place
    assert slots.admit(single, 1) is Admission.EVICT
    assert slots.evict_lowest() == (single, new)  # the newest of the lowest priority goes
    assert slots.waiting == 2 and single.waiting == 1
    never, _, never_single, _ = engine_model("none")
    for t in (0.0, 0.1, 0.2):
        never.enqueue(never_single, Item(0, t))
    assert never.admit(never_single, 5) is Admission.REJECT  # shed_by none: a full queue never evicts
    slots.enqueue(single, Item(2, 0.3))
    slots.enqueue(single, Item(1, 0.4))
    assert slots.admit(single, 9) is Admission.EVICT  # shed_by priority
    assert [item.priority for item in slots.take(single, 5)] == [2, 1, 0]  # highest first
    slots.remove(batched, slots.lanes[0].queues[1][0])
    assert slots.waiting == 0 and slots.lowest_waiting() is None


def test_a_batch_starts_when_full_when_its_window_closes_or_when_the_queue_is_full():
    slots, batched, single, wakes = engine_model()
    slots.enqueue(batched, Item(0, 0.0))
    assert slots.next_batch(0.004) is None and wakes == [("backbone", 0.010)]  # waits out max_wait_ms
    assert slots.next_batch(0.005) is None and len(wakes) == 1  # the pending wake-up still stands
    slots.woke(batched, 0.010)
    lane, items = slots.next_batch(0.010)
    assert lane is batched and len(items) == 1 and slots.busy == 1 == batched.busy
    assert slots.next_batch(0.011) is None  # the only slot is taken
    for t in (0.020, 0.021, 0.022):
        slots.enqueue(batched, Item(0, t))
    slots.end(batched)
    lane, items = slots.next_batch(0.022)  # a full batch of 3 does not wait for its window
    assert [item.enqueued for item in items] == [0.020, 0.021, 0.022]
    slots.end(batched)
    slots.enqueue(batched, Item(0, 0.030))
    slots.enqueue(batched, Item(0, 0.031))
    slots.enqueue(single, Item(0, 0.032))  # the engine's queue is full now: waiting for a batch would turn work away
    lane, items = slots.next_batch(0.032)
    assert lane is batched and len(items) == 2


def test_the_ready_lane_has_the_highest_priority_waiting_then_the_oldest():
    from loadprobe.route.policy import last_deadline

    slots, batched, single, _ = engine_model()
    slots.enqueue(single, Item(0, 0.0, deadline=0.05))
    slots.enqueue(batched, Item(1, 0.5, deadline=0.6))
    assert slots.ready_lane(1.0) is batched  # window over; priority 1 beats the older priority 0
    lane, items = slots.next_batch(1.0)
    assert lane is batched and last_deadline(items) == 0.6
    slots.end(batched)
    slots.enqueue(batched, Item(0, 0.9))
    assert slots.ready_lane(1.0) is single  # the same priority: the oldest item's lane
    assert last_deadline([Item(0, 0, 0.2), Item(0, 0, 0.7), Item(0, 0, 0.4)]) == 0.7


def test_stage_rules_move_within_the_cap_and_fall_back_to_queueing():
    from loadprobe import pipeline
    from loadprobe.route.policy import PipelineRules

    clock = Clock()
    config = pipeline.loads(PLAN)
    rules = PipelineRules(config, window_s=10, clock=clock)
    slots, batched, single, _ = engine_model()
    queue = LaneQueue(slots, batched)
    stage = rules.stages[0]
    assert not stage.plain and rules.stages[1].plain and rules.shed_by == "priority"
    assert stage.steer(queue, 0) == ("run", None)  # 1 of 1 would be moved: over 50%
    slots.enqueue(batched, Item(0, 0.0))
    slots.enqueue(batched, Item(0, 0.0))  # 2 waiting: past queue_len_over 1
    assert stage.steer(queue, 0) == ("move", None)  # 1 of 2 moved
    assert stage.steer(queue, 0) == ("run", None)  # past the cap: otherwise queue
    slots.enqueue(batched, Item(1, 0.0))  # the queue is full: nowhere to wait
    assert stage.steer(queue, 0) == ("move", None)  # 2 of 4
    assert stage.steer(queue, 0) == ("reject", "failover_cap")
    assert stage.cap.taken_total == 2


def test_stage_rules_breaker_retries_and_routing_by_shape_and_precision():
    from loadprobe import pipeline
    from loadprobe.route.policy import PipelineRules

    clock = Clock()
    rules = PipelineRules(pipeline.loads(PLAN), window_s=10, clock=clock)
    slots, batched, single, _ = engine_model()
    queue = LaneQueue(slots, batched)
    stage, head = rules.stages
    stage.record(ok=False)
    stage.record(ok=False)  # 2 of 2 failed: the breaker opens
    assert stage.breaker.state.value == "open"
    assert stage.steer(queue, 0) == ("reject", "breaker_open")  # 1 of 1 would be over 50%
    assert stage.steer(queue, 0) == ("move", None)
    clock.now += 5
    assert stage.steer(queue, 0) == ("run", None)  # half-open: this one is the trial
    stage.release()  # it never ran: another may try
    assert stage.breaker.allow()
    head.record(ok=False)  # no breaker: nothing to tell
    # retries: within max_attempts and the budget (0.5 x requests)
    assert not head.may_retry(1)  # no requests yet: no budget
    for _ in range(4):
        rules.note_request()
    assert head.may_retry(1) and head.may_retry(2) and not head.may_retry(3)  # max_attempts 3
    assert not stage.may_retry(2)  # routing.retry.max_attempts 2
    assert stage.may_retry(1) is False and rules.budget.denied_total == 2  # 2 of 4 retried: the budget is spent
    assert stage.fits((3, 640, 640), "int8") and stage.fits(None, None)
    assert not stage.fits((3, 1280, 1280), None) and not stage.fits(None, "fp16")
    assert head.fits((1, 2), "fp32")  # no input or precision of its own
