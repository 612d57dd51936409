"""A recording of a service that really queued: requests served by a FIFO pool of CPU cores, written as loadprobe files.

Usage::

    from tests.support.served_recording import Step, record_served
    info = record_served(tmp_path / "data", arrivals_s, [Step("outside", draw), Step("decode", draw)], cores=2)
    info.latency_ms, info.peak_rps

Each request runs its steps in order; every step takes one of ``cores`` cores, first come first
served (a step waits when all cores are busy). The first step is the host's own work outside
every probed stage (HTTP parsing, serialisation): it gets no span, so it shows as the request
span's own time, waits included, as in a real service. The others are ``@probe``-like stage
spans on the CPU. The process's CPU is sampled every second, as the recorder's psutil sampler
does: the core time its steps ran in that second. With ``interpreter=(processes, share)`` the
service is a Python one whose Python threads hold the interpreter for ``share`` of every step's
time, spread evenly over ``processes`` worker processes: each writes its ``interpreter:<pid>``
samples as the recorder's interpreter source does (the reference's cores do not queue for it). This reference model is written here,
independently of loadprobe's simulator, so that tests can hold the planner's figures to what a
queueing service did.
"""

from __future__ import annotations

import heapq
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from loadprobe._version import __version__
from loadprobe.schema import SAMPLES, SPANS, STATUSES, parquet_options

T0_NS = 1_796_198_400 * 10**9  # 2026-12-02T08:00:00Z


class Step(NamedTuple):
    name: str
    draw: Callable[[np.random.Generator, int], np.ndarray]  # ms for n executions


class Served(NamedTuple):
    latency_ms: np.ndarray  # per request, arrival to end
    work_ms: float  # mean core time per request, every step included


