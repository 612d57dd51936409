"""INT8 against its FP16/FP32 baseline, layer by layer: the figures and the verdict of ``loadprobe align``.

Usage::

    from loadprobe.align import align, write_align, read_align, Thresholds

    doc = align("fp32.npz", "int8.npz", labels="labels.txt", stage="backbone",
                thresholds=Thresholds(min_sqnr_db=25))
    doc["verdict"]["decision"]          # "int8-ok", "int8-keep-fp16" or "fp16-only"
    doc["verdict"]["keep_fp16"]         # the nodes to keep in higher precision
    write_align(doc, "align.json")      # read back with read_align("align.json")

Both captures (``loadprobe.align.capture``) must hold the same samples. Every layer the two have in
common is compared; the error a layer *adds* is its growth: the noise-to-signal power ratio
(relative L2 error squared) at its output minus the largest one among the layers it is
computed from. Quantisation noise from different layers is close to independent, so noise
powers add, and the layers with the largest growth are the ones whose error most of the
output's error comes from. Keeping them in higher precision is estimated to remove their
share of the added noise; re-quantising without them and aligning again measures it.
The figures are ``figures``'s, the verdict ``verdict``'s; align.json is written and read by
``document`` (whose names, and ``Thresholds``, are importable from here too). Every field of
align.json is defined in docs/align.md.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .._errors import LoadprobeError
from .._version import __version__
from .capture import Capture, load_capture
from .document import FORMAT, VERSION
from .document import AlignEvidence, check_stages, evidence, load_evidence, read_align, write_align  # noqa: F401
from .figures import (SQNR_CAP_DB, class_figures, error_figures, head_figures, layer_figures, layer_graph,  # noqa: F401
                      layer_stats, predicted_classes)
from .verdict import DECISIONS, ESTIMATE_LABEL, Thresholds, decide, estimate_recovery  # noqa: F401

__all__ = ["align", "load_labels"]


def align(baseline, candidate, *, labels=None, stage: str | None = None, thresholds: Thresholds | None = None,
          kept=()) -> dict:
    """Compare ``candidate`` (e.g. INT8) with ``baseline`` (FP32/FP16): the align.json document.

    ``baseline``/``candidate``: capture files or loaded captures. ``labels``: one class per
    sample (a file, see :func:`load_labels`, or a sequence). ``stage``: the plan stage this
    model runs as (default: the baseline's model name). ``kept``: nodes (torch: modules) the
    candidate already keeps in higher precision (it was re-quantised without them).
    """
    thresholds = thresholds or Thresholds()
    thresholds.check()
    base, cand = _load(baseline), _load(candidate)
    _check_pair(base, cand)
    label_values, label_source = _labels(labels, base.samples)
    kept_nodes = _kept(kept, base)
    compared, skipped = _match(base, cand)
    _check_finite(base, cand, compared)
    stats = {name: layer_stats(base, cand, name) for name in compared}
    structure = layer_graph(base, compared)
    layers = layer_figures(base, compared, stats, structure)
    output = next((name for name in compared if base.layer(name).output), None)
    if output is None:
        outs = [layer.name for layer in base.layers if layer.output]
        raise LoadprobeError(f"{cand.path}: the model output {outs[0] if outs else '?'!r} of {base.path} is not in it; "
                             "captures always include the model's outputs: capture the candidate again with "
                             "loadprobe's capture()")
    out_stats = stats[output]
    head = predicted_classes(base, cand, output)
    classes = class_figures(out_stats, head, label_values)
    out = {"layer": output, **error_figures(out_stats["err2"], out_stats["sig2"], out_stats["cos"]),
           "max_abs_error": out_stats["max_abs"], "exact": base.layer(output).exact,
           **head_figures(head, label_values)}
    ranked = [layer for layer in sorted(layers, key=lambda x: -x["growth"]) if layer["growth"] > 0]
    recovery = estimate_recovery(out, classes, ranked, thresholds.max_keep)
    verdict = decide(out, classes, recovery, ranked, thresholds, kept_nodes)
    stage = stage or _stage_name(base.model)
    too_long = [n for n in verdict["keep_fp16"] if len(n) > 256]
    if too_long or len(verdict["keep_fp16"]) > 1024:
        what = too_long[0][:60] + "..." if too_long else "over 1,024"
        raise LoadprobeError(f"{base.path}: the nodes to keep ({what}) do not fit pipeline.yaml's keep_fp16 (at most "
                             "1,024 names of 1-256 characters); name the model's nodes more briefly")
    doc = {
        "format": FORMAT, "version": VERSION, "created_by": f"loadprobe {__version__}",
        "stage": stage,
        "baseline": _source(base), "candidate": _source(cand),
        "samples": base.samples,
        "labels": label_source,
        "task_head": head is not None,
        "thresholds": asdict(thresholds),
        "verdict": verdict,
        "output": out,
        "classes": classes,
        "layers": layers,
        "skipped_layers": skipped,
        "ranking": [layer["name"] for layer in ranked],
        "recovery": recovery,
        "recovery_is": ESTIMATE_LABEL,
        "kept": kept_nodes,
    }
    return _rounded(doc)


# -- inputs ------------------------------------------------------------------------------


def _load(capture) -> Capture:
    return capture if isinstance(capture, Capture) else load_capture(capture)


def _check_pair(base: Capture, cand: Capture) -> None:
    if base.samples != cand.samples:
        raise LoadprobeError(f"{base.path} holds {base.samples} samples and {cand.path} {cand.samples}; capture both "
                             "models on the same samples")
    if base.digest != cand.digest:
        raise LoadprobeError(f"{base.path} and {cand.path} were captured on different samples (digests {base.digest} "
                             f"and {cand.digest}); capture both models on the same samples, in the same order")
    if base.projection != cand.projection:
        raise LoadprobeError(f"{base.path} and {cand.path} use different projections ({base.projection} vs "
                             f"{cand.projection}); capture both with the same loadprobe version")


def _match(base: Capture, cand: Capture) -> tuple[list, list]:
    """The layers both captures hold (baseline order), and the skipped ones with why."""
    theirs = {layer.name: layer for layer in cand.layers}
    compared, skipped = [], []
    for layer in base.layers:
        other = theirs.get(layer.name)
        if other is None:
            if base.selection != "all":
                raise LoadprobeError(f"layer {layer.name!r} is in {base.path} but not in {cand.path}; capture the same "
                                     "layers in both (layers=[...]), with the FP32 names")
            skipped.append({"name": layer.name, "reason": f"only in the baseline: fused away or renamed in "
                                                          f"{Path(cand.path).name}"})
            continue
        if tuple(other.shape) != tuple(layer.shape):
            raise LoadprobeError(f"layer {layer.name!r} is {_dims(layer.shape)} per sample in {base.path} but "
                                 f"{_dims(other.shape)} in {cand.path}; the two models must compute the same "
                                 "tensor there: compare the same architecture")
        if other.exact != layer.exact:
            raise LoadprobeError(f"layer {layer.name!r} is stored exactly in one capture and summarised in the "
                                 "other; capture both with the same loadprobe version")
        compared.append(layer.name)
    names = set(base.names())
    for layer in cand.layers:
        if layer.name not in names:
            if cand.selection != "all" or layer.output:
                raise LoadprobeError(f"layer {layer.name!r} is in {cand.path} but not in {base.path}; capture the "
                                     "same layers in both (layers=[...]), with the FP32 names")
            skipped.append({"name": layer.name, "reason": f"only in the candidate {Path(cand.path).name}"})
    if not compared:
        raise LoadprobeError(f"{base.path} and {cand.path} have no layer name in common; capture the candidate with "
                             "the baseline's layer names")
    return compared, skipped


def _check_finite(base: Capture, cand: Capture, compared: list) -> None:
    # In the models' order, so the message names the first layer that goes wrong.
    for name in compared:
        for capture in (base, cand):
            data = capture.data(name)
            for array in (data.values, data.proj, data.stats):
                if array is None:
                    continue
                bad = ~np.isfinite(array)
                if bad.any():
                    sample = int(np.argwhere(bad)[0][0])
                    raise LoadprobeError(f"{capture.path}: layer {name!r} has NaN or infinite values (sample "
                                         f"{sample}), the first such layer in the model's order; the model breaks "
                                         "there: check its inputs, weights and quantisation ranges")


def load_labels(source, n: int) -> list:
    """One class per sample from ``source``: a .npy array, a .json list or a text file (one per line).

    Whole numbers become ints (class indexes of a classifier output); anything else stays text.
    """
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            if path.suffix == ".npy":
                values = np.load(path, allow_pickle=False).tolist()
            elif path.suffix == ".json":
                values = json.loads(path.read_text(encoding="utf-8"))
            else:
                values = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        except FileNotFoundError:
            raise LoadprobeError(f"{path}: no such labels file") from None
        except (OSError, ValueError) as exc:
            raise LoadprobeError(f"{path}: cannot read labels ({exc}); give one label per line, a JSON list or a "
                                 ".npy array") from None
        where = str(path)
    else:
        values, where = list(source), "labels"
    if not isinstance(values, list) or any(isinstance(v, (list, dict)) for v in values):
        raise LoadprobeError(f"{where}: labels must be a flat list, one class per sample")
    if len(values) != n:
        raise LoadprobeError(f"{where} has {len(values)} labels for {n} samples; give one label per sample, in the "
                             "captures' sample order")
    out = []
    for v in values:
        if isinstance(v, bool):
            v = int(v)
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, str) and v.lstrip("-").isdigit():
            v = int(v)
        out.append(v if isinstance(v, int) else str(v))
    if len({type(v) for v in out}) > 1:
        out = [str(v) for v in out]
    return out


def _labels(labels, n: int) -> tuple[list | None, dict | None]:
    if labels is None:
        return None, None
    values = load_labels(labels, n)
    source = str(labels) if isinstance(labels, (str, os.PathLike)) else "given"
    return values, {"source": source, "classes": len(set(values))}



def _kept(kept, base: Capture) -> list:
    """``--kept``: nodes (ONNX) or modules (torch) of the baseline, as keep_fp16 lists them."""
    known = {n for layer in base.layers for n in layer.nodes}
    out: list = []
    for name in (str(n).strip() for n in kept or ()):
        if not name:
            continue
        if name not in known:
            raise LoadprobeError(f"--kept {name!r}: {base.path} has no node or module of that name; give the names "
                                 "keep_fp16 lists (the nodes the candidate keeps in higher precision)")
        if name not in out:
            out.append(name)
    return out


# -- helpers -----------------------------------------------------------------------------


def _source(c: Capture) -> dict:
    return {"path": c.path, "model": c.model, "framework": c.framework, "samples_digest": c.digest,
            "layers": len(c.layers)}


def _stage_name(model: str) -> str:
    name = Path(str(model)).name
    return name[:-5] if name.endswith(".onnx") else name


def _dims(shape) -> str:
    return "x".join(str(d) for d in shape) or "a scalar"


def _rounded(value):
    """Floats at 6 significant digits (the file is read by people), numpy scalars as Python numbers."""
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return float(f"{float(value):.6g}")
    if isinstance(value, np.integer):
        return int(value)
    return value
