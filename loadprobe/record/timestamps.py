"""Read log timestamps as epoch nanoseconds: epoch numbers in any unit, offsets, ISO-8601 text.

Usage::

    clock = Clock("requests.csv", "start", unit=None, ts_format=None, origin_ns=parse_origin(DEFAULT_ORIGIN))
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._errors import LoadprobeError

UNITS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
"""Nanoseconds per unit, for ``ts_unit`` and ``latency_unit``."""
DEFAULT_ORIGIN = "2024-01-01T00:00:00Z"
"""Where relative timestamps (offsets from the log's start) are placed unless ``origin`` is given."""
_RELATIVE_BELOW_NS = 10**9 * UNITS["s"]
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$|^(?i:nan)$")
_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)(?:[T ](\d\d):(\d\d)(?::(\d\d)(?:[.,](\d+))?)?)?"
                  r"\s*(Z|UTC|[+-]\d\d(?::?\d\d)?)?", re.IGNORECASE)


class Clock:
    """Reads one log's timestamps as epoch nanoseconds; the first value decides how.

    Numbers are epoch seconds, ms, us or ns by magnitude (or as ``unit`` says); numbers
    below 10^9 s are offsets from ``origin_ns``. Text is ISO-8601, naive meaning UTC, or
    follows ``ts_format``.
    """

    def __init__(self, where: str, column: str, unit: str | None, ts_format: str | None, origin_ns: int) -> None:
        self.where = where
        self.column = column
        self.unit = unit
        self.ts_format = ts_format
        self.origin_ns = origin_ns
        self.kind: str | None = "format" if ts_format else "number" if unit else None
        self.relative: bool | None = None  # decided on the first numbers seen

    def describe(self) -> dict:
        """How the timestamps were read, for run.json."""
        if self.kind == "number":
            if self.relative:
                return {"kind": "relative", "unit": self.unit, "origin": iso(self.origin_ns)}
            return {"kind": "epoch", "unit": self.unit}
        if self.kind == "format":
            return {"kind": "strptime", "format": self.ts_format}
        return {"kind": "iso-8601"}

    def to_ns(self, text: pa.Array, lines: list[int]) -> pa.Array:
        if self.kind is None:
            present = text.drop_null()
            if len(present) == 0:
                return pa.nulls(len(text), pa.int64())
            self.kind = "number" if _NUMBER.match(present[0].as_py()) else "iso"
        if self.kind == "number":
            return self._fromnumbers(text, lines)
        if self.kind == "format":
            return self._one_by_one(text, lines, self._strptime)
        try:  # fast path: Arrow reads naive ISO-8601 (up to 9 fractional digits), then zoned
            return text.cast(pa.timestamp("ns")).cast(pa.int64())
        except pa.ArrowInvalid:
            try:
                return text.cast(pa.timestamp("ns", "UTC")).cast(pa.int64())
            except pa.ArrowInvalid:
                return self._one_by_one(text, lines, _iso_ns)  # mixed zones, or a bad value to point at

    def _fromnumbers(self, text: pa.Array, lines: list[int]) -> pa.Array:
        expected = f"a number in {self.unit}" if self.unit else "a number (epoch s/ms/us/ns), as in the first row"
        values = numbers(text, lines, self.where, self.column, expected, "; or give --ts-format")
        if values.null_count == len(values):
            return pa.nulls(len(text), pa.int64())
        biggest = float(pc.max(pc.abs(values)).as_py())
        if self.relative is None:
            self._decide(biggest)
        factor = UNITS[self.unit]
        if biggest * factor >= 2**63:
            raise LoadprobeError(f"{self.where}: timestamp column {self.column!r} holds {biggest:.0f}, too large "
                                 f"for {self.unit}; give the right --ts-unit")
        present = values.is_valid().to_numpy(zero_copy_only=False)
        try:  # integers exactly, in one pass (ns need all 63 bits, more than float64 holds)
            ns = text.cast(pa.int64()).fill_null(0).to_numpy() * factor
        except pa.ArrowInvalid:  # fractions: decimal arithmetic, exact to the ns where float64 is not
            ns = np.array([round(Decimal(value) * factor) if keep else 0
                           for value, keep in zip(text.to_pylist(), present)], dtype=np.int64)
        if self.relative:
            ns = ns + self.origin_ns
        return pa.array(ns, mask=~present, type=pa.int64())

    def _decide(self, biggest: float) -> None:
        """Unit (when not given) and whether the numbers are offsets, from the largest of the first batch."""
        if self.unit is None:
            if biggest * UNITS["s"] < _RELATIVE_BELOW_NS:
                raise LoadprobeError(
                    f"{self.where}: timestamp column {self.column!r} holds small numbers (up to {biggest:,.0f}), "
                    f"offsets rather than dates; give --ts-unit s, ms, us or ns (offsets start at --origin, "
                    f"default {DEFAULT_ORIGIN})")
            self.unit = next((u for u, below in (("s", 1e11), ("ms", 1e14), ("us", 1e17)) if biggest < below), "ns")
        self.relative = biggest * UNITS[self.unit] < _RELATIVE_BELOW_NS

    def _one_by_one(self, text: pa.Array, lines: list[int], parse) -> pa.Array:
        out = []
        for line, value in zip(lines, text.to_pylist()):
            ns = None if value is None else parse(value)
            if ns is None and value is not None:
                hint = (f"does not match --ts-format {self.ts_format!r}" if self.ts_format else
                        "is not a time; expected ISO-8601 (2023-11-16 18:17:03.98) or epoch s/ms/us/ns; "
                        "give --ts-format (a strptime format) for other forms")
                raise LoadprobeError(f"{self.where}, line {line}: timestamp column {self.column!r} = {value!r} {hint}")
            if ns is not None and not -2**63 <= ns < 2**63:
                raise LoadprobeError(f"{self.where}, line {line}: timestamp column {self.column!r} = {value!r} is "
                                     "out of range; times from 1677-09-22 to 2262-04-11 (int64 nanoseconds) are read")
            out.append(ns)
        return pa.array(out, pa.int64())

    def _strptime(self, value: str) -> int | None:
        try:
            return _datetime_ns(datetime.strptime(value, self.ts_format))
        except ValueError:
            return None


