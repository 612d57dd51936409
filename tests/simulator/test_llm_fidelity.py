"""``loadprobe simulate --llm`` against the real sample engine, at the recorded rate and at loads never recorded.

A guard over the whole chain -- a real engine recorded at R = 3 req/s, the step model fitted to it,
TTFT and TPOT predicted at 1.5R and 2R, which the engine then serves (each rate its own arrivals and
lengths) -- through the harness of benchmarks/llm_fidelity.py (tests/support/llm_fidelity.py). The
fidelity figures themselves (10% at p50, 15% at p95, held on the median over rounds) are that
benchmark's, in docs/benchmarks.md: this shared 2-core machine's own pace moves by up to 28% between
runs a minute apart, more than those limits, so one round here asserts only what holds through it --
the fit reproduces what it was fitted to, the predictions rise with the load as the engine's do, and
the medians and TPOT's tail are not off by half (a unit slip, batching ignored, a scheduler that never
admits: all fail it). TTFT's p95 at 2R is left to the benchmark: it is the queue's tail, where an
over-estimated cost of large batches (a recording at R rarely batches more than 4; the issue's note)
compounds into waiting for a slot. A round that misses is measured once more with new draws (a
passing measurement is never retried): a wrong model misses both, while a stretch in which the shared
machine stalls the real engine (once, in a full CI run: TPOT at 2R 6x its value at 1.5R, with the
machine's single-sequence pace normal) does not recur.
"""

from __future__ import annotations

import pytest

from ..support import llm_fidelity

pytestmark = pytest.mark.timeout(600)

RATE, SECONDS = 3.0, 30.0


def test_the_engine_predicted_at_its_own_rate_and_at_one_and_a_half_and_twice_it(tmp_path):
    pytest.importorskip("fastapi")
    failed = _round(tmp_path / "first", seed=1)
    if failed:
        again = _round(tmp_path / "again", seed=2)
        assert not again, f"missed in two rounds of independent draws:\n{failed}\n{again}"


def _round(folder, seed: int) -> str:
    """One round recorded, fitted and predicted; "" where it holds, else what missed (and the round's figures)."""
    from loadprobe.simulator.llm.engine import EngineSettings
    from loadprobe.simulator.llm.replay import simulate_llm

    runs = llm_fidelity.record_rates(folder, (RATE, 1.5 * RATE, 2 * RATE), SECONDS, seed=seed)
    own = simulate_llm(runs[RATE][0], settings=EngineSettings(**llm_fidelity.SAMPLE_SETTINGS), service="llm")
    compared = own.check["compared"]
    # the recorded arrivals replayed: what the model was fitted to
    missed = [f"{key}: {own.check['summary']}" for key in ("ttft_p50_ms", "tpot_p50_ms")
              if abs(compared[key]["error"]) > 0.15]
    rows = llm_fidelity.at_pace(llm_fidelity.compare(runs, base=RATE))
    report = "\n".join(f"{row['x']:g}R (machine {row['machine']:.2f}): " + ", ".join(
        f"{key} {m:.3g}/{p:.3g} ({e:+.0%})" for key in llm_fidelity.METRICS for m, p, e in [row[key]]) for row in rows)
    assert [row["x"] for row in rows] == [1.5, 2.0]
    missed += [f"{row['x']:g}R served {row['requests']} requests" for row in rows
               if row["requests"] <= 0.8 * SECONDS * row["rate"]]  # each rate was served
    measured, predicted = ([row["tpot_p50"][i] for row in rows] for i in (0, 1))
    if not (predicted[1] > predicted[0] and measured[1] > measured[0]):  # TPOT rises with the load
        missed.append("TPOT p50 does not rise from 1.5R to 2R")
    # within 50% at p50, 75% at TPOT's p95
    missed += [line for line in llm_fidelity.misses(rows, scale=5.0) if "ttft_p95" not in line]
    return "; ".join(missed) + f"\n{report}" if missed else ""
