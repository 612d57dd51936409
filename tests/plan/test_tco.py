"""Total cost of ownership: the seeds' worked example, the formula term by term, and ``loadprobe tco``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from loadprobe._errors import LoadprobeError
from loadprobe.cli import main
from loadprobe.estimate.tco import TCO, TCOInputError, compare, format_comparison, tco


def test_the_articles_worked_example():
    # 300 W all year (8,760 h) for three years at 0.8 per kWh: about 6,300; a 50 W accelerator about 1,050
    card = tco(power_w=300, hours_per_year=8760, price_per_kwh=0.8, years=3)
    assert round(card.electricity) == 6307
    assert card.electricity == pytest.approx(6307.2)
    assert card.energy_kwh == pytest.approx(7884)
    assert card.total == card.electricity and card.purchase == card.operations == card.migration == 0
    assert round(tco(power_w=50, price_per_kwh=0.8, years=3).electricity) == 1051


def test_every_term_of_the_formula():
    cost = tco(power_w=300, hours_per_year=4000, price_per_kwh=0.5, years=2, purchase=1000, pue=1.5,
               ops_per_year=300, migration=700, units=3)
    assert cost.energy_kwh == pytest.approx(300 * 3 * 4000 * 2 / 1000 * 1.5)  # 10,800 kWh
    assert cost.electricity == pytest.approx(10800 * 0.5)
    assert cost.purchase == 3000  # per unit x units
    assert cost.operations == 600  # per year x years
    assert cost.migration == 700
    assert cost.total == pytest.approx(3000 + 5400 + 600 + 700)
    assert (cost.power_w, cost.units, cost.unit_price, cost.pue, cost.years) == (300, 3, 1000, 1.5, 2)
    # fractions of a year, free power, and zero purchase are all fine
    assert tco(power_w=0, price_per_kwh=0, years=0.5).total == 0


@pytest.mark.parametrize("inputs, name, fragment", [
    (dict(power_w=-1), "power_w", "must be 0 or more watts; got -1"),
    (dict(years=0), "years", "must be more than 0 years; got 0"),
    (dict(years=-2), "years", "more than 0"),
    (dict(pue=0.9), "pue", "must be 1 or more"),
    (dict(price_per_kwh=-0.1), "price_per_kwh", "0 or more"),
    (dict(hours_per_year=9000), "hours_per_year", "at most 8784"),
    (dict(hours_per_year=0), "hours_per_year", "more than 0"),
    (dict(purchase=-5), "purchase", "0 or more"),
    (dict(ops_per_year=-5), "ops_per_year", "0 or more"),
    (dict(migration=-5), "migration", "0 or more"),
    (dict(units=0), "units", "1 or more"),
    (dict(units=1.5), "units", "whole number"),
    (dict(power_w=float("nan")), "power_w", "must be a number"),
    (dict(power_w=True), "power_w", "must be a number"),
])
def test_bad_inputs_name_the_input(inputs, name, fragment):
    with pytest.raises(TCOInputError) as caught:
        tco(**{"power_w": 300, "price_per_kwh": 0.8, "years": 3, **inputs})
    assert caught.value.name == name and fragment in str(caught.value)
    assert isinstance(caught.value, LoadprobeError)


def test_compare_keeps_the_order_and_names_the_bad_plan():
    plans = [("gpu", dict(power_w=300, price_per_kwh=0.8, years=3, purchase=20000)),
             ("npu", dict(power_w=50, price_per_kwh=0.8, years=3, purchase=24000))]
    costs = compare(plans)
    assert list(costs) == ["gpu", "npu"] and all(isinstance(c, TCO) for c in costs.values())
    assert round(costs["gpu"].total) == 26307 and round(costs["npu"].total) == 25051
    table = format_comparison(costs).splitlines()
    assert table[0].split() == ["gpu", "npu"]
    assert set(table[1].replace(" ", "")) == {"-"}  # the rule under the header
    assert table[6].split() == ["total", "26,307", "25,051"]
    with pytest.raises(LoadprobeError, match="'gpu' is given twice"):
        compare(plans + plans[:1])
    with pytest.raises(LoadprobeError, match=r"years must be more than 0 years; got 0 \(plan 'bad'\)"):
        compare([("bad", dict(power_w=1, price_per_kwh=1, years=0))])
    with pytest.raises(LoadprobeError, match="plan 'typo':.*power_watts"):
        compare([("typo", dict(power_watts=1, price_per_kwh=1, years=1))])


def invoke(*args):
    return CliRunner().invoke(main, ["tco", *args])


def test_cli_prints_the_breakdown():
    result = invoke("--power-w", "300", "--hours-per-year", "8760", "--price-per-kwh", "0.8", "--years", "3",
                    "--purchase", "20000")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "cost of ownership over 3 years: 300 W x 1 unit, 8,760 h/year, 0.8 per kWh, PUE 1.0",
        "  purchase     20,000",
        "  electricity   6,307   (7,884 kWh)",
        "  operations        0",
        "  migration         0",
        "  total        26,307",
    ]


def test_cli_json_has_every_field():
    result = invoke("--power-w", "300", "--price-per-kwh", "0.8", "--years", "3", "--units", "2", "--pue", "1.2",
                    "--ops-per-year", "100", "--migration", "50", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["electricity"] == pytest.approx(6307.2 * 2 * 1.2)
    assert data["total"] == pytest.approx(data["electricity"] + 300 + 50)
    assert data["units"] == 2 and data["hours_per_year"] == 8760


@pytest.mark.parametrize("args, message", [
    (["--power-w", "-1", "--price-per-kwh", "0.8", "--years", "3"], "--power-w must be 0 or more watts; got -1"),
    (["--power-w", "300", "--price-per-kwh", "0.8", "--years", "0"], "--years must be more than 0 years; got 0"),
    (["--power-w", "300", "--price-per-kwh", "0.8", "--years", "3", "--pue", "0.5"], "--pue must be 1 or more"),
    (["--power-w", "300", "--price-per-kwh", "0.8", "--years", "3", "--units", "0"], "--units must be a whole number"),
    (["--power-w", "300", "--price-per-kwh", "-1", "--years", "3"], "--price-per-kwh must be 0 or more"),
])
def test_cli_bad_values_give_one_line_and_exit_2(args, message):
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"loadprobe: error: {message}") and result.stderr.count("\n") == 1


def test_cli_missing_option_is_a_usage_error():
    result = invoke("--power-w", "300")
    assert result.exit_code == 2 and "--price-per-kwh" in result.stderr
