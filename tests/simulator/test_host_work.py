"""pipeline.yaml's ``host:`` section: the service's own work, run by the simulator on the CPU engine it names."""

from __future__ import annotations

import pytest

from loadprobe import load, pipeline
from loadprobe.estimate.distribution import Distribution
from loadprobe.simulator import simulate

PLAN = """
version: 1
service: svc
engines:
  cpu: {kind: cpu, max_concurrency: 1, max_queue: 100000}
  gpu0: {kind: gpu, device: nvidia-l4, max_concurrency: 1, max_queue: 100000}
stages:
  - {name: model, engine: gpu0, timeout_ms: 100000, service_time_ms: {p50: 1.0, p95: 1.0, source: user}}
"""
HOST = """
host:
  engine: ENGINE
  work_ms: {p50: 2.0, p95: 2.0, mean: 2.0, cdf: [[2.0, 0.0], [2.0, 1.0]], source: measured}
  recorded: request
"""


@pytest.mark.timeout(60)
def test_the_host_work_takes_the_cpu_engine_and_adds_to_each_request():
    plain = pipeline.loads(PLAN)
    hosted = pipeline.loads(PLAN + HOST.replace("ENGINE", "cpu"))
    assert hosted.host.work_ms.cdf == ((2.0, 0.0), (2.0, 1.0))
    arrivals = load.constant(100, duration=5)
    without, with_host = simulate(plain, arrivals), simulate(hosted, arrivals)
    assert with_host.latency_ms["p50"] == pytest.approx(without.latency_ms["p50"] + 2.0, rel=0.01)
    assert with_host.engines["cpu"]["utilisation"] == pytest.approx(0.2, rel=0.05)  # 100/s x 2 ms on one core
    assert without.engines["cpu"]["utilisation"] == 0.0
    assert "(host work)" in with_host.stages
    # the host's work saturates its one core before the GPU: 600/s x 2 ms > 1 core
    saturated = simulate(hosted, load.constant(600, duration=2))
    assert saturated.engines["cpu"]["utilisation"] > 0.95
    assert saturated.latency_ms["p95"] > 20 * with_host.latency_ms["p95"]


def test_the_host_work_must_run_on_a_cpu_engine():
    problems = pipeline.validate_text(PLAN + HOST.replace("ENGINE", "gpu0"))
    assert [p.message for p in problems] == [
        "the service's own work runs on a CPU engine, and 'gpu0' is a gpu; name the plan's CPU engine"]
    unknown = pipeline.validate_text(PLAN + HOST.replace("ENGINE", "npu9"))
    assert "unknown engine 'npu9'" in unknown[0].message


def test_a_plan_s_distribution_survives_its_file():
    """What recommend writes (cdf at the mean) is what simulate draws: same mean, same tail."""
    d = Distribution.from_cdf([[0.1, 0.2], [0.12, 0.85], [30.0, 0.9], [60.0, 1.0]], mean_ms=7.0)
    back = Distribution.from_cdf(d.to_cdf(), d.mean_ms)
    assert back.mean_ms == pytest.approx(7.0)
    for q in (0.5, 0.9, 0.95, 0.99):
        assert back.quantile(q) == pytest.approx(d.quantile(q), rel=0.03)


def _ten_ms_on_two_cores(*, slots: int, stage: str = "work", extra: str = "") -> str:
    """A pipeline.yaml: one 10 ms stage on a cpu engine of 2 cores and ``slots`` slots."""
    return f"""
version: 1
service: svc
engines:
  cpu: {{kind: cpu, cores: 2, max_concurrency: {slots}, max_queue: 100000}}
stages:
  - {{name: {stage}, engine: cpu, timeout_ms: 100000, service_time_ms: {{p50: 10.0, p95: 10.0, source: user{extra}}}}}
"""


@pytest.mark.timeout(60)
def test_a_cpu_engine_s_slots_past_its_cores_carry_no_more():
    """8 slots on 2 cores: 400 req/s of 10 ms is 4 cores' work, and the simulator carries what 2 cores do (it ran
    all 400 req/s at 50% busy), as recommend sized it; without ``cores`` the slots are the servers."""
    text = _ten_ms_on_two_cores(slots=8)
    arrivals = load.constant(400, duration=5)
    from loadprobe.simulator.result import on_cores

    engine = on_cores(pipeline.loads(text)).engines["cpu"]
    assert (engine.max_concurrency, engine.max_queue) == (2, 100_006)  # as many admitted as the runtime admits
    on_two = simulate(pipeline.loads(text), arrivals)
    assert on_two.engines["cpu"]["utilisation"] > 0.95
    assert on_two.throughput_rps < 0.55 * 400  # 2 cores x 100/s, and the queue grows
    slots = simulate(pipeline.loads(text.replace("cores: 2, ", "")), arrivals)
    assert slots.engines["cpu"]["utilisation"] == pytest.approx(0.5, rel=0.05)


@pytest.mark.timeout(60)
def test_a_stage_that_mostly_waits_runs_cores_over_its_cpu_share_at_once():
    """A 10 ms stage that uses a core for 1 ms of it (``cpu_share: 0.1``: it awaits a downstream call) runs 20 at once
    on 2 cores: 400 req/s of it is 0.4 cores' work, carried; held to a core each, the same load is twice what 2 cores
    carry. Stages on one engine are weighted by their mean times."""
    text = _ten_ms_on_two_cores(slots=64, stage="remote", extra=", cpu_share: 0.1")
    from loadprobe.simulator.result import on_cores

    engine = on_cores(pipeline.loads(text)).engines["cpu"]
    assert engine.max_concurrency == 20 and engine.max_queue == 100_044
    arrivals = load.constant(400, duration=5)
    waits = simulate(pipeline.loads(text), arrivals)
    assert waits.throughput_rps == pytest.approx(400, rel=0.05) and waits.latency_ms["p95"] < 11.0
    held = simulate(pipeline.loads(text.replace(", cpu_share: 0.1", "")), arrivals)
    assert held.throughput_rps < 0.55 * 400
    mixed = text.replace("cpu_share: 0.1}}", "cpu_share: 0.1}}\n  - {name: work, engine: cpu, timeout_ms: 100000, "
                                             "service_time_ms: {p50: 10.0, p95: 10.0, source: user}}")
    assert on_cores(pipeline.loads(mixed)).engines["cpu"].max_concurrency == 4  # 2 cores / mean share 0.55
