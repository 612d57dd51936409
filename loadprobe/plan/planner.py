"""From a load portrait to a plan: which engine runs each stage, how, and why.

Usage::

    from loadprobe.plan.constraints import Constraints
    from loadprobe.plan.planner import recommend

    plan = recommend(portrait, Constraints.parse(engines="cpu,gpu:nvidia-l4,npu:ascend-310p",
                                                 slo_p95_ms=200, precision=["int8-ok"]))
    plan.scenario, plan.recommended.decisions[0].why
    plan.to_pipeline()        # PipelineConfig -> pipeline.yaml
    plan.to_dict()            # plans.json: the recommended plan and its alternatives

The rules are the seeds' reasoning made explicit, each applied from measured figures:

1. a stage with no FLOPs and no shapes recorded is host code (decoding, parsing): CPU;
2. a light stage (self p50 under ``LIGHT_MS`` and under ``LIGHT_SHARE`` of request time)
   stays on the CPU unless the CPU is saturated (``CPU_SATURATED_PCT``), as recorded or at the
   sizing rate with every stage left where it was recorded;
3. dynamic shapes keep a stage off engines without native dynamic-shape support;
4. INT8 only where the precision policy allows it (``--precision``, or ``loadprobe align``);
5. among the engines left, the one with the least energy per item that meets the
   stage's latency budget (its share of the SLO) -- which is the NPU for a fixed-shape,
   compute-bound, INT8-tolerant stage, and the device with the most bandwidth per watt
   for a memory-bound one; when none meets the budget, the fastest;
6. batch: the largest of 1, 2, 4 ... 32 whose execution plus gathering window fits the
   budget; window: the time the peak rate takes to fill the batch;
7. timeout: twice the stage's estimated p99 plus its window; concurrency: Little's law at
   the peak rate with 50% headroom; queue bound: the arrivals of one latency budget;
8. fallback: another engine able to run the stage, for the share of its traffic that
   engine's spare capacity at peak can absorb, capped at ``FAILOVER_CAP``.

Alternatives -- every stage on one kind of engine where it can run there -- are estimated
the same way, so the table compares like with like.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .._errors import LoadprobeError
from .constraints import Constraints, EngineSpec
from .simulation import FAILED_SHARE_OK, FAILOVER_RATIOS, STRESS, WINDOW_FACTORS, OptionCheck, tune
from .queueing import IDLE_POWER_SHARE, EngineCapacity, Estimate, Placement, estimate
from .servicetime import DEFAULT_DEVICE, ServiceTime, StageProfile, service_time

LIGHT_MS = 1.0
LIGHT_SHARE = 0.10
CPU_SATURATED_PCT = 85.0
FAILOVER_CAP = 0.3  # the seeds: move at most ~30% of a backed-up engine's traffic, never all of it
BATCHES = (1, 2, 4, 8, 16, 32)
HEADROOM = 1.5
DEFAULT_CPU_CORES = 4
PLAN_KINDS = {"hybrid": None, "all-gpu": "gpu", "all-npu": "npu", "all-cpu": "cpu"}


@dataclass
class Decision:
    """One stage's placement and settings; ``why`` has a reason for every field."""

    stage: str
    engine: str
    kind: str
    device: str | None
    precision: str
    batch: int
    window_ms: float
    timeout_ms: float
    max_concurrency: int
    fallback: dict | None
    service: ServiceTime
    shape: list | None
    dynamic_shape: bool
    why: dict = field(default_factory=dict)
    keep_fp16: tuple = ()  # layers kept in FP16 in an INT8 stage (loadprobe align)


@dataclass
class Option:
    """A complete plan: the recommended hybrid or a single-engine alternative."""

    name: str
    decisions: list
    engines: dict  # name -> {"kind", "device", "count", "max_concurrency", "max_queue", "power_w", "why"}
    estimate: Estimate | None
    stress: Estimate | None  # at 1.5x the sizing rate
    tco: dict | None
    meets_slo: bool | None
    notes: list = field(default_factory=list)
    feasible: bool = True
    judged: list = field(default_factory=list)  # the notes of the latest verdict (see _judge)
    tuning: list = field(default_factory=list)  # the settings the simulator tried (the recommended option)


@dataclass
class Plan:
    service: str
    scenario: str
    scenario_why: str
    constraints: Constraints
    rate_rps: float
    slo_p95_ms: float | None
    recommended: Option
    alternatives: list
    verdict: str  # how the recommendation compares with the alternatives, in one paragraph
    rate_why: str = ""  # where the sizing rate comes from

    def to_pipeline(self):
        from .files import to_pipeline

        return to_pipeline(self)

    def to_dict(self) -> dict:
        from .files import plan_dict

        return plan_dict(self)


def recommend(portrait, constraints: Constraints | None = None, *, catalog=None, cpu_cores: int | None = None,
              rate_why: str | None = None) -> Plan:
    """The plan for ``portrait`` under ``constraints`` (default: the seeds' cpu + L4 + 310P line-up).

    ``rate_why``: why the sizing rate (``constraints.min_rps``) is what it is, said with the plan."""
    from ..catalog import load_catalog

    catalog = catalog or load_catalog()
    constraints = constraints or Constraints.parse(catalog=catalog)
    stages = _plan_stages(portrait)
    if not stages:
        raise LoadprobeError("the portrait has no stages to place; record with @probe around the service's stages")
    if constraints.align:
        from ..align.document import check_stages

        check_stages(constraints.align, [s.name for s in stages])
    _check_stage_names(constraints, [s.name for s in stages])
    rate = constraints.min_rps or (portrait.traffic.peak_rps if portrait.traffic else None)
    if not rate:
        raise LoadprobeError("the portrait has no request rate; give --min-rps")
    if rate_why is None:
        rate_why = ("the rate asked for (--min-rps)" if constraints.min_rps else
                    f"the recorded peak (per {portrait.traffic.bucket_s:g} s); give --min-rps to plan for another rate")
    req = portrait.requests
    slo = constraints.slo_p95_ms or (req.latency_ms.p95 if req is not None and req.latency_ms else None)
    recorded = catalog.find(portrait.roofline_device)
    profiles = [StageProfile.of(s, recorded_device=recorded if recorded is not None
                                and recorded.kind == _recorded_kind(s) else None) for s in stages]
    cores = (cpu_cores, f"{cpu_cores} cores (given)") if cpu_cores else _cpu_cores(portrait)
    ctx = _Context(portrait, constraints, catalog, rate, slo, cores, stages,
                   _cpu_load_pct(portrait, rate, cores[0] * next((s.count for s in constraints.engines
                                                                   if s.kind == "cpu"), 1)))
    options = [_build_option(name, kind, profiles, ctx) for name, kind in PLAN_KINDS.items()]
    options = [o for o in options if o is not None]
    for option in options:
        _simulate(option, ctx, profiles)
    recommended, alternatives = _select(options)
    _tune(recommended, ctx, profiles)
    scenario, why = _scenario(portrait, constraints, profiles, slo)
    return Plan(_service(portrait), scenario, why, constraints, rate, slo, recommended, alternatives,
                _verdict(recommended, alternatives, slo), rate_why)


