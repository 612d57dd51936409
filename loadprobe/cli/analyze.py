"""``loadprobe analyze``: recorded data in, portrait.json, portrait.html and a terminal summary out."""

from __future__ import annotations

import glob
from pathlib import Path

import click

from ..analysis.kernels import KERNELS, OLD_NAMES  # the names only: stdlib, no numpy or pyarrow
from ._progress import ProgressBar


@click.command()
@click.argument("data", nargs=-1, required=True)
@click.option("-o", "--output", default="loadprobe-report", show_default=True, type=click.Path(file_okay=False),
              help="Directory for portrait.json and portrait.html.")
@click.option("--json", "as_json", is_flag=True, help="Print portrait.json to stdout instead of the summary.")
@click.option("--no-html", is_flag=True, help="Do not write the HTML report (portrait.html).")
@click.option("--since", help="Only data from this time (ISO-8601, UTC if no zone, or epoch seconds).")
@click.option("--until", help="Only data before this time.")
@click.option("--service", help="The service to analyse when DATA holds several (a glob pattern that must match one; "
                                "the load client's recording of its requests joins it).")
@click.option("--each-service", is_flag=True,
              help="One portrait (and report) per service, in a folder per service under -o.")
@click.option("--host", help="Only this host (a glob pattern).")
@click.option("--device", help="Catalog device for the roofline (default: the recorded one when known).")
@click.option("--precision", help="Precision for the roofline: fp32, fp16, bf16, fp8, int8 ...")
@click.option("--catalog", "catalogs", multiple=True, type=click.Path(dir_okay=False),
              help="Extra device catalog file (JSON); repeatable.")
@click.option("--engine", type=click.Choice(["inprocess", "process", "dask"]), default="inprocess", show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Processes (--engine process) or Dask workers of a local cluster.")
@click.option("--scheduler", help="Address of a running Dask scheduler (--engine dask).")
@click.option("--kernel", type=click.Choice(KERNELS + tuple(OLD_NAMES)), default="auto", show_default=True,
              help="Per-file aggregation: the C kernel built at install (c), numpy, or the C kernel "
                   "when it was built (auto). All give the same portrait. ('compiled': the old name of c.)")
@click.option("--slo-ttft-ms", type=click.FloatRange(min=0, min_open=True),
              help="LLM goodput: the time-to-first-token target [default: twice the recorded median].")
@click.option("--slo-tpot-ms", type=click.FloatRange(min=0, min_open=True),
              help="LLM goodput: the time-per-output-token target [default: twice the recorded median].")
@click.option("--force", is_flag=True, help="Replace portrait.json and portrait.html in -o.")
def analyze(data, output, as_json, no_html, since, until, service, host, device, precision, catalogs, engine, workers,
            scheduler, kernel, slo_ttft_ms, slo_tpot_ms, force, each_service):
    """Compute the load portrait of DATA (directories, globs or s3://, gs:// URIs).

    \b
    Examples:
        loadprobe analyze loadprobe-data/ --device nvidia-l4
        loadprobe analyze client-data/ server-data/           # one service, seen by its load client too
        loadprobe analyze data/ --each-service -o reports/    # reports/<service>/portrait.json each
        loadprobe analyze llm-client/ --slo-ttft-ms 500 --slo-tpot-ms 50   # an LLM service's goodput
    """
    from .._errors import LoadprobeError
    from .._files import inside
    from ..analysis.run import analyze as run_analysis
    from ..analysis.run import services
    from ..pipeline.names import plan_names
    from ..reports.summary import render

    if each_service and as_json:
        raise LoadprobeError("--json prints one portrait; with --each-service read each <service>/portrait.json "
                             "under -o instead")
    if each_service:
        names = services(list(data), service=service, host=host)
        folders = plan_names(names, fallback="service")  # a service's name may be anything: its folder is a name
        targets = {name: inside(output, folders[name]) for name in names}
    else:
        targets = {service: Path(output)}
    paths = {name: _targets(folder, no_html, force) for name, folder in targets.items()}  # all refused before work

    for name, (json_path, html_path) in paths.items():
        with ProgressBar("analysing", least=20, quiet=as_json) as progress:
            portrait = run_analysis(list(data), since=since, until=until,
                                    service=glob.escape(name) if each_service else service, host=host, device=device,
                                    precision=precision, catalog=catalogs, engine=engine, workers=workers,
                                    scheduler=scheduler, progress=progress, kernel=kernel, slo_ttft_ms=slo_ttft_ms,
                                    slo_tpot_ms=slo_tpot_ms)
        path = portrait.save(json_path)
        size = None
        if html_path is not None:
            from ..reports.html import render_report, write_html

            size = write_html(html_path, render_report(portrait), overwrite=True)
        if as_json:
            click.echo(portrait.to_json(), nl=False)
            return
        if each_service:
            click.echo(f"{'' if name == next(iter(paths)) else chr(10)}== service {name} ==")
        click.echo(render(portrait))
        click.echo(f"\nportrait: {path}", err=True)
        if size is not None:
            click.echo(f"report:   {html_path} ({size / 1e6:.1f} MB)", err=True)


def _targets(folder, no_html: bool, force: bool):
    """(portrait.json, portrait.html or None) in ``folder``: refused, before any work, when they exist
    (unless ``force``), and the HTML when it exists and loadprobe did not write it."""
    from .._errors import LoadprobeError
    from .._files import inside
    from ._outputs import refuse_existing

    json_path, html_path = inside(folder, "portrait.json"), None if no_html else inside(folder, "portrait.html")
    refuse_existing([json_path] + ([] if html_path is None else [html_path]), force)
    if html_path is not None and html_path.exists():
        from ..reports.html import is_report

        if not is_report(html_path):  # replace our own report, as with portrait.json, but nobody else's file
            raise LoadprobeError(f"{html_path} exists and was not written by loadprobe; move it, choose another "
                                 "-o, or pass --no-html")
    return json_path, html_path
