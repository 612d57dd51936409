"""The compiled loop's Python side: build its arrays from a plan, feed it draws, grow its pool, read its result.

Usage (``simulate(..., loop="compiled")`` does this)::

    from loadprobe.simulator.compiled import run
    sim = run(config, arrivals, priorities, samplers, seed=1, window_s=10.0)
    sim.outcomes, sim.stages[0].latencies, sim.engines["npu0"].busy_s   # what result.py reads

Every rule's parameters come from the policy core's own reading of the plan
(``loadprobe.route.policy``: ``PipelineRules``, ``Lane``), laid out in the tables ``layout``
names; the lanes are numbered as events.py numbers them, so both draw from the same streams.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
from numba import config as numba_config

from ...route.policy import BUCKETS_PER_WINDOW, Lane, PipelineRules
from ..events import SAMPLES, stream
from ..servicetimes import draw_block
from .layout import (A_NEXT, B_FIRST, BUCKETS, D_CAPACITY, D_FILLED, D_NEED, D_POS, D_START, E_BUSY_S,
                     E_END_LANE, E_EXECUTIONS, E_FIRST_LANE, E_ITEMS, E_MAX_CONCURRENCY, E_MAX_QUEUE, FINISHED,
                     G_BUDGET, G_BUDGET_RATIO, G_END, G_FIELDS, G_FREE_ATTEMPT, G_FREE_ATTEMPTS, G_FREE_BATCH,
                     G_HEAP_SIZE, G_LAST_DONE, G_LATENCIES, G_LOW_DRAWS, G_OUTCOMES, G_OUTSIDE_STREAM, G_REJECT_ORDER,
                     G_REJECTS, G_ROOM, G_SAMPLES, G_SEQ, G_SHED_BY_PRIORITY, G_STOPPABLE, H_KIND, H_SEQ, H_WHAT,
                     L_BATCH_SIZE, L_BATCHED, L_ENGINE, L_LIMIT, L_MAX_WAIT, L_STAGE, L_STREAM, L_TIMER_AT, NEED_DRAWS,
                     Q_LEN, REASONS, S_BREAKER, S_CAP, S_ENTERED, S_ERROR_RATE, S_ERROR_RATE_OVER, S_ERROR_STREAM,
                     S_ERRORS, S_FAILOVERS, S_FALLBACK, S_LANE, S_LATENCIES, S_MAX_ATTEMPTS, S_MAX_RATIO,
                     S_MIN_REQUESTS, S_OPEN_S, S_OPENED, S_OTHERWISE_REJECT, S_QUEUE_OVER, S_RETRIES, S_TIMEOUT,
                     S_TIMEOUTS, SAMPLE, Arrays, make_state, set_draws, set_pool)
from .loop import run_events

__all__ = ["CompiledRun", "run"]


@dataclass
class _StageTotals:
    name: str
    entered: int
    failovers: int
    retries: int
    timeouts: int
    errors: int
    breaker_opened: int
    latencies: np.ndarray  # seconds


@dataclass
class _EngineTotals:
    name: str
    max_concurrency: int
    busy_s: float
    executions: int
    items: int


@dataclass
class CompiledRun:
    """What a run leaves, under the names ``events.Simulation`` uses (result.py reads either)."""

    stages: list
    engines: dict
    samples: dict  # engine -> (queue lengths, busy slots) at each sample
    sampled_at: list
    outcomes: dict
    rejects: dict
    latencies: np.ndarray
    end: float
    last_done: float
    refills: int = 0  # times the loop stopped for more draws (for tests and benchmarks)
    growths: int = 0  # times it stopped for a larger attempt pool


class Streams:
    """The run's random streams and the samplers drawing from them, feeding ``draw_buf`` block by block.

    Stream ``k`` owns the segment ``draw_buf[start:start + capacity]``; the loop consumes it from
    ``pos`` to ``filled`` and asks for more once fewer than ``need`` are left (what one event may
    take). A refill moves what is left to the segment's start and appends a block of the
    sampler's next draws: the first block about what a quarter of the run would take (``hint``),
    each next one 4x larger, up to ``MAX_BLOCK``; streams about to run low are topped up at the
    same time. So a short run draws little ahead and a long one comes back to Python rarely.
    """

    FIRST_BLOCK, MAX_BLOCK = 32, 1 << 16

    def __init__(self) -> None:
        self.samplers: list = []  # (sampler, batch, rng) per stream
        self.need: list[int] = []
        self.block: list[int] = []

    def add(self, sampler, batch: int, rng, need: int, hint: int) -> int:
        """A stream of ``sampler``'s draws for ``batch``; one event takes at most ``need`` of them."""
        need = max(1, need)
        self.samplers.append((sampler, batch, rng))
        self.need.append(need)
        self.block.append(max(self.FIRST_BLOCK, 2 * need, min(hint, self.MAX_BLOCK)))
        return len(self.samplers) - 1

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``draw_buf`` and ``draw_i``, laid out, empty: the first ``refill`` fills every stream."""
        draw_i = np.zeros((len(self.samplers), 5), dtype=np.int64)
        draw_i[:, D_NEED] = self.need
        draw_i[:, D_CAPACITY] = np.add(self.need, self.block)
        draw_i[:, D_START] = np.cumsum(draw_i[:, D_CAPACITY]) - draw_i[:, D_CAPACITY]
        return np.zeros(max(int(draw_i[:, D_CAPACITY].sum()), 1)), draw_i

    def refill(self, arrays: Arrays) -> Arrays:
        draw_i, buf = arrays.draw_i, arrays.draw_buf
        left = draw_i[:, D_FILLED] - draw_i[:, D_POS]
        soon = np.flatnonzero(left < draw_i[:, D_NEED] + np.asarray(self.block) // 4)
        for k in soon:
            if draw_i[k, D_FILLED]:  # not the first block: a longer one
                self.block[k] = min(self.block[k] * 4, self.MAX_BLOCK)
        wanted = np.add(self.need, self.block)
        if (wanted > draw_i[:, D_CAPACITY]).any():  # some segments grow: lay the buffer out anew
            capacity = np.maximum(wanted, draw_i[:, D_CAPACITY])
            start = np.cumsum(capacity) - capacity
            grown = np.zeros(int(capacity.sum()))
            for k in range(len(capacity)):
                kept = buf[draw_i[k, D_START] + draw_i[k, D_POS]:draw_i[k, D_START] + draw_i[k, D_FILLED]]
                grown[start[k]:start[k] + len(kept)] = kept
            draw_i[:, D_FILLED] -= draw_i[:, D_POS]
            draw_i[:, D_POS] = 0
            draw_i[:, D_START], draw_i[:, D_CAPACITY] = start, capacity
            buf = grown
            arrays = arrays._replace(draw_buf=buf)
        for k in soon:
            start, pos, filled = draw_i[k, D_START], draw_i[k, D_POS], draw_i[k, D_FILLED]
            kept = filled - pos
            buf[start:start + kept] = buf[start + pos:start + filled]
            sampler, batch, rng = self.samplers[k]
            more = int(draw_i[k, D_CAPACITY]) - kept
            buf[start + kept:start + kept + more] = draw_block(sampler, batch, rng, more)
            draw_i[k, D_POS], draw_i[k, D_FILLED] = 0, kept + more
        arrays.g_i[G_LOW_DRAWS] = 0
        return arrays


def _uniform(batch: int, rng) -> float:
    """An executor-error draw: events.py's ``error_stream.random()``."""
    return rng.random()


