"""``loadprobe recommend``: a portrait (or recorded data) in, pipeline.yaml and plans.json out."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .._files import inside, write_file
from ._outputs import refuse_existing
from ._progress import ProgressBar


@click.command()
@click.argument("source", nargs=-1, required=True)
@click.option("-o", "--output", default="loadprobe-report/pipeline.yaml", show_default=True, type=click.Path(),
              help="Where to write pipeline.yaml (plans.json goes beside it): a .yaml file, or a folder to write "
                   "pipeline.yaml into (a name without a suffix, or one that exists).")
@click.option("--engines", help="Engines to plan with: KIND[:DEVICE][xN], e.g. cpu,gpu:nvidia-l4x2,npu:ascend-310p "
                                "(default: cpu,gpu:nvidia-l4,npu:ascend-310p). An accelerator's xN is the most "
                                "units to buy (default: up to 64); the plan says how many. A CPU's xN is hosts.")
@click.option("--slo-p95-ms", type=float, help="End-to-end p95 latency target (default: the recorded p95).")
@click.option("--slo-p99-ms", type=float, help="End-to-end p99 latency target.")
@click.option("--slo-p50-ms", type=float, help="End-to-end median latency target.")
@click.option("--slo-ttft-ms", type=float, help="An LLM load's p95 time to first token (default: the recorded p95); "
                                                "written into pipeline.yaml's slo.")
@click.option("--slo-tpot-ms", type=float, help="An LLM load's p95 time per output token after the first (default: "
                                                "the recorded p95); written into pipeline.yaml's slo.")
@click.option("--min-rps", type=float, help="Rate to size for (default: the recorded peak).")
@click.option("--power-budget-w", type=float, help="Power budget for the whole line-up, in watts.")
@click.option("--precision", multiple=True, metavar="[STAGE=]POLICY",
              help="fp16-only (default) or int8-ok, for all stages or one: --precision backbone=int8-ok.")
@click.option("--align", "aligns", multiple=True, type=click.Path(dir_okay=False), metavar="ALIGN.JSON",
              help="A loadprobe align verdict: sets its stage's precision and the layers kept in FP16 (repeatable, "
                   "one per stage).")
@click.option("--changes-often", multiple=True, metavar="STAGE[,STAGE]",
              help="Stages whose model is replaced often (monthly): kept off NPUs that need offline conversion.")
@click.option("--price", "prices", multiple=True, metavar="DEVICE=AMOUNT",
              help="Purchase price per unit of a catalog device, any currency (repeatable).")
@click.option("--rent/--buy", default=None,
              help="Price accelerators by their hourly rate (rented) or their purchase (bought). Default: bought "
                   "where every device has a purchase price, else rented where every one has an hourly rate.")
@click.option("--hourly-rate", "hourly_rates", multiple=True, metavar="DEVICE=RATE",
              help="On-demand rate per unit and hour of a catalog device, any currency (repeatable; with --rent).")
@click.option("--years", type=float, default=3.0, show_default=True, help="Lifetime for the cost of ownership.")
@click.option("--price-per-kwh", type=float, default=0.15, show_default=True, help="Electricity price.")
@click.option("--cpu-cores", type=click.IntRange(min=1), help="Host CPU cores (default: inferred from the recording).")
@click.option("--cpu-power-w", type=float, help="The host CPU's maximum power, W (default: RAPL as recorded, else the "
                                                "catalog's figure for the recorded CPU model, else an assumption per "
                                                "core, said in the plan).")
@click.option("--calibration", type=click.Path(dir_okay=False), metavar="PIPELINE",
              help="A pipeline.yaml that loadprobe verify --calibrate corrected: its observed service-time scales "
                   "(for the same stage on the same kind of engine and device) and hand-off delay are applied.")
@click.option("--catalog", "catalogs", multiple=True, type=click.Path(dir_okay=False),
              help="Extra device catalog file (JSON); repeatable.")
@click.option("--force", is_flag=True, help="Overwrite an existing pipeline.yaml / plans.json.")
@click.option("--json", "as_json", is_flag=True, help="Print plans.json to stdout instead of the tables.")
@click.option("--llm", is_flag=True, help="Plan LLM serving: SOURCE is a recording of the engine or of its load client; "
                                          "each engine is sized as colocated, prefill and decode pools of replicas.")
@click.option("--model", metavar="CONFIG.JSON|PRESET",
              help="With --llm: the model to serve, as its Hugging Face config.json or a preset (llama-3.1-8b, "
                   "llama-3.1-70b, qwen2.5-7b); needed for devices the model never ran on.")
@click.option("--max-running", type=click.IntRange(min=1), default=256, show_default=True,
              help="With --llm: sequences in flight per engine replica (vLLM's --max-num-seqs).")
@click.option("--token-budget", type=click.IntRange(min=1), default=8192, show_default=True,
              help="With --llm: tokens per iteration per replica (vLLM's --max-num-batched-tokens).")
@click.option("--kv-tokens", type=click.IntRange(min=2),
              help="With --llm: KV-cache tokens per replica at most (default: the memory the weights leave).")
@click.option("--kv-link-gbps", type=click.FloatRange(min=0, min_open=True), default=100.0, show_default=True,
              help="With --llm: the link a prefill pool hands each prompt's KV cache to a decode pool over, Gbit/s.")
@click.option("--service", help="With --llm: the service to plan for, where the data holds several.")
@click.option("--seed", type=int, default=0, show_default=True, help="With --llm: the replays' random draws.")
def recommend(source, output, engines, slo_p95_ms, slo_p99_ms, slo_p50_ms, slo_ttft_ms, slo_tpot_ms, min_rps, power_budget_w, precision, aligns,
              changes_often, prices, rent, hourly_rates, years, price_per_kwh, cpu_cores, cpu_power_w, calibration,
              catalogs, force, as_json, llm, model, max_running, token_budget, kv_tokens, kv_link_gbps, service, seed):
    """Plan which engine runs each stage, and write it as pipeline.yaml.

    SOURCE is a portrait.json or recorded data (directories, globs, URIs), analysed first.

    \b
    Example:
        loadprobe recommend loadprobe-report/portrait.json --engines cpu,gpu:nvidia-l4,npu:ascend-310p \\
            --slo-p95-ms 200 --precision backbone=int8-ok -o plan/pipeline.yaml
        loadprobe recommend loadprobe-report/portrait.json --align align.json -o plan/pipeline.yaml
    """
    from .._errors import LoadprobeError
    from ..catalog import load_catalog
    from ..plan.constraints import Constraints
    from ..plan.files import plan_dict, render
    from ..plan.planner import recommend as make_plan

    path = _pipeline_path(Path(output))
    plans_path = inside(path.parent, "plans.json")
    if path.name == "plans.json":
        raise LoadprobeError(f"-o {output}: plans.json is written beside pipeline.yaml; name the pipeline file "
                             "something else, e.g. pipeline.yaml")
    refuse_existing([path, plans_path], force)  # before the work: fail fast
    catalog = load_catalog(*catalogs)
    if llm:
        given = [f"--{n}" for n, v in (("slo-p95-ms", slo_p95_ms), ("slo-p99-ms", slo_p99_ms), ("slo-p50-ms", slo_p50_ms),
                                       ("power-budget-w", power_budget_w), ("precision", precision), ("align", aligns),
                                       ("changes-often", changes_often), ("cpu-cores", cpu_cores),
                                       ("calibration", calibration)) if v]
        if given:
            raise LoadprobeError(f"{', '.join(given)}: not for --llm, whose targets are --slo-ttft-ms and --slo-tpot-ms")
        from ..plan.constraints import Pricing, parse_engines, parse_prices
        from ..plan.llm import default_llm_engines, plan_llm
        from ..plan.llm_files import llm_pipeline, llm_plans_dict, render_llm
        from ..simulator.llm.roofline import model_shape

        with ProgressBar("planning", quiet=as_json) as progress:
            plan = plan_llm(list(source), model=model_shape(model) if model else None,
                            engines=parse_engines(default_llm_engines(catalog, model) if engines is None else engines,
                                                      catalog),
                            ttft_ms=slo_ttft_ms, tpot_ms=slo_tpot_ms, rate=min_rps, catalog=catalog,
                            pricing=Pricing(years=years, price_per_kwh=price_per_kwh, rent=rent,
                                            prices=parse_prices(prices, catalog),
                                            hourly_rates=parse_prices(hourly_rates, catalog, option="--hourly-rate",
                                                                      example="nvidia-l4=0.8")),
                            max_running=max_running, token_budget=token_budget, kv_tokens=kv_tokens,
                            link_gbps=kv_link_gbps, service=service, seed=seed,
                            progress=progress)
        _write(path, plans_path, llm_pipeline(plan, plan.recommended), llm_plans_dict(plan), render_llm(plan), force,
               as_json, catalog)
        return
    if any(v is not None for v in (model, kv_tokens, service)):
        raise LoadprobeError("--model, --kv-tokens and --service plan LLM serving: add --llm")
    portrait = _portrait(list(source), catalogs)
    constraints = Constraints.parse(engines=engines, slo_p95_ms=slo_p95_ms, slo_p99_ms=slo_p99_ms, slo_p50_ms=slo_p50_ms,
                                    slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms, min_rps=min_rps,
                                    power_budget_w=power_budget_w, precision=precision, years=years,
                                    price_per_kwh=price_per_kwh, prices=prices, changes_often=changes_often,
                                    align=aligns, catalog=catalog, cpu_power_w=cpu_power_w,
                                    calibration=calibration, rent=rent, hourly_rates=hourly_rates)
    plan = make_plan(portrait, constraints, catalog=catalog, cpu_cores=cpu_cores)
    _write(path, plans_path, plan.to_pipeline(), plan_dict(plan), render(plan), force, as_json, catalog)


def _write(path: Path, plans_path: Path, config, plans: dict, text: str, force: bool, as_json: bool, catalog) -> None:
    """pipeline.yaml and plans.json beside it; the tables (or plans.json with ``as_json``) printed."""
    from ..pipeline.files import save

    plans_text = json.dumps(plans, indent=2, allow_nan=False) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    save(config, path, overwrite=force, catalog=catalog)
    write_file(plans_path, plans_text, overwrite=force)
    if as_json:
        click.echo(plans_text, nl=False)
        return
    click.echo(text)
    click.echo(f"\npipeline: {path}\nplans:    {plans_path}", err=True)


def _portrait(source: list[str], catalogs):
    from ..portrait import Portrait

    if len(source) == 1 and source[0].endswith(".json") and Path(source[0]).is_file():
        return Portrait.load(source[0])
    from ..analysis.run import analyze

    return analyze(source, catalog=catalogs)


def _pipeline_path(output: Path) -> Path:
    """Where ``-o`` puts pipeline.yaml: ``output`` itself when it names a file (a suffix, and no folder there);
    else inside it, as ``analyze -o FOLDER`` writes into its folder -- ``-o plan`` had written a file named
    "plan" and a plans.json beside it, outside the folder the user meant."""
    if output.is_dir() or not output.suffix:
        return inside(output, "pipeline.yaml")
    return inside(output.parent, output.name)
