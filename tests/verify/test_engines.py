"""Issue #32.6: ``loadprobe verify`` compares a stage only with spans recorded on an engine kind the plan places it
on, and refuses a recording made elsewhere (the service on the CPU, the plan's backbone on an L4) in one line."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

import loadprobe
from loadprobe import probe, request
from loadprobe.cli import main
from loadprobe.pipeline import files as pipeline

pytestmark = pytest.mark.timeout(300)

ENGINES = """\
version: 1
service: engines
engines:
  cpu: {kind: cpu, max_concurrency: 2, max_queue: 64}
  l4: {kind: gpu, device: nvidia-l4, max_concurrency: 1, max_queue: 64}
stages:
"""
PREP = "  - {name: prep, engine: cpu, timeout_ms: 1000, service_time_ms: {p50: 1.0, p95: 1.5, source: measured}}\n"


def _plan(tmp_path, model: str, name="pipeline.yaml"):
    path = tmp_path / name
    path.write_text(ENGINES + PREP + model)
    return path


def _record_service(out, engines: dict[str, str], requests: int = 60) -> None:
    """A service recorded by its own probes: each request runs prep, then model, on the engines named."""
    @probe("prep", engine=engines["prep"])
    def prep():
        time.sleep(0.001)

    @probe("model", engine=engines["model"])
    def model():
        time.sleep(0.002)

    loadprobe.start(out, service="engines", sample_devices=False, flush_interval_s=0.05)
    try:
        for _ in range(requests):
            with request():
                prep()
                model()
    finally:
        loadprobe.stop()


@pytest.fixture(scope="module")
def on_cpu(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpu") / "data"
    _record_service(out, {"prep": "cpu", "model": "cpu"})
    return out


@pytest.fixture(scope="module")
def on_gpu(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu") / "data"
    _record_service(out, {"prep": "cpu", "model": "cuda:0"})  # a service's probe names its engine as torch does
    return out


def test_a_cpu_recording_is_refused_for_a_plan_on_a_gpu_and_calibrate_writes_nothing(on_cpu, tmp_path):
    plan = _plan(tmp_path, "  - {name: model, engine: l4, timeout_ms: 1000, service_time_ms: {p50: 1.0, p95: 1.5, "
                           "source: roofline-estimate}}\n")
    before = plan.read_bytes()
    for extra in ([], ["--calibrate", "--force"]):
        result = CliRunner().invoke(main, ["verify", str(plan), str(on_cpu), *extra])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in result.output, result.output
        line = lines[0]
        assert "'model' on gpu (l4)" in line and "ran it on cpu (60 spans)" in line  # the stage, wanted and recorded
        assert str(plan) in line and "record the plan running on its engines" in line
        assert "'prep'" not in line  # prep matches: only the stages that do not are named
    assert plan.read_bytes() == before and not (tmp_path / "pipeline.yaml.bak").exists()
    assert not (tmp_path / "verify.json").exists()


def test_some_stages_matching_is_still_refused(on_cpu, tmp_path):
    """A fallback on the CPU makes the CPU a kind the stage may run on; a stage with spans on another kind is
    refused even when every other stage matches, since end-to-end figures would mix engines."""
    fallback = _plan(tmp_path, "  - {name: model, engine: l4, timeout_ms: 1000, fallback: {engine: cpu, max_ratio: "
                               "0.5}, service_time_ms: {p50: 2.0, p95: 3.0, source: measured}}\n", "fallback.yaml")
    result = CliRunner().invoke(main, ["verify", str(fallback), str(on_cpu), "-o", str(tmp_path / "v.json")])
    assert result.exit_code in (0, 1), result.output  # compared: the recording is on a kind the plan allows
    document = json.loads((tmp_path / "v.json").read_text())["before"]
    share = {r["what"]: r for r in document["rows"]}["model failover share"]
    assert share["observed"] == 1.0  # every model span ran on the fallback's engine

    calibrated = CliRunner().invoke(main, ["verify", str(fallback), str(on_cpu), "--calibrate", "--force",
                                           "-o", str(tmp_path / "v.json")])
    assert calibrated.exit_code in (0, 1), calibrated.output
    stages = pipeline.load(fallback).calibration.stages
    assert "prep" in stages and "model" not in stages  # model's own engine (gpu) never ran it: no scale from cpu


def test_a_recording_on_the_plans_kinds_is_compared_and_calibrated(on_gpu, tmp_path):
    plan = _plan(tmp_path, "  - {name: model, engine: l4, timeout_ms: 1000, service_time_ms: {p50: 1.0, p95: 1.5, "
                           "source: roofline-estimate}}\n")
    result = CliRunner().invoke(main, ["verify", str(plan), str(on_gpu), "--calibrate", "--force"])
    assert result.exit_code in (0, 1), result.output  # cuda:0 is a gpu: compared, not refused
    scale = pipeline.load(plan).calibration.scale("model")
    assert 1.5 < scale < 20  # ~2 ms recorded over the plan's 1 ms


def test_a_stage_recorded_partly_on_another_kind_is_refused(tmp_path):
    out = tmp_path / "data"
    _record_service(out / "a", {"prep": "cpu", "model": "gpu0"}, requests=30)
    _record_service(out / "b", {"prep": "cpu", "model": "npu0"}, requests=10)
    plan = _plan(tmp_path, "  - {name: model, engine: l4, timeout_ms: 1000, service_time_ms: {p50: 1.0, p95: 1.5, "
                           "source: roofline-estimate}}\n")
    result = CliRunner().invoke(main, ["verify", str(plan), str(out)])
    assert result.exit_code == 2, result.output
    assert "ran it on gpu (30 spans), npu (10 spans)" in result.output


def test_a_calibrated_plan_that_still_fails_does_not_suggest_calibrating_again(on_gpu, tmp_path):
    plan = _plan(tmp_path, "  - {name: model, engine: l4, timeout_ms: 1000, service_time_ms: {p50: 2.0, p95: 3.0, "
                           "source: measured}}\ncalibration:\n  source: another recording\n  stages:\n"
                           "    model: {service_time_scale: 40}\n")
    result = CliRunner().invoke(main, ["verify", str(plan), str(on_gpu)])
    assert result.exit_code == 1, result.output
    assert "with the file's calibration (another recording)" in result.output
    assert "--calibrate again only if that calibration came from another recording" in result.output
    assert "loadprobe verify --calibrate corrects" not in result.output
