"""The error figures of ``loadprobe align``: per layer, per class and at the output, from two captures.

The error a layer *adds* is its growth: the noise-to-signal power ratio (relative L2 error
squared) at its output minus the largest one among the layers it is computed from. Layers
``loadprobe.align.capture`` stored exactly are compared value by value; summarised ones from
their per-channel statistics and a shared random projection.

Usage (``compare.align`` does this)::

    stats = {name: layer_stats(base, cand, name) for name in compared}
    layers = layer_figures(base, compared, stats, layer_graph(base, compared))
    error_figures(stats[output]["err2"], stats[output]["sig2"], stats[output]["cos"])   # cosine, rel_l2, sqnr_db, nsr
"""

from __future__ import annotations

import math

import numpy as np

from .capture import Capture

__all__ = ["SQNR_CAP_DB", "class_figures", "error_figures", "head_figures", "layer_figures", "layer_graph",
           "layer_stats", "predicted_classes", "sqnr_db"]

SQNR_CAP_DB = 150.0  # identical outputs (no error at all) are written as this


def layer_stats(base: Capture, cand: Capture, name: str) -> dict:
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


def sqnr_db(nsr: float) -> float:
    if nsr <= 0:
        return SQNR_CAP_DB
    return float(min(SQNR_CAP_DB, max(-SQNR_CAP_DB, -10 * math.log10(nsr))))


def error_figures(err2, sig2, cos) -> dict:
    nsr = _nsr(float(np.sum(err2)), float(np.sum(sig2)))
    return {"cosine": float(np.mean(cos)) if len(cos) else 1.0, "rel_l2": math.sqrt(nsr), "sqnr_db": sqnr_db(nsr),
            "nsr": nsr}


def layer_graph(base: Capture, compared: list) -> dict:
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


def layer_figures(base: Capture, compared: list, stats: dict, structure: dict) -> list:
    layers = []
    nsr = {}
    for name in compared:
        s = stats[name]
        figures = error_figures(s["err2"], s["sig2"], s["cos"])
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


def predicted_classes(base: Capture, cand: Capture, output: str):
    """(baseline, candidate) predicted classes when the output is a classifier's scores, else None."""
    layer = base.layer(output)
    if not layer.exact or len(layer.shape) != 1 or layer.shape[0] < 2:
        return None
    return np.argmax(base.data(output).values, axis=1), np.argmax(cand.data(output).values, axis=1)


def head_figures(head, labels, members=None) -> dict:
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


def class_figures(s: dict, head, labels) -> list:
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
                 **error_figures(s["err2"][members], s["sig2"][members], s["cos"][members]),
                 **head_figures(head, labels, members)}
        out.append(entry)
    return out
