"""The seeds' scenario table, reproduced from recordings made with the probe API."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

import loadprobe
from loadprobe import record_span, request
from loadprobe.cli import main
from loadprobe.plan.constraints import Constraints
from loadprobe.pipeline.files import loads
from loadprobe.pipeline.validation import validate_text
from loadprobe.plan.planner import recommend

from ..conftest import REPO

FIELDS = ("engine", "precision", "batch", "timeout_ms", "max_concurrency", "service_time_ms", "fallback")


def record(tmp_path, stages: dict, *, requests: int = 120, gap_ms: float = 4.0, jitter: float = 0.0, seed: int = 0):
    """Record ``requests`` requests whose stages take the given times, then analyse them.

    ``jitter``: each time is drawn lognormal around the given one with this sigma (``seed``: which
    draws), so that two recordings of one workload differ as real ones do.

    ``stages``: name -> {"ms": self time, "flops", "bytes", "shapes": [shape per request, cycled],
    "engine", "batch"}. Each request is a real request span; its stages are recorded with
    ``record_span`` inside it, back to back, and the request lasts until they are done.
    """
    import random

    rng = random.Random(seed)
    loadprobe.start(tmp_path / "data", service="scenario", sample_devices=False, flush_interval_s=0.05)
    for i in range(requests):
        with request(id=f"r{i}"):
            t = time.perf_counter_ns()
            for name, s in stages.items():
                dur = int(s["ms"] * 1e6 * (rng.lognormvariate(0.0, jitter) if jitter else 1.0))
                shapes = s.get("shapes")
                record_span(name, t, t + dur, engine=s.get("engine", "cpu"), batch=s.get("batch"),
                            shape=shapes[i % len(shapes)] if shapes else None,
                            flops=s.get("flops"), bytes=s.get("bytes"))
                t += dur
            while time.perf_counter_ns() < t:  # the request lasts as long as its stages
                time.sleep((t - time.perf_counter_ns()) / 1e9)
        time.sleep(gap_ms / 1000)
    loadprobe.stop()
    return loadprobe.analyze([str(tmp_path / "data")])


VISION = {
    "decode": {"ms": 2.0},  # host code: no FLOPs, no shapes
    # a heavy, frozen, fixed-shape backbone: compute-bound on every accelerator in the catalog
    "backbone": {"ms": 15.0, "flops": 3.6e11, "bytes": 2.0e7, "shapes": [(3, 640, 640)], "batch": 1},
    # box decoding and NMS: output sizes change with every image
    "nms": {"ms": 10.0, "flops": 2.0e6, "bytes": 4.0e5, "shapes": [(n, 4) for n in (3, 17, 40, 8, 91, 2, 55)]},
}
PRICES = ["nvidia-l4=2500", "ascend-310p=1500", "nvidia-a100-sxm-80gb=15000"]


def hybrid_of(plan):
    return next(o for o in [plan.recommended, *plan.alternatives] if o.name == "hybrid")


def test_inspection_line_up_cpu_decode_npu_backbone_gpu_nms(tmp_path):
    portrait = record(tmp_path, VISION, requests=40)
    constraints = Constraints.parse(engines="cpu,gpu:nvidia-l4x1,npu:ascend-310p", slo_p95_ms=50, min_rps=300,
                                    precision=["backbone=int8-ok"], prices=PRICES)
    plan = recommend(portrait, constraints, cpu_cores=4)
    assert plan.recommended.name == "hybrid", plan.verdict
    placed = {d.stage: d for d in plan.recommended.decisions}
    assert placed["decode"].kind == "cpu" and "host code" in placed["decode"].why["engine"]
    assert placed["backbone"].kind == "npu" and placed["backbone"].precision == "int8"
    assert placed["nms"].kind == "gpu"
    assert "dynamic shapes" in placed["nms"].why["engine"] and "ascend-310p" in placed["nms"].why["engine"]
    assert "roofline estimate" in placed["backbone"].why["service_time_ms"]
    for d in plan.recommended.decisions:  # every field has its reason
        assert set(FIELDS) <= set(d.why), d.stage
    assert plan.recommended.meets_slo
    # the single-engine line-ups cannot carry 300 req/s within 50 ms
    for alt in plan.alternatives:
        assert alt.meets_slo is False or not alt.feasible, alt.name
    assert placed["backbone"].fallback is None or placed["backbone"].fallback["max_ratio"] <= 0.3
    config = plan.to_pipeline()
    assert [s.name for s in config.stages] == list(VISION)  # in the order requests run them


def test_a_tight_power_budget_sends_the_frozen_backbone_to_the_npu(tmp_path):
    portrait = record(tmp_path, VISION, requests=40)
    constraints = Constraints.parse(engines="cpu,gpu:nvidia-l40s,npu:ascend-310p", slo_p95_ms=60, min_rps=60,
                                    power_budget_w=100, precision=["int8-ok"],
                                    prices=["nvidia-l40s=1000", "ascend-310p=1500"])
    plan = recommend(portrait, constraints, cpu_cores=2)
    placed = {d.stage: d for d in plan.recommended.decisions}
    assert placed["backbone"].kind == "npu" and placed["backbone"].precision == "int8"
    assert plan.recommended.estimate.power_w <= 100
    gpu = next(o for o in plan.alternatives if o.name == "all-gpu")
    assert gpu.meets_slo is False and any("power budget" in n for n in gpu.notes)  # cheaper, but 350 W TDP


EDGE = {  # a small frozen INT8-friendly backbone behind host-side decoding
    "decode": {"ms": 1.0},
    "backbone": {"ms": 2.0, "flops": 2.0e8, "bytes": 4.0e6, "shapes": [(3, 224, 224)], "batch": 1},
}


def test_the_power_budget_is_held_against_provisioned_power(tmp_path):
    """Issue #21.4: a 10 W budget with a 25 W Jetson and 2.5 W Hailo-8s, at a rate the host's two cores cannot
    carry alone: the backbone goes to the NPUs, and every plan whose units' summed maximum power exceeds the
    budget is excluded, however idle its units would be."""
    portrait = record(tmp_path, EDGE, requests=40)
    plan = recommend(portrait, Constraints.parse(engines="cpu,gpu:nvidia-jetson-orin-nx,npu:hailo-8",
                                                 power_budget_w=10, slo_p95_ms=20, min_rps=700,
                                                 precision=["int8-ok"], cpu_power_w=2), cpu_cores=2)
    rec = plan.recommended
    assert {d.stage: d.device for d in rec.decisions}["backbone"] == "hailo-8", plan.verdict
    units = rec.engines["npu0"]["count"]
    assert rec.meets_slo and rec.provisioned_w == 2 + 2.5 * units <= 10, rec.sizing
    for gpu in (o for o in [rec, *plan.alternatives] if o.name == "all-gpu"):
        assert gpu.tier == 3 and gpu.provisioned_w >= 2 + 25 > 10
        assert any("provisioned" in n and "over the power budget" in n for n in gpu.notes)
    assert plan.to_dict()["recommended"]["provisioned_power_w"] == rec.provisioned_w


def test_an_unknown_price_is_never_counted_as_zero(tmp_path):
    """Issue #21.1: without prices for the accelerators, costs are lower bounds, named, and plans are ranked on
    provisioned power and p95; the host CPU's power is counted in every plan (here: given)."""
    from loadprobe.plan.files import render

    portrait = record(tmp_path, VISION, requests=40)
    plan = recommend(portrait, Constraints.parse(slo_p95_ms=500, min_rps=150, precision=["backbone=int8-ok"],
                                                 cpu_power_w=120), cpu_cores=4)
    options = [plan.recommended, *plan.alternatives]
    for o in options:
        if o.tco is None:
            continue
        assert o.tco["electricity"] > 0  # the host draws power in every plan
        uses_accelerator = any(e["kind"] != "cpu" for e in o.engines.values())
        assert o.tco["comparable"] is not uses_accelerator, (o.name, o.tco["unknown"])
        if uses_accelerator:
            assert any(u.endswith(" price") for u in o.tco["unknown"])
    table = render(plan)
    assert ">= " in table and "cost not comparable" in plan.verdict or plan.recommended.name == "all-cpu"
    feasible = [o for o in options if o.feasible and o.tier == 0]
    if len(feasible) > 1 and not all(o.tco["comparable"] for o in feasible):
        assert plan.recommended.provisioned_w == min(o.provisioned_w for o in feasible)
        assert "recommended on known figures" in plan.recommended.notes[-1] or \
            any("recommended on known figures" in n for n in plan.recommended.notes)


