"""``loadprobe tco``: what owning or renting hardware costs over some years, purchase or rent and electricity included."""

from __future__ import annotations

import dataclasses
import json

import click

from .._errors import LoadprobeError


ROUNDED = {"purchase": 2, "rent": 2, "electricity": 2, "operations": 2, "migration": 2, "total": 2, "energy_kwh": 3}


@click.command()
@click.option("--power-w", type=float, help="Power draw of one unit, watts (required to buy).")
@click.option("--hours-per-year", type=float, default=8760, show_default=True, help="Hours a year it runs.")
@click.option("--price-per-kwh", type=float,
              help="Electricity price per kWh, in your currency (required to buy).")
@click.option("--years", type=float, help="Years of ownership or rental (required).")
@click.option("--purchase", type=float, default=0, show_default=True, help="Purchase price of one unit.")
@click.option("--hourly-rate", type=float,
              help="Rent instead of buying: the on-demand rate of one unit per hour (electricity included in it).")
@click.option("--pue", type=float, default=1.0, show_default=True,
              help="Power usage effectiveness of the site: 1.0 counts no cooling, ~1.5 a typical data centre.")
@click.option("--ops-per-year", type=float, default=0, show_default=True,
              help="Operations cost per year (staff, support), whole deployment.")
@click.option("--migration", type=float, default=0, show_default=True,
              help="One-off cost of moving the models onto this hardware.")
@click.option("--units", type=int, default=1, show_default=True, help="How many units.")
@click.option("--json", "as_json", is_flag=True, help="Print the breakdown and the inputs as JSON.")
def tco(power_w, hours_per_year, price_per_kwh, years, purchase, hourly_rate, pue, ops_per_year, migration, units,
        as_json):
    """Total cost of ownership: purchase (or rent) + electricity + operations + migration.

    Buy: give --power-w, --price-per-kwh and --years (and --purchase). Rent: give --hourly-rate and
    --years; the rate includes the provider's electricity and cooling, so no electricity is added.
    Amounts are in the currency of the prices given; no currency is assumed.

    \b
    Examples (a 300 W card running all year at 0.8 per kWh, for three years; the same years rented):
        loadprobe tco --power-w 300 --price-per-kwh 0.8 --years 3 --purchase 20000
        loadprobe tco --hourly-rate 1.29 --years 3
    """
    from ..estimate.tco import TCOInputError, format_tco, tco as compute

    try:
        cost = compute(power_w=power_w, hours_per_year=hours_per_year, price_per_kwh=price_per_kwh, years=years,
                       purchase=purchase, pue=pue, ops_per_year=ops_per_year, migration=migration, units=units,
                       hourly_rate=hourly_rate)
    except TCOInputError as exc:  # name the option as typed, not the Python keyword
        raise LoadprobeError(f"--{exc.name.replace('_', '-')} {exc.problem}") from None
    if as_json:  # the results to the cent and the watt-hour, not float noise (6307.200000000001); inputs as given
        click.echo(json.dumps({k: round(v, ROUNDED[k]) if k in ROUNDED and v is not None else v
                               for k, v in dataclasses.asdict(cost).items()}, indent=2))
    else:
        click.echo(format_tco(cost))
