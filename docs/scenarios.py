"""Print the seeds' scenario table as docs/recommend.md shows it: each row recorded, planned, and its why.

    python docs/scenarios.py > /tmp/scenarios.md     # from the repository root; paste into docs/recommend.md

The rows are tests/plan/test_scenarios.py's, which check each answer.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.plan import test_scenarios as rows  # noqa: E402

ROWS = [
    ("Frozen model, small batch, high concurrency, power-sensitive", "inference accelerator",
     rows.scenario_frozen_small_batch_high_concurrency_power_sensitive, "backbone"),
    ("Model changing often, varied operators, large batches", "GPU",
     rows.scenario_changing_model_varied_operators_large_batches, "backbone"),
    ("Edge, very low power, simple model", "NPU", rows.scenario_edge_very_low_power_simple_model, "classifier"),
    ("Mixed training and inference", "GPU", rows.scenario_mixed_training_and_inference, "backbone"),
    ("Ultra-low latency single requests, medium model", "accelerator or high-end GPU",
     rows.scenario_ultra_low_latency_single_requests_medium_model, "model"),
]


def main() -> None:
    for title, expected, build, stage in ROWS:
        with tempfile.TemporaryDirectory() as tmp:
            plan = build(Path(tmp))
        rec = plan.recommended
        placed = {d.stage: d for d in rec.decisions}
        d = placed[stage]
        print(f"**{title} → {expected}.** Constraints: `{_constraints(plan)}`. Plan: "
              + ", ".join(f"{x.stage} on {x.engine}" + (f" ({x.device}, {x.precision})" if x.device else "")
                          for x in rec.decisions)
              + f"; buys {rec.sizing.split(':')[0]}; meets targets: {'yes' if rec.tier == 0 else 'no'}.\n")
        print(f"> {stage}: {d.why['engine']}\n")


def _constraints(plan) -> str:
    c = plan.constraints
    parts = ["--engines " + ",".join(s.kind + (f":{s.device}" if s.device else "") for s in c.lineup.engines),
             f"--min-rps {c.asked.min_rps:g}", f"--slo-p95-ms {c.asked.slo_p95_ms:g}"]
    if c.asked.power_budget_w:
        parts.append(f"--power-budget-w {c.asked.power_budget_w:g}")
    parts.append(f"--precision {c.lineup.precision}")
    parts += [f"--changes-often {s}" for s in sorted(c.lineup.changes_often)]
    return " ".join(parts)


if __name__ == "__main__":
    main()
