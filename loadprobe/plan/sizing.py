"""Rules 7 and 8 of the planner: a stage's batch and window, its timeout and concurrency, each engine's limits.

Usage (``planner.recommend`` does this)::

    batch, window_ms, svc, why = choose_batch(profile, spec, device, "int8", budget_ms, ctx, stage)
    decision = make_decision(stage, profile, candidate, engine_why, budget_ms, ctx)
    engines = engine_limits(decisions, specs, ctx)     # name -> servers, max_concurrency, max_queue, power_w, why

Every setting stays within pipeline.yaml's limits, read from its schema (``MAX_*``).
"""

from __future__ import annotations

import math

from ..pipeline.json_schema import maximum
from .constraints import EngineSpec
from .context import PlanContext, calls_per_request
from ..estimate.queueing import IDLE_POWER_SHARE
from .result import Decision
from ..estimate.servicetime import ServiceTime, estimate_target, service_time
from .energy import measured_stage

__all__ = ["BATCHES", "HEADROOM", "MAX_CONCURRENCY", "MAX_QUEUE", "MAX_TIMEOUT_MS", "MAX_WINDOW_MS", "NO_SLO_WINDOW_MS",
           "choose_batch", "cover_stage_p95", "engine_limits", "known_power", "make_decision", "unit_power"]

BATCHES = (1, 2, 4, 8, 16, 32)
HEADROOM = 1.5  # concurrency: Little's law at the sizing rate, plus half again
P99_COVER = 1.5  # a timeout covers 1.5 x a stage's simulated p99 (and 2 x its p95)
TAIL_COVER = 1.5  # ... and 1.5 x its recorded p99.9: the executions the service completed when recorded
NO_SLO_WINDOW_MS = 100.0  # without an SLO, batching windows stay online-short (the seeds' advice)
# pipeline.yaml's limits (loadprobe/pipeline.schema.json): a plan the planner writes always loads.
MAX_TIMEOUT_MS = maximum("stage", "timeout_ms")
MAX_WINDOW_MS = maximum("stage", "batch", "max_wait_ms")
MAX_QUEUE = maximum("engine", "max_queue")
MAX_CONCURRENCY = maximum("engine", "max_concurrency")


def choose_batch(profile, spec, device, precision, budget, ctx, stage) -> tuple[int, float, ServiceTime, str]:
    """Rule 7: the largest batch whose execution and gathering window fit the stage's budget.

    Returns the batch, its window (ms), the execution time there and the reason in words.
    """
    target = estimate_target(spec.kind, device, profile, ctx.host_cpu)
    calls = calls_per_request(ctx).get(stage.name, 1.0)
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
        if svc.mean_ms / b < best[2].mean_ms / best[0] * 0.95:  # at least 5% less time per item
            best = (b, window, svc)
    b, window, svc = best
    limit = (f"its {budget:.3g} ms share of the {ctx.slo_ms:g} ms p95 SLO" if budget is not None
             else f"{NO_SLO_WINDOW_MS:g} ms of window (no SLO given: windows stay online-short)")
    if b > 1:
        why = (f"batch {b}, window {window:g} ms: the largest of {', '.join(map(str, BATCHES))} that cuts the time "
               f"per item by 5% or more ({best[2].mean_ms / b:.3g} vs {one.mean_ms:.3g} ms at batch 1) and whose "
               f"execution ({svc.p95_ms:.3g} ms p95) plus window fits {limit}; the window is the time {b - 1} more "
               f"executions take to arrive at {stage_rate:.3g}/s, +20%")
    elif profile.fit_b_ms is None:
        why = "batch 1: no batch->latency fit was recorded, so batching is assumed to gain nothing per item"
    elif stopped is not None and (stopped[2].mean_ms / stopped[0] < one.mean_ms * 0.95):
        why = (f"batch 1: batch {stopped[0]} would save time per item but needs a {stopped[1]:g} ms window and "
               f"{stopped[2].p95_ms:.3g} ms p95, past {limit}")
    else:
        why = (f"batch 1: the recorded fit ({profile.fit_a_ms:.3g} + {profile.fit_b_ms:.3g} ms x batch) leaves "
               "larger batches no faster per item")
    return b, window, svc, why


