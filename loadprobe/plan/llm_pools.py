"""A pool of LLM engine replicas sized by replaying the load through one of them.

A pool is ``replicas`` copies of one engine (``Unit``: a device or a tensor-parallel group of them,
its step-time model, its scheduler's settings) in one of three roles: ``colocated`` (each replica
prefills and decodes), ``prefill`` (prompts only: their first token, then the KV cache is handed
on) or ``decode`` (sequences arrive with their KV cache and only decode). The load is the
recording's own arrivals, played faster or slower to the rate asked (``stream``), so its bursts
are sized for, not a Poisson stream's calm; they go to the replicas in turn, as a load balancer in
front of them sends them, and one replica replayed iteration by iteration (``simulator.llm.engine``)
with the recorded (prompt, output) lengths gives the pool's TTFT and TPOT. ``size_pool`` finds the
fewest replicas whose p95s meet the targets at ``HEADROOM`` x the rate, starting from a throughput
estimate and bisecting; a unit that misses them even serving each request alone is infeasible
however many replicas it has, and says so.

In a disaggregated plan the decode pool's requests reach it after their first token and the KV
hand-off (prompt tokens x KV bytes per token over the link), so its TPOT holds the hand-off and
the wait for a decode slot, spread over the output's tokens; the prefill pool's TTFT holds none of
them.

Usage::

    pool = size_pool("colocated", unit, rate=4.0, lengths=(prompts, outputs), targets=(500.0, 50.0))
    pool.replicas, pool.at_headroom.ttft_p95_ms, pool.at_rate.busy
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ..simulator.llm.engine import EngineSettings, Workload, run_engine
from ..simulator.llm.pools import handoff_ns
from ..simulator.llm.steps import StepModel

WINDOW = 5_000  # recorded requests every pool size is judged on at most (the busiest stretch where there are more) ...
WINDOW_TOKENS = 1_000_000  # ... or fewer where their outputs are long: a replay's time is in its output tokens
MIN_REQUESTS = 200  # per replayed replica at least: the window played again after itself where a replica has fewer
FEWEST_REQUESTS = 20  # ... or as few as this where outputs are so long that 200 would pass WINDOW_TOKENS
ALONE_GAP_S = 3600.0  # between requests replayed one at a time
HEADROOM = 1.5  # a plan meets its targets at this many times the rate
MAX_REPLICAS = 4096
ROLES = ("colocated", "prefill", "decode")


@dataclass
class Unit:
    """What one replica of a pool is: a name for it, its device (None: the recorded engine), its steps and
    settings, and the work before the first token that no step holds (the front end, as recorded)."""

    name: str
    device: object | None
    kind: str
    tp: int
    precision: str | None
    steps: StepModel
    settings: EngineSettings
    ttft_offset_ms: float = 0.0
    figures: dict = field(default_factory=dict)

    @property
    def device_id(self) -> str | None:
        return getattr(self.device, "id", None)


@dataclass
class Outcome:
    """One replica replayed at one rate."""

    rate_per_replica: float
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    tpot_p50_ms: float | None
    tpot_p95_ms: float | None
    good_share: float  # requests within the targets this pool answers for
    busy: float  # the share of the time it ran passes
    largest_batch: int
    preemptions: int
    refused: int

    def to_dict(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


@dataclass
class Pool:
    role: str
    unit: Unit
    replicas: int
    at_rate: Outcome
    at_headroom: Outcome
    feasible: bool
    why: str

    @property
    def devices(self) -> int:
        return self.replicas * self.unit.tp


@dataclass
class Load:
    """What the pools serve: the recorded arrivals (s from the first, in order) and their (prompt, output) lengths,
    the rate to serve them at, the targets, the KV link."""

    rate: float
    arrivals_s: np.ndarray
    prompts: np.ndarray
    outputs: np.ndarray
    ttft_ms: float
    tpot_ms: float
    link_bytes_per_s: float
    seed: int = 0

    @property
    def recorded_rate(self) -> float:
        span = float(self.arrivals_s[-1] - self.arrivals_s[0]) if len(self.arrivals_s) > 1 else 0.0
        return (len(self.arrivals_s) - 1) / span if span > 0 else self.rate

    @property
    def mean_prompt(self) -> float:
        return float(self.prompts.mean())

    @property
    def mean_output(self) -> float:
        return float(self.outputs.mean())


def parallel_note(unit: Unit) -> str | None:
    """What a tensor-parallel unit assumes of its all-reduces: for the plan's, its options' and pipeline.yaml's
    notes (None for a unit of one device)."""
    note = unit.figures.get("tensor_parallel_note")
    return f"{unit.name}: {note}" if note else None


def handoff_ms(unit: Unit, prompt_tokens, load: Load):
    """The KV cache of ``prompt_tokens`` over the link, ms (``simulator.llm.pools.handoff_ns``)."""
    return handoff_ns(prompt_tokens, unit.figures.get("kv_bytes_per_token", 0.0), load.link_bytes_per_s) / 1e6


def _within_tokens(load: Load, fewest: int, most: int) -> int:
    """How many of the load's requests hold about ``WINDOW_TOKENS`` output tokens, kept between ``fewest`` and
    ``most``: a replay's time and memory are in its output tokens."""
    return int(np.clip(WINDOW_TOKENS / max(load.mean_output, 1.0), fewest, most))


