"""Issue #21.8: the seeds' scenario table, each row from recorded spans, planned, and checked for its answer.

The five rows of the first source article's table (docs/recommend.md#the-seeds-scenario-table shows each
recording, plan and why); the seeds' inspection line-up is test_recommend.py's
test_inspection_line_up_cpu_decode_npu_backbone_gpu_nms.
"""

from __future__ import annotations

from loadprobe.plan.constraints import Constraints
from loadprobe.plan.planner import recommend

from .test_recommend import record

DECODE = {"ms": 1.0}  # host code in front of every model: no FLOPs, no shapes
FIXED_INT8_BACKBONE = {"ms": 8.0, "flops": 8.0e10, "bytes": 4.0e7, "shapes": [(3, 640, 640)], "batch": 1}


def _placed(plan) -> dict:
    return {d.stage: d for d in plan.recommended.decisions}


def scenario_frozen_small_batch_high_concurrency_power_sensitive(tmp_path):
    portrait = record(tmp_path, {"decode": DECODE, "backbone": FIXED_INT8_BACKBONE}, requests=60)
    return recommend(portrait, Constraints.parse(engines="cpu,gpu:nvidia-l40s,npu:ascend-310p", min_rps=400,
                                                 slo_p95_ms=100, power_budget_w=300, precision=["int8-ok"],
                                                 cpu_power_w=60), cpu_cores=4)


def scenario_changing_model_varied_operators_large_batches(tmp_path):
    backbone = {"ms": 30.0, "flops": 2.0e11, "bytes": 2.0e8, "batch": 16,
                "shapes": [(16, 3, h, w) for h, w in ((480, 640), (720, 1280), (512, 512), (1080, 1920))]}
    portrait = record(tmp_path, {"decode": DECODE, "backbone": backbone}, requests=60)
    return recommend(portrait, Constraints.parse(min_rps=300, slo_p95_ms=2000, precision=["int8-ok"],
                                                 changes_often=["backbone"], cpu_power_w=60), cpu_cores=4)


def scenario_edge_very_low_power_simple_model(tmp_path):
    simple = {"ms": 2.0, "flops": 2.0e8, "bytes": 4.0e6, "shapes": [(3, 224, 224)], "batch": 1}
    portrait = record(tmp_path, {"decode": DECODE, "classifier": simple}, requests=60)
    return recommend(portrait, Constraints.parse(engines="cpu,gpu:nvidia-jetson-orin-nx,npu:hailo-8", min_rps=700,
                                                 slo_p95_ms=20, power_budget_w=10, precision=["int8-ok"],
                                                 cpu_power_w=2), cpu_cores=2)


def scenario_mixed_training_and_inference(tmp_path):
    portrait = record(tmp_path, {"decode": DECODE, "backbone": FIXED_INT8_BACKBONE}, requests=60)
    # retrained continuously: a new model every cycle (--changes-often), float weights (fp16-only)
    return recommend(portrait, Constraints.parse(min_rps=800, slo_p95_ms=100, precision=["fp16-only"],
                                                 changes_often=["backbone"], cpu_power_w=60), cpu_cores=4)


def scenario_ultra_low_latency_single_requests_medium_model(tmp_path):
    medium = {"ms": 25.0, "flops": 2.0e11, "bytes": 2.0e8, "shapes": [(1, 3, 512, 512)], "batch": 1}
    portrait = record(tmp_path, {"decode": DECODE, "model": medium}, requests=60)
    return recommend(portrait, Constraints.parse(engines="cpu,gpu:nvidia-h100-sxm,npu:ascend-310p", min_rps=50,
                                                 slo_p95_ms=8, precision=["int8-ok"], cpu_power_w=60), cpu_cores=4)


def test_frozen_model_small_batch_high_concurrency_power_sensitive_goes_to_the_accelerator(tmp_path):
    plan = scenario_frozen_small_batch_high_concurrency_power_sensitive(tmp_path)
    backbone = _placed(plan)["backbone"]
    assert backbone.kind == "npu" and backbone.precision == "int8", plan.verdict
    assert plan.recommended.meets_slo and plan.recommended.provisioned_w <= 300
    assert _placed(plan)["decode"].kind == "cpu"


def test_a_changing_model_with_varied_operators_and_large_batches_goes_to_the_gpu(tmp_path):
    plan = scenario_changing_model_varied_operators_large_batches(tmp_path)
    backbone = _placed(plan)["backbone"]
    assert backbone.kind == "gpu", plan.verdict
    npu = [w for w in backbone.why["engine"].split("; ") if "npu0" in w]
    assert "changes often" in backbone.why["engine"] or "dynamic shapes" in backbone.why["engine"], npu


def test_the_edge_at_very_low_power_runs_a_simple_model_on_the_npu(tmp_path):
    plan = scenario_edge_very_low_power_simple_model(tmp_path)
    assert _placed(plan)["classifier"].device == "hailo-8", plan.verdict
    assert plan.recommended.provisioned_w <= 10


def test_mixed_training_and_inference_goes_to_the_gpu(tmp_path):
    plan = scenario_mixed_training_and_inference(tmp_path)
    backbone = _placed(plan)["backbone"]
    assert backbone.kind == "gpu" and backbone.precision in ("fp16", "bf16"), plan.verdict
    assert "changes often" in backbone.why["engine"]


def test_ultra_low_latency_single_requests_go_to_an_accelerator_or_a_high_end_gpu(tmp_path):
    plan = scenario_ultra_low_latency_single_requests_medium_model(tmp_path)
    model = _placed(plan)["model"]
    assert model.kind in ("gpu", "npu") and model.batch == 1, plan.verdict
    assert model.device in ("nvidia-h100-sxm", "ascend-310p")
    assert plan.recommended.meets_slo and plan.recommended.estimate.p95_ms <= 8
