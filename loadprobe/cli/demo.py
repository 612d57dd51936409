"""``loadprobe demo``: serve, load, record and analyse the sample vision service."""

from __future__ import annotations

import click


@click.command()
@click.option("-o", "--output", default="loadprobe-demo", show_default=True, type=click.Path(file_okay=False),
              help="Folder for the demo's runs (each run gets a new timestamped folder inside).")
@click.option("--seconds", type=click.FloatRange(min=2), default=60.0, show_default=True,
              help="Length of the compressed day.")
@click.option("--rate", type=click.FloatRange(min=0.5), default=20.0, show_default=True,
              help="Mean requests per second (the peak is twice that, the burst 2.5x).")
@click.option("--precision", type=click.Choice(["fp32", "int8"]), default="fp32", show_default=True,
              help="The backbone model the service runs.")
def demo(output, seconds, rate, precision):
    """Run the sample vision service end to end on this machine, and plan its hardware.

    Starts samples/vision on 127.0.0.1 under a recorder, sends it a day's traffic
    compressed into --seconds with a burst, analyses what was recorded, checks the INT8
    backbone, plans CPU + GPU + NPU for twice what this CPU alone carries, replays the plans
    in the simulator and prints where every output is. Needs pip install 'loadprobe[demo]'.

    \b
    Example:
        loadprobe demo --seconds 30
    """
    from ..demo import run_demo

    try:
        run_demo(out=output, seconds=seconds, rate=rate, precision=precision, echo=click.echo)
    except KeyboardInterrupt:  # run_demo said what it kept
        raise SystemExit(130) from None
