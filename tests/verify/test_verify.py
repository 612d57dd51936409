"""Issue #21.5: ``loadprobe verify`` checks a plan against the recording of it running in the real Router,
flags service times that are wrong by 2x, and passes on the same data once ``--calibrate`` corrected them."""

from __future__ import annotations

import asyncio
import json
import random
import textwrap

import pytest
from click.testing import CliRunner

import loadprobe
from loadprobe.cli import main
from loadprobe.pipeline import files as pipeline

PLAN = textwrap.dedent("""\
    version: 1
    service: verified
    engines:
      cpu: {kind: cpu, max_concurrency: 4, max_queue: 64}
      gpu0: {kind: gpu, device: nvidia-l4, max_concurrency: 2, max_queue: 64}
    stages:
      - name: prep
        engine: cpu
        timeout_ms: 1000
        service_time_ms: {p50: 4.0, p95: 6.0, source: roofline-estimate, error_factor: 3}
      - name: model
        engine: gpu0
        timeout_ms: 1000
        service_time_ms: {p50: 6.0, p95: 9.0, source: roofline-estimate, error_factor: 3}
""")
TRUE_SCALE = 2.0  # the stages really take twice what the plan says
RATE, SECONDS = 40.0, 8.0


def _lognormal(p50_ms: float, p95_ms: float, rng: random.Random) -> float:
    import math

    sigma = math.log(p95_ms / p50_ms) / 1.6448536269514722
    return p50_ms * math.exp(rng.gauss(0.0, sigma)) / 1000.0


def _run_router(plan_path, data_dir) -> None:
    """The plan in the real Router, its executors sleeping TRUE_SCALE x the plan's times, recorded by loadprobe."""
    from loadprobe.route import Router

    rng = random.Random(7)

    def executor(p50, p95):
        async def run(payload):
            await asyncio.sleep(_lognormal(p50 * TRUE_SCALE, p95 * TRUE_SCALE, rng))
            return payload
        return run

    router = Router.load(str(plan_path), executors={"prep": {"cpu": executor(4.0, 6.0)},
                                                   "model": {"gpu0": executor(6.0, 9.0)}})
    arrivals, t = [], 0.0
    while t < SECONDS:
        t += rng.expovariate(RATE)
        arrivals.append(t)

    async def main_loop():
        async with router:
            loop = asyncio.get_running_loop()
            start = loop.time()
            tasks = []
            for at in arrivals:
                await asyncio.sleep(max(0.0, start + at - loop.time()))
                tasks.append(asyncio.create_task(router.submit(at)))
            await asyncio.gather(*tasks, return_exceptions=True)

    loadprobe.start(data_dir, service="verified", sample_devices=False, flush_interval_s=0.2)
    try:
        asyncio.run(main_loop())
    finally:
        loadprobe.stop()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify")
    plan = root / "pipeline.yaml"
    plan.write_text(PLAN)
    _run_router(plan, root / "data")
    return root


def test_a_plan_wrong_by_2x_is_flagged_then_passes_once_calibrated(recorded, tmp_path):
    plan = tmp_path / "pipeline.yaml"
    plan.write_text(PLAN)
    data = str(recorded / "data")
    runner = CliRunner()
    wrong = runner.invoke(main, ["verify", str(plan), data])
    assert wrong.exit_code == 1, wrong.output
    assert "FAILED" in wrong.output and "end to end p95" in wrong.output
    document = json.loads((tmp_path / "verify.json").read_text())["before"]
    assert not document["passed"] and document["requests"] >= 0.8 * RATE * SECONDS
    e2e = {r["what"]: r for r in document["rows"]}
    assert e2e["end to end p50"]["error"] < -0.3  # the plan predicts about half the observed latency

    fixed = runner.invoke(main, ["verify", str(plan), data, "--calibrate", "--force"])
    assert fixed.exit_code == 0, fixed.output
    assert (tmp_path / "pipeline.yaml.bak").read_text() == PLAN  # the original, kept
    config = pipeline.load(plan)
    for stage in ("prep", "model"):
        assert 1.6 <= config.calibration.scale(stage) <= 2.5, config.calibration
    assert config.calibration.handoff_ms >= 0 and "loadprobe verify on" in config.calibration.source

    again = runner.invoke(main, ["verify", str(plan), data, "--force"])  # a second verify uses the calibration
    assert again.exit_code == 0, again.output
    assert "with the file's calibration" in again.output and "passed" in again.output


