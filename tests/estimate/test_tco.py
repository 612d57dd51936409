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
                    "--ops-per-year", "100", "--migration", "50", "--purchase", "0", "--json")
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


def test_rent_is_the_rate_times_the_hours_plus_operations_and_migration():
    # 2 rented units, 4,000 h a year, 2 years at 1.29 per unit-hour: 1.29 x 2 x 4,000 x 2 = 20,640
    cost = tco(hourly_rate=1.29, hours_per_year=4000, years=2, units=2, ops_per_year=300, migration=700,
               power_w=150)
    assert cost.mode == "rent" and cost.rent == pytest.approx(20640)
    assert cost.electricity == 0 and cost.purchase == 0  # the rate includes the provider's electricity
    assert cost.total == pytest.approx(20640 + 600 + 700)
    assert cost.energy_kwh == pytest.approx(150 * 2 * 4000 * 2 / 1000)  # still said: what the units draw
    assert tco(hourly_rate=1.29, years=1).energy_kwh is None  # unknown, not zero


def test_buy_and_rent_side_by_side_against_hand_computed_figures():
    # buy: 3,000 + 150 W x 8,760 h x 3 y / 1000 x PUE 1.5 = 5,913 kWh x 0.15 = 886.95; rent: 1.29 x 8,760 x 3
    costs = compare([("buy", dict(power_w=150, price_per_kwh=0.15, years=3, purchase=3000, pue=1.5)),
                     ("rent", dict(hourly_rate=1.29, years=3))])
    assert costs["buy"].mode == "buy" and costs["buy"].rent == 0
    assert costs["buy"].energy_kwh == pytest.approx(5913) and costs["buy"].electricity == pytest.approx(886.95)
    assert costs["buy"].total == pytest.approx(3886.95)
    assert costs["rent"].total == pytest.approx(33901.2)
    table = format_comparison(costs).splitlines()
    assert [line.split()[0] for line in table[2:]] == ["purchase", "rent", "electricity", "operations", "migration",
                                                       "total", "energy"]
    assert table[3].split() == ["rent", "0", "33,901"] and table[4].split() == ["electricity", "887", "in", "rate"]
    assert table[-1].split() == ["energy", "(kWh)", "5,913", "-"]


@pytest.mark.parametrize("inputs, name, fragment", [
    (dict(hourly_rate=1.0, years=1, purchase=10), "purchase", "a rented unit has no purchase price"),
    (dict(hourly_rate=-1.0, years=1), "hourly_rate", "must be 0 or more"),
    (dict(hourly_rate=float("inf"), years=1), "hourly_rate", "must be a number"),
    (dict(hourly_rate=1.0), "years", "is required"),
    (dict(price_per_kwh=0.2, years=1), "power_w", "is required to buy"),
    (dict(power_w=100, years=1), "price_per_kwh", "is required to buy"),
])
def test_bad_rent_inputs_name_the_input(inputs, name, fragment):
    with pytest.raises(TCOInputError) as caught:
        tco(**inputs)
    assert caught.value.name == name and fragment in str(caught.value)


def test_cli_rents():
    result = invoke("--hourly-rate", "1.29", "--years", "3", "--units", "2", "--ops-per-year", "1000")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "cost of renting over 3 years: 2 units, 8,760 h/year, 1.29 per unit-hour",
        "  rent         67,802",
        "  electricity       0   (in the rate)",
        "  operations    3,000",
        "  migration         0",
        "  total        70,802",
    ]
    data = json.loads(invoke("--hourly-rate", "1.29", "--years", "3", "--json").stdout)
    assert data["mode"] == "rent" and data["rent"] == data["total"] == 33901.2 and data["energy_kwh"] is None


@pytest.mark.parametrize("args, message", [
    (["--hourly-rate", "1.29", "--years", "3", "--purchase", "900"], "--purchase is for buying"),
    (["--hourly-rate", "-1", "--years", "3"], "--hourly-rate must be 0 or more"),
    (["--hourly-rate", "1.29"], "--years is required"),
    (["--price-per-kwh", "0.2", "--years", "3"], "--power-w is required to buy"),
])
def test_cli_bad_rent_values_give_one_line_and_exit_2(args, message):
    result = invoke(*args)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"loadprobe: error: {message}") and result.stderr.count("\n") == 1