# -- context ----------------------------------------------------------------------------


@dataclass
class _Context:
    portrait: object
    constraints: Constraints
    catalog: object
    rate: float
    slo_ms: float | None
    cpu_cores: tuple[int, str]
    stages: list
    cpu_load_pct: float | None = None  # the host CPU at the sizing rate with every stage where it was recorded

    def budget_ms(self, stage) -> float | None:
        """A stage's share of the SLO: the SLO times its share of request time (at least 5% of it)."""
        if self.slo_ms is None:
            return None
        share = stage.share if stage.share is not None else 1.0 / max(1, len(self.stages))
        return self.slo_ms * max(0.05, share)

    def device(self, spec: EngineSpec):
        name = spec.device or DEFAULT_DEVICE.get(spec.kind)
        return self.catalog.get(name) if name else None


def _check_stage_names(constraints: Constraints, names: list) -> None:
    """A stage named in --precision or --changes-often must be one the plan places: a typo is an error."""
    for option, given in (("--precision", sorted(constraints.precision_by_stage)),
                          ("--changes-often", sorted(constraints.changes_often))):
        unknown = [n for n in given if n not in names]
        if unknown:
            raise LoadprobeError(f"{option}: no stage {', '.join(repr(n) for n in unknown)} in the portrait; its "
                                 f"stages are {', '.join(names)}")


def _plan_stages(portrait) -> list:
    """The stages a plan places, in the order a request runs them: every stage but request roots."""
    stages = [s for s in portrait.stages if not _is_root(s)]
    return sorted(stages, key=lambda s: (s.start_offset_ms is None, s.start_offset_ms or 0.0))


def _is_root(stage) -> bool:
    """A request root (an HTTP route, ``request``): never inside another span, no engine of its own."""
    whole = stage.share is not None and stage.share >= 0.999
    return not stage.engines and (whole or stage.start_offset_ms is None)


def _recorded_kind(stage) -> str:
    engines = [e.lower() for e in stage.engines or {}]
    return "gpu" if any(e.startswith(("gpu", "cuda")) for e in engines) else \
        "npu" if any(e.startswith("npu") for e in engines) else "cpu"


def _cpu_cores(portrait) -> tuple[int, str]:
    """The host's cores: as run.json recorded them, else busy core-seconds / CPU utilisation."""
    recorded = [h.get("logical_cores") for h in (getattr(portrait.data_quality, "host_hardware", None) or {}).values()
                if isinstance(h.get("logical_cores"), int) and h.get("logical_cores") > 0]
    if recorded:
        cores = min(recorded)
        return cores, f"{cores} cores: the recorded host's logical cores (run.json)"
    util = next((m.mean for m in portrait.devices.metrics if m.device == "cpu" and m.metric == "util_pct"), None)
    duration = portrait.traffic.duration_s if portrait.traffic else None
    busy = _cpu_busy_ms(portrait)
    if util and util > 5 and duration:
        cores = max(1, round(busy / 1000.0 / duration / (util / 100.0)))
        return cores, (f"{cores} cores: the CPU stages kept {busy / 1000.0 / duration:.2f} cores busy at "
                       f"{util:.0f}% CPU utilisation")
    why = "no CPU utilisation was recorded" if not util else f"CPU utilisation ({util:.1f}%) too low to infer from"
    return DEFAULT_CPU_CORES, f"{DEFAULT_CPU_CORES} cores assumed: {why}; give --cpu-cores"


def _cpu_busy_ms(portrait) -> float:
    """Core-milliseconds the stages recorded on the CPU took, over the whole recording."""
    # A batcher-fed stage records its shared execution once per member: count it once per batch.
    return sum(s.count / (s.batch.mean if s.queue_ms is not None and s.batch is not None and s.batch.mean else 1.0)
               * (s.self_ms_mean or 0.0) for s in _plan_stages(portrait) if _recorded_kind(s) == "cpu")


def _cpu_load_pct(portrait, rate: float, cores: int) -> float | None:
    """The host CPU's utilisation if every stage stayed where it was recorded, at ``rate`` req/s."""
    requests = portrait.requests.count if portrait.requests is not None else 0
    if not requests or not cores:
        return None
    return 100.0 * rate * _cpu_busy_ms(portrait) / requests / 1000.0 / cores


def host_cpu_capacity(portrait) -> tuple[float, str] | None:
    """The request rate the recorded host's CPU alone carries at full load, with every stage where it
    was recorded, and how that was worked out; None without requests or CPU stages.

    Usage::

        rps, why = host_cpu_capacity(portrait)    # e.g. plan for twice that: the CPU alone cannot carry it
    """
    cores, cores_why = _cpu_cores(portrait)
    load = _cpu_load_pct(portrait, 1.0, cores)
    if not load:
        return None
    per_request_ms = load / 100.0 * cores * 1000.0
    return 100.0 / load, f"{cores_why}; {per_request_ms:.3g} ms of CPU per request, as recorded"


def _service(portrait) -> str:
    services = portrait.data_quality.services if portrait.data_quality else []
    return services[0] if services else "service"


# -- one option -----------------------------------------------------------------------


def _engine_specs(ctx: _Context, kind: str | None) -> list[EngineSpec]:
    specs = list(ctx.constraints.engines)
    if kind is None or kind == "cpu":
        return specs if kind is None else [s for s in specs if s.kind == "cpu"]
    return [s for s in specs if s.kind in ("cpu", kind)]


