"""loadprobe.simulate: the event loop against queueing theory and the router's rules, on exact schedules."""

from __future__ import annotations

import pytest

from dataclasses import replace

from loadprobe import load, pipeline
from loadprobe.queueing import erlang_c
from loadprobe.simulate import constant, exponential, from_config, lognormal, simulate


def plan(stage: str = "", engine: str = "max_concurrency: 1\n    max_queue: 1000", routing: str = "",
         extra_engines: str = "") -> pipeline.PipelineConfig:
    return pipeline.loads(f"""
version: 1
service: sim-test
engines:
  a:
    kind: cpu
    {engine}
{extra_engines}
stages:
  - name: work
    engine: a
    timeout_ms: 100000
{stage}
{routing}
""")


def with_stage(config: pipeline.PipelineConfig, **changes) -> pipeline.PipelineConfig:
    return replace(config, stages=(replace(config.stages[0], **changes),))


def test_single_server_matches_the_mm1_mean_time_in_system():
    # M/M/1 at load 0.5: mean time in system 1 / (mu - lambda) = 20 ms. Erlang C (the recommender's
    # formula) gives the same mean wait of 10 ms. 40,000 requests; tolerance 5%, several standard errors.
    rate, mean_ms = 50.0, 10.0
    arrivals = load.poisson(rate, requests=40_000, seed=3)
    result = simulate(plan(), arrivals, {"work": exponential(mean_ms)}, seed=3)
    load_ = rate * mean_ms / 1000
    wait_ms = erlang_c(1, load_) * mean_ms / (1 - load_)
    assert result.outcomes == {"ok": 40_000, "rejected": 0, "timeout": 0}
    assert result.latency_ms["mean"] == pytest.approx(mean_ms + wait_ms, rel=0.05)
    assert result.engines["a"]["utilisation"] == pytest.approx(load_, rel=0.05)


def test_a_full_queue_rejects_at_once():
    config = plan(engine="max_concurrency: 1\n    max_queue: 2")
    result = simulate(config, [0.0] * 10, {"work": constant(10)})
    assert result.outcomes == {"ok": 3, "rejected": 7, "timeout": 0}
    assert result.rejects == {"queue_full": 7}
    assert result.latency_ms["p99"] == pytest.approx(30, rel=0.002)  # the third waited for two


def test_timeouts_count_queue_wait_and_are_retried():
    # 10 ms each, one slot, deadline 25 ms from reaching the stage: #0 ends at 10, #1 at 20, #2 is
    # stopped at its deadline, #3 and #4 time out waiting.
    config = with_stage(plan(), timeout_ms=25)
    result = simulate(config, [0.0] * 5, {"work": constant(10)})
    assert result.outcomes == {"ok": 2, "rejected": 0, "timeout": 3}
    assert result.timeouts == 3
    # a second attempt for each: retried at 25 ms, they run at 25-35 and 35-45; the last one's new
    # deadline (50 ms) passes at 45 + 10
    retried = with_stage(config, retry=pipeline.RetryConfig(max_attempts=2))
    result = simulate(retried, [0.0] * 5, {"work": constant(10)})
    assert result.outcomes == {"ok": 4, "rejected": 0, "timeout": 1}
    assert result.stages["work"]["retries"] == 3
    assert result.latency_ms["p99"] == pytest.approx(45, rel=0.002)


def test_a_batch_starts_full_or_after_its_window():
    config = plan(stage="    batch: {size: 4, max_wait_ms: 8}")
    result = simulate(config, [0.0, 0.0, 0.0, 0.0, 0.001], {"work": constant(1)})
    assert result.outcomes["ok"] == 5
    assert result.engines["a"]["executions"] == 2
    assert result.engines["a"]["mean_batch"] == 2.5
    assert result.latency_ms["p50"] == pytest.approx(1, rel=0.002)  # the full batch ran at once
    assert result.latency_ms["p99"] == pytest.approx(9, rel=0.002)  # the lone request waited out the window


