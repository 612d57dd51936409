"""A plan as a Ray Serve application: ``serve_config.yaml`` and the module it imports.

    files = ray_files(config, paths, num_cpus=1.0)
    # {"serve_config.yaml": ..., "<service>_serve.py": ..., "README.md": ...}

Written without ray: the tests check the YAML with Ray Serve's own ``ServeDeploySchema`` and
deploy it. The mapping, for each stage on each engine it may run on (its own, its fallback's):

- the engine's ``count`` -> ``num_replicas`` (one replica per device), its ``max_concurrency``
  (or the stage's) over them -> ``max_ongoing_requests`` (times ``batch.size`` for a batched
  stage, whose batch is one execution), ``max_queue`` -> ``max_queued_requests``;
- GPU -> ``ray_actor_options.num_gpus``, NPU -> the accelerator's Ray resource (``NPU`` for
  Ascend, ``TPU`` for Google's), each device shared evenly by the deployments on the engine;
- ``batch`` -> ``@serve.batch(max_batch_size=size, batch_wait_timeout_s=max_wait_ms / 1000)``;
- ``timeout_ms``, retries and their budget, the capped fallback and breakers -> the ingress,
  which asks loadprobe's routing rules as the Router does (``rayserve_module``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import yaml

from .._version import __version__
from ..pipeline.config import PipelineConfig
from .losses import Loss, attempts, fallback_text, markdown, ray_losses
from .placement import Placement, placements
from .rayserve_module import module_text
from .resources import Fit, ray_fit, ray_num_cpus

__all__ = ["Deployment", "Ingress", "application", "ray_files"]

# Ray's resource name for each accelerator vendor it schedules besides NVIDIA GPUs.
RAY_RESOURCE = {"Huawei": "NPU", "Google": "TPU", "AWS": "neuron_cores", "Intel": "HPU"}


@dataclass(frozen=True)
class Deployment:
    name: str
    cls: str
    placement: Placement
    executor: str | None
    options: dict                            # @serve.deployment's keywords, as in serve_config.yaml
    batch: tuple[int, float, int] | None     # max_batch_size, batch_wait_timeout_s, max_concurrent_batches


@dataclass(frozen=True)
class Ingress:
    name: str
    cls: str
    app: str
    route_prefix: str
    options: dict


def _share(p: Placement) -> float:
    # The engine's devices, split evenly between the deployments on it; Ray counts in 1e-4.
    return math.floor(10_000 / p.sharing) / 10_000


def accelerator_resources(config: PipelineConfig) -> dict[str, str]:
    """The Ray resource of each NPU engine: by its catalog vendor, ``""`` where Ray knows none."""
    from ..catalog import load_catalog

    catalog = load_catalog()
    found = {}
    for name, engine in config.engines.items():
        if engine.kind == "npu":
            device = catalog.find(engine.device)
            found[name] = RAY_RESOURCE.get(device.vendor, "") if device is not None else ""
    return found


def _class_name(name: str, taken: set[str]) -> str:
    base = "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", name) if part) or "Stage"
    base = base if base[0].isalpha() else f"Stage{base}"
    cls, n = base, 2
    while cls in taken:
        cls, n = f"{base}{n}", n + 1
    taken.add(cls)
    return cls


def replicas(config: PipelineConfig) -> int:
    """The application's replicas: one per device of each placement, and the ingress."""
    return sum(p.devices for p in placements(config)) + 1


def cpus_each(config: PipelineConfig, num_cpus: float | None) -> float:
    """Each replica's ``num_cpus``: as given, else an equal share of the plan's cores (``resources``)."""
    return num_cpus if num_cpus is not None else ray_num_cpus(config, replicas(config))