def _build_option(name: str, kind: str | None, profiles, ctx: _Context) -> Option | None:
    specs = _engine_specs(ctx, kind)
    if kind not in (None, "cpu") and not any(s.kind == kind for s in specs):
        return None  # the team has no such engine
    choices = [_candidates(stage, profile, specs, ctx) for stage, profile in zip(ctx.stages, profiles)]
    for stage, (candidates, excluded) in zip(ctx.stages, choices):
        if not candidates:
            return Option(name, [], {}, None, None, None, None,
                          [f"{stage.name} cannot run on any engine of this plan"], feasible=False)
    notes = []
    met = True
    if kind is None:
        picks, searched, met = _search(choices, profiles, specs, ctx)
        notes.append(searched)
    else:
        picks = []
        for stage, (candidates, excluded) in zip(ctx.stages, choices):
            pick = next((c for c in candidates if c["spec"].kind == kind), None)
            if pick is None:
                pick = next(c for c in candidates if c["spec"].kind == "cpu")
                notes.append(f"{stage.name} stays on the CPU: " + "; ".join(excluded.values()))
            picks.append(pick)
    decisions = []
    for stage, profile, pick, (candidates, excluded) in zip(ctx.stages, profiles, picks, choices):
        basis = (f"{kind} plan" if kind is not None and pick["spec"].kind == kind else
                 "the plan's engine cannot run it" if kind is not None else
                 "part of the cheapest line-up meeting the targets" if met else
                 "part of the line-up closest to the targets (none meets them)")
        decisions.append(_decision(stage, profile, pick, _engine_why(basis, stage, profile, pick, candidates,
                                                                     excluded), ctx.budget_ms(stage), ctx))
    return _assemble(name, decisions, specs, profiles, ctx, notes)


def _assemble(name: str, decisions: list, specs, profiles, ctx: _Context, notes: list, *,
              fallbacks: bool = True) -> Option:
    """Engines, limits, fallbacks, the estimate at the sizing rate and at 1.5x, and the cost."""
    engines = _engines(decisions, specs, ctx)
    if fallbacks:
        _add_fallbacks(decisions, engines, specs, profiles, ctx)
    capacities = {n: EngineCapacity(n, e["servers"], e["power_w"]) for n, e in engines.items()}
    calls = _calls_per_request(ctx)
    placements = [Placement(d.stage, d.engine, d.service.p50_ms, d.service.p95_ms, d.batch, d.window_ms,
                            calls.get(d.stage, 1.0), d.service.p99_ms) for d in decisions]
    unattributed = _unattributed_ms(ctx.portrait)
    est = estimate(placements, capacities, rate=ctx.rate, unattributed_ms=unattributed)
    stress = estimate(placements, capacities, rate=ctx.rate * 1.5, unattributed_ms=unattributed)
    host_unknown = [n for n, e in engines.items() if e["power_w"] is None and e["kind"] == "cpu" and not e["device"]]
    accel_unknown = [n for n, e in engines.items() if e["power_w"] is None and n not in host_unknown]
    notes = list(notes)
    if host_unknown or accel_unknown:
        est.power_w = _known_power(engines, est.utilisation)
        est.energy_per_request_j = est.power_w / ctx.rate if est.power_w else None
    if host_unknown:
        notes.append("host CPU power unknown (no RAPL reading, no catalog device): left out of every plan alike")
    if accel_unknown:
        notes.append("power unknown for " + ", ".join(f"{n} ({engines[n]['device'] or engines[n]['kind']})"
                                                   for n in accel_unknown)
                     + ": the catalog has no TDP; the power shown leaves it out")
        est.energy_per_request_j = None
    _cover_stage_p95(decisions, est, ctx)
    option = Option(name, decisions, engines, est, stress, None, None, notes)
    _judge(option, ctx)
    option.tco = _tco(option, ctx)
    return option


def _check(option: Option, ctx: _Context, profiles) -> OptionCheck:
    stub = Plan(_service(ctx.portrait), "", "", ctx.constraints, ctx.rate, ctx.slo_ms, option, [], "")
    return OptionCheck(stub, option, {p.name: p for p in profiles}, _calls_per_request(ctx),
                       _unattributed_ms(ctx.portrait))


def _cover_stage_p95(decisions, est, ctx: _Context) -> bool:
    """Timeouts cover queueing and batching too (docs/pipeline.md): at least twice each stage's
    estimated p95. Returns whether a timeout was raised."""
    raised = False
    for d in decisions:
        stage_p95 = est.stage_p95_ms.get(d.stage)
        if stage_p95 and 2 * stage_p95 > d.timeout_ms:
            d.timeout_ms = float(min(MAX_TIMEOUT_MS, math.ceil(2 * stage_p95)))
            how = "simulated" if est.method.startswith("discrete-event") else "estimated"
            d.why["timeout_ms"] = (f"2 x the stage's {how} p95 of {stage_p95:.3g} ms at {ctx.rate:.3g} req/s, "
                                   "queueing and batching wait included")
            raised = True
    return raised


def _simulate(option: Option, ctx: _Context, profiles) -> None:
    """Replace the option's analytic latency figures (at the rate and at 1.5x) with simulated ones, and re-judge.

    When a stage's simulated p95 shows its timeout too short to cover queueing, the timeout is
    raised and the simulation run again, once. A plan the queueing model already finds
    saturated keeps that verdict: the simulation would only count how much it rejects.
    """
    if not option.feasible or option.estimate is None or option.estimate.p95_ms is None:
        return
    check = _check(option, ctx, profiles)
    analytic = option.estimate
    option.estimate = check.estimate(analytic, ctx.rate)
    if _cover_stage_p95(option.decisions, option.estimate, ctx):
        option.estimate = check.estimate(analytic, ctx.rate)
    option.stress = check.estimate(option.stress, ctx.rate * STRESS)
    _judge(option, ctx)


def _tune(option: Option, ctx: _Context, profiles) -> None:
    """The simulator's small search over batch windows and failover caps; the winner's settings are kept."""
    if not option.feasible or option.estimate is None or option.estimate.p95_ms is None:
        return
    check = _check(option, ctx, profiles)
    trials, best, (at, over) = tune(check, ctx.rate, ctx.slo_ms, ctx.constraints.slo_p99_ms)
    option.tuning = trials
    if len(trials) == 1:
        return
    tried = (f"tuned by simulation: tried {len(trials)} settings (batch windows x "
             f"{'/'.join(f'{f:g}' for f in WINDOW_FACTORS)}"
             + (", failover caps as planned/" + "/".join(f"{r:.0%}" for r in FAILOVER_RATIOS if r is not None)
                if any(d.fallback for d in option.decisions) else "")
             + f") at {ctx.rate:.3g} and {ctx.rate * STRESS:.3g} req/s; kept the one that meets the targets with the "
             "fewest failed requests at 1.5x, then the lowest p95 there, then the planned settings")
    for d in option.decisions:
        if d.batch > 1 and best["window_factor"] != 1.0:
            d.window_ms = round(min(MAX_WINDOW_MS, d.window_ms * best["window_factor"]), 3)
            d.why["batch"] = f"{d.why.get('batch', '')}; window x {best['window_factor']:g}, {tried}".lstrip("; ")
        if d.fallback and best["failover_max_ratio"] is not None and best["failover_max_ratio"] != d.fallback["max_ratio"]:
            d.fallback["max_ratio"] = best["failover_max_ratio"]
            d.why["fallback"] = f"{d.why.get('fallback', '')}; cap set to {best['failover_max_ratio']:.0%}, {tried}"
    option.estimate = check.estimate(option.estimate, ctx.rate, result=at)
    option.stress = check.estimate(option.stress, ctx.rate * STRESS, result=over)
    _judge(option, ctx)


