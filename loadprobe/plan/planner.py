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
says), ``placement`` (rules 1-5 and 8), ``sizing`` (rules 6-7), ``search`` (the hybrid's
line-up), ``options`` (each option estimated, simulated, judged, priced), ``choice`` (the
recommendation and the verdict); ``result`` holds what they make.
"""

from __future__ import annotations

from .._errors import LoadprobeError
from .choice import name_scenario, select, verdict
from .constraints import Constraints, EngineSpec
from .context import PlanContext, cpu_load_pct, plan_stages, recorded_kind, service_name
from .context import cpu_cores as recorded_cpu_cores, host_cpu_capacity  # noqa: F401 - importable from here
from .options import assemble, simulate_option, tune_option
from .placement import candidates, explain_engine
from .result import Decision, Option, Plan  # noqa: F401 - importable from here, as they always were
from .search import search
from ..estimate.servicetime import StageProfile
from .sizing import make_decision

__all__ = ["Decision", "Option", "PLAN_KINDS", "Plan", "host_cpu_capacity", "recommend"]

PLAN_KINDS = {"hybrid": None, "all-gpu": "gpu", "all-npu": "npu", "all-cpu": "cpu"}


def recommend(portrait, constraints: Constraints | None = None, *, catalog=None, cpu_cores: int | None = None,
              rate_why: str | None = None) -> Plan:
    """The plan for ``portrait`` under ``constraints`` (default: the seeds' cpu + L4 + 310P line-up).

    ``rate_why``: why the sizing rate (``constraints.min_rps``) is what it is, said with the plan."""
    from ..catalog import load_catalog

    catalog = catalog or load_catalog()
    constraints = constraints or Constraints.parse(catalog=catalog)
    stages = plan_stages(portrait)
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
                                and recorded.kind == recorded_kind(s) else None) for s in stages]
    cores = (cpu_cores, f"{cpu_cores} cores (given)") if cpu_cores else recorded_cpu_cores(portrait)
    ctx = PlanContext(portrait, constraints, catalog, rate, slo, cores, stages,
                      cpu_load_pct(portrait, rate, cores[0] * next((s.count for s in constraints.engines
                                                                      if s.kind == "cpu"), 1)))
    options = [_build_option(name, kind, profiles, ctx) for name, kind in PLAN_KINDS.items()]
    options = [o for o in options if o is not None]
    for option in options:
        simulate_option(option, ctx, profiles)
    recommended, alternatives = select(options)
    tune_option(recommended, ctx, profiles)
    scenario, why = name_scenario(portrait, constraints, profiles, slo)
    return Plan(service_name(portrait), scenario, why, constraints, rate, slo, recommended, alternatives,
                verdict(recommended, alternatives, slo), rate_why)


def _check_stage_names(constraints: Constraints, names: list) -> None:
    """A stage named in --precision or --changes-often must be one the plan places: a typo is an error."""
    for option, given in (("--precision", sorted(constraints.precision_by_stage)),
                          ("--changes-often", sorted(constraints.changes_often))):
        unknown = [n for n in given if n not in names]
        if unknown:
            raise LoadprobeError(f"{option}: no stage {', '.join(repr(n) for n in unknown)} in the portrait; its "
                                 f"stages are {', '.join(names)}")


def _engine_specs(ctx: PlanContext, kind: str | None) -> list[EngineSpec]:
    """The engines an option may use: all of them for the hybrid, the CPU and ``kind`` otherwise."""
    specs = list(ctx.constraints.engines)
    if kind is None or kind == "cpu":
        return specs if kind is None else [s for s in specs if s.kind == "cpu"]
    return [s for s in specs if s.kind in ("cpu", kind)]


def _build_option(name: str, kind: str | None, profiles, ctx: PlanContext) -> Option | None:
    """One option: the hybrid (``kind`` None: searched) or every stage on ``kind`` where it can run; None
    when the line-up has no engine of that kind."""
    specs = _engine_specs(ctx, kind)
    if kind not in (None, "cpu") and not any(s.kind == kind for s in specs):
        return None  # the team has no such engine
    choices = [candidates(stage, profile, specs, ctx) for stage, profile in zip(ctx.stages, profiles)]
    for stage, (admissible, excluded) in zip(ctx.stages, choices):
        if not admissible:
            return Option(name, [], {}, None, None, None, None,
                          [f"{stage.name} cannot run on any engine of this plan"], feasible=False)
    notes = []
    met = True
    if kind is None:
        picks, searched, met = search(choices, profiles, specs, ctx)
        notes.append(searched)
    else:
        picks = []
        for stage, (admissible, excluded) in zip(ctx.stages, choices):
            pick = next((c for c in admissible if c["spec"].kind == kind), None)
            if pick is None:
                pick = next(c for c in admissible if c["spec"].kind == "cpu")
                notes.append(f"{stage.name} stays on the CPU: " + "; ".join(excluded.values()))
            picks.append(pick)
    decisions = []
    for stage, profile, pick, (admissible, excluded) in zip(ctx.stages, profiles, picks, choices):
        basis = (f"{kind} plan" if kind is not None and pick["spec"].kind == kind else
                 "the plan's engine cannot run it" if kind is not None else
                 "part of the cheapest line-up meeting the targets" if met else
                 "part of the line-up closest to the targets (none meets them)")
        why = explain_engine(basis, stage, profile, pick, admissible, excluded)
        decisions.append(make_decision(stage, profile, pick, why, ctx.budget_ms(stage), ctx))
    return assemble(name, decisions, specs, profiles, ctx, notes)