def test_at_scale_the_seeds_line_up_comes_out_where_the_npu_is_cheaper_per_unit_of_backbone_throughput(tmp_path):
    """Issue #21.2: the same recording and rate, only the prices differ. Where an NPU costs less per unit of
    backbone throughput the plan buys NPUs for the INT8 backbone and keeps NMS on a GPU (the seeds' line-up);
    where GPUs are the cheaper way to add throughput, it buys GPUs only."""
    portrait = record(tmp_path, VISION, requests=40)

    def plan(prices):
        return recommend(portrait, Constraints.parse(slo_p95_ms=60, min_rps=600, precision=["backbone=int8-ok"],
                                                     prices=prices, cpu_power_w=100), cpu_cores=8)

    cheap_npu = plan(["nvidia-l4=8000", "ascend-310p=1000"])
    placed = {d.stage: d for d in cheap_npu.recommended.decisions}
    assert cheap_npu.recommended.tier == 0, cheap_npu.verdict
    assert (placed["decode"].kind, placed["backbone"].device, placed["backbone"].precision, placed["nms"].kind) == \
        ("cpu", "ascend-310p", "int8", "gpu")
    assert cheap_npu.recommended.engines["npu0"]["count"] > 1  # at scale: more than one NPU to buy
    cheap_gpu = plan(["nvidia-l4=1000", "ascend-310p=8000"])
    assert cheap_gpu.recommended.tier == 0 and \
        {d.kind for d in cheap_gpu.recommended.decisions if d.stage != "decode"} == {"gpu"}, cheap_gpu.verdict


