"""The exact mix: how long the integer program takes, and what a mix of device types saves.

    python benchmarks/plan_mix.py [--json]

1. Solve time: a recorded service of 12 stages (fixed-shape tensor stages of several sizes, stages whose
   shapes change, host code) planned on the host CPU and 10 rented device types with published rates.
   Times ``mix.compare_single`` (the mix and each of the 11 single-type line-ups, 12 integer programs)
   and the whole ``recommend``, whose hybrid search solves the mix there (12^11 combinations are far
   beyond sizing each).
2. Savings: one recording whose stages suit different devices, on three line-ups priced from the
   catalog's published on-demand rates: the mix's cost against the best single-type line-up's, on the
   same capacity model, and the recommended plan's judged cost.

Run from outside the repository's root so that the installed loadprobe is imported.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import loadprobe
from loadprobe import record_span, request
from loadprobe.plan.constraints import Constraints
from loadprobe.plan.planner import recommend

TEN_TYPES = ("nvidia-h100-sxm", "nvidia-h200", "nvidia-a100-sxm-80gb", "nvidia-l40s", "nvidia-l4", "nvidia-a10",
             "nvidia-t4", "aws-inferentia2", "aws-trainium", "google-tpu-v5e")
LINE_UPS = {
    "L4 + Inferentia2": "cpu,gpu:nvidia-l4,npu:aws-inferentia2",
    "T4 + A10 + L40S": "cpu,gpu:nvidia-t4,gpu:nvidia-a10,gpu:nvidia-l40s",
    "H100 + TPU v5e + Trainium": "cpu,gpu:nvidia-h100-sxm,npu:google-tpu-v5e,npu:aws-trainium",
}
DYNAMIC = [(n, 4) for n in (3, 17, 40, 8, 91, 2, 55)]


def twelve_stages() -> dict:
    stages = {"decode": {"ms": 1.0}, "encode": {"ms": 0.3}}
    for i in range(6):  # fixed-shape tensor stages, 10^10 .. 10^11.5 FLOPs
        stages[f"conv{i}"] = {"ms": 2.0 + i, "flops": 1e10 * 2 ** i, "bytes": 2e7, "shapes": [(3, 224, 224)]}
    for i in range(4):  # shapes that change with every request: GPUs (native) only
        stages[f"boxes{i}"] = {"ms": 1.0 + i, "flops": 2e9, "bytes": 4e7, "shapes": DYNAMIC}
    return stages


MIXED = {  # as tests/plan/test_mix.py: a memory-bound fixed-shape backbone, and box decoding whose shapes change
    "decode": {"ms": 1.0},
    "backbone": {"ms": 15.0, "flops": 3.6e11, "bytes": 1.5e9, "shapes": [(3, 640, 640)]},
    "nms": {"ms": 6.0, "flops": 4.0e9, "bytes": 8.0e7, "shapes": DYNAMIC},
}


def record(folder: Path, stages: dict, requests: int = 40):
    """Requests with the given stages back to back (``record_span``), analysed."""
    loadprobe.start(str(folder), service="bench", sample_devices=False, sample_interpreter=False)
    for i in range(requests):
        with request(id=f"r{i}"):
            t = time.perf_counter_ns()
            for name, s in stages.items():
                dur = int(s["ms"] * 1e6)
                shapes = s.get("shapes")
                record_span(name, t, t + dur, engine="cpu", shape=shapes[i % len(shapes)] if shapes else None,
                            flops=s.get("flops"), bytes=s.get("bytes"))
                t += dur
            while time.perf_counter_ns() < t:
                time.sleep((t - time.perf_counter_ns()) / 1e9)
        time.sleep(0.002)
    loadprobe.stop()
    return loadprobe.analyze([str(folder)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        portrait = record(Path(tmp) / "twelve", twelve_stages())
        constraints = Constraints.parse(engines="cpu," + ",".join(
            f"{'npu' if d.startswith(('aws', 'google')) else 'gpu'}:{d}" for d in TEN_TYPES),
            min_rps=400, slo_p95_ms=200, precision=["int8-ok"], rent=True)
        started = time.perf_counter()
        plan = recommend(portrait, constraints, cpu_cores=4)
        whole = time.perf_counter() - started
        hybrid = next(o for o in [plan.recommended, *plan.alternatives] if o.name == "hybrid")
        out["twelve_by_ten"] = {"stages": len(portrait.stages) - 1, "device_types": len(TEN_TYPES),
                                "programs_solve_s": plan.mix["solve_s"] if plan.mix else None,
                                "recommend_s": round(whole, 2),
                                "search": next((n for n in hybrid.notes if "combinations" in n), None),
                                "mix_cost": plan.mix["cost"] if plan.mix else None,
                                "best_single": plan.mix["best_single"] if plan.mix else None,
                                "saving": plan.mix["saving"] if plan.mix else None}
        portrait = record(Path(tmp) / "mixed", MIXED)
        out["line_ups"] = {}
        for label, engines in LINE_UPS.items():
            plan = recommend(portrait, Constraints.parse(engines=engines, min_rps=300, slo_p95_ms=60,
                                                         precision=["int8-ok"], rent=True), cpu_cores=2)
            mix = plan.mix or {}
            out["line_ups"][label] = {
                "engines": engines, "mix_cost": mix.get("cost"), "mix_stages": mix.get("stages"),
                "mix_units": mix.get("units"), "single_type": mix.get("single_type"),
                "best_single": mix.get("best_single"), "saving": mix.get("saving"), "solve_s": mix.get("solve_s"),
                "recommended": plan.recommended.name, "recommended_cost": (plan.recommended.tco or {}).get("total"),
                "meets_targets": plan.recommended.tier == 0}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    t = out["twelve_by_ten"]
    print(f"12 stages x 10 device types: {t['programs_solve_s']} s for the mix and its 11 single-type programs; "
          f"recommend {t['recommend_s']} s in all; search: {t['search']}")
    print(f"  mix {t['mix_cost']:,.0f} vs best single type {t['best_single']}: saving {t['saving']:.1%}"
          if t["mix_cost"] is not None else "  no mix (unpriced)")
    for label, r in out["line_ups"].items():
        saving = "-" if r["saving"] is None else f"{r['saving']:.1%}"
        print(f"{label}: mix {r['mix_cost']:,.0f} ({r['mix_stages']}, units {r['mix_units']}); single types "
              f"{r['single_type']}; saving {saving} vs {r['best_single']}; recommended {r['recommended']} "
              f"{r['recommended_cost']:,.0f} (meets targets: {r['meets_targets']}); solved in {r['solve_s']} s")


if __name__ == "__main__":
    main()
