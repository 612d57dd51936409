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
Every field of align.json is defined in docs/align.md.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .._errors import LoadprobeError
from .._files import write_file
from .._version import __version__
from .capture import Capture, load_capture

FORMAT = "loadprobe-align"
VERSION = 1
SQNR_CAP_DB = 150.0  # identical outputs (no error at all) are written as this
DECISIONS = ("int8-ok", "int8-keep-fp16", "fp16-only")
ESTIMATE_LABEL = ("estimate: each kept layer removes its share of the noise the layers add (growth); re-quantise "
                  "with those nodes excluded, capture, and align again to measure it")


@dataclass(frozen=True)
class Thresholds:
    """What the candidate's output must reach, overall and in every class, for INT8 to pass."""

    min_cosine: float = 0.99
    min_sqnr_db: float = 20.0
    max_accuracy_drop: float = 0.01  # a fraction: 0.01 is one percentage point
    min_agreement: float = 0.98
    max_keep: int = 2  # layers that may be kept in higher precision (the seeds: one or two)

    def check(self) -> None:
        if not -1.0 <= self.min_cosine <= 1.0:
            raise LoadprobeError(f"--min-cosine {self.min_cosine:g}: give a value from -1 to 1, e.g. 0.99")
        if not 0.0 <= self.max_accuracy_drop <= 1.0:
            raise LoadprobeError(f"--max-accuracy-drop {self.max_accuracy_drop:g}: give a fraction from 0 to 1, "
                                 "e.g. 0.01 for one percentage point")
        if not 0.0 <= self.min_agreement <= 1.0:
            raise LoadprobeError(f"--min-agreement {self.min_agreement:g}: give a fraction from 0 to 1, e.g. 0.98")
        if not 0 <= self.max_keep <= 64:
            raise LoadprobeError(f"--max-keep {self.max_keep}: give 0 to 64 layers")
        if not math.isfinite(self.min_sqnr_db):
            raise LoadprobeError("--min-sqnr-db must be a finite number of dB, e.g. 20")


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
    stats = {name: _layer_stats(base, cand, name) for name in compared}
    structure = _structure(base, compared)
    layers = _layers(base, compared, stats, structure)
    output = next((name for name in compared if base.layer(name).output), None)
    if output is None:
        outs = [layer.name for layer in base.layers if layer.output]
        raise LoadprobeError(f"{cand.path}: the model output {outs[0] if outs else '?'!r} of {base.path} is not in it; "
                             "captures always include the model's outputs: capture the candidate again with "
                             "loadprobe's capture()")
    out_stats = stats[output]
    head = _head(base, cand, output)
    classes = _classes(out_stats, head, label_values)
    out = {"layer": output, **_figures(out_stats["err2"], out_stats["sig2"], out_stats["cos"]),
           "max_abs_error": out_stats["max_abs"], "exact": base.layer(output).exact,
           **_head_figures(head, label_values)}
    ranked = [layer for layer in sorted(layers, key=lambda x: -x["growth"]) if layer["growth"] > 0]
    recovery = _recovery(out, classes, ranked, thresholds.max_keep)
    verdict = _verdict(out, classes, recovery, ranked, thresholds, kept_nodes)
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


# -- figures ---------------------------------------------------------------------------