def window(load: Load) -> slice:
    """The stretch of the recording every pool size is judged on: all of it, or where it holds more requests than a
    quick replay can take, its busiest stretch of that many -- the one that decides a p95. One for all sizes, so that
    a pool of many replicas is not judged on calmer traffic than a pool of few."""
    keep = _within_tokens(load, MIN_REQUESTS, WINDOW)
    t = load.arrivals_s
    if len(t) <= keep:
        return slice(0, len(t))
    start = int(np.argmin(t[keep - 1:] - t[:len(t) - keep + 1]))
    return slice(start, start + keep)


def stream(load: Load, rate: float, replicas: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What one of ``replicas`` replicas receives when the recording's arrivals (its ``window``) come ``rate /
    recorded rate`` times as fast and go to the replicas in turn: arrivals (s), prompts, outputs. Bursts stay bursts.
    Where a replica would get fewer than ``MIN_REQUESTS`` (fewer where outputs are very long), the window is played
    again after itself."""
    part = window(load)
    arrivals = (load.arrivals_s[part] - load.arrivals_s[part][0]) * load.recorded_rate / rate
    prompts, outputs = load.prompts[part], load.outputs[part]
    span = float(arrivals[-1]) + 1.0 / rate
    # Fewer where outputs are very long (a replay's time and memory are in its output tokens), never below a few.
    wanted = _within_tokens(load, FEWEST_REQUESTS, MIN_REQUESTS)
    copies = max(1, -(-wanted * replicas // len(arrivals)))
    # This replica's turns among the window played ``copies`` times, without making the copies the others get.
    copy, at = np.divmod(np.arange(0, copies * len(arrivals), replicas), len(arrivals))
    t = arrivals[at] + copy * span
    return t - t[0], np.maximum(prompts[at], 1), np.maximum(outputs[at], 1)


def replay(role: str, unit: Unit, load: Load, rate: float, replicas: int) -> Outcome:
    """One replica of a ``role`` pool of ``replicas`` serving ``rate`` requests/s: its TTFT and TPOT."""
    arrivals, prompts, outputs = stream(load, rate, replicas)
    ns = np.round(arrivals * 1e9).astype(np.int64)
    if role == "prefill":
        workload = Workload(ns, prompts, np.ones_like(outputs))
    elif role == "decode":  # the first token came out of the prefill pool; the KV cache follows over the link
        arrive = ns + np.round(handoff_ms(unit, prompts, load) * 1e6).astype(np.int64)
        order = np.argsort(arrive, kind="stable")
        ns, arrive, prompts, outputs = ns[order], arrive[order], prompts[order], outputs[order]
        workload = Workload(arrive, prompts, outputs, first_out_ns=ns)
    else:
        workload = Workload(ns, prompts, outputs)
    served = run_engine(workload, unit.steps, unit.settings, load.seed)
    ran = served.first_ns >= 0
    ttft = tpot = None
    good = ran.copy()
    if role != "decode":
        ttft = (served.first_ns - ns)[ran] / 1e6 + unit.ttft_offset_ms
        good[ran] &= ttft <= load.ttft_ms
    if role != "prefill":
        decoding = ran & (outputs >= 2) & (served.last_ns >= 0)
        per_token = (served.last_ns - served.first_ns)[decoding] / (outputs[decoding] - 1) / 1e6
        tpot = per_token
        good[decoding] &= per_token <= load.tpot_ms
    span = max(int(served.last_ns.max()) if ran.any() else 0, int(workload.arrival_ns.max())) - int(ns.min())

    def pct(values, q):
        return float(np.percentile(values, q)) if values is not None and len(values) else None

    return Outcome(rate_per_replica=rate / replicas, ttft_p50_ms=pct(ttft, 50), ttft_p95_ms=pct(ttft, 95),
                   tpot_p50_ms=pct(tpot, 50), tpot_p95_ms=pct(tpot, 95), good_share=float(good.mean()),
                   busy=min(1.0, served.busy_ns / span) if span > 0 else 0.0, largest_batch=served.largest_batch,
                   preemptions=served.preemptions, refused=served.refused)


def alone_replay(role: str, unit: Unit, load: Load) -> Outcome:
    """Each recorded request on a replica of its own, one at a time: the best the unit can do for the targets."""
    spaced = replace(load, arrivals_s=np.arange(len(load.arrivals_s), dtype=np.float64) * ALONE_GAP_S)
    return replay(role, unit, spaced, 1.0 / ALONE_GAP_S, 1)


def meets(role: str, outcome: Outcome, load: Load) -> bool:
    if outcome.refused:
        return False
    ttft_ok = role == "decode" or (outcome.ttft_p95_ms is not None and outcome.ttft_p95_ms <= load.ttft_ms)
    tpot_ok = role == "prefill" or outcome.tpot_p95_ms is None or outcome.tpot_p95_ms <= load.tpot_ms
    return ttft_ok and tpot_ok


def size_pool(role: str, unit: Unit, load: Load) -> Pool:
    """The fewest replicas of ``unit`` in ``role`` meeting the targets at ``HEADROOM`` x ``load.rate``."""
    target = HEADROOM * load.rate
    tried: dict[int, Outcome] = {}

    def ok(n: int) -> bool:
        if n not in tried:
            tried[n] = replay(role, unit, load, target, n)
        return meets(role, tried[n], load)

    n = min(MAX_REPLICAS, max(1, math.ceil(target / _capacity(role, unit, load))))
    if ok(n):
        hi = n
        while hi > 1 and ok(hi // 2):
            hi //= 2
        lo = hi // 2 if hi > 1 else 0
    else:
        alone = alone_replay(role, unit, load)
        if not meets(role, alone, load):
            return Pool(role, unit, n, replay(role, unit, load, load.rate, n), tried[n], False,
                        f"misses the targets however many replicas: a replica with almost nothing else to do "
                        f"gives {_outcome_text(alone)}")
        lo = n
        hi = min(MAX_REPLICAS, n * 2)
        while not ok(hi):
            if hi == MAX_REPLICAS:
                return Pool(role, unit, hi, replay(role, unit, load, load.rate, hi), tried[hi], False,
                            f"misses the targets even with {MAX_REPLICAS:,} replicas ({_outcome_text(tried[hi])}); "
                            "plan a lower rate, or a larger device")
            lo, hi = hi, min(MAX_REPLICAS, hi * 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    at_rate = replay(role, unit, load, load.rate, hi)
    return Pool(role, unit, hi, at_rate, tried[hi], True,
                f"{hi} replica(s) meet the targets at {target:.3g} req/s ({HEADROOM:g}x the rate: "
                f"{_outcome_text(tried[hi])})" + (f"; {hi - 1} do not ({_outcome_text(tried[hi - 1])})"
                                                  if hi - 1 in tried else ""))


def _outcome_text(o: Outcome) -> str:
    parts = [f"TTFT p95 {o.ttft_p95_ms:.4g} ms" if o.ttft_p95_ms is not None else "",
             f"TPOT p95 {o.tpot_p95_ms:.4g} ms" if o.tpot_p95_ms is not None else "",
             f"{o.refused} refused" if o.refused else ""]
    return ", ".join(p for p in parts if p)


def _capacity(role: str, unit: Unit, load: Load) -> float:
    """A replica's requests/s, roughly (the search's starting point): its prefill work per request and its
    decode work at the batch its KV cache and ``max_running`` allow, whichever the role does."""
    s, steps = unit.settings, unit.steps
    prompt, output = load.mean_prompt, load.mean_output
    prefill_s = steps.scale * (steps.per_prefill + prompt * steps.per_prompt_token
                               + prompt * prompt * steps.per_prompt_token_sq) / 1e9  # weights read once per pass
    batch = max(1, min(s.max_running, (s.kv_tokens or 1 << 40) // max(1, int(prompt + output))))
    decode_s = steps.decode_ns(batch, batch * (prompt + output / 2)) / batch * max(output - 1, 0) / 1e9
    work = {"prefill": prefill_s, "decode": decode_s}.get(role, prefill_s + decode_s)
    return 1.0 / max(work, 1e-9)
