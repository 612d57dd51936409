"""loadprobe.simulate against the real Router: the same plan, arrivals and service times, over HTTP.

The short form of benchmarks/fidelity_simulate.py (docs/simulate.md#fidelity), through the same
check (tests/support/fidelity.py): per arrival pattern, 10 s of traffic from the loadprobe load
client to a Router served on 127.0.0.1 in a subprocess, whose executors sleep for recorded
service times (x10), then the simulator on the arrivals the router saw. Only the agreement
between the two is asserted -- p50 and p95 end to end within 10%, the reject share and the
failover share within 2 percentage points -- never an absolute time, so a slow or busy machine
moves both sides together. The loads are moderate and the service-time draws paired (each
lane's own seeded stream, on both sides), which keeps a short run's p95 steady.
"""

from __future__ import annotations

import pytest

from ..support import fidelity

SECONDS = 10.0


@pytest.mark.parametrize("pattern", ["poisson", "azure-llm-2023"])
def test_the_simulator_predicts_the_routers_latency_rejects_and_failover(pattern):
    offsets = fidelity.patterns(SECONDS, scale=10, seed=1)[pattern]
    result = fidelity.run_pattern(pattern, offsets, scale=10, seed=1)  # measured again only if starved
    report = fidelity.render(result)
    assert result.info["served"] == len(offsets), report  # every scheduled request reached the router
    assert result.ok, report
    if pattern == "azure-llm-2023":
        # the bursts do turn requests away and move some to the GPU: the shares compare something
        measured = {row["metric"]: row["measured"] for row in result.rows}
        assert measured["rejected"] >= 0.01 and measured["failover decode"] >= 0.02, report


@pytest.mark.parametrize("pattern", ["poisson", "azure-llm-2023"])
def test_predictions_at_loads_never_recorded_hold_against_the_real_router(pattern):
    """Issue #21.7: the Router recorded at rate R (30 s); from that recording alone, the simulator's own draws
    (medians of 21 seeds) predict p50 and p95 at 1.5R and 2R within 10% of the real Router run there.

    Service times x5 (not x10) give twice the requests in the same 65 s of runs (~700 of the trace, ~1,200
    Poisson): a tail quantile of ~340 requests moved by +-15% from one realisation of the draws to the next."""
    offsets = fidelity.patterns(30.0, scale=5, seed=1, rate=40, speed=6)[pattern]
    results = fidelity.extrapolate(pattern, offsets, scale=5, seed=1)
    report = "\n".join(fidelity.render_extrapolated(r) for r in results)
    if not all(r.ok for r in results):
        # One real run's p95 rests on its slowest few dozen requests, and the Router's seeded draws make it
        # one realisation of the service times: the predictions' own spread (the report's range) is about
        # the limit. A miss is therefore tried once more on an independent trial -- new draws (and for Poisson a
        # new schedule) -- and both are reported; a systematic error fails both.
        offsets = fidelity.patterns(30.0, scale=5, seed=2, rate=40, speed=6)[pattern]
        results = fidelity.extrapolate(pattern, offsets, scale=5, seed=2)
        report += "\nmeasured again on an independent trial (seed 2):\n" + "\n".join(
            fidelity.render_extrapolated(r) for r in results)
    assert [r.info["factor"] for r in results] == [1.5, 2.0]
    assert all(r.info["served"] == len(offsets) for r in results), report
    assert all(r.ok for r in results), report
