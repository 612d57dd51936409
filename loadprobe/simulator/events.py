"""The discrete-event loop: requests through a PipelineConfig's stages, with the router's rules.

Mirrors ``loadprobe.route`` (engine.py, router.py) on a simulated clock: each engine has
``max_concurrency`` slots shared by its stages' lanes and one bounded priority queue
(``admission()`` decides on a full one); a batched lane starts a batch when it is full, when
its oldest request has waited ``max_wait_ms`` or when the engine's queue is full, and a batch
takes one slot; an attempt times out ``timeout_ms`` after it reached the stage, queueing
included; fallback, breakers and retries are decided by the very ``FailoverCap``, ``Breaker``
and ``RetryBudget`` objects the router uses, given the simulated clock.

Executors are async by default, like the router's coroutine executors: an execution still
running at the last deadline of its batch is stopped then and its slot freed. With
``executors="sync"`` (the router runs plain functions in threads, which cannot be stopped) a
timed-out execution keeps its slot until it ends. An attempt fails by timing out or, with the
stage's ``error_rate``, by its executor raising; both count for breakers and retries, as in the
router. Not simulated: the canary split, routing by shape or precision.

The heap holds plain tuples ``(time, sequence, kind, what)``; arrivals are merged in from their
sorted list, so the heap only ever holds what is in flight, and an attempt is freed once it is over.

Random draws come from streams of their own, each seeded from ``seed`` and what it draws for
(``stream()``): the k-th execution of a batch of b on a lane takes the k-th draw of that lane's
stream for b, a stage's executor errors come from the stage's stream, the time outside the
stages from one more. So a draw does not depend on how the other draws interleave, and the
compiled loop (compiled.py, which mirrors this one and is checked against it) can fetch them in
blocks ahead of need and still give the very same result. This module is the reference.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from array import array
from collections import deque
from collections.abc import Mapping, Sequence

from ..pipeline.config import PipelineConfig
from ..route.policy import Admission, Breaker, FailoverCap, RetryBudget, admission, steer
from .servicetimes import ServiceTime

__all__ = ["SAMPLES", "Simulation", "stream"]

_TIMEOUT, _DONE, _WAKE, _SAMPLE, _QUEUE_TIMEOUT = 0, 1, 2, 3, 4  # event kinds
SAMPLES = 200  # instants at which every engine's queue and busy slots are read
_QUEUED, _RUNNING, _OVER = 0, 1, 2  # attempt states


def stream(seed: int, *what) -> random.Random:
    """The random stream of one kind of draw in a run: ``stream(seed, "service", lane, batch)``,
    ``stream(seed, "errors", stage)``, ``stream(seed, "outside")``; the same arguments, the same stream."""
    return random.Random("/".join(map(str, (seed, *what))))


class _Attempt:
    """One try of one request at one stage: on ``lane``, queued at ``enqueued``, due by ``deadline``."""

    __slots__ = ("request", "stage", "lane", "enqueued", "deadline", "state", "own", "seq")

    def __init__(self, request: int, stage: int, lane: _Lane, enqueued: float, deadline: float, own: bool,
                 seq: int = -1) -> None:
        self.request, self.stage, self.lane, self.own = request, stage, lane, own
        self.enqueued, self.deadline, self.state = enqueued, deadline, _QUEUED
        self.seq = seq  # the place of its timeout among events due at the same time; -1: needs none


class _Engine:
    def __init__(self, name: str, max_concurrency: int, max_queue: int) -> None:
        self.name, self.max_concurrency, self.max_queue = name, max_concurrency, max_queue
        self.busy = self.waiting = 0
        self.lanes: list[_Lane] = []
        self.busy_s = 0.0
        self.executions = self.items = 0


class _Lane:
    def __init__(self, index: int, stage, engine: _Engine, service: ServiceTime) -> None:
        self.index, self.engine, self.service = index, engine, service
        self.batched = stage.batch is not None
        self.batch_size = stage.batch.size if stage.batch else 1
        self.max_wait_s = stage.batch.max_wait_ms / 1000 if stage.batch else 0.0
        self.limit = min(stage.max_concurrency or engine.max_concurrency, engine.max_concurrency)
        self.busy = self.waiting = 0
        self.queues: dict[int, deque[_Attempt]] = {}  # priority -> attempts, oldest first
        self.streams: list[random.Random | None] = [None] * (self.batch_size + 1)  # by batch size, made when needed
        self.timer_at = math.inf
        self.deadline_armed = False  # a _QUEUE_TIMEOUT event is pending for its oldest queued attempt
        engine.lanes.append(self)


class _Stage:
    def __init__(self, config, lane: _Lane, fallback_lane: _Lane | None, max_attempts: int,
                 window_s: float, clock) -> None:
        self.name = config.name
        self.lane, self.fallback_lane = lane, fallback_lane
        self.timeout_s = config.timeout_ms / 1000
        self.max_attempts = max_attempts
        fallback, b = config.fallback, config.breaker
        self.queue_len_over = fallback.when.queue_len_over if fallback and fallback.when else None
        self.otherwise = fallback.otherwise if fallback else "reject"
        self.cap = FailoverCap(fallback.max_ratio, window_s, clock) if fallback else None
        self.breaker = Breaker(b.error_rate_over, b.window_s, b.min_requests, b.open_s, clock) if b else None
        self.entered = self.failovers = self.retries = self.timeouts = self.errors = 0
        self.error_rate = 0.0
        self.error_stream: random.Random | None = None  # its executors' errors, when error_rate > 0
        self.latencies = array("d")

    @property
    def breaker_opened(self) -> int:
        return self.breaker.opened_count if self.breaker is not None else 0


class Simulation:
    """One run. ``run()`` consumes the arrivals and leaves counts and samples on the object."""

    def __init__(self, config: PipelineConfig, arrivals_s: Sequence[float], priorities: Sequence[int] | None,
                 service_times: Mapping[tuple[str, str], ServiceTime], *, seed: int, window_s: float,
                 error_rates: Mapping[str, float] | None = None, executors: str = "async",
                 outside: ServiceTime | None = None) -> None:
        self.now = 0.0
        clock = lambda: self.now  # noqa: E731 - the policy objects read the simulated time
        self.seed = seed
        self.arrivals = list(arrivals_s)
        self.priorities = list(priorities) if priorities is not None else None
        routing = config.routing
        self.shed_by = routing.shed.by if routing and routing.shed else "none"
        self.budget = RetryBudget(routing.retry.budget_ratio, window_s, clock) if routing and routing.retry else None
        default_attempts = routing.retry.max_attempts if routing and routing.retry else 1
        self.engines = {name: _Engine(name, e.max_concurrency, e.max_queue) for name, e in config.engines.items()}
        self.lanes: list[_Lane] = []

        def lane(stage, engine: str) -> _Lane:
            made = _Lane(len(self.lanes), stage, self.engines[engine], service_times[(stage.name, engine)])
            self.lanes.append(made)
            return made

        self.stages = [
            _Stage(s, lane(s, s.engine), lane(s, s.fallback.engine) if s.fallback else None,
                   s.retry.max_attempts if s.retry else default_attempts, window_s, clock)
            for s in config.stages]
        # requests
        n = len(self.arrivals)
        self.r_entered = array("d", bytes(8 * n))  # when the request reached its current stage
        self.r_attempt = array("l", bytes(array("l").itemsize * n))
        self.outcomes = {"ok": 0, "rejected": 0, "timeout": 0, "error": 0}
        self.stoppable = executors == "async"
        self.outside = outside  # time a request spends outside every stage, added to its latency
        self.outside_stream = stream(seed, "outside") if outside is not None else None
        for index, stage in enumerate(self.stages):
            stage.error_rate = (error_rates or {}).get(stage.name, 0.0)
            if stage.error_rate:
                stage.error_stream = stream(seed, "errors", index)
        self.rejects: dict[str, int] = {}
        self.latencies = array("d")
        self.heap: list[tuple] = []  # (time, sequence, kind, what): an attempt, a batch, a lane, a sample
        self.sequence = itertools.count()
        self.end = 0.0  # when the last request ended (stale timeouts may still follow in the heap)
        self.last_done = 0.0  # when the last execution ended: a sync one may outlive its request
        self.sampled_at: list[float] = []
        self.samples: dict[str, tuple[list[int], list[int]]] = {name: ([], []) for name in self.engines}
        if n:
            step = max(self.arrivals[-1] - self.arrivals[0], 1e-9) / SAMPLES
            for k in range(SAMPLES):
                self._push(self.arrivals[0] + k * step, _SAMPLE, None)

    # -- the loop ------------------------------------------------------------------------------------------

    def run(self) -> Simulation:
        heap, arrivals, pop = self.heap, self.arrivals, heapq.heappop
        enter, on_done, budget = self._enter, self._on_done, self.budget
        i, n = 0, len(arrivals)
        while i < n or heap:
            if i < n and (not heap or arrivals[i] < heap[0][0]):
                self.now = arrivals[i]
                if budget is not None:
                    budget.note_request()
                enter(i, 0)
                i += 1
                continue
            self.now, _, kind, what = pop(heap)
            if kind == _DONE:
                on_done(what)
            elif kind == _TIMEOUT:
                if what.state != _OVER:
                    self._on_timeout(what)
            elif kind == _QUEUE_TIMEOUT:
                lane = what.lane
                lane.deadline_armed = False
                if what.state == _QUEUED:
                    self._on_timeout(what)
                if lane.waiting and not lane.deadline_armed:
                    self._arm(lane)
            elif kind == _SAMPLE:
                self._sample()
            else:
                lane = what
                if lane.timer_at == self.now:
                    lane.timer_at = math.inf
                self._pump(lane.engine)
        return self

    def _sample(self) -> None:
        self.sampled_at.append(self.now)
        for name, engine in self.engines.items():
            queue, busy = self.samples[name]
            queue.append(engine.waiting)
            busy.append(engine.busy)

    def _arm(self, lane: _Lane) -> None:
        """One timeout event per lane, for its oldest queued attempt: a lane's attempts share one
        timeout, so they expire in the order they queued, and the next is armed when one fires."""
        oldest = min((q[0] for q in lane.queues.values()), key=lambda a: a.seq)
        heapq.heappush(self.heap, (oldest.deadline, oldest.seq, _QUEUE_TIMEOUT, oldest))
        lane.deadline_armed = True

    def _push(self, when: float, kind: int, what) -> None:
        heapq.heappush(self.heap, (when, next(self.sequence), kind, what))

    # -- the router's decisions (router.py: _stage, _attempt, _move) -------------------------------------

    def _enter(self, request: int, index: int) -> None:
        self.r_entered[request] = self.now
        self.r_attempt[request] = 1
        stage = self.stages[index]
        stage.entered += 1
        if stage.cap is None and stage.breaker is None:  # steer() would say "run": skip building its questions
            priorities = self.priorities
            return self._run(stage.lane, request, index, priorities[request] if priorities is not None else 0, True)
        self._attempt(request, index)

    def _attempt(self, request: int, index: int) -> None:
        stage = self.stages[index]
        lane, breaker, cap = stage.lane, stage.breaker, stage.cap
        priority = self.priorities[request] if self.priorities is not None else 0
        if cap is None and breaker is None:
            return self._run(lane, request, index, priority, True)
        action, reason = steer(cap, breaker, otherwise=stage.otherwise,
                               queue_over=lambda: stage.queue_len_over is not None
                               and lane.engine.waiting > stage.queue_len_over,
                               turned_away=lambda: not self._can_admit(lane, priority))
        if action == "reject":
            return self._reject(request, reason)
        if action == "move":
            stage.failovers += 1
            return self._run(stage.fallback_lane, request, index, priority, False)
        self._run(lane, request, index, priority, True)

    def _reject(self, request: int, reason: str) -> None:
        self.rejects[reason] = self.rejects.get(reason, 0) + 1
        self.outcomes["rejected"] += 1
        self.end = self.now

    def _failed(self, attempt: _Attempt, error: bool = False) -> None:
        """An attempt timed out (or raised): tell the breaker, then retry within max_attempts and the budget."""
        attempt.state = _OVER
        request, index = attempt.request, attempt.stage
        stage = self.stages[index]
        if error:
            stage.errors += 1
        else:
            stage.timeouts += 1
        if attempt.own and stage.breaker is not None:
            stage.breaker.record(ok=False)
        if self.r_attempt[request] >= stage.max_attempts or (self.budget is not None and not self.budget.try_retry()):
            self.outcomes["error" if error else "timeout"] += 1
            self.end = self.now
            return
        self.r_attempt[request] += 1
        stage.retries += 1
        self._attempt(request, index)

    def _succeeded(self, attempt: _Attempt) -> None:
        attempt.state = _OVER
        request, index = attempt.request, attempt.stage
        stage = self.stages[index]
        if attempt.own and stage.breaker is not None:
            stage.breaker.record(ok=True)
        stage.latencies.append(self.now - self.r_entered[request])
        if index + 1 < len(self.stages):
            self._enter(request, index + 1)
        else:
            self.outcomes["ok"] += 1
            self.end = self.now
            extra = self.outside(1, self.outside_stream) if self.outside is not None else 0.0
            self.latencies.append(self.now - self.arrivals[request] + extra)

    # -- an engine (engine.py: run, _pump, _ready_lane, _start, _finish) ---------------------------------

    def _starts_now(self, lane: _Lane) -> bool:
        engine = lane.engine
        return engine.busy < engine.max_concurrency and lane.busy < lane.limit and not engine.waiting

    def _admission(self, engine: _Engine, priority: int) -> Admission:
        lowest = min((min(lane.queues) for lane in engine.lanes if lane.queues), default=None)
        return admission(waiting=engine.waiting, max_queue=engine.max_queue, priority=priority,
                         lowest_waiting=lowest, shed_by=self.shed_by)

    def _can_admit(self, lane: _Lane, priority: int) -> bool:
        engine = lane.engine
        if self._starts_now(lane) or engine.waiting < engine.max_queue:
            return True
        return self._admission(engine, priority) is not Admission.REJECT

    def _run(self, lane: _Lane, request: int, index: int, priority: int, own: bool) -> None:
        engine = lane.engine
        stage = self.stages[index]
        now = self.now
        starts_now = not engine.waiting and engine.busy < engine.max_concurrency and lane.busy < lane.limit
        if starts_now and not lane.batched:
            # What _pump would do at once, without the queue. An async execution ends by its own
            # deadline (_start cuts it there), so no timeout event is needed.
            attempt = _Attempt(request, index, lane, now, now + stage.timeout_s, own,
                               -1 if self.stoppable else next(self.sequence))
            return self._start(lane, [attempt])
        if not starts_now and engine.waiting >= engine.max_queue:
            if self._admission(engine, priority) is Admission.REJECT:
                if own and stage.breaker is not None:
                    stage.breaker.release()
                return self._reject(request, "queue_full")
            self._evict_lowest(engine)
        attempt = _Attempt(request, index, lane, now, now + stage.timeout_s, own, next(self.sequence))
        lane.queues.setdefault(priority, deque()).append(attempt)
        lane.waiting += 1
        engine.waiting += 1
        if not lane.deadline_armed:
            self._arm(lane)
        self._pump(engine)

    def _evict_lowest(self, engine: _Engine) -> None:
        lane = min((lane for lane in engine.lanes if lane.queues), key=lambda lane: min(lane.queues))
        lowest = min(lane.queues)
        queue = lane.queues[lowest]
        victim = queue.pop()  # the newest of the lowest priority
        if not queue:
            del lane.queues[lowest]
        lane.waiting -= 1
        engine.waiting -= 1
        victim.state = _OVER
        stage = self.stages[victim.stage]
        if victim.own and stage.breaker is not None:
            stage.breaker.release()
        self._reject(victim.request, "shed")

    def _pump(self, engine: _Engine) -> None:
        while engine.waiting and engine.busy < engine.max_concurrency:
            lane = self._ready_lane(engine)
            if lane is None:
                return
            self._start(lane, self._take(lane))

    def _ready_lane(self, engine: _Engine) -> _Lane | None:
        best, best_key = None, None
        now = self.now
        for lane in engine.lanes:
            if not lane.waiting or lane.busy >= lane.limit:
                continue
            queues = lane.queues
            oldest = min(q[0].enqueued for q in queues.values()) if len(queues) > 1 else \
                next(iter(queues.values()))[0].enqueued
            if lane.waiting < lane.batch_size and engine.waiting < engine.max_queue:
                opens = oldest + lane.max_wait_s
                if now < opens:
                    if opens < lane.timer_at:
                        lane.timer_at = opens
                        self._push(opens, _WAKE, lane)
                    continue
            key = (max(lane.queues), -oldest)
            if best_key is None or key > best_key:
                best, best_key = lane, key
        return best

    def _take(self, lane: _Lane) -> list[_Attempt]:
        out: list[_Attempt] = []
        n = lane.batch_size
        while len(out) < n and lane.queues:
            top = max(lane.queues)
            queue = lane.queues[top]
            while queue and len(out) < n:
                out.append(queue.popleft())
            if not queue:
                del lane.queues[top]
        lane.waiting -= len(out)
        lane.engine.waiting -= len(out)
        return out

    def _start(self, lane: _Lane, attempts: list[_Attempt]) -> None:
        engine = lane.engine
        engine.busy += 1
        lane.busy += 1
        engine.executions += 1
        engine.items += len(attempts)
        size = len(attempts)
        rng = lane.streams[size]
        if rng is None:
            rng = lane.streams[size] = stream(self.seed, "service", lane.index, size)
        end = self.now + lane.service(size, rng)
        if len(attempts) == 1:
            last_deadline = attempts[0].deadline
            attempts[0].state = _RUNNING
        else:
            last_deadline = max(a.deadline for a in attempts)
            for a in attempts:
                a.state = _RUNNING
        cut = self.stoppable and end > last_deadline  # nobody waits past the last deadline: it is stopped
        done = last_deadline if cut else end
        for a in attempts:
            if a.deadline < done and a.seq >= 0:  # it times out while running (ending at the deadline is in time)
                heapq.heappush(self.heap, (a.deadline, a.seq, _TIMEOUT, a))
        heapq.heappush(self.heap, (done, next(self.sequence), _DONE, (lane, attempts, self.now, cut)))

    def _on_done(self, batch: tuple) -> None:
        lane, attempts, start, cut = batch
        self.last_done = self.now
        engine = lane.engine
        engine.busy -= 1
        lane.busy -= 1
        engine.busy_s += self.now - start
        if engine.waiting:
            self._pump(engine)  # the slot is reused before the members move on, as in the router
        stage = self.stages[attempts[0].stage]  # a lane serves one stage
        rate = stage.error_rate
        for a in attempts:
            if a.state != _RUNNING:
                continue  # timed out while running (a sync executor) or already over
            if cut:
                self._failed(a)
            elif rate and stage.error_stream.random() < rate:
                self._failed(a, error=True)
            else:
                self._succeeded(a)

    def _on_timeout(self, attempt: _Attempt) -> None:
        if attempt.state == _QUEUED:
            lane = attempt.lane
            for priority, queue in lane.queues.items():
                for i, queued in enumerate(queue):  # almost always at the head: a stage's attempts
                    if queued is attempt:           # share one timeout
                        del queue[i]
                        break
                else:
                    continue
                if not queue:
                    del lane.queues[priority]
                break
            lane.waiting -= 1
            lane.engine.waiting -= 1
        self._failed(attempt)
