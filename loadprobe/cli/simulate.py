"""``loadprobe simulate``: run a pipeline.yaml through the discrete-event simulator at a given load."""

from __future__ import annotations

import json

import click


@click.command()
@click.argument("plan", type=click.Path(dir_okay=False))
@click.option("--rate", type=float, required=True, help="Mean arrival rate, requests per second.")
@click.option("--duration", type=float, default=60.0, show_default=True, help="Seconds of arrivals.")
@click.option("--poisson", is_flag=True, help="Poisson arrivals (default: evenly spaced).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of arrivals and service times.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def simulate(plan, rate, duration, poisson, seed, as_json):
    """Simulate PLAN (a pipeline.yaml) under --rate requests per second for --duration seconds.

    Service times come from each stage's service_time_ms (lognormal through p50 and p95).

    \b
    Examples:
        loadprobe simulate pipeline.yaml --rate 200 --duration 60 --poisson
    """
    # Imported here so that ``loadprobe --help`` stays light.
    from .. import load, pipeline
    from ..simulate import simulate as run

    config = pipeline.load(plan)
    arrivals = load.poisson(rate, duration=duration, seed=seed) if poisson else load.constant(rate, duration=duration)
    result = run(config, arrivals, seed=seed)
    click.echo(json.dumps(result.to_dict(), indent=2) if as_json else result.render())
