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

``recommend`` runs the steps; each lives in its own module: ``context`` (what the portrait
says), ``placement`` (rules 1-5 and 9), ``sizing`` (rules 7-8), ``search`` (rule 6: the hybrid's
line-up), ``options`` (each option estimated, simulated, judged, priced), ``choice`` (the
recommendation and the verdict); ``result`` holds what they make. Rule numbers are docs/recommend.md's.
"""

from __future__ import annotations

from dataclasses import replace

from .._errors import LoadprobeError
from .choice import name_scenario, select, verdict
from .constraints import Constraints, EngineSpec
from .context import (PlanContext, cpu_contention, cpu_steal, host_load_pct, host_work, interpreter, native_pools,
                      plan_stages, recorded_kind, service_name)
from .context import cpu_cores as recorded_cpu_cores, host_cpu_capacity  # noqa: F401 - importable from here
from ..estimate.hostpower import host_cpu_power
from .confidence import intervals, resample, settle, stage_votes
from .lineup import describe, size
from .options import simulate_option, tune_option
from .placement import candidates, explain_engine
from .mix import compare_single
from .result import Decision, Option, Plan  # noqa: F401 - importable from here, as they always were
from .search import search
from .targets import resolve
from ..estimate.servicetime import StageProfile, recorded_host_cpu

__all__ = ["Decision", "Option", "PLAN_KINDS", "Plan", "host_cpu_capacity", "recommend"]

PLAN_KINDS = {"hybrid": None, "all-gpu": "gpu", "all-npu": "npu", "all-cpu": "cpu"}
RESIZES = 3  # a simulation that finds a sized option short of its targets grows it again, at most this often


def recommend(portrait, constraints: Constraints | None = None, *, catalog=None, cpu_cores: int | None = None,
              rate_why: str | None = None) -> Plan:
    """The plan for ``portrait`` under ``constraints`` (default: the seeds' cpu + L4 + 310P line-up).

    ``rate_why``: why the sizing rate (``constraints.asked.min_rps``) is what it is, said with the plan."""
    from ..catalog import load_catalog

    catalog = catalog or load_catalog()
    constraints = constraints or Constraints.parse(catalog=catalog)
    constraints = replace(constraints, pricing=constraints.pricing.decided(constraints.lineup, catalog))
    stages = plan_stages(portrait)
    if not stages:
        raise LoadprobeError("the portrait has no stages to place; record with @probe around the service's stages")
    if constraints.evidence.align:
        from ..align.document import check_stages

        check_stages(constraints.evidence.align, [s.name for s in stages])
    _check_stage_names(constraints, [s.name for s in stages])
    targets = resolve(portrait, constraints, rate_why)
    recorded = catalog.find(portrait.roofline_device)
    profiles = [StageProfile.of(s, recorded_device=recorded if recorded is not None
                                and recorded.kind == recorded_kind(s) else None) for s in stages]
    contention = cpu_contention(portrait)
    if contention is not None:  # recorded on saturated cores: the CPU stages' times without their waits for a core
        profiles = [p.scaled(contention.scale) if p.kind == "cpu" else p for p in profiles]
    cores = (cpu_cores, f"{cpu_cores} cores (given)") if cpu_cores else recorded_cpu_cores(portrait)
    python, lineup = interpreter(portrait), constraints.lineup
    host_cores = cores[0] * next((s.count for s in lineup.engines if s.kind == "cpu"), 1)
    ctx = PlanContext(portrait, constraints, catalog, targets, cores, stages,
                      host_load_pct(portrait, targets.rate_rps, host_cores, python),
                      host_cpu_power(portrait, catalog, cpu_power_w=lineup.cpu_power_w), host=host_work(portrait),
                      interpreter=python, contention=contention, host_cpu=recorded_host_cpu(portrait),
                      native_pools=native_pools(portrait), steal=cpu_steal(portrait))
    ctx.draws = resample(profiles, ctx)
    built = [_build_option(name, kind, profiles, ctx) for name, kind in PLAN_KINDS.items()]
    options = []
    for option, rebuild in (b for b in built if b is not None):
        options.append(_simulated(option, rebuild, ctx, profiles))
    recommended, alternatives = select(options)
    tune_option(recommended, ctx, profiles)
    for option in options:
        option.intervals = intervals(option, ctx.draws, rebuild=lambda p, c, o=option: _redrawn(o, p, c, ctx, profiles))
    scenario, why = name_scenario(portrait, targets, profiles)
    mix = compare_single([candidates(stage, profile, list(lineup.engines), ctx)
                          for stage, profile in zip(ctx.stages, profiles)], ctx)
    return Plan(service_name(portrait), scenario, why, constraints, targets, recommended, alternatives,
                verdict(recommended, alternatives, targets.p95_ms), mix=mix)


def _check_stage_names(constraints: Constraints, names: list) -> None:
    """A stage named in --precision or --changes-often must be one the plan places: a typo is an error."""
    for option, given in (("--precision", sorted(constraints.lineup.precision_by_stage)),
                          ("--changes-often", sorted(constraints.lineup.changes_often))):
        unknown = [n for n in given if n not in names]
        if unknown:
            raise LoadprobeError(f"{option}: no stage {', '.join(repr(n) for n in unknown)} in the portrait; its "
                                 f"stages are {', '.join(names)}")


def _engine_specs(ctx: PlanContext, kind: str | None) -> list[EngineSpec]:
    """The engines an option may use: all of them for the hybrid, the CPU and ``kind`` otherwise."""
    specs = list(ctx.constraints.lineup.engines)
    if kind is None or kind == "cpu":
        return specs if kind is None else [s for s in specs if s.kind == "cpu"]
    return [s for s in specs if s.kind in ("cpu", kind)]


def _build_option(name: str, kind: str | None, profiles, ctx: PlanContext):
    """One option and how to size it again: the hybrid (``kind`` None: searched) or every stage on ``kind``
    where it can run; None when the line-up has no engine of that kind."""
    specs = _engine_specs(ctx, kind)
    if kind not in (None, "cpu") and not any(s.kind == kind for s in specs):
        return None  # the team has no such engine
    choices = [candidates(stage, profile, specs, ctx) for stage, profile in zip(ctx.stages, profiles)]
    for stage, (admissible, excluded) in zip(ctx.stages, choices):
        if not admissible:
            return Option(name, [], {}, None, None, None, None,
                          [f"{stage.name} cannot run on any engine of this plan"], feasible=False), None
    notes = []
    met = True
    confidence = [{} for _ in choices]
    if kind is None:
        settled, confidence = settle(choices, stage_votes(choices, specs, ctx.draws or []), ctx)
        picks, searched, met = search(settled, profiles, specs, ctx)
        notes.append(searched)
    else:
        picks = []
        for stage, (admissible, excluded) in zip(ctx.stages, choices):
            pick = next((c for c in admissible if c["spec"].kind == kind), None)
            if pick is None:
                pick = next(c for c in admissible if c["spec"].kind == "cpu")
                notes.append(f"{stage.name} stays on the CPU: " + "; ".join(excluded.values()))
            picks.append(pick)
    whys = []
    for stage, profile, pick, (admissible, excluded) in zip(ctx.stages, profiles, picks, choices):
        basis = (f"{kind} plan" if kind is not None and pick["spec"].kind == kind else
                 "the plan's engine cannot run it" if kind is not None else
                 "part of the best line-up meeting the targets" if met else
                 "part of the line-up closest to the targets (none meets them)")
        why = explain_engine(basis, stage, profile, pick, admissible, excluded)
        whys.append(why + (f"; {words['why']}" if (words := confidence[len(whys)]).get("why") else ""))

    def rebuild(start=None):
        option = size(name, picks, whys, specs, profiles, ctx, notes, start=start)
        for decision, words in zip(option.decisions, confidence):
            decision.confidence = words
        return option

    return rebuild(), rebuild


def _redrawn(option: Option, profiles, ctx_draw, ctx: PlanContext, point_profiles):
    """The option's line-up (each stage's engine, each engine's units) assembled analytically from one draw's
    profiles and rate (``None``: the point figures); None when a stage cannot run there any more."""
    from .options import assemble
    from .sizing import make_decision

    profiles, at = profiles or point_profiles, ctx_draw or ctx
    counts = {n: e["count"] for n, e in option.engines.items()}
    specs = [replace(s, count=counts.get(s.name, s.count)) for s in ctx.constraints.lineup.engines]
    decisions = []
    for stage, profile, d in zip(at.stages, profiles, option.decisions):
        admissible, _ = candidates(stage, profile, specs, at)
        pick = next((c for c in admissible if c["spec"].name == d.engine), None)
        if pick is None:
            return None
        decisions.append(make_decision(stage, profile, pick, "", at.budget_ms(stage), at))
    return assemble(option.name, decisions, specs, profiles, at, [], fallbacks=False)


def _simulated(option: Option, rebuild, ctx: PlanContext, profiles) -> Option:
    """The option simulated; when the simulation finds it short of a target that more units could meet (the
    analytic sizing was optimistic), sized again from one more unit of its busiest accelerator, up to
    ``RESIZES`` times."""
    simulate_option(option, ctx, profiles)
    trial = option
    for _ in range(RESIZES if rebuild is not None else 0):
        if option.tier not in (1, 2):
            break
        counts = {n: e["count"] for n, e in trial.engines.items() if e["kind"] != "cpu"}
        room = [n for n in counts if counts[n] < next(s.limit for s in ctx.constraints.lineup.engines if s.name == n)]
        if not room:
            break
        busiest = max(room, key=lambda n: (trial.estimate.utilisation.get(n, 0.0), n))
        trial = rebuild({**counts, busiest: counts[busiest] + 1})
        simulate_option(trial, ctx, profiles)
        if trial.tier < option.tier:  # kept only when the units bought a target; else the fewer units stand
            option = trial
    if rebuild is not None:
        option.sizing = describe(option, ctx)  # by the simulated verdict
    return option
