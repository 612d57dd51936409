"""The plan's targets, resolved once: the sizing rate and its stress, the p95 given or derived, the p99 and power
budget as given -- and every file the plan writes says the same."""

from __future__ import annotations

import pytest

import loadprobe
from loadprobe import LoadprobeError
from loadprobe.plan.constraints import Constraints
from loadprobe.plan.targets import RECORDED_SLO_SLACK, STRESS, resolve

from ..conftest import REPO

VISION = str(REPO / "samples" / "data" / "vision")


@pytest.fixture(scope="module")
def portrait():
    return loadprobe.analyze([VISION])


def test_without_options_the_targets_are_the_recordings_own(portrait):
    t = resolve(portrait, Constraints.parse())
    assert t.rate_rps == portrait.traffic.peak_rps and not t.rate_given and "recorded peak" in t.rate_why
    assert t.p95_ms == pytest.approx(portrait.requests.latency_ms.p95 * (1 + RECORDED_SLO_SLACK))
    assert "recorded p95" in t.p95_why and t.p99_ms is None and t.power_budget_w is None
    assert t.stress_rps == pytest.approx(STRESS * t.rate_rps)


def test_given_targets_are_kept_and_said_so(portrait):
    t = resolve(portrait, Constraints.parse(min_rps=120, slo_p95_ms=40, slo_p99_ms=90, power_budget_w=300))
    assert (t.rate_rps, t.rate_given, t.p95_ms, t.p99_ms, t.power_budget_w) == (120, True, 40, 90, 300)
    assert "--min-rps" in t.rate_why and "--slo-p95-ms" in t.p95_why
    assert t.slo_section() == {"p95_ms": 40.0, "p99_ms": 90.0, "min_rps": 120.0}


def test_no_rate_to_size_for_is_an_error(portrait):
    import dataclasses

    with pytest.raises(LoadprobeError, match="give --min-rps"):
        resolve(dataclasses.replace(portrait, traffic=None), Constraints.parse())


def test_the_plan_and_its_pipeline_carry_the_same_targets(portrait):
    plan = loadprobe.recommend(portrait, Constraints.parse(min_rps=50, slo_p99_ms=400))
    config = plan.to_pipeline()
    t = plan.targets
    assert (plan.rate_rps, plan.slo_p95_ms) == (t.rate_rps, t.p95_ms)
    assert (config.slo.min_rps, config.slo.p95_ms, config.slo.p99_ms) == (50, pytest.approx(t.p95_ms, abs=1e-3), 400)
    data = plan.to_dict()
    assert (data["sizing_rate_rps"], data["slo_p95_ms"]) == (t.rate_rps, t.p95_ms)
    for option in [plan.recommended, *plan.alternatives]:  # every option's file, the same targets
        if data_pipeline := next((o["pipeline"] for o in [data["recommended"], *data["alternatives"]]
                                  if o["name"] == option.name), None):
            assert data_pipeline["slo"] == t.slo_section()


def test_constraints_are_four_parts_built_by_keyword_and_plans_json_keeps_their_flat_form():
    c = Constraints.parse(engines="cpu,gpu:nvidia-l4x2", slo_p95_ms=50, years=5, rent=True, changes_often=["head"])
    assert c.lineup.engines[1].limit == 2 and c.lineup.changes_often == {"head"}
    assert (c.asked.slo_p95_ms, c.asked.min_rps, c.pricing.years, c.pricing.rent) == (50, None, 5.0, True)
    assert (c.evidence.align, c.evidence.calibration) == ({}, None)
    with pytest.raises(TypeError):
        Constraints(c.lineup)  # parts by keyword only
    flat = c.to_dict()  # plans.json's constraints, whose readers (report, simulate) take these keys
    assert {"engines", "slo_p95_ms", "years", "align", "rent", "changes_often"} <= set(flat) and flat["years"] == 5.0
