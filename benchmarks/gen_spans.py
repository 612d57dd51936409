"""Generate a realistic recorded span dataset in the loadprobe layout, fast and deterministic.

    python benchmarks/gen_spans.py OUT --spans 10000000 [--seed 1] [--jobs 2]

The dataset (an object-detection service on 2 hosts x 2 processes, 2 hours of traffic, 4
spans per request, files written as the recorder writes them) is described in
``tests/support/synthetic_spans.py``, which makes it; the tests map a small one. The same
arguments give the same bytes, whatever ``--jobs``; a hidden ``OUT/.gen_spans.json``
records the parameters once complete, so callers (bench_analyze.py) can reuse the data.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.synthetic_spans import SPANS_PER_REQUEST, generate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="output directory (created; use a fresh one)")
    parser.add_argument("--spans", type=int, default=10_000_000, help="total spans (rounded down to 4 per request)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=None, help="worker processes (default: min(2, cores))")
    args = parser.parse_args()
    if args.spans < SPANS_PER_REQUEST:
        parser.error("--spans must be at least 4")
    marker = generate(args.out, args.spans, args.seed, args.jobs)
    print(f"{marker['spans']:,} spans in {marker['files']} files under {args.out} in {marker['seconds']} s")


if __name__ == "__main__":
    main()
