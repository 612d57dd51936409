"""``loadprobe verify``: a plan's predictions against the recording of it running, and its correction."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import click

from .._files import inside, write_file


@click.command()
@click.argument("pipeline_file", metavar="PIPELINE", type=click.Path(dir_okay=False))
@click.argument("data", nargs=-1, required=True)
@click.option("--tolerance", type=click.FloatRange(min=0, min_open=True, max=10),
              help="End-to-end p50/p95 error accepted, as a share (default: the file's calibration.tolerance, "
                   "else 0.1).")
@click.option("--calibrate", is_flag=True,
              help="Write the correction measured here into PIPELINE as a calibration: section (the original kept "
                   "as PIPELINE.bak), then check again with it.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Where to write verify.json "
                                                                       "(default: beside PIPELINE).")
@click.option("--seed", type=int, default=0, show_default=True, help="The simulation's seed.")
@click.option("--force", is_flag=True, help="Overwrite verify.json, and PIPELINE.bak with --calibrate.")
@click.pass_context
def verify(ctx, pipeline_file, data, tolerance, calibrate, output, seed, force):
    """Simulate PIPELINE at the arrivals recorded in DATA and compare with what DATA observed.

    DATA is the recording of the plan running (in loadprobe.route, or any service recorded with
    loadprobe). Prints the error table, writes verify.json, and exits 1 when the end-to-end p50 or
    p95 error exceeds the tolerance.

    \b
    Example:
        loadprobe verify plan/pipeline.yaml data/
        loadprobe verify plan/pipeline.yaml data/ --calibrate
    """
    from ..pipeline.files import save
    from ._outputs import refuse_existing
    from ..verify import calibrate as correct, verify as check

    path = Path(pipeline_file)
    out = Path(output) if output else path.with_name("verify.json")
    out, backup = inside(out.parent, out.name), inside(path.parent, path.name + ".bak")  # no link leads out
    refuse_existing([out] + ([backup] if calibrate else []), force)
    report = check(path, list(data), tolerance=tolerance, seed=seed)
    click.echo(report.render())
    document = {"before": report.to_dict()}
    if calibrate:
        corrected = correct(report)
        shutil.copyfile(path, backup)
        save(corrected, path, overwrite=True)
        again = check(path, list(data), tolerance=tolerance, seed=seed)
        click.echo(f"\ncalibrated {path} (the original kept as {backup}):\n"
                   + _calibration(corrected.calibration, llm=corrected.llm is not None))
        click.echo("\n" + again.render())
        document["after"] = again.to_dict()
        report = again
    write_file(out, json.dumps(document, indent=2, allow_nan=False) + "\n", overwrite=force)
    click.echo(f"\nverify: {out}", err=True)
    if not report.passed:
        ctx.exit(1)


def _calibration(calibration, llm: bool = False) -> str:
    lines = [f"  work before the first token {calibration.handoff_ms:.3g} ms" if llm else
             f"  hand-off delay {calibration.handoff_ms:.3g} ms per stage"]
    for name, stage in calibration.stages.items():
        lines.append(f"  {name}: {'step' if llm else 'service'} times x {stage.service_time_scale:.3g}"
                     + (f" (observed p50 {stage.observed_p50_ms:.3g} ms over {stage.executions:,} executions)"
                        if stage.observed_p50_ms is not None else ""))
    return "\n".join(lines)
