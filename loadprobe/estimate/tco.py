"""Total cost of ownership: purchase + electricity + operations + migration, over a number of years.

    from loadprobe.estimate.tco import tco, compare

    cost = tco(power_w=300, price_per_kwh=0.8, years=3)      # a 300 W card running all year
    round(cost.electricity)                                   # 6307
    compare([("gpu", dict(power_w=300, price_per_kwh=0.8, years=3, purchase=20000)),
             ("npu", dict(power_w=50, price_per_kwh=0.8, years=3, purchase=24000))])  # {"gpu": TCO, "npu": TCO}

Amounts are in whatever currency ``price_per_kwh`` and ``purchase`` are given in; nothing here
assumes one. The formula and every input: docs/tco.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from .._errors import LoadprobeError
from .._table import text_table

__all__ = ["TCO", "TCOInputError", "compare", "format_comparison", "format_tco", "tco"]

HOURS_PER_YEAR = 8760  # 365 days; a leap year has 8,784


class TCOInputError(LoadprobeError):
    """A bad input; ``name`` is the keyword, so the CLI can name its own option instead."""

    def __init__(self, name: str, problem: str):
        super().__init__(f"{name} {problem}")
        self.name, self.problem = name, problem


@dataclass(frozen=True)
class TCO:
    """The cost breakdown (totals over ``years``) and the inputs it was computed from."""

    purchase: float  # purchase price per unit x units
    electricity: float
    operations: float  # ops_per_year x years
    migration: float
    total: float
    energy_kwh: float  # drawn from the grid, PUE included
    # the inputs
    power_w: float
    hours_per_year: float
    price_per_kwh: float
    years: float
    pue: float
    ops_per_year: float
    units: int
    unit_price: float  # the ``purchase`` argument: what one unit costs


def tco(*, power_w: float, hours_per_year: float = HOURS_PER_YEAR, price_per_kwh: float, years: float,
        purchase: float = 0, pue: float = 1.0, ops_per_year: float = 0, migration: float = 0,
        units: int = 1) -> TCO:
    """The cost of owning ``units`` devices that each draw ``power_w`` watts for ``hours_per_year`` hours.

    electricity = power_w x units x hours_per_year x years / 1000 x price_per_kwh x pue.
    ``purchase`` is the price of one unit; ``ops_per_year`` (staff, support) and ``migration`` (porting
    and validating the models, once) are for the whole deployment. PUE (data-centre power usage
    effectiveness, 1.0 or more) accounts for cooling. Bad inputs raise TCOInputError.
    """
    _check("power_w", power_w, minimum=0, unit="watts")
    _check("hours_per_year", hours_per_year, minimum=0, maximum=8784, above_minimum=True, unit="hours")
    _check("price_per_kwh", price_per_kwh, minimum=0, unit="per kWh")
    _check("years", years, minimum=0, above_minimum=True, unit="years")
    _check("purchase", purchase, minimum=0, unit="per unit")
    _check("pue", pue, minimum=1, unit="(power usage effectiveness: 1.0 for none, ~1.5 for a typical data centre)")
    _check("ops_per_year", ops_per_year, minimum=0, unit="per year")
    _check("migration", migration, minimum=0, unit="(one-off)")
    if isinstance(units, bool) or not isinstance(units, int) or units < 1:
        raise TCOInputError("units", f"must be a whole number, 1 or more; got {units!r}")

    energy_kwh = power_w * units * hours_per_year * years / 1000 * pue
    electricity = energy_kwh * price_per_kwh
    bought, operations = purchase * units, ops_per_year * years
    return TCO(purchase=bought, electricity=electricity, operations=operations, migration=migration,
               total=bought + electricity + operations + migration, energy_kwh=energy_kwh, power_w=power_w,
               hours_per_year=hours_per_year, price_per_kwh=price_per_kwh, years=years, pue=pue,
               ops_per_year=ops_per_year, units=units, unit_price=purchase)


def _check(name: str, value: Any, *, minimum: float, maximum: float = math.inf, above_minimum: bool = False,
           unit: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TCOInputError(name, f"must be a number; got {value!r}")
    if value < minimum or (above_minimum and value == minimum) or value > maximum:
        low = f"more than {minimum:g}" if above_minimum else f"{minimum:g} or more"
        high = f" and at most {maximum:g}" if maximum < math.inf else ""
        raise TCOInputError(name, f"must be {low}{high} {unit}; got {value:g}".rstrip())


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


def format_tco(cost: TCO) -> str:
    """The breakdown as a small table, in whole units with thousands separators."""
    units = f"{cost.units} unit{'s' * (cost.units != 1)}"
    lines = [f"cost of ownership over {cost.years:g} year{'s' * (cost.years != 1)}: {cost.power_w:g} W x {units}, "
             f"{cost.hours_per_year:,g} h/year, {cost.price_per_kwh:g} per kWh, PUE {float(cost.pue)!r}"]
    width = max(len(f"{getattr(cost, row):,.0f}") for row in _ROWS)
    for row in _ROWS:
        note = f"   ({cost.energy_kwh:,.0f} kWh)" if row == "electricity" else ""
        lines.append(f"  {row:<12} {getattr(cost, row):>{width},.0f}{note}")
    return "\n".join(lines)


def format_comparison(costs: Mapping[str, TCO]) -> str:
    """Several TCOs side by side, one column per plan."""
    names = list(costs)
    rows = [["energy (kWh)" if row == "energy_kwh" else row, *(f"{getattr(costs[n], row):,.0f}" for n in names)]
            for row in (*_ROWS, "energy_kwh")]
    return "\n".join(text_table(["", *names], rows, numbers_right=True))
