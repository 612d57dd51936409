"""An LLM plan (pipeline.yaml with ``llm:``) replayed at given arrivals: its pools of engine replicas, iteration
by iteration.

Requests go to a colocated pool's replicas in turn (round robin, as a load balancer in front of
them does); in a prefill/decode plan each is prefilled on a prefill replica, its KV cache crosses
the link (``llm.kv_link_gbps``, the model's KV bytes per token), and it decodes on a decode
replica, in turn too. Each pool runs its own step model (``step_model``) and settings, its steps
scaled by the calibration's ``service_time_scale`` for its stage; the calibration's ``handoff_ms``
(work before the first token that no iteration holds: the HTTP front end, tokenising) is added to
every request's first and last token, as is the pool's own ``front_end_ms`` (the same work, as the
recording's check measured it when the plan was made).

Usage::

    replayed = replay_plan(config, workload, seed=0)
    replayed.first_ns, replayed.last_ns, replayed.itl_ns
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .engine import EngineSettings, Workload, run_engine
from .roofline import ModelShape
from .steps import StepModel

STAGE = {"colocated": "generate", "prefill": "prefill", "decode": "decode"}  # a pool's stage in pipeline.yaml


@dataclass
class Replayed:
    first_ns: np.ndarray  # per request, ns from the start (-1: never)
    last_ns: np.ndarray
    admitted_ns: np.ndarray
    itl_ns: np.ndarray
    preemptions: int
    refused: int


def pool_engine(config, name: str) -> tuple[StepModel, EngineSettings]:
    """Pool ``name``'s step model (with the calibration's scale for its stage) and engine settings."""
    pool = config.llm.pools[name]
    steps = StepModel.from_dict(dict(pool.step_model))
    stage = STAGE[pool.role]
    if config.calibration is not None:
        steps.scale *= config.calibration.scale(stage)
    settings = EngineSettings(max_running=pool.max_running, token_budget=pool.token_budget,
                              chunked_prefill=pool.chunked_prefill, kv_tokens=pool.kv_tokens,
                              kv_reserve="paged", why="the plan's")
    return steps, settings


def kv_bytes_per_token(config, name: str) -> float:
    """The KV bytes of one token in pool ``name``: the model's (``roofline.ModelShape``) at the pool's precision."""
    model, pool = config.llm.model, config.llm.pools[name]
    if model is None:
        return 0.0
    return ModelShape.from_dict(vars(model)).kv_bytes_per_token(pool.precision or "bf16")


def handoff_ns(prompt_tokens, kv_bytes_per_token: float, link_bytes_per_s: float) -> np.ndarray:
    """The KV cache of each request's ``prompt_tokens`` sent from its prefill pool to its decode pool over the link
    (ns; none without a link): the one rule for the planner's sizing and the plan's replay."""
    tokens = np.asarray(prompt_tokens, dtype=float)
    return tokens * kv_bytes_per_token / link_bytes_per_s * 1e9 if link_bytes_per_s > 0 else np.zeros_like(tokens)


def replay_plan(config, workload: Workload, seed: int = 0) -> Replayed:
    """``workload`` (arrivals in order, lengths) through ``config``'s pools."""
    pools = config.llm.pools
    by_role = {pool.role: name for name, pool in pools.items()}
    n = len(workload)
    first, last, admitted = (np.full(n, -1, dtype=np.int64) for _ in range(3))
    itl, preemptions, refused = [], 0, 0
    front = next((p.front_end_ms for p in pools.values() if p.role != "decode" and p.front_end_ms), 0.0)
    calibrated = config.calibration.handoff_ms if config.calibration is not None else 0.0
    offset = int(round((front + calibrated) * 1e6))

    def run(name: str, part: Workload, who: np.ndarray):
        nonlocal preemptions, refused
        steps, settings = pool_engine(config, name)
        settings.check_holds(part.tokens_in, part.tokens_out, f"llm.pools.{name}.kv_tokens")
        replicas = pools[name].replicas
        for k in range(replicas):
            mine = who[k::replicas]
            sub = Workload(part.arrival_ns[mine], part.tokens_in[mine], part.tokens_out[mine],
                           None if part.first_out_ns is None else part.first_out_ns[mine])
            served = run_engine(sub, steps, settings, seed + k)
            yield mine, served
            itl.append(served.itl_ns)
            preemptions += served.preemptions
            refused += served.refused

    if "colocated" in by_role:
        for mine, served in run(by_role["colocated"], workload, np.arange(n)):
            first[mine], last[mine], admitted[mine] = served.first_ns, served.last_ns, served.admitted_ns
    else:
        prefill_only = Workload(workload.arrival_ns, workload.tokens_in, np.ones_like(workload.tokens_out))
        for mine, served in run(by_role["prefill"], prefill_only, np.arange(n)):
            first[mine], admitted[mine] = served.first_ns, served.admitted_ns
        ok = first >= 0
        handoff = handoff_ns(workload.tokens_in, kv_bytes_per_token(config, by_role["prefill"]),
                             (config.llm.kv_link_gbps or 0.0) * 1e9 / 8)
        arrive = np.where(ok, first + np.round(handoff).astype(np.int64), -1)
        order = np.flatnonzero(ok)[np.argsort(arrive[ok], kind="stable")]
        decode = Workload(arrive, workload.tokens_in, workload.tokens_out, first_out_ns=first)
        for mine, served in run(by_role["decode"], decode, order):
            last[mine] = served.last_ns
        last[~ok] = -1
    ran = first >= 0
    first[ran] += offset
    last[ran & (last >= 0)] += offset
    return Replayed(first, last, admitted, np.concatenate(itl) if itl else np.zeros(0, dtype=np.int64),
                    preemptions, refused)
