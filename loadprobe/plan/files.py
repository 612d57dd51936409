"""A plan as files and tables: pipeline.yaml (through the schema), plans.json, the terminal summary.

plans.json's reading side (its schema, ``read_plans_json``) is ``loadprobe.pipeline.plans``, which
the report and the simulator read it with.

Usage::

    config = plan.to_pipeline()                # a validated PipelineConfig (to_pipeline(option, ...) for any option)
    json.dumps(plan_dict(plan))                # plans.json
    print(render(plan))                        # the table ``loadprobe recommend`` prints
"""

from __future__ import annotations

import dataclasses

from .._table import text_table
from ..formats import PIPELINE, PLANS
from ..pipeline.names import plan_names, to_name

ESTIMATE_LABEL = ("simulated estimate: each plan's pipeline replayed by loadprobe simulate under Poisson arrivals at "
                  "the sizing rate, service times drawn from the plan's estimates; capacity and power from the "
                  "M/M/c model")


def pipeline_dict(option, *, service: str, targets, why: dict | None = None) -> dict:
    """An option in pipeline.yaml v1 form, every decision's why included: the service's, under ``targets``
    (``targets.Targets``: the file's slo); ``why``: the plan's scenario and verdict (``plan_why``)."""
    engines = {}
    for name, e in option.engines.items():
        entry = {"kind": e["kind"]}
        if e["device"]:
            entry["device"] = e["device"]
        entry["count"] = e["count"]
        if e["kind"] == "cpu":  # the cores the plan was sized on (export fits its CPU requests into them)
            entry["cores"] = e["servers"] // e["count"]
        entry.update(max_concurrency=e["max_concurrency"], max_queue=e["max_queue"])
        if e["power_w"] is not None:  # the plan's figure is for all the devices; the file's is for one
            entry["power_w"] = _num(e["power_w"] / e["count"])
        entry["why"] = e["why"]
        engines[name] = entry
    stages = []
    names = plan_names(d.stage for d in option.decisions)  # recorded names may hold '/', quotes, ...
    for d in option.decisions:
        stage = {"name": names[d.stage]}
        if names[d.stage] != d.stage:
            stage["recorded"] = d.stage
        stage.update(engine=d.engine, precision=d.precision)
        if d.keep_fp16:  # from loadprobe align: only ever with int8
            stage["keep_fp16"] = list(d.keep_fp16)
        if d.shape is not None or d.dynamic_shape:
            stage["input"] = {"shape": d.shape, "dynamic": d.dynamic_shape}
        if d.batch > 1:
            stage["batch"] = {"size": d.batch, "max_wait_ms": _num(d.window_ms)}
        stage["timeout_ms"] = _num(d.timeout_ms)
        stage["max_concurrency"] = d.max_concurrency
        if d.fallback:
            stage["fallback"] = {"engine": d.fallback["engine"], "when": {"queue_len_over": d.fallback["queue_len_over"]},
                                 "max_ratio": d.fallback["max_ratio"], "otherwise": d.fallback["otherwise"]}
        stage["service_time_ms"] = d.service.file_dict()
        stage["why"] = dict(d.why)
        stages.append(stage)
    return {
        "version": PIPELINE.value,
        "service": to_name(service, "service"),
        "slo": targets.slo_section(),
        "engines": engines,
        "stages": stages,
        "routing": {"retry": {"budget_ratio": 0.1, "max_attempts": 2}, "shed": {"by": "priority"}},
        **({"host": _host(option.host)} if option.host is not None else {}),
        # Significant digits, not decimals: a light service's few microseconds per request are its bound too
        # (rounded to 0.0 they would be no bound, and pipeline.yaml refuses them). None measured: no bound.
        **({"interpreter": {"processes": option.interpreter[0], "ms_per_request": float(f"{option.interpreter[1]:.4g}"),
                            "why": "the recorded processes' interpreter CPU, sampled, with the CPU work this plan keeps "
                                   "on the host"}} if option.interpreter is not None and option.interpreter[1] > 0
           else {}),
        "why": {**(why or {}), "estimate": _estimate_text(option.estimate, targets.p95_ms),
                "routing": "retries only inside a 10% budget of requests (retries amplify overload); under "
                           "overload the lowest priority is shed first"},
    }


def plan_why(plan, option) -> dict:
    """pipeline.yaml's ``why`` of one of ``plan``'s options: the scenario, and the verdict or what it is instead."""
    return {"scenario": f"{plan.scenario}: {plan.scenario_why}",
            "verdict": plan.verdict if option is plan.recommended else f"alternative {option.name!r} to the "
                       f"recommended {plan.recommended.name!r}"}


