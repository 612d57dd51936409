"""The discrete-event loop: requests through a PipelineConfig's stages, by the router's own rules.

Every decision is asked of the policy core the Router asks (``loadprobe.route.policy``), on a
simulated clock: each engine is a ``Slots`` (``max_concurrency`` slots shared by its stages'
lanes, one bounded priority queue, admission, shedding, which lane's batch starts next under its
batching window and when to wake), each stage's ``StageRules`` steer its attempts (fallback
within the failover cap, breakers) and decide retries within the ``RetryBudget``; an attempt
times out ``timeout_ms`` after it reached the stage, queueing included. What this module adds
is time: a heap of events, service-time draws, and what each attempt's end means.

Executors are async by default, like the router's coroutine executors: an execution still
running at the last deadline of its batch is stopped then and its slot freed. With
``executors="sync"`` (the router runs plain functions in threads, which cannot be stopped) a
timed-out execution keeps its slot until it ends. An attempt fails by timing out or, with the
stage's ``error_rate``, by its executor raising; both count for breakers and retries, as in the
router. Not simulated: the canary split, routing by shape or precision (no payloads here).

The heap holds plain tuples ``(time, sequence, kind, what)``; arrivals are merged in from their
sorted list, so the heap only ever holds what is in flight, and an attempt is freed once it is over.

Random draws come from streams of their own, each seeded from ``seed`` and what it draws for
(``stream()``): the k-th execution of a batch of b on a lane takes the k-th draw of that lane's
stream for b, a stage's executor errors come from the stage's stream, the time outside the
stages from one more. So a draw does not depend on how the other draws interleave, and the
compiled loop (``loadprobe/simulator/compiled/``, a numba port of this loop and of the policy
core, held to it by a parity test) can fetch them in blocks ahead of need and still give the
very same result. This module is the reference.

Usage (``simulate()`` does this, and reads what the run leaves)::

    sim = Simulation(config, arrivals_s, priorities, samplers, seed=1, window_s=10.0).run()
    sim.outcomes, sim.rejects, sim.stages[0].latencies, sim.engines["npu0"].busy_s
"""

from __future__ import annotations

import heapq
import itertools
import random
from array import array
from collections.abc import Mapping, Sequence

from ..pipeline.config import EngineConfig, PipelineConfig, StageConfig
from ..route.policy import Admission, Lane, LaneQueue, PipelineRules, Slots, StageRules, last_deadline
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

    __slots__ = ("request", "stage", "lane", "priority", "enqueued", "deadline", "state", "own", "seq")

    def __init__(self, request: int, stage: int, lane: _Lane, priority: int, enqueued: float, deadline: float,
                 own: bool, seq: int = -1) -> None:
        self.request, self.stage, self.lane, self.priority, self.own = request, stage, lane, priority, own
        self.enqueued, self.deadline, self.state = enqueued, deadline, _QUEUED
        self.seq = seq  # the place of its timeout among events due at the same time; -1: needs none


class _Engine(Slots):
    """An engine's slots and queue (the policy core's), and what the result reports of it."""

    __slots__ = ("name", "busy_s", "executions", "items")

    def __init__(self, name: str, config: EngineConfig, shed_by: str, wake) -> None:
        super().__init__(config, shed_by=shed_by, wake=wake)
        self.name = name
        self.busy_s = 0.0
        self.executions = self.items = 0


class _Lane(Lane):
    """A stage's lane on an engine (the policy core's), with its service times and its queue-timeout event."""

    __slots__ = ("index", "engine", "service", "streams", "deadline_armed")

    def __init__(self, index: int, stage: StageConfig, engine: _Engine, service: ServiceTime) -> None:
        super().__init__(stage, engine.max_concurrency)
        self.index, self.engine, self.service = index, engine, service
        self.streams: list[random.Random | None] = [None] * (self.batch_size + 1)  # by batch size, made when needed
        self.deadline_armed = False  # a _QUEUE_TIMEOUT event is pending for its oldest queued attempt
        engine.add(self)


