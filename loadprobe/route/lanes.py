"""An engine's lanes at run time: requests wait in its queue and run in its slots, on the loop or worker threads.

``EngineLanes`` is one engine of a pipeline in the Router: every decision about it -- may a
request start or wait, whom a full queue sheds, which lane's batch starts next and when a
batching window opens -- is the policy core's (``loadprobe.route.policy.Slots``, which it
extends); this module does the running: futures for waiting requests, loop timers for batching
windows, executions as tasks (``async def`` executors) or on the engine's daemon worker threads
(plain functions), deadlines, a loadprobe span per attempt and the engine's metrics.
It belongs to one event loop and is only touched from it, so it needs no lock (worker threads
hand results over with ``call_soon_threadsafe``). Each stage that runs on the engine has a
``Lane`` (its executor, batching, its own limit within the engine's); all lanes share the
engine's ``max_concurrency`` slots and its ``max_queue``.

Usage (inside the router's event loop)::

    engine = EngineLanes("npu0", config.engines["npu0"], window_s=10, shed_by="priority")
    lane = engine.add_lane(stage_config, executor)
    result = await engine.run(lane, payload, priority=0)   # within the stage's timeout_ms
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import math
import sys
import time
from time import perf_counter_ns
from typing import Any, Callable

from ..record.probe import record_span, status_of
from ..pipeline.config import EngineConfig, StageConfig
from .errors import Rejected, explain, timed_out
from .policy import Admission, SlidingWindow, Slots, last_deadline
from .policy import Lane as LaneRule
from .workers import Workers

__all__ = ["EngineLanes", "Lane", "is_async_callable"]

if sys.version_info >= (3, 11):
    async def within(awaitable, timeout_s: float, on_timeout: Callable[[], TimeoutError]):
        """``await awaitable``; past ``timeout_s``, raise ``on_timeout()`` instead of asyncio's blank TimeoutError."""
        scope = asyncio.timeout(timeout_s)
        try:
            async with scope:
                return await awaitable
        except TimeoutError:
            if not scope.expired():
                raise  # the awaitable's own TimeoutError (an executor's, or a batch's deadline): it says what it is
            raise on_timeout() from None
else:  # pragma: no cover - Python 3.10
    async def within(awaitable, timeout_s: float, on_timeout: Callable[[], TimeoutError]):
        try:
            return await asyncio.wait_for(awaitable, timeout_s)
        except asyncio.TimeoutError:  # not the builtin TimeoutError before 3.11
            raise on_timeout() from None


def is_async_callable(fn: Callable) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


class _Item:
    """One request waiting on an engine, or in a batch that runs there."""

    __slots__ = ("payload", "priority", "future", "enqueued", "deadline", "context", "queued", "start_ns",
                 "end_ns", "batch")

    def __init__(self, payload, priority, future, enqueued, deadline, context) -> None:
        self.payload, self.priority, self.future = payload, priority, future
        self.enqueued, self.deadline, self.context = enqueued, deadline, context
        self.queued = True
        self.start_ns = self.end_ns = self.batch = None


class Lane(LaneRule):
    """One stage's traffic on one engine: the policy core's lane, plus its executor and its timer."""

    __slots__ = ("engine", "fn", "is_async", "fallback_hint_ms", "timeout_ms", "inline", "timer")

    def __init__(self, stage: StageConfig, engine_name: str, fn: Callable, max_concurrency: int) -> None:
        super().__init__(stage, max_concurrency)
        self.engine = engine_name
        self.fn = fn
        self.is_async = is_async_callable(fn)
        self.fallback_hint_ms = stage.service_time_ms.p50 if stage.service_time_ms else None
        self.timeout_ms = stage.timeout_ms
        # an async executor of an unbatched stage runs inside the caller's task: no hand-over
        self.inline = self.is_async and not self.batched
        self.timer: asyncio.TimerHandle | None = None