def _judge(option: Option, ctx: _Context) -> None:
    """Whether the option meets the SLO, p99 target and power budget, by its current estimate; notes why not.

    Called again once the estimate is simulated: the notes of the earlier verdict are replaced.
    """
    est, engines = option.estimate, option.engines
    for note in option.judged:
        option.notes.remove(note)
    notes = []
    meets = None
    if est.p95_ms is None:  # saturated: it cannot carry the sizing rate, SLO or not
        meets = False
        notes.append(f"cannot carry {ctx.rate:.3g} req/s: capacity {est.max_rps:.3g} req/s ({est.bottleneck} saturates)")
    elif ctx.slo_ms is not None:
        meets = est.p95_ms <= ctx.slo_ms
    if est.failed_share is not None and est.failed_share > FAILED_SHARE_OK:
        meets = False
        notes.append(f"rejects or times out {est.failed_share:.1%} of requests at {ctx.rate:.3g} req/s (simulated)")
    elif est.failed_share is not None and meets is None:
        meets = True
    p99_target = ctx.constraints.slo_p99_ms
    if p99_target is not None and est.p99_ms is not None:
        if est.p99_ms > p99_target:
            meets = False
            notes.append(f"misses the p99 target: {est.p99_ms:.3g} ms > {p99_target:g} ms")
        elif meets is None:
            meets = True
    accel_unknown = [n for n, e in engines.items() if e["power_w"] is None and (e["kind"] != "cpu" or e["device"])]
    budget = ctx.constraints.power_budget_w
    if budget and est.power_w and est.power_w > budget:
        notes.append(f"over the power budget: {est.power_w:.0f} W > {budget:g} W")
        meets = False
    elif budget and accel_unknown:
        notes.append(f"the {budget:g} W power budget cannot be checked without those power figures")
        meets = False
    option.meets_slo = meets
    option.notes.extend(notes)
    option.judged = notes


MAX_COMBINATIONS = 4096
MAX_TIMEOUT_MS = 3_600_000  # pipeline.yaml's limits (loadprobe/pipeline.schema.json)
MAX_WINDOW_MS = 60_000
MAX_QUEUE = 10_000_000
MAX_CONCURRENCY = 100_000
NO_SLO_WINDOW_MS = 100.0  # without an SLO, batching windows stay online-short (the seeds' advice)


def _search(choices, profiles, specs, ctx: _Context) -> tuple[list, str, bool]:
    """The hybrid: the cheapest assignment of stages to engines that meets the SLO and power budget.

    Every combination of each stage's admissible engines is estimated when there are at most
    ``MAX_COMBINATIONS``; beyond, a coordinate descent from each stage's fastest engine moves
    one stage at a time while that improves the plan. Ties in cost go to the lower estimated
    p95, so an engine the line-up already pays for is used when it helps; among plans that
    miss the targets, the lower p95 and then the higher capacity win.
    """
    import itertools

    lists = [candidates for candidates, _ in choices]
    total = math.prod(len(c) for c in lists)

    def key(combo) -> tuple:
        decisions = [_decision(stage, profile, c, "", ctx.budget_ms(stage), ctx)
                     for stage, profile, c in zip(ctx.stages, profiles, combo)]
        option = _assemble("search", decisions, specs, profiles, ctx, [], fallbacks=False)
        ok = option.meets_slo is not False
        cost = _cost(option)
        p95 = option.estimate.p95_ms if option.estimate.p95_ms is not None else math.inf
        return (not ok, cost if ok else 0.0, p95, -option.estimate.max_rps)

    tried = met = 0
    best = best_key = None
    if total <= MAX_COMBINATIONS:
        for combo in itertools.product(*lists):
            k = key(combo)
            tried += 1
            met += not k[0]
            if best_key is None or _better(k, best_key):
                best, best_key = list(combo), k
        how = f"searched all {tried} stage-to-engine combinations"
    else:
        best = [min(c, key=lambda x: x["per_item_s"]) for c in lists]
        best_key = key(best)
        tried = 1
        for _ in range(len(lists) * 4):  # passes are few in practice; bounded anyway
            improved = False
            for i, candidates in enumerate(lists):
                for c in candidates:
                    if c is best[i]:
                        continue
                    trial = best[:i] + [c] + best[i + 1:]
                    k = key(trial)
                    tried += 1
                    if _better(k, best_key):
                        best, best_key, improved = trial, k, True
            if not improved:
                break
        met = int(not best_key[0])
        how = (f"{total:,} combinations are too many to search: a coordinate descent from each stage's fastest "
               f"engine tried {tried}")
    ok = not best_key[0]
    summary = (f"{how}; " + (f"{met} meet" if total <= MAX_COMBINATIONS else "the best " + ("meets" if ok else "misses"))
               + f" the targets at {ctx.rate:.3g} req/s" + (f" within {ctx.slo_ms:g} ms p95" if ctx.slo_ms else "")
               + "; the cheapest to own is recommended, ties to the lower p95")
    return best, summary, ok


def _better(a: tuple, b: tuple) -> bool:
    """(misses targets, cost, p95, -capacity) ordering, costs within 0.5% counting as equal."""
    if a[0] != b[0]:
        return a[0] < b[0]
    if a[1] != b[1] and not (math.isinf(a[1]) and math.isinf(b[1])):
        if math.isinf(a[1]) or math.isinf(b[1]) or abs(a[1] - b[1]) > 0.005 * max(abs(a[1]), abs(b[1]), 1.0):
            return a[1] < b[1]
    if a[2] != b[2]:
        return a[2] < b[2]
    return a[3] < b[3]