class _Stage:
    """A stage: its rules (the router's), its lanes, and its counts."""

    def __init__(self, rules: StageRules, lane: _Lane, fallback_lane: _Lane | None) -> None:
        self.name = rules.name
        self.rules = rules
        self.lane, self.fallback_lane = lane, fallback_lane
        self.queue = LaneQueue(lane.engine, lane)  # what steering sees of the engine
        self.entered = self.failovers = self.retries = self.timeouts = self.errors = 0
        self.error_rate = 0.0
        self.error_stream: random.Random | None = None  # its executors' errors, when error_rate > 0
        self.latencies = array("d")

    @property
    def breaker_opened(self) -> int:
        return self.rules.breaker.opened_count if self.rules.breaker is not None else 0


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
        self.rules = rules = PipelineRules(config, window_s=window_s, clock=clock)

        def wake(lane: _Lane, when: float) -> None:  # a batching window opens: pump its engine then
            self._push(when, _WAKE, lane)

        self.engines = {name: _Engine(name, e, rules.shed_by, wake) for name, e in config.engines.items()}
        self.lanes: list[_Lane] = []

        def lane(stage, engine: str) -> _Lane:
            made = _Lane(len(self.lanes), stage, self.engines[engine], service_times[(stage.name, engine)])
            self.lanes.append(made)
            return made

        # lanes in order: each stage's own engine's, then its fallback's (a lane's index seeds its draws)
        self.stages = [_Stage(r, lane(s, s.engine), lane(s, s.fallback.engine) if s.fallback else None)
                       for s, r in zip(config.stages, rules.stages)]
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
        enter, on_done, budget = self._enter, self._on_done, self.rules.budget
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
                lane.engine.woke(lane, self.now)
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

    # -- the router's decisions (router.py: _stage, _attempt, _move; the rules are StageRules') -------------

    def _enter(self, request: int, index: int) -> None:
        self.r_entered[request] = self.now
        self.r_attempt[request] = 1
        self.stages[index].entered += 1
        self._attempt(request, index)

    def _attempt(self, request: int, index: int) -> None:
        stage = self.stages[index]
        rules, lane = stage.rules, stage.lane
        priority = self.priorities[request] if self.priorities is not None else 0
        if rules.plain:  # steer() would say "run"
            return self._run(lane, request, index, priority, True)
        action, reason = rules.steer(stage.queue, priority)
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
        if attempt.own:
            stage.rules.record(ok=False)
        if not stage.rules.may_retry(self.r_attempt[request]):
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
        if attempt.own:
            stage.rules.record(ok=True)
        stage.latencies.append(self.now - self.r_entered[request])
        if index + 1 < len(self.stages):
            self._enter(request, index + 1)
        else:
            self.outcomes["ok"] += 1
            self.end = self.now
            extra = self.outside(1, self.outside_stream) if self.outside is not None else 0.0
            self.latencies.append(self.now - self.arrivals[request] + extra)

    # -- an engine (lanes.py: run, _shed, _pump, _start, _finish; the decisions are Slots') ----------------

    def _run(self, lane: _Lane, request: int, index: int, priority: int, own: bool) -> None:
        engine = lane.engine
        now = self.now
        if not lane.batched and engine.starts_now(lane):
            # What _pump would do at once, without the queue. An async execution ends by its own
            # deadline (_start cuts it there), so no timeout event is needed.
            attempt = _Attempt(request, index, lane, priority, now, now + lane.timeout_s, own,
                               -1 if self.stoppable else next(self.sequence))
            engine.start(lane)
            return self._start(lane, [attempt])
        decision = engine.admit(lane, priority)
        if decision is Admission.REJECT:
            if own:
                self.stages[index].rules.release()
            return self._reject(request, "queue_full")
        if decision is Admission.EVICT:
            self._shed(engine)
        attempt = _Attempt(request, index, lane, priority, now, now + lane.timeout_s, own, next(self.sequence))
        engine.enqueue(lane, attempt)
        if not lane.deadline_armed:
            self._arm(lane)
        self._pump(engine)

    def _shed(self, engine: _Engine) -> None:
        lane, victim = engine.evict_lowest()
        victim.state = _OVER
        if victim.own:
            self.stages[victim.stage].rules.release()
        self._reject(victim.request, "shed")

    def _pump(self, engine: _Engine) -> None:
        while (batch := engine.next_batch(self.now)) is not None:
            self._start(*batch)

    def _start(self, lane: _Lane, attempts: list[_Attempt]) -> None:
        """Run ``attempts`` (their slot taken): draw the execution's time, schedule its end and their timeouts."""
        engine = lane.engine
        engine.executions += 1
        engine.items += len(attempts)
        size = len(attempts)
        rng = lane.streams[size]
        if rng is None:
            rng = lane.streams[size] = stream(self.seed, "service", lane.index, size)
        end = self.now + lane.service(size, rng)
        for a in attempts:
            a.state = _RUNNING
        last = last_deadline(attempts)
        cut = self.stoppable and end > last  # nobody waits past the last deadline: it is stopped
        done = last if cut else end
        for a in attempts:
            if a.deadline < done and a.seq >= 0:  # it times out while running (ending at the deadline is in time)
                heapq.heappush(self.heap, (a.deadline, a.seq, _TIMEOUT, a))
        heapq.heappush(self.heap, (done, next(self.sequence), _DONE, (lane, attempts, self.now, cut)))

    def _on_done(self, batch: tuple) -> None:
        lane, attempts, start, cut = batch
        self.last_done = self.now
        engine = lane.engine
        engine.end(lane)
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
            lane.engine.remove(lane, attempt)
        self._failed(attempt)
