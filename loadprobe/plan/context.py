"""What planning reads from a portrait: the stages to place, the host's CPU, executions per request.

Usage::

    ctx = PlanContext(portrait, constraints, catalog, targets=targets.resolve(portrait, constraints),
                      cpu_cores=cpu_cores(portrait), stages=plan_stages(portrait))
    ctx.budget_ms(stage)                       # the stage's share of the SLO
    calls_per_request(ctx)["decode"]           # executions per request (an LLM's decode: once per token)
    host_cpu_capacity(portrait)                # (req/s the recorded host's CPU alone carries, how)
    host_work(portrait)                        # the host's CPU work outside the stages, per request, and how counted
    interpreter(portrait)                      # a Python service's worker processes and interpreter CPU per request
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .constraints import Constraints, EngineSpec
from .targets import Targets

if TYPE_CHECKING:
    from ..catalog import Catalog
    from ..estimate.hostpower import HostCpuPower
    from ..estimate.servicetime import StageProfile
    from ..portrait import Portrait, Stage
from ..estimate.distribution import Distribution
from ..estimate.servicetime import cpu_share
from ..schema import LOAD_CLIENT_SERVICE, engine_kind

__all__ = ["CPU_SATURATED_PCT", "DEFAULT_CPU_CORES", "Contention", "HostWork", "Interpreter", "PlanContext",
           "calls_per_request", "contention_scale", "cpu_contention", "cpu_cores", "cpu_load_pct", "cpu_steal",
           "cpu_util", "delay_ms", "host_cpu_capacity", "host_load_pct", "host_work", "interpreter", "native_pools",
           "plan_stages", "recorded_kind", "service_name", "unattributed_ms"]

DEFAULT_CPU_CORES = 4
CPU_SATURATED_PCT = 85.0
"""A host CPU this busy (as recorded, or at the sizing rate) is saturated: light stages may leave it, and a
recording this busy timed its CPU stages with waits for a core in them (``cpu_contention``)."""


@dataclass
class PlanContext:
    """One planning run's inputs and the figures every step reads: its targets, the host's cores, the stages."""

    portrait: Portrait
    constraints: Constraints
    catalog: Catalog | None
    targets: Targets  # resolved once (``targets.resolve``); a resampled draw carries its own rate
    cpu_cores: tuple[int, str]  # (cores, how known)
    stages: list[Stage]  # the portrait's stages a plan places, in request order (``plan_stages``)
    cpu_load_pct: float | None = None  # the host at the sizing rate, every stage where recorded (``host_load_pct``)
    host_power: HostCpuPower | None = None  # the host CPU's maximum power and its basis
    draws: list[tuple[list[StageProfile], PlanContext]] | None = None  # confidence.resample: the draws checked on
    host: HostWork | None = None  # the host CPU's work outside the stages, per request (``host_work``)
    interpreter: Interpreter | None = None  # a Python service's interpreter lock (``interpreter``)
    contention: Contention | None = None  # a saturated recording's waits for a core (``cpu_contention``)
    native_pools: str | None = None  # worker processes' native pools oversubscribing the cores (``native_pools``)
    steal: str | None = None  # the recording's host lost CPU time to its hypervisor (``cpu_steal``)
    host_cpu: object = None  # the host CPU as recorded, for stages recorded elsewhere (``recorded_host_cpu``)

    @property
    def rate(self) -> float:
        """The sizing rate (``targets.rate_rps``)."""
        return self.targets.rate_rps

    @property
    def slo_ms(self) -> float | None:
        """The p95 target (``targets.p95_ms``)."""
        return self.targets.p95_ms

    def budget_ms(self, stage) -> float | None:
        """A stage's share of the SLO: the SLO times its share of request time (at least 5% of it)."""
        if self.slo_ms is None:
            return None
        share = stage.share if stage.share is not None else 1.0 / max(1, len(self.stages))
        return self.slo_ms * max(0.05, share)

    def device(self, spec: EngineSpec):
        """The catalog device an engine spec runs on (a kind's default device when it names none), or None."""
        name = spec.catalog_id
        return self.catalog.get(name) if name else None


def plan_stages(portrait) -> list:
    """The stages a plan places, in the order a request runs them: every stage but request roots."""
    stages = [s for s in portrait.stages if not _is_root(s)]
    return sorted(stages, key=lambda s: (s.start_offset_ms is None, s.start_offset_ms or 0.0))