def _candidates(stage, profile: StageProfile, specs, ctx: _Context) -> tuple[list, dict]:
    """Every engine able to run the stage, with its batch, window and estimated time (rules 1-4, 6)."""
    tensor = profile.flops_per_byte is not None or stage.shapes is not None
    budget = ctx.budget_ms(stage)
    cpu_util = _cpu_util(ctx.portrait)
    # Saturated as recorded, or at the sizing rate if nothing moved off it (a plan for 10x the
    # recorded load must not keep light stages on a CPU that could not carry them).
    saturated = max(cpu_util or 0.0, ctx.cpu_load_pct or 0.0) >= CPU_SATURATED_PCT
    light = profile.p50_ms < LIGHT_MS and (stage.share or 0.0) < LIGHT_SHARE
    candidates, excluded = [], {}
    for spec in specs:
        reason = _cannot_run(stage, profile, spec, ctx, tensor)
        if reason is None and spec.kind != "cpu" and light and not saturated:
            reason = (f"light stage ({profile.p50_ms:.3g} ms self time at p50, {100 * (stage.share or 0):.1f}% of "
                      f"request time) and the CPU is not saturated ({_fmt_pct(cpu_util)} mean utilisation recorded, "
                      f"{_fmt_pct(ctx.cpu_load_pct)} at {ctx.rate:.3g} req/s with every stage on it): "
                      "moving it would add a transfer for little gain")
        if reason:
            excluded[spec.name] = reason
            continue
        precision, precision_why = _precision(stage, spec, ctx)
        device = ctx.device(spec)
        batch, window, svc, batch_why = _batch(profile, spec, device, precision, budget, ctx, stage)
        if svc.source == "unscaled" and spec.kind != profile.kind and not (saturated and profile.kind == "cpu"):
            excluded[spec.name] = (f"no estimate of its time there ({svc.how})"
                                   + (f" and the CPU is not saturated ({_fmt_pct(cpu_util)})"
                                      if profile.kind == "cpu" else ""))
            continue
        per_item_s = svc.p50_ms / 1000.0 / batch
        power = _unit_power(spec, device, ctx)
        candidates.append(dict(spec=spec, device=device, precision=precision, precision_why=precision_why,
                               batch=batch, window=window, svc=svc, per_item_s=per_item_s, batch_why=batch_why,
                               energy=power * per_item_s if power is not None else None,
                               fits=budget is None or svc.p95_ms + window <= budget))
    return candidates, excluded


def _cannot_run(stage, profile, spec, ctx, tensor) -> str | None:
    if spec.kind == "cpu":
        return None
    if not tensor:
        return "no FLOPs and no input shapes were recorded for it: host code, not a tensor workload"
    device = ctx.device(spec)
    if spec.kind == "npu":
        if stage.name in ctx.constraints.changes_often:
            return ("its model changes often (--changes-often): every version needs an offline NPU conversion and "
                    "re-validation, so it stays on engines that run the framework's model as is")
        if profile.flops_per_byte is None:
            return "no FLOPs/bytes recorded, so there is no evidence it compiles to a fixed NPU graph"
        if profile.dynamic_shape and device is not None and device.dynamic_shapes == "poor":
            return (f"dynamic shapes (top shape {100 * stage.shapes.top_share:.0f}% of spans) and "
                    f"{device.id} handles them poorly")
        if ctx.constraints.precision_for(stage.name) == "fp16-only" and device is not None \
                and not device.peak("fp16") and not device.peak("bf16"):
            return f"FP16 required and {device.id} publishes no FP16 peak"
    if profile.dynamic_shape and device is not None and device.dynamic_shapes != "native":
        return (f"dynamic shapes: its commonest shape covers only {100 * stage.shapes.top_share:.0f}% of "
                f"{stage.count:,} spans ({stage.shapes.distinct} distinct) and {device.id} "
                f"{'recompiles on' if device.dynamic_shapes == 'recompile' else 'handles poorly'} changing shapes")
    return None


def _precision(stage, spec: EngineSpec, ctx) -> tuple[str, str]:
    policy = ctx.constraints.precision_for(stage.name)
    evidence = ctx.constraints.align.get(stage.name)  # loadprobe align's verdict, when given
    basis = (f"loadprobe align ({evidence.source}, {evidence.samples} samples): {evidence.text}" if evidence
             else f"precision policy {policy}")
    device = ctx.device(spec)
    if spec.kind == "cpu":
        return "fp32", "CPU stages keep the precision they were recorded at (fp32)"
    if policy == "int8-ok" and device is not None and device.peak("int8") and device.int8:
        kept = f", keeping {', '.join(evidence.keep_fp16)} in FP16" if evidence and evidence.keep_fp16 else ""
        return "int8", (f"{basis}{' for ' + stage.name if not evidence else kept}; {device.id} runs INT8 at "
                        f"{device.peak('int8') / 1e12:.0f} TOPS vs {(device.peak('fp16') or 0) / 1e12:.0f} FP16 TFLOP/s")
    for p in ("fp16", "bf16", "fp32"):
        if device is None or device.peak(p):
            return p, f"{basis}: {p}, the lowest float precision {spec.name} publishes a peak for"
    return "fp32", "no float peak published; fp32 assumed"