def _layer_stats(base: Capture, cand: Capture, name: str) -> dict:
    """Per-sample error and signal power and cosine, and the max absolute error, of one layer."""
    b, c = base.data(name), cand.data(name)
    if b.values is not None:
        x, y = b.values.astype(np.float64), c.values.astype(np.float64)
        diff = y - x
        err2 = (diff * diff).sum(axis=1)
        sig2, cand2 = (x * x).sum(axis=1), (y * y).sum(axis=1)
        dot = (x * y).sum(axis=1)
        max_abs = float(np.abs(diff).max()) if diff.size else 0.0
    else:
        # Summarised: lengths and the error in the channel means are exact from the statistics
        # (count x (mean^2 + std^2) per channel); the rest of the error comes from the projection.
        count = math.prod(base.layer(name).shape) / b.stats.shape[1]
        sb, sc = b.stats.astype(np.float64), c.stats.astype(np.float64)
        sig2 = count * (sb[..., 0] ** 2 + sb[..., 1] ** 2).sum(axis=1)
        cand2 = count * (sc[..., 0] ** 2 + sc[..., 1] ** 2).sum(axis=1)
        rest = c.proj.astype(np.float64) - b.proj.astype(np.float64)
        err2 = count * ((sc[..., 0] - sb[..., 0]) ** 2).sum(axis=1) + (rest * rest).sum(axis=1)
        dot = (sig2 + cand2 - err2) / 2
        # a lower bound: per-channel extremes and means cannot differ by more than the values do
        gap = np.abs(sc - sb)
        max_abs = float(gap[..., [0, 2, 3]].max()) if gap.size else 0.0
    norms = np.sqrt(sig2 * cand2)
    with np.errstate(all="ignore"):
        cos = np.where(norms > 0, dot / np.where(norms > 0, norms, 1.0), np.where(err2 == 0, 1.0, 0.0))
    return {"err2": err2, "sig2": sig2, "cos": np.clip(cos, -1.0, 1.0), "max_abs": max_abs}


def _nsr(err2: float, sig2: float) -> float:
    if err2 <= 0:
        return 0.0
    if sig2 <= 0:
        return 10 ** (SQNR_CAP_DB / 10)
    return err2 / sig2


def _sqnr(nsr: float) -> float:
    if nsr <= 0:
        return SQNR_CAP_DB
    return float(min(SQNR_CAP_DB, max(-SQNR_CAP_DB, -10 * math.log10(nsr))))


def _figures(err2, sig2, cos) -> dict:
    nsr = _nsr(float(np.sum(err2)), float(np.sum(sig2)))
    return {"cosine": float(np.mean(cos)) if len(cos) else 1.0, "rel_l2": math.sqrt(nsr), "sqnr_db": _sqnr(nsr),
            "nsr": nsr}


def _structure(base: Capture, compared: list) -> dict:
    """Per compared layer: its inputs and nodes with skipped layers folded in, and its readers."""
    info = {layer.name: layer for layer in base.layers}
    done = set(compared)
    memo: dict = {}

    def resolve(name: str) -> tuple[list, list]:
        # (compared layers it is computed from, nodes of the skipped layers in between)
        if name in memo:
            return memo[name]
        memo[name] = ([], [])  # no cycles in a model; this only guards against a damaged file
        inputs, nodes = [], []
        for parent in info[name].inputs if name in info else ():
            if parent in done:
                inputs.append(parent)
            elif parent in info:
                more, extra = resolve(parent)
                inputs += more
                nodes += list(extra) + [n for n in info[parent].nodes if n not in extra]
        memo[name] = (list(dict.fromkeys(inputs)), list(dict.fromkeys(nodes)))
        return memo[name]

    out = {}
    for name in compared:
        inputs, extra = resolve(name)
        out[name] = {"inputs": inputs, "nodes": list(dict.fromkeys(extra + list(info[name].nodes)))}
    for name in compared:
        out[name]["readers"] = [other for other in compared if name in out[other]["inputs"]]
    return out


def _layers(base: Capture, compared: list, stats: dict, structure: dict) -> list:
    layers = []
    nsr = {}
    for name in compared:
        s = stats[name]
        figures = _figures(s["err2"], s["sig2"], s["cos"])
        nsr[name] = figures["nsr"]
        parent = max((nsr[p] for p in structure[name]["inputs"] if p in nsr), default=0.0)
        info = base.layer(name)
        readers = structure[name]["readers"]
        keep = list(structure[name]["nodes"])
        for reader in readers:  # an INT8 tensor is rounded wherever its producer or a reader runs in INT8
            keep += [n for n in structure[reader]["nodes"] if n not in keep]
        layers.append({
            "name": name, "op": info.op, "shape": list(info.shape), "exact": info.exact,
            "inputs": structure[name]["inputs"], "nodes": structure[name]["nodes"], "readers": readers,
            "keep_nodes": keep,
            "cosine": figures["cosine"], "rel_l2": figures["rel_l2"], "max_abs_error": s["max_abs"],
            "sqnr_db": figures["sqnr_db"], "growth": figures["nsr"] - parent,
        })
    total = sum(max(0.0, layer["growth"]) for layer in layers)
    ranked = sorted((layer for layer in layers if layer["growth"] > 0), key=lambda x: -x["growth"])
    for layer in layers:
        layer["error_share"] = max(0.0, layer["growth"]) / total if total > 0 else 0.0
        layer["rank"] = None
    for i, layer in enumerate(ranked, 1):
        layer["rank"] = i
    return layers