def _is_root(stage) -> bool:
    """A request root (an HTTP route, ``request``): never inside another span, no engine of its own."""
    whole = stage.share is not None and stage.share >= 0.999
    return not stage.engines and (whole or stage.start_offset_ms is None)


def recorded_kind(stage) -> str:
    """The kind of engine a stage was recorded on: a GPU if any of its engines is one, else an NPU, else the CPU."""
    kinds = {engine_kind(e) for e in stage.engines or {}}
    return "gpu" if "gpu" in kinds else "npu" if "npu" in kinds else "cpu"


def cpu_cores(portrait) -> tuple[int, str]:
    """The host's cores: as run.json recorded them, else busy core-seconds / CPU utilisation."""
    cores = recorded_cores(portrait)
    if cores is not None:
        return cores, f"{cores} core{'s' if cores != 1 else ''}: the recorded host's logical cores (run.json)"
    util = cpu_util(portrait)
    duration = portrait.traffic.duration_s if portrait.traffic else None
    busy = _cpu_busy_ms(portrait)
    if util and util > 5 and duration:
        cores = max(1, round(busy / 1000.0 / duration / (util / 100.0)))
        return cores, (f"{cores} core{'s' if cores != 1 else ''}: the CPU stages kept {busy / 1000.0 / duration:.2f} "
                       "cores busy at "
                       f"{util:.0f}% CPU utilisation")
    why = "no CPU utilisation was recorded" if not util else f"CPU utilisation ({util:.1f}%) too low to infer from"
    return DEFAULT_CPU_CORES, f"{DEFAULT_CPU_CORES} cores assumed: {why}; give --cpu-cores"


def recorded_cores(portrait) -> int | None:
    """The host's logical cores as run.json recorded them (the fewest of several hosts'), or None."""
    recorded = [h.get("logical_cores") for h in (getattr(portrait.data_quality, "host_hardware", None) or {}).values()
                if isinstance(h.get("logical_cores"), int) and h.get("logical_cores") > 0]
    return min(recorded, default=None)


def _cpu_stage_ms(portrait, *, as_recorded: bool = False) -> float:
    """Core-milliseconds the stages recorded on the CPU worked, over the whole recording: their own time, less
    what their spans' CPU showed was waiting (``cpu_share``), and less the waits of a saturated recording
    (``cpu_contention``) unless ``as_recorded``."""
    # A batcher-fed stage records its shared execution once per member: count it once per batch.
    # Only the share of a stage's own time its spans showed using a core is work (``cpu_share``): an await on a
    # downstream call holds the stage open and loads no core.
    work = sum(s.count / (s.batch.mean if s.queue_ms is not None and s.batch is not None and s.batch.mean else 1.0)
               * (s.self_ms_mean or 0.0) * cpu_share(s) for s in plan_stages(portrait) if recorded_kind(s) == "cpu")
    return work if as_recorded else work * contention_scale(portrait)


@dataclass(frozen=True)
class Contention:
    """A recording made while the host's cores or its interpreter lock were saturated: its CPU stages' and own times
    hold waits for them."""

    scale: float  # the share of the recorded CPU time that was work: the time given / the time asked of it
    how: str


def cpu_contention(portrait) -> Contention | None:
    """When the CPU stages and the service's own time held more CPU time than the saturated resource gave --
    the host's cores (``CPU_SATURATED_PCT`` busy) or a Python service's interpreter lock (its worker processes'
    interpreters that busy) -- the excess was waiting for it: each request's CPU times shrink by ``scale`` =
    the time given / held, as processor sharing would have stretched them (the smaller scale when both were
    saturated). None otherwise -- a stage that waits on I/O also holds more wall time than cores, but leaves
    them idle."""
    traffic = portrait.traffic
    requests = portrait.requests.count if portrait.requests is not None else 0
    if not traffic or not traffic.duration_s or not requests:
        return None
    root = _request_root(portrait)
    own_work = unattributed_ms(portrait) * (cpu_share(root) if root is not None else 1.0)
    asked_ms = _cpu_stage_ms(portrait, as_recorded=True) + requests * own_work
    found = [c for c in (_cores_contention(portrait, asked_ms), _lock_contention(portrait, asked_ms, requests))
             if c is not None]
    return min(found, key=lambda c: c.scale, default=None)


