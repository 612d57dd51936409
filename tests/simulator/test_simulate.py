"""loadprobe.simulate: the event loop against queueing theory and the router's rules, on exact schedules."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from loadprobe import load
from loadprobe import pipeline
from loadprobe.estimate.queueing import erlang_c
from loadprobe.simulator import constant, exponential, from_config, lognormal, simulate

ROOT = Path(__file__).resolve().parents[2]
LOOPS = ["python", "compiled"]  # they must agree wherever a test looks (numba is in the test extra)


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
    assert result.outcomes == {"ok": 40_000, "rejected": 0, "timeout": 0, "error": 0}
    assert result.latency_ms["mean"] == pytest.approx(mean_ms + wait_ms, rel=0.05)
    assert result.engines["a"]["utilisation"] == pytest.approx(load_, rel=0.05)


def test_a_full_queue_rejects_at_once():
    config = plan(engine="max_concurrency: 1\n    max_queue: 2")
    result = simulate(config, [0.0] * 10, {"work": constant(10)})
    assert result.outcomes == {"ok": 3, "rejected": 7, "timeout": 0, "error": 0}
    assert result.rejects == {"queue_full": 7}
    assert result.latency_ms["p99"] == pytest.approx(30, rel=0.002)  # the third waited for two


def test_timeouts_count_queue_wait_and_are_retried():
    # 10 ms each, one slot, deadline 25 ms from reaching the stage: #0 ends at 10, #1 at 20, #2 is
    # stopped at its deadline, #3 and #4 time out waiting.
    config = with_stage(plan(), timeout_ms=25)
    result = simulate(config, [0.0] * 5, {"work": constant(10)})
    assert result.outcomes == {"ok": 2, "rejected": 0, "timeout": 3, "error": 0}
    assert result.timeouts == 3
    # a second attempt for each: retried at 25 ms, they run at 25-35 and 35-45; the last one's new
    # deadline (50 ms) passes at 45 + 10
    retried = with_stage(config, retry=pipeline.RetryConfig(max_attempts=2))
    result = simulate(retried, [0.0] * 5, {"work": constant(10)})
    assert result.outcomes == {"ok": 4, "rejected": 0, "timeout": 1, "error": 0}
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
    assert result.outcomes == {"ok": 0, "rejected": 15, "timeout": 5, "error": 0}
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
    result = simulate(config, load.poisson(2, requests=4000, seed=2), seed=2)  # nearly no queueing
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
    result = CliRunner().invoke(main, ["simulate", str(path), "--rate", "100", "--duration", "5", "--poisson",
                                       "-o", str(tmp_path / "out"), "--no-html"])
    assert result.exit_code == 0, result.output
    assert " ok, 0 rejected, 0 timed out, 0 failed" in result.output
    assert "work" in result.output and "utilisation" in result.output
    missing = CliRunner().invoke(main, ["simulate", str(tmp_path / "nope.yaml"), "--rate", "1", "-o", str(tmp_path)])
    assert missing.exit_code == 2 and "cannot read the pipeline file" in missing.output


# -- service times from recorded data -------------------------------------------------------------


def record(tmp_path, spans_per_request, requests: int = 200):
    """A real recording: ``spans_per_request(i)`` gives (stage, start_ms, end_ms, extras) of request i."""
    import loadprobe

    out = tmp_path / "data"
    loadprobe.start(out, service="sim", sample_devices=False)
    try:
        for i in range(requests):
            base = 1_000_000_000 * i
            with loadprobe.request(id=f"r{i}"):
                for stage, start_ms, end_ms, extras in spans_per_request(i):
                    loadprobe.record_span(stage, base + int(start_ms * 1e6), base + int(end_ms * 1e6), **extras)
    finally:
        loadprobe.stop()
    return out


def two_stage_plan(engine_b: str = "kind: cpu", batch: str = "") -> pipeline.PipelineConfig:
    return pipeline.loads(f"""
version: 1
service: sim
engines:
  cpu: {{kind: cpu, max_concurrency: 4, max_queue: 1000}}
  b: {{{engine_b}, max_concurrency: 1, max_queue: 1000}}
stages:
  - {{name: outer, engine: cpu, timeout_ms: 10000}}
  - {{name: model, engine: b, timeout_ms: 10000{batch}}}