def _head(base: Capture, cand: Capture, output: str):
    """(baseline, candidate) predicted classes when the output is a classifier's scores, else None."""
    layer = base.layer(output)
    if not layer.exact or len(layer.shape) != 1 or layer.shape[0] < 2:
        return None
    return np.argmax(base.data(output).values, axis=1), np.argmax(cand.data(output).values, axis=1)


def _head_figures(head, labels, members=None) -> dict:
    if head is None:
        return {}
    b, c = head
    if members is not None:
        b, c = b[members], c[members]
    out = {"agreement": float(np.mean(b == c)) if len(b) else 1.0}
    if labels is not None and all(isinstance(v, int) for v in labels):
        truth = np.asarray(labels)
        if members is not None:
            truth = truth[members]
        out["baseline_accuracy"] = float(np.mean(b == truth)) if len(b) else 1.0
        out["candidate_accuracy"] = float(np.mean(c == truth)) if len(c) else 1.0
        out["accuracy_drop"] = out["baseline_accuracy"] - out["candidate_accuracy"]
    return out


def _classes(s: dict, head, labels) -> list:
    """Output figures per class: by label, or by the baseline's predicted class when there are no labels."""
    if labels is not None:
        keys = list(labels)
    elif head is not None:
        keys = [int(k) for k in head[0]]
    else:
        return []
    out = []
    keys_array = np.asarray(keys, dtype=object)
    for key in sorted(set(keys), key=lambda v: (isinstance(v, str), v)):
        members = np.flatnonzero(keys_array == key)
        entry = {"class": key, "samples": int(len(members)),
                 **_figures(s["err2"][members], s["sig2"][members], s["cos"][members]),
                 **_head_figures(head, labels, members)}
        out.append(entry)
    return out


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


# -- recovery and verdict -----------------------------------------------------------------


def _recovery(out: dict, classes: list, ranked: list, max_keep: int) -> list:
    """Estimated output figures with the top 1..max_keep layers kept in higher precision."""
    steps = []
    share = 0.0
    nodes: list = []
    for n, layer in enumerate(ranked[:max_keep], 1):
        share = min(1.0, share + layer["error_share"])
        nodes += [x for x in layer["keep_nodes"] if x not in nodes]
        left = 1.0 - share
        steps.append({
            "keep_layers": [x["name"] for x in ranked[:n]], "keep_fp16": list(nodes), "basis": "estimate",
            "removed_share": share,
            "output": _scaled(out, left),
            "classes": [{"class": c["class"], **_scaled(c, left)} for c in classes],
        })
    return steps


def _scaled(figures: dict, left: float) -> dict:
    nsr = figures["nsr"] * left
    return {"sqnr_db": _sqnr(nsr), "rel_l2": math.sqrt(nsr), "cosine": 1.0 - (1.0 - figures["cosine"]) * left,
            "nsr": nsr}


def _failures(figures: dict, t: Thresholds, scope: str, estimable_only: bool = False) -> list:
    checks = [("cosine", figures.get("cosine"), t.min_cosine, ">="),
              ("sqnr_db", figures.get("sqnr_db"), t.min_sqnr_db, ">=")]
    if not estimable_only:
        checks += [("agreement", figures.get("agreement"), t.min_agreement, ">="),
                   ("accuracy_drop", figures.get("accuracy_drop"), t.max_accuracy_drop, "<=")]
    failed = []
    for name, value, limit, op in checks:
        if value is None:
            continue
        ok = value >= limit - 1e-12 if op == ">=" else value <= limit + 1e-12
        if not ok:
            failed.append({"scope": scope, "figure": name, "value": value, "threshold": limit, "op": op})
    return failed


