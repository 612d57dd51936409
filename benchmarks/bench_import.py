"""Import time of ``loadprobe`` against the peers a service might import instead.

    python benchmarks/bench_import.py [--runs 15]

Each figure is the median over fresh interpreters of the time ``import X`` takes, read
inside the interpreter with perf_counter (so start-up itself is excluded).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

MODULES = ["loadprobe", "prometheus_client", "opentelemetry.sdk.trace", "pyarrow"]


def import_ms(module: str) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print((time.perf_counter() - t) * 1e3)"
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    times = {m: statistics.median(import_ms(m) for _ in range(args.runs)) for m in MODULES}
    base = times["loadprobe"]
    for module, ms in times.items():
        print(f"import {module:<26} {ms:7.1f} ms   {ms / base:5.1f}x loadprobe")


if __name__ == "__main__":
    main()