def _host(host) -> dict:
    """pipeline.yaml's ``host:``: the service's own work per request, on the host CPU engine."""
    from ..estimate.servicetime import ServiceTime

    engine, work = host
    return {"engine": engine, "work_ms": ServiceTime(work.distribution, 1, "measured", work.how).file_dict(),
            "recorded": work.root, "why": work.how}


def to_pipeline(option, *, service: str, targets, why: dict | None = None):
    """An option as a PipelineConfig (``pipeline_dict``), validated against the pipeline.yaml schema."""
    import yaml

    from ..pipeline.files import loads

    return loads(yaml.safe_dump(pipeline_dict(option, service=service, targets=targets, why=why), sort_keys=False,
                                allow_unicode=True), source=f"{option.name} plan")


def plan_dict(plan) -> dict:
    """plans.json: the scenario, the recommended option and every alternative, side by side."""
    return {
        "version": PLANS.value,
        "service": plan.service,
        "scenario": plan.scenario,
        "scenario_why": plan.scenario_why,
        "sizing_rate_rps": plan.rate_rps,
        "sizing_why": plan.rate_why,
        "slo_p95_ms": plan.slo_p95_ms,
        "targets": plan.targets.to_dict(),
        "mix": plan.mix,
        "constraints": _plain(plan.constraints),
        "estimates_are": ESTIMATE_LABEL,
        "verdict": plan.verdict,
        "recommended": _option(plan, plan.recommended),
        "alternatives": [_option(plan, o) for o in plan.alternatives],
    }


def render(plan) -> str:
    """The stage table of the recommended plan and the alternatives table."""
    lines = [f"scenario: {plan.scenario} -- {plan.scenario_why}", plan.targets.describe()]
    if plan.constraints.pricing.basis_why:
        lines.append(f"costs: {plan.constraints.pricing.basis_why}")
    lines.append("")
    names = plan_names(d.stage for d in plan.recommended.decisions)  # as pipeline.yaml and the exports name them
    shown = {stage: name if name == stage else f"{name} (recorded {stage!r})" for stage, name in names.items()}
    rows = [[shown[d.stage], d.engine + (f" ({d.device})" if d.device else ""),
             d.precision + (f" ({len(d.keep_fp16)} kept fp16)" if d.keep_fp16 else ""), str(d.batch),
             f"{d.window_ms:g}", f"{d.timeout_ms:g}", str(d.max_concurrency),
             f"{d.fallback['engine']} <= {d.fallback['max_ratio']:.0%}" if d.fallback else "-",
             f"{d.service.mean_ms:.3g} ({d.service.source})", d.confidence.get("state", "-")]
            for d in plan.recommended.decisions]
    lines += text_table(["stage", "engine", "precision", "batch", "window ms", "timeout ms", "concurrency", "fallback",
                         "mean service ms", "engine is"], rows)
    ties = [f"{d.stage}: {d.confidence['why']}" for d in plan.recommended.decisions
            if d.confidence.get("state") == "tie"]
    lines += [f"  {t}" for t in ties]
    lines += ["", f"alternatives at {plan.rate_rps:.3g} req/s ({plan.rate_why}; {ESTIMATE_LABEL}):"
              if plan.rate_why else f"alternatives at {plan.rate_rps:.3g} req/s ({ESTIMATE_LABEL}):"]
    rows = []
    for o in [plan.recommended, *plan.alternatives]:
        est = o.estimate
        if not o.feasible or est is None:
            rows.append([o.name, "infeasible", "", "", "", "", "", "", "", ""])
            continue
        rows.append([o.name + (" *" if o is plan.recommended else ""), _ms(est.p50_ms),
                     _ms(est.p95_ms) + _band(o.intervals.get("p95_ms")), _ms(est.p99_ms),
                     f"{est.max_rps:.3g}", "-" if o.provisioned_w is None else f"{o.provisioned_w:.0f}",
                     "-" if est.power_w is None else f"{est.power_w:.0f}",
                     "-" if est.energy_per_request_j is None else f"{est.energy_per_request_j:.3g}",
                     cost_text(o.tco) + _band(o.intervals.get("cost"), money=True), TARGETS[o.tier]])
    lines += text_table(["plan", "p50 ms", "p95 ms", "p99 ms", "max req/s", "max W", "mean W", "J/request",
                         f"{plan.constraints.pricing.years:g}y cost", "meets targets"], rows)
    figures = sorted({note for o in [plan.recommended, *plan.alternatives] for note in (o.tco or {}).get("figures",
                                                                                                       {}).values()})
    if figures:
        lines += ["", "cost figures (each as used, with its source and date):"] + [f"  {f}" for f in figures]
    if plan.mix:
        lines += ["", mix_text(plan.mix)]
    renting = plan.constraints.pricing.rent
    lines += ["", f"what to {'rent' if renting else 'buy'}: {plan.recommended.sizing}", "", plan.verdict]
    unknown = (plan.recommended.tco or {}).get("unknown")
    if unknown:
        lines += [f"(a cost marked >= leaves out what is unknown: {', '.join(unknown)})"]
    return "\n".join(lines)


