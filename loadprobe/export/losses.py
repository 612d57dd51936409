"""What an export target cannot carry over from a plan, found in the plan itself.

Each target lists only the features this plan uses: a plan without breakers is not told that
breakers are lost. A ``Loss`` is *dropped* (the target does nothing of the kind) or
*approximated* (it does something close, said how)::

    for loss in triton_losses(config):
        loss.feature, loss.where, loss.plan, loss.instead, loss.dropped
    markdown(triton_losses(config))          # the README's two sections

Where a target has no equivalent at all, the README says so plainly rather than writing
something that merely looks like it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..pipeline.config import PipelineConfig, StageConfig
from .placement import placements

__all__ = ["Loss", "attempts", "fallback_text", "markdown", "ray_losses", "summary", "triton_losses", "vllm_losses"]


@dataclass(frozen=True)
class Loss:
    feature: str        # a short name: "fallback", "breaker", ...
    where: str          # the stages or engines concerned, or "service-wide"
    plan: str           # what the plan asks for
    instead: str        # what the exported files do instead
    dropped: bool       # True: not carried over at all; False: approximated


def attempts(config: PipelineConfig, stage: StageConfig) -> int:
    """Attempts of a stage in all, as the Router counts them (its retry, else routing.retry, else 1)."""
    if stage.retry is not None:
        return stage.retry.max_attempts
    routing = config.routing
    return routing.retry.max_attempts if routing is not None and routing.retry is not None else 1


def fallback_text(stage: StageConfig) -> str:
    """``to 'gpu0' when more than 16 wait, at most 30% of requests, otherwise reject``."""
    f = stage.fallback
    when = f"when more than {f.when.queue_len_over:,} wait" if f.when else "when its engine turns a request away"
    return f"to {f.engine!r} {when}, at most {f.max_ratio:.0%} of requests, otherwise {f.otherwise}"


def _names(stages) -> str:
    return ", ".join(s.name for s in stages)


def _common(config: PipelineConfig, losses: list[Loss], shed: str, canary: str) -> None:
    routing = config.routing
    if routing is not None and routing.shed is not None and routing.shed.by == "priority":
        losses.append(Loss("shedding by priority", "service-wide", "a full queue rejects its lowest-priority "
                           "request to take one of higher priority", shed, True))
    if routing is not None and routing.canary is not None:
        losses.append(Loss("canary", "service-wide", f"{routing.canary.weight:.0%} of requests go to the plan in "
                           f"{routing.canary.config}", canary, True))


def _shared_engines(config: PipelineConfig, losses: list[Loss], instead: str, *, fallbacks: bool) -> None:
    on: dict[str, list[str]] = {}
    for p in placements(config):
        if not (p.primary or fallbacks):
            continue
        on.setdefault(p.engine_name, []).append(p.stage.name if p.primary else f"{p.stage.name} (fallback)")
    for name, users in on.items():
        if len(users) > 1:
            engine = config.engines[name]
            losses.append(Loss("engine shared by stages", name, f"max_concurrency {engine.max_concurrency:,} and "
                               f"max_queue {engine.max_queue:,} for {', '.join(users)} together", instead, False))


def _uneven(config: PipelineConfig, losses: list[Loss], unit: str, *, fallbacks: bool) -> None:
    for p in placements(config):
        if (p.primary or fallbacks) and p.slots % p.devices:
            losses.append(Loss("executions over devices", f"{p.stage.name} on {p.engine_name}",
                               f"{p.slots:,} executions at once over {p.devices:,} devices",
                               f"{p.per_device:,} {unit} on each device, {p.per_device * p.devices:,} in all", False))


def _no_queue(config: PipelineConfig, losses: list[Loss], field: str, zero_means: str, *, fallbacks: bool) -> None:
    for name, engine in config.engines.items():
        used = any(p.engine_name == name and (p.primary or fallbacks) for p in placements(config))
        if engine.max_queue == 0 and used:
            losses.append(Loss("no queue", name, "max_queue 0: a request that finds no free slot is rejected",
                               f"{field} 1 ({zero_means}): one request may wait", False))


def triton_losses(config: PipelineConfig) -> list[Loss]:
    """What a Triton model repository cannot express of ``config``, in the order the README lists it."""
    losses: list[Loss] = []
    stages = config.stages
    npu = [s for s in stages if config.engines[s.engine].kind == "npu"]
    if npu:
        engines = sorted({s.engine for s in npu})
        losses.append(Loss("NPU engines", _names(npu), f"runs on NPU engine {', '.join(engines)}",
                           "instance_group KIND_MODEL: Triton has no NPU instance kind, so the backend places the "
                           "instances (a vendor's NPU backend, or your executor in the Python backend); nothing in "
                           "config.pbtxt reserves an NPU", True))
    for stage in stages:
        if stage.fallback is not None:
            losses.append(Loss("fallback", stage.name, f"capped failover {fallback_text(stage)}; requests the "
                               "engine cannot take (shape, precision) go there too",
                               f"only {stage.engine!r}; Triton sends every request of a model to that model's own "
                               "instances", True))
    breakers = [s for s in stages if s.breaker is not None]
    if breakers:
        losses.append(Loss("circuit breakers", _names(breakers), "a failing engine gets no requests for a while",
                           "none; Triton has no breaker, so requests keep reaching a failing model", True))
    retried = [s for s in stages if attempts(config, s) > 1]
    if retried:
        losses.append(Loss("retries", _names(retried), "a failed or timed-out attempt is tried again",
                           "one attempt; Triton runs each request once, so retry in the client", True))
    if config.routing is not None and config.routing.retry is not None:
        losses.append(Loss("retry budget", "service-wide", f"retries are at most "
                           f"{config.routing.retry.budget_ratio:.0%} of requests",
                           "none; there are no retries to budget", True))
    _common(config, losses, "first come, first served: each model's queue has no priority_levels",
            "none; split the canary share in front of Triton")
    losses.append(Loss("timeouts", _names(stages), "timeout_ms bounds queueing and execution together",
                       "default_queue_policy: a request still queued after timeout_ms is rejected "
                       "(timeout_action REJECT); Triton does not stop an execution that runs long", False))
    _shared_engines(config, losses, "each model has its own instances (count) and its own queue of max_queue",
                    fallbacks=False)
    _uneven(config, losses, "instances", fallbacks=False)
    _no_queue(config, losses, "max_queue_size", "Triton reads 0 as no limit", fallbacks=False)
    return losses


def ray_losses(config: PipelineConfig, resources: dict[str, str]) -> list[Loss]:
    """What a Ray Serve application cannot express of ``config``; ``resources`` names each
    non-GPU accelerator engine's Ray resource, ``""`` where Ray knows none for it."""
    losses: list[Loss] = []
    for stage in config.stages:
        routed = stage.input is not None and not stage.input.dynamic and stage.input.shape or stage.precision
        if stage.fallback is not None and routed:
            losses.append(Loss("routing by shape or precision", stage.name, f"requests whose shape or precision "
                               f"{stage.engine!r} cannot take go to {stage.fallback.engine!r}",
                               "overflow only; an HTTP request names no shape or precision", True))
    _common(config, losses, "first come, first served: Ray Serve's queues know no priority",
            "none; deploy the canary plan as its own application and split the traffic in front")
    for stage in config.stages:
        if stage.fallback is not None and stage.fallback.when is not None:
            losses.append(Loss("failover threshold", stage.name, f"move {fallback_text(stage)}",
                               "the ingress counts the requests it has sent to the stage beyond what its "
                               "replicas run at once, and moves past that count", False))
    for name, resource in resources.items():
        if not resource:
            losses.append(Loss("accelerator resource", name, f"{config.engines[name].kind} engine "
                               f"{config.engines[name].device or name}",
                               f"a custom Ray resource {name!r}: declare it where the device is "
                               f"(ray start --resources '{{\"{name}\": 1}}')", False))
    _shared_engines(config, losses, "each deployment has its own max_ongoing_requests and max_queued_requests; "
                    "the engine's devices are split between them (fractional num_gpus or resources)", fallbacks=True)
    _uneven(config, losses, "executions (one replica per device)", fallbacks=True)
    _no_queue(config, losses, "max_queued_requests", "Ray takes -1 for no limit and no 0", fallbacks=True)
    return losses