def serve(arrivals_s: np.ndarray, service_ms: np.ndarray, cores: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (ms) of every (request, step) on ``cores`` FIFO cores."""
    n, steps = service_ms.shape
    start, end = np.zeros((n, steps)), np.zeros((n, steps))
    ready = [(float(a) * 1000.0, i, 0) for i, a in enumerate(arrivals_s)]
    heapq.heapify(ready)
    free = [0.0] * cores
    while ready:
        t, i, j = heapq.heappop(ready)
        begin = max(t, heapq.heappop(free))
        start[i, j], end[i, j] = begin, begin + service_ms[i, j]
        heapq.heappush(free, end[i, j])
        if j + 1 < steps:
            heapq.heappush(ready, (end[i, j], i, j + 1))
    return start, end


def record_served(out: Path, arrivals_s, steps: list[Step], *, cores: int, seed: int = 0,
                  service: str = "served", interpreter: tuple[int, float] | None = None) -> Served:
    """Serve ``arrivals_s`` through ``steps`` on ``cores`` cores and write the spans under ``out``."""
    rng = np.random.default_rng(seed)
    arrivals_s = np.sort(np.asarray(arrivals_s, dtype=float))
    n = len(arrivals_s)
    service_ms = np.column_stack([np.maximum(step.draw(rng, n), 1e-4) for step in steps])
    start, end = serve(arrivals_s, service_ms, cores)
    arrival_ms = arrivals_s * 1000.0
    roots = np.arange(n, dtype=np.int64) * len(steps) + 1
    ts, dur, stage, span, parent, request = [], [], [], [], [], []
    ts.append(arrival_ms)
    dur.append(end[:, -1] - arrival_ms)
    stage.append(np.zeros(n, np.int32))
    span.append(roots)
    parent.append(np.full(n, -1, np.int64))
    request.append(np.arange(n))
    for j in range(1, len(steps)):
        ts.append(start[:, j])
        dur.append(service_ms[:, j])
        stage.append(np.full(n, j, np.int32))
        span.append(roots + j)
        parent.append(roots)
        request.append(np.arange(n))
    ts_ns = T0_NS + np.round(np.concatenate(ts) * 1e6).astype(np.int64)
    dur_ns = np.maximum(1, np.round(np.concatenate(dur) * 1e6).astype(np.int64))
    parents = np.concatenate(parent)
    stages = np.concatenate(stage)
    order = np.argsort(ts_ns + dur_ns, kind="stable")  # as a recorder writes them: by end
    names = ["request"] + [step.name for step in steps[1:]]
    is_root = parents[order] < 0
    table = pa.Table.from_arrays([
        pa.array(ts_ns[order], pa.int64()),
        pa.array(dur_ns[order], pa.int64()),
        _dictionary(stages[order], names),
        pa.array(np.concatenate(span)[order], pa.int64()),
        pa.array(parents[order], pa.int64(), mask=is_root),
        pa.array([f"r{i}" for i in np.concatenate(request)[order]], pa.string()),
        pa.nulls(len(order), pa.int64()),
        pa.nulls(len(order), SPANS.field("shape").type),
        _dictionary(np.zeros(len(order), np.int32), ["cpu"], valid=~is_root),
        _dictionary(np.zeros(len(order), np.int32), list(STATUSES)),
        pa.nulls(len(order), pa.int64()),
        pa.nulls(len(order), pa.float64()),
        pa.nulls(len(order), pa.float64()),
        pa.nulls(len(order), pa.int64()),
        pa.nulls(len(order), pa.int64()),
        pa.nulls(len(order), pa.int64()),
    ], schema=SPANS)
    run_id = f"4242-{time.strftime('%Y%m%dT%H%M%S', time.gmtime(T0_NS // 10**9))}.000Z"
    run = Path(out) / "host-a" / service / run_id
    run.mkdir(parents=True)
    with pq.ParquetWriter(run / "spans-00001.parquet", SPANS, **parquet_options(SPANS)) as writer:
        writer.write_table(table)
    _write_cpu_samples(run / "samples-00001.parquet", start, end, interpreter)
    stopped = int(ts_ns.max() + dur_ns.max()) + 10**9
    (run / "run.json").write_text(json.dumps(_run_json(service, run_id, cores, len(order), stopped)), encoding="utf-8")
    return Served(end[:, -1] - arrival_ms, float(service_ms.sum(axis=1).mean()))


def _write_cpu_samples(path: Path, start_ms: np.ndarray, end_ms: np.ndarray,
                       interpreter: tuple[int, float] | None = None) -> None:
    """Per second, the process's CPU (%% of one core): the core time its steps ran in that second; and each
    worker process's interpreter CPU, ``interpreter=(processes, share)`` of it split evenly."""
    seconds = int(np.ceil(end_ms.max() / 1000.0)) + 1
    busy = np.zeros(seconds)
    edges = np.arange(seconds + 1) * 1000.0
    for s, e in zip(start_ms.ravel(), end_ms.ravel()):
        first, last = int(s // 1000), int(e // 1000)
        for second in range(first, last + 1):
            busy[second] += min(e, edges[second + 1]) - max(s, edges[second])
    ts = T0_NS + np.arange(seconds, dtype=np.int64) * 10**9 + 10**9  # a reading covers the second before it
    devices, values = ["process"], [busy / 10.0]
    if interpreter is not None:
        processes, share = interpreter
        devices += [f"interpreter:{pid}" for pid in range(4243, 4243 + processes)]
        values += [busy / 10.0 * share / processes] * processes
    table = pa.Table.from_arrays([pa.array(np.tile(ts, len(devices)), pa.int64()),
                                  _dictionary(np.repeat(np.arange(len(devices)), seconds), devices),
                                  _dictionary(np.zeros(seconds * len(devices)), ["cpu_pct"]),
                                  pa.array(np.concatenate(values), pa.float64())], schema=SAMPLES)
    pq.write_table(table, path)


def _dictionary(codes: np.ndarray, names: list[str], valid: np.ndarray | None = None) -> pa.DictionaryArray:
    indices = pa.array(codes.astype(np.int32), type=pa.int32(), mask=None if valid is None else ~valid)
    return pa.DictionaryArray.from_arrays(indices, pa.array(names, type=pa.string()))


def _run_json(service: str, run_id: str, cores: int, spans: int, stopped_ns: int) -> dict:
    return {
        "schema": "run/1.0", "loadprobe_version": __version__, "host": "host-a", "service": service,
        "run_id": run_id, "pid": 4242, "process_started": T0_NS / 1e9 - 2.0, "argv": ["python", "serve.py"],
        "started_ns": T0_NS - 10**9, "stopped_ns": stopped_ns, "forked_from": None, "tags": {}, "role": "service",
        "settings": {"sample_devices": False, "sample_interval_s": 1.0, "flush_interval_s": 1.0,
                     "max_buffered_spans": 131072, "rotate_interval_s": 300.0, "rotate_bytes": 268435456},
        "hardware": {"cpu": {"model": "test CPU", "arch": "x86_64", "logical_cores": cores, "physical_cores": cores},
                     "memory_bytes": 2**34, "gpus": [], "os": "Linux", "python": "CPython 3.11"},
        "samplers": {},
        "counters": {"spans_recorded": spans, "spans_dropped": 0, "spans_written": spans, "samples_written": 0,
                     "samples_dropped": 0, "files": 1, "write_errors": 0, "extractor_errors": 0, "invalid_values": 0},
    }
