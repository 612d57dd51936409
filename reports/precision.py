"""The report's INT8 precision check: per-layer error charts and tables from ``loadprobe align``.

The figures come from a plan's constraints (``plans.json`` of ``loadprobe recommend --align``)
or from align.json files given directly (``loadprobe report --align``); either way each stage
shows every compared layer's SQNR against the baseline and its share of the added error, the
layers kept in FP16 marked.

Usage::

    checks = precision_checks(plans, [load_evidence("align.json")])
    section, figures = precision_section(checks)         # None, {} when there is nothing to show
"""

from __future__ import annotations

from dataclasses import asdict

from .figures import NEUTRAL, PALETTE, PEAK, axis, figure, text
from .units import NONE, num

KEPT = PEAK  # layers computed in FP16 stand out from the INT8 ones
INT8 = PALETTE[0]
SHARE = PALETTE[1]
MAX_TABLE_ROWS = 20  # longer tables start collapsed


def precision_checks(plans: dict | None, align=()) -> list[dict]:
    """One entry per stage with an align verdict: those given (``AlignEvidence`` or align.json
    documents) first, then the ones the plan was made with."""
    from loadprobe.align.document import AlignEvidence, evidence

    out: dict[str, dict] = {}
    for item in align or ():
        item = asdict(item if isinstance(item, AlignEvidence) else evidence(item))
        out.setdefault(item["stage"], item)
    for stage, item in (((plans or {}).get("constraints") or {}).get("align") or {}).items():
        if isinstance(item, dict) and item.get("layers") is not None:
            out.setdefault(stage, item)
    return list(out.values())


def precision_section(checks: list[dict]) -> tuple[dict | None, dict]:
    """(the section, its figures by id) for the checks; (None, {}) without any."""
    if not checks:
        return None, {}
    figures, charts, tables, readings = {}, [], [], []
    for i, check in enumerate(checks):
        fig_id = f"align_{i}"
        built = layer_errors(check)
        if built is not None:
            figures[fig_id] = built
            charts.append({"id": fig_id,
                           "label": f"{check['stage']}: each layer's SQNR against the baseline (bars, dB; FP16-kept "
                                    "layers in red) and its share of the error the layers add (line, %), in model order"})
        readings.append(_reading(check))
        rows = []
        kept = _kept_layers(check)
        for layer in check.get("layers") or []:
            rows.append([layer["name"], layer.get("op") or NONE, num(layer.get("sqnr_db")),
                         _fixed(layer.get("cosine"), 5), num(layer.get("rel_l2")), _pct(layer.get("error_share")), str(layer.get("rank") or NONE),
                         "fp16" if layer["name"] in kept else "int8"])
        tables.append({"caption": f"{check['stage']}: {len(rows)} layers, INT8 candidate against the baseline "
                                  f"({check.get('samples', NONE)} samples)",
                       "headers": ["layer", "op", "SQNR dB", "cosine", "rel L2", "adds", "rank", "runs in"],
                       "rows": rows, "left": [1, 7], "collapsed": len(rows) > MAX_TABLE_ROWS})
    section = {"id": "precision", "title": "INT8 precision check", "reading": " ".join(readings),
               "charts": charts, "tables": tables}
    return section, figures


def layer_errors(check: dict) -> dict | None:
    """Bars: each layer's SQNR (dB); line: its share of the added error (%); a dotted SQNR threshold."""
    layers = check.get("layers") or []
    if not layers:
        return None
    names = [text(layer["name"]) for layer in layers]
    kept = _kept_layers(check)
    colours = [KEPT if layer["name"] in kept else INT8 for layer in layers]
    data = [
        {"type": "bar", "name": "SQNR (dB)", "x": names, "y": [layer.get("sqnr_db") for layer in layers],
         "marker": {"color": colours},
         "hovertemplate": "%{x}: SQNR %{y:.1f} dB<extra></extra>"},
        {"type": "scatter", "mode": "lines+markers", "name": "share of the added error (%)", "x": names,
         "y": [round(100 * (layer.get("error_share") or 0.0), 2) for layer in layers], "yaxis": "y2",
         "line": {"color": SHARE}, "hovertemplate": "%{x}: adds %{y:.1f}% of the error<extra></extra>"},
    ]
    limit = (check.get("thresholds") or {}).get("min_sqnr_db")
    if limit is not None:
        data.append({"type": "scatter", "mode": "lines", "name": f"output SQNR threshold ({num(limit)} dB)",
                     "x": [names[0], names[-1]], "y": [limit, limit],
                     "line": {"color": NEUTRAL, "dash": "dot"}, "hoverinfo": "skip"})
    return figure(data, xaxis=axis("layer, in model order", type="category", tickangle=-45 if len(names) > 8 else 0),
                  yaxis=axis("SQNR (dB)"), height=380,
                  yaxis2=axis("share of the added error (%)", overlaying="y", side="right", rangemode="tozero",
                              showgrid=False))


def _reading(check: dict) -> str:
    out = check.get("output") or {}
    basis = check.get("basis")
    text_ = (f"{check['stage']}: {check.get('text') or check.get('decision')}"
             + (" (estimated)" if basis == "estimate" else "")
             + (f", keeping {', '.join(check['keep_fp16'])} in FP16" if check.get("keep_fp16") else ""))
    if out.get("sqnr_db") is not None:
        text_ += (f"; the INT8 output {out.get('layer', '')} is at SQNR {num(out['sqnr_db'])} dB, cosine "
                  f"{_fixed(out.get('cosine'), 4)} against the baseline on {check.get('samples', NONE)} samples")
    ranked = sorted((layer for layer in check.get("layers") or [] if layer.get("rank")), key=lambda x: x["rank"])
    if ranked:
        top = ranked[0]
        text_ += f"; {top['name']} adds the most error ({_pct(top.get('error_share'))})"
    return text_ + "."


def _kept_layers(check: dict) -> set:
    """Layers whose own nodes all run in FP16 under the verdict."""
    keep = set(check.get("keep_fp16") or ())
    return {layer["name"] for layer in check.get("layers") or []
            if layer.get("nodes") and set(layer["nodes"]) <= keep}


def _pct(x) -> str:
    return NONE if x is None else f"{100 * x:.1f}%"


def _fixed(x, digits: int) -> str:
    return NONE if x is None else f"{x:.{digits}f}"