def vllm_losses(config: PipelineConfig) -> list[Loss]:
    """What the plan asks that vLLM's engine arguments do not carry."""
    llm = config.llm
    out = []
    for name, pool in llm.pools.items():
        engine = config.engines[name]
        if pool.replicas > 1:
            out.append(Loss("replicas", name, f"{pool.replicas} replicas", f"one script, started once per replica "
                            f"(./serve-{name}.sh 0 .. {pool.replicas - 1}); a load balancer in front spreads the "
                            "requests (the plan was sized for requests sent to the replicas in turn, round robin)",
                            False))
        if engine.device:
            out.append(Loss("device type", name, f"{engine.count} x {engine.device}", "not a vLLM flag: run the "
                            "scripts on machines with those devices", True))
        if engine.kind == "cpu":
            out.append(Loss("KV capacity", name, f"{pool.kv_tokens or 'unbounded'} tokens", "vLLM's CPU backend "
                            "sizes its cache in GiB (VLLM_CPU_KVCACHE_SPACE): set it to the tokens x your model's KV "
                            "bytes per token", True))
        elif engine.kind != "gpu" and pool.kv_tokens is not None:
            out.append(Loss("KV capacity", name, f"{pool.kv_tokens} tokens", "not a flag: --num-gpu-blocks-override "
                            "and --gpu-memory-utilization are written for GPU pools only; on a "
                            f"{engine.device or engine.kind} vLLM's backend (its TPU backend, or the vendor's plugin) "
                            "sizes the cache from the memory it finds: check the KV tokens it reports at start against "
                            "these", True))
    if any(p.role == "prefill" for p in llm.pools.values()):
        out.append(Loss("prefill/decode routing", "prefill, decode", "each request prefilled on the prefill pool, "
                        f"its KV cache handed over ({llm.kv_link_gbps or 0:g} Gbit/s link), decoded on the decode "
                        "pool", "the KV connector on both pools; the proxy that sends each request to a prefill "
                        "replica (max_tokens 1) and then to a decode replica is not a flag: use vLLM's disaggregated "
                        "serving proxy or your router", True))
    if config.slo is not None and (config.slo.ttft_p95_ms or config.slo.tpot_p95_ms):
        out.append(Loss("targets", "service-wide", f"TTFT p95 <= {config.slo.ttft_p95_ms:g} ms, TPOT p95 <= "
                        f"{config.slo.tpot_p95_ms:g} ms", "vLLM has no latency target: check them with loadprobe "
                        "verify on a recording of the engines", True))
    queued = [n for n, e in config.engines.items() if n in llm.pools]
    out.append(Loss("queue bound", ", ".join(queued), "new requests refused once max_queue wait",
                    "vLLM queues without bound: a front end must refuse", True))
    return out


def markdown(losses: list[Loss]) -> str:
    """The README's sections "Not carried over" and "Approximated", one bullet per loss."""
    out = []
    for title, dropped in (("Not carried over", True), ("Approximated", False)):
        found = [loss for loss in losses if loss.dropped is dropped]
        out.append(f"## {title}\n")
        if not found:
            out.append("Nothing in this plan.\n" if dropped else "Nothing else.\n")
            continue
        out.extend(f"- **{loss.feature}** ({loss.where}). Plan: {loss.plan}. Exported: {loss.instead}."
                   for loss in found)
        out.append("")
    return "\n".join(out)


def summary(losses: list[Loss]) -> str:
    """One line for the terminal: ``fallback (backbone), circuit breakers (backbone)``; "" when none."""
    return "; ".join(f"{loss.feature} ({loss.where})" for loss in losses if loss.dropped)