def _all_failures(out: dict, classes: list, t: Thresholds, estimable_only: bool = False) -> list:
    failed = _failures(out, t, "output", estimable_only)
    for c in classes:
        failed += _failures(c, t, f"class {c['class']}", estimable_only)
    return failed


def _verdict(out, classes, recovery, ranked, t: Thresholds, kept: list) -> dict:
    failed = _all_failures(out, classes, t)
    where = f"output {out['layer']!r}"
    measured = (f"{where}: SQNR {out['sqnr_db']:.1f} dB, cosine {out['cosine']:.4f}"
                + (f", agreement {out['agreement']:.1%}" if "agreement" in out else "")
                + (f", accuracy drop {100 * out['accuracy_drop']:.1f} points" if "accuracy_drop" in out else ""))
    if not failed:
        if kept:
            return _decision("int8-keep-fp16", kept, "measured", failed,
                             f"measured with {', '.join(kept)} kept in higher precision: {measured}, within the "
                             "thresholds")
        return _decision("int8-ok", [], "measured", failed, f"{measured}, within the thresholds")
    text = "; ".join(_failure_text(f) for f in failed[:4]) + (f"; {len(failed) - 4} more" if len(failed) > 4 else "")
    hard = [f for f in failed if f["figure"] in ("agreement", "accuracy_drop")]
    top = ", ".join(layer["name"] for layer in ranked[:max(1, t.max_keep)]) or "none"
    if hard:
        return _decision("fp16-only", [], "measured", failed,
                         f"{measured}: {text}. Agreement and accuracy cannot be estimated for kept layers: "
                         f"re-quantise keeping the layers with the largest growth ({top}) in higher precision, "
                         "capture it and run loadprobe align again (with --kept)")
    for step in recovery:
        left = _all_failures(step["output"], step["classes"], t, estimable_only=True)
        if not left:
            return _decision("int8-keep-fp16", list(dict.fromkeys(kept + step["keep_fp16"])), "estimate", failed,
                             f"{measured}: {text}. Keeping {', '.join(step['keep_layers'])} in FP16 removes "
                             f"{step['removed_share']:.0%} of the added noise: an estimated "
                             f"{step['output']['sqnr_db']:.1f} dB, cosine {step['output']['cosine']:.4f} "
                             f"({ESTIMATE_LABEL})")
    if recovery:
        last = recovery[-1]
        reason = (f"keeping the top {len(last['keep_layers'])} ({', '.join(last['keep_layers'])}) is estimated to "
                  f"reach only {last['output']['sqnr_db']:.1f} dB, cosine {last['output']['cosine']:.4f}")
    else:
        reason = ("no layer adds error that keeping it could remove" if t.max_keep else
                  "--max-keep 0 allows no layer in higher precision")
    return _decision("fp16-only", [], "estimate" if recovery else "measured", failed,
                     f"{measured}: {text}; {reason}")


def _decision(decision: str, keep: list, basis: str, failed: list, why: str) -> dict:
    if decision == "int8-keep-fp16":  # the layers are keep_fp16's entries: ONNX nodes, torch modules
        text = f"int8 with {len(keep)} layer{'s' if len(keep) != 1 else ''} kept in FP16"
    else:
        text = decision
    return {"decision": decision, "text": text, "precision": "fp16" if decision == "fp16-only" else "int8",
            "keep_fp16": list(keep), "basis": basis, "failed": failed, "why": why}


def _failure_text(f: dict) -> str:
    value, limit, op = f["value"], f["threshold"], "<" if f["op"] == ">=" else ">"
    if f["figure"] == "agreement":
        return f"{f['scope']} agreement {100 * value:.1f}% {op} {100 * limit:.1f}%"
    if f["figure"] == "accuracy_drop":
        return f"{f['scope']} accuracy drop {100 * value:.1f} points {op} {100 * limit:.1f}"
    if f["figure"] == "sqnr_db":
        return f"{f['scope']} SQNR {value:.2f} dB {op} {limit:g} dB"
    return f"{f['scope']} {f['figure']} {value:.5f} {op} {limit:g}"


# -- files -------------------------------------------------------------------------------