def _cores_contention(portrait, asked_ms: float) -> Contention | None:
    """``cpu_contention`` for the host's cores: what they gave is cores x duration x utilisation (cores as
    recorded: inferred ones come from the very CPU times in question)."""
    util, cores = cpu_util(portrait), recorded_cores(portrait)
    if util is None or util < CPU_SATURATED_PCT or cores is None:
        return None
    busy_ms = cores * portrait.traffic.duration_s * 1000.0 * util / 100.0
    if asked_ms <= busy_ms:
        return None
    scale = busy_ms / asked_ms
    return Contention(scale, f"recorded while the host CPU was saturated ({util:.0f}% busy): its CPU stages and "
                             f"own time held {asked_ms / busy_ms:.3g}x the core time the {cores} cores gave, so "
                             f"{1 - scale:.0%} of it was waiting for a core and is taken out (each CPU time x "
                             f"{scale:.3g}); record below saturation for figures to plan on")


def _lock_contention(portrait, asked_ms: float, requests: int) -> Contention | None:
    """``cpu_contention`` for a Python service's interpreter lock: with its worker processes' interpreters
    saturated, requests queue for the lock inside the stages (threads of one process, each holding it in turn)
    while cores stand idle; what the processes gave is the CPU they were sampled using."""
    workers = _workers(portrait)
    busy = _interpreter_busy_pct(portrait, workers)  # their mean: every worker saturated, not one of them
    if busy < CPU_SATURATED_PCT:
        return None
    sampled = process_cpu_ms(portrait)
    busy_ms = sampled * requests if sampled else sum(workers.values())
    if asked_ms <= busy_ms:
        return None
    scale = busy_ms / asked_ms
    processes = f"{len(workers)} worker process{'es' if len(workers) != 1 else ''}"
    return Contention(scale, f"recorded while the Python interpreter was saturated ({busy:.0f}% busy in "
                             f"{processes}): its CPU stages and own time held {asked_ms / busy_ms:.3g}x the CPU "
                             f"the processes used, so {1 - scale:.0%} of it was waiting for the interpreter lock "
                             f"and is taken out (each CPU time x {scale:.3g}); record below saturation for "
                             "figures to plan on")


def contention_scale(portrait) -> float:
    """``cpu_contention``'s scale, 1 when the recording did not saturate the host's cores."""
    found = cpu_contention(portrait)
    return found.scale if found is not None else 1.0


def _cpu_busy_ms(portrait) -> float:
    """Core-milliseconds the host CPU worked over the whole recording: the CPU stages, and the service's own
    work outside them (``host_work``)."""
    requests = portrait.requests.count if portrait.requests is not None else 0
    own = _own_work(portrait)
    return _cpu_stage_ms(portrait) + (requests * own[2] if own is not None else 0.0)


def cpu_load_pct(portrait, rate: float, cores: int) -> float | None:
    """The host CPU's utilisation if every stage stayed where it was recorded, at ``rate`` req/s."""
    requests = portrait.requests.count if portrait.requests is not None else 0
    if not requests or not cores:
        return None
    return 100.0 * rate * _cpu_busy_ms(portrait) / requests / 1000.0 / cores


def host_load_pct(portrait, rate: float, cores: int, python: Interpreter | None) -> float | None:
    """How busy the host would be at ``rate`` req/s with every stage where it was recorded (%): its cores'
    utilisation or, for a Python service, its interpreter's, whichever is the busier."""
    load = cpu_load_pct(portrait, rate, cores)
    if python is None:
        return load
    return max(load or 0.0, 100.0 * rate * python.ms / 1000.0 / python.processes)


def host_cpu_capacity(portrait) -> tuple[float, str] | None:
    """The request rate the recorded host's CPU alone carries at full load, with every stage where it
    was recorded, and how that was worked out; None without requests or CPU stages.

    Usage::

        rps, why = host_cpu_capacity(portrait)    # e.g. plan for twice that: the CPU alone cannot carry it
    """
    cores, cores_why = cpu_cores(portrait)
    load = cpu_load_pct(portrait, 1.0, cores)
    if not load:
        return None
    per_request_ms = load / 100.0 * cores * 1000.0
    own = _own_work(portrait)
    rps, why = 100.0 / load, (f"{cores_why}; {per_request_ms:.3g} ms of CPU per request, as recorded"
                              + (f" ({own[2]:.3g} ms of it the service's own work outside the stages)"
                                 if own is not None else ""))
    python = interpreter(portrait)
    if python is not None and python.max_rps < rps:
        return python.max_rps, f"{why}; but {python.how}"
    return rps, why


