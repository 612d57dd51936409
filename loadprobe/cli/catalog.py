"""``loadprobe catalog``: the hardware catalog's devices and their figures, each with its source."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

import click

# How each of catalog.FIGURES reads in text: scale and unit. A figure missing here still shows, as a bare number.
UNITS = {"memory_bandwidth_bytes_per_s": (1e9, "GB/s"), "memory_bytes": (2**30, "GiB"), "tdp_w": (1, "W"),
         "idle_w": (1, "W"), "price_usd": (1, "USD"), "hourly_usd": (1, "USD/h"), "on_chip_bytes": (1e6, "MB"),
         "interconnect_bytes_per_s": (1e9, "GB/s")}


@click.command()
@click.argument("device_ids", nargs=-1, metavar="[DEVICE]...")
@click.option("--catalog", "catalogs", multiple=True, type=click.Path(dir_okay=False),
              help="Extra device catalog file (JSON), applied over the built-in one; repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the devices as JSON.")
def catalog(device_ids, catalogs, as_json):
    """List the devices --device, --engines and --price accept, or show DEVICE's figures and sources.

    \b
    Examples:
        loadprobe catalog                          # every device: id, kind, peaks, memory, power, prices
        loadprobe catalog nvidia-l4 ascend-310p    # each figure with where it comes from, or why it is missing
        loadprobe catalog --catalog site-devices.json
    """
    from .._table import text_table
    from ..catalog import FIGURES, load_catalog

    found = load_catalog(*catalogs)
    devices = [found.get(d) for d in device_ids] if device_ids else list(found)
    if as_json:
        click.echo(json.dumps([_plain(d) for d in devices], indent=2))
        return
    if not device_ids:
        rows = [[d.id, d.kind, d.name, _peak(d), _num(d, "memory_bandwidth_bytes_per_s"), _num(d, "memory_bytes"),
                 _num(d, "tdp_w"), _num(d, "price_usd", ",.0f"), _num(d, "hourly_usd", ".2f")] for d in devices]
        click.echo("\n".join(line.rstrip() for line in text_table(
            ["id", "kind", "name", "peak (best precision)", "memory bandwidth", "memory", "max power", "price", "rent"],
            rows)))
        click.echo(f"\n{len(devices):,} devices; '-' is a figure the vendor does not publish: loadprobe catalog ID "
                   "says why, and where every other figure comes from")
        return
    for d in devices:
        click.echo(f"{d.id}: {d.name} ({d.vendor}, {d.kind}); dynamic shapes: {d.dynamic_shapes}; "
                   f"int8: {'yes' if d.int8 else 'no'}")
        for precision, flops in sorted(d.peak_flops.items()):
            click.echo(f"  peak {precision}: {flops / 1e12:,.4g} TFLOP/s")
        for name in FIGURES:  # every figure, so a new one cannot be left out; ",.6g" rounds no more than :g
            click.echo(f"  {d.figure_note(name, _num(d, name, ',.6g')).removeprefix(d.id + ' ')}")
        if d.notes:
            click.echo(f"  notes: {d.notes}")


def _peak(d) -> str:
    if not d.peak_flops:
        return "-"
    precision, flops = max(d.peak_flops.items(), key=lambda kv: kv[1])
    return f"{flops / 1e12:,.4g} TFLOP/s {precision}"


def _num(d, name: str, spec: str = ",.4g") -> str:
    """Figure ``name`` of device ``d`` in its unit, or "-" where it has none."""
    value = getattr(d, name)
    scale, unit = UNITS.get(name, (1, ""))
    return "-" if value is None else f"{value / scale:{spec}} {unit}".rstrip()


def _plain(d) -> dict:
    """Every field of the device, as stored (SI units): a field added to Device shows without a change here."""
    def plain(value):
        return dict(value) if isinstance(value, Mapping) else list(value) if isinstance(value, tuple) else value

    return {f.name: plain(getattr(d, f.name)) for f in dataclasses.fields(d)}