def test_rented_plans_are_priced_by_hourly_rates_the_catalogs_or_the_users(tmp_path):
    """Issue #21.1: the plans follow the seeds' formula in rent mode too: rate x units x hours x years."""
    from loadprobe.catalog import load_catalog
    from loadprobe.estimate.tco import HOURS_PER_YEAR

    portrait = record(tmp_path, VISION, requests=40)
    plan = recommend(portrait, Constraints.parse(engines="cpu,gpu:nvidia-a10", slo_p95_ms=100, min_rps=300,
                                                 precision=["int8-ok"], rent=True), cpu_cores=4)
    rec = plan.recommended
    units = sum(e["count"] for e in rec.engines.values() if e["device"] == "nvidia-a10")
    rate = load_catalog().get("nvidia-a10").hourly_usd
    assert units and rec.tco["comparable"] and rec.tco["mode"] == "rent" and rec.tco["electricity"] == 0
    assert rec.tco["total"] == pytest.approx(rate * units * HOURS_PER_YEAR * 3)
    given = recommend(portrait, Constraints.parse(engines="cpu,gpu:nvidia-l4", slo_p95_ms=100, min_rps=300,
                                                  precision=["int8-ok"], rent=True,
                                                  hourly_rates=["nvidia-l4=0.5"]), cpu_cores=4)
    l4 = sum(e["count"] for e in given.recommended.engines.values() if e["device"] == "nvidia-l4")
    assert given.recommended.tco["total"] == pytest.approx(0.5 * l4 * HOURS_PER_YEAR * 3)
    unknown = recommend(portrait, Constraints.parse(engines="cpu,npu:ascend-310p", slo_p95_ms=100, min_rps=300,
                                                    precision=["int8-ok"], rent=True), cpu_cores=4)
    if any(e["kind"] != "cpu" for e in unknown.recommended.engines.values()):
        assert "ascend-310p hourly rate" in unknown.recommended.tco["unknown"]


def test_with_every_price_known_the_cheapest_feasible_plan_is_recommended(tmp_path):
    """Issue #21.1/#21.8: one rule for the recommendation, the verdict and the tables."""
    llm = {
        "tokenize": {"ms": 0.05},
        "prefill": {"ms": 8.0, "flops": 4.0e10, "bytes": 4.0e7, "shapes": [(512,)]},
        "decode": {"ms": 12.0, "flops": 6.0e8, "bytes": 3.0e8, "shapes": [(1,)]},
    }
    portrait = record(tmp_path, llm, requests=40)
    plan = recommend(portrait, Constraints.parse(min_rps=40, prices=PRICES, cpu_power_w=100), cpu_cores=4)
    options = [plan.recommended, *plan.alternatives]
    feasible = [o for o in options if o.feasible and o.tier == 0]
    assert feasible and all(o.tco["comparable"] for o in feasible)
    cheapest = min(o.tco["total"] for o in feasible)
    assert plan.recommended.tier == 0 and plan.recommended.tco["total"] <= 1.01 * cheapest
    for o in plan.alternatives:  # the verdict says the same as the figures
        if o.tier == 0 and o.tco["total"] > 1.01 * plan.recommended.tco["total"]:
            assert f"vs {o.name}: cheaper to own" in plan.verdict


def test_fp16_only_backbone_goes_to_the_gpu(tmp_path):
    portrait = record(tmp_path, VISION, requests=40)
    plan = recommend(portrait, Constraints.parse(engines="cpu,gpu:nvidia-l4,npu:ascend-310px2", slo_p95_ms=300,
                                                 min_rps=100, precision=["fp16-only"], prices=PRICES), cpu_cores=1)
    backbone = next(d for d in hybrid_of(plan).decisions if d.stage == "backbone")
    assert backbone.kind == "gpu" and backbone.precision == "fp16"


def test_a_model_that_changes_often_stays_off_the_npu(tmp_path):
    portrait = record(tmp_path, VISION, requests=40)
    plan = recommend(portrait, Constraints.parse(engines="cpu,gpu:nvidia-l4,npu:ascend-310px2", slo_p95_ms=50,
                                                 min_rps=300, precision=["int8-ok"], changes_often=["backbone"],
                                                 prices=PRICES), cpu_cores=4)
    backbone = next(d for d in hybrid_of(plan).decisions if d.stage == "backbone")
    assert backbone.kind == "gpu"
    assert "changes often" in backbone.why["engine"]