def _iso_ns(text: str) -> int | None:
    """ISO-8601 with any number of fractional digits (Azure's have 7) as epoch ns; naive means UTC."""
    match = _ISO.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        moment = datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0),
                          tzinfo=timezone.utc)
    except ValueError:
        return None
    ns = int(moment.timestamp()) * UNITS["s"] + int((fraction or "0")[:9].ljust(9, "0"))
    if zone and zone.upper() not in ("Z", "UTC"):
        digits = zone[1:].replace(":", "")
        offset_s = int(digits[:2]) * 3600 + int(digits[2:4] or 0) * 60
        ns -= (offset_s if zone[0] == "+" else -offset_s) * UNITS["s"]
    return ns


def _datetime_ns(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.replace(microsecond=0).timestamp()) * UNITS["s"] + moment.microsecond * UNITS["us"]


def parse_origin(origin: str | datetime) -> int:
    if isinstance(origin, datetime):
        return _datetime_ns(origin)
    ns = _iso_ns(str(origin).strip())
    if ns is None:
        raise LoadprobeError(f"--origin {origin!r} is not an ISO-8601 time; e.g. --origin 2024-01-01T00:00:00Z")
    return ns


# -- writing -------------------------------------------------------------------------------


def numbers(text: pa.Array, lines: list[int], where: str, column: str, expected: str, hint: str = "") -> pa.Array:
    """Strings as float64, null where empty or NaN; raises naming the first line that is not a number."""
    is_number = pc.match_substring_regex(text, _NUMBER.pattern).fill_null(True)
    if not pc.all(is_number).as_py():
        at = pc.index(is_number, False).as_py()
        raise LoadprobeError(f"{where}, line {lines[at]}: column {column!r} = {text[at].as_py()!r}, "
                             f"expected {expected}{hint}")
    floats = text.cast(pa.float64()).to_numpy(zero_copy_only=False)
    return pa.array(floats, mask=np.isnan(floats))


def iso(ns: int) -> str:
    return datetime.fromtimestamp(ns // UNITS["s"], timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + (
        f".{ns % UNITS['s']:09d}".rstrip("0").rstrip(".") + "Z")
