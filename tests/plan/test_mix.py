"""The cheapest mix of device types, solved exactly (an integer program through HiGHS): never dearer than the
best single-type line-up, cheaper where two types each suit a different stage; the planner's search uses it
where the combinations are too many to size one by one."""

from __future__ import annotations

import pytest

from loadprobe.plan.constraints import Constraints
from loadprobe.plan.planner import recommend

from .test_recommend import record

TWO_KINDS = {  # each suits another device: a fixed-shape INT8 backbone, and box decoding whose shapes change
    "decode": {"ms": 1.0},
    # memory-bound (240 FLOP/byte): the Inferentia2 moves 2.7x the L4's bytes per second, for less an hour
    "backbone": {"ms": 15.0, "flops": 3.6e11, "bytes": 1.5e9, "shapes": [(3, 640, 640)], "batch": 1},
    "nms": {"ms": 6.0, "flops": 4.0e9, "bytes": 8.0e7, "shapes": [(n, 4) for n in (3, 17, 40, 8, 91, 2, 55)]},
}
RATE = dict(min_rps=300, slo_p95_ms=60, precision=["int8-ok"], cpu_power_w=60)


@pytest.fixture(scope="module")
def portrait(tmp_path_factory):
    return record(tmp_path_factory.mktemp("mix"), TWO_KINDS, requests=40)


def _plan(portrait, engines: str):
    return recommend(portrait, Constraints.parse(engines=engines, **RATE), cpu_cores=2)


def test_the_mix_is_never_dearer_than_a_single_type_and_cheaper_when_two_types_suit_two_stages(portrait):
    mixed = _plan(portrait, "cpu,gpu:nvidia-l4,npu:aws-inferentia2")
    mix = mixed.mix
    assert mix is not None and mix["basis"] == "rented" and mix["solve_s"] >= 0
    singles = {k: v for k, v in mix["single_type"].items() if v is not None}
    assert singles and all(mix["cost"] <= v * (1 + 1e-6) for v in singles.values())
    assert mix["saving"] == pytest.approx((min(singles.values()) - mix["cost"]) / min(singles.values()), abs=1e-3)
    assert {mix["stages"]["backbone"], mix["stages"]["nms"]} == {"npu0", "gpu0"}, mix  # each stage its own type
    # the plans as judged: the recommended mix against the recommendation of each single-type line-up
    rec = mixed.recommended
    assert rec.tier == 0 and rec.tco["comparable"], mixed.verdict
    for engines in ("cpu,gpu:nvidia-l4", "cpu,npu:aws-inferentia2"):
        single = _plan(portrait, engines).recommended
        if single.tier == 0:
            assert rec.tco["total"] <= single.tco["total"] * (1 + 1e-6), (engines, single.sizing)


def test_the_plan_reports_the_mix_and_an_unpriced_line_up_has_none(portrait):
    from loadprobe.plan.files import plan_dict, render

    mixed = _plan(portrait, "cpu,gpu:nvidia-l4,npu:aws-inferentia2")
    assert plan_dict(mixed)["mix"] == mixed.mix and "cheapest mix (integer program" in render(mixed)
    unpriced = _plan(portrait, "cpu,gpu:nvidia-l4,npu:ascend-310p")  # the 310P: no price, no rate
    assert unpriced.mix is None and "cheapest mix" not in render(unpriced)


def test_a_power_budget_bounds_the_mix(portrait):
    from loadprobe.catalog import load_catalog

    l4 = load_catalog().get("nvidia-l4")
    plan = recommend(portrait, Constraints.parse(engines="cpu,gpu:nvidia-l4,npu:aws-inferentia2",
                                                 power_budget_w=60 + l4.max_power_w * 2, **RATE), cpu_cores=2)
    if plan.mix is not None:  # the Inferentia2's power is unpublished: under a budget it cannot be used
        assert plan.mix["units"].get("npu0", 0) == 0 and sum(plan.mix["units"].values()) <= 2


def test_the_search_solves_the_mix_when_the_combinations_are_too_many(portrait, monkeypatch):
    from loadprobe.plan import search

    monkeypatch.setattr(search, "MAX_COMBINATIONS", 1)  # as if there were 12 stages and 10 device types
    plan = _plan(portrait, "cpu,gpu:nvidia-l4,npu:aws-inferentia2")
    hybrid = next(o for o in [plan.recommended, *plan.alternatives] if o.name == "hybrid")
    assert any("solved as an integer program" in n for n in hybrid.notes), hybrid.notes
    unpriced = _plan(portrait, "cpu,gpu:nvidia-l4,npu:ascend-310p")
    hybrid = next(o for o in [unpriced.recommended, *unpriced.alternatives] if o.name == "hybrid")
    assert any("coordinate descent" in n for n in hybrid.notes), hybrid.notes
