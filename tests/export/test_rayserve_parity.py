"""The exported Ray Serve ingress and loadprobe's Router decide alike: the same generated plans and the
same fault sequences give the same outcome for every request -- which engine served each attempt,
which request was rejected and why, which failed -- because both ask one policy core
(``loadprobe.route.policy``). The ingress class runs as written by ``loadprobe export`` (its rules, no
cluster), its deployment handles standing in for Ray's; the Router runs the same executors itself.

Requests go one at a time, so the decisions that depend on the queue (``queue_len_over``, a full
engine) do not arise here; they are held to the core by tests/route/test_route_policy.py, and the
Ray ingress's full deployment by tests/export/test_rayserve.py.
"""

from __future__ import annotations

import asyncio
import importlib.util
import random
import warnings

import pytest

from loadprobe import pipeline
from loadprobe.export import export
from loadprobe.route import Rejected, Router

from .test_rayserve import _Handle

pytestmark = pytest.mark.timeout(300)

PLANS, REQUESTS = 24, 40
ENGINES = ("npu0", "gpu0", "cpu")


def _plan(rng: random.Random) -> str:
    """A pipeline of one to three stages, each with or without a fallback, a breaker and retries."""
    lines = ["version: 1", "service: parity", "routing:", "  window_s: 600"]
    if rng.random() < 0.6:
        lines.append(f"  retry: {{budget_ratio: {rng.choice([0.1, 0.5, 1.0])}, max_attempts: {rng.randint(1, 3)}}}")
    lines.append("engines:")
    lines += [f"  {name}: {{kind: {name.rstrip('0')}, max_concurrency: 1, max_queue: 8}}" for name in ENGINES]
    lines.append("stages:")
    for k in range(rng.randint(1, 3)):
        engine, fallback = rng.sample(ENGINES, 2)
        lines += [f"  - name: s{k}", f"    engine: {engine}", "    timeout_ms: 60000"]
        if rng.random() < 0.5:
            lines.append(f"    retry: {{max_attempts: {rng.randint(1, 3)}}}")
        if rng.random() < 0.7:
            lines.append(f"    fallback: {{engine: {fallback}, max_ratio: {rng.choice([0.2, 0.5, 1.0])}}}")
        if rng.random() < 0.7:
            open_s = rng.choice(["600", "0.000001"])  # stays open; or half-open at once, one trial at a time
            lines.append(f"    breaker: {{error_rate_over: {rng.choice([0.3, 0.5])}, window_s: 600, "
                         f"min_requests: {rng.randint(2, 5)}, open_s: {open_s}}}")
    return "\n".join(lines) + "\n"


def _faults(rng: random.Random, config) -> dict:
    """Per (stage, engine), whether each of its successive calls fails: runs of errors, as a device that breaks."""
    faults = {}
    for stage in config.stages:
        for engine in stage.runs_on:
            rate = rng.choice([0.0, 0.3, 0.8])
            faults[stage.name, engine] = [rng.random() < rate for _ in range(4 * REQUESTS)]
    return faults


def _executor(stage: str, engine: str, fails: list[bool]):
    calls = iter(fails)

    def run(payload):
        if next(calls):
            raise ValueError(f"{stage} on {engine} failed")
        return [*payload, f"{stage}@{engine}"]

    return run


def _router_outcomes(config, faults) -> list:
    executors = {s.name: {e: _executor(s.name, e, faults[s.name, e]) for e in s.runs_on} for s in config.stages}

    async def run():
        out = []
        async with Router(config, executors) as router:
            for _ in range(REQUESTS):
                try:
                    out.append(("ok", await router.submit([])))
                except Rejected as exc:
                    out.append(("rejected", exc.reason, exc.stage))
                except ValueError as exc:
                    out.append(("failed", str(exc).split(":")[0].split(" failed")[0]))
        return out

    return asyncio.run(run())


def _ingress_outcomes(config, faults, folder) -> list:
    done = export(config, "ray-serve", folder, check_imports=False)
    path = next(p for p in done.files if p.suffix == ".py")
    spec = importlib.util.spec_from_file_location(f"parity_{folder.name}", path)
    module = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        spec.loader.exec_module(module)
    handles = {s.name: {e: _Handle(_executor(s.name, e, faults[s.name, e])) for e in s.runs_on}
               for s in config.stages}
    ingress = module.Pipeline.func_or_class(handles)

    async def run():
        out = []
        for _ in range(REQUESTS):
            try:
                out.append(("ok", await ingress.submit([])))
            except module.Rejected as exc:
                out.append(("rejected", exc.reason, exc.stage))
            except module.StageFailed as exc:
                out.append(("failed", exc.message.split(" failed")[0]))
        return out

    return asyncio.run(run())


def test_the_exported_ingress_and_the_router_decide_alike_on_generated_plans_and_faults(tmp_path):
    pytest.importorskip("ray.serve")
    decided = set()
    for seed in range(PLANS):
        rng = random.Random(seed)
        text = _plan(rng)
        config = pipeline.loads(text)
        faults = _faults(rng, config)
        router = _router_outcomes(config, faults)
        ingress = _ingress_outcomes(config, faults, tmp_path / f"plan{seed}")
        assert ingress == router, f"plan {seed}:\n{text}"
        decided |= {outcome[0] if outcome[0] != "rejected" else outcome[1] for outcome in router}
        decided |= {"moved" for outcome in router if outcome[0] == "ok" and any(
            step.split("@")[1] != stage.engine for step, stage in zip(outcome[1], config.stages))}
    # the generated cases reach every decision the sequential path has
    assert {"ok", "failed", "breaker_open", "moved"} <= decided