def cpu_util(portrait) -> float | None:
    """The host CPU's mean utilisation as recorded (%), or None."""
    return next((m.mean for m in portrait.devices.metrics if m.device == "cpu" and m.metric == "util_pct"), None)


def calls_per_request(ctx: PlanContext) -> dict[str, float]:
    """Executions of each stage per request (spans / requests): decode runs once per token."""
    requests = ctx.portrait.requests.count if ctx.portrait.requests is not None else 0
    if not requests:
        return {}
    return {s.name: max(1.0, s.count / requests) for s in ctx.stages}


def unattributed_ms(portrait) -> float:
    """Mean request time the service spent outside every stage (ms): the request spans' own time. With a load
    client's recording joined, its time outside the server (network, connections) is not the service's."""
    req = portrait.requests
    if req is None or req.latency_ms is None or req.unattributed_share is None or req.latency_ms.mean is None:
        return 0.0
    return req.latency_ms.mean * max(0.0, req.unattributed_share - (req.outside_server_share or 0.0))


@dataclass(frozen=True)
class HostWork:
    """The host CPU's work per request outside the probed stages (HTTP parsing, serialisation, framework code).

    Every plan keeps the request path on the host, so every plan counts it on the host's CPU engine:
    in its capacity, its utilisation and its simulation, like a stage that never moves."""

    root: str  # the request span it was measured in
    distribution: Distribution  # ms per request
    how: str


def host_work(portrait) -> HostWork | None:
    """The recorded time in no probed stage, as host CPU work per request; None when there is none.

    Its mean is the request spans' mean own time (exact) -- unless the process CPU the recording
    sampled shows less work: a request's own time also holds waits (for a core, a lock, a
    downstream call) that load no core. Then the work is what the sampled CPU leaves after the CPU
    stages: ``min(own time, process CPU per request - CPU stages per request)``. The portrait keeps
    the request span's total time, not its own time's distribution, so its shape is worked out: a
    lognormal at the own time's mean whose variance is what the stages do not explain (the request's
    variance less its stages', as for independent parts), its long tail cut to the work's mean when
    that is less (the waits are the long part). ``loadprobe simulate --service-times DATA`` draws the
    recorded own times instead."""
    found = _own_work(portrait)
    if found is None:
        return None
    root, own, work, how = found
    cv = _own_time_cv(portrait, root, unattributed_ms(portrait))  # the spread as recorded: contention only scales it
    return HostWork(root.name, Distribution.lognormal(own, cv).capped_to_mean(work), how)


def _own_work(portrait) -> tuple[object, float, float, str] | None:
    """``host_work``'s figures without its shape: (the request stage, own time ms, work ms, how counted)."""
    own = unattributed_ms(portrait) * contention_scale(portrait)
    root = _request_root(portrait)
    requests = portrait.requests.count if portrait.requests is not None else 0
    if own <= 0 or root is None or not requests:
        return None
    share = own / portrait.requests.latency_ms.mean
    how = (f"{own:.3g} ms per request in no probed stage ({share:.0%} of request time: the {root.name!r} spans' own "
           "time)")
    work = own
    sampled = process_cpu_ms(portrait)
    working = cpu_share(root)
    if working < 1.0:  # its spans' own CPU says which part was work
        work = own * working
        how += (f"; its sampled spans ({root.cpu_spans:,}) used a core {working:.0%} of that time, so "
                f"{work:.3g} ms is work and the rest waiting")
    elif sampled is not None:
        stages = _cpu_stage_ms(portrait) / requests
        work = max(0.0, min(own, sampled - stages))
        how += (f"; the process CPU sampled was {sampled:.3g} ms per request, {stages:.3g} ms of it in CPU stages"
                + (f", so {work:.3g} ms of that time is work and the rest waiting" if work < own else ""))
    how += "; counted as host CPU work in every plan, since the request path stays on the host"
    return (root, own, work, how) if work > 0 else None


def _request_root(portrait):
    """The stage whose spans are the service's requests (its commonest request root; with a load client's recording
    joined, the server's span, not the client's); None without one."""
    roots = [s for s in portrait.stages if _is_root(s)]
    if not roots:
        return None
    if portrait.requests is not None and portrait.requests.outside_server_share is not None and len(roots) > 1:
        roots = [s for s in roots if s.share is None or s.share < 0.999] or roots
    return max(roots, key=lambda s: s.count)


