"""``loadprobe report``: a portrait (or recorded data) in, one self-contained HTML file out; two in, a comparison."""

from __future__ import annotations

from pathlib import Path

import click

from .._errors import LoadprobeError, read_json
from .._files import inside
from ._outputs import refuse_existing
from ..formats import SIMULATION


@click.command()
@click.argument("sources", nargs=-1, required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="HTML file to write [default: loadprobe-report/portrait.html, or loadprobe-report/compare.html "
                   "for two sources].")
@click.option("--force", is_flag=True, help="Replace an existing output file.")
@click.option("--plans", "plans_path", type=click.Path(dir_okay=False),
              help="plans.json from loadprobe recommend to include [default: the plans.json beside PORTRAIT when "
                   "it is newer than the portrait].")
@click.option("--pipeline", "pipeline_path", type=click.Path(dir_okay=False),
              help="pipeline.yaml to show with the plan [default: pipeline.yaml beside plans.json].")
@click.option("--no-plan", is_flag=True, help="Leave any recommendation out.")
@click.option("--simulation", "simulation_path", type=click.Path(dir_okay=False),
              help="simulation.json from loadprobe simulate to include as the 'Simulated plans' sections.")
@click.option("--align", "aligns", multiple=True, type=click.Path(dir_okay=False), metavar="ALIGN.JSON",
              help="loadprobe align verdicts to show as the INT8 precision check (repeatable) [default: the ones the "
                   "plan was made with].")
@click.option("--label", "labels", multiple=True, help="Names for A and B in a comparison (repeat twice).")
@click.option("--device", help="Catalog device for the roofline, when a source is recorded data.")
@click.option("--precision", help="Precision for the roofline, when a source is recorded data.")
@click.option("--catalog", "catalogs", multiple=True, type=click.Path(dir_okay=False),
              help="Extra device catalog file (JSON); repeatable.")
def report(sources, output, force, plans_path, pipeline_path, no_plan, simulation_path, aligns, labels, device,
           precision, catalogs):
    """Render the HTML load portrait of SOURCE, or compare two: SOURCE [B].

    A SOURCE is a portrait.json, a folder holding one (like loadprobe-report/), or recorded
    data (a directory, glob or URI), which is analysed first. The file opens offline in any
    current browser.

    \b
    Examples:
        loadprobe report loadprobe-report/portrait.json -o portrait.html
        loadprobe report before/portrait.json after/portrait.json -o diff.html
        loadprobe report loadprobe-report/ --simulation loadprobe-simulation/simulation.json
        loadprobe report loadprobe-report/ --align align.json
    """
    from ..reports.html import render_comparison, render_report, write_html

    if len(sources) > 2:
        raise LoadprobeError(f"{len(sources)} sources given: pass one portrait or data directory, or two to compare")
    if labels and len(labels) != len(sources):
        raise LoadprobeError(f"--label given {len(labels)} time(s) for {len(sources)} source(s): give one per source")
    default = "loadprobe-report/compare.html" if len(sources) == 2 else "loadprobe-report/portrait.html"
    path = Path(output or default)
    path = inside(path.parent, path.name)
    refuse_existing([path], force)  # before any analysis: fail fast
    if simulation_path and len(sources) == 2:
        raise LoadprobeError("--simulation applies to a single-run report; give one SOURCE")
    simulation = _simulation(simulation_path) if simulation_path else None
    if aligns and len(sources) == 2:
        raise LoadprobeError("--align applies to a single-run report; give one SOURCE")
    from ..align.document import load_evidence

    checks = [load_evidence(a) for a in aligns]  # before any analysis: a bad file fails fast
    portraits = [_portrait(s, device, precision, catalogs) for s in sources]
    if len(portraits) == 2:
        names = tuple(labels) if labels else tuple(_label(s) for s in sources)
        html = render_comparison(portraits[0][0], portraits[1][0], labels=names)
        plan_note = ""
    else:
        portrait, portrait_file = portraits[0]
        plans, pipeline, plan_note = (None, None, "") if no_plan else _plan(portrait_file, plans_path, pipeline_path)
        html = render_report(portrait, plans=plans, pipeline_yaml=pipeline, simulation=simulation, align=checks)
    size = write_html(path, html, overwrite=force)
    click.echo(f"report: {path} ({size / 1e6:.1f} MB){plan_note}", err=True)


def _simulation(path: str) -> dict:
    document = read_json(path, f"--simulation {path}", "give the simulation.json of loadprobe simulate")
    if not isinstance(document, dict) or not isinstance(document.get("plans"), dict) or not document["plans"]:
        raise LoadprobeError(f"--simulation {path}: not a simulation.json (no 'plans'); give the file "
                             "loadprobe simulate writes")
    SIMULATION.refuse_newer(document.get("version"), f"--simulation {path}")  # older or damaged: read as before
    return document


def _portrait(source: str, device, precision, catalogs):
    """(Portrait, the portrait.json it came from or None when analysed now)."""
    from ..analysis.run import analyze
    from ..portrait import Portrait

    candidate = Path(source)
    if candidate.is_dir() and (candidate / "portrait.json").is_file():
        candidate = candidate / "portrait.json"
    if candidate.is_file() and candidate.suffix == ".json":
        return Portrait.load(candidate), candidate
    return analyze([source], device=device, precision=precision, catalog=catalogs), None


def _label(source: str) -> str:
    path = Path(source)
    if path.name == "portrait.json":
        path = path.parent
    return path.name or str(source)


def _plan(portrait_file: Path | None, plans_path, pipeline_path):
    """(plans.json content, pipeline.yaml text, a note for the user) — all None/"" without a plan.

    A plans.json beside the portrait is used only when it is newer: ``loadprobe analyze``
    rewrites portrait.json, and a plan made before that was made from another portrait.
    """
    if plans_path is None and portrait_file is not None:
        beside = portrait_file.with_name("plans.json")
        if beside.is_file() and beside.stat().st_mtime >= portrait_file.stat().st_mtime:
            plans_path = beside
    if plans_path is None:
        if pipeline_path:
            raise LoadprobeError("--pipeline needs the plan it belongs to: pass --plans plans.json too")
        return None, None, ""
    from ..pipeline.plans import read_plans_json

    plans_path = Path(plans_path)
    plans = read_plans_json(plans_path)
    pipeline_file = Path(pipeline_path) if pipeline_path else plans_path.with_name("pipeline.yaml")
    pipeline = None
    if pipeline_file.is_file():
        try:  # shown as it is: only its text matters here (loadprobe validate checks the plan)
            pipeline = pipeline_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise LoadprobeError(f"{pipeline_file}: cannot read it as UTF-8 text ({exc}); give the pipeline.yaml "
                                 "of loadprobe recommend with --pipeline, or --no-plan") from None
    elif pipeline_path:
        raise LoadprobeError(f"{pipeline_file}: no such file")
    shown = f" and {pipeline_file}" if pipeline else ""
    return plans, pipeline, f"; plan from {plans_path}{shown}"
