"""Synthesise the portrait of a large fleet recording, at the largest shape the analysis produces.

    python benchmarks/gen_portrait.py OUT.json [--spans 100000000] [--hours 24] [--hosts 8] [--gpus 4]
        [--stages 12] [--seed 1]

Recording and analysing 100M spans takes minutes; what sizes the HTML report is only the
portrait's shape, so ``tests/support/fleet_portrait.py`` builds that shape directly, with
loadprobe's own finalising pieces wherever they apply (it says which); the report tests
render the same portrait. Deterministic for a seed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.fleet_portrait import fleet_portrait  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="portrait.json to write")
    parser.add_argument("--spans", type=int, default=100_000_000)
    parser.add_argument("--hours", type=float, default=24)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--stages", type=int, default=12)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    started = time.perf_counter()
    portrait = fleet_portrait(spans=args.spans, hours=args.hours, hosts=args.hosts, gpus=args.gpus,
                              stages=args.stages, seed=args.seed)
    path = portrait.save(args.out)
    print(f"{path}: {path.stat().st_size / 1e6:.1f} MB in {time.perf_counter() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