def _own_time_cv(portrait, root, own_ms: float) -> float:
    """The spread of a request's own time: the variance of its whole time that its stages (independent parts,
    ``calls`` executions each) do not explain, as a coefficient of variation (at most 3)."""
    requests = portrait.requests.count if portrait.requests is not None else 0
    whole = Distribution.of_stage(root, total=True).sd_ms ** 2
    parts = sum(max(1.0, s.count / requests) * Distribution.of_stage(s).sd_ms ** 2 for s in plan_stages(portrait))
    return min(3.0, math.sqrt(max(0.0, whole - parts)) / own_ms)


@dataclass(frozen=True)
class Interpreter:
    """A Python service's interpreter lock: each worker process runs one request's Python code at a time, so
    ``processes`` of them carry at most ``processes`` x 1000 / ``ms`` requests per second, whatever the cores."""

    processes: int
    ms: float  # interpreter CPU per request (its Python threads', as sampled), over all processes
    cpu_work_ms: float  # the host CPU work per request it was measured with: the CPU stages and the own work
    busy_pct: float = 100.0  # how busy the worker processes' interpreters were as recorded (their mean)

    @property
    def max_rps(self) -> float:
        return self.processes * 1000.0 / self.ms

    @property
    def how(self) -> str:
        light = (f"; measured {self.busy_pct:.0f}% busy, and a process's CPU per request moves as it saturates (up "
                 "where a thread pool hands the lock over, down where the event loop never idles): where this bound "
                 "decides, record under a closed loop (loadprobe load --concurrency N) and plan from that"
                 if self.busy_pct < LIGHT_INTERPRETER_PCT else "")
        return (f"the Python interpreter: {self.ms:.3g} ms of its CPU per request (its threads', sampled), one "
                f"request's Python at a time in each of {self.processes} worker process"
                f"{'es' if self.processes != 1 else ''}, so at most {self.max_rps:.3g} req/s, however many cores; "
                f"more worker processes raise it{light}")

    def for_plan(self, cpu_work_ms: float) -> tuple[int, float]:
        """(processes, interpreter ms per request) of a plan that keeps ``cpu_work_ms`` of CPU work per request on
        the host: the interpreter's time moves with that work (a stage moved to an accelerator takes its Python
        with it, in proportion), never below none."""
        scale = cpu_work_ms / self.cpu_work_ms if self.cpu_work_ms > 0 else 1.0
        return self.processes, self.ms * scale


LIGHT_INTERPRETER_PCT = 50.0
"""Below this busy, an interpreter's recorded CPU per request is a light load's, and the plan says it may move."""

BUSY_PROCESS_SHARE = 0.1
"""A process counts as a worker when its interpreter was at least this share as busy as the busiest one's
(a pre-fork server's supervisor, a health-check sidecar: recorded, but serving nothing)."""


def _interpreter_ms(portrait) -> dict[str, float]:
    """Each recorded process's interpreter CPU over the recording (``interpreter:<pid>`` device -> ms)."""
    return {m.device: m.mean / 100.0 * m.seconds * 1000.0 for m in portrait.devices.metrics
            if m.device.startswith("interpreter:") and m.metric == "cpu_pct"}


def _interpreter_busy_pct(portrait, workers: dict[str, float]) -> float:
    """How busy the ``workers``' interpreters were over the recording (%, their time-weighted mean; 0 without)."""
    util = [m for m in portrait.devices.metrics if m.device in workers and m.metric == "cpu_pct"]
    seconds = sum(m.seconds for m in util)
    return sum(m.mean * m.seconds for m in util) / seconds if seconds else 0.0


def _workers(portrait) -> dict[str, float]:
    """The recorded worker processes (as ``_interpreter_ms``): those at least ``BUSY_PROCESS_SHARE`` as busy as the
    busiest."""
    busy = _interpreter_ms(portrait)
    most = max(busy.values(), default=0.0)
    return {d: b for d, b in busy.items() if most > 0 and b >= BUSY_PROCESS_SHARE * most}


