"""A pipeline's routing rules per stage: where an attempt goes, what its breaker hears, whether it is retried.

``PipelineRules(config, window_s=..., clock=...)`` reads every rule's parameters from a
pipeline.yaml once: per stage a ``StageRules`` (the fallback with its capped failover, the
breaker, the retry limit, the timeout, routing by shape and precision), and for the pipeline
the retry budget, the shedding rule and the canary split. The Router asks them at run time and
the simulator asks the very same objects on its simulated clock, so a rule is written once.

Usage::

    rules = PipelineRules(config, window_s=10, clock=time.monotonic)
    rules.note_request()                             # every request, for the retry budget
    stage = rules.stages[0]
    action, reason = stage.steer(queue, priority)   # "run" | "move" (to the fallback) | "reject"; queue: a QueueView
    stage.record(ok=False)                           # an attempt on the stage's own engine failed
    if stage.may_retry(attempt): ...                 # within retry.max_attempts and the budget
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from .canary import CanarySplit
from .windows import Breaker, Clock, FailoverCap, RetryBudget

if TYPE_CHECKING:
    from ...pipeline.config import PipelineConfig, StageConfig

__all__ = ["PRECISION_RANK", "PipelineRules", "QueueView", "StageRules"]

class QueueView(Protocol):
    """What steering needs of an engine's queue, whichever runtime keeps it: how many attempts wait
    beyond what runs at once, and whether it takes one more of a priority (``scheduling.LaneQueue``
    for the Router and the simulator; the Ray Serve ingress counts what it sent)."""

    @property
    def waiting(self) -> int: ...

    def admits(self, priority: int) -> bool: ...


#: Precisions, coarsest first: a stage runs a request only at its required precision or finer.
PRECISION_RANK = {"int8": 0, "fp8": 1, "fp16": 2, "bf16": 2, "fp32": 3}


class StageRules:
    """The rules of one stage, built from its config; ``plain`` when it has neither fallback nor breaker.

    ``cap`` (a ``FailoverCap``, with a fallback) and ``breaker`` (a ``Breaker``) keep the
    counts; ``budget`` is the pipeline's ``RetryBudget`` (None: retries are limited by
    ``max_attempts`` only).
    """

    __slots__ = ("config", "name", "timeout_s", "max_attempts", "queue_len_over", "otherwise", "cap", "breaker",
                 "budget", "plain")

    def __init__(self, stage: StageConfig, *, default_attempts: int, window_s: float, budget: RetryBudget | None,
                 clock: Clock) -> None:
        fallback, b = stage.fallback, stage.breaker
        self.config = stage
        self.name = stage.name
        self.timeout_s = stage.timeout_ms / 1000
        self.max_attempts = stage.retry.max_attempts if stage.retry else default_attempts
        self.queue_len_over = fallback.when.queue_len_over if fallback and fallback.when else None
        self.otherwise = fallback.otherwise if fallback else "reject"
        self.cap = FailoverCap(fallback.max_ratio, window_s, clock) if fallback else None
        self.breaker = Breaker(b.error_rate_over, b.window_s, b.min_requests, b.open_s, clock) if b else None
        self.budget = budget
        self.plain = self.cap is None and self.breaker is None  # every attempt runs on the stage's own engine

    def steer(self, queue: QueueView, priority: int) -> tuple[str, str | None]:
        """Where one attempt goes: ``("run", None)`` on the stage's own engine, ``("move", None)`` to its
        fallback, or ``("reject", reason)``; ``queue``: what the runtime sees of the engine's queue.

        An open breaker moves the attempt within the failover cap, else rejects it
        (``breaker_open``). With a fallback, an engine that cannot admit the attempt overflows
        (``overflowed``); one past ``queue_len_over`` moves it within the cap, and past the cap
        rejects it (``failover_cap``) unless ``otherwise`` is ``queue``. A breaker's half-open
        trial is released whenever the attempt does not run.
        """
        cap, breaker = self.cap, self.breaker
        if cap is not None:
            cap.note_request()
        if breaker is not None and not breaker.allow():
            if cap is None or not cap.try_take():
                return "reject", "breaker_open"
            return "move", None
        if cap is not None:
            if not queue.admits(priority):
                return self.overflowed()
            if self.queue_len_over is not None and queue.waiting > self.queue_len_over:
                if cap.try_take():
                    self.release()
                    return "move", None
                if self.otherwise == "reject":
                    self.release()
                    return "reject", "failover_cap"
        return "run", None

    def overflowed(self) -> tuple[str, str | None]:
        """The stage's own engine cannot take an attempt steered to it (its queue is full): ``("move", None)``
        within the failover cap, else ``("reject", "failover_cap")`` -- ``"queue_full"`` without a fallback.
        Asked by ``steer`` when the queue says so before, and by runtimes that learn it only on sending
        (Ray Serve's back-pressure)."""
        self.release()
        if self.cap is None:
            return "reject", "queue_full"
        return ("move", None) if self.cap.try_take() else ("reject", "failover_cap")

    def record(self, ok: bool) -> None:
        """An attempt that ran on the stage's own engine ended: ``ok=False`` for an error or a timeout."""
        if self.breaker is not None:
            self.breaker.record(ok)

    def release(self) -> None:
        """An attempt steered to the stage's own engine never ran there (rejected, shed or cancelled)."""
        if self.breaker is not None:
            self.breaker.release()

    def may_retry(self, attempt: int) -> bool:
        """After attempt number ``attempt`` failed (an error or a timeout; a rejection is never retried):
        whether another is allowed, within ``max_attempts`` and the retry budget (which counts it)."""
        return attempt < self.max_attempts and (self.budget is None or self.budget.try_take())

    def fits(self, shape: Any, precision: str | None) -> bool:
        """Whether the stage's own engine takes a request of this shape and precision requirement.

        A stage built for a fixed ``input.shape`` (``dynamic: false``) takes shapes that match it,
        ``null`` dimensions matching anything; a stage whose ``precision`` is below the one the
        request requires (int8 < fp8 < fp16 = bf16 < fp32) does not take it. One that does not fit
        goes to the fallback: routing, not overflow, so the failover cap does not apply.
        """
        config = self.config
        if shape is not None and config.input is not None and not config.input.dynamic and config.input.shape:
            want = tuple(config.input.shape)
            got = tuple(shape)
            if len(got) != len(want) or any(w is not None and w != g for w, g in zip(want, got)):
                return False
        if precision is not None and config.precision is not None:
            if PRECISION_RANK.get(config.precision, 0) < PRECISION_RANK.get(precision, 0):
                return False
        return True


class PipelineRules:
    """Every rule of a pipeline: ``stages`` (a ``StageRules`` each, in order), ``budget``, ``shed_by``, ``canary``.

    ``window_s`` is the sliding window of the failover caps and the retry budget (breakers
    have their own ``window_s`` in the file); ``clock`` tells them the time.
    """

    def __init__(self, config: PipelineConfig, *, window_s: float, clock: Clock) -> None:
        routing = config.routing
        retry = routing.retry if routing else None
        self.window_s = window_s
        self.shed_by = routing.shed.by if routing and routing.shed else "none"
        self.budget = RetryBudget(retry.budget_ratio, window_s, clock) if retry else None
        default_attempts = retry.max_attempts if retry else 1
        self.stages = [StageRules(stage, default_attempts=default_attempts, window_s=window_s, budget=self.budget,
                                  clock=clock) for stage in config.stages]
        self.canary = CanarySplit(routing.canary.weight) if routing and routing.canary else None

    def note_request(self) -> None:
        """A request arrived: the retry budget's share is of requests."""
        if self.budget is not None:
            self.budget.note_request()
