"""An LLM plan as files and tables: pipeline.yaml (its pools as engines and an ``llm:`` section), plans.json,
the terminal summary.

In pipeline.yaml each pool is an engine (its device type and count: replicas x tensor parallel) and
a stage runs on it -- ``generate`` on a colocated pool, ``prefill`` then ``decode`` on two -- so
that every reader of pipelines (validate, export, the report) reads an LLM plan too; ``llm.pools``
holds what only an LLM engine has (maximum running sequences, token budget, KV capacity, the step
model, the role) and ``llm.model`` the model's shape.

Usage::

    config = llm_pipeline(plan, plan.recommended)   # a PipelineConfig (plan: plan.llm.plan_llm's)
    json.dumps(llm_plans_dict(plan)); print(render_llm(plan))
"""

from __future__ import annotations

from .._table import text_table
from ..estimate.tco import HOURS_PER_YEAR, unit_figure
from ..formats import PLANS
from ..pipeline.config import (EngineConfig, LlmConfig, LlmModelConfig, LlmPoolConfig, PipelineConfig, SLOConfig,
                               StageConfig)
from ..pipeline.json_schema import maximum
from ..simulator.llm.pools import STAGE
from .llm_pools import HEADROOM, Unit, parallel_note

QUEUE_PER_SLOT = 4  # the runtime's queue bound per running sequence: a burst waits, a flood is refused


def llm_pipeline(plan, option) -> PipelineConfig:
    """``option`` of ``plan`` as pipeline.yaml."""
    engines, stages, pools = {}, [], {}
    longest = int((plan.load.prompts + plan.load.outputs).max())
    for p in option.pools:
        name = p.role if option.disaggregated else "engine"
        slots = p.unit.settings.max_running * p.replicas
        engines[name] = EngineConfig(kind=p.unit.kind, device=p.unit.device_id, count=p.devices,
                                     max_concurrency=min(slots, int(maximum("engine", "max_concurrency"))),
                                     max_queue=min(slots * QUEUE_PER_SLOT, int(maximum("engine", "max_queue"))),
                                     why=p.why)
        # A stage's deadline: the targets' worth of its tokens, twice over (the runtime's bound, not a target).
        budget = plan.load.ttft_ms + (plan.load.tpot_ms * longest if p.role != "prefill" else 0.0)
        stages.append(StageConfig(name=STAGE[p.role], engine=name,
                                  timeout_ms=min(round(2 * budget, 3), float(maximum("ms"))),
                                  why={"engine": f"the {p.role} pool: {p.why}",
                                       "timeout_ms": "twice the targets' time for the longest recorded request"}))
        s = p.unit.settings
        pools[name] = LlmPoolConfig(role=p.role, replicas=p.replicas, tensor_parallel=p.unit.tp,
                                    precision=p.unit.precision, max_running=s.max_running,
                                    token_budget=s.token_budget, kv_tokens=s.kv_tokens,
                                    chunked_prefill=s.chunked_prefill, step_model=p.unit.steps.to_dict(),
                                    front_end_ms=round(p.unit.ttft_offset_ms, 4) if p.unit.ttft_offset_ms else None,
                                    why="; ".join(w for w in (s.why, parallel_note(p.unit)) if w))
    model = None if plan.model is None else LlmModelConfig(**plan.model.to_dict())
    llm = LlmConfig(model=model, pools=pools,
                    kv_link_gbps=plan.load.link_bytes_per_s * 8 / 1e9 if option.disaggregated else None)
    return PipelineConfig(service=plan.service, slo=SLOConfig(ttft_p95_ms=plan.load.ttft_ms,
                                                              tpot_p95_ms=plan.load.tpot_ms, min_rps=plan.load.rate),
                          engines=engines, stages=stages, llm=llm,
                          why={"plan": _why(plan, option), "targets": plan.targets_why, "rate": plan.rate_why})


def llm_plans_dict(plan) -> dict:
    from ..pipeline.files import _to_plain
    from .files import _plain

    units = []
    for unit, why in plan.units:
        if unit is None:
            units.append({"excluded": why})
            continue
        units.append({"engine": unit.name, "device": unit.device_id, "tensor_parallel": unit.tp,
                      "precision": unit.precision, "kv_tokens": unit.settings.kv_tokens,
                      **per_dollar(unit, plan.pricing, plan.catalog), "figures": unit.figures,
                      "pools": {role: {"replicas": plan.pools[(unit.name, role)].replicas,
                                       "devices": plan.pools[(unit.name, role)].devices,
                                       "feasible": plan.pools[(unit.name, role)].feasible}
                                for role in ("colocated", "prefill", "decode")}})
    options = [dict(o.to_dict(), pipeline=_to_plain(llm_pipeline(plan, o))) for o in plan.options]
    best = plan.best_colocated()
    return _plain({
        "version": PLANS.value, "kind": "llm", "service": plan.service, "sizing_rate_rps": plan.load.rate,
        "sizing_why": plan.rate_why, "targets": {"ttft_p95_ms": plan.load.ttft_ms, "tpot_p95_ms": plan.load.tpot_ms,
                                                 "headroom": HEADROOM, "why": plan.targets_why},
        "model": None if plan.model is None else plan.model.to_dict(),
        "load": {"requests": len(plan.load.prompts), "mean_prompt_tokens": plan.load.mean_prompt,
                 "mean_output_tokens": plan.load.mean_output},
        "constraints": {"years": plan.pricing.years, "rent": plan.pricing.rent, "basis_why": plan.pricing.basis_why},
        "engines": units, "verdict": _why(plan, plan.recommended),
        "saving_vs_best_colocated": _saving(plan.recommended, best),
        "recommended": options[0], "alternatives": options[1:], "notes": plan.notes})