def _batch(profile, spec, device, precision, budget, ctx, stage) -> tuple[int, float, ServiceTime, str]:
    """Rule 7: the largest batch whose execution and gathering window fit the stage's budget.

    Returns the batch, its window (ms), the execution time there and the reason in words.
    """
    target = device if spec.kind != "cpu" or spec.device else None
    calls = _calls_per_request(ctx).get(stage.name, 1.0)
    stage_rate = ctx.rate * calls  # executions of this stage arrive this fast
    window_cap = min(MAX_WINDOW_MS, budget / 2 if budget is not None else NO_SLO_WINDOW_MS)
    one = service_time(profile, target=target, kind=spec.kind, precision=precision, batch=1)
    best = (1, 0.0, one)
    stopped = None
    for b in BATCHES[1:]:
        svc = service_time(profile, target=target, kind=spec.kind, precision=precision, batch=b)
        window = round(1000.0 * (b - 1) / stage_rate * 1.2, 1)
        # a request pays the window and the execution once per call (an LLM's decode: every token)
        if window > window_cap or (budget is not None and calls * (svc.p95_ms + window) > budget):
            stopped = (b, window, svc)
            break
        if svc.p50_ms / b < best[2].p50_ms / best[0] * 0.95:  # at least 5% less time per item
            best = (b, window, svc)
    b, window, svc = best
    limit = (f"its {budget:.3g} ms share of the {ctx.slo_ms:g} ms p95 SLO" if budget is not None
             else f"{NO_SLO_WINDOW_MS:g} ms of window (no SLO given: windows stay online-short)")
    if b > 1:
        why = (f"batch {b}, window {window:g} ms: the largest of {', '.join(map(str, BATCHES))} that cuts the time "
               f"per item by 5% or more ({best[2].p50_ms / b:.3g} vs {one.p50_ms:.3g} ms at batch 1) and whose "
               f"execution ({svc.p95_ms:.3g} ms p95) plus window fits {limit}; the window is the time {b - 1} more "
               f"executions take to arrive at {stage_rate:.3g}/s, +20%")
    elif profile.fit_b_ms is None:
        why = "batch 1: no batch->latency fit was recorded, so batching is assumed to gain nothing per item"
    elif stopped is not None and (stopped[2].p50_ms / stopped[0] < one.p50_ms * 0.95):
        why = (f"batch 1: batch {stopped[0]} would save time per item but needs a {stopped[1]:g} ms window and "
               f"{stopped[2].p95_ms:.3g} ms p95, past {limit}")
    else:
        why = (f"batch 1: the recorded fit ({profile.fit_a_ms:.3g} + {profile.fit_b_ms:.3g} ms x batch) leaves "
               "larger batches no faster per item")
    return b, window, svc, why


def _engine_why(basis: str, stage, profile, pick, candidates, excluded) -> str:
    """The engine decision in words: the basis, every candidate's figures, exclusions, the estimate."""
    compare = "; ".join(
        f"{c['spec'].name} {c['svc'].p50_ms:.3g} ms/batch of {c['batch']}"
        + (f", {1000 * c['energy']:.3g} mJ/item" if c["energy"] is not None else "")
        for c in sorted(candidates, key=lambda c: c["spec"].name))
    bound = ""
    if profile.flops_per_byte is not None and pick["device"] is not None:
        try:
            ridge = pick["device"].ridge_point(pick["precision"])
        except LoadprobeError:  # the device publishes no peak at this precision
            ridge = None
        if ridge:
            kind = "compute" if profile.flops_per_byte >= ridge else "memory"
            bound = (f"; {profile.flops_per_byte:.3g} FLOP/byte vs {pick['device'].id}'s {pick['precision']} ridge "
                     f"{ridge:.3g}: {kind}-bound there")
    shape = ""
    if stage.shapes is not None:
        shape = (f"; shapes {'dynamic' if profile.dynamic_shape else 'fixed'} (commonest "
                 f"{100 * stage.shapes.top_share:.0f}% of spans)")
    text = f"{basis} ({compare}){bound}{shape}."
    if excluded:
        text += " Excluded: " + "; ".join(f"{name}: {reason}" for name, reason in excluded.items()) + "."
    return f"{text} {pick['svc'].how}"


def _decision(stage, profile, c, engine_why, budget, ctx) -> Decision:
    spec, svc, batch, window = c["spec"], c["svc"], c["batch"], c["window"]
    p99 = svc.p50_ms * (profile.p99_ms / profile.p50_ms if profile.p50_ms > 0 else 1.0)
    timeout = min(MAX_TIMEOUT_MS, max(1.0, math.ceil(2 * (p99 + window))))
    calls = _calls_per_request(ctx).get(stage.name, 1.0)
    in_flight = ctx.rate * calls / batch * svc.p50_ms / 1000.0
    servers = ctx.cpu_cores[0] * spec.count if spec.kind == "cpu" else spec.count
    concurrency = min(MAX_CONCURRENCY, max(servers, math.ceil(HEADROOM * in_flight)))
    why = {
        "engine": engine_why,
        "precision": c["precision_why"],
        "batch": c["batch_why"],
        "timeout_ms": f"2 x (estimated p99 {p99:.3g} ms + window {window:g} ms), from the recorded p99/p50 of "
                      f"{profile.p99_ms / profile.p50_ms if profile.p50_ms else 1:.3g}",
        "max_concurrency": f"max({servers} servers of {spec.name}, Little's law: {ctx.rate:.3g} req/s"
                           + (f" x {calls:.3g} calls" if calls > 1 else "")
                           + f" / batch {batch} x {svc.p50_ms:.3g} ms = {in_flight:.2f} executions in flight, "
                           f"x{HEADROOM:g} headroom)",
        "service_time_ms": svc.how,
    }
    shape = None
    if stage.shapes is not None and not profile.dynamic_shape:
        try:
            shape = [int(x) for x in str(stage.shapes.top).split(",")[0].split("x")]
        except ValueError:
            shape = None
    return Decision(stage.name, spec.name, spec.kind, c["device"].id if c["device"] is not None and
                    (spec.kind != "cpu" or spec.device) else None, c["precision"], batch, window, float(timeout),
                    concurrency, None, svc, shape, profile.dynamic_shape, why,
                    ctx.constraints.keep_fp16_for(stage.name) if c["precision"] == "int8" else ())


def _engines(decisions, specs, ctx) -> dict:
    engines = {}
    for spec in specs:
        mine = [d for d in decisions if d.engine == spec.name]
        if not mine and spec.kind != "cpu":
            continue
        device = ctx.device(spec)
        if spec.kind == "cpu":
            servers, servers_why = ctx.cpu_cores
            servers *= spec.count
        else:
            servers, servers_why = spec.count, f"{spec.count} x {device.id if device else spec.kind}"
        calls = _calls_per_request(ctx)
        work = sum(calls.get(d.stage, 1.0) * d.service.p50_ms / 1000.0 / d.batch for d in mine)
        in_flight = ctx.rate * work
        concurrency = min(MAX_CONCURRENCY, max(servers, math.ceil(HEADROOM * in_flight)))
        budget = ctx.slo_ms / 1000.0 if ctx.slo_ms else 1.0
        # Requests that can still be served within one SLO once they reach the front: the servers
        # times the SLO over the mean execution; a longer queue only turns rejects into timeouts.
        visits = sum(calls.get(d.stage, 1.0) for d in mine)
        mean_exec = work / visits if visits else 0.0
        queue = min(MAX_QUEUE, max(2 * servers, math.ceil(servers * budget / mean_exec) if mean_exec else 0))
        power = _unit_power(spec, device, ctx)
        engines[spec.name] = {
            "kind": spec.kind, "device": device.id if device is not None and (spec.kind != "cpu" or spec.device)
            else None, "count": spec.count, "servers": servers,
            "max_concurrency": concurrency, "max_queue": queue,
            "power_w": power * spec.count if power is not None else None,
            "why": (f"{servers_why}; max_concurrency {concurrency} = max(servers, {HEADROOM:g} x {in_flight:.2f} "
                    f"in flight by Little's law at {ctx.rate:.3g} req/s); max_queue {queue} = max(2 x servers, servers x "
                    f"{'the SLO' if ctx.slo_ms else '1 s'} ({budget * 1000:.0f} ms) / the mean execution "
                    f"({mean_exec * 1000:.3g} ms)): what can still be served in time; beyond it requests are "
                    "rejected fast with a capacity hint"),
        }
    return engines