def test_a_full_queue_does_not_wait_for_a_batch_to_fill():
    config = plan(stage="    batch: {size: 4, max_wait_ms: 100}", engine="max_concurrency: 1\n    max_queue: 2")
    result = simulate(config, [0.0, 0.0], {"work": constant(1)})
    assert result.engines["a"]["executions"] == 1
    assert result.latency_ms["p99"] == pytest.approx(1, rel=0.002)


def test_the_failover_share_stays_within_max_ratio():
    # Overloaded 5x: the cap, the router's own FailoverCap on the simulated clock, binds.
    config = plan(stage="    fallback: {engine: b, when: {queue_len_over: 0}, max_ratio: 0.3}",
                  engine="max_concurrency: 1\n    max_queue: 4",
                  extra_engines="  b:\n    kind: gpu\n    max_concurrency: 8\n    max_queue: 100")
    arrivals = load.poisson(500, duration=30, seed=5)
    result = simulate(config, arrivals, {"work": exponential(10)}, seed=5)
    stage = result.stages["work"]
    assert 0.25 < stage["failover_share"] <= 0.3
    assert result.rejects["failover_cap"] > 0
    assert result.outcomes["ok"] + result.outcomes["rejected"] == len(arrivals)


def test_priority_shedding_evicts_the_lowest_waiting():
    config = plan(engine="max_concurrency: 1\n    max_queue: 1", routing="routing:\n  shed: {by: priority}")
    result = simulate(config, [0.0, 0.0, 0.0], {"work": constant(10)}, priorities=[0, 0, 1])
    assert result.rejects == {"shed": 1}
    assert result.outcomes["ok"] == 2


def test_an_open_breaker_rejects_fast():
    # Every attempt times out (50 ms of work, 20 ms deadline); after 5 failures the breaker opens.
    config = plan(stage="    breaker: {error_rate_over: 0.5, window_s: 10, min_requests: 5, open_s: 60}",
                  engine="max_concurrency: 4\n    max_queue: 100")
    config = with_stage(config, timeout_ms=20)
    result = simulate(config, [i * 0.1 for i in range(20)], {"work": constant(50)})
    assert result.stages["work"]["breaker_opened"] == 1
    assert result.outcomes == {"ok": 0, "rejected": 15, "timeout": 5}
    assert result.rejects == {"breaker_open": 15}


def test_the_same_seed_gives_the_same_result():
    config = plan(stage="    batch: {size: 4, max_wait_ms: 5}", engine="max_concurrency: 2\n    max_queue: 8")
    arrivals = load.poisson(300, duration=5, seed=1)
    times = {"work": lognormal(5, 12)}
    first, again = simulate(config, arrivals, times, seed=7), simulate(config, arrivals, times, seed=7)
    assert first.to_dict() == again.to_dict()
    assert simulate(config, arrivals, times, seed=8).to_dict() != first.to_dict()


def test_service_times_come_from_the_file_unless_overridden():
    config = plan(stage="    service_time_ms: {p50: 3.0, p95: 5.0, source: measured}")
    result = simulate(config, load.poisson(20, requests=4000, seed=2), seed=2)
    assert result.stages["work"]["p50"] == pytest.approx(3.0, rel=0.05)
    assert result.stages["work"]["p95"] == pytest.approx(5.0, rel=0.08)
    with pytest.raises(Exception, match="no service_time_ms"):
        from_config(plan())
    with pytest.raises(Exception, match="unknown stages: nope"):
        from_config(config, {"nope": constant(1)})


def test_the_command_prints_the_table(tmp_path):
    from click.testing import CliRunner

    from loadprobe.cli import main

    path = tmp_path / "pipeline.yaml"
    pipeline.save(with_stage(plan(), service_time_ms=pipeline.ServiceTimeConfig(p50=2.0, p95=4.0, source="user")),
                  path)
    result = CliRunner().invoke(main, ["simulate", str(path), "--rate", "100", "--duration", "5", "--poisson"])
    assert result.exit_code == 0, result.output
    assert " ok, 0 rejected, 0 timed out" in result.output
    assert "work" in result.output and "utilisation" in result.output
    missing = CliRunner().invoke(main, ["simulate", str(tmp_path / "nope.yaml"), "--rate", "1"])
    assert missing.exit_code == 2 and "cannot read the pipeline file" in missing.output