def deployments(config: PipelineConfig, paths: dict[tuple[str, str], str], num_cpus: float) -> list[Deployment]:
    """One deployment per placement: ``STAGE`` on its own engine, ``STAGE@ENGINE`` on its fallback."""
    resources = accelerator_resources(config)
    # The generated module's own names: a stage called "plan" must not become a second PLAN.
    taken = {"Rejected", "StageTimeout", "StageFailed", "Request", "JSONResponse", "Response", "PipelineRules",
             "BackPressureError", "PLAN", "CAPACITY"}
    out = []
    for p in placements(config):
        name = p.stage.name if p.primary else f"{p.stage.name}@{p.engine_name}"
        actor: dict = {"num_cpus": num_cpus}
        if p.kind == "gpu":
            actor["num_gpus"] = _share(p)
        elif p.kind == "npu":
            actor["resources"] = {resources[p.engine_name] or p.engine_name: _share(p)}
        options = {"name": name, "num_replicas": p.devices, "max_ongoing_requests": p.per_device * p.batch_size,
                   "max_queued_requests": max(p.engine.max_queue, 1), "ray_actor_options": actor}
        batch = p.stage.batch
        out.append(Deployment(name, _class_name(name, taken), p, paths.get((p.stage.name, p.engine_name)), options,
                              (batch.size, batch.max_wait_ms / 1000, p.per_device) if batch else None))
    return out


def ingress(config: PipelineConfig, stages: list[Deployment], num_cpus: float) -> Ingress:
    app = config.service  # a name (pipeline.names): valid as a Ray application and route prefix
    names = {d.name for d in stages}
    name = "ingress"
    while name in names:
        name = f"{app}-{name}"
    # It holds a request for its whole way through: as many as the stages can run and queue together.
    held = sum(d.options["num_replicas"] * d.options["max_ongoing_requests"] + d.options["max_queued_requests"]
               for d in stages)
    options = {"name": name, "num_replicas": 1, "max_ongoing_requests": held,
               "ray_actor_options": {"num_cpus": num_cpus}}
    return Ingress(name, _class_name("pipeline", {d.cls for d in stages}), app, f"/{app}", options)


def module_name(config: PipelineConfig) -> str:
    """``vision-routed`` -> ``vision_routed_serve``: an importable module name."""
    base = re.sub(r"\W+", "_", config.service).strip("_").lower() or "pipeline"
    return f"{base if base[0].isalpha() else 'p_' + base}_serve"


def serve_config(config: PipelineConfig, stages: list[Deployment], entry: Ingress, module: str) -> str:
    """``serve_config.yaml``: the ``serve deploy`` / ``serve run`` schema, one application."""
    document = {
        "proxy_location": "EveryNode",
        # 127.0.0.1: a plan exported for a trial is not served to the network until someone says so.
        "http_options": {"host": "127.0.0.1", "port": 8000},
        "applications": [{
            "name": entry.app,
            "route_prefix": entry.route_prefix,
            "import_path": f"{module}:app",
            "deployments": [entry.options] + [d.options for d in stages],
        }],
    }
    head = (f"# Ray Serve config of plan {config.service!r}, written by `loadprobe export --to ray-serve` (loadprobe "
            f"{__version__}).\n# From this folder: serve run serve_config.yaml  (README.md). These options override "
            f"the decorators in {module}.py.\n")
    return head + yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def _resources(d: Deployment) -> str:
    actor = d.options["ray_actor_options"]
    parts = [f"num_cpus {actor['num_cpus']:g}"]
    if "num_gpus" in actor:
        parts.append(f"num_gpus {actor['num_gpus']:g}")
    parts += [f"{key} {value:g}" for key, value in actor.get("resources", {}).items()]
    return ", ".join(parts)


def _row(config: PipelineConfig, d: Deployment) -> str:
    p, o = d.placement, d.options
    batch = f"{d.batch[0]} within {d.batch[1] * 1000:g} ms" if d.batch else "-"
    rules = [f"{p.stage.timeout_ms:g} ms"]
    if p.primary:
        if attempts(config, p.stage) > 1:
            rules.append(f"{attempts(config, p.stage)} attempts")
        if p.stage.fallback:
            rules.append(f"fallback {fallback_text(p.stage)}")
        if p.stage.breaker:
            rules.append(f"breaker above {p.stage.breaker.error_rate_over:.0%} errors")
    cells = [f"`{d.name}`", f"{p.engine_name} ({p.kind})", str(o["num_replicas"]), f"{o['max_ongoing_requests']:,}",
             f"{o['max_queued_requests']:,}", _resources(d), batch, "; ".join(rules),
             f"`{d.executor}`" if d.executor else "**none given**"]
    return "| " + " | ".join(cells) + " |"


