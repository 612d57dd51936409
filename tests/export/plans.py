"""The plans the export tests export: each uses a different set of the features the targets map or lose."""

from __future__ import annotations

from pathlib import Path

from loadprobe import pipeline

from ..conftest import REPO

VISION = REPO / "samples" / "vision" / "pipeline.yaml"   # cpu, npu with a capped fallback to gpu, retry budget, shed

# Two GPU engines (GPUs 0-1, then 2), an uneven split, a breaker, a canary, no queue, no routing.retry.
FLEET = """\
version: 1
service: fleet-v2
engines:
  host: {kind: cpu, count: 2, max_concurrency: 6, max_queue: 0}
  gpu0: {kind: gpu, device: nvidia-l4, count: 2, max_concurrency: 3, max_queue: 100}
  gpu1: {kind: gpu, count: 1, max_concurrency: 2, max_queue: 50}
stages:
  - name: tokenize
    engine: host
    timeout_ms: 12.5
  - name: encoder
    engine: gpu0
    batch: {size: 16, max_wait_ms: 2.5}
    timeout_ms: 250
    max_concurrency: 3
    retry: {max_attempts: 3}
    breaker: {error_rate_over: 0.5}
  - name: head
    engine: gpu1
    batch: {size: 8}
    timeout_ms: 80
routing:
  canary: {config: other.yaml, weight: 0.05}
"""

# Nothing a target drops: one CPU stage, no fallback, breaker, retries or routing rules.
PLAIN = """\
version: 1
service: plain
engines:
  cpu: {kind: cpu, max_concurrency: 4, max_queue: 32}
stages:
  - {name: work, engine: cpu, timeout_ms: 100}
"""

# What the Ray test deploys: a thread executor, a batched async one on a (declared) GPU, a timeout; on a host of 2
# cores, which the test's Ray cluster has: the 4 replicas reserve half a CPU each.
RAY_DEMO = """\
version: 1
service: ray-demo
engines:
  cpu: {kind: cpu, cores: 2, max_concurrency: 2, max_queue: 16}
  gpu0: {kind: gpu, count: 1, max_concurrency: 1, max_queue: 8}
stages:
  - {name: parse, engine: cpu, timeout_ms: 10000}
  - name: score
    engine: gpu0
    batch: {size: 4, max_wait_ms: 20}
    timeout_ms: 10000
  - {name: finish, engine: cpu, timeout_ms: 1500}
routing:
  retry: {budget_ratio: 0.5, max_attempts: 2}
"""
RAY_DEMO_EXECUTORS = ["parse=stage_functions:parse", "score=stage_functions:score", "finish=stage_functions:finish"]

PLANS = {"vision": lambda: pipeline.load(VISION), "fleet": lambda: pipeline.loads(FLEET),
         "plain": lambda: pipeline.loads(PLAIN), "ray-demo": lambda: pipeline.loads(RAY_DEMO)}
HERE = Path(__file__).parent
