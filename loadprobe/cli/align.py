"""``loadprobe align``: two captures in (FP32/FP16 and INT8), align.json with per-layer figures and a verdict out."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .._table import text_table

MAX_ROWS = 30  # layers printed; a larger model shows the ones adding the most error


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


def render(doc: dict) -> str:
    """The per-layer table, the per-class table and the verdict, as the terminal shows them."""
    layers = doc["layers"]
    shown = layers
    lines = [f"{doc['stage']}: {Path(doc['candidate']['path']).name} against {Path(doc['baseline']['path']).name}, "
             f"{doc['samples']:,} samples, {len(layers)} layers compared"
             + (f" ({len(doc['skipped_layers'])} in only one capture)" if doc["skipped_layers"] else ""), ""]
    if len(layers) > MAX_ROWS:
        top = {layer["name"] for layer in sorted(layers, key=lambda x: -x["growth"])[:MAX_ROWS]}
        shown = [layer for layer in layers if layer["name"] in top]
        lines.append(f"the {MAX_ROWS} layers adding the most error, in model order:")
    rows = [[layer["name"], layer["op"] or "-", f"{layer['sqnr_db']:.1f}", f"{layer['cosine']:.5f}",
             f"{layer['rel_l2']:.3g}", f"{layer['max_abs_error']:.3g}" + ("" if layer["exact"] else " (>=)"),
             f"{100 * layer['error_share']:.1f}%", str(layer["rank"] or "-")] for layer in shown]
    lines += text_table(["layer", "op", "SQNR dB", "cosine", "rel L2", "max abs err", "adds", "rank"], rows)
    if doc["classes"]:
        lines.append("")
        head = ["class", "samples", "SQNR dB", "cosine"]
        extra = [k for k in ("agreement", "accuracy_drop") if k in doc["classes"][0]]
        head += [k.replace("_", " ") for k in extra]
        rows = [[str(c["class"]), str(c["samples"]), f"{c['sqnr_db']:.1f}", f"{c['cosine']:.5f}",
                 *[f"{100 * c[k]:.1f}%" for k in extra]] for c in doc["classes"]]
        lines += text_table(head, rows)
    out = doc["output"]
    lines += ["", f"output {out['layer']}: SQNR {out['sqnr_db']:.1f} dB, cosine {out['cosine']:.5f}, "
                  f"rel L2 {out['rel_l2']:.3g}"]
    if doc["recovery"]:
        lines.append("estimated with the layers adding the most error kept in FP16:")
    for step in doc["recovery"]:
        lines.append(f"  {', '.join(step['keep_layers'])} (nodes {', '.join(step['keep_fp16'])}): "
                     f"{step['output']['sqnr_db']:.1f} dB, cosine {step['output']['cosine']:.5f}")
    v = doc["verdict"]
    lines += ["", f"verdict: {v['text']}" + (f" -- keep_fp16: {', '.join(v['keep_fp16'])}" if v["keep_fp16"] else ""),
              v["why"]]
    return "\n".join(lines)


def _printable(text: str) -> bool:
    return 0 < len(text) <= 200 and all(ord(ch) >= 32 and ord(ch) != 127 for ch in text)

