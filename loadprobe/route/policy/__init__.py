"""``loadprobe.route.policy``: every routing rule of pipeline.yaml, once, as pure objects with an injected clock.

The Router (``loadprobe.route``), the simulator (``loadprobe.simulator``) and the exported Ray
Serve ingress (``loadprobe.export``) ask these objects for every decision -- the Router and the
ingress on real time, the simulator on its simulated clock -- so a rule is written here and
nowhere else. None of them knows about asyncio, threads, events or payloads.

- ``scheduling``: an engine's slots and bounded priority queue (``Slots``, ``Lane``): admission
  and queue bounds, shedding by priority, which lane starts next and how many items its batch
  takes under its batching window, when to wake, an execution's last deadline;
- ``rules``: per stage (``StageRules``) where an attempt goes (its own engine, the fallback
  within the failover cap, or a rejection), from a ``QueueView`` of the engine any runtime can
  give (the Router's and the simulator's ``LaneQueue``; the Ray Serve ingress's own count), what
  the breaker hears, whether a failed attempt is retried within the budget, routing by shape and
  precision; per pipeline (``PipelineRules``) the retry budget, the shedding rule and the canary split;
- ``windows``: the counts behind them over sliding windows (``RatioBudget``: the failover cap and
  the retry budget; ``Breaker``; ``SlidingWindow``); ``canary``: ``CanarySplit``.

Usage::

    from loadprobe.route.policy import PipelineRules, Slots, Lane

    rules = PipelineRules(config, window_s=10, clock=time.monotonic)
    slots = Slots(config.engines["gpu0"], shed_by=rules.shed_by, wake=wake)
    lane = slots.add(Lane(config.stages[0], slots.max_concurrency))
    action, reason = rules.stages[0].steer(LaneQueue(slots, lane), priority=0)

The compiled simulator (``loadprobe/simulator/compiled/``) ports these rules to numba and is
held to them by a parity test against the Python simulator (tests/simulator/test_simulate_compiled.py).
"""

from .canary import CanarySplit
from .rules import PRECISION_RANK, PipelineRules, QueueView, StageRules
from .scheduling import Admission, Lane, LaneQueue, Slots, admission, last_deadline
from .windows import (BUCKETS_PER_WINDOW, Breaker, BreakerState, FailoverCap, RatioBudget, RetryBudget,
                      SlidingWindow)

__all__ = ["Admission", "BUCKETS_PER_WINDOW", "Breaker", "BreakerState", "CanarySplit", "FailoverCap", "Lane",
           "LaneQueue", "PRECISION_RANK", "PipelineRules", "QueueView", "RatioBudget", "RetryBudget", "SlidingWindow",
           "Slots", "StageRules", "admission", "last_deadline"]
