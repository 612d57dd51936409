"""The verdict of ``loadprobe align``: the thresholds, what keeping layers in FP16 would recover, the decision.

Usage (``compare.align`` does this)::

    thresholds = Thresholds(min_sqnr_db=25); thresholds.check()
    steps = estimate_recovery(output, classes, ranked_layers, thresholds.max_keep)
    decide(output, classes, steps, ranked_layers, thresholds, kept=[])   # {"decision": "int8-ok", ...}
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._errors import LoadprobeError
from .figures import sqnr_db

__all__ = ["DECISIONS", "ESTIMATE_LABEL", "Thresholds", "decide", "estimate_recovery"]

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



def estimate_recovery(out: dict, classes: list, ranked: list, max_keep: int) -> list:
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
    return {"sqnr_db": sqnr_db(nsr), "rel_l2": math.sqrt(nsr), "cosine": 1.0 - (1.0 - figures["cosine"]) * left,
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


def decide(out, classes, recovery, ranked, t: Thresholds, kept: list) -> dict:
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
