"""align.json: written, read back and checked, and turned into what a plan takes from it.

Usage::

    write_align(doc, "align.json", overwrite=True)     # through a temporary file and a rename
    doc = read_align("align.json")                     # LoadprobeError names the file and the field
    print(render(doc))                                 # the tables and the verdict, as the terminal shows them
    ev = load_evidence("align.json")                   # AlignEvidence: stage, decision, keep_fp16, figures
    check_stages({ev.stage: ev}, ["decode", "backbone"])

Every field of align.json is defined in docs/align.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .._errors import LoadprobeError
from .._files import write_file
from .._table import text_table
from ..formats import ALIGN
from .verdict import DECISIONS

__all__ = ["FORMAT", "VERSION", "AlignEvidence", "check_stages", "evidence", "load_evidence", "read_align", "render",
           "write_align"]

FORMAT = "loadprobe-align"
VERSION = ALIGN.value


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
    ALIGN.refuse_newer(doc.get("version"), str(path))  # a newer loadprobe's: upgrade, don't re-run
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


MAX_ROWS = 30  # layers printed; a larger model shows the ones adding the most error


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
