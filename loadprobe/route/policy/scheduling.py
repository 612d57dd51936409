"""An engine's slots and bounded priority queue as decisions: who may wait, who is shed, what starts next.

The Router's lanes (``loadprobe/route/lanes.py``) and the simulator's event loop
(``loadprobe/simulator/events.py``) both keep an engine's state in a ``Slots`` and each stage's
share of it in a ``Lane``, and ask them every question of the engine model: may a request
start at once or wait (``admit``: admit, evict the lowest priority, or reject), whom a full
queue sheds (``evict_lowest``), which lane starts next and with how many items under its
batching window (``next_batch``), and when a window opens (the ``wake`` callback). They hold
waiting items -- any objects with ``priority``, ``enqueued`` and ``deadline`` -- and counts,
never payloads, futures or events, and read no clock: the caller says what time it is. Not
thread-safe: one event loop (real or simulated) owns an engine.

Usage::

    slots = Slots(config.engines["npu0"], shed_by="priority", wake=lambda lane, when: ...)
    lane = slots.add(Lane(stage_config, slots.max_concurrency))
    decision = slots.admit(lane, priority)       # ADMIT; EVICT: slots.evict_lowest() first; REJECT
    slots.enqueue(lane, item)                    # item.priority, item.enqueued, item.deadline
    while (batch := slots.next_batch(now)) is not None:
        lane, items = batch                      # a slot is taken: run them, then slots.end(lane)
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...pipeline.config import EngineConfig, StageConfig

__all__ = ["Admission", "Lane", "LaneQueue", "Slots", "admission", "last_deadline"]


class Admission(str, enum.Enum):
    ADMIT = "admit"  # room in the queue
    EVICT = "evict"  # full, but a lower-priority waiting request makes room (it is rejected as shed)
    REJECT = "reject"  # full: reject the newcomer fast


def admission(*, waiting: int, max_queue: int, priority: int, lowest_waiting: int | None,
              shed_by: str) -> Admission:
    """May a request of ``priority`` wait in a queue holding ``waiting`` of at most ``max_queue``?

    With ``shed_by="priority"`` a full queue sheds its lowest-priority waiting request
    (``lowest_waiting``) for a newcomer of strictly higher priority; equal priorities keep
    their place, so a burst of one priority cannot churn the queue. ``shed_by="none"``
    never evicts.
    """
    if waiting < max_queue:
        return Admission.ADMIT
    if shed_by == "priority" and lowest_waiting is not None and lowest_waiting < priority:
        return Admission.EVICT
    return Admission.REJECT


def last_deadline(items: Sequence[Any]) -> float:
    """When an execution of ``items`` is given up: its batch's last deadline, after which nobody waits for it."""
    return items[0].deadline if len(items) == 1 else max(item.deadline for item in items)


class Lane:
    """One stage's traffic on one engine: its batching rule, its own concurrency limit, its waiting items.

    ``timeout_s`` is the stage's ``timeout_ms``: an attempt's deadline is ``timeout_s`` after it
    reached the stage, queueing and batching included. ``timer_at`` is when a wake-up the lane
    asked for is due (infinity: none pending).
    """

    __slots__ = ("stage", "batched", "batch_size", "max_wait_s", "limit", "timeout_s", "busy", "waiting", "queues",
                 "timer_at")

    def __init__(self, stage: StageConfig, max_concurrency: int) -> None:
        self.stage = stage.name
        self.batched = stage.batch is not None
        self.batch_size = stage.batch.size if stage.batch else 1
        self.max_wait_s = stage.batch.max_wait_ms / 1000 if stage.batch else 0.0
        self.limit = min(stage.max_concurrency or max_concurrency, max_concurrency)
        self.timeout_s = stage.timeout_ms / 1000
        self.busy = 0  # executions in progress (a batch is one)
        self.waiting = 0
        self.queues: dict[int, deque] = {}  # priority -> items, oldest first
        self.timer_at = math.inf

    def oldest(self) -> float:
        """When the longest-waiting item was enqueued (the lane has some)."""
        queues = self.queues
        if len(queues) == 1:
            for queue in queues.values():
                return queue[0].enqueued
        return min(queue[0].enqueued for queue in queues.values())


class LaneQueue:
    """What steering sees of one lane's engine (``rules.QueueView``): the items waiting on the engine, and
    whether it admits one more for the lane. Made once per lane: ``rules.steer(lane_queue, priority)``."""

    __slots__ = ("slots", "lane")

    def __init__(self, slots: Slots, lane: Lane) -> None:
        self.slots, self.lane = slots, lane

    @property
    def waiting(self) -> int:
        return self.slots.waiting

    def admits(self, priority: int) -> bool:
        return self.slots.admit(self.lane, priority) is not Admission.REJECT


