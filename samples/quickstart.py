"""A small instrumented inference service, driven by a real arrival curve.

    loadprobe record --output loadprobe-data -- python samples/quickstart.py [--seconds 10] [--speed 30]

Requests arrive at the times of the Azure LLM code trace (samples/traces/, CC-BY 4.0),
replayed ``--speed`` times faster, open loop: each is dispatched at its intended time to a
pool of worker threads, whatever the backlog. Each request goes through three stages
with the shape of a vision pipeline:

- ``decode``: bytes to a normalised float image on the CPU;
- ``backbone``: a fixed-shape matrix multiply (FLOPs and bytes annotated, so the
  roofline can place it);
- ``nms``: post-processing whose output size varies per request (a dynamic shape),
  sized from the request's generated-token count.

Run it under ``loadprobe record`` (or with LOADPROBE_DIR set); alone, the probes record nothing.
"""

from __future__ import annotations

import argparse
import csv
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import numpy as np

from loadprobe import probe, request

TRACE = Path(__file__).parent / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"
IMAGE = (3, 96, 96)
FEATURES = 256
WEIGHTS = np.random.default_rng(0).standard_normal((int(np.prod(IMAGE)), FEATURES)).astype(np.float32)
MEAN = np.float32(127.5)


def load_arrivals(seconds: float, speed: float) -> list[tuple[float, int, int]]:
    """(offset_s, context_tokens, generated_tokens) for the first ``seconds`` of wall time."""
    rows = []
    with open(TRACE, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            # The trace has 7 fractional digits, which datetime.fromisoformat rejects before 3.11.
            stamp = datetime.strptime(row["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f")
            rows.append((stamp.timestamp(), int(row["ContextTokens"]), int(row["GeneratedTokens"])))
    start = rows[0][0]
    return [((t - start) / speed, ctx, gen) for t, ctx, gen in rows if (t - start) / speed < seconds]


@probe("decode", engine="cpu")
def decode(payload: bytes) -> np.ndarray:
    image = np.frombuffer(payload, dtype=np.uint8).reshape(IMAGE).astype(np.float32)
    return (image - MEAN) / MEAN


@probe("backbone", batch=lambda x: x.shape[0], shape=lambda x: x.shape, engine="cpu",
       flops=lambda x: 2.0 * x.shape[0] * WEIGHTS.shape[0] * WEIGHTS.shape[1],
       bytes=lambda x: WEIGHTS.nbytes + x.nbytes)
def backbone(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], -1) @ WEIGHTS


def nms(features: np.ndarray, boxes: int) -> int:
    with probe("nms") as span:
        span.engine = "cpu"
        span.batch = boxes
        span.shape = (boxes, 4)
        scores = np.sort(np.abs(features[0, :]).repeat(max(1, boxes // 8)))[::-1]
        return int((scores > scores.mean()).sum())


@request()
def handle(payload: bytes, boxes: int) -> int:
    x = decode(payload)[None]
    return nms(backbone(x), boxes)


def main() -> None:
    parser = argparse.ArgumentParser(description="Replay a real arrival curve through a small pipeline.")
    parser.add_argument("--seconds", type=float, default=10.0, help="wall-clock length of the run")
    parser.add_argument("--speed", type=float, default=30.0, help="replay speed of the trace")
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()

    arrivals = load_arrivals(args.seconds, args.speed)
    payload = np.random.default_rng(1).integers(0, 256, int(np.prod(IMAGE)), dtype=np.uint8).tobytes()
    late = []
    with ThreadPoolExecutor(args.workers) as pool:
        t0 = time.perf_counter()
        for offset, _context, generated in arrivals:
            delay = offset - (time.perf_counter() - t0)
            if delay > 0:
                time.sleep(delay)
            late.append(-min(delay, 0.0))
            pool.submit(handle, payload, max(1, generated))
    print(f"quickstart: {len(arrivals)} requests in {time.perf_counter() - t0:.1f} s "
          f"(trace x{args.speed:g}); p99 dispatch lateness {np.percentile(late, 99) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
