"""The hardware catalog: what each CPU, GPU and NPU can do at peak, with a source for every figure.

    from loadprobe.catalog import load_catalog

    catalog = load_catalog()                     # the packaged loadprobe/devices.json
    catalog = load_catalog("site-devices.json")  # plus local entries and overrides, applied in order
    h100 = catalog.get("nvidia-h100-sxm")
    h100.peak("fp16")                            # 9.894e14 FLOP/s, dense
    h100.ridge_point("fp16")                     # ~295 FLOP/byte: below it a kernel is memory-bound
    catalog.match("NVIDIA H100 80GB HBM3")       # the name NVML recorded -> the same Device
    h100.hourly_usd, h100.dates["hourly_usd"]    # 6.88 per GPU-hour on demand, as of 2026-11-09
    h100.unpublished["price_usd"]                # why there is no purchase price: never a silent zero

The entry schema, the override rules and where the figures come from: docs/catalog.md.
Only the standard library is imported here (PyYAML only when a .yaml file is given), so the
analysis and the recommender can load the catalog without pulling anything else in.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterator, Mapping

from ._errors import LoadprobeError
from .formats import CATALOG, UnreadableVersionError

__all__ = ["PRECISIONS", "PRECISION_BYTES", "Catalog", "Device", "load_catalog"]

PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4")
PRECISION_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
"""Bytes one weight takes at each precision."""
KINDS = ("cpu", "gpu", "npu")
DYNAMIC_SHAPES = ("native", "recompile", "poor")
# Scalar figures: each must be positive when given, and cited in "sources".
FIGURES = ("memory_bandwidth_bytes_per_s", "memory_bytes", "tdp_w", "idle_w", "price_usd", "hourly_usd",
           "on_chip_bytes", "interconnect_bytes_per_s")
# Price and power figures: in the packaged catalog each is either given (cited; prices also dated) or null with
# the reason in "unpublished", so that an unknown price or power is said, never read as zero.
PRICES = ("price_usd", "hourly_usd")
PRICE_POWER = ("tdp_w", "idle_w", *PRICES)
FIELDS = ("kind", "vendor", "name", "peak_flops", *FIGURES, "dynamic_shapes", "int8", "sources", "dates",
          "unpublished", "aliases", "notes")
OPTIONAL = ("notes", "idle_w", "hourly_usd", "on_chip_bytes", "interconnect_bytes_per_s", "dates",
            "unpublished")  # absent = null / empty
REQUIRED = tuple(f for f in FIELDS if f not in OPTIONAL)

_PACKAGED = "loadprobe/devices.json"
_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_SOURCE_KEYS = frozenset(FIELDS) - {"sources", "dates", "unpublished"} | {f"peak_flops.{p}" for p in PRECISIONS}
_DATE = re.compile(r"\d{4}-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?")


@dataclass(frozen=True)
class Device:
    """One catalog entry; figures are dense peaks in SI units, ``None`` where unknown.

    ``origin`` lists the files that defined or changed the entry, in the order applied.
    """

    id: str
    kind: str
    vendor: str
    name: str
    peak_flops: Mapping[str, float]
    memory_bandwidth_bytes_per_s: float | None
    memory_bytes: float | None
    tdp_w: float | None  # maximum power: the vendor's TDP or maximum board power, W
    price_usd: float | None  # reference purchase price of one unit
    dynamic_shapes: str
    int8: bool
    sources: Mapping[str, str]
    aliases: tuple[str, ...]
    notes: str = ""
    origin: tuple[str, ...] = field(default=(), compare=False)
    idle_w: float | None = None  # power at idle, W
    hourly_usd: float | None = None  # cloud on-demand rate for one unit (a GPU's share of its instance), USD/h
    # A dataflow NPU with no external DRAM (Hailo-8) keeps a model's weights in its on-chip memory: the most
    # weights it can hold, bytes. ``memory_bandwidth_bytes_per_s`` is then None: nothing streams from DRAM.
    on_chip_bytes: float | None = None
    # The device's link to its peers in one server, bytes/s each way (NVLink; else its PCIe slot): what a
    # tensor-parallel group's all-reduce runs over.
    interconnect_bytes_per_s: float | None = None
    dates: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # field -> when its figure held
    unpublished: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # field -> why it is null

    @property
    def weights_on_chip(self) -> bool:
        """A dataflow NPU with no external DRAM: a model's weights stay in its ``on_chip_bytes``, so its time is
        bound by compute alone and a model must fit."""
        return self.memory_bandwidth_bytes_per_s is None and self.on_chip_bytes is not None

    @property
    def max_power_w(self) -> float | None:
        """The maximum power figure (``tdp_w``): what a power budget must provision for."""
        return self.tdp_w

    def figure_note(self, name: str, shown: str | None = None) -> str:
        """Where a figure comes from, or why there is none: one line for plan notes.

        ``shown`` is the figure as it should read (in units, say) instead of the bare number.
        """
        value = getattr(self, name)
        if value is None:
            return f"{self.id} {name}: no figure ({self.unpublished.get(name, 'not in the catalog')})"
        source = self.sources.get(name, "no source")
        when = f", {self.dates[name]}" if name in self.dates else ""
        shown = f"{value:g}" if shown is None else shown
        return f"{self.id} {name} = {shown} ({source}{when})"

    def __hash__(self) -> int:  # the mappings are unhashable; equal devices share an id
        return hash(self.id)

    def peak(self, precision: str) -> float | None:
        """Dense peak FLOP/s (OP/s for integers) at ``precision``, or None if not published.

        There is no fallback between precisions: a missing bf16 figure can mean the hardware has
        no bf16 at all (the T4), so guessing from fp16 would be wrong. The catalog lists every
        precision the vendor documents, fp16 and bf16 separately.
        """
        if precision not in PRECISIONS:
            raise LoadprobeError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
        return self.peak_flops.get(precision)

    def ridge_point(self, precision: str) -> float:
        """FLOP per byte at which the device turns compute-bound: peak(precision) / memory bandwidth.

        A stage whose arithmetic intensity is below this is limited by memory bandwidth.
        """
        peak, bandwidth = self.peak(precision), self.memory_bandwidth_bytes_per_s
        if peak is None or bandwidth is None:
            missing = f"peak_flops.{precision}" if peak is None else "memory_bandwidth_bytes_per_s"
            raise LoadprobeError(f"device {self.id!r}: no ridge point at {precision}, {missing} is not in the "
                                 f"catalog; add it with an override file (docs/catalog.md)")
        return peak / bandwidth


class Catalog:
    """Devices by id. Build one with :func:`load_catalog`."""

    def __init__(self, devices: Mapping[str, Device]):
        self._devices = dict(sorted(devices.items()))

    def ids(self) -> list[str]:
        """Every device id, sorted."""
        return list(self._devices)

    def get(self, device_id: str) -> Device:
        """The device with this id; an unknown id raises LoadprobeError naming close matches."""
        try:
            return self._devices[device_id]
        except KeyError:
            import difflib  # only on the error path

            # an id that extends the query ("nvidia-h100" -> "nvidia-h100-sxm") is the likeliest intent
            close = [i for i in self._devices if i.startswith(device_id)]
            close += difflib.get_close_matches(device_id, self._devices, n=3, cutoff=0.5)
            close = list(dict.fromkeys(close))[:3]
            hint = f"did you mean {', '.join(close)}?" if close else f"known ids: {', '.join(self._devices)}."
            raise LoadprobeError(f"unknown device {device_id!r} in the hardware catalog; {hint} loadprobe catalog "
                                 "lists them; to add one, give a JSON file with its entry to --catalog "
                                 "(docs/catalog.md)") from None

    def find(self, device_id: str | None) -> Device | None:
        """The device with this id, or None for no id or an id the catalog does not know (a
        portrait or pipeline naming a device from someone else's catalog)."""
        return self._devices.get(device_id) if device_id else None

    def match(self, name: str) -> Device | None:
        """The device a recorded hardware name refers to (NVML GPU name, CPU model string), or None.

        Each entry's ``aliases`` are case-insensitive regular expressions searched in ``name``.
        When several devices match, the longest matched text wins, being the most specific.
        """
        best, best_len = None, -1
        for device in self._devices.values():
            for alias in device.aliases:
                found = re.search(alias, name, re.IGNORECASE)
                if found and len(found.group()) > best_len:
                    best, best_len = device, len(found.group())
        return best

    def __iter__(self) -> Iterator[Device]:
        return iter(self._devices.values())

    def __len__(self) -> int:
        return len(self._devices)

    def __contains__(self, device_id: object) -> bool:
        return device_id in self._devices


def load_catalog(*extra: str | Path, strict: bool = False) -> Catalog:
    """The packaged catalog, with each ``extra`` file (JSON, or YAML if PyYAML is installed) applied in order.

    An extra entry with a new id adds a device and must be complete; one with a known id overrides
    only the fields it gives (``peak_flops``, ``sources``, ``dates`` and ``unpublished`` merge key by
    key). Every figure a file sets needs a source in that same file, so an old citation never vouches
    for a new number. The packaged file also accounts for every price and power figure (given, cited,
    prices dated; or null with the reason in ``unpublished``); ``strict=True`` holds each extra file's
    entries to that rule too (so each must then give or explain all four price and power fields).
    """
    text = resources.files("loadprobe").joinpath("devices.json").read_text(encoding="utf-8")
    entries: dict[str, dict[str, Any]] = {}
    origins: dict[str, list[str]] = {}
    for label, document in [(_PACKAGED, _parse(_PACKAGED, text, yaml=False)), *map(_read, extra)]:
        for device_id, entry in _check_file(label, document).items():
            if label == _PACKAGED or strict:
                _check_accounted(label, device_id, entry)
            if device_id in entries:
                _merge(entries[device_id], entry)
            else:
                entries[device_id] = entry
            origins.setdefault(device_id, []).append(label)
    return Catalog({i: _device(origins[i][-1], i, e, tuple(origins[i])) for i, e in entries.items()})


def _read(path: str | Path) -> tuple[str, Any]:
    label = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise LoadprobeError(f"{label}: cannot read the device file ({exc.strerror or exc}); give the path of a "
                             f"JSON file shaped like loadprobe/devices.json") from None
    return label, _parse(label, text, yaml=_is_yaml(label))


def _is_yaml(label: str) -> bool:
    return Path(label).suffix.lower() in (".yaml", ".yml")


def _parse(label: str, text: str, *, yaml: bool) -> Any:
    if yaml:
        try:
            import yaml as pyyaml
        except ImportError:
            raise LoadprobeError(f"{label}: reading YAML needs PyYAML (pip install pyyaml); "
                                 f"or write the file as JSON") from None
        try:
            return pyyaml.safe_load(text)
        except pyyaml.YAMLError as exc:
            raise LoadprobeError(f"{label}: not valid YAML ({' '.join(str(exc).split())})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise LoadprobeError(f"{label}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                             f"expected {{\"version\": \"1.0\", \"devices\": {{...}}}}") from None


def _check_file(label: str, document: Any) -> dict[str, dict[str, Any]]:
    """The file's entries after the checks that need only the file itself."""
    if not isinstance(document, dict) or not isinstance(document.get("devices"), dict):
        raise LoadprobeError(f"{label}: expected an object with a \"devices\" object, "
                             f"e.g. {{\"version\": \"1.0\", \"devices\": {{\"my-npu\": {{...}}}}}}")
    unknown = sorted(set(document) - {"version", "devices"})
    if unknown:
        raise LoadprobeError(f"{label}: unknown top-level key {unknown[0]!r}; expected \"version\" and \"devices\"")
    version = document.get("version", CATALOG.value)
    try:
        major = CATALOG.check(version, label)[0]  # a newer major raises: upgrade loadprobe
    except UnreadableVersionError:
        major = None
    if major != CATALOG.major:
        raise LoadprobeError(f"{label}: catalog version {version!r} is not supported; this loadprobe reads "
                             f"version {CATALOG.major}.x")
    for device_id, entry in document["devices"].items():
        if not _ID.fullmatch(device_id):
            raise LoadprobeError(f"{label}: device id {device_id!r} is not a lowercase slug; "
                                 f"use letters, digits and dashes, e.g. \"nvidia-h100-sxm\"")
        if not isinstance(entry, dict):
            raise LoadprobeError(f"{label}: device {device_id!r}: expected an object of fields")
        for key, value in entry.items():
            _check_field(label, device_id, key, value)
        _check_cited(label, device_id, entry)
    return document["devices"]


def _check_field(label: str, device_id: str, key: str, value: Any) -> None:
    def fail(problem: str) -> LoadprobeError:
        return LoadprobeError(f"{label}: device {device_id!r}, field {key!r}: {problem}")

    if key not in FIELDS:
        hint = "" if key != "origin" else " (origin is recorded by the loader)"
        raise fail(f"unknown field{hint}; expected one of {', '.join(FIELDS)}")
    if key == "kind" and value not in KINDS:
        raise fail(f"{value!r} is not a kind; expected one of {', '.join(KINDS)}")
    if key == "dynamic_shapes" and value not in DYNAMIC_SHAPES:
        raise fail(f"{value!r} is not valid; expected one of {', '.join(DYNAMIC_SHAPES)}")
    if key == "int8" and not isinstance(value, bool):
        raise fail(f"{value!r} is not true or false")
    if key in ("vendor", "name") and not (isinstance(value, str) and value.strip()):
        raise fail("expected a non-empty string")
    if key == "notes" and not isinstance(value, str):
        raise fail("expected a string")
    if key in FIGURES and value is not None and not _positive(value):
        raise fail(_not_a_figure(label, value))
    if key == "peak_flops":
        if not isinstance(value, dict):
            raise fail("expected an object of precision: FLOP/s")
        for precision, flops in value.items():
            if precision not in PRECISIONS:
                raise fail(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
            if flops is not None and not _positive(flops):
                raise fail(f"{precision} = {_not_a_figure(label, flops)}")
    if key == "sources":
        if not isinstance(value, dict):
            raise fail("expected an object of field: URL or document and section")
        for cited, source in value.items():
            if cited not in _SOURCE_KEYS:
                raise fail(f"{cited!r} is not a field to cite; use a field name or peak_flops.<precision>")
            if not (isinstance(source, str) and source.strip()):
                raise fail(f"the source for {cited!r} is empty; give a URL or an exact document name and section")
    if key == "dates":
        if not isinstance(value, dict):
            raise fail("expected an object of field: date, e.g. {\"price_usd\": \"2026-11-09\"}")
        for dated, when in value.items():
            if dated not in PRICE_POWER:
                raise fail(f"{dated!r} is not a field to date; use one of {', '.join(PRICE_POWER)}")
            if not (isinstance(when, str) and _DATE.fullmatch(when)):
                raise fail(f"the date for {dated!r} is {when!r}; write YYYY-MM-DD or YYYY-MM")
    if key == "unpublished":
        if not isinstance(value, dict):
            raise fail("expected an object of field: why no public figure exists")
        for missing, why in value.items():
            if missing not in PRICE_POWER:
                raise fail(f"{missing!r} is not a price or power field; use one of {', '.join(PRICE_POWER)}")
            if not (isinstance(why, str) and why.strip()):
                raise fail(f"the reason for {missing!r} is empty; say why there is no public figure")
    if key == "aliases":
        if not (isinstance(value, list) and all(isinstance(a, str) and a for a in value)):
            raise fail("expected a list of non-empty regular expressions")
        for alias in value:
            try:
                re.compile(alias)
            except re.error as exc:
                raise fail(f"{alias!r} is not a valid regular expression ({exc})") from None


def _check_cited(label: str, device_id: str, entry: Mapping[str, Any]) -> None:
    """Every figure this file sets must be cited in this file's own "sources"."""
    sources = entry.get("sources") or {}
    figures = [(f, f, entry[f]) for f in FIGURES if f in entry]
    figures += [(f"peak_flops.{p}", "peak_flops", v) for p, v in (entry.get("peak_flops") or {}).items()]
    for name, broad, value in figures:
        if value is not None and name not in sources and broad not in sources:
            raise LoadprobeError(f"{label}: device {device_id!r}, field {name!r}: {value!r} has no source; "
                                 f"add \"sources\": {{\"{name}\": \"<URL or document, section>\"}}")


def _check_accounted(label: str, device_id: str, entry: Mapping[str, Any]) -> None:
    """The packaged catalog's rule: each price or power figure is given, cited and (prices) dated, or null with
    the reason in "unpublished"; never both, never silently absent."""
    dates, unpublished = entry.get("dates") or {}, entry.get("unpublished") or {}
    for name in PRICE_POWER:
        value, where = entry.get(name), f"{label}: device {device_id!r}, field {name!r}"
        if value is None and name not in unpublished:
            raise LoadprobeError(f"{where}: null with no reason; add \"unpublished\": {{\"{name}\": \"<why there is "
                                 f"no public figure>\"}}")
        if value is not None and name in unpublished:
            raise LoadprobeError(f"{where}: {value!r} is given and also marked unpublished; remove one")
        if value is not None and name in PRICES and name not in dates:
            raise LoadprobeError(f"{where}: {value!r} has no date; add \"dates\": {{\"{name}\": \"YYYY-MM-DD\"}} "
                                 f"(when the price held)")


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> None:
    for key in PRICE_POWER:  # an old date never vouches for a new figure (an old "unpublished" note is dropped
        if override.get(key) is not None and key not in (override.get("dates") or {}):  # by _device)
            base["dates"] = {k: v for k, v in (base.get("dates") or {}).items() if k != key}
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value


def _device(label: str, device_id: str, entry: Mapping[str, Any], origin: tuple[str, ...]) -> Device:
    missing = [f for f in REQUIRED if f not in entry]
    if missing:
        raise LoadprobeError(f"{label}: device {device_id!r}, field {missing[0]!r}: missing; a new device needs "
                             f"{', '.join(REQUIRED)} (null where a figure is unknown); {', '.join(OPTIONAL)} "
                             f"are optional")
    peaks = {p: float(v) for p, v in entry["peak_flops"].items() if v is not None}
    return Device(
        id=device_id, kind=entry["kind"], vendor=entry["vendor"], name=entry["name"],
        peak_flops=MappingProxyType(dict(sorted(peaks.items(), key=lambda kv: PRECISIONS.index(kv[0])))),
        **{f: None if entry.get(f) is None else float(entry[f]) for f in FIGURES},
        dynamic_shapes=entry["dynamic_shapes"], int8=entry["int8"],
        sources=MappingProxyType(dict(entry["sources"])), aliases=tuple(entry["aliases"]),
        notes=entry.get("notes", ""), origin=origin,
        dates=MappingProxyType(dict(entry.get("dates") or {})),
        unpublished=MappingProxyType({k: v for k, v in (entry.get("unpublished") or {}).items()
                                      if entry.get(k) is None}),
    )


def _not_a_figure(label: str, value: Any) -> str:
    # PyYAML reads 80e9 (no dot, no exponent sign) as text: the likeliest way to get a string from a YAML file
    # (in JSON a string is a quoted number, and the YAML advice would mislead)
    hint = "; in YAML write 80.0e+9, not 80e9" if isinstance(value, str) and _is_yaml(label) else ""
    return f"{value!r} is not a positive number (or null when unknown){hint}"


def _positive(value: Any) -> bool:
    # bool is an int in Python; "tdp_w": true is a typo, not 1 watt
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
