"""CPU inside ``loadprobe.analyze()`` for one loadprobe source tree: for A/B runs of two trees.

    python benchmarks/ab_analyze.py SRC DATA      # SRC holds a loadprobe/ package (C kernel built)

Run it alternately for the two trees, several times each, and compare the medians: the VM's
speed drifts by more than most changes, so single runs say little (docs/benchmarks.md).
"""

import sys
import time

src, data = sys.argv[1], sys.argv[2]
sys.path.insert(0, src)
t0, w0 = time.process_time(), time.perf_counter()
import loadprobe  # noqa: E402 - from SRC, put first on the path above

t1 = time.process_time()
loadprobe.analyze([data])
t2, w2 = time.process_time(), time.perf_counter()
print(f"{src}: import {t1 - t0:.3f}s cpu, analyze {t2 - t1:.2f}s cpu, wall {w2 - w0:.2f}")