def native_pools(portrait) -> str | None:
    """Why the recorded CPU figures are not the host's own when several worker processes each ran a pool of native
    threads (BLAS, OpenMP, an inference runtime) and together they asked for more threads than the host has cores
    (each process's Python thread and its busy native threads at their 95th percentile); None otherwise. Such pools
    spin while they wait for work, so oversubscribed they slow each other down many times over under load."""
    workers = _workers(portrait)
    pools = {m.device: m.p95 for m in portrait.devices.metrics
             if m.device in workers and m.metric == "native_threads"}
    cores = cpu_cores(portrait)[0]
    wanted = sum(1 + round(t) for t in pools.values())
    if len(pools) < 2 or wanted <= cores or not any(round(t) >= 1 for t in pools.values()):
        return None
    most = max(round(t) for t in pools.values())
    per_process = max(1, cores // len(workers))
    threads = f"{per_process} thread{'s' if per_process != 1 else ''}"
    return (f"{len(workers)} worker processes each ran up to {most} busy native thread{'s' if most != 1 else ''} "
            f"(BLAS, OpenMP or an inference runtime's pool) beside its Python: {wanted} threads for {cores} cores. "
            "Such pools spin while they wait for work, and oversubscribed they slow each other down many times over "
            "under load -- the CPU stages' recorded times hold that fight, so neither they nor this plan's capacity "
            f"say what the host does without it; limit each process to {threads} (OMP_NUM_THREADS={per_process}, "
            f"OPENBLAS_NUM_THREADS={per_process}, MKL_NUM_THREADS={per_process}, or torch.set_num_threads) and record "
            "again")


def cpu_steal(portrait) -> str | None:
    """What a plan says when the recording's host lost CPU time to its hypervisor while serving
    (``Devices.stolen_cpu``); None otherwise. Not corrected for: a host shared like it would lose it again."""
    stolen = portrait.devices.stolen_cpu()
    if not stolen:
        return None
    worst = max(stolen, key=lambda m: m.mean)
    return (f"the hypervisor took {worst.mean:.0f}% of host {worst.host}'s CPU time while it served (steal; "
            f"{worst.p95:.0f}% in the 95th-percentile second): the recorded times hold those pauses, so these figures "
            "describe a host shared as that one was: dedicated cores would carry more, busier neighbours less; record "
            "on dedicated cores, or at a quiet time, before buying by them")


def interpreter(portrait) -> Interpreter | None:
    """The recorded service's interpreter lock, from its processes' sampled Python-thread CPU (``interpreter:<pid>``
    samples, which every recording process writes where the lock is on); None when not sampled."""
    requests = portrait.requests.count if portrait.requests is not None else 0
    total = sum(_interpreter_ms(portrait).values())
    if not requests or total <= 0:
        return None
    workers = _workers(portrait)
    own = _own_work(portrait)
    cpu_work = _cpu_stage_ms(portrait) / requests + (own[2] if own is not None else 0.0)
    return Interpreter(len(workers), total / requests, cpu_work, _interpreter_busy_pct(portrait, workers))


def process_cpu_ms(portrait) -> float | None:
    """CPU milliseconds per request the recorded processes used, from their sampled CPU (None when not sampled)."""
    requests = portrait.requests.count if portrait.requests is not None else 0
    samples = [m for m in portrait.devices.metrics if m.device == "process" and m.metric == "cpu_pct"]
    if not requests or not samples:
        return None
    return sum(m.mean / 100.0 * m.seconds for m in samples) * 1000.0 / requests


def delay_ms(ctx: PlanContext) -> float:
    """What every plan adds to each request's latency without loading an engine: the time outside the server
    (network, connections) when a load client's recording was joined, and the runtime's hand-off delay per
    stage when a calibration (``--calibration``) measured one."""
    req, calibration = ctx.portrait.requests, ctx.constraints.evidence.calibration
    outside_server = (req.latency_ms.mean * req.outside_server_share
                      if req is not None and req.latency_ms is not None and req.latency_ms.mean is not None
                      and req.outside_server_share else 0.0)
    return outside_server + (calibration.handoff_ms * len(ctx.stages) if calibration is not None else 0.0)


def service_name(portrait) -> str:
    """The recorded service's name, as pipeline.yaml and plans.json carry it: the server's where a load client's
    recording was joined to it (the client is the same requests seen from outside, not the service planned)."""
    services = portrait.data_quality.services if portrait.data_quality else []
    served = [s for s in services if s != LOAD_CLIENT_SERVICE]
    return (served or services or ["service"])[0]