def _add_fallbacks(decisions, engines, specs, profiles, ctx) -> None:
    """Rule 8: a capped share of a backed-up accelerator stage goes to another engine that can run it."""
    calls = _calls_per_request(ctx)
    work = {n: sum(calls.get(d.stage, 1.0) * d.service.p50_ms / 1000.0 / d.batch for d in decisions if d.engine == n)
            for n in engines}
    by_name = {s.name: s for s in ctx.stages}
    for d, profile in zip(decisions, profiles):
        if d.kind == "cpu":
            d.why["fallback"] = "none: the CPU is the last resort"
            continue
        stage = by_name[d.stage]
        tensor = profile.flops_per_byte is not None or stage.shapes is not None
        # only engines the plan already has: a fallback is no reason to buy a device
        options = [s for s in specs if s.name != d.engine and s.name in engines and
                   _cannot_run(stage, profile, s, ctx, tensor) is None]
        best = None
        stage_calls = calls.get(d.stage, 1.0)
        for spec in options:
            device = ctx.device(spec)
            precision, _ = _precision(stage, spec, ctx)
            svc = service_time(profile, target=device if spec.kind != "cpu" or spec.device else None,
                               kind=spec.kind, precision=precision, batch=1)
            if svc.source == "unscaled" and spec.kind != profile.kind:
                continue  # rule 5: no evidence the stage runs acceptably there
            servers = engines[spec.name]["servers"]
            spare = servers - ctx.rate * work.get(spec.name, 0.0)
            per_request_s = stage_calls * svc.p50_ms / 1000.0
            absorbable = spare / per_request_s / ctx.rate if per_request_s > 0 else 0.0
            if absorbable > 0.01 and (best is None or absorbable > best[1]):
                best = (spec, absorbable, svc)
        if best is None:
            d.why["fallback"] = ("none: no other engine of the plan can run it, with an estimate of its time there "
                                 "and spare capacity at the sizing rate")
            continue
        spec, absorbable, svc = best
        ratio = round(min(FAILOVER_CAP, absorbable), 2)
        over = max(1, math.ceil(0.75 * engines[d.engine]["max_queue"]))
        d.fallback = {"engine": spec.name, "queue_len_over": over, "max_ratio": ratio, "otherwise": "reject",
                      "service_ms": [svc.p50_ms, svc.p95_ms]}  # per item there: what the simulator draws
        d.why["fallback"] = (f"to {spec.name} when {d.engine}'s queue passes {over} (75% of its bound), for at most "
                             f"{ratio:.0%} of the stage's traffic: {spec.name} has spare capacity for "
                             + (f"{absorbable:.0%}" if absorbable < 1 else "all") + f" of it at {ctx.rate:.3g} req/s ({svc.p50_ms:.3g} ms per "
                             f"item there), capped at {FAILOVER_CAP:.0%} so a backlog never all lands on one engine; "
                             "past the cap requests are rejected fast")


def _unit_power(spec: EngineSpec, device, ctx) -> float | None:
    if spec.kind != "cpu" or spec.device:
        return device.tdp_w if device is not None else None
    measured = next((m.mean for m in ctx.portrait.devices.metrics if m.device == "cpu" and m.metric == "power_w"), None)
    util = _cpu_util(ctx.portrait)
    if measured is not None and util is not None:
        return measured / (IDLE_POWER_SHARE + (1 - IDLE_POWER_SHARE) * util / 100.0)
    return None


def _known_power(engines, util) -> float | None:
    known = [(n, e) for n, e in engines.items() if e["power_w"] is not None]
    if not known:
        return None
    return sum(e["power_w"] * (IDLE_POWER_SHARE + (1 - IDLE_POWER_SHARE) * util.get(n, 0.0)) for n, e in known)


def _cpu_util(portrait) -> float | None:
    return next((m.mean for m in portrait.devices.metrics if m.device == "cpu" and m.metric == "util_pct"), None)


def _calls_per_request(ctx: _Context) -> dict[str, float]:
    """Executions of each stage per request (spans / requests): decode runs once per token."""
    requests = ctx.portrait.requests.count if ctx.portrait.requests is not None else 0
    if not requests:
        return {}
    return {s.name: max(1.0, s.count / requests) for s in ctx.stages}


def _unattributed_ms(portrait) -> float:
    req = portrait.requests
    if req is None or req.latency_ms is None or req.unattributed_share is None or req.latency_ms.mean is None:
        return 0.0
    return req.latency_ms.mean * req.unattributed_share


def _tco(option: Option, ctx: _Context) -> dict | None:
    from .tco import tco

    est = option.estimate
    if est is None:
        return None
    # Engines without a power figure (a host CPU without RAPL) are left out of every plan alike.
    power = _known_power(option.engines, est.utilisation) or 0.0
    purchase, unknown = 0.0, []
    for name, engine in option.engines.items():
        if engine["kind"] == "cpu" and not engine["device"]:
            continue  # the host is common to every plan
        price = ctx.constraints.prices.get(engine["device"]) if engine["device"] else None
        if price is None and engine["device"]:
            price = ctx.catalog.get(engine["device"]).price_usd
        if price is None:
            unknown.append(engine["device"] or name)
        else:
            purchase += price * engine["count"]
    cost = tco(power_w=power, price_per_kwh=ctx.constraints.price_per_kwh, years=ctx.constraints.years,
               purchase=purchase)
    out = asdict(cost) if hasattr(cost, "__dataclass_fields__") else dict(cost)
    out["purchase_unknown"] = unknown
    out["power_unknown"] = [n for n, e in option.engines.items()
                            if e["power_w"] is None and not (e["kind"] == "cpu" and not e["device"])]
    # Unknown is not free: a plan with a device of unknown price or power ranks as costing more
    # than any plan whose cost is known, and its total is shown as a lower bound.
    out["comparable"] = not unknown and not out["power_unknown"]
    return out