""")


def test_recorded_times_are_self_times_drawn_as_recorded(tmp_path):
    from loadprobe.simulator import from_recording

    # outer spans 10 ms around a 4 ms child "inner" (not a plan stage): its self time is 6 ms.
    # model alternates 1 ms and 3 ms: an empirical draw gives only those two values.
    data = record(tmp_path, lambda i: [("outer", 0, 10, {}), ("inner", 2, 6, {}),
                                       ("model", 10, 11 if i % 2 else 13, {})])
    times = from_recording(two_stage_plan(), data)
    rng = __import__("random").Random(1)
    outer = {round(times[("outer", "cpu")](1, rng) * 1000, 3) for _ in range(200)}
    model = [round(times[("model", "b")](1, rng) * 1000, 3) for _ in range(2000)]
    # record_span nests by the open request only, so inner is outer's sibling here: outer keeps 10 ms
    assert outer == {10.0}
    assert set(model) == {1.0, 3.0}
    assert 0.45 < model.count(1.0) / len(model) < 0.55
    assert "measured" in times[("model", "b")].how


def test_children_are_subtracted_from_a_stage(tmp_path):
    import loadprobe
    from loadprobe.simulator.recorded import read_self_times

    out = tmp_path / "data"
    loadprobe.start(out, service="sim", sample_devices=False)
    try:
        for i in range(50):
            with loadprobe.request(id=f"r{i}"):
                with loadprobe.Span("outer"):
                    with loadprobe.Span("inner"):
                        pass
    finally:
        loadprobe.stop()
    times = read_self_times(out).times
    outer, inner = times[("outer", "cpu", 1)], times[("inner", "cpu", 1)]
    # the self time of outer is what remains once inner is removed: never negative, never the whole
    assert (outer >= 0).all() and len(outer) == len(inner) == 50


def test_batches_draw_from_the_nearest_recorded_size_scaled_by_the_fit(tmp_path):
    from loadprobe.simulator import from_recording

    # recorded: batch 1 takes 2 ms and batch 4 takes 5 ms, i.e. 1 ms + 1 ms per item
    data = record(tmp_path, lambda i: [("outer", 0, 1, {}),
                                       ("model", 1, 3 if i % 2 else 6, {"batch": 1 if i % 2 else 4})])
    config = two_stage_plan(batch=", batch: {size: 8, max_wait_ms: 2}")
    sampler = from_recording(config, data)[("model", "b")]
    rng = __import__("random").Random(0)
    assert sampler(1, rng) * 1000 == pytest.approx(2.0, rel=1e-6)
    assert sampler(4, rng) * 1000 == pytest.approx(5.0, rel=1e-6)
    assert sampler(8, rng) * 1000 == pytest.approx(9.0, rel=1e-6)  # nearest is 4: 5 ms x fit(8) / fit(4) = 9 / 5
    assert sampler(3, rng) * 1000 == pytest.approx(4.0, rel=1e-6)  # nearest is 4: 5 x 4 / 5
    # a plan that runs it unbatched draws every recorded time as one request's
    pooled = from_recording(two_stage_plan(), data)[("model", "b")]
    assert {round(pooled(1, rng) * 1000, 3) for _ in range(300)} == {2.0, 5.0}


def test_another_engine_scales_the_recorded_times_along_the_roofline(tmp_path):
    from loadprobe.simulator import from_recording

    # a memory-bound model recorded on the CPU with FLOPs and bytes: on an L4 it is estimated faster
    data = record(tmp_path, lambda i: [("outer", 0, 1, {}),
                                       ("model", 1, 21, {"flops": 2e9, "bytes": 4e8, "engine": "cpu"})])
    here = from_recording(two_stage_plan(), data)[("model", "b")]
    there = from_recording(two_stage_plan("kind: gpu, device: nvidia-l4"), data)[("model", "b")]
    rng = __import__("random").Random(0)
    assert here(1, rng) * 1000 == pytest.approx(20.0, rel=1e-6)
    assert there.source == "roofline-estimate" and "roofline" in there.how
    assert 0 < there(1, rng) < here(1, rng)
    assert there.scale == pytest.approx(there(1, rng) / here(1, rng), rel=1e-9)


def test_a_stage_neither_recorded_nor_described_is_refused(tmp_path):
    from loadprobe._errors import LoadprobeError
    from loadprobe.simulator import from_recording

    data = record(tmp_path, lambda i: [("outer", 0, 1, {})], requests=20)
    with pytest.raises(LoadprobeError, match="'model' has no service_time_ms .* and was not recorded"):
        from_recording(two_stage_plan(), data)


# -- what a run reports -----------------------------------------------------------------------------


def test_power_energy_and_cost_follow_utilisation():
    config = pipeline.loads("""
