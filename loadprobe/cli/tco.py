"""``loadprobe tco``: what owning hardware costs over some years, purchase and electricity included."""

from __future__ import annotations

import dataclasses
import json

import click

from .._errors import LoadprobeError


ROUNDED = {"purchase": 2, "electricity": 2, "operations": 2, "migration": 2, "total": 2, "energy_kwh": 3}


@click.command()
@click.option("--power-w", type=float, required=True, help="Power draw of one unit, watts.")
@click.option("--hours-per-year", type=float, default=8760, show_default=True, help="Hours a year it runs.")
@click.option("--price-per-kwh", type=float, required=True, help="Electricity price per kWh, in your currency.")
@click.option("--years", type=float, required=True, help="Years of ownership.")
@click.option("--purchase", type=float, default=0, show_default=True, help="Purchase price of one unit.")
@click.option("--pue", type=float, default=1.0, show_default=True,
              help="Power usage effectiveness of the site: 1.0 counts no cooling, ~1.5 a typical data centre.")
@click.option("--ops-per-year", type=float, default=0, show_default=True,
              help="Operations cost per year (staff, support), whole deployment.")
@click.option("--migration", type=float, default=0, show_default=True,
              help="One-off cost of moving the models onto this hardware.")
@click.option("--units", type=int, default=1, show_default=True, help="How many units.")
@click.option("--json", "as_json", is_flag=True, help="Print the breakdown and the inputs as JSON.")
def tco(power_w, hours_per_year, price_per_kwh, years, purchase, pue, ops_per_year, migration, units, as_json):
    """Total cost of ownership: purchase + electricity + operations + migration.

    Amounts are in the currency of --price-per-kwh and --purchase; no currency is assumed.

    \b
    Example (a 300 W card running all year at 0.8 per kWh, for three years):
        loadprobe tco --power-w 300 --price-per-kwh 0.8 --years 3 --purchase 20000
    """
    from ..estimate.tco import TCOInputError, format_tco, tco as compute

    try:
        cost = compute(power_w=power_w, hours_per_year=hours_per_year, price_per_kwh=price_per_kwh, years=years,
                       purchase=purchase, pue=pue, ops_per_year=ops_per_year, migration=migration, units=units)
    except TCOInputError as exc:  # name the option as typed, not the Python keyword
        raise LoadprobeError(f"--{exc.name.replace('_', '-')} {exc.problem}") from None
    if as_json:  # the results to the cent and the watt-hour, not float noise (6307.200000000001); inputs as given
        click.echo(json.dumps({k: round(v, ROUNDED[k]) if k in ROUNDED else v
                               for k, v in dataclasses.asdict(cost).items()}, indent=2))
    else:
        click.echo(format_tco(cost))