def _cost(option: Option) -> float:
    """The lifetime cost used to rank plans: infinite when part of it is unknown."""
    if not option.tco or not option.tco.get("comparable"):
        return math.inf
    return option.tco["total"]


# -- choosing between options ---------------------------------------------------------------


def _select(options: list) -> tuple[Option, list]:
    """The option to recommend: the cheapest to own among those meeting the SLO and power budget.

    The rule-based hybrid comes first; a single-engine plan replaces it only when it is
    cheaper over the plan's lifetime by more than 1%, and the hybrid's notes say so. A
    single-engine plan that places every stage exactly as the hybrid does is dropped.
    """
    hybrid, rest = options[0], []
    for o in options[1:]:
        same = o.feasible and [(d.stage, d.engine) for d in o.decisions] == \
            [(d.stage, d.engine) for d in hybrid.decisions]
        if same:
            hybrid.notes.append(f"the stage rules place every stage as the {o.name} plan does")
        else:
            rest.append(o)
    ok = [o for o in [hybrid, *rest] if o.feasible and o.meets_slo is not False]
    best = hybrid
    if hybrid in ok:
        cheaper = [o for o in ok if _cost(o) < 0.99 * _cost(hybrid)]
        if cheaper:
            best = min(cheaper, key=_cost)
            best.notes.append(f"recommended over the stage-by-stage hybrid: it also meets the targets and costs "
                              f"{_cost(best):,.0f} vs {hybrid.tco['total']:,.0f}"
                              + ("" if hybrid.tco.get("comparable") else " or more") + " to own")
    elif ok:
        best = min(ok, key=lambda o: (_cost(o), o.estimate.p95_ms or math.inf))
        best.notes.append("recommended because the stage-by-stage hybrid misses the SLO or the power budget")
    return best, [o for o in [hybrid, *rest] if o is not best]


# -- scenario and verdict ------------------------------------------------------------------


def _scenario(portrait, constraints: Constraints, profiles, slo) -> tuple[str, str]:
    """The four dimensions -> online API, offline bulk, edge/power-bound, LLM split, or mixed."""
    traffic, req = portrait.traffic, portrait.requests
    batch_means = [p.batch_mean for p in profiles if p.batch_mean]
    batch = max(batch_means) if batch_means else 1.0
    p95 = req.latency_ms.p95 if req is not None and req.latency_ms else None
    facts = [f"latency p95 {p95:.3g} ms" if p95 else "no request latency",
             f"peak {traffic.peak_rps:.3g} req/s (mean {traffic.mean_rps:.3g}, peak/mean "
             f"{traffic.peak_to_mean or 0:.3g})" if traffic else "no traffic series",
             f"largest mean batch {batch:.3g}",
             f"power budget {constraints.power_budget_w:g} W" if constraints.power_budget_w else "no power budget"]
    found = []
    names = {p.name.lower() for p in profiles}
    intensities = [p.flops_per_byte for p in profiles if p.flops_per_byte]
    llm = any("prefill" in n for n in names) and any("decode" in n or "token" in n for n in names)
    if llm or any(p.name for p in profiles if getattr(p, "tokens", False)):
        found.append(("llm-prefill-decode-split", "prefill is compute-heavy and decode bandwidth-bound "
                      f"({max(intensities):.3g} vs {min(intensities):.3g} FLOP/byte)" if intensities else
                      "prefill and decode stages"))
    if constraints.power_budget_w is not None and constraints.power_budget_w <= 150:
        found.append(("edge-power-bound", f"a {constraints.power_budget_w:g} W power budget"))
    if (slo is None or slo >= 1000) and batch >= 8:
        found.append(("offline-bulk", f"large batches ({batch:.3g}) and a loose latency target"))
    elif slo is not None and slo < 1000:
        found.append(("online-api", f"a {slo:.3g} ms p95 target with batches of {batch:.3g}"))
    if not found:
        found.append(("online-api", "request/response traffic"))
    name = found[0][0] if len(found) == 1 else "mixed"
    return name, "; ".join(reason for _, reason in found) + " -- from " + ", ".join(facts)


def _verdict(rec: Option, alternatives: list, slo) -> str:
    parts = []
    est = rec.estimate
    if est is not None and est.p95_ms is not None:
        parts.append(f"The {rec.name} plan is estimated at p95 {est.p95_ms:.3g} ms"
                     + (f" against a {slo:.3g} ms SLO ({'met' if rec.meets_slo else 'NOT met'})" if slo else "")
                     + f", capacity {est.max_rps:.3g} req/s.")
    elif est is not None:
        parts.append(f"The {rec.name} plan cannot carry the sizing rate: capacity {est.max_rps:.3g} req/s, "
                     f"saturating {est.bottleneck}.")
    for alt in alternatives:
        if not alt.feasible:
            parts.append(f"{alt.name}: infeasible ({'; '.join(alt.notes)}).")
            continue
        missing = sorted(set(_unknowns(rec) + _unknowns(alt)))
        if missing:
            parts.append(f"vs {alt.name}: cost not comparable (no price or power figure for {', '.join(missing)}: "
                         "give --price DEVICE=AMOUNT or a catalog entry)"
                         + ("" if alt.meets_slo is not False else f"; {alt.name} misses the targets") + ".")
            continue
        rec_total, alt_total = rec.tco["total"], alt.tco["total"]
        same = abs(rec_total - alt_total) <= 0.01 * max(rec_total, alt_total, 1.0)
        word = "about the same cost" if same else "cheaper" if rec_total < alt_total else "dearer"
        reason = ""
        if word == "dearer":
            reason = (f", but {alt.name} misses the targets" if alt.meets_slo is False else
                      f", and {alt.name} also meets the targets: prefer it if its lower cost matters more than "
                      f"{rec.name}'s lower latency")
        parts.append(f"vs {alt.name}: {word} to own ({rec_total:,.0f} vs {alt_total:,.0f}){reason}.")
    return " ".join(parts)


def _unknowns(option: Option) -> list:
    if not option.tco:
        return ["(no estimate)"]
    return list(option.tco.get("purchase_unknown", [])) + list(option.tco.get("power_unknown", []))


def _fmt_pct(x) -> str:
    return "unknown" if x is None else f"{x:.0f}%"
