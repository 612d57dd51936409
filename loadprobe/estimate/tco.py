"""Total cost of ownership, bought or rented: purchase or rent + electricity + operations + migration, over years.

    from loadprobe.estimate.tco import tco, compare

    cost = tco(power_w=300, price_per_kwh=0.8, years=3)      # a 300 W card running all year
    round(cost.electricity)                                   # 6307
    rented = tco(hourly_rate=1.29, years=3)                   # the same years on a rented card
    round(rented.rent), rented.electricity                    # (33901, 0.0): electricity is in the rate
    compare([("gpu", dict(power_w=300, price_per_kwh=0.8, years=3, purchase=20000)),
             ("npu", dict(power_w=50, price_per_kwh=0.8, years=3, purchase=24000))])  # {"gpu": TCO, "npu": TCO}

Amounts are in whatever currency ``price_per_kwh``, ``purchase`` and ``hourly_rate`` are given in;
nothing here assumes one. The formula and every input: docs/tco.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from .._errors import LoadprobeError
from .._table import text_table

__all__ = ["TCO", "TCOInputError", "compare", "format_comparison", "format_tco", "price_line_up", "tco", "unit_figure"]

HOURS_PER_YEAR = 8760  # 365 days; a leap year has 8,784


class TCOInputError(LoadprobeError):
    """A bad input; ``name`` is the keyword, so the CLI can name its own option instead."""

    def __init__(self, name: str, problem: str):
        super().__init__(f"{name} {problem}")
        self.name, self.problem = name, problem


@dataclass(frozen=True)
class TCO:
    """The cost breakdown (totals over ``years``) and the inputs it was computed from.

    ``mode`` is "buy" or "rent". Renting has no purchase and no electricity bill (the provider's rate
    includes its power and cooling); ``energy_kwh`` is what the units draw, None when renting without
    ``power_w``.
    """

    purchase: float  # purchase price per unit x units; 0 when renting
    electricity: float  # 0 when renting: included in the hourly rate
    operations: float  # ops_per_year x years
    migration: float
    total: float
    energy_kwh: float | None  # drawn from the grid, PUE included
    # the inputs
    power_w: float | None
    hours_per_year: float
    price_per_kwh: float | None
    years: float
    pue: float
    ops_per_year: float
    units: int
    unit_price: float  # the ``purchase`` argument: what one unit costs
    mode: str = "buy"
    rent: float = 0.0  # hourly_rate x units x hours_per_year x years; 0 when buying
    hourly_rate: float | None = None  # on-demand rate of one unit, per hour


def tco(*, power_w: float | None = None, hours_per_year: float = HOURS_PER_YEAR, price_per_kwh: float | None = None,
        years: float | None = None, purchase: float = 0, pue: float = 1.0, ops_per_year: float = 0,
        migration: float = 0, units: int = 1, hourly_rate: float | None = None) -> TCO:
    """The cost of owning (buying) or renting ``units`` devices for ``hours_per_year`` hours a year.

    Buy (no ``hourly_rate``): purchase x units + electricity + operations + migration, where
    electricity = power_w x units x hours_per_year x years / 1000 x pue x price_per_kwh.
    Rent (``hourly_rate`` given): hourly_rate x units x hours_per_year x years + operations + migration;
    the rate includes the provider's electricity and cooling, so there is no electricity term and no
    purchase. ``ops_per_year`` (staff, support) and ``migration`` (porting and validating the models,
    once) are for the whole deployment. PUE (data-centre power usage effectiveness, 1.0 or more)
    accounts for cooling. Bad inputs raise TCOInputError.
    """
    renting = hourly_rate is not None
    if not renting:
        for name, value, what in (("power_w", power_w, "the power of one unit, watts"),
                                  ("price_per_kwh", price_per_kwh, "the electricity price")):
            if value is None:
                raise TCOInputError(name, f"is required to buy ({what}); to rent instead, give the hourly rate")
    if years is None:
        raise TCOInputError("years", "is required (years of ownership or rental)")
    if power_w is not None:
        _check("power_w", power_w, minimum=0, unit="watts")
    _check("hours_per_year", hours_per_year, minimum=0, maximum=8784, above_minimum=True, unit="hours")
    if price_per_kwh is not None:
        _check("price_per_kwh", price_per_kwh, minimum=0, unit="per kWh")
    _check("years", years, minimum=0, above_minimum=True, unit="years")
    _check("purchase", purchase, minimum=0, unit="per unit")
    _check("pue", pue, minimum=1, unit="(power usage effectiveness: 1.0 for none, ~1.5 for a typical data centre)")
    _check("ops_per_year", ops_per_year, minimum=0, unit="per year")
    _check("migration", migration, minimum=0, unit="(one-off)")
    if isinstance(units, bool) or not isinstance(units, int) or units < 1:
        raise TCOInputError("units", f"must be a whole number, 1 or more; got {units!r}")
    if renting:
        _check("hourly_rate", hourly_rate, minimum=0, unit="per unit and hour")
        if purchase:
            raise TCOInputError("purchase", "is for buying: a rented unit has no purchase price; give one or the "
                                            "hourly rate, not both")

    hours = units * hours_per_year * years
    energy_kwh = None if power_w is None else power_w * hours / 1000 * pue
    electricity = 0.0 if renting else energy_kwh * price_per_kwh
    rent = hourly_rate * hours if renting else 0.0
    bought, operations = purchase * units, ops_per_year * years
    return TCO(purchase=bought, electricity=electricity, operations=operations, migration=migration,
               total=bought + rent + electricity + operations + migration, energy_kwh=energy_kwh, power_w=power_w,
               hours_per_year=hours_per_year, price_per_kwh=price_per_kwh, years=years, pue=pue,
               ops_per_year=ops_per_year, units=units, unit_price=purchase, mode="rent" if renting else "buy",
               rent=rent, hourly_rate=hourly_rate)


def _check(name: str, value: Any, *, minimum: float, maximum: float = math.inf, above_minimum: bool = False,
           unit: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TCOInputError(name, f"must be a number; got {value!r}")
    if value < minimum or (above_minimum and value == minimum) or value > maximum:
        low = f"more than {minimum:g}" if above_minimum else f"{minimum:g} or more"
        high = f" and at most {maximum:g}" if maximum < math.inf else ""
        raise TCOInputError(name, f"must be {low}{high} {unit}; got {value:g}".rstrip())


def unit_figure(device_id: str | None, *, catalog, rent: bool, prices: Mapping[str, float],
                hourly_rates: Mapping[str, float]) -> tuple[float | None, str | None]:
    """One unit's purchase price (``rent`` False) or hourly rate, and where it comes from: the user's
    (``prices``, ``hourly_rates``), else the catalog's ``price_usd`` or ``hourly_usd``; ``(None, why)`` when
    neither has it, ``(None, None)`` for no known device."""
    figure, given = ("hourly_usd", hourly_rates) if rent else ("price_usd", prices)
    if device_id and given.get(device_id) is not None:
        return given[device_id], (f"{device_id} {figure} = {given[device_id]:g} "
                                  f"(given: {'--hourly-rate' if rent else '--price'})")
    device = catalog.find(device_id)
    if device is None:
        return None, None
    return getattr(device, figure), device.figure_note(figure)


def price_line_up(engines, *, catalog, rent: bool, prices: Mapping[str, float], hourly_rates: Mapping[str, float],
                  years: float, price_per_kwh: float, power_w: float | None, power_unknown=()) -> dict[str, Any]:
    """One plan's cost over ``years``, bought or rented (``rent``), on the figures known -- the one pricing
    rule of ``loadprobe recommend`` and ``loadprobe simulate``.

    ``engines``: ``(name, device id or None, kind, units)`` each; a CPU engine with no device is the host,
    common to every plan and left out. A device's price (``prices``, else the catalog's ``price_usd``) or
    rate (``hourly_rates``, else ``hourly_usd``) that is unknown makes the total a lower bound: ``comparable``
    False, ``unknown`` naming it (and, bought, each engine in ``power_unknown`` with no power figure), never
    a silent zero. Bought: purchase plus electricity at ``power_w``; rented: the rate, power included.
    ``figures`` names each figure used with its source and date; ``includes`` says what the total holds.
    """
    total, unpriced, figures, parts = 0.0, [], {}, []
    for name, device_id, kind, units in engines:
        if kind == "cpu" and not device_id:
            continue  # the host is common to every plan
        amount, note = unit_figure(device_id, catalog=catalog, rent=rent, prices=prices, hourly_rates=hourly_rates)
        if note is not None:
            figures[device_id] = note
        if amount is None:
            unpriced.append(device_id or name)
        else:
            total += amount * units
            parts.append(f"{units} x {device_id} at {amount:,.4g}" + ("/h" if rent else ""))
    if rent:
        cost, power_unknown = tco(hourly_rate=total, years=years), []
        includes = (f"{years:g} years ({HOURS_PER_YEAR * years:,.0f} h) of on-demand rent: {', '.join(parts)} (the "
                    "provider's rate includes power)" if parts else "no device to rent")
    else:
        cost = tco(power_w=power_w or 0.0, price_per_kwh=price_per_kwh, years=years, purchase=total)
        power_unknown = list(power_unknown)
        includes = ((f"the purchase of {', '.join(parts)}" if parts else "no device to buy")
                    + f" and {years:g} years of electricity at the plan's power")
    out = {f: getattr(cost, f) for f in cost.__dataclass_fields__}
    name = "hourly rate" if rent else "price"
    out.update(purchase_unknown=unpriced, power_unknown=power_unknown,
               unknown=[f"{d} {name}" for d in unpriced] + [f"{n} power" for n in power_unknown],
               host_purchase=f"left out: every plan runs on the same host ({'rented' if rent else 'bought'})",
               figures=figures, includes=includes + "; the host left out")
    out["comparable"] = not out["unknown"]
    return out


def compare(plans: list[tuple[str, Mapping[str, Any]]]) -> dict[str, TCO]:
    """The TCO of each named plan, in the given order: ``[(name, tco keyword arguments), ...]``."""
    out: dict[str, TCO] = {}
    for name, inputs in plans:
        if name in out:
            raise LoadprobeError(f"plan name {name!r} is given twice; give each plan its own name")
        try:
            out[name] = tco(**inputs)
        except TypeError as exc:  # a missing or misspelt keyword
            raise LoadprobeError(f"plan {name!r}: {exc}; see loadprobe.estimate.tco.tco for the inputs") from None
        except TCOInputError as exc:
            raise TCOInputError(exc.name, f"{exc.problem} (plan {name!r})") from None
    return out


_ROWS = ("purchase", "electricity", "operations", "migration", "total")


def _rows(renting: bool) -> tuple[str, ...]:
    return ("rent", *_ROWS[1:]) if renting else _ROWS


def format_tco(cost: TCO) -> str:
    """The breakdown as a small table, in whole units with thousands separators."""
    units = f"{cost.units} unit{'s' * (cost.units != 1)}"
    years = f"{cost.years:g} year{'s' * (cost.years != 1)}"
    if cost.mode == "rent":
        power = "" if cost.power_w is None else f"{cost.power_w:g} W x "
        head = (f"cost of renting over {years}: {power}{units}, {cost.hours_per_year:,g} h/year, "
                f"{cost.hourly_rate:g} per unit-hour")
    else:
        head = (f"cost of ownership over {years}: {cost.power_w:g} W x {units}, {cost.hours_per_year:,g} h/year, "
                f"{cost.price_per_kwh:g} per kWh, PUE {float(cost.pue)!r}")
    rows = _rows(cost.mode == "rent")
    width = max(len(f"{getattr(cost, row):,.0f}") for row in rows)
    lines = [head]
    for row in rows:
        note = ""
        if row == "electricity":
            note = "   (in the rate)" if cost.mode == "rent" else f"   ({cost.energy_kwh:,.0f} kWh)"
        lines.append(f"  {row:<12} {getattr(cost, row):>{width},.0f}{note}")
    return "\n".join(lines)


def format_comparison(costs: Mapping[str, TCO]) -> str:
    """Several TCOs side by side, one column per plan; a rent row when any of them is rented."""
    names = list(costs)
    renting = any(c.mode == "rent" for c in costs.values())
    rows = ("purchase", "rent", *_ROWS[1:]) if renting else _ROWS

    def cell(cost: TCO, row: str) -> str:
        value = getattr(cost, row)
        if row == "electricity" and cost.mode == "rent":
            return "in rate"
        return "-" if value is None else f"{value:,.0f}"

    table = [["energy (kWh)" if row == "energy_kwh" else row, *(cell(costs[n], row) for n in names)]
             for row in (*rows, "energy_kwh")]
    return "\n".join(text_table(["", *names], table, numbers_right=True))
