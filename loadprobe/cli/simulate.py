"""``loadprobe simulate``: replay an arrival schedule through one plan, or every plan of a plans.json."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import click

from .._errors import LoadprobeError
from .._files import inside, write_file
from ._outputs import refuse_existing
from ._schedule import build_schedule, schedule_options


@click.command()
@click.argument("plan", type=click.Path(dir_okay=False), required=False)
@click.option("--llm", "llm_data", multiple=True, metavar="DATA",
              help="Simulate an LLM engine iteration by iteration, fitted to its recording DATA (the engine's spans, "
                   "its OpenTelemetry spans, a 'loadprobe load --openai --record' client, or several); with a PLAN "
                   "of recommend --llm, its pools instead, DATA giving the requests' lengths. Without a schedule, "
                   "the recording's own arrivals.")
@click.option("--max-running", type=int, help="--llm: sequences the engine runs at once [default: 256].")
@click.option("--token-budget", type=int, help="--llm: tokens per iteration, decodes and prompt chunks "
                                               "[default: unlimited].")
@click.option("--kv-tokens", type=int, help="--llm: KV-cache capacity in tokens [default: unbounded].")
@click.option("--kv-reserve", type=click.Choice(["paged", "request"]),
              help="--llm: KV held as sequences grow, preempting when full (vLLM), or a prompt plus its whole output "
                   "reserved at admission (the sample engine) [default: paged].")
@click.option("--chunked-prefill/--no-chunked-prefill", default=None,
              help="--llm: prompts share an iteration with the decodes (vLLM V1), or run in passes of their own "
                   "[default: as the recording shows, else on].")
@click.option("--slo-ttft-ms", type=float, help="--llm: goodput's TTFT target [default: twice the median].")
@click.option("--slo-tpot-ms", type=float, help="--llm: goodput's TPOT target [default: twice the median].")
@click.option("--service", help="The service to read where the data holds several: --llm DATA's, else --trace "
                                "DATA's.")
@schedule_options
@click.option("--service-times", "service_times", metavar="DATA",
              help="Recorded data to draw each stage's service times from (default: the plan's service_time_ms).")
@click.option("--service-time", "service_time_overrides", multiple=True, metavar="STAGE[@ENGINE]=DIST",
              help="A stage's service time, overriding the plan and the recording: constant:MS, "
                   "exponential:MEAN_MS or lognormal:P50_MS:P95_MS; repeatable.")
@click.option("--errors/--no-errors", default=True, show_default=True,
              help="With --service-times: executors fail at each stage's recorded error rate.")
@click.option("--outside/--no-outside", default=True, show_default=True,
              help="With --service-times: add each request's recorded time outside every stage (HTTP, framework).")
@click.option("--sync", is_flag=True, help="Executors are threads: a timed-out execution keeps its slot until it "
                                           "ends (default: async, stopped at the deadline).")
@click.option("--price", "prices", multiple=True, metavar="DEVICE=PRICE", help="Purchase price of a catalog device.")
@click.option("--rent/--buy", default=None, help="Price the plans rented (hourly rates) or bought (purchase and "
                                                 "electricity); default: as the plans.json was priced, else bought.")
@click.option("--hourly-rate", "hourly_rates", multiple=True, metavar="DEVICE=RATE",
              help="On-demand rate per unit and hour of a catalog device (with --rent).")
@click.option("--price-per-kwh", type=float, default=0.15, show_default=True, help="Electricity price.")
@click.option("--years", type=float, default=3.0, show_default=True, help="Years of ownership for the cost.")
@click.option("-o", "--output", "outdir", type=click.Path(file_okay=False), default="loadprobe-simulation",
              show_default=True, help="Directory for simulation.json and simulation.html.")
@click.option("--no-html", is_flag=True, help="Do not write simulation.html.")
@click.option("--json", "as_json", is_flag=True, help="Print simulation.json to stdout instead of the tables.")
@click.option("--force", is_flag=True, help="Replace simulation.json and simulation.html in -o.")
def simulate(plan, llm_data, max_running, token_budget, kv_tokens, kv_reserve, chunked_prefill, slo_ttft_ms,
             slo_tpot_ms, service, service_times, service_time_overrides, errors, outside, sync, prices, rent,
             hourly_rates, price_per_kwh, years, outdir, no_html, as_json, force, **schedule):
    """Simulate PLAN under an arrival schedule, without the hardware.

    PLAN is a pipeline.yaml, or the plans.json of `loadprobe recommend` (every plan in it, side by
    side). The schedule is a replay (--trace: recorded data, an imported trace or a CSV/JSONL
    request log, --speed to stress it) or a synthetic process at --rate.

    \b
    Examples:
        loadprobe simulate pipeline.yaml --poisson --rate 200 --duration 60 --seed 1
        loadprobe simulate plan/plans.json --trace data/ --speed 1.5 --service-times data/
        loadprobe simulate pipeline.yaml --trace trace.csv --preset azure-llm-2023 --speed 4
        loadprobe simulate pipeline.yaml --poisson --rate 300 --service-time backbone@npu0=lognormal:3:5
        loadprobe simulate --llm data/ --llm client/ --poisson --rate 6 --duration 60 --seed 1 --max-running 8
        loadprobe simulate llm-plan/pipeline.yaml --llm data/ --poisson --rate 12 --duration 60
    """
    llm_plan = _llm_plan(plan) if plan is not None else None
    if llm_data:
        if plan is not None and llm_plan is None:
            raise LoadprobeError(f"--llm simulates an LLM engine, and {plan} is not an LLM plan (no llm: section): "
                                 f"leave {plan} out to replay the engine recorded in {llm_data[0]}")
        settings = {"max_running": max_running, "token_budget": token_budget, "kv_tokens": kv_tokens,
                    "kv_reserve": kv_reserve, "chunked_prefill": chunked_prefill}
        if llm_plan is not None and any(v is not None for v in settings.values()):
            raise LoadprobeError(f"{plan} sets each pool's engine: leave out --max-running, --token-budget, --kv-tokens, "
                                 "--kv-reserve and --chunked-prefill (or edit its llm.pools)")
        return _simulate_llm(llm_data, schedule, outdir, force, as_json, service=service, ttft_ms=slo_ttft_ms,
                             tpot_ms=slo_tpot_ms, plan=llm_plan, **settings)
    if plan is None:
        raise LoadprobeError("what to simulate? give a PLAN (pipeline.yaml or plans.json) or --llm DATA")
    if llm_plan is not None:
        raise LoadprobeError(f"{plan} is an LLM plan: give --llm DATA (a recording of the requests: their prompt and "
                             "output lengths, and their arrivals when no schedule is given)")
    llm_only = {"--max-running": max_running, "--token-budget": token_budget, "--kv-tokens": kv_tokens,
                "--slo-ttft-ms": slo_ttft_ms, "--slo-tpot-ms": slo_tpot_ms}
    stray = [name for name, value in llm_only.items() if value is not None]
    if stray:
        raise LoadprobeError(f"{', '.join(stray)} apply to --llm only; leave them out or add --llm DATA")
    if service is not None and schedule.get("replay") is None:
        raise LoadprobeError("--service chooses the service of --trace DATA or --llm DATA; give one of them")
    # Imported here so that ``loadprobe --help`` stays light.
    from ..plan.constraints import parse_prices
    from ..simulator import parse_override
    from ..simulator.compare import planned_rent, read_plans, simulate_plans

    out = Path(outdir)
    json_path, html_path = inside(out, "simulation.json"), inside(out, "simulation.html")
    refuse_existing([json_path] + ([] if no_html else [html_path]), force)  # before the work
    plans = read_plans(plan)
    offsets, mode, seed, _ = build_schedule(**schedule, service=service)
    given = [(text, *parse_override(text)) for text in service_time_overrides]
    _check_overrides(given, plans)

    @functools.lru_cache(maxsize=1)
    def portrait():  # analysed once, and only when a plan moves a stage off its recorded engine
        from ..analysis.run import analyze

        return analyze([service_times])

    comparison = simulate_plans(plans, offsets, source=str(plan), arrivals=mode, seed=seed or 0, data=service_times,
                                overrides=[g[1:] for g in given], errors=errors, outside=outside, portrait=portrait,
                                executors="sync" if sync else "async", prices=parse_prices(prices),
                                rent=planned_rent(plan) if rent is None else rent,
                                hourly_rates=parse_prices(hourly_rates, option="--hourly-rate", example="nvidia-l4=0.85"),
                                price_per_kwh=price_per_kwh, years=years)
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_file(json_path, json.dumps(comparison.to_dict(), indent=2) + "\n")
        if not no_html:
            from ..reports.html import write_simulation

            write_simulation(comparison.to_dict(), html_path)
    except OSError as exc:
        raise LoadprobeError(f"{out}: cannot write the results ({exc.strerror or exc}); give another -o") from None
    if as_json:
        click.echo(json.dumps(comparison.to_dict(), indent=2))
        return
    click.echo(comparison.render())
    click.echo(f"\nwrote {out / 'simulation.json'}" + ("" if no_html else f" and {out / 'simulation.html'}"))


def _llm_plan(plan: str):
    """``plan``'s PipelineConfig where it is a pipeline.yaml with an ``llm:`` section, else None."""
    if plan.endswith(".json"):
        return None
    from ..pipeline.files import load

    config = load(plan)
    return config if config.llm is not None else None