def test_a_p99_target_is_checked_too(tmp_path):
    portrait = record(tmp_path, VISION, requests=40)
    loose = recommend(portrait, Constraints.parse(slo_p95_ms=500, min_rps=5, prices=PRICES), cpu_cores=4)
    assert loose.recommended.meets_slo and loose.recommended.estimate.p99_ms >= loose.recommended.estimate.p95_ms
    tight = recommend(portrait, Constraints.parse(slo_p95_ms=500, slo_p99_ms=1, min_rps=5, prices=PRICES),
                      cpu_cores=4)
    assert tight.recommended.meets_slo is False
    assert any("p99 target" in n for n in tight.recommended.notes)


def test_a_light_load_needs_no_accelerator(tmp_path):
    portrait = record(tmp_path, VISION, requests=40)
    plan = recommend(portrait, Constraints.parse(slo_p95_ms=500, min_rps=5, prices=PRICES), cpu_cores=4)
    assert plan.recommended.name in ("hybrid", "all-cpu")
    assert {d.kind for d in plan.recommended.decisions} == {"cpu"}


def test_prefill_and_decode_are_split(tmp_path):
    llm = {  # per request: prefill is ~1000 FLOP/byte, decode ~2 FLOP/byte
        "prefill": {"ms": 40.0, "flops": 4.0e10, "bytes": 4.0e7, "shapes": [(512,)]},
        "decode": {"ms": 60.0, "flops": 6.0e9, "bytes": 3.0e9, "shapes": [(1,)]},
    }
    portrait = record(tmp_path, llm, requests=20)
    plan = recommend(portrait, Constraints.parse(engines="cpu,gpu:nvidia-a100-sxm-80gb", slo_p95_ms=400,
                                                 min_rps=60, prices=PRICES), cpu_cores=4)
    assert plan.scenario in ("llm-prefill-decode-split", "mixed") and "prefill" in plan.scenario_why
    placed = {d.stage: d for d in hybrid_of(plan).decisions}
    assert "compute-bound" in placed["prefill"].why["engine"], placed["prefill"].why["engine"]
    assert "memory-bound" in placed["decode"].why["engine"], placed["decode"].why["engine"]


def test_the_plan_says_how_many_units_to_buy_and_when_its_bounds_are_too_few(tmp_path):
    """Issue #21.2: counts are upper bounds; the plan buys the fewest units that carry the rate and 1.5x it."""
    llm = {
        "prefill": {"ms": 40.0, "flops": 4.0e10, "bytes": 4.0e7, "shapes": [(512,)]},
        "decode": {"ms": 60.0, "flops": 6.0e9, "bytes": 3.0e9, "shapes": [(1,)]},
    }
    portrait = record(tmp_path, llm, requests=20)
    # At 300 req/s (450 at the 1.5x stress) one A100 and two L4s cannot carry decode's bytes.
    few = recommend(portrait, Constraints.parse(engines="cpu,gpu:nvidia-l4x2,gpu:nvidia-a100-sxm-80gbx1",
                                                slo_p95_ms=400, min_rps=300, prices=PRICES), cpu_cores=4)
    assert not few.recommended.meets_slo and few.recommended.tier == 1, few.verdict
    assert "no count within the bounds meets every target" in few.recommended.sizing
    # Allowed more, it buys units until the targets hold (at least two: one of either cannot carry it).
    plan = recommend(portrait, Constraints.parse(engines="cpu,gpu:nvidia-l4x8,gpu:nvidia-a100-sxm-80gbx8",
                                                 slo_p95_ms=400, min_rps=300, prices=PRICES), cpu_cores=4)
    rec = plan.recommended
    assert rec.meets_slo and rec.tier == 0, plan.verdict
    bought = {e["device"]: e["count"] for e in rec.engines.values() if e["kind"] != "cpu"}
    assert sum(bought.values()) >= 2 and "the fewest units that meet every target" in rec.sizing, rec.sizing
    assert plan.to_pipeline().engines[next(n for n, e in rec.engines.items() if e["kind"] != "cpu")].count >= 1
    plans = plan.to_dict()["recommended"]
    assert {b["device"]: b["count"] for b in plans["buy"]} == bought
    # every decision's engine is one the plan buys
    assert {d.device for d in rec.decisions if d.kind != "cpu"} <= set(bought)