TARGETS = {0: "yes", 1: "no (1.5x)", 2: "no", 3: "no (power)", 4: "no (rate)"}
"""The alternatives table's word for each ``Option.tier``."""


def mix_text(mix: dict) -> str:
    """The exact mix against the best single-type line-up, in one line."""
    single = ", ".join(f"{k} {v:,.0f}" if v is not None else f"{k} cannot carry it"
                       for k, v in mix["single_type"].items())
    saving = ("nothing to buy or rent: the host alone carries it" if mix["cost"] == 0 else
              f"{mix['saving']:.0%} less than the best single type ({mix['best_single']})"
              if mix.get("saving") is not None else "no single-type line-up carries the load")
    return (f"cheapest mix ({mix['method']}, {mix['basis']}, solved in {mix['solve_s']:.3g} s): {mix['cost']:,.0f}, "
            f"{saving}; single-type line-ups: {single}")


def cost_text(tco: dict | None) -> str:
    """A plan's cost as the tables print it: the total, or a lower bound (>=) when part of it is unknown."""
    if not tco:
        return "-"
    return f"{tco['total']:,.0f}" if tco.get("comparable") else f">= {tco['total']:,.0f}"


def _option(plan, o) -> dict:
    return {
        "name": o.name,
        "feasible": o.feasible,
        "meets_slo": o.meets_slo,
        "tier": o.tier,
        "provisioned_power_w": o.provisioned_w,
        "intervals": o.intervals,
        "buy": _buy(o),
        "sizing": o.sizing,
        "notes": o.notes,
        "estimate": _plain(o.estimate),
        "stress_1_5x": _plain(o.stress),
        "tco": o.tco,
        "engines": o.engines,
        "stages": [{**{k: v for k, v in _plain(d).items() if k != "service"},
                    "service_time_ms": _plain(d.service)} for d in o.decisions],
        # what ``loadprobe simulate plans.json`` runs: the option as a pipeline.yaml would hold it
        "pipeline": (pipeline_dict(o, service=plan.service, targets=plan.targets, why=plan_why(plan, o))
                     if o.feasible and o.decisions else None),
        "tuning": o.tuning,
    }


def _band(band, *, money: bool = False) -> str:
    """" [lo-hi]" for a figure's interval over resampled recordings; nothing without one."""
    if not band:
        return ""
    lo, hi = band
    return f" [{lo:,.0f}-{hi:,.0f}]" if money else f" [{lo:.3g}-{hi:.3g}]"


def _buy(o) -> list:
    """What to buy for the option: each accelerator engine's device and units."""
    return [{"engine": n, "kind": e["kind"], "device": e["device"], "count": e["count"]}
            for n, e in o.engines.items() if e["kind"] != "cpu"]


def _estimate_text(est, slo) -> str:
    if est is None:
        return "no estimate"
    if est.p95_ms is None:
        return f"cannot carry {est.rate_rps:.3g} req/s: capacity {est.max_rps:.3g} req/s ({est.bottleneck} saturates)"
    text = (f"{ESTIMATE_LABEL}: p50 {est.p50_ms:.3g} ms, p95 {est.p95_ms:.3g} ms at {est.rate_rps:.3g} req/s; "
            f"capacity {est.max_rps:.3g} req/s")
    if est.power_w is not None:
        text += f"; {est.power_w:.0f} W mean" + (f", {est.energy_per_request_j:.3g} J/request"
                                                 if est.energy_per_request_j is not None else
                                                 " of the engines whose power is known")
    return text


def _plain(value):
    if value is None:
        return None
    if hasattr(value, "to_dict") and not isinstance(value, type):
        return _plain(value.to_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(_plain(v) for v in value)
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return None
    return value


def _num(x: float):
    return round(float(x), 3)


def _ms(x) -> str:
    return "-" if x is None else f"{x:.3g}"