def write_align(doc: dict, path, *, overwrite: bool = False, protect=()) -> Path:
    """Write align.json (through a temporary file and a rename); never over an input file."""
    path = Path(path)
    for other in protect:
        if Path(other).exists() and path.exists() and path.resolve() == Path(other).resolve():
            raise LoadprobeError(f"-o {path} is one of the input files; choose another output file")
    if path.exists() and not overwrite:
        raise LoadprobeError(f"{path} exists; pass --force to replace it or choose another -o")
    if path.is_dir():
        raise LoadprobeError(f"{path} is a directory; give a file name such as {path / 'align.json'}")
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_file(path, json.dumps(doc, indent=2, allow_nan=False) + "\n", overwrite=overwrite)


def read_align(path) -> dict:
    """Read and check an align.json; a LoadprobeError names the file and the field."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LoadprobeError(f"{path}: no such file; make it with loadprobe align BASELINE CANDIDATE -o {path}") \
            from None
    except (OSError, ValueError) as exc:
        raise LoadprobeError(f"{path}: not readable JSON ({exc}); make it with loadprobe align") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise LoadprobeError(f"{path}: not an align.json from loadprobe align (format is not {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise LoadprobeError(f"{path}: align.json version {doc.get('version')!r}; this loadprobe reads version "
                             f"{VERSION}: run loadprobe align again")
    verdict = doc.get("verdict")
    if not isinstance(doc.get("stage"), str) or not doc["stage"]:
        raise LoadprobeError(f"{path}: field 'stage' is missing; run loadprobe align again with --stage NAME")
    if not isinstance(verdict, dict) or verdict.get("decision") not in DECISIONS:
        raise LoadprobeError(f"{path}: field 'verdict.decision' must be one of {', '.join(DECISIONS)}")
    keep = verdict.get("keep_fp16")
    if not isinstance(keep, list) or not all(isinstance(k, str) and 0 < len(k) <= 256 for k in keep):
        raise LoadprobeError(f"{path}: field 'verdict.keep_fp16' must be a list of node names (1-256 characters)")
    if not isinstance(doc.get("layers"), list):
        raise LoadprobeError(f"{path}: field 'layers' must be a list")
    return doc


@dataclass(frozen=True)
class AlignEvidence:
    """What a plan takes from an align.json: the stage, the verdict, and the figures to show."""

    stage: str
    decision: str
    text: str
    keep_fp16: tuple
    basis: str
    why: str
    source: str
    samples: int
    output: dict = field(default_factory=dict)
    layers: tuple = ()
    thresholds: dict = field(default_factory=dict)

    @property
    def policy(self) -> str:
        """The precision policy the verdict gives the stage (constraints.POLICIES)."""
        return "fp16-only" if self.decision == "fp16-only" else "int8-ok"


def evidence(doc: dict, source: str = "align.json") -> AlignEvidence:
    """The planner's and the report's view of an align.json document."""
    verdict = doc["verdict"]
    out = doc.get("output") or {}
    layers = tuple({k: layer.get(k) for k in ("name", "op", "sqnr_db", "cosine", "rel_l2", "max_abs_error",
                                                "growth", "error_share", "rank", "nodes", "keep_nodes", "exact")}
                   for layer in doc.get("layers") or [])
    return AlignEvidence(doc["stage"], verdict["decision"], str(verdict.get("text") or verdict["decision"]),
                         tuple(verdict.get("keep_fp16") or ()), str(verdict.get("basis") or ""),
                         str(verdict.get("why") or ""), str(source), int(doc.get("samples") or 0),
                         {k: out.get(k) for k in ("layer", "sqnr_db", "cosine", "rel_l2", "agreement",
                                                  "accuracy_drop") if k in out},
                         layers, dict(doc.get("thresholds") or {}))


def load_evidence(path) -> AlignEvidence:
    return evidence(read_align(path), str(path))


def check_stages(evidence_by_stage: dict, stages) -> None:
    """Every align.json's stage must be a stage of the plan."""
    names = [str(s) for s in stages]
    for stage, ev in evidence_by_stage.items():
        if stage not in names:
            raise LoadprobeError(f"{ev.source}: stage {stage!r} is not a stage of the portrait (its stages: "
                                 f"{', '.join(names) or 'none'}); run loadprobe align again with --stage NAME")


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
