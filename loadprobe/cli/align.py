"""``loadprobe align``: two captures in (FP32/FP16 and INT8), align.json with per-layer figures and a verdict out."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..align.document import render



@click.command()
@click.argument("baseline", type=click.Path(dir_okay=False))
@click.argument("candidate", type=click.Path(dir_okay=False))
@click.option("--labels", type=click.Path(dir_okay=False),
              help="One class per sample, in capture order: a text file (one per line), a JSON list or a .npy array.")
@click.option("--stage", help="The plan stage the model runs as [default: the baseline's model name].")
@click.option("-o", "--output", default="align.json", show_default=True, type=click.Path(dir_okay=False),
              help="Where to write align.json.")
@click.option("--kept", multiple=True, metavar="NODE[,NODE]",
              help="Nodes (torch: modules) the candidate already keeps in higher precision, as an earlier keep_fp16 "
                   "listed them (it was re-quantised without them); they stay in keep_fp16.")
@click.option("--min-cosine", type=float, default=0.99, show_default=True,
              help="Lowest mean cosine similarity of the output, overall and per class.")
@click.option("--min-sqnr-db", type=float, default=20.0, show_default=True,
              help="Lowest output SQNR (signal to quantisation noise), overall and per class, dB.")
@click.option("--max-accuracy-drop", type=float, default=0.01, show_default=True,
              help="Largest accuracy drop with --labels, a fraction (0.01: one percentage point).")
@click.option("--min-agreement", type=float, default=0.98, show_default=True,
              help="Lowest share of samples whose predicted class is unchanged, when the output is a classifier's.")
@click.option("--max-keep", type=int, default=2, show_default=True,
              help="Most layers that may be kept in FP16 for an INT8 verdict.")
@click.option("--force", is_flag=True, help="Replace an existing output file.")
@click.option("--json", "as_json", is_flag=True, help="Print align.json to stdout instead of the tables.")
def align(baseline, candidate, labels, stage, output, kept, min_cosine, min_sqnr_db, max_accuracy_drop, min_agreement,
          max_keep, force, as_json):
    """Compare an INT8 model's layer outputs with its FP32/FP16 baseline: BASELINE CANDIDATE.

    Both are capture files made on the same samples by loadprobe.instrumentation.torch.capture
    or loadprobe.instrumentation.onnxruntime.capture. The verdict (int8-ok, int8 with N layers
    kept in FP16, fp16-only) feeds loadprobe recommend --align.

    \b
    Example:
        loadprobe align fp32.npz int8.npz --stage backbone -o align.json
        loadprobe recommend portrait.json --align align.json -o plan/pipeline.yaml
    """
    from .._errors import LoadprobeError
    from ..align.compare import align as compare
    from ..align.document import write_align
    from ..align.verdict import Thresholds
    from .._files import inside
    from ._outputs import refuse_existing

    if stage is not None and not _printable(stage):
        raise LoadprobeError(f"--stage {stage!r}: a stage name is 1 to 200 printable characters, as recorded")
    out = inside(Path(output).parent, Path(output).name)  # a link there must not lead the write elsewhere
    refuse_existing([out], force)  # before the work: fail fast
    names = [n.strip() for value in kept for n in value.split(",") if n.strip()]
    doc = compare(baseline, candidate, labels=labels, stage=stage,
                  thresholds=Thresholds(min_cosine, min_sqnr_db, max_accuracy_drop, min_agreement, max_keep),
                  kept=names)
    if not _printable(doc["stage"]):
        raise LoadprobeError(f"the model name {doc['stage']!r} is not a stage name; give the stage with --stage NAME")
    write_align(doc, out, overwrite=force, protect=[baseline, candidate] + ([labels] if labels else []))
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(render(doc))
    click.echo(f"\nalign: {out}", err=True)


def _printable(text: str) -> bool:
    return 0 < len(text) <= 200 and all(ord(ch) >= 32 and ord(ch) != 127 for ch in text)