def test_power_budget_scenario_and_plans_file(tmp_path):
    portrait = record(tmp_path, VISION)
    runner = CliRunner()
    portrait_path = portrait.save(tmp_path / "portrait.json")
    out = tmp_path / "plan" / "pipeline.yaml"
    result = runner.invoke(main, ["recommend", str(portrait_path), "-o", str(out), "--power-budget-w", "40",
                                  "--precision", "int8-ok", "--engines", "cpu,gpu:nvidia-l4,npu:ascend-310p",
                                  "--price", "nvidia-l4=2500", "--price", "ascend-310p=1500"])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert validate_text(text, str(out)) == []
    config = loads(text)
    assert config.why["scenario"].startswith(("edge-power-bound", "mixed"))
    plans = json.loads((out.parent / "plans.json").read_text())
    names = [plans["recommended"]["name"]] + [a["name"] for a in plans["alternatives"]]
    assert {"hybrid", "all-gpu", "all-npu", "all-cpu"} >= set(names) and len(names) >= 3
    assert "estimate" in plans["estimates_are"]
    # nothing is overwritten without --force
    again = runner.invoke(main, ["recommend", str(portrait_path), "-o", str(out)])
    assert again.exit_code == 2 and "--force" in again.output
    # -o naming a folder, as analyze's does: pipeline.yaml and plans.json go inside it, nothing beside it
    for folder in (tmp_path / "plan-folder", tmp_path / "plan"):
        done = runner.invoke(main, ["recommend", str(portrait_path), "-o", str(folder), "--force"])
        assert done.exit_code == 0, done.output
        assert folder.is_dir() and {"pipeline.yaml", "plans.json"} <= {p.name for p in folder.iterdir()}
    assert not (tmp_path / "plans.json").exists()


@pytest.mark.parametrize("args, message", [
    (["--engines", "tpu"], "KIND"),
    (["--engines", "gpu:nvidia-x9"], "not in the hardware catalog"),
    (["--engines", "cpu,gpu:"], "'gpu:' names no device after the colon"),
    (["--precision", "int4-ok"], "fp16-only, int8-ok"),
    (["--slo-p95-ms", "-5"], "positive"),
    (["--precision", "decod=int8-ok"], "--precision: no stage 'decod' in the portrait; its stages are decode"),
    (["--changes-often", "decode,nms"], "--changes-often: no stage 'nms'"),
    (["--price", "nvidia-l5=100"], "'nvidia-l5' is not in the hardware catalog"),
])
def test_bad_constraints_are_one_line_errors(tmp_path, args, message):
    portrait = record(tmp_path, {"decode": {"ms": 1.0}}, requests=10)
    path = portrait.save(tmp_path / "portrait.json")
    result = CliRunner().invoke(main, ["recommend", str(path), "-o", str(tmp_path / "p.yaml"), *args])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["vision", "llm"])
def test_committed_sample_recordings_get_a_plan_that_meets_its_slo(name, tmp_path):
    data = REPO / "samples" / "data" / name
    if not data.exists():
        pytest.skip(f"samples/data/{name} is not recorded")
    portrait = loadprobe.analyze([str(data)])
    plan = recommend(portrait, Constraints.parse(precision=["int8-ok"],
                                                 prices=["nvidia-l4=2500", "ascend-310p=1500"]))
    assert plan.recommended.meets_slo
    assert validate_text(_dump(plan), name) == []
    # it beats every single-engine plan on cost, or the verdict says why it does not
    for alt in plan.alternatives:
        rec_cost, alt_cost = plan.recommended.tco["total"], alt.tco["total"]
        if alt.meets_slo and alt.tco["comparable"] and rec_cost > 1.01 * alt_cost:
            assert f"{alt.name} also meets the targets" in plan.verdict


def _dump(plan) -> str:
    from loadprobe.pipeline.files import dump

    return dump(plan.to_pipeline())


def test_public_api_survives_repeated_calls(tmp_path):
    portrait = record(tmp_path, VISION, requests=20)
    first = loadprobe.recommend(portrait, Constraints.parse(slo_p95_ms=500, min_rps=5))
    second = loadprobe.recommend(portrait, Constraints.parse(slo_p95_ms=500, min_rps=5))
    assert first.recommended.name == second.recommended.name


def test_without_an_slo_a_saturated_plan_never_counts_as_meeting_the_targets(tmp_path):
    portrait = record(tmp_path, VISION, requests=20)
    portrait.requests = None  # no request latency: no default SLO
    plan = recommend(portrait, Constraints.parse(engines="cpu,gpu:nvidia-l4", min_rps=100), cpu_cores=2)
    cpu = next(o for o in [plan.recommended, *plan.alternatives] if o.name == "all-cpu")
    assert cpu.meets_slo is False and any("cannot carry" in n for n in cpu.notes)
    assert plan.recommended.meets_slo is not False and plan.recommended.name != "all-cpu"
    for d in plan.recommended.decisions:  # windows stay online-short without an SLO
        assert d.window_ms <= 100


def test_devices_without_figures_are_never_free_or_fast(tmp_path):
    portrait = record(tmp_path, VISION, requests=20)
    # the 910B publishes neither peaks nor a TDP in the catalog
    plan = recommend(portrait, Constraints.parse(engines="cpu,npu:ascend-910bx4", slo_p95_ms=500, min_rps=5,
                                                 precision=["int8-ok"]), cpu_cores=4)
    hybrid = hybrid_of(plan)
    backbone = next(d for d in hybrid.decisions if d.stage == "backbone")
    assert backbone.kind == "cpu"
    assert "ascend-910b publishes no" in backbone.why["engine"]


