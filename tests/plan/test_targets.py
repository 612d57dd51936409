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


MS = 1_000_000


@pytest.fixture(scope="module")
def llm_portrait(tmp_path_factory):
    """40 generations, 4 a second: prefill then 8 decode steps (TTFT and TPOT vary by request)."""
    from time import perf_counter_ns

    from loadprobe.record.probe import record_span
    from loadprobe.schema import FIRST_TOKEN, TOKEN

    folder = tmp_path_factory.mktemp("llm")
    loadprobe.start(str(folder), service="llm-engine", sample_devices=False, sample_interpreter=False)
    t0 = perf_counter_ns()
    for i in range(40):
        start, first, step = t0 + i * 250 * MS, (20 + i % 7 * 5) * MS, (4 + i % 3) * MS
        end = start + first + 8 * step
        root = record_span("generate", start, end, request_id=f"r{i}", tokens_in=64, tokens_out=9)
        record_span("prefill", start, start + first, request_id=f"r{i}", parent=root)
        record_span(FIRST_TOKEN, start, start + first, request_id=f"r{i}", parent=root)
        for k in range(8):
            at = start + first + k * step
            record_span("decode", at, at + step, request_id=f"r{i}", parent=root)
            record_span(TOKEN, at, at + step, request_id=f"r{i}", parent=root)
    loadprobe.stop()
    return loadprobe.analyze([str(folder)])


def test_an_llm_load_gets_ttft_and_tpot_targets_from_its_recording_or_as_given(llm_portrait):
    llm = llm_portrait.llm
    t = resolve(llm_portrait, Constraints.parse())
    assert t.ttft_p95_ms == pytest.approx(llm.ttft_ms.p95 * (1 + RECORDED_SLO_SLACK))
    assert t.tpot_p95_ms == pytest.approx(llm.tpot_ms.p95 * (1 + RECORDED_SLO_SLACK))
    assert "recorded TTFT p95" in t.ttft_why and "--slo-tpot-ms" in t.tpot_why
    given = resolve(llm_portrait, Constraints.parse(slo_ttft_ms=250, slo_tpot_ms=30))
    assert (given.ttft_p95_ms, given.tpot_p95_ms) == (250, 30) and "asked for" in given.ttft_why
    slo = given.slo_section()
    assert (slo["ttft_p95_ms"], slo["tpot_p95_ms"]) == (250.0, 30.0)
    assert "TTFT p95 250 ms" in given.describe() and given.to_dict()["ttft_why"] == given.ttft_why


def test_the_llm_targets_reach_the_pipeline_and_plans_json(llm_portrait):
    plan = loadprobe.recommend(llm_portrait, Constraints.parse(engines="cpu", slo_ttft_ms=400, slo_tpot_ms=40))
    config = plan.to_pipeline()
    assert (config.slo.ttft_p95_ms, config.slo.tpot_p95_ms) == (400, 40)
    data = plan.to_dict()
    assert data["targets"] == plan.targets.to_dict() and data["targets"]["ttft_p95_ms"] == 400
    assert "TTFT p95 400 ms" in loadprobe.plan.files.render(plan)


def test_a_token_target_for_a_load_without_tokens_is_refused(portrait):
    assert portrait.llm is None and resolve(portrait, Constraints.parse()).ttft_p95_ms is None
    with pytest.raises(LoadprobeError, match="--slo-ttft-ms: the portrait holds no LLM requests"):
        resolve(portrait, Constraints.parse(slo_ttft_ms=200))


def test_latency_misses_names_each_target_missed_in_percentile_order(portrait):
    t = resolve(portrait, Constraints.parse(slo_p50_ms=5, slo_p95_ms=20, slo_p99_ms=50))
    assert t.latency_misses(p50=4, p95=19, p99=49) == []
    assert t.latency_misses(p50=6, p95=25, p99=49) == [("p50", 6, 5), ("p95", 25, 20)]
    assert t.latency_misses(p50=6, p95=None, p99=None) == [("p50", 6, 5)]  # not estimated: judged apart
    assert resolve(portrait, Constraints.parse()).latency_misses(p50=1e9, p95=0.0, p99=1e9) == []  # p50, p99 unset


def test_a_median_target_is_judged_like_the_others(portrait):
    loose = loadprobe.recommend(portrait, Constraints.parse(engines="cpu", min_rps=50))
    assert loose.recommended.meets_slo
    median = loose.recommended.estimate.p50_ms
    tight = loadprobe.recommend(portrait, Constraints.parse(engines="cpu", min_rps=50, slo_p50_ms=median / 4))
    option = tight.recommended
    assert not option.meets_slo and any(n.startswith("misses the p50 target") for n in option.notes)
    assert option.tuning and all(not trial["meets_targets"] for trial in option.tuning)
    assert tight.to_pipeline().slo.p50_ms == pytest.approx(median / 4, abs=1e-3)
