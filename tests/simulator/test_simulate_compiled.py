"""The compiled event loop (simulator/compiled/) against the Python one (events.py, the reference).

The Python loop asks the policy core (loadprobe.route.policy) for every decision, as the Router
does; the compiled loop is a numba port of both. What holds the port to the rules is this file:
the two must give the very same SimulationResult -- every count, latency percentile, timeline
sample and float -- for any plan, so the main tests generate plans, 400 from a seeded generator
and more from hypothesis (which shrinks a failing plan to a small one), each exercising a mix of
the rules (shared engines, batching windows, timeouts, fallbacks with caps and queue_len_over,
breakers, retries within a budget, priorities with shedding, executor errors, sync and async
executors, time outside the stages, queues small enough to reject and evict, arrivals that tie,
a canary, which neither loop models), and compare ``to_dict()`` whole. numba is in the ``test``
extra: without it this file fails, it does not skip. Its first compile is cached on disk.
``LOADPROBE_PARITY_EXAMPLES=2000`` draws that many fresh hypothesis plans instead of the fixed set.
"""

from __future__ import annotations

import os
import random
from dataclasses import replace

import numba  # noqa: F401 - in the test extra: a missing numba fails this file, never skips it
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadprobe import load
from loadprobe._errors import LoadprobeError
from loadprobe.pipeline.config import (
    BatchConfig,
    BreakerConfig,
    CanaryConfig,
    EngineConfig,
    FallbackConfig,
    FallbackWhen,
    PipelineConfig,
    RetryBudgetConfig,
    RetryConfig,
    RoutingConfig,
    ShedConfig,
    StageConfig,
)
from loadprobe.simulator import constant, exponential, lognormal, result, simulate
from loadprobe.simulator.recorded import RecordedTimes

PLANS = 400
EXPLORE = int(os.environ.get("LOADPROBE_PARITY_EXAMPLES", "0"))


def sampler_for(pick: random.Random, scale_ms: float):
    """A service-time sampler of one of the kinds users give: buffered lognormal, constant, Python, recorded."""
    kind = pick.choice(["lognormal", "constant", "exponential", "per-batch", "recorded"])
    if kind == "lognormal":
        return lognormal(scale_ms, scale_ms * pick.uniform(1.2, 4))
    if kind == "constant":  # exact ties between completions and deadlines
        return constant(round(scale_ms))
    if kind == "exponential":
        return exponential(scale_ms)
    if kind == "per-batch":
        fixed = scale_ms / 1000 * 0.3
        return lambda batch, rng: fixed + scale_ms / 1000 * 0.7 * batch * rng.random()
    times = {b: np.asarray([pick.uniform(0.3, 2) * scale_ms / 1000 * b for _ in range(7)]) for b in (1, 3)}
    return RecordedTimes(times, batched=pick.random() < 0.5, scale=pick.uniform(0.5, 2))


def random_case(seed: int) -> dict:
    """A plan, its arrivals and simulate()'s other arguments, all drawn from ``seed``."""
    return case_from(random.Random(seed), seed)


