"""Fidelity of ``loadprobe simulate``: the real Router over HTTP against the simulator, on the same inputs.

    python benchmarks/fidelity_simulate.py [--seconds 30] [--scale 10] [--seed 1] [--draws paired] [--json]
    python benchmarks/fidelity_simulate.py --extrapolate [--seconds 30] [--rate 20] [--speed 3]

For each arrival pattern -- steady Poisson, and a window of the real, bursty Azure LLM 2023 code
trace (samples/traces/azure_llm_2023) -- it serves the Router on the plan of
``fidelity.plan_text()`` in a subprocess, sends the arrivals with the ``loadprobe load`` client,
simulates the same plan with the same samplers on the arrival times the router saw, prints
measured against predicted -- p50 and p95 end to end (relative error, limit 10%), the share of
requests rejected and each fallback stage's failover share (difference, limit 2 percentage
points) -- and exits 1 when a limit is passed. The check itself (server, client, comparison,
``--scale`` and ``--draws``) is tests/support/fidelity.py, which the short test
tests/simulator/test_simulate_fidelity.py runs too; docs/simulate.md#fidelity has the results.

``--extrapolate`` checks loads never recorded instead: the Router runs each pattern recorded by
loadprobe, and from that recording alone (its stages' executions and each request's time outside
them) the simulator, drawing its own service times (21 seeds, medians), predicts the same arrivals
1.5x and 2x faster, which the real Router then runs (``fidelity.extrapolate``).

A miss is measured once more when the run's executors overslept by more than 2% of the mean
service time on average, or 20% at the 99th percentile: the machine was busy with other work,
and that is the harness failing to keep time, not the simulator failing to predict.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # the check lives in tests/support/, beside the test that runs it too
    sys.path.insert(0, str(REPO))

from tests.support import fidelity  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="traffic per pattern, s (default 30)")
    parser.add_argument("--scale", type=float, default=10.0, help="service times x this (default 10)")
    parser.add_argument("--seed", type=int, default=1, help="Poisson arrivals and service-time draws")
    parser.add_argument("--rate", type=float, help="Poisson rate, req/s (default 45 x 10 / scale)")
    parser.add_argument("--speed", type=float, help="trace speed-up (default 6 x 10 / scale)")
    parser.add_argument("--start", type=float, default=2100.0, help="where in the trace to begin, s (default 2100)")
    parser.add_argument("--draws", choices=("paired", "independent"), default="paired")
    parser.add_argument("--pattern", choices=("poisson", "azure-llm-2023"), action="append",
                        help="only this pattern (repeatable); default both")
    parser.add_argument("--json", action="store_true", help="print the comparisons as JSON")
    parser.add_argument("--extrapolate", action="store_true",
                        help="predict 1.5x and 2x the recorded load from the recording (default rate 20, speed 3)")
    args = parser.parse_args(argv)
    results = []
    if args.extrapolate:
        rate, speed = args.rate or 20 * 10 / args.scale, args.speed or 3 * 10 / args.scale
    else:
        rate, speed = args.rate, args.speed
    arrivals = fidelity.patterns(args.seconds, args.scale, args.seed, rate, speed, args.start)
    for name, offsets in arrivals.items():
        if args.pattern and name not in args.pattern:
            continue
        if args.extrapolate:
            found = fidelity.extrapolate(name, offsets, scale=args.scale, seed=args.seed)
        else:
            found = [fidelity.run_pattern(name, offsets, scale=args.scale, seed=args.seed, draws=args.draws)]
        for result in found:
            results.append(result)
            if not args.json:
                print((fidelity.render_extrapolated if args.extrapolate else fidelity.render)(result), flush=True)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
    return 0 if all(r.ok for r in results) else 1

if __name__ == "__main__":
    sys.exit(main())
