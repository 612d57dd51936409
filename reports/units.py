"""How figures are written for people: milliseconds, percentages, rates, watts, bytes.

Shared by the terminal summary and the HTML report so a figure reads the same in both.

Usage::

    ms(27.8)        # "27.8"
    pct(0.48)       # "48.0%"
    num(83.0)       # "83"
"""

from __future__ import annotations

NONE = "-"


def ms(x) -> str:
    """Milliseconds: 2 decimals under 10, 1 under 1000, then thousands separators."""
    if x is None:
        return NONE
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 1000 else f"{x:,.0f}"


def pct(x, digits: int = 1) -> str:
    """A fraction as a percentage: 0.48 -> 48.0%."""
    return NONE if x is None else f"{100 * x:.{digits}f}%"


def num(x, digits: int = 3) -> str:
    """A plain figure to ``digits`` significant digits, thousands separated when large."""
    if x is None:
        return NONE
    if isinstance(x, int) or (abs(x) >= 10 ** digits and float(x).is_integer()):
        return f"{int(x):,}"
    if abs(x) >= 10 ** digits:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def si(x, unit: str) -> str:
    """With an SI prefix: si(1.2e11, "FLOP/s") -> "120 GFLOP/s"."""
    if x is None:
        return NONE
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def signed(x, digits: int = 3) -> str:
    """A difference with its sign: +1.2, -0.5, 0."""
    if x is None:
        return NONE
    return "0" if x == 0 else f"{x:+.{digits}g}"


def duration(seconds) -> str:
    """A span of time at a readable scale: 61 s, 45 min, 2.0 h, 1.5 days."""
    if seconds is None:
        return NONE
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