class Slots:
    """An engine's ``max_concurrency`` slots, shared by its lanes, and its queue of at most ``max_queue`` items.

    ``wake(lane, when)`` is called when a batching lane must be looked at again at ``when``
    (its window opens); the owner calls ``woke(lane, when)`` and pumps then. A later, earlier
    wake-up replaces a pending one (the owner may cancel the old one or let it pass harmlessly).
    """

    __slots__ = ("max_concurrency", "max_queue", "shed_by", "lanes", "busy", "waiting", "peak_waiting", "_wake")

    def __init__(self, config: EngineConfig, *, shed_by: str, wake: Callable[[Lane, float], None]) -> None:
        self.max_concurrency = config.max_concurrency
        self.max_queue = config.max_queue
        self.shed_by = shed_by
        self.lanes: list[Lane] = []
        self.busy = 0  # executions in progress, all lanes together
        self.waiting = 0  # items queued, all lanes together
        self.peak_waiting = 0
        self._wake = wake

    def add(self, lane: Lane) -> Lane:
        """``lane`` shares this engine from now on (lanes are looked at in the order they were added)."""
        self.lanes.append(lane)
        return lane

    # -- admission -----------------------------------------------------------------------------------------

    def starts_now(self, lane: Lane) -> bool:
        """Whether an item for ``lane`` would start at once: a free slot, the lane under its limit, nobody ahead."""
        return self.busy < self.max_concurrency and lane.busy < lane.limit and not self.waiting

    def admit(self, lane: Lane, priority: int) -> Admission:
        """May an item of ``priority`` for ``lane`` start or wait here? EVICT: only after ``evict_lowest()``."""
        if self.waiting < self.max_queue or self.starts_now(lane):
            return Admission.ADMIT
        return admission(waiting=self.waiting, max_queue=self.max_queue, priority=priority,
                         lowest_waiting=self.lowest_waiting(), shed_by=self.shed_by)

    def lowest_waiting(self) -> int | None:
        """The lowest priority waiting on any lane, None when nothing waits."""
        return min((min(lane.queues) for lane in self.lanes if lane.queues), default=None)

    # -- the queue -----------------------------------------------------------------------------------------

    def enqueue(self, lane: Lane, item: Any) -> None:
        queue = lane.queues.get(item.priority)
        if queue is None:
            queue = lane.queues[item.priority] = deque()
        queue.append(item)
        lane.waiting += 1
        self.waiting += 1
        if self.waiting > self.peak_waiting:
            self.peak_waiting = self.waiting

    def remove(self, lane: Lane, item: Any) -> None:
        """Take a waiting ``item`` out of the queue (it timed out or was cancelled while waiting)."""
        queue = lane.queues[item.priority]
        queue.remove(item)  # almost always at the head: a lane's items share one timeout
        if not queue:
            del lane.queues[item.priority]
        lane.waiting -= 1
        self.waiting -= 1

    def evict_lowest(self) -> tuple[Lane, Any]:
        """Make room in a full queue: remove and return the newest item of the lowest priority waiting.

        Newest, so the one that waited longest keeps its place; on a tie between lanes, the first lane's.
        """
        lane = min((lane for lane in self.lanes if lane.queues), key=lambda lane: min(lane.queues))
        lowest = min(lane.queues)
        queue = lane.queues[lowest]
        item = queue.pop()
        if not queue:
            del lane.queues[lowest]
        lane.waiting -= 1
        self.waiting -= 1
        return lane, item

    def take(self, lane: Lane, n: int | None = None) -> list:
        """Up to ``n`` (default: a batch) of ``lane``'s waiting items: highest priority first, then oldest first."""
        n = lane.batch_size if n is None else n
        queues = lane.queues
        out: list = []
        while len(out) < n and queues:
            top = max(queues)
            queue = queues[top]
            while queue and len(out) < n:
                out.append(queue.popleft())
            if not queue:
                del queues[top]
        lane.waiting -= len(out)
        self.waiting -= len(out)
        return out

    # -- what starts next ----------------------------------------------------------------------------------

    def ready_lane(self, now: float) -> Lane | None:
        """The lane whose next batch should start at ``now``: highest waiting priority, then the oldest item.

        A batching lane is ready when its batch is full, when its oldest item has waited
        ``max_wait_ms``, or when the engine's queue is full (waiting for a batch to fill must not
        turn requests away while slots are free); otherwise it asks to be woken when its window opens.
        """
        best, best_key = None, None
        full = self.waiting >= self.max_queue
        for lane in self.lanes:
            if not lane.waiting or lane.busy >= lane.limit:
                continue
            oldest = lane.oldest()
            if lane.waiting < lane.batch_size and not full:
                opens = oldest + lane.max_wait_s
                if now < opens:
                    if opens < lane.timer_at:
                        lane.timer_at = opens
                        self._wake(lane, opens)
                    continue
            key = (max(lane.queues), -oldest)
            if best_key is None or key > best_key:
                best, best_key = lane, key
        return best

    def next_batch(self, now: float) -> tuple[Lane, list] | None:
        """The next execution to start at ``now``, its slot taken: ``(lane, items)``; None while none may start."""
        if not self.waiting or self.busy >= self.max_concurrency:
            return None
        lane = self.ready_lane(now)
        if lane is None:
            return None
        items = self.take(lane)
        self.start(lane)
        return lane, items

    def woke(self, lane: Lane, when: float) -> None:
        """The wake-up ``lane`` asked for at ``when`` is due (pump next)."""
        if lane.timer_at == when:
            lane.timer_at = math.inf

    def start(self, lane: Lane) -> None:
        """An execution of ``lane`` takes a slot (``next_batch`` does this itself)."""
        self.busy += 1
        lane.busy += 1

    def end(self, lane: Lane) -> None:
        """An execution of ``lane`` gave its slot back (pump next if anything waits)."""
        self.busy -= 1
        lane.busy -= 1