def case_from(pick: random.Random, name: int, times: random.Random | None = None) -> dict:
    """A plan and simulate()'s other arguments drawn from ``pick``; arrival gaps from ``times`` (default: ``pick``)."""
    names = [f"e{k}" for k in range(pick.randint(1, 3))]
    engines = {name: EngineConfig(kind=pick.choice(["cpu", "gpu"]), max_concurrency=pick.randint(1, 3),
                                  max_queue=pick.choice([0, 1, 2, 3, 5, 8, 30])) for name in names}
    stages, samplers = [], {}
    for k in range(pick.randint(1, 4)):
        engine = pick.choice(names)
        others = [n for n in names if n != engine]
        fallback = breaker = batch = retry = None
        if others and pick.random() < 0.5:
            when = FallbackWhen(queue_len_over=pick.randint(0, 3)) if pick.random() < 0.6 else None
            fallback = FallbackConfig(engine=pick.choice(others), when=when, max_ratio=pick.choice([0.0, 0.1, 0.3, 1.0]),
                                      otherwise=pick.choice(["reject", "queue"]))
        if pick.random() < 0.35:
            breaker = BreakerConfig(error_rate_over=pick.choice([0.1, 0.3, 0.5]), window_s=pick.choice([0.05, 0.5, 5]),
                                    min_requests=pick.randint(1, 6), open_s=pick.choice([0.01, 0.05, 0.3]))
        if pick.random() < 0.4:
            batch = BatchConfig(size=pick.randint(1, 6), max_wait_ms=pick.choice([0, 1, 3, 10]))
        if pick.random() < 0.3:
            retry = RetryConfig(max_attempts=pick.randint(1, 3))
        scale_ms = pick.uniform(0.5, 6)
        stage = StageConfig(name=f"s{k}", engine=engine, timeout_ms=pick.choice([2, 5, 10, 20, 40, 1000]),
                            max_concurrency=pick.choice([None, None, 1, 2]), batch=batch, retry=retry,
                            fallback=fallback, breaker=breaker)
        stages.append(stage)
        for where in stage.runs_on:
            samplers[(stage.name, where)] = sampler_for(pick, scale_ms)
    routing = None
    if pick.random() < 0.6:
        routing = RoutingConfig(retry=RetryBudgetConfig(budget_ratio=pick.choice([0.05, 0.2, 1.0]),
                                                        max_attempts=pick.randint(1, 3)) if pick.random() < 0.6 else None,
                                shed=ShedConfig(by=pick.choice(["priority", "none"])) if pick.random() < 0.6 else None,
                                window_s=pick.choice([None, 0.1, 1.0]))
    n = pick.choice([1, 5, 60, 200, 500])
    rate = pick.uniform(50, 900)
    arrivals = np.cumsum([(times or pick).expovariate(rate) for _ in range(n)]) + pick.choice([0.0, 0.0, -0.7, 3.0])
    if pick.random() < 0.5:  # a coarse clock: many arrivals at the same instant
        arrivals = np.round(arrivals, 3)
    if pick.random() < 0.2:
        arrivals = arrivals[::-1].copy()  # simulate() sorts them, keeping ties in order
    options = {"seed": pick.randint(0, 99), "executors": pick.choice(["async", "sync"])}
    if pick.random() < 0.5:
        options["priorities"] = [pick.randint(0, 2) for _ in range(n)]
    if pick.random() < 0.4:
        options["error_rates"] = {s.name: pick.choice([0.0, 0.05, 0.3]) for s in stages}
    if pick.random() < 0.3:
        options["outside"] = lognormal(1.0, 3.0) if pick.random() < 0.5 else constant(2.0)
    if pick.random() < 0.3:
        options["window_s"] = pick.choice([0.02, 0.3, 2.0])
    if routing is not None and pick.random() < 0.3:  # drawn last: the plans drawn before it are unchanged
        routing = replace(routing, canary=CanaryConfig(config="canary.yaml", weight=pick.choice([0.05, 0.5, 1.0])))
    config = PipelineConfig(service=f"case-{name}", engines=engines, stages=tuple(stages), routing=routing)
    return {"config": config, "arrivals_s": arrivals, "service_times": samplers, **options}


def both(case: dict) -> tuple[dict, dict]:
    return (simulate(**case, loop="python").to_dict(), simulate(**case, loop="compiled").to_dict())


def assert_same(case: dict, label: str) -> dict:
    """Both loops' results for ``case``, which must be equal; a canary must change neither (not modelled)."""
    python, compiled = both(case)
    assert compiled == python, f"{label}: {case['config']}"
    routing = case["config"].routing
    if routing is not None and routing.canary is not None:
        without = {**case, "config": replace(case["config"], routing=replace(routing, canary=None))}
        assert simulate(**without, loop="python").to_dict() == python, f"{label}: the canary changed the result"
    return python


def test_the_compiled_loop_gives_the_python_loops_result_on_generated_plans():
    seen = {"rejected": 0, "timeout": 0, "error": 0, "shed": 0, "failover_cap": 0, "breaker_open": 0,
            "failovers": 0, "retries": 0, "breaker_opened": 0, "batched": 0, "shared": 0, "sync": 0, "canary": 0}
    for seed in range(PLANS):
        case = random_case(seed)
        python = assert_same(case, f"plan {seed}")
        for key in ("rejected", "timeout", "error"):
            seen[key] += python["outcomes"][key] > 0
        for key in ("shed", "failover_cap", "breaker_open"):
            seen[key] += key in python["rejects"]
        for key in ("failovers", "retries", "breaker_opened"):
            seen[key] += any(s[key] for s in python["stages"].values())
        seen["batched"] += any((e["mean_batch"] or 0) > 1 for e in python["engines"].values())
        lanes = [engine for stage in case["config"].stages for engine in stage.runs_on]
        seen["shared"] += len(lanes) > len(set(lanes)) and python["outcomes"]["ok"] > 0
        seen["sync"] += case["executors"] == "sync" and python["timeouts"] > 0
        seen["canary"] += case["config"].routing is not None and case["config"].routing.canary is not None
    # the generator does reach every rule, in several plans each (a comparison of idle plans proves little)
    assert min(seen.values()) >= 5, seen