def grow(arrays: Arrays) -> Arrays:
    """Twice the attempt pool (the new records join the free list) and a heap to match."""
    att_i, att_f = arrays.att_i, arrays.att_f
    old = att_i.shape[0]
    new = 2 * old
    att_i = np.concatenate([att_i, np.zeros((old, att_i.shape[1]), dtype=np.int64)])
    att_f = np.concatenate([att_f, np.zeros((old, att_f.shape[1]))])
    att_i[old:, A_NEXT] = np.arange(old + 1, new + 1)
    att_i[new - 1, A_NEXT] = arrays.g_i[G_FREE_ATTEMPT]
    arrays.g_i[G_FREE_ATTEMPT] = old
    arrays.g_i[G_FREE_ATTEMPTS] += old
    heap_t, heap_i = arrays.heap_t, arrays.heap_i
    if 4 * arrays.g_i[G_HEAP_SIZE] > heap_t.shape[0] or heap_t.shape[0] < 2 * new:
        size = max(2 * heap_t.shape[0], 2 * new)
        heap_t = np.concatenate([heap_t, np.zeros(size - heap_t.shape[0])])
        heap_i = np.concatenate([heap_i, np.zeros((size - heap_i.shape[0], 3), dtype=np.int64)])
    return arrays._replace(att_i=att_i, att_f=att_f, heap_t=heap_t, heap_i=heap_i)


