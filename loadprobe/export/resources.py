"""What an export asks of the plan's line-up -- CPUs, GPUs, accelerators -- against what the line-up has.

A plan is sized on a line-up: its ``cpu`` engines' ``cores`` x ``count`` hosts, each accelerator
engine's ``count`` devices. An exported application must fit there, or part of it never starts
(Ray Serve: a replica "has taken more than 30s to be scheduled")::

    host_cores(config)                        # (2, "cpu: 2 cores"), or None where the plan does not say
    ray_num_cpus(config, replicas=4)          # 0.5: each replica's equal share of those cores, at most 1
    fit = ray_fit(config, options, given=False)   # Fit: what the deployments ask, lines for the README,
    fit.asked, fit.warnings                       # and what will not schedule, for the terminal too
    fit = triton_fit(config)

Ray counts resources in units of 1e-4, so shares are rounded down to them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..pipeline.config import PipelineConfig
from .placement import placements

__all__ = ["Fit", "host_cores", "ray_fit", "ray_num_cpus", "triton_fit"]

RAY_UNIT = 10_000  # Ray's resource granularity: 1e-4 of a CPU or a GPU


@dataclass(frozen=True)
class Fit:
    asked: list[str]                                     # what the files request, against what the plan has
    warnings: list[str] = field(default_factory=list)    # what will not schedule on the plan's line-up


def host_cores(config: PipelineConfig) -> tuple[int, str] | None:
    """The cores of the plan's CPU engines together, and how: ``(4, "cpu: 2 cores x 2 hosts")``; None where
    a CPU engine does not give its ``cores`` (a plan written by hand, or before loadprobe recorded them)."""
    cpus = [(name, e) for name, e in config.engines.items() if e.kind == "cpu"]
    if not cpus or any(e.cores is None for _, e in cpus):
        return None
    how = ", ".join(f"{name}: {e.cores:,} cores" + (f" x {e.count:,} hosts" if e.count > 1 else "") for name, e in cpus)
    return sum(e.cores * e.count for _, e in cpus), how


def ray_num_cpus(config: PipelineConfig, replicas: int) -> float:
    """Each replica's ``num_cpus`` when none is given: an equal share of the plan's cores, at most 1 (1 where the
    plan does not give its cores). The ingress and the accelerator stages mostly wait, but each is a Ray actor
    that reserves something; equal shares keep the arithmetic one line a reader can check."""
    found = host_cores(config)
    if found is None:
        return 1.0
    return max(1, min(RAY_UNIT, math.floor(found[0] * RAY_UNIT / replicas))) / RAY_UNIT


def ray_fit(config: PipelineConfig, stages: list, ingress: dict, *, given: bool) -> Fit:
    """The stages' deployments (``rayserve.Deployment``: ``.options``, ``.placement``) and the ``ingress``'s
    options, as serve_config.yaml gives them, against the plan's line-up; ``given``: their ``num_cpus`` came
    from ``--num-cpus``, not from the plan's cores."""
    asked, warnings = [], []
    deployments = [ingress] + [d.options for d in stages]
    replicas = sum(d["num_replicas"] for d in deployments)
    cpus = sum(d["num_replicas"] * d["ray_actor_options"]["num_cpus"] for d in deployments)
    each = sorted({d["ray_actor_options"]["num_cpus"] for d in deployments})
    per = f"num_cpus {each[0]:g}" if len(each) == 1 else f"num_cpus {each[0]:g} to {each[-1]:g}"
    cores = host_cores(config)
    what = (f"the ingress and {len(stages):,} deployment{'s' * (len(stages) != 1)}, {replicas:,} replicas x {per} = "
            f"{_num(cpus)} CPUs")
    if cores is None:
        asked.append(f"CPU: {what}; the plan does not give its host's cores (a cpu engine's `cores`, which "
                     "`loadprobe recommend` writes), so 1 each: the Ray cluster needs that many CPUs")
    else:
        source = "--num-cpus" if given else "an equal share of the plan's cores, at most 1 each"
        asked.append(f"CPU: {what} ({source}) of the plan's {cores[0]:,} cores ({cores[1]})")
        if cpus > cores[0] + 1e-9:
            fits = math.floor(cores[0] * RAY_UNIT / replicas) / RAY_UNIT
            fix = (f"leave --num-cpus out to have them sized to fit, or give at most {fits:g}" if given and fits
                   else "the plan has more replicas than Ray can split its cores between")
            warnings.append(f"ray-serve: {replicas:,} replicas ask for {_num(cpus)} CPUs ({per} each); the plan's host "
                            f"has {cores[0]:,} cores ({cores[1]}): Ray cannot schedule them all (a replica 'has "
                            f"taken more than 30s to be scheduled'); {fix}")
    for name, engine in config.engines.items():
        if engine.kind == "cpu":
            continue
        mine = [d.options for d in stages if d.placement.engine_name == name]
        if not mine:
            continue
        actors = [d["ray_actor_options"] for d in mine]
        if engine.kind == "gpu":
            unit, shares = "GPU", [a.get("num_gpus", 0) for a in actors]
        else:  # an NPU: the accelerator's Ray resource (rayserve.accelerator_resources)
            key = next(iter(actors[0].get("resources", {})), name)
            unit, shares = repr(key), [a.get("resources", {}).get(key, 0) for a in actors]
        amount = sum(d["num_replicas"] * share for d, share in zip(mine, shares))
        asked.append(f"{name} ({engine.kind}{', ' + engine.device if engine.device else ''}): {len(mine):,} "
                     f"deployment{'s ask' if len(mine) > 1 else ' asks'} for {_num(amount)} {unit} of its "
                     f"{engine.count:,}")
        if amount > engine.count + 1e-9:
            warnings.append(f"ray-serve: the deployments on {name} ask for {_num(amount)} {unit} and the plan gives it "
                            f"{engine.count:,}: Ray cannot schedule them all")
    return Fit(asked, warnings)


