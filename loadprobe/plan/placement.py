"""Rules 1-5 and 9 of the planner: which engines can run a stage, at what precision, and where overflow goes.

Usage (``planner.recommend`` does this)::

    admissible, excluded = candidates(stage, profile, specs, ctx)   # [{spec, precision, batch, svc, ...}], {name: why}
    explain_engine(basis, stage, profile, pick, admissible, excluded)   # the engine decision in words
    add_fallbacks(decisions, engines, specs, profiles, ctx)         # rule 9, on the chosen line-up
"""

from __future__ import annotations

import math

from .._errors import LoadprobeError
from .constraints import EngineSpec
from .context import CPU_SATURATED_PCT, PlanContext, calls_per_request, cpu_util
from .energy import measured_stage
from ..estimate.servicetime import StageProfile, estimate_target, service_time
from .sizing import choose_batch, unit_power

__all__ = ["CPU_SATURATED_PCT", "FAILOVER_CAP", "LIGHT_MS", "LIGHT_SHARE", "add_fallbacks", "candidates", "cannot_run",
           "choose_precision", "explain_engine"]

LIGHT_MS = 1.0
LIGHT_SHARE = 0.10
FAILOVER_CAP = 0.3  # the seeds: move at most ~30% of a backed-up engine's traffic, never all of it


def candidates(stage, profile: StageProfile, specs, ctx: PlanContext) -> tuple[list, dict]:
    """Every engine able to run the stage, with its batch, window and estimated time (rules 1-4, 7), and
    the engines excluded with why."""
    tensor = profile.flops_per_byte is not None or stage.shapes is not None
    budget = ctx.budget_ms(stage)
    util = cpu_util(ctx.portrait)
    # Saturated as recorded, or at the sizing rate if nothing moved off it (a plan for 10x the
    # recorded load must not keep light stages on a CPU that could not carry them).
    saturated = max(util or 0.0, ctx.cpu_load_pct or 0.0) >= CPU_SATURATED_PCT
    light = profile.p50_ms < LIGHT_MS and (stage.share or 0.0) < LIGHT_SHARE
    admissible, excluded = [], {}
    for spec in specs:
        reason = cannot_run(stage, profile, spec, ctx, tensor)
        if reason is None and spec.kind != "cpu" and light and not saturated:
            reason = (f"light stage ({profile.p50_ms:.3g} ms self time at p50, {100 * (stage.share or 0):.1f}% of "
                      f"request time) and the CPU is not saturated ({_fmt_pct(util)} mean utilisation recorded, "
                      f"{_fmt_pct(ctx.cpu_load_pct)} at {ctx.rate:.3g} req/s with every stage on it): "
                      "moving it would add a transfer for little gain")
        if reason:
            excluded[spec.name] = reason
            continue
        precision, precision_why = choose_precision(stage, spec, ctx)
        device = ctx.device(spec)
        batch, window, svc, batch_why = choose_batch(profile, spec, device, precision, budget, ctx, stage)
        svc = calibrated(svc, stage.name, spec, device, ctx)
        if svc.source == "unscaled" and spec.kind != profile.kind and not (saturated and profile.kind == "cpu"):
            excluded[spec.name] = (f"no estimate of its time there ({svc.how})"
                                   + (f" and the CPU is not saturated ({_fmt_pct(util)})"
                                      if profile.kind == "cpu" else ""))
            continue
        per_item_s = svc.busy_ms / 1000.0 / batch  # what it loads the engine with
        power = unit_power(spec, device, ctx)
        measured = measured_stage(ctx, stage.name, spec, device)
        # Measured energy scales with the item's time against the recorded one, waits and all (wall to wall).
        energy = (measured.item_j(svc.mean_ms / 1000.0 / batch) if measured is not None
                  else power * per_item_s if power is not None else None)
        admissible.append(dict(spec=spec, device=device, precision=precision, precision_why=precision_why,
                               batch=batch, window=window, svc=svc, per_item_s=per_item_s, batch_why=batch_why,
                               energy=energy, energy_measured=measured is not None,
                               fits=budget is None or svc.p95_ms + window <= budget))
    return admissible, excluded


def calibrated(svc, stage: str, spec, device, ctx):
    """``svc`` times the scale ``loadprobe verify --calibrate`` observed for the stage on this engine (``--calibration``)."""
    calibration = ctx.constraints.evidence.calibration
    scale = calibration.scale(stage, spec.kind, device.id if device is not None else None) if calibration else None
    if scale is None:
        return svc
    return svc.scaled(scale, "calibrated",
                      f"{svc.how}; x {scale:.3g} as observed running ({calibration.source}, loadprobe verify)")


