"""Fidelity of ``loadprobe simulate --llm`` at loads never recorded: the sample engine recorded at R, predicted at
1.5R and 2R, against the engine serving those rates.

    python benchmarks/llm_fidelity.py [--engine sample|vllm] [--rate 3] [--seconds 40] [--rounds 3] [--seed 1]
                                      [--keep DIR] [--json]

Each rate is served by a fresh sample engine (samples/llm: continuous batching, 8 running, 4,096 KV
tokens) under a recorder and streamed to by the ``loadprobe load --openai`` client (Poisson arrivals,
prompts of 32-256 tokens, outputs of 16-128, each rate its own seeds). From the recording at R alone
the simulator predicts the arrivals and lengths sent at 1.5R and 2R; the table is measured against
predicted TTFT and TPOT at p50 and p95 (the limits: 10% and 15%), per round (R, 1.5R and 2R back to
back, each round its own seeds) and as the median over the rounds, which is held to the limits: exits
1 past one. The harness is
tests/support/llm_fidelity.py, which tests/simulator/test_llm_fidelity.py runs too; docs/benchmarks.md
has the results. ``--keep DIR`` keeps the recordings (samples/data/llm-stream is the one at R = 4).

``--engine vllm``: vLLM's CPU build (tests/support/vllm_cpu.py: a tiny random-weight Llama, one OpenMP
thread, 64 MiB of KV cache) serves every rate of a round; the prediction is fitted to the load
client's recording alone (first and last token of each request, and every streamed piece).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # the harness lives in tests/support/, beside the test that runs it too
    sys.path.insert(0, str(REPO))

from tests.support import llm_fidelity  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=3.0, help="the recorded rate R, req/s (default 3)")
    parser.add_argument("--seconds", type=float, default=40.0, help="traffic per rate, s (default 40)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of R, 1.5R, 2R (default 3)")
    parser.add_argument("--seed", type=int, default=1, help="first seed of the arrivals and lengths")
    parser.add_argument("--keep", help="keep the recordings in this folder")
    parser.add_argument("--engine", choices=("sample", "vllm"), default="sample",
                        help="the sample engine (its spans and the client's), or vLLM CPU (the client's recording)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    rates = (args.rate, 1.5 * args.rate, 2 * args.rate)
    rounds = []
    with tempfile.TemporaryDirectory(prefix="llm-fidelity-") as scratch:
        folder = Path(args.keep) if args.keep else Path(scratch)
        for k in range(args.rounds):
            record = llm_fidelity.record_rates if args.engine == "sample" else llm_fidelity.record_rates_vllm
            runs = record(folder / f"round-{k + 1}", rates, args.seconds, seed=args.seed + 100 * k)
            rounds.append(llm_fidelity.compare(runs, base=args.rate, engine=args.engine))
    summary = llm_fidelity.medians(rounds)
    paced = llm_fidelity.medians([llm_fidelity.at_pace(rows) for rows in rounds])
    if args.json:
        print(json.dumps({"rounds": rounds, "median": summary, "median_at_pace": paced}, indent=2))
    else:
        print(f"{args.engine}: recorded at R = {args.rate:g} req/s for {args.seconds:g} s; predicted from that "
              "recording alone; measured / predicted ms (error)")
        print("| round | load | requests | machine | steal | TTFT p50 | TTFT p95 | TPOT p50 | TPOT p95 |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name, rows in [*((str(k + 1), rows) for k, rows in enumerate(rounds)), ("median", summary),
                           ("median at the machine's pace", paced)]:
            for row in rows:
                pace = f"{row['machine']:.2f}" if row.get("machine") else "-"
                steal = " / ".join("-" if v is None else f"{v:.0f}%" for v in row["steal"]) if "steal" in row else "-"
                cells = [f"{m:.3g} / {p:.3g} ({e:+.1%})" for key in llm_fidelity.METRICS for m, p, e in [row[key]]]
                print(f"| {name} | {row['x']:g}R ({row['rate']:g}/s) | {row['requests']} | {pace} | {steal} | "
                      + " | ".join(cells) + " |")
        print("machine: the engine's one-sequence decode pass, measured run / recording at R (time ratio); steal: "
              "the CPU time the VM's hypervisor took, recording at R / measured run (median rows: the most any "
              "round saw)")
    missed = llm_fidelity.misses(summary)
    for line in missed:
        print("over the limit:", line)
    for line in llm_fidelity.misses(paced):
        print("over the limit at the machine's pace:", line)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
