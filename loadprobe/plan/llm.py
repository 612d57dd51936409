"""LLM serving planned: per device, a colocated pool and prefill and decode pools sized, priced, the cheapest kept.

``loadprobe recommend --llm DATA`` reads an LLM recording (the engine's spans, its OpenTelemetry
spans, or a load client's recording, ``analysis.run.llm_recording``) for the load: its rate and
each request's prompt and output lengths, and its recorded TTFT and TPOT p95 as default targets.
Each engine of the line-up is an engine replica (``llm_pools.Unit``):

- the recorded engine (``--engines cpu`` without ``--model``): its step times fitted to the
  recording and checked on it (``simulator.llm.replay.fit_recording``), its TTFT offset kept;
- a catalog device (with ``--model``, a config.json or a preset): the model's roofline on it
  (``simulator.llm.roofline.on_device``: the smallest tensor-parallel group holding the weights,
  its KV cache from the memory left), excluded with the reason where it cannot hold the model.

For each, three pools are sized by replay (``llm_pools.size_pool``): colocated, prefill-only and
decode-only. The options are every colocated pool and the cheapest disaggregated pair: the prefill
pool and the decode pool are independent once the hand-off is fixed (each request's KV cache over
the link), so the cheapest pair is the cheapest prefill pool with the cheapest decode pool, of any
two device types -- exact, by enumeration. The plan kept is the cheapest that meets the targets
at the rate and ``HEADROOM`` x it, priced by ``estimate.tco.price_line_up`` (bought or rented as
``Pricing.decided`` says); it never costs more than the best colocated single-type plan, because
those are among the options. Each option says its goodput per dollar (requests within both
targets per unit of money, rent or amortised purchase) and joules per output token (each device
at its maximum power x (30% idle + the rest x its busy share)).

Usage::

    plan = plan_llm(["data/"], model=model_shape("llama-3.1-8b"), engines=parse_engines("gpu:nvidia-l4,gpu:nvidia-h100-sxm"),
                    ttft_ms=500, tpot_ms=50, rate=8, pricing=Pricing(), catalog=load_catalog())
    plan.recommended.name, plan.options      # llm_files: its pipeline.yaml, plans.json and tables
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from .._errors import LoadprobeError
from ..estimate.queueing import IDLE_POWER_SHARE
from ..estimate.tco import HOURS_PER_YEAR, price_line_up
from ..simulator.llm.engine import EngineSettings
from ..simulator.llm.roofline import on_device
from .llm_pools import ROLES, Load, Pool, Unit, handoff_ms, parallel_note, size_pool

DEFAULT_TOKEN_BUDGET = 8192  # tokens per iteration: vLLM's --max-num-batched-tokens for its API server
MIN_TOKEN_BUDGET = 64
DEFAULT_LINK_GBPS = 100.0  # the KV hand-off's link: a 100 Gbit/s RDMA NIC between a prefill and a decode host


@dataclass
class LlmOption:
    """A candidate plan: one colocated pool, or a prefill pool and a decode pool."""

    name: str
    pools: list
    cost: dict
    power_w: float | None
    load: Load

    @property
    def disaggregated(self) -> bool:
        return len(self.pools) == 2

    @property
    def feasible(self) -> bool:
        return all(p.feasible for p in self.pools)

    def figure(self, what: str, at: str = "at_rate") -> float | None:
        """TTFT or TPOT p50/p95 of the plan (``what``: ``ttft_p95_ms`` ...): from the pool that answers for it."""
        role = {"ttft": "prefill", "tpot": "decode"}[what[:4]]
        pool = next(p for p in self.pools if p.role in (role, "colocated"))
        return getattr(getattr(pool, at), what)

    @property
    def good_share(self) -> float:
        """Requests within both targets at the rate (two pools: each pool's share, taken as independent)."""
        return float(np.prod([p.at_rate.good_share for p in self.pools]))

    @property
    def hourly(self) -> float | None:
        """The plan's cost per hour: its rent, or its purchase and electricity spread over its years."""
        if not self.cost.get("comparable"):
            return None
        return self.cost["total"] / (self.cost["years"] * HOURS_PER_YEAR)

    @property
    def goodput_per_dollar(self) -> float | None:
        hourly = self.hourly
        return self.load.rate * self.good_share * 3600 / hourly if hourly else None

    @property
    def joules_per_output_token(self) -> float | None:
        return None if self.power_w is None else self.power_w / (self.load.rate * self.load.mean_output)

    def key(self) -> tuple:
        """Cheapest first among the feasible and priced; then fewer devices; colocated before disaggregated. Where
        none is feasible, the one serving the most requests within the targets first."""
        total = self.cost.get("total") if self.cost.get("comparable") else None
        return (not self.feasible, 0.0 if self.feasible else -self.good_share, total is None, total or 0.0,
                sum(p.devices for p in self.pools), self.disaggregated)

    def to_dict(self) -> dict:
        return {"name": self.name, "feasible": self.feasible, "meets_slo": self.feasible,
                "disaggregated": self.disaggregated,
                "pools": [_pool_dict(p) for p in self.pools], "tco": self.cost,
                "buy": [{"engine": _engine_name(self, p), "device": p.unit.device_id, "count": p.devices}
                        for p in self.pools],
                "estimate": {"ttft_p95_ms": self.figure("ttft_p95_ms"), "tpot_p95_ms": self.figure("tpot_p95_ms"),
                             "ttft_p95_ms_at_headroom": self.figure("ttft_p95_ms", "at_headroom"),
                             "tpot_p95_ms_at_headroom": self.figure("tpot_p95_ms", "at_headroom"),
                             "good_share": round(self.good_share, 4), "power_w": self.power_w,
                             "goodput_per_dollar": self.goodput_per_dollar,
                             "joules_per_output_token": self.joules_per_output_token},
                "handoff": _handoff(self) if self.disaggregated else None,
                "notes": [p.why for p in self.pools] + [n for n in (parallel_note(p.unit) for p in self.pools) if n]}


@dataclass
class LlmPlan:
    service: str
    model: object | None  # roofline.ModelShape, or None: the recorded engine's own model
    load: Load
    units: list  # (Unit, reason it is excluded or None) per engine of the line-up
    pools: dict  # (unit name, role) -> Pool
    options: list  # LlmOption, best first
    pricing: object
    catalog: object
    targets_why: str
    rate_why: str
    notes: list = field(default_factory=list)

    @property
    def recommended(self) -> LlmOption:
        return self.options[0]

    def best_colocated(self) -> LlmOption | None:
        return next((o for o in self.options if not o.disaggregated and o.feasible), None)


def plan_llm(paths, *, model, engines, ttft_ms: float | None, tpot_ms: float | None, rate: float | None, pricing,
             catalog, max_running: int = 256, token_budget: int | None = DEFAULT_TOKEN_BUDGET,
             kv_tokens: int | None = None, link_gbps: float = DEFAULT_LINK_GBPS, service: str | None = None,
             seed: int = 0, progress=None) -> LlmPlan:
    """Size, price and choose (module docstring). ``engines``: ``constraints.parse_engines``'s specs;
    ``progress(done, total)``, where given, is called as each engine is placed and each of its pools sized
    (a large rate or long outputs take minutes)."""
    from ..analysis.run import llm_recording
    from ..pipeline.names import to_name
    from ..simulator.llm.replay import lengths_view
    from .constraints import LineUp, check_within_plan
    from .context import cpu_steal, service_name

    portrait, views = llm_recording(paths, service=service)
    requests = lengths_view(views)
    known = requests.tokens_out >= 1
    if known.sum() < 2:
        n = len(known)
        what = ("it holds one request" if n == 1 and known.any() else
                "its one request has no output tokens recorded" if n == 1 else
                f"only 1 of its {n:,} requests has its output tokens recorded" if known.any() else
                f"none of its {n:,} requests has its output tokens recorded")
        raise LoadprobeError(f"{', '.join(map(str, paths))}: {what}; an LLM plan needs at least 2 requests with their "
                             "prompt and output lengths: record a longer run, with the requests' token counts "
                             "(docs/recording.md, LLM requests)")
    span_s = float(requests.start[known].max() - requests.start[known].min()) / 1e9
    recorded_rate = (int(known.sum()) - 1) / span_s if span_s > 0 else None
    if rate is None and recorded_rate is None:
        raise LoadprobeError("the recording's requests all start at once: give the rate to plan for (--min-rps)")
    given_rate = rate
    rate_why = (f"{rate:g} req/s (given: --min-rps)" if rate is not None
                else f"the recorded mean, {recorded_rate:.3g} req/s ({int(known.sum()):,} requests in {span_s:.3g} s)")
    rate = rate if rate is not None else recorded_rate
    if int((~known).sum()):  # nothing of a request the plan cannot size is dropped unsaid
        rate_why += (f"; {int((~known).sum()):,} of the {len(known):,} recorded requests are left out of the load: no "
                     "output tokens recorded for them")
    for option, value in (("--min-rps", rate), ("--slo-ttft-ms", ttft_ms), ("--slo-tpot-ms", tpot_ms),
                          ("--kv-link-gbps", link_gbps)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise LoadprobeError(f"{option} {value:g}: expected a number above 0")
        try:
            check_within_plan(option, value)
        except LoadprobeError:
            if option != "--min-rps" or given_rate is not None:
                raise
            raise LoadprobeError(f"the recorded rate, {value:g} req/s, is more than a plan holds: the requests' "
                                 "timestamps are bunched; give the rate to plan for (--min-rps)") from None
    llm = portrait.llm
    ttft_ms, tpot_ms, targets_why = _targets(ttft_ms, tpot_ms, llm)
    order = np.argsort(requests.start[known], kind="stable")
    start = requests.start[known][order]
    load = Load(rate=rate, arrivals_s=(start - start[0]) / 1e9,
                prompts=np.maximum(requests.tokens_in[known][order], 1).astype(np.int64),
                outputs=requests.tokens_out[known][order].astype(np.int64), ttft_ms=ttft_ms, tpot_ms=tpot_ms,
                link_bytes_per_s=link_gbps * 1e9 / 8, seed=seed)
    if model is None and any(s.kind != "cpu" or s.device for s in engines):
        named = ", ".join(f"{s.kind}:{s.device}" if s.device else s.kind for s in engines if s.kind != "cpu" or s.device)
        raise LoadprobeError(f"--engines {named}: planning a device the model never ran on needs the model's shape: give "
                             "--model CONFIG.JSON (its Hugging Face config.json) or a preset name")
    EngineSettings(kv_tokens=kv_tokens).check_holds(load.prompts, load.outputs)
    specs = [spec for spec in engines if not (model is not None and spec.kind == "cpu" and not spec.device)]
    if not specs:
        raise LoadprobeError("--engines: with --model, name the devices to plan (gpu:ID, npu:ID or cpu:ID, from "
                             "`loadprobe catalog`); the recorded engine itself is planned without --model")
    total, done = len(specs) * (1 + len(ROLES)), 0

    def advance(steps: int = 1) -> None:
        nonlocal done
        done += steps
        if progress is not None:
            progress(done, total)

    units = []
    for spec in specs:
        units.append(_unit(spec, model, load, portrait, views, max_running, token_budget, kv_tokens, catalog, seed))
        advance(1 if units[-1][1] is None else 1 + len(ROLES))  # an excluded engine has no pools to size
    usable = [u for u, why in units if why is None]
    if not usable:
        raise LoadprobeError("no engine of the line-up can serve the model: " + "; ".join(why for _, why in units))
    # Bought or rented is decided on the devices that can serve: one excluded for its memory has no say.
    pricing = pricing.decided(LineUp(engines=tuple(s for s, (_, why) in zip(specs, units) if why is None)), catalog)
    pools = {}
    for u in usable:
        for role in ROLES:
            pools[(u.name, role)] = _colocated(u, load) if role == "colocated" else size_pool(role, u, load)
            advance()

    def option(name: str, chosen: list) -> LlmOption:
        power = _power(chosen, catalog)
        engines_priced = [(p.role, p.unit.device_id, p.unit.kind, p.devices) for p in chosen]
        cost = price_line_up(engines_priced, catalog=catalog, rent=pricing.rent, prices=pricing.prices,
                             hourly_rates=pricing.hourly_rates, years=pricing.years,
                             price_per_kwh=pricing.price_per_kwh, power_w=power,
                             power_unknown=[p.unit.device_id for p in chosen if p.unit.device_id and power is None])
        if any(p.unit.device is None for p in chosen):  # each replica of the recorded engine is a host like it
            cost = dict(cost, comparable=False, unknown=[*cost["unknown"], "the recorded host's price: plan on a "
                                                         "catalog CPU with --engines cpu:DEVICE and --model"])
        return LlmOption(name, chosen, cost, power, load)

    options = [option(f"colocated on {u.name}", [pools[(u.name, "colocated")]]) for u in usable]
    best = {role: min((option(role, [pools[(u.name, role)]]) for u in usable), key=LlmOption.key).pools[0]
            for role in ("prefill", "decode")}
    options.append(option(f"prefill on {best['prefill'].unit.name} + decode on {best['decode'].unit.name}",
                          [best["prefill"], best["decode"]]))
    options.sort(key=LlmOption.key)
    name = to_name(service_name(portrait))
    notes = [why for _, why in units if why is not None]
    notes += [f"{note}; record it on the hardware and verify" for note in map(parallel_note, usable) if note]
    steal = cpu_steal(portrait)
    if steal is not None and any(u.device is None for u in usable):  # the recorded engine's steps hold the pauses
        notes.append(f"CPU steal: {steal}")
    return LlmPlan(name, model, load, units, pools, options, pricing, catalog, targets_why, rate_why, notes)


def default_llm_engines(catalog, model) -> str:
    """``--engines`` when not given: the recorded engine without a model; with one, every catalog accelerator
    whose memory, bandwidth and price or hourly rate are published (what can be sized and compared on money)."""
    if not model:
        return "cpu"
    return ",".join(f"{d.kind}:{d.id}" for d in catalog if d.kind in ("gpu", "npu") and d.memory_bytes
                    and d.memory_bandwidth_bytes_per_s and (d.price_usd or d.hourly_usd))


def _targets(ttft_ms, tpot_ms, llm) -> tuple[float, float, str]:
    recorded = {"ttft": llm.ttft_ms.p95 if llm is not None and llm.ttft_ms is not None else None,
                "tpot": llm.tpot_ms.p95 if llm is not None and llm.tpot_ms is not None else None}
    out, why = [], []
    for name, given in (("ttft", ttft_ms), ("tpot", tpot_ms)):
        if given is not None:
            out.append(float(given))
            why.append(f"{name.upper()} p95 <= {given:g} ms (given)")
        elif recorded[name] is not None and recorded[name] > 0:
            out.append(float(recorded[name]))
            why.append(f"{name.upper()} p95 <= {recorded[name]:.4g} ms (the recorded p95)")
        else:
            raise LoadprobeError(f"the recording has no {name.upper()} to take as the target: give --slo-{name}-ms")
    return out[0], out[1], ", ".join(why)


def _colocated(unit: Unit, load: Load) -> Pool:
    """The colocated pool at the plan's token budget, or at one small enough that an iteration carrying a full
    budget of prompt tokens stays within half the TPOT target, where that needs fewer devices: a long prompt's
    chunks then stall the decoding sequences less (vLLM's --max-num-batched-tokens), at some cost in TTFT."""
    pool = size_pool("colocated", unit, load)
    per_token = unit.steps.per_prompt_token * unit.steps.scale
    if per_token <= 0:
        return pool
    # Never below a token per running sequence: vLLM refuses --max-num-batched-tokens under --max-num-seqs.
    budget = max(MIN_TOKEN_BUDGET, unit.settings.max_running,
                 2 ** int(math.log2(max(load.tpot_ms * 1e6 / 2 / per_token, 1.0))))
    if budget >= (unit.settings.token_budget or math.inf):
        return pool
    settings = replace(unit.settings, token_budget=budget,
                       why=unit.settings.why.replace(f"{unit.settings.token_budget} token budget",
                                                     f"{budget} token budget (an iteration of prompt tokens within "
                                                     f"half the TPOT target)"))
    small = size_pool("colocated", replace(unit, settings=settings), load)
    return small if (not small.feasible, small.devices) < (not pool.feasible, pool.devices) else pool


def _unit(spec, model, load: Load, portrait, views, max_running, token_budget, kv_tokens, catalog, seed):
    """(Unit, None), or (None, why) where the engine cannot serve the model."""
    settings = EngineSettings(max_running=max_running, token_budget=token_budget, chunked_prefill=True,
                              kv_tokens=kv_tokens, kv_reserve="paged")
    if spec.kind == "cpu" and not spec.device:
        from ..simulator.llm.replay import fit_recording

        try:
            fitted = fit_recording(portrait, views, EngineSettings(
                max_running=max_running, token_budget=token_budget, kv_tokens=kv_tokens, kv_reserve="paged",
                why="the plan's settings"), seed)
        except LoadprobeError as e:
            return None, f"the recorded engine: {e}"
        return Unit("the recorded engine", None, "cpu", 1, None, fitted.model, fitted.settings,
                    ttft_offset_ms=fitted.check["ttft_offset_ms"],
                    figures={"checked": fitted.check["summary"]}), None
    device = catalog.get(spec.catalog_id or "")
    longest = int((load.prompts + load.outputs).max())
    try:
        unit = on_device(model, device, longest=longest)
    except LoadprobeError as e:
        return None, str(e)
    settings.kv_tokens = unit.kv_tokens if kv_tokens is None else min(kv_tokens, unit.kv_tokens)
    settings.why = (f"{settings.max_running} running, {settings.token_budget or 'no'} token budget, KV cache "
                    f"{settings.kv_tokens:,} tokens: the memory left by the weights at the engine's share")
    return Unit(device.id, device, device.kind, unit.tp, unit.precision, unit.steps, settings,
                figures=unit.figures), None


def _power(pools: list, catalog) -> float | None:
    """The pools' mean power at the rate: each device's maximum x (30% idle + the rest x its busy share)."""
    total = 0.0
    for p in pools:
        device = p.unit.device
        watts = getattr(device, "max_power_w", None)
        if watts is None:
            return None
        total += p.devices * watts * (IDLE_POWER_SHARE + (1 - IDLE_POWER_SHARE) * p.at_rate.busy)
    return total


def _engine_name(option: LlmOption, pool: Pool) -> str:
    return pool.role if option.disaggregated else "engine"


def _pool_dict(p: Pool) -> dict:
    return {"role": p.role, "engine": p.unit.name, "device": p.unit.device_id, "replicas": p.replicas,
            "tensor_parallel": p.unit.tp, "devices": p.devices, "feasible": p.feasible, "why": p.why,
            "settings": p.unit.settings.to_dict(), "step_model": p.unit.steps.to_dict(),
            "at_rate": p.at_rate.to_dict(), "at_headroom": p.at_headroom.to_dict()}


def _handoff(option: LlmOption) -> dict:
    prefill = option.pools[0]
    per_token = prefill.unit.figures.get("kv_bytes_per_token", 0.0)
    ms = handoff_ms(prefill.unit, option.load.prompts, option.load)
    return {"kv_bytes_per_token": per_token, "mean_bytes": float(option.load.prompts.mean() * per_token),
            "link_gbps": option.load.link_bytes_per_s * 8 / 1e9, "mean_ms": float(ms.mean()),
            "p95_ms": float(np.percentile(ms, 95)),
            "basis": "each prompt's KV cache (its tokens x the model's KV bytes per token) over the link; it delays "
                     "the second token, so it is inside the decode pool's TPOT"}
