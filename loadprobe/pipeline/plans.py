"""plans.json: the recommended pipeline and its alternatives, as its readers use them.

``loadprobe recommend`` writes it (``loadprobe.plan.files.plan_dict``); ``loadprobe report`` and
``loadprobe simulate`` read it here, beside pipeline.yaml, so that neither reads the planner::

    document = read_plans_json("plan/plans.json")     # checked against PLANS_SCHEMA
    document["recommended"]["pipeline"], [o["name"] for o in document["alternatives"]]
"""

from __future__ import annotations

from .._errors import LoadprobeError, read_json, shape_problem
from ..formats import PLANS

_NUMBER = {"type": ["number", "null"]}
_TEXT = {"type": ["string", "null"]}
_TEXTS = {"type": ["array", "null"], "items": {"type": "string"}}
_OPTION = {"type": "object", "properties": {
    "name": {"type": "string"}, "feasible": {"type": "boolean"}, "meets_slo": {"type": ["boolean", "null"]},
    "notes": _TEXTS, "pipeline": {"type": ["object", "null"]},
    "estimate": {"type": ["object", "null"], "properties": {key: _NUMBER for key in (
        "p50_ms", "p95_ms", "p99_ms", "max_rps", "power_w", "energy_per_request_j")}},
    "tco": {"type": ["object", "null"], "properties": {"total": _NUMBER, "comparable": {"type": ["boolean", "null"]},
                                                       "unknown": _TEXTS, "includes": _TEXT,
                                                       "figures": {"type": ["object", "null"],
                                                                   "additionalProperties": {"type": "string"}}}},
    "tier": {"type": ["integer", "null"]}, "provisioned_power_w": _NUMBER, "sizing": _TEXT,
    "intervals": {"type": ["object", "null"], "additionalProperties": {
        "type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "number"}}},
    "buy": {"type": ["array", "null"], "items": {"type": "object", "properties": {
        "engine": {"type": "string"}, "device": _TEXT, "count": {"type": "integer"}}}},
    "stages": {"type": ["array", "null"], "items": {"type": "object", "properties": {
        "stage": _TEXT, "engine": {"type": "string"}, "device": _TEXT, "precision": {"type": "string"},
        "batch": {"type": ["integer", "null"]}, "window_ms": _NUMBER, "timeout_ms": _NUMBER,
        "max_concurrency": {"type": ["integer", "null"]}, "why": {"type": ["object", "null"]},
        "fallback": {"type": ["object", "null"], "properties": {"engine": _TEXT, "max_ratio": _NUMBER}},
        "service_time_ms": {"type": ["object", "null"], "properties": {"p50_ms": _NUMBER, "source": _TEXT}}}}}}}
_ALIGN = {"type": "object", "required": ["stage"], "properties": {  # a stage's AlignEvidence, as the report shows it
    "stage": {"type": "string"}, "text": _TEXT, "decision": _TEXT, "basis": _TEXT, "keep_fp16": _TEXTS,
    "samples": {"type": ["integer", "null"]},
    "output": {"type": ["object", "null"], "properties": {"layer": _TEXT, "sqnr_db": _NUMBER, "cosine": _NUMBER}},
    "thresholds": {"type": ["object", "null"], "properties": {"min_sqnr_db": _NUMBER}},
    "layers": {"type": ["array", "null"], "items": {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string"}, "op": _TEXT, "rank": {"type": ["integer", "null"]}, "nodes": _TEXTS,
        **{key: _NUMBER for key in ("sqnr_db", "cosine", "rel_l2", "error_share")}}}}}}
PLANS_SCHEMA = {
    "type": "object", "required": ["recommended"],
    "properties": {
        "recommended": _OPTION, "alternatives": {"type": "array", "items": _OPTION},
        **{key: _TEXT for key in ("service", "scenario", "scenario_why", "sizing_why", "estimates_are", "verdict")},
        "sizing_rate_rps": _NUMBER, "slo_p95_ms": _NUMBER, "targets": {"type": ["object", "null"]},
        "constraints": {"type": ["object", "null"], "properties": {
            "years": _NUMBER, "basis_why": _TEXT, "rent": {"type": ["boolean", "null"]}, "align": {"type": ["object", "null"], "additionalProperties": _ALIGN}}},
    },
}
"""What readers of plans.json (``loadprobe report``, ``loadprobe simulate``) use, in the types they use it."""


def read_plans_json(path) -> dict:
    """plans.json's content, checked against PLANS_SCHEMA: a LoadprobeError names the file and the field."""
    hint = "give the plans.json that loadprobe recommend writes"
    document = read_json(path, str(path), hint)
    if isinstance(document, dict):  # a newer major is refused; an older or damaged version is read as before
        PLANS.refuse_newer(document.get("version"), str(path))
    problem = shape_problem(document, PLANS_SCHEMA)
    if problem is not None:
        raise LoadprobeError(f"{path}: not a plans.json from loadprobe recommend ({problem}); {hint}")
    return document