@settings(max_examples=EXPLORE or 150, derandomize=not EXPLORE, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(pick=st.randoms(use_true_random=False), gaps=st.integers(0, 2**32 - 1))
def test_the_compiled_loop_gives_the_python_loops_result_on_hypothesis_plans(pick, gaps):
    """Plans drawn by hypothesis (extreme values included); a failure shrinks to a small plan."""
    assert_same(case_from(pick, 0, times=random.Random(gaps)), "hypothesis plan")


class _Spy:
    """The compiled loop for simulate(), keeping what each run returned."""

    def __init__(self, module) -> None:
        self.module, self.runs = module, []

    def run(self, *args, **kwargs):
        self.runs.append(self.module.run(*args, **kwargs))
        return self.runs[-1]


def test_long_runs_refill_draws_and_grow_the_pool_identically(monkeypatch):
    """Tens of thousands of arrivals: the loop stops many times for more draws, and a burst
    queues more attempts than the first pool holds, so it grows; the result stays the Python one's."""
    from loadprobe.simulator import compiled

    config = PipelineConfig(
        service="long", routing=RoutingConfig(retry=RetryBudgetConfig(budget_ratio=0.2, max_attempts=2)),
        engines={"cpu": EngineConfig(kind="cpu", max_concurrency=2, max_queue=4000),
                 "npu": EngineConfig(kind="npu", max_concurrency=1, max_queue=64)},
        stages=(StageConfig(name="decode", engine="cpu", timeout_ms=3000),
                StageConfig(name="model", engine="npu", timeout_ms=80, batch=BatchConfig(size=8, max_wait_ms=4),
                            fallback=FallbackConfig(engine="cpu", when=FallbackWhen(queue_len_over=20),
                                                    max_ratio=0.2))))
    burst = 20 + np.sort(load.poisson(3000, duration=2, seed=5))
    case = {"config": config, "arrivals_s": np.concatenate([load.poisson(500, duration=20, seed=4), burst]),
            "seed": 3, "error_rates": {"model": 0.01},
            "service_times": {"decode": lognormal(2.5, 6), "model": lognormal(6, 12)}}
    python = simulate(**case, loop="python").to_dict()
    spy = _Spy(compiled)
    monkeypatch.setattr(result, "_compiled_loop", lambda loop, arrivals: spy)
    assert simulate(**case, loop="compiled").to_dict() == python
    assert spy.runs[0].refills >= 5 and spy.runs[0].growths >= 1
    assert python["engines"]["cpu"]["queue_max"] > 1024  # more queued than the first pool of 1024 attempts


def test_auto_picks_the_compiled_loop_for_long_runs_and_once_it_is_loaded(monkeypatch):
    from loadprobe.simulator import compiled, events

    used = []
    compiled_run, python_run = compiled.run, events.Simulation.run
    monkeypatch.setattr(compiled, "run", lambda *a, **k: used.append("compiled") or compiled_run(*a, **k))
    monkeypatch.setattr(events.Simulation, "run", lambda self: used.append("python") or python_run(self))
    monkeypatch.setattr(result, "_COMPILED", {})  # as in a fresh process: not loaded yet
    config = PipelineConfig(service="auto", engines={"cpu": EngineConfig(kind="cpu", max_concurrency=1, max_queue=10)},
                            stages=(StageConfig(name="work", engine="cpu", timeout_ms=100),))
    times = {"work": constant(1)}
    short = load.constant(100, requests=result.COMPILED_FROM // 4)
    for _ in range(5):  # short runs (recommend's) never pay for loading it, however many
        simulate(config, short, times)
    simulate(config, load.constant(1000, requests=result.COMPILED_FROM), times)  # a long run does
    simulate(config, short, times)  # and once it is loaded, short runs use it too
    simulate(config, short, times, loop="python")
    assert used == ["python"] * 5 + ["compiled", "compiled", "python"]


def test_the_compiled_code_is_cached_under_a_stamp_of_all_its_modules(tmp_path):
    """numba stamps a cached function with its own file only; the loop spans the package's modules,
    so every one of them is cached under a digest of them all: an edit anywhere recompiles everything."""
    import shutil

    from loadprobe.simulator.compiled import cache, layout, loop

    for function in (loop.run_events, layout.make_state):
        locator = function._cache._impl.locator
        assert locator.get_source_stamp()[1] == cache.package_digest()
        assert function.stats.cache_path == locator.get_cache_path()
    copy = tmp_path / "compiled"
    shutil.copytree(cache.HERE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = cache.package_digest(copy)
    assert before == cache.package_digest()
    heap = copy / "heap.py"
    heap.write_text(heap.read_text() + "\n# an edit in one module\n")
    assert cache.package_digest(copy) != before


def test_compiled_without_numba_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(result._COMPILED, "module", None)
    monkeypatch.setitem(result._COMPILED, "error", "No module named 'numba'")
    config = PipelineConfig(service="x", engines={"cpu": EngineConfig(kind="cpu", max_concurrency=1, max_queue=1)},
                            stages=(StageConfig(name="work", engine="cpu", timeout_ms=10),))
    with pytest.raises(LoadprobeError, match=r"pip install 'loadprobe\[fast\]'"):
        simulate(config, [0.0], {"work": constant(1)}, loop="compiled")
    # "auto" runs the Python loop then, whatever the size
    assert simulate(config, [0.0] * result.COMPILED_FROM, {"work": constant(1)}).outcomes["ok"] == 2
    with pytest.raises(LoadprobeError, match="loop must be one of"):
        simulate(config, [0.0], {"work": constant(1)}, loop="fast")