def readme(config: PipelineConfig, stages: list[Deployment], entry: Ingress, module: str, losses: list[Loss],
           fit: Fit) -> str:
    missing = [d.name for d in stages if d.executor is None]
    budget = config.routing.retry if config.routing is not None else None
    retries = f"within the retry budget ({budget.budget_ratio:.0%} of requests)" if budget else "(no retry budget)"
    return f'''# Ray Serve application for plan `{config.service}`

Written by `loadprobe export --to ray-serve` (loadprobe {__version__}): `serve_config.yaml` (Ray
Serve's `serve deploy` schema) and `{module}.py`, with one deployment per stage (and one per
fallback engine) and the ingress `{entry.name}`, which passes each request through the stages in the
plan's order. Regenerate from pipeline.yaml rather than edit the numbers by hand.

```bash
# from this folder; the second path is where your executors' modules are
PYTHONPATH="$PWD:$HOME/myservice" serve run serve_config.yaml
curl -d '{{"x": 1}}' http://127.0.0.1:8000{entry.route_prefix}
```

Ray imports `{module}` and the executors in its own worker processes, which see the
`PYTHONPATH` of the process that started Ray (`serve run` here, or `ray start` on a cluster,
then `serve deploy serve_config.yaml`): Serve's config takes no local folder as `working_dir`.
loadprobe must be installed there too (the ingress asks its routing rules). On a machine
without the plan's accelerators, declare them to try it: `ray start --head --num-gpus 1
--resources '{{"NPU": 1}}'` (Ray counts them; nothing runs on a device it lacks). The HTTP proxy
listens on 127.0.0.1:8000 (`http_options`); change `host` to serve others.

## Requests

`POST {entry.route_prefix}` with a JSON body: the body is the first stage's payload, and the
answer is the last stage's result as JSON (status 200). A stage that turns the request away
answers 503 (`reason`: `queue_full`, `breaker_open`, `failover_cap`), one past its `timeout_ms`
504, an executor that raises 500; each body names the `stage` and `engine`. From Python:
`serve.get_app_handle("{entry.app}").submit.remote(payload)`.

## The deployments

| deployment | engine | num_replicas | max_ongoing_requests | max_queued_requests | ray_actor_options | @serve.batch | ingress rules | executor |
|---|---|---|---|---|---|---|---|---|
{chr(10).join(_row(config, d) for d in stages)}

Each deployment calls its executor the way loadprobe's Router does: a batched stage gets a list
of payloads and returns a list of as many results, one unbatched a payload; `async def`
executors are awaited, plain functions run in a thread. Every executor's exception is a 500
naming its stage.{f" No executor was given for {', '.join(missing)}: those deployments fail to start, "
                 "saying so, until you export again with `--executor STAGE=MODULE:NAME`." if missing else ""}

The ingress applies the rules Ray Serve has no option for, with loadprobe's own policy objects
(the ones the Router and the simulator ask): each stage's `timeout_ms` around its call (queueing
included; a call past it is cancelled), its attempts {retries}, the capped
fallback (one hop: a moved request runs on the fallback engine or fails) and the breakers. Their
counts are kept per ingress replica: with the one replica written here they are service-wide,
as in the Router.

## Resources

What the replicas reserve, against the line-up the plan was sized on:

{chr(10).join(f"- {line}" for line in fit.asked + [f"**{w}**" for w in fit.warnings])}

''' + markdown(losses)


def application(config: PipelineConfig, paths: dict[tuple[str, str], str],
                num_cpus: float | None = None) -> tuple[list[Deployment], Ingress, Fit]:
    """The deployments, the ingress and how they fit the plan's line-up; ``num_cpus`` each replica's (default:
    an equal share of the plan's cores, at most 1)."""
    each = cpus_each(config, num_cpus)
    stages = deployments(config, paths, each)
    entry = ingress(config, stages, each)
    return stages, entry, ray_fit(config, stages, entry.options, given=num_cpus is not None)


def ray_files(config: PipelineConfig, paths: dict[tuple[str, str], str], *,
              num_cpus: float | None = None) -> dict[str, str]:
    """Every file of the application, by path relative to the export folder."""
    stages, entry, fit = application(config, paths, num_cpus)
    module = module_name(config)
    return {
        "serve_config.yaml": serve_config(config, stages, entry, module),
        f"{module}.py": module_text(config, stages, entry),
        "README.md": readme(config, stages, entry, module, ray_losses(config, accelerator_resources(config)), fit),
    }
