"""``loadprobe verify`` on an LLM plan: its pools replayed at the recorded arrivals with the recorded lengths, TTFT,
TPOT and E2E compared; ``--calibrate`` finds the step times' scale and the work before the first token."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from loadprobe import pipeline
from loadprobe.cli import main

from ..conftest import REPO

pytestmark = pytest.mark.timeout(180)

STREAM = REPO / "samples" / "data" / "llm-stream" / "data"  # the sample engine: 8 running, a 4,096-token cache
TOLERANCE = "0.2"  # 162 requests: a p95 rests on 8 of them


@pytest.fixture
def plan(tmp_path):
    """A plan of the recorded engine at a rate one replica of it carried."""
    path = tmp_path / "plan" / "pipeline.yaml"
    done = CliRunner().invoke(main, ["recommend", "--llm", str(STREAM), "--max-running", "8", "--kv-tokens", "4096",
                                     "--min-rps", "2", "-o", str(path)], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    config = pipeline.load(path)
    assert [p.replicas for p in config.llm.pools.values() if p.role == "colocated"] == [1]
    return path


def _verify(path, *extra):
    return CliRunner().invoke(main, ["verify", str(path), str(STREAM), "--tolerance", TOLERANCE, "--force", *extra],
                              catch_exceptions=False)


def test_the_plan_of_a_recorded_engine_agrees_with_that_recording(plan):
    done = _verify(plan)
    assert done.exit_code == 0, done.output
    report = json.loads((plan.parent / "verify.json").read_text())["before"]
    assert report["kind"] == "llm" and report["passed"] and report["requests"] > 100
    assert {r["what"] for r in report["rows"]} == {f"{n} p{q}" for n in ("TTFT", "TPOT", "E2E") for q in (50, 95)}
    assert all(abs(r["error"]) <= float(TOLERANCE) for r in report["rows"])


def test_a_plan_whose_steps_are_twice_too_slow_is_flagged_then_calibrated_back(plan):
    text = plan.read_text()
    scale = float(re.search(r"\n        scale: ([0-9.]+)", text).group(1))
    plan.write_text(re.sub(r"(\n        scale: )[0-9.]+", rf"\g<1>{scale * 2}", text))
    done = _verify(plan)
    assert done.exit_code == 1 and "--calibrate" in done.output
    rows = {r["what"]: r for r in json.loads((plan.parent / "verify.json").read_text())["before"]["rows"]}
    assert rows["TPOT p50"]["error"] > 0.5  # every step twice as long, and the queue behind them
    done = _verify(plan, "--calibrate")
    assert done.exit_code == 0, done.output
    config = pipeline.load(plan)
    found = config.calibration.stages["generate"].service_time_scale
    assert found * 2 == pytest.approx(1.0, abs=0.1)  # the 2x put in is found and taken back
    assert (plan.parent / "pipeline.yaml.bak").read_text().count("calibration:") == 0
    after = json.loads((plan.parent / "verify.json").read_text())["after"]
    assert after["passed"] and after["calibrated"]


def test_a_calibration_from_another_recording_is_not_taken_as_this_one_s(plan):
    """A plan carrying a calibration measured elsewhere (here a hand-written 2x) that fails against this recording
    is pointed at --calibrate on it, which then corrects it -- not told that the calibration has done its part."""
    plan.write_text(plan.read_text() + "calibration: {source: elsewhere, stages: {generate: {service_time_scale: 2.0}}}\n")
    done = _verify(plan)
    assert done.exit_code == 1 and "--calibrate" in done.output and "(the file's calibration is from elsewhere)" \
        in done.output and "what the replay does not model" not in done.output
    assert _verify(plan, "--calibrate").exit_code == 0
