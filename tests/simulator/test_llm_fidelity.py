"""``loadprobe simulate --llm`` at loads never recorded, against the real sample engine (issue #37.2).

The short form of benchmarks/llm_fidelity.py (docs/benchmarks.md, "LLM engines at loads never
recorded"), through the same harness (tests/support/llm_fidelity.py): the sample's continuous-batching
engine recorded at R = 3 req/s, from that recording alone TTFT and TPOT predicted at 1.5R and 2R, which
the engine then serves (each rate its own arrivals and lengths). Only agreement is asserted, never an
absolute time.

This shared 2-core machine's own pace moves by up to 25% between runs a minute apart (the engine's
one-sequence decode pass, the same computation each time, measured in each run), so the prediction is
judged at the machine's pace during the measured run (``llm_fidelity.at_pace``: moved by that pass's
time ratio), and one round cannot be held to the benchmark's limits (10% at p50, 15% at p95: held
there by the median over rounds): here each error must be within twice them, on one round or, if
that misses, on an independent second one -- a systematic error fails both.
"""

from __future__ import annotations

import pytest

from ..support import llm_fidelity

pytestmark = pytest.mark.timeout(600)

RATE, SECONDS = 3.0, 30.0


def test_ttft_and_tpot_at_one_and_a_half_and_twice_the_recorded_rate(tmp_path):
    pytest.importorskip("fastapi")
    report = []
    for trial, seed in enumerate((1, 101)):
        runs = llm_fidelity.record_rates(tmp_path / f"trial-{trial}", (RATE, 1.5 * RATE, 2 * RATE), SECONDS, seed=seed)
        rows = llm_fidelity.compare(runs, base=RATE)
        assert [row["x"] for row in rows] == [1.5, 2.0]
        assert all(row["requests"] > 0.8 * SECONDS * row["rate"] for row in rows)  # each rate was served
        assert all(row["machine"] is not None for row in rows)  # the engine timed its one-sequence passes
        missed = llm_fidelity.misses(llm_fidelity.at_pace(rows), scale=2.0)
        report.append(f"trial {trial + 1} (seed {seed}): " + ("; ".join(missed) or "within twice the limits"))
        if not missed:
            return
    pytest.fail("\n".join(report))
