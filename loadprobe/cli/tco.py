"""``loadprobe tco``: what owning or renting hardware costs over some years, purchase or rent and power included."""

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
@click.option("--purchase", type=float, help="Purchase price of one unit, needed to buy (0 for hardware already owned; "
                                            "with --device, the catalog's).")
@click.option("--hourly-rate", type=float,
              help="Rent instead of buying: the on-demand rate of one unit per hour (electricity included in it).")
@click.option("--pue", type=float, default=1.0, show_default=True,
              help="Power usage effectiveness of the site: 1.0 counts no cooling, ~1.5 a typical data centre.")
@click.option("--ops-per-year", type=float, default=0, show_default=True,
              help="Operations cost per year (staff, support), whole deployment.")
@click.option("--migration", type=float, default=0, show_default=True,
              help="One-off cost of moving the models onto this hardware.")
@click.option("--units", type=int, default=1, show_default=True, help="How many units.")
@click.option("--device", metavar="ID",
              help="A catalog device: its maximum power (tdp_w), purchase price and hourly rate fill the options "
                   "not given, each figure named with its source; a figure the catalog lacks is an error, not 0.")
@click.option("--rent", is_flag=True, help="Rent instead of buying, at --hourly-rate or the --device's rate.")
@click.option("--catalog", "catalogs", multiple=True, type=click.Path(dir_okay=False),
              help="Extra device catalog file (JSON); repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the breakdown and the inputs as JSON.")
def tco(power_w, hours_per_year, price_per_kwh, years, purchase, hourly_rate, pue, ops_per_year, migration, units,
        device, rent, catalogs, as_json):
    """Total cost of ownership: purchase (or rent) + electricity + operations + migration.

    Buy: give --power-w, --price-per-kwh and --years (and --purchase). Rent: give --hourly-rate and
    --years; the rate includes the provider's electricity and cooling, so no electricity is added.
    --device takes the figures you do not give from the hardware catalog. Amounts are in the currency
    of the prices given (the catalog's are USD); no currency is assumed.

    \b
    Examples (a 300 W card running all year at 0.8 per kWh, for three years; the same years rented):
        loadprobe tco --power-w 300 --price-per-kwh 0.8 --years 3 --purchase 20000
        loadprobe tco --hourly-rate 1.29 --years 3
        loadprobe tco --device nvidia-a10 --rent --years 3
    """
    from ..estimate.tco import TCOInputError, format_tco, tco as compute

    figures = []  # the catalog figures used, each with its source and date
    if device:
        power_w, purchase, hourly_rate, figures = _from_catalog(device, catalogs, rent=rent, power_w=power_w,
                                                                purchase=purchase, hourly_rate=hourly_rate)
    elif rent and hourly_rate is None:
        raise LoadprobeError("--rent needs the rate: give --hourly-rate, or --device with a catalog rate")

    try:
        cost = compute(power_w=power_w, hours_per_year=hours_per_year, price_per_kwh=price_per_kwh, years=years,
                       purchase=0.0 if purchase is None else purchase, pue=pue, ops_per_year=ops_per_year,
                       migration=migration, units=units, hourly_rate=hourly_rate)
    except TCOInputError as exc:  # name the option as typed, not the Python keyword
        raise LoadprobeError(f"--{exc.name.replace('_', '-')} {exc.problem}") from None
    if purchase is None and hourly_rate is None:  # the other inputs are valid; an unknown price is never zero
        raise LoadprobeError("--purchase: buying needs the price of one unit; give --purchase (0 for hardware you "
                             "own already), --device for the catalog's price, or --hourly-rate to rent")
    if as_json:  # the results to the cent and the watt-hour, not float noise (6307.200000000001); inputs as given
        out = {k: round(v, ROUNDED[k]) if k in ROUNDED and v is not None else v
               for k, v in dataclasses.asdict(cost).items()}
        if device:
            out["from_catalog"] = figures
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo(format_tco(cost))
        for figure in figures:
            click.echo(f"  from the catalog: {figure}")


def _from_catalog(device_id, catalogs, *, rent, power_w, purchase, hourly_rate):
    """The options not given, from the catalog device; a figure it lacks stops with the reason it gives."""
    from ..catalog import load_catalog

    device = load_catalog(*catalogs).get(device_id)
    figures = []

    def figure(field: str, option: str, given):
        if given is not None:
            return given
        value = getattr(device, field)
        if value is None:
            why = device.unpublished.get(field, "not in the catalog")
            raise LoadprobeError(f"{option}: {device.id} has no {field} in the catalog ({why}); give {option}")
        figures.append(device.figure_note(field))
        return value

    if rent or hourly_rate is not None:
        hourly_rate = figure("hourly_usd", "--hourly-rate", hourly_rate)
        if power_w is None and device.tdp_w is not None:  # only informs energy_kwh when renting
            power_w = device.tdp_w
            figures.append(device.figure_note("tdp_w"))
    else:
        power_w = figure("tdp_w", "--power-w", power_w)
        purchase = figure("price_usd", "--purchase", purchase)
    return power_w, purchase, hourly_rate, figures