def test_many_stages_are_placed_by_an_integer_program_or_else_by_coordinate_descent(tmp_path):
    """3^13 combinations are too many to size one by one: priced, the cheapest mix is solved (issue #36.4);
    with a device that has no price, a coordinate descent ranks on what is known."""
    stages = {f"layer{i}": dict(VISION["backbone"], ms=1.0) for i in range(13)}
    portrait = record(tmp_path, stages, requests=10)
    for prices, method in ((PRICES, "solved as an integer program"), ((), "coordinate descent")):
        plan = recommend(portrait, Constraints.parse(engines="cpu,gpu:nvidia-l4,npu:ascend-310p", slo_p95_ms=400,
                                                     min_rps=50, prices=prices, rent=False), cpu_cores=2)
        hybrid = hybrid_of(plan)
        assert any(method in n for n in hybrid.notes), hybrid.notes
        assert hybrid.meets_slo


def test_the_cpu_engine_is_sized_from_the_recorded_cores(tmp_path):
    import os

    portrait = record(tmp_path, VISION, requests=10)
    assert set(portrait.data_quality.host_hardware.values().__iter__().__next__()) >= {"logical_cores"}
    plan = recommend(portrait, Constraints.parse(slo_p95_ms=500, min_rps=5))
    cpu = plan.recommended.engines["cpu"]
    assert cpu["servers"] == os.cpu_count() and "run.json" in cpu["why"]


def test_alternatives_are_simulated_and_the_plan_is_tuned_by_simulation(tmp_path):
    portrait = record(tmp_path, VISION, requests=40)
    constraints = Constraints.parse(engines="cpu,gpu:nvidia-l4x1,npu:ascend-310p", slo_p95_ms=50, min_rps=300,
                                    precision=["backbone=int8-ok"], prices=PRICES)
    plan = recommend(portrait, constraints, cpu_cores=4)
    rec = plan.recommended
    for option in [rec, *plan.alternatives]:
        if option.feasible and option.estimate.p95_ms is not None:
            assert option.estimate.method.startswith("discrete-event simulation"), option.name
            assert option.estimate.failed_share is not None
    # every combination of windows and caps was tried at the rate and at 1.5x
    batched = any(d.batch > 1 for d in rec.decisions)
    caps = any(d.fallback for d in rec.decisions)
    assert len(rec.tuning) == (3 if batched else 1) * (3 if caps else 1)
    assert any(t["window_factor"] == 1.0 and t["failover_max_ratio"] is None for t in rec.tuning)  # as planned
    assert all(t["stress_p95_ms"] is not None for t in rec.tuning)
    kept = [t for t in rec.tuning if t["meets_targets"]]
    assert kept and rec.meets_slo
    # a changed window or cap is what the pipeline holds, and its why says it was tuned
    best = min(rec.tuning, key=lambda t: (not t["meets_targets"], round(t["stress_failed_share"], 3),
                                          t["stress_p95_ms"], abs(__import__("math").log(t["window_factor"])),
                                          t["failover_max_ratio"] is not None))
    for d in rec.decisions:
        if d.batch > 1 and best["window_factor"] != 1.0:
            assert "tuned by simulation" in d.why["batch"]
        if d.fallback and best["failover_max_ratio"] is not None:
            assert d.fallback["max_ratio"] == best["failover_max_ratio"]
    assert "simulated estimate" in plan.to_dict()["estimates_are"]
    # the stress estimate of every option is at the one stress factor, analytic or simulated
    from loadprobe.plan.targets import STRESS

    for option in [rec, *plan.alternatives]:
        if option.feasible:
            assert option.stress.rate_rps == pytest.approx(plan.rate_rps * STRESS), option.name


def _sample_portrait() -> dict:
    return loadprobe.analyze([str(REPO / "samples" / "data" / "vision")]).to_dict()


def _stage_latency(document: dict, value) -> dict:
    document["stages"][1]["latency_ms"]["p50"] = value
    return document


