"""``loadprobe simulate``: a discrete-event simulation of a pipeline.yaml under a given arrival schedule.

Usage::

    from loadprobe.simulator import exponential, simulate

    result = simulate(config, arrivals_s, {"backbone": exponential(3.0)}, seed=1)
    result.latency_ms["p95"], result.rejects, result.engines["npu0"]["utilisation"]

Every decision (admission and shedding, batches, fallback caps, breakers, the retry budget) is
asked of the router's own policy core, ``loadprobe.route.policy``, on the simulated clock;
docs/simulate.md describes what is modelled. The event loop is events.py, or its numba port
compiled/ for long runs (``loop=``), held to it by a parity test.
"""

from .recorded import RecordedTimes, from_recording
from .result import SimulationResult, simulate
from .servicetimes import ServiceTime, constant, empirical, exponential, from_config, lognormal, parse_override

__all__ = ["RecordedTimes", "ServiceTime", "SimulationResult", "constant", "exponential", "from_config", "from_recording",
           "empirical", "lognormal", "parse_override", "simulate"]
