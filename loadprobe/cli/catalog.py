"""``loadprobe catalog``: the hardware catalog's devices and their figures, each with its source."""

from __future__ import annotations

import json

import click

FIGURES = ("price_usd", "hourly_usd", "tdp_w", "idle_w")


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
    from ..catalog import load_catalog

    found = load_catalog(*catalogs)
    devices = [found.get(d) for d in device_ids] if device_ids else list(found)
    if as_json:
        click.echo(json.dumps([_plain(d) for d in devices], indent=2))
        return
    if not device_ids:
        rows = [[d.id, d.kind, d.name, _peak(d), _num(d.memory_bandwidth_bytes_per_s, 1e9, "GB/s"),
                 _num(d.memory_bytes, 2**30, "GiB"), _num(d.tdp_w, 1, "W"), _num(d.price_usd, 1, "USD", ",.0f"),
                 _num(d.hourly_usd, 1, "USD/h", ".2f")] for d in devices]
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
        click.echo(f"  memory bandwidth: {_num(d.memory_bandwidth_bytes_per_s, 1e9, 'GB/s')}; memory: "
                   f"{_num(d.memory_bytes, 2**30, 'GiB')}")
        for name in FIGURES:
            click.echo(f"  {d.figure_note(name).removeprefix(d.id + ' ')}")
        if d.notes:
            click.echo(f"  notes: {d.notes}")


def _peak(d) -> str:
    if not d.peak_flops:
        return "-"
    precision, flops = max(d.peak_flops.items(), key=lambda kv: kv[1])
    return f"{flops / 1e12:,.4g} TFLOP/s {precision}"


def _num(value, scale: float, unit: str, spec: str = ",.4g") -> str:
    return "-" if value is None else f"{value / scale:{spec}} {unit}"


def _plain(d) -> dict:
    keys = ("id", "kind", "vendor", "name", "memory_bandwidth_bytes_per_s", "memory_bytes", "dynamic_shapes", "int8",
            *FIGURES, "notes")
    return {k: getattr(d, k) for k in keys} | {"peak_flops": dict(d.peak_flops), "sources": dict(d.sources),
                                               "dates": dict(d.dates), "unpublished": dict(d.unpublished)}