def test_simulate_applies_the_calibration(recorded, tmp_path):
    from loadprobe.simulator import simulate

    config = pipeline.loads(PLAN)
    arrivals = [i / RATE for i in range(400)]
    plain = simulate(config, arrivals, seed=1)
    from loadprobe.pipeline.config import CalibrationConfig, StageCalibration
    from dataclasses import replace

    calibrated = replace(config, calibration=CalibrationConfig(
        source="test", handoff_ms=1.0, stages={"prep": StageCalibration(service_time_scale=2.0),
                                              "model": StageCalibration(service_time_scale=2.0)}))
    slow = simulate(calibrated, arrivals, seed=1)
    assert slow.stages["prep"]["p50"] > 1.8 * plain.stages["prep"]["p50"]
    assert slow.latency_ms["p50"] > 2 * plain.latency_ms["p50"] + 1.5  # twice the times, plus 2 x 1 ms hand-offs
    text = pipeline.dump(calibrated)
    assert "calibration:" in text and pipeline.loads(text) == calibrated


def test_verify_refuses_data_that_is_not_this_plans_recording(recorded, tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(PLAN.replace("name: prep", "name: parse"))
    result = CliRunner().invoke(main, ["verify", str(other), str(recorded / "data")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "is this the recording of this plan" in result.output or "no request spans" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(PLAN + "calibration:\n  source: x\n  stages:\n    nosuch: {service_time_scale: 2}\n")
    result = CliRunner().invoke(main, ["verify", str(bad), str(recorded / "data")])
    assert result.exit_code == 2 and "nosuch" in result.output


def test_recommend_applies_a_calibration_to_the_same_stage_on_the_same_engine(tmp_path):
    from loadprobe.plan.constraints import Constraints
    from loadprobe.plan.planner import recommend

    from ..plan.test_recommend import record

    portrait = record(tmp_path, {"prep": {"ms": 4.0}, "model": {"ms": 6.0}}, requests=40)
    calibrated = tmp_path / "calibrated.yaml"
    calibrated.write_text(PLAN + "calibration:\n  source: a test\n  handoff_ms: 0.5\n  stages:\n"
                                 "    prep: {service_time_scale: 2.0}\n")
    plain = recommend(portrait, Constraints.parse(engines="cpu", min_rps=20), cpu_cores=4)
    fixed = recommend(portrait, Constraints.parse(engines="cpu", min_rps=20, calibration=calibrated), cpu_cores=4)
    before = {d.stage: d.service for d in plain.recommended.decisions}
    after = {d.stage: d.service for d in fixed.recommended.decisions}
    assert after["prep"].p50_ms == pytest.approx(2 * before["prep"].p50_ms)
    assert after["prep"].source == "calibrated" and after["prep"].error_factor == 1.0
    assert after["model"] == before["model"]  # no scale measured for it: unchanged
    # the hand-off delay, once per stage, is in every plan's latency
    assert fixed.recommended.estimate.p50_ms >= plain.recommended.estimate.p50_ms + 2 * 0.5
    result = CliRunner().invoke(main, ["recommend", str(tmp_path / "nothing.json"), "--calibration",
                                       str(tmp_path / "pipeline-without.yaml")])
    assert result.exit_code == 2


@pytest.mark.timeout(180)
def test_a_plan_with_host_work_is_not_given_that_work_again_as_a_hand_off_delay(tmp_path):
    """A plan from ``recommend`` runs the request's time outside its stages as the host's work; ``--calibrate``
    once measured that same time again as a per-stage hand-off delay and added both (p50 +1.8% -> +9.6%)."""
    import numpy as np

    from tests.support.served_recording import Step, record_served

    arrivals = np.cumsum(np.random.default_rng(5).exponential(1 / 100.0, 3000))
    steps = [Step("outside", lambda rng, n: rng.lognormal(np.log(1.0), 0.2, n)),
             Step("embed", lambda rng, n: rng.gamma(4.0, 0.25, n)), Step("score", lambda rng, n: np.full(n, 0.5))]
    record_served(tmp_path / "data", arrivals, steps, cores=2, seed=5)
    plan = tmp_path / "plan" / "pipeline.yaml"
    runner = CliRunner()
    made = runner.invoke(main, ["recommend", str(tmp_path / "data"), "--engines", "cpu", "-o", str(plan)])
    assert made.exit_code == 0, made.output
    assert pipeline.load(plan).host is not None
    done = runner.invoke(main, ["verify", str(plan), str(tmp_path / "data"), "--calibrate"])
    assert done.exit_code in (0, 1), done.output
    report = json.loads((plan.parent / "verify.json").read_text())
    before, after = ({r["what"]: r["error"] for r in report[k]["rows"]} for k in ("before", "after"))
    assert report["before"]["handoff_ms_observed"] > 0.4  # the outside time, per stage it passes
    assert pipeline.load(plan).calibration.handoff_ms < 0.1 * report["before"]["handoff_ms_observed"]
    for what in ("end to end p50", "end to end p95"):
        assert abs(after[what]) <= abs(before[what]) + 0.02, (what, before[what], after[what])