class EngineLanes(Slots):
    """An engine's ``max_concurrency`` slots and queue of at most ``max_queue`` (``Slots``), run for real."""

    # fields of the metrics window
    _DONE, _FAILED, _TIMED_OUT, _SERVICE_S, _BUSY_S = range(5)

    def __init__(self, name: str, config: EngineConfig, *, window_s: float, shed_by: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(config, shed_by=shed_by, wake=self._wake_at)
        self.name = name
        self.window_s = window_s
        self._clock = clock
        self._started = clock()
        self._running_since = 0.0  # sum of the start times of executions in progress (utilisation)
        self._window = SlidingWindow(window_s, 5, clock)
        self.totals = {"requests": 0, "errors": 0, "timeouts": 0, "executions": 0}
        self.rejected: dict[str, int] = {}
        self._workers: Workers | None = None
        self.tasks: set[asyncio.Task] = set()  # async executions in progress
        self._running: dict[int, tuple[Lane, list[_Item]]] = {}  # executions in progress, by id(items)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closed = False
        self.abandoned: dict[str, int] = {}  # stage -> sync calls still running when the engine closed

    def add_lane(self, stage: StageConfig, fn: Callable) -> Lane:
        """The lane of ``stage`` on this engine; sync executors get the engine's worker threads."""
        lane = Lane(stage, self.name, fn, self.max_concurrency)
        if not lane.is_async and self._workers is None:
            # one thread per slot: a sync executor never waits for a thread, only for a slot
            self._workers = Workers(self.max_concurrency, f"loadprobe-route-{self.name}")
        return self.add(lane)

    # -- one attempt ---------------------------------------------------------------------------------------

    async def run(self, lane: Lane, payload: Any, priority: int) -> Any:
        """One attempt of ``payload`` at ``lane``'s stage; raises Rejected, TimeoutError or the executor's error."""
        if self.closed:  # a request that was between stages when the router closed
            raise self.reject("closed", lane, "the router closed while the request was between stages")
        t0 = perf_counter_ns()
        timeout_s = lane.timeout_s
        if lane.inline and self.starts_now(lane):
            return await self._run_inline(lane, payload, timeout_s, t0)
        decision = self.admit(lane, priority)
        if decision is Admission.REJECT:
            raise self.reject("queue_full", lane)
        if decision is Admission.EVICT:
            self._shed()
        loop = self._loop
        now = loop.time()
        item = _Item(payload, priority, loop.create_future(), now, now + timeout_s, contextvars.copy_context())
        self.enqueue(lane, item)
        self._pump()
        try:
            result = await within(item.future, timeout_s, lambda: self.timed_out(lane, item))
        except Rejected:
            raise  # shed while waiting, or the router closed: it never ran
        except BaseException as exc:
            end = perf_counter_ns()
            if item.queued:  # timed out (or cancelled) while waiting: give its place back
                self.remove(lane, item)
                item.queued = False
            self._count_failure(status_of(exc))
            start = item.start_ns or end
            record_span(lane.stage, start, end, status=status_of(exc), batch=item.batch, engine=self.name,
                        queue_ns=start - t0)
            raise
        record_span(lane.stage, item.start_ns, item.end_ns, batch=item.batch, engine=self.name,
                    queue_ns=item.start_ns - t0)
        return result

    async def _run_inline(self, lane: Lane, payload: Any, timeout_s: float, t0: int) -> Any:
        """The fast path: a free slot and an async, unbatched executor run in the caller's own task."""
        self.start(lane)
        start = self._clock()
        self._running_since += start
        status = "ok"
        try:
            return await within(lane.fn(payload), timeout_s, lambda: self.timed_out(lane))
        except BaseException as exc:
            status = status_of(exc)
            explain(exc, lane.stage, self.name)
            raise
        finally:
            t1 = perf_counter_ns()
            self._release(lane, start, 1, status)
            record_span(lane.stage, t0, t1, status=status, engine=self.name, queue_ns=0)

    def timed_out(self, lane: Lane, item: _Item | None = None) -> TimeoutError:
        """The TimeoutError of an attempt at ``lane``'s stage that passed its ``timeout_ms``."""
        if item is not None and item.queued:
            state = "it was still waiting in the engine's queue"
        elif item is not None and item.batch:
            state = f"it was running in a batch of {item.batch}"
        else:
            state = "it was running"
        return timed_out(lane.stage, self.name, lane.timeout_ms, state)

    def reject(self, reason: str, lane: Lane, detail: str | None = None) -> Rejected:
        """A Rejected for ``lane``'s stage here, counted, with a hint of when a slot may be free."""
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        if reason == "closed":  # no slot will ever be free here
            return Rejected(reason, stage=lane.stage, engine=self.name, detail=detail)
        return Rejected(reason, stage=lane.stage, engine=self.name, retry_after_ms=self.retry_after_ms(lane),
                        detail=detail)

    def retry_after_ms(self, lane: Lane) -> float:
        """About when the queue ahead will have drained: mean service time x (waiting / slots + 1).

        Before anything has run here, the stage's configured p50 service time, else its timeout.
        """
        done, _, _, service_s, _ = self._window.totals()
        per_request_ms = service_s * 1000 / done if done else (lane.fallback_hint_ms or lane.timeout_ms)
        return per_request_ms * (self.waiting / self.max_concurrency + 1)

    # -- dispatch ------------------------------------------------------------------------------------------

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach to the event loop the router runs on (timers and hand-overs use it)."""
        self._loop = loop

    def _shed(self) -> None:
        """Make room in a full queue: its newest request of the lowest priority is rejected (``shed``)."""
        lane, victim = self.evict_lowest()
        victim.queued = False
        victim.future.set_exception(self.reject("shed", lane))

    def _pump(self) -> None:
        """Start executions while the policy core has one ready and a slot free."""
        while (batch := self.next_batch(self._loop.time())) is not None:
            self._start(*batch)

    def _wake_at(self, lane: Lane, when: float) -> None:
        """The policy core asks to be asked again at ``when`` (a batching window opens): one timer per lane."""
        if lane.timer is not None:
            lane.timer.cancel()
        lane.timer = self._loop.call_at(when, self._on_timer, lane, when)

    def _on_timer(self, lane: Lane, when: float) -> None:
        lane.timer = None
        self.woke(lane, when)
        self._pump()

    def _start(self, lane: Lane, items: list) -> None:
        """Hand ``items`` (their slot already taken) to the lane's executor: a task, or a worker thread."""
        start = self._clock()
        self._running_since += start
        t0 = perf_counter_ns()
        batch = len(items) if lane.batched else None
        for item in items:
            item.queued = False
            item.start_ns, item.batch = t0, batch
        arg = [item.payload for item in items] if lane.batched else items[0].payload
        context = items[0].context  # the executor's own probes attach to the first member's request
        self._running[id(items)] = (lane, items)
        if lane.is_async:
            deadline = last_deadline(items)
            # the task copies the context current at its creation: the first member's
            task = context.run(self._loop.create_task, self._execute(lane, items, arg, deadline, start))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        else:
            loop = self._loop

            def deliver(result: Any, exc: BaseException | None) -> None:  # on the worker thread
                loop.call_soon_threadsafe(self._finish_thread, lane, items, result, exc, start)

            self._workers.submit(lane.fn, arg, context, deliver)

    async def _execute(self, lane: Lane, items: list, arg: Any, deadline: float, start: float) -> None:
        # Past the last member's deadline nobody waits for the result: stop the executor, free the slot.
        try:
            result = await within(lane.fn(arg), deadline - self._loop.time(),
                                  lambda: self.timed_out(lane, items[0]))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting requests
            self._finish(lane, items, None, exc, start)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        self._finish(lane, items, result, None, start)

    def _finish_thread(self, lane: Lane, items: list, result: Any, exc: BaseException | None, start: float) -> None:
        if self.closed:  # close() already ended its requests: nobody waits for this result
            self._workers.drop_late()
            return
        self._finish(lane, items, result, exc, start)

    def _finish(self, lane: Lane, items: list, result: Any, exc: BaseException | None, start: float) -> None:
        end_ns = perf_counter_ns()
        self._running.pop(id(items), None)
        if exc is None and lane.batched and (not isinstance(result, (list, tuple)) or len(result) != len(items)):
            got = f"{len(result)} results" if isinstance(result, (list, tuple)) else type(result).__name__
            exc = TypeError(f"the executor of batched stage {lane.stage!r} on engine {self.name!r} must return a "
                            f"list of {len(items)} results, one per payload, in order; it returned {got}")
        if exc is not None:
            explain(exc, lane.stage, self.name)
        delivered = 0
        for i, item in enumerate(items):
            item.end_ns = end_ns
            if item.future.done():  # its request timed out or was cancelled meanwhile (and counted that)
                continue
            if isinstance(exc, asyncio.CancelledError):
                item.future.cancel()
            elif exc is not None:
                item.future.set_exception(exc)  # counted as a failure by the waiting request
            else:
                item.future.set_result(result[i] if lane.batched else result)
                delivered += 1
        self._count(delivered)
        self._release(lane, start, len(items), "ok" if exc is None else status_of(exc), outcome_counted=False)

    # -- accounting ----------------------------------------------------------------------------------------

    def _release(self, lane: Lane, start: float, n: int, status: str, outcome_counted: bool = True) -> None:
        now = self._clock()
        self.end(lane)
        self._running_since -= start
        self.totals["executions"] += 1
        self._window.add(self._BUSY_S, now - start)
        self._window.add(self._SERVICE_S, (now - start) * n)
        if outcome_counted:
            if status == "ok":
                self._count(n)
            else:
                self._count_failure(status)
        if self.waiting:
            self._pump()

    def _count(self, n: int) -> None:
        self.totals["requests"] += n
        self._window.add(self._DONE, n)

    def _count_failure(self, status: str) -> None:
        """A request's attempt ended in an error or a timeout; a cancelled caller is no engine failure."""
        if status == "cancelled":
            return
        self.totals["requests"] += 1
        self._window.add(self._DONE)
        self._window.add(self._FAILED)
        if status == "timeout":
            self.totals["timeouts"] += 1
            self._window.add(self._TIMED_OUT)
        else:
            self.totals["errors"] += 1

    def metrics(self) -> dict[str, Any]:
        """The four metrics of an engine (queue length, processing latency, error rate, utilisation) and counts."""
        done, failed, timed_out, service_s, busy_s = self._window.totals()
        now = self._clock()
        in_flight_s = self.busy * now - self._running_since
        span = min(self.window_s, max(now - self._started, 1e-9))
        return {
            "queue_len": self.waiting,
            "max_queue": self.max_queue,
            "peak_queue_len": self.peak_waiting,
            "in_service": self.busy,
            "max_concurrency": self.max_concurrency,
            "latency_ms": service_s * 1000 / done if done else None,
            "error_rate": failed / done if done else 0.0,
            "timeout_rate": timed_out / done if done else 0.0,
            "utilisation": min(1.0, (busy_s + in_flight_s) / (self.max_concurrency * span)),
            "requests": self.totals["requests"],
            "errors": self.totals["errors"],
            "timeouts": self.totals["timeouts"],
            "executions": self.totals["executions"],
            "rejected": dict(self.rejected),
            "abandoned_at_close": dict(self.abandoned),
            "late_results": self._workers.late if self._workers else 0,
        }

    def close(self) -> None:
        """End every request still here with ``Rejected("closed")``; stop async executions; abandon sync ones.

        A sync call still running on a worker thread cannot be stopped: it is counted in
        ``abandoned`` (per stage) and left to its daemon thread, which nothing joins, so the
        process can exit; its result, if it ever comes, is dropped and counted as late.
        """
        self.closed = True
        for lane in self.lanes:
            if lane.timer is not None:
                lane.timer.cancel()
                lane.timer = None
            lane.timer_at = math.inf
            for item in self.take(lane, lane.waiting):
                item.queued = False
                if not item.future.done():
                    item.future.set_exception(self.reject("closed", lane, "the router closed while it waited"))
            if not lane.is_async and lane.busy:
                self.abandoned[lane.stage] = lane.busy
        for lane, items in self._running.values():
            for item in items:
                if not item.future.done():
                    item.future.set_exception(self.reject("closed", lane, "the router closed while it ran"))
        self._running.clear()
        for task in list(self.tasks):
            task.cancel()
        if self._workers is not None:
            self._workers.close()