def _saving(chosen, best) -> float | None:
    a, b = chosen.cost, best.cost if best is not None else None
    if b is None or not (a.get("comparable") and b.get("comparable")) or not b["total"]:
        return None
    return round(1.0 - a["total"] / b["total"], 4)


def _why(plan, option) -> str:
    best = plan.best_colocated()
    cost = _money(option)
    text = (f"{option.name}: {' + '.join(f'{p.devices} x {p.unit.name} ({p.role})' for p in option.pools)}, "
            f"{cost}; meets TTFT p95 <= {plan.load.ttft_ms:g} ms and TPOT p95 <= {plan.load.tpot_ms:g} ms at "
            f"{plan.load.rate:.3g} req/s and {HEADROOM:g}x it" if option.feasible else
            f"{option.name}: no plan of the line-up meets the targets at {HEADROOM:g}x the rate")
    if best is not None and best is not option and _saving(option, best) is not None:
        text += f"; {_saving(option, best):.1%} less than the best colocated plan ({best.name}, {_money(best)})"
    return text


def _money(option) -> str:
    c = option.cost
    if not c.get("comparable"):
        return "cost not known (" + ", ".join(c.get("unknown") or ["no figure"]) + ")"
    return f"{c['total']:,.0f} over {c['years']:g} years ({'rented' if c.get('mode') == 'rent' else 'bought'})"


def render_llm(plan) -> str:
    load = plan.load
    lines = [f"load: {plan.rate_why}; prompts {load.mean_prompt:,.0f} tokens and outputs "
             f"{load.mean_output:,.0f} on average ({load.mean_prompt / max(load.mean_output, 1e-9):.2g} prompt "
             "tokens per output token)",
             f"targets: {plan.targets_why}, met at {HEADROOM:g}x the rate",
             f"model: {plan.model.name} ({plan.model.params / 1e9:.3g} B parameters)" if plan.model is not None
             else "model: the recorded engine's, its steps fitted to the recording",
             f"costs: {plan.pricing.basis_why}", ""]
    rows = []
    for unit, why in plan.units:
        if unit is None:
            continue
        money = per_dollar(unit, plan.pricing, plan.catalog)
        flops, read = money["flops_per_dollar_hour"], money["bytes_per_dollar_hour"]
        cell = {role: plan.pools[(unit.name, role)] for role in ("colocated", "prefill", "decode")}
        rows.append([unit.name + (f" x{unit.tp} TP" if unit.tp > 1 else ""),
                     f"{unit.settings.kv_tokens:,}" if unit.settings.kv_tokens else "-",
                     f"{flops / 1e12:,.3g}" if flops else "-", f"{read / 1e9:,.3g}" if read else "-",
                     *(f"{c.devices}" + ("" if c.feasible else " (misses)") for c in cell.values())])
    lines += text_table(["engine", "KV tokens", "TFLOP/s per $/h", "GB/s per $/h", "colocated", "prefill pool",
                         "decode pool"], rows, numbers_right=True)
    lines.append("(pool columns: devices needed; prefill is compute-bound, decode bandwidth-bound)")
    lines.append("")
    rows = [[o.name, _money(o) if o.feasible else "- (misses the targets)", _ms(o.figure("ttft_p95_ms")), _ms(o.figure("tpot_p95_ms")), f"{o.good_share:.1%}",
             f"{o.goodput_per_dollar:,.4g}" if o.goodput_per_dollar and o.feasible else "-",
             f"{o.joules_per_output_token:.3g}" if o.joules_per_output_token is not None else "-"]
            for o in plan.options]
    lines += text_table(["plan", "cost", "TTFT p95 ms", "TPOT p95 ms", "goodput", "good req per $", "J/token"], rows)
    lines += ["", f"recommended: {_why(plan, plan.recommended)}"]
    if plan.recommended.disaggregated:
        h = plan.recommended.to_dict()["handoff"]
        lines.append(f"KV hand-off: {h['mean_bytes'] / 1e6:,.3g} MB per request on average, {h['mean_ms']:.3g} ms "
                     f"(p95 {h['p95_ms']:.3g} ms) over {h['link_gbps']:g} Gbit/s -- inside the decode pool's TPOT")
    lines += [f"note: {n}" for n in plan.notes]
    estimated = [u for u, _ in plan.units if u is not None and u.device is not None]
    if estimated:
        lines.append(f"estimates: {estimated[0].steps.source.split(', ', 1)[-1]}; loadprobe verify --calibrate "
                     "on a recording of the plan running replaces them")
    return "\n".join(lines)


def _ms(value) -> str:
    return "-" if value is None else f"{value:,.4g}"


def per_dollar(unit: Unit, pricing, catalog) -> dict:
    """A device's FLOP/s and bytes/s per unit of money per hour (rent, or purchase spread over the years): the
    figures a prefill pool (compute) and a decode pool (bandwidth) are chosen by."""
    figure, _ = unit_figure(unit.device_id, catalog=catalog, rent=pricing.rent, prices=pricing.prices,
                            hourly_rates=pricing.hourly_rates)
    if figure is None or not unit.figures.get("flops_per_s"):
        return {"flops_per_dollar_hour": None, "bytes_per_dollar_hour": None}
    hourly = figure * unit.tp if pricing.rent else figure * unit.tp / (pricing.years * HOURS_PER_YEAR)
    return {"flops_per_dollar_hour": unit.figures["flops_per_s"] / hourly,
            "bytes_per_dollar_hour": unit.figures["bytes_per_s"] / hourly}