def triton_fit(config: PipelineConfig) -> Fit:
    """The models' ``instance_group``s against the plan's line-up: GPUs by index, CPU instances, NPU models."""
    asked, warnings = [], []
    own = [p for p in placements(config) if p.primary]
    gpus = sum(e.count for e in config.engines.values() if e.kind == "gpu")
    on_gpu = [p for p in own if p.kind == "gpu"]
    if on_gpu:
        used = sorted({i for p in on_gpu for i in p.device_ids})
        visible = "GPU 0" if gpus == 1 else f"GPUs 0 to {gpus - 1:,}"
        asked.append(f"GPU: {', '.join(f'{p.stage.name} {p.per_device:,} instances per GPU' for p in on_gpu)}, on "
                     f"GPU{'s' * (len(used) > 1)} {_ids(used)} of the plan's {gpus:,} ({visible} must be visible to "
                     "tritonserver)")
        if used[-1] >= gpus:
            warnings.append(f"triton: instance_group names GPU {used[-1]} and the plan has {gpus:,} GPUs: Triton "
                            "will not load those models")
    on_cpu = [p for p in own if p.kind == "cpu"]
    if on_cpu:
        instances = sum(p.slots for p in on_cpu)
        cores = host_cores(config)
        asked.append(f"CPU: {', '.join(f'{p.stage.name} {p.slots:,}' for p in on_cpu)} KIND_CPU instances, "
                     f"{instances:,} in all, on "
                     + (f"the plan's {cores[0]:,} cores ({cores[1]})" if cores else "the host's cores (the plan does "
                        "not give them)")
                     + ": Triton reserves no cores, so they start whatever the count, and share them")
    on_npu = [p for p in own if p.kind == "npu"]
    if on_npu:
        asked.append(f"NPU: {', '.join(p.stage.name for p in on_npu)} as KIND_MODEL: the backend places them; "
                     "nothing in config.pbtxt reserves an NPU")
    return Fit(asked, warnings)


def _num(x: float) -> str:
    return f"{x:.4f}".rstrip("0").rstrip(".")


def _ids(ids: list[int]) -> str:
    return f"{ids[0]} to {ids[-1]}" if len(ids) > 2 and ids == list(range(ids[0], ids[-1] + 1)) else \
        ", ".join(map(str, ids))
