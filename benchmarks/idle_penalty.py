"""How much more CPU the same work takes right after the CPU was idle: the host effect a light-load recording holds.

    python benchmarks/idle_penalty.py [--calls 300] [--rounds 3] [--gaps 0,0.0002,0.001,0.005,0.02] [--json]

One small piece of numpy work (200 ``tanh`` and 100 ``sort`` calls on a 64-vector, ~0.5 ms: the shape of
fidelity_host.py's ``--steps small`` service) is timed by this thread's CPU clock, ``--calls`` times for each
idle gap of ``--gaps`` seconds (a sleep before the call; 0: straight after the previous call), the gaps
shuffled call by call so that the machine's own drift falls on every gap alike. A
service recorded at a light load sees gaps of milliseconds between requests; under a closed loop it sees none.
Where the work's CPU time rises with the gap, the host runs code slower after idling (a virtual machine's vCPU
halted and resumed, a core's power state, caches and predictors cooled by other work), and a light recording's
CPU per request holds that, where saturation does not. Prints the median CPU per call for each gap and its
ratio to back-to-back, per round and as the median over rounds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

X0 = np.random.default_rng(0).standard_normal(64).astype(np.float32)


def work() -> np.ndarray:
    x = X0
    for _ in range(200):
        x = np.tanh(x * 0.5 + 0.1)
    for _ in range(100):
        x = np.sort(x)[::-1] * 0.99
    return x


def cpu_per_call_ms(calls: int, gaps: list[float], seed: int) -> dict[float, float]:
    """The median of this thread's CPU time per call of ``work`` after each gap of ``gaps`` (ms), ``calls`` each,
    in a shuffled order."""
    order = np.random.default_rng(seed).permutation(np.repeat(np.arange(len(gaps)), calls))
    spent: dict[float, list[int]] = {gap: [] for gap in gaps}
    for i in order:
        gap = gaps[i]
        if gap:
            time.sleep(gap)
        else:
            work()  # the CPU busy right before: this call follows another at once
        start = time.thread_time_ns()
        work()
        spent[gap].append(time.thread_time_ns() - start)
    return {gap: float(np.median(v)) / 1e6 for gap, v in spent.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gaps", default="0,0.0002,0.001,0.005,0.02", help="idle before each call, s")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    gaps = [float(g) for g in args.gaps.split(",")]
    work()  # warm the imports and numpy's dispatch
    rounds = [cpu_per_call_ms(args.calls, gaps, seed) for seed in range(args.rounds)]
    median = {gap: float(np.median([r[gap] for r in rounds])) for gap in gaps}
    if args.json:
        print(json.dumps({"gaps_s": gaps, "rounds_ms": [list(r.values()) for r in rounds],
                          "median_ms": list(median.values())}, indent=2))
        return 0
    print("| idle before each call | " + " | ".join(f"round {k + 1}" for k in range(args.rounds)) + " | median | "
          "vs back to back |")
    print("|---" * (args.rounds + 3) + "|")
    for gap in gaps:
        cells = " | ".join(f"{r[gap]:.3f} ms" for r in rounds)
        print(f"| {gap * 1000:g} ms | {cells} | {median[gap]:.3f} ms | {median[gap] / median[gaps[0]]:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
