"""``loadprobe demo``: serve, load, record and analyse the sample vision service."""

from __future__ import annotations

import click


@click.command()
@click.option("-o", "--output", default="loadprobe-demo", show_default=True, type=click.Path(file_okay=False),
              help="Folder for the demo's runs (each run gets a new timestamped folder inside).")
@click.option("--seconds", type=click.FloatRange(min=2),
              help="Length of the compressed day [default: 60; --llm: 30 s of arrivals].")
@click.option("--rate", type=click.FloatRange(min=0.1),
              help="Mean requests per second (the peak is twice that, the burst 2.5x) [default: 20; --llm: 2].")
@click.option("--precision", type=click.Choice(["fp32", "int8"]), default="fp32", show_default=True,
              help="The backbone model the service runs.")
@click.option("--llm", is_flag=True,
              help="The LLM sample instead: its continuous-batching engine, driven by streamed completions "
                   "(loadprobe load --openai), analysed into TTFT, TPOT, tokens per second and goodput.")
def demo(output, seconds, rate, precision, llm):
    """Run the sample vision service end to end on this machine, and plan its hardware.

    Starts samples/vision on 127.0.0.1 under a recorder, sends it a day's traffic
    compressed into --seconds with a burst, analyses what was recorded, checks the INT8
    backbone, plans CPU + GPU + NPU for twice what this CPU alone carries, replays the plans
    in the simulator and prints where every output is. Needs pip install 'loadprobe[demo]'.

    With --llm it runs the LLM sample instead: an OpenAI-compatible engine with continuous
    batching, under a recorder, driven by loadprobe load --openai with its /metrics scraped;
    both sides are analysed together and the report's LLM section written.

    \b
    Examples:
        loadprobe demo --seconds 30
        loadprobe demo --llm
    """
    from ..demo import run_demo, run_llm_demo

    try:
        if llm:
            run_llm_demo(out=output, seconds=seconds or 30.0, rate=rate or 2.0, echo=click.echo)
        else:
            run_demo(out=output, seconds=seconds or 60.0, rate=rate or 20.0, precision=precision, echo=click.echo)
    except KeyboardInterrupt:  # run_demo said what it kept
        raise SystemExit(130) from None