version: 1
service: sim
engines:
  npu0: {kind: npu, device: ascend-310p, max_concurrency: 1, max_queue: 1000, power_w: 100}
stages:
  - {name: work, engine: npu0, timeout_ms: 10000}
""")
    result = simulate(config, load.constant(50, duration=20), {"work": constant(10)}, prices={"ascend-310p": 1000})
    util = result.engines["npu0"]["utilisation"]
    assert util == pytest.approx(0.5, rel=0.02)
    assert result.power["mean_w"] == pytest.approx(100 * (0.3 + 0.7 * util))
    assert result.power["energy_per_request_j"] == pytest.approx(
        result.power["mean_w"] * result.duration_s / result.outcomes["ok"])
    assert result.tco["purchase"] == 1000 and result.tco["total"] > 1000
    assert result.tco["purchase_unknown"] == []


def test_the_timeline_shows_a_queue_building_in_a_burst():
    config = plan(engine="max_concurrency: 1\n    max_queue: 100000")
    arrivals = list(load.constant(50, duration=10)) + [10.0 + i / 1000 for i in range(500)]  # then a burst
    result = simulate(config, arrivals, {"work": constant(10)})
    queue = result.timeline["engines"]["a"]["queue"]
    assert len(queue) == len(result.timeline["t_s"]) == 200
    t = result.timeline["t_s"]
    before = [q for q, at in zip(queue, t) if at < 9.5]
    assert max(before) <= 1 and max(queue) > 100
    assert result.engines["a"]["queue_max"] == max(queue)


# -- the command ------------------------------------------------------------------------------------


def test_the_command_replays_a_trace_through_every_plan_of_a_plans_json(tmp_path):
    import json

    from click.testing import CliRunner

    from loadprobe.cli import main

    runner = CliRunner()
    plan_dir = tmp_path / "plan"
    made = runner.invoke(main, ["recommend", str(ROOT / "samples" / "data" / "vision"), "-o", str(plan_dir / "pipeline.yaml"),
                                "--min-rps", "200", "--slo-p95-ms", "80", "--precision", "backbone=int8-ok"])
    assert made.exit_code == 0, made.output
    written = json.loads((plan_dir / "plans.json").read_text())
    feasible = [o["name"] for o in [written["recommended"], *written["alternatives"]] if o["pipeline"]]
    assert len(feasible) >= 2
    trace = ROOT / "samples" / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"
    out = tmp_path / "sim"
    result = runner.invoke(main, ["simulate", str(plan_dir / "plans.json"), "--trace", str(trace), "--preset",
                                  "azure-llm-2023", "--speed", "20", "--duration", "30", "--service-times",
                                  str(ROOT / "samples" / "data" / "vision"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "simulation.json").read_text())
    assert list(saved["plans"]) == feasible
    assert saved["service_times"].startswith("recorded in")
    first = saved["plans"][feasible[0]]
    assert first["requests"] == saved["requests"] > 100
    assert sum(first["outcomes"].values()) == first["requests"]
    assert (out / "simulation.html").read_text().count('data-figure="sim_') >= 2
    for name in feasible:
        assert name in result.output


def test_the_command_refuses_bad_input_in_one_line(tmp_path):
    from click.testing import CliRunner

    from loadprobe.cli import main

    runner = CliRunner()
    path = tmp_path / "pipeline.yaml"
    pipeline.save(with_stage(plan(), service_time_ms=pipeline.ServiceTimeConfig(p50=2.0, p95=4.0, source="user")),
                  path)
    not_plans = tmp_path / "other.json"
    not_plans.write_text('{"a": 1}')
    cases = [([str(path)], "how fast? give --rate R"),
             ([str(not_plans), "--rate", "5"], "not a plans.json"),
             ([str(path), "--rate", "5", "--speed", "2"], "--speed only applies to --replay"),
             ([str(path), "--trace", str(tmp_path / "none.csv")], "none.csv")]
    for args, message in cases:
        result = runner.invoke(main, ["simulate", *args, "-o", str(tmp_path / "o")])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1


def test_executor_errors_fail_attempts_and_retries_recover_most():
    arrivals = load.constant(200, requests=20_000)
    once = simulate(plan(), arrivals, {"work": constant(1)}, error_rates={"work": 0.2}, seed=4)
    assert once.outcomes["error"] / once.requests == pytest.approx(0.2, abs=0.015)
    assert once.errors == once.outcomes["error"] and once.stages["work"]["errors"] == once.errors
    retried = simulate(plan(stage="    retry: {max_attempts: 2}", routing="routing:\n  retry: {budget_ratio: 0.5, "
                                                                         "max_attempts: 2}"),
                       arrivals, {"work": constant(1)}, error_rates={"work": 0.2}, seed=4)
    assert retried.outcomes["error"] / retried.requests == pytest.approx(0.04, abs=0.01)  # 0.2 x 0.2
    assert retried.stages["work"]["retries"] == pytest.approx(0.2 * retried.requests, rel=0.1)
    with pytest.raises(Exception, match="between 0 and 1"):
        simulate(plan(), arrivals, {"work": constant(1)}, error_rates={"work": 1.5})


def test_a_sync_executor_keeps_its_slot_after_its_deadline():
    # #0 takes 50 ms against a 30 ms timeout; #1 arrives at 25 ms and takes 3 ms. An async executor is
    # stopped at 30 ms and #1 is done at 33 ms; a thread runs on to 50 ms, so #1 ends at 53 ms.
    import itertools

    config = with_stage(plan(), timeout_ms=30.0)
    for mode, latency in (("async", 8.0), ("sync", 28.0)):
        for loop in LOOPS:
            # the lane's first execution takes 50 ms, the next ones 3 ms (the compiled loop draws ahead)
            calls = itertools.chain([0.050], itertools.repeat(0.003))
            result = simulate(config, [0.0, 0.025], {"work": lambda batch, rng: next(calls)}, executors=mode,
                              loop=loop)
            assert result.outcomes == {"ok": 1, "rejected": 0, "timeout": 1, "error": 0}, (mode, loop)
            assert result.latency_ms["p50"] == pytest.approx(latency, rel=0.002), (mode, loop)


def test_the_report_takes_a_simulation_json(tmp_path):
    import json

    from click.testing import CliRunner

    from loadprobe.cli import main

    runner = CliRunner()
    vision = str(ROOT / "samples" / "data" / "vision")
    plan_dir = tmp_path / "plan"
    assert runner.invoke(main, ["recommend", vision, "-o", str(plan_dir / "pipeline.yaml")]).exit_code == 0
    sim = tmp_path / "sim"
    ran = runner.invoke(main, ["simulate", str(plan_dir / "pipeline.yaml"), "--poisson", "--rate", "30",
                               "--duration", "10", "--seed", "2", "-o", str(sim), "--no-html"])
    assert ran.exit_code == 0, ran.output
    out = tmp_path / "report.html"
    made = runner.invoke(main, ["report", vision, "--simulation", str(sim / "simulation.json"), "-o", str(out)])
    assert made.exit_code == 0, made.output
    page = out.read_text()
    assert 'id="sim-plans"' in page and 'data-figure="sim_latency"' in page
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"plans": []}))
    refused = runner.invoke(main, ["report", vision, "--simulation", str(bad), "-o", str(tmp_path / "r2.html")])
    assert refused.exit_code == 2 and "not a simulation.json" in refused.output
    assert len(refused.output.strip().splitlines()) == 1


def test_loadprobe_simulate_is_the_public_function():
    import loadprobe
    import loadprobe.simulator  # importing the package must not shadow the function

    path = ROOT / "samples" / "vision" / "pipeline.yaml"
    config = pipeline.load(path)
    times = {s.name: constant(1.0) for s in config.stages}
    by_path = loadprobe.simulate(str(path), load.constant(20, duration=2), times)
    by_config = loadprobe.simulate(config, load.constant(20, duration=2), times)
    assert by_path.to_dict() == by_config.to_dict()
    assert by_path.outcomes["ok"] == 40 and callable(loadprobe.simulate)


def test_the_command_takes_a_service_time_per_stage(tmp_path):
    import json

    from click.testing import CliRunner

    from loadprobe.cli import main

    path = tmp_path / "pipeline.yaml"
    pipeline.save(with_stage(plan(), service_time_ms=pipeline.ServiceTimeConfig(p50=2.0, p95=4.0, source="user")),
                  path)
    runner = CliRunner()
    out = tmp_path / "out"
    result = runner.invoke(main, ["simulate", str(path), "--rate", "10", "--duration", "5", "--service-time",
                                  "work@a=constant:7", "-o", str(out), "--no-html"])
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "simulation.json").read_text())
    stage = next(iter(saved["plans"].values()))["stages"]["work"]
    assert stage["p50"] == pytest.approx(7.0, rel=0.002) and stage["p99"] == pytest.approx(7.0, rel=0.002)
    assert "given for work" in saved["service_times"]
    for bad, message in (("work=gamma:1", "write STAGE[@ENGINE]=constant:MS"),
                         ("work=lognormal:5:2", "p95 >= p50"),
                         ("nope=constant:1", "unknown stages: nope"),
                         ("work@gpu9=constant:1", "no plan runs work on gpu9; its engines are a")):
        refused = runner.invoke(main, ["simulate", str(path), "--rate", "10", "--service-time", bad,
                                       "-o", str(tmp_path / "refused"), "--no-html"])
        assert refused.exit_code == 2 and message in refused.output, (bad, refused.output)
        assert len(refused.output.strip().splitlines()) == 1
    for twice in (["work=constant:1", "work@a=constant:2"], ["work@a=constant:2", "work=constant:1"],
                  ["work@a=constant:1", "work@a=constant:2"]):
        refused = runner.invoke(main, ["simulate", str(path), "--rate", "10", "-o", str(tmp_path / "refused"), "--no-html",
                                       *[arg for t in twice for arg in ("--service-time", t)]])
        assert refused.exit_code == 2 and "--service-time" in refused.output, (twice, refused.output)



def test_time_outside_every_stage_is_added_to_each_request(tmp_path):
    from loadprobe.simulator import from_recording
    from loadprobe.simulator.recorded import outside_stages, read_self_times

    # requests of 20 ms whose stages take 1 + 3 ms: 16 ms of each is outside every stage
    data = record(tmp_path, lambda i: [("outer", 0, 1, {}), ("model", 1, 4, {})])
    root = tmp_path / "root"
    import loadprobe

    loadprobe.start(root, service="sim", sample_devices=False)
    try:
        for i in range(100):
            base = 1_000_000_000 * i
            loadprobe.record_span("request", base, base + 20_000_000, request_id=f"r{i}")
    finally:
        loadprobe.stop()
    recorded = read_self_times([str(data), str(root)])
    outside = outside_stages(recorded)
    assert outside is not None and outside.samples == 100
    assert outside(1, __import__("random").Random(0)) * 1000 == pytest.approx(20.0)
    config = two_stage_plan()
    times = from_recording(config, data)
    plain = simulate(config, load.constant(5, duration=10), times)
    plus = simulate(config, load.constant(5, duration=10), times, outside=outside)
    assert plus.latency_ms["p50"] == pytest.approx(plain.latency_ms["p50"] + 20.0, rel=0.002)
    assert plus.stages == plain.stages  # a delay outside the stages holds no engine



def test_an_engine_override_applies_to_the_plans_that_run_the_stage_there(tmp_path):
    import json

    from click.testing import CliRunner

    from loadprobe.cli import main

    runner = CliRunner()
    plan_dir = tmp_path / "plan"
    made = runner.invoke(main, ["recommend", str(ROOT / "samples" / "data" / "vision"), "-o",
                                str(plan_dir / "pipeline.yaml"), "--min-rps", "200", "--slo-p95-ms", "80",
                                "--precision", "backbone=int8-ok"])
    assert made.exit_code == 0, made.output
    runs = {}
    for name, extra in (("plain", []), ("given", ["--service-time", "backbone@gpu0=constant:0.01"])):
        out = tmp_path / name
        result = runner.invoke(main, ["simulate", str(plan_dir / "plans.json"), "--poisson", "--rate", "50",
                                      "--duration", "5", "--seed", "3", *extra, "-o", str(out), "--no-html"])
        assert result.exit_code == 0, result.output
        assert "seed 3" in result.output.splitlines()[0]
        runs[name] = json.loads((out / "simulation.json").read_text())["plans"]
    plans = json.loads((plan_dir / "plans.json").read_text())
    on_gpu = {o["name"] for o in [plans["recommended"], *plans["alternatives"]] if o["pipeline"]
              and any(s["name"] == "backbone" and s["engine"] == "gpu0" for s in o["pipeline"]["stages"])}
    assert on_gpu and set(runs["plain"]) - on_gpu
    for name in runs["plain"]:
        same = runs["plain"][name]["stages"]["backbone"] == runs["given"][name]["stages"]["backbone"]
        assert same == (name not in on_gpu), name


def test_service_time_keys_are_checked():
    from loadprobe._errors import LoadprobeError

    config = pipeline.load(ROOT / "samples" / "vision" / "pipeline.yaml")
    with pytest.raises(LoadprobeError, match="mixes"):
        simulate(config, [0.0], {("decode", "cpu"): constant(1), "preprocess": constant(1)})
    with pytest.raises(LoadprobeError, match="backbone@npu9, which the plan never runs"):
        simulate(config, [0.0], {("backbone", "npu9"): constant(1)})


def test_an_execution_ending_at_its_deadline_is_in_time_on_every_path():
    config = with_stage(plan(), timeout_ms=10.0)
    for mode in ("async", "sync"):
        idle = simulate(config, [0.0, 1.0], {"work": constant(10)}, executors=mode)
        assert idle.outcomes["ok"] == 2, mode
        queued = simulate(with_stage(plan(), timeout_ms=10.0), [0.0, 0.0], {"work": constant(5)}, executors=mode)
        assert queued.outcomes == {"ok": 2, "rejected": 0, "timeout": 0, "error": 0}, mode


def test_recorded_times_prefer_the_engine_kind_and_leave_queue_waits_out(tmp_path):
    from loadprobe.simulator import from_recording
    from loadprobe.simulator.recorded import outside_stages, read_self_times

    # model runs 2 ms on the CPU and 0.5 ms on a GPU; it waits 6 ms in a batcher's queue first
    def spans(i):
        on_gpu = i % 4 == 0
        return [("outer", 0, 1, {}), ("model", 7, 7.5 if on_gpu else 9,
                                      {"engine": "gpu0" if on_gpu else "cpu", "queue_ns": 6_000_000})]

    data = record(tmp_path, spans)
    rng = __import__("random").Random(0)
    gpu = from_recording(two_stage_plan("kind: gpu"), data)[("model", "b")]
    cpu = from_recording(two_stage_plan(), data)[("model", "b")]
    assert gpu(1, rng) * 1000 == pytest.approx(0.5) and "measured" in gpu.how
    assert cpu(1, rng) * 1000 == pytest.approx(2.0)
    recorded = read_self_times(data)
    # the request spans of record() are real time and shorter than the synthetic children: nothing
    # outside the stages is kept rather than a negative time
    assert recorded.outside is None or (recorded.outside >= 0).all()


def test_a_batch_line_through_zero_falls_back_to_proportion(tmp_path):
    from loadprobe.simulator import from_recording

    # medians 1 ms at batch 4 and 10 ms at batch 8: the line crosses zero, so it is not used
    data = record(tmp_path, lambda i: [("outer", 0, 1, {}),
                                       ("model", 1, 2 if i % 2 else 11, {"batch": 4 if i % 2 else 8})])
    sampler = from_recording(two_stage_plan(batch=", batch: {size: 8, max_wait_ms: 2}"), data)[("model", "b")]
    rng = __import__("random").Random(0)
    assert sampler(2, rng) > 0
    assert sampler(2, rng) * 1000 == pytest.approx(1.0 * 2 / 4, rel=0.3)  # in proportion to the nearest


def test_utilisation_stays_within_the_slots_with_sync_executors():
    # every execution takes 50 ms against a 10 ms timeout: threads run on after their requests end
    config = with_stage(plan(engine="max_concurrency: 1\n    max_queue: 100"), timeout_ms=10.0)
    result = simulate(config, load.constant(100, duration=2), {"work": constant(50)}, executors="sync")
    assert result.outcomes["timeout"] == result.requests
    assert 0.9 < result.engines["a"]["utilisation"] <= 1.0


@pytest.mark.parametrize("args, message", [
    (["--rate", "1e12", "--duration", "1"], "--rate 1e+12/s for 1 s is about 1e+12 arrivals, more than the "
                                            "10,000,000 one schedule holds; lower --rate or --duration"),
    (["--poisson", "--rate", "1e300"], "--rate 1e+300/s for 10 s is about 1e+301 arrivals"),
    (["--rate", "10", "--requests", "1000000000000"], "--requests 1,000,000,000,000 is more than the 10,000,000"),
    (["--bursty", "--burst-rate", "10", "--on-s", "1e-9", "--off-s", "1e-9"], "bursts and gaps in 10 s"),
])
def test_a_schedule_too_large_to_hold_is_refused_before_it_is_drawn(tmp_path, args, message):
    from click.testing import CliRunner

    from loadprobe.cli import main

    path = tmp_path / "pipeline.yaml"
    pipeline.save(with_stage(plan(), service_time_ms=pipeline.ServiceTimeConfig(p50=2.0, p95=4.0, source="user")),
                  path)
    result = CliRunner().invoke(main, ["simulate", str(path), *args, "-o", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and message in result.output
