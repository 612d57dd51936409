"""Option types the commands share."""

from __future__ import annotations

import click

_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0}


class Seconds(click.ParamType):
    """A duration in seconds: ``1``, ``0.5``, ``1s``, ``500ms``, ``2m``; at least ``minimum``."""

    name = "SECONDS"

    def __init__(self, minimum: float = 0.0) -> None:
        self.minimum = minimum

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            seconds = float(value)
        else:
            text = str(value).strip().lower()
            unit = next((u for u in sorted(_UNITS, key=len, reverse=True) if text.endswith(u)), "")
            try:
                seconds = float(text[: len(text) - len(unit)]) * _UNITS.get(unit, 1.0)
            except ValueError:
                self.fail(f"{value!r} is not a duration; give seconds, e.g. 1, 0.5, 1s or 500ms", param, ctx)
        if not seconds >= self.minimum:
            self.fail(f"{value!r} is under {self.minimum:g} s", param, ctx)
        return seconds