def test_the_docs_examples_run_as_written(monkeypatch, capsys):
    # docs/tco.md: every "$ loadprobe tco" example prints what the page shows; every Python block runs, and one
    # followed by a text block prints that text
    import contextlib
    import io
    import re
    import shlex

    from ..conftest import REPO

    doc = (REPO / "docs" / "tco.md").read_text(encoding="utf-8")
    consoles = re.findall(r"```console\n(.*?)```", doc, re.S)
    assert len(consoles) >= 5
    for block in consoles:
        command, _, expected = block.partition("\n")
        while command.endswith("\\"):
            more, _, expected = expected.partition("\n")
            command = command[:-1] + more
        args = shlex.split(command.removeprefix("$ "))
        assert args[:2] == ["loadprobe", "tco"], command
        result = invoke(*args[2:])
        assert result.exit_code == 0, (command, result.output)
        assert result.stdout == expected, command
    monkeypatch.chdir(REPO)
    pythons = re.findall(r"```python\n(.*?)```(?:\n\n```text\n(.*?)```)?", doc, re.S)
    assert len(pythons) >= 3
    for code, expected in pythons:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs/tco.md", "exec"), {})
        if expected:
            assert out.getvalue() == expected, code


def test_cli_takes_the_figures_it_is_not_given_from_the_catalog(tmp_path):
    from loadprobe.catalog import load_catalog

    a10 = load_catalog().get("nvidia-a10")
    rented = invoke("--device", "nvidia-a10", "--rent", "--years", "3", "--json")
    assert rented.exit_code == 0, rented.output
    data = json.loads(rented.stdout)
    assert data["mode"] == "rent" and data["hourly_rate"] == a10.hourly_usd == 1.29
    assert data["total"] == pytest.approx(1.29 * 8760 * 3) and data["power_w"] == a10.tdp_w
    assert data["from_catalog"] == [a10.figure_note("hourly_usd"), a10.figure_note("tdp_w")]
    assert "2026-09-25" in data["from_catalog"][0]
    # buying: the catalog's maximum power and price; a given option wins over the catalog
    bought = json.loads(invoke("--device", "intel-xeon-8480", "--price-per-kwh", "0.15", "--years", "3",
                               "--json").stdout)
    assert (bought["power_w"], bought["unit_price"]) == (350, 10710)
    assert bought["total"] == pytest.approx(10710 + 350 * 8760 * 3 / 1000 * 0.15)
    mine = json.loads(invoke("--device", "nvidia-l4", "--price-per-kwh", "0.15", "--years", "3", "--purchase", "2500",
                             "--power-w", "60", "--json").stdout)
    assert (mine["power_w"], mine["unit_price"], mine["from_catalog"]) == (60, 2500, [])
    # an override file's figures are used, with their own source
    site = tmp_path / "site.json"
    site.write_text(json.dumps({"version": "1.0", "devices": {"nvidia-l4": {
        "hourly_usd": 0.7, "sources": {"hourly_usd": "our provider's quote"}, "dates": {"hourly_usd": "2026-12-01"}}}}))
    quoted = invoke("--device", "nvidia-l4", "--rent", "--years", "1", "--catalog", str(site))
    assert quoted.exit_code == 0 and "nvidia-l4 hourly_usd = 0.7 (our provider's quote, 2026-12-01)" in quoted.stdout


@pytest.mark.parametrize("args, message", [
    (["--device", "nvidia-l4", "--price-per-kwh", "0.15", "--years", "3"],
     "--purchase: nvidia-l4 has no price_usd in the catalog (NVIDIA publishes no list price"),
    (["--device", "nvidia-jetson-orin-nx", "--rent", "--years", "3"],
     "--hourly-rate: nvidia-jetson-orin-nx has no hourly_usd in the catalog"),
    (["--device", "google-tpu-v5e", "--price-per-kwh", "0.15", "--years", "3"],
     "--power-w: google-tpu-v5e has no tdp_w in the catalog (Google publishes no TDP"),
    (["--rent", "--years", "3"], "--rent needs the rate"),
    (["--device", "nvidia-l9", "--rent", "--years", "3"], "unknown device 'nvidia-l9'"),
])
def test_cli_a_missing_catalog_figure_is_an_error_not_zero(args, message):
    result = invoke(*args)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"loadprobe: error: {message}") and result.stderr.count("\n") == 1