def make_decision(stage, profile, c, engine_why, budget, ctx) -> Decision:
    """Rule 8: candidate ``c``'s placement as a Decision: timeout, concurrency and the reason for each."""
    spec, svc, batch, window = c["spec"], c["svc"], c["batch"], c["window"]
    p99, p999 = svc.p99_ms, svc.distribution.quantile(0.999)
    # twice the p99, and never under the recorded tail: a timeout that kills executions the service
    # completed when recorded turns a heavy tail into failures and retries
    timeout = min(MAX_TIMEOUT_MS, max(1.0, math.ceil(2 * (p99 * svc.error_factor + window)),
                                      math.ceil(TAIL_COVER * p999 * svc.error_factor + window)))
    calls = calls_per_request(ctx).get(stage.name, 1.0)
    in_flight = ctx.rate * calls / batch * svc.mean_ms / 1000.0
    servers = ctx.cpu_cores[0] * spec.count if spec.kind == "cpu" else spec.count
    concurrency = min(MAX_CONCURRENCY, max(servers, math.ceil(HEADROOM * in_flight)))
    why = {
        "engine": engine_why,
        "precision": c["precision_why"],
        "batch": c["batch_why"],
        "timeout_ms": (f"2 x (estimated p99 {p99:.3g} ms" + _widened(svc) + f" + window {window:g} ms), at least "
                       f"{TAIL_COVER:g} x its p99.9 ({p999:.3g} ms) + the window, from the recorded distribution"),
        "max_concurrency": f"max({servers} servers of {spec.name}, Little's law: {ctx.rate:.3g} req/s"
                           + (f" x {calls:.3g} calls" if calls > 1 else "")
                           + f" / batch {batch} x mean {svc.mean_ms:.3g} ms = {in_flight:.2f} executions in flight, "
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


def engine_limits(decisions, specs, ctx) -> dict:
    """Each engine the decisions use (and the host CPU): servers, max_concurrency, max_queue and power, with why."""
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
            if spec.assumed:
                servers_why += f" ({spec.assumed})"
        calls = calls_per_request(ctx)
        work = sum(calls.get(d.stage, 1.0) * d.service.mean_ms / 1000.0 / d.batch for d in mine)
        in_flight = ctx.rate * work
        concurrency = min(MAX_CONCURRENCY, max(servers, math.ceil(HEADROOM * in_flight)))
        budget = ctx.slo_ms / 1000.0 if ctx.slo_ms else 1.0
        # Requests that can still be served within one SLO once they reach the front: the servers
        # times the SLO over the mean execution; a longer queue only turns rejects into timeouts.
        visits = sum(calls.get(d.stage, 1.0) for d in mine)
        mean_exec = work / visits if visits else 0.0
        queue = min(MAX_QUEUE, max(2 * servers, math.ceil(servers * budget / mean_exec) if mean_exec else 0))
        power = unit_power(spec, device, ctx)
        measured = [measured_stage(ctx, d.stage, spec, device) for d in mine]
        engines[spec.name] = {
            # Every stage on it measured on this very device: its mean power at the rate from those figures.
            "measured_w": (measured[0].idle_w * spec.count + ctx.rate * sum(
                m.request_j(d.service.mean_ms / 1000.0 / d.batch) for m, d in zip(measured, mine)))
            if mine and all(m is not None for m in measured) else None,
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


def cover_stage_p95(decisions, est, ctx: PlanContext, *, rate: float | None = None) -> bool:
    """Timeouts cover queueing and batching too (docs/pipeline.md): at least twice each stage's estimated
    p95 and, where simulated, 1.5 x its p99 -- a light stage queued behind a heavy-tailed one waits in
    that tail. Returns whether a timeout was raised."""
    raised = False
    for d in decisions:
        stage_p95, stage_p99 = est.stage_p95_ms.get(d.stage), est.stage_p99_ms.get(d.stage)
        wanted = max(2 * (stage_p95 or 0.0), P99_COVER * (stage_p99 or 0.0)) * d.service.error_factor
        if wanted > d.timeout_ms:
            d.timeout_ms = float(min(MAX_TIMEOUT_MS, math.ceil(wanted)))
            how = "simulated" if est.method.startswith("discrete-event") else "estimated"
            basis = (f"{P99_COVER:g} x the stage's {how} p99 of {stage_p99:.3g} ms"
                     if stage_p99 and P99_COVER * stage_p99 > 2 * (stage_p95 or 0.0)
                     else f"2 x the stage's {how} p95 of {stage_p95:.3g} ms")
            d.why["timeout_ms"] = (f"{basis} at {rate or ctx.rate:.3g} req/s, queueing and batching wait included"
                                   + _widened(d.service))
            raised = True
    return raised


def _widened(svc) -> str:
    """The words for a timeout widened by an estimate's error bound (nothing for a measured time)."""
    if svc.error_factor == 1.0:
        return ""
    return (f", x {svc.error_factor:g} for the {svc.source} it rests on (its stated error bound; "
            "loadprobe verify --calibrate replaces it with the observed time)")


def unit_power(spec: EngineSpec, device, ctx) -> float | None:
    """One unit's maximum power (W), what a power budget provisions for: the device's TDP, or the host
    CPU's (``estimate.hostpower``: given, RAPL's maximum, the catalog's, or assumed); None when unknown."""
    if spec.kind != "cpu" or spec.device:
        return device.max_power_w if device is not None else None
    return ctx.host_power.watts if ctx.host_power is not None else None


def known_power(engines, util) -> float | None:
    """The mean power of the engines whose power is known, at utilisations ``util`` (name -> 0..1); None if none is.

    An engine whose stages' energy was measured on it (``plan.energy``) draws what was measured: its
    idle power and the stages' active energy at the sizing rate. Others draw their maximum power x
    (30% idle + the rest in proportion to utilisation)."""
    known = [(n, e) for n, e in engines.items() if e["power_w"] is not None or e.get("measured_w") is not None]
    if not known:
        return None
    return sum(e["measured_w"] if e.get("measured_w") is not None
               else e["power_w"] * (IDLE_POWER_SHARE + (1 - IDLE_POWER_SHARE) * util.get(n, 0.0)) for n, e in known)
