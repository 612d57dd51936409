"""``loadprobe export``: a pipeline.yaml as a Triton model repository, a Ray Serve application or vLLM engines."""

from __future__ import annotations

import click

TARGETS = ("triton", "ray-serve", "vllm")  # loadprobe.export.TARGETS, here so that --help imports nothing more


@click.command()
@click.argument("pipeline_file", metavar="PIPELINE", type=click.Path(dir_okay=False))
@click.option("--to", "target", type=click.Choice(TARGETS), required=True,
              help="triton: a model repository (config.pbtxt per stage, an ensemble); ray-serve: serve_config.yaml "
                   "and a module with a deployment per stage; vllm (a plan of recommend --llm): a vllm serve script "
                   "per pool.")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(),
              help="The folder to write; it must be missing or empty unless --force.")
@click.option("--executor", "executors", multiple=True, metavar="STAGE[@ENGINE]=MODULE:NAME",
              help="The callable that runs STAGE (on every engine of it, or on ENGINE only), by import path; "
                   "repeatable.")
@click.option("--num-cpus", type=float, help="CPUs each Ray Serve replica reserves (ray-serve only; default: an equal "
                                           "share of the plan's host cores, at most 1).")
@click.option("--no-import-check", is_flag=True,
              help="Write the executors' import paths without importing them here (the service's code is elsewhere).")
@click.option("--strict", is_flag=True, help="Refuse, writing nothing, when the target drops a feature the plan uses.")
@click.option("--force", is_flag=True, help="Write into a folder that is not empty, replacing the files written.")
@click.option("--catalog", "catalogs", multiple=True, type=click.Path(dir_okay=False),
              help="Extra device catalog file (JSON) the plan's devices come from; repeatable.")
def export(pipeline_file, target, out_dir, executors, num_cpus, no_import_check, strict, force, catalogs):
    """Write PIPELINE as the configuration of another model server.

    Every figure comes from the plan: batch windows, timeouts, instance or replica counts and
    devices. What the target cannot express (for Triton: NPU engines, the capped fallback,
    breakers, retries; for Ray Serve: shedding by priority, the canary) is listed in the
    README.md written into the folder, and here.

    \b
    Examples:
        loadprobe export plan/pipeline.yaml --to triton -o triton-repo/ --executor decode=svc.steps:decode
        loadprobe export plan/pipeline.yaml --to ray-serve -o serve/ --executor decode=svc.steps:decode \\
            --executor backbone=svc.steps:backbone --executor backbone@gpu0=svc.steps:backbone_fp32
        loadprobe export llm-plan/pipeline.yaml --to vllm -o vllm/
    """
    from pathlib import Path

    from .._errors import LoadprobeError
    from ..catalog import load_catalog
    from ..export import export as run
    from ..pipeline.problems import PipelineError

    try:
        done = run(Path(pipeline_file), target, out_dir, executors=list(executors), force=force, strict=strict,
                   num_cpus=num_cpus, check_imports=not no_import_check,
                   catalog=load_catalog(*catalogs) if catalogs else None)
    except PipelineError as exc:  # one line here; `loadprobe validate` lists every problem
        if not exc.problems:
            raise
        first, more = exc.problems[0], len(exc.problems) - 1
        rest = f" ({more:,} more problem{'s' * (more != 1)}: loadprobe validate {pipeline_file})" if more else ""
        raise LoadprobeError(f"{first}; not a valid plan, nothing exported{rest}") from None
    files = f"{len(done.files):,} files"
    if target == "vllm":  # a script per pool and a README: not one thing the files make up
        click.echo(f"export: {files} for vLLM in {done.out_dir}")
    else:
        what = {"triton": "Triton model repository", "ray-serve": "Ray Serve application"}[target]
        click.echo(f"export: {what} of {files} in {done.out_dir}")
    for path in done.files:
        click.echo(f"  {path.relative_to(done.out_dir)}")
    if done.dropped:
        click.echo("not carried over (README.md says what is done instead): "
                   + "; ".join(f"{loss.feature} ({loss.where})" for loss in done.dropped), err=True)
    for warning in done.warnings:  # what will not schedule where the plan was sized (README.md, "Resources")
        click.echo(warning, err=True)
    if done.missing:
        click.echo(f"no executor for {', '.join(done.missing)}: those refuse to start until you export again with "
                   f"--executor STAGE=MODULE:NAME", err=True)