def run(config, arrivals_s, priorities, service_times, *, seed: int, window_s: float,
        error_rates=None, executors: str = "async", outside=None) -> CompiledRun:
    """``events.Simulation(...).run()``, compiled: the same arguments, the same counts and latencies.

    The compiled code sees the same arrays as ``arrays`` through a STATE (with NUMBA_DISABLE_JIT=1,
    for debugging, the loop runs as plain Python over a namespace of them).
    """
    arrays, streams = build(config, arrivals_s, priorities, service_times, seed=seed, window_s=window_s,
                             error_rates=error_rates, executors=executors, outside=outside)
    state = make_state(*arrays) if not numba_config.DISABLE_JIT else SimpleNamespace(**arrays._asdict())
    refills = growths = 0
    while True:
        status = run_events(state)
        if status == FINISHED:
            break
        if status == NEED_DRAWS:
            refills += 1
            before = arrays.draw_buf
            arrays = streams.refill(arrays)
            if arrays.draw_buf is not before:
                set_draws(state, arrays.draw_buf)
        else:
            growths += 1
            arrays = grow(arrays)
            set_pool(state, arrays.att_i, arrays.att_f, arrays.heap_t, arrays.heap_i)
    return totals(config, arrays, refills, growths)


def build(config, arrivals_s, priorities, service_times, *, seed, window_s, error_rates, executors, outside):
    """The arrays of a run of ``config``, and the streams that feed its draws; the first draws are in."""
    arrivals = np.array(arrivals_s, dtype=np.float64)  # a copy: writable and contiguous, as STATE says
    n = len(arrivals)
    engine_names = list(config.engines)
    engine_index = {name: k for k, name in enumerate(engine_names)}
    # the rules' parameters as the policy core reads them (its counts start at the clock's 0.0, as here)
    rules = PipelineRules(config, window_s=window_s, clock=lambda: 0.0)
    stages = list(config.stages)

    # lanes in events.py's order: each stage's own engine, then its fallback's
    lanes = []  # (stage index, engine name, the policy core's Lane)
    for index, st in enumerate(stages):
        for engine in st.runs_on:
            lanes.append((index, engine, Lane(st, config.engines[engine].max_concurrency)))
    max_batch = max((lane.batch_size for _, _, lane in lanes), default=1)
    room = max_batch + 2  # attempts one event may create: one per member of a batch, or one arrival's

    streams = Streams()
    lane_i = np.zeros((len(lanes), 9), dtype=np.int64)
    lane_f = np.zeros((len(lanes), 2))
    for k, (index, engine, lane) in enumerate(lanes):
        lane_i[k, [L_ENGINE, L_STAGE, L_BATCHED, L_BATCH_SIZE, L_LIMIT]] = \
            engine_index[engine], index, lane.batched, lane.batch_size, lane.limit
        lane_f[k, L_MAX_WAIT] = lane.max_wait_s
        lane_f[k, L_TIMER_AT] = lane.timer_at
        sampler = service_times[(lane.stage, engine)]
        queue = max(config.engines[engine].max_queue, 1)
        for batch in range(1, lane.batch_size + 1):
            # one event starts at most `limit` executions on a lane, and at most (queued + new) // batch of size batch
            stream_id = streams.add(sampler, batch, stream(seed, "service", k, batch),
                                    need=min(lane.limit, (queue + room) // batch), hint=n // (4 * lane.batch_size))
            if batch == 1:
                lane_i[k, L_STREAM] = stream_id

    eng_i = np.zeros((len(engine_names), 8), dtype=np.int64)
    eng_lanes = []
    for e, name in enumerate(engine_names):
        spec = config.engines[name]
        mine = [k for k, (_, engine, _) in enumerate(lanes) if engine == name]
        eng_i[e, [E_MAX_CONCURRENCY, E_MAX_QUEUE, E_FIRST_LANE, E_END_LANE]] = \
            spec.max_concurrency, spec.max_queue, len(eng_lanes), len(eng_lanes) + len(mine)
        eng_lanes += mine

    windows: list[float] = []  # bucket widths, as SlidingWindow's

    def window(counts) -> int:
        windows.append(counts.window_s / BUCKETS_PER_WINDOW)
        return len(windows) - 1

    stage_i = np.zeros((len(stages), 17), dtype=np.int64)
    stage_f = np.zeros((len(stages), 7))
    lane_of: dict[int, list[int]] = {}
    for k, (index, _, _) in enumerate(lanes):
        lane_of.setdefault(index, []).append(k)
    for index, (st, r) in enumerate(zip(stages, rules.stages)):
        own = lane_of[index]
        stage_i[index, S_LANE] = own[0]
        stage_i[index, S_FALLBACK] = own[1] if len(own) > 1 else -1
        stage_i[index, S_MAX_ATTEMPTS] = r.max_attempts
        stage_i[index, S_QUEUE_OVER] = r.queue_len_over if r.queue_len_over is not None else -1
        stage_i[index, S_OTHERWISE_REJECT] = r.otherwise == "reject"
        stage_i[index, S_CAP] = window(r.cap) if r.cap is not None else -1
        stage_f[index, S_MAX_RATIO] = r.cap.ratio if r.cap is not None else 0.0
        stage_i[index, S_BREAKER] = window(r.breaker) if r.breaker is not None else -1
        if r.breaker is not None:
            b = r.breaker
            stage_f[index, [S_ERROR_RATE_OVER, S_MIN_REQUESTS, S_OPEN_S]] = b.error_rate_over, b.min_requests, b.open_s
        stage_f[index, S_TIMEOUT] = r.timeout_s
        rate = (error_rates or {}).get(st.name, 0.0)
        stage_f[index, S_ERROR_RATE] = rate
        batch = max(st.batch.size if st.batch else 1, 1)
        stage_i[index, S_ERROR_STREAM] = streams.add(_uniform, 1, stream(seed, "errors", index), need=batch,
                                                     hint=int(n * rate) // 4) if rate else -1

    g_i = np.zeros(G_FIELDS, dtype=np.int64)
    g_f = np.zeros(4)
    g_i[G_BUDGET] = window(rules.budget) if rules.budget is not None else -1
    g_f[G_BUDGET_RATIO] = rules.budget.ratio if rules.budget is not None else 0.0
    g_i[G_SHED_BY_PRIORITY] = rules.shed_by == "priority"
    g_i[G_STOPPABLE] = executors == "async"
    g_i[G_OUTSIDE_STREAM] = streams.add(outside, 1, stream(seed, "outside"), need=max_batch,
                                        hint=n // 4) if outside is not None else -1
    g_i[G_ROOM] = room

    if priorities is not None:
        levels, ranks = np.unique(np.asarray(priorities), return_inverse=True)  # the order is all that matters
        req_priority = np.ascontiguousarray(ranks.reshape(-1), dtype=np.int64)
        levels = max(len(levels), 1)
    else:
        req_priority, levels = np.zeros(n, dtype=np.int64), 1
    queues = np.full((len(lanes), levels, 3), -1, dtype=np.int64)
    queues[:, :, Q_LEN] = 0

    pool = 1024
    att_i = np.zeros((pool, 10), dtype=np.int64)
    att_i[:, A_NEXT] = np.arange(1, pool + 1)
    att_i[-1, A_NEXT] = -1
    g_i[G_FREE_ATTEMPT], g_i[G_FREE_ATTEMPTS] = 0, pool
    # a batch record per busy slot, and the one whose members are moving on as it ends
    slots = int(sum(spec.max_concurrency for spec in config.engines.values()))
    bat_i = np.zeros((slots + 1, 4), dtype=np.int64)
    bat_i[:, B_FIRST] = np.arange(1, len(bat_i) + 1)
    bat_i[-1, B_FIRST] = -1
    heap_size = SAMPLES + len(bat_i) + 2 * pool + 4 * len(lanes) + 64
    heap_t, heap_i = np.zeros(heap_size), np.zeros((heap_size, 3), dtype=np.int64)
    sampled_at = np.zeros(SAMPLES)
    if n:  # the 200 sample events, pushed first (sequences 0-199): in time order, already a heap
        step = max(float(arrivals[-1]) - float(arrivals[0]), 1e-9) / SAMPLES
        first = float(arrivals[0])
        heap_t[:SAMPLES] = [first + k * step for k in range(SAMPLES)]
        heap_i[:SAMPLES, H_SEQ] = np.arange(SAMPLES)
        heap_i[:SAMPLES, H_KIND] = SAMPLE
        heap_i[:SAMPLES, H_WHAT] = -1
        g_i[G_HEAP_SIZE] = g_i[G_SEQ] = SAMPLES
    g_i[G_FREE_BATCH] = 0
    draw_buf, draw_i = streams.arrays()
    arrays = Arrays(
        lane_i=lane_i, lane_f=lane_f, eng_i=eng_i, eng_f=np.zeros((len(engine_names), 1)),
        eng_lanes=np.array(eng_lanes, dtype=np.int64), stage_i=stage_i, stage_f=stage_f,
        stage_latencies=np.zeros((len(stages), n)),
        win_buckets=np.zeros((len(windows), BUCKETS, 2)), win_totals=np.zeros((len(windows), 2)),
        # SlidingWindow starts at the bucket of the clock's time when it is made: 0.0
        win_index=np.array([math.floor(0.0 / width) for width in windows], dtype=np.int64),
        win_width=np.array(windows, dtype=np.float64), queues=queues, att_i=att_i, att_f=np.zeros((pool, 2)),
        bat_i=bat_i, bat_f=np.zeros(len(bat_i)), heap_t=heap_t, heap_i=heap_i, arrivals=arrivals,
        req_entered=np.zeros(n), req_attempt=np.zeros(n, dtype=np.int64), req_priority=req_priority,
        latencies=np.zeros(n), sampled_at=sampled_at,
        samples=np.zeros((SAMPLES, len(engine_names), 2), dtype=np.int64),
        draw_buf=draw_buf, draw_i=draw_i, g_i=g_i, g_f=g_f)
    arrays.g_i[G_LOW_DRAWS] = 1  # nothing drawn yet: the first refill fills every stream
    return streams.refill(arrays), streams


def totals(config, s: Arrays, refills: int, growths: int) -> CompiledRun:
    stages = [_StageTotals(name=st.name, entered=int(row[S_ENTERED]), failovers=int(row[S_FAILOVERS]),
                           retries=int(row[S_RETRIES]), timeouts=int(row[S_TIMEOUTS]), errors=int(row[S_ERRORS]),
                           breaker_opened=int(row[S_OPENED]), latencies=s.stage_latencies[k, :row[S_LATENCIES]])
              for k, (st, row) in enumerate(zip(config.stages, s.stage_i))]
    engines = {name: _EngineTotals(name=name, max_concurrency=int(s.eng_i[e, E_MAX_CONCURRENCY]),
                                   busy_s=float(s.eng_f[e, E_BUSY_S]), executions=int(s.eng_i[e, E_EXECUTIONS]),
                                   items=int(s.eng_i[e, E_ITEMS]))
               for e, name in enumerate(config.engines)}
    taken = int(s.g_i[G_SAMPLES])
    samples = {name: (s.samples[:taken, e, 0].tolist(), s.samples[:taken, e, 1].tolist())
               for e, name in enumerate(config.engines)}
    g = s.g_i
    outcomes = {name: int(g[G_OUTCOMES + k]) for k, name in enumerate(("ok", "rejected", "timeout", "error"))}
    seen = sorted((int(g[G_REJECT_ORDER + k]), k) for k in range(len(REASONS)) if g[G_REJECTS + k])
    rejects: dict[str, Any] = {REASONS[k]: int(g[G_REJECTS + k]) for _, k in seen}
    return CompiledRun(stages=stages, engines=engines, samples=samples, sampled_at=s.sampled_at[:taken].tolist(),
                       outcomes=outcomes, rejects=rejects, latencies=s.latencies[:int(g[G_LATENCIES])],
                       end=float(s.g_f[G_END]), last_done=float(s.g_f[G_LAST_DONE]), refills=refills,
                       growths=growths)