def _simulate_llm(paths, schedule: dict, outdir, force: bool, as_json: bool, *, service, ttft_ms, tpot_ms, plan=None,
                  **engine) -> None:
    """``--llm``: fit the engine recorded in ``paths``, replay the schedule (else its own arrivals) through it."""
    from ..simulator.llm.engine import EngineSettings
    from ..simulator.llm.replay import simulate_llm

    out = Path(outdir)
    json_path = inside(out, "simulation.json")
    refuse_existing([json_path], force)
    given = [f"--{k.replace('_', '-')}" for k in ("max_running", "token_budget", "kv_tokens", "chunked_prefill")
             if engine[k] is not None]
    defaults = EngineSettings()
    settings = EngineSettings(**{k: (v if v is not None else getattr(defaults, k)) for k, v in engine.items()},
                              why=("as given (" + ", ".join(given) + "), the rest vLLM's defaults") if given else
                              "vLLM's defaults: give --max-running, --token-budget, --kv-tokens to match the engine")
    timed = any(schedule.get(k) is not None for k in ("rate", "process", "replay"))
    offsets, mode, seed, tokens = build_schedule(**schedule) if timed else (None, None, schedule.get("seed") or 0, None)
    result = simulate_llm(list(paths), offsets=offsets, tokens=tokens, mode=mode, seed=seed or 0, settings=settings,
                          service=service, ttft_ms=ttft_ms, tpot_ms=tpot_ms, plan=plan)
    document = result.to_dict()
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_file(json_path, json.dumps(document, indent=2) + "\n")
    except OSError as exc:
        raise LoadprobeError(f"{out}: cannot write the results ({exc.strerror or exc}); give another -o") from None
    click.echo(json.dumps(document, indent=2) if as_json else result.render() + f"\n\nwrote {json_path}")


def _check_overrides(given: list, plans: list) -> None:
    """Each --service-time once per stage (for every engine, or per engine), and for an engine some plan uses."""
    whole = {stage for _, stage, engine, _ in given if engine is None}
    seen: set = set()
    for text, stage, engine, _ in given:
        if engine is not None and stage in whole:
            raise LoadprobeError(f"--service-time {text!r}: {stage} already has one for every engine; give either "
                                 f"{stage}=... or {stage}@ENGINE=..., not both")
        if (stage, engine) in seen:
            raise LoadprobeError(f"--service-time {text!r}: {stage}{'@' + engine if engine else ''} is given twice")
        seen.add((stage, engine))
        if engine is not None and not any(_runs_on(config, stage, engine) for _, config in plans):
            engines = sorted({e for _, config in plans for s in config.stages if s.name == stage for e in s.runs_on})
            raise LoadprobeError(f"--service-time {text!r}: no plan runs {stage} on {engine}; its engines are "
                                 f"{', '.join(engines) or 'none (no such stage)'}")


def _runs_on(config, stage: str, engine: str) -> bool:
    return any(s.name == stage and engine in s.runs_on for s in config.stages)