@pytest.mark.parametrize("content, message", [
    ([1, 2, 3], "holds [1, 2, 3], not a loadprobe portrait (a JSON object)"),
    (lambda d: {**d, "stages": "oops"}, 'field stages: expected a list, got "oops"'),
    (lambda d: _stage_latency(d, "fast"), 'field stages[1].latency_ms.p50: expected a finite number, got "fast"'),
    (lambda d: {k: v for k, v in d.items() if k != "data_quality"}, "missing 'data_quality'"),
])
def test_a_malformed_portrait_is_refused_naming_the_file_and_field(tmp_path, content, message):
    path = tmp_path / "portrait.json"
    path.write_text(json.dumps(content(_sample_portrait()) if callable(content) else content))
    for command in (["recommend", str(path), "-o", str(tmp_path / "plan" / "pipeline.yaml")],
                    ["report", str(path), "-o", str(tmp_path / "r.html")]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 2, result.output
        [line] = result.output.strip().splitlines()
        assert line.startswith(f"loadprobe: error: {path}: {message}"), line


def test_a_malformed_plans_json_is_refused_by_report_and_simulate(tmp_path):
    portrait = tmp_path / "portrait.json"
    portrait.write_text(json.dumps(_sample_portrait()))
    out = tmp_path / "plan" / "pipeline.yaml"
    assert CliRunner().invoke(main, ["recommend", str(portrait), "-o", str(out)]).exit_code == 0
    plans = json.loads((out.parent / "plans.json").read_text())
    plans["recommended"]["stages"][0]["batch"] = "x"
    bad = tmp_path / "bad-plans.json"
    bad.write_text(json.dumps(plans))
    message = "field recommended.stages[0].batch: 'x' is not of type 'integer', 'null'"
    for command in (["report", str(portrait), "--plans", str(bad), "-o", str(tmp_path / "r.html")],
                    ["simulate", str(bad), "--rate", "5", "-o", str(tmp_path / "sim")]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 2, result.output
        assert len(result.output.strip().splitlines()) == 1 and f"{bad}: not a plans.json" in result.output
        assert message in result.output


def test_engine_names_map_to_one_kind_everywhere():
    """Profiles, the planner's recorded kind and the simulator's recorded times read engine names alike."""
    from types import SimpleNamespace

    from loadprobe.plan.context import recorded_kind
    from loadprobe.estimate.servicetime import engine_kind

    assert [engine_kind(e) for e in ("gpu0", "GPU1", "cuda:1", "npu0", "cpu", "host", "tpu0")] == \
        ["gpu", "gpu", "gpu", "npu", "cpu", "cpu", "cpu"]
    # a stage recorded on several engines counts as recorded on the GPU if any of them is one, else an NPU
    assert recorded_kind(SimpleNamespace(engines={"cpu": 3, "npu0": 1, "cuda:0": 1})) == "gpu"
    assert recorded_kind(SimpleNamespace(engines={"cpu": 3, "npu1": 1})) == "npu"
    assert recorded_kind(SimpleNamespace(engines=None)) == "cpu"


def test_the_planner_keeps_within_the_pipeline_schemas_limits():
    """The limits a plan's settings are capped at are the schema's own, so a written plan always loads."""
    from loadprobe import pipeline
    from loadprobe.plan import sizing

    defs = pipeline.schema()["$defs"]
    assert sizing.MAX_TIMEOUT_MS == defs["ms"]["maximum"]
    assert sizing.MAX_WINDOW_MS == defs["stage"]["properties"]["batch"]["properties"]["max_wait_ms"]["maximum"]
    assert sizing.MAX_QUEUE == defs["engine"]["properties"]["max_queue"]["maximum"]
    assert sizing.MAX_CONCURRENCY == defs["engine"]["properties"]["max_concurrency"]["maximum"]
    assert sizing.MAX_CONCURRENCY <= defs["stage"]["properties"]["max_concurrency"]["maximum"]


def test_a_dataflow_npu_is_estimated_from_compute_where_its_model_fits_on_chip(tmp_path):
    """Issue #36.3: the Hailo-8 keeps weights on chip (no DRAM, no bandwidth): its time comes from compute alone,
    so at a rate the host's two cores carry but not 1.5x it (not saturated, where an unscaled time used to
    exclude it), the 10 W edge plan puts the backbone on it -- and a model too big for its on-chip memory is
    excluded with that reason."""
    from loadprobe.catalog import load_catalog

    hailo = load_catalog().get("hailo-8")
    assert hailo.weights_on_chip and hailo.on_chip_bytes
    lineup = dict(engines="cpu,gpu:nvidia-jetson-orin-nx,npu:hailo-8", power_budget_w=10, precision=["int8-ok"],
                  cpu_power_w=2, min_rps=450, slo_p95_ms=20)
    portrait = record(tmp_path / "small", EDGE, requests=40)
    plan = recommend(portrait, Constraints.parse(**lineup), cpu_cores=2)
    backbone = {d.stage: d for d in plan.recommended.decisions}["backbone"]
    assert backbone.device == "hailo-8" and backbone.service.source == "roofline-estimate", plan.verdict
    assert "weights on chip" in backbone.service.how and plan.recommended.meets_slo
    assert plan.recommended.provisioned_w <= 10
    big = dict(EDGE, backbone=dict(EDGE["backbone"], bytes=hailo.on_chip_bytes * 8))  # 2x the chip at int8 from fp32
    plan = recommend(record(tmp_path / "big", big, requests=40), Constraints.parse(**lineup), cpu_cores=2)
    hybrid = hybrid_of(plan)
    backbone = {d.stage: d for d in hybrid.decisions}["backbone"]
    assert backbone.device != "hailo-8"
    assert "may not fit hailo-8" in backbone.why["engine"], backbone.why["engine"]


def test_the_host_cpu_is_an_engine_for_stages_recorded_elsewhere_by_its_recorded_rates(tmp_path):
    """Issue #36.3: a stage recorded on a GPU is estimated on the host CPU from the host's own recording --
    the most FLOP/s and bytes/s a CPU stage achieved there -- and, where no CPU stage shows them, the CPU is
    excluded for a reason that says what to record."""
    def stages(cpu_figures: bool) -> dict:
        return {"decode": {"ms": 1.0},
                "preprocess": {"ms": 2.0, "shapes": [(3, 224, 224)],
                               **({"flops": 2e8, "bytes": 4e7} if cpu_figures else {})},
                "embed": {"ms": 1.5, "flops": 3e9, "bytes": 2e8, "shapes": [(1, 512)], "engine": "gpu"}}

    lineup = Constraints.parse(engines="cpu,gpu:nvidia-l4", min_rps=100)
    plan = recommend(record(tmp_path / "shown", stages(True), requests=30), lineup, cpu_cores=2)
    on_cpu = {d.stage: d for d in next(o for o in plan.alternatives + [plan.recommended]
                                       if o.name == "all-cpu").decisions}["embed"]
    assert on_cpu.kind == "cpu" and on_cpu.service.source == "roofline-estimate"
    assert "the host CPU's best recorded rates" in on_cpu.service.how
    # never faster than the host has shown: 3 GFLOP at the most FLOP/s a CPU stage achieved (2e8 in 2 ms)
    assert on_cpu.service.mean_ms >= 3e9 / (2e8 / 2e-3) * 1000 * 0.99
    plan = recommend(record(tmp_path / "unshown", stages(False), requests=30), lineup, cpu_cores=2)
    embed = {d.stage: d for d in hybrid_of(plan).decisions}["embed"]
    assert "the host CPU's rates are unknown" in embed.why["engine"] and "flops=" in embed.why["engine"]


@pytest.mark.parametrize("option, value, message", [
    ("--min-rps", "1e12", "--min-rps 1e+12: above the most a plan holds (1e+07)"),
    ("--slo-p95-ms", "1e9", "--slo-p95-ms 1e+09: above the most a plan holds (3.6e+06)"),
])
def test_a_target_no_plan_can_hold_is_refused_up_front(tmp_path, option, value, message):
    path = tmp_path / "portrait.json"
    path.write_text(json.dumps(_sample_portrait()))
    result = CliRunner().invoke(main, ["recommend", str(path), option, value, "-o", str(tmp_path / "p")])
    assert result.exit_code == 2 and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "p").exists()


@pytest.mark.parametrize("engines", ["", " , "])
def test_an_empty_engines_list_is_refused_not_taken_for_the_default(tmp_path, engines):
    path = tmp_path / "portrait.json"
    path.write_text(json.dumps(_sample_portrait()))
    result = CliRunner().invoke(main, ["recommend", str(path), "--engines", engines, "-o", str(tmp_path / "p")])
    assert result.exit_code == 2 and "--engines is empty" in result.output, result.output
    assert not (tmp_path / "p").exists()


def test_power_may_cost_nothing_but_not_less(tmp_path):
    path = tmp_path / "portrait.json"
    path.write_text(json.dumps(_sample_portrait()))
    def run(price, folder):
        return CliRunner().invoke(main, ["recommend", str(path), "--price-per-kwh", price, "-o",
                                         str(tmp_path / folder / "p.yaml")])

    free = run("0", "a")
    assert free.exit_code == 0, free.output  # as loadprobe tco takes it
    below = run("-1", "b")
    assert below.exit_code == 2 and "--price-per-kwh -1 must be 0 or more" in below.output


def test_a_stage_renamed_for_the_plan_is_shown_by_both_names(tmp_path):
    """A recorded name that cannot name a plan's stage (Chinese: not a Triton folder or a Ray Serve name) is
    renamed in pipeline.yaml; the terminal's table shows the name to wire an executor by, and the recorded one."""
    portrait = record(tmp_path, {"特征提取": {"ms": 1.0}, "decode": {"ms": 0.5}}, requests=40)
    path = portrait.save(tmp_path / "portrait.json")
    result = CliRunner().invoke(main, ["recommend", str(path), "--engines", "cpu", "-o", str(tmp_path / "plan")])
    assert result.exit_code == 0, result.output
    config = loads((tmp_path / "plan" / "pipeline.yaml").read_text())
    renamed = next(s for s in config.stages if s.recorded == "特征提取")
    assert f"{renamed.name} (recorded '特征提取')" in result.output
    assert "decode (recorded" not in result.output and "decode " in result.output
