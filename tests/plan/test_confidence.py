"""Issue #21.4: decisions with their confidence -- resampled figures, decided or tied, one plan per workload."""

from __future__ import annotations

from collections import Counter

from loadprobe.plan.confidence import TIE_SHARE, resample, settle
from loadprobe.plan.constraints import Constraints
from loadprobe.plan.planner import recommend

from .test_recommend import PRICES, VISION, record


def _lineup(plan) -> tuple:
    rec = plan.recommended
    return (rec.name, tuple((d.stage, d.engine, d.device, d.precision) for d in rec.decisions),
            tuple(sorted((n, e["count"]) for n, e in rec.engines.items())))


def test_the_same_workload_recorded_three_times_gives_one_plan(tmp_path):
    constraints = Constraints.parse(slo_p95_ms=60, min_rps=300, precision=["backbone=int8-ok"], prices=PRICES,
                                    cpu_power_w=100)
    # three recordings of one workload, each with its own draws of 20% jitter in every stage's time
    plans = [recommend(record(tmp_path / str(i), VISION, requests=60, jitter=0.2, seed=i), constraints, cpu_cores=4)
             for i in range(3)]
    assert len({_lineup(p) for p in plans}) == 1, [_lineup(p) for p in plans]
    for plan in plans:  # every stage says whether its engine was decided or tied, and the bands hold the figure
        assert all(d.confidence.get("state") in ("decided", "tie") for d in plan.recommended.decisions
                   if plan.recommended.name == "hybrid")
        lo, hi = plan.recommended.intervals["p95_ms"]
        assert lo <= plan.recommended.estimate.p95_ms <= hi


def test_resampling_is_seeded_and_moves_the_figures_by_their_sampling_error(tmp_path):
    from loadprobe.estimate.servicetime import StageProfile
    from loadprobe.plan.context import PlanContext, plan_stages
    from loadprobe.plan.targets import Targets

    portrait = record(tmp_path, VISION, requests=40, jitter=0.3)
    stages = plan_stages(portrait)
    profiles = [StageProfile.of(s) for s in stages]
    targets = Targets(rate_rps=50.0, rate_why="the recorded peak", rate_given=False, p95_ms=100.0, p95_why="given")
    ctx = PlanContext(portrait, Constraints.parse(), None, targets, (4, "given"), stages)
    one, two = resample(profiles, ctx), resample(profiles, ctx)
    assert [[p.p95_ms for p in d] for d, _ in one] == [[p.p95_ms for p in d] for d, _ in two]
    spread = {round(d[1].p50_ms / profiles[1].p50_ms, 6) for d, _ in one}
    assert len(spread) > 1  # the draws differ...
    assert all(abs(f - 1) < 0.5 for f in spread)  # ...by a sampling error, not by orders of magnitude
    assert all(p.p95_ms >= p.p50_ms for d, _ in one for p in d)
    assert {c.rate for _, c in one} != {50.0}  # the recorded peak's rate is redrawn too (no --min-rps)


def test_a_tie_is_broken_by_figures_that_do_not_move_between_recordings(tmp_path):
    from types import SimpleNamespace

    from loadprobe.catalog import load_catalog
    from loadprobe.plan.constraints import EngineSpec

    catalog = load_catalog()
    gpu, npu = catalog.get("nvidia-l40s"), catalog.get("ascend-310p")  # 350 W vs 72 W at most
    admissible = [{"spec": EngineSpec("gpu", gpu.id, 1, "gpu0"), "device": gpu},
                  {"spec": EngineSpec("npu", npu.id, 1, "npu0"), "device": npu}]
    ctx = SimpleNamespace(stages=[SimpleNamespace(name="backbone")])
    for votes in (Counter(gpu0=13, npu0=11), Counter(gpu0=11, npu0=13)):  # either way round: one answer
        (narrowed, _), = settle([(admissible, {})], [votes], ctx)[0]
        words = settle([(admissible, {})], [votes], ctx)[1][0]
        assert [c["spec"].name for c in narrowed] == ["npu0"] and words["state"] == "tie"
        assert "stable rule" in words["why"]
    decided = settle([(admissible, {})], [Counter(gpu0=23, npu0=1)], ctx)
    assert decided[1][0]["state"] == "decided" and len(decided[0][0][0]) == 2  # nothing narrowed
    assert 1 / 24 < TIE_SHARE  # one stray draw does not make a tie