def cannot_run(stage, profile, spec, ctx, tensor) -> str | None:
    """Why ``spec`` cannot run the stage (rules 1, 3, the NPU's own), or None when it can."""
    if spec.kind == "cpu":
        return None
    if not tensor:
        return "no FLOPs and no input shapes were recorded for it: host code, not a tensor workload"
    device = ctx.device(spec)
    if spec.kind == "npu":
        if stage.name in ctx.constraints.lineup.changes_often:
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
    if device is not None and device.weights_on_chip:
        too_big = weights_over_chip(profile, device, choose_precision(stage, spec, ctx)[0])
        if too_big:
            return too_big
    if profile.dynamic_shape and device is not None and device.dynamic_shapes != "native":
        return (f"dynamic shapes: its commonest shape covers only {100 * stage.shapes.top_share:.0f}% of "
                f"{stage.count:,} spans ({stage.shapes.distinct} distinct) and {device.id} "
                f"{'recompiles on' if device.dynamic_shapes == 'recompile' else 'handles poorly'} changing shapes")
    return None


def weights_over_chip(profile, device, precision: str) -> str | None:
    """Why the stage's model may not fit the on-chip memory of a dataflow NPU (``Device.weights_on_chip``), or
    None. Its weights are bounded from above by the recorded traffic of one execution (weights and activations),
    at ``precision``'s bytes per weight: a bound within the chip fits for sure."""
    from ..catalog import PRECISION_BYTES

    recorded = profile.bytes_per_execution
    if recorded is None:
        return None  # no traffic recorded: the NPU rule above already asked for FLOPs and bytes
    bound = recorded * PRECISION_BYTES[precision] / PRECISION_BYTES.get(profile.recorded_precision, 4)
    if bound <= device.on_chip_bytes:
        return None
    return (f"its model may not fit {device.id}'s {device.on_chip_bytes / 1e6:.3g} MB of on-chip memory, where the "
            f"weights must stay: one execution moved about {recorded / 1e6:.3g} MB at {profile.recorded_precision} "
            f"as recorded, up to {bound / 1e6:.3g} MB at {precision}; a larger model runs in several contexts "
            "swapped per execution, which no figure here estimates (a smaller or pruned model, or another engine)")


def choose_precision(stage, spec: EngineSpec, ctx) -> tuple[str, str]:
    """Rule 4: the stage's precision on ``spec`` and why -- INT8 only where the policy or loadprobe align allows."""
    policy = ctx.constraints.precision_for(stage.name)
    evidence = ctx.constraints.evidence.align.get(stage.name)  # loadprobe align's verdict, when given
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


def explain_engine(basis: str, stage, profile, pick, admissible, excluded) -> str:
    """The engine decision in words: the basis, every candidate's figures, exclusions, the estimate."""
    compare = "; ".join(
        f"{c['spec'].name} {c['svc'].p50_ms:.3g} ms/batch of {c['batch']}"
        + (f", {1000 * c['energy']:.3g} mJ/item" + (" (measured)" if c["energy_measured"] else "")
           if c["energy"] is not None else "")
        for c in sorted(admissible, key=lambda c: c["spec"].name))
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


def add_fallbacks(decisions, engines, specs, profiles, ctx) -> None:
    """Rule 9: a capped share of a backed-up accelerator stage goes to another engine that can run it."""
    calls = calls_per_request(ctx)
    work = {n: sum(calls.get(d.stage, 1.0) * d.service.busy_ms / 1000.0 / d.batch for d in decisions if d.engine == n)
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
                   cannot_run(stage, profile, s, ctx, tensor) is None]
        best = None
        stage_calls = calls.get(d.stage, 1.0)
        for spec in options:
            device = ctx.device(spec)
            precision, _ = choose_precision(stage, spec, ctx)
            svc = service_time(profile, target=estimate_target(spec.kind, device, profile, ctx.host_cpu),
                               kind=spec.kind, precision=precision, batch=1)
            if svc.source == "unscaled" and spec.kind != profile.kind:
                continue  # rule 5: no evidence the stage runs acceptably there
            servers = engines[spec.name]["servers"]
            spare = servers - ctx.rate * work.get(spec.name, 0.0)
            per_request_s = stage_calls * svc.busy_ms / 1000.0
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
                      "service": svc}  # one item there: what the planner's simulation draws
        d.why["fallback"] = (f"to {spec.name} when {d.engine}'s queue passes {over} (75% of its bound), for at most "
                             f"{ratio:.0%} of the stage's traffic: {spec.name} has spare capacity for "
                             + (f"{absorbable:.0%}" if absorbable < 1 else "all") + f" of it at {ctx.rate:.3g} req/s ({svc.mean_ms:.3g} ms per "
                             f"item there, mean), capped at {FAILOVER_CAP:.0%} so a backlog never all lands on one engine; "
                             "past the cap requests are rejected fast")


def _fmt_pct(x) -> str:
    return "unknown" if x is None else f"{x:.0f}%"
