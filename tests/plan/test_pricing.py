"""Buy and rent on equal terms: plans are priced bought where every device has a purchase price, rented where
only the hourly rates are known, as asked with --rent/--buy, and every figure used is named with its source."""

from __future__ import annotations

import json

import pytest

import loadprobe
from loadprobe.catalog import load_catalog
from loadprobe.estimate.tco import HOURS_PER_YEAR
from loadprobe.plan.constraints import Constraints
from loadprobe.plan.files import plan_dict, render

from ..conftest import REPO

VISION = str(REPO / "samples" / "data" / "vision")
CATALOG = load_catalog()


def _decided(**kwargs):
    c = Constraints.parse(**kwargs)
    return c.pricing.decided(c.lineup, CATALOG)


def test_rates_without_prices_price_the_plans_rented_and_say_why():
    # NVIDIA publishes no list price for its data-center GPUs; the H100's on-demand rate is in the catalog
    assert CATALOG.get("nvidia-h100-sxm").price_usd is None and CATALOG.get("nvidia-h100-sxm").hourly_usd
    p = _decided(engines="cpu,gpu:nvidia-h100-sxm")
    assert p.rent is True and "no purchase price for nvidia-h100-sxm" in p.basis_why and "rent" in p.basis_why


def test_prices_for_every_device_price_them_bought():
    p = _decided(engines="cpu,gpu:nvidia-h100-sxm", prices=["nvidia-h100-sxm=25000"])
    assert p.rent is False and p.basis_why.startswith("bought: every device")
    assert _decided(engines="cpu").rent is False  # nothing beyond the shared host to buy or rent


def test_a_kind_without_a_device_is_priced_as_the_device_it_is_sized_on_and_says_so():
    """``--engines cpu,gpu`` plans on the kind's default device (nvidia-l4): its cost is that device's, as the what-to-buy
    line says, not 'nothing to buy'; the engine's reasons name the assumption."""
    bare, named = _decided(engines="cpu,gpu"), _decided(engines="cpu,gpu:nvidia-l4")
    assert bare.rent == named.rent and bare.basis_why == named.basis_why
    assert "no device to buy" not in bare.basis_why
    (gpu,) = [e for e in Constraints.parse(engines="cpu,gpu").lineup.engines if e.kind == "gpu"]
    assert gpu.catalog_id == "nvidia-l4" and "nvidia-l4 assumed" in gpu.assumed and "gpu:DEVICE" in gpu.assumed
    (named_gpu,) = [e for e in Constraints.parse(engines="gpu:nvidia-l4").lineup.engines if e.kind == "gpu"]
    assert named_gpu.assumed == ""


def test_asked_for_is_kept_and_what_it_lacks_is_named():
    p = _decided(engines="cpu,gpu:nvidia-h100-sxm", rent=False)
    assert p.rent is False and "as asked" in p.basis_why and "no purchase price for nvidia-h100-sxm" in p.basis_why
    p = _decided(engines="cpu,gpu:nvidia-h100-sxm", rent=True, prices=["nvidia-h100-sxm=25000"])
    assert p.rent is True and p.basis_why == "rented (--rent), as asked"


def test_neither_figure_known_for_a_device_prices_on_known_figures_and_says_what_to_give():
    assert CATALOG.get("hailo-8").hourly_usd is None  # an edge part: no cloud rents it
    p = _decided(engines="cpu,gpu:nvidia-h100-sxm,npu:hailo-8")  # the H100 has no price, the Hailo no rate
    assert p.rent is False and p.basis_why.startswith("bought, on known figures")
    assert "nvidia-h100-sxm" in p.basis_why and "no hourly rate for hailo-8" in p.basis_why
    assert "--price DEVICE=AMOUNT or --hourly-rate" in p.basis_why


@pytest.fixture(scope="module")
def rented_plan():
    portrait = loadprobe.analyze([VISION])
    return loadprobe.recommend(portrait, Constraints.parse(engines="cpu,gpu:nvidia-h100-sxm", min_rps=100))


def test_a_rented_plan_ranks_on_rent_and_names_each_figure_with_its_source_and_date(rented_plan):
    plan, h100 = rented_plan, CATALOG.get("nvidia-h100-sxm")
    assert plan.constraints.pricing.rent
    options = [o for o in [plan.recommended, *plan.alternatives] if o.tco]
    assert options and all(o.tco["mode"] == "rent" and o.tco["comparable"] for o in options)
    for o in options:
        units = sum(e["count"] for e in o.engines.values() if e["device"] == h100.id)
        assert o.tco["total"] == pytest.approx(h100.hourly_usd * units * HOURS_PER_YEAR * 3)
        assert "on-demand rent" in o.tco["includes"] if units else "no device to rent" in o.tco["includes"]
        if units:
            assert o.tco["figures"][h100.id] == h100.figure_note("hourly_usd")
            assert h100.dates["hourly_usd"] in o.tco["figures"][h100.id]
    text = render(plan)
    assert "costs: rented: no purchase price for nvidia-h100-sxm" in text
    if any(o.tco["figures"] for o in options):
        assert h100.figure_note("hourly_usd") in text
    data = json.loads(json.dumps(plan_dict(plan)))
    assert data["constraints"]["basis_why"] == plan.constraints.pricing.basis_why


def test_the_report_says_what_each_cost_holds_and_which_figures_it_used(rented_plan):
    from loadprobe.plan.files import plan_dict
    from loadprobe.reports.html import render_report

    html = render_report(loadprobe.analyze([VISION]), plans=plan_dict(rented_plan))
    section = html[html.index('<section id="plan"'):html.index('<section id="quality"')]
    assert '<ul class="pricing">' in section and "Costs are rented" in section
    if rented_plan.mix:  # the exact mix against the best single type, as the terminal says it
        assert "Cheapest mix (integer program" in section
    for o in [rented_plan.recommended, *rented_plan.alternatives]:
        if o.tco:
            assert f"{o.name}: " in section


def test_the_command_takes_rent_or_buy_and_says_which(tmp_path):
    from click.testing import CliRunner

    from loadprobe.cli import main

    for flag, said in (("--buy", "costs: bought (--buy), as asked"), ("--rent", "costs: rented (--rent), as asked"),
                       (None, "costs: rented: no purchase price for nvidia-h100-sxm")):
        out = tmp_path / (flag or "default").strip("-") / "pipeline.yaml"
        args = ["recommend", VISION, "--engines", "cpu,gpu:nvidia-h100-sxm", "-o", str(out)] + ([flag] if flag else [])
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        assert said in result.output
        plans = json.loads((out.parent / "plans.json").read_text())
        assert plans["constraints"]["rent"] is (flag != "--buy")
